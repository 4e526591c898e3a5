//! OpenID Connect ID tokens (`--oidc-issuer-url`, `--oidc-client-id`, …): a bearer JWT issued by
//! the configured issuer for the configured client, verified with the keys the issuer
//! publishes (its discovery document names them), becomes the user its claims name, as
//! upstream's OIDC authenticator does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use base64::Engine;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{DecodingKey, Validation};
use serde_json::Value;
use tokio::sync::Mutex;

use super::{Authenticator, AuthnOutcome, AuthnRequest, UserInfo};
use crate::admission::webhook::client::{get, Endpoint};

#[derive(Clone, Debug, Default)]
pub struct OidcOptions {
    pub issuer_url: String,
    pub client_id: String,
    /// Claim with the user name (`sub` by default).
    pub username_claim: String,
    /// Prefix of user names; `None`: upstream's default (`<issuer>#` unless the claim is
    /// `email`); `Some("-")`: none.
    pub username_prefix: Option<String>,
    pub groups_claim: Option<String>,
    pub groups_prefix: String,
    /// CA that signs the issuer's certificate (PEM); empty: the system's roots.
    pub ca_pem: String,
}

struct Keys {
    set: JwkSet,
    fetched: Instant,
}

pub struct OidcAuthenticator {
    opts: OidcOptions,
    tls: Arc<rustls::ClientConfig>,
    keys: Mutex<Option<Keys>>,
}

/// Keys are fetched again at most this often when a token names an unknown key.
const REFRESH_AT_MOST_EVERY: Duration = Duration::from_secs(10);

impl OidcAuthenticator {
    pub fn new(mut opts: OidcOptions) -> Result<Self, String> {
        if !opts.issuer_url.starts_with("https://") {
            return Err("--oidc-issuer-url must use https".into());
        }
        if opts.client_id.is_empty() {
            return Err("--oidc-client-id is required with --oidc-issuer-url".into());
        }
        if opts.username_claim.is_empty() {
            opts.username_claim = "sub".into();
        }
        let tls = crate::admission::webhook::source::tls_config(opts.ca_pem.as_bytes())?;
        Ok(Self {
            opts,
            tls,
            keys: Mutex::new(None),
        })
    }

    async fn fetch_json(&self, url: &str) -> Result<Value, String> {
        let ep = Endpoint::parse(url)?;
        let (code, body) = get(&ep, self.tls.clone(), Duration::from_secs(10)).await?;
        if code != 200 {
            return Err(format!("{url}: HTTP {code}"));
        }
        serde_json::from_slice(&body).map_err(|e| format!("{url}: {e}"))
    }

    /// The issuer's keys, fetched through its discovery document when missing or when `kid`
    /// is not among them.
    async fn keys(&self, kid: Option<&str>) -> Result<JwkSet, String> {
        let mut cached = self.keys.lock().await;
        let known = |k: &Keys| kid.is_none_or(|kid| k.set.find(kid).is_some());
        if let Some(k) = cached.as_ref() {
            if known(k) || k.fetched.elapsed() < REFRESH_AT_MOST_EVERY {
                return Ok(k.set.clone());
            }
        }
        let discovery_url = format!(
            "{}/.well-known/openid-configuration",
            self.opts.issuer_url.trim_end_matches('/')
        );
        let discovery = self.fetch_json(&discovery_url).await?;
        if discovery["issuer"] != self.opts.issuer_url.as_str() {
            return Err(format!(
                "oidc: issuer did not match the issuer returned by provider, expected {:?} got {}",
                self.opts.issuer_url, discovery["issuer"]
            ));
        }
        let jwks_uri = discovery["jwks_uri"]
            .as_str()
            .ok_or("oidc: discovery names no jwks_uri")?;
        let set: JwkSet = serde_json::from_value(self.fetch_json(jwks_uri).await?)
            .map_err(|e| format!("oidc: keys: {e}"))?;
        *cached = Some(Keys {
            set: set.clone(),
            fetched: Instant::now(),
        });
        Ok(set)
    }

    async fn verify(&self, token: &str) -> Result<UserInfo, String> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| format!("oidc: malformed jwt: {e}"))?;
        let set = self.keys(header.kid.as_deref()).await?;
        let candidates: Vec<_> = match &header.kid {
            Some(kid) => set.find(kid).into_iter().collect(),
            None => set.keys.iter().collect(),
        };
        let mut last = "oidc: verify signature: failed to verify id token signature".to_owned();
        for jwk in candidates {
            let Ok(key) = DecodingKey::from_jwk(jwk) else {
                continue;
            };
            let mut v = Validation::new(header.alg);
            v.set_audience(&[&self.opts.client_id]);
            v.set_issuer(&[&self.opts.issuer_url]);
            v.leeway = 0;
            match jsonwebtoken::decode::<Value>(token, &key, &v) {
                Ok(data) => return self.user(&data.claims),
                Err(e) => {
                    use jsonwebtoken::errors::ErrorKind;
                    match e.kind() {
                        ErrorKind::InvalidSignature | ErrorKind::InvalidAlgorithm => continue,
                        ErrorKind::ExpiredSignature => return Err("oidc: verify: token is expired".into()),
                        ErrorKind::InvalidAudience => {
                            return Err(format!("oidc: expected audience {:?}", self.opts.client_id))
                        }
                        _ => last = format!("oidc: {e}"),
                    }
                }
            }
        }
        Err(last)
    }

    fn user(&self, claims: &Value) -> Result<UserInfo, String> {
        let claim = &self.opts.username_claim;
        let name = claims[claim.as_str()]
            .as_str()
            .ok_or_else(|| format!("oidc: parse username claims {claim:?}: claim not present"))?;
        if claim == "email" && claims["email_verified"] == false {
            return Err("oidc: email not verified".to_owned());
        }
        let prefix = match self.opts.username_prefix.as_deref() {
            Some("-") => String::new(),
            Some(p) => p.to_owned(),
            None if claim == "email" => String::new(),
            None => format!("{}#", self.opts.issuer_url),
        };
        let mut groups = Vec::new();
        if let Some(gc) = &self.opts.groups_claim {
            match &claims[gc.as_str()] {
                Value::String(g) => groups.push(format!("{}{g}", self.opts.groups_prefix)),
                Value::Array(a) => groups.extend(
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(|g| format!("{}{g}", self.opts.groups_prefix)),
                ),
                _ => {}
            }
        }
        Ok(UserInfo {
            name: format!("{prefix}{name}"),
            groups,
            ..Default::default()
        })
    }
}

/// The `iss` of a JWT, unverified, to tell the issuer's tokens from others'.
fn issuer_of(token: &str) -> Option<String> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice::<Value>(&bytes).ok()?["iss"]
        .as_str()
        .map(str::to_owned)
}

#[async_trait]
impl Authenticator for OidcAuthenticator {
    fn name(&self) -> &'static str {
        "oidc"
    }

    async fn authenticate(&self, req: &AuthnRequest<'_>) -> AuthnOutcome {
        let Some(token) = super::token_file::bearer_token(req.headers) else {
            return AuthnOutcome::NotApplicable;
        };
        if issuer_of(token).as_deref() != Some(self.opts.issuer_url.as_str()) {
            return AuthnOutcome::NotApplicable;
        }
        match self.verify(token).await {
            Ok(user) => AuthnOutcome::Authenticated(user),
            Err(e) => AuthnOutcome::Rejected(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn authn(prefix: Option<&str>, claim: &str) -> OidcAuthenticator {
        OidcAuthenticator::new(OidcOptions {
            issuer_url: "https://issuer.example".into(),
            client_id: "r8s".into(),
            username_claim: claim.into(),
            username_prefix: prefix.map(str::to_owned),
            groups_claim: Some("groups".into()),
            groups_prefix: "oidc:".into(),
            ca_pem: String::new(),
        })
        .unwrap()
    }

    #[test]
    fn claims_become_users_with_upstreams_prefixes() {
        let claims =
            json!({"sub": "123", "email": "a@example.com", "email_verified": true, "groups": ["dev", "ops"]});
        let u = authn(None, "sub").user(&claims).unwrap();
        assert_eq!(u.name, "https://issuer.example#123");
        assert_eq!(u.groups, vec!["oidc:dev", "oidc:ops"]);
        assert_eq!(authn(None, "email").user(&claims).unwrap().name, "a@example.com");
        assert_eq!(authn(Some("-"), "sub").user(&claims).unwrap().name, "123");
        assert_eq!(
            authn(Some("corp:"), "sub").user(&claims).unwrap().name,
            "corp:123"
        );
        let unverified = json!({"email": "a@example.com", "email_verified": false});
        assert!(authn(None, "email").user(&unverified).is_err());
        assert!(OidcAuthenticator::new(OidcOptions {
            issuer_url: "http://insecure".into(),
            client_id: "x".into(),
            ..Default::default()
        })
        .is_err());
    }
}
