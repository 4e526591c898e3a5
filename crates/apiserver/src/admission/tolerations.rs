//! `DefaultTolerationSeconds` (upstream's admission plugin of that name, on by default): a new
//! pod that does not already tolerate them gets tolerations for the
//! `node.kubernetes.io/not-ready` and `node.kubernetes.io/unreachable` NoExecute taints for
//! 300 seconds, so a node that goes quiet has its pods evicted after five minutes rather than at
//! once.

use async_trait::async_trait;
use serde_json::{json, Value};

use super::{Attributes, MutatingPlugin, Operation};
use crate::status::ApiError;

pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";

pub struct DefaultTolerationSeconds {
    pub seconds: i64,
}

impl Default for DefaultTolerationSeconds {
    fn default() -> Self {
        Self { seconds: 300 }
    }
}

fn tolerates(tolerations: &[Value], key: &str) -> bool {
    tolerations.iter().any(|t| {
        let k = t["key"].as_str().unwrap_or("");
        let effect = t["effect"].as_str().unwrap_or("");
        (k == key || k.is_empty()) && (effect == "NoExecute" || effect.is_empty())
    })
}

#[async_trait]
impl MutatingPlugin for DefaultTolerationSeconds {
    fn name(&self) -> &'static str {
        "DefaultTolerationSeconds"
    }

    async fn admit(&self, attrs: &mut Attributes<'_>) -> Result<(), ApiError> {
        let r = attrs.request;
        if attrs.operation != Operation::Create
            || !r.api_group.is_empty()
            || r.resource != "pods"
            || !r.subresource.is_empty()
        {
            return Ok(());
        }
        let Some(pod) = attrs.object.as_deref_mut() else {
            return Ok(());
        };
        let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
            return Ok(());
        };
        let missing: Vec<&str> = {
            let existing = spec
                .get("tolerations")
                .and_then(Value::as_array)
                .map_or(&[][..], Vec::as_slice);
            [NOT_READY, UNREACHABLE]
                .into_iter()
                .filter(|key| !tolerates(existing, key))
                .collect()
        };
        if missing.is_empty() {
            return Ok(());
        }
        // Added in place (the pod's own tolerations are neither copied nor re-encoded).
        for key in missing {
            super::push_to_list(
                spec,
                "tolerations",
                json!({
                    "key": key,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": self.seconds,
                }),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authn::UserInfo;
    use crate::request_info::parse_request;

    async fn admit(pod: &mut Value) {
        let info = parse_request(&http::Method::POST, "/api/v1/namespaces/default/pods", None);
        let user = UserInfo::default();
        let mut attrs = Attributes {
            operation: Operation::Create,
            request: &info,
            user: &user,
            object: Some(pod),
            old_object: None,
            dry_run: false,
            options: None,
            warnings: &Default::default(),
        };
        DefaultTolerationSeconds::default()
            .admit(&mut attrs)
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn adds_both_tolerations_for_300_seconds() {
        let mut pod = json!({"spec": {"containers": []}});
        admit(&mut pod).await;
        let t = pod["spec"]["tolerations"].as_array().unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0]["key"], NOT_READY);
        assert_eq!(t[1]["key"], UNREACHABLE);
        assert!(t
            .iter()
            .all(|t| t["tolerationSeconds"] == 300 && t["effect"] == "NoExecute"));
    }

    #[tokio::test]
    async fn keeps_the_pods_own_tolerations() {
        let mut pod = json!({"spec": {"tolerations": [
            {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}
        ]}});
        admit(&mut pod).await;
        let t = pod["spec"]["tolerations"].as_array().unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0]["tolerationSeconds"], 5);
        assert_eq!(t[1]["key"], NOT_READY);
        // A wildcard toleration tolerates both.
        let mut pod = json!({"spec": {"tolerations": [{"operator": "Exists"}]}});
        admit(&mut pod).await;
        assert_eq!(pod["spec"]["tolerations"].as_array().unwrap().len(), 1);
    }
}
