//! `kubectl debug` end to end, with real containers and the real kubectl: an ephemeral
//! container added to a running pod through `pods/ephemeralcontainers`, started by the kubelet
//! in the pod's sandbox (sharing the target container's processes), attached to, reported in
//! `ephemeralContainerStatuses` and never restarted; and `kubectl debug node/…`, a pod in the
//! node's namespaces with the host's root at /host.

use crate::support;

use support::cluster::*;

#[test]
fn kubectl_debug_attaches_to_pods_and_nodes() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let c = start("debug-node", "10.211.0.0/16", "r8su");
    let s = &c.s;
    s.ok_stdin(
        V,
        &["apply", "-f", "-"],
        r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "target"},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [
              {"name": "app", "image": "busybox", "command": ["sh", "-c", "exec sleep 3600"]}]}}"#,
    );
    s.ok(
        V,
        &["wait", "--for=condition=Ready", "pod/target", "--timeout=90s"],
    );

    // kubectl 1.33: a named debugger targeting the app container sees its processes.
    let out = s.interactive(
        V,
        &[
            "debug",
            "target",
            "-i",
            "--image=busybox",
            "--target=app",
            "-c",
            "dbg",
            "--",
            "sh",
            "-c",
            "read x; echo got $x; ps",
        ],
        "hello\n",
    );
    assert!(out.contains("got hello"), "{out}");
    assert!(
        out.contains("sleep 3600"),
        "the target's processes are visible: {out}"
    );
    let pod = wait_for(30, "the debugger's terminated status", || {
        let pod = json(s, &["get", "pod", "target"]);
        let st = pod["status"]["ephemeralContainerStatuses"][0].clone();
        st["state"]["terminated"].is_object().then_some(pod)
    });
    let ec = &pod["spec"]["ephemeralContainers"][0];
    assert_eq!(ec["name"], "dbg", "{pod}");
    assert_eq!(ec["targetContainerName"], "app", "{pod}");
    assert_eq!(ec["imagePullPolicy"], "Always", "defaulted as upstream: {pod}");
    assert_eq!(ec["terminationMessagePath"], "/dev/termination-log", "{pod}");
    let st = &pod["status"]["ephemeralContainerStatuses"][0];
    assert_eq!(st["name"], "dbg", "{pod}");
    assert_eq!(st["ready"], false, "{pod}");
    assert_eq!(st["state"]["terminated"]["exitCode"], 0, "{pod}");
    assert!(
        st["containerID"].as_str().unwrap().starts_with("containerd://"),
        "{pod}"
    );
    // The pod itself carries on, and its debugger is not restarted.
    assert_eq!(pod["status"]["phase"], "Running", "{pod}");
    assert_eq!(pod["status"]["containerStatuses"][0]["restartCount"], 0, "{pod}");
    std::thread::sleep(std::time::Duration::from_secs(3));
    let again = json(s, &["get", "pod", "target"]);
    assert!(
        again["status"]["ephemeralContainerStatuses"][0]["state"]["terminated"].is_object(),
        "{again}"
    );
    assert_eq!(
        s.ok(V, &["logs", "target", "-c", "dbg"]).lines().next(),
        Some("got hello")
    );

    // kubectl 1.27 (SPDY, its own generated name) adds a second one beside it.
    let out = s.interactive(
        "1.27",
        &[
            "debug",
            "target",
            "-i",
            "--image=busybox",
            "--",
            "sh",
            "-c",
            "read x; echo v127 $x",
        ],
        "there\n",
    );
    assert!(out.contains("v127 there"), "{out}");
    let pod = json(s, &["get", "pod", "target"]);
    let names: Vec<&str> = pod["spec"]["ephemeralContainers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{pod}");
    assert_eq!(names[0], "dbg");
    assert!(names[1].starts_with("debugger-"), "{names:?}");

    // A pod may not be created with one.
    let refused = String::from_utf8(s.fails_stdin(
        V,
        &["create", "-f", "-"],
        r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "early"},
            "spec": {"containers": [{"name": "a", "image": "busybox"}],
                     "ephemeralContainers": [{"name": "e", "image": "busybox"}]}}"#,
    ))
    .unwrap();
    assert!(
        refused.contains("spec.ephemeralContainers: Forbidden: cannot be set on create"),
        "{refused}"
    );

    // kubectl debug node/…: a pod on that node in its namespaces, the host's root at /host.
    let marker = c.data.join("debug-marker");
    std::fs::write(&marker, "from the host\n").unwrap();
    let out = s.interactive(
        V,
        &[
            "debug",
            "node/debug-node",
            "-i",
            "--image=busybox",
            "--",
            "sh",
            "-c",
            &format!("read x; cat /host{}", marker.display()),
        ],
        "go\n",
    );
    assert!(out.contains("from the host"), "{out}");
    let pods = json(s, &["get", "pods"]);
    let debugger = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| {
            p["metadata"]["name"]
                .as_str()
                .unwrap()
                .starts_with("node-debugger-debug-node-")
        })
        .cloned()
        .expect("the node debugger pod");
    let spec = &debugger["spec"];
    assert_eq!(spec["nodeName"], "debug-node", "{debugger}");
    assert_eq!(spec["hostNetwork"], true, "{debugger}");
    assert_eq!(spec["hostPID"], true, "{debugger}");
    assert_eq!(spec["hostIPC"], true, "{debugger}");
    let name = debugger["metadata"]["name"].as_str().unwrap();
    s.ok(V, &["delete", "pod", name, "--wait=true", "--timeout=60s"]);
    s.ok(V, &["delete", "pod", "target", "--wait=true", "--timeout=60s"]);
}
