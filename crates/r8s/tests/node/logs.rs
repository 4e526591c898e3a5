//! `kubectl logs` end to end: the real kubectl asks the API server's pods/log, which streams
//! from the node's kubelet API (`/containerLogs`, HTTPS, authenticated and authorized), which
//! reads the container's CRI log file that containerd writes.

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::cluster::*;

const PODS: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata: {name: talker}
  spec:
    containers:
    - name: c
      image: busybox
      command: [sh, -c, 'echo hello; echo second line; i=0; while true; do i=$((i+1)); echo "tick $i"; sleep 1; done']
- apiVersion: v1
  kind: Pod
  metadata: {name: two}
  spec:
    initContainers:
    - {name: i, image: busybox, command: [sh, -c, 'echo from init; echo init-done > /dev/termination-log']}
    containers:
    - {name: a, image: busybox, command: [sh, -c, 'echo from a; sleep 3600']}
    - {name: b, image: busybox, command: [sh, -c, 'echo from b >&2; sleep 3600']}
- apiVersion: v1
  kind: Pod
  metadata: {name: crasher}
  spec:
    containers:
    - name: c
      image: busybox
      command: [sh, -c, 'n=$(cat /d/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /d/n; echo "attempt $n"; sleep 8; exit 1']
      terminationMessagePolicy: FallbackToLogsOnError
      volumeMounts: [{name: d, mountPath: /d}]
    volumes: [{name: d, emptyDir: {}}]
- apiVersion: v1
  kind: Pod
  metadata: {name: waiter}
  spec:
    containers:
    - {name: c, image: "127.0.0.1:9/not-here:v1", command: [sleep, "1"]}
"#;

fn logs(s: &support::Server, args: &[&str]) -> String {
    let mut a = vec!["logs"];
    a.extend_from_slice(args);
    s.ok(V, &a)
}

/// Pod output through `kubectl logs` and its options, errors as upstream words them, and
/// the kubelet API refusing callers without the right credentials.
#[test]
fn kubectl_logs_reads_containers_through_the_kubelet() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let c = start("log-node", "10.198.0.0/16", "r8sl");
    let s = &c.s;
    s.wait_for_default_service_account("default");
    s.ok_stdin(V, &["create", "-f", "-"], PODS);
    for name in ["talker", "two"] {
        wait_for(90, &format!("{name} Running"), || {
            (pod_json(s, name)?["status"]["phase"] == "Running").then_some(())
        });
    }
    let out = wait_for(30, "talker's ticks", || {
        let out = logs(s, &["talker"]);
        out.contains("tick 3").then_some(out)
    });
    assert!(out.starts_with("hello\nsecond line\ntick 1\n"), "{out}");
    // --tail, --timestamps, --limit-bytes.
    let tail = logs(s, &["talker", "--tail=2"]);
    assert_eq!(tail.lines().count(), 2, "{tail}");
    assert!(tail.lines().all(|l| l.starts_with("tick ")), "{tail}");
    let ts = logs(s, &["talker", "--timestamps", "--tail=1"]);
    let (stamp, text) = ts.trim_end().split_once(' ').unwrap();
    // RFC 3339 with nanoseconds, as containerd records each line.
    assert!(
        stamp.len() > 20 && stamp.as_bytes()[10] == b'T' && stamp.ends_with('Z'),
        "{ts}"
    );
    assert!(text.starts_with("tick "), "{ts}");
    assert_eq!(logs(s, &["talker", "--limit-bytes=4"]), "hell");
    // -f streams what comes after.
    let mut child = s
        .command(V, &["logs", "-f", "talker", "--tail=1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first: u64 = lines
        .next()
        .unwrap()
        .unwrap()
        .trim_start_matches("tick ")
        .parse()
        .unwrap();
    let began = Instant::now();
    let later: u64 = loop {
        let l = lines.next().unwrap().unwrap();
        let n: u64 = l.trim_start_matches("tick ").parse().unwrap();
        if n >= first + 2 {
            break n;
        }
    };
    assert!(later >= first + 2 && began.elapsed() < Duration::from_secs(10));
    let _ = child.kill();
    let _ = child.wait();

    // Several containers: -c picks one (init containers too); kubectl defaults to the first.
    assert_eq!(logs(s, &["two", "-c", "b"]), "from b\n");
    assert_eq!(logs(s, &["two", "-c", "i"]), "from init\n");
    assert_eq!(logs(s, &["two"]), "from a\n");
    let raw = s.kubectl(V, &["get", "--raw", "/api/v1/namespaces/default/pods/two/log"]);
    let err = String::from_utf8_lossy(&raw.stderr);
    assert!(
        err.contains("a container name must be specified for pod two, choose one of: [a b] or one of the init containers: [i]"),
        "{err}"
    );
    let bad = s.fails(V, &["logs", "two", "-c", "nope"]);
    assert!(bad.contains("container nope is not valid for pod two"), "{bad}");
    let neg = s.kubectl(
        V,
        &[
            "get",
            "--raw",
            "/api/v1/namespaces/default/pods/talker/log?tailLines=-1",
        ],
    );
    assert!(String::from_utf8_lossy(&neg.stderr).contains("must be greater than or equal to 0"));

    // --previous: the run before the restart.
    wait_for(60, "crasher restarted", || {
        let p = pod_json(s, "crasher")?;
        (p["status"]["containerStatuses"][0]["restartCount"].as_i64()? >= 1).then_some(())
    });
    let now = wait_for(30, "crasher's second run", || {
        let out = s.kubectl(V, &["logs", "crasher"]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        text.contains("attempt 2").then_some(text)
    });
    assert_eq!(now, "attempt 2\n");
    assert_eq!(logs(s, &["crasher", "--previous"]), "attempt 1\n");
    // Termination messages: what a container wrote to /dev/termination-log, else (with
    // FallbackToLogsOnError, after a failure) the end of its log.
    let p = pod_json(s, "crasher").unwrap();
    let last = &p["status"]["containerStatuses"][0]["lastState"]["terminated"];
    assert_eq!(last["message"], "attempt 1\n", "{last}");
    let p = pod_json(s, "two").unwrap();
    let init = &p["status"]["initContainerStatuses"][0]["state"]["terminated"];
    assert_eq!(init["message"], "init-done\n", "{init}");
    let none = s.fails(V, &["logs", "talker", "--previous"]);
    assert!(
        none.contains("previous terminated container \"c\" in pod \"talker\" not found"),
        "{none}"
    );
    // A container that never started.
    wait_for(60, "waiter's pull to fail", || {
        let p = pod_json(s, "waiter")?;
        let r = p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
            .as_str()?
            .to_string();
        (r == "ErrImagePull" || r == "ImagePullBackOff").then_some(())
    });
    let waiting = s.fails(V, &["logs", "waiter"]);
    assert!(
        waiting.contains("BadRequest")
            && waiting.contains("container \"c\" in pod \"waiter\" is waiting to start:"),
        "{waiting}"
    );

    // nodes/proxy reaches the kubelet's other endpoints: health, its pods, its metrics.
    let raw = |path: &str| {
        s.ok(
            V,
            &["get", "--raw", &format!("/api/v1/nodes/log-node/proxy/{path}")],
        )
    };
    assert_eq!(raw("healthz").trim(), "ok");
    let pods: Value = serde_json::from_str(&raw("pods")).unwrap();
    let names: Vec<&str> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str())
        .collect();
    assert!(names.contains(&"talker") && names.contains(&"two"), "{names:?}");
    let metrics = raw("metrics");
    let value = |prefix: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("{prefix} missing:\n{metrics}"))
            .trim()
            .parse()
            .unwrap()
    };
    assert!(
        value("kubelet_runtime_operations_total{operation_type=\"run_podsandbox\"} ") >= 4.0,
        "{metrics}"
    );
    assert!(
        value("kubelet_runtime_operations_errors_total{operation_type=\"pull_image\"} ") >= 1.0,
        "{metrics}"
    );
    assert!(
        value("kubelet_runtime_operations_duration_seconds_count{operation_type=\"create_container\"} ")
            >= 4.0
    );
    // talker, two and crasher started (the waiter never does).
    assert!(
        value("kubelet_pod_start_duration_seconds_count ") >= 3.0,
        "{metrics}"
    );
    assert!(value("kubelet_running_pods ") >= 3.0, "{metrics}");
    assert!(
        value("kubelet_running_containers{container_state=\"running\"} ") >= 3.0,
        "{metrics}"
    );

    // The kubelet API itself: no credentials is 401; a ServiceAccount's token is 403 (it may
    // not proxy to nodes).
    let node: Value = serde_json::from_str(&s.ok(V, &["get", "node", "log-node", "-o", "json"])).unwrap();
    let port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
        .as_u64()
        .unwrap();
    assert!(port > 0);
    let url = format!("https://127.0.0.1:{port}/pods");
    let curl = |extra: &[&str]| {
        let out = std::process::Command::new("curl")
            .args(["-sk", "-w", "\n%{http_code}", &url])
            .args(extra)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let anon = curl(&[]);
    assert!(
        anon.ends_with("\n401") && anon.starts_with("Unauthorized"),
        "{anon}"
    );
    s.ok(V, &["create", "serviceaccount", "reader"]);
    let token = s.ok(V, &["create", "token", "reader"]);
    let sa = curl(&["-H", &format!("Authorization: Bearer {}", token.trim())]);
    assert!(
        sa.starts_with(
            "Forbidden (user=system:serviceaccount:default:reader, verb=get, resource=nodes, subresource=proxy)"
        ) && sa.ends_with("\n403"),
        "{sa}"
    );
}
