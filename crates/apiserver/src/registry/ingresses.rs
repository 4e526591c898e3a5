//! Ingresses and IngressClasses (networking.k8s.io/v1; upstream's
//! `pkg/registry/networking/{ingress,ingressclass}`): validation in upstream's words (rules,
//! hosts and wildcards, paths by path type, service or resource backends, TLS, class names,
//! the class's controller and parameters), status as a subresource, and the tables `kubectl
//! get` prints. r8s serves them for the clients, charts and controllers that use them; it runs
//! no ingress controller of its own (k3s ships Traefik as an add-on), so nothing routes them
//! until one is installed.

use r8s_api::validation::{dns1035_label, dns1123_subdomain, wildcard_dns1123_subdomain, FieldError};
use serde_json::{json, Value};

use super::pods::validation::port_name;
use super::strategy::{age_cell, col, name_cell, Column, Strategy, AGE, NAME};
use crate::authn::UserInfo;
use crate::status::ApiError;

/// The annotation older clients name a class with.
pub(crate) const CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";

/// Sequences and endings an Exact or Prefix path may not have.
const INVALID_SEQUENCES: &[&str] = &["//", "/./", "/../", "%2f", "%2F"];
const INVALID_SUFFIXES: &[&str] = &["/..", "/."];
const PATH_TYPES: &[&str] = &["Exact", "ImplementationSpecific", "Prefix"];

pub(crate) struct Ingresses;

/// Upstream's `validateIngressBackend`.
fn validate_backend(errs: &mut Vec<FieldError>, path: &str, b: &Value) {
    let resource = !b["resource"].is_null();
    let service = !b["service"].is_null();
    match (resource, service) {
        (true, true) => errs.push(FieldError::invalid(
            path,
            "",
            "cannot set both resource and service backends",
        )),
        (true, false) => validate_typed_reference(errs, &format!("{path}.resource"), &b["resource"]),
        (false, true) => {
            let svc = &b["service"];
            match svc["name"].as_str().unwrap_or_default() {
                "" => errs.push(FieldError::required(format!("{path}.service.name"), "")),
                name => {
                    for m in dns1035_label(name) {
                        errs.push(FieldError::invalid(format!("{path}.service.name"), name, m));
                    }
                }
            }
            let port_name_given = svc["port"]["name"].as_str().unwrap_or_default();
            let number = svc["port"]["number"].as_i64().unwrap_or(0);
            match (!port_name_given.is_empty(), number != 0) {
                (true, true) => errs.push(FieldError::invalid(
                    path,
                    "",
                    "cannot set both port name & port number",
                )),
                (true, false) => {
                    for m in port_name(port_name_given) {
                        errs.push(FieldError::invalid(
                            format!("{path}.service.port.name"),
                            port_name_given,
                            m,
                        ));
                    }
                }
                (false, true) => {
                    if !(1..=65535).contains(&number) {
                        errs.push(FieldError::invalid_raw(
                            format!("{path}.service.port.number"),
                            &number.to_string(),
                            "must be between 1 and 65535, inclusive",
                        ));
                    }
                }
                (false, false) => errs.push(FieldError::required(path, "port name or number is required")),
            }
        }
        (false, false) => errs.push(FieldError::invalid(
            path,
            "",
            "resource or service backend is required",
        )),
    }
}

/// A path segment name (upstream's `IsValidPathSegmentName`).
fn path_segment(s: &str) -> Vec<String> {
    if s == "." || s == ".." {
        return vec![format!("may not be '{s}'")];
    }
    ["/", "%"]
        .iter()
        .filter(|c| s.contains(**c))
        .map(|c| format!("may not contain '{c}'"))
        .collect()
}

/// Upstream's `validateIngressTypedLocalObjectReference`.
fn validate_typed_reference(errs: &mut Vec<FieldError>, path: &str, r: &Value) {
    if let Some(group) = r["apiGroup"].as_str() {
        for m in dns1123_subdomain(group) {
            errs.push(FieldError::invalid(format!("{path}.apiGroup"), group, m));
        }
    }
    for (key, what) in [("kind", "kind is required"), ("name", "name is required")] {
        match r[key].as_str().unwrap_or_default() {
            "" => errs.push(FieldError::required(format!("{path}.{key}"), what)),
            v => {
                for m in path_segment(v) {
                    errs.push(FieldError::invalid(format!("{path}.{key}"), v, m));
                }
            }
        }
    }
}

fn validate_host(errs: &mut Vec<FieldError>, path: &str, host: &str) -> bool {
    if host.contains('*') {
        for m in wildcard_dns1123_subdomain(host) {
            errs.push(FieldError::invalid(path, host, m));
        }
        true
    } else {
        for m in dns1123_subdomain(host) {
            errs.push(FieldError::invalid(path, host, m));
        }
        false
    }
}

fn validate_http_path(errs: &mut Vec<FieldError>, path: &str, p: &Value) {
    let Some(kind) = p["pathType"].as_str() else {
        errs.push(FieldError::required(
            format!("{path}.pathType"),
            "pathType must be specified",
        ));
        return;
    };
    let value = p["path"].as_str().unwrap_or_default();
    match kind {
        "Exact" | "Prefix" => {
            if !value.starts_with('/') {
                errs.push(FieldError::invalid(
                    format!("{path}.path"),
                    value,
                    "must be an absolute path",
                ));
            }
            if !value.is_empty() {
                for seq in INVALID_SEQUENCES.iter().filter(|s| value.contains(**s)) {
                    errs.push(FieldError::invalid(
                        format!("{path}.path"),
                        value,
                        format!("must not contain '{seq}'"),
                    ));
                }
                for suffix in INVALID_SUFFIXES.iter().filter(|s| value.ends_with(**s)) {
                    errs.push(FieldError::invalid(
                        format!("{path}.path"),
                        value,
                        format!("cannot end with '{suffix}'"),
                    ));
                }
            }
        }
        "ImplementationSpecific" => {
            if !value.is_empty() && !value.starts_with('/') {
                errs.push(FieldError::invalid(
                    format!("{path}.path"),
                    value,
                    "must be an absolute path",
                ));
            }
        }
        other => errs.push(FieldError::not_supported(
            format!("{path}.pathType"),
            other,
            PATH_TYPES,
        )),
    }
    validate_backend(errs, &format!("{path}.backend"), &p["backend"]);
}

/// Upstream's `ValidateIngressSpec`.
fn validate_spec(errs: &mut Vec<FieldError>, spec: &Value) {
    let rules = spec["rules"].as_array().map(Vec::as_slice).unwrap_or_default();
    if rules.is_empty() && spec["defaultBackend"].is_null() {
        errs.push(FieldError::invalid_raw(
            "spec",
            "[]networking.IngressRule(nil)",
            "either `defaultBackend` or `rules` must be specified",
        ));
    }
    if !spec["defaultBackend"].is_null() {
        validate_backend(errs, "spec.defaultBackend", &spec["defaultBackend"]);
    }
    for (i, rule) in rules.iter().enumerate() {
        let path = format!("spec.rules[{i}]");
        if let Some(host) = rule["host"].as_str().filter(|h| !h.is_empty()) {
            if host.parse::<std::net::IpAddr>().is_ok() {
                errs.push(FieldError::invalid(
                    format!("{path}.host"),
                    host,
                    "must be a DNS name, not an IP address",
                ));
            }
            validate_host(errs, &format!("{path}.host"), host);
        }
        if !rule["http"].is_null() {
            let paths = rule["http"]["paths"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default();
            if paths.is_empty() {
                errs.push(FieldError::required(format!("{path}.http.paths"), ""));
            }
            for (j, p) in paths.iter().enumerate() {
                validate_http_path(errs, &format!("{path}.http.paths[{j}]"), p);
            }
        }
    }
    for (i, tls) in spec["tls"].as_array().into_iter().flatten().enumerate() {
        for (j, host) in tls["hosts"].as_array().into_iter().flatten().enumerate() {
            let host = host.as_str().unwrap_or_default();
            validate_host(errs, &format!("spec.tls[{i}].hosts[{j}]"), host);
        }
        if let Some(secret) = tls["secretName"].as_str().filter(|s| !s.is_empty()) {
            for m in dns1123_subdomain(secret) {
                errs.push(FieldError::invalid(
                    format!("spec.tls[{i}].secretName"),
                    secret,
                    m,
                ));
            }
        }
    }
    if let Some(class) = spec["ingressClassName"].as_str() {
        for m in dns1123_subdomain(class) {
            errs.push(FieldError::invalid("spec.ingressClassName", class, m));
        }
    }
}

/// kubectl's HOSTS column: up to three hosts, `*` when no rule names one.
fn format_hosts(rules: &[Value]) -> String {
    const MAX: usize = 3;
    let mut list: Vec<&str> = Vec::new();
    let mut more = false;
    for rule in rules {
        if list.len() == MAX {
            more = true;
        }
        if let Some(h) = rule["host"].as_str().filter(|h| !h.is_empty()) {
            if !more {
                list.push(h);
            }
        }
    }
    if list.is_empty() {
        return "*".into();
    }
    let joined = list.join(",");
    if more {
        format!("{joined} + {} more...", rules.len() - MAX)
    } else {
        joined
    }
}

/// The ADDRESS column: the load balancer's addresses, cut to 16 characters in the narrow view
/// (upstream's `ingressLoadBalancerStatusStringer` with `loadBalancerWidth`).
fn format_addresses(status: &Value, wide: bool) -> String {
    // A sorted set, as upstream's stringer builds it.
    let addresses: std::collections::BTreeSet<&str> = status["loadBalancer"]["ingress"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| {
            i["ip"]
                .as_str()
                .filter(|s| !s.is_empty())
                .or(i["hostname"].as_str().filter(|s| !s.is_empty()))
        })
        .collect();
    let joined = addresses.into_iter().collect::<Vec<_>>().join(",");
    if !wide && joined.len() > 16 {
        format!("{}...", &joined[..13])
    } else {
        joined
    }
}

impl Strategy for Ingresses {
    fn tracks_generation(&self) -> bool {
        true
    }

    fn status_subresource(&self) -> bool {
        true
    }

    fn validate_name(&self, name: &str) -> Vec<String> {
        dns1123_subdomain(name)
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        validate_spec(&mut errs, &obj["spec"]);
        errs
    }

    /// The class annotation and field together are refused on create only (older objects
    /// may carry both).
    fn validate_create(&self, obj: &Value) -> Vec<FieldError> {
        match obj["metadata"]["annotations"][CLASS_ANNOTATION].as_str() {
            Some(value) if !obj["spec"]["ingressClassName"].is_null() => vec![FieldError::invalid(
                format!("annotations.{CLASS_ANNOTATION}"),
                value,
                "can not be set when the class field is also set",
            )],
            _ => Vec::new(),
        }
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col(
                "Class",
                "string",
                "The name of the IngressClass resource that should be used for additional configuration",
            ),
            col(
                "Hosts",
                "string",
                "Hosts that incoming requests are matched against before the ingress rule",
            ),
            col(
                "Address",
                "string",
                "Address is a list containing ingress points for the load-balancer",
            ),
            col("Ports", "string", "Ports of TLS configurations that open"),
            AGE,
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let spec = &obj["spec"];
        let class = spec["ingressClassName"].as_str().unwrap_or("<none>");
        let rules = spec["rules"].as_array().map(Vec::as_slice).unwrap_or_default();
        let tls = spec["tls"].as_array().is_some_and(|t| !t.is_empty());
        vec![
            name_cell(obj),
            json!(class),
            json!(format_hosts(rules)),
            json!(format_addresses(&obj["status"], false)),
            json!(if tls { "80, 443" } else { "80" }),
            age_cell(obj),
        ]
    }
}

pub(crate) struct IngressClasses;

impl Strategy for IngressClasses {
    fn tracks_generation(&self) -> bool {
        true
    }

    fn validate_name(&self, name: &str) -> Vec<String> {
        dns1123_subdomain(name)
    }

    fn prepare_for_create(&self, _user: &UserInfo, _obj: &mut Value) {}

    fn prepare_for_update(&self, _obj: &mut Value, _old: &Value) -> Result<(), ApiError> {
        Ok(())
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let spec = &obj["spec"];
        let controller = spec["controller"].as_str().unwrap_or_default();
        if controller.len() > 250 {
            errs.push(FieldError::too_long("spec.controller", 250));
        }
        validate_domain_prefixed_path(&mut errs, "spec.controller", controller);
        let params = &spec["parameters"];
        if !params.is_null() {
            validate_typed_reference(&mut errs, "spec.parameters", params);
            match params["scope"].as_str() {
                None => errs.push(FieldError::required("spec.parameters.scope", "")),
                Some("Namespace") => match params["namespace"].as_str() {
                    None => errs.push(FieldError::required(
                        "spec.parameters.namespace",
                        "`parameters.scope` is set to 'Namespace'",
                    )),
                    Some(ns) => {
                        for m in r8s_api::validation::dns1123_label(ns) {
                            errs.push(FieldError::invalid("spec.parameters.namespace", ns, m));
                        }
                    }
                },
                Some("Cluster") => {
                    if !params["namespace"].is_null() {
                        errs.push(FieldError::forbidden(
                            "spec.parameters.namespace",
                            "`parameters.scope` is set to 'Cluster'",
                        ));
                    }
                }
                Some(other) => errs.push(FieldError::not_supported(
                    "spec.parameters.scope",
                    other,
                    &["Cluster", "Namespace"],
                )),
            }
        }
        errs
    }

    fn validate_update(&self, obj: &Value, old: &Value) -> Vec<FieldError> {
        let (new, was) = (&obj["spec"]["controller"], &old["spec"]["controller"]);
        if new == was {
            return Vec::new();
        }
        vec![FieldError::invalid(
            "spec.controller",
            new.as_str().unwrap_or_default(),
            "field is immutable",
        )]
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col(
                "Controller",
                "string",
                "Controller that is responsible for handling this class",
            ),
            col(
                "Parameters",
                "string",
                "A reference to a resource with additional parameters",
            ),
            AGE,
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let spec = &obj["spec"];
        let params = &spec["parameters"];
        let parameters = if params.is_null() {
            "<none>".to_string()
        } else {
            let mut p = params["kind"].as_str().unwrap_or_default().to_string();
            if let Some(g) = params["apiGroup"].as_str() {
                p = format!("{p}.{g}");
            }
            format!("{p}/{}", params["name"].as_str().unwrap_or_default())
        };
        vec![
            name_cell(obj),
            json!(spec["controller"].as_str().unwrap_or_default()),
            json!(parameters),
            age_cell(obj),
        ]
    }
}

/// Upstream's `IsDomainPrefixedPath` (`acme.io/foo`).
fn validate_domain_prefixed_path(errs: &mut Vec<FieldError>, path: &str, value: &str) {
    if value.is_empty() {
        errs.push(FieldError::required(path, ""));
        return;
    }
    let Some((host, rest)) = value.split_once('/') else {
        errs.push(FieldError::invalid(
            path,
            value,
            "must be a domain-prefixed path (such as \"acme.io/foo\")",
        ));
        return;
    };
    for m in dns1123_subdomain(host) {
        errs.push(FieldError::invalid(path, host, m));
    }
    let ok = rest
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/-._~%!$&'()*+,;=:".contains(c));
    if rest.is_empty() || !ok {
        errs.push(FieldError::invalid(path, rest, "Invalid path"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(s: &dyn Strategy, obj: Value) -> Vec<String> {
        s.validate(&obj).iter().map(|e| e.to_string()).collect()
    }

    fn backend(name: &str, port: Value) -> Value {
        json!({"service": {"name": name, "port": port}})
    }

    #[test]
    fn ingresses_are_validated_in_upstreams_words() {
        let ok = json!({"spec": {"rules": [{"host": "a.example.com", "http": {"paths": [
            {"path": "/", "pathType": "Prefix", "backend": backend("web", json!({"number": 80}))}]}}]}});
        assert!(errors(&Ingresses, ok).is_empty());
        let e = errors(&Ingresses, json!({"spec": {}}));
        assert_eq!(e, ["spec: Invalid value: []networking.IngressRule(nil): either `defaultBackend` or `rules` must be specified"]);
        let e = errors(
            &Ingresses,
            json!({"spec": {"ingressClassName": "Bad_Class", "rules": [
                {"host": "10.0.0.1", "http": {"paths": [
                    {"path": "a//b", "pathType": "Exact", "backend": backend("9web", json!({"name": "http", "number": 80}))},
                    {"path": "/x", "backend": backend("web", json!({}))},
                    {"path": "/y", "pathType": "Regex", "backend": {}},
                ]}},
                {"host": "*.*.example.com", "http": {"paths": []}},
            ], "tls": [{"hosts": ["Upper.example.com"], "secretName": "s"}]}}),
        );
        let want = [
            "spec.rules[0].host: Invalid value: \"10.0.0.1\": must be a DNS name, not an IP address",
            "spec.rules[0].http.paths[0].path: Invalid value: \"a//b\": must be an absolute path",
            "spec.rules[0].http.paths[0].path: Invalid value: \"a//b\": must not contain '//'",
            "spec.rules[0].http.paths[0].backend.service.name: Invalid value: \"9web\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
            "spec.rules[0].http.paths[0].backend: Invalid value: \"\": cannot set both port name & port number",
            "spec.rules[0].http.paths[1].pathType: Required value: pathType must be specified",
            "spec.rules[0].http.paths[2].pathType: Unsupported value: \"Regex\": supported values: \"Exact\", \"ImplementationSpecific\", \"Prefix\"",
            "spec.rules[0].http.paths[2].backend: Invalid value: \"\": resource or service backend is required",
            "spec.rules[1].http.paths: Required value",
        ];
        for w in want {
            assert!(e.iter().any(|x| x == w), "missing {w:?} in {e:#?}");
        }
        assert!(
            e.iter().any(|x| x.starts_with(
                "spec.rules[1].host: Invalid value: \"*.*.example.com\": a wildcard DNS-1123 subdomain"
            )),
            "{e:#?}"
        );
        assert!(
            e.iter().any(|x| x.starts_with(
                "spec.tls[0].hosts[0]: Invalid value: \"Upper.example.com\": a lowercase RFC 1123 subdomain"
            )),
            "{e:#?}"
        );
        assert!(
            e.iter()
                .any(|x| x.starts_with("spec.ingressClassName: Invalid value: \"Bad_Class\"")),
            "{e:#?}"
        );
        let both = json!({"metadata": {"annotations": {CLASS_ANNOTATION: "nginx"}}, "spec": {"ingressClassName": "nginx"}});
        assert_eq!(
            Ingresses.validate_create(&both).iter().map(|e| e.to_string()).collect::<Vec<_>>(),
            ["annotations.kubernetes.io/ingress.class: Invalid value: \"nginx\": can not be set when the class field is also set"]
        );
    }

    #[test]
    fn the_tables_print_as_kubectl_does() {
        let ing = json!({"metadata": {"name": "web"}, "spec": {
            "rules": [{"host": "a.io"}, {}, {"host": "b.io"}, {"host": "c.io"}, {"host": "d.io"}],
            "tls": [{"hosts": ["a.io"]}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "192.168.100.101"}, {"hostname": "lb.example.com"}, {"ip": "192.168.100.101"}]}}});
        let cells = Ingresses.cells(&ing);
        assert_eq!(cells[1], "<none>");
        assert_eq!(cells[2], "a.io,b.io,c.io + 2 more...");
        assert_eq!(cells[3], "192.168.100.1...");
        assert_eq!(cells[4], "80, 443");
        assert_eq!(format_hosts(&[json!({})]), "*");
        let class = json!({"metadata": {"name": "traefik"}, "spec": {"controller": "traefik.io/ingress-controller",
            "parameters": {"apiGroup": "k8s.example.com", "kind": "Params", "name": "p", "scope": "Cluster"}}});
        assert!(errors(&IngressClasses, class.clone()).is_empty());
        assert_eq!(IngressClasses.cells(&class)[2], "Params.k8s.example.com/p");
        let bad = json!({"spec": {"controller": "nodomain", "parameters": {"kind": "P", "name": "p", "scope": "Cluster", "namespace": "x"}}});
        assert_eq!(
            errors(&IngressClasses, bad),
            [
                "spec.controller: Invalid value: \"nodomain\": must be a domain-prefixed path (such as \"acme.io/foo\")",
                "spec.parameters.namespace: Forbidden: `parameters.scope` is set to 'Cluster'",
            ]
        );
    }
}
