//! x509 client certificates (`--client-ca-file`): the certificate's CN is the user name and its
//! O values are the groups. The TLS layer has already verified the chain against the client CA
//! (rustls' WebPKI client verifier), so this reads the verified leaf.

use async_trait::async_trait;

use super::{Authenticator, AuthnOutcome, AuthnRequest, UserInfo};

pub struct X509Authenticator;

#[async_trait]
impl Authenticator for X509Authenticator {
    fn name(&self) -> &'static str {
        "x509"
    }

    async fn authenticate(&self, req: &AuthnRequest<'_>) -> AuthnOutcome {
        let Some(leaf) = req.peer_certificates.first() else {
            return AuthnOutcome::NotApplicable;
        };
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
