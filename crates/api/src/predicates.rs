//! The general predicates (upstream's scheduler `noderesources.Fits`, `nodename.Fits`,
//! `nodeports.Fits`, `nodeaffinity` and the kubelet's `generalFilter`): does a pod fit a node
//! that already holds some pods. The scheduler's filter plugins and the kubelet's admission both
//! wrap these, each in its own words (a FailedScheduling histogram line, a rejected pod's
//! reason), so the scheduler never places a pod the kubelet would refuse for the same cause.

use k8s_openapi::api::core::v1::{Node, PodSpec, Taint};

use crate::resources::{host_ports, list_of, pod_requests, HostPort, Resources};

/// Upstream's words for each failed predicate (the scheduler's FailedScheduling histogram and the
/// kubelet's "Predicate … failed" rejections both show them).
pub const NODE_AFFINITY_MISMATCH: &str = "node(s) didn't match Pod's node affinity/selector";
pub const NODE_NAME_MISMATCH: &str = "node(s) didn't match the requested node name";
pub const HOST_PORTS_TAKEN: &str = "node(s) didn't have free ports for the requested pod ports";

/// What a node offers and what its pods already hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeUsage {
    pub allocatable: Resources,
    pub requested: Resources,
    pub used_ports: Vec<HostPort>,
}

/// The node's allocatable resources (its capacity when it reports no allocatable).
pub fn allocatable(node: &Node) -> Resources {
    let status = node.status.as_ref();
    Resources::from_list(&list_of(
        status.and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref())),
    ))
}

/// What one pod holds on a node: its requests (one pod slot included) and host ports.
pub fn pod_usage(spec: &PodSpec) -> (Resources, Vec<HostPort>) {
    let mut r = Resources::from_list(&pod_requests(spec));
    r.pods = 1;
    (r, host_ports(spec))
}

impl NodeUsage {
    /// A node and the pods on it.
    pub fn of<'a>(node: &Node, pods: impl IntoIterator<Item = &'a PodSpec>) -> Self {
        let mut usage = NodeUsage {
            allocatable: allocatable(node),
            ..Default::default()
        };
        for spec in pods {
            let (r, ports) = pod_usage(spec);
            usage.requested.add(&r);
            usage.used_ports.extend(ports);
        }
        usage
    }
}

/// A resource the node has too little of for the pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Insufficient {
    /// `pods`, `cpu`, `memory`, `ephemeral-storage` or a scalar resource's name.
    pub resource: String,
    pub requested: i64,
    pub used: i64,
    pub capacity: i64,
}

/// What the node lacks for a pod requesting `want`, in upstream's order (pods, cpu, memory,
/// ephemeral-storage); empty when it fits. A pod asking for none of a resource always fits it.
pub fn insufficient_resources(want: &Resources, usage: &NodeUsage) -> Vec<Insufficient> {
    let (alloc, used) = (&usage.allocatable, &usage.requested);
    let checks = [
        ("pods", 1, used.pods, alloc.pods),
        ("cpu", want.milli_cpu, used.milli_cpu, alloc.milli_cpu),
        ("memory", want.memory, used.memory, alloc.memory),
        (
            "ephemeral-storage",
            want.ephemeral,
            used.ephemeral,
            alloc.ephemeral,
        ),
    ];
    let mut out: Vec<Insufficient> = checks
        .into_iter()
        .filter(|(name, requested, used, capacity)| {
            if *name == "pods" {
                used + 1 > *capacity
            } else {
                *requested > 0 && *requested > capacity - used
            }
        })
        .map(|(resource, requested, used, capacity)| Insufficient {
            resource: resource.to_string(),
            requested,
            used,
            capacity,
        })
        .collect();
    // Then the scalar resources, by name (a node without one has none of it).
    for (name, requested) in &want.scalar {
        let (used, capacity) = (used.scalar(name), alloc.scalar(name));
        if *requested > 0 && *requested > capacity - used {
            out.push(Insufficient {
                resource: name.clone(),
                requested: *requested,
                used,
                capacity,
            });
        }
    }
    out
}

/// The pod names no node, or this one (upstream `nodename.Fits`).
pub fn node_name_fits(spec: Option<&PodSpec>, node_name: &str) -> bool {
    match spec.and_then(|s| s.node_name.as_deref()) {
        Some(n) if !n.is_empty() => n == node_name,
        _ => true,
    }
}

/// None of the pod's host ports is taken on the node (upstream `nodeports.Fits`).
pub fn host_ports_fit(wanted: &[HostPort], used: &[HostPort]) -> bool {
    !wanted.iter().any(|w| used.iter().any(|u| w.conflicts(u)))
}

/// The node matches the pod's node selector and required node affinity.
pub fn node_affinity_fits(spec: Option<&PodSpec>, node: &Node) -> bool {
    crate::node_affinity::matches_required(spec, node)
}

/// The node's taints.
pub fn taints(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or(&[])
}

/// The first NoExecute taint of the node the pod does not tolerate (the kubelet admits no pod
/// that the node lifecycle controller would evict at once).
pub fn untolerated_no_execute<'a>(spec: Option<&PodSpec>, node: &'a Node) -> Option<&'a Taint> {
    let tolerations = spec.and_then(|s| s.tolerations.as_deref()).unwrap_or(&[]);
    crate::taints::find_untolerated(taints(node), tolerations, crate::taints::no_execute)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node() -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n1"},
            "spec": {"taints": [{"key": "k", "effect": "NoExecute"}]},
            "status": {"allocatable": {"cpu": "1", "memory": "1Gi", "pods": "2"}}
        }))
        .unwrap()
    }

    fn spec(v: serde_json::Value) -> PodSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn extended_resources_are_counted_by_name() {
        let n: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1"},
            "status": {"allocatable": {"cpu": "4", "pods": "10", "example.com/foo": "5",
                "hugepages-2Mi": "0"}}
        }))
        .unwrap();
        let two = spec(json!({"containers": [{"name": "a",
            "resources": {"requests": {"example.com/foo": "2"}, "limits": {"example.com/foo": "2"}}}]}));
        let usage = NodeUsage::of(&n, [&two, &two]);
        assert_eq!(usage.requested.scalar("example.com/foo"), 4);
        assert_eq!(usage.allocatable.scalar("example.com/foo"), 5);
        // 4 of 5 taken: another 2 do not fit, 1 does.
        let (want, _) = pod_usage(&two);
        let short = insufficient_resources(&want, &usage);
        assert_eq!(short.len(), 1, "{short:?}");
        assert_eq!(short[0].resource, "example.com/foo");
        assert_eq!((short[0].requested, short[0].used, short[0].capacity), (2, 4, 5));
        let one = spec(json!({"containers": [{"name": "a",
            "resources": {"limits": {"example.com/foo": "1"}}}]}));
        assert!(insufficient_resources(&pod_usage(&one).0, &usage).is_empty());
        // A node without the resource has none of it; one pod leaving frees its share.
        let bar = spec(json!({"containers": [{"name": "a",
            "resources": {"requests": {"example.com/bar": "1"}}}]}));
        assert_eq!(insufficient_resources(&pod_usage(&bar).0, &usage)[0].capacity, 0);
        let mut freed = usage.clone();
        freed.requested.sub(&pod_usage(&two).0);
        assert!(insufficient_resources(&want, &freed).is_empty());
        assert!(freed.requested.scalar.contains_key("example.com/foo"));
        freed.requested.sub(&pod_usage(&two).0);
        assert!(freed.requested.scalar.is_empty(), "no zero entries");
        // Not scalar: the native names and a quota's requests.* form.
        assert!(crate::resources::is_scalar_resource("example.com/foo"));
        assert!(crate::resources::is_scalar_resource("hugepages-1Gi"));
        assert!(!crate::resources::is_scalar_resource("cpu"));
        assert!(!crate::resources::is_scalar_resource("requests.example.com/foo"));
    }

    #[test]
    fn resources_ports_names_and_taints() {
        let n = node();
        let running = spec(json!({"containers": [{"name": "a",
            "resources": {"requests": {"cpu": "600m"}},
            "ports": [{"containerPort": 80, "hostPort": 80}]}]}));
        let usage = NodeUsage::of(&n, [&running]);
        assert_eq!(usage.requested.milli_cpu, 600);
        assert_eq!(usage.requested.pods, 1);
        let new = spec(json!({"containers": [{"name": "b",
            "resources": {"requests": {"cpu": "500m"}},
            "ports": [{"containerPort": 8080, "hostPort": 80}]}]}));
        let (want, ports) = pod_usage(&new);
        let short = insufficient_resources(&want, &usage);
        assert_eq!(
            short,
            vec![Insufficient {
                resource: "cpu".into(),
                requested: 500,
                used: 600,
                capacity: 1000
            }]
        );
        assert!(!host_ports_fit(&ports, &usage.used_ports));
        assert!(node_name_fits(Some(&new), "n1"));
        assert!(!node_name_fits(
            Some(&spec(json!({"containers": [], "nodeName": "n2"}))),
            "n1"
        ));
        assert_eq!(
            untolerated_no_execute(Some(&new), &n).map(|t| t.key.as_str()),
            Some("k")
        );
        let tolerant = spec(json!({"containers": [], "tolerations": [{"operator": "Exists"}]}));
        assert!(untolerated_no_execute(Some(&tolerant), &n).is_none());
        // A third pod exceeds the node's two pod slots.
        let full = NodeUsage::of(&n, [&running, &running]);
        assert_eq!(
            insufficient_resources(&Resources::default(), &full)[0].resource,
            "pods"
        );
    }
}
