//! Fault tests on one server: a workload of writes runs while the server is cut off (SIGKILL,
//! as a power cut) and stopped (SIGTERM), and a watcher resumes from its last resourceVersion
//! as clients do. Invariants afterwards: no acknowledged write lost, every one seen by the
//! watcher exactly once, events in order, nothing repeated, and the state the watcher built
//! equal to a fresh list.

use crate::support;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use r8s_store::etcd_process::EtcdCluster;
use support::Server;

const STEPS: usize = 90;

async fn client(kubeconfig: &std::path::Path) -> Client {
    let kubeconfig = Kubeconfig::read_from(kubeconfig).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    // A request cut off by the power cut fails instead of waiting for an answer that never comes.
    config.read_timeout = Some(Duration::from_secs(10));
    Client::try_from(config).unwrap()
}

fn rv(cm: &ConfigMap) -> i64 {
    cm.metadata.resource_version.as_deref().unwrap().parse().unwrap()
}

/// A write the server acknowledged: its verb, object name and (for creates and patches) the
/// resourceVersion it answered with.
#[derive(Debug, Clone)]
struct Acked {
    verb: &'static str,
    name: String,
    rv: Option<i64>,
}

/// One watch event as received: type, name, resourceVersion.
type Seen = (&'static str, String, i64);

/// Do `op` until the server answers it; `done` tells whether an error means it already
/// happened (a create retried after its answer was lost is 409, a delete 404). `None` when the
/// write happened but its answer was lost.
async fn until_answered<F, Fut>(
    what: &str,
    mut op: F,
    done: impl Fn(&kube::Error) -> bool,
) -> Option<ConfigMap>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<ConfigMap, kube::Error>>,
{
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut tried = false;
    loop {
        match op().await {
            Ok(cm) => return Some(cm),
            Err(e) if tried && done(&e) => return None,
            Err(e) => {
                assert!(Instant::now() < deadline, "{what}: no answer in 120 s: {e}");
                if let kube::Error::Api(status) = &e {
                    // Refusals other than "come back later" are failures of the test.
                    assert!(status.code >= 500 || status.code == 429, "{what}: {status:?}");
                }
                tried = true;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// The workload: for each step, create `cm-i`, patch it, and delete `cm-(i-3)`; every answer
/// recorded. `progress` counts steps done.
async fn write(kubeconfig: std::path::PathBuf, progress: Arc<AtomicUsize>) -> Vec<Acked> {
    let api: Api<ConfigMap> = Api::namespaced(client(&kubeconfig).await, "default");
    let mut acked = Vec::new();
    let conflict = |code: u16| move |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == code);
    for i in 0..STEPS {
        let name = format!("cm-{i}");
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name}, "data": {"step": i.to_string()}
        }))
        .unwrap();
        let post = PostParams::default();
        let created = until_answered(
            &format!("create {name}"),
            || api.create(&post, &cm),
            conflict(409),
        )
        .await;
        acked.push(Acked {
            verb: "create",
            name: name.clone(),
            rv: created.as_ref().map(rv),
        });
        let patch = Patch::Merge(serde_json::json!({"data": {"patched": "yes"}}));
        // A merge patch applied twice changes nothing the second time: it is answered again.
        let params = PatchParams::default();
        let patched = until_answered(
            &format!("patch {name}"),
            || api.patch(&name, &params, &patch),
            |_| false,
        )
        .await;
        acked.push(Acked {
            verb: "patch",
            name: name.clone(),
            rv: patched.as_ref().map(rv),
        });
        if i >= 3 {
            let old = format!("cm-{}", i - 3);
            until_answered(
                &format!("delete {old}"),
                || async {
                    api.delete(&old, &DeleteParams::default())
                        .await
                        .map(|r| r.left().unwrap_or_default())
                },
                conflict(404),
            )
            .await;
            acked.push(Acked {
                verb: "delete",
                name: old,
                rv: None,
            });
        }
        progress.store(i + 1, Ordering::SeqCst);
    }
    acked
}

/// The watcher: watch from `from`, and whenever the stream ends or fails, watch again from
/// the last resourceVersion seen (an event's or a bookmark's), as informers do. Each watch
/// lasts 5 s; the first that starts after `stop` is set is the last.
async fn watch(
    kubeconfig: std::path::PathBuf,
    from: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
) -> Vec<String> {
    let api: Api<ConfigMap> = Api::namespaced(client(&kubeconfig).await, "default");
    let mut last = from;
    let mut problems = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let last_round = stop.load(Ordering::SeqCst);
        if Instant::now() > deadline {
            problems.push(format!("still watching after 300 s, from {last}"));
            return problems;
        }
        let stream = match api.watch(&WatchParams::default().timeout(5), &last).await {
            Ok(s) => s,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            let (kind, cm) = match item {
                Ok(WatchEvent::Added(cm)) => ("ADDED", cm),
                Ok(WatchEvent::Modified(cm)) => ("MODIFIED", cm),
                Ok(WatchEvent::Deleted(cm)) => ("DELETED", cm),
                Ok(WatchEvent::Bookmark(b)) => {
                    last = b.metadata.resource_version;
                    continue;
                }
                Ok(WatchEvent::Error(e)) => {
                    // A resume refused (410 Expired) would lose events: the test's failure.
                    problems.push(format!("watch from {last}: {e:?}"));
                    break;
                }
                Err(_) => break,
            };
            last = rv(&cm).to_string();
            seen.lock()
                .unwrap()
                .push((kind, cm.metadata.name.clone().unwrap(), rv(&cm)));
        }
        if last_round {
            return problems;
        }
    }
}

#[test]
fn a_watch_resumed_across_a_power_cut_and_a_restart_sees_every_acknowledged_write_once() {
    writes_and_a_watch_through_a_power_cut_and_a_restart(&["--disable-agent"]);
}

#[test]
fn the_same_on_etcd() {
    let cluster = EtcdCluster::start(1).expect("start etcd (CI installs Debian's etcd-server)");
    let endpoints = cluster.endpoints();
    writes_and_a_watch_through_a_power_cut_and_a_restart(&[
        "--disable-agent",
        "--datastore-endpoint",
        &endpoints,
    ]);
}

fn writes_and_a_watch_through_a_power_cut_and_a_restart(flags: &[&str]) {
    let mut s = Server::start_raw(flags);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let kubeconfig = s.kubeconfig.clone();
    let start = runtime.block_on(async {
        let api: Api<ConfigMap> = Api::namespaced(client(&kubeconfig).await, "default");
        api.list(&ListParams::default())
            .await
            .unwrap()
            .metadata
            .resource_version
            .unwrap()
    });

    let seen = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = runtime.spawn(watch(kubeconfig.clone(), start, seen.clone(), stop.clone()));
    let progress = Arc::new(AtomicUsize::new(0));
    let writer = runtime.spawn(write(kubeconfig.clone(), progress.clone()));

    let wait_for_step = |s: &Server, step: usize| {
        let deadline = Instant::now() + Duration::from_secs(120);
        while progress.load(Ordering::SeqCst) < step {
            assert!(
                Instant::now() < deadline,
                "the writer is stuck before step {step}:\n{}",
                s.log()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    // A power cut in the middle of the writes, and a while later an operator's restart.
    wait_for_step(&s, STEPS / 3);
    s.sigkill();
    std::thread::sleep(Duration::from_millis(500));
    s.restart(flags);
    wait_for_step(&s, 2 * STEPS / 3);
    s.restart(flags);

    let acked = runtime.block_on(writer).unwrap();
    let truth: BTreeMap<String, i64> = runtime.block_on(async {
        let api: Api<ConfigMap> = Api::namespaced(client(&kubeconfig).await, "default");
        let list = api.list(&ListParams::default()).await.unwrap();
        list.items
            .iter()
            .filter(|cm| cm.metadata.name.as_deref().unwrap().starts_with("cm-"))
            .map(|cm| (cm.metadata.name.clone().unwrap(), rv(cm)))
            .collect()
    });
    // Every write is in: the watcher's next watch is its last.
    stop.store(true, Ordering::SeqCst);
    let problems = runtime.block_on(watcher).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    let seen = seen.lock().unwrap().clone();
    eprintln!(
        "{} writes acknowledged ({} of them after their first answer was lost), {} events seen",
        acked.len(),
        acked
            .iter()
            .filter(|a| a.rv.is_none() && a.verb != "delete")
            .count(),
        seen.len()
    );

    // In order, nothing repeated.
    for pair in seen.windows(2) {
        assert!(pair[0].2 < pair[1].2, "events out of order or repeated: {pair:?}");
    }
    // Every acknowledged create and patch seen exactly once at its resourceVersion.
    let at: HashMap<i64, &Seen> = seen.iter().map(|e| (e.2, e)).collect();
    for a in &acked {
        if let Some(rv) = a.rv {
            let e = at
                .get(&rv)
                .unwrap_or_else(|| panic!("{a:?} never seen by the watcher"));
            let kind = if a.verb == "create" { "ADDED" } else { "MODIFIED" };
            assert_eq!((e.0, e.1.as_str()), (kind, a.name.as_str()), "{a:?}");
        }
    }
    // Per object: one ADDED first, at most one DELETED last; deleted names are gone.
    let mut state: BTreeMap<String, i64> = BTreeMap::new();
    let mut added: HashMap<&str, usize> = HashMap::new();
    let mut deleted: HashMap<&str, usize> = HashMap::new();
    for (kind, name, rv) in seen.iter().filter(|e| e.1.starts_with("cm-")) {
        match *kind {
            "ADDED" => {
                *added.entry(name).or_default() += 1;
                assert!(state.insert(name.clone(), *rv).is_none(), "{name} added twice");
            }
            "MODIFIED" => {
                assert!(
                    state.insert(name.clone(), *rv).is_some(),
                    "{name} modified before added"
                );
            }
            _ => {
                *deleted.entry(name).or_default() += 1;
                assert!(state.remove(name).is_some(), "{name} deleted before added");
            }
        }
    }
    for a in &acked {
        let count = if a.verb == "delete" { &deleted } else { &added };
        assert_eq!(count.get(a.name.as_str()), Some(&1), "{a:?}: {seen:?}");
    }
    // What the watcher built is what the server holds: names and resourceVersions.
    assert_eq!(state, truth);
    assert_eq!(truth.len(), 3, "{truth:?}");
}
