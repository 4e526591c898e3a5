//! Authentication: an ordered list of authenticators; the first that recognises the request
//! wins, and if none does the request fails with 401 and the aggregate of their errors (the
//! reference document's "Authentication" stage).

mod token_file;
mod x509;

use std::collections::BTreeMap;

use async_trait::async_trait;
use rustls::pki_types::CertificateDer;

pub use token_file::TokenFileAuthenticator;
pub use x509::X509Authenticator;

/// Who made the request, as `user.Info` upstream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// What authenticators may look at.
pub struct AuthnRequest<'a> {
    pub headers: &'a http::HeaderMap,
    /// The client's certificate chain, already verified against the client CA by the TLS layer.
    pub peer_certificates: &'a [CertificateDer<'static>],
}

pub enum AuthnOutcome {
    Authenticated(UserInfo),
    /// The request carries nothing this authenticator handles.
    NotApplicable,
    /// The request carries credentials of this kind, and they are not valid.
    Rejected(String),
}

#[async_trait]
pub trait Authenticator: Send + Sync {
    fn name(&self) -> &'static str;
    async fn authenticate(&self, req: &AuthnRequest<'_>) -> AuthnOutcome;
}

/// The ordered authenticators.
#[derive(Default)]
pub struct AuthenticatorChain {
    authenticators: Vec<Box<dyn Authenticator>>,
}

impl AuthenticatorChain {
    pub fn push(&mut self, a: impl Authenticator + 'static) {
        self.authenticators.push(Box::new(a));
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.authenticators.iter().map(|a| a.name()).collect()
    }

    /// The user, or the aggregate of every authenticator's complaint.
    pub async fn authenticate(&self, req: &AuthnRequest<'_>) -> Result<UserInfo, Vec<String>> {
        let mut errors = Vec::new();
        for a in &self.authenticators {
            match a.authenticate(req).await {
                AuthnOutcome::Authenticated(mut user) => {
                    // Every authenticated user is in system:authenticated, as upstream adds it.
                    if !user.groups.iter().any(|g| g == "system:authenticated") {
                        user.groups.push("system:authenticated".into());
                    }
                    return Ok(user);
                }
                AuthnOutcome::NotApplicable => {}
                AuthnOutcome::Rejected(e) => errors.push(format!("{}: {e}", a.name())),
            }
        }
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(&'static str, fn() -> AuthnOutcome);
    #[async_trait]
    impl Authenticator for Fixed {
        fn name(&self) -> &'static str {
            self.0
        }
        async fn authenticate(&self, _: &AuthnRequest<'_>) -> AuthnOutcome {
            (self.1)()
        }
    }

    fn req() -> (http::HeaderMap, Vec<CertificateDer<'static>>) {
        (http::HeaderMap::new(), Vec::new())
    }

    #[tokio::test]
    async fn first_success_wins_and_failures_aggregate() {
        let mut chain = AuthenticatorChain::default();
        chain.push(Fixed("a", || AuthnOutcome::Rejected("bad token".into())));
        chain.push(Fixed("b", || AuthnOutcome::NotApplicable));
        chain.push(Fixed("c", || {
            AuthnOutcome::Authenticated(UserInfo {
                name: "alice".into(),
                ..Default::default()
            })
        }));
        chain.push(Fixed("d", || panic!("not reached")));
        let (h, c) = req();
        let user = chain
            .authenticate(&AuthnRequest {
                headers: &h,
                peer_certificates: &c,
            })
            .await
            .unwrap();
        assert_eq!(user.name, "alice");
        assert_eq!(user.groups, vec!["system:authenticated".to_owned()]);

        let mut failing = AuthenticatorChain::default();
        failing.push(Fixed("a", || AuthnOutcome::Rejected("bad token".into())));
        failing.push(Fixed("b", || AuthnOutcome::Rejected("expired".into())));
        let errors = failing
            .authenticate(&AuthnRequest {
                headers: &h,
                peer_certificates: &c,
            })
            .await
            .unwrap_err();
        assert_eq!(errors, vec!["a: bad token".to_owned(), "b: expired".to_owned()]);
    }
}
