//! Resource quota accounting (upstream's `k8s.io/apiserver/pkg/quota/v1` and
//! `pkg/quota/v1/evaluator/core`): resource lists of [`Quantity`], and the evaluators that
//! say which quota resources an object uses — pods (compute resources and counts, with the
//! quota scopes), services, persistent volume claims, and a plain object count
//! (`count/<resource>.<group>`) for everything else.
//!
//! Shared by the ResourceQuota admission plugin (which charges a create against the quotas of
//! its namespace) and the resourcequota controller (which recounts usage from the objects).
//! Objects are JSON as the API server stores them.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use crate::quantity::Quantity;

pub use crate::resources::{add, ResourceList};

/// A `ResourceList` from its JSON form; values that are not quantities are left out.
pub fn parse_list(v: &Value) -> ResourceList {
    v.as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, q)| {
            let q = match q {
                Value::String(s) => Quantity::parse(s).ok()?,
                Value::Number(n) => Quantity::parse(&n.to_string()).ok()?,
                _ => return None,
            };
            Some((k.clone(), q))
        })
        .collect()
}

/// The JSON form, each quantity in its canonical string.
pub fn to_json(list: &ResourceList) -> Value {
    Value::Object(
        list.iter()
            .map(|(k, q)| (k.clone(), json!(q.to_string())))
            .collect(),
    )
}

/// `a - b`, never below zero; keys only in `b` are zero (upstream
/// `SubtractWithNonNegativeResult`).
pub fn subtract_non_negative(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let mut out = ResourceList::new();
    for (k, v) in a {
        let d = match b.get(k) {
            Some(o) => v.sub(o),
            None => *v,
        };
        out.insert(k.clone(), if d.sign() > 0 { d } else { Quantity::default() });
    }
    for k in b.keys() {
        out.entry(k.clone()).or_default();
    }
    out
}

/// Only the entries named in `names`.
pub fn mask<'a>(list: &ResourceList, names: impl IntoIterator<Item = &'a String>) -> ResourceList {
    names
        .into_iter()
        .filter_map(|n| list.get(n).map(|q| (n.clone(), *q)))
        .collect()
}

/// Whether every entry of `a` that `b` also has is at most `b`'s; the names that exceed.
pub fn less_than_or_equal(a: &ResourceList, b: &ResourceList) -> (bool, Vec<String>) {
    let exceeded: Vec<String> = b
        .iter()
        .filter(|(k, v)| a.get(*k).is_some_and(|q| q > *v))
        .map(|(k, _)| k.clone())
        .collect();
    (exceeded.is_empty(), exceeded)
}

/// Same names with equal values (formats aside).
pub fn equals(a: &ResourceList, b: &ResourceList) -> bool {
    a.len() == b.len() && a.iter().all(|(k, v)| b.get(k) == Some(v))
}

pub fn remove_zeros(list: &ResourceList) -> ResourceList {
    list.iter()
        .filter(|(_, q)| !q.is_zero())
        .map(|(k, q)| (k.clone(), *q))
        .collect()
}

/// Names whose quantity is negative.
pub fn negative(list: &ResourceList) -> Vec<String> {
    list.iter()
        .filter(|(_, q)| q.sign() < 0)
        .map(|(k, _)| k.clone())
        .collect()
}

/// `a=1,b=2`, sorted by name, as upstream's quota errors print lists.
pub fn pretty_print(list: &ResourceList) -> String {
    list.iter()
        .map(|(k, q)| format!("{k}={q}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The quota resource that counts objects of a group/resource (`count/pods`,
/// `count/deployments.apps`).
pub fn object_count_name(group: &str, resource: &str) -> String {
    if group.is_empty() {
        format!("count/{resource}")
    } else {
        format!("count/{resource}.{group}")
    }
}

/// One of a quota's scopes: `spec.scopes` entries (operator Exists) and
/// `spec.scopeSelector.matchExpressions`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScopeSelector {
    pub scope_name: String,
    pub operator: String,
    pub values: Vec<String>,
}

/// Every scope a quota restricts itself to.
pub fn scope_selectors(quota: &Value) -> Vec<ScopeSelector> {
    let mut out: Vec<ScopeSelector> = quota["spec"]["scopes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|s| ScopeSelector {
            scope_name: s.to_owned(),
            operator: "Exists".into(),
            values: Vec::new(),
        })
        .collect();
    for e in quota["spec"]["scopeSelector"]["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        out.push(ScopeSelector {
            scope_name: e["scopeName"].as_str().unwrap_or("").to_owned(),
            operator: e["operator"].as_str().unwrap_or("").to_owned(),
            values: e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect(),
        });
    }
    out
}

/// The resource names of a list.
pub fn names(list: &ResourceList) -> Vec<String> {
    list.keys().cloned().collect()
}

const POD_RESOURCES: &[&str] = &[
    "count/pods",
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
];

/// The quota resources that, when a quota tracks them, every container must state (upstream
/// keeps this "mistake" for compatibility and no more).
const POD_VALIDATION_SET: &[&str] = &[
    "cpu",
    "memory",
    "requests.cpu",
    "requests.memory",
    "limits.cpu",
    "limits.memory",
];

const SERVICE_RESOURCES: &[&str] = &[
    "count/services",
    "services",
    "services.loadbalancers",
    "services.nodeports",
];

const PVC_RESOURCES: &[&str] = &[
    "count/persistentvolumeclaims",
    "persistentvolumeclaims",
    "requests.storage",
];

const STORAGE_CLASS_SUFFIX: &str = ".storageclass.storage.k8s.io/";

/// What measures the quota usage of one kind of object (upstream's `quota.Evaluator`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Evaluator {
    Pods,
    Services,
    PersistentVolumeClaims,
    /// `count/<resource>.<group>`, plus a legacy alias (`configmaps`, `secrets`, ...).
    ObjectCount {
        group: String,
        resource: String,
        alias: Option<&'static str>,
    },
}

/// Core resources whose object count also answers to their old quota name.
const LEGACY_ALIASES: &[(&str, &str)] = &[
    ("configmaps", "configmaps"),
    ("resourcequotas", "resourcequotas"),
    ("replicationcontrollers", "replicationcontrollers"),
    ("secrets", "secrets"),
];

impl Evaluator {
    /// The evaluator for objects of `group`/`resource`.
    pub fn for_resource(group: &str, resource: &str) -> Evaluator {
        match (group, resource) {
            ("", "pods") => Evaluator::Pods,
            ("", "services") => Evaluator::Services,
            ("", "persistentvolumeclaims") => Evaluator::PersistentVolumeClaims,
            _ => Evaluator::ObjectCount {
                group: group.to_owned(),
                resource: resource.to_owned(),
                alias: if group.is_empty() {
                    LEGACY_ALIASES
                        .iter()
                        .find(|(r, _)| *r == resource)
                        .map(|(_, a)| *a)
                } else {
                    None
                },
            },
        }
    }

    /// The evaluators a quota with these hard resources needs: the built-in ones, and an
    /// object counter for each `count/<resource>.<group>` none of them covers.
    pub fn for_quota(hard: &[String]) -> Vec<Evaluator> {
        let mut out = vec![
            Evaluator::Pods,
            Evaluator::Services,
            Evaluator::PersistentVolumeClaims,
        ];
        for (r, _) in LEGACY_ALIASES {
            out.push(Evaluator::for_resource("", r));
        }
        for name in hard {
            let Some(rest) = name.strip_prefix("count/") else {
                continue;
            };
            if out
                .iter()
                .any(|e| !e.matching_resources(std::slice::from_ref(name)).is_empty())
            {
                continue;
            }
            let (resource, group) = rest.split_once('.').unwrap_or((rest, ""));
            out.push(Evaluator::for_resource(group, resource));
        }
        out
    }

    /// (group, resource) of the objects measured.
    pub fn group_resource(&self) -> (&str, &str) {
        match self {
            Evaluator::Pods => ("", "pods"),
            Evaluator::Services => ("", "services"),
            Evaluator::PersistentVolumeClaims => ("", "persistentvolumeclaims"),
            Evaluator::ObjectCount { group, resource, .. } => (group, resource),
        }
    }

    /// Of `input`, the resource names this evaluator measures.
    pub fn matching_resources(&self, input: &[String]) -> Vec<String> {
        input
            .iter()
            .filter(|n| match self {
                Evaluator::Pods => {
                    POD_RESOURCES.contains(&n.as_str())
                        || n.starts_with("hugepages-")
                        || n.starts_with("requests.hugepages-")
                        || is_extended_quota_name(n)
                }
                Evaluator::Services => SERVICE_RESOURCES.contains(&n.as_str()),
                Evaluator::PersistentVolumeClaims => {
                    PVC_RESOURCES.contains(&n.as_str())
                        || n.split_once(STORAGE_CLASS_SUFFIX)
                            .is_some_and(|(_, r)| r == "persistentvolumeclaims" || r == "requests.storage")
                }
                Evaluator::ObjectCount {
                    group,
                    resource,
                    alias,
                } => **n == object_count_name(group, resource) || alias.is_some_and(|a| a == n.as_str()),
            })
            .cloned()
            .collect()
    }

    /// Whether the object falls in the scope (upstream's `MatchesScopeFunc`); objects other
    /// than pods fall in none.
    pub fn matches_scope(&self, selector: &ScopeSelector, obj: &Value) -> bool {
        if *self != Evaluator::Pods {
            return false;
        }
        let spec = &obj["spec"];
        match selector.scope_name.as_str() {
            "Terminating" => pod_is_terminating(spec),
            "NotTerminating" => !pod_is_terminating(spec),
            "BestEffort" => pod_is_best_effort(spec),
            "NotBestEffort" => !pod_is_best_effort(spec),
            "PriorityClass" => {
                let class = spec["priorityClassName"].as_str().filter(|c| !c.is_empty());
                match selector.operator.as_str() {
                    "Exists" => class.is_some(),
                    "DoesNotExist" => class.is_none(),
                    "In" => class.is_some_and(|c| selector.values.iter().any(|v| v == c)),
                    "NotIn" => class.is_none_or(|c| !selector.values.iter().any(|v| v == c)),
                    _ => false,
                }
            }
            "CrossNamespacePodAffinity" => pod_uses_cross_namespace_affinity(spec),
            _ => false,
        }
    }

    /// Whether a quota (by its `status.hard` and scopes) applies to the object.
    pub fn matches(&self, quota: &Value, obj: &Value) -> bool {
        let hard = names(&parse_list(&quota["status"]["hard"]));
        !self.matching_resources(&hard).is_empty()
            && scope_selectors(quota).iter().all(|s| self.matches_scope(s, obj))
    }

    /// What the object must state when a quota tracks `required` (pods only): the error text
    /// after `failed quota: <name>: `.
    pub fn constraints(&self, required: &[String], obj: &Value) -> Result<(), String> {
        if *self != Evaluator::Pods {
            return Ok(());
        }
        let required: BTreeSet<&str> = required
            .iter()
            .map(String::as_str)
            .filter(|r| POD_VALIDATION_SET.contains(r))
            .collect();
        if required.is_empty() {
            return Ok(());
        }
        let mut missing: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        for c in containers(&obj["spec"]) {
            let usage = pod_compute_usage(
                &parse_list(&c["resources"]["requests"]),
                &parse_list(&c["resources"]["limits"]),
            );
            for r in &required {
                if !usage.contains_key(*r) {
                    missing
                        .entry(r)
                        .or_default()
                        .insert(c["name"].as_str().unwrap_or("").to_owned());
                }
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        let parts: Vec<String> = missing
            .iter()
            .map(|(r, cs)| format!("{r} for: {}", cs.iter().cloned().collect::<Vec<_>>().join(",")))
            .collect();
        Err(format!("must specify {}", parts.join("; ")))
    }

    /// The quota usage of one object. `now` (Unix seconds) tells whether a pod's deletion
    /// grace period has run out.
    pub fn usage(&self, obj: &Value, now: i64) -> ResourceList {
        let one = Quantity::from_units(1);
        match self {
            Evaluator::Pods => {
                let mut out = ResourceList::from([("count/pods".to_owned(), one)]);
                if !pod_counts_for_quota(obj, now) {
                    return out;
                }
                let spec = &obj["spec"];
                out = add(&out, &pod_compute_usage(&pod_requests(spec), &pod_limits(spec)));
                out
            }
            Evaluator::Services => {
                let spec = &obj["spec"];
                let ports = spec["ports"].as_array().map(Vec::len).unwrap_or(0) as i64;
                let mut out = ResourceList::from([
                    ("count/services".to_owned(), one),
                    ("services".to_owned(), one),
                    ("services.loadbalancers".to_owned(), Quantity::default()),
                    ("services.nodeports".to_owned(), Quantity::default()),
                ]);
                match spec["type"].as_str() {
                    Some("NodePort") => {
                        out.insert("services.nodeports".into(), Quantity::from_units(ports));
                    }
                    Some("LoadBalancer") => {
                        let node_ports = if spec["allocateLoadBalancerNodePorts"] == false {
                            spec["ports"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .filter(|p| p["nodePort"].as_i64().unwrap_or(0) != 0)
                                .count() as i64
                        } else {
                            ports
                        };
                        out.insert("services.nodeports".into(), Quantity::from_units(node_ports));
                        out.insert("services.loadbalancers".into(), one);
                    }
                    _ => {}
                }
                out
            }
            Evaluator::PersistentVolumeClaims => {
                let mut out = ResourceList::from([
                    ("count/persistentvolumeclaims".to_owned(), one),
                    ("persistentvolumeclaims".to_owned(), one),
                ]);
                let class = obj["spec"]["storageClassName"].as_str().filter(|c| !c.is_empty());
                if let Some(c) = class {
                    out.insert(format!("{c}{STORAGE_CLASS_SUFFIX}persistentvolumeclaims"), one);
                }
                let requested = parse_list(&obj["spec"]["resources"]["requests"])
                    .get("storage")
                    .copied();
                let allocated = parse_list(&obj["status"]["allocatedResources"])
                    .get("storage")
                    .copied();
                let storage = match (requested, allocated) {
                    (Some(r), Some(a)) => Some(r.max(a)),
                    (r, a) => r.or(a),
                };
                if let Some(s) = storage {
                    out.insert("requests.storage".into(), s);
                    if let Some(c) = class {
                        out.insert(format!("{c}{STORAGE_CLASS_SUFFIX}requests.storage"), s);
                    }
                }
                out
            }
            Evaluator::ObjectCount {
                group,
                resource,
                alias,
            } => {
                let mut out = ResourceList::from([(object_count_name(group, resource), one)]);
                if let Some(a) = alias {
                    out.insert((*a).to_owned(), one);
                }
                out
            }
        }
    }

    /// The summed usage of `items` that fall in every one of `scopes`, with a zero for each of
    /// `resources` nothing uses (upstream's `CalculateUsageStats`).
    pub fn usage_stats(
        &self,
        items: &[Value],
        scopes: &[ScopeSelector],
        resources: &[String],
        now: i64,
    ) -> ResourceList {
        let mut used: ResourceList = resources
            .iter()
            .map(|r| (r.clone(), Quantity::default()))
            .collect();
        for item in items {
            if scopes.iter().all(|s| self.matches_scope(s, item)) {
                used = add(&used, &self.usage(item, now));
            }
        }
        used
    }
}

/// `requests.<name>` of an extended resource (`example.com/gpu`).
fn is_extended_quota_name(name: &str) -> bool {
    name.strip_prefix("requests.")
        .is_some_and(|r| r.contains('/') && !r.contains("kubernetes.io/"))
}

fn is_extended_resource(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/") && !name.starts_with("requests.")
}

/// Containers and init containers.
fn containers(spec: &Value) -> impl Iterator<Item = &Value> {
    spec["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(spec["initContainers"].as_array().into_iter().flatten())
}

/// What a pod (or one container) with these requests and limits uses of the quota's compute
/// resources (upstream `podComputeUsageHelper`).
fn pod_compute_usage(requests: &ResourceList, limits: &ResourceList) -> ResourceList {
    let mut out = ResourceList::from([("pods".to_owned(), Quantity::from_units(1))]);
    for r in ["cpu", "memory", "ephemeral-storage"] {
        if let Some(q) = requests.get(r) {
            out.insert(r.to_owned(), *q);
            out.insert(format!("requests.{r}"), *q);
        }
        if let Some(q) = limits.get(r) {
            out.insert(format!("limits.{r}"), *q);
        }
    }
    for (r, q) in requests {
        if r.starts_with("hugepages-") {
            out.insert(r.clone(), *q);
            out.insert(format!("requests.{r}"), *q);
        }
        if is_extended_resource(r) {
            out.insert(format!("requests.{r}"), *q);
        }
    }
    out
}

fn is_sidecar(c: &Value) -> bool {
    c["restartPolicy"] == "Always"
}

/// The pod's effective `requests` or `limits` (`field`), without overhead: upstream's
/// `PodRequests`/`PodLimits` through [`crate::resources::effective`], the one rule every
/// component counts a pod with, on the pod as the API server stores it.
pub fn pod_effective(spec: &Value, field: &str) -> ResourceList {
    crate::resources::effective(
        spec["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| parse_list(&c["resources"][field])),
        spec["initContainers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| (parse_list(&c["resources"][field]), is_sidecar(c))),
    )
}

fn pod_requests(spec: &Value) -> ResourceList {
    let reqs = pod_effective(spec, "requests");
    add(&reqs, &parse_list(&spec["overhead"]))
}

fn pod_limits(spec: &Value) -> ResourceList {
    let mut limits = pod_effective(spec, "limits");
    for (k, v) in parse_list(&spec["overhead"]) {
        if let Some(q) = limits.get(&k) {
            let sum = q.add(&v);
            limits.insert(k, sum);
        }
    }
    limits
}

fn pod_is_terminating(spec: &Value) -> bool {
    spec["activeDeadlineSeconds"].as_i64().is_some_and(|s| s >= 0)
}

/// No container asks for or is limited in cpu or memory.
fn pod_is_best_effort(spec: &Value) -> bool {
    !containers(spec).any(|c| {
        ["requests", "limits"].iter().any(|f| {
            let list = parse_list(&c["resources"][*f]);
            ["cpu", "memory"]
                .iter()
                .any(|r| list.get(*r).is_some_and(|q| !q.is_zero()))
        })
    })
}

fn pod_uses_cross_namespace_affinity(spec: &Value) -> bool {
    let cross = |t: &Value| {
        t["namespaces"].as_array().is_some_and(|n| !n.is_empty()) || !t["namespaceSelector"].is_null()
    };
    ["podAffinity", "podAntiAffinity"].iter().any(|kind| {
        let a = &spec["affinity"][*kind];
        a["requiredDuringSchedulingIgnoredDuringExecution"]
            .as_array()
            .into_iter()
            .flatten()
            .any(cross)
            || a["preferredDuringSchedulingIgnoredDuringExecution"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|w| cross(&w["podAffinityTerm"]))
    })
}

/// Whether a pod is charged for compute resources (upstream `QuotaV1Pod`): not once it has
/// finished (Succeeded, Failed), nor once its deletion grace period has run out.
pub fn pod_counts_for_quota(pod: &Value, now: i64) -> bool {
    if matches!(pod["status"]["phase"].as_str(), Some("Succeeded" | "Failed")) {
        return false;
    }
    if let (Some(at), Some(grace)) = (
        pod["metadata"]["deletionTimestamp"].as_str(),
        pod["metadata"]["deletionGracePeriodSeconds"].as_i64(),
    ) {
        if let Some(t) = unix_seconds(at) {
            if now > t + grace {
                return false;
            }
        }
    }
    true
}

/// Seconds since the epoch of an RFC 3339 time (`2024-05-06T07:08:09Z`, optionally with a
/// fraction or an offset).
pub fn unix_seconds(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut rest = &s[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        o if o.len() == 6 && (o.starts_with('+') || o.starts_with('-')) => {
            let m = o[1..3].parse::<i64>().ok()? * 3600 + o[4..6].parse::<i64>().ok()? * 60;
            if o.starts_with('-') {
                -m
            } else {
                m
            }
        }
        _ => return None,
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + mi * 60 + sec - offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(pairs: &[(&str, &str)]) -> ResourceList {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity::parse(v).unwrap()))
            .collect()
    }

    #[test]
    fn pod_usage_counts_requests_limits_and_init_containers() {
        let pod = json!({"spec": {
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "200m"}}},
                {"name": "b", "resources": {"requests": {"cpu": "200m", "memory": "64Mi"}}},
            ],
            "initContainers": [
                {"name": "i", "resources": {"requests": {"cpu": "1", "memory": "10Mi"}}},
            ],
        }, "status": {"phase": "Pending"}});
        let u = Evaluator::Pods.usage(&pod, 0);
        assert_eq!(
            pretty_print(&u),
            "count/pods=1,cpu=1,limits.cpu=200m,memory=128Mi,pods=1,requests.cpu=1,requests.memory=128Mi"
        );
        let done = json!({"spec": pod["spec"], "status": {"phase": "Succeeded"}});
        assert_eq!(pretty_print(&Evaluator::Pods.usage(&done, 0)), "count/pods=1");
    }

    #[test]
    fn constraints_name_every_container_missing_a_tracked_value() {
        let pod = json!({"spec": {"containers": [
            {"name": "c", "resources": {}},
            {"name": "d", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}},
        ]}});
        let err = Evaluator::Pods
            .constraints(&["limits.cpu".into(), "requests.cpu".into(), "pods".into()], &pod)
            .unwrap_err();
        assert_eq!(err, "must specify limits.cpu for: c; requests.cpu for: c");
        assert!(Evaluator::Pods.constraints(&["pods".into()], &pod).is_ok());
    }

    #[test]
    fn scopes_and_matching() {
        let quota = json!({"spec": {"scopes": ["BestEffort"]}, "status": {"hard": {"pods": "2"}}});
        let best_effort = json!({"spec": {"containers": [{"name": "c"}]}});
        let burstable =
            json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}});
        assert!(Evaluator::Pods.matches(&quota, &best_effort));
        assert!(!Evaluator::Pods.matches(&quota, &burstable));
        // Object counts match no scoped quota.
        let cm = Evaluator::for_resource("", "configmaps");
        let counted = json!({"status": {"hard": {"configmaps": "1"}}});
        assert!(cm.matches(&counted, &json!({})));
        assert!(!cm.matches(
            &json!({"spec": {"scopes": ["BestEffort"]}, "status": {"hard": {"configmaps": "1"}}}),
            &json!({})
        ));
        let class = json!({"spec": {"scopeSelector": {"matchExpressions": [
            {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}},
            "status": {"hard": {"pods": "1"}}});
        assert!(Evaluator::Pods.matches(&class, &json!({"spec": {"priorityClassName": "high"}})));
        assert!(!Evaluator::Pods.matches(&class, &json!({"spec": {}})));
    }

    #[test]
    fn evaluators_for_object_counts() {
        let evs = Evaluator::for_quota(&["count/deployments.apps".into(), "count/pods".into()]);
        let deploy = evs
            .iter()
            .find(|e| e.group_resource() == ("apps", "deployments"))
            .unwrap();
        assert_eq!(
            pretty_print(&deploy.usage(&json!({}), 0)),
            "count/deployments.apps=1"
        );
        // count/pods is the pod evaluator's, not a second counter.
        assert_eq!(evs.iter().filter(|e| e.group_resource().1 == "pods").count(), 1);
        let secrets = Evaluator::for_resource("", "secrets");
        assert_eq!(
            pretty_print(&secrets.usage(&json!({}), 0)),
            "count/secrets=1,secrets=1"
        );
        let svc = json!({"spec": {"type": "NodePort", "ports": [{"port": 80}, {"port": 443}]}});
        assert_eq!(
            pretty_print(&Evaluator::Services.usage(&svc, 0)),
            "count/services=1,services=1,services.loadbalancers=0,services.nodeports=2"
        );
    }

    #[test]
    fn list_arithmetic() {
        let a = list(&[("pods", "2"), ("cpu", "1")]);
        let b = list(&[("pods", "3"), ("memory", "1Gi")]);
        assert_eq!(pretty_print(&add(&a, &b)), "cpu=1,memory=1Gi,pods=5");
        assert_eq!(
            pretty_print(&subtract_non_negative(&a, &b)),
            "cpu=1,memory=0,pods=0"
        );
        let (ok, exceeded) = less_than_or_equal(&list(&[("pods", "3"), ("cpu", "1")]), &a);
        assert!(!ok);
        assert_eq!(exceeded, vec!["pods".to_string()]);
        assert!(equals(&list(&[("cpu", "1000m")]), &list(&[("cpu", "1")])));
    }

    #[test]
    fn deletion_grace_ends_the_charge() {
        let t = unix_seconds("2024-05-06T07:08:09Z").unwrap();
        assert_eq!(t, 1_714_979_289);
        assert_eq!(unix_seconds("2024-05-06T09:08:09.5+02:00"), Some(t));
        let pod = json!({"metadata": {"deletionTimestamp": "2024-05-06T07:08:09Z", "deletionGracePeriodSeconds": 30}});
        assert!(pod_counts_for_quota(&pod, t + 10));
        assert!(!pod_counts_for_quota(&pod, t + 31));
    }
}
