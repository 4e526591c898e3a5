//! x509 client certificates (`--client-ca-file`): the certificate's CN is the user name and its
//! O values are the groups. The TLS layer has already verified the chain against the CAs the
//! server trusts (rustls' WebPKI client verifier); when it trusts more than the client CA (the
//! request-header CA), this checks the chain against the client CA alone, so that a proxy's
//! certificate is never a user of its own.

use std::sync::Arc;

use async_trait::async_trait;
use rustls::server::danger::ClientCertVerifier;

use super::request_header::{chain_verifies, verifier_for};
use super::{Authenticator, AuthnOutcome, AuthnRequest, UserInfo};

/// Users from client certificates.
#[derive(Default)]
pub struct X509Authenticator {
    /// The client CA's verifier; `None`: whatever the TLS layer let through.
    verifier: Option<Arc<dyn ClientCertVerifier>>,
}

impl X509Authenticator {
    /// Users from certificates of `client_ca_pem`'s CAs only.
    pub fn with_client_ca(client_ca_pem: &str) -> Result<Self, String> {
        Ok(Self {
            verifier: Some(verifier_for(client_ca_pem)?),
        })
    }
}

#[async_trait]
impl Authenticator for X509Authenticator {
    fn name(&self) -> &'static str {
        "x509"
    }

    async fn authenticate(&self, req: &AuthnRequest<'_>) -> AuthnOutcome {
        let Some(leaf) = req.peer_certificates.first() else {
            return AuthnOutcome::NotApplicable;
        };
        if let Some(v) = &self.verifier {
            if !chain_verifies(&**v, req.peer_certificates) {
                return AuthnOutcome::Rejected(
                    "verifying certificate: x509: certificate signed by unknown authority".into(),
                );
            }
        }
        let cert = match x509_parser::parse_x509_certificate(leaf) {
            Ok((_, cert)) => cert,
            Err(e) => return AuthnOutcome::Rejected(format!("unreadable client certificate: {e}")),
        };
        let name = cert
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .unwrap_or_default();
        if name.is_empty() {
            return AuthnOutcome::Rejected("client certificate has no common name".into());
        }
        let groups = cert
            .subject()
            .iter_organization()
            .filter_map(|o| o.as_str().ok().map(str::to_owned))
            .collect();
        AuthnOutcome::Authenticated(UserInfo {
            name: name.to_owned(),
            groups,
            ..Default::default()
        })
    }
}
