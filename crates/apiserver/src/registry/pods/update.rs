//! What an update of a pod may change (upstream's `ValidatePodUpdate`).

use r8s_api::validation::FieldError;
use serde_json::{json, Value};

use super::defaults as pod_defaults;

/// The pod spec fields an update may change (upstream's `ValidatePodUpdate`): container and
/// init container images, activeDeadlineSeconds (set, or lowered, never removed), tolerations
/// (only added), terminationGracePeriodSeconds (to 1 from a negative value) and
/// schedulingGates (only removed). Anything else is Forbidden, with what changed.
pub(crate) fn validate_pod_update(obj: &Value, old: &Value) -> Vec<FieldError> {
    let new_spec = &obj["spec"];
    let mut munged = old["spec"].clone();
    // The alias is derived from the name (a pod stored before it was kept reads the same).
    pod_defaults::service_account_alias(&mut munged);
    let mut errs = Vec::new();
    for list in ["containers", "initContainers"] {
        // (`get_mut`, not indexing: indexing a Value mutably adds the key.)
        let (Some(new), Some(old)) = (
            new_spec[list].as_array(),
            munged.get_mut(list).and_then(Value::as_array_mut),
        ) else {
            continue;
        };
        if new.len() != old.len() {
            continue;
        }
        for (n, o) in new.iter().zip(old.iter_mut()) {
            if !n["image"].is_null() {
                o["image"] = n["image"].clone();
            }
        }
    }
    // activeDeadlineSeconds: may be set or lowered, never removed.
    match (
        new_spec["activeDeadlineSeconds"].as_i64(),
        old["spec"]["activeDeadlineSeconds"].as_i64(),
    ) {
        (Some(n), _) if !(0..=i32::MAX as i64).contains(&n) => errs.push(FieldError::invalid_raw(
            "spec.activeDeadlineSeconds",
            &n.to_string(),
            format!("must be between 0 and {}, inclusive", i32::MAX),
        )),
        (Some(n), Some(o)) if o < n => errs.push(FieldError::invalid_raw(
            "spec.activeDeadlineSeconds",
            &n.to_string(),
            "must be less than or equal to previous value",
        )),
        (None, Some(_)) => errs.push(FieldError::invalid_raw(
            "spec.activeDeadlineSeconds",
            "null",
            "must not update from a positive integer to nil value",
        )),
        _ => {}
    }
    if !errs.is_empty() {
        return errs;
    }
    set_or_remove(
        &mut munged,
        "activeDeadlineSeconds",
        &new_spec["activeDeadlineSeconds"],
    );
    // Tolerations: every existing one stays (a NoExecute one's tolerationSeconds may change).
    let empty = Vec::new();
    let new_tol = new_spec["tolerations"].as_array().unwrap_or(&empty);
    for t in old["spec"]["tolerations"].as_array().unwrap_or(&empty) {
        let same = |n: &Value| {
            let strip = |v: &Value| {
                let mut v = v.clone();
                if let Some(m) = v.as_object_mut() {
                    m.remove("tolerationSeconds");
                }
                v
            };
            strip(n) == strip(t)
        };
        if !new_tol.iter().any(same) {
            errs.push(FieldError {
                reason: "FieldValueForbidden",
                field: "spec.tolerations".into(),
                message: "Forbidden: existing toleration can not be modified except its tolerationSeconds"
                    .into(),
            });
            break;
        }
    }
    set_or_remove(&mut munged, "tolerations", &new_spec["tolerations"]);
    // terminationGracePeriodSeconds: from a negative value to 1 only.
    if old["spec"]["terminationGracePeriodSeconds"]
        .as_i64()
        .is_some_and(|g| g < 0)
        && new_spec["terminationGracePeriodSeconds"].as_i64() == Some(1)
    {
        munged["terminationGracePeriodSeconds"] = json!(1);
    }
    // schedulingGates: may only be removed.
    let new_gates = new_spec["schedulingGates"].as_array().unwrap_or(&empty);
    let old_gates = old["spec"]["schedulingGates"].as_array().unwrap_or(&empty);
    if !new_gates.iter().all(|g| old_gates.contains(g)) {
        errs.push(FieldError {
            reason: "FieldValueForbidden",
            field: "spec.schedulingGates".into(),
            message: "Forbidden: only deletion is allowed, but found new scheduling gate".into(),
        });
    }
    set_or_remove(&mut munged, "schedulingGates", &new_spec["schedulingGates"]);
    // A field set to null is a field not set.
    let mut new_spec = new_spec.clone();
    strip_nulls(&mut new_spec);
    strip_nulls(&mut munged);
    if munged != new_spec {
        let mut changes = Vec::new();
        json_diff("spec", &munged, &new_spec, &mut changes);
        errs.push(FieldError {
            reason: "FieldValueForbidden",
            field: "spec".into(),
            message: format!(
                "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)\n{}",
                changes.join("\n")
            ),
        });
    }
    errs
}

fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(strip_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

fn set_or_remove(spec: &mut Value, key: &str, v: &Value) {
    if let Some(m) = spec.as_object_mut() {
        if v.is_null() {
            m.remove(key);
        } else {
            m.insert(key.into(), v.clone());
        }
    }
}

/// The paths where `a` and `b` differ, as `- path: old` / `+ path: new` lines (a short
/// stand-in for the Go diff upstream prints).
pub(crate) fn json_diff(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    if out.len() >= 20 || a == b {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                json_diff(
                    &format!("{path}.{k}"),
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                json_diff(&format!("{path}[{i}]"), p, q, out);
            }
        }
        _ => {
            out.push(format!("- {path}: {a}"));
            out.push(format!("+ {path}: {b}"));
        }
    }
}

#[cfg(test)]
mod pod_update_tests {
    use super::*;

    fn pod() -> Value {
        json!({"metadata": {"name": "p"}, "spec": {
            "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "1"]}],
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}],
            "terminationGracePeriodSeconds": 30,
            "schedulingGates": [{"name": "a"}, {"name": "b"}]
        }})
    }

    fn messages(obj: &Value, old: &Value) -> Vec<String> {
        validate_pod_update(obj, old)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn images_deadlines_added_tolerations_and_removed_gates_may_change() {
        let old = pod();
        let mut new = pod();
        new["spec"]["containers"][0]["image"] = json!("nginx");
        new["spec"]["activeDeadlineSeconds"] = json!(60);
        new["spec"]["tolerations"][0]["tolerationSeconds"] = json!(10);
        new["spec"]["tolerations"]
            .as_array_mut()
            .unwrap()
            .push(json!({"key": "x", "operator": "Exists"}));
        new["spec"]["schedulingGates"] = json!([{"name": "b"}]);
        assert!(messages(&new, &old).is_empty(), "{:?}", messages(&new, &old));
        // Lowered is fine; raised or removed is not.
        let mut lower = new.clone();
        lower["spec"]["activeDeadlineSeconds"] = json!(30);
        assert!(messages(&lower, &new).is_empty());
        let mut higher = new.clone();
        higher["spec"]["activeDeadlineSeconds"] = json!(90);
        assert_eq!(
            messages(&higher, &new),
            ["spec.activeDeadlineSeconds: Invalid value: 90: must be less than or equal to previous value"]
        );
        let mut removed = new.clone();
        removed["spec"]
            .as_object_mut()
            .unwrap()
            .remove("activeDeadlineSeconds");
        assert_eq!(
            messages(&removed, &new),
            ["spec.activeDeadlineSeconds: Invalid value: null: must not update from a positive integer to nil value"]
        );
    }

    #[test]
    fn other_spec_changes_are_forbidden_with_what_changed() {
        let old = pod();
        let mut new = pod();
        new["spec"]["containers"][0]["command"] = json!(["sleep", "2"]);
        let m = messages(&new, &old);
        assert_eq!(m.len(), 1);
        assert!(
            m[0].starts_with(
                "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
            ),
            "{}",
            m[0]
        );
        assert!(
            m[0].contains("- spec.containers[0].command[1]: \"1\"\n+ spec.containers[0].command[1]: \"2\""),
            "{}",
            m[0]
        );
        // A toleration taken away, a gate added.
        let mut new = pod();
        new["spec"]["tolerations"] = json!([]);
        new["spec"]["schedulingGates"] = json!([{"name": "a"}, {"name": "b"}, {"name": "c"}]);
        assert_eq!(
            messages(&new, &old),
            [
                "spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds",
                "spec.schedulingGates: Forbidden: only deletion is allowed, but found new scheduling gate"
            ]
        );
    }
}
