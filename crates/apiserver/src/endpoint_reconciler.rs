//! The `kubernetes` Service's endpoints with several API servers (upstream's `lease` endpoint
//! reconciler, `pkg/controlplane/reconcilers/lease.go`): each server keeps a lease under
//! `/masterleases/<ip>` in the datastore and renews it every `INTERVAL`; each renewal also
//! writes the Endpoints and EndpointSlice `default/kubernetes` with the addresses of every
//! unexpired lease. A server that stops cleanly deletes its lease and rewrites the endpoints
//! without itself; one that dies drops out once its lease is `TTL` old.
//!
//! Upstream's leases are etcd keys with a TTL; the embedded datastore has none, so a lease here
//! holds its renewal time and is expired by whoever reads it. Servers' clocks must agree to
//! within a few seconds (as upstream's Lease objects need too).

use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use r8s_store::{RangeRequest, Store, StoreError};
use serde_json::{json, Value};

const PREFIX: &str = "/masterleases/";
/// How often a server renews its lease and reconciles (upstream's --endpoint-reconciler
/// interval, 10 s).
pub const INTERVAL: Duration = Duration::from_secs(10);
/// How long an unrenewed lease counts (upstream's master lease TTL, 15 s).
pub const TTL: Duration = Duration::from_secs(15);

fn millis(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn key(ip: IpAddr) -> String {
    format!("{PREFIX}{ip}")
}

/// Write (or renew) `ip`'s lease at `now`.
async fn renew(store: &dyn Store, ip: IpAddr, port: u16, now: SystemTime) -> Result<(), StoreError> {
    let value =
        bytes::Bytes::from(json!({"ip": ip.to_string(), "port": port, "renewTime": millis(now)}).to_string());
    let key = key(ip);
    for _ in 0..3 {
        let result = match store.get(&key, 0).await?.kv {
            Some(kv) => store.update(&key, value.clone(), kv.mod_revision).await,
            None => store.create(&key, value.clone()).await,
        };
        match result {
            Ok(_) => return Ok(()),
            // Someone else wrote it meanwhile (the same server restarted): read it again.
            Err(StoreError::Conflict { .. } | StoreError::AlreadyExists { .. }) => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The addresses of the leases unexpired at `now`, of `ip`'s family, `ip` included.
async fn live(store: &dyn Store, ip: IpAddr, now: SystemTime) -> Result<Vec<IpAddr>, StoreError> {
    let listed = store
        .range(RangeRequest {
            prefix: PREFIX.into(),
            ..Default::default()
        })
        .await?;
    let now = millis(now);
    let mut ips: Vec<IpAddr> = listed
        .kvs
        .iter()
        .filter_map(|kv| serde_json::from_slice::<Value>(&kv.value).ok())
        .filter(|l| {
            l["renewTime"]
                .as_i64()
                .is_some_and(|t| now - t < TTL.as_millis() as i64)
        })
        .filter_map(|l| l["ip"].as_str()?.parse::<IpAddr>().ok())
        .filter(|a| a.is_ipv4() == ip.is_ipv4())
        .collect();
    ips.push(ip);
    ips.sort();
    ips.dedup();
    Ok(ips)
}

/// One round: renew `ip`'s lease and write the endpoints of every live server.
pub(crate) async fn reconcile(
    store: &dyn Store,
    ip: IpAddr,
    port: u16,
    now: SystemTime,
) -> Result<Vec<IpAddr>, StoreError> {
    renew(store, ip, port, now).await?;
    let ips = live(store, ip, now).await?;
    crate::bootstrap::ensure_kubernetes_endpoints(store, &ips, port).await?;
    Ok(ips)
}

/// A clean stop: `ip`'s lease goes, and the endpoints list the others (none left: left as
/// they are, as upstream leaves the last server's).
pub(crate) async fn remove(store: &dyn Store, ip: IpAddr, port: u16) -> Result<(), StoreError> {
    match store.delete(&key(ip), None).await {
        Ok(_) | Err(StoreError::NotFound { .. }) => {}
        Err(e) => return Err(e),
    }
    let mut ips = live(store, ip, SystemTime::now()).await?;
    ips.retain(|a| *a != ip);
    if !ips.is_empty() {
        crate::bootstrap::ensure_kubernetes_endpoints(store, &ips, port).await?;
    }
    Ok(())
}

/// Reconcile every `INTERVAL` until the task is dropped; a datastore error is logged and the
/// next round tries again (the server never stops for it).
pub(crate) async fn run(store: std::sync::Arc<dyn Store>, ip: IpAddr, port: u16) {
    let mut tick = tokio::time::interval(INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = reconcile(store.as_ref(), ip, port, SystemTime::now()).await {
            tracing::warn!(error = %e, "could not reconcile the kubernetes Service's endpoints");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    async fn endpoints(store: &dyn Store) -> Vec<String> {
        let def = crate::registry::catalogue::builtin("", "v1", "endpoints").unwrap();
        let kv = store
            .get(&crate::registry::key(def, "default", "kubernetes"), 0)
            .await
            .unwrap()
            .kv
            .unwrap();
        let v: Value = serde_json::from_slice(&kv.value).unwrap();
        v["subsets"][0]["addresses"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["ip"].as_str().unwrap().to_string())
            .collect()
    }

    #[tokio::test]
    async fn the_endpoints_list_every_server_whose_lease_is_live() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            r8s_store::embedded::EmbeddedStore::open(r8s_store::embedded::EmbeddedOptions::new(dir.path()))
                .unwrap();
        let t0 = SystemTime::now();
        let (a, b, c) = (ip("192.0.2.1"), ip("192.0.2.2"), ip("192.0.2.3"));
        reconcile(&store, a, 6443, t0).await.unwrap();
        assert_eq!(endpoints(&store).await, ["192.0.2.1"]);
        reconcile(&store, b, 6443, t0).await.unwrap();
        reconcile(&store, c, 6443, t0 + Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(endpoints(&store).await, ["192.0.2.1", "192.0.2.2", "192.0.2.3"]);
        // a and c renew; b's lease runs out: the next round drops it.
        let later = t0 + TTL + Duration::from_secs(1);
        reconcile(&store, a, 6443, later).await.unwrap();
        reconcile(&store, c, 6443, later).await.unwrap();
        assert_eq!(endpoints(&store).await, ["192.0.2.1", "192.0.2.3"]);
        // b comes back.
        let ips = reconcile(&store, b, 6443, later).await.unwrap();
        assert_eq!(ips, [a, b, c]);
        // c stops cleanly: gone at once.
        remove(&store, c, 6443).await.unwrap();
        assert_eq!(endpoints(&store).await, ["192.0.2.1", "192.0.2.2"]);
        // Another family's leases are not counted.
        renew(&store, ip("2001:db8::1"), 6443, later).await.unwrap();
        assert_eq!(reconcile(&store, a, 6443, later).await.unwrap(), [a, b]);
    }
}
