//! The node cache (upstream `internal/cache`): per node, its allocatable resources and the pods
//! bound to it with what they request and which host ports they hold. Pods the scheduler has
//! just bound are *assumed* into it at once, so the next decision counts them even before the
//! watch shows them bound.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};

/// Resource amounts: cpu in millicores, memory and ephemeral storage in bytes, pods.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    pub milli_cpu: i64,
    pub memory: i64,
    pub ephemeral: i64,
    pub pods: i64,
}

impl Resources {
    fn add(&mut self, o: &Resources) {
        self.milli_cpu += o.milli_cpu;
        self.memory += o.memory;
        self.ephemeral += o.ephemeral;
        self.pods += o.pods;
    }
    fn sub(&mut self, o: &Resources) {
        self.milli_cpu -= o.milli_cpu;
        self.memory -= o.memory;
        self.ephemeral -= o.ephemeral;
        self.pods -= o.pods;
    }
    fn max(&mut self, o: &Resources) {
        self.milli_cpu = self.milli_cpu.max(o.milli_cpu);
        self.memory = self.memory.max(o.memory);
        self.ephemeral = self.ephemeral.max(o.ephemeral);
    }
}

/// Upstream's defaults for scoring containers that request nothing (`DefaultMilliCPURequest`,
/// `DefaultMemoryRequest`), so empty requests do not all pile onto one node.
pub const DEFAULT_MILLI_CPU: i64 = 100;
pub const DEFAULT_MEMORY: i64 = 200 * 1024 * 1024;

fn quantity(
    map: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    name: &str,
    milli: bool,
) -> i64 {
    map.and_then(|m| m.get(name))
        .and_then(|q| {
            if milli {
                r8s_api::quantity::parse_milli(&q.0).ok()
            } else {
                r8s_api::quantity::parse_value(&q.0).ok()
            }
        })
        .map(|v| v.clamp(i64::MIN as i128, i64::MAX as i128) as i64)
        .unwrap_or(0)
}

/// A pod as the scheduler needs it, computed once.
#[derive(Debug)]
pub struct PodInfo {
    pub pod: Arc<Pod>,
    pub key: String,
    /// What the pod asks for: the larger of its containers' sum and any init container, plus
    /// overhead (upstream `computePodResourceRequest`).
    pub requests: Resources,
    /// The same with upstream's defaults for unset cpu and memory, for scoring.
    pub non_zero: Resources,
    /// (protocol, hostIP, hostPort) of each host port.
    pub host_ports: Vec<(String, String, i32)>,
}

impl PodInfo {
    pub fn new(pod: Arc<Pod>) -> Self {
        let key = format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or(""),
            pod.metadata.name.as_deref().unwrap_or("")
        );
        let mut requests = Resources::default();
        let mut non_zero = Resources::default();
        let mut host_ports = Vec::new();
        if let Some(spec) = &pod.spec {
            for c in &spec.containers {
                let r = c.resources.as_ref().and_then(|r| r.requests.as_ref());
                let cpu = quantity(r, "cpu", true);
                let mem = quantity(r, "memory", false);
                requests.add(&Resources {
                    milli_cpu: cpu,
                    memory: mem,
                    ephemeral: quantity(r, "ephemeral-storage", false),
                    pods: 0,
                });
                non_zero.add(&Resources {
                    milli_cpu: if r.is_some_and(|r| r.contains_key("cpu")) {
                        cpu
                    } else {
                        DEFAULT_MILLI_CPU
                    },
                    memory: if r.is_some_and(|r| r.contains_key("memory")) {
                        mem
                    } else {
                        DEFAULT_MEMORY
                    },
                    ..Default::default()
                });
                for p in c.ports.iter().flatten() {
                    if let Some(hp) = p.host_port.filter(|p| *p > 0) {
                        host_ports.push((
                            p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                            p.host_ip.clone().unwrap_or_else(|| "0.0.0.0".into()),
                            hp,
                        ));
                    }
                }
            }
            for c in spec.init_containers.iter().flatten() {
                let r = c.resources.as_ref().and_then(|r| r.requests.as_ref());
                requests.max(&Resources {
                    milli_cpu: quantity(r, "cpu", true),
                    memory: quantity(r, "memory", false),
                    ephemeral: quantity(r, "ephemeral-storage", false),
                    pods: 0,
                });
            }
            if let Some(o) = &spec.overhead {
                requests.add(&Resources {
                    milli_cpu: quantity(Some(o), "cpu", true),
                    memory: quantity(Some(o), "memory", false),
                    ..Default::default()
                });
            }
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
    pub used_ports: Vec<(String, String, i32)>,
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
        let status = node.status.as_ref();
        let alloc = status.and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref()));
        self.allocatable = Resources {
            milli_cpu: quantity(alloc, "cpu", true),
            memory: quantity(alloc, "memory", false),
            ephemeral: quantity(alloc, "ephemeral-storage", false),
            pods: quantity(alloc, "pods", false),
        };
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
        assert_eq!(p.host_ports, [("TCP".to_string(), "0.0.0.0".to_string(), 8080)]);
        let empty = PodInfo::new(pod("b", None, None));
        assert_eq!(empty.non_zero.milli_cpu, DEFAULT_MILLI_CPU);
        assert_eq!(empty.non_zero.memory, DEFAULT_MEMORY);
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
