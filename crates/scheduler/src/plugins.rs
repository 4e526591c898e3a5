//! Filter and score plugins (upstream `framework/plugins`), each a small type behind the
//! `Filter` or `Score` trait. Failure reasons are upstream's words, because they end up in the
//! FailedScheduling message users read.

use k8s_openapi::api::core::v1::{NodeSelectorTerm, Taint};
use r8s_api::{node_affinity, predicates, taints};

use crate::cache::{NodeInfo, PodInfo};

/// Why a node does not fit, one reason per line of the histogram.
pub type Reasons = Vec<String>;

pub trait Filter: Send + Sync {
    fn name(&self) -> &'static str;
    fn filter(&self, pod: &PodInfo, node: &NodeInfo) -> Result<(), Reasons>;
}

pub trait Score: Send + Sync {
    fn name(&self) -> &'static str;
    /// A raw score for the node.
    fn score(&self, pod: &PodInfo, node: &NodeInfo) -> i64;
    /// Map raw scores onto 0..=100 (`NormalizeScore`); the default keeps them.
    fn normalize(&self, _scores: &mut [i64]) {}
}

pub const MAX_NODE_SCORE: i64 = 100;

// ---------------------------------------------------------------------------------------------
// Filters

pub struct NodeUnschedulable;
impl Filter for NodeUnschedulable {
    fn name(&self) -> &'static str {
        "NodeUnschedulable"
    }
    fn filter(&self, pod: &PodInfo, node: &NodeInfo) -> Result<(), Reasons> {
        let unschedulable = node
            .node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        if !unschedulable {
            return Ok(());
        }
        let taint = Taint {
            key: "node.kubernetes.io/unschedulable".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        if taints::tolerated(tolerations(pod), &taint) {
            Ok(())
        } else {
            Err(vec!["node(s) were unschedulable".into()])
        }
    }
}

pub struct NodeName;
impl Filter for NodeName {
    fn name(&self) -> &'static str {
        "NodeName"
    }
    fn filter(&self, pod: &PodInfo, node: &NodeInfo) -> Result<(), Reasons> {
        if predicates::node_name_fits(pod.pod.spec.as_ref(), &node.name) {
            Ok(())
        } else {
            Err(vec![predicates::NODE_NAME_MISMATCH.into()])
        }
    }
}

fn tolerations(pod: &PodInfo) -> &[k8s_openapi::api::core::v1::Toleration] {
    pod.pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or(&[])
}

fn taints(node: &NodeInfo) -> &[Taint] {
    predicates::taints(&node.node)
}

pub struct TaintToleration;
impl Filter for TaintToleration {
    fn name(&self) -> &'static str {
        "TaintToleration"
    }
    fn filter(&self, pod: &PodInfo, node: &NodeInfo) -> Result<(), Reasons> {
        match taints::find_untolerated(taints(node), tolerations(pod), taints::schedule_blocking) {
            Some(taint) => Err(vec![format!(
                "node(s) had untolerated taint {{{}: {}}}",
                taint.key,
                taint.value.as_deref().unwrap_or("")
            )]),
            None => Ok(()),
        }
    }
}
impl Score for TaintToleration {
    fn name(&self) -> &'static str {
        "TaintToleration"
    }
    /// Intolerable PreferNoSchedule taints (fewer is better; reversed in normalize).
    fn score(&self, pod: &PodInfo, node: &NodeInfo) -> i64 {
        let tols: Vec<_> = tolerations(pod)
            .iter()
            .filter(|t| {
                t.effect
                    .as_deref()
                    .is_none_or(|e| e.is_empty() || e == "PreferNoSchedule")
            })
            .collect();
        taints(node)
            .iter()
            .filter(|t| t.effect == "PreferNoSchedule")
            .filter(|t| !tols.iter().any(|tol| taints::tolerates(tol, t)))
            .count() as i64
    }
    fn normalize(&self, scores: &mut [i64]) {
        normalize(scores, true)
    }
}

/// Scale to 0..=100 by the maximum, optionally reversed (upstream `DefaultNormalizeScore`).
pub fn normalize(scores: &mut [i64], reverse: bool) {
    let max = scores.iter().copied().max().unwrap_or(0);
    if max == 0 {
        if reverse {
            scores.iter_mut().for_each(|s| *s = MAX_NODE_SCORE);
        }
        return;
    }
    for s in scores.iter_mut() {
        let v = MAX_NODE_SCORE * *s / max;
        *s = if reverse { MAX_NODE_SCORE - v } else { v };
    }
}

/// A node selector term matched against a node (see [`r8s_api::node_affinity::match_term`]).
pub fn match_term(term: &NodeSelectorTerm, node: &NodeInfo) -> bool {
    node_affinity::match_term(term, &node.name, node.node.metadata.labels.as_ref())
}

pub struct NodeAffinity;
impl Filter for NodeAffinity {
    fn name(&self) -> &'static str {
        "NodeAffinity"
    }
    fn filter(&self, pod: &PodInfo, node: &NodeInfo) -> Result<(), Reasons> {
        if predicates::node_affinity_fits(pod.pod.spec.as_ref(), &node.node) {
            Ok(())
        } else {
            Err(vec![predicates::NODE_AFFINITY_MISMATCH.into()])
        }
    }
}
impl Score for NodeAffinity {
    fn name(&self) -> &'static str {
        "NodeAffinity"
    }
    /// The summed weights of the preferred terms the node matches.
    fn score(&self, pod: &PodInfo, node: &NodeInfo) -> i64 {
        node_affinity::preferred_weight(pod.pod.spec.as_ref(), &node.node)
    }
    fn normalize(&self, scores: &mut [i64]) {
        normalize(scores, false)
    }
}

pub struct NodePorts;
impl Filter for NodePorts {
    fn name(&self) -> &'static str {
        "NodePorts"
    }
    fn filter(&self, pod: &PodInfo, node: &NodeInfo) -> Result<(), Reasons> {
        if !predicates::host_ports_fit(&pod.host_ports, &node.used_ports) {
            Err(vec![predicates::HOST_PORTS_TAKEN.into()])
        } else {
            Ok(())
        }
    }
}

pub struct NodeResourcesFit;
impl Filter for NodeResourcesFit {
    fn name(&self) -> &'static str {
        "NodeResourcesFit"
    }
    fn filter(&self, pod: &PodInfo, node: &NodeInfo) -> Result<(), Reasons> {
        let reasons: Reasons = predicates::insufficient_resources(&pod.requests, &node.usage())
            .into_iter()
            .map(|i| match i.resource.as_str() {
                "pods" => "Too many pods".to_string(),
                r => format!("Insufficient {r}"),
            })
            .collect();
        if reasons.is_empty() {
            Ok(())
        } else {
            Err(reasons)
        }
    }
}
/// NodeResourcesFit's scoring strategy (`pluginConfig` args `scoringStrategy`, upstream's
/// `NodeResourcesFitArgs`): how the share of each resource a node would have requested after
/// placing the pod becomes a score, and the resources' weights.
#[derive(Clone, Debug, PartialEq)]
pub enum ScoringType {
    /// Emptier nodes score higher (spreading; the default).
    LeastAllocated,
    /// Fuller nodes score higher (bin packing).
    MostAllocated,
    /// A piecewise linear function of utilization: (utilization 0–100, score 0–10) points.
    RequestedToCapacityRatio(Vec<(i64, i64)>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct ScoringStrategy {
    pub kind: ScoringType,
    /// (resource name, weight 1–100).
    pub resources: Vec<(String, i64)>,
}

impl Default for ScoringStrategy {
    fn default() -> Self {
        Self {
            kind: ScoringType::LeastAllocated,
            resources: vec![("cpu".into(), 1), ("memory".into(), 1)],
        }
    }
}

/// NodeResourcesFit's score under a strategy. Requests are the non-zero ones for cpu and
/// memory (a pod asking nothing counts as 100m and 200Mi, as upstream); a resource the node
/// does not have is left out.
pub struct FitScore(pub ScoringStrategy);

impl FitScore {
    /// (allocatable, requested with the pod) of one resource on `node`.
    fn usage(name: &str, pod: &PodInfo, node: &NodeInfo) -> Option<(i64, i64)> {
        let a = &node.allocatable;
        let used = &node.non_zero_requested;
        match name {
            "cpu" => Some((a.milli_cpu, used.milli_cpu + pod.non_zero.milli_cpu)),
            "memory" => Some((a.memory, used.memory + pod.non_zero.memory)),
            "ephemeral-storage" => Some((a.ephemeral, node.requested.ephemeral + pod.requests.ephemeral)),
            _ => None,
        }
    }
}

/// The piecewise linear function through `shape` (points sorted by utilization), at `x`.
fn broken_linear(shape: &[(i64, i64)], x: i64) -> i64 {
    let Some(&(u0, s0)) = shape.first() else { return 0 };
    if x <= u0 {
        return s0;
    }
    for w in shape.windows(2) {
        let ((u1, s1), (u2, s2)) = (w[0], w[1]);
        if x <= u2 {
            return s1 + (s2 - s1) * (x - u1) / (u2 - u1);
        }
    }
    shape.last().map(|p| p.1).unwrap_or(0)
}

impl Score for FitScore {
    fn name(&self) -> &'static str {
        "NodeResourcesFit"
    }
    fn score(&self, pod: &PodInfo, node: &NodeInfo) -> i64 {
        let (mut total, mut weights) = (0i64, 0i64);
        for (name, w) in &self.0.resources {
            let Some((alloc, req)) = Self::usage(name, pod, node) else {
                continue;
            };
            if alloc <= 0 {
                continue;
            }
            let s = match &self.0.kind {
                ScoringType::LeastAllocated if req > alloc => 0,
                ScoringType::LeastAllocated => (alloc - req) * MAX_NODE_SCORE / alloc,
                ScoringType::MostAllocated => req.min(alloc) * MAX_NODE_SCORE / alloc,
                ScoringType::RequestedToCapacityRatio(shape) => {
                    let util = if req > alloc { 100 } else { req * 100 / alloc };
                    // Shape scores are 0–10, node scores 0–100: scaled before interpolating.
                    let scaled: Vec<(i64, i64)> = shape
                        .iter()
                        .map(|&(u, sc)| (u, sc * (MAX_NODE_SCORE / 10)))
                        .collect();
                    broken_linear(&scaled, util)
                }
            };
            total += s * w;
            weights += w;
        }
        if weights == 0 {
            return 0;
        }
        match self.0.kind {
            ScoringType::RequestedToCapacityRatio(_) => (total as f64 / weights as f64).round() as i64,
            _ => total / weights,
        }
    }
}

pub struct BalancedAllocation;
impl Score for BalancedAllocation {
    fn name(&self) -> &'static str {
        "NodeResourcesBalancedAllocation"
    }
    /// Cpu and memory used in similar proportions score higher: (1 - std deviation) × 100.
    fn score(&self, pod: &PodInfo, node: &NodeInfo) -> i64 {
        let frac = |alloc: i64, used: i64| {
            if alloc <= 0 {
                1.0
            } else {
                (used as f64 / alloc as f64).min(1.0)
            }
        };
        let a = &node.allocatable;
        let used = &node.non_zero_requested;
        let c = frac(a.milli_cpu, used.milli_cpu + pod.non_zero.milli_cpu);
        let m = frac(a.memory, used.memory + pod.non_zero.memory);
        let std = (c - m).abs() / 2.0;
        ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
    }
}

/// The default profile's filters, in upstream's order.
pub fn default_filters() -> Vec<Box<dyn Filter>> {
    vec![
        Box::new(NodeUnschedulable),
        Box::new(NodeName),
        Box::new(TaintToleration),
        Box::new(NodeAffinity),
        Box::new(NodePorts),
        Box::new(NodeResourcesFit),
    ]
}

/// The default profile's scores with upstream's weights.
pub fn default_scores() -> Vec<(Box<dyn Score>, i64)> {
    vec![
        (Box::new(TaintToleration), 3),
        (Box::new(NodeAffinity), 2),
        (Box::new(FitScore(ScoringStrategy::default())), 1),
        (Box::new(BalancedAllocation), 1),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::json;
    use std::sync::Arc;

    fn node(v: serde_json::Value) -> NodeInfo {
        let mut base = json!({"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"}}});
        merge(&mut base, v);
        NodeInfo::for_node(Arc::new(serde_json::from_value::<Node>(base).unwrap()))
    }

    fn pod(v: serde_json::Value) -> PodInfo {
        let mut base = json!({"metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
        merge(&mut base, v);
        PodInfo::new(Arc::new(serde_json::from_value::<Pod>(base).unwrap()))
    }

    fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
        match (a, b) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    fn with_cpu(cpu: &str) -> serde_json::Value {
        json!({"spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}]}})
    }

    #[test]
    fn resources_fit_names_each_shortage() {
        let n = node(json!({}));
        assert!(NodeResourcesFit.filter(&pod(with_cpu("1500m")), &n).is_ok());
        assert_eq!(
            NodeResourcesFit.filter(&pod(with_cpu("3")), &n).unwrap_err(),
            ["Insufficient cpu"]
        );
        let busy = node(json!({})).with_pod(pod(with_cpu("1500m")).pod.clone());
        assert_eq!(
            NodeResourcesFit.filter(&pod(with_cpu("1")), &busy).unwrap_err(),
            ["Insufficient cpu"]
        );
        let full = node(json!({"status": {"allocatable": {"pods": "0"}}}));
        assert_eq!(
            NodeResourcesFit.filter(&pod(json!({})), &full).unwrap_err(),
            ["Too many pods"]
        );
    }

    #[test]
    fn taints_need_tolerations() {
        let n =
            node(json!({"spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}}));
        assert_eq!(
            TaintToleration.filter(&pod(json!({})), &n).unwrap_err(),
            ["node(s) had untolerated taint {dedicated: gpu}"]
        );
        let tolerant = pod(
            json!({"spec": {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]}}),
        );
        assert!(TaintToleration.filter(&tolerant, &n).is_ok());
        let soft = node(json!({"spec": {"taints": [{"key": "a", "effect": "PreferNoSchedule"}]}}));
        assert!(TaintToleration.filter(&pod(json!({})), &soft).is_ok());
        let mut scores = vec![
            TaintToleration.score(&pod(json!({})), &soft),
            TaintToleration.score(&pod(json!({})), &n),
        ];
        TaintToleration.normalize(&mut scores);
        assert_eq!(scores, [0, 100]);
    }

    #[test]
    fn node_selector_and_affinity() {
        let n = node(json!({"metadata": {"labels": {"disk": "ssd", "zone": "a"}}}));
        assert!(NodeAffinity
            .filter(&pod(json!({"spec": {"nodeSelector": {"disk": "ssd"}}})), &n)
            .is_ok());
        assert_eq!(
            NodeAffinity
                .filter(&pod(json!({"spec": {"nodeSelector": {"disk": "hdd"}}})), &n)
                .unwrap_err(),
            ["node(s) didn't match Pod's node affinity/selector"]
        );
        let required = |op: &str, vals: serde_json::Value| {
            pod(
                json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": op, "values": vals}]}]}}}}}),
            )
        };
        assert!(NodeAffinity
            .filter(&required("In", json!(["a", "b"])), &n)
            .is_ok());
        assert!(NodeAffinity.filter(&required("NotIn", json!(["a"])), &n).is_err());
        assert!(NodeAffinity.filter(&required("Exists", json!(null)), &n).is_ok());
        let by_name = pod(
            json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}]}}}}}),
        );
        assert!(NodeAffinity.filter(&by_name, &n).is_ok());
        let preferred = pod(
            json!({"spec": {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 5, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}},
            {"weight": 7, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}}]}}}}),
        );
        assert_eq!(Score::score(&NodeAffinity, &preferred, &n), 5);
    }

    #[test]
    fn host_ports_conflict() {
        let used = pod(
            json!({"spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80, "hostPort": 8080}]}]}}),
        );
        let n = node(json!({})).with_pod(used.pod.clone());
        assert_eq!(
            NodePorts.filter(&used, &n).unwrap_err(),
            ["node(s) didn't have free ports for the requested pod ports"]
        );
        assert!(NodePorts.filter(&pod(json!({})), &n).is_ok());
    }

    #[test]
    fn unschedulable_and_node_name() {
        let cordoned = node(json!({"spec": {"unschedulable": true}}));
        assert_eq!(
            NodeUnschedulable.filter(&pod(json!({})), &cordoned).unwrap_err(),
            ["node(s) were unschedulable"]
        );
        assert!(NodeName
            .filter(&pod(json!({"spec": {"nodeName": "other"}})), &cordoned)
            .is_err());
        assert!(NodeName
            .filter(&pod(json!({"spec": {"nodeName": "n"}})), &cordoned)
            .is_ok());
    }

    #[test]
    fn scores_prefer_emptier_balanced_nodes() {
        let empty = node(json!({}));
        let busy = node(json!({})).with_pod(pod(with_cpu("1")).pod.clone());
        let p = pod(with_cpu("100m"));
        let fit = FitScore(ScoringStrategy::default());
        assert!(fit.score(&p, &empty) > fit.score(&p, &busy));
        assert!(BalancedAllocation.score(&p, &empty) > BalancedAllocation.score(&p, &busy));
    }

    #[test]
    fn scoring_strategies_spread_pack_or_follow_a_shape() {
        // 2 cpu, 4Gi; the pod asks 100m cpu and, by default, 200Mi memory; busy already holds
        // 1 cpu and 200Mi.
        let empty = node(json!({}));
        let busy = node(json!({})).with_pod(pod(with_cpu("1")).pod.clone());
        let p = pod(with_cpu("100m"));
        let least = FitScore(ScoringStrategy::default());
        assert_eq!((least.score(&p, &empty), least.score(&p, &busy)), (95, 67));
        let most = FitScore(ScoringStrategy {
            kind: ScoringType::MostAllocated,
            ..ScoringStrategy::default()
        });
        assert_eq!((most.score(&p, &empty), most.score(&p, &busy)), (4, 32));
        // Utilization 0 → 0, 100 → 10 (×10), cpu weighing three times memory:
        // empty (5·3 + 4)/4 = 4.75 → 5, busy (55·3 + 9)/4 = 43.5 → 44.
        let ratio = FitScore(ScoringStrategy {
            kind: ScoringType::RequestedToCapacityRatio(vec![(0, 0), (100, 10)]),
            resources: vec![
                ("cpu".into(), 3),
                ("memory".into(), 1),
                ("nvidia.com/gpu".into(), 5),
            ],
        });
        assert_eq!((ratio.score(&p, &empty), ratio.score(&p, &busy)), (5, 44));
    }

    #[test]
    fn broken_linear_interpolates_and_clamps() {
        let shape = [(10, 0), (50, 100), (80, 40)];
        assert_eq!(broken_linear(&shape, 0), 0);
        assert_eq!(broken_linear(&shape, 30), 50);
        assert_eq!(broken_linear(&shape, 50), 100);
        assert_eq!(broken_linear(&shape, 65), 70);
        assert_eq!(broken_linear(&shape, 100), 40);
    }
}
