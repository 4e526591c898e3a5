//! Bootstrap tokens: `<id>.<secret>` bearer tokens backed by `kube-system/bootstrap-token-<id>`
//! Secrets of type `bootstrap.kubernetes.io/token`, so a new node can join with a token and ask
//! for its own certificate (user `system:bootstrap:<id>`, group `system:bootstrappers`), as
//! upstream's bootstrap token authenticator does.

use async_trait::async_trait;
use base64::Engine;
use serde_json::Value;

use super::{Authenticator, AuthnOutcome, AuthnRequest, UserInfo};

pub const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
pub const GROUP: &str = "system:bootstrappers";

pub struct BootstrapTokenAuthenticator {
    /// Where token Secrets are read: the watch cache first, as upstream reads its informer.
    pub lookup: crate::Lookup,
}

/// `(id, secret)` of a token in the bootstrap format: 6 and 16 characters of `[a-z0-9]`.
pub fn parse(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.split_once('.')?;
    let ok =
        |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    (ok(id, 6) && ok(secret, 16)).then_some((id, secret))
}

fn data(secret: &Value, key: &str) -> Option<String> {
    let raw = secret["data"][key].as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD.decode(raw).ok()?;
    String::from_utf8(bytes).ok()
}

/// The user a bootstrap token Secret stands for, if `secret_value` matches and it is usable.
fn check(secret: &Value, id: &str, secret_value: &str, now: i64) -> Result<UserInfo, String> {
    if secret["type"] != SECRET_TYPE || secret["metadata"]["deletionTimestamp"].is_string() {
        return Err("no usable bootstrap token".into());
    }
    if data(secret, "token-id").as_deref() != Some(id)
        || data(secret, "token-secret").as_deref() != Some(secret_value)
    {
        return Err("bootstrap token does not match".into());
    }
    if data(secret, "usage-bootstrap-authentication").as_deref() != Some("true") {
        return Err("bootstrap token is not for authentication".into());
    }
    if let Some(exp) = data(secret, "expiration") {
        let at = time::OffsetDateTime::parse(&exp, &time::format_description::well_known::Rfc3339)
            .map_err(|_| "bootstrap token has an unreadable expiration".to_owned())?;
        if at.unix_timestamp() < now {
            return Err("bootstrap token has expired".into());
        }
    }
    let mut groups = vec![GROUP.to_owned()];
    for g in data(secret, "auth-extra-groups").unwrap_or_default().split(',') {
        let g = g.trim();
        // Only groups in the bootstrappers' own namespace may be added, as upstream.
        if g.starts_with("system:bootstrappers:") && !groups.iter().any(|x| x == g) {
            groups.push(g.to_owned());
        }
    }
    Ok(UserInfo {
        name: format!("system:bootstrap:{id}"),
        groups,
        ..Default::default()
    })
}

#[async_trait]
impl Authenticator for BootstrapTokenAuthenticator {
    fn name(&self) -> &'static str {
        "bootstrap-token"
    }

    async fn authenticate(&self, req: &AuthnRequest<'_>) -> AuthnOutcome {
        let Some((id, secret_value)) = super::token_file::bearer_token(req.headers).and_then(parse) else {
            return AuthnOutcome::NotApplicable;
        };
        let name = format!("bootstrap-token-{id}");
        let secret = match self.lookup.get("", "v1", "secrets", "kube-system", &name).await {
            Ok(secret) => secret,
            Err(e) => return AuthnOutcome::Rejected(e.to_string()),
        };
        // A token that looks like a bootstrap token but has no Secret may be another kind.
        let Some(secret) = secret else {
            return AuthnOutcome::NotApplicable;
        };
        match check(&secret, id, secret_value, super::service_account::now()) {
            Ok(user) => AuthnOutcome::Authenticated(user),
            Err(e) => AuthnOutcome::Rejected(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn secret(extra: &[(&str, &str)]) -> Value {
        let b = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let mut data = json!({
            "token-id": b("abcdef"),
            "token-secret": b("0123456789abcdef"),
            "usage-bootstrap-authentication": b("true"),
        });
        for (k, v) in extra {
            data[*k] = json!(b(v));
        }
        json!({"type": SECRET_TYPE, "metadata": {"name": "bootstrap-token-abcdef"}, "data": data})
    }

    #[test]
    fn valid_tokens_become_bootstrappers() {
        assert_eq!(
            parse("abcdef.0123456789abcdef"),
            Some(("abcdef", "0123456789abcdef"))
        );
        assert_eq!(parse("ABCDEF.0123456789abcdef"), None);
        assert_eq!(parse("abcdef.short"), None);
        let user = check(
            &secret(&[("auth-extra-groups", "system:bootstrappers:r8s,evil")]),
            "abcdef",
            "0123456789abcdef",
            0,
        )
        .unwrap();
        assert_eq!(user.name, "system:bootstrap:abcdef");
        assert_eq!(
            user.groups,
            vec!["system:bootstrappers", "system:bootstrappers:r8s"]
        );
        assert!(check(&secret(&[]), "abcdef", "ffffffffffffffff", 0).is_err());
        let expired = secret(&[("expiration", "2020-01-01T00:00:00Z")]);
        assert_eq!(
            check(&expired, "abcdef", "0123456789abcdef", 1_700_000_000).unwrap_err(),
            "bootstrap token has expired"
        );
        let mut not_auth = secret(&[]);
        not_auth["data"]["usage-bootstrap-authentication"] =
            json!(base64::engine::general_purpose::STANDARD.encode("false"));
        assert!(check(&not_auth, "abcdef", "0123456789abcdef", 0).is_err());
    }
}
