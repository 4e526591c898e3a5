//! HorizontalPodAutoscalers, `autoscaling/v2` (stored) and `autoscaling/v1` (converted), as
//! upstream's `pkg/registry/autoscaling/horizontalpodautoscaler` and `pkg/apis/autoscaling`
//! have them: the v2 defaults (min 1, CPU at 80% when no metric is given, behaviour rules
//! filled in only when a behaviour is given), validation on the v2 form whatever version was
//! written (so messages name v2 paths, as upstream's internal form does), the v1 form with
//! `targetCPUUtilizationPercentage` and the `autoscaling.alpha.kubernetes.io/*` annotations that
//! carry what v1 cannot say, and `kubectl get hpa`'s columns.

use r8s_api::quantity::Quantity;
use r8s_api::validation::FieldError;
use serde_json::{json, Map, Value};

use super::strategy::{age_cell, col, name_cell, Column, Strategy, AGE, NAME};
use crate::authn::UserInfo;
use crate::status::ApiError;

const METRICS: &str = "autoscaling.alpha.kubernetes.io/metrics";
const CURRENT_METRICS: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
const CONDITIONS: &str = "autoscaling.alpha.kubernetes.io/conditions";
const BEHAVIOR: &str = "autoscaling.alpha.kubernetes.io/behavior";
const ROUND_TRIP: [&str; 6] = [
    METRICS,
    CURRENT_METRICS,
    CONDITIONS,
    BEHAVIOR,
    "autoscaling.alpha.kubernetes.io/scale-up-tolerance",
    "autoscaling.alpha.kubernetes.io/scale-down-tolerance",
];

/// The CPU utilisation an autoscaler targets when it names no metric.
pub(crate) const DEFAULT_CPU_UTILIZATION: i64 = 80;

/// HorizontalPodAutoscalers of one served version.
pub(crate) struct HorizontalPodAutoscalers {
    /// `autoscaling/v1`, stored as v2.
    pub v1: bool,
}

fn default_cpu_metric() -> Value {
    json!({"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": DEFAULT_CPU_UTILIZATION}}})
}

/// Upstream's `GenerateHPAScaleUpRules`/`…ScaleDownRules`: the default rule with the fields the
/// user gave in place of its own (a list of policies replaces the default list whole).
fn rules(user: Option<&Value>, up: bool) -> Value {
    let mut rule = if up {
        json!({"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
            {"type": "Pods", "value": 4, "periodSeconds": 15},
            {"type": "Percent", "value": 100, "periodSeconds": 15}]})
    } else {
        json!({"selectPolicy": "Max", "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]})
    };
    if let Some(u) = user.and_then(Value::as_object) {
        for k in ["selectPolicy", "stabilizationWindowSeconds", "policies"] {
            if let Some(v) = u.get(k).filter(|v| !v.is_null()) {
                rule[k] = v.clone();
            }
        }
    }
    rule
}

/// The v2 defaults (`SetDefaults_HorizontalPodAutoscaler`).
pub(crate) fn default_v2(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if spec.get("minReplicas").is_none_or(Value::is_null) {
        spec.insert("minReplicas".into(), json!(1));
    }
    if spec
        .get("metrics")
        .and_then(Value::as_array)
        .is_none_or(|m| m.is_empty())
    {
        spec.insert("metrics".into(), json!([default_cpu_metric()]));
    }
    if let Some(b) = spec.get_mut("behavior").filter(|b| b.is_object()) {
        // Tolerances are behind a gate upstream leaves off: dropped.
        let up = rules(b.get("scaleUp"), true);
        let down = rules(b.get("scaleDown"), false);
        b["scaleUp"] = up;
        b["scaleDown"] = down;
    }
}

/// `IsValidPathSegmentName`'s messages.
fn path_segment(s: &str) -> Vec<&'static str> {
    let mut out = Vec::new();
    if s == "." || s == ".." {
        out.push(if s == "." {
            "may not be '.'"
        } else {
            "may not be '..'"
        });
        return out;
    }
    if s.contains('/') {
        out.push("may not contain '/'");
    }
    if s.contains('%') {
        out.push("may not contain '%'");
    }
    out
}

/// A CrossVersionObjectReference's kind and name.
fn validate_reference(errs: &mut Vec<FieldError>, r: &Value, path: &str) {
    for key in ["kind", "name"] {
        let f = format!("{path}.{key}");
        match r[key].as_str().filter(|s| !s.is_empty()) {
            None => errs.push(FieldError::required(f, "")),
            Some(s) => {
                for m in path_segment(s) {
                    errs.push(FieldError::invalid(f.clone(), s, m));
                }
            }
        }
    }
}

fn positive_quantity(errs: &mut Vec<FieldError>, v: &Value, path: String) {
    if v.is_null() {
        return;
    }
    let ok = v
        .as_str()
        .map(str::to_owned)
        .or_else(|| v.as_number().map(|n| n.to_string()))
        .and_then(|s| Quantity::parse(&s).ok())
        .is_some_and(|q| q.sign() > 0);
    if !ok {
        errs.push(FieldError::invalid(
            path,
            &v.as_str().map_or_else(|| v.to_string(), str::to_owned),
            "must be positive",
        ));
    }
}

fn validate_target(errs: &mut Vec<FieldError>, t: &Value, path: &str) {
    let ty = t["type"].as_str().unwrap_or("");
    if ty.is_empty() {
        errs.push(FieldError::required(
            format!("{path}.type"),
            "must specify a metric target type",
        ));
    }
    if !matches!(ty, "Utilization" | "Value" | "AverageValue") {
        errs.push(FieldError::invalid(
            format!("{path}.type"),
            ty,
            "must be either Utilization, Value, or AverageValue",
        ));
    }
    positive_quantity(errs, &t["value"], format!("{path}.value"));
    positive_quantity(errs, &t["averageValue"], format!("{path}.averageValue"));
    if let Some(u) = t["averageUtilization"].as_i64() {
        if u < 1 {
            errs.push(FieldError::invalid_raw(
                format!("{path}.averageUtilization"),
                &u.to_string(),
                "must be greater than 0",
            ));
        }
    }
}

fn validate_metric_identifier(errs: &mut Vec<FieldError>, m: &Value, path: &str) {
    match m["name"].as_str().filter(|s| !s.is_empty()) {
        None => errs.push(FieldError::required(
            format!("{path}.name"),
            "must specify a metric name",
        )),
        Some(n) => {
            for e in path_segment(n) {
                errs.push(FieldError::invalid(format!("{path}.name"), n, e));
            }
        }
    }
}

/// One of `spec.metrics`.
fn validate_metric(errs: &mut Vec<FieldError>, m: &Value, path: &str) {
    const SOURCES: [(&str, &str); 5] = [
        ("Object", "object"),
        ("External", "external"),
        ("Pods", "pods"),
        ("Resource", "resource"),
        ("ContainerResource", "containerResource"),
    ];
    let ty = m["type"].as_str().unwrap_or("");
    let supported = ["ContainerResource", "External", "Object", "Pods", "Resource"];
    if ty.is_empty() {
        errs.push(FieldError::required(
            format!("{path}.type"),
            "must specify a metric source type",
        ));
    }
    if !supported.contains(&ty) {
        errs.push(FieldError::not_supported(format!("{path}.type"), ty, &supported));
    }
    let mut first = None;
    for (t, field) in SOURCES {
        if m[field].is_object() {
            if first.is_none() {
                first = Some((t, field));
            } else {
                errs.push(FieldError::forbidden(
                    format!("{path}.{field}"),
                    "must populate the given metric source only",
                ));
            }
        }
    }
    if let Some((_, field)) = SOURCES.iter().find(|(t, _)| *t == ty) {
        if !m[*field].is_object() {
            errs.push(FieldError::required(
                format!("{path}.{field}"),
                "must populate information for the given metric source",
            ));
        }
    }
    let Some((_, field)) = first else { return };
    let p = format!("{path}.{field}");
    let src = &m[field];
    let target = &src["target"];
    match field {
        "resource" | "containerResource" => {
            if src["name"].as_str().is_none_or(str::is_empty) {
                errs.push(FieldError::required(
                    format!("{p}.name"),
                    "must specify a resource name",
                ));
            }
            if field == "containerResource" {
                match src["container"].as_str().filter(|s| !s.is_empty()) {
                    None => errs.push(FieldError::required(
                        format!("{p}.container"),
                        "must specify a container",
                    )),
                    Some(c) => {
                        for e in r8s_api::validation::dns1123_label(c) {
                            errs.push(FieldError::invalid(format!("{p}.container"), c, e));
                        }
                    }
                }
            }
            validate_target(errs, target, &format!("{p}.target"));
            let (util, avg) = (
                !target["averageUtilization"].is_null(),
                !target["averageValue"].is_null(),
            );
            if !util && !avg {
                errs.push(FieldError::required(
                    format!("{p}.target.averageUtilization"),
                    "must set either a target raw value or a target utilization",
                ));
            }
            if util && avg {
                errs.push(FieldError::forbidden(
                    format!("{p}.target.averageValue"),
                    "may not set both a target raw value and a target utilization",
                ));
            }
        }
        "pods" => {
            validate_metric_identifier(errs, &src["metric"], &format!("{p}.metric"));
            validate_target(errs, target, &format!("{p}.target"));
            if target["averageValue"].is_null() {
                errs.push(FieldError::required(
                    format!("{p}.target.averageValue"),
                    "must specify a positive target averageValue",
                ));
            }
        }
        "object" => {
            validate_reference(errs, &src["describedObject"], &format!("{p}.describedObject"));
            validate_metric_identifier(errs, &src["metric"], &format!("{p}.metric"));
            validate_target(errs, target, &format!("{p}.target"));
            if target["value"].is_null() && target["averageValue"].is_null() {
                errs.push(FieldError::required(
                    format!("{p}.target.averageValue"),
                    "must set either a target value or averageValue",
                ));
            }
        }
        _ => {
            validate_metric_identifier(errs, &src["metric"], &format!("{p}.metric"));
            validate_target(errs, target, &format!("{p}.target"));
            let (value, avg) = (!target["value"].is_null(), !target["averageValue"].is_null());
            if !value && !avg {
                errs.push(FieldError::required(
                    format!("{p}.target.averageValue"),
                    "must set either a target value for metric or a per-pod target",
                ));
            }
            if value && avg {
                errs.push(FieldError::forbidden(
                    format!("{p}.target.value"),
                    "may not set both a target value for metric and a per-pod target",
                ));
            }
        }
    }
}

fn validate_rules(errs: &mut Vec<FieldError>, r: &Value, path: &str) {
    if let Some(w) = r["stabilizationWindowSeconds"].as_i64() {
        if w < 0 {
            errs.push(FieldError::invalid_raw(
                format!("{path}.stabilizationWindowSeconds"),
                &w.to_string(),
                "must be greater than or equal to zero",
            ));
        } else if w > 3600 {
            errs.push(FieldError::invalid_raw(
                format!("{path}.stabilizationWindowSeconds"),
                &w.to_string(),
                "must be less than or equal to 3600",
            ));
        }
    }
    if let Some(p) = r["selectPolicy"].as_str() {
        if !matches!(p, "Max" | "Min" | "Disabled") {
            errs.push(FieldError::not_supported(
                format!("{path}.selectPolicy"),
                p,
                &["Disabled", "Max", "Min"],
            ));
        }
    }
    let policies = r["policies"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    if policies.is_empty() {
        errs.push(FieldError::required(
            format!("{path}.policies"),
            "must specify at least one Policy",
        ));
    }
    for (j, p) in policies.iter().enumerate() {
        let pp = format!("{path}.policies[{j}]");
        let ty = p["type"].as_str().unwrap_or("");
        if !matches!(ty, "Pods" | "Percent") {
            errs.push(FieldError::not_supported(
                format!("{pp}.type"),
                ty,
                &["Percent", "Pods"],
            ));
        }
        let value = p["value"].as_i64().unwrap_or(0);
        if value <= 0 {
            errs.push(FieldError::invalid_raw(
                format!("{pp}.value"),
                &value.to_string(),
                "must be greater than zero",
            ));
        }
        let period = p["periodSeconds"].as_i64().unwrap_or(0);
        if period <= 0 {
            errs.push(FieldError::invalid_raw(
                format!("{pp}.periodSeconds"),
                &period.to_string(),
                "must be greater than zero",
            ));
        } else if period > 1800 {
            errs.push(FieldError::invalid_raw(
                format!("{pp}.periodSeconds"),
                &period.to_string(),
                "must be less than or equal to 1800",
            ));
        }
    }
}

/// Upstream's `ValidateHorizontalPodAutoscaler` on the v2 form.
pub(crate) fn validate_v2(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec = &obj["spec"];
    validate_reference(&mut errs, &spec["scaleTargetRef"], "spec.scaleTargetRef");
    let min = spec["minReplicas"].as_i64();
    if let Some(m) = min {
        if m < 1 {
            errs.push(FieldError::invalid_raw(
                "spec.minReplicas",
                &m.to_string(),
                "must be greater than or equal to 1",
            ));
        }
    }
    let max = spec["maxReplicas"].as_i64().unwrap_or(0);
    if max < 1 {
        errs.push(FieldError::invalid_raw(
            "spec.maxReplicas",
            &max.to_string(),
            "must be greater than 0",
        ));
    }
    if min.is_some_and(|m| max < m) {
        errs.push(FieldError::invalid_raw(
            "spec.maxReplicas",
            &max.to_string(),
            "must be greater than or equal to `minReplicas`",
        ));
    }
    for (i, m) in spec["metrics"].as_array().into_iter().flatten().enumerate() {
        validate_metric(&mut errs, m, &format!("spec.metrics[{i}]"));
    }
    for (key, field) in [("scaleUp", "scaleUp"), ("scaleDown", "scaleDown")] {
        let r = &spec["behavior"][key];
        if r.is_object() {
            validate_rules(&mut errs, r, &format!("spec.behavior.{field}"));
        }
    }
    errs
}

fn validate_status(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for k in ["currentReplicas", "desiredReplicas"] {
        if let Some(n) = obj["status"][k].as_i64().filter(|n| *n < 0) {
            errs.push(FieldError::invalid_raw(
                format!("status.{k}"),
                &n.to_string(),
                "must be greater than or equal to 0",
            ));
        }
    }
    errs
}

// ---- autoscaling/v1 ⇄ v2 ----------------------------------------------------------------

/// Set `key` of `out` to `v` unless `v` is null: a field absent in one form stays absent in
/// the other.
fn set_present(out: &mut Value, key: &str, v: &Value) {
    if !v.is_null() {
        out[key] = v.clone();
    }
}

/// The source field of a Resource or ContainerResource metric.
fn resource_field(ty: &str) -> &'static str {
    if ty == "Resource" {
        "resource"
    } else {
        "containerResource"
    }
}

/// A v2 MetricSpec as v1's (the beta form the `metrics` annotation holds).
fn spec_to_v1(m: &Value) -> Value {
    let ty = m["type"].as_str().unwrap_or("");
    let t = |src: &Value| src["target"].clone();
    match ty {
        "Resource" | "ContainerResource" => {
            let field = resource_field(ty);
            let src = &m[field];
            let mut out = json!({"name": src["name"]});
            set_present(&mut out, "container", &src["container"]);
            let target = t(src);
            set_present(
                &mut out,
                "targetAverageUtilization",
                &target["averageUtilization"],
            );
            set_present(&mut out, "targetAverageValue", &target["averageValue"]);
            json!({"type": ty, field: out})
        }
        "Pods" => {
            let src = &m["pods"];
            let mut out = json!({"metricName": src["metric"]["name"], "targetAverageValue": src["target"]["averageValue"]});
            set_present(&mut out, "selector", &src["metric"]["selector"]);
            json!({"type": ty, "pods": out})
        }
        "Object" => {
            let src = &m["object"];
            let mut out = json!({"target": src["describedObject"], "metricName": src["metric"]["name"],
                "targetValue": src["target"]["value"]});
            set_present(&mut out, "averageValue", &src["target"]["averageValue"]);
            set_present(&mut out, "selector", &src["metric"]["selector"]);
            json!({"type": ty, "object": out})
        }
        "External" => {
            let src = &m["external"];
            let mut out = json!({"metricName": src["metric"]["name"]});
            set_present(&mut out, "metricSelector", &src["metric"]["selector"]);
            set_present(&mut out, "targetValue", &src["target"]["value"]);
            set_present(&mut out, "targetAverageValue", &src["target"]["averageValue"]);
            json!({"type": ty, "external": out})
        }
        _ => json!({"type": ty}),
    }
}

/// A v1 (beta-form) MetricSpec as v2's.
fn spec_from_v1(m: &Value) -> Value {
    let ty = m["type"].as_str().unwrap_or("");
    match ty {
        "Resource" | "ContainerResource" => {
            let field = resource_field(ty);
            let src = &m[field];
            let target = if !src["targetAverageUtilization"].is_null() {
                json!({"type": "Utilization", "averageUtilization": src["targetAverageUtilization"]})
            } else {
                json!({"type": "AverageValue", "averageValue": src["targetAverageValue"]})
            };
            let mut out = json!({"name": src["name"], "target": target});
            set_present(&mut out, "container", &src["container"]);
            json!({"type": ty, field: out})
        }
        "Pods" => {
            let src = &m["pods"];
            let mut metric = json!({"name": src["metricName"]});
            set_present(&mut metric, "selector", &src["selector"]);
            json!({"type": ty, "pods": {"metric": metric, "target": {"type": "AverageValue", "averageValue": src["targetAverageValue"]}}})
        }
        "Object" => {
            let src = &m["object"];
            let mut metric = json!({"name": src["metricName"]});
            set_present(&mut metric, "selector", &src["selector"]);
            let target = if src["averageValue"].is_null() {
                json!({"type": "Value", "value": src["targetValue"]})
            } else {
                json!({"type": "AverageValue", "averageValue": src["averageValue"]})
            };
            json!({"type": ty, "object": {"describedObject": src["target"], "metric": metric, "target": target}})
        }
        "External" => {
            let src = &m["external"];
            let mut metric = json!({"name": src["metricName"]});
            set_present(&mut metric, "selector", &src["metricSelector"]);
            let target = if src["targetValue"].is_null() {
                json!({"type": "AverageValue", "averageValue": src["targetAverageValue"]})
            } else {
                json!({"type": "Value", "value": src["targetValue"]})
            };
            json!({"type": ty, "external": {"metric": metric, "target": target}})
        }
        _ => json!({"type": ty}),
    }
}

/// A v2 MetricStatus as v1's.
fn status_to_v1(m: &Value) -> Value {
    let ty = m["type"].as_str().unwrap_or("");
    match ty {
        "Resource" | "ContainerResource" => {
            let field = resource_field(ty);
            let src = &m[field];
            let mut out = json!({"name": src["name"], "currentAverageValue": src["current"]["averageValue"]});
            set_present(
                &mut out,
                "currentAverageUtilization",
                &src["current"]["averageUtilization"],
            );
            set_present(&mut out, "container", &src["container"]);
            json!({"type": ty, field: out})
        }
        "Pods" => {
            let src = &m["pods"];
            json!({"type": ty, "pods": {"metricName": src["metric"]["name"], "currentAverageValue": src["current"]["averageValue"]}})
        }
        "Object" => {
            let src = &m["object"];
            json!({"type": ty, "object": {"target": src["describedObject"], "metricName": src["metric"]["name"],
                "currentValue": src["current"]["value"]}})
        }
        "External" => {
            let src = &m["external"];
            json!({"type": ty, "external": {"metricName": src["metric"]["name"], "currentValue": src["current"]["value"]}})
        }
        _ => json!({"type": ty}),
    }
}

/// A v1 MetricStatus as v2's.
fn status_from_v1(m: &Value) -> Value {
    let ty = m["type"].as_str().unwrap_or("");
    match ty {
        "Resource" | "ContainerResource" => {
            let field = resource_field(ty);
            let src = &m[field];
            let mut current = json!({"averageValue": src["currentAverageValue"]});
            set_present(
                &mut current,
                "averageUtilization",
                &src["currentAverageUtilization"],
            );
            let mut out = json!({"name": src["name"], "current": current});
            set_present(&mut out, "container", &src["container"]);
            json!({"type": ty, field: out})
        }
        "Pods" => {
            let src = &m["pods"];
            json!({"type": ty, "pods": {"metric": {"name": src["metricName"]}, "current": {"averageValue": src["currentAverageValue"]}}})
        }
        "Object" => {
            let src = &m["object"];
            json!({"type": ty, "object": {"describedObject": src["target"], "metric": {"name": src["metricName"]},
                "current": {"value": src["currentValue"]}}})
        }
        "External" => {
            let src = &m["external"];
            json!({"type": ty, "external": {"metric": {"name": src["metricName"]}, "current": {"value": src["currentValue"]}}})
        }
        _ => json!({"type": ty}),
    }
}

/// v2 behaviour rules as the internal Go struct's JSON (no json tags upstream: field names
/// capitalised, absent pointers `null`), as the `behavior` annotation holds them.
fn behavior_to_annotation(b: &Value) -> Value {
    let rule = |r: &Value| {
        if !r.is_object() {
            return Value::Null;
        }
        let policies: Vec<Value> = r["policies"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| json!({"Type": p["type"], "Value": p["value"], "PeriodSeconds": p["periodSeconds"]}))
            .collect();
        json!({
            "StabilizationWindowSeconds": r["stabilizationWindowSeconds"],
            "SelectPolicy": r["selectPolicy"],
            "Policies": if r["policies"].is_null() { Value::Null } else { json!(policies) },
            "Tolerance": null,
        })
    };
    json!({"ScaleUp": rule(&b["scaleUp"]), "ScaleDown": rule(&b["scaleDown"])})
}

fn behavior_from_annotation(a: &Value) -> Value {
    let rule = |r: &Value| {
        let mut out = Map::new();
        if !r["StabilizationWindowSeconds"].is_null() {
            out.insert(
                "stabilizationWindowSeconds".into(),
                r["StabilizationWindowSeconds"].clone(),
            );
        }
        if !r["SelectPolicy"].is_null() {
            out.insert("selectPolicy".into(), r["SelectPolicy"].clone());
        }
        if let Some(ps) = r["Policies"].as_array() {
            out.insert(
                "policies".into(),
                ps.iter()
                    .map(|p| json!({"type": p["Type"], "value": p["Value"], "periodSeconds": p["PeriodSeconds"]}))
                    .collect(),
            );
        }
        Value::Object(out)
    };
    let mut out = Map::new();
    for (from, to) in [("ScaleUp", "scaleUp"), ("ScaleDown", "scaleDown")] {
        if a[from].is_object() {
            out.insert(to.into(), rule(&a[from]));
        }
    }
    Value::Object(out)
}

fn annotations_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    if !obj["metadata"]["annotations"].is_object() {
        obj["metadata"]["annotations"] = json!({});
    }
    obj["metadata"]["annotations"]
        .as_object_mut()
        .expect("made an object above")
}

fn strip_round_trip(obj: &mut Value) {
    if let Some(a) = obj["metadata"]["annotations"].as_object_mut() {
        for k in ROUND_TRIP {
            a.remove(k);
        }
        if a.is_empty() {
            obj["metadata"].as_object_mut().map(|m| m.remove("annotations"));
        }
    }
}

fn is_cpu_utilization(m: &Value) -> bool {
    m["type"] == "Resource"
        && m["resource"]["name"] == "cpu"
        && !m["resource"]["target"]["averageUtilization"].is_null()
}

/// An `autoscaling/v1` object as stored (v2): upstream's v1 → internal conversion.
pub(crate) fn v1_to_v2(mut obj: Value) -> Value {
    let annotation = |k: &str| -> Option<Value> {
        obj["metadata"]["annotations"][k]
            .as_str()
            .and_then(|s| serde_json::from_str(s).ok())
    };
    let extra: Vec<Value> = annotation(METRICS)
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .map(spec_from_v1)
        .collect();
    let current = annotation(CURRENT_METRICS).and_then(|v| v.as_array().cloned());
    let conditions = annotation(CONDITIONS).and_then(|v| v.as_array().cloned());
    let behavior = annotation(BEHAVIOR)
        .map(|b| behavior_from_annotation(&b))
        .filter(|b| b.as_object().is_some_and(|o| !o.is_empty()));
    strip_round_trip(&mut obj);
    obj["apiVersion"] = json!("autoscaling/v2");
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        let mut metrics = extra;
        if let Some(cpu) = spec
            .remove("targetCPUUtilizationPercentage")
            .filter(|v| !v.is_null())
        {
            metrics.push(json!({"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": cpu}}}));
        }
        if metrics.is_empty() {
            metrics.push(default_cpu_metric());
        }
        spec.insert("metrics".into(), json!(metrics));
        if let Some(b) = behavior {
            spec.insert("behavior".into(), b);
        }
    }
    if let Some(status) = obj.get_mut("status").and_then(Value::as_object_mut) {
        let cpu = status
            .remove("currentCPUUtilizationPercentage")
            .filter(|v| !v.is_null());
        match current {
            Some(c) => {
                status.insert("currentMetrics".into(), c.iter().map(status_from_v1).collect());
            }
            None => {
                if let Some(u) = cpu {
                    status.insert(
                        "currentMetrics".into(),
                        json!([{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": u}}}]),
                    );
                }
            }
        }
        if let Some(c) = conditions {
            status.insert("conditions".into(), json!(c));
        }
    }
    obj
}

/// A stored (v2) object as `autoscaling/v1`: upstream's internal → v1 conversion.
pub(crate) fn v2_to_v1(mut obj: Value, api_version: &str) -> Value {
    strip_round_trip(&mut obj);
    obj["apiVersion"] = json!(api_version);
    let mut notes: Vec<(&str, String)> = Vec::new();
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        let metrics = spec
            .remove("metrics")
            .and_then(|m| m.as_array().cloned())
            .unwrap_or_default();
        let cpu = metrics.iter().position(is_cpu_utilization);
        if let Some(i) = cpu {
            spec.insert(
                "targetCPUUtilizationPercentage".into(),
                metrics[i]["resource"]["target"]["averageUtilization"].clone(),
            );
        }
        let others: Vec<Value> = metrics
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != cpu)
            .map(|(_, m)| spec_to_v1(m))
            .collect();
        if !others.is_empty() {
            notes.push((METRICS, Value::Array(others).to_string()));
        }
        if let Some(b) = spec.remove("behavior").filter(|b| !b.is_null()) {
            notes.push((BEHAVIOR, behavior_to_annotation(&b).to_string()));
        }
    }
    if let Some(status) = obj.get_mut("status").and_then(Value::as_object_mut) {
        let current = status
            .remove("currentMetrics")
            .and_then(|m| m.as_array().cloned())
            .unwrap_or_default();
        if let Some(u) = current.iter().rev().find(|m| {
            m["type"] == "Resource"
                && m["resource"]["name"] == "cpu"
                && !m["resource"]["current"]["averageUtilization"].is_null()
        }) {
            status.insert(
                "currentCPUUtilizationPercentage".into(),
                u["resource"]["current"]["averageUtilization"].clone(),
            );
        }
        if !current.is_empty() {
            notes.push((
                CURRENT_METRICS,
                Value::Array(current.iter().map(status_to_v1).collect()).to_string(),
            ));
        }
        if let Some(c) = status
            .remove("conditions")
            .filter(|c| c.as_array().is_some_and(|a| !a.is_empty()))
        {
            notes.push((CONDITIONS, c.to_string()));
        }
    }
    if !notes.is_empty() {
        let a = annotations_mut(&mut obj);
        for (k, v) in notes {
            a.insert(k.into(), json!(v));
        }
    }
    obj
}

/// The v2 form of an object of either version.
fn as_v2(obj: &Value) -> std::borrow::Cow<'_, Value> {
    if obj["apiVersion"] == "autoscaling/v1" || !obj["spec"]["targetCPUUtilizationPercentage"].is_null() {
        std::borrow::Cow::Owned(v1_to_v2(obj.clone()))
    } else {
        std::borrow::Cow::Borrowed(obj)
    }
}

fn percent(v: &Value) -> Option<String> {
    v.as_i64().map(|n| format!("{n}%"))
}

fn quantity_text(v: &Value) -> Option<String> {
    v.as_str()
        .map(|s| Quantity::parse(s).map_or_else(|_| s.to_owned(), |q| q.to_string()))
        .or_else(|| v.as_number().map(|n| n.to_string()))
}

/// Upstream's `formatHPAMetrics` (1.30+): each spec against the status at its index.
fn targets(spec: &[Value], status: &[Value]) -> String {
    if spec.is_empty() {
        return "<none>".into();
    }
    let unknown = || "<unknown>".to_owned();
    let mut list = Vec::new();
    for (i, m) in spec.iter().enumerate() {
        let cur = status.get(i).unwrap_or(&Value::Null);
        let text = match m["type"].as_str().unwrap_or("") {
            ty @ ("Resource" | "ContainerResource") => {
                let field = resource_field(ty);
                let (src, cur) = (&m[field], &cur[field]);
                let name = src["name"].as_str().unwrap_or("");
                let target = &src["target"];
                if !target["averageValue"].is_null() {
                    let c = if cur.is_object() {
                        quantity_text(&cur["current"]["averageValue"]).unwrap_or_else(unknown)
                    } else {
                        unknown()
                    };
                    format!(
                        "{name}: {c}/{}",
                        quantity_text(&target["averageValue"]).unwrap_or_default()
                    )
                } else {
                    let c = percent(&cur["current"]["averageUtilization"]).unwrap_or_else(unknown);
                    let t = percent(&target["averageUtilization"]).unwrap_or_else(|| "<auto>".into());
                    format!("{name}: {c}/{t}")
                }
            }
            "Pods" => {
                let c = quantity_text(&cur["pods"]["current"]["averageValue"]).unwrap_or_else(unknown);
                format!(
                    "{c}/{}",
                    quantity_text(&m["pods"]["target"]["averageValue"]).unwrap_or_default()
                )
            }
            ty @ ("Object" | "External") => {
                let field = if ty == "Object" { "object" } else { "external" };
                let target = &m[field]["target"];
                let current = &cur[field]["current"];
                if !target["averageValue"].is_null() {
                    let c = quantity_text(&current["averageValue"]).unwrap_or_else(unknown);
                    format!(
                        "{c}/{} (avg)",
                        quantity_text(&target["averageValue"]).unwrap_or_default()
                    )
                } else {
                    let c = quantity_text(&current["value"]).unwrap_or_else(unknown);
                    format!("{c}/{}", quantity_text(&target["value"]).unwrap_or_default())
                }
            }
            _ => "<unknown type>".into(),
        };
        list.push(text);
    }
    let more = list.len().saturating_sub(2);
    list.truncate(2);
    let mut out = list.join(", ");
    if more > 0 {
        out.push_str(&format!(" + {more} more..."));
    }
    out
}

impl Strategy for HorizontalPodAutoscalers {
    fn converts(&self) -> bool {
        self.v1
    }

    fn to_storage(&self, obj: Value) -> Value {
        let mut v2 = v1_to_v2(obj);
        default_v2(&mut v2);
        v2
    }

    fn served_from_storage(&self, obj: Value, api_version: &str) -> Value {
        v2_to_v1(obj, api_version)
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn status_subresource(&self) -> bool {
        true
    }

    fn prepare_for_create(&self, _user: &UserInfo, obj: &mut Value) {
        super::strategy::drop_status(obj);
    }

    fn prepare_for_update(&self, obj: &mut Value, old: &Value) -> Result<(), ApiError> {
        super::strategy::keep_status(obj, old);
        Ok(())
    }

    fn default(&self, obj: &mut Value) {
        if self.v1 {
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                if spec.get("minReplicas").is_none_or(Value::is_null) {
                    spec.insert("minReplicas".into(), json!(1));
                }
            }
        } else {
            default_v2(obj);
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = validate_v2(&as_v2(obj));
        errs.extend(validate_status(obj));
        errs
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col("Reference", "string", "The reference to the autoscaled resource."),
            col("Targets", "string", "The current and target metric values."),
            col("MinPods", "string", "The lower limit for the number of pods."),
            col("MaxPods", "string", "The upper limit for the number of pods."),
            col("Replicas", "string", "The current number of pods."),
            AGE,
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let v2 = as_v2(obj);
        let spec = &v2["spec"];
        let reference = format!(
            "{}/{}",
            spec["scaleTargetRef"]["kind"].as_str().unwrap_or(""),
            spec["scaleTargetRef"]["name"].as_str().unwrap_or("")
        );
        let empty = Vec::new();
        let metrics = spec["metrics"].as_array().unwrap_or(&empty);
        let current = v2["status"]["currentMetrics"].as_array().unwrap_or(&empty);
        let min = spec["minReplicas"]
            .as_i64()
            .map_or_else(|| "<unset>".to_owned(), |m| m.to_string());
        vec![
            name_cell(obj),
            json!(reference),
            json!(targets(metrics, current)),
            json!(min),
            json!(spec["maxReplicas"].as_i64().unwrap_or(0)),
            json!(v2["status"]["currentReplicas"].as_i64().unwrap_or(0)),
            age_cell(obj),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(obj: &Value) -> Vec<String> {
        validate_v2(obj).iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn v2_defaults_as_upstream() {
        let mut o =
            json!({"spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 3}});
        default_v2(&mut o);
        assert_eq!(o["spec"]["minReplicas"], 1);
        assert_eq!(o["spec"]["metrics"], json!([default_cpu_metric()]));
        assert!(
            o["spec"].get("behavior").is_none(),
            "no behaviour unless one is given"
        );
        let mut o = json!({"spec": {"behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}}}});
        default_v2(&mut o);
        assert_eq!(
            o["spec"]["behavior"],
            json!({
                "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
                    {"type": "Pods", "value": 4, "periodSeconds": 15},
                    {"type": "Percent", "value": 100, "periodSeconds": 15}]},
                "scaleDown": {"stabilizationWindowSeconds": 60, "selectPolicy": "Max",
                    "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}
            })
        );
    }

    #[test]
    fn validation_words_as_upstream() {
        let o = json!({"spec": {"scaleTargetRef": {"kind": "", "name": "a/b"}, "minReplicas": 0, "maxReplicas": -1,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 0}}},
                        {"type": "Foo"}],
            "behavior": {"scaleUp": {"selectPolicy": "Sometimes", "policies": [{"type": "Pods", "value": 0, "periodSeconds": 1801}]}}}});
        assert_eq!(
            errors(&o),
            [
                "spec.scaleTargetRef.kind: Required value",
                "spec.scaleTargetRef.name: Invalid value: \"a/b\": may not contain '/'",
                "spec.minReplicas: Invalid value: 0: must be greater than or equal to 1",
                "spec.maxReplicas: Invalid value: -1: must be greater than 0",
                "spec.maxReplicas: Invalid value: -1: must be greater than or equal to `minReplicas`",
                "spec.metrics[0].resource.target.averageUtilization: Invalid value: 0: must be greater than 0",
                "spec.metrics[1].type: Unsupported value: \"Foo\": supported values: \"ContainerResource\", \"External\", \"Object\", \"Pods\", \"Resource\"",
                "spec.behavior.scaleUp.selectPolicy: Unsupported value: \"Sometimes\": supported values: \"Disabled\", \"Max\", \"Min\"",
                "spec.behavior.scaleUp.policies[0].value: Invalid value: 0: must be greater than zero",
                "spec.behavior.scaleUp.policies[0].periodSeconds: Invalid value: 1801: must be less than or equal to 1800",
            ]
        );
        let both = json!({"spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 2,
            "metrics": [{"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue"}}}]}});
        assert_eq!(
            errors(&both),
            ["spec.metrics[0].resource.target.averageUtilization: Required value: must set either a target raw value or a target utilization"]
        );
    }

    #[test]
    fn v1_round_trips_through_v2_with_the_annotations() {
        let v1 = json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "annotations": {METRICS: r#"[{"type":"Resource","resource":{"name":"memory","targetAverageUtilization":60}}]"#}},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web", "apiVersion": "apps/v1"}, "maxReplicas": 5, "targetCPUUtilizationPercentage": 50}});
        let v2 = v1_to_v2(v1);
        assert_eq!(v2["apiVersion"], "autoscaling/v2");
        assert!(v2["metadata"].get("annotations").is_none(), "{v2}");
        assert_eq!(
            v2["spec"]["metrics"],
            json!([
                {"type": "Resource", "resource": {"name": "memory", "target": {"type": "Utilization", "averageUtilization": 60}}},
                {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}
            ])
        );
        let mut stored = v2.clone();
        stored["status"] = json!({"currentReplicas": 2, "desiredReplicas": 2, "currentMetrics": [
            {"type": "Resource", "resource": {"name": "memory", "current": {"averageUtilization": 30, "averageValue": "10Mi"}}},
            {"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 70, "averageValue": "70m"}}}],
            "conditions": [{"type": "AbleToScale", "status": "True"}]});
        let back = v2_to_v1(stored.clone(), "autoscaling/v1");
        assert_eq!(back["spec"]["targetCPUUtilizationPercentage"], 50);
        assert_eq!(back["status"]["currentCPUUtilizationPercentage"], 70);
        assert!(back["spec"].get("metrics").is_none());
        let a = &back["metadata"]["annotations"];
        assert_eq!(
            serde_json::from_str::<Value>(a[METRICS].as_str().unwrap()).unwrap(),
            json!([{"type": "Resource", "resource": {"name": "memory", "targetAverageUtilization": 60}}])
        );
        assert!(a[CURRENT_METRICS]
            .as_str()
            .unwrap()
            .contains("\"currentAverageValue\":\"70m\""));
        assert!(a[CONDITIONS].as_str().unwrap().contains("AbleToScale"));
        // And back again: what v1 showed is what v2 stores.
        assert_eq!(v1_to_v2(back)["spec"]["metrics"], stored["spec"]["metrics"]);
        // A v1 object without a target gets the default CPU metric.
        let bare = v1_to_v2(json!({"spec": {"maxReplicas": 1}}));
        assert_eq!(bare["spec"]["metrics"], json!([default_cpu_metric()]));
        // Behaviour goes through its annotation with the internal field names.
        let mut b = stored.clone();
        b["spec"]["behavior"] = json!({"scaleDown": {"selectPolicy": "Min", "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]}});
        let v1b = v2_to_v1(b.clone(), "autoscaling/v1");
        let ann = v1b["metadata"]["annotations"][BEHAVIOR].as_str().unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(ann).unwrap(),
            json!({"ScaleUp": null, "ScaleDown": {"StabilizationWindowSeconds": null, "SelectPolicy": "Min",
                "Policies": [{"Type": "Pods", "Value": 1, "PeriodSeconds": 60}], "Tolerance": null}})
        );
        assert_eq!(
            v1_to_v2(v1b)["spec"]["behavior"]["scaleDown"],
            b["spec"]["behavior"]["scaleDown"]
        );
    }

    #[test]
    fn targets_column_as_kubectl_prints_it() {
        let spec = vec![
            json!({"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}),
            json!({"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "200Mi"}}}),
            json!({"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "10"}}}),
        ];
        assert_eq!(targets(&spec[..1], &[]), "cpu: <unknown>/80%");
        let status = vec![
            json!({"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 50, "averageValue": "50m"}}}),
            json!({"type": "Resource", "resource": {"name": "memory", "current": {"averageValue": "100Mi"}}}),
        ];
        assert_eq!(
            targets(&spec, &status),
            "cpu: 50%/80%, memory: 100Mi/200Mi + 1 more..."
        );
        assert_eq!(targets(&[], &[]), "<none>");
    }
}
