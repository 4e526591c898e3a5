//! Converting custom resources between their CRD's versions: `None` (only apiVersion
//! changes) or `Webhook` (a ConversionReview posted to the CRD's conversion webhook, as
//! upstream's webhook converter does: only objects of another version are sent, the answer's
//! uid, result and objects are checked).

use std::sync::Arc;
use std::time::Duration;

use r8s_store::Store;
use serde_json::{json, Value};

use crate::admission::webhook::client;
use crate::status::ApiError;

/// How long a conversion webhook may take (upstream's fixed 30 s).
const TIMEOUT: Duration = Duration::from_secs(30);

/// A CRD's conversion webhook, reached from the server that serves it.
pub(crate) struct Webhook {
    /// Where a Service reference is resolved (its cluster IP).
    store: Arc<dyn Store>,
    client_config: Value,
    /// `apiextensions.k8s.io/v1` or `v1beta1`, the first the webhook accepts that we speak.
    review_version: Option<&'static str>,
    tls: Result<Arc<rustls::ClientConfig>, String>,
}

impl Webhook {
    pub fn new(store: Arc<dyn Store>, webhook: &Value) -> Self {
        let client_config = webhook["clientConfig"].clone();
        let review_version = webhook["conversionReviewVersions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .find_map(|v| match v {
                "v1" => Some("v1"),
                "v1beta1" => Some("v1beta1"),
                _ => None,
            });
        let ca = client_config["caBundle"]
            .as_str()
            .and_then(|b| {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD.decode(b).ok()
            })
            .unwrap_or_default();
        Self {
            store,
            client_config,
            review_version,
            tls: crate::admission::webhook::source::tls_config(&ca),
        }
    }

    async fn endpoint(&self) -> Result<client::Endpoint, String> {
        if let Some(url) = self.client_config["url"].as_str() {
            return client::Endpoint::parse(url);
        }
        let svc = &self.client_config["service"];
        let (ns, name) = (
            svc["namespace"].as_str().unwrap_or(""),
            svc["name"].as_str().unwrap_or(""),
        );
        let def = crate::registry::catalogue::builtin("", "v1", "services").expect("services are served");
        let obj = crate::registry::system::get(self.store.as_ref(), def, ns, name)
            .await
            .map_err(|_| format!("service \"{ns}/{name}\" not found"))?;
        let ip = obj["spec"]["clusterIP"].as_str().unwrap_or("");
        if ip.is_empty() || ip == "None" {
            return Err(format!("service \"{ns}/{name}\" has no cluster IP"));
        }
        let mut ep = client::service_endpoint(
            ip,
            ns,
            name,
            svc["path"].as_str().unwrap_or("/"),
            svc["port"].as_u64().unwrap_or(443) as u16,
            TIMEOUT,
        );
        // Upstream's converter adds no timeout parameter.
        ep.path = ep
            .path
            .split_once('?')
            .map(|(p, _)| p.to_owned())
            .unwrap_or(ep.path);
        Ok(ep)
    }

    /// `obj` in `to` (`group/version`).
    pub async fn convert(&self, obj: Value, to: &str) -> Result<Value, String> {
        let version = self
            .review_version
            .ok_or("no supported conversion review versions (v1, v1beta1)")?;
        let tls = self.tls.clone()?;
        let ep = self.endpoint().await?;
        let uid = uuid::Uuid::new_v4().to_string();
        let review = json!({
            "apiVersion": format!("apiextensions.k8s.io/{version}"),
            "kind": "ConversionReview",
            "request": {"uid": uid, "desiredAPIVersion": to, "objects": [obj.clone()]},
        });
        let body = serde_json::to_vec(&review).map_err(|e| e.to_string())?;
        let (code, bytes) = client::post(&ep, tls, body, TIMEOUT).await?;
        if !(200..300).contains(&code) {
            return Err(format!(
                "conversion webhook answered {code}: {}",
                String::from_utf8_lossy(&bytes).trim()
            ));
        }
        let answer: Value =
            serde_json::from_slice(&bytes).map_err(|e| format!("unmarshal conversion review: {e}"))?;
        let response = &answer["response"];
        if response["uid"] != uid.as_str() {
            return Err(format!(
                "expected response uid {uid:?}, got {:?}",
                response["uid"].as_str().unwrap_or("")
            ));
        }
        if response["result"]["status"] != "Success" {
            return Err(format!(
                "conversion webhook failed: {}",
                response["result"]["message"].as_str().unwrap_or("")
            ));
        }
        let converted = response["convertedObjects"]
            .as_array()
            .filter(|c| c.len() == 1)
            .ok_or("expected 1 converted object")?;
        let mut out = converted[0].clone();
        if out["apiVersion"] != to {
            return Err(format!(
                "invalid converted object: expected apiVersion {to:?}, got {:?}",
                out["apiVersion"].as_str().unwrap_or("")
            ));
        }
        // The webhook may change nothing of the metadata but labels and annotations.
        let mut meta = obj["metadata"].clone();
        for k in ["labels", "annotations"] {
            match out["metadata"].get(k) {
                Some(v) => meta[k] = v.clone(),
                None => {
                    if let Some(m) = meta.as_object_mut() {
                        m.remove(k);
                    }
                }
            }
        }
        out["metadata"] = meta;
        Ok(out)
    }
}

/// Run `f` to completion from synchronous code on the server's runtime (the registry's
/// decoding and encoding are synchronous; a conversion webhook is a network call).
pub(crate) fn block_on<T>(f: impl std::future::Future<Output = T>) -> Result<T, String> {
    let handle = tokio::runtime::Handle::try_current().map_err(|e| e.to_string())?;
    match handle.runtime_flavor() {
        tokio::runtime::RuntimeFlavor::MultiThread => Ok(tokio::task::block_in_place(|| handle.block_on(f))),
        _ => Err("conversion webhooks need the multi-threaded runtime".into()),
    }
}

/// A conversion failure as the API answers it.
pub(crate) fn failed(kind: &str, group_version: &str, why: &str) -> ApiError {
    ApiError::internal(format!(
        "conversion webhook for {group_version}, Kind={kind} failed: {why}"
    ))
}
