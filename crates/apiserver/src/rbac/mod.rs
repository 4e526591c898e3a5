//! RBAC: Roles, ClusterRoles and their bindings decide who may do what (the reference
//! document's "Authorization" stage, RBAC mode).
//!
//! The authorizer keeps every role and binding in memory, fed by a watch on the datastore, and
//! indexes bindings by the users and groups they name, so a decision looks only at the grants
//! of the requesting user and its groups.

pub mod bootstrap_policy;
pub(crate) mod escalation;
pub mod rules;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use r8s_store::Store;

use crate::follow::Change;
use serde_json::Value;

use crate::authn::UserInfo;
use crate::authz::{Authorizer, Decision};
use crate::request_info::RequestInfo;
pub use rules::Rule;

/// Where a binding's grant applies and which role it grants.
#[derive(Clone, Debug)]
struct Grant {
    /// `None` for a ClusterRoleBinding (everywhere), else the RoleBinding's namespace.
    namespace: Option<String>,
    /// "Role" (in `namespace`) or "ClusterRole".
    role_kind: String,
    role_name: String,
    /// The binding and subject that grant it, in upstream's words for an allow's reason
    /// (`ClusterRoleBinding "x" of ClusterRole "y" to Group "z"`).
    source: Arc<str>,
    /// The role's rules, resolved when the index is built (a decision then allocates nothing).
    rules: Option<Arc<Vec<Rule>>>,
}

#[derive(Default)]
struct Index {
    cluster_roles: HashMap<String, Arc<Vec<Rule>>>,
    roles: HashMap<(String, String), Arc<Vec<Rule>>>,
    by_user: HashMap<String, Vec<Grant>>,
    by_group: HashMap<String, Vec<Grant>>,
}

impl Index {
    fn grants<'a>(&'a self, user: &'a UserInfo) -> impl Iterator<Item = &'a Grant> {
        self.by_user.get(&user.name).into_iter().flatten().chain(
            user.groups
                .iter()
                .flat_map(|g| self.by_group.get(g).into_iter().flatten()),
        )
    }

    fn role_rules(&self, g: &Grant) -> Option<&Arc<Vec<Rule>>> {
        match (g.role_kind.as_str(), &g.namespace) {
            ("ClusterRole", _) => self.cluster_roles.get(&g.role_name),
            ("Role", Some(ns)) => self.roles.get(&(ns.clone(), g.role_name.clone())),
            _ => None,
        }
    }

    /// The rules that apply to `user` in `namespace` ("" = cluster-wide grants only).
    fn rules_for(&self, user: &UserInfo, namespace: &str) -> Vec<Rule> {
        let mut out = Vec::new();
        for g in self.grants(user) {
            if g.namespace.as_deref().is_some_and(|ns| ns != namespace) {
                continue;
            }
            if let Some(rules) = self.role_rules(g) {
                out.extend(rules.iter().cloned());
            }
        }
        out
    }
}

/// The RBAC objects as last seen, by store key.
#[derive(Default)]
struct Objects {
    cluster_roles: HashMap<String, Value>,
    roles: HashMap<String, Value>,
    cluster_role_bindings: HashMap<String, Value>,
    role_bindings: HashMap<String, Value>,
}

const PREFIXES: [&str; 4] = [
    "/registry/clusterroles/",
    "/registry/roles/",
    "/registry/clusterrolebindings/",
    "/registry/rolebindings/",
];

impl Objects {
    fn map_for(&mut self, key: &str) -> Option<&mut HashMap<String, Value>> {
        if key.starts_with(PREFIXES[0]) {
            Some(&mut self.cluster_roles)
        } else if key.starts_with(PREFIXES[1]) {
            Some(&mut self.roles)
        } else if key.starts_with(PREFIXES[2]) {
            Some(&mut self.cluster_role_bindings)
        } else if key.starts_with(PREFIXES[3]) {
            Some(&mut self.role_bindings)
        } else {
            None
        }
    }

    fn index(&self) -> Index {
        let mut idx = Index::default();
        for obj in self.cluster_roles.values() {
            let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_owned();
            idx.cluster_roles.insert(name, Arc::new(Rule::all_from_json(obj)));
        }
        for obj in self.roles.values() {
            let ns = obj["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_owned();
            idx.roles.insert((ns, name), Arc::new(Rule::all_from_json(obj)));
        }
        let bindings = self.cluster_role_bindings.values().map(|b| (None, b)).chain(
            self.role_bindings
                .values()
                .map(|b| (b["metadata"]["namespace"].as_str().map(str::to_owned), b)),
        );
        for (namespace, b) in bindings {
            let role_kind = b["roleRef"]["kind"].as_str().unwrap_or_default().to_owned();
            let role_name = b["roleRef"]["name"].as_str().unwrap_or_default().to_owned();
            let binding_name = b["metadata"]["name"].as_str().unwrap_or_default();
            let binding = match &namespace {
                None => format!("ClusterRoleBinding {binding_name:?}"),
                Some(ns) => format!("RoleBinding \"{binding_name}/{ns}\""),
            };
            for s in b["subjects"].as_array().into_iter().flatten() {
                let name = s["name"].as_str().unwrap_or_default();
                let kind = s["kind"].as_str().unwrap_or_default();
                let subject = if kind == "ServiceAccount" {
                    let ns = s["namespace"]
                        .as_str()
                        .filter(|n| !n.is_empty())
                        .or(namespace.as_deref())
                        .unwrap_or_default();
                    format!("{kind} \"{name}/{ns}\"")
                } else {
                    format!("{kind} {name:?}")
                };
                let mut grant = Grant {
                    namespace: namespace.clone(),
                    role_kind: role_kind.clone(),
                    role_name: role_name.clone(),
                    source: format!("{binding} of {role_kind} {role_name:?} to {subject}").into(),
                    rules: None,
                };
                grant.rules = idx.role_rules(&grant).cloned();
                match s["kind"].as_str() {
                    Some("User") => idx
                        .by_user
                        .entry(name.to_owned())
                        .or_default()
                        .push(grant.clone()),
                    Some("Group") => idx
                        .by_group
                        .entry(name.to_owned())
                        .or_default()
                        .push(grant.clone()),
                    Some("ServiceAccount") => {
                        // A ServiceAccount subject without a namespace means the binding's own.
                        let ns = s["namespace"]
                            .as_str()
                            .filter(|n| !n.is_empty())
                            .or(namespace.as_deref())
                            .unwrap_or_default();
                        idx.by_user
                            .entry(format!("system:serviceaccount:{ns}:{name}"))
                            .or_default()
                            .push(grant.clone());
                    }
                    _ => {}
                }
            }
        }
        idx
    }
}

/// RBAC's view of the cluster's roles and bindings, shared by the authorizer, the escalation
/// check and SelfSubjectRulesReview.
pub struct Rbac {
    index: RwLock<Arc<Index>>,
    synced: tokio::sync::watch::Sender<bool>,
}

impl Rbac {
    /// Start following the roles and bindings in `store`.
    pub fn start(store: Arc<dyn Store>) -> Arc<Self> {
        let rbac = Arc::new(Self {
            index: RwLock::new(Arc::new(Index::default())),
            synced: tokio::sync::watch::Sender::new(false),
        });
        let feeding = rbac.clone();
        let mut objects = Objects::default();
        crate::follow::spawn(store, &PREFIXES, "rbac", move |change| match change {
            Change::Reset => objects = Objects::default(),
            Change::Put(key, json) => {
                if let (Some(map), Ok(obj)) = (objects.map_for(key), serde_json::from_slice(json)) {
                    map.insert(key.to_owned(), obj);
                }
            }
            Change::Delete(key) => {
                if let Some(map) = objects.map_for(key) {
                    map.remove(key);
                }
            }
            Change::BatchEnd => {
                feeding.publish(&objects);
                feeding.synced.send_replace(true);
            }
        });
        rbac
    }

    /// Wait until the first full list is in.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    fn publish(&self, objects: &Objects) {
        let idx = Arc::new(objects.index());
        *self.index.write().unwrap_or_else(|e| e.into_inner()) = idx;
    }

    fn snapshot(&self) -> Arc<Index> {
        self.index.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The rules that apply to `user` in `namespace` ("" = only cluster-wide grants).
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> Vec<Rule> {
        self.snapshot().rules_for(user, namespace)
    }

    /// The rules of the role a binding refers to, if it exists.
    pub fn role_rules(&self, kind: &str, namespace: &str, name: &str) -> Option<Vec<Rule>> {
        let idx = self.snapshot();
        let g = Grant {
            namespace: Some(namespace.to_owned()),
            role_kind: kind.to_owned(),
            role_name: name.to_owned(),
            source: "".into(),
            rules: None,
        };
        idx.role_rules(&g).map(|r| r.as_ref().clone())
    }

    /// Whether RBAC allows the request.
    pub fn allows(&self, user: &UserInfo, r: &RequestInfo) -> bool {
        self.allowed_by(user, r).is_some()
    }

    /// The grant that allows the request, as upstream's reason
    /// (`RBAC: allowed by ClusterRoleBinding "x" of ClusterRole "y" to User "z"`).
    pub fn allowed_by(&self, user: &UserInfo, r: &RequestInfo) -> Option<String> {
        let idx = self.snapshot();
        let grant = idx.grants(user).find(|g| {
            // A RoleBinding grants only in its namespace (a request for a namespace object
            // carries the namespace's name as its namespace, as upstream).
            if g.namespace.as_deref().is_some_and(|ns| ns != r.namespace) {
                return false;
            }
            g.rules
                .as_ref()
                .is_some_and(|rules| rules.iter().any(|rule| rule.allows(r)))
        })?;
        Some(format!("RBAC: allowed by {}", grant.source))
    }

    /// The authorizer for the chain.
    pub fn authorizer(self: &Arc<Self>) -> RbacAuthorizer {
        RbacAuthorizer(self.clone())
    }
}

/// The `RBAC` authorization mode.
pub struct RbacAuthorizer(Arc<Rbac>);

#[async_trait]
impl Authorizer for RbacAuthorizer {
    fn name(&self) -> &'static str {
        "RBAC"
    }

    async fn authorize(&self, user: &UserInfo, request: &RequestInfo) -> Decision {
        match self.0.allowed_by(user, request) {
            Some(reason) => Decision::Allow(reason),
            None => Decision::NoOpinion,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;
    use serde_json::json;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        }
    }

    fn objects() -> Objects {
        let mut o = Objects::default();
        o.cluster_roles.insert(
            "/registry/clusterroles/view".into(),
            json!({"metadata": {"name": "view"}, "rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}]}),
        );
        o.roles.insert(
            "/registry/roles/dev/cm-writer".into(),
            json!({"metadata": {"name": "cm-writer", "namespace": "dev"}, "rules": [{"verbs": ["create"], "apiGroups": [""], "resources": ["configmaps"]}]}),
        );
        o.role_bindings.insert(
            "/registry/rolebindings/dev/view".into(),
            json!({"metadata": {"name": "view", "namespace": "dev"},
                   "roleRef": {"kind": "ClusterRole", "name": "view", "apiGroup": "rbac.authorization.k8s.io"},
                   "subjects": [{"kind": "User", "name": "jane"}, {"kind": "ServiceAccount", "name": "robot"}]}),
        );
        o.role_bindings.insert(
            "/registry/rolebindings/dev/writers".into(),
            json!({"metadata": {"name": "writers", "namespace": "dev"},
                   "roleRef": {"kind": "Role", "name": "cm-writer", "apiGroup": "rbac.authorization.k8s.io"},
                   "subjects": [{"kind": "Group", "name": "devs"}]}),
        );
        o.cluster_role_bindings.insert(
            "/registry/clusterrolebindings/everyone-views".into(),
            json!({"metadata": {"name": "everyone-views"},
                   "roleRef": {"kind": "ClusterRole", "name": "view", "apiGroup": "rbac.authorization.k8s.io"},
                   "subjects": [{"kind": "Group", "name": "auditors"}]}),
        );
        o
    }

    fn rbac(o: &Objects) -> Rbac {
        let r = Rbac {
            index: RwLock::new(Arc::new(Index::default())),
            synced: tokio::sync::watch::Sender::new(false),
        };
        r.publish(o);
        r
    }

    #[test]
    fn role_bindings_grant_only_in_their_namespace_cluster_bindings_everywhere() {
        let rbac = rbac(&objects());
        let list_dev = crate::request_info::parse_request(&Method::GET, "/api/v1/namespaces/dev/pods", None);
        let list_prod =
            crate::request_info::parse_request(&Method::GET, "/api/v1/namespaces/prod/pods", None);
        let create_cm =
            crate::request_info::parse_request(&Method::POST, "/api/v1/namespaces/dev/configmaps", None);
        let jane = user("jane", &["system:authenticated"]);
        assert!(rbac.allows(&jane, &list_dev));
        assert!(!rbac.allows(&jane, &list_prod));
        assert!(!rbac.allows(&jane, &create_cm));
        assert!(rbac.allows(&user("bob", &["devs"]), &create_cm));
        assert!(rbac.allows(&user("al", &["auditors"]), &list_prod));
        // A ServiceAccount subject without a namespace is the binding's namespace's.
        assert!(rbac.allows(&user("system:serviceaccount:dev:robot", &[]), &list_dev));
        assert!(!rbac.allows(&user("system:serviceaccount:prod:robot", &[]), &list_dev));
        // An allow says which binding granted it, as upstream's reason.
        assert_eq!(
            rbac.allowed_by(&jane, &list_dev).unwrap(),
            r#"RBAC: allowed by RoleBinding "view/dev" of ClusterRole "view" to User "jane""#
        );
        assert_eq!(
            rbac.allowed_by(&user("al", &["auditors"]), &list_prod).unwrap(),
            r#"RBAC: allowed by ClusterRoleBinding "everyone-views" of ClusterRole "view" to Group "auditors""#
        );
        assert_eq!(
            rbac.allowed_by(&user("system:serviceaccount:dev:robot", &[]), &list_dev)
                .unwrap(),
            r#"RBAC: allowed by RoleBinding "view/dev" of ClusterRole "view" to ServiceAccount "robot/dev""#
        );
        assert_eq!(rbac.rules_for(&jane, "dev").len(), 1);
        assert!(rbac.rules_for(&jane, "").is_empty());
    }

    #[test]
    fn a_binding_to_a_missing_role_grants_nothing() {
        let mut o = objects();
        o.cluster_roles.clear();
        let rbac = rbac(&o);
        let list_dev = crate::request_info::parse_request(&Method::GET, "/api/v1/namespaces/dev/pods", None);
        assert!(!rbac.allows(&user("jane", &[]), &list_dev));
    }

    #[tokio::test]
    async fn follows_the_datastore() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(
            r8s_store::embedded::EmbeddedStore::open(r8s_store::embedded::EmbeddedOptions::new(dir.path()))
                .unwrap(),
        );
        let rbac = Rbac::start(store.clone());
        rbac.wait_synced().await;
        let list = crate::request_info::parse_request(&Method::GET, "/api/v1/namespaces/dev/pods", None);
        let jane = user("jane", &[]);
        assert!(!rbac.allows(&jane, &list));
        for (k, v) in [
            (
                "/registry/clusterroles/view",
                objects().cluster_roles["/registry/clusterroles/view"].clone(),
            ),
            (
                "/registry/rolebindings/dev/view",
                objects().role_bindings["/registry/rolebindings/dev/view"].clone(),
            ),
        ] {
            store
                .create(k, serde_json::to_vec(&v).unwrap().into())
                .await
                .unwrap();
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !rbac.allows(&jane, &list) {
            assert!(
                std::time::Instant::now() < deadline,
                "the binding never took effect"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        store
            .delete("/registry/rolebindings/dev/view", None)
            .await
            .unwrap();
        while rbac.allows(&jane, &list) {
            assert!(
                std::time::Instant::now() < deadline,
                "the deletion never took effect"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}
