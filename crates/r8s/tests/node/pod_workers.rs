//! The kubelet's pod workers, end to end, on clusters that run few pods (so nothing but the
//! pod's own worker wakes the kubelet): time-driven work (activeDeadlineSeconds) happens at its
//! due time, and stopping the server terminates every pod as a deletion would, leaving no mount
//! behind.

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::cluster::*;

fn phase(p: &Value) -> &str {
    p["status"]["phase"].as_str().unwrap_or("")
}

/// The mount points under `dir` (from /proc/self/mountinfo).
fn mounts_under(dir: &Path) -> Vec<String> {
    let prefix = dir.display().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| p.replace("\\040", " "))
        .filter(|p| p.starts_with(&prefix))
        .collect()
}

/// A lone pod (nothing else on the node to wake the kubelet) past its activeDeadlineSeconds is
/// reported Failed with DeadlineExceeded as soon as the deadline passes, as upstream's kubelet
/// does, before its containers are stopped: busybox `sleep` as PID 1 ignores SIGTERM, so the
/// stop takes the whole grace period (20 s), and the containers are terminated after it.
#[test]
fn a_lone_pod_fails_at_its_active_deadline() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let c = start("lone-node", "10.203.0.0/16", "r8sk");
    let s = &c.s;
    s.ok(
        V,
        &[
            "run",
            "x",
            "--image=busybox",
            "--restart=Never",
            r#"--overrides={"spec":{"activeDeadlineSeconds":3,"terminationGracePeriodSeconds":20}}"#,
            "--",
            "sleep",
            "3600",
        ],
    );
    let running = wait_for(90, "x Running", || {
        let p = pod_json(s, "x")?;
        (phase(&p) == "Running").then_some(p)
    });
    // startTime is before Running was seen, so the deadline counts from at most now.
    let seen = Instant::now();
    let failed = wait_for(60, "x Failed", || {
        let p = pod_json(s, "x")?;
        (phase(&p) == "Failed").then_some(p)
    });
    let after = seen.elapsed();
    eprintln!(
        "x Failed {after:?} after Running was seen (startTime {})",
        running["status"]["startTime"]
    );
    assert_eq!(failed["status"]["reason"], "DeadlineExceeded", "{failed}");
    // 3 s of deadline and a little slack: not the 20 s of grace the stop takes.
    assert!(
        after.as_secs() <= 7,
        "Failed only {after:?} after Running:\n{failed}"
    );
    let stopped = wait_for(60, "x's container terminated", || {
        let p = pod_json(s, "x")?;
        p["status"]["containerStatuses"][0]["state"]["terminated"]
            .is_object()
            .then_some(p)
    });
    assert_eq!(stopped["status"]["phase"], "Failed", "{stopped}");
    assert_eq!(stopped["status"]["reason"], "DeadlineExceeded", "{stopped}");
    s.ok(V, &["delete", "pod", "x", "--timeout=60s"]);
}

/// SIGTERM stops the server; its agent terminates every pod as a deletion does (containers,
/// sandbox, network, volumes with the ServiceAccount token's tmpfs) before it returns, and
/// nothing stays mounted under the data directory.
#[test]
fn stopping_the_server_terminates_its_pods_and_unmounts_their_volumes() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = start("stop-node", "10.204.0.0/16", "r8sn");
    for name in ["one", "two"] {
        c.s.ok(
            V,
            &[
                "run",
                name,
                "--image=busybox",
                r#"--overrides={"spec":{"terminationGracePeriodSeconds":2}}"#,
                "--",
                "sleep",
                "3600",
            ],
        );
    }
    for name in ["one", "two"] {
        wait_for(90, "the pods Running", || {
            (phase(&pod_json(&c.s, name)?) == "Running").then_some(())
        });
    }
    let before = mounts_under(&c.data);
    let tokens = before
        .iter()
        .filter(|m| m.contains("kubernetes.io~projected"))
        .count();
    assert_eq!(tokens, 2, "each pod's token volume is mounted: {before:#?}");
    let stopped = Instant::now();
    assert!(
        c.s.terminate(Duration::from_secs(30)),
        "the server did not exit within 30 s of SIGTERM:\n{}",
        c.s.log()
    );
    eprintln!("server exited {:?} after SIGTERM", stopped.elapsed());
    let left = mounts_under(&c.data);
    assert!(left.is_empty(), "left mounted: {left:#?}\n{}", c.s.log());
    assert!(
        processes_under(&c.data).is_empty(),
        "containerd or shims left running"
    );
}

/// A pod force-deleted and created again under the same name is a new pod (a new UID, a new
/// worker): the new one runs, and the old one's worker stops its sandbox and removes its
/// volumes, whatever order the watch brings the deletion and the creation in.
#[test]
fn a_pod_recreated_under_its_name_gets_a_new_worker_and_the_old_one_stops() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let c = start("again-node", "10.205.0.0/16", "r8sf");
    let s = &c.s;
    let run = || {
        s.ok(
            V,
            &[
                "run",
                "y",
                "--image=busybox",
                r#"--overrides={"spec":{"terminationGracePeriodSeconds":2}}"#,
                "--",
                "sleep",
                "3600",
            ],
        )
    };
    run();
    let running = |s: &support::Server| {
        wait_for(90, "y Running", || {
            let p = pod_json(s, "y")?;
            (phase(&p) == "Running").then(|| p["metadata"]["uid"].as_str().unwrap().to_string())
        })
    };
    let old = running(s);
    let old_dir = c.data.join("agent/pods").join(&old);
    assert!(old_dir.exists());
    s.ok(V, &["delete", "pod", "y", "--grace-period=0", "--force"]);
    run();
    let new = running(s);
    assert_ne!(old, new);
    wait_for(30, "the old pod's volumes removed", || {
        (!old_dir.exists() && mounts_under(&old_dir).is_empty()).then_some(())
    });
    assert!(c.data.join("agent/pods").join(&new).exists());
    s.ok(V, &["delete", "pod", "y", "--timeout=60s"]);
}

/// A deleted pod that a finalizer keeps (a Job's pods carry one) is reported terminal once its
/// containers have stopped, as upstream's kubelet does before its final delete: Failed when a
/// container had to be killed, Succeeded when every one exited 0 on SIGTERM; the condition
/// the eviction API added stays. The finalizer's owner then lets it go.
#[test]
fn a_deleted_pod_kept_by_a_finalizer_is_reported_terminal() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let c = start("final-node", "10.190.0.0/16", "r8sfx");
    let s = &c.s;
    let pods = r#"
apiVersion: v1
kind: Pod
metadata: {name: killed, finalizers: [example.com/hold]}
spec:
  terminationGracePeriodSeconds: 2
  containers: [{name: c, image: busybox, command: [sleep, "3600"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: clean, finalizers: [example.com/hold]}
spec:
  terminationGracePeriodSeconds: 20
  containers:
  - name: c
    image: busybox
    command: [sh, -c, 'trap "exit 0" TERM; while true; do sleep 1; done']
---
apiVersion: v1
kind: Pod
metadata: {name: evicted, finalizers: [example.com/hold]}
spec:
  terminationGracePeriodSeconds: 2
  containers: [{name: c, image: busybox, command: [sleep, "3600"]}]
"#;
    s.ok_stdin(V, &["create", "-f", "-"], pods);
    for name in ["killed", "clean", "evicted"] {
        wait_for(90, "the pods Running", || {
            (phase(&pod_json(s, name)?) == "Running").then_some(())
        });
    }
    s.ok(V, &["delete", "pod", "killed", "clean", "--wait=false"]);
    s.ok_stdin(
        V,
        &[
            "create",
            "--raw",
            "/api/v1/namespaces/default/pods/evicted/eviction",
            "-f",
            "-",
        ],
        r#"{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"evicted"}}"#,
    );
    // Terminal, and then the kubelet's final delete (grace 0) that the finalizer holds.
    let terminal = |name: &str| {
        wait_for(60, &format!("{name} terminal"), || {
            let p = pod_json(s, name)?;
            (matches!(phase(&p), "Failed" | "Succeeded") && p["metadata"]["deletionGracePeriodSeconds"] == 0)
                .then_some(p)
        })
    };
    let killed = terminal("killed");
    let state = &killed["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(phase(&killed), "Failed", "{killed}");
    assert_eq!(state["exitCode"], 137, "{killed}");
    let ready = support::condition(&killed, "Ready");
    assert_eq!(ready["status"], "False", "{killed}");
    let clean = terminal("clean");
    assert_eq!(phase(&clean), "Succeeded", "{clean}");
    assert_eq!(
        clean["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 0,
        "{clean}"
    );
    let evicted = terminal("evicted");
    assert_eq!(phase(&evicted), "Failed", "{evicted}");
    let target = support::condition(&evicted, "DisruptionTarget");
    assert_eq!(target["reason"], "EvictionByEvictionAPI", "{evicted}");
    // Nothing of them runs any more; without the finalizer they go.
    for name in ["killed", "clean", "evicted"] {
        s.ok(
            V,
            &[
                "patch",
                "pod",
                name,
                "--type=json",
                "-p",
                r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
            ],
        );
    }
    wait_for(30, "the pods gone", || {
        ["killed", "clean", "evicted"]
            .iter()
            .all(|n| pod_json(s, n).is_none())
            .then_some(())
    });
}

/// A pod with a readiness gate runs but is not Ready until the gate's condition (set by someone
/// else through the status subresource) is True, as upstream's kubelet has it; the kubelet
/// notices the condition change by itself.
#[test]
fn a_readiness_gate_holds_ready_until_its_condition_is_true() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let c = start("gate-node", "10.191.0.0/16", "r8srg");
    let s = &c.s;
    let pod = r#"
apiVersion: v1
kind: Pod
metadata: {name: gated}
spec:
  terminationGracePeriodSeconds: 1
  readinessGates: [{conditionType: example.com/lb}]
  containers: [{name: c, image: busybox, command: [sleep, "3600"]}]
"#;
    s.ok_stdin(V, &["create", "-f", "-"], pod);
    let ready = |p: &Value| support::condition(p, "Ready");
    let held = wait_for(90, "gated Running, its containers ready", || {
        let p = pod_json(s, "gated")?;
        let containers = p["status"]["containerStatuses"][0]["ready"] == true;
        (phase(&p) == "Running" && containers).then_some(p)
    });
    let r = ready(&held);
    assert_eq!(r["status"], "False", "{held}");
    assert_eq!(r["reason"], "ReadinessGatesNotReady", "{held}");
    assert_eq!(
        r["message"],
        r#"corresponding condition of pod readiness gate "example.com/lb" does not exist."#
    );
    s.ok(
        V,
        &[
            "patch",
            "pod",
            "gated",
            "--subresource=status",
            "--type=strategic",
            "-p",
            r#"{"status":{"conditions":[{"type":"example.com/lb","status":"True"}]}}"#,
        ],
    );
    let now = wait_for(30, "gated Ready", || {
        let p = pod_json(s, "gated")?;
        (ready(&p)["status"] == "True").then_some(p)
    });
    let gate = support::condition(&now, "example.com/lb");
    assert_eq!(
        gate["status"], "True",
        "the kubelet kept the gate's condition: {now}"
    );
    s.ok(V, &["delete", "pod", "gated", "--timeout=60s"]);
}

/// No pod stalls another: `R8S_STUBBORN_PODS` (100) pods whose process ignores SIGTERM
/// (busybox `sleep` as PID 1) are deleted together and wait out their 30 s grace period; a
/// new pod created meanwhile starts as fast as on an idle node (each pod has its own worker;
/// with a few shared workers it waited for the grace periods), and every deleted pod is gone
/// after one grace period, not one per worker-slot.
#[test]
fn pods_waiting_out_their_grace_period_hold_up_no_new_pod() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let n: usize = std::env::var("R8S_STUBBORN_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let c = start("stubborn-node", "10.220.0.0/16", "r8sty");
    let s = &c.s;
    let pods: Vec<Value> = (0..n)
        .map(|i| {
            serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("stubborn-{i}"), "labels": {"app": "stubborn"}},
                "spec": {
                    "terminationGracePeriodSeconds": 30,
                    "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]
                }
            })
        })
        .collect();
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": pods});
    s.ok_stdin(V, &["create", "-f", "-"], &list.to_string());
    let running = |s: &support::Server| -> usize {
        let pods = json(s, &["get", "pods", "-l", "app=stubborn", "-o", "json"]);
        pods["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| phase(p) == "Running")
            .count()
    };
    let t = Instant::now();
    wait_for(300, "the stubborn pods Running", || {
        (running(s) == n).then_some(())
    });
    eprintln!("{n} pods Running in {:?}", t.elapsed());

    s.ok(V, &["delete", "pods", "-l", "app=stubborn", "--wait=false"]);
    // Their kills are under way: each waits out its grace period.
    std::thread::sleep(Duration::from_secs(2));
    let deleted = Instant::now();
    s.ok(V, &["run", "fresh", "--image=busybox", "--", "sleep", "3600"]);
    let started = wait_for(60, "fresh Running", || {
        let p = pod_json(s, "fresh")?;
        (phase(&p) == "Running").then(|| deleted.elapsed())
    });
    eprintln!("a new pod Running {started:?} after it was created beside {n} terminating pods");
    // The pod-start benchmark's p99 for 30 pods at once (BENCHMARKS.md) is 2.6-5.1 s.
    assert!(
        started < Duration::from_secs(6),
        "a new pod took {started:?} to run beside {n} terminating pods"
    );
    let terminating = json(s, &["get", "pods", "-l", "app=stubborn", "-o", "json"]);
    assert_eq!(
        terminating["items"].as_array().unwrap().len(),
        n,
        "the deleted pods are still waiting out their grace period"
    );
    // All are killed at the end of the one grace period they share, then removed.
    wait_for(75, "the stubborn pods gone", || {
        let pods = json(s, &["get", "pods", "-l", "app=stubborn", "-o", "json"]);
        pods["items"].as_array().unwrap().is_empty().then_some(())
    });
    eprintln!("{n} pods gone {:?} after their deletion", deleted.elapsed());
    s.ok(
        V,
        &["delete", "pod", "fresh", "--grace-period=1", "--timeout=60s"],
    );
}
