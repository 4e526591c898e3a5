//! Running the proxy on a node: the guard first (the fixed chains, so the Service range never
//! leaves the node, and a blackhole route under the cluster CIDR so pod addresses no node
//! holds are not sent out the default route), then Services and EndpointSlices followed by
//! informers, a full sync once both are listed and an incremental one for every change; on a
//! clean stop the table and the route go.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::jiff::Timestamp;
use r8s_client::informer::{key_of, Change, Factory};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::health::HealthServers;
use super::metrics::ProxyMetrics;
use super::model::{health_check, service_rules, ProxyConfig, ServiceRules};
use super::table::Proxier;

use crate::dns::zone::SERVICE_NAME_LABEL;

#[derive(Default)]
struct State {
    services: HashMap<String, Arc<Service>>,
    /// Service key → slice name → slice.
    slices: HashMap<String, BTreeMap<String, Arc<EndpointSlice>>>,
    dirty: HashSet<String>,
    /// Service key → the trigger time of the newest endpoint change not yet programmed.
    triggers: HashMap<String, Timestamp>,
}

/// The annotation the endpoint controllers put the time of the change they write on.
const LAST_CHANGE_TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";

fn trigger_time(s: &EndpointSlice) -> Option<Timestamp> {
    s.metadata
        .annotations
        .as_ref()?
        .get(LAST_CHANGE_TRIGGER_TIME)?
        .parse()
        .ok()
}

impl State {
    fn rules(&self, cfg: &ProxyConfig, key: &str) -> ServiceRules {
        let Some(svc) = self.services.get(key) else {
            return ServiceRules::default();
        };
        let slices: Vec<&EndpointSlice> = self
            .slices
            .get(key)
            .map(|m| m.values().map(|s| s.as_ref()).collect())
            .unwrap_or_default();
        service_rules(cfg, svc, &slices)
    }

    fn health(&self, cfg: &ProxyConfig, key: &str) -> Option<(u16, usize)> {
        let svc = self.services.get(key)?;
        let slices: Vec<&EndpointSlice> = self
            .slices
            .get(key)
            .map(|m| m.values().map(|s| s.as_ref()).collect())
            .unwrap_or_default();
        health_check(cfg, svc, &slices)
    }
}

fn slice_service(s: &EndpointSlice) -> Option<String> {
    let ns = s.metadata.namespace.as_deref()?;
    let svc = s.metadata.labels.as_ref()?.get(SERVICE_NAME_LABEL)?;
    Some(format!("{ns}/{svc}"))
}

/// Run the proxy until `stop`: one table per family of the Service ranges (`ip` and, on a
/// dual-stack cluster, `ip6`), as kube-proxy runs a proxier per family. An error is why it
/// could not start (no nf_tables, no rights).
pub async fn run(
    client: kube::Client,
    cfg: ProxyConfig,
    metrics: Arc<ProxyMetrics>,
    stop: CancellationToken,
) -> Result<(), String> {
    let families = cfg.families();
    if families.is_empty() {
        return Err("no Service range: the Service proxy does not run".into());
    }
    let mut proxiers = Vec::new();
    for family in families {
        let mut proxier =
            Proxier::new(cfg.for_family(family)).map_err(|e| format!("opening nf_tables: {e}"))?;
        proxier.guard().map_err(|e| {
            format!(
                "nf_tables is not usable here for {} ({e}): the Service proxy does not run",
                family.name()
            )
        })?;
        proxiers.push(proxier);
    }
    let mut blackholes = Vec::new();
    for net in &cfg.cluster_cidrs {
        match route::add_blackhole(*net).await {
            // Already there: an earlier run's, left for this one (`keep_on_exit`).
            Ok(_) => blackholes.push(*net),
            Err(e) => tracing::warn!(error = %e, "proxy: no blackhole route for the cluster CIDR"),
        }
    }
    tracing::info!(table = %cfg.table, families = proxiers.len(), "proxy: guard installed for the Service range");

    let state = Arc::new(Mutex::new(State::default()));
    let wake = Arc::new(Notify::new());
    let factory = Factory::new(client, None);
    let services = factory.get::<Service>();
    let slices = factory.get::<EndpointSlice>();
    {
        let (state, wake) = (state.clone(), wake.clone());
        services.add_handler(move |change| {
            let mut st = state.lock().unwrap();
            match change {
                Change::Added(o) | Change::Updated(_, o) => {
                    let key = key_of(o.as_ref());
                    st.services.insert(key.clone(), o.clone());
                    st.dirty.insert(key);
                }
                Change::Deleted(o) => {
                    let key = key_of(o.as_ref());
                    st.services.remove(&key);
                    st.dirty.insert(key);
                }
            }
            wake.notify_one();
        });
    }
    {
        let (state, wake) = (state.clone(), wake.clone());
        slices.add_handler(move |change| {
            let mut st = state.lock().unwrap();
            let (old, new, gone) = match change {
                Change::Added(o) => (None, Some(o), false),
                Change::Updated(old, o) => (Some(old), Some(o), false),
                Change::Deleted(o) => (None, Some(o), true),
            };
            if let Some(old) = old.and_then(|o| slice_service(o).map(|k| (k, o))) {
                let name = old.1.metadata.name.clone().unwrap_or_default();
                if let Some(m) = st.slices.get_mut(&old.0) {
                    m.remove(&name);
                }
                st.dirty.insert(old.0);
            }
            if let Some((key, o)) = new.and_then(|o| slice_service(o).map(|k| (k, o))) {
                let name = o.metadata.name.clone().unwrap_or_default();
                let m = st.slices.entry(key.clone()).or_default();
                if gone {
                    m.remove(&name);
                    if m.is_empty() {
                        st.slices.remove(&key);
                    }
                } else {
                    m.insert(name, o.clone());
                    if let Some(t) = trigger_time(o) {
                        let newest = st.triggers.get(&key).map_or(t, |old| (*old).max(t));
                        st.triggers.insert(key.clone(), newest);
                    }
                }
                st.dirty.insert(key);
            }
            wake.notify_one();
        });
    }
    let tasks = factory.start(&stop);
    tokio::select! {
        _ = async { services.wait_synced().await; slices.wait_synced().await; } => {}
        _ = stop.cancelled() => {}
    }

    let mut need_full = true;
    let mut health = HealthServers::new(std::net::Ipv4Addr::UNSPECIFIED.into());
    while !stop.is_cancelled() {
        if need_full {
            let all: Vec<Vec<(String, ServiceRules)>> = {
                let mut st = state.lock().unwrap();
                st.dirty.clear();
                for k in st.services.keys() {
                    health.set(k, st.health(&cfg, k));
                }
                proxiers
                    .iter()
                    .map(|p| {
                        st.services
                            .keys()
                            .map(|k| (k.clone(), st.rules(p.config(), k)))
                            .collect()
                    })
                    .collect()
            };
            let started = Instant::now();
            let result = proxiers.iter_mut().zip(all).try_fold((0, 0), |(m, b), (p, all)| {
                p.full_sync(all).map(|s| (m + s.messages, b + s.bytes))
            });
            match result {
                Ok((messages, bytes)) => {
                    need_full = false;
                    health.set_healthy(true);
                    let took = started.elapsed().as_secs_f64();
                    metrics.sync.observe(took);
                    metrics.full_sync.observe(took);
                    synced(&proxiers, &metrics);
                    state.lock().unwrap().triggers.clear();
                    tracing::info!(services = proxiers[0].services(), messages, bytes,
                        took = ?started.elapsed(), "proxy: full sync");
                }
                Err(e) => {
                    metrics.failures.inc();
                    health.set_healthy(false);
                    tracing::error!(error = %e, "proxy: full sync failed; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        _ = stop.cancelled() => {}
                    }
                    continue;
                }
            }
        }
        let stale_due = proxiers.iter().filter_map(Proxier::next_stale_due).min();
        let wait_stale = async {
            match stale_due {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => futures::future::pending().await,
            }
        };
        tokio::select! {
            _ = wake.notified() => {}
            _ = wait_stale => {}
            _ = stop.cancelled() => break,
        }
        // The Services this sync programs, for the journey's `proxy.sync` stage (`r8s trace`):
        // key, uid and how many endpoints.
        let mut told: Vec<(String, String, usize)> = Vec::new();
        let (changes, triggers): (Vec<Vec<(String, ServiceRules)>>, Vec<Timestamp>) = {
            let mut st = state.lock().unwrap();
            let dirty: Vec<String> = st.dirty.drain().collect();
            for k in &dirty {
                if let Some(uid) = st.services.get(k).and_then(|s| s.metadata.uid.clone()) {
                    let endpoints = st
                        .slices
                        .get(k)
                        .map_or(0, |m| m.values().map(|s| s.endpoints.len()).sum());
                    told.push((k.clone(), uid, endpoints));
                }
            }
            let triggers = dirty.iter().filter_map(|k| st.triggers.remove(k)).collect();
            for k in &dirty {
                health.set(k, st.health(&cfg, k));
            }
            let changes = proxiers
                .iter()
                .map(|p| {
                    dirty
                        .iter()
                        .map(|k| (k.clone(), st.rules(p.config(), k)))
                        .collect()
                })
                .collect();
            (changes, triggers)
        };
        let started = Instant::now();
        let started_at = std::time::SystemTime::now();
        let result = proxiers
            .iter_mut()
            .zip(changes)
            .try_fold(0, |m, (p, changes)| p.sync(changes).map(|s| m + s.messages));
        match result {
            Ok(messages) => {
                health.set_healthy(true);
                let took = started.elapsed().as_secs_f64();
                metrics.sync.observe(took);
                metrics.partial_sync.observe(took);
                synced(&proxiers, &metrics);
                for (key, uid, endpoints) in told {
                    r8s_trace::keep_stage(
                        "proxy",
                        "proxy.sync",
                        &uid,
                        started_at,
                        started.elapsed(),
                        vec![
                            ("object", format!("Service {key}")),
                            ("node", cfg.node_name.clone()),
                            ("decision", format!("programmed {endpoints} endpoints")),
                        ],
                    );
                }
                let now = Timestamp::now();
                for t in triggers {
                    // From the change the endpoint controller wrote to the rules being live.
                    if let Ok(d) = std::time::Duration::try_from(now.duration_since(t)) {
                        metrics.programming.observe(d.as_secs_f64());
                    }
                }
                tracing::debug!(messages, took = ?started.elapsed(), "proxy: sync");
            }
            Err(e) => {
                metrics.failures.inc();
                health.set_healthy(false);
                tracing::error!(error = %e, "proxy: sync failed; re-syncing the whole table");
                need_full = true;
            }
        }
    }
    for t in tasks {
        t.abort();
    }
    health.stop();
    if cfg.keep_on_exit {
        // The pods stay: their Services keep routing until the next start's full sync.
        tracing::info!("proxy: leaving the table in place for the next start");
        return Ok(());
    }
    for proxier in &mut proxiers {
        if let Err(e) = proxier.remove() {
            tracing::warn!(error = %e, "proxy: could not remove its table");
        }
    }
    for net in blackholes {
        if let Err(e) = route::del_blackhole(net).await {
            tracing::warn!(error = %e, "proxy: could not remove the cluster CIDR's blackhole route");
        }
    }
    Ok(())
}

/// The gauges after a successful sync (chains and elements of every family's table).
fn synced(proxiers: &[Proxier], metrics: &ProxyMetrics) {
    let (chains, elements) = proxiers.iter().fold((0, 0), |(c, e), p| {
        let (pc, pe) = p.counts();
        (c + pc, e + pe)
    });
    metrics
        .services
        .set(proxiers.iter().map(Proxier::services).max().unwrap_or(0) as i64);
    metrics.chains.set(chains as i64);
    metrics.elements.set(elements as i64);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    metrics.last_sync.set(now.as_secs_f64());
}

/// The blackhole route under the cluster CIDR: the routes to pods (this node's bridge, other
/// nodes' subnets) are more specific, so only addresses no node holds fall into it.
pub mod route {
    use super::*;
    use rtnetlink::packet_route::route::{RouteMessage, RouteType};
    use rtnetlink::RouteMessageBuilder;

    fn message(net: (IpAddr, u8)) -> RouteMessage {
        match net.0 {
            IpAddr::V4(a) => RouteMessageBuilder::<Ipv4Addr>::new()
                .destination_prefix(a, net.1)
                .kind(RouteType::BlackHole)
                .build(),
            IpAddr::V6(a) => RouteMessageBuilder::<Ipv6Addr>::new()
                .destination_prefix(a, net.1)
                .kind(RouteType::BlackHole)
                .build(),
        }
    }

    /// Add it; false when it was already there (someone else's, or an earlier run's).
    pub async fn add_blackhole(net: (IpAddr, u8)) -> Result<bool, String> {
        let (connection, handle, _) = rtnetlink::new_connection().map_err(|e| format!("netlink: {e}"))?;
        tokio::spawn(connection);
        match handle.route().add(message(net)).execute().await {
            Ok(()) => Ok(true),
            Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code() == -libc::EEXIST => Ok(false),
            Err(e) => Err(format!("adding blackhole {}/{}: {e}", net.0, net.1)),
        }
    }

    pub async fn del_blackhole(net: (IpAddr, u8)) -> Result<(), String> {
        let (connection, handle, _) = rtnetlink::new_connection().map_err(|e| format!("netlink: {e}"))?;
        tokio::spawn(connection);
        handle
            .route()
            .del(message(net))
            .execute()
            .await
            .map_err(|e| format!("removing blackhole {}/{}: {e}", net.0, net.1))
    }
}
