//! The audit stage end to end: a real `r8s server` with an audit policy, driven by the real
//! kubectl, leaves upstream's `audit.k8s.io/v1` events in its log — the right stages and levels,
//! the request and response objects only where the policy asks for them, the authorization
//! decision — answers with an `Audit-ID` header, and rotates its log by size.

use crate::support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{kubectl_binary, Server};

const KUBECTL: &str = "1.33";

/// Metadata for configmaps, everything for pods, nothing else.
const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
rules:
  - level: Metadata
    resources:
      - group: ""
        resources: ["configmaps"]
  - level: RequestResponse
    resources:
      - group: ""
        resources: ["pods"]
  - level: None
"#;

/// The events in the log so far (a line still being written is left for later).
fn events(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .split_inclusive('\n')
        .filter_map(|l| l.strip_suffix('\n'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect()
}

/// Read the log until `pick` finds what it wants (events reach the file shortly after the
/// response), for at most 20 s.
fn wait_for<T>(s: &Server, log: &Path, what: &str, pick: impl Fn(&[Value]) -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let evs = events(log);
        if let Some(found) = pick(&evs) {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; the log has:\n{}\nserver log:\n{}",
            evs.iter().map(Value::to_string).collect::<Vec<_>>().join("\n"),
            s.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A client process that goes when the test does, also when it fails.
struct KillOnDrop(std::process::Child);

impl KillOnDrop {
    fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        self.stop();
    }
}

fn by_id<'a>(evs: &'a [Value], id: &Value) -> Vec<&'a Value> {
    evs.iter().filter(|e| &e["auditID"] == id).collect()
}

fn stages(evs: &[&Value]) -> Vec<String> {
    evs.iter()
        .map(|e| e["stage"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The one request of `admin` with this verb on this resource (and name, once known).
fn admin_request(evs: &[Value], verb: &str, resource: &str, name: &str) -> Option<Value> {
    evs.iter()
        .find(|e| {
            e["user"]["username"] == "admin"
                && e["verb"] == verb
                && e["objectRef"]["resource"] == resource
                && (name.is_empty() || e["objectRef"]["name"] == name)
                && e["stage"] == "ResponseComplete"
        })
        .map(|e| e["auditID"].clone())
}

/// `2024-05-01T08:00:00.123456Z`.
fn assert_micro_time(v: &Value) {
    let s = v.as_str().unwrap_or_default();
    assert_eq!(s.len(), 27, "{s}");
    assert!(
        s.ends_with('Z') && &s[19..20] == "." && s[20..26].bytes().all(|b| b.is_ascii_digit()),
        "{s}"
    );
}

#[test]
fn the_log_holds_what_the_policy_asks_for() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("audit-policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    let log = dir.path().join("audit.log");
    let (policy_arg, log_arg) = (
        policy.to_str().unwrap().to_owned(),
        log.to_str().unwrap().to_owned(),
    );
    let s = Server::start_in(
        dir,
        &[
            "--disable-agent",
            "--audit-policy-file",
            &policy_arg,
            "--audit-log-path",
            &log_arg,
        ],
    );

    // A configmap: Metadata, RequestReceived then ResponseComplete, no objects.
    s.ok(
        KUBECTL,
        &["create", "configmap", "audit-cm", "--from-literal=a=b"],
    );
    let evs = wait_for(&s, &log, "the configmap's create", |evs| {
        admin_request(evs, "create", "configmaps", "audit-cm").map(|id| (id, evs.to_vec()))
    });
    let (cm_id, evs) = evs;
    let cm = by_id(&evs, &cm_id);
    assert_eq!(stages(&cm), ["RequestReceived", "ResponseComplete"], "{cm:#?}");
    let (received, complete) = (cm[0], cm[1]);
    for e in &cm {
        assert_eq!(e["kind"], "Event");
        assert_eq!(e["apiVersion"], "audit.k8s.io/v1");
        assert_eq!(e["level"], "Metadata");
        assert_eq!(e["verb"], "create");
        assert_eq!(e["user"]["username"], "admin");
        assert!(e["user"]["groups"]
            .as_array()
            .unwrap()
            .contains(&"system:masters".into()));
        assert_eq!(e["sourceIPs"], serde_json::json!(["127.0.0.1"]));
        assert!(e["userAgent"].as_str().unwrap().starts_with("kubectl"), "{e}");
        assert!(e["requestURI"]
            .as_str()
            .unwrap()
            .starts_with("/api/v1/namespaces/default/configmaps"));
        assert!(
            e.get("requestObject").is_none() && e.get("responseObject").is_none(),
            "{e}"
        );
        assert!(e.get("impersonatedUser").is_none());
        assert_micro_time(&e["requestReceivedTimestamp"]);
        assert_micro_time(&e["stageTimestamp"]);
    }
    assert_eq!(
        received["objectRef"],
        serde_json::json!({"resource": "configmaps", "namespace": "default", "apiVersion": "v1"})
    );
    assert_eq!(received["stageTimestamp"], received["requestReceivedTimestamp"]);
    assert!(received.get("responseStatus").is_none() && received.get("annotations").is_none());
    assert_eq!(
        complete["objectRef"],
        serde_json::json!({"resource": "configmaps", "namespace": "default", "name": "audit-cm", "apiVersion": "v1"})
    );
    assert_eq!(
        complete["responseStatus"],
        serde_json::json!({"metadata": {}, "code": 201})
    );
    assert_eq!(complete["annotations"]["authorization.k8s.io/decision"], "allow");
    assert_eq!(complete["annotations"]["authorization.k8s.io/reason"], "");

    // A pod: RequestResponse, the objects in ResponseComplete only.
    s.ok(
        KUBECTL,
        &["run", "audit-pod", "--image=busybox", "--restart=Never"],
    );
    let (pod_id, evs) = wait_for(&s, &log, "the pod's create", |evs| {
        admin_request(evs, "create", "pods", "audit-pod").map(|id| (id, evs.to_vec()))
    });
    let pod = by_id(&evs, &pod_id);
    assert_eq!(stages(&pod), ["RequestReceived", "ResponseComplete"], "{pod:#?}");
    assert!(pod.iter().all(|e| e["level"] == "RequestResponse"));
    assert!(pod[0].get("requestObject").is_none() && pod[0].get("responseObject").is_none());
    let complete = pod[1];
    assert_eq!(complete["responseStatus"]["code"], 201);
    assert_eq!(complete["objectRef"]["name"], "audit-pod");
    assert_eq!(complete["requestObject"]["kind"], "Pod");
    assert_eq!(complete["requestObject"]["metadata"]["name"], "audit-pod");
    assert!(
        complete["requestObject"]["metadata"].get("uid").is_none(),
        "as sent"
    );
    assert_eq!(complete["responseObject"]["kind"], "Pod");
    assert!(
        complete["responseObject"]["metadata"]["uid"].is_string(),
        "as stored"
    );
    assert_eq!(complete["annotations"]["authorization.k8s.io/decision"], "allow");
    // Requests RBAC allows name the binding, as upstream's reason (here: the scheduler's
    // reads of pods).
    let reason = wait_for(&s, &log, "an allow by RBAC", |evs| {
        evs.iter()
            .filter_map(|e| e["annotations"]["authorization.k8s.io/reason"].as_str())
            .find(|r| r.starts_with("RBAC: allowed by "))
            .map(str::to_owned)
    });
    assert!(reason.contains("Binding \""), "{reason}");
    // Nothing else of admin's so far: discovery and the rest are at level None.
    let admin: Vec<_> = evs.iter().filter(|e| e["user"]["username"] == "admin").collect();
    assert_eq!(admin.len(), 4, "{admin:#?}");

    // A watch: ResponseStarted once it streams, ResponseComplete when the client goes.
    let mut watch = KillOnDrop(
        Command::new(kubectl_binary(KUBECTL))
            .arg("--kubeconfig")
            .arg(&s.kubeconfig)
            .args(["get", "pods", "-w"])
            .env("KUBECACHEDIR", s.dir.path().join("kubecache-watch"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let started = wait_for(&s, &log, "the watch's ResponseStarted", |evs| {
        evs.iter()
            .find(|e| {
                e["user"]["username"] == "admin"
                    && e["verb"] == "watch"
                    && e["objectRef"]["resource"] == "pods"
                    && e["stage"] == "ResponseStarted"
            })
            .cloned()
    });
    watch.stop();
    assert_eq!(started["responseStatus"]["code"], 200);
    assert_eq!(started["level"], "RequestResponse");
    assert!(started.get("responseObject").is_none());
    let watch_events = wait_for(&s, &log, "the watch's ResponseComplete", |evs| {
        let mine = by_id(evs, &started["auditID"]);
        (mine.len() == 3).then(|| stages(&mine))
    });
    assert_eq!(
        watch_events,
        ["RequestReceived", "ResponseStarted", "ResponseComplete"]
    );

    // Forbidden (impersonating a user RBAC lets do nothing): the decision is forbid.
    let err = s.fails(KUBECTL, &["get", "pods", "--as=nobody"]);
    assert!(err.contains("forbidden"), "{err}");
    let denied = wait_for(&s, &log, "the forbidden list", |evs| {
        evs.iter()
            .find(|e| e["impersonatedUser"]["username"] == "nobody" && e["stage"] == "ResponseComplete")
            .cloned()
    });
    assert_eq!(denied["user"]["username"], "admin", "the authenticated user");
    assert_eq!(denied["verb"], "list");
    assert_eq!(denied["responseStatus"]["code"], 403);
    assert_eq!(denied["responseStatus"]["reason"], "Forbidden");
    assert_eq!(denied["responseStatus"]["status"], "Failure");
    assert!(denied["responseStatus"]["message"]
        .as_str()
        .unwrap()
        .contains("User \"nobody\" cannot list"));
    assert_eq!(denied["annotations"]["authorization.k8s.io/decision"], "forbid");

    // Failed authentication: one ResponseStarted event with the 401, no user.
    let out = Command::new(kubectl_binary(KUBECTL))
        .args([
            "--kubeconfig",
            "/dev/null",
            "--server",
            &format!("https://127.0.0.1:{}", s.port),
        ])
        .arg("--certificate-authority")
        .arg(s.dir.path().join("server/tls/ca.crt"))
        .args([
            "--token",
            "not-a-token",
            "get",
            "--raw",
            "/api/v1/namespaces/default/pods",
        ])
        .env("KUBECACHEDIR", s.dir.path().join("kubecache-anon"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let unauthorized = wait_for(&s, &log, "the unauthenticated list", |evs| {
        evs.iter()
            .find(|e| e["responseStatus"]["code"] == 401 && e["objectRef"]["resource"] == "pods")
            .cloned()
    });
    assert_eq!(unauthorized["stage"], "ResponseStarted");
    assert!(
        unauthorized["user"].as_object().unwrap().is_empty(),
        "{unauthorized}"
    );
    assert_eq!(unauthorized["responseStatus"]["reason"], "Unauthorized");

    // The Audit-ID response header names the request's events.
    let out = s.kubectl(
        KUBECTL,
        &[
            "get",
            "--raw",
            "/api/v1/namespaces/default/pods/audit-pod",
            "-v=8",
        ],
    );
    assert!(out.status.success());
    let verbose = String::from_utf8_lossy(&out.stderr);
    let header = verbose
        .lines()
        .find_map(|l| {
            l.trim()
                .split_once("Audit-Id: ")
                .map(|(_, id)| id.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no Audit-Id header in:\n{verbose}"));
    assert_eq!(header.len(), 36, "a UUID: {header}");
    let got = wait_for(&s, &log, "the get named by the Audit-ID header", |evs| {
        let mine = by_id(evs, &Value::from(header.clone()));
        (mine.len() == 2).then(|| mine.into_iter().cloned().collect::<Vec<_>>())
    });
    assert_eq!(got[1]["verb"], "get");
    assert_eq!(got[1]["objectRef"]["name"], "audit-pod");
    assert_eq!(got[1]["responseObject"]["metadata"]["name"], "audit-pod");

    // The counters.
    let metrics = s.ok(KUBECTL, &["get", "--raw", "/metrics"]);
    let count = |name: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim().parse::<f64>().unwrap()))
            .unwrap_or_else(|| panic!("no {name} in /metrics"))
    };
    assert!(count("apiserver_audit_event_total ") >= 10.0);
    assert!(count("apiserver_audit_level_total{level=\"RequestResponse\"} ") >= 4.0);
    assert!(count("apiserver_audit_level_total{level=\"None\"} ") >= 1.0);
}

#[test]
fn the_log_rotates_by_size_and_keeps_maxbackup_backups() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("audit-policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: RequestResponse\n  resources:\n  - group: \"\"\n    resources: [configmaps]\n",
    )
    .unwrap();
    let logs = dir.path().join("audit");
    let log = logs.join("audit.log");
    let payload = dir.path().join("payload.txt");
    std::fs::write(&payload, "x".repeat(300 * 1024)).unwrap();
    let (policy_arg, log_arg) = (
        policy.to_str().unwrap().to_owned(),
        log.to_str().unwrap().to_owned(),
    );
    let s = Server::start_in(
        dir,
        &[
            "--disable-agent",
            "--audit-policy-file",
            &policy_arg,
            "--audit-log-path",
            &log_arg,
            "--audit-log-maxsize",
            "1",
            "--audit-log-maxbackup",
            "2",
        ],
    );
    // Each read of the configmap logs it whole (about 300 KiB): well over 3 MiB in all.
    let from_file = format!("--from-file=big={}", payload.display());
    s.ok(KUBECTL, &["create", "configmap", "big", &from_file]);
    for _ in 0..10 {
        s.ok(KUBECTL, &["get", "configmap", "big", "-o", "name"]);
    }
    // Three rotations: the first file (with the create) is gone, two backups are left.
    let backups = wait_for(&s, &log, "three rotations", |_| {
        let mut backups = Vec::new();
        let mut create = false;
        for entry in std::fs::read_dir(&logs).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            create |= events(&entry.path())
                .iter()
                .any(|e| e["verb"] == "create" && e["stage"] == "ResponseComplete");
            if name != "audit.log" {
                backups.push(name);
            }
        }
        (!create && backups.len() == 2).then_some(backups)
    });
    for name in &backups {
        // audit-2026-11-22T08-00-00.000.log
        let stamp = name
            .strip_prefix("audit-")
            .and_then(|n| n.strip_suffix(".log"))
            .unwrap_or_else(|| panic!("not a backup name: {name}"));
        assert_eq!(stamp.len(), 23, "{name}");
        assert_eq!(
            (&stamp[10..11], &stamp[13..14], &stamp[19..20]),
            ("T", "-", "."),
            "{name}"
        );
        let path = logs.join(name);
        assert!(
            std::fs::metadata(&path).unwrap().len() <= 1024 * 1024,
            "{name} is over 1 MiB"
        );
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let e: Value = serde_json::from_str(line).unwrap();
            assert_eq!(e["kind"], "Event");
        }
    }
    // The reads that are left are whole events, the newest in the current file.
    assert!(events(&log).iter().any(|e| e["verb"] == "get"
        && e["responseObject"]["data"]["big"]
            .as_str()
            .is_some_and(|d| d.len() == 300 * 1024)));
}
