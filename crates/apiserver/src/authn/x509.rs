//! x509 client certificates (`--client-ca-file`): the certificate's CN is the user name and its
//! O values are the groups. The TLS layer has already verified the chain against the CAs the
//! server trusts (rustls' WebPKI client verifier); when it trusts more than the client CA (the
//! request-header CA), this checks the chain against the client CA alone, so that a proxy's
//! certificate is never a user of its own.

use std::sync::Arc;

use async_trait::async_trait;
use rustls::server::danger::ClientCertVerifier;

use super::peer::verifier_id;
use super::request_header::verifier_for;
use super::{Authenticator, AuthnOutcome, AuthnRequest, UserInfo};

/// Users from client certificates.
#[derive(Default)]
pub struct X509Authenticator {
    /// The client CA's verifier and its id; `None`: whatever the TLS layer let through.
    verifier: Option<(u64, Arc<dyn ClientCertVerifier>)>,
}

impl X509Authenticator {
    /// Users from certificates of `client_ca_pem`'s CAs only.
    pub fn with_client_ca(client_ca_pem: &str) -> Result<Self, String> {
        Ok(Self {
            verifier: Some((verifier_id(), verifier_for(client_ca_pem)?)),
        })
    }
}

#[async_trait]
impl Authenticator for X509Authenticator {
    fn name(&self) -> &'static str {
        "x509"
    }

    async fn authenticate(&self, req: &AuthnRequest<'_>) -> AuthnOutcome {
        let peer = req.peer_certificates;
        if peer.is_empty() {
            return AuthnOutcome::NotApplicable;
        }
        if let Some((id, v)) = &self.verifier {
            if !peer.verifies(*id, &**v) {
                return AuthnOutcome::Rejected(
                    "verifying certificate: x509: certificate signed by unknown authority".into(),
                );
            }
        }
        let (name, groups) = match peer.subject() {
            Ok(subject) => subject,
            Err(e) => return AuthnOutcome::Rejected(e.to_owned()),
        };
        if name.is_empty() {
            return AuthnOutcome::Rejected("client certificate has no common name".into());
        }
        AuthnOutcome::Authenticated(UserInfo {
            name: name.clone(),
            groups: groups.clone(),
            ..Default::default()
        })
    }
}
