//! The strategy of `admissionregistration.k8s.io/v1` MutatingWebhookConfigurations and
//! ValidatingWebhookConfigurations: upstream's defaults (`SetDefaults_*Webhook`) and validation
//! (`ValidateMutatingWebhookConfiguration` and its validating twin), in upstream's words.

use r8s_api::validation::{dns1123_subdomain, label_value, qualified_name, FieldError};
use serde_json::{json, Value};

use super::strategy::{age_cell, col, name_cell, Column, Strategy, AGE, NAME};

fn missing(v: &Value, key: &str) -> bool {
    v.get(key).is_none_or(Value::is_null)
}

/// Upstream's defaults for every webhook of a configuration.
pub(crate) fn default(obj: &mut Value, mutating: bool) {
    let Some(hooks) = obj.get_mut("webhooks").and_then(Value::as_array_mut) else {
        return;
    };
    for h in hooks.iter_mut().filter(|h| h.is_object()) {
        if missing(h, "failurePolicy") {
            h["failurePolicy"] = json!("Fail");
        }
        if missing(h, "matchPolicy") {
            h["matchPolicy"] = json!("Equivalent");
        }
        if missing(h, "namespaceSelector") {
            h["namespaceSelector"] = json!({});
        }
        if missing(h, "objectSelector") {
            h["objectSelector"] = json!({});
        }
        if missing(h, "timeoutSeconds") {
            h["timeoutSeconds"] = json!(10);
        }
        if mutating && missing(h, "reinvocationPolicy") {
            h["reinvocationPolicy"] = json!("Never");
        }
        if let Some(rules) = h.get_mut("rules").and_then(Value::as_array_mut) {
            for r in rules.iter_mut().filter(|r| r.is_object()) {
                if missing(r, "scope") {
                    r["scope"] = json!("*");
                }
            }
        }
        let service = &mut h["clientConfig"]["service"];
        if service.is_object() && missing(service, "port") {
            service["port"] = json!(443);
        }
    }
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|s| s.as_str().unwrap_or(""))
        .collect()
}

/// Go's `%v` of a string slice, as upstream shows invalid lists.
fn go_list(items: &[&str]) -> String {
    format!(
        "[]string{{{}}}",
        items
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn forbidden(field: impl Into<String>, detail: &str) -> FieldError {
    FieldError {
        reason: "FieldValueForbidden",
        field: field.into(),
        message: format!("Forbidden: {detail}"),
    }
}

fn duplicate(field: impl Into<String>, value: &str) -> FieldError {
    FieldError {
        reason: "FieldValueDuplicate",
        field: field.into(),
        message: format!("Duplicate value: {value:?}"),
    }
}

/// Upstream's `ValidateLabelSelector`.
pub(crate) fn validate_label_selector(errs: &mut Vec<FieldError>, path: &str, sel: &Value) {
    if let Some(m) = sel["matchLabels"].as_object() {
        for (k, v) in m {
            for e in qualified_name(k) {
                errs.push(FieldError::invalid(format!("{path}.matchLabels"), k, e));
            }
            for e in label_value(v.as_str().unwrap_or("")) {
                errs.push(FieldError::invalid(
                    format!("{path}.matchLabels"),
                    v.as_str().unwrap_or(""),
                    e,
                ));
            }
        }
    }
    for (i, e) in sel["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let p = format!("{path}.matchExpressions[{i}]");
        let values = strings(&e["values"]);
        match e["operator"].as_str().unwrap_or("") {
            "In" | "NotIn" => {
                if values.is_empty() {
                    errs.push(FieldError::required(
                        format!("{p}.values"),
                        "must be specified when `operator` is 'In' or 'NotIn'",
                    ));
                }
            }
            "Exists" | "DoesNotExist" => {
                if !values.is_empty() {
                    errs.push(forbidden(
                        format!("{p}.values"),
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    ));
                }
            }
            other => errs.push(FieldError::invalid(
                format!("{p}.operator"),
                other,
                "not a valid selector operator",
            )),
        }
        let key = e["key"].as_str().unwrap_or("");
        for msg in qualified_name(key) {
            errs.push(FieldError::invalid(format!("{p}.key"), key, msg));
        }
        for v in values {
            for msg in label_value(v) {
                errs.push(FieldError::invalid(format!("{p}.values"), v, msg));
            }
        }
    }
}

/// Upstream's `validateResources` (subresources allowed).
fn validate_resources(errs: &mut Vec<FieldError>, path: &str, resources: &[&str]) {
    if resources.is_empty() {
        errs.push(FieldError::required(path, ""));
    }
    let mut with_wildcard_sub: Vec<&str> = Vec::new();
    let mut sub_with_wildcard_res: Vec<&str> = Vec::new();
    let (mut double, mut single, mut plain) = (false, false, false);
    for (i, res_sub) in resources.iter().enumerate() {
        if res_sub.is_empty() {
            errs.push(FieldError::required(format!("{path}[{i}]"), ""));
            continue;
        }
        double |= *res_sub == "*/*";
        single |= *res_sub == "*";
        let Some((res, sub)) = res_sub.split_once('/') else {
            plain = *res_sub != "*";
            continue;
        };
        if with_wildcard_sub.contains(&res) {
            errs.push(FieldError::invalid(
                format!("{path}[{i}]"),
                res_sub,
                format!("if '{res}/*' is present, must not specify {res_sub}"),
            ));
        }
        if sub_with_wildcard_res.contains(&sub) {
            errs.push(FieldError::invalid(
                format!("{path}[{i}]"),
                res_sub,
                format!("if '*/{sub}' is present, must not specify {res_sub}"),
            ));
        }
        if sub == "*" {
            with_wildcard_sub.push(res);
        }
        if res == "*" {
            sub_with_wildcard_res.push(sub);
        }
    }
    if resources.len() > 1 && double {
        errs.push(FieldError::invalid_raw(
            path,
            &go_list(resources),
            "if '*/*' is present, must not specify other resources",
        ));
    }
    if single && plain {
        errs.push(FieldError::invalid_raw(
            path,
            &go_list(resources),
            "if '*' is present, must not specify other resources without subresources",
        ));
    }
}

const OPERATIONS: &[&str] = &["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];

/// Upstream's `validateRuleWithOperations`.
fn validate_rule(errs: &mut Vec<FieldError>, path: &str, rule: &Value) {
    let ops = strings(&rule["operations"]);
    if ops.is_empty() {
        errs.push(FieldError::required(format!("{path}.operations"), ""));
    }
    if ops.len() > 1 && ops.contains(&"*") {
        errs.push(FieldError::invalid_raw(
            format!("{path}.operations"),
            &format!(
                "[]v1.OperationType{{{}}}",
                ops.iter()
                    .map(|s| format!("{s:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "if '*' is present, must not specify other operations",
        ));
    }
    for (i, op) in ops.iter().enumerate() {
        if !OPERATIONS.contains(op) {
            errs.push(FieldError::not_supported(
                format!("{path}.operations[{i}]"),
                op,
                OPERATIONS,
            ));
        }
    }
    let groups = strings(&rule["apiGroups"]);
    if groups.is_empty() {
        errs.push(FieldError::required(format!("{path}.apiGroups"), ""));
    }
    if groups.len() > 1 && groups.contains(&"*") {
        errs.push(FieldError::invalid_raw(
            format!("{path}.apiGroups"),
            &go_list(&groups),
            "if '*' is present, must not specify other API groups",
        ));
    }
    let versions = strings(&rule["apiVersions"]);
    if versions.is_empty() {
        errs.push(FieldError::required(format!("{path}.apiVersions"), ""));
    }
    if versions.len() > 1 && versions.contains(&"*") {
        errs.push(FieldError::invalid_raw(
            format!("{path}.apiVersions"),
            &go_list(&versions),
            "if '*' is present, must not specify other API versions",
        ));
    }
    for (i, v) in versions.iter().enumerate() {
        if v.is_empty() {
            errs.push(FieldError::required(format!("{path}.apiVersions[{i}]"), ""));
        }
    }
    validate_resources(errs, &format!("{path}.resources"), &strings(&rule["resources"]));
    if let Some(scope) = rule["scope"].as_str() {
        if !["*", "Cluster", "Namespaced"].contains(&scope) {
            errs.push(FieldError::not_supported(
                format!("{path}.scope"),
                scope,
                &["*", "Cluster", "Namespaced"],
            ));
        }
    }
}

/// Upstream's `ValidateWebhookURL` with https forced.
fn validate_url(errs: &mut Vec<FieldError>, path: &str, url: &str) {
    const FORM: &str = "; desired format: https://host[/path]";
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    if scheme != "https" {
        errs.push(FieldError::invalid(
            path,
            scheme,
            format!("'https' is the only allowed URL scheme{FORM}"),
        ));
    }
    let (before_fragment, fragment) = rest.split_once('#').unwrap_or((rest, ""));
    let (before_query, query) = before_fragment.split_once('?').unwrap_or((before_fragment, ""));
    let authority = if scheme.is_empty() {
        ""
    } else {
        before_query.split('/').next().unwrap_or("")
    };
    let (user, host) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    if host.is_empty() {
        errs.push(FieldError::invalid(
            path,
            host,
            format!("host must be provided{FORM}"),
        ));
    }
    if let Some(u) = user {
        errs.push(FieldError::invalid(
            path,
            u,
            "user information is not permitted in the URL",
        ));
    }
    if !fragment.is_empty() {
        errs.push(FieldError::invalid(
            path,
            fragment,
            "fragments are not permitted in the URL",
        ));
    }
    if !query.is_empty() {
        errs.push(FieldError::invalid(
            path,
            query,
            "query parameters are not permitted in the URL",
        ));
    }
}

/// Upstream's `ValidateWebhookService`.
fn validate_service(errs: &mut Vec<FieldError>, path: &str, svc: &Value) {
    if svc["name"].as_str().is_none_or(str::is_empty) {
        errs.push(FieldError::required(
            format!("{path}.name"),
            "service name is required",
        ));
    }
    if svc["namespace"].as_str().is_none_or(str::is_empty) {
        errs.push(FieldError::required(
            format!("{path}.namespace"),
            "service namespace is required",
        ));
    }
    if let Some(port) = svc["port"].as_i64() {
        if !(1..=65535).contains(&port) {
            errs.push(FieldError::invalid_raw(
                format!("{path}.port"),
                &port.to_string(),
                "port is not valid: must be between 1 and 65535, inclusive",
            ));
        }
    }
    let Some(p) = svc["path"].as_str() else {
        return;
    };
    if p.is_empty() || p == "/" {
        return;
    }
    if !p.starts_with('/') {
        errs.push(FieldError::invalid(
            format!("{path}.path"),
            p,
            "must start with a '/'",
        ));
    }
    let segments: Vec<&str> = p.trim_start_matches('/').split('/').collect();
    for (i, seg) in segments.iter().enumerate() {
        if seg.is_empty() && i + 1 < segments.len() {
            errs.push(FieldError::invalid(
                format!("{path}.path"),
                p,
                format!("segment[{i}] may not be empty"),
            ));
        } else if !seg.is_empty() && !dns1123_subdomain(seg).is_empty() {
            errs.push(FieldError::invalid(
                format!("{path}.path"),
                p,
                format!("segment[{i}]: {}", dns1123_subdomain(seg).join(", ")),
            ));
        }
    }
}

fn validate_review_versions(errs: &mut Vec<FieldError>, path: &str, versions: &[&str]) {
    const ACCEPTED: &[&str] = &["v1", "v1beta1"];
    if versions.is_empty() {
        errs.push(FieldError::required(
            path,
            &format!("must specify one of {}", ACCEPTED.join(", ")),
        ));
        return;
    }
    let mut seen = Vec::new();
    for (i, v) in versions.iter().enumerate() {
        if seen.contains(v) {
            errs.push(FieldError::invalid(
                format!("{path}[{i}]"),
                v,
                "duplicate version",
            ));
            continue;
        }
        seen.push(*v);
        // Upstream checks each version as a DNS-1035 label, and only so.
        for e in r8s_api::validation::dns1035_label(v) {
            errs.push(FieldError::invalid(format!("{path}[{i}]"), v, e));
        }
    }
    if !versions.iter().any(|v| ACCEPTED.contains(v)) {
        errs.push(FieldError::invalid_raw(
            path,
            &go_list(versions),
            format!("must include at least one of {}", ACCEPTED.join(", ")),
        ));
    }
}

/// Upstream's validation of one webhook of a configuration (create rules: side effects must be
/// None or NoneOnDryRun).
fn validate_webhook(errs: &mut Vec<FieldError>, path: &str, h: &Value, mutating: bool) {
    let name = h["name"].as_str().unwrap_or("");
    if name.is_empty() {
        errs.push(FieldError::required(format!("{path}.name"), ""));
    } else if !dns1123_subdomain(name).is_empty() {
        errs.push(FieldError::invalid(
            format!("{path}.name"),
            name,
            dns1123_subdomain(name).join(","),
        ));
    } else if name.split('.').count() < 3 {
        errs.push(FieldError::invalid(
            format!("{path}.name"),
            name,
            "should be a domain with at least three segments separated by dots",
        ));
    }
    for (i, r) in h["rules"].as_array().into_iter().flatten().enumerate() {
        validate_rule(errs, &format!("{path}.rules[{i}]"), r);
    }
    let one_of = |errs: &mut Vec<FieldError>, field: &str, allowed: &[&str]| {
        if let Some(v) = h[field].as_str() {
            if !allowed.contains(&v) {
                errs.push(FieldError::not_supported(format!("{path}.{field}"), v, allowed));
            }
        }
    };
    one_of(errs, "failurePolicy", &["Fail", "Ignore"]);
    one_of(errs, "matchPolicy", &["Equivalent", "Exact"]);
    const NO_SIDE_EFFECTS: &[&str] = &["None", "NoneOnDryRun"];
    match h["sideEffects"].as_str() {
        None => errs.push(FieldError::required(
            format!("{path}.sideEffects"),
            &format!("must specify one of {}", NO_SIDE_EFFECTS.join(", ")),
        )),
        Some(s) if !NO_SIDE_EFFECTS.contains(&s) => errs.push(FieldError::not_supported(
            format!("{path}.sideEffects"),
            s,
            NO_SIDE_EFFECTS,
        )),
        Some(_) => {}
    }
    if let Some(t) = h["timeoutSeconds"].as_i64() {
        if !(1..=30).contains(&t) {
            errs.push(FieldError::invalid_raw(
                format!("{path}.timeoutSeconds"),
                &t.to_string(),
                "the timeout value must be between 1 and 30 seconds",
            ));
        }
    }
    for sel in ["namespaceSelector", "objectSelector"] {
        if h[sel].is_object() {
            validate_label_selector(errs, &format!("{path}.{sel}"), &h[sel]);
        }
    }
    if mutating {
        one_of(errs, "reinvocationPolicy", &["IfNeeded", "Never"]);
    }
    let cc = &h["clientConfig"];
    match (cc["url"].as_str(), cc["service"].is_object()) {
        (Some(url), false) => validate_url(errs, &format!("{path}.clientConfig.url"), url),
        (None, true) => validate_service(errs, &format!("{path}.clientConfig.service"), &cc["service"]),
        _ => errs.push(FieldError::required(
            format!("{path}.clientConfig"),
            "exactly one of url or service is required",
        )),
    }
}

/// Upstream's `ValidateMutatingWebhookConfiguration` / `ValidateValidatingWebhookConfiguration`
/// (the metadata is checked by the caller).
pub(crate) fn validate(errs: &mut Vec<FieldError>, obj: &Value, mutating: bool) {
    let mut names: Vec<&str> = Vec::new();
    for (i, h) in obj["webhooks"].as_array().into_iter().flatten().enumerate() {
        let path = format!("webhooks[{i}]");
        validate_webhook(errs, &path, h, mutating);
        super::admission_policies::check_match_conditions(
            errs,
            &h["matchConditions"],
            &format!("{path}.matchConditions"),
        );
        validate_review_versions(
            errs,
            &format!("{path}.admissionReviewVersions"),
            &strings(&h["admissionReviewVersions"]),
        );
        let name = h["name"].as_str().unwrap_or("");
        if !name.is_empty() {
            if names.contains(&name) {
                errs.push(duplicate(format!("{path}.name"), name));
            } else {
                names.push(name);
            }
        }
    }
}

/// Mutating (`mutating: true`) or validating webhook configurations.
pub(crate) struct WebhookConfigurations {
    pub mutating: bool,
}

impl Strategy for WebhookConfigurations {
    fn default(&self, obj: &mut Value) {
        default(obj, self.mutating);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        validate(&mut errs, obj, self.mutating);
        errs
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col(
                "Webhooks",
                "integer",
                "Webhooks indicates the number of webhooks in the configuration.",
            ),
            AGE,
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        vec![
            name_cell(obj),
            json!(obj["webhooks"].as_array().map_or(0, Vec::len)),
            age_cell(obj),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook() -> Value {
        json!({
            "name": "deny.example.com",
            "clientConfig": {"url": "https://127.0.0.1:8443/validate"},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        })
    }

    #[test]
    fn defaults_follow_upstream() {
        let mut cfg = json!({"webhooks": [hook(), {"name": "svc.example.com", "clientConfig": {"service": {"namespace": "ns", "name": "s"}}}]});
        default(&mut cfg, true);
        let h = &cfg["webhooks"][0];
        assert_eq!(h["failurePolicy"], "Fail");
        assert_eq!(h["matchPolicy"], "Equivalent");
        assert_eq!(h["namespaceSelector"], json!({}));
        assert_eq!(h["objectSelector"], json!({}));
        assert_eq!(h["timeoutSeconds"], 10);
        assert_eq!(h["reinvocationPolicy"], "Never");
        assert_eq!(h["rules"][0]["scope"], "*");
        assert!(h.get("sideEffects").is_some());
        assert_eq!(cfg["webhooks"][1]["clientConfig"]["service"]["port"], 443);
        let mut v = json!({"webhooks": [hook()]});
        default(&mut v, false);
        assert!(v["webhooks"][0].get("reinvocationPolicy").is_none());
    }

    #[test]
    fn validation_in_upstream_words() {
        let mut errs = Vec::new();
        validate(&mut errs, &json!({"webhooks": [hook()]}), true);
        assert!(errs.is_empty(), "{errs:?}");

        let mut bad = hook();
        bad["name"] = json!("deny");
        bad["sideEffects"] = Value::Null;
        bad["admissionReviewVersions"] = json!([]);
        bad["timeoutSeconds"] = json!(31);
        bad["clientConfig"] = json!({"url": "http://127.0.0.1/x?y=1"});
        bad["rules"][0]["resources"] = json!(["*", "pods"]);
        bad["rules"][0]["operations"] = json!(["MAKE"]);
        let mut errs = Vec::new();
        validate(&mut errs, &json!({"webhooks": [bad, hook(), hook()]}), true);
        let text: Vec<String> = errs.iter().map(ToString::to_string).collect();
        let want = [
            "webhooks[0].name: Invalid value: \"deny\": should be a domain with at least three segments separated by dots",
            "webhooks[0].rules[0].operations[0]: Unsupported value: \"MAKE\": supported values: \"*\", \"CONNECT\", \"CREATE\", \"DELETE\", \"UPDATE\"",
            "webhooks[0].rules[0].resources: Invalid value: []string{\"*\", \"pods\"}: if '*' is present, must not specify other resources without subresources",
            "webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun",
            "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds",
            "webhooks[0].clientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme; desired format: https://host[/path]",
            "webhooks[0].clientConfig.url: Invalid value: \"y=1\": query parameters are not permitted in the URL",
            "webhooks[0].admissionReviewVersions: Required value: must specify one of v1, v1beta1",
            "webhooks[2].name: Duplicate value: \"deny.example.com\"",
        ];
        assert_eq!(text, want);
    }

    #[test]
    fn selectors_are_validated() {
        let mut h = hook();
        h["namespaceSelector"] = json!({"matchExpressions": [{"key": "env", "operator": "In"}, {"key": "x", "operator": "Exists", "values": ["a"]}, {"key": "y", "operator": "Near"}]});
        let mut errs = Vec::new();
        validate(&mut errs, &json!({"webhooks": [h]}), false);
        let text: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "webhooks[0].namespaceSelector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'",
                "webhooks[0].namespaceSelector.matchExpressions[1].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                "webhooks[0].namespaceSelector.matchExpressions[2].operator: Invalid value: \"Near\": not a valid selector operator",
            ]
        );
    }
}

#[cfg(test)]
mod review_version_tests {
    use super::*;

    #[test]
    fn review_versions_are_dns_1035_labels() {
        let mut errs = Vec::new();
        validate_review_versions(
            &mut errs,
            "webhooks[0].admissionReviewVersions",
            &["v1", "V2", "3v"],
        );
        let msgs: Vec<String> = errs.iter().map(ToString::to_string).collect();
        let dns1035 = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
        assert_eq!(
            msgs,
            [
                format!("webhooks[0].admissionReviewVersions[1]: Invalid value: \"V2\": {dns1035}"),
                format!("webhooks[0].admissionReviewVersions[2]: Invalid value: \"3v\": {dns1035}"),
            ]
        );
    }
}
