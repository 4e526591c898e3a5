//! `RuntimeClass` (upstream's admission plugin of that name, on by default): a new pod naming
//! a `runtimeClassName` must name a RuntimeClass (node.k8s.io/v1) that exists; the class's
//! fixed overhead becomes the pod's `spec.overhead` (which the scheduler and quota count), and
//! its scheduling constraints are merged into the pod's node selector and tolerations. The
//! validating half refuses a pod whose overhead disagrees with its class.
//!
//! The class is read from the store, not a cache: a class deleted a moment ago must already
//! refuse pods (upstream looks it up live when its informer has none).

use async_trait::async_trait;
use serde_json::{json, Value};

use super::{Attributes, MutatingPlugin, Operation, ValidatingPlugin};
use crate::status::ApiError;

pub struct RuntimeClass {
    pub listers: super::listers::Listers,
}

/// A pod create (not a subresource), or `None`.
fn pod_create(attrs: &Attributes<'_>) -> Option<()> {
    let r = attrs.request;
    (attrs.operation == Operation::Create
        && r.api_group.is_empty()
        && r.resource == "pods"
        && r.subresource.is_empty())
    .then_some(())
}

fn forbidden(pod: &Value, msg: String) -> ApiError {
    let name = pod["metadata"]["name"]
        .as_str()
        .or(pod["metadata"]["generateName"].as_str())
        .unwrap_or("");
    ApiError::forbidden(format!("pods \"{name}\" is forbidden: {msg}"))
}

/// Two resource lists equal as quantities (upstream's semantic equality): "1000m" is "1".
fn same_resources(a: &Value, b: &Value) -> bool {
    let parse = |v: &Value| -> Option<Vec<(String, r8s_api::quantity::Quantity)>> {
        let mut out: Vec<_> = v
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, q)| Some((k.clone(), r8s_api::quantity::Quantity::parse(q.as_str()?).ok()?)))
            .collect::<Option<_>>()?;
        out.sort_by(|x, y| x.0.cmp(&y.0));
        Some(out)
    };
    matches!((parse(a), parse(b)), (Some(x), Some(y)) if x == y)
}

fn has_overhead(pod: &Value) -> bool {
    pod["spec"]["overhead"].as_object().is_some_and(|o| !o.is_empty())
}

impl RuntimeClass {
    /// The pod's RuntimeClass, `None` when it names none; a missing one refuses the pod.
    async fn class_of(&self, pod: &Value) -> Result<Option<std::sync::Arc<Value>>, ApiError> {
        let Some(name) = pod["spec"]["runtimeClassName"].as_str() else {
            return Ok(None);
        };
        match self.listers.runtime_class(name).await? {
            Some(c) => Ok(Some(c)),
            None => Err(forbidden(
                pod,
                format!("pod rejected: RuntimeClass {name:?} not found"),
            )),
        }
    }
}

#[async_trait]
impl MutatingPlugin for RuntimeClass {
    fn name(&self) -> &'static str {
        "RuntimeClass"
    }

    async fn admit(&self, attrs: &mut Attributes<'_>) -> Result<(), ApiError> {
        if pod_create(attrs).is_none() {
            return Ok(());
        }
        let Some(pod) = attrs.object.as_deref_mut() else {
            return Ok(());
        };
        let Some(class) = self.class_of(pod).await? else {
            return Ok(());
        };
        // The overhead: the class's, unless the pod says another.
        let fixed = &class["overhead"]["podFixed"];
        if fixed.as_object().is_some() {
            if has_overhead(pod) && !same_resources(fixed, &pod["spec"]["overhead"]) {
                return Err(forbidden(
                    pod,
                    "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead".into(),
                ));
            }
            pod["spec"]["overhead"] = fixed.clone();
        }
        // Scheduling: the class's node selector joins the pod's (a key with another value is
        // a conflict), its tolerations are added to the pod's.
        let scheduling = &class["scheduling"];
        if let Some(selector) = scheduling["nodeSelector"].as_object() {
            for (k, v) in selector {
                let pod_value = &pod["spec"]["nodeSelector"][k];
                if !pod_value.is_null() && pod_value != v {
                    return Err(forbidden(
                        pod,
                        format!(
                            "conflict: runtimeClass.scheduling.nodeSelector[{k}] = {}; pod.spec.nodeSelector[{k}] = {}",
                            v.as_str().unwrap_or(""),
                            pod_value.as_str().unwrap_or("")
                        ),
                    ));
                }
            }
            if !pod["spec"]["nodeSelector"].is_object() {
                pod["spec"]["nodeSelector"] = json!({});
            }
            for (k, v) in selector {
                pod["spec"]["nodeSelector"][k] = v.clone();
            }
        }
        if let Some(tolerations) = scheduling["tolerations"].as_array() {
            if !pod["spec"]["tolerations"].is_array() {
                pod["spec"]["tolerations"] = json!([]);
            }
            let list = pod["spec"]["tolerations"]
                .as_array_mut()
                .expect("made an array above");
            for t in tolerations {
                if !list.contains(t) {
                    list.push(t.clone());
                }
            }
        }
        Ok(())
    }
}

#[async_trait]
impl ValidatingPlugin for RuntimeClass {
    fn name(&self) -> &'static str {
        "RuntimeClass"
    }

    async fn validate(&self, attrs: &Attributes<'_>) -> Result<(), ApiError> {
        if pod_create(attrs).is_none() {
            return Ok(());
        }
        let Some(pod) = attrs.object.as_deref() else {
            return Ok(());
        };
        let class = self.class_of(pod).await?;
        let fixed = class
            .as_ref()
            .map(|c| &c["overhead"]["podFixed"])
            .filter(|f| f.is_object());
        match fixed {
            Some(fixed) if !same_resources(fixed, &pod["spec"]["overhead"]) => Err(forbidden(
                pod,
                "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead".into(),
            )),
            None if has_overhead(pod) => Err(forbidden(
                pod,
                "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead".into(),
            )),
            _ => Ok(()),
        }
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
                "/registry/runtimeclasses/{}",
                c["metadata"]["name"].as_str().unwrap()
            );
            s.create(&key, serde_json::to_vec(c).unwrap().into())
                .await
                .unwrap();
        }
        (dir, Arc::new(s))
    }

    async fn admit(store: Arc<dyn Store>, pod: &mut Value) -> Result<(), ApiError> {
        let plugin = RuntimeClass {
            listers: crate::admission::listers::Listers::new(store),
        };
        crate::admission::testing::create_pod("default", pod, Some(&plugin), Some(&plugin)).await
    }

    fn message(e: ApiError) -> String {
        e.to_status()["message"].as_str().unwrap().to_string()
    }

    #[tokio::test]
    async fn a_missing_class_is_forbidden() {
        let (_d, s) = store(&[]).await;
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"runtimeClassName": "gone"}});
        let err = admit(s, &mut pod).await.unwrap_err();
        assert_eq!(err.code, 403);
        assert_eq!(
            message(err),
            "pods \"p\" is forbidden: pod rejected: RuntimeClass \"gone\" not found"
        );
    }

    #[tokio::test]
    async fn overhead_and_scheduling_come_from_the_class() {
        let (_d, s) = store(&[
            json!({"metadata": {"name": "kata"}, "handler": "kata",
                "overhead": {"podFixed": {"cpu": "10m", "memory": "1Mi"}},
                "scheduling": {"nodeSelector": {"sandbox": "yes"},
                    "tolerations": [{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}]}}),
            json!({"metadata": {"name": "plain"}, "handler": "runc"}),
        ])
        .await;
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"runtimeClassName": "kata",
            "nodeSelector": {"zone": "a"}}});
        admit(s.clone(), &mut pod).await.unwrap();
        assert_eq!(pod["spec"]["overhead"], json!({"cpu": "10m", "memory": "1Mi"}));
        assert_eq!(
            pod["spec"]["nodeSelector"],
            json!({"zone": "a", "sandbox": "yes"})
        );
        assert_eq!(pod["spec"]["tolerations"][0]["key"], "sandbox");
        // The same overhead written otherwise is the same.
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"runtimeClassName": "kata",
            "overhead": {"cpu": "0.01", "memory": "1024Ki"}}});
        admit(s.clone(), &mut pod).await.unwrap();
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"runtimeClassName": "kata",
            "overhead": {"cpu": "1"}}});
        assert!(message(admit(s.clone(), &mut pod).await.unwrap_err())
            .ends_with("pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"));
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"runtimeClassName": "kata",
            "nodeSelector": {"sandbox": "no"}}});
        assert!(message(admit(s.clone(), &mut pod).await.unwrap_err()).ends_with(
            "conflict: runtimeClass.scheduling.nodeSelector[sandbox] = yes; pod.spec.nodeSelector[sandbox] = no"
        ));
        // A class without overhead leaves none, and a pod may not bring its own.
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"runtimeClassName": "plain"}});
        admit(s.clone(), &mut pod).await.unwrap();
        assert!(pod["spec"]["overhead"].is_null());
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"overhead": {"cpu": "1"}}});
        assert!(message(admit(s, &mut pod).await.unwrap_err())
            .ends_with("pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"));
    }
}
