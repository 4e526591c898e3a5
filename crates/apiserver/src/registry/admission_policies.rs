//! ValidatingAdmissionPolicies and their bindings (admissionregistration.k8s.io/v1): defaults,
//! validation (every CEL expression must compile) and printer columns. The admission plugin
//! that evaluates them is `admission::policy`.

use async_trait::async_trait;
use r8s_api::validation::FieldError;
use serde_json::{json, Value};

use super::strategy::{age_cell, col, name_cell, Column, Finish, Strategy, AGE, NAME};
use crate::cel::check::{check, Type};
use crate::cel::Expr;
use crate::context::Ctx;
use crate::status::ApiError;

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

/// Upstream's defaults of a policy (validating or mutating): failurePolicy Fail, and its
/// matchConstraints'.
fn default_policy(obj: &mut Value) {
    let spec = &mut obj["spec"];
    if !spec.is_object() {
        return;
    }
    if spec["failurePolicy"].is_null() {
        spec["failurePolicy"] = json!("Fail");
    }
    default_match(&mut spec["matchConstraints"]);
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

// Type checking: upstream's ValidatingAdmissionPolicy status controller (run by
// kube-controller-manager) checks each validation's expression and messageExpression against
// the schemas of the kinds the policy matches, and writes the issues it finds to
// `status.typeChecking.expressionWarnings` with `status.observedGeneration`. Here the same
// check runs when a policy is written with a new generation (create, or an update of its
// spec), so the status is there when the write returns.

/// At most this many kinds are checked, as upstream.
const MAX_TYPES_TO_CHECK: usize = 10;

/// A built-in kind's schema, its `$ref`s inlined (nested deeper than a resource needs:
/// `dyn`).
fn builtin_schema(def: &r8s_api::ResourceDef) -> Option<Value> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<HashMap<String, Option<Value>>>> = OnceLock::new();
    let key = format!("{}/{}/{}", def.group, def.version, def.kind);
    let mut cache = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    cache
        .entry(key)
        .or_insert_with(|| {
            let schemas = r8s_api::typed::openapi_schemas([def]);
            let root = schemas
                .values()
                .find(|s| s["x-kubernetes-group-version-kind"][0]["kind"] == def.kind)?;
            Some(inline_refs(root, &schemas, 0))
        })
        .clone()
}

fn inline_refs(v: &Value, schemas: &serde_json::Map<String, Value>, depth: usize) -> Value {
    let target = |r: &Value| {
        r.as_str()
            .and_then(|r| r.rsplit('/').next())
            .and_then(|name| schemas.get(name))
    };
    match v {
        Value::Object(m) => {
            let referred =
                m.get("$ref")
                    .and_then(target)
                    .or_else(|| match m.get("allOf").and_then(Value::as_array) {
                        Some(all) if all.len() == 1 => target(&all[0]["$ref"]),
                        _ => None,
                    });
            if let Some(s) = referred {
                if depth > 24 {
                    return json!({"x-kubernetes-int-or-string": true});
                }
                return inline_refs(s, schemas, depth + 1);
            }
            Value::Object(
                m.iter()
                    .map(|(k, v)| (k.clone(), inline_refs(v, schemas, depth)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| inline_refs(v, schemas, depth)).collect()),
        v => v.clone(),
    }
}

/// The kind of `group`/`version`/`resource` (a plural) and its schema: a built-in's from
/// the served OpenAPI, a custom resource's from its CRD.
fn resolve_resource(group: &str, version: &str, resource: &str) -> Option<(String, Value)> {
    if let Some(def) = r8s_api::catalogue()
        .iter()
        .find(|d| d.group == group && d.version == version && d.plural == resource)
    {
        return Some((def.kind.to_owned(), builtin_schema(def)?));
    }
    let made = crate::registry::custom::find_made(group, version, resource)?;
    Some((made.kind.to_owned(), made.custom()?.schema.clone()?))
}

/// [`resolve_resource`] by kind.
fn resolve_kind(group: &str, version: &str, kind: &str) -> Option<Value> {
    if let Some(def) = r8s_api::catalogue()
        .iter()
        .find(|d| d.group == group && d.version == version && d.kind == kind)
    {
        return builtin_schema(def);
    }
    let made = crate::registry::custom::find_made_kind(group, version, kind)?;
    made.custom()?.schema.clone()
}

/// The kinds a policy's resource rules match, as upstream's `typesToCheck` finds them (no
/// wildcards), with their schemas: `(group, version, kind, schema)`, sorted.
fn types_to_check(policy: &Value) -> Vec<(String, String, String, Value)> {
    let mut found: Vec<(String, String, String, Value)> = Vec::new();
    let mut count = 0;
    let strings = |v: &Value| -> Option<Vec<String>> {
        let list: Vec<String> = v
            .as_array()?
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
        (!list.is_empty() && list.iter().all(|s| !s.contains('*'))).then(|| {
            let mut list = list;
            list.sort();
            list
        })
    };
    'rules: for rule in policy["spec"]["matchConstraints"]["resourceRules"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let (Some(groups), Some(versions), Some(resources)) = (
            strings(&rule["apiGroups"]),
            strings(&rule["apiVersions"]),
            strings(&rule["resources"]),
        ) else {
            continue;
        };
        for g in &groups {
            for v in &versions {
                for r in &resources {
                    let Some((kind, schema)) = resolve_resource(g, v, r) else {
                        continue;
                    };
                    if !found
                        .iter()
                        .any(|(fg, fv, fk, _)| fg == g && fv == v && *fk == kind)
                    {
                        found.push((g.clone(), v.clone(), kind, schema));
                    }
                    count += 1;
                    if count == MAX_TYPES_TO_CHECK {
                        break 'rules;
                    }
                }
            }
        }
    }
    found.sort_by(|a, b| (&a.0, &a.1, &a.2).cmp(&(&b.0, &b.1, &b.2)));
    found
}

/// The type of the `request` variable (upstream's `BuildRequestType`).
fn request_type() -> Type {
    let s = |n: &str| (n.to_owned(), Type::String);
    let gvk = Type::object(
        "kubernetes.GroupVersionKind",
        [s("group"), s("version"), s("kind")],
    );
    let gvr = Type::object(
        "kubernetes.GroupVersionResource",
        [s("group"), s("version"), s("resource")],
    );
    let strings = Type::List(Box::new(Type::String));
    let user = Type::object(
        "kubernetes.UserInfo",
        [
            s("username"),
            s("uid"),
            ("groups".to_owned(), strings.clone()),
            (
                "extra".to_owned(),
                Type::Map(Box::new(Type::String), Box::new(strings)),
            ),
        ],
    );
    Type::object(
        "kubernetes.AdmissionRequest",
        [
            ("kind".to_owned(), gvk.clone()),
            ("resource".to_owned(), gvr.clone()),
            s("subResource"),
            ("requestKind".to_owned(), gvk),
            ("requestResource".to_owned(), gvr),
            s("requestSubResource"),
            s("name"),
            s("namespace"),
            s("operation"),
            ("userInfo".to_owned(), user),
            ("dryRun".to_owned(), Type::Bool),
            ("options".to_owned(), Type::Dyn),
        ],
    )
}

/// Upstream's type checking of a policy: its `status.typeChecking.expressionWarnings`.
pub(crate) fn expression_warnings(policy: &Value) -> Vec<Value> {
    let spec = &policy["spec"];
    let kinds = types_to_check(policy);
    let params = spec["paramKind"].as_object().map(|pk| {
        let api_version = pk.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = pk.get("kind").and_then(Value::as_str).unwrap_or("");
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        resolve_kind(group, version, kind)
            .and_then(|s| Type::from_schema(&s, true, &format!("{kind}Params")))
            .unwrap_or(Type::Dyn)
    });
    // The declarations of each kind: its object, then the policy's variables in order.
    let declarations: Vec<(String, Vec<(&str, Type)>)> = kinds
        .iter()
        .map(|(g, v, k, schema)| {
            let object = Type::from_schema(schema, true, k).unwrap_or(Type::Dyn);
            let mut vars = vec![
                ("object", object.clone()),
                ("oldObject", object),
                ("request", request_type()),
                ("namespaceObject", Type::Dyn),
                ("authorizer", Type::Opaque("kubernetes.authorization.Authorizer")),
                (
                    "authorizer.requestResource",
                    Type::Opaque("kubernetes.authorization.ResourceCheck"),
                ),
            ];
            if let Some(p) = &params {
                vars.push(("params", p.clone()));
            }
            let mut fields = Vec::new();
            for var in spec["variables"].as_array().into_iter().flatten() {
                let (Some(name), Some(expr)) = (var["name"].as_str(), var["expression"].as_str()) else {
                    continue;
                };
                let mut with = vars.clone();
                with.push(("variables", Type::object("kubernetes.variables", fields.clone())));
                let t = check(expr, &with).map_or(Type::Dyn, |c| c.result);
                fields.push((name.to_owned(), t));
            }
            vars.push(("variables", Type::object("kubernetes.variables", fields)));
            (format!("{g}/{v}, Kind={k}"), vars)
        })
        .collect();
    let mut warnings = Vec::new();
    for (i, validation) in spec["validations"].as_array().into_iter().flatten().enumerate() {
        for field in ["expression", "messageExpression"] {
            let Some(source) = validation[field].as_str().filter(|s| !s.is_empty()) else {
                continue;
            };
            let issues: Vec<String> = declarations
                .iter()
                .filter_map(|(gvk, vars)| {
                    let e = check(source, vars).err()?;
                    Some(format!("{gvk}: compilation failed: {e}\n"))
                })
                .collect();
            if !issues.is_empty() {
                warnings.push(json!({
                    "fieldRef": format!("spec.validations[{i}].{field}"),
                    "warning": issues.join("\n"),
                }));
            }
        }
    }
    warnings
}

/// Writes the type checking's results into the status of a policy of a generation not yet
/// checked.
fn write_type_checking(obj: &mut Value) {
    let generation = obj["metadata"]["generation"].as_i64().unwrap_or(0);
    if generation <= obj["status"]["observedGeneration"].as_i64().unwrap_or(0) {
        return;
    }
    let warnings = expression_warnings(obj);
    if !obj["status"].is_object() {
        obj["status"] = json!({});
    }
    obj["status"]["observedGeneration"] = json!(generation);
    obj["status"]["typeChecking"] = if warnings.is_empty() {
        json!({})
    } else {
        json!({ "expressionWarnings": warnings })
    };
}

#[async_trait]
impl Strategy for Policies {
    fn tracks_generation(&self) -> bool {
        true
    }

    async fn begin_create(&self, _ctx: &Ctx, obj: &mut Value) -> Result<Option<Box<dyn Finish>>, ApiError> {
        write_type_checking(obj);
        Ok(None)
    }

    async fn begin_update(
        &self,
        _ctx: &Ctx,
        obj: &mut Value,
        _old: &Value,
    ) -> Result<Option<Box<dyn Finish>>, ApiError> {
        write_type_checking(obj);
        Ok(None)
    }

    fn status_subresource(&self) -> bool {
        true
    }

    fn default(&self, obj: &mut Value) {
        default_policy(obj);
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

/// MutatingAdmissionPolicies (admissionregistration.k8s.io/v1alpha1, behind the
/// `MutatingAdmissionPolicy` feature gate): defaults and validation as upstream's. The plugin
/// that applies them is `admission::policy::MutatingAdmissionPolicy`.
pub(crate) struct MutatingPolicies;
pub(crate) struct MutatingBindings;

#[async_trait]
impl Strategy for MutatingPolicies {
    fn tracks_generation(&self) -> bool {
        true
    }

    fn default(&self, obj: &mut Value) {
        default_policy(obj);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let spec = &obj["spec"];
        match spec["failurePolicy"].as_str() {
            Some("Fail" | "Ignore") => {}
            Some(other) => errs.push(FieldError::not_supported(
                "spec.failurePolicy",
                other,
                &["Fail", "Ignore"],
            )),
            None => errs.push(FieldError::required("spec.failurePolicy", "")),
        }
        if !spec["matchConstraints"].is_object() {
            errs.push(FieldError::required("spec.matchConstraints", ""));
        } else {
            let rules = spec["matchConstraints"]["resourceRules"].as_array();
            if rules.is_none_or(Vec::is_empty) {
                errs.push(FieldError::required("spec.matchConstraints.resourceRules", ""));
            }
            // Only creates and updates carry an object to mutate.
            for op in rules
                .into_iter()
                .flatten()
                .flat_map(|r| r["operations"].as_array().into_iter().flatten())
                .filter_map(Value::as_str)
            {
                if !matches!(op, "*" | "CREATE" | "UPDATE") {
                    errs.push(FieldError::not_supported(
                        "spec.matchConstraints.resourceRules.operations",
                        op,
                        &["*", "CREATE", "UPDATE"],
                    ));
                }
            }
        }
        check_match_conditions(&mut errs, &spec["matchConditions"], "spec.matchConditions");
        check_expressions(&mut errs, &spec["variables"], "spec.variables", &["expression"]);
        let mutations = spec["mutations"].as_array();
        if mutations.is_none_or(Vec::is_empty) {
            errs.push(FieldError::required(
                "spec.mutations",
                "mutations must contain at least one item",
            ));
        }
        for (i, m) in mutations.into_iter().flatten().enumerate() {
            let at = format!("spec.mutations[{i}]");
            let (want, other) = match m["patchType"].as_str() {
                Some("JSONPatch") => ("jsonPatch", "applyConfiguration"),
                Some("ApplyConfiguration") => ("applyConfiguration", "jsonPatch"),
                Some(t) => {
                    errs.push(FieldError::not_supported(
                        format!("{at}.patchType"),
                        t,
                        &["ApplyConfiguration", "JSONPatch"],
                    ));
                    continue;
                }
                None => {
                    errs.push(FieldError::required(format!("{at}.patchType"), ""));
                    continue;
                }
            };
            let patch_type = m["patchType"].as_str().unwrap_or("");
            if !m[other].is_null() {
                errs.push(FieldError::invalid_raw(
                    format!("{at}.{other}"),
                    &format!("{{{other}}}"),
                    format!("must not be specified when patchType is {patch_type}"),
                ));
            }
            if !m[want].is_object() {
                errs.push(FieldError::required(
                    format!("{at}.{want}"),
                    &format!("must be specified when patchType is {patch_type}"),
                ));
                continue;
            }
            let src = m[want]["expression"].as_str().unwrap_or("").trim();
            if src.is_empty() {
                errs.push(FieldError::required(format!("{at}.{want}.expression"), ""));
            } else if let Some(e) = crate::cel::mutation::compile(src).compile_error() {
                errs.push(FieldError::invalid(
                    format!("{at}.{want}.expression"),
                    src,
                    format!("compilation failed: {e}"),
                ));
            }
        }
        match spec["reinvocationPolicy"].as_str() {
            Some("Never" | "IfNeeded") => {}
            Some(other) => errs.push(FieldError::not_supported(
                "spec.reinvocationPolicy",
                other,
                &["IfNeeded", "Never"],
            )),
            None => errs.push(FieldError::required("spec.reinvocationPolicy", "")),
        }
        errs
    }
}

#[async_trait]
impl Strategy for MutatingBindings {
    fn tracks_generation(&self) -> bool {
        true
    }

    fn default(&self, obj: &mut Value) {
        default_match(&mut obj["spec"]["matchResources"]);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if obj["spec"]["policyName"].as_str().is_none_or(str::is_empty) {
            errs.push(FieldError::required("spec.policyName", ""));
        }
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The status controller's warnings: each expression checked against each matched kind.
    #[test]
    fn expressions_are_type_checked_against_the_matched_kinds() {
        let mut p = json!({"metadata": {"name": "p", "generation": 1}, "spec": {
            "matchConstraints": {"resourceRules": [{"operations": ["CREATE"], "apiGroups": ["apps"],
                "apiVersions": ["v1"], "resources": ["deployments", "replicasets"]}]},
            "variables": [{"name": "n", "expression": "object.spec.replicas"}],
            "validations": [
                {"expression": "object.spec.replicaz > 1"},
                {"expression": "variables.n > 1 && object.metadata.name != '' && request.userInfo.username != ''",
                 "messageExpression": "'too many: ' + object.spec.replicas"},
                {"expression": "object.spec.template.spec.containers.all(c, c.image.startsWith('x'))"}]}});
        write_type_checking(&mut p);
        let replicaz = "compilation failed: ERROR: <input>:1:12: undefined field 'replicaz'\n | object.spec.replicaz > 1\n | ...........^\n";
        let plus = "compilation failed: ERROR: <input>:1:14: found no matching overload for '_+_' applied to '(string, int)'\n | 'too many: ' + object.spec.replicas\n | .............^\n";
        assert_eq!(
            p["status"],
            json!({"observedGeneration": 1, "typeChecking": {"expressionWarnings": [
                {"fieldRef": "spec.validations[0].expression",
                 "warning": format!("apps/v1, Kind=Deployment: {replicaz}\napps/v1, Kind=ReplicaSet: {replicaz}")},
                {"fieldRef": "spec.validations[1].messageExpression",
                 "warning": format!("apps/v1, Kind=Deployment: {plus}\napps/v1, Kind=ReplicaSet: {plus}")},
            ]}})
        );
        // A policy with nothing to warn about; wildcards are not checked.
        let mut p = json!({"metadata": {"generation": 2}, "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": ["*"], "apiVersions": ["v1"], "resources": ["pods"]}]},
            "validations": [{"expression": "object.nope"}]}});
        write_type_checking(&mut p);
        assert_eq!(p["status"], json!({"observedGeneration": 2, "typeChecking": {}}));
    }

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
