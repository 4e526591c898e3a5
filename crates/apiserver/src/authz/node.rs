//! The `Node` authorization mode: a kubelet (`system:node:<name>` in `system:nodes`) may read a
//! secret, configmap, persistent volume claim or service account (token) only when a pod bound
//! to its node refers to it, and otherwise only what upstream's `system:node` role allows.
//!
//! Upstream keeps a graph of pods, nodes and the objects pods use; here the pods bound to a
//! node are followed from the datastore and each reference counted per node, which answers
//! the one question asked: does some pod on node N use object O?

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use r8s_store::Store;
use serde_json::Value;

use super::{Authorizer, Decision};
use crate::authn::UserInfo;
use crate::follow::Change;
use crate::rbac::Rule;
use crate::request_info::RequestInfo;

/// What kind of object a pod refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    Secret,
    ConfigMap,
    Claim,
    ServiceAccount,
}

type Ref = (Kind, String, String);

#[derive(Default)]
struct State {
    /// Each bound pod's node and references, by store key.
    pods: HashMap<String, (String, Vec<Ref>)>,
    /// How many pods on a node refer to an object.
    uses: HashMap<(String, Ref), usize>,
}

impl State {
    fn remove(&mut self, key: &str) {
        if let Some((node, refs)) = self.pods.remove(key) {
            for r in refs {
                let k = (node.clone(), r);
                if let Some(n) = self.uses.get_mut(&k) {
                    *n -= 1;
                    if *n == 0 {
                        self.uses.remove(&k);
                    }
                }
            }
        }
    }

    fn put(&mut self, key: &str, pod: &Value) {
        self.remove(key);
        let Some(node) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) else {
            return;
        };
        let refs = references(pod);
        for r in &refs {
            *self.uses.entry((node.to_owned(), r.clone())).or_default() += 1;
        }
        self.pods.insert(key.to_owned(), (node.to_owned(), refs));
    }
}

/// Whether a stored pod has a node, read without building the whole object.
fn bound(json: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Pod {
        spec: Option<Spec>,
    }
    #[derive(serde::Deserialize)]
    struct Spec {
        #[serde(rename = "nodeName")]
        node_name: Option<String>,
    }
    // Most stored pods have no node yet: a look for the field name (a vectorised search)
    // spares them the parse.
    if memchr::memmem::find(json, b"\"nodeName\"").is_none() {
        return false;
    }
    serde_json::from_slice::<Pod>(json)
        .ok()
        .and_then(|p| p.spec?.node_name)
        .is_some_and(|n| !n.is_empty())
}

/// Everything a pod refers to by name: its service account, image pull secrets, volumes'
/// secrets, configmaps and claims (projected ones included), and env sources.
fn references(pod: &Value) -> Vec<Ref> {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let spec = &pod["spec"];
    let mut out = Vec::new();
    let mut add = |kind: Kind, name: Option<&str>| {
        if let Some(n) = name.filter(|n| !n.is_empty()) {
            let r = (kind, ns.to_owned(), n.to_owned());
            if !out.contains(&r) {
                out.push(r);
            }
        }
    };
    add(
        Kind::ServiceAccount,
        Some(spec["serviceAccountName"].as_str().unwrap_or("default")),
    );
    let items = |v: &Value| v.as_array().cloned().unwrap_or_default();
    for s in items(&spec["imagePullSecrets"]) {
        add(Kind::Secret, s["name"].as_str());
    }
    for v in items(&spec["volumes"]) {
        add(Kind::Secret, v["secret"]["secretName"].as_str());
        add(Kind::ConfigMap, v["configMap"]["name"].as_str());
        add(Kind::Claim, v["persistentVolumeClaim"]["claimName"].as_str());
        add(Kind::Secret, v["csi"]["nodePublishSecretRef"]["name"].as_str());
        if v["ephemeral"].is_object() {
            let claim = format!("{pod_name}-{}", v["name"].as_str().unwrap_or_default());
            add(Kind::Claim, Some(&claim));
        }
        for src in items(&v["projected"]["sources"]) {
            add(Kind::Secret, src["secret"]["name"].as_str());
            add(Kind::ConfigMap, src["configMap"]["name"].as_str());
        }
    }
    for group in ["initContainers", "containers", "ephemeralContainers"] {
        for c in items(&spec[group]) {
            for e in items(&c["env"]) {
                add(Kind::Secret, e["valueFrom"]["secretKeyRef"]["name"].as_str());
                add(
                    Kind::ConfigMap,
                    e["valueFrom"]["configMapKeyRef"]["name"].as_str(),
                );
            }
            for e in items(&c["envFrom"]) {
                add(Kind::Secret, e["secretRef"]["name"].as_str());
                add(Kind::ConfigMap, e["configMapRef"]["name"].as_str());
            }
        }
    }
    out
}

pub struct NodeAuthorizer {
    state: Arc<Mutex<State>>,
    /// What any kubelet may do beyond its pods' objects: upstream's `system:node` role.
    node_rules: Vec<Rule>,
}

impl NodeAuthorizer {
    /// Start following the pods in `store`.
    pub fn start(store: Arc<dyn Store>) -> Self {
        let state = Arc::new(Mutex::new(State::default()));
        let feeding = state.clone();
        crate::follow::spawn(store, &["/registry/pods/"], "node authorizer", move |change| {
            let mut s = feeding.lock().unwrap_or_else(|e| e.into_inner());
            match change {
                Change::Reset => *s = State::default(),
                Change::Put(key, json) => {
                    // Most pods are seen first unbound (every create): only a bound pod is
                    // worth parsing whole.
                    if bound(json) {
                        if let Ok(pod) = serde_json::from_slice::<Value>(json) {
                            s.put(key, &pod);
                        }
                    } else {
                        s.remove(key);
                    }
                }
                Change::Delete(key) => s.remove(key),
                Change::BatchEnd => {}
            }
        });
        Self {
            state,
            node_rules: node_rules(),
        }
    }

    fn uses(&self, node: &str, r: Ref) -> bool {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.uses.contains_key(&(node.to_owned(), r))
    }
}

/// The rules of the bootstrap policy's `system:node` ClusterRole.
fn node_rules() -> Vec<Rule> {
    crate::rbac::bootstrap_policy::policy()
        .cluster_roles
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some("system:node"))
        .and_then(|r| serde_json::to_value(r).ok())
        .map(|v| Rule::all_from_json(&v))
        .unwrap_or_default()
}

/// The node a user is, if it is a kubelet.
pub fn node_name(user: &UserInfo) -> Option<&str> {
    if !user.groups.iter().any(|g| g == "system:nodes") {
        return None;
    }
    user.name.strip_prefix("system:node:").filter(|n| !n.is_empty())
}

#[async_trait]
impl Authorizer for NodeAuthorizer {
    fn name(&self) -> &'static str {
        "Node"
    }

    async fn authorize(&self, user: &UserInfo, r: &RequestInfo) -> Decision {
        let Some(node) = node_name(user) else {
            return Decision::NoOpinion;
        };
        if r.is_resource_request && r.api_group.is_empty() {
            let kind = match (r.resource.as_str(), r.subresource.as_str()) {
                ("secrets", "") => Some(Kind::Secret),
                ("configmaps", "") => Some(Kind::ConfigMap),
                ("persistentvolumeclaims", "") => Some(Kind::Claim),
                ("serviceaccounts", "token") => Some(Kind::ServiceAccount),
                _ => None,
            };
            if let Some(kind) = kind {
                let verbs: &[&str] = if kind == Kind::ServiceAccount {
                    &["create"]
                } else {
                    &["get", "list", "watch"]
                };
                if !verbs.contains(&r.verb.as_str()) {
                    return Decision::NoOpinion;
                }
                // Lists and watches only of one object by name (`fieldSelector=metadata.name=`).
                if r.name.is_empty() {
                    return Decision::NoOpinion;
                }
                return if self.uses(node, (kind, r.namespace.clone(), r.name.clone())) {
                    Decision::Allow(String::new())
                } else {
                    Decision::NoOpinion
                };
            }
        }
        if self.node_rules.iter().any(|rule| rule.allows(r)) {
            Decision::Allow(String::new())
        } else {
            Decision::NoOpinion
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_pods_with_a_node_are_bound() {
        assert!(bound(
            br#"{"metadata":{"name":"a"},"spec":{"nodeName":"n1","containers":[]}}"#
        ));
        assert!(!bound(
            br#"{"metadata":{"name":"a"},"spec":{"containers":[{"name":"c"}]}}"#
        ));
        assert!(!bound(br#"{"spec":{"nodeName":""}}"#));
        assert!(!bound(br#"{"metadata":{}}"#));
    }

    #[test]
    fn pods_on_a_node_count_their_references() {
        let pod = json!({
            "metadata": {"name": "web", "namespace": "dev"},
            "spec": {
                "nodeName": "n1",
                "serviceAccountName": "robot",
                "imagePullSecrets": [{"name": "pull"}],
                "volumes": [
                    {"name": "a", "secret": {"secretName": "tls"}},
                    {"name": "b", "configMap": {"name": "cfg"}},
                    {"name": "c", "projected": {"sources": [{"configMap": {"name": "proj"}}]}},
                ],
                "containers": [{"name": "c", "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "env-secret", "key": "k"}}}],
                                "envFrom": [{"configMapRef": {"name": "env-cm"}}]}],
            },
        });
        let mut s = State::default();
        s.put("/registry/pods/dev/web", &pod);
        let has = |s: &State, node: &str, kind, name: &str| {
            s.uses
                .contains_key(&(node.to_owned(), (kind, "dev".to_owned(), name.to_owned())))
        };
        for name in ["tls", "pull", "env-secret"] {
            assert!(has(&s, "n1", Kind::Secret, name), "{name}");
        }
        for name in ["cfg", "proj", "env-cm"] {
            assert!(has(&s, "n1", Kind::ConfigMap, name), "{name}");
        }
        assert!(has(&s, "n1", Kind::ServiceAccount, "robot"));
        assert!(!has(&s, "n2", Kind::Secret, "tls"));
        // A second pod using the same secret keeps it after the first goes.
        let mut other = pod.clone();
        other["metadata"]["name"] = json!("web2");
        s.put("/registry/pods/dev/web2", &other);
        s.remove("/registry/pods/dev/web");
        assert!(has(&s, "n1", Kind::Secret, "tls"));
        s.remove("/registry/pods/dev/web2");
        assert!(s.uses.is_empty());
        // Unbound pods grant nothing; moving a pod moves its grants.
        let mut unbound = pod.clone();
        unbound["spec"]["nodeName"] = Value::Null;
        s.put("/registry/pods/dev/web", &unbound);
        assert!(s.uses.is_empty());
        s.put("/registry/pods/dev/web", &pod);
        assert!(has(&s, "n1", Kind::Secret, "tls"));
    }
}
