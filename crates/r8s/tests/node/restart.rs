//! An agent restart adopts the pods it left running (`--keep-pods-on-exit`), as a kubelet
//! restart does upstream: while the server is down the containers keep serving on their pod
//! IPs; after it the same pods have the same containers (no restart counted), addresses and
//! logs. A containerd killed under a running agent is started again and takes the same pods
//! over. Without the flag, stopping stops everything.

use crate::support;

use std::process::Command;

use serde_json::Value;
use support::cluster::*;

/// nginx's page at `ip`, reached through the pod bridge only (never another route).
fn curl_ok(bridge: &str, ip: &str) -> bool {
    Command::new("curl")
        .args(["-sf", "-o", "/dev/null", "--max-time", "3", "--interface", bridge])
        .arg(format!("http://{ip}/"))
        .status()
        .is_ok_and(|s| s.success())
}

/// (name, container id, pod IP, restart count) of each pod of the deployment, by name.
fn pods(s: &support::Server) -> Vec<(String, String, String, i64)> {
    let l: Value = serde_json::from_str(&s.ok(V, &["get", "pods", "-l", "app=web", "-o", "json"])).unwrap();
    let mut v: Vec<_> = l["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let cs = &p["status"]["containerStatuses"][0];
            (
                p["metadata"]["name"].as_str().unwrap_or("").to_string(),
                cs["containerID"].as_str().unwrap_or("").to_string(),
                p["status"]["podIP"].as_str().unwrap_or("").to_string(),
                cs["restartCount"].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    v.sort();
    v
}

fn all_ready(s: &support::Server, n: usize) -> Option<Vec<(String, String, String, i64)>> {
    let out = s.kubectl(V, &["get", "pods", "-l", "app=web", "-o", "json"]);
    let l: Value = serde_json::from_slice(&out.stdout).ok()?;
    let items = l["items"].as_array()?;
    let ready = items.len() == n
        && items.iter().all(|p| {
            p["status"]["conditions"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
        });
    ready.then(|| pods(s))
}

#[test]
fn a_restarted_agent_adopts_its_running_pods() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = start_with("restart-node", "10.199.0.0/16", "r8sr", &["--keep-pods-on-exit"]);
    let bridge = c.args[c.args.iter().position(|a| a == "--pod-bridge").unwrap() + 1].clone();
    let curl_ok = |ip: &str| curl_ok(&bridge, ip);
    c.s.ok(
        V,
        &["create", "deployment", "web", "--image=nginx", "--replicas=2"],
    );
    let before = wait_for(90, "2 web pods Ready", || all_ready(&c.s, 2));
    for (_, _, ip, _) in &before {
        assert!(curl_ok(ip), "{ip} does not answer");
    }
    // Their Service, reached from the node by its cluster IP.
    c.s.ok(V, &["expose", "deployment", "web", "--port=80"]);
    let cluster_ip =
        c.s.ok(V, &["get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}"]);
    wait_for(30, "the web Service answering", || {
        curl_ok(&cluster_ip).then_some(())
    });

    // Asked every 100 ms from here through the restart: a Service of pods kept running never
    // stops routing (the table stays while the agent is down; the next start replaces it in
    // one transaction).
    let asking = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let poller = {
        let (asking, bridge, ip) = (asking.clone(), bridge.clone(), cluster_ip.clone());
        std::thread::spawn(move || {
            let (mut asked, mut failed) = (0, 0);
            while asking.load(std::sync::atomic::Ordering::Relaxed) {
                asked += 1;
                if !self::curl_ok(&bridge, &ip) {
                    failed += 1;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            (asked, failed)
        })
    };

    // Down: the server (and its containerd) stop, the pods keep serving.
    c.s.kill();
    for (_, _, ip, _) in &before {
        assert!(curl_ok(ip), "{ip} stopped answering while the server was down");
    }
    assert!(
        curl_ok(&cluster_ip),
        "the Service stopped routing while the server was down"
    );

    // Up again: the same pods, containers and addresses; nothing restarted or recreated.
    let args: Vec<String> = c.args.clone();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    c.s.restart(&args);
    wait_for(60, "the node Ready again", || {
        let n: Value = serde_json::from_slice(
            &c.s.kubectl(V, &["get", "node", "restart-node", "-o", "json"])
                .stdout,
        )
        .ok()?;
        let lease_fresh = n["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        lease_fresh.then_some(())
    });
    // A few syncs of the adopted pods.
    std::thread::sleep(std::time::Duration::from_secs(5));
    let after = wait_for(60, "2 web pods Ready after the restart", || all_ready(&c.s, 2));
    assert_eq!(after, before, "the pods were not adopted as they were");
    assert!(after.iter().all(|p| p.3 == 0));
    for (name, _, ip, _) in &after {
        assert!(curl_ok(ip), "{ip} does not answer after the restart");
        // The kubelet serves the adopted containers' logs too.
        assert!(c.s.kubectl(V, &["logs", name]).status.success());
    }

    // containerd dies (SIGKILL) under the running agent: the agent starts it again, the new
    // one takes the pods over from their shims, and nothing is restarted or recreated; the
    // Service answers throughout, a new pod starts, and exec and logs go through the new one.
    let pid_file = c.data.join("agent/containerd/containerd.pid");
    let old_pid = std::fs::read_to_string(&pid_file).unwrap().trim().to_string();
    assert!(Command::new("kill")
        .args(["-KILL", &old_pid])
        .status()
        .unwrap()
        .success());
    wait_for(30, "containerd started again", || {
        let pid = std::fs::read_to_string(&pid_file).ok()?.trim().to_string();
        (pid != old_pid && std::path::Path::new(&format!("/proc/{pid}")).exists()).then_some(())
    });
    c.s.ok(V, &["scale", "deployment", "web", "--replicas=3"]);
    let three = wait_for(90, "3 web pods Ready after containerd's restart", || {
        all_ready(&c.s, 3)
    });
    for p in &after {
        assert!(
            three.contains(p),
            "{p:?} changed by containerd's restart: {three:#?}"
        );
    }
    let (name, _, ip, _) = &after[0];
    c.s.ok(V, &["exec", name, "--", "nginx", "-v"]);
    // The container's output reaches its log again (containerd re-attached it).
    let marker = "/after-containerd-restart";
    wait_for(
        30,
        "a request after containerd's restart in the pod's log",
        || {
            let _ = Command::new("curl")
                .args(["-s", "-o", "/dev/null", "--max-time", "3", "--interface", &bridge])
                .arg(format!("http://{ip}{marker}"))
                .status();
            c.s.ok(V, &["logs", name]).contains(marker).then_some(())
        },
    );
    assert!(
        c.s.log().contains("containerd exited; starting it again"),
        "the agent did not say why containerd started again"
    );
    c.s.ok(V, &["scale", "deployment", "web", "--replicas=2"]);
    wait_for(60, "back to 2 web pods", || all_ready(&c.s, 2));
    asking.store(false, std::sync::atomic::Ordering::Relaxed);
    let (asked, failed) = poller.join().unwrap();
    assert!(asked > 20, "asked {asked} times");
    assert_eq!(
        failed, 0,
        "{failed} of {asked} requests to the Service failed across the restarts"
    );

    // Without the flag, a stop stops the pods: no container is left, nor the pod bridge.
    let plain: Vec<&str> = args
        .iter()
        .copied()
        .filter(|a| *a != "--keep-pods-on-exit")
        .collect();
    c.s.restart(&plain);
    wait_for(60, "the web pods serving again", || {
        after.iter().all(|(_, _, ip, _)| curl_ok(ip)).then_some(())
    });
    c.s.kill();
    // A clean stop without the flag removes the proxy's table.
    let table = Command::new("nft")
        .args(["list", "table", "ip", "r8s"])
        .output()
        .unwrap();
    assert!(
        !table.status.success(),
        "the proxy's table is left:\n{}",
        c.s.log()
    );
    let runc_root = c.data.join("agent/containerd/state/runc/k8s.io");
    let left = Command::new("runc")
        .arg("--root")
        .arg(&runc_root)
        .args(["list", "-q"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&left.stdout).trim().is_empty(),
        "containers left: {left:?}"
    );
    let link = Command::new("ip")
        .args(["link", "show", &bridge])
        .output()
        .unwrap();
    assert!(!link.status.success(), "{bridge} is still there");
}
