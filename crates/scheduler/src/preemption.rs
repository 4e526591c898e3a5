//! Preemption (upstream's DefaultPreemption PostFilter): when no node fits a pod, look for a node
//! where deleting pods of lower priority would make room — for resources, host ports, or the
//! pod's anti-affinity and topology spread, each checked by running the filters again on a
//! copy of the cache without those pods. A node ruled out by its taints, node affinity, name or
//! cordon cannot be helped: "not helpful".
//! Of the pods that would have to go, as many as possible are spared (highest priority first);
//! the node whose victims have the lowest top priority, then the fewest victims, wins.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::affinity::ClusterFilter;
use crate::cache::{Cache, PodInfo};
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

/// Does `pod` pass every filter on node `name` of `sim` (node filters, then the filters that
/// look at the whole cluster: inter-pod affinity, topology spread)?
fn fits_all(
    pod: &PodInfo,
    sim: &Cache,
    name: &str,
    filters: &[Box<dyn Filter>],
    cluster: &[Box<dyn ClusterFilter>],
) -> bool {
    let Some(node) = sim.nodes.get(name) else {
        return false;
    };
    filters.iter().all(|f| f.filter(pod, node).is_ok())
        && cluster.iter().all(|c| c.prepare(pod, sim).filter(node).is_ok())
}

/// The minimal victims on node `name` (upstream's `SelectVictimsOnNode`): take every
/// lower-priority pod off the node in the simulation; if the pod then passes every filter,
/// put them back one by one, most important first, keeping each that still lets it fit.
/// `sim` is left as it was found.
fn victims_on(
    pod: &PodInfo,
    sim: &mut Cache,
    name: &str,
    filters: &[Box<dyn Filter>],
    cluster: &[Box<dyn ClusterFilter>],
) -> Option<Vec<Arc<PodInfo>>> {
    let prio = pod.priority();
    let mut lower: Vec<Arc<PodInfo>> = sim
        .nodes
        .get(name)?
        .pods
        .values()
        .filter(|p| {
            p.priority() < prio && p.pod.metadata.deletion_timestamp.is_none() && !sim.is_assumed(&p.key)
        })
        .cloned()
        .collect();
    for p in &lower {
        sim.remove_pod(&p.key);
    }
    if !fits_all(pod, sim, name, filters, cluster) {
        for p in lower {
            sim.restore(p, name);
        }
        return None;
    }
    // Spare as many as possible, most important first.
    lower.sort_by(|a, b| b.priority().cmp(&a.priority()).then(a.key.cmp(&b.key)));
    let mut victims = Vec::new();
    for candidate in lower {
        sim.restore(candidate.clone(), name);
        if !fits_all(pod, sim, name, filters, cluster) {
            sim.remove_pod(&candidate.key);
            victims.push(candidate);
        }
    }
    for v in &victims {
        sim.restore(v.clone(), name);
    }
    Some(victims)
}

/// How many nodes with victims to find before choosing (upstream's DefaultPreemption args:
/// 10 % of the nodes, at least 100).
fn candidates_wanted(nodes: usize) -> usize {
    (nodes / 10).max(100).min(nodes.max(1))
}

/// Find the node and victims, or the PostFilter message saying why there are none.
pub fn find(
    pod: &PodInfo,
    cache: &Cache,
    filters: &[Box<dyn Filter>],
    cluster: &[Box<dyn ClusterFilter>],
) -> Result<Plan, String> {
    let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
    let mut best: Option<(i32, usize, Plan)> = None;
    // The what-if runs on a copy of the cache, made once the first node is worth trying.
    let mut sim: Option<Cache> = None;
    let mut candidates = 0;
    let wanted = candidates_wanted(cache.order.len());
    for name in &cache.order {
        let Some(node) = cache.nodes.get(name) else {
            continue;
        };
        // Filters that removing pods cannot change must pass as they are (upstream's
        // UnschedulableAndUnresolvable).
        let resolvable = filters
            .iter()
            .filter(|f| !matches!(f.name(), "NodeResourcesFit" | "NodePorts"))
            .all(|f| f.filter(pod, node).is_ok());
        if !resolvable {
            *reasons.entry(NOT_HELPFUL).or_default() += 1;
            continue;
        }
        // Nothing of lower priority here: nothing to remove (and no copy of the cache needed).
        if !node.pods.values().any(|p| p.priority() < pod.priority()) {
            *reasons.entry(NO_VICTIMS).or_default() += 1;
            continue;
        }
        let sim = sim.get_or_insert_with(|| cache.clone());
        match victims_on(pod, sim, name, filters, cluster) {
            Some(v) if !v.is_empty() => {
                candidates += 1;
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
                if candidates >= wanted {
                    break;
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
        let plan = find(&p, &c, &filters, &[]).unwrap();
        // n1 needs one of its two pods gone: the lower one (priority 1) goes, priority 5 stays.
        assert_eq!(plan.node, "n1");
        let victims: Vec<&str> = plan.victims.iter().map(|v| v.key.as_str()).collect();
        assert_eq!(victims, ["default/low-a"]);
    }

    #[test]
    fn an_extended_resource_is_freed_by_preempting_who_holds_it() {
        // As upstream's "validates basic preemption works": each node advertises 5 of
        // example.com/foo, two pods on each hold 2; the preemptor asks for 2.
        let mut c = Cache::default();
        let foo = |name: &str, prio: i32, node: Option<&str>| -> Arc<Pod> {
            Arc::new(
                serde_json::from_value(json!({
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": {"nodeName": node, "priority": prio, "containers": [{"name": "c",
                        "image": "i", "resources": {"requests": {"example.com/foo": "2"},
                        "limits": {"example.com/foo": "2"}}}]}
                }))
                .unwrap(),
            )
        };
        for n in ["n1", "n2"] {
            let node: Node = serde_json::from_value(json!({
                "metadata": {"name": n},
                "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110",
                    "example.com/foo": "5"}}
            }))
            .unwrap();
            c.set_node(Arc::new(node));
        }
        c.set_pod(foo("low", 1, Some("n1")));
        c.set_pod(foo("mid-1", 50, Some("n1")));
        c.set_pod(foo("mid-2", 50, Some("n2")));
        c.set_pod(foo("mid-3", 50, Some("n2")));
        let filters = crate::plugins::default_filters();
        let p = PodInfo::new(foo("preemptor", 100, None));
        // No node fits as it is.
        for n in ["n1", "n2"] {
            let info = &c.nodes[n];
            assert!(filters.iter().any(|f| f.filter(&p, info).is_err()), "{n} fits");
        }
        let plan = find(&p, &c, &filters, &[]).unwrap();
        assert_eq!(plan.node, "n1");
        let victims: Vec<&str> = plan.victims.iter().map(|v| v.key.as_str()).collect();
        assert_eq!(victims, ["default/low"]);
    }

    #[test]
    fn equal_or_higher_priority_pods_are_never_victims() {
        let c = cache();
        let filters = crate::plugins::default_filters();
        let p = PodInfo::new(pod("meek", 1, "3", None));
        let err = find(&p, &c, &filters, &[]).err().unwrap();
        assert_eq!(
            err,
            "preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, 2 No preemption victims found for incoming pod."
        );
    }

    #[test]
    fn anti_affinity_is_relieved_by_removing_the_pods_it_refuses() {
        let mut c = Cache::default();
        for n in ["n1", "n2"] {
            let node: Node = serde_json::from_value(json!({
                "metadata": {"name": n, "labels": {"kubernetes.io/hostname": n}},
                "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}
            }))
            .unwrap();
            c.set_node(Arc::new(node));
        }
        let web = |name: &str, prio: i32, node: &str| {
            Arc::new(
                serde_json::from_value::<Pod>(json!({
                    "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
                    "spec": {"nodeName": node, "priority": prio, "containers": [{"name": "c", "image": "i"}]}
                }))
                .unwrap(),
            )
        };
        c.set_pod(web("web-low", 1, "n1"));
        c.set_pod(web("web-high", 1000, "n2"));
        let p = PodInfo::new(Arc::new(
            serde_json::from_value::<Pod>(json!({
                "metadata": {"name": "loner", "namespace": "default"},
                "spec": {"priority": 100, "containers": [{"name": "c", "image": "i"}],
                    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}}}
            }))
            .unwrap(),
        ));
        let filters = crate::plugins::default_filters();
        let cluster: Vec<Box<dyn ClusterFilter>> = vec![Box::new(crate::affinity::InterPodAffinity)];
        // Resources are plenty everywhere: only taking web-low off n1 helps (web-high outranks).
        let plan = find(&p, &c, &filters, &cluster).unwrap();
        assert_eq!(plan.node, "n1");
        let victims: Vec<&str> = plan.victims.iter().map(|v| v.key.as_str()).collect();
        assert_eq!(victims, ["default/web-low"]);
        // The what-if ran on a copy: the cache still holds both pods.
        assert_eq!(c.nodes["n1"].pods.len(), 1);
        assert_eq!(c.nodes["n2"].pods.len(), 1);
    }
}
