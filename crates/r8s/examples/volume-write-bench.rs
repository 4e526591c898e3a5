//! The volume write benchmark (issue 39): the throughput of a write inside a volume of the
//! default class (`local-path`: an ext4 image on a loop device) against the same write to the
//! node's disk directly. A real `r8s server` with its agent runs one busybox pod that mounts
//! its claim at /vol and a hostPath directory beside the agent's data (the same disk as the
//! volume's image) at /disk, and writes `--mib` MiB with `dd … conv=fsync` to each in turn,
//! `--rounds` times (alternating, so that both see the same machine), noting the uptime before
//! and after each in /disk/results (busybox's dd prints no rate). Each figure is bytes / seconds,
//! to the 10 ms of /proc/uptime.
//!
//!   cargo build --release -p r8s --bins --examples && target/release/examples/volume-write-bench [--mib 512] [--rounds 5]

#[path = "common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

/// The seconds a result line (`<where> <uptime before> <uptime after>`) took.
fn dd_seconds(line: &str) -> Option<f64> {
    let mut f = line.split_whitespace().skip(1).map(|t| t.parse::<f64>().ok());
    let (before, after) = (f.next()??, f.next()??);
    Some(after - before)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    common::r8s_binary();
    let images = common::test_images();
    let mib = common::arg("--mib", 512);
    let rounds = common::arg("--rounds", 5);
    let (dir, mut server, client) =
        common::start_node(&images, "bench-node", "r8svolw0", "10.186.0.0/16").await;
    // The controller manager's ServiceAccount controller makes `default` (pods need it).
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), "default");
    while sas.get_opt("default").await.ok().flatten().is_none() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let direct = dir.path().join("agent").join("bench-direct");
    std::fs::create_dir_all(&direct).unwrap();

    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let claim = serde_json::from_value(json!({
        "metadata": {"name": "bench"},
        "spec": {"accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": format!("{}Mi", mib * 2 + 64)}}},
    }))
    .unwrap();
    claims.create(&PostParams::default(), &claim).await.unwrap();
    let script = format!(
        "for i in $(seq {rounds}); do \
           for d in vol disk; do \
             sync; \
             t0=$(cut -d\" \" -f1 /proc/uptime); \
             dd if=/dev/zero of=/$d/f bs=1M count={mib} conv=fsync 2>/dev/null; \
             echo $d $t0 $(cut -d\" \" -f1 /proc/uptime) >> /disk/results; \
             rm -f /$d/f; \
           done; \
         done"
    );
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "writer"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "dd", "image": "busybox", "command": ["sh", "-c", script],
                            "volumeMounts": [{"name": "vol", "mountPath": "/vol"},
                                             {"name": "disk", "mountPath": "/disk"}]}],
            "volumes": [{"name": "vol", "persistentVolumeClaim": {"claimName": "bench"}},
                        {"name": "disk", "hostPath": {"path": direct.to_string_lossy(), "type": "Directory"}}],
        },
    }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let p = pods.get("writer").await.unwrap();
        let phase = p.status.and_then(|s| s.phase).unwrap_or_default();
        if phase == "Succeeded" || phase == "Failed" {
            assert_eq!(phase, "Succeeded", "the writer failed");
            break;
        }
        assert!(Instant::now() < deadline, "the writer did not finish in 10 min");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The results, from the node's side of the hostPath directory.
    let logs = std::fs::read_to_string(direct.join("results")).unwrap();
    let bytes = (mib * 1024 * 1024) as f64;
    let mut vol = Vec::new();
    let mut disk = Vec::new();
    for line in logs.lines() {
        let Some(secs) = dd_seconds(line).filter(|s| *s > 0.0) else {
            continue;
        };
        let rate = bytes / secs / 1e6;
        if line.starts_with("vol ") {
            vol.push(rate);
        } else if line.starts_with("disk ") {
            disk.push(rate);
        }
    }
    assert_eq!(vol.len(), rounds, "{logs}");
    assert_eq!(disk.len(), rounds, "{logs}");
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let show = |v: &[f64]| v.iter().map(|r| format!("{r:.0}")).collect::<Vec<_>>().join(", ");
    println!("volume-write-bench: {rounds} rounds of {mib} MiB written with dd conv=fsync (MB/s)");
    println!(
        "  in the claim's volume (ext4 image on a loop device): {}",
        show(&vol)
    );
    println!(
        "  on the node's disk (hostPath beside it):              {}",
        show(&disk)
    );
    let (v, d) = (median(&mut vol), median(&mut disk));
    println!(
        "  medians: volume {v:.0} MB/s, disk {d:.0} MB/s: the volume at {:.0}% of the disk",
        v / d * 100.0
    );

    let _ = pods.delete("writer", &DeleteParams::default()).await;
    while pods.get_opt("writer").await.ok().flatten().is_some() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = claims.delete("bench", &DeleteParams::default()).await;
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status();
    let _ = server.wait();
}
