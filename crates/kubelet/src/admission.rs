//! Kubelet admission (upstream `pkg/kubelet/lifecycle/predicate.go`): before a pod's first
//! start, the node checks again what the scheduler checked — room for the pod's requests among
//! the pods it has already admitted, node selector and affinity, node name, host ports — and
//! that no NoExecute taint is untolerated. A pod that fails is rejected: phase Failed with the
//! first failure's reason (`OutOfcpu`, `OutOfmemory`, `OutOfpods`, a predicate's name) and
//! message "Pod was rejected: …". The checks are the general predicates of `r8s_api::predicates`,
//! the same the scheduler's filter plugins wrap.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use r8s_api::predicates::{
    host_ports_fit, insufficient_resources, node_affinity_fits, node_name_fits, pod_usage,
    untolerated_no_execute, NodeUsage, HOST_PORTS_TAKEN, NODE_AFFINITY_MISMATCH, NODE_NAME_MISMATCH,
};

/// Why a pod was not admitted: the status reason and the message after "Pod was rejected: ".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    pub reason: String,
    pub message: String,
}

/// Admit `pod` onto `node`, which already runs `others` (the admitted, not yet finished pods).
pub fn admit(pod: &Pod, node: &Node, others: &[Arc<Pod>]) -> Result<(), Rejection> {
    let usage = NodeUsage::of(node, others.iter().filter_map(|o| o.spec.as_ref()));
    let spec = pod.spec.as_ref();
    let (want, ports) = spec.map(pod_usage).unwrap_or_default();
    // Resources first, in upstream's order: pods, cpu, memory, ephemeral-storage.
    if let Some(short) = insufficient_resources(&want, &usage).into_iter().next() {
        let name = short.resource;
        return Err(Rejection {
            reason: format!("OutOf{name}"),
            message: format!(
                "Node didn't have enough resource: {name}, requested: {}, used: {}, capacity: {}",
                short.requested, short.used, short.capacity
            ),
        });
    }
    let node_name = node.metadata.name.as_deref().unwrap_or("");
    // The predicates in upstream's order, each failure in the scheduler plugin's words.
    let checks: [(&str, bool, &str); 3] = [
        (
            "NodeAffinity",
            node_affinity_fits(spec, node),
            NODE_AFFINITY_MISMATCH,
        ),
        ("NodeName", node_name_fits(spec, node_name), NODE_NAME_MISMATCH),
        (
            "NodePorts",
            host_ports_fit(&ports, &usage.used_ports),
            HOST_PORTS_TAKEN,
        ),
    ];
    if let Some((name, _, desc)) = checks.into_iter().find(|(_, ok, _)| !ok) {
        return Err(Rejection {
            reason: name.to_string(),
            message: format!("Predicate {name} failed: {desc}"),
        });
    }
    if untolerated_no_execute(spec, node).is_some() {
        return Err(Rejection {
            reason: "TaintToleration".into(),
            message: "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate"
                .into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node() -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": {"disk": "ssd"}},
            "status": {"allocatable": {"cpu": "2", "memory": "1Gi", "pods": "3"}}
        }))
        .unwrap()
    }

    fn pod(name: &str, spec: serde_json::Value) -> Arc<Pod> {
        let mut spec = spec;
        spec["nodeName"] = json!("n1");
        if spec.get("containers").is_none() {
            spec["containers"] = json!([{"name": "c", "image": "busybox"}]);
        }
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "d"}, "spec": spec}))
                .unwrap(),
        )
    }

    fn cpu(name: &str, amount: &str) -> Arc<Pod> {
        pod(
            name,
            json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": amount}}}]}),
        )
    }

    #[test]
    fn resources_as_upstream() {
        let others = [cpu("a", "1500m")];
        let err = admit(&cpu("b", "1"), &node(), &others).unwrap_err();
        assert_eq!(err.reason, "OutOfcpu");
        assert_eq!(
            err.message,
            "Node didn't have enough resource: cpu, requested: 1000, used: 1500, capacity: 2000"
        );
        assert!(admit(&cpu("b", "500m"), &node(), &others).is_ok());
        let mem = pod(
            "m",
            json!({"containers": [{"name": "c", "resources": {"requests": {"memory": "2Gi"}}}]}),
        );
        let err = admit(&mem, &node(), &[]).unwrap_err();
        assert_eq!(
            (err.reason.as_str(), err.message.as_str()),
            (
                "OutOfmemory",
                "Node didn't have enough resource: memory, requested: 2147483648, used: 0, capacity: 1073741824"
            )
        );
        let full = [cpu("a", "1m"), cpu("b", "1m"), cpu("c", "1m")];
        let err = admit(&cpu("d", "1m"), &node(), &full).unwrap_err();
        assert_eq!(
            (err.reason.as_str(), err.message.as_str()),
            (
                "OutOfpods",
                "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3"
            )
        );
    }

    #[test]
    fn sidecars_count_beside_the_app_containers() {
        // 1200m sidecar + 900m app container: 2100m of the node's 2 cpu, as the scheduler and
        // quota count it (not the larger of the two).
        let sidecar = pod(
            "side",
            json!({
                "initContainers": [{"name": "proxy", "restartPolicy": "Always",
                    "resources": {"requests": {"cpu": "1200m"}}}],
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "900m"}}}]
            }),
        );
        let err = admit(&sidecar, &node(), &[]).unwrap_err();
        assert_eq!(
            err.message,
            "Node didn't have enough resource: cpu, requested: 2100, used: 0, capacity: 2000"
        );
    }

    #[test]
    fn predicates_and_taints() {
        let sel = pod("s", json!({"nodeSelector": {"disk": "hdd"}}));
        let err = admit(&sel, &node(), &[]).unwrap_err();
        assert_eq!(err.reason, "NodeAffinity");
        assert_eq!(
            err.message,
            "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
        );
        assert!(admit(&pod("s", json!({"nodeSelector": {"disk": "ssd"}})), &node(), &[]).is_ok());
        let port = |name| {
            pod(
                name,
                json!({"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}]}]}),
            )
        };
        let err = admit(&port("p2"), &node(), &[port("p1")]).unwrap_err();
        assert_eq!(err.reason, "NodePorts");
        let mut tainted = node();
        tainted.spec = Some(
            serde_json::from_value(json!({"taints": [{"key": "k", "value": "v", "effect": "NoExecute"}]}))
                .unwrap(),
        );
        let err = admit(&pod("t", json!({})), &tainted, &[]).unwrap_err();
        assert_eq!(err.reason, "TaintToleration");
        let tolerant = pod("t", json!({"tolerations": [{"key": "k", "operator": "Exists"}]}));
        assert!(admit(&tolerant, &tainted, &[]).is_ok());
        // NoSchedule taints are the scheduler's business, not the kubelet's.
        tainted.spec =
            Some(serde_json::from_value(json!({"taints": [{"key": "k", "effect": "NoSchedule"}]})).unwrap());
        assert!(admit(&pod("t", json!({})), &tainted, &[]).is_ok());
    }
}
