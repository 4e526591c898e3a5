//! API priority and fairness's configuration (flowcontrol.apiserver.k8s.io/v1): FlowSchemas
//! and PriorityLevelConfigurations, with upstream's defaults, validation and printer columns,
//! and the mandatory and suggested objects every cluster starts with (upstream's
//! `apf_configuration` bootstrap).

use async_trait::async_trait;
use r8s_api::validation::FieldError;
use serde_json::{json, Value};

use super::strategy::{age_cell, col, name_cell, Column, Strategy, AGE, NAME};

/// The annotation that lets the server keep a bootstrap object's spec up to date.
const AUTOUPDATE: &str = "apf.kubernetes.io/autoupdate-spec";

pub(crate) struct FlowSchemas;
pub(crate) struct PriorityLevels;

#[async_trait]
impl Strategy for FlowSchemas {
    fn tracks_generation(&self) -> bool {
        true
    }

    fn status_subresource(&self) -> bool {
        true
    }

    fn default(&self, obj: &mut Value) {
        let spec = &mut obj["spec"];
        if spec.is_object() && spec["matchingPrecedence"].is_null() {
            spec["matchingPrecedence"] = json!(1000);
        }
    }

    /// Upstream's `ValidateFlowSchema`, for what clients meet.
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let spec = &obj["spec"];
        let p = spec["matchingPrecedence"].as_i64().unwrap_or(0);
        if !(1..=10000).contains(&p) {
            errs.push(FieldError::invalid_raw(
                "spec.matchingPrecedence",
                &p.to_string(),
                "must be between 1 and 10000 inclusively",
            ));
        }
        if spec["priorityLevelConfiguration"]["name"]
            .as_str()
            .is_none_or(str::is_empty)
        {
            errs.push(FieldError::required(
                "spec.priorityLevelConfiguration.name",
                "must reference a priority level",
            ));
        }
        match spec["distinguisherMethod"]["type"].as_str() {
            None if spec["distinguisherMethod"].is_null() => {}
            Some("ByUser" | "ByNamespace") => {}
            other => errs.push(FieldError::not_supported(
                "spec.distinguisherMethod.type",
                other.unwrap_or(""),
                &["ByNamespace", "ByUser"],
            )),
        }
        for (i, rule) in spec["rules"].as_array().into_iter().flatten().enumerate() {
            if rule["subjects"].as_array().is_none_or(Vec::is_empty) {
                errs.push(FieldError::required(
                    format!("spec.rules[{i}].subjects"),
                    "subjects must contain at least one value",
                ));
            }
            if rule["resourceRules"].as_array().is_none_or(Vec::is_empty)
                && rule["nonResourceRules"].as_array().is_none_or(Vec::is_empty)
            {
                errs.push(FieldError::required(
                    format!("spec.rules[{i}]"),
                    "at least one of resourceRules and nonResourceRules has to be non-empty",
                ));
            }
        }
        errs
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col(
                "PriorityLevel",
                "string",
                "The priority level of this flow schema.",
            ),
            col(
                "MatchingPrecedence",
                "string",
                "The matching precedence of this flow schema.",
            ),
            col(
                "DistinguisherMethod",
                "string",
                "The distinguisher method of this flow schema.",
            ),
            AGE,
            col(
                "MissingPL",
                "string",
                "Whether the priority level referenced by this flow schema is missing.",
            ),
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let spec = &obj["spec"];
        let dangling = obj["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Dangling")
            .and_then(|c| c["status"].as_str())
            .map(|s| if s == "True" { "True" } else { "False" })
            .unwrap_or("?");
        vec![
            name_cell(obj),
            json!(spec["priorityLevelConfiguration"]["name"].as_str().unwrap_or("")),
            json!(spec["matchingPrecedence"].as_i64().unwrap_or(0).to_string()),
            json!(spec["distinguisherMethod"]["type"].as_str().unwrap_or("<none>")),
            age_cell(obj),
            json!(dangling),
        ]
    }
}

#[async_trait]
impl Strategy for PriorityLevels {
    fn tracks_generation(&self) -> bool {
        true
    }

    fn status_subresource(&self) -> bool {
        true
    }

    /// Upstream's `SetDefaults_PriorityLevelConfiguration` and its queuing defaults.
    fn default(&self, obj: &mut Value) {
        let spec = &mut obj["spec"];
        if spec["type"] == "Limited" && spec["limited"].is_object() {
            let l = &mut spec["limited"];
            if l["nominalConcurrencyShares"].is_null() {
                l["nominalConcurrencyShares"] = json!(30);
            }
            if l["lendablePercent"].is_null() {
                l["lendablePercent"] = json!(0);
            }
            if l["limitResponse"]["type"] == "Queue" {
                let q = &mut l["limitResponse"]["queuing"];
                for (k, v) in [("queues", 64), ("handSize", 8), ("queueLengthLimit", 50)] {
                    if q[k].is_null() || q[k] == 0 {
                        q[k] = json!(v);
                    }
                }
            }
        }
        if spec["type"] == "Exempt" {
            let e = &mut spec["exempt"];
            if !e.is_object() {
                *e = json!({});
            }
            for k in ["nominalConcurrencyShares", "lendablePercent"] {
                if e[k].is_null() {
                    e[k] = json!(0);
                }
            }
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let spec = &obj["spec"];
        match spec["type"].as_str().unwrap_or("") {
            "Limited" => {
                if !spec["limited"].is_object() {
                    errs.push(FieldError::required(
                        "spec.limited",
                        "must not be empty when type is Limited",
                    ));
                }
                let lr = &spec["limited"]["limitResponse"];
                match lr["type"].as_str().unwrap_or("") {
                    "Reject" | "Queue" => {}
                    other => errs.push(FieldError::not_supported(
                        "spec.limited.limitResponse.type",
                        other,
                        &["Queue", "Reject"],
                    )),
                }
                let lendable = spec["limited"]["lendablePercent"].as_i64().unwrap_or(0);
                if !(0..=100).contains(&lendable) {
                    errs.push(FieldError::invalid_raw(
                        "spec.limited.lendablePercent",
                        &lendable.to_string(),
                        "must be between 0 and 100, inclusive",
                    ));
                }
            }
            "Exempt" => {
                if !spec["limited"].is_null() {
                    errs.push(FieldError::forbidden(
                        "spec.limited",
                        "must be nil if the type is not Limited",
                    ));
                }
            }
            other => errs.push(FieldError::not_supported(
                "spec.type",
                other,
                &["Exempt", "Limited"],
            )),
        }
        errs
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col("Type", "string", "The type of the priority level."),
            col(
                "NominalConcurrencyShares",
                "string",
                "NominalConcurrencyShares of the priority level.",
            ),
            col("Queues", "string", "The number of queues of the priority level."),
            col("HandSize", "string", "The hand size of the priority level."),
            col(
                "QueueLengthLimit",
                "string",
                "The queue length limit of the priority level.",
            ),
            AGE,
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let spec = &obj["spec"];
        let shares = match spec["type"].as_str() {
            Some("Limited") => spec["limited"]["nominalConcurrencyShares"].as_i64(),
            Some("Exempt") => spec["exempt"]["nominalConcurrencyShares"].as_i64(),
            _ => None,
        };
        let q = &spec["limited"]["limitResponse"]["queuing"];
        let n = |v: &Value| {
            v.as_i64()
                .map(|n| n.to_string())
                .unwrap_or_else(|| "<none>".into())
        };
        vec![
            name_cell(obj),
            json!(spec["type"].as_str().unwrap_or("")),
            json!(shares.map(|s| s.to_string()).unwrap_or_else(|| "<none>".into())),
            json!(n(&q["queues"])),
            json!(n(&q["handSize"])),
            json!(n(&q["queueLengthLimit"])),
            age_cell(obj),
        ]
    }
}

fn object(kind: &str, name: &str, spec: Value, status: Value) -> Value {
    json!({
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": kind,
        "metadata": {
            "name": name,
            "uid": uuid::Uuid::new_v4().to_string(),
            "generation": 1,
            "creationTimestamp": super::meta::now_rfc3339(),
            "annotations": {AUTOUPDATE: "true"},
        },
        "spec": spec,
        "status": status,
    })
}

fn limited(shares: i64, lendable: i64, queuing: Option<(i64, i64, i64)>) -> Value {
    let limit_response = match queuing {
        Some((queues, hand, len)) => {
            json!({"type": "Queue", "queuing": {"queues": queues, "handSize": hand, "queueLengthLimit": len}})
        }
        None => json!({"type": "Reject"}),
    };
    json!({"type": "Limited", "limited": {"nominalConcurrencyShares": shares, "lendablePercent": lendable,
        "limitResponse": limit_response}})
}

fn everything() -> Value {
    json!({"resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": true, "namespaces": ["*"]}],
        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]})
}

fn rule(subjects: Value, rules: Value) -> Value {
    let mut r = rules;
    r["subjects"] = subjects;
    r
}

fn group(name: &str) -> Value {
    json!({"kind": "Group", "group": {"name": name}})
}

fn user(name: &str) -> Value {
    json!({"kind": "User", "user": {"name": name}})
}

fn flow_schema(name: &str, level: &str, precedence: i64, by: Option<&str>, rules: Vec<Value>) -> Value {
    let mut spec = json!({"priorityLevelConfiguration": {"name": level}, "matchingPrecedence": precedence, "rules": rules});
    if let Some(by) = by {
        spec["distinguisherMethod"] = json!({"type": by});
    }
    let status = json!({"conditions": [{"type": "Dangling", "status": "False",
        "lastTransitionTime": super::meta::now_rfc3339(), "reason": "Found",
        "message": format!("This FlowSchema references the PriorityLevelConfiguration object named \"{level}\" and it exists")}]});
    object("FlowSchema", name, spec, status)
}

/// Upstream's mandatory and suggested PriorityLevelConfigurations and FlowSchemas.
pub(crate) fn bootstrap_objects() -> (Vec<Value>, Vec<Value>) {
    let plc = |name: &str, spec: Value| object("PriorityLevelConfiguration", name, spec, json!({}));
    let levels = vec![
        plc(
            "exempt",
            json!({"type": "Exempt", "exempt": {"nominalConcurrencyShares": 0, "lendablePercent": 0}}),
        ),
        plc("catch-all", limited(5, 0, None)),
        plc("system", limited(30, 33, Some((64, 6, 50)))),
        plc("node-high", limited(40, 25, Some((64, 6, 50)))),
        plc("leader-election", limited(10, 0, Some((16, 4, 50)))),
        plc("workload-high", limited(40, 50, Some((128, 6, 50)))),
        plc("workload-low", limited(100, 90, Some((128, 6, 50)))),
        plc("global-default", limited(20, 50, Some((128, 6, 50)))),
    ];
    let all_resources = everything();
    let schemas = vec![
        flow_schema(
            "exempt",
            "exempt",
            1,
            None,
            vec![rule(json!([group("system:masters")]), all_resources.clone())],
        ),
        flow_schema(
            "probes",
            "exempt",
            2,
            None,
            vec![rule(
                json!([group("system:unauthenticated"), group("system:authenticated")]),
                json!({"nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/readyz", "/livez"]}]}),
            )],
        ),
        flow_schema(
            "system-leader-election",
            "leader-election",
            100,
            Some("ByUser"),
            vec![rule(
                json!([
                    user("system:kube-controller-manager"),
                    user("system:kube-scheduler")
                ]),
                json!({"resourceRules": [{"verbs": ["get", "create", "update"], "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"], "namespaces": ["*"]}]}),
            )],
        ),
        flow_schema(
            "system-node-high",
            "node-high",
            400,
            Some("ByUser"),
            vec![rule(
                json!([group("system:nodes")]),
                json!({"resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["nodes", "nodes/status"], "clusterScope": true},
                {"verbs": ["*"], "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "namespaces": ["*"]}]}),
            )],
        ),
        flow_schema(
            "system-nodes",
            "system",
            500,
            Some("ByUser"),
            vec![rule(json!([group("system:nodes")]), all_resources.clone())],
        ),
        flow_schema(
            "kube-controller-manager",
            "workload-high",
            800,
            Some("ByNamespace"),
            vec![rule(
                json!([user("system:kube-controller-manager")]),
                all_resources.clone(),
            )],
        ),
        flow_schema(
            "kube-scheduler",
            "workload-high",
            800,
            Some("ByNamespace"),
            vec![rule(
                json!([user("system:kube-scheduler")]),
                all_resources.clone(),
            )],
        ),
        flow_schema(
            "kube-system-service-accounts",
            "workload-high",
            900,
            Some("ByNamespace"),
            vec![rule(
                json!([{"kind": "ServiceAccount", "serviceAccount": {"namespace": "kube-system", "name": "*"}}]),
                all_resources.clone(),
            )],
        ),
        flow_schema(
            "service-accounts",
            "workload-low",
            9000,
            Some("ByUser"),
            vec![rule(
                json!([group("system:serviceaccounts")]),
                all_resources.clone(),
            )],
        ),
        flow_schema(
            "global-default",
            "global-default",
            9900,
            Some("ByUser"),
            vec![rule(
                json!([group("system:unauthenticated"), group("system:authenticated")]),
                all_resources.clone(),
            )],
        ),
        flow_schema(
            "catch-all",
            "catch-all",
            10000,
            Some("ByUser"),
            vec![rule(
                json!([group("system:unauthenticated"), group("system:authenticated")]),
                all_resources,
            )],
        ),
    ];
    (levels, schemas)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bootstrap_objects_are_valid() {
        let (levels, schemas) = bootstrap_objects();
        for l in &levels {
            let mut d = l.clone();
            PriorityLevels.default(&mut d);
            assert!(PriorityLevels.validate(&d).is_empty(), "{l}");
            assert_eq!(PriorityLevels.cells(&d).len(), PriorityLevels.columns().len());
        }
        for s in &schemas {
            assert!(
                FlowSchemas.validate(s).is_empty(),
                "{s}: {:?}",
                FlowSchemas.validate(s)
            );
            assert!(levels
                .iter()
                .any(|l| l["metadata"]["name"] == s["spec"]["priorityLevelConfiguration"]["name"]));
        }
        let bad = json!({"spec": {"matchingPrecedence": 0, "priorityLevelConfiguration": {"name": ""}}});
        let errs: Vec<String> = FlowSchemas
            .validate(&bad)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            errs[0],
            "spec.matchingPrecedence: Invalid value: 0: must be between 1 and 10000 inclusively"
        );
    }
}
