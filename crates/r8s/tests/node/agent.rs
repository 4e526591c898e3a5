//! The north star, for real: `r8s server` with its agent (containerd, CRI, CNI) and the real
//! kubectl — `kubectl create deployment nginx --image=nginx --replicas=3` ends with three nginx
//! containers Running and Ready, each answering HTTP on its own pod IP; deleting the deployment
//! leaves no container behind, and stopping the server leaves nothing at all.

use crate::support;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::cluster::*;
use support::Server;

#[test]
fn kubectl_create_deployment_nginx_runs_three_pods_that_answer_on_their_ips() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let data = tempfile::tempdir().unwrap();
    stage_images(data.path());
    let data_path = data.path().to_path_buf();
    let bridge = format!("r8se{}", std::process::id() % 10000);
    let _leftovers = Leftovers {
        dir: data_path.clone(),
        bridge: bridge.clone(),
        cluster_cidr: "10.197.0.0/16".into(),
        netns_before: netns_entries(),
    };
    let mut s = Server::start_in(
        data,
        &[
            "--node-name",
            "north-star",
            "--pod-bridge",
            &bridge,
            "--cluster-cidr",
            "10.197.0.0/16",
            "--kubelet-address",
            "127.0.0.1",
            "--kubelet-port",
            "0",
        ],
    );
    let node = wait_for(60, "the node to be Ready", || {
        let out = s.kubectl(V, &["get", "node", "north-star", "-o", "json"]);
        let n: Value = serde_json::from_slice(&out.stdout).ok()?;
        let ready = n["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        ready.then_some(n)
    });
    assert!(node["status"]["nodeInfo"]["containerRuntimeVersion"]
        .as_str()
        .unwrap()
        .starts_with("containerd://"));
    assert_eq!(node["spec"]["podCIDR"], "10.197.0.0/24");

    let started = Instant::now();
    s.ok(
        V,
        &["create", "deployment", "nginx", "--image=nginx", "--replicas=3"],
    );
    let pods = wait_for(90, "3 pods Running and Ready", || {
        let l: Value =
            serde_json::from_str(&s.ok(V, &["get", "pods", "-l", "app=nginx", "-o", "json"])).ok()?;
        let pods = l["items"].as_array()?.clone();
        let ready = pods.iter().filter(|p| {
            p["status"]["phase"] == "Running"
                && p["status"]["conditions"]
                    .as_array()
                    .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
        });
        (ready.count() == 3).then_some(pods)
    });
    eprintln!("3 nginx pods Ready {:?} after create", started.elapsed());
    let mut ips: Vec<String> = pods
        .iter()
        .map(|p| p["status"]["podIP"].as_str().unwrap().to_string())
        .collect();
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), 3, "each pod its own IP: {ips:?}");
    for ip in &ips {
        assert!(ip.starts_with("10.197.0."), "{ip}");
        let out = Command::new("curl")
            .args(["-s", "--max-time", "5", &format!("http://{ip}/")])
            .output()
            .unwrap();
        let body = String::from_utf8_lossy(&out.stdout);
        assert!(body.contains("Welcome to nginx!"), "{ip}: {body}");
    }
    let wide = s.ok(V, &["get", "pods", "-o", "wide"]);
    assert!(wide.contains("north-star") && wide.contains("1/1"), "{wide}");

    // A command that exits 0 with --restart=Never: Succeeded ("Completed"); one that keeps
    // failing: restarted with a growing back-off (CrashLoopBackOff), its last exit recorded.
    s.ok(
        V,
        &[
            "run",
            "once",
            "--image=busybox",
            "--restart=Never",
            "--",
            "sh",
            "-c",
            "echo done",
        ],
    );
    s.ok(
        V,
        &[
            "run",
            "crash",
            "--image=busybox",
            "--",
            "sh",
            "-c",
            "echo boom; exit 3",
        ],
    );
    wait_for(60, "once to succeed", || {
        let p: Value = serde_json::from_str(&s.ok(V, &["get", "pod", "once", "-o", "json"])).ok()?;
        (p["status"]["phase"] == "Succeeded").then_some(())
    });
    assert!(s.ok(V, &["get", "pod", "once"]).contains("Completed"));
    let crash = wait_for(60, "CrashLoopBackOff", || {
        let p: Value = serde_json::from_str(&s.ok(V, &["get", "pod", "crash", "-o", "json"])).ok()?;
        let cs = p["status"]["containerStatuses"][0].clone();
        (cs["state"]["waiting"]["reason"] == "CrashLoopBackOff").then_some(cs)
    });
    assert!(crash["restartCount"].as_i64().unwrap() >= 1, "{crash}");
    assert_eq!(crash["lastState"]["terminated"]["exitCode"], 3, "{crash}");
    assert!(
        crash["state"]["waiting"]["message"]
            .as_str()
            .unwrap()
            .starts_with("back-off 10s restarting failed container=crash pod=crash_default("),
        "{crash}"
    );
    s.ok(V, &["delete", "pod", "once", "crash", "--wait=false"]);

    // Init containers run one after the other, each to completion, before the app container.
    let init = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: inits\nspec:\n  initContainers:\n  - {name: first, image: busybox, command: [sh, -c, 'sleep 1; echo first']}\n  - {name: second, image: busybox, command: [sh, -c, 'echo second']}\n  containers:\n  - {name: app, image: busybox, command: [sh, -c, 'sleep 3600']}\n";
    s.ok_stdin(V, &["create", "-f", "-"], init);
    let p = wait_for(60, "inits done and app running", || {
        let p: Value = serde_json::from_str(&s.ok(V, &["get", "pod", "inits", "-o", "json"])).ok()?;
        (p["status"]["phase"] == "Running").then_some(p)
    });
    let inits = p["status"]["initContainerStatuses"].as_array().unwrap();
    assert_eq!(inits.len(), 2);
    let finished = |i: usize| {
        inits[i]["state"]["terminated"]["finishedAt"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let started = |i: usize| {
        inits[i]["state"]["terminated"]["startedAt"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(
        inits.iter().all(|c| c["state"]["terminated"]["exitCode"] == 0),
        "{inits:?}"
    );
    assert!(
        started(1) >= finished(0),
        "second started after first finished: {inits:?}"
    );
    s.ok(V, &["delete", "pod", "inits", "--wait=false"]);

    // An init container failing under restartPolicy Never fails the pod.
    let failing = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: badinit\nspec:\n  restartPolicy: Never\n  initContainers:\n  - {name: setup, image: busybox, command: [sh, -c, 'exit 7']}\n  containers:\n  - {name: app, image: busybox, command: [sh, -c, 'sleep 3600']}\n";
    s.ok_stdin(V, &["create", "-f", "-"], failing);
    let p = wait_for(60, "badinit Failed", || {
        let p: Value = serde_json::from_str(&s.ok(V, &["get", "pod", "badinit", "-o", "json"])).ok()?;
        (p["status"]["phase"] == "Failed").then_some(p)
    });
    assert_eq!(
        p["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"],
        7
    );

    // An image no registry has (the registry is a closed port on loopback): ErrImagePull, then
    // ImagePullBackOff.
    s.ok(V, &["run", "nopull", "--image=127.0.0.1:1/nope:1"]);
    let reasons = wait_for(60, "ImagePullBackOff", || {
        let p: Value = serde_json::from_str(&s.ok(V, &["get", "pod", "nopull", "-o", "json"])).ok()?;
        let w = &p["status"]["containerStatuses"][0]["state"]["waiting"];
        (w["reason"] == "ImagePullBackOff").then(|| w["message"].as_str().unwrap_or("").to_string())
    });
    assert_eq!(reasons, "Back-off pulling image \"127.0.0.1:1/nope:1\"");
    s.ok(V, &["delete", "pod", "badinit", "nopull", "--wait=false"]);

    // Deleting the deployment stops and removes every container; the IPs are released.
    s.ok(V, &["delete", "deployment", "nginx"]);
    wait_for(60, "pods gone", || {
        s.ok(V, &["get", "pods", "-o", "name"])
            .trim()
            .is_empty()
            .then_some(())
    });
    let socket = data_path.join("agent/containerd/containerd.sock");
    wait_for(30, "no containers", || {
        let out = Command::new("ctr")
            .args([
                "--address",
                socket.to_str().unwrap(),
                "-n",
                "k8s.io",
                "containers",
                "ls",
                "-q",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .is_empty()
            .then_some(())
    });
    let reserved: Vec<String> = std::fs::read_dir(data_path.join("agent/ipam/r8s"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().to_string())
                .collect()
        })
        .unwrap_or_default();
    assert!(!reserved.iter().any(|f| f.starts_with("10.197.")), "{reserved:?}");

    // Stopping the server with a pod still running stops it through CRI (its network released),
    // stops containerd and removes the bridge.
    s.ok(
        V,
        &["run", "left-running", "--image=busybox", "--", "sleep", "3600"],
    );
    wait_for(60, "left-running Running", || {
        let p: Value = serde_json::from_str(&s.ok(V, &["get", "pod", "left-running", "-o", "json"])).ok()?;
        (p["status"]["phase"] == "Running").then_some(())
    });
    let netns_running = netns_entries().len();
    s.kill();
    assert_eq!(
        netns_entries().len(),
        netns_running - 1,
        "the running pod's netns was released"
    );
    let link = Command::new("ip")
        .args(["link", "show", &bridge])
        .output()
        .unwrap();
    assert!(!link.status.success(), "bridge {bridge} removed");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(data_path.to_str().unwrap()),
        "nothing left mounted"
    );
}

/// A node that joins: `r8s agent --server … --token-file …` verifies the server by the CA hash in
/// the join token, gets its own certificate through a CertificateSigningRequest (approved and
/// signed by the controller manager), registers its Node and runs pods as `system:node:<name>`.
#[test]
fn an_agent_joins_with_the_token_and_runs_pods() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let s = Server::start_with(&["--cluster-cidr", "10.198.0.0/16"]);
    let token_file = s.dir.path().join("server/node-token");
    let token = wait_for(30, "the join token", || std::fs::read_to_string(&token_file).ok());
    assert!(token.starts_with("K10") && token.contains("::"), "{token}");
    let server = format!("https://127.0.0.1:{}", s.port);

    // A token naming another CA is refused before anything is sent.
    let other_dir = tempfile::tempdir().unwrap();
    let forged = format!("K10{}{}", "0".repeat(64), &token.trim()[67..]);
    let out = Command::new(env!("CARGO_BIN_EXE_r8s"))
        .args(["agent", "--server", &server, "--token", &forged, "--data-dir"])
        .arg(other_dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("does not present the cluster CA named in the join token"),
        "{err}"
    );

    let agent_dir = tempfile::tempdir().unwrap();
    stage_images(agent_dir.path());
    let bridge = format!("r8sj{}", std::process::id() % 10000);
    let _leftovers = Leftovers {
        dir: agent_dir.path().to_path_buf(),
        bridge: bridge.clone(),
        // The joined agent shares the host's network with the server: the server's Service
        // proxy, DNS and network policy serve it, its own are off (the multi-node test runs
        // them). The cluster CIDR is both nodes' (the server has no guard of its own here):
        // CNI masquerade rules a sandbox left behind go with it.
        cluster_cidr: "10.198.0.0/16".into(),
        netns_before: netns_entries(),
    };
    let log = std::fs::File::create(agent_dir.path().join("agent.log")).unwrap();
    let mut agent = Command::new(env!("CARGO_BIN_EXE_r8s"))
        .args(["agent", "--server", &server, "--token-file"])
        .arg(&token_file)
        .arg("--data-dir")
        .arg(agent_dir.path())
        .args(["--node-name", "joiner", "--pod-bridge", &bridge])
        .args(["--kubelet-address", "127.0.0.1", "--kubelet-port", "0"])
        .args([
            "--disable-kube-proxy",
            "--disable-dns",
            "--flannel-backend",
            "none",
        ])
        .arg("--disable-network-policy")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    struct Stop<'a>(&'a mut std::process::Child);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            let _ = Command::new("kill")
                .args(["-TERM", &self.0.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(30);
            while self.0.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stop = Stop(&mut agent);
    let agent_log = || std::fs::read_to_string(agent_dir.path().join("agent.log")).unwrap_or_default();

    wait_for(60, "the joined node to be Ready", || {
        let out = s.kubectl(V, &["get", "node", "joiner", "-o", "json"]);
        let n: Value = serde_json::from_slice(&out.stdout).ok()?;
        let ready = n["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        ready.then_some(())
    });
    let csrs: Value = serde_json::from_str(&s.ok(V, &["get", "csr", "-o", "json"])).unwrap();
    let csr = &csrs["items"][0];
    assert!(
        csr["spec"]["username"]
            .as_str()
            .unwrap()
            .starts_with("system:bootstrap:"),
        "{csr}"
    );
    assert!(csr["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .any(|g| g == "system:bootstrappers"));
    assert_eq!(csr["status"]["conditions"][0]["reason"], "AutoApproved");
    assert!(s.ok(V, &["get", "csr"]).contains("Approved,Issued"));
    // Its own certificate, without system:masters.
    let kubeconfig = std::fs::read_to_string(agent_dir.path().join("agent/kubelet.kubeconfig")).unwrap();
    assert!(kubeconfig.contains("client-certificate-data"), "{kubeconfig}");

    s.ok(V, &["run", "on-joiner", "--image=busybox", "--", "sleep", "3600"]);
    let p = wait_for(90, "the pod Running on the joined node", || {
        let p: Value = serde_json::from_str(&s.ok(V, &["get", "pod", "on-joiner", "-o", "json"])).ok()?;
        (p["status"]["phase"] == "Running").then_some(p)
    });
    assert_eq!(p["spec"]["nodeName"], "joiner");
    assert!(
        p["status"]["podIP"].as_str().unwrap().starts_with("10.198."),
        "{p}"
    );
    assert!(!agent_log().contains("forbidden"), "{}", agent_log());
    s.ok(V, &["delete", "pod", "on-joiner", "--wait=false"]);
    drop(stop);
}
