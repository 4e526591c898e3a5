//! A CustomResourceDefinition version's structural schema (`openAPIV3Schema`) applied to its
//! objects, as upstream's apiextensions-apiserver does: unknown fields pruned (and reported
//! for `fieldValidation`), defaults filled in, and values validated with kube-openapi's
//! messages.
//!
//! Written by hand: the JSON-schema crates validate JSON Schema drafts with their own error
//! words and know nothing of the Kubernetes extensions (`x-kubernetes-*`, `nullable`,
//! embedded resources, pruning), and clients match upstream's words.

use r8s_api::validation::FieldError;
use serde_json::{Map, Value};

/// The fields of `metav1.ObjectMeta` a custom resource keeps (everything else in `metadata` is
/// an unknown field).
const OBJECT_META: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// `a.b` or `a[0]` under `path`.
fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn flag(schema: &Value, name: &str) -> bool {
    schema.get(name).and_then(Value::as_bool).unwrap_or(false)
}

/// Drop the fields of `obj` its schema does not name, returning their paths. `root`: the
/// object itself (apiVersion, kind and metadata are kept; metadata is pruned to ObjectMeta).
pub(crate) fn prune(schema: &Value, obj: &mut Value, unknown: &mut Vec<String>) {
    if let Some(o) = obj.as_object_mut() {
        prune_meta(o, "metadata", unknown);
        let from = unknown.len();
        prune_object(schema, o, "", true, unknown);
        // Upstream lists the root's unknown metadata first, then the pruned paths sorted.
        unknown[from..].sort();
    }
}

fn prune_meta(o: &mut Map<String, Value>, path: &str, unknown: &mut Vec<String>) {
    if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        m.retain(|k, _| {
            let keep = OBJECT_META.contains(&k.as_str());
            if !keep {
                unknown.push(join(path, k));
            }
            keep
        });
    }
}

fn prune_object(
    schema: &Value,
    o: &mut Map<String, Value>,
    path: &str,
    root: bool,
    unknown: &mut Vec<String>,
) {
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
    let embedded = root || flag(schema, "x-kubernetes-embedded-resource");
    let keys: Vec<String> = o.keys().cloned().collect();
    for k in keys {
        let here = join(path, &k);
        if embedded && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
            if k == "metadata" && !root {
                prune_meta(o, &here, unknown);
            }
            continue;
        }
        let sub = props.and_then(|p| p.get(&k)).or(additional);
        match sub {
            Some(sub) => {
                if let Some(v) = o.get_mut(&k) {
                    prune_value(sub, v, &here, unknown);
                }
            }
            None if preserve || schema.get("additionalProperties") == Some(&Value::Bool(true)) => {}
            None => {
                o.remove(&k);
                unknown.push(here);
            }
        }
    }
}

fn prune_value(schema: &Value, v: &mut Value, path: &str, unknown: &mut Vec<String>) {
    match v {
        Value::Object(o) => prune_object(schema, o, path, false, unknown),
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items").filter(|i| i.is_object()) {
                for (i, item) in items.iter_mut().enumerate() {
                    prune_value(item_schema, item, &format!("{path}[{i}]"), unknown);
                }
            }
        }
        _ => {}
    }
}

/// Fill in the schema's defaults where a field is absent (or null where the schema does not
/// allow null), deepest last, as upstream's structural defaulting. A null the schema does
/// not allow and has no default for goes (upstream's null pruning).
pub(crate) fn default(schema: &Value, v: &mut Value) {
    match v {
        Value::Object(o) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, sub) in props {
                    if o.get(k).is_some_and(Value::is_null)
                        && !flag(sub, "nullable")
                        && sub.get("default").is_none()
                    {
                        o.remove(k);
                    }
                    let Some(d) = sub.get("default") else { continue };
                    let missing = match o.get(k) {
                        None => true,
                        Some(Value::Null) => !flag(sub, "nullable"),
                        Some(_) => false,
                    };
                    if missing {
                        o.insert(k.clone(), d.clone());
                    }
                }
                for (k, sub) in props {
                    if let Some(child) = o.get_mut(k) {
                        default(sub, child);
                    }
                }
            }
            if let Some(add) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                let named = schema.get("properties").and_then(Value::as_object);
                for (k, child) in o.iter_mut() {
                    if named.is_none_or(|p| !p.contains_key(k)) {
                        default(add, child);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items").filter(|i| i.is_object()) {
                for item in items {
                    if item.is_null() {
                        if let Some(d) = item_schema.get("default") {
                            *item = d.clone();
                        }
                    }
                    default(item_schema, item);
                }
            }
        }
        _ => {}
    }
}

/// Validate `obj` (the whole custom resource) against its schema: every error, in upstream's
/// words. Metadata is the registry's to check.
pub(crate) fn validate(schema: &Value, obj: &Value) -> Vec<FieldError> {
    budget::reset();
    let mut errs = Vec::new();
    if let Some(o) = obj.as_object() {
        let props = schema.get("properties").and_then(Value::as_object);
        for (k, v) in o {
            if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            if let Some(sub) = props.and_then(|p| p.get(k)) {
                check(sub, v, k, &mut errs);
            } else if let Some(add) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                check(add, v, k, &mut errs);
            }
        }
        required(schema, o, "", &mut errs);
        object_bounds(schema, o, "", &mut errs);
        rules(schema, obj, None, "", &mut errs, false);
    }
    errs
}

/// Go's `%v`-like rendering of a value in a message: strings quoted, numbers bare, composite
/// values as JSON.
fn shown(v: &Value) -> String {
    match v {
        Value::String(s) => serde_json::to_string(s).unwrap_or_default(),
        Value::Null => "\"null\"".to_owned(),
        other => other.to_string(),
    }
}

fn invalid(path: &str, v: &Value, detail: String) -> FieldError {
    FieldError {
        reason: "FieldValueInvalid",
        field: path.to_owned(),
        message: format!("Invalid value: {}: {detail}", shown(v)),
    }
}

/// The name kube-openapi gives a value's JSON type.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(n) if n.as_f64().is_some_and(|f| f.fract() == 0.0) => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_matches(want: &str, v: &Value) -> bool {
    match (want, type_name(v)) {
        (w, t) if w == t => true,
        ("number", "integer") => true,
        _ => false,
    }
}

/// kube-openapi's type error: the value's JSON type is shown, never the value.
fn type_invalid(path: &str, v: &Value, want: &str) -> FieldError {
    let t = type_name(v);
    FieldError {
        reason: "FieldValueTypeInvalid",
        field: path.to_owned(),
        message: format!("Invalid value: \"{t}\": {path} in body must be of type {want}: \"{t}\""),
    }
}

fn check(schema: &Value, v: &Value, path: &str, errs: &mut Vec<FieldError>) {
    if v.is_null() && flag(schema, "nullable") {
        return;
    }
    // Validators run in kube-openapi's order: type, combinators, string, format, number,
    // array, enum, object.
    let mut type_ok = true;
    if flag(schema, "x-kubernetes-int-or-string") {
        if !matches!(type_name(v), "integer" | "string") {
            errs.push(type_invalid(path, v, "integer,string"));
            type_ok = false;
        }
    } else if let Some(t) = schema
        .get("type")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
    {
        if !type_matches(t, v) {
            errs.push(type_invalid(path, v, t));
            type_ok = false;
        }
    }
    combinators(schema, v, path, errs);
    if !type_ok {
        enum_check(schema, v, path, errs);
        return;
    }
    rules(schema, v, None, path, errs, false);
    match v {
        Value::String(s) => check_string(schema, s, v, path, errs),
        Value::Number(n) => check_number(schema, n.as_f64().unwrap_or(0.0), v, path, errs),
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items").filter(|i| i.is_object()) {
                for (i, item) in items.iter().enumerate() {
                    check(item_schema, item, &format!("{path}[{i}]"), errs);
                }
            }
            let n = items.len() as u64;
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64) {
                if n > max {
                    errs.push(too_many(path, n, max));
                }
            }
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64) {
                if n < min {
                    errs.push(invalid(
                        path,
                        v,
                        format!("{path} in body should have at least {min} items"),
                    ));
                }
            }
            let set = schema.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("set");
            if flag(schema, "uniqueItems") || set {
                for (i, a) in items.iter().enumerate() {
                    if items[..i].contains(a) {
                        errs.push(FieldError {
                            reason: "FieldValueDuplicate",
                            field: format!("{path}[{i}]"),
                            message: format!("Duplicate value: {}", shown(a)),
                        });
                    }
                }
            }
            if schema.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map") {
                let keys: Vec<&str> = schema
                    .get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                let key_of = |item: &Value| -> Vec<Value> { keys.iter().map(|k| item[*k].clone()).collect() };
                for (i, a) in items.iter().enumerate() {
                    if items[..i].iter().any(|b| key_of(b) == key_of(a)) {
                        let shown_key: Vec<String> =
                            keys.iter().map(|k| format!("\"{k}\":{}", a[*k])).collect();
                        errs.push(FieldError {
                            reason: "FieldValueDuplicate",
                            field: format!("{path}[{i}]"),
                            message: format!(
                                "Duplicate value: map[string]interface {{}}{{{}}}",
                                shown_key.join(", ")
                            ),
                        });
                    }
                }
            }
        }
        _ => {}
    }
    enum_check(schema, v, path, errs);
    if let Value::Object(o) = v {
        {
            object_bounds(schema, o, path, errs);
            let props = schema.get("properties").and_then(Value::as_object);
            let embedded = flag(schema, "x-kubernetes-embedded-resource");
            for (k, child) in o {
                if embedded && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    if let Some(sub) = props.and_then(|p| p.get(k)) {
                        check(sub, child, &join(path, k), errs);
                    }
                    continue;
                }
                if let Some(sub) = props.and_then(|p| p.get(k)) {
                    check(sub, child, &join(path, k), errs);
                } else if let Some(add) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                    check(add, child, &join(path, k), errs);
                }
            }
            if embedded {
                for k in ["apiVersion", "kind"] {
                    if o.get(k).and_then(Value::as_str).is_none_or(str::is_empty) {
                        errs.push(FieldError::required(join(path, k), "must not be empty"));
                    }
                }
            }
            required(schema, o, path, errs);
        }
    }
}

/// Where a schema node sits, for the messages of [`check_structural`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Field,
    Item,
}

/// Upstream's structural-schema invariants of a CRD version's `openAPIV3Schema`
/// (`ValidateStructural`, and the mutual exclusion of `properties` and `additionalProperties`
/// from the CRD's own validation), in upstream's words, sorted as upstream sorts them: every
/// specified field and array item has a type (unless it is int-or-string or keeps unknown
/// fields), an array has `items`, `additionalProperties` is not at the root nor beside
/// `properties` (but `true`) nor in an embedded resource, an embedded resource is an object,
/// `metadata` at a resource's root restricts only `name` and `generateName`, and nothing but
/// value validations sits under `allOf`, `anyOf`, `oneOf` and `not` (but int-or-string's two
/// patterns). The root's own type is checked where the CRD is validated. Not checked: that
/// what the junctors specify is also specified outside them.
pub(crate) fn check_structural(schema: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    structural(schema, Level::Root, path, &mut errs);
    errs.sort_by_key(ToString::to_string);
    errs
}

fn structural(s: &Value, level: Level, path: &str, errs: &mut Vec<FieldError>) {
    let kind = s.get("type").and_then(Value::as_str).unwrap_or("");
    let embedded = flag(s, "x-kubernetes-embedded-resource");
    let int_or_string = flag(s, "x-kubernetes-int-or-string");
    let preserve = flag(s, "x-kubernetes-preserve-unknown-fields");
    let props = s.get("properties").and_then(Value::as_object);
    let additional = s.get("additionalProperties").filter(|a| !a.is_null());
    if kind == "array" && s.get("items").is_none_or(Value::is_null) {
        errs.push(FieldError::required(format!("{path}.items"), "must be specified"));
    }
    if let Some(items) = s.get("items").filter(|i| i.is_object()) {
        structural(items, Level::Item, &format!("{path}.items"), errs);
    }
    for (k, v) in props.into_iter().flatten() {
        structural(v, Level::Field, &format!("{path}.properties[{k}]"), errs);
    }
    if let Some(a) = additional {
        if level == Level::Root {
            errs.push(FieldError::forbidden(
                format!("{path}.additionalProperties"),
                "must not be used at the root",
            ));
        }
        if props.is_some_and(|p| !p.is_empty()) && (a.is_object() || a == false) {
            errs.push(FieldError::forbidden(
                format!("{path}.additionalProperties"),
                "additionalProperties and properties are mutual exclusive",
            ));
        }
        if a.is_object() {
            structural(a, Level::Field, &format!("{path}.additionalProperties"), errs);
        }
    }
    if int_or_string && preserve {
        errs.push(FieldError::invalid_raw(
            format!("{path}.x-kubernetes-preserve-unknown-fields"),
            "true",
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    if int_or_string && embedded {
        errs.push(FieldError::invalid_raw(
            format!("{path}.x-kubernetes-embedded-resource"),
            "true",
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    let int_or_string_any_of = |v: &Value| {
        v.as_array().is_some_and(|a| {
            a.len() == 2
                && a[0] == serde_json::json!({"type": "integer"})
                && a[1] == serde_json::json!({"type": "string"})
        })
    };
    let skip_any_of = int_or_string_any_of(&s["anyOf"]);
    let skip_all_of_any_of = s["allOf"]
        .as_array()
        .and_then(|a| a.first())
        .is_some_and(|first| int_or_string_any_of(&first["anyOf"]));
    for junctor in ["allOf", "anyOf", "oneOf"] {
        if junctor == "anyOf" && skip_any_of {
            continue;
        }
        for (i, sub) in s[junctor].as_array().into_iter().flatten().enumerate() {
            if junctor == "allOf" && i == 0 && skip_all_of_any_of {
                // The first allOf's anyOf is int-or-string's pattern; the rest of it is not.
                let mut rest = sub.clone();
                if let Some(o) = rest.as_object_mut() {
                    o.remove("anyOf");
                }
                nested(&rest, &format!("{path}.{junctor}[{i}]"), errs);
                continue;
            }
            nested(sub, &format!("{path}.{junctor}[{i}]"), errs);
        }
    }
    if s.get("not").is_some_and(Value::is_object) {
        nested(&s["not"], &format!("{path}.not"), errs);
    }
    if embedded && kind != "object" {
        if kind.is_empty() {
            errs.push(FieldError::required(
                format!("{path}.type"),
                "must be object if x-kubernetes-embedded-resource is true",
            ));
        } else {
            errs.push(FieldError::invalid(
                format!("{path}.type"),
                kind,
                "must be object if x-kubernetes-embedded-resource is true",
            ));
        }
    } else if kind.is_empty() && !int_or_string && !preserve {
        match level {
            Level::Root => {}
            Level::Item => errs.push(FieldError::required(
                format!("{path}.type"),
                "must not be empty for specified array items",
            )),
            Level::Field => errs.push(FieldError::required(
                format!("{path}.type"),
                "must not be empty for specified object fields",
            )),
        }
    }
    if embedded && additional.is_some() {
        errs.push(FieldError::forbidden(
            format!("{path}.additionalProperties"),
            "must not be used if x-kubernetes-embedded-resource is set",
        ));
    }
    let resource_root = level == Level::Root || embedded;
    if resource_root {
        for k in ["kind", "apiVersion"] {
            if let Some(p) = props.and_then(|p| p.get(k)) {
                let t = p.get("type").and_then(Value::as_str).unwrap_or("");
                if t != "string" {
                    errs.push(FieldError::invalid(
                        format!("{path}.properties[{k}].type"),
                        t,
                        "must be string",
                    ));
                }
            }
        }
    }
    if let Some(meta) = props.and_then(|p| p.get("metadata")) {
        let at = format!("{path}.properties[metadata]");
        let t = meta.get("type").and_then(Value::as_str).unwrap_or("");
        if resource_root && t != "object" {
            errs.push(FieldError::invalid(format!("{at}.type"), t, "must be object"));
        }
        if level == Level::Root {
            // Only name and generateName may be restricted (and the type, a default, a
            // description).
            let allowed = |k: &str| matches!(k, "type" | "default" | "description" | "properties");
            let only_names = meta["properties"]
                .as_object()
                .is_none_or(|p| p.keys().all(|k| k == "name" || k == "generateName"));
            if !only_names || meta.as_object().is_some_and(|m| m.keys().any(|k| !allowed(k))) {
                errs.push(FieldError::forbidden(
                    at,
                    "must not specify anything other than name and generateName, but metadata is implicitly specified",
                ));
            }
        }
    }
    if embedded && !preserve && props.is_none_or(|p| p.is_empty()) {
        errs.push(FieldError::required(
            format!("{path}.properties"),
            "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        ));
    }
}

/// A schema under a logic junctor: value validations only.
fn nested(s: &Value, path: &str, errs: &mut Vec<FieldError>) {
    for (k, v) in s["properties"].as_object().into_iter().flatten() {
        nested(v, &format!("{path}.properties[{k}]"), errs);
    }
    if s.get("items").is_some_and(Value::is_object) {
        nested(&s["items"], &format!("{path}.items"), errs);
    }
    for junctor in ["allOf", "anyOf", "oneOf"] {
        for (i, sub) in s[junctor].as_array().into_iter().flatten().enumerate() {
            nested(sub, &format!("{path}.{junctor}[{i}]"), errs);
        }
    }
    if s.get("not").is_some_and(Value::is_object) {
        nested(&s["not"], &format!("{path}.not"), errs);
    }
    let forbidden = [
        ("type", "must be empty to be structural"),
        ("additionalProperties", "must be undefined to be structural"),
        ("default", "must be undefined to be structural"),
        ("title", "must be empty to be structural"),
        ("description", "must be empty to be structural"),
        ("nullable", "must be false to be structural"),
        (
            "x-kubernetes-preserve-unknown-fields",
            "must be false to be structural",
        ),
        ("x-kubernetes-embedded-resource", "must be false to be structural"),
        ("x-kubernetes-int-or-string", "must be false to be structural"),
        ("x-kubernetes-list-map-keys", "must be empty to be structural"),
        ("x-kubernetes-list-type", "must be undefined to be structural"),
        ("x-kubernetes-map-type", "must be undefined to be structural"),
        ("x-kubernetes-validations", "must be empty to be structural"),
    ];
    for (k, why) in forbidden {
        let set = match s.get(k) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => false,
            Some(Value::String(t)) => !t.is_empty(),
            Some(Value::Array(a)) => !a.is_empty(),
            Some(_) => true,
        };
        if set {
            errs.push(FieldError::forbidden(format!("{path}.{k}"), why));
        }
    }
    if s["properties"].get("metadata").is_some() {
        errs.push(FieldError::forbidden(
            format!("{path}.properties[metadata]"),
            "must not be specified in a nested context",
        ));
    }
}

/// Upstream's compile-time checks of a CRD's `x-kubernetes-validations` (its
/// `ValidateCustomResourceDefinitionOpenAPISchema` with `cel.Compile`): each rule must parse
/// and type-check with `self` (and `oldSelf`) typed by the schema node it sits on and yield a
/// bool, each messageExpression must yield a string, `oldSelf` may not be used where old and
/// new values cannot be correlated (under a list that is not a map list), and
/// `optionalOldSelf` only with `oldSelf`. `path`: the schema's field path.
///
/// And each rule's estimated cost, times how many times it could run on one object, must stay
/// within upstream's `StaticEstimatedCostLimit`, and all of them together within
/// `StaticEstimatedCRDCostLimit` (see `crate::cel::cost`).
pub(crate) fn check_rules(schema: &Value, path: &str) -> Vec<FieldError> {
    use crate::cel::cost::{over_budget, STATIC_CRD_LIMIT};
    let mut errs = Vec::new();
    let mut total = TotalCost::default();
    check_node_rules(schema, path, true, None, Some(1), &mut total, &mut errs);
    if total.total > STATIC_CRD_LIMIT {
        for (at, _) in &total.most_expensive {
            errs.push(FieldError::forbidden(
                at.clone(),
                "contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema",
            ));
        }
        errs.push(FieldError::forbidden(
            path,
            over_budget(
                "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema",
                total.total,
                STATIC_CRD_LIMIT,
            ),
        ));
    }
    errs
}

/// The estimated cost of a CRD's rules together, and the (at most 4) dearest of them that
/// each take at least 1% of the limit (upstream's `TotalCost`).
#[derive(Default)]
struct TotalCost {
    total: u64,
    most_expensive: Vec<(String, u64)>,
}

impl TotalCost {
    fn observe(&mut self, at: String, cost: u64) {
        use crate::cel::cost::STATIC_CRD_LIMIT;
        self.total = self.total.saturating_add(cost);
        if cost < STATIC_CRD_LIMIT / 100 {
            return;
        }
        self.most_expensive.push((at, cost));
        self.most_expensive.sort_by_key(|e| std::cmp::Reverse(e.1));
        self.most_expensive.truncate(4);
    }
}

/// By how much a schema multiplies how often its children's rules can run (upstream's
/// `extractMaxElements`); `None`: without bound.
fn max_elements_factor(schema: &Value) -> Option<u64> {
    let limit = |k: &str| schema.get(k).and_then(Value::as_i64).map(|n| n.max(0) as u64);
    match schema.get("type").and_then(Value::as_str) {
        Some("object")
            if schema
                .get("additionalProperties")
                .is_some_and(|a| a.is_object() || a == true) =>
        {
            limit("maxProperties")
        }
        Some("array") => limit("maxItems"),
        _ => Some(1),
    }
}

/// A rule's (or message expression's) estimated cost at its schema node.
fn estimated_cost(checked: &crate::cel::check::Checked, schema: &Value, embedded: bool) -> u64 {
    let Some(ast) = &checked.ast else { return 0 };
    let mut sizes = crate::cel::cost::SchemaSizes {
        root: schema,
        resource_root: embedded,
    };
    crate::cel::cost::estimate(ast, &checked.types, &mut sizes).max
}

#[allow(clippy::too_many_arguments)]
fn check_node_rules(
    schema: &Value,
    path: &str,
    root: bool,
    uncorrelatable: Option<&str>,
    cardinality: Option<u64>,
    total: &mut TotalCost,
    errs: &mut Vec<FieldError>,
) {
    use crate::cel::check::{check, Type};
    use crate::cel::cost::{max_cardinality, over_budget, STATIC_LIMIT};
    if let Some(list) = schema.get("x-kubernetes-validations").and_then(Value::as_array) {
        let embedded = root || flag(schema, "x-kubernetes-embedded-resource");
        let self_type = Type::from_schema(schema, embedded, "self").unwrap_or(Type::Dyn);
        let times = cardinality.unwrap_or_else(|| max_cardinality(schema));
        for (i, r) in list.iter().enumerate() {
            let rule = r["rule"].as_str().unwrap_or("");
            let at = format!("{path}.x-kubernetes-validations[{i}]");
            if rule.trim().is_empty() {
                continue;
            }
            let invalid = |field: &str, detail: String| {
                FieldError::invalid_raw(format!("{at}.{field}"), &validation_rule(r), detail)
            };
            if let Some(e) = crate::cel::Expr::compile(rule).compile_error() {
                errs.push(invalid("rule", format!("compilation failed: {e}")));
                continue;
            }
            let old_type = if r["optionalOldSelf"] == true {
                Type::Optional(Box::new(self_type.clone()))
            } else {
                self_type.clone()
            };
            let vars = [("self", self_type.clone()), ("oldSelf", old_type)];
            let checked = match check(rule, &vars) {
                Ok(c) => c,
                Err(e) => {
                    errs.push(invalid("rule", format!("compilation failed: {e}")));
                    continue;
                }
            };
            if !matches!(checked.result, Type::Bool | Type::Dyn | Type::Error | Type::Free) {
                errs.push(invalid(
                    "rule",
                    "cel expression must evaluate to a bool".to_owned(),
                ));
                continue;
            }
            let cost = estimated_cost(&checked, schema, embedded);
            let cost = if cost == 0 { 0 } else { cost.saturating_mul(times) };
            if cost > STATIC_LIMIT {
                errs.push(FieldError::forbidden(
                    format!("{at}.rule"),
                    over_budget("estimated rule cost", cost, STATIC_LIMIT),
                ));
            }
            total.observe(format!("{at}.rule"), cost);
            if let Some(m) = r["messageExpression"].as_str().filter(|m| !m.trim().is_empty()) {
                if let Some(e) = crate::cel::Expr::compile(m).compile_error() {
                    errs.push(invalid(
                        "messageExpression",
                        format!("messageExpression compilation failed: {e}"),
                    ));
                } else {
                    match check(m, &vars) {
                        Err(e) => errs.push(invalid(
                            "messageExpression",
                            format!("messageExpression compilation failed: {e}"),
                        )),
                        Ok(c) if !matches!(c.result, Type::String | Type::Dyn | Type::Error | Type::Free) => {
                            errs.push(invalid(
                                "messageExpression",
                                "messageExpression must evaluate to a string".to_owned(),
                            ))
                        }
                        Ok(c) => {
                            // Upstream counts a message expression once, not per occurrence.
                            let cost = estimated_cost(&c, schema, embedded);
                            if cost > STATIC_LIMIT {
                                errs.push(FieldError::forbidden(
                                    format!("{at}.messageExpression"),
                                    over_budget("estimated messageExpression cost", cost, STATIC_LIMIT),
                                ));
                            }
                            total.observe(format!("{at}.messageExpression"), cost);
                        }
                    }
                }
            }
            if checked.uses_old_self {
                if let Some(within) = uncorrelatable {
                    errs.push(FieldError::invalid(
                        format!("{at}.rule"),
                        rule,
                        format!("oldSelf cannot be used on the uncorrelatable portion of the schema within {within}"),
                    ));
                }
            } else if let Some(b) = r["optionalOldSelf"].as_bool() {
                errs.push(FieldError::invalid_raw(
                    format!("{at}.optionalOldSelf"),
                    &b.to_string(),
                    "may not be set if oldSelf is not used in rule",
                ));
            }
        }
    }
    let child_cardinality = cardinality
        .zip(max_elements_factor(schema))
        .map(|(c, f)| c.saturating_mul(f));
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        let map_type = schema.get("x-kubernetes-map-type").and_then(Value::as_str);
        let correlatable = map_type.is_none_or(|t| t == "granular" || t == "atomic");
        for (k, sub) in props {
            let within = if correlatable {
                uncorrelatable
            } else {
                uncorrelatable.or(Some(path))
            };
            check_node_rules(
                sub,
                &format!("{path}.properties[{k}]"),
                false,
                within,
                child_cardinality,
                total,
                errs,
            );
        }
    }
    if let Some(add) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        check_node_rules(
            add,
            &format!("{path}.additionalProperties"),
            false,
            uncorrelatable,
            child_cardinality,
            total,
            errs,
        );
    }
    if let Some(items) = schema.get("items").filter(|i| i.is_object()) {
        let is_map = schema.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map");
        let within = if is_map {
            uncorrelatable
        } else {
            uncorrelatable.or(Some(path))
        };
        check_node_rules(
            items,
            &format!("{path}.items"),
            false,
            within,
            child_cardinality,
            total,
            errs,
        );
    }
}

/// A rule as upstream shows the invalid value (Go's `%#v` of an `apiextensions.ValidationRule`;
/// a pointer that is set is shown without its address).
fn validation_rule(r: &Value) -> String {
    let q = |k: &str| crate::cel::go_quote(r[k].as_str().unwrap_or(""));
    let reason = match r["reason"].as_str() {
        Some(_) => "(*apiextensions.FieldValueErrorReason)(...)",
        None => "(*apiextensions.FieldValueErrorReason)(nil)",
    };
    let old = match r["optionalOldSelf"].as_bool() {
        Some(_) => "(*bool)(...)",
        None => "(*bool)(nil)",
    };
    format!(
        "apiextensions.ValidationRule{{Rule:{}, Message:{}, MessageExpression:{}, Reason:{reason}, FieldPath:{}, OptionalOldSelf:{old}}}",
        q("rule"),
        q("message"),
        q("messageExpression"),
        q("fieldPath"),
    )
}

/// A CEL rule compiled once per process (the rules are the CRDs' own: few).
fn compiled_rule(rule: &str) -> std::sync::Arc<crate::cel::Expr> {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<crate::cel::Expr>>>> = OnceLock::new();
    let mut cache = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if cache.len() > 4096 {
        cache.clear();
    }
    cache
        .entry(rule.to_owned())
        .or_insert_with(|| Arc::new(crate::cel::Expr::compile(rule)))
        .clone()
}

/// What is left of the cost budget of the validation running on this thread (upstream's
/// `RuntimeCELCostBudget` for one object), `None` once it ran out or a rule went over the
/// per-call limit: no further rule runs then. Validation is synchronous, so a thread-local is
/// the object's own.
mod budget {
    use std::cell::Cell;

    thread_local! {
        static LEFT: Cell<Option<u64>> = const { Cell::new(Some(crate::cel::cost::RUNTIME_BUDGET)) };
    }

    /// A fresh budget for the validation of one object.
    pub(super) fn reset() {
        LEFT.with(|l| l.set(Some(crate::cel::cost::RUNTIME_BUDGET)));
    }

    pub(super) fn left() -> Option<u64> {
        LEFT.with(Cell::get)
    }

    pub(super) fn set(left: Option<u64>) {
        LEFT.with(|l| l.set(left));
    }
}

/// Whether a rule is a transition rule (it compares with the stored value).
fn is_transition(rule: &str) -> bool {
    rule.contains("oldSelf")
}

/// `x-kubernetes-validations` at this node: the rules (`transitions`: only those naming
/// `oldSelf`, with the stored value; else only the others), each failure in upstream's words.
fn rules(
    schema: &Value,
    v: &Value,
    old: Option<&Value>,
    path: &str,
    errs: &mut Vec<FieldError>,
    transitions: bool,
) {
    let Some(list) = schema.get("x-kubernetes-validations").and_then(Value::as_array) else {
        return;
    };
    let kind = schema.get("type").and_then(Value::as_str).unwrap_or("object");
    for r in list {
        let Some(rule) = r["rule"].as_str() else { continue };
        let Some(left) = budget::left() else { return };
        if is_transition(rule) != transitions {
            continue;
        }
        if transitions && old.is_none() && r["optionalOldSelf"] != true {
            continue;
        }
        let mut vars = vec![("self", crate::cel::typed_value(schema, v))];
        if transitions {
            vars.push((
                "oldSelf",
                old.map(|o| crate::cel::typed_value(schema, o))
                    .unwrap_or(crate::cel::Value::Null),
            ));
        }
        let expr = compiled_rule(rule);
        let field = match r["fieldPath"].as_str().filter(|f| !f.is_empty()) {
            Some(f) if path.is_empty() => f.trim_start_matches('.').to_owned(),
            Some(f) => format!("{path}{f}"),
            None if path.is_empty() => "<nil>".to_owned(),
            None => path.to_owned(),
        };
        // The rule's cost is bounded before it runs (`crate::cel::cost`): over the per-call
        // limit, or over what is left of the object's budget, it does not run, and neither
        // does any rule after it.
        let mut left = left;
        if let Err(over) = expr.charge(&vars, &mut left) {
            let shown = r["message"]
                .as_str()
                .map(str::trim)
                .filter(|m| !m.is_empty())
                .unwrap_or(rule.trim());
            let detail = match over {
                crate::cel::OverBudget::CallLimit => format!(
                    "'{over}': no further validation rules will be run due to call cost exceeds limit for rule: {shown}"
                ),
                crate::cel::OverBudget::Budget => over.to_string(),
            };
            errs.push(FieldError {
                reason: "FieldValueInvalid",
                field: if path.is_empty() { "<nil>" } else { path }.to_owned(),
                message: format!("Invalid value: \"{kind}\": {detail}"),
            });
            budget::set(None);
            return;
        }
        budget::set(Some(left));
        let message = match expr.eval_bool(&vars) {
            Ok(true) => continue,
            Ok(false) => r["messageExpression"]
                .as_str()
                .filter(|m| !m.is_empty())
                .map(compiled_rule)
                // A message expression too dear to run leaves the rule's message.
                .filter(|m| {
                    let fits = m.charge(&vars, &mut left).is_ok();
                    budget::set(Some(left));
                    fits
                })
                .and_then(|m| m.eval(&vars).ok())
                .and_then(|m| crate::cel::as_string(&m))
                .filter(|m| !m.trim().is_empty())
                .or_else(|| r["message"].as_str().filter(|m| !m.is_empty()).map(str::to_owned))
                .unwrap_or_else(|| format!("failed rule: {rule}")),
            Err(e) => format!("rule evaluation error: {e}"),
        };
        let reason = match r["reason"].as_str() {
            Some("FieldValueForbidden") => "FieldValueForbidden",
            Some("FieldValueRequired") => "FieldValueRequired",
            Some("FieldValueDuplicate") => "FieldValueDuplicate",
            _ => "FieldValueInvalid",
        };
        let message = match reason {
            "FieldValueForbidden" => format!("Forbidden: {message}"),
            "FieldValueRequired" => format!("Required value: {message}"),
            "FieldValueDuplicate" => format!("Duplicate value: {message}"),
            _ => format!("Invalid value: \"{kind}\": {message}"),
        };
        errs.push(FieldError {
            reason,
            field,
            message,
        });
    }
}

/// The transition rules of an update: the rules naming `oldSelf`, evaluated where the new
/// and the stored object both have a value (object properties by name, map-keyed list items
/// by key).
pub(crate) fn validate_transitions(schema: &Value, obj: &Value, old: &Value) -> Vec<FieldError> {
    budget::reset();
    let mut errs = Vec::new();
    transitions(schema, obj, Some(old), "", &mut errs);
    errs
}

fn transitions(schema: &Value, v: &Value, old: Option<&Value>, path: &str, errs: &mut Vec<FieldError>) {
    if !path.is_empty() {
        rules(schema, v, old, path, errs, true);
    }
    match v {
        Value::Object(o) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let add = schema.get("additionalProperties").filter(|a| a.is_object());
            for (k, child) in o {
                if path.is_empty() && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                let Some(sub) = props.and_then(|p| p.get(k)).or(add) else {
                    continue;
                };
                let old_child = old.and_then(|o| o.get(k));
                transitions(sub, child, old_child, &join(path, k), errs);
            }
        }
        Value::Array(items) => {
            let Some(item_schema) = schema.get("items").filter(|i| i.is_object()) else {
                return;
            };
            let keys: Vec<&str> = schema
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let is_map = schema.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map");
            for (i, item) in items.iter().enumerate() {
                let old_item = if is_map {
                    old.and_then(Value::as_array).and_then(|olds| {
                        olds.iter()
                            .find(|o| keys.iter().all(|k| o.get(*k) == item.get(*k)))
                    })
                } else {
                    None
                };
                transitions(item_schema, item, old_item, &format!("{path}[{i}]"), errs);
            }
        }
        _ => {}
    }
}

/// `enum`: the value must be one of the listed (each shown quoted, as upstream lists them).
fn enum_check(schema: &Value, v: &Value, path: &str, errs: &mut Vec<FieldError>) {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        if !values.contains(v) {
            let list: Vec<String> = values
                .iter()
                .map(|e| {
                    let text = match e {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    serde_json::to_string(&text).unwrap_or_default()
                })
                .collect();
            errs.push(FieldError {
                reason: "FieldValueNotSupported",
                field: path.to_owned(),
                message: format!(
                    "Unsupported value: {}: supported values: {}",
                    shown(v),
                    list.join(", ")
                ),
            });
        }
    }
}

/// allOf, anyOf, oneOf and not.
fn combinators(schema: &Value, v: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let nil = |detail: String| FieldError {
        reason: "FieldValueInvalid",
        field: "<nil>".to_owned(),
        message: format!("Invalid value: \"\": \"{path}\" {detail}"),
    };
    for combinator in ["allOf", "anyOf", "oneOf"] {
        let Some(subs) = schema.get(combinator).and_then(Value::as_array) else {
            continue;
        };
        let results: Vec<Vec<FieldError>> = subs
            .iter()
            .map(|s| {
                let mut e = Vec::new();
                check(s, v, path, &mut e);
                e
            })
            .collect();
        let passing = results.iter().filter(|e| e.is_empty()).count();
        match combinator {
            "allOf" => errs.extend(results.into_iter().flatten()),
            "anyOf" if passing == 0 => {
                errs.push(nil("must validate at least one schema (anyOf)".to_owned()));
                errs.extend(results.into_iter().flatten());
            }
            "oneOf" if passing != 1 => {
                errs.push(nil("must validate one and only one schema (oneOf)".to_owned()));
                if passing == 0 {
                    errs.extend(results.into_iter().flatten());
                }
            }
            _ => {}
        }
    }
    if let Some(not) = schema.get("not").filter(|n| n.is_object()) {
        let mut e = Vec::new();
        check(not, v, path, &mut e);
        if e.is_empty() {
            errs.push(nil("must not validate the schema (not)".to_owned()));
        }
    }
}

fn required(schema: &Value, o: &Map<String, Value>, path: &str, errs: &mut Vec<FieldError>) {
    for r in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !o.contains_key(r) {
            errs.push(FieldError::required(join(path, r), ""));
        }
    }
}

/// `field.TooMany` as kube-openapi's maxItems and maxProperties report it (both say "items").
fn too_many(field: &str, n: u64, max: u64) -> FieldError {
    FieldError {
        reason: "FieldValueTooMany",
        field: field.to_owned(),
        message: format!("Too many: {n}: must have at most {max} items"),
    }
}

fn object_bounds(schema: &Value, o: &Map<String, Value>, path: &str, errs: &mut Vec<FieldError>) {
    let n = o.len() as u64;
    let field = if path.is_empty() { "<nil>" } else { path };
    if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64) {
        if n > max {
            errs.push(too_many(field, n, max));
        }
    }
    if let Some(min) = schema.get("minProperties").and_then(Value::as_u64) {
        if n < min {
            errs.push(FieldError {
                reason: "FieldValueInvalid",
                field: field.to_owned(),
                message: format!("Invalid value: {n}: {field} in body should have at least {min} properties"),
            });
        }
    }
}

fn check_string(schema: &Value, s: &str, v: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let len = s.chars().count() as u64;
    // kube-openapi's string validator stops at its first failure.
    let max = schema.get("maxLength").and_then(Value::as_u64);
    let min = schema.get("minLength").and_then(Value::as_u64);
    let pattern = schema.get("pattern").and_then(Value::as_str);
    if let Some(max) = max.filter(|m| len > *m) {
        errs.push(FieldError {
            reason: "FieldValueTooLong",
            field: path.to_owned(),
            message: format!("Too long: may not be more than {max} bytes"),
        });
    } else if let Some(min) = min.filter(|m| len < *m) {
        errs.push(invalid(
            path,
            v,
            format!("{path} in body should be at least {min} chars long"),
        ));
    } else if let Some(p) = pattern.filter(|p| compiled(p).is_some_and(|re| !re.is_match(s))) {
        errs.push(invalid(path, v, format!("{path} in body should match '{p}'")));
    }
    if let Some(f) = schema.get("format").and_then(Value::as_str) {
        if !format_ok(f, s) {
            errs.push(FieldError {
                reason: "FieldValueTypeInvalid",
                field: path.to_owned(),
                message: format!(
                    "Invalid value: {}: {path} in body must be of type {f}: {}",
                    shown(v),
                    shown(v)
                ),
            });
        }
    }
}

/// A schema's pattern, compiled once per process (the patterns are the CRDs' own: few).
fn compiled(pattern: &str) -> Option<regex::Regex> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<HashMap<String, Option<regex::Regex>>>> = OnceLock::new();
    let mut cache = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if cache.len() > 4096 {
        cache.clear();
    }
    cache
        .entry(pattern.to_owned())
        .or_insert_with(|| regex::Regex::new(pattern).ok())
        .clone()
}

/// The string formats upstream checks (kube-openapi's `strfmt` registry, as CRDs use it);
/// formats it does not know pass.
fn format_ok(format: &str, s: &str) -> bool {
    match format {
        "byte" => base64_ok(s),
        "date-time" | "datetime" => chrono_like_datetime(s),
        "date" => {
            s.len() == 10
                && s.as_bytes()[4] == b'-'
                && s.as_bytes()[7] == b'-'
                && chrono_like_datetime(&format!("{s}T00:00:00Z"))
        }
        "uuid" => {
            let parts: Vec<&str> = s.split('-').collect();
            parts.len() == 5
                && parts.iter().map(|p| p.len()).eq([8, 4, 4, 4, 12])
                && parts.iter().all(|p| p.chars().all(|c| c.is_ascii_hexdigit()))
        }
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "cidr" => s
            .split_once('/')
            .is_some_and(|(a, m)| a.parse::<std::net::IpAddr>().is_ok() && m.parse::<u8>().is_ok()),
        "hostname" => !s.is_empty() && r8s_api::validation::dns1123_subdomain(&s.to_lowercase()).is_empty(),
        "email" => s
            .split_once('@')
            .is_some_and(|(a, b)| !a.is_empty() && b.contains('.')),
        _ => true,
    }
}

fn base64_ok(s: &str) -> bool {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(s).is_ok()
}

/// RFC 3339 date-time (with or without fractional seconds).
fn chrono_like_datetime(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() < 20 {
        return false;
    }
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && matches!(b[10], b'T' | b't' | b' ')
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
}

fn check_number(schema: &Value, n: f64, v: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let excl_max = flag(schema, "exclusiveMaximum");
    let excl_min = flag(schema, "exclusiveMinimum");
    // Bounds print as Go prints them: truncated to an integer against an integer value,
    // else in the shortest form (10, not 10.0).
    let int_value = type_name(v) == "integer";
    let num = |x: &Value| {
        let f = x.as_f64().unwrap_or(0.0);
        if int_value || (f.fract() == 0.0 && f.abs() < 1e21) {
            (f.trunc() as i64).to_string()
        } else {
            f.to_string()
        }
    };
    if let Some(max) = schema.get("maximum").filter(|m| m.is_number()) {
        let m = max.as_f64().unwrap_or(f64::MAX);
        if n > m || (excl_max && n == m) {
            let words = if excl_max {
                "less than"
            } else {
                "less than or equal to"
            };
            errs.push(invalid(
                path,
                v,
                format!("{path} in body should be {words} {}", num(max)),
            ));
        }
    }
    if let Some(min) = schema.get("minimum").filter(|m| m.is_number()) {
        let m = min.as_f64().unwrap_or(f64::MIN);
        if n < m || (excl_min && n == m) {
            let words = if excl_min {
                "greater than"
            } else {
                "greater than or equal to"
            };
            errs.push(invalid(
                path,
                v,
                format!("{path} in body should be {words} {}", num(min)),
            ));
        }
    }
    if let Some(mult) = schema.get("multipleOf").and_then(Value::as_f64) {
        if mult > 0.0 && (n / mult).fract() != 0.0 {
            errs.push(invalid(
                path,
                v,
                format!("{path} in body should be a multiple of {}", schema["multipleOf"]),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["size"], "properties": {
                "size": {"type": "integer", "minimum": 1, "maximum": 10},
                "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5},
                "tags": {"type": "array", "maxItems": 2, "items": {"type": "string"}},
                "port": {"x-kubernetes-int-or-string": true},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "opt": {"type": "string", "nullable": true},
            }},
            "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
        }})
    }

    fn messages(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn unknown_fields_are_pruned_and_reported_where_the_schema_does_not_keep_them() {
        let mut obj = json!({"apiVersion": "example.com/v1", "kind": "W",
            "metadata": {"name": "w", "bogus": 1},
            "spec": {"size": 1, "nope": true, "extra": {"anything": [1]}, "labels": {"a": "b"}},
            "other": 1});
        let mut unknown = Vec::new();
        prune(&schema(), &mut obj, &mut unknown);
        assert_eq!(unknown, ["metadata.bogus", "other", "spec.nope"]);
        assert_eq!(obj["spec"]["extra"], json!({"anything": [1]}));
        assert_eq!(obj["spec"]["labels"], json!({"a": "b"}));
        assert_eq!(obj["metadata"], json!({"name": "w"}));
        assert_eq!(obj["apiVersion"], "example.com/v1");
    }

    #[test]
    fn defaults_fill_absent_fields() {
        let mut obj = json!({"spec": {"size": 2}});
        default(&schema(), &mut obj);
        assert_eq!(obj["spec"]["color"], "red");
        let mut obj = json!({"spec": {"size": 2, "color": "blue"}});
        default(&schema(), &mut obj);
        assert_eq!(obj["spec"]["color"], "blue");
    }

    #[test]
    fn cel_rules_and_transition_rules_are_enforced() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": [
                {"rule": "self.min <= self.max", "message": "min must not exceed max"},
                {"rule": "self.mode == oldSelf.mode", "message": "mode is immutable"},
                {"rule": "self.max < 100", "messageExpression": "'max is ' + string(self.max)", "fieldPath": ".max"}],
            "properties": {"min": {"type": "integer"}, "max": {"type": "integer"}, "mode": {"type": "string",
                "x-kubernetes-validations": [{"rule": "self in ['a', 'b']"}]}}}}});
        let ok = json!({"spec": {"min": 1, "max": 2, "mode": "a"}});
        assert!(validate(&schema, &ok).is_empty());
        let m = messages(&validate(
            &schema,
            &json!({"spec": {"min": 300, "max": 200, "mode": "c"}}),
        ));
        assert_eq!(
            m,
            [
                "spec: Invalid value: \"object\": min must not exceed max",
                "spec.max: Invalid value: \"object\": max is 200",
                "spec.mode: Invalid value: \"string\": failed rule: self in ['a', 'b']",
            ]
        );
        // Transition rules only on update, against the stored value.
        let changed = json!({"spec": {"min": 1, "max": 2, "mode": "b"}});
        assert!(validate(&schema, &changed).is_empty());
        let m = messages(&validate_transitions(&schema, &changed, &ok));
        assert_eq!(m, ["spec: Invalid value: \"object\": mode is immutable"]);
        assert!(validate_transitions(&schema, &ok, &ok).is_empty());
    }

    /// Upstream refuses a CRD whose rules do not type-check against their schema.
    #[test]
    fn rules_must_type_check_against_their_schema() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": [
                {"rule": "self.foo > 0"},
                {"rule": "self.replicas", "message": "m"},
                {"rule": "self.replicas > 0", "messageExpression": "self.replicas"},
                {"rule": "self.replicas > 0", "optionalOldSelf": true},
                {"rule": "self.replicas >= oldSelf.replicas && self.items.all(i, i.size() > 0)"}],
            "properties": {"replicas": {"type": "integer"},
                "items": {"type": "array", "maxItems": 10, "items": {"type": "string", "maxLength": 10,
                    "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}}}}}});
        let errs = check_rules(&schema, "spec.versions[0].schema.openAPIV3Schema");
        let at = "spec.versions[0].schema.openAPIV3Schema.properties[spec]";
        let rule = |r: &str, m: &str, me: &str, old: &str| {
            format!("apiextensions.ValidationRule{{Rule:\"{r}\", Message:\"{m}\", MessageExpression:\"{me}\", Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:\"\", OptionalOldSelf:{old}}}")
        };
        assert_eq!(
            messages(&errs),
            [
                format!("{at}.x-kubernetes-validations[0].rule: Invalid value: {}: compilation failed: ERROR: <input>:1:5: undefined field 'foo'\n | self.foo > 0\n | ....^", rule("self.foo > 0", "", "", "(*bool)(nil)")),
                format!("{at}.x-kubernetes-validations[1].rule: Invalid value: {}: cel expression must evaluate to a bool", rule("self.replicas", "m", "", "(*bool)(nil)")),
                format!("{at}.x-kubernetes-validations[2].messageExpression: Invalid value: {}: messageExpression must evaluate to a string", rule("self.replicas > 0", "", "self.replicas", "(*bool)(nil)")),
                format!("{at}.x-kubernetes-validations[3].optionalOldSelf: Invalid value: true: may not be set if oldSelf is not used in rule"),
                format!("{at}.properties[items].items.x-kubernetes-validations[0].rule: Invalid value: \"self == oldSelf\": oldSelf cannot be used on the uncorrelatable portion of the schema within {at}.properties[items]"),
            ]
        );
    }

    /// A schema that is not structural is refused in upstream's words.
    #[test]
    fn schemas_must_be_structural() {
        let at = "spec.versions[0].schema.openAPIV3Schema";
        let good = json!({"type": "object", "properties": {
            "metadata": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}}},
            "spec": {"type": "object", "properties": {
                "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                "free": {"x-kubernetes-preserve-unknown-fields": true},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "either": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                    "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
                "tags": {"type": "array", "items": {"type": "string"}}}}}});
        assert_eq!(messages(&check_structural(&good, at)), Vec::<String>::new());
        let bad = json!({"type": "object", "additionalProperties": {"type": "string"}, "properties": {
            "metadata": {"type": "object", "properties": {"labels": {"type": "object"}}},
            "spec": {"properties": {
                "a": {"type": "string"},
                "b": {"type": "object", "properties": {"x": {"type": "string"}}, "additionalProperties": {"type": "string"}},
                "c": {"type": "array"},
                "d": {"type": "object", "anyOf": [{"type": "string", "description": "no"}]}}}}});
        assert_eq!(
            messages(&check_structural(&bad, at)),
            [
                format!("{at}.additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive"),
                format!("{at}.additionalProperties: Forbidden: must not be used at the root"),
                format!("{at}.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified"),
                format!("{at}.properties[spec].properties[b].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive"),
                format!("{at}.properties[spec].properties[c].items: Required value: must be specified"),
                format!("{at}.properties[spec].properties[d].anyOf[0].description: Forbidden: must be empty to be structural"),
                format!("{at}.properties[spec].properties[d].anyOf[0].type: Forbidden: must be empty to be structural"),
                format!("{at}.properties[spec].type: Required value: must not be empty for specified object fields"),
            ]
        );
    }

    /// The two cost specs of upstream's e2e suite (`crd_validation_rules.go`).
    #[test]
    fn rules_are_held_to_upstreams_cost_limits() {
        // Estimated: a rule on each of an unbounded list of unbounded lists of strings.
        let expensive = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"x": {"type": "array", "items": {"type": "array",
                "items": {"type": "string"},
                "x-kubernetes-validations": [{"rule": "self.all(s, s == 'string constant')"}]}}}}}});
        let at = "spec.versions[0].schema.openAPIV3Schema";
        let m = messages(&check_rules(&expensive, at));
        let budget = "(try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)";
        let rule_at = format!("{at}.properties[spec].properties[x].items.x-kubernetes-validations[0].rule");
        assert_eq!(
            m,
            [
                format!("{rule_at}: Forbidden: estimated rule cost exceeds budget by factor of more than 100x {budget}"),
                format!("{rule_at}: Forbidden: contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema"),
                format!("{at}: Forbidden: x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of more than 100x {budget}"),
            ]
        );
        // Bounded by maxItems and maxLength, the same rule is accepted.
        let mut bounded = expensive.clone();
        bounded["properties"]["spec"]["properties"]["x"]["maxItems"] = json!(10);
        bounded["properties"]["spec"]["properties"]["x"]["items"]["maxItems"] = json!(10);
        bounded["properties"]["spec"]["properties"]["x"]["items"]["items"]["maxLength"] = json!(20);
        assert_eq!(messages(&check_rules(&bounded, at)), Vec::<String>::new());

        // At run time: accepted when written, refused on an object large enough.
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": [
                {"rule": "self.x + self.y > 0"},
                {"rule": "self.largeArray.all(x, self.largeArray.all(y, y == x))"}],
            "properties": {"x": {"type": "integer"}, "y": {"type": "integer"},
                "largeArray": {"type": "array", "maxItems": 725, "items": {"type": "integer"}}}}}});
        assert_eq!(messages(&check_rules(&schema, at)), Vec::<String>::new());
        let obj = |n: usize| json!({"spec": {"x": 1, "y": 1, "largeArray": vec![20; n]}});
        assert_eq!(messages(&validate(&schema, &obj(10))), Vec::<String>::new());
        assert_eq!(
            messages(&validate(&schema, &obj(725))),
            ["spec: Invalid value: \"object\": 'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: self.largeArray.all(x, self.largeArray.all(y, y == x))"]
        );
        // The object's budget is shared: many cheap-enough rules run out of it.
        let many: Vec<Value> = (0..12)
            .map(|i| json!({"rule": format!("self.l.all(x, x != {i})")}))
            .collect();
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": many,
            "properties": {"l": {"type": "array", "maxItems": 200000, "items": {"type": "integer"}}}}}});
        let big = json!({"spec": {"l": vec![100; 180_000]}});
        let m = messages(&validate(&schema, &big));
        assert_eq!(
            m,
            ["spec: Invalid value: \"object\": validation failed due to running out of cost budget, no further validation rules will be run"]
        );
    }

    #[test]
    fn values_are_checked_with_upstreams_words() {
        let obj = json!({"spec": {"size": "big", "color": "green", "name": "ABCDEFG",
            "tags": ["a", "b", "c"], "port": true, "opt": null}});
        let m = messages(&validate(&schema(), &obj));
        assert!(
            m.contains(
                &r#"spec.size: Invalid value: "string": spec.size in body must be of type integer: "string""#
                    .to_owned()
            ),
            "{m:?}"
        );
        assert!(
            m.contains(
                &r#"spec.color: Unsupported value: "green": supported values: "red", "blue""#.to_owned()
            ),
            "{m:?}"
        );
        assert!(
            m.contains(&r#"spec.name: Too long: may not be more than 5 bytes"#.to_owned()),
            "{m:?}"
        );
        // A string gets its first failure only (kube-openapi's order: length, then pattern).
        assert!(!m.iter().any(|e| e.contains("should match")), "{m:?}");
        assert!(
            m.contains(&"spec.tags: Too many: 3: must have at most 2 items".to_owned()),
            "{m:?}"
        );
        assert!(m.contains(&r#"spec.port: Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean""#.to_owned()), "{m:?}");
        assert!(!m.iter().any(|e| e.starts_with("spec.opt")), "{m:?}");
        let m = messages(&validate(&schema(), &json!({"spec": {"size": 1, "name": "AB"}})));
        assert_eq!(
            m,
            [r#"spec.name: Invalid value: "AB": spec.name in body should match '^[a-z]+$'"#]
        );
        let m = messages(&validate(&schema(), &json!({"spec": {"size": 11}})));
        assert_eq!(
            m,
            ["spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10"]
        );
        let m = messages(&validate(&schema(), &json!({"spec": {}})));
        assert_eq!(m, ["spec.size: Required value"]);
        assert!(validate(
            &schema(),
            &json!({"spec": {"size": 3, "port": "http", "tags": []}})
        )
        .is_empty());
    }
}
