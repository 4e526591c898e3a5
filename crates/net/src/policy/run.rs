//! Running network policy on a node: NetworkPolicies, Pods and Namespaces followed by
//! informers; every change recomputes the program and writes the table in one transaction.
//! The agent tells the engine about a new pod's address before its containers start
//! ([`PolicyHandle::pod_started`] returns once the table covers it), so a pod never runs a
//! moment unpoliced.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use r8s_client::informer::{key_of, Change, Factory};
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use super::model::{assemble, compile, Compiled, PodInfo, Program};
use super::table;
use crate::nft::Conn;

#[derive(Clone, Debug)]
pub struct PolicyConfig {
    pub table: String,
    pub node_name: String,
}

impl PolicyConfig {
    pub fn new(node_name: &str) -> Self {
        PolicyConfig {
            table: "r8s-policy".into(),
            node_name: node_name.to_owned(),
        }
    }
}

#[derive(Default)]
struct State {
    policies: BTreeMap<String, Arc<NetworkPolicy>>,
    pods: HashMap<String, Arc<Pod>>,
    /// Pods the agent announced before the API shows their address: key → (pod, address).
    announced: HashMap<String, (Arc<Pod>, Ipv4Addr)>,
    namespaces: HashMap<String, BTreeMap<String, String>>,
    /// Bumped by every change.
    generation: u64,
    /// Pods or namespaces changed since the last compile: every policy is compiled again.
    world_changed: bool,
    /// Policies changed since the last compile (only they are compiled again otherwise).
    dirty: std::collections::HashSet<String>,
}

struct Shared {
    state: Mutex<State>,
    wake: Notify,
    /// The generation the table has been written for.
    applied: watch::Sender<u64>,
    /// The engine is not running (could not start, or stopped): nothing to wait for.
    off: std::sync::atomic::AtomicBool,
}

/// The agent's side of the engine.
#[derive(Clone)]
pub struct PolicyHandle(Arc<Shared>);

impl PolicyHandle {
    /// A pod of this node has address `ip` and its containers are about to start: returns
    /// once the table reflects it (or after 10 s, with a warning — the engine is not running).
    pub async fn pod_started(&self, pod: &Pod, ip: &str) {
        let Ok(ip) = ip.parse::<Ipv4Addr>() else { return };
        if self.0.off.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let gen = {
            let mut st = self.0.state.lock().unwrap();
            st.announced.insert(key_of(pod), (Arc::new(pod.clone()), ip));
            st.world_changed = true;
            st.generation += 1;
            st.generation
        };
        self.0.wake.notify_one();
        let mut rx = self.0.applied.subscribe();
        let waited = tokio::time::timeout(Duration::from_secs(10), rx.wait_for(|g| *g >= gen)).await;
        if waited.is_err() {
            tracing::warn!(pod = %key_of(pod), "network policy: the pod starts before its policy is known");
        }
    }

    /// Returns once the table holds a program computed from the whole API state (the
    /// informers synced).
    pub async fn programmed(&self) {
        let mut rx = self.0.applied.subscribe();
        let _ = rx.wait_for(|g| *g > 0).await;
    }
}

pub fn handle() -> PolicyHandle {
    PolicyHandle(Arc::new(Shared {
        state: Mutex::new(State::default()),
        wake: Notify::new(),
        applied: watch::channel(0).0,
        off: std::sync::atomic::AtomicBool::new(false),
    }))
}

fn bump(shared: &Shared, f: impl FnOnce(&mut State)) {
    let mut st = shared.state.lock().unwrap();
    f(&mut st);
    st.generation += 1;
    drop(st);
    shared.wake.notify_one();
}

/// Run until `stop`; `client` reads NetworkPolicies, Pods and Namespaces. An error is why it
/// could not start (no nf_tables).
pub async fn run(
    client: kube::Client,
    cfg: PolicyConfig,
    handle: PolicyHandle,
    stop: CancellationToken,
) -> Result<(), String> {
    let shared = handle.0.clone();
    let result = serve(client, cfg, shared.clone(), stop).await;
    shared.off.store(true, std::sync::atomic::Ordering::Relaxed);
    result
}

async fn serve(
    client: kube::Client,
    cfg: PolicyConfig,
    shared: Arc<Shared>,
    stop: CancellationToken,
) -> Result<(), String> {
    let conn = Conn::new().map_err(|e| format!("opening nf_tables: {e}"))?;
    // nf_tables must take the (empty) table before the engine says it runs.
    table::apply(&conn, &cfg.table, &Default::default())
        .map_err(|e| format!("nf_tables is not usable here ({e}): network policy is not enforced"))?;
    let factory = Factory::new(client, None);
    let policies = factory.get::<NetworkPolicy>();
    let pods = factory.get::<Pod>();
    let namespaces = factory.get::<Namespace>();
    {
        let sh = shared.clone();
        policies.add_handler(move |c| {
            bump(&sh, |st| match c {
                Change::Added(o) | Change::Updated(_, o) => {
                    st.policies.insert(key_of(o.as_ref()), o.clone());
                    st.dirty.insert(key_of(o.as_ref()));
                }
                Change::Deleted(o) => {
                    st.policies.remove(&key_of(o.as_ref()));
                    st.dirty.insert(key_of(o.as_ref()));
                }
            })
        });
    }
    {
        let sh = shared.clone();
        let node = cfg.node_name.clone();
        pods.add_handler(move |c| {
            bump(&sh, |st| {
                // Only what policies see of a pod matters (address, labels, ports, node):
                // a status change that alters none of it compiles nothing again.
                st.world_changed |= match &c {
                    Change::Updated(old, new) => {
                        let seen = |p: &Pod| PodInfo::from_pod(p, &node, None);
                        seen(old) != seen(new)
                    }
                    _ => true,
                };
                match c {
                    Change::Added(o) | Change::Updated(_, o) => {
                        let key = key_of(o.as_ref());
                        // The API's own address supersedes the announcement.
                        if o.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some() {
                            st.announced.remove(&key);
                        }
                        st.pods.insert(key, o.clone());
                    }
                    Change::Deleted(o) => {
                        let key = key_of(o.as_ref());
                        st.pods.remove(&key);
                        st.announced.remove(&key);
                    }
                }
            })
        });
    }
    {
        let sh = shared.clone();
        namespaces.add_handler(move |c| {
            bump(&sh, |st| {
                st.world_changed = true;
                match c {
                    Change::Added(o) | Change::Updated(_, o) => {
                        let name = o.metadata.name.clone().unwrap_or_default();
                        st.namespaces
                            .insert(name, o.metadata.labels.clone().unwrap_or_default());
                    }
                    Change::Deleted(o) => {
                        st.namespaces.remove(o.metadata.name.as_deref().unwrap_or(""));
                    }
                }
            })
        });
    }
    let tasks = factory.start(&stop);
    tokio::select! {
        _ = futures::future::join3(policies.wait_synced(), pods.wait_synced(), namespaces.wait_synced()) => {}
        _ = stop.cancelled() => {
            tasks.iter().for_each(|t| t.abort());
            return Ok(());
        }
    }
    tracing::info!(table = %cfg.table, "network policy: following policies, pods and namespaces");
    // Each policy compiled, by key (the assembly's order); the program in force.
    let mut compiled: BTreeMap<String, Compiled> = BTreeMap::new();
    let mut in_force: Option<Program> = None;
    loop {
        let t = Instant::now();
        let gen = {
            let mut st = shared.state.lock().unwrap();
            let everything = std::mem::take(&mut st.world_changed) || in_force.is_none();
            let dirty = std::mem::take(&mut st.dirty);
            let mut infos: Vec<PodInfo> = Vec::new();
            if everything || !dirty.is_empty() {
                infos = st
                    .pods
                    .values()
                    .filter(|p| !st.announced.contains_key(&key_of(p.as_ref())))
                    .filter_map(|p| PodInfo::from_pod(p, &cfg.node_name, None))
                    .collect();
                infos.extend(
                    st.announced
                        .values()
                        .filter_map(|(p, ip)| PodInfo::from_pod(p, &cfg.node_name, Some(*ip))),
                );
            }
            if everything {
                compiled = st
                    .policies
                    .iter()
                    .map(|(k, p)| (k.clone(), compile(p, &infos, &st.namespaces)))
                    .collect();
            } else {
                for key in dirty {
                    match st.policies.get(&key) {
                        Some(p) => {
                            compiled.insert(key, compile(p, &infos, &st.namespaces));
                        }
                        None => {
                            compiled.remove(&key);
                        }
                    }
                }
            }
            st.generation
        };
        let prog = assemble(compiled.values());
        let (batch, full) = match &in_force {
            Some(old) if *old == prog => (None, false),
            Some(old) => (Some(table::update(&cfg.table, old, &prog)), false),
            None => (Some(table::batch(&cfg.table, &prog)), true),
        };
        match batch.map(|b| conn.apply(b)).unwrap_or(Ok(())) {
            Ok(()) => {
                tracing::debug!(chains = prog.chains.len(), sets = prog.sets.len(), full, took = ?t.elapsed(), "network policy: in force");
                in_force = Some(prog);
                shared.applied.send_replace(gen);
            }
            Err(e) => {
                // The next sync writes the whole table again.
                tracing::error!(error = %e, "network policy: writing the table failed");
                in_force = None;
                shared.state.lock().unwrap().world_changed = true;
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = stop.cancelled() => break,
                }
                continue;
            }
        }
        let pending = shared.state.lock().unwrap().generation != gen;
        if !pending {
            tokio::select! {
                _ = shared.wake.notified() => {}
                _ = stop.cancelled() => break,
            }
        }
        if stop.is_cancelled() {
            break;
        }
    }
    tasks.iter().for_each(|t| t.abort());
    if let Err(e) = table::remove(&conn, &cfg.table) {
        tracing::warn!(error = %e, "network policy: could not remove the table");
    }
    Ok(())
}
