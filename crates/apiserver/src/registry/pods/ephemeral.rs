//! Ephemeral containers (upstream's `pods/ephemeralcontainers` strategy and
//! `ValidatePodEphemeralContainersUpdate`): added to a running pod through the subresource
//! only — which takes nothing from the request but `spec.ephemeralContainers` — never removed
//! or changed once there, never set on create, and without the fields that only make sense for
//! a container the pod was planned with (ports, probes, resources, lifecycle hooks).

use std::collections::HashSet;

use r8s_api::validation::FieldError;
use serde_json::{json, Value};

use crate::registry::meta;
use crate::status::ApiError;

/// Fields an ephemeral container may not set (upstream's allow-list, inverted).
const FORBIDDEN: [&str; 8] = [
    "ports",
    "resources",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
    "resizePolicy",
    "restartPolicy",
];

/// Whether a field is set, as Go's `IsZero` sees the decoded struct: absent or null is unset,
/// and so is an empty `resources` (a struct, not a pointer: kubectl always sends `{}`).
fn is_set(key: &str, v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::String(s) => !s.is_empty(),
        Value::Object(o) if key == "resources" => !o.is_empty(),
        _ => true,
    }
}

/// The checks of one ephemeral container beyond a container's (`validateEphemeralContainers`):
/// `targets` are the names of the pod's containers and init containers.
pub(crate) fn validate(errs: &mut Vec<FieldError>, at: &str, c: &Value, targets: &HashSet<String>) {
    if let Some(t) = c["targetContainerName"].as_str().filter(|t| !t.is_empty()) {
        if !targets.contains(t) {
            errs.push(FieldError::not_found(format!("{at}.targetContainerName"), t));
        }
    }
    for key in FORBIDDEN {
        if c.get(key).is_some_and(|v| is_set(key, v)) {
            errs.push(FieldError::forbidden(
                format!("{at}.{key}"),
                "cannot be set for an Ephemeral Container",
            ));
        }
    }
    for (j, m) in c["volumeMounts"].as_array().into_iter().flatten().enumerate() {
        for key in ["subPath", "subPathExpr"] {
            if m[key].as_str().is_some_and(|s| !s.is_empty()) {
                errs.push(FieldError::forbidden(
                    format!("{at}.volumeMounts[{j}].{key}"),
                    "cannot be set for an Ephemeral Container",
                ));
            }
        }
    }
}

/// A pod create may not carry ephemeral containers.
pub(crate) fn validate_create(obj: &Value) -> Vec<FieldError> {
    match obj["spec"]["ephemeralContainers"].as_array() {
        Some(list) if !list.is_empty() => vec![FieldError::forbidden(
            "spec.ephemeralContainers",
            "cannot be set on create",
        )],
        _ => Vec::new(),
    }
}

/// The stored pod `old` with the ephemeral containers of `new` (everything else of `new` is
/// ignored), if the change only adds some.
pub(crate) fn merge(def: &r8s_api::ResourceDef, old: &Value, new: &Value) -> Result<Value, ApiError> {
    let name = meta::name(old).to_owned();
    let invalid = |errs: Vec<FieldError>| super::super::invalid(def, &name, &errs);
    if old["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_string() {
        return Err(invalid(vec![FieldError::forbidden(
            "",
            "static pods do not support ephemeral containers",
        )]));
    }
    let mut full = old.clone();
    let wanted = new["spec"]["ephemeralContainers"].clone();
    match &wanted {
        Value::Array(_) => full["spec"]["ephemeralContainers"] = wanted.clone(),
        _ => {
            if let Some(spec) = full["spec"].as_object_mut() {
                spec.remove("ephemeralContainers");
            }
        }
    }
    // Compared as they will be stored: the new list with the pod defaults.
    let mut defaulted = json!({"ephemeralContainers": wanted});
    super::defaults::pod(&mut defaulted);
    let new_list = defaulted["ephemeralContainers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut errs = Vec::new();
    for was in old["spec"]["ephemeralContainers"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let n = was["name"].as_str().unwrap_or("");
        match new_list.iter().find(|c| c["name"] == n) {
            None => errs.push(FieldError::forbidden(
                "spec.ephemeralContainers",
                format!("existing ephemeral containers {n:?} may not be removed\n"),
            )),
            Some(now) if now != was => {
                let mut diff = Vec::new();
                super::update::json_diff("", was, now, &mut diff);
                errs.push(FieldError::forbidden(
                    "spec.ephemeralContainers",
                    format!(
                        "existing ephemeral containers {n:?} may not be changed\n{}",
                        diff.join("\n")
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    if !errs.is_empty() {
        return Err(invalid(errs));
    }
    Ok(full)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods() -> &'static r8s_api::ResourceDef {
        crate::registry::catalogue::builtin("", "v1", "pods").unwrap()
    }

    fn pod_with(ephemeral: Value) -> Value {
        let mut p = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app", "image": "nginx"}], "ephemeralContainers": ephemeral}});
        super::super::defaults::pod(&mut p["spec"]);
        p
    }

    #[test]
    fn only_additions_are_taken_and_nothing_else_of_the_request() {
        let old = pod_with(json!([{"name": "debugger-a", "image": "busybox"}]));
        let new = json!({"metadata": {"name": "p", "labels": {"x": "y"}}, "spec": {"containers": [], "ephemeralContainers": [
            {"name": "debugger-a", "image": "busybox"}, {"name": "debugger-b", "image": "busybox", "resources": {}}]}});
        let full = merge(pods(), &old, &new).unwrap();
        assert_eq!(full["spec"]["ephemeralContainers"].as_array().unwrap().len(), 2);
        assert_eq!(full["spec"]["containers"], old["spec"]["containers"]);
        assert!(full["metadata"].get("labels").is_none());

        let removed = merge(pods(), &old, &json!({"spec": {"ephemeralContainers": []}})).unwrap_err();
        assert_eq!(
            removed.message,
            "Pod \"p\" is invalid: spec.ephemeralContainers: Forbidden: existing ephemeral containers \"debugger-a\" may not be removed\n"
        );
        let changed = merge(
            pods(),
            &old,
            &json!({"spec": {"ephemeralContainers": [{"name": "debugger-a", "image": "alpine"}]}}),
        )
        .unwrap_err();
        assert!(
            changed
                .message
                .starts_with("Pod \"p\" is invalid: spec.ephemeralContainers: Forbidden: existing ephemeral containers \"debugger-a\" may not be changed\n"),
            "{}",
            changed.message
        );
        let mut mirror = old.clone();
        mirror["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "x"});
        assert_eq!(
            merge(pods(), &mirror, &new).unwrap_err().message,
            "Pod \"p\" is invalid: : Forbidden: static pods do not support ephemeral containers"
        );
    }

    #[test]
    fn ephemeral_containers_are_checked_in_upstreams_words() {
        let mut errs = Vec::new();
        let spec = json!({"containers": [{"name": "app", "image": "nginx"}], "ephemeralContainers": [
            {"name": "app", "image": "busybox", "targetContainerName": "nope", "ports": [], "resources": {"limits": {"cpu": "1"}},
             "readinessProbe": {"exec": {"command": ["true"]}}, "volumeMounts": [{"name": "v", "mountPath": "/v", "subPath": "x"}]}],
            "volumes": [{"name": "v", "emptyDir": {}}]});
        super::super::validation::pod_spec(&mut errs, "spec", &spec);
        let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        for want in [
            "spec.ephemeralContainers[0].name: Duplicate value: \"app\"",
            "spec.ephemeralContainers[0].targetContainerName: Not found: \"nope\"",
            "spec.ephemeralContainers[0].ports: Forbidden: cannot be set for an Ephemeral Container",
            "spec.ephemeralContainers[0].resources: Forbidden: cannot be set for an Ephemeral Container",
            "spec.ephemeralContainers[0].readinessProbe: Forbidden: cannot be set for an Ephemeral Container",
            "spec.ephemeralContainers[0].volumeMounts[0].subPath: Forbidden: cannot be set for an Ephemeral Container",
        ] {
            assert!(text.iter().any(|t| t == want), "missing {want:?} in {text:#?}");
        }
        let template = json!({"containers": [{"name": "a", "image": "x"}], "ephemeralContainers": [{"name": "e", "image": "x"}]});
        let mut errs = Vec::new();
        super::super::validation::pod_spec(&mut errs, "spec.template.spec", &template);
        assert_eq!(
            errs[0].to_string(),
            "spec.template.spec.ephemeralContainers: Forbidden: ephemeral containers not allowed in pod template"
        );
        assert_eq!(
            validate_create(&json!({"spec": {"ephemeralContainers": [{"name": "e"}]}}))[0].to_string(),
            "spec.ephemeralContainers: Forbidden: cannot be set on create"
        );
    }
}
