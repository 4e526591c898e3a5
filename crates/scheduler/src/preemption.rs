//! Preemption (upstream's DefaultPreemption PostFilter): when no node fits a pod, look for a node
//! where deleting pods of lower priority would make room. Only resource and host-port shortages
//! can be solved that way; a node ruled out by taints, affinity or its name is "not helpful".
//! Of the pods that would have to go, as many as possible are spared (highest priority first);
//! the node whose victims have the lowest top priority, then the fewest victims, wins.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::cache::{Cache, NodeInfo, PodInfo, Resources};
use crate::plugins::Filter;

pub struct Plan {
    pub node: String,
    pub victims: Vec<Arc<PodInfo>>,
}

const NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
const NO_VICTIMS: &str = "No preemption victims found for incoming pod";

/// May this pod preempt others (`preemptionPolicy`, default PreemptLowerPriority)?
pub fn may_preempt(pod: &PodInfo) -> bool {
    pod.pod.spec.as_ref().and_then(|s| s.preemption_policy.as_deref()) != Some("Never")
}

/// Would `pod` fit on `node` with these requests and ports in use?
fn fits(pod: &PodInfo, node: &NodeInfo, requested: &Resources, ports: &[&(String, String, i32)]) -> bool {
    let a = &node.allocatable;
    let w = &pod.requests;
    let resources = requested.pods < a.pods
        && (w.milli_cpu == 0 || w.milli_cpu <= a.milli_cpu - requested.milli_cpu)
        && (w.memory == 0 || w.memory <= a.memory - requested.memory)
        && (w.ephemeral == 0 || w.ephemeral <= a.ephemeral - requested.ephemeral);
    let ports_free = pod.host_ports.iter().all(|(proto, ip, port)| {
        !ports.iter().any(|(p2, ip2, port2)| {
            port == port2 && proto == p2 && (ip == ip2 || ip == "0.0.0.0" || ip2 == "0.0.0.0")
        })
    });
    resources && ports_free
}

fn without(requested: &Resources, gone: &[&Arc<PodInfo>]) -> Resources {
    let mut r = *requested;
    for p in gone {
        r.milli_cpu -= p.requests.milli_cpu;
        r.memory -= p.requests.memory;
        r.ephemeral -= p.requests.ephemeral;
        r.pods -= p.requests.pods;
    }
    r
}

fn ports_without<'a>(node: &'a NodeInfo, gone: &[&Arc<PodInfo>]) -> Vec<&'a (String, String, i32)> {
    let mut ports: Vec<&(String, String, i32)> = node.used_ports.iter().collect();
    for p in gone {
        for hp in &p.host_ports {
            if let Some(i) = ports.iter().position(|u| *u == hp) {
                ports.remove(i);
            }
        }
    }
    ports
}

/// The minimal victims on `node`, if deleting lower-priority pods can make room.
fn victims_on(pod: &PodInfo, node: &NodeInfo) -> Option<Vec<Arc<PodInfo>>> {
    let prio = pod.priority();
    let mut lower: Vec<&Arc<PodInfo>> = node
        .pods
        .values()
        .filter(|p| p.priority() < prio && p.pod.metadata.deletion_timestamp.is_none())
        .collect();
    if !fits(
        pod,
        node,
        &without(&node.requested, &lower),
        &ports_without(node, &lower),
    ) {
        return None;
    }
    // Spare as many as possible, most important first.
    lower.sort_by(|a, b| b.priority().cmp(&a.priority()).then(a.key.cmp(&b.key)));
    let mut victims: Vec<&Arc<PodInfo>> = lower.clone();
    for candidate in lower {
        let trial: Vec<&Arc<PodInfo>> = victims
            .iter()
            .copied()
            .filter(|v| v.key != candidate.key)
            .collect();
        if fits(
            pod,
            node,
            &without(&node.requested, &trial),
            &ports_without(node, &trial),
        ) {
            victims = trial;
        }
    }
    Some(victims.into_iter().cloned().collect())
}

/// Find the node and victims, or the PostFilter message saying why there are none.
pub fn find(pod: &PodInfo, cache: &Cache, filters: &[Box<dyn Filter>]) -> Result<Plan, String> {
    let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
    let mut best: Option<(i32, usize, Plan)> = None;
    for name in &cache.order {
        let Some(node) = cache.nodes.get(name) else {
            continue;
        };
        // Filters that removing pods cannot change must pass as they are.
        let resolvable = filters
            .iter()
            .filter(|f| !matches!(f.name(), "NodeResourcesFit" | "NodePorts"))
            .all(|f| f.filter(pod, node).is_ok());
        if !resolvable {
            *reasons.entry(NOT_HELPFUL).or_default() += 1;
            continue;
        }
        match victims_on(pod, node) {
            Some(v) if !v.is_empty() => {
                let top = v.iter().map(|p| p.priority()).max().unwrap_or(i32::MIN);
                let better = best.as_ref().is_none_or(|(t, n, _)| (top, v.len()) < (*t, *n));
                if better {
                    best = Some((
                        top,
                        v.len(),
                        Plan {
                            node: name.clone(),
                            victims: v,
                        },
                    ));
                }
            }
            _ => *reasons.entry(NO_VICTIMS).or_default() += 1,
        }
    }
    match best {
        Some((_, _, plan)) => Ok(plan),
        None => {
            let mut parts: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
            parts.sort();
            Err(format!(
                "preemption: 0/{} nodes are available: {}.",
                cache.order.len(),
                parts.join(", ")
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::json;

    fn pod(name: &str, prio: i32, cpu: &str, node: Option<&str>) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"nodeName": node, "priority": prio,
                    "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}]}
            }))
            .unwrap(),
        )
    }

    fn cache() -> Cache {
        let mut c = Cache::default();
        for (n, taint) in [("n1", false), ("n2", false), ("tainted", true)] {
            let node: Node = serde_json::from_value(json!({
                "metadata": {"name": n},
                "spec": {"taints": if taint { json!([{"key": "k", "effect": "NoSchedule"}]) } else { json!([]) }},
                "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}
            }))
            .unwrap();
            c.set_node(Arc::new(node));
        }
        c.set_pod(pod("low-a", 1, "2", Some("n1")));
        c.set_pod(pod("low-b", 5, "2", Some("n1")));
        c.set_pod(pod("mid", 50, "3", Some("n2")));
        c.set_pod(pod("t", 0, "4", Some("tainted")));
        c
    }

    #[test]
    fn picks_the_node_with_the_least_important_victims_and_spares_what_it_can() {
        let c = cache();
        let filters = crate::plugins::default_filters();
        let p = PodInfo::new(pod("urgent", 100, "2", None));
        let plan = find(&p, &c, &filters).unwrap();
        // n1 needs one of its two pods gone: the lower one (priority 1) goes, priority 5 stays.
        assert_eq!(plan.node, "n1");
        let victims: Vec<&str> = plan.victims.iter().map(|v| v.key.as_str()).collect();
        assert_eq!(victims, ["default/low-a"]);
    }

    #[test]
    fn equal_or_higher_priority_pods_are_never_victims() {
        let c = cache();
        let filters = crate::plugins::default_filters();
        let p = PodInfo::new(pod("meek", 1, "3", None));
        let err = find(&p, &c, &filters).err().unwrap();
        assert_eq!(
            err,
            "preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, 2 No preemption victims found for incoming pod."
        );
    }
}
