//! Basic auth (`--basic-auth-file`): `Authorization: Basic base64(user:password)` checked against
//! a CSV file of `password,user,uid[,"group1,group2"]`. Upstream removed it in 1.19; the reference
//! document still tells it, so r8s keeps it, off unless the flag is given.

use std::collections::HashMap;
use std::path::Path;

use async_trait::async_trait;
use base64::Engine;

use super::{Authenticator, AuthnOutcome, AuthnRequest, UserInfo};

pub struct BasicAuthAuthenticator {
    /// user name → (password, user)
    users: HashMap<String, (String, UserInfo)>,
}

impl BasicAuthAuthenticator {
    pub fn from_file(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let mut users = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() || line.trim_start().starts_with('#') {
                continue;
            }
            let f = super::token_file::split_csv(line);
            if f.len() < 3 {
                return Err(format!("line {}: want password,user,uid[,groups]", i + 1));
            }
            let groups = f
                .get(3)
                .map(|g| {
                    g.split(',')
                        .map(str::trim)
                        .filter(|g| !g.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            let user = UserInfo {
                name: f[1].clone(),
                uid: f[2].clone(),
                groups,
                ..Default::default()
            };
            users.insert(f[1].clone(), (f[0].clone(), user));
        }
        Ok(Self { users })
    }
}

/// Compare without an early exit, so timing does not tell how much of a password matched.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[async_trait]
impl Authenticator for BasicAuthAuthenticator {
    fn name(&self) -> &'static str {
        "basic-auth"
    }

    async fn authenticate(&self, req: &AuthnRequest<'_>) -> AuthnOutcome {
        let Some(value) = req
            .headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
        else {
            return AuthnOutcome::NotApplicable;
        };
        let Some((scheme, encoded)) = value.split_once(' ') else {
            return AuthnOutcome::NotApplicable;
        };
        if !scheme.eq_ignore_ascii_case("basic") {
            return AuthnOutcome::NotApplicable;
        }
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .ok()
            .and_then(|b| String::from_utf8(b).ok());
        let Some((user, password)) = decoded.as_deref().and_then(|d| d.split_once(':')) else {
            return AuthnOutcome::Rejected("malformed basic auth header".into());
        };
        match self.users.get(user) {
            Some((want, info)) if same(want, password) => AuthnOutcome::Authenticated(info.clone()),
            _ => AuthnOutcome::Rejected("invalid basic auth credentials".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn right_password_authenticates() {
        let a = BasicAuthAuthenticator::parse("s3cret,carol,3001,\"ops,dev\"\n").unwrap();
        let header = |user: &str, pass: &str| {
            let mut h = http::HeaderMap::new();
            let v = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
            h.insert(http::header::AUTHORIZATION, format!("Basic {v}").parse().unwrap());
            h
        };
        async fn req(a: &BasicAuthAuthenticator, h: &http::HeaderMap) -> AuthnOutcome {
            a.authenticate(&AuthnRequest {
                headers: h,
                peer_certificates: crate::authn::PeerCertificates::none(),
                path: "/api",
                audiences: None,
            })
            .await
        }
        match req(&a, &header("carol", "s3cret")).await {
            AuthnOutcome::Authenticated(u) => {
                assert_eq!((u.name.as_str(), u.uid.as_str()), ("carol", "3001"));
                assert_eq!(u.groups, vec!["ops", "dev"]);
            }
            _ => panic!("carol should authenticate"),
        }
        assert!(matches!(
            req(&a, &header("carol", "wrong")).await,
            AuthnOutcome::Rejected(_)
        ));
        assert!(matches!(
            req(&a, &header("dave", "s3cret")).await,
            AuthnOutcome::Rejected(_)
        ));
        assert!(matches!(
            req(&a, &http::HeaderMap::new()).await,
            AuthnOutcome::NotApplicable
        ));
    }
}
