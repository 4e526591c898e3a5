//! Authentication: an ordered list of authenticators; the first that recognises the request
//! wins, and if none does the request fails with 401 and the aggregate of their errors (the
//! reference document's "Authentication" stage).

pub mod basic_auth;
pub mod bootstrap_token;
pub mod impersonation;
pub mod oidc;
mod peer;
pub(crate) mod request_header;
pub mod service_account;
mod token_file;
mod x509;

use std::collections::BTreeMap;

use async_trait::async_trait;
pub use peer::PeerCertificates;
pub use request_header::{RequestHeaderAuthenticator, RequestHeaderConfig};
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
    /// The client's certificate chain, already verified by the TLS layer against every CA the
    /// server trusts.
    pub peer_certificates: &'a PeerCertificates,
    /// The request path (anonymous requests are allowed only to some).
    pub path: &'a str,
    /// The audiences a token must be meant for, when not the API server's own (a
    /// TokenReview's `spec.audiences`).
    pub audiences: Option<&'a [String]>,
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
    /// Whether its credentials name their audiences (service-account tokens) and it checks
    /// them against `AuthnRequest::audiences`; the others' credentials are good for the API
    /// server's audiences only (upstream's audience-agnostic wrapper).
    fn audience_aware(&self) -> bool {
        false
    }
}

/// The ordered authenticators.
#[derive(Default)]
pub struct AuthenticatorChain {
    authenticators: Vec<Box<dyn Authenticator>>,
    /// Paths a request without credentials may reach as `system:anonymous`.
    anonymous_paths: Vec<String>,
}

/// What upstream's `system:public-info-viewer` role lets anyone read.
pub const PUBLIC_INFO_PATHS: &[&str] = &["/healthz", "/livez", "/readyz", "/version"];

/// The user of a request that carries no credentials, where anonymous requests are allowed.
pub fn anonymous_user() -> UserInfo {
    UserInfo {
        name: "system:anonymous".into(),
        groups: vec!["system:unauthenticated".into()],
        ..Default::default()
    }
}

impl AuthenticatorChain {
    pub fn push(&mut self, a: impl Authenticator + 'static) {
        self.authenticators.push(Box::new(a));
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.authenticators.iter().map(|a| a.name()).collect()
    }

    /// Let requests without credentials reach `paths` (and the paths below them, such as
    /// `/healthz/ping` and `/version/`) as `system:anonymous`, as upstream's
    /// `AnonymousAuthConfigurableEndpoints` does; other paths stay 401 for them.
    pub fn allow_anonymous(&mut self, paths: &[&str]) {
        self.anonymous_paths = paths.iter().map(|p| p.to_string()).collect();
    }

    fn anonymous_allowed(&self, path: &str) -> bool {
        self.anonymous_paths.iter().any(|p| {
            path == p
                || path
                    .strip_prefix(p.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
        })
    }

    /// A TokenReview's authentication (upstream's `WithAudiences` context): the user and the
    /// audiences the credentials are good for among `audiences` — for audience-aware
    /// authenticators `None` (the caller reads them from the token); for the others the API
    /// server's own among those asked, and they are not tried when there are none.
    pub async fn authenticate_for(
        &self,
        req: &AuthnRequest<'_>,
        audiences: &[String],
        api_audiences: &[String],
    ) -> Result<(UserInfo, Option<Vec<String>>), Vec<String>> {
        let implicit: Vec<String> = api_audiences
            .iter()
            .filter(|a| audiences.contains(a))
            .cloned()
            .collect();
        let req = AuthnRequest {
            audiences: Some(audiences),
            ..*req
        };
        let mut errors = Vec::new();
        for a in &self.authenticators {
            let aware = a.audience_aware();
            if !aware && implicit.is_empty() {
                continue;
            }
            match a.authenticate(&req).await {
                AuthnOutcome::Authenticated(mut user) => {
                    if !user.groups.iter().any(|g| g == "system:authenticated") {
                        user.groups.push("system:authenticated".into());
                    }
                    return Ok((user, (!aware).then(|| implicit.clone())));
                }
                AuthnOutcome::NotApplicable => {}
                AuthnOutcome::Rejected(e) => errors.push(format!("{}: {e}", a.name())),
            }
        }
        Err(errors)
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
                    // The journey's authn stage (`r8s trace`) names who and how.
                    let stage = tracing::Span::current();
                    stage.record("authenticator", a.name());
                    stage.record("user", user.name.as_str());
                    return Ok(user);
                }
                AuthnOutcome::NotApplicable => {}
                AuthnOutcome::Rejected(e) => errors.push(format!("{}: {e}", a.name())),
            }
        }
        // Anonymous only when no credentials were presented at all: a bad token stays 401.
        let credentials =
            req.headers.contains_key(http::header::AUTHORIZATION) || !req.peer_certificates.is_empty();
        if errors.is_empty() && !credentials && self.anonymous_allowed(req.path) {
            tracing::Span::current().record("authenticator", "anonymous");
            return Ok(anonymous_user());
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

    fn req() -> (http::HeaderMap, &'static PeerCertificates) {
        (http::HeaderMap::new(), PeerCertificates::none())
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
                peer_certificates: c,
                path: "/api",
                audiences: None,
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
                peer_certificates: c,
                path: "/api",
                audiences: None,
            })
            .await
            .unwrap_err();
        assert_eq!(errors, vec!["a: bad token".to_owned(), "b: expired".to_owned()]);
    }

    #[tokio::test]
    async fn anonymous_reaches_only_public_paths_and_never_with_bad_credentials() {
        let mut chain = AuthenticatorChain::default();
        chain.push(Fixed("none", || AuthnOutcome::NotApplicable));
        chain.allow_anonymous(PUBLIC_INFO_PATHS);
        let (h, c) = req();
        let at = |path: &'static str| AuthnRequest {
            headers: &h,
            peer_certificates: c,
            path,
            audiences: None,
        };
        let user = chain.authenticate(&at("/healthz")).await.unwrap();
        assert_eq!(user, anonymous_user());
        assert!(chain.authenticate(&at("/readyz/ping")).await.is_ok());
        assert!(chain.authenticate(&at("/version/")).await.is_ok());
        assert!(chain.authenticate(&at("/api/v1/pods")).await.is_err());
        assert!(chain.authenticate(&at("/healthzz")).await.is_err());
        let mut rejecting = AuthenticatorChain::default();
        rejecting.push(Fixed("a", || AuthnOutcome::Rejected("bad token".into())));
        rejecting.allow_anonymous(PUBLIC_INFO_PATHS);
        assert!(rejecting.authenticate(&at("/healthz")).await.is_err());
    }
}
