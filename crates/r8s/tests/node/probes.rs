//! Probes, lifecycle hooks, restart bookkeeping and activeDeadlineSeconds, end to end: `r8s
//! server` with its agent (containerd, CRI, CNI) and the real kubectl, with busybox and nginx.
//! Periods are 1 s and grace periods short, so the whole file runs in about two minutes.

use crate::support;

use serde_json::Value;
use support::cluster::*;
use support::Server;

fn container(p: &Value) -> &Value {
    &p["status"]["containerStatuses"][0]
}

fn condition(p: &Value, type_: &str) -> Option<String> {
    p["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["status"].as_str().map(String::from))
}

fn has_event(s: &Server, pod: &str, reason: &str, message: impl Fn(&str) -> bool) -> bool {
    events_of(s, pod).iter().any(|(r, m)| r == reason && message(m))
}

/// Pods deleted quickly (their grace periods are short) and gone from the API.
fn delete_all(s: &Server, names: &[&str]) {
    let mut args = vec!["delete", "pod"];
    args.extend_from_slice(names);
    args.push("--timeout=60s");
    s.ok(V, &args);
}

const PROBE_PODS: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: live}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: busybox
    command: [sleep, "3600"]
    livenessProbe:
      exec: {command: [cat, /tmp/healthy]}
      periodSeconds: 1
      failureThreshold: 2
---
apiVersion: v1
kind: Pod
metadata: {name: ready}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: busybox
    command: [sh, -c, "sleep 6; touch /tmp/ready; sleep 3600"]
    readinessProbe:
      exec: {command: [cat, /tmp/ready]}
      periodSeconds: 1
---
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: nginx
    image: nginx
    ports: [{name: http, containerPort: 80}]
    readinessProbe:
      httpGet: {path: /, port: http, httpHeaders: [{name: X-Probe, value: r8s}]}
      periodSeconds: 1
    livenessProbe:
      tcpSocket: {port: 80}
      periodSeconds: 1
---
apiVersion: v1
kind: Pod
metadata: {name: web404}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: nginx
    image: nginx
    readinessProbe:
      httpGet: {path: /missing, port: 80}
      periodSeconds: 1
---
apiVersion: v1
kind: Pod
metadata: {name: slow}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: busybox
    command: [sh, -c, "sleep 3; touch /tmp/up; sleep 3600"]
    startupProbe:
      exec: {command: [test, -f, /tmp/up]}
      periodSeconds: 1
      failureThreshold: 30
    livenessProbe:
      exec: {command: [test, -f, /tmp/up]}
      periodSeconds: 1
"#;

/// A failing liveness probe restarts the container (Unhealthy, Killing, restartCount,
/// lastState); readiness keeps a running pod unready until its probe passes; httpGet against
/// nginx passes (a port by name) and fails on a 404; a startup probe holds `started` back and
/// the liveness probe with it.
#[test]
fn liveness_restarts_readiness_gates_ready_http_and_startup_probes() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = start("probe-node", "10.193.0.0/16", "r8sp");
    let s = &mut c.s;
    s.ok_stdin(V, &["create", "-f", "-"], PROBE_PODS);

    // readiness: Running but not Ready while the file is missing, Ready once it exists.
    let seen_unready = wait_for(90, "ready Running", || {
        let p = pod_json(s, "ready")?;
        (container(&p)["state"]["running"].is_object()).then_some(p)
    });
    assert_eq!(seen_unready["status"]["phase"], "Running");
    assert_eq!(
        condition(&seen_unready, "Ready").as_deref(),
        Some("False"),
        "{seen_unready}"
    );
    assert_eq!(container(&seen_unready)["ready"], false);
    let started_at = container(&seen_unready)["state"]["running"]["startedAt"]
        .as_str()
        .unwrap()
        .to_string();
    let ready = wait_for(60, "ready Ready", || {
        let p = pod_json(s, "ready")?;
        (condition(&p, "Ready")? == "True").then_some(p)
    });
    assert_eq!(condition(&ready, "ContainersReady").as_deref(), Some("True"));
    assert_eq!(container(&ready)["ready"], true);
    let became_ready = ready["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()["lastTransitionTime"]
        .as_str()
        .unwrap()
        .to_string();
    let secs = |t: &str| {
        serde_json::from_value::<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>(Value::from(t))
            .unwrap()
            .0
            .as_second()
    };
    assert!(
        secs(&became_ready) - secs(&started_at) >= 5,
        "Ready at {became_ready}, started at {started_at}"
    );
    assert!(has_event(s, "ready", "Unhealthy", |m| m
        .starts_with("Readiness probe failed: ")
        && m.contains("/tmp/ready")));
    assert_eq!(container(&ready)["restartCount"], 0, "readiness never restarts");

    // liveness: killed and restarted.
    let live = wait_for(60, "live restarted", || {
        let p = pod_json(s, "live")?;
        (container(&p)["restartCount"].as_i64()? >= 1).then_some(p)
    });
    let last = &container(&live)["lastState"]["terminated"];
    // Killed by the stop signal (SIGTERM, or SIGKILL once the grace period is over).
    assert!([137, 143].contains(&last["exitCode"].as_i64().unwrap()), "{live}");
    assert_eq!(last["reason"], "Error", "{live}");
    assert!(last["containerID"].as_str().unwrap().starts_with("containerd://"));
    assert!(last["startedAt"].is_string() && last["finishedAt"].is_string());
    assert!(has_event(s, "live", "Unhealthy", |m| m
        .starts_with("Liveness probe failed: ")
        && m.contains("/tmp/healthy")));
    assert!(has_event(s, "live", "Killing", |m| m
        == "Container app failed liveness probe, will be restarted"));

    // httpGet against nginx, by port name: Ready; a 404 is a failure.
    wait_for(60, "web Ready", || {
        (condition(&pod_json(s, "web")?, "Ready")? == "True").then_some(())
    });
    wait_for(60, "web404's failed readiness", || {
        has_event(s, "web404", "Unhealthy", |m| {
            m == "Readiness probe failed: HTTP probe failed with statuscode: 404"
        })
        .then_some(())
    });
    let p = pod_json(s, "web404").unwrap();
    assert_eq!(p["status"]["phase"], "Running");
    assert_eq!(condition(&p, "Ready").as_deref(), Some("False"));
    assert!(
        p["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "ContainersReady"
                && c["reason"] == "ContainersNotReady"
                && c["message"] == "containers with unready status: [nginx]"),
        "{p}"
    );
    let web = pod_json(s, "web").unwrap();
    assert_eq!(
        container(&web)["restartCount"],
        0,
        "the tcpSocket liveness passes"
    );

    // startup: not started until the file exists, never restarted.
    let slow = wait_for(60, "slow started", || {
        let p = pod_json(s, "slow")?;
        (container(&p)["started"] == true).then_some(p)
    });
    assert_eq!(condition(&slow, "Ready").as_deref(), Some("True"));
    assert_eq!(container(&slow)["restartCount"], 0);

    delete_all(s, &["live", "ready", "web", "web404", "slow"]);
}

/// postStart runs before the container is reported Running, and a failing one kills it
/// (FailedPostStartHook); preStop runs on deletion (its file on a hostPath); a container that
/// exits non-zero is in CrashLoopBackOff with its last termination; activeDeadlineSeconds fails
/// the pod with DeadlineExceeded.
#[test]
fn hooks_crash_loop_back_off_and_active_deadline() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = start("hook-node", "10.192.0.0/16", "r8sh");
    let (s, data) = (&mut c.s, c.data.clone());
    let host = data.join("hostdir");
    std::fs::create_dir_all(&host).unwrap();
    let pods = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: hooks}}
spec:
  terminationGracePeriodSeconds: 10
  containers:
  - name: app
    image: busybox
    command: [sh, -c, "echo main-saw-$(cat /host/post); sleep 3600"]
    volumeMounts: [{{name: host, mountPath: /host}}]
    lifecycle:
      postStart:
        exec: {{command: [sh, -c, "echo begun > /host/post; sleep 3; echo done > /host/post"]}}
      preStop:
        exec: {{command: [sh, -c, "sleep 1; echo stopping > /host/stop"]}}
  volumes:
  - {{name: host, hostPath: {{path: {host}, type: Directory}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: badpost}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: busybox
    command: [sleep, "3600"]
    lifecycle:
      postStart:
        exec: {{command: [sh, -c, "echo nope; exit 3"]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: crash}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: busybox
    command: [sh, -c, "echo crashing; exit 2"]
---
apiVersion: v1
kind: Pod
metadata: {{name: deadline}}
spec:
  terminationGracePeriodSeconds: 1
  activeDeadlineSeconds: 5
  containers:
  - name: app
    image: busybox
    command: [sleep, "3600"]
"#,
        host = host.display()
    );
    s.ok_stdin(V, &["create", "-f", "-"], &pods);

    // postStart: when the container is first reported running, the hook has finished.
    let running = wait_for(90, "hooks running", || {
        let p = pod_json(s, "hooks")?;
        container(&p)["state"]["running"].is_object().then_some(p)
    });
    assert_eq!(
        std::fs::read_to_string(host.join("post")).unwrap(),
        "done
",
        "{running}"
    );
    let uid = uid_of(s, "hooks");
    wait_for(30, "the main command's output", || {
        let log = log_of(&data, "hooks", &uid, "app");
        (log.contains("main-saw-")).then_some(())
    });

    // A failing postStart kills the container, which restarts.
    wait_for(60, "badpost's FailedPostStartHook", || {
        has_event(s, "badpost", "FailedPostStartHook", |m| {
            m.starts_with("Exec lifecycle hook ([sh -c echo nope; exit 3]) for Container \"app\" in Pod \"badpost_default(")
                && m.contains("exited with 3")
                && m.ends_with("message: \"nope\\n\"")
        })
        .then_some(())
    });
    wait_for(60, "badpost restarted", || {
        (container(&pod_json(s, "badpost")?)["restartCount"].as_i64()? >= 1).then_some(())
    });
    assert_eq!(
        container(&pod_json(s, "badpost").unwrap())["ready"],
        false,
        "never reported running"
    );

    // CrashLoopBackOff with the last termination.
    let crash_uid = uid_of(s, "crash");
    let crash = wait_for(60, "crash in CrashLoopBackOff", || {
        let p = pod_json(s, "crash")?;
        (container(&p)["state"]["waiting"]["reason"] == "CrashLoopBackOff").then_some(p)
    });
    let st = container(&crash);
    assert_eq!(
        st["state"]["waiting"]["message"],
        format!("back-off 10s restarting failed container=app pod=crash_default({crash_uid})"),
        "{crash}"
    );
    assert!(st["restartCount"].as_i64().unwrap() >= 1, "{crash}");
    assert_eq!(st["lastState"]["terminated"]["exitCode"], 2, "{crash}");
    assert_eq!(st["lastState"]["terminated"]["reason"], "Error", "{crash}");
    assert!(has_event(s, "crash", "BackOff", |m| m.starts_with(
        "Back-off restarting failed container app in pod crash_default("
    )));
    assert_eq!(crash["status"]["phase"], "Running");
    // The exits were seen through containerd's task events (containerd 1.6 has no CRI events),
    // not by relisting every second.
    assert!(
        s.log().contains("PLEG: relisting on containerd's task events"),
        "the PLEG did not subscribe to containerd's events"
    );

    // activeDeadlineSeconds.
    let failed = wait_for(60, "deadline Failed", || {
        let p = pod_json(s, "deadline")?;
        (p["status"]["phase"] == "Failed").then_some(p)
    });
    assert_eq!(failed["status"]["reason"], "DeadlineExceeded", "{failed}");
    assert_eq!(
        failed["status"]["message"],
        "Pod was active on the node longer than the specified deadline"
    );
    assert_eq!(condition(&failed, "Ready").as_deref(), Some("False"));
    // Reported Failed first, then stopped (upstream's order).
    wait_for(60, "deadline's container terminated", || {
        let p = pod_json(s, "deadline")?;
        container(&p)["state"]["terminated"].is_object().then_some(p)
    });
    assert!(has_event(s, "deadline", "DeadlineExceeded", |_| true));

    // preStop on deletion: its file is there once the pod is gone.
    assert!(!host.join("stop").exists());
    delete_all(s, &["hooks"]);
    assert_eq!(std::fs::read_to_string(host.join("stop")).unwrap(), "stopping\n");
    delete_all(s, &["badpost", "crash", "deadline"]);

    // httpGet and sleep hooks: the postStart request reaches an nginx pod (its log shows it);
    // a preStop sleep holds the deletion back for its seconds.
    s.ok(V, &["run", "target", "--image=nginx"]);
    let target_ip = wait_for(90, "target Running", || {
        let p = pod_json(s, "target")?;
        (p["status"]["phase"] == "Running").then(|| p["status"]["podIP"].as_str().map(String::from))?
    });
    wait_for(30, "nginx answering", || {
        s.kubectl(V, &["logs", "target"]).status.success().then_some(())
    });
    let web = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: webhooks}}
spec:
  terminationGracePeriodSeconds: 10
  containers:
  - name: app
    image: busybox
    command: [sleep, "3600"]
    lifecycle:
      postStart:
        httpGet: {{host: "{target_ip}", path: /post-start-hook, port: 80}}
      preStop:
        sleep: {{seconds: 3}}
"#
    );
    s.ok_stdin(V, &["create", "-f", "-"], &web);
    wait_for(90, "webhooks Running", || {
        (pod_json(s, "webhooks")?["status"]["phase"] == "Running").then_some(())
    });
    let log = s.ok(V, &["logs", "target"]);
    assert!(log.contains("GET /post-start-hook"), "{log}");
    let began = std::time::Instant::now();
    delete_all(s, &["webhooks"]);
    let took = began.elapsed();
    assert!(
        took >= std::time::Duration::from_secs(3),
        "deleted in {took:?}: {:?}",
        events_of(s, "webhooks")
    );
    delete_all(s, &["target"]);
}
