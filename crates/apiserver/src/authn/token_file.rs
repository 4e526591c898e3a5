//! Static bearer tokens (`--token-auth-file`), in Kubernetes' CSV format:
//! `token,user,uid,"group1,group2"` — one per line, groups optional.

use std::collections::HashMap;
use std::path::Path;

use async_trait::async_trait;

use super::{Authenticator, AuthnOutcome, AuthnRequest, UserInfo};

pub struct TokenFileAuthenticator {
    tokens: HashMap<String, UserInfo>,
}

impl TokenFileAuthenticator {
    pub fn from_file(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let mut tokens = HashMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields = split_csv(line);
            if fields.len() < 3 {
                return Err(format!(
                    "line {}: expected token,user,uid[,\"groups\"], got {} field(s)",
                    n + 1,
                    fields.len()
                ));
            }
            if fields[0].is_empty() || fields[1].is_empty() {
                return Err(format!("line {}: empty token or user name", n + 1));
            }
            let groups = fields
                .get(3)
                .map(|g| {
                    g.split(',')
                        .map(str::trim)
                        .filter(|g| !g.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            tokens.insert(
                fields[0].clone(),
                UserInfo {
                    name: fields[1].clone(),
                    uid: fields[2].clone(),
                    groups,
                    ..Default::default()
                },
            );
        }
        Ok(Self { tokens })
    }
}

/// Split one CSV line, honouring double quotes (the groups field is quoted).
pub(crate) fn split_csv(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                chars.next();
                fields.last_mut().expect("one field").push('"');
            }
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(String::new()),
            c => fields.last_mut().expect("one field").push(c),
        }
    }
    fields.into_iter().map(|f| f.trim().to_owned()).collect()
}

/// The bearer token of a request, if it has one.
pub fn bearer_token(headers: &http::HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty()).then(|| token.trim())
}

#[async_trait]
impl Authenticator for TokenFileAuthenticator {
    fn name(&self) -> &'static str {
        "token-file"
    }

    async fn authenticate(&self, req: &AuthnRequest<'_>) -> AuthnOutcome {
        let Some(token) = bearer_token(req.headers) else {
            return AuthnOutcome::NotApplicable;
        };
        match self.tokens.get(token) {
            Some(user) => AuthnOutcome::Authenticated(user.clone()),
            // Another token authenticator (service accounts, later) may know it.
            None => AuthnOutcome::NotApplicable,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_kubernetes_csv_format() {
        let a = TokenFileAuthenticator::parse(
            "# comment\nsecret1,alice,1001,\"system:masters,dev\"\nsecret2,bob,1002\n",
        )
        .unwrap();
        let alice = &a.tokens["secret1"];
        assert_eq!(alice.name, "alice");
        assert_eq!(alice.uid, "1001");
        assert_eq!(alice.groups, vec!["system:masters".to_owned(), "dev".to_owned()]);
        assert!(a.tokens["secret2"].groups.is_empty());
        let err = TokenFileAuthenticator::parse("onlytoken,user\n").err().unwrap();
        assert!(err.contains("line 1"), "{err}");
    }

    #[tokio::test]
    async fn authenticates_known_bearer_tokens_only() {
        let a = TokenFileAuthenticator::parse("s3cret,alice,1\n").unwrap();
        let mut h = http::HeaderMap::new();
        h.insert(http::header::AUTHORIZATION, "Bearer s3cret".parse().unwrap());
        let r = AuthnRequest {
            headers: &h,
            peer_certificates: crate::authn::PeerCertificates::none(),
            path: "/api",
            audiences: None,
        };
        assert!(matches!(a.authenticate(&r).await, AuthnOutcome::Authenticated(u) if u.name == "alice"));
        h.insert(http::header::AUTHORIZATION, "Bearer wrong".parse().unwrap());
        let r = AuthnRequest {
            headers: &h,
            peer_certificates: crate::authn::PeerCertificates::none(),
            path: "/api",
            audiences: None,
        };
        assert!(matches!(a.authenticate(&r).await, AuthnOutcome::NotApplicable));
    }
}
