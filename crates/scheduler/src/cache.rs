//! The node cache (upstream `internal/cache`): per node, its allocatable resources and the pods
//! bound to it with what they request and which host ports they hold. Pods the scheduler has
//! just bound are *assumed* into it at once, so the next decision counts them even before the
//! watch shows them bound.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};

pub use r8s_api::resources::{HostPort, Resources};

/// Upstream's defaults for scoring containers that request nothing (`DefaultMilliCPURequest`,
/// `DefaultMemoryRequest`), so empty requests do not all pile onto one node.
pub const DEFAULT_MILLI_CPU: i64 = 100;
pub const DEFAULT_MEMORY: i64 = 200 * 1024 * 1024;

/// The defaults as a resource list, for [`r8s_api::resources::pod_requests_non_missing`].
fn non_missing_defaults() -> &'static r8s_api::resources::ResourceList {
    use r8s_api::quantity::Quantity;
    static DEFAULTS: std::sync::OnceLock<r8s_api::resources::ResourceList> = std::sync::OnceLock::new();
    DEFAULTS.get_or_init(|| {
        r8s_api::resources::ResourceList::from([
            ("cpu".to_string(), Quantity::from_milli(DEFAULT_MILLI_CPU as i128)),
            ("memory".to_string(), Quantity::from_units(DEFAULT_MEMORY)),
        ])
    })
}

/// A pod as the scheduler needs it, computed once.
#[derive(Debug)]
pub struct PodInfo {
    pub pod: Arc<Pod>,
    pub key: String,
    /// What the pod asks for (upstream `PodRequests`: containers and sidecars, the largest init
    /// step, overhead), one pod slot included.
    pub requests: Resources,
    /// The same with upstream's defaults for unset cpu and memory, for scoring.
    pub non_zero: Resources,
    /// The host ports the pod holds.
    pub host_ports: Vec<HostPort>,
}

impl PodInfo {
    pub fn new(pod: Arc<Pod>) -> Self {
        let key = format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or(""),
            pod.metadata.name.as_deref().unwrap_or("")
        );
        let (mut requests, mut non_zero, mut host_ports) = Default::default();
        if let Some(spec) = &pod.spec {
            (requests, host_ports) = r8s_api::predicates::pod_usage(spec);
            non_zero = Resources::from_list(&r8s_api::resources::pod_requests_non_missing(
                spec,
                non_missing_defaults(),
            ));
        }
        requests.pods = 1;
        non_zero.pods = 1;
        Self {
            pod,
            key,
            requests,
            non_zero,
            host_ports,
        }
    }

    pub fn priority(&self) -> i32 {
        self.pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
    }
}

#[derive(Clone, Debug)]
pub struct NodeInfo {
    pub node: Arc<Node>,
    pub name: String,
    pub allocatable: Resources,
    pub requested: Resources,
    pub non_zero_requested: Resources,
    pub pods: HashMap<String, Arc<PodInfo>>,
    pub used_ports: Vec<HostPort>,
}

impl NodeInfo {
    fn new(node: Arc<Node>) -> Self {
        let mut n = Self {
            name: node.metadata.name.clone().unwrap_or_default(),
            node: node.clone(),
            allocatable: Resources::default(),
            requested: Resources::default(),
            non_zero_requested: Resources::default(),
            pods: HashMap::new(),
            used_ports: Vec::new(),
        };
        n.set_node(node);
        n
    }

    fn set_node(&mut self, node: Arc<Node>) {
        self.allocatable = r8s_api::predicates::allocatable(&node);
        self.node = node;
    }

    pub(crate) fn add_pod(&mut self, p: Arc<PodInfo>) {
        self.requested.add(&p.requests);
        self.non_zero_requested.add(&p.non_zero);
        self.used_ports.extend(p.host_ports.iter().cloned());
        self.pods.insert(p.key.clone(), p);
    }

    fn remove_pod(&mut self, key: &str) {
        if let Some(p) = self.pods.remove(key) {
            self.requested.sub(&p.requests);
            self.non_zero_requested.sub(&p.non_zero);
            for hp in &p.host_ports {
                if let Some(i) = self.used_ports.iter().position(|u| u == hp) {
                    self.used_ports.remove(i);
                }
            }
        }
    }

    /// What the node offers and holds, as the general predicates read it.
    pub fn usage(&self) -> r8s_api::predicates::NodeUsage {
        r8s_api::predicates::NodeUsage {
            allocatable: self.allocatable.clone(),
            requested: self.requested.clone(),
            used_ports: self.used_ports.clone(),
        }
    }

    /// A node with only allocatable set, for tests and the simulated cluster.
    pub fn for_node(node: Arc<Node>) -> Self {
        Self::new(node)
    }

    pub fn with_pod(mut self, pod: Arc<Pod>) -> Self {
        self.add_pod(Arc::new(PodInfo::new(pod)));
        self
    }
}

/// Every node, and where each bound (or assumed) pod is.
#[derive(Clone, Default)]
pub struct Cache {
    pub nodes: HashMap<String, NodeInfo>,
    /// Node names in a stable order, for round-robin search.
    pub order: Vec<String>,
    pod_node: HashMap<String, String>,
    assumed: HashMap<String, String>,
    /// Pods with required anti-affinity terms (every new pod must respect them).
    anti_affinity: std::collections::HashSet<String>,
    /// Pods waiting for a node their preemption is clearing (`status.nominatedNodeName`), by
    /// pod key: (node, pod).
    nominated: HashMap<String, (String, Arc<PodInfo>)>,
    /// Each namespace's labels (affinity terms' namespaceSelector).
    pub namespace_labels: HashMap<String, std::collections::BTreeMap<String, String>>,
    /// Services' selectors by `<ns>/<name>`: (namespace, selector) — default spreading.
    pub services: HashMap<String, (String, std::collections::BTreeMap<String, String>)>,
    /// ReplicaSets' and StatefulSets' selectors by `<Kind>/<ns>/<name>` — default spreading.
    pub controllers: HashMap<String, k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    /// PersistentVolumeClaims by `<ns>/<name>`.
    pub claims: HashMap<String, ClaimInfo>,
    /// The node selector each PersistentVolume requires (`spec.nodeAffinity.required`), by
    /// name; `None`: any node.
    pub volumes: HashMap<String, Option<k8s_openapi::api::core::v1::NodeSelector>>,
    /// The StorageClasses whose claims wait for their first pod (`WaitForFirstConsumer`).
    pub waiting_classes: std::collections::HashSet<String>,
}

/// What the scheduler knows of a claim.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimInfo {
    /// The volume it is bound to.
    pub volume: Option<String>,
    pub class: String,
    /// The node already chosen for it (`volume.kubernetes.io/selected-node`).
    pub selected_node: Option<String>,
}

impl Cache {
    /// The claims `pod` uses, by name, with what is known of each (`None`: not found), and
    /// whether the claim is an ephemeral volume's (`<pod>-<volume>`, made by its controller).
    fn pod_claims<'a>(
        &'a self,
        pod: &'a Pod,
    ) -> impl Iterator<Item = (String, Option<&'a ClaimInfo>, bool)> + 'a {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("");
        let pod_name = pod.metadata.name.as_deref().unwrap_or("");
        pod.spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten()
            .filter_map(move |v| match (&v.persistent_volume_claim, &v.ephemeral) {
                (Some(pvc), _) => Some((pvc.claim_name.clone(), false)),
                (None, Some(_)) => Some((format!("{pod_name}-{}", v.name), true)),
                _ => None,
            })
            .map(move |(name, ephemeral)| {
                let info = self.claims.get(&format!("{ns}/{name}"));
                (name, info, ephemeral)
            })
    }

    /// Upstream's VolumeBinding PreFilter: every claim the pod uses must exist, and be bound
    /// unless its class waits for its first pod (then the scheduler chooses the node and the
    /// class's provisioner follows). The reason, when the pod cannot go anywhere.
    pub fn volume_check(&self, pod: &Pod) -> Option<String> {
        let mut unbound = false;
        for (name, claim, ephemeral) in self.pod_claims(pod) {
            match claim {
                None if ephemeral => {
                    return Some(format!(
                    "waiting for ephemeral volume controller to create the persistentvolumeclaim \"{name}\""
                ))
                }
                None => return Some(format!("persistentvolumeclaim \"{name}\" not found")),
                Some(c) if c.volume.is_none() && !self.waiting_classes.contains(&c.class) => unbound = true,
                Some(_) => {}
            }
        }
        unbound.then(|| "pod has unbound immediate PersistentVolumeClaims".to_owned())
    }

    /// Upstream's VolumeBinding Filter: the volumes bound to the pod's claims must allow the
    /// node (a local volume is on one node), and a waiting claim whose node is chosen already
    /// goes there.
    pub fn volume_node_conflict(&self, pod: &Pod, node: &NodeInfo) -> Option<String> {
        for (_, claim, _) in self.pod_claims(pod) {
            let Some(c) = claim else { continue };
            match &c.volume {
                Some(v) => {
                    let Some(Some(sel)) = self.volumes.get(v) else {
                        continue;
                    };
                    let fits = sel.node_selector_terms.iter().any(|t| {
                        r8s_api::node_affinity::match_term(t, &node.name, node.node.metadata.labels.as_ref())
                    });
                    if !fits {
                        return Some("node(s) had volume node affinity conflict".to_owned());
                    }
                }
                None => {
                    if c.selected_node.as_deref().is_some_and(|n| n != node.name) {
                        return Some("node(s) did not match the node chosen for its claim".to_owned());
                    }
                }
            }
        }
        None
    }

    /// The claims of `pod` that wait for this scheduling decision: unbound, of a waiting
    /// class, no node chosen yet (`<ns>/<name>`).
    pub fn claims_to_place(&self, pod: &Pod) -> Vec<String> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("");
        self.pod_claims(pod)
            .filter(|(_, c, _)| {
                c.is_some_and(|c| {
                    c.volume.is_none() && c.selected_node.is_none() && self.waiting_classes.contains(&c.class)
                })
            })
            .map(|(n, _, _)| format!("{ns}/{n}"))
            .collect()
    }

    /// Whether every claim `pod` uses is bound.
    pub fn claims_bound(&self, pod: &Pod) -> bool {
        self.pod_claims(pod)
            .all(|(_, c, _)| c.is_some_and(|c| c.volume.is_some()))
    }
}

fn has_required_anti_affinity(p: &PodInfo) -> bool {
    p.pod
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())
        .is_some_and(|t| !t.is_empty())
}

impl Cache {
    pub fn set_node(&mut self, node: Arc<Node>) {
        let name = node.metadata.name.clone().unwrap_or_default();
        match self.nodes.get_mut(&name) {
            Some(n) => n.set_node(node),
            None => {
                self.nodes.insert(name.clone(), NodeInfo::new(node));
                self.order.push(name);
            }
        }
    }

    pub fn remove_node(&mut self, name: &str) {
        self.nodes.remove(name);
        self.order.retain(|n| n != name);
    }

    /// A pod the watch shows bound to a node (confirming an assumption if there was one).
    pub fn set_pod(&mut self, pod: Arc<Pod>) {
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            return;
        };
        let info = Arc::new(PodInfo::new(pod));
        self.remove_pod(&info.key);
        self.assumed.remove(&info.key);
        self.pod_node.insert(info.key.clone(), node.clone());
        if !self.nodes.contains_key(&node) {
            // A pod on a node not yet seen: keep an entry so it counts once the node arrives.
            let mut placeholder = Node::default();
            placeholder.metadata.name = Some(node.clone());
            self.set_node(Arc::new(placeholder));
        }
        if has_required_anti_affinity(&info) {
            self.anti_affinity.insert(info.key.clone());
        }
        if let Some(n) = self.nodes.get_mut(&node) {
            n.add_pod(info);
        }
    }

    pub fn remove_pod(&mut self, key: &str) {
        self.anti_affinity.remove(key);
        if let Some(node) = self.pod_node.remove(key) {
            if let Some(n) = self.nodes.get_mut(&node) {
                n.remove_pod(key);
            }
        }
    }

    /// Count a pod on `node` before its binding is seen.
    pub fn assume(&mut self, info: Arc<PodInfo>, node: &str) {
        self.remove_pod(&info.key);
        self.pod_node.insert(info.key.clone(), node.to_string());
        self.assumed.insert(info.key.clone(), node.to_string());
        if has_required_anti_affinity(&info) {
            self.anti_affinity.insert(info.key.clone());
        }
        if let Some(n) = self.nodes.get_mut(node) {
            n.add_pod(info);
        }
    }

    /// `info` waits for `node` (its nominatedNodeName), or for none.
    pub fn nominate(&mut self, info: Arc<PodInfo>, node: Option<&str>) {
        match node.filter(|n| !n.is_empty()) {
            Some(n) => {
                self.nominated.insert(info.key.clone(), (n.to_string(), info));
            }
            None => {
                self.nominated.remove(&info.key);
            }
        }
    }

    pub fn unnominate(&mut self, key: &str) {
        self.nominated.remove(key);
    }

    /// The pods nominated to `node` that `pod` must leave room for: other pods of at least its
    /// priority (upstream's `addNominatedPods`).
    pub fn nominated_for<'a>(
        &'a self,
        node: &'a str,
        pod: &'a PodInfo,
    ) -> impl Iterator<Item = &'a Arc<PodInfo>> + 'a {
        let prio = pod.priority();
        self.nominated
            .values()
            .filter(move |(n, p)| n == node && p.key != pod.key && p.priority() >= prio)
            .map(|(_, p)| p)
    }

    /// Put back a pod taken off `node` by `remove_pod` (preemption's what-if).
    pub fn restore(&mut self, info: Arc<PodInfo>, node: &str) {
        self.pod_node.insert(info.key.clone(), node.to_string());
        if has_required_anti_affinity(&info) {
            self.anti_affinity.insert(info.key.clone());
        }
        if let Some(n) = self.nodes.get_mut(node) {
            n.add_pod(info);
        }
    }

    /// The binding failed: forget the assumption.
    pub fn forget(&mut self, key: &str) {
        if self.assumed.remove(key).is_some() {
            self.remove_pod(key);
        }
    }

    /// Bound pods with required anti-affinity, with their nodes.
    pub fn pods_with_anti_affinity(&self) -> impl Iterator<Item = (&NodeInfo, &PodInfo)> + '_ {
        self.anti_affinity.iter().filter_map(|k| {
            let node = self.nodes.get(self.pod_node.get(k)?)?;
            Some((node, node.pods.get(k)?.as_ref()))
        })
    }

    pub fn is_assumed(&self, key: &str) -> bool {
        self.assumed.contains_key(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, node: Option<&str>, cpu: Option<&str>) -> Arc<Pod> {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "c", "image": "i",
                    "resources": cpu.map(|c| serde_json::json!({"requests": {"cpu": c, "memory": "64Mi"}})).unwrap_or(serde_json::json!({})),
                    "ports": [{"containerPort": 80, "hostPort": 8080}]}],
                "initContainers": [{"name": "i", "image": "i", "resources": {"requests": {"cpu": "2"}}}]
            }
        }))
        .map(Arc::new)
        .unwrap()
    }

    fn node(name: &str) -> Arc<Node> {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}
        }))
        .map(Arc::new)
        .unwrap()
    }

    #[test]
    fn pod_requests_take_init_containers_and_defaults_into_account() {
        let p = PodInfo::new(pod("a", None, Some("500m")));
        // The init container's 2 cpu is more than the containers' 500m.
        assert_eq!(p.requests.milli_cpu, 2000);
        assert_eq!(p.requests.memory, 64 << 20);
        assert_eq!(p.requests.pods, 1);
        assert_eq!(
            p.host_ports,
            [HostPort {
                protocol: "TCP".into(),
                ip: "0.0.0.0".into(),
                port: 8080
            }]
        );
        // Scoring fills unset cpu and memory with upstream's defaults in every container, init
        // containers included: the app container's default 100m is less than the init's 2 cpu.
        let empty = PodInfo::new(pod("b", None, None));
        assert_eq!(empty.non_zero.milli_cpu, 2000);
        assert_eq!(empty.non_zero.memory, DEFAULT_MEMORY);
        let bare: Arc<Pod> = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "c", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "i"}]}
        }))
        .map(Arc::new)
        .unwrap();
        let bare = PodInfo::new(bare);
        assert_eq!(
            (bare.non_zero.milli_cpu, bare.non_zero.memory),
            (DEFAULT_MILLI_CPU, DEFAULT_MEMORY)
        );
        assert_eq!(bare.requests.milli_cpu, 0);
    }

    #[test]
    fn sidecars_are_counted_as_quota_and_the_kubelet_count_them() {
        // A sidecar (restartable init container) runs beside the app container: 300m + 200m,
        // as upstream's PodRequests; the same pod through quota's accounting gives the same.
        let json = serde_json::json!({
            "metadata": {"name": "s", "namespace": "default"},
            "spec": {
                "initContainers": [{"name": "proxy", "image": "i", "restartPolicy": "Always",
                    "resources": {"requests": {"cpu": "300m"}}}],
                "containers": [{"name": "app", "image": "i", "resources": {"requests": {"cpu": "200m"}}}]
            }
        });
        let p = PodInfo::new(Arc::new(serde_json::from_value(json.clone()).unwrap()));
        assert_eq!(p.requests.milli_cpu, 500);
        let quota = r8s_api::quota::pod_effective(&json["spec"], "requests");
        assert_eq!(quota["cpu"].milli_value(), 500);
    }

    #[test]
    fn assumed_pods_count_until_confirmed_or_forgotten() {
        let mut c = Cache::default();
        c.set_node(node("n1"));
        assert_eq!(c.nodes["n1"].allocatable.milli_cpu, 4000);
        let info = Arc::new(PodInfo::new(pod("a", None, Some("1"))));
        c.assume(info, "n1");
        assert_eq!(c.nodes["n1"].requested.milli_cpu, 2000);
        assert!(c.is_assumed("default/a"));
        // The watch shows it bound: counted once.
        c.set_pod(pod("a", Some("n1"), Some("1")));
        assert_eq!(c.nodes["n1"].requested.milli_cpu, 2000);
        assert!(!c.is_assumed("default/a"));
        c.remove_pod("default/a");
        assert_eq!(c.nodes["n1"].requested, Resources::default());
        // A failed binding is forgotten.
        c.assume(Arc::new(PodInfo::new(pod("b", None, None))), "n1");
        c.forget("default/b");
        assert_eq!(c.nodes["n1"].requested.pods, 0);
        assert!(c.nodes["n1"].used_ports.is_empty());
    }
}
