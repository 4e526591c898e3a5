//! TLS bootstrap: an agent joins a cluster with a join token and leaves with its own client
//! certificate (user `system:node:<name>`, group `system:nodes`), as upstream's kubelet does
//! with a bootstrap kubeconfig and a CertificateSigningRequest.
//!
//! The join token is `K10<sha256 of the cluster CA certificate, hex>::<bootstrap token>` (k3s's
//! form). The CA hash lets the agent trust the server before it holds any certificate: the
//! server sends its CA in its TLS chain, and the agent accepts that CA only if its hash is the
//! token's. Nothing secret is sent until the server is verified against that CA.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("the join token is not of the form K10<ca-hash>::<id>.<secret>")]
    BadToken,
    #[error("reaching {server}: {reason}")]
    Unreachable { server: String, reason: String },
    #[error("the server at {0} does not present the cluster CA named in the join token (wrong server or wrong token)")]
    CaMismatch(String),
    #[error("the certificate request {name} was {how}: {message}")]
    Refused {
        name: String,
        how: String,
        message: String,
    },
    #[error("the certificate request {0} was not signed within {1:?}; is the controller manager running?")]
    Timeout(String, Duration),
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Other(String),
}

/// A parsed join token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinToken {
    /// SHA-256 of the CA certificate's DER, lower-case hex.
    pub ca_hash: String,
    /// The bootstrap token, `<id>.<secret>`.
    pub bootstrap: String,
}

impl JoinToken {
    pub fn parse(s: &str) -> Result<Self, BootstrapError> {
        let rest = s.trim().strip_prefix("K10").ok_or(BootstrapError::BadToken)?;
        let (hash, bootstrap) = rest.split_once("::").ok_or(BootstrapError::BadToken)?;
        let hash_ok = hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit());
        let (id, secret) = bootstrap.split_once('.').ok_or(BootstrapError::BadToken)?;
        if !hash_ok || id.len() != 6 || secret.len() != 16 {
            return Err(BootstrapError::BadToken);
        }
        Ok(Self {
            ca_hash: hash.to_ascii_lowercase(),
            bootstrap: bootstrap.to_owned(),
        })
    }

    /// The token for a cluster whose CA certificate is `ca_der`.
    pub fn format(ca_der: &[u8], bootstrap: &str) -> String {
        format!("K10{}::{bootstrap}", ca_hash(ca_der))
    }
}

pub fn ca_hash(der: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, der)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Accepts any chain on the probe connection: the chain is only looked at, never trusted,
/// and nothing is sent over that connection. HTTPS probes and hooks use it too: upstream's
/// prober does not verify the container's certificate either.
#[derive(Debug)]
pub(crate) struct LookOnly(pub(crate) Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for LookOnly {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The cluster CA (DER) from the server's TLS chain, if its hash is `want_hash`.
pub async fn fetch_ca(server: &str, want_hash: &str) -> Result<Vec<u8>, BootstrapError> {
    let unreachable = |reason: String| BootstrapError::Unreachable {
        server: server.to_owned(),
        reason,
    };
    let uri: http::Uri = server.parse().map_err(|e| unreachable(format!("bad URL: {e}")))?;
    let host = uri
        .host()
        .ok_or_else(|| unreachable("no host in the URL".into()))?
        .to_owned();
    let port = uri.port_u16().unwrap_or(443);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| unreachable(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(LookOnly(provider)))
        .with_no_client_auth();
    let tcp = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::net::TcpStream::connect((host.trim_matches(|c| c == '[' || c == ']'), port)),
    )
    .await
    .map_err(|_| unreachable("connection timed out".into()))?
    .map_err(|e| unreachable(e.to_string()))?;
    let name = ServerName::try_from(host.clone()).map_err(|e| unreachable(e.to_string()))?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| unreachable(format!("TLS: {e}")))?;
    let chain = tls.get_ref().1.peer_certificates().unwrap_or_default();
    chain
        .iter()
        .find(|c| ca_hash(c.as_ref()) == want_hash)
        .map(|c| c.as_ref().to_vec())
        .ok_or_else(|| BootstrapError::CaMismatch(server.to_owned()))
}

/// PEM of a DER certificate.
pub fn pem(tag: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {tag}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {tag}-----\n"));
    out
}

/// What joining yields: the node's client certificate and key, and the cluster CA (PEM).
pub struct NodeCredentials {
    pub cert_pem: String,
    pub key_pem: String,
    pub ca_pem: String,
}

/// Join `server` as `node_name` with `token`: verify the server, ask for a node client
/// certificate with a CertificateSigningRequest, and wait for it to be approved and signed.
pub async fn join(
    server: &str,
    token: &JoinToken,
    node_name: &str,
    wait: Duration,
) -> Result<NodeCredentials, BootstrapError> {
    let ca_der = fetch_ca(server, &token.ca_hash).await?;
    let ca_pem = pem("CERTIFICATE", &ca_der);
    let mut config = kube::Config::new(
        server
            .parse()
            .map_err(|e| BootstrapError::Other(format!("bad server URL: {e}")))?,
    );
    config.root_cert = Some(vec![ca_der]);
    config.auth_info.token = Some(secrecy::SecretString::from(token.bootstrap.clone()));
    let client = kube::Client::try_from(config)?;

    let key = rcgen::KeyPair::generate().map_err(|e| BootstrapError::Other(e.to_string()))?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())
        .map_err(|e| BootstrapError::Other(e.to_string()))?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("system:node:{node_name}"));
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    let request = params
        .serialize_request(&key)
        .and_then(|r| r.pem())
        .map_err(|e| BootstrapError::Other(e.to_string()))?;
    let name = format!("node-csr-{}", random_suffix());
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: k8s_openapi::ByteString(request.into_bytes()),
            signer_name: "kubernetes.io/kube-apiserver-client-kubelet".into(),
            usages: Some(vec!["digital signature".into(), "client auth".into()]),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<CertificateSigningRequest> = Api::all(client);
    api.create(&PostParams::default(), &csr).await?;
    tracing::info!(csr = %name, "asked for a node client certificate; waiting for it to be approved and signed");
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let got = api.get(&name).await?;
        if let Some(status) = &got.status {
            for c in status.conditions.iter().flatten() {
                if (c.type_ == "Denied" || c.type_ == "Failed") && c.status == "True" {
                    return Err(BootstrapError::Refused {
                        name,
                        how: c.type_.to_lowercase(),
                        message: c.message.clone().unwrap_or_default(),
                    });
                }
            }
            if let Some(cert) = status.certificate.as_ref().filter(|c| !c.0.is_empty()) {
                let cert_pem =
                    String::from_utf8(cert.0.clone()).map_err(|e| BootstrapError::Other(e.to_string()))?;
                return Ok(NodeCredentials {
                    cert_pem,
                    key_pem: key.serialize_pem(),
                    ca_pem,
                });
            }
        }
        if tokio::time::Instant::now() > deadline {
            return Err(BootstrapError::Timeout(name, wait));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn random_suffix() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/uuid")
        .map(|s| s.trim().replace('-', "")[..10].to_owned())
        .unwrap_or_else(|_| std::process::id().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_tokens_round_trip_and_bad_ones_are_refused() {
        let t = JoinToken::format(b"ca", "abcdef.0123456789abcdef");
        let parsed = JoinToken::parse(&t).unwrap();
        assert_eq!(parsed.ca_hash, ca_hash(b"ca"));
        assert_eq!(parsed.bootstrap, "abcdef.0123456789abcdef");
        for bad in [
            "abcdef.0123456789abcdef",
            "K10abc::abcdef.0123456789abcdef",
            &t[..t.len() - 1],
        ] {
            assert!(JoinToken::parse(bad).is_err(), "{bad}");
        }
        let p = pem("CERTIFICATE", &[1u8; 100]);
        assert!(p.starts_with("-----BEGIN CERTIFICATE-----\n") && p.ends_with("-----END CERTIFICATE-----\n"));
    }
}
