//! `Priority` (upstream's admission plugin of that name, on by default): a new pod's
//! `priorityClassName` is resolved to `spec.priority` and `spec.preemptionPolicy` from its
//! PriorityClass (scheduling.k8s.io/v1); a pod naming none gets the class marked
//! `globalDefault`, or priority 0. The scheduler orders its queue and preempts by these numbers.

use std::sync::Arc;

use async_trait::async_trait;

use serde_json::{json, Value};

use super::{Attributes, MutatingPlugin, Operation};
use crate::status::ApiError;

pub struct Priority {
    pub listers: super::listers::Listers,
}

impl Priority {
    async fn class(&self, name: &str) -> Result<Option<Arc<Value>>, ApiError> {
        self.listers.priority_class(name).await
    }

    async fn global_default(&self) -> Result<Option<Arc<Value>>, ApiError> {
        Ok(self
            .listers
            .priority_classes()
            .await?
            .into_iter()
            .filter(|c| c["globalDefault"] == true)
            .min_by_key(|c| c["value"].as_i64().unwrap_or(0)))
    }
}

#[async_trait]
impl MutatingPlugin for Priority {
    fn name(&self) -> &'static str {
        "Priority"
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
        let pod_name = pod["metadata"]["name"]
            .as_str()
            .or(pod["metadata"]["generateName"].as_str())
            .unwrap_or("")
            .to_string();
        let forbidden = |msg: String| ApiError::forbidden(format!("pods \"{pod_name}\" is forbidden: {msg}"));
        let (name, class) = match pod["spec"]["priorityClassName"]
            .as_str()
            .filter(|n| !n.is_empty())
        {
            Some(name) => match self.class(name).await? {
                Some(c) => (Some(name.to_string()), Some(c)),
                None => return Err(forbidden(format!("no PriorityClass with name {name} was found"))),
            },
            None => match self.global_default().await? {
                Some(c) => (c["metadata"]["name"].as_str().map(String::from), Some(c)),
                None => (None, None),
            },
        };
        let value = class.as_ref().and_then(|c| c["value"].as_i64()).unwrap_or(0);
        if let Some(given) = pod["spec"]["priority"].as_i64() {
            if given != value {
                return Err(forbidden(format!(
                    "the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {value} from the given PriorityClass name"
                )));
            }
        }
        let spec = &mut pod["spec"];
        if let Some(n) = name {
            spec["priorityClassName"] = json!(n);
        }
        spec["priority"] = json!(value);
        if let Some(policy) = class.as_ref().and_then(|c| c["preemptionPolicy"].as_str()) {
            spec["preemptionPolicy"] = json!(policy);
        } else if spec["preemptionPolicy"].is_null() {
            spec["preemptionPolicy"] = json!("PreemptLowerPriority");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use r8s_store::Store;
    use std::sync::Arc;

    async fn store(classes: &[Value]) -> (tempfile::TempDir, Arc<dyn Store>) {
        let dir = tempfile::tempdir().unwrap();
        let s =
            r8s_store::embedded::EmbeddedStore::open(r8s_store::embedded::EmbeddedOptions::new(dir.path()))
                .unwrap();
        for c in classes {
            let key = format!(
                "/registry/priorityclasses/{}",
                c["metadata"]["name"].as_str().unwrap()
            );
            s.create(&key, serde_json::to_vec(c).unwrap().into())
                .await
                .unwrap();
        }
        (dir, Arc::new(s))
    }

    async fn admit(store: Arc<dyn Store>, pod: &mut Value) -> Result<(), ApiError> {
        crate::admission::testing::create_pod(
            "default",
            pod,
            Some(&Priority {
                listers: crate::admission::listers::Listers::new(store),
            }),
            None,
        )
        .await
    }

    #[tokio::test]
    async fn resolves_class_default_and_refuses_unknown() {
        let (_d, s) = store(&[
            json!({"metadata": {"name": "high"}, "value": 1000, "preemptionPolicy": "Never"}),
            json!({"metadata": {"name": "base"}, "value": 10, "globalDefault": true}),
        ])
        .await;
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"priorityClassName": "high"}});
        admit(s.clone(), &mut pod).await.unwrap();
        assert_eq!(pod["spec"]["priority"], 1000);
        assert_eq!(pod["spec"]["preemptionPolicy"], "Never");
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {}});
        admit(s.clone(), &mut pod).await.unwrap();
        assert_eq!(
            (
                pod["spec"]["priority"].as_i64(),
                pod["spec"]["priorityClassName"].as_str()
            ),
            (Some(10), Some("base"))
        );
        assert_eq!(pod["spec"]["preemptionPolicy"], "PreemptLowerPriority");
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"priorityClassName": "nope"}});
        let err = admit(s.clone(), &mut pod).await.unwrap_err();
        assert!(err.to_status()["message"]
            .as_str()
            .unwrap()
            .contains("no PriorityClass with name nope was found"));
        let mut pod =
            json!({"metadata": {"name": "p"}, "spec": {"priorityClassName": "high", "priority": 5}});
        assert!(admit(s, &mut pod).await.is_err());
    }
}
