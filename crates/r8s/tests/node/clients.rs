//! The official clients other than kubectl and kube-rs, driving r8s unchanged. The Python
//! client (PyPI `kubernetes`, installed by `scripts/setup.sh` in `target/clients/python`) runs
//! `clients/python_client.py`: lists, watches, writes, errors, exec and port-forward over
//! WebSocket (the only transport it has), logs.

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
fn the_python_client_works_unchanged() {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/clients/python/bin/python");
    assert!(
        python.exists(),
        "the Python client is not installed at {}: run scripts/setup.sh",
        python.display()
    );
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let c = start("py-node", "10.212.0.0/16", "r8sy");
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
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node/clients/python_client.py");
    let out = Command::new(&python)
        .arg(&script)
        .arg(&s.kubeconfig)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("all ok"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
