//! The per-resource part of the registry (upstream's `strategy.go` files): defaults, validation,
//! what create and update may set, field selector values and table columns. The generic
//! registry calls these; everything else is shared.

use std::collections::BTreeMap;

use r8s_api::validation::{dns1123_label, dns1123_subdomain, label_value, qualified_name, FieldError};
use r8s_api::ResourceDef;
use serde_json::{json, Map, Value};

use super::meta::{self, human_age, str_field};
use super::strategy::{col, wide, Column, Strategy, AGE, NAME};
use super::{pod_defaults, pod_validation};

/// How a resource's names are validated.
pub(crate) fn validate_name(def: &ResourceDef, name: &str) -> Vec<String> {
    if matches!(def.plural, "namespaces" | "services") {
        dns1123_label(name)
    } else if def.group == "rbac.authorization.k8s.io" {
        // RBAC names only need to be a path segment (`system:node` is one), as upstream.
        path_segment_name(name)
    } else {
        dns1123_subdomain(name)
    }
}

/// upstream's `path.IsValidPathSegmentName`.
fn path_segment_name(name: &str) -> Vec<String> {
    if name == "." || name == ".." {
        return vec![format!("may not be '{name}'")];
    }
    ["/", "%"]
        .iter()
        .filter(|c| name.contains(*c))
        .map(|c| format!("may not contain '{c}'"))
        .collect()
}

/// Whether spec changes bump `metadata.generation` (resources with a spec).
pub(crate) fn tracks_generation(def: &ResourceDef) -> bool {
    matches!(
        def.plural,
        "pods" | "deployments" | "replicasets" | "services" | "nodes" | "namespaces" | "resourcequotas"
    )
}

/// Whether status is written only through the status subresource.
pub(crate) fn has_status_subresource(def: &ResourceDef) -> bool {
    def.subresource("status").is_some()
}

/// Upstream's `PrepareForCreate`: what a client may not set on create.
pub(crate) fn prepare_for_create(def: &ResourceDef, obj: &mut Value) {
    // A kubelet registers its Node with its status (capacity, addresses, conditions) in the
    // create, so nodes keep theirs, as upstream's node strategy does.
    if has_status_subresource(def) && def.plural != "nodes" {
        if let Some(o) = obj.as_object_mut() {
            o.remove("status");
        }
    }
    match def.plural {
        "pods" => {
            if let Some(spec) = obj.get_mut("spec") {
                pod_defaults::service_account_alias(spec);
            }
            obj["status"] = json!({"phase": "Pending", "qosClass": qos_class(&obj["spec"])});
        }
        "namespaces" => {
            namespace_name_label(obj);
            obj["status"] = json!({"phase": "Active"});
        }
        _ => {}
    }
}

/// Upstream's `PrepareForUpdate` for the main resource: status stays as stored.
pub(crate) fn prepare_for_update(def: &ResourceDef, obj: &mut Value, old: &Value) {
    if has_status_subresource(def) {
        match old.get("status") {
            Some(s) => obj["status"] = s.clone(),
            None => {
                if let Some(o) = obj.as_object_mut() {
                    o.remove("status");
                }
            }
        }
    }
}

/// The pod's QoS class from its containers' requests and limits (upstream `GetPodQOS`).
pub(crate) fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = spec["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(spec["initContainers"].as_array().into_iter().flatten())
        .collect();
    let mut any = false;
    let mut guaranteed = true;
    for c in &containers {
        let req = &c["resources"]["requests"];
        let lim = &c["resources"]["limits"];
        for r in ["cpu", "memory"] {
            let (q, l) = (
                req.get(r).filter(|v| !v.is_null()),
                lim.get(r).filter(|v| !v.is_null()),
            );
            if q.is_some() || l.is_some() {
                any = true;
            }
            match (q, l) {
                (_, None) => guaranteed = false,
                (Some(q), Some(l)) if !same_quantity(q, l) => guaranteed = false,
                _ => {}
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// Two quantities with the same value ("0.5" and "500m").
fn same_quantity(a: &Value, b: &Value) -> bool {
    match (a.as_str(), b.as_str()) {
        (Some(x), Some(y)) => match (
            r8s_api::quantity::parse_milli(x),
            r8s_api::quantity::parse_milli(y),
        ) {
            (Ok(x), Ok(y)) => x == y,
            _ => x == y,
        },
        _ => a == b,
    }
}

/// Every namespace carries its name as the label `kubernetes.io/metadata.name` (upstream's
/// defaulting and namespace strategy), whatever the client sent, so that selectors of
/// namespaces (webhooks', network policies') can name one. Run when defaulting and again once a
/// generated name is known (`prepare_for_create`).
fn namespace_name_label(obj: &mut Value) {
    let name = meta::name(obj).to_owned();
    if name.is_empty() {
        return;
    }
    let m = meta::meta_mut(obj);
    if !m.get("labels").is_some_and(Value::is_object) {
        m.insert("labels".into(), json!({}));
    }
    m["labels"]["kubernetes.io/metadata.name"] = json!(name);
}

/// A LimitRange's Container items: the default limit is the max where none is given, and
/// the default request the default limit, else the min (upstream `SetDefaults_LimitRangeItem`).
fn limit_range_defaults(obj: &mut Value) {
    let items = obj
        .get_mut("spec")
        .and_then(|s| s.get_mut("limits"))
        .and_then(Value::as_array_mut);
    for item in items.into_iter().flatten() {
        if item["type"] != "Container" {
            continue;
        }
        let fill = |item: &mut Value, into: &str, from: &str| {
            let Some(from) = item[from].as_object().cloned() else {
                return;
            };
            if !item[into].is_object() {
                item[into] = json!({});
            }
            let into = item[into].as_object_mut().expect("made an object above");
            for (k, v) in from {
                into.entry(k).or_insert(v);
            }
        };
        fill(item, "default", "max");
        fill(item, "defaultRequest", "default");
        fill(item, "defaultRequest", "min");
        // Empty maps are not written, as Go leaves them out.
        for key in ["default", "defaultRequest"] {
            if item[key].as_object().is_some_and(Map::is_empty) {
                item.as_object_mut().expect("indexed above").remove(key);
            }
        }
    }
}

/// Upstream's defaulting (`SetDefaults_*`) for the resources that have defaults.
pub(crate) fn default(def: &ResourceDef, obj: &mut Value) {
    match def.plural {
        "pods" => pod_defaults::pod(&mut obj["spec"]),
        "deployments" | "replicasets" => {
            let spec = &mut obj["spec"];
            if !spec.is_object() {
                return;
            }
            if spec.get("replicas").is_none_or(Value::is_null) {
                spec["replicas"] = json!(1);
            }
            if def.plural == "deployments" {
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
        "namespaces" => {
            if obj["spec"]["finalizers"].is_null() {
                obj["spec"] = json!({"finalizers": ["kubernetes"]});
            }
            namespace_name_label(obj);
        }
        "limitranges" => limit_range_defaults(obj),
        "endpoints" => {
            // (`get_mut`, not indexing: indexing a Value mutably adds the key.)
            let subsets = obj.get_mut("subsets").and_then(Value::as_array_mut);
            for subset in subsets.into_iter().flatten() {
                let ports = subset.get_mut("ports").and_then(Value::as_array_mut);
                for p in ports.into_iter().flatten().filter(|p| p.is_object()) {
                    if p.get("protocol").is_none_or(Value::is_null) {
                        p["protocol"] = json!("TCP");
                    }
                }
            }
        }
        "nodes" => {
            let status = &obj["status"];
            if status.get("allocatable").is_none_or(Value::is_null) && status["capacity"].is_object() {
                obj["status"]["allocatable"] = obj["status"]["capacity"].clone();
            }
        }
        "priorityclasses" if obj.get("preemptionPolicy").is_none_or(Value::is_null) => {
            obj["preemptionPolicy"] = json!("PreemptLowerPriority");
        }
        "secrets" => {
            if obj.get("type").is_none_or(Value::is_null) {
                obj["type"] = json!("Opaque");
            }
            // stringData is write-only: its entries become data (base64), overriding data's, and
            // it is never stored or returned (upstream's conversion does this).
            if let Some(Value::Object(string_data)) = obj.as_object_mut().and_then(|o| o.remove("stringData"))
            {
                use base64::Engine;
                if !obj["data"].is_object() {
                    obj["data"] = json!({});
                }
                for (k, v) in string_data {
                    let text = v.as_str().unwrap_or_default();
                    obj["data"][k] = json!(base64::engine::general_purpose::STANDARD.encode(text));
                }
            }
        }
        "mutatingwebhookconfigurations" => super::webhook_configuration::default(obj, true),
        "validatingwebhookconfigurations" => super::webhook_configuration::default(obj, false),
        "services" => {
            let spec = &mut obj["spec"];
            if !spec.is_object() {
                return;
            }
            if spec.get("type").is_none_or(Value::is_null) {
                spec["type"] = json!("ClusterIP");
            }
            if spec.get("sessionAffinity").is_none_or(Value::is_null) {
                spec["sessionAffinity"] = json!("None");
            }
            // Client affinity lasts three hours unless the service says otherwise; without
            // affinity there is nothing to configure.
            match spec["sessionAffinity"].as_str() {
                Some("None") => {
                    if let Some(s) = spec.as_object_mut() {
                        s.remove("sessionAffinityConfig");
                    }
                }
                Some("ClientIP") if spec["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"].is_null() => {
                    spec["sessionAffinityConfig"] = json!({"clientIP": {"timeoutSeconds": 10800}});
                }
                _ => {}
            }
            if spec["type"] == "LoadBalancer"
                && spec
                    .get("allocateLoadBalancerNodePorts")
                    .is_none_or(Value::is_null)
            {
                spec["allocateLoadBalancerNodePorts"] = json!(true);
            }
            if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
                for p in ports {
                    if p.get("protocol").is_none_or(Value::is_null) {
                        p["protocol"] = json!("TCP");
                    }
                    if p.get("targetPort").is_none_or(Value::is_null) {
                        p["targetPort"] = p["port"].clone();
                    }
                }
            }
        }
        _ => {}
    }
}

pub(super) fn validate_string_map(
    errs: &mut Vec<FieldError>,
    field: &str,
    v: &Value,
    values_are_labels: bool,
) {
    let Some(m) = v.as_object() else {
        if !v.is_null() {
            errs.push(FieldError::invalid(
                field,
                &v.to_string(),
                "must be a map of strings",
            ));
        }
        return;
    };
    for (k, val) in m {
        for e in qualified_name(k) {
            errs.push(FieldError::invalid(field, k, e));
        }
        match val.as_str() {
            Some(s) if values_are_labels => {
                for e in label_value(s) {
                    errs.push(FieldError::invalid(field, s, e));
                }
            }
            Some(_) => {}
            None => errs.push(FieldError::invalid(
                format!("{field}[{k}]"),
                &val.to_string(),
                "must be a string",
            )),
        }
    }
}

/// Metadata checks shared by every resource.
pub(crate) fn validate_meta(s: &dyn Strategy, obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let name = meta::name(obj);
    if name.is_empty() {
        errs.push(FieldError::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else {
        for p in s.validate_name(name) {
            errs.push(FieldError::invalid("metadata.name", name, p));
        }
    }
    validate_string_map(&mut errs, "metadata.labels", &obj["metadata"]["labels"], true);
    validate_string_map(
        &mut errs,
        "metadata.annotations",
        &obj["metadata"]["annotations"],
        false,
    );
    if total_size(&obj["metadata"]["annotations"]) > MAX_ANNOTATIONS_BYTES {
        errs.push(FieldError::too_long(
            "metadata.annotations",
            MAX_ANNOTATIONS_BYTES,
        ));
    }
    errs
}

/// Upstream's limit on all of an object's annotations together (keys and values).
const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;
/// Upstream's limit on a ConfigMap's or Secret's data (`MaxSecretSize`).
const MAX_DATA_BYTES: usize = 1024 * 1024;

/// The bytes of a string map's keys and values.
fn total_size(map: &Value) -> usize {
    map.as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum()
}

/// Resource-specific validation (upstream's `Validate*`).
pub(crate) fn validate(def: &ResourceDef, obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match def.plural {
        "pods" => pod_validation::pod_spec(&mut errs, "spec", &obj["spec"]),
        "deployments" | "replicasets" => {
            let spec = &obj["spec"];
            let selector = &spec["selector"];
            if selector.is_null() {
                errs.push(FieldError::required("spec.selector", ""));
            } else {
                let want = meta::string_map(&selector["matchLabels"]);
                let have = meta::string_map(&spec["template"]["metadata"]["labels"]);
                if want.is_empty() && selector["matchExpressions"].is_null() {
                    errs.push(FieldError::invalid(
                        "spec.selector",
                        &selector.to_string(),
                        "empty selector is invalid for deployment",
                    ));
                } else if !want.iter().all(|(k, v)| have.get(k) == Some(v)) {
                    errs.push(FieldError::invalid(
                        "spec.template.metadata.labels",
                        &format_labels(&have),
                        "`selector` does not match template `labels`",
                    ));
                }
            }
            if let Some(r) = spec["replicas"].as_i64() {
                if r < 0 {
                    errs.push(FieldError::invalid(
                        "spec.replicas",
                        &r.to_string(),
                        "must be greater than or equal to 0",
                    ));
                }
            }
            pod_validation::pod_spec(&mut errs, "spec.template.spec", &spec["template"]["spec"]);
            workload(&mut errs, def.plural == "deployments", spec);
        }
        "priorityclasses" => {
            if obj.get("value").is_none_or(Value::is_null) {
                errs.push(FieldError::required("value", ""));
            }
            let name = meta::name(obj);
            if name.starts_with("system-")
                && !matches!(name, "system-cluster-critical" | "system-node-critical")
            {
                errs.push(FieldError::invalid(
                    "metadata.name",
                    name,
                    "priority class names with 'system-' prefix are reserved",
                ));
            }
        }
        "certificatesigningrequests" => {
            let spec = &obj["spec"];
            let request = spec["request"].as_str().unwrap_or_default();
            let pem = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, request)
                .unwrap_or_default();
            if request.is_empty() {
                errs.push(FieldError::required("spec.request", ""));
            } else if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE REQUEST-----") {
                errs.push(FieldError::invalid(
                    "spec.request",
                    "",
                    "PEM block type must be CERTIFICATE REQUEST",
                ));
            }
            if spec["signerName"].as_str().is_none_or(str::is_empty) {
                errs.push(FieldError::required("spec.signerName", ""));
            }
            if spec["usages"].as_array().is_none_or(Vec::is_empty) {
                errs.push(FieldError::required("spec.usages", ""));
            }
            if let Some(e) = spec["expirationSeconds"].as_i64() {
                if e < 600 {
                    errs.push(FieldError::invalid(
                        "spec.expirationSeconds",
                        &e.to_string(),
                        "may not specify a duration less than 600 seconds (10 minutes)",
                    ));
                }
            }
        }
        "roles" | "clusterroles" => validate_rules(&mut errs, obj, def.plural == "clusterroles"),
        "mutatingwebhookconfigurations" | "validatingwebhookconfigurations" => {
            super::webhook_configuration::validate(
                &mut errs,
                obj,
                def.plural == "mutatingwebhookconfigurations",
            )
        }
        "rolebindings" | "clusterrolebindings" => {
            validate_binding(&mut errs, obj, def.plural == "clusterrolebindings")
        }
        "services" => super::services::validate(&mut errs, obj),
        "configmaps" | "secrets" => {
            if def.plural == "configmaps" {
                // binaryData counts decoded, as Go holds it.
                let binary: usize = obj["binaryData"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| k.len() + v.as_str().map_or(0, |b| b.len() / 4 * 3))
                    .sum();
                if total_size(&obj["data"]) + binary > MAX_DATA_BYTES {
                    errs.push(FieldError::too_long("[]", MAX_DATA_BYTES));
                }
            } else {
                let decoded: usize = obj["data"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| k.len() + v.as_str().map_or(0, |b| b.len() / 4 * 3))
                    .sum();
                if decoded > MAX_DATA_BYTES {
                    errs.push(FieldError::too_long("data", MAX_DATA_BYTES));
                }
            }
            for field in ["data", "binaryData", "stringData"] {
                if let Some(m) = obj[field].as_object() {
                    for k in m.keys() {
                        let ok = !k.is_empty()
                            && k.len() <= 253
                            && k.bytes()
                                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
                        if !ok {
                            errs.push(FieldError::invalid(
                                format!("{field}[{k}]"),
                                k,
                                "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
                            ));
                        }
                    }
                }
            }
        }
        _ => {}
    }
    errs
}

/// upstream's `ValidatePolicyRule`: verbs always; resource rules name groups; only
/// ClusterRoles may hold non-resource URLs, and never beside resources.
fn validate_rules(errs: &mut Vec<FieldError>, obj: &Value, cluster: bool) {
    let empty = |v: &Value| v.as_array().is_none_or(Vec::is_empty);
    for (i, r) in obj["rules"].as_array().into_iter().flatten().enumerate() {
        let path = format!("rules[{i}]");
        if empty(&r["verbs"]) {
            errs.push(FieldError::required(
                format!("{path}.verbs"),
                "verbs must contain at least one value",
            ));
        }
        if !empty(&r["nonResourceURLs"]) {
            if !cluster {
                errs.push(FieldError::invalid(
                    format!("{path}.nonResourceURLs"),
                    &r["nonResourceURLs"].to_string(),
                    "namespaced rules cannot apply to non-resource URLs",
                ));
            }
            if !empty(&r["apiGroups"]) || !empty(&r["resources"]) || !empty(&r["resourceNames"]) {
                errs.push(FieldError::invalid(
                    format!("{path}.nonResourceURLs"),
                    &r["nonResourceURLs"].to_string(),
                    "rules cannot apply to both regular resources and non-resource URLs",
                ));
            }
            continue;
        }
        if empty(&r["apiGroups"]) {
            errs.push(FieldError::required(
                format!("{path}.apiGroups"),
                "resource rules must supply at least one api group",
            ));
        }
        if empty(&r["resources"]) {
            errs.push(FieldError::required(
                format!("{path}.resources"),
                "resource rules must supply at least one resource",
            ));
        }
    }
}

/// upstream's `ValidateRoleBinding`: a roleRef to a Role or ClusterRole in the RBAC group (a
/// ClusterRoleBinding only to a ClusterRole), and subjects of the known kinds.
fn validate_binding(errs: &mut Vec<FieldError>, obj: &Value, cluster: bool) {
    let role_ref = &obj["roleRef"];
    match role_ref["apiGroup"].as_str() {
        Some("rbac.authorization.k8s.io") => {}
        other => errs.push(FieldError::not_supported(
            "roleRef.apiGroup",
            other.unwrap_or(""),
            &["rbac.authorization.k8s.io"],
        )),
    }
    let kinds: &[&str] = if cluster {
        &["ClusterRole"]
    } else {
        &["ClusterRole", "Role"]
    };
    match role_ref["kind"].as_str() {
        Some(k) if kinds.contains(&k) => {}
        other => errs.push(FieldError::not_supported(
            "roleRef.kind",
            other.unwrap_or(""),
            kinds,
        )),
    }
    if role_ref["name"].as_str().is_none_or(str::is_empty) {
        errs.push(FieldError::required("roleRef.name", ""));
    }
    for (i, subject) in obj["subjects"].as_array().into_iter().flatten().enumerate() {
        let path = format!("subjects[{i}]");
        if subject["name"].as_str().is_none_or(str::is_empty) {
            errs.push(FieldError::required(format!("{path}.name"), ""));
        }
        match subject["kind"].as_str() {
            Some("ServiceAccount") => {
                if cluster && subject["namespace"].as_str().is_none_or(str::is_empty) {
                    errs.push(FieldError::required(format!("{path}.namespace"), ""));
                }
            }
            Some("User") | Some("Group") => {}
            other => errs.push(FieldError::not_supported(
                format!("{path}.kind"),
                other.unwrap_or(""),
                &["ServiceAccount", "User", "Group"],
            )),
        }
    }
}

/// Checks that need the stored object (upstream's `ValidateUpdate`).
pub(crate) fn validate_update(def: &ResourceDef, obj: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    /// Go's `%#v` of a string value.
    fn go_string(v: &Value) -> String {
        serde_json::to_string(v.as_str().unwrap_or("")).unwrap_or_default()
    }
    const IMMUTABLE_SET: &str = "field is immutable when `immutable` is set";
    match (def.group, def.plural) {
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings")
            if obj["roleRef"] != old["roleRef"] =>
        {
            let r = &obj["roleRef"];
            errs.push(FieldError::invalid_raw(
                "roleRef",
                &format!(
                    "rbac.RoleRef{{APIGroup:{}, Kind:{}, Name:{}}}",
                    go_string(&r["apiGroup"]),
                    go_string(&r["kind"]),
                    go_string(&r["name"])
                ),
                "cannot change roleRef",
            ));
        }
        ("", "configmaps" | "secrets") => {
            if def.plural == "secrets" && obj["type"] != old["type"] {
                errs.push(FieldError::invalid_raw(
                    "type",
                    &go_string(&obj["type"]),
                    "field is immutable",
                ));
            }
            // Absent and empty are the same map.
            let map = |v: &Value| v.as_object().filter(|m| !m.is_empty()).cloned();
            if old["immutable"] == true {
                if obj["immutable"] != true {
                    errs.push(FieldError::forbidden("immutable", IMMUTABLE_SET));
                }
                if map(&obj["data"]) != map(&old["data"]) {
                    errs.push(FieldError::forbidden("data", IMMUTABLE_SET));
                }
                if def.plural == "configmaps" && map(&obj["binaryData"]) != map(&old["binaryData"]) {
                    errs.push(FieldError::forbidden("binaryData", IMMUTABLE_SET));
                }
            }
        }
        ("apps", "deployments" | "replicasets") => {
            // Which pods a workload owns cannot change under it (apps/v1).
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
            if selector(obj) != selector(old) {
                errs.push(FieldError::invalid_raw(
                    "spec.selector",
                    &r8s_api::validation::go_label_selector(&obj["spec"]["selector"]),
                    "field is immutable",
                ));
            }
        }
        ("scheduling.k8s.io", "priorityclasses") => {
            if obj["value"] != old["value"] {
                errs.push(FieldError::forbidden("value", "may not be changed in an update."));
            }
            if obj["preemptionPolicy"] != old["preemptionPolicy"] {
                errs.push(FieldError::invalid_raw(
                    "preemptionPolicy",
                    &go_string(&obj["preemptionPolicy"]),
                    "field is immutable",
                ));
            }
        }
        _ => {}
    }
    errs
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
    // An int or a percentage; printed as Go prints the IntOrString it was decoded into.
    let go = |v: &Value| match v {
        Value::String(s) => format!("intstr.IntOrString{{Type:1, IntVal:0, StrVal:{s:?}}}"),
        v => format!(
            "intstr.IntOrString{{Type:0, IntVal:{}, StrVal:\"\"}}",
            v.as_i64().unwrap_or(0)
        ),
    };
    let mut values = [0i64; 2];
    for (i, key) in ["maxUnavailable", "maxSurge"].into_iter().enumerate() {
        let v = &ru[key];
        let field = format!("spec.strategy.rollingUpdate.{key}");
        match v {
            Value::String(s) => match s.strip_suffix('%').and_then(|n| n.parse::<i64>().ok()) {
                Some(n) => values[i] = n,
                None => errs.push(FieldError::invalid(
                    field,
                    s,
                    "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
                )),
            },
            Value::Number(n) => {
                let n = n.as_i64().unwrap_or(0);
                if n < 0 {
                    errs.push(FieldError::invalid_raw(field, &n.to_string(), "must be greater than or equal to 0"));
                }
                values[i] = n;
            }
            _ => values[i] = 1,
        }
    }
    if values == [0, 0] {
        errs.push(FieldError::invalid_raw(
            "spec.strategy.rollingUpdate.maxUnavailable",
            &go(&ru["maxUnavailable"]),
            "may not be 0 when `maxSurge` is 0",
        ));
    }
    if ru["maxUnavailable"].as_str().is_some_and(|s| s.ends_with('%')) && values[0] > 100 {
        errs.push(FieldError::invalid_raw(
            "spec.strategy.rollingUpdate.maxUnavailable",
            &go(&ru["maxUnavailable"]),
            "must not be greater than 100%",
        ));
    }
}

/// Up to three entries and how many more (upstream's endpoints printers), `<none>` for none.
fn first_three(all: &[String]) -> String {
    match all.len() {
        0 => "<none>".to_owned(),
        1..=3 => all.join(","),
        n => format!("{} + {} more...", all[..3].join(","), n - 3),
    }
}

fn format_labels(m: &BTreeMap<String, String>) -> String {
    let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    format!("map[{}]", parts.join(" "))
}

/// The values field selectors can name (upstream's `GetAttrs`/field label conversion).
pub(crate) fn fields(def: &ResourceDef, obj: &Value, f: &mut BTreeMap<String, String>) {
    let mut put = |k: &str, path: &[&str]| {
        f.insert(k.to_owned(), str_field(obj, path).unwrap_or("").to_owned());
    };
    match def.plural {
        "pods" => {
            put("spec.nodeName", &["spec", "nodeName"]);
            put("spec.restartPolicy", &["spec", "restartPolicy"]);
            put("spec.schedulerName", &["spec", "schedulerName"]);
            put("spec.serviceAccountName", &["spec", "serviceAccountName"]);
            put("status.phase", &["status", "phase"]);
            put("status.podIP", &["status", "podIP"]);
            put("status.nominatedNodeName", &["status", "nominatedNodeName"]);
        }
        "namespaces" => put("status.phase", &["status", "phase"]),
        "secrets" => put("type", &["type"]),
        "events" => {
            put("involvedObject.kind", &["involvedObject", "kind"]);
            put("involvedObject.name", &["involvedObject", "name"]);
            put("involvedObject.namespace", &["involvedObject", "namespace"]);
            put("involvedObject.uid", &["involvedObject", "uid"]);
            put("reason", &["reason"]);
            put("type", &["type"]);
        }
        "nodes" => {
            f.insert(
                "spec.unschedulable".into(),
                obj["spec"]["unschedulable"]
                    .as_bool()
                    .unwrap_or(false)
                    .to_string(),
            );
        }
        "replicasets" => {
            f.insert(
                "status.replicas".into(),
                obj["status"]["replicas"].as_i64().unwrap_or(0).to_string(),
            );
        }
        _ => {}
    }
}

/// Upstream's printer columns for each resource (`pkg/printers/internalversion`).
pub(crate) fn columns(def: &ResourceDef) -> Vec<Column> {
    match def.plural {
        "pods" => vec![
            NAME,
            col("Ready", "string", "The aggregate readiness state of this pod for accepting traffic."),
            col("Status", "string", "The aggregate status of the containers in this pod."),
            col("Restarts", "string", "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."),
            AGE,
            wide("IP", "IP address allocated to the pod. Routable at least within the cluster."),
            wide("Node", "Name of the node this pod is running on."),
            wide("Nominated Node", "Name of the node where the pod is nominated to run."),
            wide("Readiness Gates", "Readiness gates of the pod."),
        ],
        "deployments" => vec![
            NAME,
            col("Ready", "string", "Number of the pod with ready state"),
            col("Up-to-date", "string", "Total number of non-terminated pods targeted by this deployment that have the desired template spec."),
            col("Available", "string", "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment."),
            AGE,
            wide("Containers", "Names of each container in the template."),
            wide("Images", "Images referenced by each container in the template."),
            wide("Selector", "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment."),
        ],
        "replicasets" => vec![
            NAME,
            col("Desired", "integer", "Replicas is the number of desired replicas."),
            col("Current", "integer", "Replicas is the most recently observed number of replicas."),
            col("Ready", "integer", "The number of ready replicas for this replica set."),
            AGE,
            wide("Containers", "Names of each container in the template."),
            wide("Images", "Images referenced by each container in the template."),
            wide("Selector", "Selector is a label query over pods that should match the replica count."),
        ],
        "namespaces" => vec![
            NAME,
            col("Status", "string", "The status of the namespace"),
            AGE,
        ],
        "nodes" => vec![
            NAME,
            col("Status", "string", "The status of the node"),
            col("Roles", "string", "The roles of the node"),
            AGE,
            col("Version", "string", "Kubelet Version reported by the node."),
            wide("Internal-IP", "List of addresses reachable to the node."),
            wide("External-IP", "List of addresses reachable to the node."),
            wide("OS-Image", "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy))."),
            wide("Kernel-Version", "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64)."),
            wide("Container-Runtime", "Container Runtime Version reported by the node through runtime remote API (e.g. containerd://1.4.2)."),
        ],
        "certificatesigningrequests" => vec![
            NAME,
            AGE,
            col("SignerName", "string", "The signer of the requested certificate."),
            col("Requestor", "string", "Name of the user who requested the certificate."),
            col("RequestedDuration", "string", "The requested validity of the certificate."),
            col("Condition", "string", "The current state of the request."),
        ],
        "roles" | "clusterroles" => vec![
            NAME,
            col("Created At", "date", "CreationTimestamp is a timestamp representing the server time when this object was created."),
        ],
        "rolebindings" | "clusterrolebindings" => vec![
            NAME,
            col("Role", "string", "RoleRef is the reference to the role this binding grants."),
            AGE,
            wide("Users", "Users in the binding."),
            wide("Groups", "Groups in the binding."),
            wide("ServiceAccounts", "ServiceAccounts in the binding."),
        ],
        "configmaps" => vec![NAME, col("Data", "string", "Data contains the configuration data."), AGE],
        "mutatingwebhookconfigurations" | "validatingwebhookconfigurations" => vec![
            NAME,
            col("Webhooks", "integer", "Webhooks indicates the number of webhooks in the configuration."),
            AGE,
        ],
        "secrets" => vec![
            NAME,
            col("Type", "string", "The type of the secret"),
            col("Data", "string", "The number of data items in the secret"),
            AGE,
        ],
        "serviceaccounts" => vec![NAME, col("Secrets", "string", "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use."), AGE],
        "priorityclasses" => vec![
            NAME,
            col("Value", "integer", "The value of this priority class. This is the actual priority that pods receive when they have the name of this class in their pod spec."),
            col("Global-Default", "boolean", "globalDefault specifies whether this PriorityClass should be considered as the default priority for pods that do not have any priority class."),
            AGE,
            col("PreemptionPolicy", "string", "PreemptionPolicy is the Policy for preempting pods with lower priority."),
        ],
        "endpoints" => vec![
            NAME,
            col("Endpoints", "string", "Endpoints of the resource"),
            AGE,
        ],
        "endpointslices" => vec![
            NAME,
            col("AddressType", "string", "The IP protocol for this slice"),
            col("Ports", "string", "The ports for this slice"),
            col("Endpoints", "string", "The endpoints for this slice"),
            AGE,
        ],
        "services" => vec![
            NAME,
            col("Type", "string", "The type of the service"),
            col("Cluster-IP", "string", "The cluster IP of the service"),
            col("External-IP", "string", "The external IPs of the service"),
            col("Port(s)", "string", "The ports of the service"),
            AGE,
            wide("Selector", "The selector of the service"),
        ],
        "events" => vec![
            col("Last Seen", "string", "The time at which the most recent occurrence of this event was recorded."),
            col("Type", "string", "Type of this event (Normal, Warning), new types could be added in the future."),
            col("Reason", "string", "This should be a short, machine understandable string that gives the reason for the transition into the object's current status."),
            col("Object", "string", "The object that this event is about."),
            wide("Subobject", "The sub-object (field path) of the object that this event is about."),
            wide("Source", "The component reporting this event."),
            col("Message", "string", "A human-readable description of the status of this operation."),
            wide("First Seen", "The time at which the event was first recorded."),
            wide("Count", "The number of times this event has occurred."),
            Column { priority: 1, ..NAME },
        ],
        "resourcequotas" => vec![
            NAME,
            AGE,
            col("Request", "string", "Request represents a minimum amount of cpu/memory that a container may consume."),
            col("Limit", "string", "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node."),
        ],
        "limitranges" => vec![
            NAME,
            col("Created At", "date", "CreationTimestamp is a timestamp representing the server time when this object was created."),
        ],
        _ => vec![NAME, AGE],
    }
}

/// The REQUEST and LIMIT cells of a ResourceQuota: `name: used/hard` for each resource of
/// its spec, sorted, `limits.*` in the second (upstream `printResourceQuota`).
fn quota_cells(obj: &Value) -> (String, String) {
    let quantity = |v: &Value| {
        v.as_str()
            .and_then(|s| r8s_api::quantity::Quantity::parse(s).ok())
            .unwrap_or_default()
            .to_string()
    };
    let (mut requests, mut limits) = (Vec::new(), Vec::new());
    let mut names: Vec<&String> = obj["spec"]["hard"]
        .as_object()
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    names.sort();
    for r in names {
        let cell = format!(
            "{r}: {}/{}",
            quantity(&obj["status"]["used"][r.as_str()]),
            quantity(&obj["status"]["hard"][r.as_str()])
        );
        if r.starts_with("limits.") {
            limits.push(cell);
        } else {
            requests.push(cell);
        }
    }
    (requests.join(", "), limits.join(", "))
}

fn count(v: &Value) -> usize {
    v.as_object().map(|m| m.len()).unwrap_or(0)
}

fn container_summary(template_spec: &Value) -> (String, String) {
    let cs = template_spec["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let names: Vec<&str> = cs.iter().filter_map(|c| c["name"].as_str()).collect();
    let images: Vec<&str> = cs.iter().filter_map(|c| c["image"].as_str()).collect();
    (names.join(","), images.join(","))
}

fn selector_string(sel: &Value) -> String {
    let m = meta::string_map(&sel["matchLabels"]);
    let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
    parts.join(",")
}

fn pod_status_reason(obj: &Value) -> String {
    if obj["metadata"]["deletionTimestamp"].is_string() {
        return "Terminating".into();
    }
    let status = &obj["status"];
    let mut reason = status["reason"]
        .as_str()
        .or(status["phase"].as_str())
        .unwrap_or("Pending")
        .to_owned();
    for cs in status["containerStatuses"].as_array().into_iter().flatten() {
        if let Some(r) = cs["state"]["waiting"]["reason"].as_str() {
            reason = r.to_owned();
        } else if let Some(r) = cs["state"]["terminated"]["reason"].as_str() {
            reason = r.to_owned();
        }
    }
    reason
}

/// An event's row, from the core/v1 or the events.k8s.io/v1 form (upstream `printEvent`).
fn event_cells(obj: &Value, name: Value) -> Vec<Value> {
    let first = ["firstTimestamp", "deprecatedFirstTimestamp", "eventTime"]
        .iter()
        .find_map(|k| obj[*k].as_str())
        .or(str_field(obj, &["metadata", "creationTimestamp"]));
    let last = obj["series"]["lastObservedTime"]
        .as_str()
        .or(obj["lastTimestamp"].as_str())
        .or(obj["deprecatedLastTimestamp"].as_str())
        .or(first);
    let count = obj["series"]["count"]
        .as_i64()
        .or(obj["count"].as_i64())
        .or(obj["deprecatedCount"].as_i64())
        .unwrap_or(1);
    let last_seen = if count > 1 {
        format!("{} (x{count} over {})", human_age(last), human_age(first))
    } else {
        human_age(last)
    };
    let regarding = if obj["involvedObject"].is_object() {
        &obj["involvedObject"]
    } else {
        &obj["regarding"]
    };
    let object = format!(
        "{}/{}",
        regarding["kind"].as_str().unwrap_or("").to_lowercase(),
        regarding["name"].as_str().unwrap_or("")
    );
    let source = match (
        obj["source"]["component"]
            .as_str()
            .or(obj["reportingController"].as_str()),
        obj["source"]["host"].as_str(),
    ) {
        (Some(c), Some(h)) => format!("{c}, {h}"),
        (Some(c), None) => c.to_owned(),
        _ => String::new(),
    };
    vec![
        json!(last_seen),
        json!(obj["type"].as_str().unwrap_or("")),
        json!(obj["reason"].as_str().unwrap_or("")),
        json!(object),
        json!(regarding["fieldPath"].as_str().unwrap_or("")),
        json!(source),
        json!(obj["message"].as_str().or(obj["note"].as_str()).unwrap_or("")),
        json!(human_age(first)),
        json!(count.to_string()),
        name,
    ]
}

/// One row's cells, in the order of `columns`.
pub(crate) fn cells(def: &ResourceDef, obj: &Value) -> Vec<Value> {
    let name = json!(meta::name(obj));
    let age = json!(human_age(str_field(obj, &["metadata", "creationTimestamp"])));
    let spec = &obj["spec"];
    let status = &obj["status"];
    match def.plural {
        "pods" => {
            let total = spec["containers"].as_array().map(Vec::len).unwrap_or(0);
            let statuses = status["containerStatuses"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let ready = statuses.iter().filter(|c| c["ready"] == true).count();
            let restarts: i64 = statuses.iter().filter_map(|c| c["restartCount"].as_i64()).sum();
            let gates = spec["readinessGates"].as_array().map(Vec::len).unwrap_or(0);
            vec![
                name,
                json!(format!("{ready}/{total}")),
                json!(pod_status_reason(obj)),
                json!(restarts.to_string()),
                age,
                json!(status["podIP"].as_str().unwrap_or("<none>")),
                json!(spec["nodeName"].as_str().unwrap_or("<none>")),
                json!(status["nominatedNodeName"].as_str().unwrap_or("<none>")),
                json!(if gates == 0 {
                    "<none>".to_owned()
                } else {
                    format!("0/{gates}")
                }),
            ]
        }
        "deployments" => {
            let desired = spec["replicas"].as_i64().unwrap_or(0);
            let (containers, images) = container_summary(&spec["template"]["spec"]);
            vec![
                name,
                json!(format!(
                    "{}/{desired}",
                    status["readyReplicas"].as_i64().unwrap_or(0)
                )),
                json!(status["updatedReplicas"].as_i64().unwrap_or(0)),
                json!(status["availableReplicas"].as_i64().unwrap_or(0)),
                age,
                json!(containers),
                json!(images),
                json!(selector_string(&spec["selector"])),
            ]
        }
        "replicasets" => {
            let (containers, images) = container_summary(&spec["template"]["spec"]);
            vec![
                name,
                json!(spec["replicas"].as_i64().unwrap_or(0)),
                json!(status["replicas"].as_i64().unwrap_or(0)),
                json!(status["readyReplicas"].as_i64().unwrap_or(0)),
                age,
                json!(containers),
                json!(images),
                json!(selector_string(&spec["selector"])),
            ]
        }
        "namespaces" => vec![name, json!(status["phase"].as_str().unwrap_or("")), age],
        "nodes" => {
            let ready = status["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == "Ready")
                .map(|c| {
                    if c["status"] == "True" {
                        "Ready"
                    } else {
                        "NotReady"
                    }
                })
                .unwrap_or("Unknown");
            let mut st = ready.to_owned();
            if spec["unschedulable"] == true {
                st.push_str(",SchedulingDisabled");
            }
            let roles: Vec<String> = meta::labels(obj)
                .keys()
                .filter_map(|k| k.strip_prefix("node-role.kubernetes.io/").map(str::to_owned))
                .collect();
            let addr = |t: &str| {
                status["addresses"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|a| a["type"] == t)
                    .and_then(|a| a["address"].as_str())
                    .unwrap_or("<none>")
                    .to_owned()
            };
            let info = &status["nodeInfo"];
            vec![
                name,
                json!(st),
                json!(if roles.is_empty() {
                    "<none>".to_owned()
                } else {
                    roles.join(",")
                }),
                age,
                json!(info["kubeletVersion"].as_str().unwrap_or("")),
                json!(addr("InternalIP")),
                json!(addr("ExternalIP")),
                json!(info["osImage"].as_str().unwrap_or("<unknown>")),
                json!(info["kernelVersion"].as_str().unwrap_or("<unknown>")),
                json!(info["containerRuntimeVersion"].as_str().unwrap_or("<unknown>")),
            ]
        }
        "certificatesigningrequests" => {
            let mut conds: Vec<&str> = status["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["type"].as_str())
                .collect();
            if status["certificate"].as_str().is_some_and(|c| !c.is_empty()) {
                conds.push("Issued");
            }
            let duration = spec["expirationSeconds"]
                .as_i64()
                .map(meta::human_duration)
                .unwrap_or_else(|| "<none>".into());
            vec![
                name,
                age,
                json!(spec["signerName"].as_str().unwrap_or("")),
                json!(spec["username"].as_str().unwrap_or("")),
                json!(duration),
                json!(if conds.is_empty() {
                    "Pending".to_owned()
                } else {
                    conds.join(",")
                }),
            ]
        }
        "roles" | "clusterroles" => vec![
            name,
            json!(str_field(obj, &["metadata", "creationTimestamp"]).unwrap_or("")),
        ],
        "rolebindings" | "clusterrolebindings" => {
            let subjects = |kind: &str| {
                let names: Vec<String> = obj["subjects"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|s| s["kind"] == kind)
                    .map(|s| match (kind, s["namespace"].as_str()) {
                        ("ServiceAccount", Some(ns)) => format!("{ns}/{}", s["name"].as_str().unwrap_or("")),
                        _ => s["name"].as_str().unwrap_or("").to_owned(),
                    })
                    .collect();
                json!(names.join(", "))
            };
            vec![
                name,
                json!(format!(
                    "{}/{}",
                    obj["roleRef"]["kind"].as_str().unwrap_or(""),
                    obj["roleRef"]["name"].as_str().unwrap_or("")
                )),
                age,
                subjects("User"),
                subjects("Group"),
                subjects("ServiceAccount"),
            ]
        }
        "configmaps" => vec![name, json!(count(&obj["data"]) + count(&obj["binaryData"])), age],
        "mutatingwebhookconfigurations" | "validatingwebhookconfigurations" => {
            vec![name, json!(obj["webhooks"].as_array().map_or(0, Vec::len)), age]
        }
        "events" => event_cells(obj, name),
        "secrets" => vec![
            name,
            json!(obj["type"].as_str().unwrap_or("")),
            json!(count(&obj["data"])),
            age,
        ],
        "serviceaccounts" => vec![
            name,
            json!(obj["secrets"].as_array().map(Vec::len).unwrap_or(0)),
            age,
        ],
        "endpoints" => {
            // ip:port for every address and port, the first three shown (upstream's printer).
            let mut all = Vec::new();
            for subset in obj["subsets"].as_array().into_iter().flatten() {
                let ips: Vec<&str> = subset["addresses"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|a| a["ip"].as_str().unwrap_or(""))
                    .collect();
                match subset["ports"].as_array().filter(|p| !p.is_empty()) {
                    None => all.extend(ips.iter().map(|ip| ip.to_string())),
                    Some(ports) => {
                        for p in ports {
                            all.extend(ips.iter().map(|ip| format!("{ip}:{}", p["port"])));
                        }
                    }
                }
            }
            vec![name, json!(first_three(&all)), age]
        }
        "endpointslices" => {
            let ports: Vec<String> = obj["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| p["port"].as_i64().map_or("<unset>".to_owned(), |n| n.to_string()))
                .collect();
            let addresses: Vec<String> = obj["endpoints"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|e| e["addresses"].as_array().into_iter().flatten())
                .filter_map(|a| a.as_str().map(String::from))
                .collect();
            vec![
                name,
                json!(obj["addressType"].as_str().unwrap_or("")),
                json!(if ports.is_empty() {
                    "<unset>".to_owned()
                } else {
                    ports.join(",")
                }),
                json!(if addresses.is_empty() {
                    "<unset>".to_owned()
                } else {
                    first_three(&addresses)
                }),
                age,
            ]
        }
        "services" => {
            let ports: Vec<String> = spec["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| {
                    let mut s = p["port"].to_string();
                    if let Some(np) = p["nodePort"].as_i64().filter(|n| *n != 0) {
                        s.push_str(&format!(":{np}"));
                    }
                    format!("{s}/{}", p["protocol"].as_str().unwrap_or("TCP"))
                })
                .collect();
            let sel = meta::string_map(&spec["selector"]);
            let sel: Vec<String> = sel.iter().map(|(k, v)| format!("{k}={v}")).collect();
            vec![
                name,
                json!(spec["type"].as_str().unwrap_or("ClusterIP")),
                json!(spec["clusterIP"].as_str().unwrap_or("<none>")),
                json!("<none>"),
                json!(if ports.is_empty() {
                    "<none>".to_owned()
                } else {
                    ports.join(",")
                }),
                age,
                json!(if sel.is_empty() {
                    "<none>".to_owned()
                } else {
                    sel.join(",")
                }),
            ]
        }
        "resourcequotas" => {
            let (requests, limits) = quota_cells(obj);
            vec![name, age, json!(requests), json!(limits)]
        }
        "limitranges" => vec![name, obj["metadata"]["creationTimestamp"].clone()],
        _ => vec![name, age],
    }
}

/// Today's per-resource functions as one strategy per resource, while they move into
/// modules of their own.
pub(crate) struct Legacy(pub &'static ResourceDef);

struct ReleaseAllocations(Vec<(super::allocator::Pool, String)>);

#[async_trait::async_trait]
impl super::strategy::Finish for ReleaseAllocations {
    async fn finish(self: Box<Self>, ctx: &crate::handler::Ctx, stored: bool) {
        if !stored {
            super::services::release(ctx, &self.0).await;
        }
    }
}

#[async_trait::async_trait]
impl Strategy for Legacy {
    fn tracks_generation(&self) -> bool {
        tracks_generation(self.0)
    }

    fn status_subresource(&self) -> bool {
        has_status_subresource(self.0)
    }

    fn prepare_for_create(&self, u: &crate::authn::UserInfo, obj: &mut Value) {
        prepare_for_create(self.0, obj);
        if self.0.plural == "certificatesigningrequests" {
            // Who asked is recorded by the server, never taken from the client (upstream).
            obj["spec"]["username"] = json!(u.name);
            obj["spec"]["groups"] = json!(u.groups);
            obj["spec"]["uid"] = if u.uid.is_empty() {
                Value::Null
            } else {
                json!(u.uid)
            };
            obj["spec"]["extra"] = if u.extra.is_empty() {
                Value::Null
            } else {
                json!(u.extra)
            };
            for k in ["uid", "extra"] {
                if obj["spec"][k].is_null() {
                    if let Some(spec) = obj["spec"].as_object_mut() {
                        spec.remove(k);
                    }
                }
            }
        }
    }

    fn prepare_for_update(&self, obj: &mut Value, old: &Value) -> Result<(), crate::status::ApiError> {
        prepare_for_update(self.0, obj, old);
        if self.0.plural == "services" {
            super::services::keep_allocations(obj, old)?;
        }
        Ok(())
    }

    fn default(&self, obj: &mut Value) {
        default(self.0, obj);
    }

    fn validate_name(&self, name: &str) -> Vec<String> {
        validate_name(self.0, name)
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        validate(self.0, obj)
    }

    fn validate_update(&self, obj: &Value, old: &Value) -> Vec<FieldError> {
        validate_update(self.0, obj, old)
    }

    fn validate_main_update(&self, obj: &Value, old: &Value) -> Vec<FieldError> {
        if self.0.group.is_empty() && self.0.plural == "pods" {
            validate_pod_update(obj, old)
        } else {
            Vec::new()
        }
    }

    async fn begin_create(
        &self,
        ctx: &crate::handler::Ctx,
        obj: &mut Value,
    ) -> Result<Option<Box<dyn super::strategy::Finish>>, crate::status::ApiError> {
        crate::rbac::escalation::check(ctx, self.0, meta::namespace(obj), obj, None).await?;
        if self.0.plural == "services" {
            let allocations = super::services::allocate(ctx, obj).await?;
            return Ok(Some(Box::new(ReleaseAllocations(allocations))));
        }
        Ok(None)
    }

    async fn begin_update(
        &self,
        ctx: &crate::handler::Ctx,
        obj: &Value,
        old: &Value,
    ) -> Result<(), crate::status::ApiError> {
        crate::rbac::escalation::check(ctx, self.0, meta::namespace(obj), obj, Some(old)).await
    }

    fn holds_deletion(&self, obj: &Value) -> bool {
        self.0.plural == "namespaces"
            && obj["spec"]["finalizers"]
                .as_array()
                .is_some_and(|f| !f.is_empty())
    }

    fn default_grace_period(&self, obj: &Value) -> Option<i64> {
        (self.0.plural == "pods").then(|| {
            obj["spec"]["terminationGracePeriodSeconds"]
                .as_i64()
                .unwrap_or(30)
        })
    }

    fn is_graceful_delete(&self, obj: &Value, grace: i64) -> bool {
        self.0.plural == "pods" && obj["spec"]["nodeName"].is_string() && grace > 0
    }

    fn prepare_for_delete(&self, obj: &mut Value) {
        if self.0.plural == "namespaces" {
            obj["status"]["phase"] = json!("Terminating");
        }
    }

    async fn after_delete(&self, ctx: &crate::handler::Ctx, old: &Value) {
        if self.0.plural == "services" {
            super::services::release(ctx, &super::services::allocations(ctx, old)).await;
        }
    }

    fn fields(&self, obj: &Value, f: &mut BTreeMap<String, String>) {
        fields(self.0, obj, f)
    }

    fn columns(&self) -> Vec<Column> {
        columns(self.0)
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        cells(self.0, obj)
    }

    fn connect(&self, sub: &str) -> Option<super::strategy::Connect> {
        use super::strategy::Connect;
        match (self.0.plural, sub) {
            ("pods", "binding") => Some(Connect::Binding),
            ("pods", "log") => Some(Connect::PodLog),
            ("pods", "proxy") => Some(Connect::PodProxy),
            ("nodes", "proxy") => Some(Connect::NodeProxy),
            ("services", "proxy") => Some(Connect::ServiceProxy),
            ("serviceaccounts", "token") => Some(Connect::Token),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::strategy::validate;
    use super::*;

    fn def(plural: &str) -> &'static ResourceDef {
        r8s_api::catalogue()
            .iter()
            .find(|d| d.plural == plural && d.group != "events.k8s.io")
            .unwrap()
    }

    #[test]
    fn secret_string_data_becomes_data() {
        let mut s = json!({"data": {"a": "eA==", "b": "eA=="}, "stringData": {"b": "yy", "c": "z"}});
        default(def("secrets"), &mut s);
        assert_eq!(
            s,
            json!({"type": "Opaque", "data": {"a": "eA==", "b": "eXk=", "c": "eg=="}})
        );
    }

    #[test]
    fn pod_defaults_follow_upstream() {
        let mut pod = json!({"spec": {"containers": [
            {"name": "a", "image": "nginx"},
            {"name": "b", "image": "nginx:1.25"},
            {"name": "c", "image": "reg:5000/x:latest", "ports": [{"containerPort": 80}]},
        ]}});
        default(def("pods"), &mut pod);
        let s = &pod["spec"];
        assert_eq!(s["restartPolicy"], "Always");
        assert_eq!(s["dnsPolicy"], "ClusterFirst");
        assert_eq!(s["terminationGracePeriodSeconds"], 30);
        assert_eq!(s["schedulerName"], "default-scheduler");
        assert_eq!(s["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(s["containers"][1]["imagePullPolicy"], "IfNotPresent");
        assert_eq!(s["containers"][2]["imagePullPolicy"], "Always");
        assert_eq!(s["containers"][2]["ports"][0]["protocol"], "TCP");
    }

    #[test]
    fn the_deprecated_service_account_alias_names_the_account_and_reads_as_the_name() {
        // Only the alias: it names the account.
        let mut pod = json!({"spec": {"serviceAccount": "builder", "containers": []}});
        default(def("pods"), &mut pod);
        assert_eq!(pod["spec"]["serviceAccountName"], "builder");
        assert_eq!(pod["spec"]["serviceAccount"], "builder");
        // Both, differing: the name wins and the alias follows it.
        let mut pod = json!({"spec": {"serviceAccountName": "a", "serviceAccount": "b"}});
        default(def("pods"), &mut pod);
        assert_eq!(
            (&pod["spec"]["serviceAccountName"], &pod["spec"]["serviceAccount"]),
            (&json!("a"), &json!("a"))
        );
        // Neither: no alias appears; a name chosen later (by admission) gets its alias when the
        // pod is prepared for storage.
        let mut pod = json!({"spec": {"containers": []}});
        default(def("pods"), &mut pod);
        assert!(pod["spec"].get("serviceAccount").is_none());
        pod["spec"]["serviceAccountName"] = json!("default");
        prepare_for_create(def("pods"), &mut pod);
        assert_eq!(pod["spec"]["serviceAccount"], "default");
        // Templates of workloads too.
        let mut d = json!({"spec": {"template": {"spec": {"serviceAccountName": "web", "containers": []}}}});
        default(def("deployments"), &mut d);
        assert_eq!(d["spec"]["template"]["spec"]["serviceAccount"], "web");
    }

    #[test]
    fn namespaces_are_labelled_with_their_name_whatever_the_client_sent() {
        let mut ns = json!({"metadata": {"name": "team", "labels": {"kubernetes.io/metadata.name": "other", "a": "b"}}});
        default(def("namespaces"), &mut ns);
        assert_eq!(
            ns["metadata"]["labels"],
            json!({"kubernetes.io/metadata.name": "team", "a": "b"})
        );
        // A generated name is labelled once it is known.
        let mut ns = json!({"metadata": {"generateName": "team-"}});
        default(def("namespaces"), &mut ns);
        assert!(ns["metadata"]["labels"].is_null());
        ns["metadata"]["name"] = json!("team-x1y2z");
        prepare_for_create(def("namespaces"), &mut ns);
        assert_eq!(
            ns["metadata"]["labels"],
            json!({"kubernetes.io/metadata.name": "team-x1y2z"})
        );
    }

    #[test]
    fn limit_range_container_items_default_from_max_and_min() {
        let mut lr = json!({"spec": {"limits": [
            {"type": "Container", "max": {"cpu": "800m", "memory": "1Gi"}, "min": {"cpu": "200m", "ephemeral-storage": "1Gi"},
             "default": {"memory": "512Mi"}},
            {"type": "Container", "min": {"cpu": "100m"}},
            {"type": "Container"},
            {"type": "Pod", "max": {"cpu": "2"}},
        ]}});
        default(def("limitranges"), &mut lr);
        let items = &lr["spec"]["limits"];
        // The limit given stays; the max fills the rest; requests follow the limits, then the min.
        assert_eq!(items[0]["default"], json!({"memory": "512Mi", "cpu": "800m"}));
        assert_eq!(
            items[0]["defaultRequest"],
            json!({"memory": "512Mi", "cpu": "800m", "ephemeral-storage": "1Gi"})
        );
        assert!(items[1].get("default").is_none(), "no max, no default limit");
        assert_eq!(items[1]["defaultRequest"], json!({"cpu": "100m"}));
        assert_eq!(items[2], json!({"type": "Container"}), "nothing to default from");
        assert_eq!(
            items[3],
            json!({"type": "Pod", "max": {"cpu": "2"}}),
            "only Container items"
        );
        // No spec: nothing is added.
        let mut empty = json!({"metadata": {"name": "x"}});
        default(def("limitranges"), &mut empty);
        assert_eq!(empty, json!({"metadata": {"name": "x"}}));
    }

    #[test]
    fn services_endpoints_and_nodes_get_upstreams_defaults() {
        let mut svc =
            json!({"spec": {"type": "LoadBalancer", "sessionAffinity": "ClientIP", "ports": [{"port": 80}]}});
        default(def("services"), &mut svc);
        assert_eq!(
            svc["spec"]["sessionAffinityConfig"],
            json!({"clientIP": {"timeoutSeconds": 10800}})
        );
        assert_eq!(svc["spec"]["allocateLoadBalancerNodePorts"], true);
        let mut svc = json!({"spec": {"sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 5}}}});
        default(def("services"), &mut svc);
        assert!(
            svc["spec"].get("sessionAffinityConfig").is_none(),
            "no affinity, no config"
        );
        assert!(svc["spec"].get("allocateLoadBalancerNodePorts").is_none());

        let mut ep = json!({"subsets": [{"ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}]}]});
        default(def("endpoints"), &mut ep);
        assert_eq!(ep["subsets"][0]["ports"][0]["protocol"], "TCP");
        assert_eq!(ep["subsets"][0]["ports"][1]["protocol"], "UDP");
        let mut bare = json!({"metadata": {"name": "e"}});
        default(def("endpoints"), &mut bare);
        assert_eq!(bare, json!({"metadata": {"name": "e"}}));

        let mut node = json!({"status": {"capacity": {"cpu": "2"}}});
        default(def("nodes"), &mut node);
        assert_eq!(node["status"]["allocatable"], json!({"cpu": "2"}));
    }

    #[test]
    fn immutable_fields_are_refused_in_upstreams_words() {
        let text = |d: &str, new: Value, old: Value| -> Vec<String> {
            validate_update(def(d), &new, &old)
                .iter()
                .map(|e| e.to_string())
                .collect()
        };
        // ConfigMaps and Secrets marked immutable keep their data and the mark.
        let cm = json!({"immutable": true, "data": {"a": "1"}});
        assert_eq!(
            text("configmaps", json!({"data": {"a": "2"}}), cm.clone()),
            [
                "immutable: Forbidden: field is immutable when `immutable` is set",
                "data: Forbidden: field is immutable when `immutable` is set"
            ]
        );
        let relabelled = json!({"metadata": {"labels": {"x": "y"}}, "immutable": true, "data": {"a": "1"}});
        assert!(text("configmaps", relabelled, cm).is_empty());
        assert!(text(
            "configmaps",
            json!({"data": {"a": "2"}}),
            json!({"data": {"a": "1"}})
        )
        .is_empty());
        assert!(
            text(
                "configmaps",
                json!({"data": {}, "immutable": true}),
                json!({"immutable": true})
            )
            .is_empty(),
            "absent and empty data are the same"
        );
        assert_eq!(
            text(
                "secrets",
                json!({"type": "kubernetes.io/tls"}),
                json!({"type": "Opaque"})
            ),
            ["type: Invalid value: \"kubernetes.io/tls\": field is immutable"]
        );
        // A workload's selector.
        let d = |app: &str| json!({"spec": {"selector": {"matchLabels": {"app": app}}}});
        assert_eq!(
            text("deployments", d("web2"), d("web")),
            [
                r#"spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{"app":"web2"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable"#
            ]
        );
        assert_eq!(text("replicasets", d("b"), d("a")).len(), 1);
        let with_empty =
            json!({"spec": {"selector": {"matchLabels": {"app": "web"}, "matchExpressions": []}}});
        assert!(
            text("deployments", with_empty, d("web")).is_empty(),
            "nil and empty are equal"
        );
        // PriorityClasses and RoleBindings.
        assert_eq!(
            text(
                "priorityclasses",
                json!({"value": 2, "preemptionPolicy": "Never"}),
                json!({"value": 1, "preemptionPolicy": "PreemptLowerPriority"})
            ),
            [
                "value: Forbidden: may not be changed in an update.",
                "preemptionPolicy: Invalid value: \"Never\": field is immutable"
            ]
        );
        let rb = |name: &str| json!({"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}});
        assert_eq!(
            text("rolebindings", rb("edit"), rb("view")),
            [
                r#"roleRef: Invalid value: rbac.RoleRef{APIGroup:"rbac.authorization.k8s.io", Kind:"ClusterRole", Name:"edit"}: cannot change roleRef"#
            ]
        );
    }

    #[test]
    fn workloads_must_restart_always_and_be_able_to_roll() {
        let d = |extra: Value| {
            let mut d = json!({"metadata": {"name": "web"}, "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}});
            merge(&mut d, &extra);
            default(def("deployments"), &mut d);
            validate(def("deployments"), &d)
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        };
        fn merge(a: &mut Value, b: &Value) {
            match (a, b) {
                (Value::Object(a), Value::Object(b)) => {
                    for (k, v) in b {
                        merge(a.entry(k.clone()).or_insert(Value::Null), v);
                    }
                }
                (a, b) => *a = b.clone(),
            }
        }
        assert_eq!(d(json!({})), Vec::<String>::new());
        assert_eq!(
            d(json!({"spec": {"template": {"spec": {"restartPolicy": "Never", "activeDeadlineSeconds": 5}}}})),
            [
                "spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\"",
                "spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in ReplicaSet is not Supported",
            ]
        );
        assert_eq!(
            d(json!({"spec": {"strategy": {"rollingUpdate": {"maxUnavailable": 0, "maxSurge": "0%"}}}})),
            ["spec.strategy.rollingUpdate.maxUnavailable: Invalid value: intstr.IntOrString{Type:0, IntVal:0, StrVal:\"\"}: may not be 0 when `maxSurge` is 0"]
        );
        assert_eq!(
            d(json!({"spec": {"strategy": {"rollingUpdate": {"maxUnavailable": "150%", "maxSurge": "half"}}}})),
            [
                "spec.strategy.rollingUpdate.maxSurge: Invalid value: \"half\": a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
                "spec.strategy.rollingUpdate.maxUnavailable: Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:\"150%\"}: must not be greater than 100%",
            ]
        );
        assert_eq!(
            d(json!({"spec": {"strategy": {"type": "Recreate", "rollingUpdate": {"maxSurge": 1}}}})),
            ["spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` is 'Recreate'"]
        );
        assert_eq!(
            d(json!({"spec": {"minReadySeconds": 30, "progressDeadlineSeconds": 20}})),
            ["spec.progressDeadlineSeconds: Invalid value: 20: must be greater than minReadySeconds"]
        );
    }

    #[test]
    fn data_and_annotations_have_upstreams_size_limits() {
        let big = "x".repeat(MAX_DATA_BYTES);
        let errs = |d: &str, obj: Value| {
            validate(def(d), &obj)
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            errs(
                "configmaps",
                json!({"metadata": {"name": "c"}, "data": {"k": big}})
            ),
            ["[]: Too long: may not be more than 1048576 bytes"]
        );
        assert!(errs(
            "configmaps",
            json!({"metadata": {"name": "c"}, "data": {"k": "x".repeat(1000)}})
        )
        .is_empty());
        // A Secret's data counts decoded (base64 is 4 bytes for every 3).
        let encoded = "eHh4".repeat(MAX_DATA_BYTES / 3 + 1);
        assert_eq!(
            errs(
                "secrets",
                json!({"metadata": {"name": "s"}, "data": {"k": encoded}})
            ),
            ["data: Too long: may not be more than 1048576 bytes"]
        );
        let notes = "n".repeat(MAX_ANNOTATIONS_BYTES);
        assert_eq!(
            errs(
                "configmaps",
                json!({"metadata": {"name": "c", "annotations": {"a": notes}}})
            ),
            ["metadata.annotations: Too long: may not be more than 262144 bytes"]
        );
    }

    #[test]
    fn a_pod_stored_without_the_alias_may_still_be_updated() {
        let old =
            json!({"spec": {"serviceAccountName": "default", "containers": [{"name": "c", "image": "a"}]}});
        let mut new = old.clone();
        new["spec"]["containers"][0]["image"] = json!("b");
        default(def("pods"), &mut new);
        assert_eq!(new["spec"]["serviceAccount"], "default");
        let errs = validate_pod_update(&new, &{
            let mut o = old.clone();
            default(def("pods"), &mut o);
            o["spec"].as_object_mut().unwrap().remove("serviceAccount");
            o
        });
        assert!(errs.is_empty(), "{errs:?}");
        // Changing the account is still refused.
        let mut other = new.clone();
        other["spec"]["serviceAccountName"] = json!("other");
        pod_defaults::service_account_alias(&mut other["spec"]);
        assert!(!validate_pod_update(&other, &new).is_empty());
    }

    #[test]
    fn deployment_defaults_and_validation() {
        let mut d = json!({"metadata": {"name": "web"}, "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}}
        }});
        default(def("deployments"), &mut d);
        assert_eq!(d["spec"]["replicas"], 1);
        assert_eq!(d["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%");
        assert_eq!(d["spec"]["revisionHistoryLimit"], 10);
        assert_eq!(d["spec"]["progressDeadlineSeconds"], 600);
        assert!(validate(def("deployments"), &d).is_empty());
        d["spec"]["template"]["metadata"]["labels"]["app"] = json!("other");
        let errs = validate(def("deployments"), &d);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "spec.template.metadata.labels");
    }

    #[test]
    fn qos_classes() {
        assert_eq!(qos_class(&json!({"containers": [{"name": "a"}]})), "BestEffort");
        let g = json!({"containers": [{"resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}}}]});
        assert_eq!(qos_class(&g), "Guaranteed");
        let b = json!({"containers": [{"resources": {"requests": {"cpu": "1"}}}]});
        assert_eq!(qos_class(&b), "Burstable");
        let same = json!({"containers": [{"resources": {"limits": {"cpu": "0.5", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "1024Mi"}}}]});
        assert_eq!(qos_class(&same), "Guaranteed");
    }

    #[test]
    fn pods_request_what_they_limit_by_default() {
        let mut pod = json!({"spec": {
            "containers": [
                {"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "100m"}}},
                {"name": "b"}
            ],
            "initContainers": [{"name": "i", "resources": {"limits": {"memory": "64Mi"}}}]
        }});
        default(def("pods"), &mut pod);
        assert_eq!(
            pod["spec"]["containers"][0]["resources"]["requests"],
            json!({"cpu": "100m", "memory": "1Gi"})
        );
        assert_eq!(pod["spec"]["containers"][1]["resources"], json!({}));
        assert_eq!(
            pod["spec"]["initContainers"][0]["resources"]["requests"],
            json!({"memory": "64Mi"})
        );
        // Workload templates are left as written.
        let mut d = json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": "1"}}}]}}}});
        default(def("deployments"), &mut d);
        assert!(d["spec"]["template"]["spec"]["containers"][0]["resources"]
            .get("requests")
            .is_none());
    }

    #[test]
    fn invalid_names_and_labels_are_reported_per_field() {
        let obj = json!({"metadata": {"name": "Bad_Name", "labels": {"ok": "yes", "bad key": "v"}}});
        let errs = validate(def("configmaps"), &obj);
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, vec!["metadata.name", "metadata.labels"]);
        assert!(errs[0]
            .message
            .starts_with("Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain"));
    }

    #[test]
    fn quota_rows_show_used_over_hard() {
        let q = json!({"metadata": {"name": "q"},
            "spec": {"hard": {"pods": "2", "limits.cpu": "2", "requests.memory": "1Gi"}},
            "status": {"hard": {"pods": "2", "limits.cpu": "2", "requests.memory": "1Gi"},
                       "used": {"pods": "2", "limits.cpu": "500m"}}});
        let cells = cells(def("resourcequotas"), &q);
        assert_eq!(cells[2], "pods: 2/2, requests.memory: 0/1Gi");
        assert_eq!(cells[3], "limits.cpu: 500m/2");
        assert_eq!(columns(def("resourcequotas")).len(), cells.len());
    }
}

#[cfg(test)]
mod event_table_tests {
    use super::*;

    #[test]
    fn event_rows_read_both_event_apis() {
        let core = json!({
            "metadata": {"name": "web.1", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "involvedObject": {"kind": "Deployment", "name": "web"},
            "type": "Normal", "reason": "ScalingReplicaSet",
            "message": "Scaled up replica set web-abc from 0 to 3",
            "source": {"component": "deployment-controller"},
            "count": 1,
        });
        let cells = event_cells(&core, json!("web.1"));
        assert_eq!(cells[1], "Normal");
        assert_eq!(cells[2], "ScalingReplicaSet");
        assert_eq!(cells[3], "deployment/web");
        assert_eq!(cells[5], "deployment-controller");
        assert_eq!(cells[6], "Scaled up replica set web-abc from 0 to 3");
        assert_eq!(cells.len(), 10);
        let new = json!({
            "metadata": {"name": "p.2", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "regarding": {"kind": "Pod", "name": "p"},
            "type": "Warning", "reason": "Failed", "note": "boom",
            "reportingController": "kubelet",
            "series": {"count": 3, "lastObservedTime": "2020-01-01T00:00:00.000000Z"},
        });
        let cells = event_cells(&new, json!("p.2"));
        assert_eq!(cells[3], "pod/p");
        assert_eq!(cells[6], "boom");
        assert_eq!(cells[8], "3");
        assert!(cells[0].as_str().unwrap().contains("(x3 over "), "{}", cells[0]);
    }
}

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
fn json_diff(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
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
