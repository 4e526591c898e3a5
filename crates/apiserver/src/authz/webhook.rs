//! The `Webhook` authorization mode (`--authorization-webhook-config-file`): each decision is a
//! SubjectAccessReview v1 POSTed to an HTTPS service named in a kubeconfig-format file, its
//! answers cached (allowed for `--authorization-webhook-cache-authorized-ttl`, refused for
//! `…-unauthorized-ttl`), as upstream's webhook authorizer does.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use base64::Engine;
use serde_json::{json, Value};

use super::{Authorizer, Decision};
use crate::admission::webhook::client::{post, Endpoint};
use crate::authn::UserInfo;
use crate::request_info::RequestInfo;

pub struct WebhookAuthorizer {
    endpoint: Endpoint,
    tls: Arc<rustls::ClientConfig>,
    authorized_ttl: Duration,
    unauthorized_ttl: Duration,
    cache: Mutex<HashMap<String, (Decision, Instant)>>,
}

impl Clone for Decision {
    fn clone(&self) -> Self {
        match self {
            Decision::Allow(r) => Decision::Allow(r.clone()),
            Decision::Deny(r) => Decision::Deny(r.clone()),
            Decision::NoOpinion => Decision::NoOpinion,
        }
    }
}

/// How long a call may take.
const TIMEOUT: Duration = Duration::from_secs(30);

impl WebhookAuthorizer {
    /// From a kubeconfig-format file: the first cluster's `server` and its CA
    /// (`certificate-authority-data` or `certificate-authority`).
    pub fn from_kubeconfig(
        path: &Path,
        authorized_ttl: Duration,
        unauthorized_ttl: Duration,
    ) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let cfg: Value = serde_saphyr::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let cluster = &cfg["clusters"][0]["cluster"];
        let server = cluster["server"]
            .as_str()
            .ok_or_else(|| format!("{}: no clusters[0].cluster.server", path.display()))?;
        let ca = match (
            cluster["certificate-authority-data"].as_str(),
            cluster["certificate-authority"].as_str(),
        ) {
            (Some(data), _) => base64::engine::general_purpose::STANDARD
                .decode(data)
                .map_err(|e| format!("{}: certificate-authority-data: {e}", path.display()))?,
            (None, Some(file)) => std::fs::read(file).map_err(|e| format!("{file}: {e}"))?,
            (None, None) => Vec::new(),
        };
        Ok(Self {
            endpoint: Endpoint::parse(server)?,
            tls: crate::admission::webhook::source::tls_config(&ca)?,
            authorized_ttl,
            unauthorized_ttl,
            cache: Mutex::new(HashMap::new()),
        })
    }
}

/// The SubjectAccessReview upstream sends for a request.
pub fn review(user: &UserInfo, r: &RequestInfo) -> Value {
    let mut spec = json!({"user": user.name, "groups": user.groups});
    if !user.uid.is_empty() {
        spec["uid"] = json!(user.uid);
    }
    if !user.extra.is_empty() {
        spec["extra"] = json!(user.extra);
    }
    if r.is_resource_request {
        spec["resourceAttributes"] = json!({
            "namespace": r.namespace, "verb": r.verb, "group": r.api_group, "version": r.api_version,
            "resource": r.resource, "subresource": r.subresource, "name": r.name,
        });
    } else {
        spec["nonResourceAttributes"] = json!({"path": r.path, "verb": r.verb});
    }
    json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec})
}

#[async_trait]
impl Authorizer for WebhookAuthorizer {
    fn name(&self) -> &'static str {
        "Webhook"
    }

    async fn authorize(&self, user: &UserInfo, r: &RequestInfo) -> Decision {
        let body = review(user, r);
        let key = body["spec"].to_string();
        if let Some((d, until)) = self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            if Instant::now() < *until {
                return d.clone();
            }
        }
        let answer = post(
            &self.endpoint,
            self.tls.clone(),
            serde_json::to_vec(&body).unwrap_or_default(),
            TIMEOUT,
        )
        .await;
        let status = match answer {
            Ok((200..=299, bytes)) => {
                serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null)["status"].clone()
            }
            Ok((code, _)) => {
                tracing::warn!(code, "authorization webhook answered with an error; no opinion");
                return Decision::NoOpinion;
            }
            Err(e) => {
                tracing::warn!(error = %e, "authorization webhook unreachable; no opinion");
                return Decision::NoOpinion;
            }
        };
        let reason = status["reason"].as_str().unwrap_or_default().to_owned();
        let (decision, ttl) = if status["allowed"] == true {
            (Decision::Allow(reason), self.authorized_ttl)
        } else if status["denied"] == true {
            (Decision::Deny(reason), self.unauthorized_ttl)
        } else {
            (Decision::NoOpinion, self.unauthorized_ttl)
        };
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, (decision.clone(), Instant::now() + ttl));
        decision
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reviews_carry_the_user_and_the_attributes() {
        let user = UserInfo {
            name: "jane".into(),
            groups: vec!["dev".into()],
            ..Default::default()
        };
        let r = crate::request_info::parse_request(&http::Method::GET, "/api/v1/namespaces/d/pods/p", None);
        let v = review(&user, &r);
        assert_eq!(v["spec"]["user"], "jane");
        assert_eq!(v["spec"]["resourceAttributes"]["verb"], "get");
        assert_eq!(v["spec"]["resourceAttributes"]["name"], "p");
        let n = crate::request_info::parse_request(&http::Method::GET, "/healthz", None);
        assert_eq!(
            review(&user, &n)["spec"]["nonResourceAttributes"]["path"],
            "/healthz"
        );
    }
}
