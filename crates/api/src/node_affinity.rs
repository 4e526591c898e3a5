//! Node selectors and node affinity (upstream `component-helpers/scheduling/corev1/nodeaffinity`):
//! whether a node matches a pod's `nodeSelector` and required node affinity, and the weight of
//! the preferred terms it matches. The scheduler's NodeAffinity plugin and the kubelet's
//! admission both ask here, so they cannot disagree about a node.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeSelectorRequirement, NodeSelectorTerm, PodSpec};

/// One requirement against a label's (or field's) value; `Gt`/`Lt` compare integers.
pub fn match_requirement(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values: &[String] = r.values.as_deref().unwrap_or(&[]);
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), Some(bound)) = (
                value.and_then(|v| v.parse::<i64>().ok()),
                values.first().and_then(|b| b.parse::<i64>().ok()),
            ) else {
                return false;
            };
            if r.operator == "Gt" {
                v > bound
            } else {
                v < bound
            }
        }
        _ => false,
    }
}

/// A node selector term: all its expressions on labels and fields (only `metadata.name`)
/// match. An empty term matches nothing, as upstream.
pub fn match_term(
    term: &NodeSelectorTerm,
    node_name: &str,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    let exprs: &[NodeSelectorRequirement] = term.match_expressions.as_deref().unwrap_or(&[]);
    let fields: &[NodeSelectorRequirement] = term.match_fields.as_deref().unwrap_or(&[]);
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    exprs
        .iter()
        .all(|r| match_requirement(r, labels.and_then(|l| l.get(&r.key)).map(String::as_str)))
        && fields.iter().all(|r| {
            let v = (r.key == "metadata.name").then_some(node_name);
            match_requirement(r, v)
        })
}

fn name_and_labels(node: &Node) -> (&str, Option<&BTreeMap<String, String>>) {
    (
        node.metadata.name.as_deref().unwrap_or(""),
        node.metadata.labels.as_ref(),
    )
}

/// Does `node` match the pod's `nodeSelector` and its required node affinity (any of the
/// terms)? Upstream's `GetRequiredNodeAffinity(pod).Match(node)`.
pub fn matches_required(spec: Option<&PodSpec>, node: &Node) -> bool {
    let (name, labels) = name_and_labels(node);
    let selector_ok = spec
        .and_then(|s| s.node_selector.as_ref())
        .is_none_or(|sel| sel.iter().all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v)));
    let required = spec
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref());
    selector_ok && required.is_none_or(|r| r.node_selector_terms.iter().any(|t| match_term(t, name, labels)))
}

/// The summed weights of the preferred node affinity terms `node` matches.
pub fn preferred_weight(spec: Option<&PodSpec>, node: &Node) -> i64 {
    let (name, labels) = name_and_labels(node);
    spec.and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_ref())
        .map(|terms| {
            terms
                .iter()
                .filter(|t| t.weight != 0 && match_term(&t.preference, name, labels))
                .map(|t| t.weight as i64)
                .sum()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node() -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n1", "labels": {"disk": "ssd", "cores": "8"}}}))
            .unwrap()
    }

    fn spec(v: serde_json::Value) -> PodSpec {
        let mut v = v;
        v["containers"] = json!([]);
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn selector_and_required_terms() {
        let n = node();
        assert!(matches_required(None, &n));
        assert!(matches_required(
            Some(&spec(json!({"nodeSelector": {"disk": "ssd"}}))),
            &n
        ));
        assert!(!matches_required(
            Some(&spec(json!({"nodeSelector": {"disk": "hdd"}}))),
            &n
        ));
        let aff = |expr: serde_json::Value| {
            spec(
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [expr]}}}}),
            )
        };
        assert!(matches_required(
            Some(&aff(
                json!({"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["4"]}]})
            )),
            &n
        ));
        assert!(!matches_required(
            Some(&aff(
                json!({"matchExpressions": [{"key": "cores", "operator": "Lt", "values": ["4"]}]})
            )),
            &n
        ));
        assert!(matches_required(
            Some(&aff(
                json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]})
            )),
            &n
        ));
        assert!(
            !matches_required(Some(&aff(json!({}))), &n),
            "an empty term matches nothing"
        );
    }

    #[test]
    fn preferred_weights_sum() {
        let s = spec(
            json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 3, "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}},
                {"weight": 5, "preference": {"matchExpressions": [{"key": "disk", "operator": "Exists"}]}},
                {"weight": 7, "preference": {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}}
            ]}}}),
        );
        assert_eq!(preferred_weight(Some(&s), &node()), 8);
    }
}
