//! Plugins that look at where other pods run: PodTopologySpread and InterPodAffinity. Each
//! looks at the whole cluster once per pod (upstream's PreFilter/PreScore) and keeps what it
//! found in a per-pod checker that then judges nodes (Filter/Score).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{PodAffinityTerm, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use r8s_api::selector::{label_selector_as_selector, Selector};

use crate::cache::{Cache, NodeInfo, PodInfo};
use crate::plugins::{self, Filter, Reasons};

/// A filter that needs the whole cluster: `prepare` once per pod, then `filter` per node.
pub trait ClusterFilter: Send + Sync {
    fn name(&self) -> &'static str;
    fn prepare(&self, pod: &PodInfo, cache: &Cache) -> Box<dyn NodeCheck>;
}

/// A score that needs the whole cluster.
pub trait ClusterScore: Send + Sync {
    fn name(&self) -> &'static str;
    fn prepare(&self, pod: &PodInfo, cache: &Cache) -> Box<dyn NodeCheck>;
}

/// What `prepare` found, applied to one node.
pub trait NodeCheck {
    fn filter(&self, _node: &NodeInfo) -> Result<(), Reasons> {
        Ok(())
    }
    fn score(&self, _node: &NodeInfo) -> i64 {
        0
    }
    fn normalize(&self, _scores: &mut [i64]) {}
}

fn label<'a>(node: &'a NodeInfo, key: &str) -> Option<&'a str> {
    node.node.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

fn pod_ns(p: &PodInfo) -> &str {
    p.pod.metadata.namespace.as_deref().unwrap_or("")
}

fn active(p: &PodInfo) -> bool {
    p.pod.metadata.deletion_timestamp.is_none()
}

// ---------------------------------------------------------------------------------------------
// PodTopologySpread

struct Spread {
    key: String,
    max_skew: i64,
    hard: bool,
    /// Matching pods per domain (value of `key`), every eligible domain present.
    counts: HashMap<String, i64>,
    min: i64,
    self_match: i64,
    /// A soft constraint by hostname: each node is its own domain, so its count is taken when
    /// the node is scored (upstream's PreScore leaves hostname to Score too), not for every
    /// node of the cluster first — which made each decision cost every pod in the cluster.
    per_node: Option<(Selector, String)>,
}

impl Spread {
    /// Matching pods on `node` (a per-node constraint's count).
    fn count_on(&self, node: &NodeInfo) -> i64 {
        let Some((matcher, ns)) = &self.per_node else {
            return 0;
        };
        node.pods
            .values()
            .filter(|p| active(p) && pod_ns(p) == ns)
            .filter(|p| matcher.matches_labels(p.pod.metadata.labels.as_ref()))
            .count() as i64
    }
}

const HOSTNAME: &str = "kubernetes.io/hostname";

/// PodTopologySpread's constraints for pods that set none (its args' `defaultingType`).
#[derive(Clone, Debug, PartialEq)]
pub enum SpreadDefaults {
    /// Upstream's system defaults: hostname skew 3 and zone skew 5, both ScheduleAnyway.
    System,
    /// `defaultingType: List`: the configuration's `defaultConstraints` (maybe none).
    List(Vec<TopologySpreadConstraint>),
}

impl SpreadDefaults {
    fn constraints(&self) -> Vec<TopologySpreadConstraint> {
        match self {
            SpreadDefaults::System => [("kubernetes.io/hostname", 3), ("topology.kubernetes.io/zone", 5)]
                .into_iter()
                .map(|(key, skew)| TopologySpreadConstraint {
                    topology_key: key.into(),
                    max_skew: skew,
                    when_unsatisfiable: "ScheduleAnyway".into(),
                    ..Default::default()
                })
                .collect(),
            SpreadDefaults::List(l) => l.clone(),
        }
    }
}

/// The selector default constraints count pods with (upstream's `DefaultSelector`): the
/// selectors of the Services in the pod's namespace that select it, and of the ReplicaSet or
/// StatefulSet that controls it. None if there are none.
fn default_selector(pod: &PodInfo, cache: &Cache) -> Option<LabelSelector> {
    let ns = pod_ns(pod);
    let labels = pod.pod.metadata.labels.clone().unwrap_or_default();
    let mut match_labels = BTreeMap::new();
    for (svc_ns, selector) in cache.services.values() {
        if svc_ns == ns && !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v)) {
            match_labels.extend(selector.clone());
        }
    }
    let mut match_expressions = Vec::new();
    let owner = pod
        .pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    if let Some(o) = owner.filter(|o| o.api_version == "apps/v1") {
        if let Some(sel) = cache.controllers.get(&format!("{}/{ns}/{}", o.kind, o.name)) {
            match_labels.extend(sel.match_labels.clone().unwrap_or_default());
            match_expressions.extend(sel.match_expressions.clone().unwrap_or_default());
        }
    }
    if match_labels.is_empty() && match_expressions.is_empty() {
        return None;
    }
    Some(LabelSelector {
        match_labels: Some(match_labels),
        match_expressions: Some(match_expressions),
    })
}

fn spreads(pod: &PodInfo, cache: &Cache, hard: bool, defaults: &SpreadDefaults) -> Vec<Spread> {
    let own = pod
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.topology_spread_constraints.clone())
        .unwrap_or_default();
    let all = if !own.is_empty() {
        own
    } else {
        match default_selector(pod, cache) {
            Some(selector) => defaults
                .constraints()
                .into_iter()
                .map(|c| TopologySpreadConstraint {
                    label_selector: Some(selector.clone()),
                    ..c
                })
                .collect(),
            None => Vec::new(),
        }
    };
    let constraints: Vec<TopologySpreadConstraint> = all
        .into_iter()
        .filter(|c| (c.when_unsatisfiable == "DoNotSchedule") == hard)
        .collect();
    constraints
        .into_iter()
        .map(|c| {
            let matcher =
                label_selector_as_selector(c.label_selector.as_ref()).unwrap_or_else(|_| Selector::nothing());
            let self_match = matcher.matches_labels(pod.pod.metadata.labels.as_ref()) as i64;
            if !hard && c.topology_key == HOSTNAME {
                return Spread {
                    key: c.topology_key,
                    max_skew: c.max_skew as i64,
                    hard,
                    self_match,
                    counts: HashMap::new(),
                    min: 0,
                    per_node: Some((matcher, pod_ns(pod).to_string())),
                };
            }
            let mut counts: HashMap<String, i64> = HashMap::new();
            for node in cache.nodes.values() {
                let Some(value) = label(node, &c.topology_key) else {
                    continue;
                };
                // nodeAffinityPolicy Honor (the default): only nodes the pod may go to count.
                if plugins::NodeAffinity.filter(pod, node).is_err() {
                    continue;
                }
                let n = node
                    .pods
                    .values()
                    .filter(|p| active(p) && pod_ns(p) == pod_ns(pod))
                    .filter(|p| matcher.matches_labels(p.pod.metadata.labels.as_ref()))
                    .count() as i64;
                *counts.entry(value.to_string()).or_default() += n;
            }
            let mut min = counts.values().copied().min().unwrap_or(0);
            if c.min_domains.is_some_and(|m| (counts.len() as i32) < m) {
                min = 0;
            }
            Spread {
                key: c.topology_key,
                max_skew: c.max_skew as i64,
                hard,
                self_match,
                counts,
                min,
                per_node: None,
            }
        })
        .collect()
}

struct SpreadCheck(Vec<Spread>);

impl NodeCheck for SpreadCheck {
    fn filter(&self, node: &NodeInfo) -> Result<(), Reasons> {
        for s in self.0.iter().filter(|s| s.hard) {
            let Some(value) = label(node, &s.key) else {
                return Err(vec![
                    "node(s) didn't match pod topology spread constraints (missing required label)".into(),
                ]);
            };
            let count = s.counts.get(value).copied().unwrap_or(0);
            if count + s.self_match - s.min > s.max_skew {
                return Err(vec!["node(s) didn't match pod topology spread constraints".into()]);
            }
        }
        Ok(())
    }

    /// Matching pods already in the node's domains: fewer is better.
    fn score(&self, node: &NodeInfo) -> i64 {
        self.0
            .iter()
            .map(|s| match label(node, &s.key) {
                _ if s.per_node.is_some() => s.count_on(node) + s.self_match,
                Some(v) => s.counts.get(v).copied().unwrap_or(0) + s.self_match,
                None => s.counts.values().copied().max().unwrap_or(0) + 1,
            })
            .sum()
    }

    fn normalize(&self, scores: &mut [i64]) {
        plugins::normalize(scores, true)
    }
}

pub struct PodTopologySpread(pub SpreadDefaults);

impl ClusterFilter for PodTopologySpread {
    fn name(&self) -> &'static str {
        "PodTopologySpread"
    }
    fn prepare(&self, pod: &PodInfo, cache: &Cache) -> Box<dyn NodeCheck> {
        Box::new(SpreadCheck(spreads(pod, cache, true, &self.0)))
    }
}

impl ClusterScore for PodTopologySpread {
    fn name(&self) -> &'static str {
        "PodTopologySpread"
    }
    fn prepare(&self, pod: &PodInfo, cache: &Cache) -> Box<dyn NodeCheck> {
        Box::new(SpreadCheck(spreads(pod, cache, false, &self.0)))
    }
}

// ---------------------------------------------------------------------------------------------
// InterPodAffinity

/// Does an existing pod match a term of `owner` (label selector within the term's namespaces)?
/// The namespaces are the term's list and those its namespaceSelector selects (`{}`: all);
/// with neither, the owner's own namespace.
fn term_matches(term: &PodAffinityTerm, owner: &PodInfo, other: &PodInfo, cache: &Cache) -> bool {
    let namespaces = term.namespaces.as_deref().unwrap_or_default();
    let ns = pod_ns(other);
    let ns_ok = match &term.namespace_selector {
        None if namespaces.is_empty() => ns == pod_ns(owner),
        None => namespaces.iter().any(|n| n == ns),
        Some(sel) => {
            namespaces.iter().any(|n| n == ns)
                || label_selector_as_selector(Some(sel))
                    .map(|m| m.matches_labels(cache.namespace_labels.get(ns)))
                    .unwrap_or(false)
        }
    };
    ns_ok
        && label_selector_as_selector(term.label_selector.as_ref())
            .map(|m| m.matches_labels(other.pod.metadata.labels.as_ref()))
            .unwrap_or(false)
}

fn required(pod: &PodInfo, anti: bool) -> Vec<PodAffinityTerm> {
    let a = pod.pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
    if anti {
        a.and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| a.required_during_scheduling_ignored_during_execution.clone())
            .unwrap_or_default()
    } else {
        a.and_then(|a| a.pod_affinity.as_ref())
            .and_then(|a| a.required_during_scheduling_ignored_during_execution.clone())
            .unwrap_or_default()
    }
}

fn preferred(pod: &PodInfo, anti: bool) -> Vec<(i64, PodAffinityTerm)> {
    let a = pod.pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
    let terms = if anti {
        a.and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| a.preferred_during_scheduling_ignored_during_execution.clone())
    } else {
        a.and_then(|a| a.pod_affinity.as_ref())
            .and_then(|a| a.preferred_during_scheduling_ignored_during_execution.clone())
    };
    terms
        .unwrap_or_default()
        .into_iter()
        .map(|w| (w.weight as i64, w.pod_affinity_term))
        .collect()
}

/// (topology key, value) domains.
type Domains = HashMap<(String, String), i64>;

struct AffinityCheck {
    /// Per required affinity term: domains holding a matching pod; `None` when no pod in the
    /// cluster matches and the pod matches its own term (the first of a group may go anywhere).
    affinity: Vec<(String, Option<Domains>)>,
    anti: Vec<(String, Domains)>,
    /// Domains where an existing pod's anti-affinity forbids this pod.
    forbidden: Domains,
    /// Preferred terms: (topology key, domain → weight).
    preferred: Vec<(String, Domains)>,
}

fn domains_of(cache: &Cache, key: &str, mut matches: impl FnMut(&PodInfo) -> bool) -> Domains {
    let mut out = Domains::new();
    for node in cache.nodes.values() {
        let Some(value) = label(node, key) else { continue };
        let n = node.pods.values().filter(|p| active(p) && matches(p)).count() as i64;
        if n > 0 {
            *out.entry((key.to_string(), value.to_string())).or_default() += n;
        }
    }
    out
}

fn prepare_affinity(pod: &PodInfo, cache: &Cache, for_filter: bool) -> AffinityCheck {
    if !for_filter {
        let mut preferred_terms = Vec::new();
        for (anti, sign) in [(false, 1), (true, -1)] {
            for (w, t) in preferred(pod, anti) {
                let mut d = domains_of(cache, &t.topology_key, |p| term_matches(&t, pod, p, cache));
                d.values_mut().for_each(|n| *n *= sign * w);
                preferred_terms.push((t.topology_key.clone(), d));
            }
        }
        return AffinityCheck {
            affinity: Vec::new(),
            anti: Vec::new(),
            forbidden: Domains::new(),
            preferred: preferred_terms,
        };
    }
    let affinity = required(pod, false)
        .into_iter()
        .map(|t| {
            let d = domains_of(cache, &t.topology_key, |p| term_matches(&t, pod, p, cache));
            let first_of_group = d.is_empty() && term_matches(&t, pod, pod, cache);
            (t.topology_key.clone(), (!first_of_group).then_some(d))
        })
        .collect();
    let anti = required(pod, true)
        .into_iter()
        .map(|t| {
            (
                t.topology_key.clone(),
                domains_of(cache, &t.topology_key, |p| term_matches(&t, pod, p, cache)),
            )
        })
        .collect();
    let mut forbidden = Domains::new();
    for (node, existing) in cache.pods_with_anti_affinity() {
        if !active(existing) {
            continue;
        }
        for t in required(existing, true) {
            if term_matches(&t, existing, pod, cache) {
                if let Some(v) = label(node, &t.topology_key) {
                    *forbidden
                        .entry((t.topology_key.clone(), v.to_string()))
                        .or_default() += 1;
                }
            }
        }
    }
    AffinityCheck {
        affinity,
        anti,
        forbidden,
        preferred: Vec::new(),
    }
}

fn in_domains(node: &NodeInfo, key: &str, d: &Domains) -> bool {
    label(node, key).is_some_and(|v| d.contains_key(&(key.to_string(), v.to_string())))
}

impl NodeCheck for AffinityCheck {
    fn filter(&self, node: &NodeInfo) -> Result<(), Reasons> {
        let forbidden = self
            .forbidden
            .keys()
            .any(|(k, v)| label(node, k) == Some(v.as_str()));
        if forbidden {
            return Err(vec![
                "node(s) didn't satisfy existing pods anti-affinity rules".into()
            ]);
        }
        for (key, d) in &self.affinity {
            match d {
                None => {
                    if label(node, key).is_none() {
                        return Err(vec!["node(s) didn't match pod affinity rules".into()]);
                    }
                }
                Some(d) if !in_domains(node, key, d) => {
                    return Err(vec!["node(s) didn't match pod affinity rules".into()])
                }
                Some(_) => {}
            }
        }
        for (key, d) in &self.anti {
            if in_domains(node, key, d) {
                return Err(vec!["node(s) didn't match pod anti-affinity rules".into()]);
            }
        }
        Ok(())
    }

    fn score(&self, node: &NodeInfo) -> i64 {
        self.preferred
            .iter()
            .filter_map(|(key, d)| {
                let v = label(node, key)?;
                d.get(&(key.clone(), v.to_string())).copied()
            })
            .sum()
    }

    /// Scale (score - min) onto 0..=100.
    fn normalize(&self, scores: &mut [i64]) {
        let (min, max) = (
            scores.iter().copied().min().unwrap_or(0),
            scores.iter().copied().max().unwrap_or(0),
        );
        for s in scores.iter_mut() {
            *s = if max > min {
                (*s - min) * plugins::MAX_NODE_SCORE / (max - min)
            } else {
                0
            };
        }
    }
}

pub struct InterPodAffinity;

impl ClusterFilter for InterPodAffinity {
    fn name(&self) -> &'static str {
        "InterPodAffinity"
    }
    fn prepare(&self, pod: &PodInfo, cache: &Cache) -> Box<dyn NodeCheck> {
        Box::new(prepare_affinity(pod, cache, true))
    }
}

impl ClusterScore for InterPodAffinity {
    fn name(&self) -> &'static str {
        "InterPodAffinity"
    }
    fn prepare(&self, pod: &PodInfo, cache: &Cache) -> Box<dyn NodeCheck> {
        Box::new(prepare_affinity(pod, cache, false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::json;
    use std::sync::Arc;

    fn cache(nodes: &[(&str, &str)]) -> Cache {
        let mut c = Cache::default();
        for (name, zone) in nodes {
            let n: Node = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "zone": zone}},
                "status": {"allocatable": {"cpu": "8", "memory": "8Gi", "pods": "110"}}
            }))
            .unwrap();
            c.set_node(Arc::new(n));
        }
        c
    }

    fn pod(name: &str, node: Option<&str>, labels: serde_json::Value, spec: serde_json::Value) -> PodInfo {
        let mut s = json!({"nodeName": node, "containers": [{"name": "c", "image": "i"}]});
        if let (Some(s), Some(extra)) = (s.as_object_mut(), spec.as_object()) {
            for (k, v) in extra {
                s.insert(k.clone(), v.clone());
            }
        }
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": s,
        }))
        .unwrap();
        PodInfo::new(Arc::new(p))
    }

    fn place(c: &mut Cache, name: &str, node: &str, labels: serde_json::Value, spec: serde_json::Value) {
        c.set_pod(pod(name, Some(node), labels, spec).pod.clone());
    }

    fn verdicts(check: &dyn NodeCheck, c: &Cache, nodes: &[&str]) -> Vec<bool> {
        nodes.iter().map(|n| check.filter(&c.nodes[*n]).is_ok()).collect()
    }

    #[test]
    fn topology_spread_keeps_skew_within_max() {
        let mut c = cache(&[("a1", "a"), ("b1", "b")]);
        place(&mut c, "w1", "a1", json!({"app": "web"}), json!({}));
        place(&mut c, "w2", "a1", json!({"app": "web"}), json!({}));
        let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}]});
        let p = pod("new", None, json!({"app": "web"}), spread);
        let check = ClusterFilter::prepare(&PodTopologySpread(SpreadDefaults::System), &p, &c);
        // Zone a has 2, b has 0: only b keeps the skew at most 1.
        assert_eq!(verdicts(check.as_ref(), &c, &["a1", "b1"]), [false, true]);
        assert_eq!(
            check.filter(&c.nodes["a1"]).unwrap_err(),
            ["node(s) didn't match pod topology spread constraints"]
        );
    }

    #[test]
    fn a_soft_hostname_spread_counts_the_scored_nodes_own_matching_pods() {
        let mut c = cache(&[("n1", "a"), ("n2", "a")]);
        place(&mut c, "w1", "n1", json!({"app": "web"}), json!({}));
        place(&mut c, "w2", "n1", json!({"app": "web"}), json!({}));
        place(&mut c, "other", "n1", json!({"app": "db"}), json!({}));
        place(&mut c, "w3", "n2", json!({"app": "web"}), json!({}));
        // Matching labels in another namespace do not count.
        let mut elsewhere = (*pod("w4", Some("n2"), json!({"app": "web"}), json!({})).pod).clone();
        elsewhere.metadata.namespace = Some("other".into());
        c.set_pod(Arc::new(elsewhere));
        let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": "web"}}}]});
        let p = pod("new", None, json!({"app": "web"}), spread);
        let check = ClusterScore::prepare(&PodTopologySpread(SpreadDefaults::System), &p, &c);
        // Raw scores: the node's matching pods plus the pod itself; fewer is better.
        assert_eq!(check.score(&c.nodes["n1"]), 3);
        assert_eq!(check.score(&c.nodes["n2"]), 2);
        let mut scores = vec![3, 2];
        check.normalize(&mut scores);
        assert!(scores[1] > scores[0], "{scores:?}");
    }

    #[test]
    fn anti_affinity_keeps_replicas_apart_and_is_symmetric() {
        let mut c = cache(&[("n1", "a"), ("n2", "a"), ("n3", "b")]);
        let anti = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]}}});
        place(&mut c, "db-0", "n1", json!({"app": "db"}), anti.clone());
        let p = pod("db-1", None, json!({"app": "db"}), anti);
        let check = ClusterFilter::prepare(&InterPodAffinity, &p, &c);
        assert_eq!(
            verdicts(check.as_ref(), &c, &["n1", "n2", "n3"]),
            [false, true, true]
        );
        // A pod without rules is still kept off n1 by db-0's own anti-affinity, if it matches.
        let plain = pod("db-x", None, json!({"app": "db"}), json!({}));
        let check = ClusterFilter::prepare(&InterPodAffinity, &plain, &c);
        assert_eq!(
            check.filter(&c.nodes["n1"]).unwrap_err(),
            ["node(s) didn't satisfy existing pods anti-affinity rules"]
        );
    }

    #[test]
    fn pods_without_constraints_spread_by_their_replicaset_and_services() {
        let mut c = cache(&[("n1", "a"), ("n2", "a")]);
        let owned = |name: &str, node: Option<&str>| {
            let mut p: Pod = (*pod(
                name,
                node,
                json!({"app": "web", "pod-template-hash": "x"}),
                json!({}),
            )
            .pod)
                .clone();
            p.metadata.owner_references = Some(vec![serde_json::from_value(json!({
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-x", "uid": "u", "controller": true
            }))
            .unwrap()]);
            Arc::new(p)
        };
        for i in 0..4 {
            c.set_pod(owned(&format!("web-{i}"), Some("n1")));
        }
        let incoming = PodInfo::new(owned("web-new", None));
        let system = PodTopologySpread(SpreadDefaults::System);
        let scores = |c: &Cache| {
            let check = ClusterScore::prepare(&system, &incoming, c);
            let mut s: Vec<i64> = ["n1", "n2"].iter().map(|n| check.score(&c.nodes[*n])).collect();
            check.normalize(&mut s);
            s
        };
        // The ReplicaSet is unknown: no selector, no default constraints, no preference.
        let s = scores(&c);
        assert_eq!(s[0], s[1], "{s:?}");
        // With its selector known, n2 (none of its pods) is preferred.
        c.controllers.insert(
            "ReplicaSet/default/web-x".into(),
            serde_json::from_value(json!({"matchLabels": {"app": "web", "pod-template-hash": "x"}})).unwrap(),
        );
        let s = scores(&c);
        assert!(s[1] > s[0], "{s:?}");
        // A Service selecting the pod does the same without the ReplicaSet.
        c.controllers.clear();
        c.services.insert(
            "default/web".into(),
            ("default".into(), [("app".to_string(), "web".to_string())].into()),
        );
        let s = scores(&c);
        assert!(s[1] > s[0], "{s:?}");
        // defaultingType List with no constraints turns it off; nothing here is a hard filter.
        let off = PodTopologySpread(SpreadDefaults::List(Vec::new()));
        let check = ClusterScore::prepare(&off, &incoming, &c);
        assert_eq!(check.score(&c.nodes["n1"]), check.score(&c.nodes["n2"]));
        let hard = ClusterFilter::prepare(&system, &incoming, &c);
        assert!(hard.filter(&c.nodes["n1"]).is_ok());
    }

    #[test]
    fn namespace_selectors_pick_the_namespaces_a_term_looks_at() {
        let mut c = cache(&[("n1", "a"), ("n2", "a")]);
        // A db pod in namespace "prod" (labelled env=prod) on n1.
        let mut db: Pod = (*pod("db", Some("n1"), json!({"app": "db"}), json!({})).pod).clone();
        db.metadata.namespace = Some("prod".into());
        c.set_pod(Arc::new(db));
        c.namespace_labels
            .insert("prod".into(), [("env".to_string(), "prod".to_string())].into());
        c.namespace_labels.insert("default".into(), Default::default());
        let term = |ns_selector: serde_json::Value| {
            json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname",
                 "namespaceSelector": ns_selector}]}}})
        };
        let verdict = |spec: serde_json::Value| {
            let p = pod("web", None, json!({}), spec);
            let check = ClusterFilter::prepare(&InterPodAffinity, &p, &c);
            verdicts(check.as_ref(), &c, &["n1", "n2"])
        };
        // No selector: only the pod's own namespace (default), where no db runs.
        let own = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]}}});
        assert_eq!(verdict(own), [true, true]);
        // env=prod selects prod; env=dev selects nothing; {} selects every namespace.
        assert_eq!(
            verdict(term(json!({"matchLabels": {"env": "prod"}}))),
            [false, true]
        );
        assert_eq!(
            verdict(term(json!({"matchLabels": {"env": "dev"}}))),
            [true, true]
        );
        assert_eq!(verdict(term(json!({}))), [false, true]);
    }

    #[test]
    fn affinity_follows_its_group_by_zone() {
        let mut c = cache(&[("n1", "a"), ("n2", "a"), ("n3", "b")]);
        let affinity = json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "zone"}]}}});
        // No cache pod anywhere and the pod is not one: nowhere fits.
        let p = pod("web", None, json!({"app": "web"}), affinity.clone());
        let check = ClusterFilter::prepare(&InterPodAffinity, &p, &c);
        assert_eq!(
            verdicts(check.as_ref(), &c, &["n1", "n2", "n3"]),
            [false, false, false]
        );
        // The first of its own group may go anywhere.
        let first = pod("cache-0", None, json!({"app": "cache"}), affinity.clone());
        let check = ClusterFilter::prepare(&InterPodAffinity, &first, &c);
        assert_eq!(
            verdicts(check.as_ref(), &c, &["n1", "n2", "n3"]),
            [true, true, true]
        );
        // With a cache pod in zone a, web goes to zone a only.
        place(&mut c, "cache-0", "n2", json!({"app": "cache"}), json!({}));
        let check = ClusterFilter::prepare(&InterPodAffinity, &p, &c);
        assert_eq!(
            verdicts(check.as_ref(), &c, &["n1", "n2", "n3"]),
            [true, true, false]
        );
    }

    #[test]
    fn preferred_terms_score() {
        let mut c = cache(&[("n1", "a"), ("n2", "b")]);
        place(&mut c, "cache-0", "n1", json!({"app": "cache"}), json!({}));
        let pref = json!({"affinity": {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "zone"}}]}}});
        let p = pod("web", None, json!({}), pref);
        let check = ClusterScore::prepare(&InterPodAffinity, &p, &c);
        let mut scores = vec![check.score(&c.nodes["n1"]), check.score(&c.nodes["n2"])];
        check.normalize(&mut scores);
        assert_eq!(scores, [100, 0]);
    }
}

// ---------------------------------------------------------------------------------------------
// ImageLocality

/// The full reference a container runtime reports for an image name: `nginx` →
/// `docker.io/library/nginx:latest`.
pub fn normalize_image(name: &str) -> String {
    let (repo, suffix) = match name.find('@') {
        Some(i) => (&name[..i], name[i..].to_string()),
        None => {
            let last = name.rsplit('/').next().unwrap_or(name);
            match last.rfind(':') {
                Some(i) => {
                    let cut = name.len() - last.len() + i;
                    (&name[..cut], name[cut..].to_string())
                }
                None => (name, ":latest".to_string()),
            }
        }
    };
    let first = repo.split('/').next().unwrap_or("");
    let has_registry =
        repo.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let full = if has_registry {
        repo.to_string()
    } else if repo.contains('/') {
        format!("docker.io/{repo}")
    } else {
        format!("docker.io/library/{repo}")
    };
    format!("{full}{suffix}")
}

struct ImageCheck {
    /// Per image of the pod: (normalized name, nodes having it).
    images: Vec<(String, usize)>,
    total_nodes: usize,
}

const MIN_THRESHOLD: i64 = 23 * 1024 * 1024;
const MAX_CONTAINER_THRESHOLD: i64 = 1000 * 1024 * 1024;

fn node_images(node: &NodeInfo) -> impl Iterator<Item = (&String, i64)> {
    node.node
        .status
        .as_ref()
        .and_then(|s| s.images.as_ref())
        .into_iter()
        .flatten()
        .flat_map(|i| {
            i.names
                .iter()
                .flatten()
                .map(move |n| (n, i.size_bytes.unwrap_or(0)))
        })
}

impl NodeCheck for ImageCheck {
    /// Sizes of the pod's images already on the node, weighted by how widely each is spread
    /// (so one node holding an image does not attract everything), scaled between 23 MB and
    /// 1000 MB per container as upstream.
    fn score(&self, node: &NodeInfo) -> i64 {
        if self.images.is_empty() || self.total_nodes == 0 {
            return 0;
        }
        let mut sum = 0i64;
        for (image, spread) in &self.images {
            if let Some((_, size)) = node_images(node).find(|(n, _)| *n == image) {
                sum += size * *spread as i64 / self.total_nodes as i64;
            }
        }
        let max = MAX_CONTAINER_THRESHOLD * self.images.len() as i64;
        let sum = sum.clamp(MIN_THRESHOLD, max);
        plugins::MAX_NODE_SCORE * (sum - MIN_THRESHOLD) / (max - MIN_THRESHOLD)
    }
}

pub struct ImageLocality;

impl ClusterScore for ImageLocality {
    fn name(&self) -> &'static str {
        "ImageLocality"
    }
    fn prepare(&self, pod: &PodInfo, cache: &Cache) -> Box<dyn NodeCheck> {
        let names: Vec<String> = pod
            .pod
            .spec
            .as_ref()
            .map(|s| {
                s.containers
                    .iter()
                    .filter_map(|c| c.image.as_deref())
                    .map(normalize_image)
                    .collect()
            })
            .unwrap_or_default();
        let images = names
            .into_iter()
            .map(|n| {
                let spread = cache
                    .nodes
                    .values()
                    .filter(|node| node_images(node).any(|(i, _)| *i == n))
                    .count();
                (n, spread)
            })
            .collect();
        Box::new(ImageCheck {
            images,
            total_nodes: cache.nodes.len(),
        })
    }
}

#[cfg(test)]
mod image_tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::json;
    use std::sync::Arc;

    #[test]
    fn image_names_normalize_like_the_runtime_reports_them() {
        assert_eq!(normalize_image("nginx"), "docker.io/library/nginx:latest");
        assert_eq!(normalize_image("nginx:1.25"), "docker.io/library/nginx:1.25");
        assert_eq!(normalize_image("foo/bar"), "docker.io/foo/bar:latest");
        assert_eq!(normalize_image("localhost:5000/x:1"), "localhost:5000/x:1");
        assert_eq!(
            normalize_image("quay.io/a/b@sha256:abc"),
            "quay.io/a/b@sha256:abc"
        );
    }

    #[test]
    fn nodes_holding_the_image_score_higher() {
        let mut c = Cache::default();
        for (n, has) in [("with", true), ("without", false)] {
            let images = if has {
                json!([{"names": ["docker.io/library/nginx:latest"], "sizeBytes": 500 * 1024 * 1024}])
            } else {
                json!([])
            };
            let node: Node =
                serde_json::from_value(json!({"metadata": {"name": n}, "status": {"images": images}}))
                    .unwrap();
            c.set_node(Arc::new(node));
        }
        let pod: Pod = serde_json::from_value(
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}),
        )
        .unwrap();
        let info = PodInfo::new(Arc::new(pod));
        let check = ImageLocality.prepare(&info, &c);
        let (a, b) = (check.score(&c.nodes["with"]), check.score(&c.nodes["without"]));
        assert!(a > b && b == 0, "{a} {b}");
    }
}
