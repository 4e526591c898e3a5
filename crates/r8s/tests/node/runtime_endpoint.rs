//! `--container-runtime-endpoint`: the agent uses a CRI runtime it did not start (here a
//! containerd this test runs) instead of its own child, writing the pod network's CNI
//! configuration where that runtime reads it (`--cni-conf-dir`).

use crate::support;

use std::path::Path;

use r8s_kubelet::containerd::{Containerd, ContainerdOptions};
use support::cluster::*;

/// The pod sandboxes the runtime at `socket` holds for pod `uid`.
fn sandboxes(socket: &Path, uid: &str) -> usize {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let cri = r8s_kubelet::cri::Cri::connect(socket).await.unwrap();
        let mut r = cri.runtime.clone();
        r.list_pod_sandbox(k8s_cri::v1::ListPodSandboxRequest { filter: None })
            .await
            .unwrap()
            .into_inner()
            .items
            .iter()
            .filter(|s| s.labels.get("io.kubernetes.pod.uid").map(String::as_str) == Some(uid))
            .count()
    })
}

#[test]
fn the_agent_runs_pods_on_a_given_cri_runtime() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    // The runtime, started before the server and stopped (with what it runs) after it.
    let ext = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-images");
    let mut opts = ContainerdOptions::new(ext.path().join("containerd"));
    opts.cni_conf_dir = ext.path().join("net.d");
    let staged = tempfile::tempdir().unwrap();
    stage_images(staged.path());
    opts.sandbox_image = std::fs::read_to_string(root.join("pause-image.txt"))
        .unwrap()
        .trim()
        .to_string();
    let containerd = Containerd::start(opts.clone()).unwrap();
    let socket = containerd.socket();

    let endpoint = format!("unix://{}", socket.display());
    let conf_dir = opts.cni_conf_dir.display().to_string();
    let c = start_with(
        "ext-node",
        "10.200.0.0/16",
        "r8sx",
        &[
            "--container-runtime-endpoint",
            &endpoint,
            "--cni-conf-dir",
            &conf_dir,
        ],
    );
    let s = &c.s;
    // No containerd of the agent's own; the pod network's config where the runtime reads it.
    assert!(!c.data.join("agent/containerd/containerd.sock").exists());
    assert!(std::fs::read_dir(&opts.cni_conf_dir)
        .unwrap()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().ends_with(".conflist")));
    let node: serde_json::Value =
        serde_json::from_str(&s.ok(V, &["get", "node", "ext-node", "-o", "json"])).unwrap();
    let runtime = node["status"]["nodeInfo"]["containerRuntimeVersion"]
        .as_str()
        .unwrap();
    assert!(runtime.starts_with("containerd://"), "{runtime}");

    s.ok(
        V,
        &[
            "run",
            "hello",
            "--image=busybox",
            "--restart=Never",
            "--",
            "sh",
            "-c",
            "echo hi from the runtime; sleep 3600",
        ],
    );
    let pod = wait_for(90, "hello Running", || {
        let p = pod_json(s, "hello")?;
        (p["status"]["phase"] == "Running").then_some(p)
    });
    assert!(
        pod["status"]["podIP"].as_str().unwrap().starts_with("10.200."),
        "{pod}"
    );
    let uid = uid_of(s, "hello");
    assert_eq!(sandboxes(&socket, &uid), 1, "the sandbox is in the given runtime");
    wait_for(30, "hello's output", || {
        s.ok(V, &["logs", "hello"])
            .contains("hi from the runtime")
            .then_some(())
    });
    s.ok(V, &["delete", "pod", "hello", "--wait=true"]);
    wait_for(30, "hello's sandbox removed", || {
        (sandboxes(&socket, &uid) == 0).then_some(())
    });
    drop(c);
    drop(containerd);
}
