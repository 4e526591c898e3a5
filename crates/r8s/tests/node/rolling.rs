//! A rolling upgrade of an HA cluster (`multi-node.sh up 4 --servers 3`): every server stopped
//! (SIGTERM) and started again on its data, one after the other, while a client behind the
//! agents' own load balancer (`r8s_client::lb`, in front of all three servers) writes and
//! watches. No write fails beyond the client's retries (each succeeds within 5 s of its first
//! try), every acknowledged write is there at the end, the watch (resumed from its last
//! resourceVersion whenever its server goes, bookmarks on) sees each write exactly once and
//! in order, and the agent's node stays Ready with its pods untouched. Then the agent crashes
//! (its r8s, then its containerd, SIGKILLed alone) and a Service answers throughout.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::Client;
use serde_json::Value;

use crate::multinode::{live_leader, Harness};
use crate::support::cluster::{wait_for, ONE_AGENT};

/// What the writer saw: the names it made, in order, and how hard it was.
#[derive(Default, Debug)]
struct Writes {
    names: Vec<String>,
    /// Tries that failed (each retried after 100 ms).
    failed_tries: usize,
    /// Writes whose retry found the object made (an earlier try's answer was lost).
    already_made: usize,
    /// The longest time from a write's first try to its success.
    longest: Duration,
    /// The writes that took over a second: when each began (from the writer's start), and
    /// how long it took.
    slow: Vec<(Duration, Duration)>,
}

/// Create ConfigMaps `rolling-N` one after another until `stop`, retrying each until it is
/// made (at most 30 s).
async fn writer(client: Client, stop: Arc<AtomicBool>) -> Writes {
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut w = Writes::default();
    let start = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let name = format!("rolling-{}", w.names.len());
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"rolling": "yes"}}
        }))
        .unwrap();
        let began = Instant::now();
        loop {
            let tried =
                tokio::time::timeout(Duration::from_secs(5), cms.create(&PostParams::default(), &cm)).await;
            match tried {
                Ok(Ok(_)) => break,
                Ok(Err(kube::Error::Api(s))) if s.code == 409 && w.failed_tries > 0 => {
                    w.already_made += 1;
                    break;
                }
                other => {
                    w.failed_tries += 1;
                    assert!(
                        began.elapsed() < Duration::from_secs(30),
                        "{name} not made 30 s after its first try: {other:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        w.longest = w.longest.max(began.elapsed());
        if began.elapsed() > Duration::from_secs(1) {
            w.slow.push((began - start, began.elapsed()));
        }
        w.names.push(name);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    w
}

/// Watch the ConfigMaps labelled `rolling` from `rv`, resuming from the last resourceVersion
/// seen (an object's or a bookmark's) whenever the stream ends or fails, until `stop`. The
/// names added, in the order seen, and how many times the watch was resumed.
async fn watcher(
    client: Client,
    mut rv: String,
    seen: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
) -> usize {
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let params = WatchParams {
        bookmarks: true,
        ..WatchParams::default().labels("rolling=yes").timeout(60)
    };
    let mut resumed = 0;
    while !stop.load(Ordering::Relaxed) {
        let stream = match cms.watch(&params, &rv).await {
            Ok(s) => s,
            Err(e) => {
                if let kube::Error::Api(s) = &e {
                    assert_ne!(s.code, 410, "the watch from {rv} expired: {s:?}");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                resumed += 1;
                continue;
            }
        };
        let mut stream = std::pin::pin!(stream);
        loop {
            let next = tokio::select! {
                n = stream.next() => n,
                _ = tokio::time::sleep(Duration::from_millis(200)) => {
                    if stop.load(Ordering::Relaxed) { break } else { continue }
                }
            };
            match next {
                Some(Ok(WatchEvent::Added(cm))) => {
                    rv = cm.metadata.resource_version.clone().unwrap();
                    seen.lock().unwrap().push(cm.metadata.name.unwrap());
                }
                Some(Ok(WatchEvent::Modified(cm) | WatchEvent::Deleted(cm))) => {
                    panic!("no ConfigMap is changed or deleted here: {:?}", cm.metadata.name)
                }
                Some(Ok(WatchEvent::Bookmark(b))) => rv = b.metadata.resource_version,
                Some(Ok(WatchEvent::Error(e))) => {
                    assert_ne!(e.code, 410, "the watch from {rv} expired: {e:?}");
                    break;
                }
                Some(Err(_)) | None => break,
            }
        }
        resumed += 1;
    }
    resumed
}

/// (uid, container ID, restart count) of every pod on node4, the agent.
fn agent_pods(h: &Harness) -> Vec<(String, String, i64)> {
    let l = h.json(&["get", "pods", "-A", "--field-selector", "spec.nodeName=node4"]);
    let mut v: Vec<_> = l["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p: &Value| {
            let c = &p["status"]["containerStatuses"][0];
            (
                p["metadata"]["uid"].as_str().unwrap_or("").to_owned(),
                c["containerID"].as_str().unwrap_or("").to_owned(),
                c["restartCount"].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    v.sort();
    v
}

/// node4's Ready condition.
fn node4_ready(h: &Harness) -> Value {
    let node4 = h.json(&["get", "node", "node4"]);
    node4["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()
        .clone()
}

/// A busybox pod `name` that sleeps on `node`.
fn sleeper(h: &Harness, name: &str, node: &str) {
    h.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  nodeName: {node}\n  terminationGracePeriodSeconds: 1\n  containers:\n  - {{name: c, image: busybox, command: [sleep, \"3600\"]}}\n"
    ));
}

#[test]
fn servers_restarted_in_turn_and_a_crashed_agent_fail_no_request() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let mut h = Harness::up_servers(4, 3, "", "");
    h.ok(&["create", "deployment", "web", "--image=nginx", "--replicas=4"]);
    wait_for(120, "4 web pods Running, one on the agent", || {
        let l = h.json(&["get", "pods", "-l", "app=web"]);
        let items = l["items"].as_array().unwrap();
        let running = items.iter().filter(|p| p["status"]["phase"] == "Running").count();
        (running == 4 && items.iter().any(|p| p["spec"]["nodeName"] == "node4")).then_some(())
    });
    let on_agent = agent_pods(&h);
    let servers: Vec<String> = h
        .ok(&[
            "get",
            "endpoints",
            "kubernetes",
            "-o",
            "jsonpath={.subsets[0].addresses[*].ip}",
        ])
        .split_whitespace()
        .map(|ip| format!("{ip}:6443"))
        .collect();
    assert_eq!(servers.len(), 3, "{servers:?}");

    let rt = tokio::runtime::Runtime::new().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stop_watch = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (lb, client) = rt.block_on(async {
        let lb = r8s_client::lb::LoadBalancer::start(
            0,
            servers.clone(),
            tokio_util::sync::CancellationToken::new(),
        )
        .await
        .unwrap();
        let kubeconfig = kube::config::Kubeconfig::read_from(h.dir.join("node1/kubeconfig.yaml")).unwrap();
        let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        config.cluster_url = format!("https://127.0.0.1:{}", lb.local.port()).parse().unwrap();
        (lb, Client::try_from(config).unwrap())
    });
    let start_rv = rt.block_on(async {
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        cms.list(&ListParams::default().labels("rolling=yes"))
            .await
            .unwrap()
            .metadata
            .resource_version
            .unwrap()
    });
    let write = rt.spawn(writer(client.clone(), stop.clone()));
    let watch = rt.spawn(watcher(
        client.clone(),
        start_rv,
        seen.clone(),
        stop_watch.clone(),
    ));

    // The rolling upgrade: each server stopped, started again, and serving before the next.
    std::thread::sleep(Duration::from_secs(2));
    let began = Instant::now();
    eprintln!(
        "the restarts begin {:?} after the writer",
        began.elapsed() + Duration::from_secs(2)
    );
    for i in 1..=3 {
        let node = format!("node{i}");
        let in_use = lb.servers()[0].clone();
        h.kubeconfig = h
            .dir
            .join(format!("node{}/kubeconfig.yaml", i % 3 + 1))
            .display()
            .to_string();
        h.node_command("stop", &node);
        h.node_command("start", &node);
        eprintln!(
            "{node} restarted (the client was using {in_use}); {:?} since the first stop",
            began.elapsed()
        );
        // Its controllers may lead again; wait for a live leader before the next goes.
        live_leader(&h);
        std::thread::sleep(Duration::from_secs(2));
    }
    stop.store(true, Ordering::Relaxed);
    let writes = rt.block_on(write).unwrap();
    eprintln!(
        "{} writes; {} tries failed and were retried; {} found made on retry; the longest took {:?}; over 1 s (began, took): {:?}",
        writes.names.len(),
        writes.failed_tries,
        writes.already_made,
        writes.longest,
        writes.slow
    );
    assert!(
        writes.longest <= Duration::from_secs(5),
        "a write took {:?} from its first try to its success",
        writes.longest
    );
    // The watch catches up with every write, then stops.
    wait_for(30, "the watch seeing every write", || {
        (seen.lock().unwrap().len() >= writes.names.len()).then_some(())
    });
    stop_watch.store(true, Ordering::Relaxed);
    let resumed = rt.block_on(watch).unwrap();
    let seen = seen.lock().unwrap().clone();
    eprintln!("the watch resumed {resumed} times");
    assert_eq!(
        seen, writes.names,
        "the watch's ADDED events against the writes made"
    );

    // Every acknowledged write is there, through any server.
    let listed = h.json(&["get", "configmaps", "-l", "rolling=yes"]);
    let mut names: Vec<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["metadata"]["name"].as_str())
        .collect();
    names.sort();
    let mut want: Vec<&str> = writes.names.iter().map(String::as_str).collect();
    want.sort();
    assert_eq!(names, want);
    // The agent's node never went NotReady, and its pods ran on untouched.
    let ready = node4_ready(&h);
    assert_eq!(ready["status"], "True", "{ready}");
    let since = jiff::Timestamp::now() - jiff::SignedDuration::try_from(began.elapsed()).unwrap();
    let changed: jiff::Timestamp = ready["lastTransitionTime"].as_str().unwrap().parse().unwrap();
    assert!(
        changed < since,
        "node4's Ready changed during the restarts: {ready}"
    );
    assert_eq!(agent_pods(&h), on_agent);

    agent_crashes(&mut h, &on_agent);
}

/// The agent crashes: SIGKILL of its r8s alone (`multi-node.sh crash`; its containerd dies
/// with it, its pods' shims and containers run on) and its init starts it again; then its
/// containerd alone is killed, and the agent starts it again. A pod on node1 asks the web
/// Service every 200 ms throughout and every answer comes; afterwards node4 never went
/// NotReady, its pods are the same containers, never restarted, exec reaches them through
/// the new containerd, and a new pod starts there.
fn agent_crashes(h: &mut Harness, on_agent: &[(String, String, i64)]) {
    h.ok(&["expose", "deployment", "web", "--port=80"]);
    let ip = h.ok(&["get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}"]);
    sleeper(h, "asker", "node1");
    // The asker's loop: until /tmp/stop exists (at most 600 questions), one line per
    // answer's first line, FAIL for none.
    let ask = format!(
        "i=0; while [ ! -f /tmp/stop ] && [ $i -lt 600 ]; do i=$((i+1)); \
         r=$(printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 {ip} 80 | head -1); \
         echo \"${{r:-FAIL}}\"; sleep 0.2; done"
    );
    wait_for(90, "the Service answering the asker", || {
        let out = h.kubectl(&[
            "exec",
            "asker",
            "--",
            "sh",
            "-c",
            &format!("printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 {ip} 80 | head -1"),
        ]);
        String::from_utf8_lossy(&out.stdout).contains("200").then_some(())
    });
    let began = jiff::Timestamp::now();
    let h: &Harness = h;
    let answers = std::thread::scope(|s| {
        let asking = s.spawn(|| h.kubectl(&["exec", "asker", "--", "sh", "-c", &ask]));
        std::thread::sleep(Duration::from_secs(2));
        let crashed = Instant::now();
        h.node_command("crash", "node4");
        eprintln!("node4's r8s crashed and Ready again in {:?}", crashed.elapsed());
        wait_for(60, "node4's pods as they were after its crash", || {
            (agent_pods(h) == on_agent).then_some(())
        });
        h.node_command_with("crash", "node4", &["containerd"]);
        // Exec reaches node4's web pod through the new containerd.
        let web = h.json(&[
            "get",
            "pods",
            "-l",
            "app=web",
            "--field-selector",
            "spec.nodeName=node4",
        ]);
        let web = web["items"][0]["metadata"]["name"].as_str().unwrap().to_owned();
        wait_for(60, "exec in node4's web pod after containerd's crash", || {
            h.kubectl(&["exec", &web, "--", "nginx", "-v"])
                .status
                .success()
                .then_some(())
        });
        std::thread::sleep(Duration::from_secs(2));
        h.ok(&["exec", "asker", "--", "touch", "/tmp/stop"]);
        asking.join().unwrap()
    });
    let answers = String::from_utf8_lossy(&answers.stdout).into_owned();
    let lines: Vec<&str> = answers.lines().collect();
    let failed = lines.iter().filter(|l| !l.contains("200 OK")).count();
    eprintln!(
        "the Service answered {} of {} questions",
        lines.len() - failed,
        lines.len()
    );
    assert!(lines.len() > 20, "{answers}");
    assert_eq!(failed, 0, "the web Service failed to answer:\n{answers}");
    assert_eq!(agent_pods(h), on_agent, "node4's pods changed");
    let ready = node4_ready(h);
    let changed: jiff::Timestamp = ready["lastTransitionTime"].as_str().unwrap().parse().unwrap();
    assert!(
        ready["status"] == "True" && changed < began,
        "node4's Ready changed through the crashes: {ready}"
    );
    sleeper(h, "after-crashes", "node4");
    wait_for(60, "a new pod Running on node4 after the crashes", || {
        (h.json(&["get", "pod", "after-crashes"])["status"]["phase"] == "Running").then_some(())
    });
}
