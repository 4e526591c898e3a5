//! Deployments and ReplicaSets (upstream's `pkg/registry/apps`): defaults, validation (a
//! selector that matches the template and cannot change, pods that restart always, a rolling
//! update that can progress), the tables.

use std::collections::BTreeMap;

use r8s_api::validation::FieldError;
use serde_json::{json, Map, Value};

use super::meta;
use super::pods::{defaults as pod_defaults, validation as pod_validation};
use super::strategy::{age_cell, col, name_cell, wide, Column, Strategy, AGE, NAME};

/// Deployments (`deployment: true`) or ReplicaSets.
pub(crate) struct Workloads {
    pub deployment: bool,
}

impl Strategy for Workloads {
    fn status_keeps_metadata(&self) -> &'static [&'static str] {
        &["labels"]
    }

    fn canonicalize_quantities(&self, obj: &mut Value) -> Result<(), &'static str> {
        let template = obj
            .get_mut("spec")
            .and_then(|s| s.get_mut("template"))
            .and_then(|t| t.get_mut("spec"));
        super::quantities::pod_spec(template)
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn status_subresource(&self) -> bool {
        true
    }

    fn default(&self, obj: &mut Value) {
        let spec = &mut obj["spec"];
        if !spec.is_object() {
            return;
        }
        if spec.get("replicas").is_none_or(Value::is_null) {
            spec["replicas"] = json!(1);
        }
        if self.deployment {
            if spec["strategy"]["type"].as_str().is_none_or(str::is_empty) {
                spec["strategy"]["type"] = json!("RollingUpdate");
            }
            if spec["strategy"]["type"] == "RollingUpdate" {
                let ru = &mut spec["strategy"]["rollingUpdate"];
                if ru.is_null() {
                    *ru = json!({});
                }
                if ru.get("maxUnavailable").is_none_or(Value::is_null) {
                    ru["maxUnavailable"] = json!("25%");
                }
                if ru.get("maxSurge").is_none_or(Value::is_null) {
                    ru["maxSurge"] = json!("25%");
                }
            }
            if spec.get("revisionHistoryLimit").is_none_or(Value::is_null) {
                spec["revisionHistoryLimit"] = json!(10);
            }
            if spec.get("progressDeadlineSeconds").is_none_or(Value::is_null) {
                spec["progressDeadlineSeconds"] = json!(600);
            }
        }
        pod_defaults::pod_spec(&mut spec["template"]["spec"]);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let spec = &obj["spec"];
        selector_matches_template(&mut errs, spec, "deployment");
        replicas_not_negative(&mut errs, spec);
        pod_validation::pod_spec(&mut errs, "spec.template.spec", &spec["template"]["spec"]);
        workload(&mut errs, self.deployment, spec);
        errs
    }

    /// Which pods a workload owns cannot change under it (apps/v1).
    fn validate_update(&self, obj: &Value, old: &Value) -> Vec<FieldError> {
        let selector = |v: &Value| {
            let mut sel = v["spec"]["selector"].clone();
            if let Some(m) = sel.as_object_mut() {
                // Nil and empty are equal here, as upstream's semantic equality has them.
                m.retain(|_, v| {
                    !(v.is_null()
                        || v.as_object().is_some_and(Map::is_empty)
                        || v.as_array().is_some_and(Vec::is_empty))
                });
            }
            sel
        };
        if selector(obj) == selector(old) {
            return Vec::new();
        }
        vec![FieldError::invalid_raw(
            "spec.selector",
            &r8s_api::validation::go_label_selector(&obj["spec"]["selector"]),
            "field is immutable",
        )]
    }

    fn fields(&self, obj: &Value, f: &mut BTreeMap<String, String>) {
        if !self.deployment {
            f.insert(
                "status.replicas".into(),
                obj["status"]["replicas"].as_i64().unwrap_or(0).to_string(),
            );
        }
    }

    fn columns(&self) -> Vec<Column> {
        if self.deployment {
            vec![
                NAME,
                col("Ready", "string", "Number of the pod with ready state"),
                col("Up-to-date", "string", "Total number of non-terminated pods targeted by this deployment that have the desired template spec."),
                col("Available", "string", "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment."),
                AGE,
                wide("Containers", "Names of each container in the template."),
                wide("Images", "Images referenced by each container in the template."),
                wide("Selector", "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment."),
            ]
        } else {
            vec![
                NAME,
                col(
                    "Desired",
                    "integer",
                    "Replicas is the number of desired replicas.",
                ),
                col(
                    "Current",
                    "integer",
                    "Replicas is the most recently observed number of replicas.",
                ),
                col(
                    "Ready",
                    "integer",
                    "The number of ready replicas for this replica set.",
                ),
                AGE,
                wide("Containers", "Names of each container in the template."),
                wide("Images", "Images referenced by each container in the template."),
                wide(
                    "Selector",
                    "Selector is a label query over pods that should match the replica count.",
                ),
            ]
        }
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let (spec, status) = (&obj["spec"], &obj["status"]);
        let (containers, images) = container_summary(&spec["template"]["spec"]);
        let counts = if self.deployment {
            [
                json!(format!(
                    "{}/{}",
                    status["readyReplicas"].as_i64().unwrap_or(0),
                    spec["replicas"].as_i64().unwrap_or(0)
                )),
                json!(status["updatedReplicas"].as_i64().unwrap_or(0)),
                json!(status["availableReplicas"].as_i64().unwrap_or(0)),
            ]
        } else {
            [
                json!(spec["replicas"].as_i64().unwrap_or(0)),
                json!(status["replicas"].as_i64().unwrap_or(0)),
                json!(status["readyReplicas"].as_i64().unwrap_or(0)),
            ]
        };
        let [a, b, c] = counts;
        vec![
            name_cell(obj),
            a,
            b,
            c,
            age_cell(obj),
            json!(containers),
            json!(images),
            json!(selector_string(&spec["selector"])),
        ]
    }
}

/// A workload's label selector (`spec.selector`) must be given, not be empty, and select its
/// own pod template (upstream's message names `what`: "empty selector is invalid for
/// deployment").
pub(super) fn selector_matches_template(errs: &mut Vec<FieldError>, spec: &Value, what: &str) {
    let selector = &spec["selector"];
    if selector.is_null() {
        errs.push(FieldError::required("spec.selector", ""));
        return;
    }
    let want = meta::string_map(&selector["matchLabels"]);
    let have = meta::string_map(&spec["template"]["metadata"]["labels"]);
    if want.is_empty() && selector["matchExpressions"].as_array().is_none_or(Vec::is_empty) {
        errs.push(FieldError::invalid(
            "spec.selector",
            &selector.to_string(),
            format!("empty selector is invalid for {what}"),
        ));
    } else if !want.iter().all(|(k, v)| have.get(k) == Some(v)) {
        errs.push(FieldError::invalid(
            "spec.template.metadata.labels",
            &format_labels(&have),
            "`selector` does not match template `labels`",
        ));
    }
}

/// `spec.replicas`, where given, is not negative.
pub(super) fn replicas_not_negative(errs: &mut Vec<FieldError>, spec: &Value) {
    non_negative(errs, spec, "spec", "replicas");
}

/// `parent.key`, where given, is not negative (upstream's `ValidateNonnegativeField`).
pub(super) fn non_negative(errs: &mut Vec<FieldError>, v: &Value, parent: &str, key: &str) {
    if let Some(r) = v[key].as_i64().filter(|r| *r < 0) {
        errs.push(FieldError::invalid(
            format!("{parent}.{key}"),
            &r.to_string(),
            "must be greater than or equal to 0",
        ));
    }
}

/// What apps/v1 asks of a Deployment's or ReplicaSet's spec beyond its selector and pod
/// template (upstream's `ValidateDeploymentSpec` and `ValidatePodTemplateSpecForReplicaSet`):
/// pods that restart always and have no deadline, and a rolling update that can make progress.
fn workload(errs: &mut Vec<FieldError>, deployment: bool, spec: &Value) {
    let template = &spec["template"]["spec"];
    if let Some(p) = template["restartPolicy"].as_str().filter(|p| *p != "Always") {
        errs.push(FieldError::not_supported(
            "spec.template.spec.restartPolicy",
            p,
            &["Always"],
        ));
    }
    if !template["activeDeadlineSeconds"].is_null() {
        errs.push(FieldError::forbidden(
            "spec.template.spec.activeDeadlineSeconds",
            "activeDeadlineSeconds in ReplicaSet is not Supported",
        ));
    }
    for key in ["minReadySeconds", "revisionHistoryLimit"] {
        if let Some(n) = spec[key].as_i64().filter(|n| *n < 0) {
            errs.push(FieldError::invalid_raw(
                format!("spec.{key}"),
                &n.to_string(),
                "must be greater than or equal to 0",
            ));
        }
    }
    if !deployment {
        return;
    }
    let min_ready = spec["minReadySeconds"].as_i64().unwrap_or(0);
    if let Some(p) = spec["progressDeadlineSeconds"]
        .as_i64()
        .filter(|p| *p <= min_ready)
    {
        errs.push(FieldError::invalid_raw(
            "spec.progressDeadlineSeconds",
            &p.to_string(),
            "must be greater than minReadySeconds",
        ));
    }
    let strategy = &spec["strategy"];
    if strategy["type"] == "Recreate" && !strategy["rollingUpdate"].is_null() {
        errs.push(FieldError::forbidden(
            "spec.strategy.rollingUpdate",
            "may not be specified when strategy `type` is 'Recreate'",
        ));
    }
    let ru = &strategy["rollingUpdate"];
    if strategy["type"] != "RollingUpdate" || ru.is_null() {
        return;
    }
    let mut values = [0i64; 2];
    for (i, key) in ["maxUnavailable", "maxSurge"].into_iter().enumerate() {
        values[i] = int_or_percent(errs, &ru[key], &format!("spec.strategy.rollingUpdate.{key}"));
    }
    if values == [0, 0] {
        errs.push(FieldError::invalid_raw(
            "spec.strategy.rollingUpdate.maxUnavailable",
            &go_int_or_string(&ru["maxUnavailable"]),
            "may not be 0 when `maxSurge` is 0",
        ));
    }
    if ru["maxUnavailable"].as_str().is_some_and(|s| s.ends_with('%')) && values[0] > 100 {
        errs.push(FieldError::invalid_raw(
            "spec.strategy.rollingUpdate.maxUnavailable",
            &go_int_or_string(&ru["maxUnavailable"]),
            "must not be greater than 100%",
        ));
    }
}

/// An IntOrString as Go prints the value it was decoded into.
pub(super) fn go_int_or_string(v: &Value) -> String {
    match v {
        Value::String(s) => format!("intstr.IntOrString{{Type:1, IntVal:0, StrVal:{s:?}}}"),
        v => format!(
            "intstr.IntOrString{{Type:0, IntVal:{}, StrVal:\"\"}}",
            v.as_i64().unwrap_or(0)
        ),
    }
}

/// A positive int or a percentage (upstream's `ValidatePositiveIntOrPercent`); its number
/// (absent: 1, so that an unset field never counts as zero).
pub(super) fn int_or_percent(errs: &mut Vec<FieldError>, v: &Value, field: &str) -> i64 {
    match v {
        Value::String(s) => match s.strip_suffix('%').and_then(|n| n.parse::<i64>().ok()) {
            Some(n) => n,
            None => {
                errs.push(FieldError::invalid(
                    field,
                    s,
                    "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
                ));
                0
            }
        },
        Value::Number(n) => {
            let n = n.as_i64().unwrap_or(0);
            if n < 0 {
                errs.push(FieldError::invalid_raw(
                    field,
                    &n.to_string(),
                    "must be greater than or equal to 0",
                ));
            }
            n
        }
        _ => 1,
    }
}

pub(super) fn format_labels(m: &BTreeMap<String, String>) -> String {
    let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    format!("map[{}]", parts.join(" "))
}

pub(super) fn container_summary(template_spec: &Value) -> (String, String) {
    let cs = template_spec["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let names: Vec<&str> = cs.iter().filter_map(|c| c["name"].as_str()).collect();
    let images: Vec<&str> = cs.iter().filter_map(|c| c["image"].as_str()).collect();
    (names.join(","), images.join(","))
}

/// A label map as upstream's `labels.FormatLabels` prints it: `k=v` sorted by key,
/// comma-separated; `<none>` when empty.
pub(super) fn format_label_map(v: &Value) -> String {
    let m = meta::string_map(v);
    if m.is_empty() {
        return "<none>".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// A label selector as upstream's `FormatLabelSelector` prints it: `k=v`, `k in (a,b)`,
/// `k notin (a)`, `k`, `!k`, comma-separated; `<none>` when it selects everything.
pub(super) fn selector_string(sel: &Value) -> String {
    let m = meta::string_map(&sel["matchLabels"]);
    let mut parts: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
    for e in sel["matchExpressions"].as_array().into_iter().flatten() {
        let key = e["key"].as_str().unwrap_or("");
        let mut values: Vec<&str> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        values.sort_unstable();
        parts.push(match e["operator"].as_str().unwrap_or("") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_owned(),
            "DoesNotExist" => format!("!{key}"),
            op => format!("{key} {op} ({})", values.join(",")),
        });
    }
    if parts.is_empty() {
        return "<none>".into();
    }
    parts.join(",")
}
