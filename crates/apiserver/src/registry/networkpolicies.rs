//! NetworkPolicies (upstream's `pkg/registry/networking/networkpolicy`): defaults (policy
//! types, port protocols), validation of selectors, ports, peers and IP blocks, and the
//! table (name, pod selector, age). The agents enforce them (`r8s_net::policy`).

use r8s_api::validation::FieldError;
use serde_json::{json, Value};

use super::strategy::{age_cell, col, name_cell, Column, Strategy, AGE, NAME};
use super::webhook_configuration::validate_label_selector;

pub(crate) struct NetworkPolicies;

const PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];

fn rules<'a>(obj: &'a Value, dir: &str) -> impl Iterator<Item = (usize, &'a Value)> {
    obj["spec"][dir].as_array().into_iter().flatten().enumerate()
}

/// An IPv4 or IPv6 CIDR: (address bytes, prefix length).
fn parse_cidr(s: &str) -> Option<(Vec<u8>, u8)> {
    let (a, n) = s.split_once('/')?;
    let ip: std::net::IpAddr = a.parse().ok()?;
    let n: u8 = n.parse().ok()?;
    let bytes = match ip {
        std::net::IpAddr::V4(v) => v.octets().to_vec(),
        std::net::IpAddr::V6(v) => v.octets().to_vec(),
    };
    (usize::from(n) <= bytes.len() * 8).then_some((bytes, n))
}

/// Whether `inner` is a strict subset of `outer` (same family, longer prefix, same leading
/// bits).
fn strict_subset(inner: &(Vec<u8>, u8), outer: &(Vec<u8>, u8)) -> bool {
    if inner.0.len() != outer.0.len() || inner.1 <= outer.1 {
        return false;
    }
    (0..usize::from(outer.1)).all(|bit| {
        let (byte, shift) = (bit / 8, 7 - bit % 8);
        (inner.0[byte] >> shift) & 1 == (outer.0[byte] >> shift) & 1
    })
}

fn validate_port(errs: &mut Vec<FieldError>, path: &str, p: &Value) {
    if let Some(proto) = p["protocol"].as_str() {
        if !PROTOCOLS.contains(&proto) {
            errs.push(FieldError::not_supported(
                format!("{path}.protocol"),
                proto,
                PROTOCOLS,
            ));
        }
    }
    match &p["port"] {
        Value::Null => {
            if !p["endPort"].is_null() {
                errs.push(FieldError::required(
                    format!("{path}.port"),
                    "must be specified when `endPort` is specified",
                ));
            }
        }
        Value::Number(n) => {
            let port = n.as_i64().unwrap_or(0);
            if !(1..=65535).contains(&port) {
                errs.push(FieldError::invalid_raw(
                    format!("{path}.port"),
                    &port.to_string(),
                    "must be between 1 and 65535, inclusive",
                ));
            }
            if let Some(end) = p["endPort"].as_i64() {
                if end < port {
                    errs.push(FieldError::invalid_raw(
                        format!("{path}.endPort"),
                        &end.to_string(),
                        "must be greater than or equal to `port`",
                    ));
                }
                if !(1..=65535).contains(&end) {
                    errs.push(FieldError::invalid_raw(
                        format!("{path}.endPort"),
                        &end.to_string(),
                        "must be between 1 and 65535, inclusive",
                    ));
                }
            }
        }
        Value::String(name) => {
            if !p["endPort"].is_null() {
                errs.push(FieldError::invalid_raw(
                    format!("{path}.endPort"),
                    &p["endPort"].to_string(),
                    "may not be specified when `port` is non-numeric",
                ));
            }
            // IANA service names: 1-15 characters of [a-z0-9-], a letter, no "--", no
            // hyphen at either end (upstream's IsValidPortName).
            let ok = (1..=15).contains(&name.len())
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && name.bytes().any(|b| b.is_ascii_lowercase())
                && !name.starts_with('-')
                && !name.ends_with('-')
                && !name.contains("--");
            if !ok {
                errs.push(FieldError::invalid(
                    format!("{path}.port"),
                    name,
                    "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-), at most 15 characters, at least one letter, and no leading, trailing or consecutive hyphens",
                ));
            }
        }
        other => errs.push(FieldError::invalid(
            format!("{path}.port"),
            &other.to_string(),
            "must be a port number or name",
        )),
    }
}

fn validate_peer(errs: &mut Vec<FieldError>, path: &str, peer: &Value) {
    let mut set = 0;
    if !peer["podSelector"].is_null() {
        set += 1;
        validate_label_selector(errs, &format!("{path}.podSelector"), &peer["podSelector"]);
    }
    if !peer["namespaceSelector"].is_null() {
        set += 1;
        validate_label_selector(
            errs,
            &format!("{path}.namespaceSelector"),
            &peer["namespaceSelector"],
        );
    }
    if !peer["ipBlock"].is_null() {
        if set > 0 {
            errs.push(FieldError::forbidden(path, "may not specify more than 1 peer"));
        }
        set += 1;
        let block = &peer["ipBlock"];
        let bpath = format!("{path}.ipBlock");
        match block["cidr"].as_str() {
            None | Some("") => errs.push(FieldError::required(format!("{bpath}.cidr"), "")),
            Some(c) => {
                match parse_cidr(c) {
                    None => errs.push(FieldError::invalid(
                        format!("{bpath}.cidr"),
                        c,
                        "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
                    )),
                    Some(outer) => {
                        for (i, e) in block["except"].as_array().into_iter().flatten().enumerate() {
                            let es = e.as_str().unwrap_or("");
                            let epath = format!("{bpath}.except[{i}]");
                            match parse_cidr(es) {
                                None => errs.push(FieldError::invalid(
                                    epath,
                                    es,
                                    "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
                                )),
                                Some(inner) if !strict_subset(&inner, &outer) => errs.push(
                                    FieldError::invalid(epath, es, "must be a strict subset of `cidr`"),
                                ),
                                Some(_) => {}
                            }
                        }
                    }
                }
            }
        }
    }
    if set == 0 {
        errs.push(FieldError::required(path, "must specify a peer"));
    }
}

/// Upstream's `metav1.FormatLabelSelector`.
fn format_selector(sel: &Value) -> String {
    let mut parts: Vec<String> = sel["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    for e in sel["matchExpressions"].as_array().into_iter().flatten() {
        let key = e["key"].as_str().unwrap_or("");
        let values: Vec<&str> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        parts.push(match e["operator"].as_str().unwrap_or("") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_owned(),
            "DoesNotExist" => format!("!{key}"),
            op => format!("{key} {op} ({})", values.join(",")),
        });
    }
    if parts.is_empty() {
        "<none>".into()
    } else {
        parts.join(",")
    }
}

impl Strategy for NetworkPolicies {
    fn default(&self, obj: &mut Value) {
        if !obj["spec"].is_object() {
            return;
        }
        for dir in ["ingress", "egress"] {
            let Some(rs) = obj["spec"][dir].as_array_mut() else {
                continue;
            };
            for r in rs {
                let Some(ports) = r["ports"].as_array_mut() else {
                    continue;
                };
                for p in ports {
                    if p.is_object() && p["protocol"].is_null() {
                        p["protocol"] = json!("TCP");
                    }
                }
            }
        }
        // Upstream's SetDefaults_NetworkPolicy: Ingress always, Egress when there are egress
        // rules.
        let empty = obj["spec"]["policyTypes"].as_array().is_none_or(Vec::is_empty);
        if empty {
            let mut types = vec![json!("Ingress")];
            if obj["spec"]["egress"].as_array().is_some_and(|e| !e.is_empty()) {
                types.push(json!("Egress"));
            }
            obj["spec"]["policyTypes"] = Value::Array(types);
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let spec = &obj["spec"];
        validate_label_selector(&mut errs, "spec.podSelector", &spec["podSelector"]);
        for (dir, peers) in [("ingress", "from"), ("egress", "to")] {
            for (i, r) in rules(obj, dir) {
                for (j, p) in r["ports"].as_array().into_iter().flatten().enumerate() {
                    validate_port(&mut errs, &format!("spec.{dir}[{i}].ports[{j}]"), p);
                }
                for (j, p) in r[peers].as_array().into_iter().flatten().enumerate() {
                    validate_peer(&mut errs, &format!("spec.{dir}[{i}].{peers}[{j}]"), p);
                }
            }
        }
        let types: Vec<&Value> = spec["policyTypes"].as_array().into_iter().flatten().collect();
        for (i, t) in types.iter().enumerate() {
            let t = t.as_str().unwrap_or("");
            if t != "Ingress" && t != "Egress" {
                errs.push(FieldError::not_supported(
                    format!("spec.policyTypes[{i}]"),
                    t,
                    &["Egress", "Ingress"],
                ));
            }
        }
        if types.len() > 2 {
            errs.push(FieldError::invalid(
                "spec.policyTypes",
                &format!(
                    "{:?}",
                    types.iter().map(|t| t.as_str().unwrap_or("")).collect::<Vec<_>>()
                ),
                "may not specify more than two policyTypes",
            ));
        }
        errs
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col(
                "Pod-Selector",
                "string",
                "podSelector selects the pods to which this NetworkPolicy object applies.",
            ),
            AGE,
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        vec![
            name_cell(obj),
            json!(format_selector(&obj["spec"]["podSelector"])),
            age_cell(obj),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(spec: Value) -> Vec<String> {
        let mut obj = json!({"metadata": {"name": "p", "namespace": "default"}, "spec": spec});
        NetworkPolicies.default(&mut obj);
        NetworkPolicies
            .validate(&obj)
            .iter()
            .map(|e| e.to_string())
            .collect()
    }

    #[test]
    fn defaults_policy_types_and_protocols_as_upstream() {
        let mut obj = json!({"spec": {"podSelector": {}, "egress": [{"ports": [{"port": 53}]}]}});
        NetworkPolicies.default(&mut obj);
        assert_eq!(obj["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
        assert_eq!(obj["spec"]["egress"][0]["ports"][0]["protocol"], "TCP");
        let mut obj = json!({"spec": {"podSelector": {}}});
        NetworkPolicies.default(&mut obj);
        assert_eq!(obj["spec"]["policyTypes"], json!(["Ingress"]));
    }

    #[test]
    fn bad_ports_peers_and_blocks_are_refused_with_upstreams_messages() {
        assert!(errors(json!({"podSelector": {}})).is_empty());
        let e = errors(json!({"podSelector": {}, "ingress": [{
            "ports": [{"port": 0}, {"port": "http", "endPort": 90}, {"port": 80, "endPort": 70}, {"protocol": "ICMP"}],
            "from": [{}, {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["11.0.0.0/16", "10.0.0.0/8"]}, "podSelector": {}}, {"ipBlock": {"cidr": "10.0.0/8"}}]
        }], "policyTypes": ["Ingress", "Sideways"]}));
        let want = [
            "spec.ingress[0].ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive",
            "spec.ingress[0].ports[1].endPort: Invalid value: 90: may not be specified when `port` is non-numeric",
            "spec.ingress[0].ports[2].endPort: Invalid value: 70: must be greater than or equal to `port`",
            "spec.ingress[0].ports[3].protocol: Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
            "spec.ingress[0].from[0]: Required value: must specify a peer",
            "spec.ingress[0].from[1]: Forbidden: may not specify more than 1 peer",
            "spec.ingress[0].from[1].ipBlock.except[0]: Invalid value: \"11.0.0.0/16\": must be a strict subset of `cidr`",
            "spec.ingress[0].from[1].ipBlock.except[1]: Invalid value: \"10.0.0.0/8\": must be a strict subset of `cidr`",
            "spec.ingress[0].from[2].ipBlock.cidr: Invalid value: \"10.0.0/8\": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
            "spec.policyTypes[1]: Unsupported value: \"Sideways\": supported values: \"Egress\", \"Ingress\"",
        ];
        for w in want {
            assert!(e.iter().any(|x| x == w), "missing {w:?} in {e:#?}");
        }
        assert_eq!(e.len(), want.len(), "{e:#?}");
    }

    #[test]
    fn the_table_prints_the_pod_selector_as_kubectl_does() {
        let obj = json!({"metadata": {"name": "p"}, "spec": {"podSelector": {
            "matchLabels": {"app": "db"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}, {"key": "x", "operator": "DoesNotExist"}]
        }}});
        assert_eq!(NetworkPolicies.cells(&obj)[1], json!("app=db,tier in (a,b),!x"));
        let empty = json!({"metadata": {"name": "p"}, "spec": {"podSelector": {}}});
        assert_eq!(NetworkPolicies.cells(&empty)[1], json!("<none>"));
    }
}
