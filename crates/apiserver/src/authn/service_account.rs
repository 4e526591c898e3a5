//! ServiceAccount tokens: JWTs the API server signs (TokenRequest, `serviceaccounts/<name>/token`)
//! and accepts as `system:serviceaccount:<ns>:<name>` while the ServiceAccount — and the pod,
//! secret or node a token is bound to — still exists, as upstream's service-account token
//! authenticator does.

use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Authenticator, AuthnOutcome, AuthnRequest, UserInfo};

/// The issuer r8s names in its tokens unless `--service-account-issuer` says otherwise
/// (kubeadm's and k3s's default).
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// A reference from a token to the object it is bound to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ObjectRef {
    pub name: String,
    pub uid: String,
}

/// The `kubernetes.io` claim of a token.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KubernetesClaim {
    pub namespace: String,
    pub serviceaccount: ObjectRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<ObjectRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<ObjectRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<ObjectRef>,
}

/// The claims of a token, as upstream writes them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Claims {
    pub iss: String,
    pub sub: String,
    pub aud: Vec<String>,
    pub exp: i64,
    pub iat: i64,
    pub nbf: i64,
    pub jti: String,
    #[serde(rename = "kubernetes.io")]
    pub kubernetes: KubernetesClaim,
}

struct VerifyingKey {
    key: DecodingKey,
    algorithm: Algorithm,
}

/// Signs and checks service-account tokens.
pub struct ServiceAccountTokens {
    pub issuer: String,
    /// Issuers whose tokens are accepted (the first signs new ones).
    accepted_issuers: Vec<String>,
    /// What a token must be meant for (`--api-audiences`, by default the issuer).
    pub api_audiences: Vec<String>,
    signing: EncodingKey,
    algorithm: Algorithm,
    kid: String,
    verifying: Vec<VerifyingKey>,
    /// The public keys as a JSON Web Key Set, for `/openid/v1/jwks`.
    jwks: Value,
    /// The longest lifetime TokenRequest grants (`--service-account-max-token-expiration`).
    pub max_expiration_seconds: Option<i64>,
    /// Where the objects a token names are read: the watch cache first (upstream's listers).
    lookup: crate::Lookup,
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A PEM private key (ECDSA P-256 or RSA, PKCS#8) as a signing key, its algorithm and its
/// public half (SPKI DER).
fn load_private(pem: &str) -> Result<(EncodingKey, Algorithm, Vec<u8>), String> {
    let pair = rcgen::KeyPair::from_pem(pem).map_err(|e| format!("unreadable private key: {e}"))?;
    let der = rcgen::PublicKeyData::subject_public_key_info(&pair);
    if let Ok(k) = EncodingKey::from_ec_pem(pem.as_bytes()) {
        return Ok((k, Algorithm::ES256, der));
    }
    let k = EncodingKey::from_rsa_pem(pem.as_bytes()).map_err(|e| format!("unsupported private key: {e}"))?;
    Ok((k, Algorithm::RS256, der))
}

/// Upstream's key id: the SHA-256 of the public key's DER, base64url.
fn key_id(public_der: &[u8]) -> String {
    b64(ring::digest::digest(&ring::digest::SHA256, public_der).as_ref())
}

impl ServiceAccountTokens {
    /// `signing_key_pem` signs new tokens and verifies them; `public_key_pems` (PEM public or
    /// private keys, `--service-account-key-file`) verify tokens too.
    pub fn new(
        signing_key_pem: &str,
        public_key_pems: &[String],
        issuers: &[String],
        api_audiences: &[String],
        lookup: crate::Lookup,
    ) -> Result<Self, String> {
        let (signing, algorithm, public_der) = load_private(signing_key_pem)?;
        let kid = key_id(&public_der);
        let mut verifying = Vec::new();
        let mut jwk_keys = Vec::new();
        let mut add_public = |pem: &str| -> Result<(), String> {
            // A private key file verifies with its public half.
            let pem = match rcgen::KeyPair::from_pem(pem) {
                Ok(pair) => pair.public_key_pem(),
                Err(_) => pem.to_owned(),
            };
            let (key, algorithm) = match DecodingKey::from_ec_pem(pem.as_bytes()) {
                Ok(k) => (k, Algorithm::ES256),
                Err(_) => (
                    DecodingKey::from_rsa_pem(pem.as_bytes())
                        .map_err(|e| format!("unsupported public key: {e}"))?,
                    Algorithm::RS256,
                ),
            };
            verifying.push(VerifyingKey { key, algorithm });
            if let Some(jwk) = jwk_of(&pem) {
                jwk_keys.push(jwk);
            }
            Ok(())
        };
        add_public(signing_key_pem)?;
        for pem in public_key_pems {
            add_public(pem)?;
        }
        let issuers: Vec<String> = if issuers.is_empty() {
            vec![DEFAULT_ISSUER.to_owned()]
        } else {
            issuers.to_vec()
        };
        let api_audiences = if api_audiences.is_empty() {
            vec![issuers[0].clone()]
        } else {
            api_audiences.to_vec()
        };
        Ok(Self {
            issuer: issuers[0].clone(),
            accepted_issuers: issuers,
            api_audiences,
            signing,
            algorithm,
            kid,
            verifying,
            jwks: serde_json::json!({"keys": jwk_keys}),
            max_expiration_seconds: None,
            lookup,
        })
    }

    pub fn jwks(&self) -> &Value {
        &self.jwks
    }

    /// Sign `claims`.
    pub fn sign(&self, claims: &Claims) -> Result<String, String> {
        let mut header = Header::new(self.algorithm);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.signing).map_err(|e| format!("signing the token: {e}"))
    }

    /// The claims of a token signed by one of our keys, for one of our issuers, meant for one of
    /// `audiences`, and not expired; `None` if it is not one of ours at all.
    pub fn verify(&self, token: &str, audiences: &[String]) -> Option<Result<Claims, String>> {
        let issuer = unverified_issuer(token)?;
        if !self.accepted_issuers.contains(&issuer) {
            return None;
        }
        let header = match jsonwebtoken::decode_header(token) {
            Ok(h) => h,
            Err(e) => return Some(Err(format!("malformed token header: {e}"))),
        };
        let mut last = "no key verifies the token's signature".to_owned();
        for k in self.verifying.iter().filter(|k| k.algorithm == header.alg) {
            let mut v = Validation::new(k.algorithm);
            v.set_audience(audiences);
            v.set_issuer(&self.accepted_issuers);
            v.leeway = 0;
            v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
            match jsonwebtoken::decode::<Claims>(token, &k.key, &v) {
                Ok(data) => return Some(Ok(data.claims)),
                Err(e) => {
                    use jsonwebtoken::errors::ErrorKind;
                    match e.kind() {
                        ErrorKind::InvalidSignature => continue,
                        ErrorKind::ExpiredSignature => last = "Token has expired.".into(),
                        ErrorKind::InvalidAudience => last = "token audiences don't match".into(),
                        _ => last = format!("invalid token: {e}"),
                    }
                    return Some(Err(last));
                }
            }
        }
        Some(Err(last))
    }

    /// The core/v1 object `plural` named `name` in `namespace` ("" for nodes).
    async fn stored(&self, plural: &str, namespace: &str, name: &str) -> Result<Option<Value>, String> {
        self.lookup
            .get("", "v1", plural, namespace, name)
            .await
            .map_err(|e| e.to_string())
    }

    /// Whether the objects a token names still exist as they were when it was issued.
    async fn check_bindings(&self, c: &KubernetesClaim) -> Result<(), String> {
        let ns = &c.namespace;
        let sa = self
            .stored("serviceaccounts", ns, &c.serviceaccount.name)
            .await?
            .ok_or_else(|| format!("serviceaccounts \"{}\" not found", c.serviceaccount.name))?;
        if !c.serviceaccount.uid.is_empty() && sa["metadata"]["uid"] != c.serviceaccount.uid.as_str() {
            return Err(format!(
                "ServiceAccount UID ({}) does not match claim ({})",
                sa["metadata"]["uid"].as_str().unwrap_or(""),
                c.serviceaccount.uid
            ));
        }
        for (kind, r, plural, namespace) in [
            ("Pod", &c.pod, "pods", ns.as_str()),
            ("Secret", &c.secret, "secrets", ns.as_str()),
            ("Node", &c.node, "nodes", ""),
        ] {
            let Some(r) = r else { continue };
            // A node-bound token from a pod-bound request only names the node: not checked.
            if kind == "Node" && c.pod.is_some() {
                continue;
            }
            let obj = self
                .stored(plural, namespace, &r.name)
                .await?
                .ok_or_else(|| format!("{kind} \"{}\" not found", r.name))?;
            if obj["metadata"]["uid"] != r.uid.as_str() {
                return Err(format!(
                    "{kind} UID ({}) does not match claim ({})",
                    obj["metadata"]["uid"].as_str().unwrap_or(""),
                    r.uid
                ));
            }
            // Upstream accepts a token for a minute after its pod started terminating.
            if let Some(ts) = obj["metadata"]["deletionTimestamp"].as_str() {
                let deleted = time::OffsetDateTime::parse(ts, &time::format_description::well_known::Rfc3339)
                    .map(|t| t.unix_timestamp())
                    .unwrap_or(0);
                if deleted < now() - 60 {
                    return Err(format!("{kind} \"{}\" has been deleted", r.name));
                }
            }
        }
        Ok(())
    }

    /// Authenticate `token` as its ServiceAccount; `None` if the token is not one of ours.
    pub async fn authenticate_token(
        &self,
        token: &str,
        audiences: &[String],
    ) -> Option<Result<UserInfo, String>> {
        let claims = match self.verify(token, audiences)? {
            Ok(c) => c,
            Err(e) => return Some(Err(e)),
        };
        if let Err(e) = self.check_bindings(&claims.kubernetes).await {
            return Some(Err(e));
        }
        let k = &claims.kubernetes;
        let mut extra = std::collections::BTreeMap::new();
        if let Some(p) = &k.pod {
            extra.insert(
                "authentication.kubernetes.io/pod-name".to_owned(),
                vec![p.name.clone()],
            );
            extra.insert(
                "authentication.kubernetes.io/pod-uid".to_owned(),
                vec![p.uid.clone()],
            );
        }
        if let Some(n) = &k.node {
            extra.insert(
                "authentication.kubernetes.io/node-name".to_owned(),
                vec![n.name.clone()],
            );
            extra.insert(
                "authentication.kubernetes.io/node-uid".to_owned(),
                vec![n.uid.clone()],
            );
        }
        if !claims.jti.is_empty() {
            extra.insert(
                "authentication.kubernetes.io/credential-id".to_owned(),
                vec![format!("JTI={}", claims.jti)],
            );
        }
        Some(Ok(UserInfo {
            name: format!("system:serviceaccount:{}:{}", k.namespace, k.serviceaccount.name),
            uid: k.serviceaccount.uid.clone(),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{}", k.namespace),
            ],
            extra,
        }))
    }
}

pub(crate) fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// The `aud` of a JWT (a string or a list), read without verifying it (for a token already
/// verified).
pub fn token_audiences(token: &str) -> Vec<String> {
    let Some(v) = unverified_claims(token) else {
        return Vec::new();
    };
    match &v["aud"] {
        Value::String(a) => vec![a.clone()],
        Value::Array(a) => a.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect(),
        _ => Vec::new(),
    }
}

fn unverified_claims(token: &str) -> Option<Value> {
    let mut parts = token.split('.');
    let (_, payload, _) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The `iss` of a JWT, read without verifying it, to tell our tokens from others'.
fn unverified_issuer(token: &str) -> Option<String> {
    unverified_claims(token)?["iss"].as_str().map(str::to_owned)
}

/// A public key (SPKI PEM) as a JSON Web Key.
fn jwk_of(public_pem: &str) -> Option<Value> {
    use x509_parser::prelude::FromDer;
    use x509_parser::public_key::PublicKey;
    let (_, pem) = x509_parser::pem::parse_x509_pem(public_pem.as_bytes()).ok()?;
    let (_, spki) = x509_parser::x509::SubjectPublicKeyInfo::from_der(&pem.contents).ok()?;
    let kid = key_id(&pem.contents);
    match spki.parsed().ok()? {
        PublicKey::EC(point) => {
            let data = point.data();
            // Uncompressed P-256 point: 0x04 || X (32) || Y (32).
            if data.len() != 65 || data[0] != 4 {
                return None;
            }
            Some(serde_json::json!({
                "use": "sig", "kty": "EC", "kid": kid, "crv": "P-256", "alg": "ES256",
                "x": b64(&data[1..33]), "y": b64(&data[33..]),
            }))
        }
        PublicKey::RSA(rsa) => {
            let trim = |b: &[u8]| b.iter().skip_while(|x| **x == 0).copied().collect::<Vec<u8>>();
            Some(serde_json::json!({
                "use": "sig", "kty": "RSA", "kid": kid, "alg": "RS256",
                "n": b64(&trim(rsa.modulus)), "e": b64(&trim(rsa.exponent)),
            }))
        }
        _ => None,
    }
}

/// The authenticator for bearer tokens that are service-account JWTs.
pub struct ServiceAccountAuthenticator(pub Arc<ServiceAccountTokens>);

#[async_trait]
impl Authenticator for ServiceAccountAuthenticator {
    fn name(&self) -> &'static str {
        "serviceaccount"
    }

    fn audience_aware(&self) -> bool {
        true
    }

    async fn authenticate(&self, req: &AuthnRequest<'_>) -> AuthnOutcome {
        let Some(token) = super::token_file::bearer_token(req.headers) else {
            return AuthnOutcome::NotApplicable;
        };
        let audiences = req.audiences.unwrap_or(&self.0.api_audiences);
        match self.0.authenticate_token(token, audiences).await {
            None => AuthnOutcome::NotApplicable,
            Some(Ok(user)) => AuthnOutcome::Authenticated(user),
            Some(Err(e)) => AuthnOutcome::Rejected(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use r8s_store::embedded::{EmbeddedOptions, EmbeddedStore};
    use r8s_store::Store;

    fn claims(aud: &str, exp: i64) -> Claims {
        Claims {
            iss: DEFAULT_ISSUER.into(),
            sub: "system:serviceaccount:dev:robot".into(),
            aud: vec![aud.into()],
            exp,
            iat: now(),
            nbf: now(),
            jti: "j1".into(),
            kubernetes: KubernetesClaim {
                namespace: "dev".into(),
                serviceaccount: ObjectRef {
                    name: "robot".into(),
                    uid: "sa-uid".into(),
                },
                pod: Some(ObjectRef {
                    name: "p".into(),
                    uid: "pod-uid".into(),
                }),
                ..Default::default()
            },
        }
    }

    #[tokio::test]
    async fn tokens_authenticate_while_their_objects_exist() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(EmbeddedOptions::new(dir.path())).unwrap());
        let key = rcgen::KeyPair::generate().unwrap().serialize_pem();
        let tokens =
            ServiceAccountTokens::new(&key, &[], &[], &[], crate::Lookup::new(store.clone())).unwrap();
        assert_eq!(tokens.jwks()["keys"][0]["kty"], "EC");
        let aud = vec![DEFAULT_ISSUER.to_owned()];
        let token = tokens.sign(&claims(DEFAULT_ISSUER, now() + 600)).unwrap();

        // Not ours: another issuer, or not a JWT.
        assert!(tokens.authenticate_token("abc", &aud).await.is_none());
        // The ServiceAccount does not exist yet.
        let err = tokens
            .authenticate_token(&token, &aud)
            .await
            .unwrap()
            .unwrap_err();
        assert!(err.contains("serviceaccounts \"robot\" not found"), "{err}");
        store
            .create(
                "/registry/serviceaccounts/dev/robot",
                br#"{"metadata":{"name":"robot","namespace":"dev","uid":"sa-uid"}}"#
                    .to_vec()
                    .into(),
            )
            .await
            .unwrap();
        let err = tokens
            .authenticate_token(&token, &aud)
            .await
            .unwrap()
            .unwrap_err();
        assert!(err.contains("Pod \"p\" not found"), "{err}");
        store
            .create(
                "/registry/pods/dev/p",
                br#"{"metadata":{"name":"p","namespace":"dev","uid":"pod-uid"}}"#
                    .to_vec()
                    .into(),
            )
            .await
            .unwrap();
        let user = tokens.authenticate_token(&token, &aud).await.unwrap().unwrap();
        assert_eq!(user.name, "system:serviceaccount:dev:robot");
        assert_eq!(
            user.groups,
            vec!["system:serviceaccounts", "system:serviceaccounts:dev"]
        );
        assert_eq!(
            user.extra["authentication.kubernetes.io/pod-name"],
            vec!["p".to_owned()]
        );

        // Wrong audience, expired, tampered, or signed by another key: refused.
        let other = tokens.sign(&claims("https://elsewhere", now() + 600)).unwrap();
        assert!(tokens.authenticate_token(&other, &aud).await.unwrap().is_err());
        let expired = tokens.sign(&claims(DEFAULT_ISSUER, now() - 10)).unwrap();
        assert_eq!(
            tokens
                .authenticate_token(&expired, &aud)
                .await
                .unwrap()
                .unwrap_err(),
            "Token has expired."
        );
        let mut tampered = token.clone();
        tampered.pop();
        tampered.push(if token.ends_with('A') { 'B' } else { 'A' });
        assert!(tokens.authenticate_token(&tampered, &aud).await.unwrap().is_err());
        let stranger = ServiceAccountTokens::new(
            &rcgen::KeyPair::generate().unwrap().serialize_pem(),
            &[],
            &[],
            &[],
            crate::Lookup::new(store.clone()),
        )
        .unwrap();
        let forged = stranger.sign(&claims(DEFAULT_ISSUER, now() + 600)).unwrap();
        assert!(tokens.authenticate_token(&forged, &aud).await.unwrap().is_err());

        // Once the pod is gone, so is the token (as soon as the watch cache has seen it go).
        store.delete("/registry/pods/dev/p", None).await.unwrap();
        let mut refused = false;
        for _ in 0..100 {
            if tokens.authenticate_token(&token, &aud).await.unwrap().is_err() {
                refused = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(
            refused,
            "the token of a deleted pod still authenticates after 2 s"
        );
    }
}
