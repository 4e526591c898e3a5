//! A pod through CRI for real: r8s's containerd, the test images (r8s's pause, busybox) imported
//! from tarballs, the CNI conflist r8s writes run by the real bridge plugin, a sandbox and a
//! container made from a Pod spec — and an HTTP answer from the pod's IP. Everything it creates
//! (containers, shims, the bridge, the netns, mounts, the temp dir) is removed at the end, also
//! when an assertion fails.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_cri::v1 as cri;
use r8s_kubelet::cni::{self, CniOptions};
use r8s_kubelet::containerd::{Containerd, ContainerdOptions};
use r8s_kubelet::cri::Cri;
use r8s_kubelet::spec::{self, NodeContext};

/// The test images: `$R8S_TEST_IMAGES`, or built into target/test-images by the project script.
fn test_images() -> PathBuf {
    if let Some(dir) = std::env::var_os("R8S_TEST_IMAGES") {
        return dir.into();
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = root.join("target").join("test-images");
    if !dir.join("pause-image.txt").exists() {
        let status = Command::new("bash")
            .arg(root.join("scripts").join("build-test-images.sh"))
            .arg(&dir)
            .status()
            .expect("running scripts/build-test-images.sh");
        assert!(status.success(), "building the test images failed");
    }
    dir
}

fn netns_entries() -> Vec<String> {
    std::fs::read_dir("/var/run/netns")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Removes what the test made, in order, whatever happens.
struct Cleanup {
    containerd: Option<Containerd>,
    cgroup_parent: String,
    bridge: String,
    netns_before: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(mut c) = self.containerd.take() {
            if std::thread::panicking() {
                let log = c.log();
                let tail: Vec<&str> = log.lines().rev().take(30).collect();
                eprintln!("containerd log (last lines, newest first):\n{}", tail.join("\n"));
            }
            c.stop();
        }
        r8s_kubelet::cgroups::remove(&self.cgroup_parent);
        cni::remove_bridge(&self.bridge);
        for ns in netns_entries() {
            if !self.netns_before.contains(&ns) {
                let _ = Command::new("ip").args(["netns", "del", &ns]).status();
            }
        }
    }
}

fn curl(url: &str) -> Option<String> {
    let out = Command::new("curl")
        .args(["-sf", "--max-time", "2", url])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn pod_runs_through_cri_and_answers_on_its_ip() {
    let images = test_images();
    let pause = std::fs::read_to_string(images.join("pause-image.txt"))
        .unwrap()
        .trim()
        .to_string();
    let dir = tempfile::tempdir().unwrap();
    let unique = std::process::id() % 200 + 20;
    let bridge = format!("r8st{unique}");
    let subnet = format!("10.199.{unique}.0/24");
    let mut opts = ContainerdOptions::new(dir.path().join("containerd"));
    opts.sandbox_image = pause;
    let cgroup_parent = r8s_kubelet::cgroups::pod_parent(&format!("r8s-test-{}", std::process::id()));
    let mut guard = Cleanup {
        containerd: None,
        cgroup_parent: cgroup_parent.clone(),
        bridge: bridge.clone(),
        netns_before: netns_entries(),
    };
    let cni_opts = CniOptions {
        conf_dir: opts.cni_conf_dir.clone(),
        ipam_dir: dir.path().join("ipam"),
        bridge: bridge.clone(),
        ip_masq: false,
        mtu: None,
    };
    cni::write(&cni_opts, std::slice::from_ref(&subnet)).unwrap();
    let containerd = Containerd::start(opts).expect("containerd starts");
    let socket = containerd.socket();
    guard.containerd = Some(containerd);
    let imported = r8s_kubelet::images::import_dir(&socket, &images).unwrap();
    assert!(imported.len() >= 2, "{imported:?}");
    let cri = Cri::connect(&socket).await.unwrap();

    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "11111111-2222-3333-4444-555555555555"},
        "spec": {"containers": [{
            "name": "httpd", "image": "busybox",
            "command": ["sh", "-c"],
            "args": ["mkdir -p /www && echo hello from $(POD_NAME) > /www/index.html && exec httpd -f -p 8080 -h /www"],
            "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
        }]}
    }))
    .unwrap();
    let node = NodeContext {
        node_name: "test-node".into(),
        log_root: dir.path().join("pods").display().to_string(),
        cgroup_parent: cgroup_parent.clone(),
        ..Default::default()
    };
    let started = Instant::now();
    let sandbox_config = spec::sandbox_config(&pod, 0, &node);
    std::fs::create_dir_all(&sandbox_config.log_directory).unwrap();
    let mut rt = cri.runtime.clone();
    let sandbox = rt
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(sandbox_config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .expect("RunPodSandbox")
        .into_inner()
        .pod_sandbox_id;
    let (container, _) = spec::container_config(
        &pod,
        &pod.spec.as_ref().unwrap().containers[0],
        0,
        &node,
        &spec::ContainerInputs::default(),
    )
    .unwrap();
    let id = rt
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: sandbox.clone(),
            config: Some(container),
            sandbox_config: Some(sandbox_config.clone()),
        })
        .await
        .expect("CreateContainer")
        .into_inner()
        .container_id;
    rt.start_container(cri::StartContainerRequest {
        container_id: id.clone(),
    })
    .await
    .expect("StartContainer");
    let status = rt
        .pod_sandbox_status(cri::PodSandboxStatusRequest {
            pod_sandbox_id: sandbox.clone(),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap();
    let ip = status.network.unwrap().ip;
    let prefix = format!("10.199.{unique}.");
    assert!(ip.starts_with(&prefix), "pod IP {ip} from {subnet}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let body = loop {
        if let Some(b) = curl(&format!("http://{ip}:8080/")) {
            break b;
        }
        assert!(Instant::now() < deadline, "no answer from the pod at {ip}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(body.trim(), "hello from web");
    eprintln!("pod answering {:?} after sandbox creation", started.elapsed());
    // The container's log is where the spec says, in CRI format.
    let cs = rt
        .container_status(cri::ContainerStatusRequest {
            container_id: id.clone(),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap();
    assert_eq!(cs.state, cri::ContainerState::ContainerRunning as i32);
    assert!(cs.log_path.ends_with("httpd/0.log"), "{}", cs.log_path);

    // Tear down through CRI: the IP is released and nothing is left running.
    rt.stop_container(cri::StopContainerRequest {
        container_id: id.clone(),
        timeout: 5,
    })
    .await
    .unwrap();
    rt.remove_container(cri::RemoveContainerRequest { container_id: id })
        .await
        .unwrap();
    rt.stop_pod_sandbox(cri::StopPodSandboxRequest {
        pod_sandbox_id: sandbox.clone(),
    })
    .await
    .unwrap();
    rt.remove_pod_sandbox(cri::RemovePodSandboxRequest {
        pod_sandbox_id: sandbox,
    })
    .await
    .unwrap();
    let left = rt
        .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .items;
    assert!(left.is_empty(), "{left:?}");
    let allocations: Vec<_> = std::fs::read_dir(dir.path().join("ipam").join("r8s"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().to_string())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        !allocations.iter().any(|f| f.starts_with("10.199.")),
        "IP released: {allocations:?}"
    );
    drop(guard);
    let link = Command::new("ip")
        .args(["link", "show", &bridge])
        .output()
        .unwrap();
    assert!(!link.status.success(), "bridge {bridge} removed");
}
