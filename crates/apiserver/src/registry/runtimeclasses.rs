//! RuntimeClasses (node.k8s.io/v1, upstream's `pkg/registry/node/runtimeclass`): which CRI
//! handler a pod's sandbox runs with, the fixed overhead its pods carry and where they may be
//! scheduled. The handler is a DNS label and cannot change; the RuntimeClass admission plugin
//! applies the rest to pods.

use r8s_api::validation::FieldError;
use serde_json::{json, Value};

use super::strategy::{age_cell, col, go_string, name_cell, Column, Strategy, AGE, NAME};

pub(crate) struct RuntimeClasses;

/// Upstream's `IsDNS1123Label`: at most 63 lower-case alphanumerics or '-', starting and
/// ending with an alphanumeric; the messages as upstream's.
fn dns1123_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let valid = !value.is_empty()
        && value.chars().all(|c| ok(c) || c == '-')
        && value.chars().next().is_some_and(ok)
        && value.chars().last().is_some_and(ok);
    if !valid {
        errs.push("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".to_string());
    }
    errs
}

impl Strategy for RuntimeClasses {
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        match obj.get("handler").and_then(Value::as_str) {
            None | Some("") => errs.push(FieldError::required("handler", "")),
            Some(h) => {
                for msg in dns1123_label(h) {
                    errs.push(FieldError::invalid("handler", h, &msg));
                }
            }
        }
        for (res, q) in obj["overhead"]["podFixed"].as_object().into_iter().flatten() {
            let path = format!("overhead.podFixed[{res}]");
            match q.as_str().map(r8s_api::quantity::Quantity::parse) {
                Some(Ok(v)) if v.sign() < 0 => errs.push(FieldError::invalid_raw(
                    &path,
                    &go_string(q),
                    "must be greater than or equal to 0",
                )),
                Some(Ok(_)) => {}
                _ => errs.push(FieldError::invalid_raw(
                    &path,
                    &go_string(q),
                    "must be a quantity",
                )),
            }
        }
        errs
    }

    fn validate_update(&self, obj: &Value, old: &Value) -> Vec<FieldError> {
        if obj["handler"] != old["handler"] {
            return vec![FieldError::invalid_raw(
                "handler",
                &go_string(&obj["handler"]),
                "field is immutable",
            )];
        }
        Vec::new()
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col("Handler", "string", "Handler specifies the underlying runtime and configuration that the CRI implementation will use to handle pods of this class."),
            AGE,
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        vec![
            name_cell(obj),
            json!(obj["handler"].as_str().unwrap_or("")),
            age_cell(obj),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(obj: Value) -> Vec<String> {
        RuntimeClasses
            .validate(&obj)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn the_handler_is_a_required_immutable_dns_label() {
        assert!(errors(json!({"metadata": {"name": "rc"}, "handler": "runc"})).is_empty());
        assert_eq!(
            errors(json!({"metadata": {"name": "rc"}})),
            ["handler: Required value"]
        );
        let bad = errors(json!({"metadata": {"name": "rc"}, "handler": "Not_A_Label"}));
        assert_eq!(bad.len(), 1);
        assert!(bad[0].starts_with("handler: Invalid value: \"Not_A_Label\": a lowercase RFC 1123 label"));
        assert_eq!(
            RuntimeClasses
                .validate_update(&json!({"handler": "kata"}), &json!({"handler": "runc"}))
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["handler: Invalid value: \"kata\": field is immutable"]
        );
    }

    #[test]
    fn overhead_quantities_are_checked() {
        let ok = json!({"metadata": {"name": "rc"}, "handler": "runc",
            "overhead": {"podFixed": {"cpu": "10m", "memory": "1Mi"}}});
        assert!(errors(ok).is_empty());
        let bad = json!({"metadata": {"name": "rc"}, "handler": "runc",
            "overhead": {"podFixed": {"cpu": "-1", "memory": "lots"}}});
        assert_eq!(errors(bad).len(), 2);
    }
}
