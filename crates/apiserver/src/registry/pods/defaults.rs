//! Upstream's defaults for pod specs (`SetDefaults_PodSpec`, `_Pod`, `_Container`, `_Probe`,
//! `_HTTPGetAction`, `_Volume` and the volume sources', `_ObjectFieldSelector`), applied to a
//! pod (`pod`) and to the pod templates of workloads (`pod_spec`), so that what a client reads
//! back is what a kubeadm cluster would have stored.
//!
//! Upstream keeps some defaults to pods only, so that they do not appear in every workload's
//! template (and change its hash on upgrade): requests from limits, `enableServiceLinks`, and
//! host ports for host-network pods.

use serde_json::{json, Map, Value};

/// The containers of a pod spec, by list.
const CONTAINER_LISTS: [&str; 3] = ["initContainers", "containers", "ephemeralContainers"];

/// Upstream's default file mode of secret, configMap, downwardAPI and projected volumes (0644).
const DEFAULT_MODE: i64 = 0o644;

/// A bound token of a projected volume lives an hour unless it says otherwise.
const TOKEN_EXPIRATION_SECONDS: i64 = 3600;

/// Set `key` unless it is there (a `null` counts as absent, as Go's zero value does).
fn set(obj: &mut Map<String, Value>, key: &str, value: Value) {
    if obj.get(key).is_none_or(Value::is_null) {
        obj.insert(key.into(), value);
    }
}

/// The object at `key`, if it is one.
fn object<'a>(obj: &'a mut Map<String, Value>, key: &str) -> Option<&'a mut Map<String, Value>> {
    obj.get_mut(key).and_then(Value::as_object_mut)
}

/// The objects of the list at `key`.
fn objects<'a>(
    obj: &'a mut Map<String, Value>,
    key: &str,
) -> impl Iterator<Item = &'a mut Map<String, Value>> {
    obj.get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}

/// A pod's spec: the pod spec's defaults and the pod-only ones.
pub(crate) fn pod(spec: &mut Value) {
    pod_spec(spec);
    let Some(spec) = spec.as_object_mut() else {
        return;
    };
    set(spec, "enableServiceLinks", json!(true));
    requests_from_limits(spec);
    if spec.get("hostNetwork").and_then(Value::as_bool) == Some(true) {
        // With the host's network a container port is a host port.
        for list in ["initContainers", "containers"] {
            for c in objects(spec, list) {
                for p in objects(c, "ports") {
                    if p.get("hostPort").and_then(Value::as_i64).unwrap_or(0) == 0 {
                        if let Some(port) = p.get("containerPort").cloned() {
                            p.insert("hostPort".into(), port);
                        }
                    }
                }
            }
        }
    }
}

/// Any pod spec, a pod's or a template's.
pub(crate) fn pod_spec(spec: &mut Value) {
    service_account_alias(spec);
    let Some(spec) = spec.as_object_mut() else {
        return;
    };
    set(spec, "restartPolicy", json!("Always"));
    set(spec, "terminationGracePeriodSeconds", json!(30));
    set(spec, "dnsPolicy", json!("ClusterFirst"));
    set(spec, "securityContext", json!({}));
    set(spec, "schedulerName", json!("default-scheduler"));
    for list in CONTAINER_LISTS {
        for c in objects(spec, list) {
            container(c);
        }
    }
    for v in objects(spec, "volumes") {
        volume(v);
    }
}

/// `spec.serviceAccount` is the deprecated alias of `spec.serviceAccountName` (upstream's v1
/// conversion): a spec that names only the alias runs as that account, and the alias always
/// reads as the name. Run when a pod spec is defaulted, and again once mutating admission has
/// chosen the account (`strategy::prepare_for_create`).
pub(crate) fn service_account_alias(spec: &mut Value) {
    let Some(spec) = spec.as_object_mut() else {
        return;
    };
    let named = |v: Option<&Value>| v.and_then(Value::as_str).is_some_and(|s| !s.is_empty());
    if !named(spec.get("serviceAccountName")) && named(spec.get("serviceAccount")) {
        let alias = spec["serviceAccount"].clone();
        spec.insert("serviceAccountName".into(), alias);
    }
    match spec.get("serviceAccountName").cloned() {
        Some(name) if named(Some(&name)) => {
            spec.insert("serviceAccount".into(), name);
        }
        _ => {
            spec.remove("serviceAccount");
        }
    }
}

fn container(c: &mut Map<String, Value>) {
    if c.get("imagePullPolicy").is_none_or(Value::is_null) {
        let image = c.get("image").and_then(Value::as_str).unwrap_or("");
        // The tag is after the last ':' that follows the last '/'; a digest pins the image.
        let last = image.rsplit('/').next().unwrap_or(image);
        let tag = if image.contains('@') {
            Some("digest")
        } else {
            last.split_once(':').map(|(_, t)| t)
        };
        let policy = match tag {
            None | Some("latest") => "Always",
            Some(_) => "IfNotPresent",
        };
        c.insert("imagePullPolicy".into(), json!(policy));
    }
    set(c, "terminationMessagePath", json!("/dev/termination-log"));
    set(c, "terminationMessagePolicy", json!("File"));
    set(c, "resources", json!({}));
    for p in objects(c, "ports") {
        set(p, "protocol", json!("TCP"));
    }
    for e in objects(c, "env") {
        if let Some(field_ref) = object(e, "valueFrom").and_then(|f| object(f, "fieldRef")) {
            set(field_ref, "apiVersion", json!("v1"));
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        let Some(p) = object(c, probe) else { continue };
        // Go's zero means unset for these.
        for (key, default) in [
            ("timeoutSeconds", 1),
            ("periodSeconds", 10),
            ("successThreshold", 1),
            ("failureThreshold", 3),
        ] {
            if p.get(key).and_then(Value::as_i64).unwrap_or(0) == 0 {
                p.insert(key.into(), json!(default));
            }
        }
        http_get(p);
    }
    if let Some(lifecycle) = object(c, "lifecycle") {
        for hook in ["postStart", "preStop"] {
            if let Some(h) = object(lifecycle, hook) {
                http_get(h);
            }
        }
    }
}

/// A handler's `httpGet` asks for `/` over HTTP unless it says otherwise.
fn http_get(handler: &mut Map<String, Value>) {
    if let Some(h) = object(handler, "httpGet") {
        if h.get("path").and_then(Value::as_str).is_none_or(str::is_empty) {
            h.insert("path".into(), json!("/"));
        }
        if h.get("scheme").and_then(Value::as_str).is_none_or(str::is_empty) {
            h.insert("scheme".into(), json!("HTTP"));
        }
    }
}

fn volume(v: &mut Map<String, Value>) {
    // A volume with no source is an emptyDir.
    if !v.iter().any(|(k, val)| k != "name" && !val.is_null()) {
        v.insert("emptyDir".into(), json!({}));
        return;
    }
    for source in ["secret", "configMap", "downwardAPI", "projected"] {
        if let Some(s) = object(v, source) {
            set(s, "defaultMode", json!(DEFAULT_MODE));
        }
    }
    if let Some(d) = object(v, "downwardAPI") {
        downward_api_items(d);
    }
    if let Some(h) = object(v, "hostPath") {
        set(h, "type", json!(""));
    }
    if let Some(p) = object(v, "projected") {
        for s in objects(p, "sources") {
            if let Some(t) = object(s, "serviceAccountToken") {
                set(t, "expirationSeconds", json!(TOKEN_EXPIRATION_SECONDS));
            }
            if let Some(d) = object(s, "downwardAPI") {
                downward_api_items(d);
            }
        }
    }
}

/// A downward API item's field reference reads the v1 object unless it says otherwise.
fn downward_api_items(d: &mut Map<String, Value>) {
    for item in objects(d, "items") {
        if let Some(field_ref) = object(item, "fieldRef") {
            set(field_ref, "apiVersion", json!("v1"));
        }
    }
}

/// A pod's containers request what they limit unless they say otherwise (upstream
/// `SetDefaults_Pod`; pods only, not the templates of workloads).
fn requests_from_limits(spec: &mut Map<String, Value>) {
    for list in ["containers", "initContainers"] {
        for c in objects(spec, list) {
            let Some(resources) = object(c, "resources") else {
                continue;
            };
            let Some(limits) = resources.get("limits").and_then(Value::as_object).cloned() else {
                continue;
            };
            if !resources.get("requests").is_some_and(Value::is_object) {
                resources.insert("requests".into(), json!({}));
            }
            let requests = object(resources, "requests").expect("made an object above");
            for (k, v) in limits {
                requests.entry(k).or_insert(v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_handlers_volumes_and_field_refs_get_upstreams_defaults() {
        let mut spec = json!({
            "containers": [{
                "name": "c", "image": "nginx:1.25",
                "livenessProbe": {"httpGet": {"port": 80}, "periodSeconds": 5},
                "readinessProbe": {"tcpSocket": {"port": 80}, "timeoutSeconds": 0},
                "lifecycle": {"preStop": {"httpGet": {"port": 80, "path": "/quit"}}},
                "env": [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                        {"name": "PLAIN", "value": "x"}],
            }],
            "volumes": [
                {"name": "scratch"},
                {"name": "conf", "configMap": {"name": "conf"}},
                {"name": "creds", "secret": {"secretName": "creds", "defaultMode": 256}},
                {"name": "host", "hostPath": {"path": "/var/log"}},
                {"name": "info", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
                {"name": "token", "projected": {"sources": [
                    {"serviceAccountToken": {"path": "token"}},
                    {"downwardAPI": {"items": [{"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
                ]}},
            ],
        });
        pod_spec(&mut spec);
        let c = &spec["containers"][0];
        assert_eq!(
            c["livenessProbe"],
            json!({"httpGet": {"port": 80, "path": "/", "scheme": "HTTP"}, "periodSeconds": 5,
                   "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3})
        );
        assert_eq!(
            c["readinessProbe"],
            json!({"tcpSocket": {"port": 80}, "timeoutSeconds": 1, "periodSeconds": 10,
                   "successThreshold": 1, "failureThreshold": 3})
        );
        assert_eq!(
            c["lifecycle"]["preStop"]["httpGet"],
            json!({"port": 80, "path": "/quit", "scheme": "HTTP"})
        );
        assert_eq!(c["env"][0]["valueFrom"]["fieldRef"]["apiVersion"], "v1");
        assert_eq!(c["env"][1], json!({"name": "PLAIN", "value": "x"}));
        let v = &spec["volumes"];
        assert_eq!(v[0], json!({"name": "scratch", "emptyDir": {}}));
        assert_eq!(v[1]["configMap"], json!({"name": "conf", "defaultMode": 420}));
        assert_eq!(v[2]["secret"]["defaultMode"], 256, "a mode given is kept");
        assert_eq!(v[3]["hostPath"], json!({"path": "/var/log", "type": ""}));
        assert_eq!(v[4]["downwardAPI"]["defaultMode"], 420);
        assert_eq!(v[4]["downwardAPI"]["items"][0]["fieldRef"]["apiVersion"], "v1");
        let projected = &v[5]["projected"];
        assert_eq!(projected["defaultMode"], 420);
        assert_eq!(
            projected["sources"][0]["serviceAccountToken"]["expirationSeconds"],
            3600
        );
        assert_eq!(
            projected["sources"][1]["downwardAPI"]["items"][0]["fieldRef"]["apiVersion"],
            "v1"
        );
    }

    #[test]
    fn pod_only_defaults_stay_out_of_templates() {
        let spec = json!({"containers": [{"name": "c", "image": "nginx",
            "ports": [{"containerPort": 80}], "resources": {"limits": {"cpu": "1"}}}],
            "hostNetwork": true});
        let mut template = spec.clone();
        pod_spec(&mut template);
        assert!(template.get("enableServiceLinks").is_none());
        assert!(template["containers"][0]["resources"].get("requests").is_none());
        assert!(template["containers"][0]["ports"][0].get("hostPort").is_none());
        let mut p = spec;
        pod(&mut p);
        assert_eq!(p["enableServiceLinks"], true);
        assert_eq!(p["containers"][0]["resources"]["requests"], json!({"cpu": "1"}));
        assert_eq!(
            p["containers"][0]["ports"][0],
            json!({"containerPort": 80, "hostPort": 80, "protocol": "TCP"})
        );
    }
}
