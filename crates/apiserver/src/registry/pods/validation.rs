//! A pod spec's validation, as upstream's `ValidatePodSpec` words its errors (the parts a
//! client most often gets wrong): containers and their names and images, volumes and their
//! sources, volume mounts, ports, resource requests against limits, probes, restart and DNS
//! policies. Every error is collected, so one 422 names every field at fault.

use std::collections::HashSet;

use r8s_api::quantity::Quantity;
use r8s_api::validation::{dns1123_label, FieldError};
use serde_json::Value;

/// The volume sources, in the order upstream checks them, and the name its "more than one"
/// error gives each (two of them differ from the JSON key upstream: `cephFS`, `downwarAPI`).
const VOLUME_SOURCES: &[(&str, &str)] = &[
    ("emptyDir", "emptyDir"),
    ("hostPath", "hostPath"),
    ("gitRepo", "gitRepo"),
    ("gcePersistentDisk", "gcePersistentDisk"),
    ("awsElasticBlockStore", "awsElasticBlockStore"),
    ("secret", "secret"),
    ("nfs", "nfs"),
    ("iscsi", "iscsi"),
    ("glusterfs", "glusterfs"),
    ("flocker", "flocker"),
    ("persistentVolumeClaim", "persistentVolumeClaim"),
    ("rbd", "rbd"),
    ("cinder", "cinder"),
    ("cephfs", "cephFS"),
    ("quobyte", "quobyte"),
    ("downwardAPI", "downwarAPI"),
    ("fc", "fc"),
    ("flexVolume", "flexVolume"),
    ("configMap", "configMap"),
    ("azureFile", "azureFile"),
    ("vsphereVolume", "vsphereVolume"),
    ("photonPersistentDisk", "photonPersistentDisk"),
    ("portworxVolume", "portworxVolume"),
    ("azureDisk", "azureDisk"),
    ("storageos", "storageos"),
    ("projected", "projected"),
    ("scaleIO", "scaleIO"),
    ("csi", "csi"),
    ("ephemeral", "ephemeral"),
    ("image", "image"),
];

const PORT_RANGE: &str = "must be between 1 and 65535, inclusive";

/// `field` must be a DNS label (RFC 1123), and required.
pub(crate) fn label_name(errs: &mut Vec<FieldError>, field: &str, name: &str) {
    if name.is_empty() {
        errs.push(FieldError::required(field, ""));
    }
    for p in dns1123_label(name).into_iter().filter(|_| !name.is_empty()) {
        errs.push(FieldError::invalid(field, name, p));
    }
}

/// `field`, a port number, must be between 1 and 65535.
pub(crate) fn port_number(errs: &mut Vec<FieldError>, field: &str, port: i64) {
    if !(1..=65535).contains(&port) {
        errs.push(FieldError::invalid_raw(field, &port.to_string(), PORT_RANGE));
    }
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// Validate the pod spec at `path` (`spec`, or a template's `spec.template.spec`).
pub(crate) fn pod_spec(errs: &mut Vec<FieldError>, path: &str, spec: &Value) {
    let volumes = volumes(errs, path, spec);
    let mut names = HashSet::new();
    match spec.get("containers").and_then(Value::as_array) {
        Some(cs) if !cs.is_empty() => {
            for (i, c) in cs.iter().enumerate() {
                container(
                    errs,
                    &format!("{path}.containers[{i}]"),
                    c,
                    &volumes,
                    &mut names,
                    true,
                );
            }
        }
        _ => errs.push(FieldError::required(format!("{path}.containers"), "")),
    }
    let init = spec.get("initContainers").and_then(Value::as_array);
    for (i, c) in init.into_iter().flatten().enumerate() {
        container(
            errs,
            &format!("{path}.initContainers[{i}]"),
            c,
            &volumes,
            &mut names,
            false,
        );
    }
    let targets: HashSet<String> = names.clone();
    let ephemeral = spec.get("ephemeralContainers").and_then(Value::as_array);
    if path != "spec" && ephemeral.is_some_and(|e| !e.is_empty()) {
        errs.push(FieldError::forbidden(
            format!("{path}.ephemeralContainers"),
            "ephemeral containers not allowed in pod template",
        ));
    }
    for (i, c) in ephemeral.into_iter().flatten().enumerate() {
        let at = format!("{path}.ephemeralContainers[{i}]");
        container(errs, &at, c, &volumes, &mut names, false);
        super::ephemeral::validate(errs, &at, c, &targets);
    }
    sysctls(errs, path, spec);
    if let Some(p) = spec.get("restartPolicy").and_then(Value::as_str) {
        if !["Always", "OnFailure", "Never"].contains(&p) {
            errs.push(FieldError::not_supported(
                format!("{path}.restartPolicy"),
                p,
                &["Always", "OnFailure", "Never"],
            ));
        }
    }
    if let Some(p) = spec.get("dnsPolicy").and_then(Value::as_str) {
        const POLICIES: [&str; 4] = ["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"];
        if !POLICIES.contains(&p) {
            errs.push(FieldError::not_supported(
                format!("{path}.dnsPolicy"),
                p,
                &POLICIES,
            ));
        }
    }
}

/// Upstream's `IsValidSysctlName`: at most 253 characters, segments of lower-case
/// alphanumerics, '-' and '_' (starting and ending alphanumeric) joined by '.' or '/'.
fn valid_sysctl_name(name: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    name.len() <= 253
        && name.split(['.', '/']).all(|seg| {
            seg.chars().next().is_some_and(alnum)
                && seg.chars().last().is_some_and(alnum)
                && seg.chars().all(|c| alnum(c) || c == '-' || c == '_')
        })
}

/// `securityContext.sysctls`: each named once with a valid sysctl name (upstream's
/// `validateSysctls`; whether the node allows it is the kubelet's business).
fn sysctls(errs: &mut Vec<FieldError>, path: &str, spec: &Value) {
    let mut seen = HashSet::new();
    let list = spec["securityContext"]["sysctls"].as_array();
    for (i, s) in list.into_iter().flatten().enumerate() {
        let at = format!("{path}.securityContext.sysctls[{i}].name");
        let name = str_of(s, "name");
        if name.is_empty() {
            errs.push(FieldError::required(at, ""));
        } else if !valid_sysctl_name(name) {
            errs.push(FieldError::invalid(
                at,
                name,
                r"must have at most 253 characters and match regex ^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$",
            ));
        } else if !seen.insert(name) {
            errs.push(FieldError::duplicate(at, name));
        }
    }
}

/// The spec's volumes: each named once, with a DNS label, and exactly one source. Returns
/// the names mounts may refer to.
fn volumes<'a>(errs: &mut Vec<FieldError>, path: &str, spec: &'a Value) -> HashSet<&'a str> {
    let mut names = HashSet::new();
    let list = spec.get("volumes").and_then(Value::as_array);
    for (i, v) in list.into_iter().flatten().enumerate() {
        let at = format!("{path}.volumes[{i}]");
        let mut sources = 0;
        for (key, named) in VOLUME_SOURCES {
            let Some(source) = v.get(*key).filter(|s| !s.is_null()) else {
                continue;
            };
            if sources > 0 {
                errs.push(FieldError::forbidden(
                    format!("{at}.{named}"),
                    "may not specify more than 1 volume type",
                ));
                continue;
            }
            sources += 1;
            let required = |field: &str| FieldError::required(format!("{at}.{key}.{field}"), "");
            match *key {
                "hostPath" => {
                    let p = str_of(source, "path");
                    if p.is_empty() {
                        errs.push(required("path"));
                    } else if p.split('/').any(|seg| seg == "..") {
                        errs.push(FieldError::invalid(
                            format!("{at}.hostPath.path"),
                            p,
                            "must not contain '..'",
                        ));
                    }
                }
                "secret" if str_of(source, "secretName").is_empty() => errs.push(required("secretName")),
                "configMap" if str_of(source, "name").is_empty() => errs.push(required("name")),
                "persistentVolumeClaim" if str_of(source, "claimName").is_empty() => {
                    errs.push(required("claimName"))
                }
                _ => {}
            }
        }
        if sources == 0 {
            errs.push(FieldError::required(at.clone(), "must specify a volume type"));
        }
        let name = str_of(v, "name");
        label_name(errs, &format!("{at}.name"), name);
        if !names.insert(name) {
            errs.push(FieldError::duplicate(format!("{at}.name"), name));
        }
    }
    names
}

/// One container (`regular`: of `containers`, where probes are allowed).
fn container(
    errs: &mut Vec<FieldError>,
    at: &str,
    c: &Value,
    volumes: &HashSet<&str>,
    names: &mut HashSet<String>,
    regular: bool,
) {
    let name = str_of(c, "name");
    label_name(errs, &format!("{at}.name"), name);
    if !name.is_empty() && !names.insert(name.to_owned()) {
        errs.push(FieldError::duplicate(format!("{at}.name"), name));
    }
    if str_of(c, "image").trim().is_empty() {
        errs.push(FieldError::required(format!("{at}.image"), ""));
    }
    if let Some(p) = c.get("imagePullPolicy").and_then(Value::as_str) {
        if !["Always", "IfNotPresent", "Never"].contains(&p) {
            errs.push(FieldError::not_supported(
                format!("{at}.imagePullPolicy"),
                p,
                &["Always", "IfNotPresent", "Never"],
            ));
        }
    }
    ports(errs, at, c);
    let env = c.get("env").and_then(Value::as_array);
    for (i, e) in env.into_iter().flatten().enumerate() {
        if str_of(e, "name").is_empty() {
            errs.push(FieldError::required(format!("{at}.env[{i}].name"), ""));
        }
    }
    mounts(errs, at, c, volumes);
    resources(errs, at, c);
    if regular {
        for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
            let Some(p) = c.get(probe).filter(|p| p.is_object()) else {
                continue;
            };
            let handlers = ["exec", "httpGet", "tcpSocket", "grpc"];
            if !handlers.iter().any(|h| p.get(*h).is_some_and(|v| !v.is_null())) {
                errs.push(FieldError::required(
                    format!("{at}.{probe}"),
                    "must specify a handler type",
                ));
            }
        }
    }
}

fn ports(errs: &mut Vec<FieldError>, at: &str, c: &Value) {
    let mut names = HashSet::new();
    let list = c.get("ports").and_then(Value::as_array);
    for (i, p) in list.into_iter().flatten().enumerate() {
        let at = format!("{at}.ports[{i}]");
        let name = str_of(p, "name");
        if !name.is_empty() {
            let msgs = port_name(name);
            for m in &msgs {
                errs.push(FieldError::invalid(format!("{at}.name"), name, m));
            }
            if msgs.is_empty() && !names.insert(name) {
                errs.push(FieldError::duplicate(format!("{at}.name"), name));
            }
        }
        match p.get("containerPort").and_then(Value::as_i64).unwrap_or(0) {
            0 => errs.push(FieldError::required(format!("{at}.containerPort"), "")),
            n => port_number(errs, &format!("{at}.containerPort"), n),
        }
        let host = p.get("hostPort").and_then(Value::as_i64).unwrap_or(0);
        if host != 0 {
            port_number(errs, &format!("{at}.hostPort"), host);
        }
        protocol(errs, &format!("{at}.protocol"), str_of(p, "protocol"));
    }
}

/// `field`, a port's protocol, must be given and one of upstream's.
pub(crate) fn protocol(errs: &mut Vec<FieldError>, field: &str, protocol: &str) {
    if protocol.is_empty() {
        errs.push(FieldError::required(field, ""));
    } else if !["SCTP", "TCP", "UDP"].contains(&protocol) {
        errs.push(FieldError::not_supported(
            field,
            protocol,
            &["SCTP", "TCP", "UDP"],
        ));
    }
}

/// Why `name` is not an IANA service name (upstream `IsValidPortName`).
pub(crate) fn port_name(name: &str) -> Vec<&'static str> {
    let mut msgs = Vec::new();
    if name.len() > 15 {
        msgs.push("must be no more than 15 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        msgs.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)");
    }
    if !name.bytes().any(|b| b.is_ascii_lowercase()) {
        msgs.push("must contain at least one letter (a-z)");
    }
    if name.contains("--") {
        msgs.push("must not contain consecutive hyphens");
    }
    if name.starts_with('-') || name.ends_with('-') {
        msgs.push("must not begin or end with a hyphen");
    }
    msgs
}

fn mounts(errs: &mut Vec<FieldError>, at: &str, c: &Value, volumes: &HashSet<&str>) {
    let mut paths = HashSet::new();
    let list = c.get("volumeMounts").and_then(Value::as_array);
    for (i, m) in list.into_iter().flatten().enumerate() {
        let at = format!("{at}.volumeMounts[{i}]");
        let name = str_of(m, "name");
        if name.is_empty() {
            errs.push(FieldError::required(format!("{at}.name"), ""));
        }
        if !volumes.contains(name) {
            errs.push(FieldError::not_found(format!("{at}.name"), name));
        }
        let path = str_of(m, "mountPath");
        if path.is_empty() {
            errs.push(FieldError::required(format!("{at}.mountPath"), ""));
        }
        if !paths.insert(path) {
            errs.push(FieldError::invalid(
                format!("{at}.mountPath"),
                path,
                "must be unique",
            ));
        }
    }
}

/// Whether a request may differ from its limit (upstream `IsOvercommitAllowed`: native
/// resources other than huge pages; extended ones such as `example.com/gpu` may not).
fn overcommit_allowed(resource: &str) -> bool {
    let native = !resource.contains('/') || resource.starts_with("kubernetes.io/");
    native && !resource.starts_with("hugepages-")
}

fn resources(errs: &mut Vec<FieldError>, at: &str, c: &Value) {
    let r = &c["resources"];
    let parse = |v: &Value| v.as_str().and_then(|s| Quantity::parse(s).ok());
    let limits = r["limits"].as_object();
    for (name, q) in limits.into_iter().flatten() {
        if let Some(q) = parse(q).filter(|q| q.sign() < 0) {
            errs.push(FieldError::invalid(
                format!("{at}.resources.limits[{name}]"),
                &q.to_string(),
                "must be greater than or equal to 0",
            ));
        }
    }
    let requests = r["requests"].as_object();
    for (name, q) in requests.into_iter().flatten() {
        let Some(q) = parse(q) else { continue };
        if q.sign() < 0 {
            errs.push(FieldError::invalid(
                format!("{at}.resources.requests[{name}]"),
                &q.to_string(),
                "must be greater than or equal to 0",
            ));
        }
        match limits.and_then(|l| l.get(name)).and_then(parse) {
            Some(limit) if q != limit && !overcommit_allowed(name) => errs.push(FieldError::invalid(
                format!("{at}.resources.requests"),
                &q.to_string(),
                format!("must be equal to {name} limit of {limit}"),
            )),
            Some(limit) if q > limit => errs.push(FieldError::invalid(
                format!("{at}.resources.requests"),
                &q.to_string(),
                format!("must be less than or equal to {name} limit of {limit}"),
            )),
            None if !overcommit_allowed(name) => errs.push(FieldError::required(
                format!("{at}.resources.limits"),
                "Limit must be set for non overcommitable resources",
            )),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors(spec: Value) -> Vec<String> {
        let mut errs = Vec::new();
        pod_spec(&mut errs, "spec", &spec);
        errs.iter().map(ToString::to_string).collect()
    }

    fn c(extra: Value) -> Value {
        let mut c = json!({"name": "c", "image": "nginx"});
        c.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        c
    }

    /// The conformance spec's pod: "foo-" and "bar.." are invalid names; a valid name the node
    /// may refuse ("safe-and-unsafe", "kernel.shmmax") is not the API's business.
    #[test]
    fn sysctl_names_are_checked() {
        let errs = errors(
            json!({"containers": [c(json!({}))], "securityContext": {"sysctls": [
            {"name": "foo-", "value": "bar"}, {"name": "kernel.shmmax", "value": "1"},
            {"name": "safe-and-unsafe", "value": "1"}, {"name": "bar..", "value": "42"},
            {"name": "net.ipv4/ip_forward", "value": "1"}, {"name": "kernel.shmmax", "value": "2"}]}}),
        );
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert!(errs[0].starts_with(
            r#"spec.securityContext.sysctls[0].name: Invalid value: "foo-": must have at most 253 characters"#
        ));
        assert!(errs[1].starts_with(r#"spec.securityContext.sysctls[3].name: Invalid value: "bar..""#));
        assert_eq!(
            errs[2],
            r#"spec.securityContext.sysctls[5].name: Duplicate value: "kernel.shmmax""#
        );
    }

    #[test]
    fn a_valid_spec_has_no_errors() {
        let spec = json!({
            "containers": [c(json!({"ports": [{"name": "http", "containerPort": 80, "protocol": "TCP"}],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                "resources": {"requests": {"cpu": "500m", "example.com/gpu": "1"}, "limits": {"cpu": "1", "example.com/gpu": "1"}},
                "livenessProbe": {"httpGet": {"port": 80}}}))],
            "initContainers": [{"name": "init", "image": "busybox", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "volumes": [{"name": "data", "emptyDir": {}}],
            "restartPolicy": "Always", "dnsPolicy": "ClusterFirst",
        });
        assert_eq!(errors(spec), Vec::<String>::new());
    }

    #[test]
    fn volumes_and_mounts_are_checked_in_upstreams_words() {
        let spec = json!({
            "containers": [c(json!({"volumeMounts": [
                {"name": "missing", "mountPath": "/a"},
                {"name": "data", "mountPath": "/a"},
                {"name": "data"}]}))],
            "volumes": [
                {"name": "data", "emptyDir": {}},
                {"name": "data", "configMap": {}},
                {"name": "two", "emptyDir": {}, "hostPath": {"path": "/x"}},
                {"name": "none"},
                {"name": "Bad_Name", "hostPath": {"path": "/var/../etc"}},
                {"name": "claim", "persistentVolumeClaim": {}},
            ],
        });
        let errs = errors(spec);
        for want in [
            "spec.volumes[1].configMap.name: Required value",
            "spec.volumes[1].name: Duplicate value: \"data\"",
            "spec.volumes[2].hostPath: Forbidden: may not specify more than 1 volume type",
            "spec.volumes[3]: Required value: must specify a volume type",
            "spec.volumes[4].hostPath.path: Invalid value: \"/var/../etc\": must not contain '..'",
            "spec.volumes[5].persistentVolumeClaim.claimName: Required value",
            "spec.containers[0].volumeMounts[0].name: Not found: \"missing\"",
            "spec.containers[0].volumeMounts[1].mountPath: Invalid value: \"/a\": must be unique",
            "spec.containers[0].volumeMounts[2].mountPath: Required value",
        ] {
            assert!(errs.iter().any(|e| e == want), "{want} not in {errs:#?}");
        }
        assert!(
            errs.iter().any(|e| e.starts_with(
                "spec.volumes[4].name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 label"
            )),
            "{errs:#?}"
        );
        assert_eq!(errs.len(), 10, "{errs:#?}");
    }

    #[test]
    fn ports_resources_probes_and_names_are_checked() {
        let spec = json!({
            "containers": [
                c(json!({"ports": [
                    {"containerPort": 70000, "protocol": "TCP"},
                    {"containerPort": 80, "hostPort": -1, "protocol": "HTTP"},
                    {"name": "web", "containerPort": 81, "protocol": "TCP"},
                    {"name": "web", "containerPort": 82, "protocol": "TCP"},
                    {"name": "Too-Long-Port-Name", "containerPort": 83, "protocol": "TCP"}],
                  "resources": {"requests": {"cpu": "2", "memory": "-1", "example.com/gpu": "1"}, "limits": {"cpu": "1"}},
                  "readinessProbe": {"periodSeconds": 5},
                  "env": [{"value": "x"}]})),
                {"name": "c"},
            ],
            "initContainers": [{"name": "c", "image": "busybox"}],
            "dnsPolicy": "Google",
        });
        let errs = errors(spec);
        assert_eq!(
            errs,
            [
                "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
                "spec.containers[0].ports[1].hostPort: Invalid value: -1: must be between 1 and 65535, inclusive",
                "spec.containers[0].ports[1].protocol: Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
                "spec.containers[0].ports[3].name: Duplicate value: \"web\"",
                "spec.containers[0].ports[4].name: Invalid value: \"Too-Long-Port-Name\": must be no more than 15 characters",
                "spec.containers[0].ports[4].name: Invalid value: \"Too-Long-Port-Name\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
                "spec.containers[0].env[0].name: Required value",
                "spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1",
                "spec.containers[0].resources.requests[memory]: Invalid value: \"-1\": must be greater than or equal to 0",
                "spec.containers[0].resources.limits: Required value: Limit must be set for non overcommitable resources",
                "spec.containers[0].readinessProbe: Required value: must specify a handler type",
                "spec.containers[1].name: Duplicate value: \"c\"",
                "spec.containers[1].image: Required value",
                "spec.initContainers[0].name: Duplicate value: \"c\"",
                "spec.dnsPolicy: Unsupported value: \"Google\": supported values: \"ClusterFirstWithHostNet\", \"ClusterFirst\", \"Default\", \"None\"",
            ]
        );
        assert_eq!(
            errors(json!({"containers": []})),
            ["spec.containers: Required value"]
        );
    }
}
