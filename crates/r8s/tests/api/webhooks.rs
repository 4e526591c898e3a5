//! Admission webhooks end to end: a real HTTPS webhook server (hyper and rustls, with a CA made
//! for the test) on 127.0.0.1, registered through MutatingWebhookConfigurations and
//! ValidatingWebhookConfigurations, and the real kubectl seeing what it decides: denials with
//! the webhook's message, labels added by a JSON patch, warnings, failure policies and
//! namespace selectors. Everything (the server, the webhook server, their files) goes when a
//! test ends.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};
use support::Server;

const KUBECTL: &str = "1.33";

/// What the webhook server answers for one review (its path chooses the behaviour).
type Decide = fn(path: &str, request: &Value) -> Value;

/// An HTTPS webhook server on 127.0.0.1 ([`support::https::HttpsServer`]) answering reviews
/// with `decide` and recording them; stopped when dropped.
struct WebhookServer {
    server: support::https::HttpsServer,
    /// Every AdmissionReview request received, in order.
    seen: Arc<Mutex<Vec<Value>>>,
}

impl WebhookServer {
    fn start(decide: Decide) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let seen_in = seen.clone();
        let server = support::https::HttpsServer::start(Arc::new(move |path: String, review: Value| {
            let seen = seen_in.clone();
            Box::pin(async move {
                if path == "/slow" {
                    // Slower than any timeout the tests give it.
                    tokio::time::sleep(Duration::from_secs(5)).await;
                }
                seen.lock().unwrap().push(review.clone());
                let mut response = decide(&path, &review["request"]);
                response["uid"] = review["request"]["uid"].clone();
                json!({
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "response": response,
                })
            })
        }));
        WebhookServer { server, seen }
    }

    fn url(&self, path: &str) -> String {
        self.server.url(path)
    }

    fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.server.ca_pem)
    }

    /// Stop serving: connections are refused from now on.
    fn stop(&mut self) {
        self.server.stop();
    }
}

/// The JSON patch (base64) of a mutating answer.
fn patch(ops: Value) -> String {
    base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&ops).unwrap())
}

fn decide(path: &str, request: &Value) -> Value {
    let name = request["name"].as_str().unwrap_or("");
    match path {
        "/deny" if name.starts_with("bad") => json!({
            "allowed": false,
            "status": {"code": 403, "message": format!("pod {name} is not welcome here")},
        }),
        "/deny-all" => json!({"allowed": false, "status": {"message": "no pods in this namespace"}}),
        "/label" => {
            let op = if request["object"]["metadata"]["labels"].is_object() {
                json!({"op": "add", "path": "/metadata/labels/mutated-by", "value": "webhook"})
            } else {
                json!({"op": "add", "path": "/metadata/labels", "value": {"mutated-by": "webhook"}})
            };
            json!({"allowed": true, "patchType": "JSONPatch", "patch": patch(json!([op]))})
        }
        // Records whether it saw label "b" (set by a later webhook) in label "a-saw-b".
        "/a" => {
            let saw = request["object"]["metadata"]["labels"]["b"] == "yes";
            let op = json!({"op": "add", "path": "/metadata/labels/a-saw-b", "value": if saw { "yes" } else { "no" }});
            json!({"allowed": true, "patchType": "JSONPatch", "patch": patch(json!([op]))})
        }
        "/b" => {
            let op = json!({"op": "add", "path": "/metadata/labels/b", "value": "yes"});
            json!({"allowed": true, "patchType": "JSONPatch", "patch": patch(json!([op]))})
        }
        "/warn" => json!({"allowed": true, "warnings": ["pods here are watched by the warn webhook"]}),
        "/allow-ignore" => json!({"allowed": true, "warnings": ["seen by ignore.example.com"]}),
        "/allow-fail" => json!({"allowed": true, "warnings": ["seen by fail.example.com"]}),
        _ => json!({"allowed": true}),
    }
}

/// A configuration with one webhook for pod creations.
fn configuration(kind: &str, name: &str, hook: &str, url: &str, ca: &str, extra: &str) -> String {
    format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: {kind}
metadata:
  name: {name}
webhooks:
- name: {hook}
  clientConfig:
    url: {url}
    caBundle: {ca}
  rules:
  - operations: ["CREATE"]
    apiGroups: [""]
    apiVersions: ["v1"]
    resources: ["pods"]
  sideEffects: None
  admissionReviewVersions: ["v1"]
{extra}"#
    )
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Retry `f` until it returns true (webhook configurations reach the plugins through a watch),
/// for at most 20 s.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A server-side dry run of `kubectl run NAME` in `ns`.
fn dry_run(s: &Server, ns: &str, name: &str) -> std::process::Output {
    s.kubectl(
        KUBECTL,
        &[
            "-n",
            ns,
            "run",
            name,
            "--image=nginx",
            "--dry-run=server",
            "-o",
            "json",
        ],
    )
}

#[test]
fn validating_webhook_denies_with_its_message() {
    let s = Server::start();
    let hook = WebhookServer::start(decide);
    s.ok_stdin(
        KUBECTL,
        &["apply", "-f", "-"],
        &configuration(
            "ValidatingWebhookConfiguration",
            "deny",
            "deny.example.com",
            &hook.url("/deny"),
            &hook.ca_bundle(),
            "",
        ),
    );
    // Defaults as upstream's.
    let cfg: Value = serde_json::from_str(&s.ok(
        KUBECTL,
        &["get", "validatingwebhookconfiguration", "deny", "-o", "json"],
    ))
    .unwrap();
    let h = &cfg["webhooks"][0];
    assert_eq!(h["failurePolicy"], "Fail");
    assert_eq!(h["matchPolicy"], "Equivalent");
    assert_eq!(h["timeoutSeconds"], 10);
    assert_eq!(h["namespaceSelector"], json!({}));
    assert_eq!(h["objectSelector"], json!({}));
    assert_eq!(h["rules"][0]["scope"], "*");
    let table = s.ok(KUBECTL, &["get", "validatingwebhookconfigurations"]);
    assert!(table.contains("WEBHOOKS") && table.contains("deny "), "{table}");

    eventually("the webhook to deny", || {
        !dry_run(&s, "default", "bad-probe").status.success()
    });
    let out = s.kubectl(KUBECTL, &["run", "bad-pod", "--image=nginx"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(
            "admission webhook \"deny.example.com\" denied the request: pod bad-pod is not welcome here"
        ),
        "{err}"
    );
    assert!(
        err.contains("Forbidden") || err.contains("403") || err.contains("Error from server"),
        "{err}"
    );
    assert!(s.kubectl(KUBECTL, &["get", "pod", "bad-pod"]).status.code() != Some(0));
    // Others pass.
    s.ok(KUBECTL, &["run", "good-pod", "--image=nginx"]);

    // The review the webhook received.
    let seen = hook.seen.lock().unwrap().clone();
    let review = seen
        .iter()
        .find(|r| r["request"]["name"] == "good-pod")
        .expect("the webhook saw good-pod");
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
    let req = &review["request"];
    assert_eq!(req["kind"], json!({"group": "", "version": "v1", "kind": "Pod"}));
    assert_eq!(
        req["resource"],
        json!({"group": "", "version": "v1", "resource": "pods"})
    );
    assert_eq!(req["requestKind"], req["kind"]);
    assert_eq!(req["namespace"], "default");
    assert_eq!(req["operation"], "CREATE");
    assert_eq!(req["dryRun"], false);
    assert_eq!(req["object"]["metadata"]["name"], "good-pod");
    assert!(req["oldObject"].is_null());
    assert_eq!(req["options"]["kind"], "CreateOptions");
    assert!(
        req["userInfo"]["username"]
            .as_str()
            .is_some_and(|u| !u.is_empty()),
        "{req}"
    );
    assert!(req["uid"].as_str().is_some_and(|u| !u.is_empty()));

    // A broken webhook never locks out its own repair: configurations are not sent to webhooks.
    s.ok(KUBECTL, &["delete", "validatingwebhookconfiguration", "deny"]);
}

#[test]
fn mutating_webhook_adds_a_label_through_a_json_patch() {
    let s = Server::start();
    let hook = WebhookServer::start(decide);
    s.ok_stdin(
        KUBECTL,
        &["apply", "-f", "-"],
        &configuration(
            "MutatingWebhookConfiguration",
            "label",
            "label.example.com",
            &hook.url("/label"),
            &hook.ca_bundle(),
            "",
        ),
    );
    let cfg: Value = serde_json::from_str(&s.ok(
        KUBECTL,
        &["get", "mutatingwebhookconfiguration", "label", "-o", "json"],
    ))
    .unwrap();
    assert_eq!(cfg["webhooks"][0]["reinvocationPolicy"], "Never");

    eventually("the webhook to label", || {
        let out = dry_run(&s, "default", "probe");
        out.status.success()
            && serde_json::from_slice::<Value>(&out.stdout).unwrap()["metadata"]["labels"]["mutated-by"]
                == "webhook"
    });
    s.ok(KUBECTL, &["run", "web", "--image=nginx", "--labels=app=web"]);
    let pod: Value = serde_json::from_str(&s.ok(KUBECTL, &["get", "pod", "web", "-o", "json"])).unwrap();
    assert_eq!(pod["metadata"]["labels"]["mutated-by"], "webhook", "{pod}");
    assert_eq!(pod["metadata"]["labels"]["app"], "web");
    // The dry runs were announced as such.
    let seen = hook.seen.lock().unwrap().clone();
    assert!(seen
        .iter()
        .any(|r| r["request"]["dryRun"] == true && r["request"]["options"]["dryRun"] == json!(["All"])));
    assert!(seen
        .iter()
        .any(|r| r["request"]["name"] == "web" && r["request"]["dryRun"] == false));
}

#[test]
fn a_webhooks_warnings_reach_kubectl() {
    let s = Server::start();
    let hook = WebhookServer::start(decide);
    s.ok_stdin(
        KUBECTL,
        &["apply", "-f", "-"],
        &configuration(
            "ValidatingWebhookConfiguration",
            "warn",
            "warn.example.com",
            &hook.url("/warn"),
            &hook.ca_bundle(),
            "",
        ),
    );
    eventually("the warning", || {
        stderr(&dry_run(&s, "default", "probe")).contains("pods here are watched")
    });
    let out = s.kubectl(KUBECTL, &["run", "watched", "--image=nginx"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("Warning: pods here are watched by the warn webhook"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn failure_policy_fail_refuses_and_ignore_lets_through() {
    let s = Server::start();
    let mut hook = WebhookServer::start(decide);
    let ignore = configuration(
        "ValidatingWebhookConfiguration",
        "ignore",
        "ignore.example.com",
        &hook.url("/allow-ignore"),
        &hook.ca_bundle(),
        "  failurePolicy: Ignore\n",
    );
    let fail = configuration(
        "ValidatingWebhookConfiguration",
        "fail",
        "fail.example.com",
        &hook.url("/allow-fail"),
        &hook.ca_bundle(),
        "  failurePolicy: Fail\n  timeoutSeconds: 2\n",
    );
    s.ok_stdin(KUBECTL, &["apply", "-f", "-"], &format!("{ignore}---\n{fail}"));
    // Both are in force while the webhook answers.
    eventually("both webhooks", || {
        let err = stderr(&dry_run(&s, "default", "probe"));
        err.contains("seen by ignore.example.com") && err.contains("seen by fail.example.com")
    });

    hook.stop();
    let out = s.kubectl(KUBECTL, &["run", "refused", "--image=nginx"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(
            "Internal error occurred: failed calling webhook \"fail.example.com\": Post \"https://127.0.0.1:"
        ),
        "{err}"
    );
    assert!(err.contains("connection refused"), "{err}");
    assert!(!err.contains("ignore.example.com"), "{err}");

    // Without the Fail webhook, the unreachable Ignore webhook lets requests through.
    s.ok(KUBECTL, &["delete", "validatingwebhookconfiguration", "fail"]);
    eventually("requests to pass", || {
        s.kubectl(KUBECTL, &["run", "let-through", "--image=nginx"])
            .status
            .success()
    });
    s.ok(KUBECTL, &["get", "pod", "let-through"]);
}

#[test]
fn namespace_selector_limits_a_webhook_to_labelled_namespaces() {
    let s = Server::start();
    let hook = WebhookServer::start(decide);
    s.ok(KUBECTL, &["create", "namespace", "watched"]);
    s.ok(KUBECTL, &["label", "namespace", "watched", "webhooks=on"]);
    s.ok(KUBECTL, &["create", "namespace", "free"]);
    s.ok_stdin(
        KUBECTL,
        &["apply", "-f", "-"],
        &configuration(
            "ValidatingWebhookConfiguration",
            "deny-all",
            "deny-all.example.com",
            &hook.url("/deny-all"),
            &hook.ca_bundle(),
            "  namespaceSelector:\n    matchLabels:\n      webhooks: \"on\"\n",
        ),
    );
    eventually("the webhook in the labelled namespace", || {
        !dry_run(&s, "watched", "probe").status.success()
    });
    let out = s.kubectl(KUBECTL, &["-n", "watched", "run", "p", "--image=nginx"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(
            "admission webhook \"deny-all.example.com\" denied the request: no pods in this namespace"
        ),
        "{}",
        stderr(&out)
    );
    s.ok(KUBECTL, &["-n", "free", "run", "p", "--image=nginx"]);
    s.ok(KUBECTL, &["-n", "default", "run", "p", "--image=nginx"]);
    // The namespace's labels are read as they are now.
    s.ok(KUBECTL, &["label", "namespace", "free", "webhooks=on"]);
    let out = s.kubectl(KUBECTL, &["-n", "free", "run", "q", "--image=nginx"]);
    assert!(!out.status.success(), "{}", stderr(&out));
    // The webhook was never asked about pods in unlabelled namespaces.
    let seen = hook.seen.lock().unwrap().clone();
    assert!(seen.iter().all(|r| r["request"]["namespace"] != "default"));
}

#[test]
fn if_needed_webhooks_run_again_after_a_later_change() {
    let s = Server::start();
    let hook = WebhookServer::start(decide);
    // Pods carry labels (kubectl run sets run=NAME), so the patches add to an existing map.
    let a = configuration(
        "MutatingWebhookConfiguration",
        "a",
        "a.example.com",
        &hook.url("/a"),
        &hook.ca_bundle(),
        "  reinvocationPolicy: IfNeeded\n",
    );
    let b = configuration(
        "MutatingWebhookConfiguration",
        "b",
        "b.example.com",
        &hook.url("/b"),
        &hook.ca_bundle(),
        "",
    );
    s.ok_stdin(KUBECTL, &["apply", "-f", "-"], &format!("{a}---\n{b}"));
    let labels = |name: &str| -> Value {
        let out = dry_run(&s, "default", name);
        if !out.status.success() {
            return Value::Null;
        }
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["metadata"]["labels"].clone()
    };
    // Configurations run in name order: a, then b, which changes the object, so a (IfNeeded)
    // runs once more and sees b's label.
    eventually("both webhooks and the reinvocation", || {
        let l = labels("probe");
        l["b"] == "yes" && l["a-saw-b"] == "yes"
    });
    s.ok(KUBECTL, &["run", "twice", "--image=nginx"]);
    let pod: Value = serde_json::from_str(&s.ok(KUBECTL, &["get", "pod", "twice", "-o", "json"])).unwrap();
    assert_eq!(pod["metadata"]["labels"]["a-saw-b"], "yes", "{pod}");
    // a, then b, then a again, each seeing what came before.
    let seen: Vec<Value> = hook
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r["request"]["name"] == "twice")
        .map(|r| r["request"]["object"]["metadata"]["labels"].clone())
        .collect();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(
        seen[0].get("b").is_none() && seen[0].get("a-saw-b").is_none(),
        "{seen:?}"
    );
    assert_eq!(
        (&seen[1]["a-saw-b"], seen[1].get("b")),
        (&json!("no"), None),
        "{seen:?}"
    );
    assert_eq!(
        (&seen[2]["a-saw-b"], &seen[2]["b"]),
        (&json!("no"), &json!("yes")),
        "{seen:?}"
    );
}

#[test]
fn a_webhook_that_times_out_fails_the_request_unless_ignored() {
    let s = Server::start();
    let hook = WebhookServer::start(decide);
    s.ok_stdin(
        KUBECTL,
        &["apply", "-f", "-"],
        &configuration(
            "MutatingWebhookConfiguration",
            "slow",
            "slow.example.com",
            &hook.url("/slow"),
            &hook.ca_bundle(),
            "  timeoutSeconds: 1\n",
        ),
    );
    eventually("the slow webhook", || {
        !dry_run(&s, "default", "probe").status.success()
    });
    let started = Instant::now();
    let out = s.kubectl(KUBECTL, &["run", "late", "--image=nginx"]);
    assert!(!out.status.success());
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the timeout was not kept"
    );
    let err = stderr(&out);
    assert!(
        err.contains("Internal error occurred: failed calling webhook \"slow.example.com\": failed to call webhook: Post \"https://127.0.0.1:")
            && err.contains("/slow?timeout=1s\": context deadline exceeded"),
        "{err}"
    );
    // With failurePolicy Ignore the same webhook only costs its timeout.
    let cfg = s.ok(
        KUBECTL,
        &["get", "mutatingwebhookconfiguration", "slow", "-o", "json"],
    );
    let mut cfg: Value = serde_json::from_str(&cfg).unwrap();
    cfg["webhooks"][0]["failurePolicy"] = json!("Ignore");
    s.ok_stdin(KUBECTL, &["replace", "-f", "-"], &cfg.to_string());
    eventually("the Ignore policy", || {
        s.kubectl(KUBECTL, &["run", "on-time", "--image=nginx"])
            .status
            .success()
    });
}
