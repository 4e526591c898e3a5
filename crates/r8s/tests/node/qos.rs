//! QoS classes, pod cgroups and kubelet admission, end to end: `r8s server` with its agent on
//! real containerd and the real kubectl. Each pod's cgroup sits under its class's parent with
//! the limits its requests and limits give (read on the host, and from inside the container
//! through its own cgroup files); a container over its memory limit is OOMKilled; a pod bound
//! to the node past what the node has is rejected as upstream's kubelet does.

use crate::support;

use std::path::{Path, PathBuf};

use serde_json::Value;
use support::cluster::*;

const PODS: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata: {name: guaranteed}
  spec:
    containers:
    - name: c
      image: busybox
      resources: {limits: {cpu: 250m, memory: 32Mi}}
      command: [sh, -c, 'echo "CG $(cat /sys/fs/cgroup/cpu/cpu.shares) $(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/memory/memory.limit_in_bytes) $(cat /proc/self/oom_score_adj)"; sleep 3600']
- apiVersion: v1
  kind: Pod
  metadata: {name: burstable}
  spec:
    containers:
    - name: c
      image: busybox
      resources: {requests: {cpu: 100m, memory: 1Gi}, limits: {memory: 2Gi}}
      command: [sh, -c, 'echo "CG $(cat /sys/fs/cgroup/cpu/cpu.shares) $(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/memory/memory.limit_in_bytes) $(cat /proc/self/oom_score_adj)"; sleep 3600']
- apiVersion: v1
  kind: Pod
  metadata: {name: besteffort}
  spec:
    containers:
    - name: c
      image: busybox
      command: [sh, -c, 'echo "CG $(cat /sys/fs/cgroup/cpu/cpu.shares) $(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/memory/memory.limit_in_bytes) $(cat /proc/self/oom_score_adj)"; sleep 3600']
"#;

/// A v1 cgroup file of the pods' hierarchy on the host (None on a v2-only host).
fn host_cgroup_file(controller: &str, path: &str, file: &str) -> Option<String> {
    let p = Path::new("/sys/fs/cgroup")
        .join(controller)
        .join(path.trim_start_matches('/'))
        .join(file);
    std::fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

fn v1_host() -> bool {
    Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists()
        || Path::new("/sys/fs/cgroup/memory").is_dir()
}

/// Guaranteed, Burstable and BestEffort pods: the class in their status, the cgroup per class
/// with upstream's cpu shares, CFS quota and memory limit, the containers' own limits and OOM
/// score adjustments; the cgroups go with the pods.
#[test]
fn pods_get_cgroups_by_qos_class() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let c = start("qos-node", "10.196.0.0/16", "r8sq");
    let (s, data) = (&c.s, c.data.clone());
    s.ok_stdin(V, &["create", "-f", "-"], PODS);
    let root = r8s_kubelet::cgroups::pod_parent("r8s-pods");
    let node: Value = serde_json::from_str(&s.ok(V, &["get", "node", "qos-node", "-o", "json"])).unwrap();
    let mem_ki: i64 = node["status"]["capacity"]["memory"]
        .as_str()
        .unwrap()
        .trim_end_matches("Ki")
        .parse()
        .unwrap();
    // Upstream's heuristic: 1000 - 1000 × request / capacity, kept within 3 and 999.
    // The node reports its filesystem as ephemeral-storage, as upstream's kubelet does.
    let eph = node["status"]["capacity"]["ephemeral-storage"]
        .as_str()
        .unwrap_or("");
    assert!(
        eph.ends_with("Ki") && eph.trim_end_matches("Ki").parse::<u64>().unwrap_or(0) > 0,
        "{node}"
    );
    assert_eq!(
        node["status"]["allocatable"]["ephemeral-storage"].as_str(),
        Some(eph)
    );
    let burstable_adj = (1000 - 1000 * (1i64 << 30) / (mem_ki * 1024)).clamp(3, 999);
    // name → (class, cgroup parent under the root, cpu.shares, quota, memory limit, oom adj)
    let cases: [(&str, &str, &str, i64, i64, i64); 3] = [
        ("guaranteed", "Guaranteed", "", 256, 25_000, 32 << 20),
        ("burstable", "Burstable", "burstable/", 102, -1, 2 << 30),
        ("besteffort", "BestEffort", "besteffort/", 2, -1, -1),
    ];
    let mut adjs = Vec::new();
    let mut paths = Vec::new();
    for (name, class, parent, shares, quota, memory) in cases {
        wait_for(90, &format!("{name} Running"), || {
            (pod_json(s, name)?["status"]["phase"] == "Running").then_some(())
        });
        let pod = pod_json(s, name).unwrap();
        assert_eq!(pod["status"]["qosClass"], class, "{name}");
        let uid = uid_of(s, name);
        let log = wait_for(30, &format!("{name}'s report"), || {
            let log = log_of(&data, name, &uid, "c");
            line(&log, "CG ").map(String::from)
        });
        let f: Vec<&str> = log.split(' ').collect();
        assert_eq!(f.len(), 4, "{log}");
        let path = format!("{root}/{parent}pod{uid}");
        paths.push(path.clone());
        if !v1_host() {
            continue;
        }
        // The pod's cgroup, on the host.
        assert_eq!(
            host_cgroup_file("cpu", &path, "cpu.shares").as_deref(),
            Some(shares.to_string().as_str()),
            "{name}"
        );
        assert_eq!(
            host_cgroup_file("cpu", &path, "cpu.cfs_quota_us").as_deref(),
            Some(quota.to_string().as_str()),
            "{name}"
        );
        let mem_host: i64 = host_cgroup_file("memory", &path, "memory.limit_in_bytes")
            .unwrap()
            .parse()
            .unwrap();
        if memory > 0 {
            assert_eq!(mem_host, memory, "{name}");
        } else {
            // Unlimited: the kernel shows its page-rounded maximum.
            assert!(mem_host > 1 << 60, "{name}: {mem_host}");
        }
        // The container's own cgroup (what it sees as its cgroup files).
        assert_eq!(f[0], shares.to_string(), "{name}: {log}");
        assert_eq!(f[1], quota.to_string(), "{name}: {log}");
        if memory > 0 {
            assert_eq!(f[2], memory.to_string(), "{name}: {log}");
        }
        adjs.push(f[3].parse::<i64>().unwrap());
    }
    if v1_host() {
        // BestEffort first to go, then Burstable by its request; Guaranteed last (containerd
        // raises negative scores to its own, which `restrict_oom_score_adj` keeps).
        assert_eq!(adjs[2], 1000, "{adjs:?}");
        assert_eq!(adjs[1], burstable_adj, "{adjs:?}");
        assert!(adjs[0] < adjs[1], "{adjs:?}");
        // The class parents' weights.
        assert_eq!(
            host_cgroup_file("cpu", &format!("{root}/besteffort"), "cpu.shares").as_deref(),
            Some("2")
        );
        assert_eq!(
            host_cgroup_file("cpu", &format!("{root}/burstable"), "cpu.shares").as_deref(),
            Some("102")
        );
    }
    s.ok(
        V,
        &[
            "delete",
            "pod",
            "guaranteed",
            "burstable",
            "besteffort",
            "--wait=true",
        ],
    );
    for p in &paths {
        let dir: PathBuf = Path::new("/sys/fs/cgroup/memory").join(p.trim_start_matches('/'));
        wait_for(30, &format!("{} removed", dir.display()), || {
            (!dir.exists()).then_some(())
        });
    }
}

const HOG: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: hog}
spec:
  restartPolicy: Never
  containers:
  - name: hog
    image: busybox
    resources: {limits: {memory: 16Mi}}
    command: [dd, if=/dev/zero, of=/dev/null, bs=64M, count=1]
"#;

/// A container that goes over its memory limit is OOM-killed and reported so; a pod bound to
/// the node with more than it has is rejected by the kubelet (OutOfcpu) and never starts.
#[test]
fn memory_hogs_are_oom_killed_and_oversized_pods_rejected() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let c = start("oom-node", "10.197.0.0/16", "r8so");
    let s = &c.s;
    s.ok_stdin(V, &["create", "-f", "-"], HOG);
    let term = wait_for(90, "hog terminated", || {
        let p = pod_json(s, "hog")?;
        let t = p["status"]["containerStatuses"][0]["state"]["terminated"].clone();
        t.is_object().then_some((p, t))
    });
    let (pod, t) = term;
    assert_eq!(t["reason"], "OOMKilled", "{t}");
    assert_eq!(t["exitCode"], 137, "{t}");
    wait_for(30, "hog Failed", || {
        (pod_json(s, "hog")?["status"]["phase"] == "Failed").then_some(())
    });
    assert_eq!(pod["status"]["qosClass"], "Burstable");
    // A finished pod's sandbox stops: its address goes back to the pool (host-local keeps a
    // file per address in use), while its logs stay readable.
    let ip = pod_json(s, "hog").unwrap()["status"]["podIP"]
        .as_str()
        .unwrap()
        .to_string();
    let ipam = c.data.join("agent/ipam");
    let in_use = |ip: &str| {
        std::fs::read_dir(&ipam)
            .into_iter()
            .flatten()
            .flatten()
            .any(|net| net.path().join(ip).exists())
    };
    wait_for(30, "the hog's address released", || (!in_use(&ip)).then_some(()));
    let hog_logs = s.kubectl(V, &["logs", "hog"]);
    assert!(
        hog_logs.status.success(),
        "{}",
        String::from_utf8_lossy(&hog_logs.stderr)
    );

    // Bound straight to the node (no scheduler in the way): the kubelet checks again.
    let big = r#"
apiVersion: v1
kind: Pod
metadata: {name: big}
spec:
  nodeName: oom-node
  containers:
  - name: c
    image: busybox
    command: [sleep, "3600"]
    resources: {requests: {cpu: "100"}}
"#;
    s.ok_stdin(V, &["create", "-f", "-"], big);
    let p = wait_for(60, "big Failed", || {
        let p = pod_json(s, "big")?;
        (p["status"]["phase"] == "Failed").then_some(p)
    });
    assert_eq!(p["status"]["reason"], "OutOfcpu", "{p}");
    let message = p["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "Pod was rejected: Node didn't have enough resource: cpu, requested: 100000, used: 0, capacity: "
        ),
        "{message}"
    );
    assert!(p["status"]["containerStatuses"].is_null(), "nothing started: {p}");
    let events = events_of(s, "big");
    assert!(
        events
            .iter()
            .any(|(r, m)| r == "OutOfcpu" && m.starts_with("Node didn't have enough resource: cpu")),
        "{events:?}"
    );
    // A pod that fits is admitted beside it.
    let small = big
        .replace("name: big", "name: small")
        .replace("cpu: \"100\"", "cpu: 100m");
    s.ok_stdin(V, &["create", "-f", "-"], &small);
    wait_for(90, "small Running", || {
        (pod_json(s, "small")?["status"]["phase"] == "Running").then_some(())
    });
    // A running pod's address is in use (what the hog's check above looks for).
    let small_ip = pod_json(s, "small").unwrap()["status"]["podIP"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(in_use(&small_ip), "{small_ip} not found under the IPAM directory");
}

const RESIZE: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: resize}
spec:
  containers:
  - name: c
    image: busybox
    resources: {requests: {cpu: 100m, memory: 32Mi}, limits: {cpu: 200m, memory: 64Mi}}
    command: [sh, -c, 'while true; do echo "CG $(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/memory/memory.limit_in_bytes)"; sleep 1; done']
"#;

fn resize(s: &support::Server, patch: &str) -> std::process::Output {
    s.kubectl(
        V,
        &[
            "patch",
            "pod",
            "resize",
            "--subresource",
            "resize",
            "--patch",
            patch,
        ],
    )
}

/// In-place resize (`kubectl patch --subresource resize`): the running container gets the new
/// CPU quota and memory limit without a restart; what may not change is refused; what the
/// node cannot hold waits as PodResizePending.
#[test]
fn pods_resize_in_place() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let c = start("resize-node", "10.202.0.0/16", "r8sz");
    let s = &c.s;
    s.ok_stdin(V, &["create", "-f", "-"], RESIZE);
    let last = |s: &support::Server| {
        let out = s.kubectl(V, &["logs", "resize", "--tail=1"]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    wait_for(90, "the first limits", || {
        (last(s) == "CG 20000 67108864").then_some(())
    });
    let before = pod_json(s, "resize").unwrap();
    let id = before["status"]["containerStatuses"][0]["containerID"].clone();

    let out = resize(
        s,
        r#"{"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"150m","memory":"48Mi"},"limits":{"cpu":"300m","memory":"96Mi"}}}]}}"#,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_for(30, "the new limits in the container", || {
        (last(s) == "CG 30000 100663296").then_some(())
    });
    let p = wait_for(30, "the new resources in the status", || {
        let p = pod_json(s, "resize")?;
        (p["status"]["containerStatuses"][0]["resources"]["limits"]["cpu"] == "300m").then_some(p)
    });
    let cs = &p["status"]["containerStatuses"][0];
    assert_eq!(cs["containerID"], id, "resized in place, not restarted");
    assert_eq!(cs["restartCount"], 0);
    assert_eq!(cs["allocatedResources"]["memory"], "48Mi", "{cs}");
    if Path::new("/sys/fs/cgroup/memory").is_dir() {
        let uid = uid_of(s, "resize");
        let path = format!(
            "{}/burstable/pod{uid}",
            r8s_kubelet::cgroups::pod_parent("r8s-pods")
        );
        assert_eq!(
            host_cgroup_file("cpu", &path, "cpu.cfs_quota_us").as_deref(),
            Some("30000")
        );
        assert_eq!(
            host_cgroup_file("memory", &path, "memory.limit_in_bytes").as_deref(),
            Some("100663296")
        );
    }

    // What a resize may not do.
    let err = resize(s, r#"{"spec":{"containers":[{"name":"c","image":"nginx"}]}}"#);
    let msg = String::from_utf8_lossy(&err.stderr);
    assert!(msg.contains("only cpu and memory resources are mutable"), "{msg}");
    let err = resize(
        s,
        r#"{"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"300m","memory":"96Mi"},"limits":{"cpu":"300m","memory":"96Mi"}}}]}}"#,
    );
    let msg = String::from_utf8_lossy(&err.stderr);
    assert!(
        msg.contains("Pod QOS Class may not change as a result of resizing"),
        "{msg}"
    );

    // More than the node has: pending, Infeasible; the container keeps what it had.
    let out = resize(
        s,
        r#"{"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"100"},"limits":{"cpu":"200"}}}]}}"#,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let p = wait_for(30, "PodResizePending", || {
        let p = pod_json(s, "resize")?;
        let pending = p["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "PodResizePending")?
            .clone();
        Some(pending)
    });
    assert_eq!(p["reason"], "Infeasible", "{p}");
    assert_eq!(last(s), "CG 30000 100663296");
}
