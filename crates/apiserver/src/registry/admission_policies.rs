//! ValidatingAdmissionPolicies and their bindings (admissionregistration.k8s.io/v1): defaults,
//! validation (every CEL expression must compile) and printer columns. The admission plugin
//! that evaluates them is `admission::policy`.

use async_trait::async_trait;
use r8s_api::validation::FieldError;
use serde_json::{json, Value};

use super::strategy::{age_cell, col, name_cell, Column, Strategy, AGE, NAME};
use crate::cel::Expr;

pub(crate) struct Policies;
pub(crate) struct Bindings;

/// Each `expression` (and `messageExpression`) of the list at `path` must compile.
fn check_expressions(errs: &mut Vec<FieldError>, list: &Value, path: &str, fields: &[&str]) {
    for (i, item) in list.as_array().into_iter().flatten().enumerate() {
        for field in fields {
            let Some(src) = item[*field].as_str() else {
                continue;
            };
            if src.is_empty() && *field != "expression" {
                continue;
            }
            if src.is_empty() {
                errs.push(FieldError::required(format!("{path}[{i}].{field}"), ""));
                continue;
            }
            if let Some(e) = Expr::compile(src).compile_error() {
                errs.push(FieldError::invalid(
                    format!("{path}[{i}].{field}"),
                    src,
                    format!("compilation failed: {e}"),
                ));
            }
        }
    }
}

/// Upstream's defaults of a MatchResources.
fn default_match(m: &mut Value) {
    if !m.is_object() {
        return;
    }
    if m["matchPolicy"].is_null() {
        m["matchPolicy"] = json!("Equivalent");
    }
    for k in ["namespaceSelector", "objectSelector"] {
        if m[k].is_null() {
            m[k] = json!({});
        }
    }
}

/// The checks shared by webhooks' and policies' matchConditions.
pub(crate) fn check_match_conditions(errs: &mut Vec<FieldError>, list: &Value, path: &str) {
    let mut names = Vec::new();
    for (i, c) in list.as_array().into_iter().flatten().enumerate() {
        let name = c["name"].as_str().unwrap_or("");
        if name.is_empty() {
            errs.push(FieldError::required(format!("{path}[{i}].name"), ""));
        } else if names.contains(&name) {
            errs.push(FieldError::duplicate(format!("{path}[{i}].name"), name));
        }
        names.push(name);
    }
    check_expressions(errs, list, path, &["expression"]);
}

#[async_trait]
impl Strategy for Policies {
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
        if spec["failurePolicy"].is_null() {
            spec["failurePolicy"] = json!("Fail");
        }
        default_match(&mut spec["matchConstraints"]);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let spec = &obj["spec"];
        if !spec["matchConstraints"].is_object() {
            errs.push(FieldError::required("spec.matchConstraints", ""));
        } else if spec["matchConstraints"]["resourceRules"]
            .as_array()
            .is_none_or(Vec::is_empty)
        {
            errs.push(FieldError::required("spec.matchConstraints.resourceRules", ""));
        }
        if spec["validations"].as_array().is_none_or(Vec::is_empty)
            && spec["auditAnnotations"].as_array().is_none_or(Vec::is_empty)
        {
            errs.push(FieldError::required(
                "spec.validations",
                "validations or auditAnnotations must contain at least one item",
            ));
        }
        match spec["failurePolicy"].as_str().unwrap_or("Fail") {
            "Fail" | "Ignore" => {}
            other => errs.push(FieldError::not_supported(
                "spec.failurePolicy",
                other,
                &["Fail", "Ignore"],
            )),
        }
        check_expressions(
            &mut errs,
            &spec["validations"],
            "spec.validations",
            &["expression", "messageExpression"],
        );
        check_expressions(&mut errs, &spec["variables"], "spec.variables", &["expression"]);
        check_expressions(
            &mut errs,
            &spec["auditAnnotations"],
            "spec.auditAnnotations",
            &["valueExpression"],
        );
        check_match_conditions(&mut errs, &spec["matchConditions"], "spec.matchConditions");
        errs
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col(
                "Validations",
                "integer",
                "Validations indicates the number of validation rules defined in this configuration",
            ),
            col(
                "ParamKind",
                "string",
                "ParamKind specifies the kind of resources used to parameterize this policy",
            ),
            AGE,
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let pk = &obj["spec"]["paramKind"];
        let param_kind = match (pk["apiVersion"].as_str(), pk["kind"].as_str()) {
            (Some(v), Some(k)) => format!("{v}/{k}"),
            _ => "<unset>".to_owned(),
        };
        vec![
            name_cell(obj),
            json!(obj["spec"]["validations"].as_array().map_or(0, Vec::len)),
            json!(param_kind),
            age_cell(obj),
        ]
    }
}

#[async_trait]
impl Strategy for Bindings {
    fn tracks_generation(&self) -> bool {
        true
    }

    fn default(&self, obj: &mut Value) {
        default_match(&mut obj["spec"]["matchResources"]);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let spec = &obj["spec"];
        if spec["policyName"].as_str().is_none_or(str::is_empty) {
            errs.push(FieldError::required("spec.policyName", ""));
        }
        let actions: Vec<&str> = spec["validationActions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if actions.is_empty() {
            errs.push(FieldError::required(
                "spec.validationActions",
                "at least one validation action is required",
            ));
        }
        for (i, a) in actions.iter().enumerate() {
            if !matches!(*a, "Deny" | "Warn" | "Audit") {
                errs.push(FieldError::not_supported(
                    format!("spec.validationActions[{i}]"),
                    a,
                    &["Audit", "Deny", "Warn"],
                ));
            }
        }
        if actions.contains(&"Deny") && actions.contains(&"Warn") {
            errs.push(FieldError::invalid_raw(
                "spec.validationActions",
                "[\"Deny\", \"Warn\"]",
                "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
            ));
        }
        errs
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col(
                "PolicyName",
                "string",
                "PolicyName indicates the policy definition which the policy binding binded to",
            ),
            col(
                "ParamRef",
                "string",
                "ParamRef indicates the param resource which sets the configration param",
            ),
            AGE,
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let pr = &obj["spec"]["paramRef"];
        let param_ref = match pr["name"].as_str() {
            Some(n) => match pr["namespace"].as_str() {
                Some(ns) if !ns.is_empty() => format!("{ns}/{n}"),
                _ => format!("*/{n}"),
            },
            None if pr.is_object() => "*/*".to_owned(),
            None => "<unset>".to_owned(),
        };
        vec![
            name_cell(obj),
            json!(obj["spec"]["policyName"].as_str().unwrap_or("")),
            json!(param_ref),
            age_cell(obj),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_must_compile_and_bindings_must_act() {
        let mut p = json!({"metadata": {"name": "p"}, "spec": {
            "matchConstraints": {"resourceRules": [{"operations": ["CREATE"], "apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"]}]},
            "validations": [{"expression": "object.spec.replicas > 1"}, {"expression": "object.spec.("}]}});
        Policies.default(&mut p);
        assert_eq!(p["spec"]["failurePolicy"], "Fail");
        let errs = Policies.validate(&p);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].field, "spec.validations[1].expression");
        assert!(errs[0].message.contains("compilation failed"), "{errs:?}");
        let b = json!({"spec": {"policyName": "p", "validationActions": ["Deny", "Warn"]}});
        assert_eq!(Bindings.validate(&b).len(), 1);
        let b = json!({"spec": {"policyName": "p", "validationActions": ["Deny"]}});
        assert!(Bindings.validate(&b).is_empty());
        // The conformance suite's bad match condition.
        let mut errs = Vec::new();
        check_match_conditions(
            &mut errs,
            &json!([{"name": "bad", "expression": "... [] bad expression"}]),
            "webhooks[0].matchConditions",
        );
        assert!(
            errs.len() == 1 && errs[0].message.contains("compilation failed"),
            "{errs:?}"
        );
    }
}
