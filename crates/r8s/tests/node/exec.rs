//! `kubectl exec`, `attach` and `port-forward` end to end: the real kubectl (1.27 speaks
//! SPDY; 1.33 tries WebSocket first) asks the API server's pods/exec, pods/attach and
//! pods/portforward to upgrade the connection; the API server passes it on to the node's
//! kubelet API, which asks containerd (CRI `Exec`, `Attach`, `PortForward`) for a streaming
//! URL and passes it on again; the bytes then flow between kubectl and the container.

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use support::cluster::*;

const PODS: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata: {name: shell}
  spec:
    containers:
    - {name: c, image: busybox, command: [sh, -c, 'echo started; sleep 3600']}
- apiVersion: v1
  kind: Pod
  metadata: {name: web}
  spec:
    containers:
    - {name: web, image: nginx, ports: [{containerPort: 80}]}
"#;

#[test]
fn kubectl_exec_attach_and_port_forward_reach_running_containers() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let c = start("exec-node", "10.189.0.0/16", "r8se");
    let s = &c.s;
    s.wait_for_default_service_account("default");
    s.ok_stdin(V, &["create", "-f", "-"], PODS);
    for name in ["shell", "web"] {
        wait_for(90, &format!("{name} Running"), || {
            (pod_json(s, name)?["status"]["phase"] == "Running").then_some(())
        });
    }
    for v in ["1.27", "1.33"] {
        // A command's output, its standard input, and its exit code as kubectl's.
        let out = s.ok(
            v,
            &["exec", "shell", "--", "sh", "-c", "echo hello from $(hostname)"],
        );
        assert_eq!(out.trim(), "hello from shell", "kubectl {v}");
        let out = s.ok_stdin(
            v,
            &["exec", "-i", "shell", "--", "tr", "a-z", "A-Z"],
            "piped text\n",
        );
        assert_eq!(out, "PIPED TEXT\n", "kubectl {v}");
        // The end of the input reaches the command: `cat` and `wc` read to it and finish.
        // 1.27 speaks SPDY, which half-closes the stdin stream; 1.33 asks for WebSocket v5
        // only, which the kubelet answers itself and translates to SPDY for containerd 1.6
        // (whose streaming server knows WebSocket up to v4, without a close signal).
        let out = s.kubectl_stdin(
            v,
            &[
                "exec",
                "-i",
                "shell",
                "-v=4",
                "--",
                "sh",
                "-c",
                "timeout 20 cat; echo done $?",
            ],
            "one\ntwo\n",
        );
        assert!(
            out.status.success(),
            "kubectl {v}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "one\ntwo\ndone 0\n",
            "kubectl {v}"
        );
        if v == "1.33" {
            let log = String::from_utf8_lossy(&out.stderr);
            assert!(
                log.contains("The subprotocol is v5.channel.k8s.io"),
                "kubectl 1.33 did not get WebSocket v5: {log}"
            );
        }
        // With nothing to read at all, too.
        let out = s.kubectl_stdin(v, &["exec", "-i", "shell", "--", "timeout", "20", "wc", "-c"], "");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0", "kubectl {v}");
        let failed = s.kubectl(v, &["exec", "shell", "--", "sh", "-c", "echo oops >&2; exit 3"]);
        assert_eq!(failed.status.code(), Some(3), "kubectl {v}");
        assert!(
            String::from_utf8_lossy(&failed.stderr).contains("oops"),
            "kubectl {v}"
        );
        // Errors in upstream's words.
        let err = s.fails(v, &["exec", "shell", "-c", "nope", "--", "true"]);
        assert!(err.contains("container nope is not valid for pod shell"), "{err}");
        let err = s.fails(v, &["exec", "missing", "--", "true"]);
        assert!(err.contains("pods \"missing\" not found"), "{err}");
    }
    // A Service for the nginx pod gets Endpoints: the pod's IP and the target port; they go
    // with the Service.
    s.ok(V, &["label", "pod", "web", "app=web"]);
    s.ok(
        V,
        &[
            "expose",
            "pod",
            "web",
            "--name",
            "web",
            "--port",
            "8080",
            "--target-port",
            "80",
        ],
    );
    let ip = pod_json(s, "web").unwrap()["status"]["podIP"]
        .as_str()
        .unwrap()
        .to_string();
    let got = wait_for(30, "the web service's endpoints", || {
        let out = s.kubectl(V, &["get", "endpoints", "web", "-o", "json"]);
        let ep: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        ep["subsets"][0]["addresses"][0]["ip"].is_string().then_some(ep)
    });
    assert_eq!(got["subsets"][0]["addresses"][0]["ip"], ip.as_str());
    assert_eq!(got["subsets"][0]["addresses"][0]["targetRef"]["name"], "web");
    assert_eq!(got["subsets"][0]["ports"][0]["port"], 80);
    // Its EndpointSlice (discovery.k8s.io/v1) says the same; kubectl 1.27 describes a
    // Service from its Endpoints, 1.33 from its slices.
    let slices = wait_for(30, "the web service's endpoint slice", || {
        let out = s.kubectl(
            V,
            &[
                "get",
                "endpointslices",
                "-l",
                "kubernetes.io/service-name=web",
                "-o",
                "json",
            ],
        );
        let list: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        list["items"][0]["endpoints"][0]["addresses"][0]
            .is_string()
            .then_some(list)
    });
    let slice = &slices["items"][0];
    assert_eq!(slice["endpoints"][0]["addresses"][0], ip.as_str());
    assert_eq!(slice["endpoints"][0]["conditions"]["ready"], true);
    assert_eq!(slice["ports"][0]["port"], 80);
    assert_eq!(slice["metadata"]["ownerReferences"][0]["kind"], "Service");
    let table = s.ok(
        V,
        &["get", "endpointslices", "-l", "kubernetes.io/service-name=web"],
    );
    assert!(table.contains("IPv4") && table.contains(&ip), "{table}");
    for v in ["1.27", "1.33"] {
        let described = s.ok(v, &["describe", "service", "web"]);
        assert!(
            described.contains(&format!("{ip}:80")),
            "kubectl {v}: {described}"
        );
    }
    // services/proxy: through one of the Service's endpoints (by port number or name).
    let page = s.ok(
        V,
        &[
            "get",
            "--raw",
            "/api/v1/namespaces/default/services/web:8080/proxy/",
        ],
    );
    assert!(page.contains("Welcome to nginx!"), "{page}");
    let err = s.fails(
        V,
        &[
            "get",
            "--raw",
            "/api/v1/namespaces/default/services/web:9999/proxy/",
        ],
    );
    assert!(
        err.contains("no service port 9999 found for service \"web\""),
        "{err}"
    );
    s.ok(V, &["delete", "service", "web"]);
    wait_for(30, "the endpoints and slices to go with the service", || {
        let slices = s.ok(
            V,
            &[
                "get",
                "endpointslices",
                "-l",
                "kubernetes.io/service-name=web",
                "-o",
                "name",
            ],
        );
        (!s.kubectl(V, &["get", "endpoints", "web"]).status.success() && slices.trim().is_empty())
            .then_some(())
    });
    // kubectl run -i --rm: the new pod's standard input through attach, then the pod is gone.
    let out = s.ok_stdin(
        V,
        &[
            "run",
            "-i",
            "--rm",
            "--restart=Never",
            "once",
            "--image=busybox",
            "--",
            "sh",
            "-c",
            "read x; echo got $x",
        ],
        "hello\n",
    );
    assert!(out.contains("got hello"), "{out}");
    wait_for(60, "the --rm pod deleted", || {
        (!s.kubectl(V, &["get", "pod", "once"]).status.success()).then_some(())
    });
    // kubectl cp: tar through exec, both ways.
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("notes.txt");
    std::fs::write(&local, "copied in\n").unwrap();
    s.ok(V, &["cp", local.to_str().unwrap(), "shell:/tmp/notes.txt"]);
    assert_eq!(
        s.ok(V, &["exec", "shell", "--", "cat", "/tmp/notes.txt"]),
        "copied in\n"
    );
    let back = dir.path().join("back.txt");
    s.ok(V, &["cp", "shell:/tmp/notes.txt", back.to_str().unwrap()]);
    assert_eq!(std::fs::read_to_string(&back).unwrap(), "copied in\n");
    // attach: what the container writes from now on (its first lines are in the logs only).
    let mut attach = s
        .command(V, &["attach", "web", "-c", "web"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let attach_out = BufReader::new(attach.stdout.take().unwrap());
    let into = seen.clone();
    std::thread::spawn(move || {
        for line in attach_out.lines().map_while(Result::ok) {
            into.lock().unwrap().push_str(&line);
            into.lock().unwrap().push('\n');
        }
    });
    // port-forward: a local port on loopback to the pod's port 80 (kubectl 1.33 first tries
    // SPDY tunnelled in a WebSocket, which the runtime's streaming server does not speak, and
    // falls back to SPDY as it does with an API server before 1.31).
    let mut forward = s
        .command(V, &["port-forward", "pod/web", ":80"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(forward.stdout.take().unwrap());
    let mut first = String::new();
    lines.read_line(&mut first).unwrap();
    // Keep reading (kubectl writes a line for each connection; a closed pipe would end it).
    std::thread::spawn(move || for _ in lines.lines() {});
    // "Forwarding from 127.0.0.1:PORT -> 80"
    let port: u16 = first
        .split("127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no local port in {first:?}"));
    let get = || {
        let out = Command::new("curl")
            .args(["-s", "--max-time", "5", &format!("http://127.0.0.1:{port}/")])
            .output()
            .ok()?;
        Some(String::from_utf8_lossy(&out.stdout).to_string())
    };
    let body = wait_for(30, "nginx through port-forward", || {
        get().filter(|b| b.contains("Welcome to nginx!"))
    });
    assert!(body.contains("</html>"), "{body}");
    // pods/proxy: the API server passes the request on to the pod's IP (port named, or the
    // first container port).
    for id in ["web:80", "web"] {
        let page = s.ok(
            V,
            &[
                "get",
                "--raw",
                &format!("/api/v1/namespaces/default/pods/{id}/proxy/"),
            ],
        );
        assert!(page.contains("Welcome to nginx!"), "{id}: {page}");
    }
    let err = s.fails(
        V,
        &[
            "get",
            "--raw",
            "/api/v1/namespaces/default/pods/web:80/proxy/missing.html",
        ],
    );
    assert!(err.contains("NotFound") || err.contains("404"), "{err}");
    // nginx logs each request to its standard output: the attached kubectl sees one (once it
    // is attached; requests go on until it does).
    wait_for(30, "a request seen through attach", || {
        get();
        seen.lock()
            .unwrap()
            .contains("\"GET / HTTP/1.1\" 200")
            .then_some(())
    });
    for mut child in [forward, attach] {
        let _ = child.kill();
        let _ = child.wait();
    }
}
