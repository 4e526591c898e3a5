//! `r8s trace`: the journey of the reference document's command, told by the running system
//! with its real timings — every stage present, in causal order, adding up to the time the
//! Deployment took to be ready; a rollout's second ReplicaSet; a pull that fails, with its
//! stage and error.

use std::process::Output;
use std::time::{Duration, Instant};

use crate::support;

use serde_json::Value;
use support::cluster::*;
use support::Server;

/// `r8s trace ARGS` against `s`.
fn trace(s: &Server, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_r8s"))
        .arg("trace")
        .arg("--kubeconfig")
        .arg(&s.kubeconfig)
        .args(args)
        .env("KUBECACHEDIR", s.dir.path().join("kubecache-r8s"))
        .output()
        .unwrap()
}

fn stages_of(s: &Server, object: &str) -> Vec<Value> {
    let out = trace(s, &[object, "-o", "json"]);
    assert!(
        out.status.success(),
        "r8s trace {object}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["kind"], "Trace", "{v}");
    v["stages"].as_array().unwrap().clone()
}

fn field<'a>(s: &'a Value, name: &str) -> &'a str {
    s["fields"][name].as_str().unwrap_or("")
}

fn began(s: &Value) -> u64 {
    s["startUnixNanos"].as_u64().unwrap()
}

fn end(s: &Value) -> u64 {
    began(s) + s["durationNanos"].as_u64().unwrap()
}

/// The outermost stages (depth 0) of `component`/`stage` that `pred` accepts.
fn groups<'a>(
    stages: &'a [Value],
    component: &str,
    stage: &str,
    pred: impl Fn(&Value) -> bool,
) -> Vec<&'a Value> {
    stages
        .iter()
        .filter(|s| s["depth"] == 0 && s["component"] == component && s["stage"] == stage && pred(s))
        .collect()
}

/// The stages under the outermost stage `root` (the ones after it until the next depth 0).
fn children<'a>(stages: &'a [Value], root: &Value) -> Vec<&'a Value> {
    let i = stages.iter().position(|s| std::ptr::eq(s, root)).unwrap();
    stages[i + 1..].iter().take_while(|s| s["depth"] != 0).collect()
}

#[test]
fn the_journey_of_a_deployment_is_told_in_causal_order() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let c = start("trace-node", "10.221.0.0/16", "r8str");
    let s = &c.s;

    // The north-star command, timed from the client's side until the rollout is complete.
    let t0 = Instant::now();
    s.ok(
        V,
        &["create", "deployment", "nginx", "--image=nginx", "--replicas=3"],
    );
    s.ok(V, &["rollout", "status", "deployment/nginx", "--timeout=120s"]);
    let measured = t0.elapsed();
    // The last status writes (the Deployment's own) may still be closing.
    std::thread::sleep(Duration::from_millis(500));
    let stages = stages_of(s, "deployment/nginx");
    let deployment_uid = json(s, &["get", "deployment", "nginx"])["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();

    // The API server: the create, with authentication, authorization, admission and the write.
    let create = groups(&stages, "apiserver", "request", |s| {
        field(s, "verb") == "create" && field(s, "object") == "Deployment default/nginx"
    });
    assert_eq!(create.len(), 1, "{stages:#?}");
    let create = create[0];
    assert_eq!(create["uid"], deployment_uid.as_str());
    assert_eq!(field(create, "code"), "201");
    let inner = children(&stages, create);
    let named = |name: &str| inner.iter().filter(|s| s["stage"] == name).count();
    let authn = inner.iter().find(|s| s["stage"] == "authn").expect("authn");
    assert!(!field(authn, "authenticator").is_empty(), "{authn}");
    let authz = inner.iter().find(|s| s["stage"] == "authz").expect("authz");
    assert!(!field(authz, "authorizer").is_empty(), "{authz}");
    assert!(!field(authz, "decision").is_empty(), "{authz}");
    assert!(named("admission") >= 3, "{inner:#?}");
    let store = inner
        .iter()
        .find(|s| s["stage"] == "store.create")
        .expect("store.create");
    assert!(field(store, "revision").parse::<u64>().is_ok(), "{store}");

    // The controllers: the Deployment's ReplicaSet, and the ReplicaSet's pods.
    let synced = groups(&stages, "controller-manager", "deployment.sync", |s| {
        field(s, "decision").contains("created ReplicaSet nginx-")
    });
    assert_eq!(synced.len(), 1, "{stages:#?}");
    let rs_create = groups(&stages, "apiserver", "request", |s| {
        field(s, "verb") == "create" && field(s, "object").starts_with("ReplicaSet default/nginx-")
    });
    assert_eq!(rs_create.len(), 1, "{stages:#?}");
    assert_eq!(rs_create[0]["owner"], deployment_uid.as_str());
    let rs_uid = rs_create[0]["uid"].as_str().unwrap();
    let rs_synced = groups(&stages, "controller-manager", "replicaset.sync", |s| {
        s["uid"] == rs_uid && field(s, "decision").contains("created")
    });
    assert!(!rs_synced.is_empty(), "{stages:#?}");
    let pod_creates = groups(&stages, "apiserver", "request", |s| {
        field(s, "verb") == "create"
            && field(s, "subresource").is_empty()
            && field(s, "object").starts_with("Pod default/nginx-")
            && s["owner"] == rs_uid
    });
    assert_eq!(pod_creates.len(), 3, "{stages:#?}");
    assert!(began(create) < began(synced[0]) && began(synced[0]) < began(rs_create[0]));
    assert!(began(rs_create[0]) < began(rs_synced[0]));

    // Each pod: scheduled and bound, then the kubelet's sandbox, image and container, then Ready.
    for pod in pod_creates {
        let uid = pod["uid"].as_str().unwrap();
        assert!(began(rs_synced[0]) < began(pod));
        let scheduled = groups(&stages, "scheduler", "schedule", |s| s["uid"] == uid);
        assert_eq!(scheduled.len(), 1, "{stages:#?}");
        assert!(
            field(scheduled[0], "decision").starts_with("1 of 1 node feasible; chose trace-node"),
            "{}",
            scheduled[0]
        );
        assert!(children(&stages, scheduled[0])
            .iter()
            .any(|s| s["stage"] == "bind" && field(s, "node") == "trace-node"));
        let binding = groups(&stages, "apiserver", "request", |s| {
            s["uid"] == uid && field(s, "subresource") == "binding"
        });
        assert_eq!(binding.len(), 1, "{stages:#?}");
        let synced = groups(&stages, "kubelet", "kubelet.sync_pod", |s| {
            s["uid"] == uid && field(s, "decision").contains("ran the pod's sandbox")
        });
        assert_eq!(synced.len(), 1, "{stages:#?}");
        let steps = children(&stages, synced[0]);
        let step = |name: &str| {
            *steps
                .iter()
                .find(|s| s["stage"] == name)
                .unwrap_or_else(|| panic!("{name} in {steps:#?}"))
        };
        assert!(
            field(step("cri.run_pod_sandbox"), "ip").starts_with("10.221."),
            "{steps:#?}"
        );
        assert!(field(step("image"), "decision").contains("already present on machine"));
        assert_eq!(field(step("cri.create_container"), "container"), "nginx");
        assert_eq!(field(step("cri.start_container"), "container"), "nginx");
        assert!(field(synced[0], "decision").contains("started container nginx"));
        let ready = groups(&stages, "kubelet", "kubelet.status", |s| {
            s["uid"] == uid && field(s, "decision").contains("Ready=True")
        });
        assert!(!ready.is_empty(), "{stages:#?}");
        // Causal order: created, scheduled, bound, run, ready.
        assert!(began(pod) < began(scheduled[0]));
        assert!(began(scheduled[0]) < began(binding[0]));
        assert!(began(binding[0]) < began(synced[0]));
        assert!(began(step("cri.run_pod_sandbox")) < began(step("cri.start_container")));
        // Ready is written (by the status manager, beside the worker) once the container runs.
        assert!(end(step("cri.start_container")) <= began(ready[0]));
    }

    // The story spans the time the client waited, within 10%.
    let first = stages.iter().map(began).min().unwrap();
    let last = stages.iter().map(end).max().unwrap();
    let told = Duration::from_nanos(last - first);
    let gap = measured.as_secs_f64() - told.as_secs_f64();
    eprintln!("trace: told {told:?}, measured {measured:?}");
    assert!(
        gap.abs() <= measured.as_secs_f64() * 0.1,
        "told {told:?}, measured {measured:?}"
    );

    // The timeline in the terminal: one line per stage, indented by component.
    let out = trace(s, &["deployment/nginx"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    eprintln!("{text}");
    assert!(
        text.starts_with(&format!("Deployment default/nginx (uid {deployment_uid})")),
        "{text}"
    );
    for line in [
        "apiserver: request create Deployment default/nginx",
        "  controller-manager: deployment.sync",
        "    scheduler: schedule",
        "      kubelet: kubelet.sync_pod",
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }

    // A rollout: the second ReplicaSet, and the first scaled down.
    s.ok(V, &["set", "env", "deployment/nginx", "ROLLED=1"]);
    s.ok(V, &["rollout", "status", "deployment/nginx", "--timeout=120s"]);
    let stages = stages_of(s, "deployment/nginx");
    let replicasets: std::collections::HashSet<&str> = groups(&stages, "apiserver", "request", |s| {
        field(s, "verb") == "create" && field(s, "object").starts_with("ReplicaSet default/nginx-")
    })
    .iter()
    .map(|s| s["uid"].as_str().unwrap())
    .collect();
    assert_eq!(replicasets.len(), 2, "{stages:#?}");
    assert!(
        !groups(&stages, "controller-manager", "deployment.sync", |s| {
            field(s, "decision").contains("scaled down ReplicaSet")
        })
        .is_empty(),
        "{stages:#?}"
    );

    // A pull that fails: the image stage says so, with the runtime's error.
    s.ok(V, &["run", "unpullable", "--image=127.0.0.1:1/none:1"]);
    let failed = wait_for(60, "the failed pull in the trace", || {
        let stages = stages_of(s, "pod/unpullable");
        stages
            .iter()
            .find(|s| s["stage"] == "image" && field(s, "error").starts_with("ErrImagePull"))
            .cloned()
    });
    assert_eq!(field(&failed, "image"), "127.0.0.1:1/none:1", "{failed}");
    let out = trace(s, &["pod/unpullable"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("image") && text.contains("FAILED: ErrImagePull"),
        "{text}"
    );

    // What cannot be traced is said so.
    let out = trace(s, &["deployment/absent"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("deployments.apps \"absent\" not found"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = trace(s, &["nginx"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("KIND/NAME"));
}
