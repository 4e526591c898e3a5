//! The official clients other than kubectl and kube-rs, driving r8s unchanged: the Python
//! client (PyPI `kubernetes`, installed by `scripts/setup.sh` in `target/clients/python`) runs
//! `clients/python_client.py`, the JavaScript client (npm `@kubernetes/client-node`, in
//! `target/clients/js`) `clients/js_client.mjs`: lists (paged with limit and continue),
//! watches (from a list's resourceVersion), the JavaScript client's informer, writes (merge
//! patch, server-side apply), errors, exec and port-forward over WebSocket (the only transport
//! either has), logs.

use crate::support;

use std::path::Path;
use std::process::Command;

use support::cluster::*;

const PODS: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata: {name: web, labels: {run: web}}
  spec:
    terminationGracePeriodSeconds: 1
    containers: [{name: web, image: nginx, ports: [{containerPort: 80}]}]
- apiVersion: v1
  kind: Pod
  metadata: {name: sh}
  spec:
    terminationGracePeriodSeconds: 1
    containers: [{name: sh, image: busybox, command: [sleep, "3600"]}]
"#;

#[test]
fn the_python_and_javascript_clients_work_unchanged() {
    let clients = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/clients");
    let python = clients.join("python/bin/python");
    let js = clients.join("js");
    for installed in [&python, &js.join("node_modules/@kubernetes/client-node")] {
        assert!(
            installed.exists(),
            "{} is not installed: run scripts/setup.sh",
            installed.display()
        );
    }
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    // Compacted often, so a watch from revision 1 is answered 410 Gone.
    let c = start_with(
        "py-node",
        "10.212.0.0/16",
        "r8sy",
        &[
            "--datastore-compaction-interval",
            "1s",
            "--datastore-compaction-retain",
            "100",
        ],
    );
    let s = &c.s;
    s.wait_for_default_service_account("default");
    s.ok_stdin(V, &["create", "-f", "-"], PODS);
    for name in ["web", "sh"] {
        wait_for(90, &format!("{name} Ready"), || {
            let p = pod_json(s, name)?;
            let ready = p["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            ready.then_some(())
        });
    }
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node/clients");
    let run = |what: &str, cmd: &mut Command| {
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("all ok"),
            "{what}:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(
        "the Python client",
        Command::new(&python)
            .arg(scripts.join("python_client.py"))
            .arg(&s.kubeconfig),
    );
    // An ES module finds its packages from where it is: run next to node_modules.
    let script = js.join("js_client.mjs");
    std::fs::copy(scripts.join("js_client.mjs"), &script).unwrap();
    // (The Python run deleted its Service again; its label on `sh` does not matter here.)
    run(
        "the JavaScript client",
        Command::new("node").arg(&script).arg(&s.kubeconfig),
    );
}
