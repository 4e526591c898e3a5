//! Request-header authentication (`--requestheader-*`, upstream's front-proxy authenticator): a
//! proxy that has authenticated the user itself — an aggregating API server, an authenticating
//! proxy — presents a client certificate from the request-header CA and names the user in
//! headers (`X-Remote-User`, `X-Remote-Group`, `X-Remote-Extra-<key>`). The headers are believed
//! only from such a certificate whose common name is allowed; from anyone else they are
//! ignored.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use rustls::pki_types::CertificateDer;
use rustls::server::danger::ClientCertVerifier;

use super::{Authenticator, AuthnOutcome, AuthnRequest, UserInfo};

/// What the request-header authenticator trusts and reads (the `--requestheader-*` flags, as
/// published in `kube-system/extension-apiserver-authentication`).
#[derive(Clone, Debug)]
pub struct RequestHeaderConfig {
    /// The CA bundle (PEM) that signs the proxies' client certificates.
    pub client_ca_pem: String,
    /// The common names a proxy's certificate may have; empty: any the CA signed.
    pub allowed_names: Vec<String>,
    /// Headers naming the user, the first present wins.
    pub username_headers: Vec<String>,
    /// Headers naming the user's UID.
    pub uid_headers: Vec<String>,
    /// Headers naming the user's groups, every value of each.
    pub group_headers: Vec<String>,
    /// Prefixes of headers carrying extra attributes (`X-Remote-Extra-Scopes: a`).
    pub extra_headers_prefix: Vec<String>,
}

impl RequestHeaderConfig {
    /// Upstream's (and kubeadm's) header names, trusting `client_ca_pem` for `allowed_names`.
    pub fn standard(client_ca_pem: String, allowed_names: Vec<String>) -> Self {
        Self {
            client_ca_pem,
            allowed_names,
            username_headers: vec!["X-Remote-User".into()],
            uid_headers: Vec::new(),
            group_headers: vec!["X-Remote-Group".into()],
            extra_headers_prefix: vec!["X-Remote-Extra-".into()],
        }
    }
}

/// A verifier of client certificates against the CAs of `pem` alone.
pub(crate) fn verifier_for(pem: &str) -> Result<Arc<dyn ClientCertVerifier>, String> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(pem.as_bytes()) {
        let c = c.map_err(|e| format!("bad PEM certificate: {e}"))?;
        roots.add(c).map_err(|e| format!("bad CA certificate: {e}"))?;
    }
    rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .map_err(|e| format!("client verifier: {e}"))
}

pub struct RequestHeaderAuthenticator {
    config: RequestHeaderConfig,
    verifier: Arc<dyn ClientCertVerifier>,
    verifier_id: u64,
}

impl RequestHeaderAuthenticator {
    pub fn new(config: RequestHeaderConfig) -> Result<Self, String> {
        let verifier = verifier_for(&config.client_ca_pem)?;
        Ok(Self {
            config,
            verifier,
            verifier_id: super::peer::verifier_id(),
        })
    }

    fn first(&self, req: &AuthnRequest<'_>, names: &[String]) -> Option<String> {
        names.iter().find_map(|h| {
            req.headers
                .get_all(h.as_str())
                .iter()
                .filter_map(|v| v.to_str().ok())
                .find(|v| !v.is_empty())
                .map(str::to_owned)
        })
    }
}

/// An extra attribute's key from a header name's rest: lower case, percent-escapes decoded
/// (keys such as `example.com/scope` travel escaped); with a bad escape, the key as it came
/// (upstream's `url.PathUnescape`, falling back to the raw key).
fn extra_key(rest: &str) -> String {
    let lower = rest.to_ascii_lowercase();
    let bytes = lower.as_bytes();
    let hex = |b: u8| (b as char).to_digit(16);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            match (
                bytes.get(i + 1).and_then(|b| hex(*b)),
                bytes.get(i + 2).and_then(|b| hex(*b)),
            ) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
                _ => return lower,
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or(lower)
}

#[async_trait]
impl Authenticator for RequestHeaderAuthenticator {
    fn name(&self) -> &'static str {
        "requestheader"
    }

    async fn authenticate(&self, req: &AuthnRequest<'_>) -> AuthnOutcome {
        // Not from a proxy this server trusts: the headers mean nothing (another
        // authenticator may know the certificate).
        if !req.peer_certificates.verifies(self.verifier_id, &*self.verifier) {
            return AuthnOutcome::NotApplicable;
        }
        if !self.config.allowed_names.is_empty() {
            let cn = req
                .peer_certificates
                .subject()
                .map(|(cn, _)| cn.as_str())
                .unwrap_or_default();
            if !self.config.allowed_names.iter().any(|n| n == cn) {
                return AuthnOutcome::Rejected(format!(
                    "x509: subject with cn={cn} is not in the allowed list"
                ));
            }
        }
        let Some(name) = self.first(req, &self.config.username_headers) else {
            // A trusted proxy's own request, naming no user: not a request-header request.
            return AuthnOutcome::NotApplicable;
        };
        let groups = self
            .config
            .group_headers
            .iter()
            .flat_map(|h| req.headers.get_all(h.as_str()).iter())
            .filter_map(|v| v.to_str().ok())
            .map(str::to_owned)
            .collect();
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (header, value) in req.headers {
            let lower = header.as_str();
            for prefix in &self.config.extra_headers_prefix {
                if let Some(rest) = lower.strip_prefix(prefix.to_ascii_lowercase().as_str()) {
                    if let Ok(v) = value.to_str() {
                        extra.entry(extra_key(rest)).or_default().push(v.to_owned());
                    }
                }
            }
        }
        AuthnOutcome::Authenticated(UserInfo {
            name,
            uid: self.first(req, &self.config.uid_headers).unwrap_or_default(),
            groups,
            extra,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_keys_are_lower_case_and_unescaped() {
        assert_eq!(extra_key("Scopes"), "scopes");
        assert_eq!(extra_key("Example.com%2fScope"), "example.com/scope");
        // A lone or bad escape stays as it is.
        assert_eq!(extra_key("a%2"), "a%2");
        assert_eq!(extra_key("a%zz"), "a%zz");
    }
}
