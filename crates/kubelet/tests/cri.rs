//! containerd started by r8s, driven through CRI v1. Runs as root (as CI does) with Debian's
//! containerd; everything lives in a temporary directory removed at the end.

use r8s_kubelet::containerd::{Containerd, ContainerdOptions};
use r8s_kubelet::cri::Cri;

#[tokio::test]
async fn containerd_answers_cri_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let opts = ContainerdOptions::new(dir.path().join("containerd"));
    let mut containerd = Containerd::start(opts.clone()).expect("containerd starts");
    let pid = containerd.pid().unwrap();
    let cri = Cri::connect(&containerd.socket()).await.expect("CRI connects");
    let v = cri.version().await.unwrap();
    assert_eq!(v.runtime_name, "containerd", "{v:?}");
    assert_eq!(v.runtime_api_version, "v1");
    assert!(v.runtime_version.starts_with("1."), "{v:?}");

    // Nothing runs yet, and an image that is not there is reported as absent.
    let mut rt = cri.runtime.clone();
    let sandboxes = rt
        .list_pod_sandbox(k8s_cri::v1::ListPodSandboxRequest { filter: None })
        .await
        .unwrap()
        .into_inner();
    assert!(sandboxes.items.is_empty());
    let mut images = cri.images.clone();
    let status = images
        .image_status(k8s_cri::v1::ImageStatusRequest {
            image: Some(k8s_cri::v1::ImageSpec {
                image: "docker.io/library/does-not-exist:latest".into(),
                ..Default::default()
            }),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(status.image.is_none());
    // The runtime is ready; the network is not until a CNI config is written.
    let st = rt
        .status(k8s_cri::v1::StatusRequest { verbose: false })
        .await
        .unwrap()
        .into_inner();
    let conditions = st.status.unwrap().conditions;
    let ready = |t: &str| conditions.iter().find(|c| c.r#type == t).map(|c| c.status);
    assert_eq!(ready("RuntimeReady"), Some(true), "{conditions:?}");
    assert_eq!(ready("NetworkReady"), Some(false), "{conditions:?}");

    // A containerd that dies is started again, and the same CRI connection answers again.
    assert!(std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while containerd.restarts() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "containerd not started again"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let pid = containerd.pid().unwrap();
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    let mut answered = None;
    for _ in 0..100 {
        match cri.version().await {
            Ok(v) => {
                answered = Some(v);
                break;
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
        }
    }
    assert_eq!(
        answered.map(|v| v.runtime_name).as_deref(),
        Some("containerd"),
        "the CRI connection did not answer after containerd's restart"
    );
    // Its log keeps the first run's lines: both starts are in it.
    let log = containerd.log();
    assert_eq!(log.matches("successfully booted").count(), 2, "{log}");

    containerd.stop();
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "containerd stopped"
    );
    assert_eq!(containerd.restarts(), 1, "a stop is no exit to restart");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(dir.path().to_str().unwrap()),
        "nothing left mounted"
    );
}
