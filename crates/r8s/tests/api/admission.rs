//! End to end: upstream's default admission plugins in a real `r8s server` (no kubelet), with
//! the controllers that go with them, judged by the real kubectl: NamespaceLifecycle,
//! LimitRanger, ServiceAccount (and the root-ca-cert-publisher), ResourceQuota (and the
//! resourcequota controller).

use crate::support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::Server;

const V: &str = "1.33";

/// Poll `f` until it returns Some, or panic with `what` after `secs`.
fn wait_for<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn json(s: &Server, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.extend(["-o", "json"]);
    serde_json::from_str(&s.ok(V, &a)).unwrap()
}

/// A namespace ready for pods: created, with its default ServiceAccount.
fn namespace(s: &Server, ns: &str) {
    s.ok(V, &["create", "namespace", ns]);
    s.wait_for_default_service_account(ns);
}

fn pod(name: &str, resources: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: c\n    image: nginx\n    resources: {resources}\n"
    )
}

fn create_fails(s: &Server, ns: &str, manifest: &str) -> String {
    String::from_utf8(s.fails_stdin(V, &["-n", ns, "create", "-f", "-"], manifest)).unwrap()
}

#[test]
fn limit_range_defaults_and_bounds() {
    let s = Server::start();
    namespace(&s, "lr");
    let lr = "apiVersion: v1\nkind: LimitRange\nmetadata:\n  name: lr\nspec:\n  limits:\n  - type: Container\n    default: {cpu: 500m, memory: 128Mi}\n    defaultRequest: {cpu: 100m, memory: 64Mi}\n    max: {cpu: \"1\"}\n    min: {memory: 10Mi}\n";
    s.ok_stdin(V, &["-n", "lr", "create", "-f", "-"], lr);
    // `kubectl get limitrange` shows upstream's columns.
    let table = s.ok(V, &["-n", "lr", "get", "limitrange"]);
    assert!(table.starts_with("NAME"), "{table}");
    assert!(table.contains("CREATED AT"), "{table}");

    s.ok(V, &["-n", "lr", "run", "p", "--image=nginx"]);
    let p = json(&s, &["-n", "lr", "get", "pod", "p"]);
    let resources = &p["spec"]["containers"][0]["resources"];
    assert_eq!(
        resources["requests"],
        serde_json::json!({"cpu": "100m", "memory": "64Mi"})
    );
    assert_eq!(
        resources["limits"],
        serde_json::json!({"cpu": "500m", "memory": "128Mi"})
    );
    assert_eq!(
        p["metadata"]["annotations"]["kubernetes.io/limit-ranger"],
        "LimitRanger plugin set: cpu, memory request for container p; cpu, memory limit for container p"
    );
    // The defaults make it Burstable.
    assert_eq!(p["status"]["qosClass"], "Burstable");

    let err = create_fails(
        &s,
        "lr",
        &pod(
            "big",
            "{requests: {memory: 5Mi}, limits: {cpu: \"2\", memory: 20Mi}}",
        ),
    );
    assert!(
        err.contains("pods \"big\" is forbidden: [minimum memory usage per Container is 10Mi, but request is 5Mi, maximum cpu usage per Container is 1, but limit is 2]"),
        "{err}"
    );
    assert!(err.contains("Error from server (Forbidden)"), "{err}");
}

#[test]
fn resource_quota_counts_pods_and_gives_back_what_deleted_pods_used() {
    let s = Server::start();
    namespace(&s, "rq");
    s.ok(
        V,
        &[
            "-n",
            "rq",
            "create",
            "quota",
            "q",
            "--hard=pods=2,count/configmaps=10",
        ],
    );
    // The controller fills in status.hard and status.used; until then the quota's usage is
    // unknown and admission refuses what it covers.
    wait_for(30, "quota status", || {
        let q = json(&s, &["-n", "rq", "get", "quota", "q"]);
        (q["status"]["used"]["pods"] == "0" && q["status"]["hard"]["pods"] == "2").then_some(())
    });
    for name in ["a", "b"] {
        s.ok_stdin(V, &["-n", "rq", "create", "-f", "-"], &pod(name, "{}"));
    }
    let err = create_fails(&s, "rq", &pod("c", "{}"));
    assert!(
        err.contains(
            "pods \"c\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2"
        ),
        "{err}"
    );
    let table = s.ok(V, &["-n", "rq", "get", "quota"]);
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "AGE", "REQUEST", "LIMIT"], "{table}");
    let row = lines.next().unwrap();
    assert!(row.starts_with("q "), "{table}");
    assert!(row.contains("pods: 2/2"), "{table}");
    let described = s.ok(V, &["-n", "rq", "describe", "quota", "q"]);
    let pods_line = described
        .lines()
        .find(|l| l.starts_with("pods"))
        .unwrap_or_else(|| panic!("{described}"));
    assert_eq!(
        pods_line.split_whitespace().collect::<Vec<_>>(),
        ["pods", "2", "2"]
    );

    // A deleted pod's share comes back once the controller has recounted.
    s.ok(V, &["-n", "rq", "delete", "pod", "a"]);
    wait_for(30, "usage to drop", || {
        let q = json(&s, &["-n", "rq", "get", "quota", "q"]);
        (q["status"]["used"]["pods"] == "1").then_some(())
    });
    s.ok_stdin(V, &["-n", "rq", "create", "-f", "-"], &pod("d", "{}"));
    let q = json(&s, &["-n", "rq", "get", "quota", "q"]);
    assert_eq!(q["status"]["used"]["pods"], "2");

    // A compute quota: every container must say what it asks for.
    namespace(&s, "compute");
    s.ok(
        V,
        &[
            "-n",
            "compute",
            "create",
            "quota",
            "cpu",
            "--hard=requests.cpu=1,limits.cpu=2",
        ],
    );
    wait_for(30, "compute quota status", || {
        let q = json(&s, &["-n", "compute", "get", "quota", "cpu"]);
        q["status"]["used"]["requests.cpu"].as_str().map(|_| ())
    });
    let err = create_fails(&s, "compute", &pod("bare", "{}"));
    assert!(
        err.contains("pods \"bare\" is forbidden: failed quota: cpu: must specify limits.cpu for: c; requests.cpu for: c"),
        "{err}"
    );
    s.ok_stdin(
        V,
        &["-n", "compute", "create", "-f", "-"],
        &pod("sized", "{requests: {cpu: 600m}, limits: {cpu: \"1\"}}"),
    );
    let table = s.ok(V, &["-n", "compute", "get", "quota", "cpu"]);
    assert!(table.contains("requests.cpu: 600m/1"), "{table}");
    assert!(table.contains("limits.cpu: 1/2"), "{table}");
}

#[test]
fn namespace_lifecycle_guards_missing_terminating_and_system_namespaces() {
    let s = Server::start();
    let err = s.fails(V, &["-n", "nope", "create", "configmap", "c"]);
    assert!(err.contains("namespaces \"nope\" not found"), "{err}");

    let err = s.fails(V, &["delete", "namespace", "default"]);
    assert!(
        err.contains("namespaces \"default\" is forbidden: this namespace may not be deleted"),
        "{err}"
    );
    for ns in ["kube-system", "kube-public"] {
        let err = s.fails(V, &["delete", "namespace", ns]);
        assert!(err.contains("this namespace may not be deleted"), "{err}");
    }

    // A finalizer the namespace controller cannot remove keeps the namespace Terminating.
    s.ok(V, &["create", "namespace", "held"]);
    let held = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: held\n  finalizers: [example.com/hold]\n";
    s.ok_stdin(V, &["-n", "held", "create", "-f", "-"], held);
    s.ok(V, &["delete", "namespace", "held", "--wait=false"]);
    wait_for(30, "Terminating", || {
        let ns = json(&s, &["get", "namespace", "held"]);
        (ns["status"]["phase"] == "Terminating").then_some(())
    });
    let err = s.fails(V, &["-n", "held", "create", "configmap", "more"]);
    assert!(
        err.contains("configmaps \"more\" is forbidden: unable to create new content in namespace held because it is being terminated"),
        "{err}"
    );
    // Objects already there can still change (their finalizers can be removed), and then the
    // namespace goes.
    s.ok(
        V,
        &[
            "-n",
            "held",
            "patch",
            "configmap",
            "held",
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ],
    );
    wait_for(60, "the namespace to go", || {
        let out = s.kubectl(V, &["get", "namespace", "held"]);
        (!out.status.success()).then_some(())
    });
}

#[test]
fn pods_run_as_a_service_account_with_its_token_volume_and_the_root_ca_is_published() {
    let s = Server::start();
    s.ok(V, &["create", "namespace", "sa"]);
    // The root CA lands in every namespace, new ones included.
    let ca = wait_for(30, "kube-root-ca.crt", || {
        let out = s.kubectl(
            V,
            &["-n", "sa", "get", "configmap", "kube-root-ca.crt", "-o", "json"],
        );
        out.status
            .success()
            .then(|| serde_json::from_slice::<Value>(&out.stdout).unwrap())
    });
    let pem = ca["data"]["ca.crt"].as_str().unwrap();
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
    let kubeconfig = std::fs::read_to_string(&s.kubeconfig).unwrap();
    assert!(kubeconfig.contains("certificate-authority-data"));
    assert!(ca["metadata"]["annotations"]["kubernetes.io/description"]
        .as_str()
        .unwrap()
        .starts_with("Contains a CA bundle that can be used to verify the kube-apiserver"));
    for ns in ["default", "kube-system", "kube-public"] {
        wait_for(30, "kube-root-ca.crt everywhere", || {
            s.kubectl(V, &["-n", ns, "get", "configmap", "kube-root-ca.crt"])
                .status
                .success()
                .then_some(())
        });
    }
    // Deleted, it comes back.
    s.ok(V, &["-n", "sa", "delete", "configmap", "kube-root-ca.crt"]);
    wait_for(30, "kube-root-ca.crt again", || {
        s.kubectl(V, &["-n", "sa", "get", "configmap", "kube-root-ca.crt"])
            .status
            .success()
            .then_some(())
    });

    s.wait_for_default_service_account("sa");
    let manifest = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  initContainers:\n  - {name: init, image: busybox}\n  containers:\n  - {name: c, image: nginx}\n";
    s.ok_stdin(V, &["-n", "sa", "create", "-f", "-"], manifest);
    let p = json(&s, &["-n", "sa", "get", "pod", "p"]);
    assert_eq!(p["spec"]["serviceAccountName"], "default");
    // The deprecated alias reads as the name, as upstream serves it.
    assert_eq!(p["spec"]["serviceAccount"], "default");
    let volumes = p["spec"]["volumes"].as_array().unwrap();
    assert_eq!(volumes.len(), 1, "{volumes:?}");
    let name = volumes[0]["name"].as_str().unwrap();
    assert!(
        name.starts_with("kube-api-access-") && name.len() == "kube-api-access-".len() + 5,
        "{name}"
    );
    assert_eq!(
        volumes[0]["projected"],
        serde_json::json!({
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ],
        })
    );
    for list in ["initContainers", "containers"] {
        assert_eq!(
            p["spec"][list][0]["volumeMounts"],
            serde_json::json!([{"name": name, "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]),
            "{list}"
        );
    }

    // An account that does not exist: refused.
    let missing = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: m\nspec:\n  serviceAccountName: x\n  containers:\n  - {name: c, image: nginx}\n";
    let err = create_fails(&s, "sa", missing);
    assert!(
        err.contains(
            "pods \"m\" is forbidden: error looking up service account sa/x: serviceaccount \"x\" not found"
        ),
        "{err}"
    );
    // Old manifests name the account with the deprecated alias only: it is that account.
    let alias = missing.replace("serviceAccountName: x", "serviceAccount: x");
    let err = create_fails(&s, "sa", &alias);
    assert!(
        err.contains("error looking up service account sa/x: serviceaccount \"x\" not found"),
        "{err}"
    );
    // An account that opts out of the token: no volume.
    s.ok(V, &["-n", "sa", "create", "serviceaccount", "quiet"]);
    s.ok(
        V,
        &[
            "-n",
            "sa",
            "patch",
            "serviceaccount",
            "quiet",
            "-p",
            r#"{"automountServiceAccountToken":false}"#,
        ],
    );
    let quiet = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: q\nspec:\n  serviceAccountName: quiet\n  containers:\n  - {name: c, image: nginx}\n";
    s.ok_stdin(V, &["-n", "sa", "create", "-f", "-"], quiet);
    let q = json(&s, &["-n", "sa", "get", "pod", "q"]);
    assert!(q["spec"]["volumes"].is_null(), "{}", q["spec"]);
    assert!(q["spec"]["containers"][0]["volumeMounts"].is_null());
}
