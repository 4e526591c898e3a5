//! The Initializers admission plugin (behind `--feature-gates=Initializers=true`): a new object
//! of a resource an InitializerConfiguration (admissionregistration.k8s.io/v1alpha1) names gets
//! those initializers in `metadata.initializers.pending`; it stays invisible to get, list and
//! watch (without `includeUninitialized=true`) until each initializer has removed its name —
//! the reference document's "Initializers" stage, removed upstream in 1.14.

use std::sync::Arc;

use async_trait::async_trait;
use r8s_store::{RangeRequest, Store};
use serde_json::{json, Value};

use super::{Attributes, MutatingPlugin, Operation};
use crate::status::ApiError;

pub struct Initializers {
    pub store: Arc<dyn Store>,
}

fn matches(list: &Value, value: &str) -> bool {
    list.as_array()
        .is_some_and(|a| a.iter().any(|v| v == "*" || v == value))
}

/// The initializer names for an object of `group`/`version`/`resource`, in configuration order.
pub fn pending_for(configs: &[Value], group: &str, version: &str, resource: &str) -> Vec<String> {
    let mut out = Vec::new();
    for c in configs {
        for init in c["initializers"].as_array().into_iter().flatten() {
            let name = init["name"].as_str().unwrap_or_default();
            let applies = init["rules"].as_array().into_iter().flatten().any(|r| {
                matches(&r["apiGroups"], group)
                    && matches(&r["apiVersions"], version)
                    && matches(&r["resources"], resource)
            });
            if applies && !name.is_empty() && !out.iter().any(|n| n == name) {
                out.push(name.to_owned());
            }
        }
    }
    out
}

#[async_trait]
impl MutatingPlugin for Initializers {
    fn name(&self) -> &'static str {
        "Initializers"
    }

    async fn admit(&self, a: &mut Attributes<'_>) -> Result<(), ApiError> {
        let r = a.request;
        if a.operation != Operation::Create
            || !r.subresource.is_empty()
            || r.resource == "initializerconfigurations"
        {
            return Ok(());
        }
        let configs = self
            .store
            .range(RangeRequest {
                prefix: "/registry/initializerconfigurations/".into(),
                ..Default::default()
            })
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let configs: Vec<Value> = configs
            .kvs
            .iter()
            .filter_map(|kv| serde_json::from_slice(&kv.value).ok())
            .collect();
        let pending = pending_for(&configs, &r.api_group, &r.api_version, &r.resource);
        if pending.is_empty() {
            return Ok(());
        }
        if let Some(obj) = a.object.as_deref_mut() {
            let list: Vec<Value> = pending.iter().map(|n| json!({"name": n})).collect();
            obj["metadata"]["initializers"] = json!({"pending": list});
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations_name_initializers_by_rule() {
        let configs = vec![
            json!({"metadata": {"name": "a"}, "initializers": [
                {"name": "podimage.example.com", "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]},
                {"name": "everything.example.com", "rules": [{"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}]},
            ]}),
            json!({"metadata": {"name": "b"}, "initializers": [
                {"name": "deploy.example.com", "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"]}]},
            ]}),
        ];
        assert_eq!(
            pending_for(&configs, "", "v1", "pods"),
            vec!["podimage.example.com", "everything.example.com"]
        );
        assert_eq!(
            pending_for(&configs, "apps", "v1", "deployments"),
            vec!["everything.example.com", "deploy.example.com"]
        );
        assert!(pending_for(&configs[1..], "", "v1", "pods").is_empty());
    }
}
