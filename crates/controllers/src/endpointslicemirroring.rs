//! The EndpointSlice mirroring controller (upstream `endpointslice-mirroring-controller`): a
//! Service without a selector takes its endpoints from an Endpoints object someone else
//! writes (an address outside the cluster, a database on another network), and everything
//! that reads EndpointSlices — the Service proxy, cluster DNS, newer kubectl — needs them as
//! slices too. Each subset of such an Endpoints becomes one slice per address family, labelled
//! as the Endpoints is plus `kubernetes.io/service-name` and this controller's `managed-by`,
//! with its annotations (but the trigger time and kubectl's last-applied configuration), owned
//! by the Endpoints; at most 1,000 endpoints a subset, as upstream's
//! `--mirroring-max-endpoints-per-subset`. Endpoints labelled
//! `endpointslice.kubernetes.io/skip-mirror: "true"` (the API server's own) are left alone, and
//! a Service that gains a selector loses its mirrored slices.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{EndpointAddress, Endpoints, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::endpointslice::{MANAGED_BY_LABEL, SERVICE_NAME_LABEL};
use crate::SyncResult;
use r8s_client::informer::{key_of, lookup, split_key, Change, Factory, Informer};
use r8s_client::queue::{run_controller, WorkQueue};

pub const MANAGED_BY: &str = "endpointslicemirroring-controller.k8s.io";
pub const SKIP_MIRROR_LABEL: &str = "endpointslice.kubernetes.io/skip-mirror";
/// Endpoints mirrored from one subset at most (upstream's default).
pub const MAX_ENDPOINTS_PER_SUBSET: usize = 1000;

const LAST_CHANGE_TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

pub struct MirroringController {
    client: Client,
    services: Arc<Informer<Service>>,
    endpoints: Arc<Informer<Endpoints>>,
    slices: Arc<Informer<EndpointSlice>>,
    service_store: Store<Service>,
    endpoints_store: Store<Endpoints>,
    slice_store: Store<EndpointSlice>,
    queue: Arc<WorkQueue>,
}

/// The Endpoints key a mirrored slice belongs to.
fn mirrored_key(slice: &EndpointSlice) -> Option<String> {
    let labels = slice.metadata.labels.as_ref()?;
    if labels.get(MANAGED_BY_LABEL).map(String::as_str) != Some(MANAGED_BY) {
        return None;
    }
    let svc = labels.get(SERVICE_NAME_LABEL)?;
    Some(format!("{}/{svc}", slice.namespace().unwrap_or_default()))
}

impl MirroringController {
    pub fn new(factory: &Factory) -> Arc<Self> {
        let services = factory.get::<Service>();
        let endpoints = factory.get::<Endpoints>();
        let slices = factory.get::<EndpointSlice>();
        let this = Arc::new(Self {
            client: factory.client(),
            service_store: services.store(),
            endpoints_store: endpoints.store(),
            slice_store: slices.store(),
            services,
            endpoints,
            slices,
            queue: WorkQueue::new("endpoint_slice_mirroring"),
        });
        let q = this.queue.clone();
        this.services.add_handler(move |c| match c {
            Change::Added(o) | Change::Updated(_, o) | Change::Deleted(o) => q.add(key_of(o.as_ref())),
        });
        let q = this.queue.clone();
        this.endpoints.add_handler(move |c| match c {
            Change::Added(o) | Change::Updated(_, o) | Change::Deleted(o) => q.add(key_of(o.as_ref())),
        });
        let q = this.queue.clone();
        this.slices.add_handler(move |c| match c {
            Change::Updated(_, s) | Change::Deleted(s) => {
                if let Some(k) = mirrored_key(s) {
                    q.add(k)
                }
            }
            Change::Added(_) => {}
        });
        this
    }

    pub async fn run(self: Arc<Self>, workers: usize, stop: CancellationToken) {
        let synced = vec![
            self.services.clone().synced(),
            self.endpoints.clone().synced(),
            self.slices.clone().synced(),
        ];
        let this = self.clone();
        run_controller(self.queue.clone(), synced, workers, stop, move |key| {
            let this = this.clone();
            async move { this.sync(&key).await }
        })
        .await;
    }

    async fn sync(&self, key: &str) -> SyncResult {
        let (ns, _) = split_key(key);
        let api: Api<EndpointSlice> = Api::namespaced(self.client.clone(), ns);
        let mut existing: Vec<Arc<EndpointSlice>> = self
            .slice_store
            .state()
            .into_iter()
            .filter(|s| mirrored_key(s).as_deref() == Some(key))
            .collect();
        existing.sort_by_key(|s| s.name_any());
        let svc = lookup(&self.service_store, key);
        let ep = lookup(&self.endpoints_store, key);
        let want = match (&svc, &ep) {
            (Some(svc), Some(ep)) if should_mirror(svc, ep) => mirror(ep),
            _ => Vec::new(),
        };
        let same = |a: &EndpointSlice, b: &EndpointSlice| {
            a.endpoints == b.endpoints
                && a.ports == b.ports
                && a.address_type == b.address_type
                && a.metadata.labels == b.metadata.labels
                && a.metadata.annotations == b.metadata.annotations
                && a.metadata.owner_references == b.metadata.owner_references
        };
        // Kept slices are matched by address family first (the family cannot change).
        let mut unused: Vec<Arc<EndpointSlice>> = existing;
        for slice in &want {
            let at = unused
                .iter()
                .position(|c| same(c, slice))
                .or_else(|| unused.iter().position(|c| c.address_type == slice.address_type));
            match at.map(|i| unused.remove(i)) {
                Some(cur) if same(&cur, slice) => {}
                Some(cur) => {
                    let mut next = (*cur).clone();
                    next.endpoints = slice.endpoints.clone();
                    next.ports = slice.ports.clone();
                    next.metadata.labels = slice.metadata.labels.clone();
                    next.metadata.annotations = slice.metadata.annotations.clone();
                    next.metadata.owner_references = slice.metadata.owner_references.clone();
                    match api.replace(&cur.name_any(), &crate::post_params(), &next).await {
                        Ok(_) => {}
                        Err(e) if r8s_client::is_not_found(&e) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                None => match api.create(&crate::post_params(), slice).await {
                    Ok(_) => {}
                    // The namespace is going: nothing to keep.
                    Err(kube::Error::Api(s)) if s.code == 403 || s.code == 404 => {}
                    Err(e) => return Err(e.into()),
                },
            }
        }
        for surplus in unused {
            match api.delete(&surplus.name_any(), &Default::default()).await {
                Ok(_) => {}
                Err(e) if r8s_client::is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(None)
    }
}

/// Upstream's rule: the Service exists without a selector, and the Endpoints does not ask to
/// be skipped.
fn should_mirror(svc: &Service, ep: &Endpoints) -> bool {
    let selector = svc.spec.as_ref().and_then(|s| s.selector.as_ref());
    let skip = ep
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(SKIP_MIRROR_LABEL))
        .is_some_and(|v| v == "true");
    selector.is_none() && !skip
}

/// The slices mirroring `ep`: one per subset and address family (names to be generated).
pub fn mirror(ep: &Endpoints) -> Vec<EndpointSlice> {
    let name = ep.name_any();
    let mut labels: BTreeMap<String, String> = ep.metadata.labels.clone().unwrap_or_default();
    labels.insert(SERVICE_NAME_LABEL.into(), name.clone());
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY.into());
    let annotations: BTreeMap<String, String> = ep
        .metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| *k != LAST_CHANGE_TRIGGER_TIME && *k != LAST_APPLIED)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let owner = OwnerReference {
        api_version: "v1".into(),
        kind: "Endpoints".into(),
        name: name.clone(),
        uid: ep.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let mut out = Vec::new();
    for subset in ep.subsets.iter().flatten() {
        let ports: Vec<EndpointPort> = subset
            .ports
            .iter()
            .flatten()
            .map(|p| EndpointPort {
                name: Some(p.name.clone().unwrap_or_default()),
                port: Some(p.port),
                protocol: Some(p.protocol.clone().unwrap_or_else(|| "TCP".into())),
                app_protocol: p.app_protocol.clone(),
            })
            .collect();
        let ready = subset.addresses.iter().flatten().map(|a| (a, true));
        let not_ready = subset.not_ready_addresses.iter().flatten().map(|a| (a, false));
        let mut by_family: BTreeMap<&str, Vec<Endpoint>> = BTreeMap::new();
        for (addr, ready) in ready.chain(not_ready).take(MAX_ENDPOINTS_PER_SUBSET) {
            let family = match addr.ip.parse::<IpAddr>() {
                Ok(IpAddr::V4(_)) => "IPv4",
                Ok(IpAddr::V6(_)) => "IPv6",
                Err(_) => continue,
            };
            by_family.entry(family).or_default().push(endpoint(addr, ready));
        }
        for (family, endpoints) in by_family {
            out.push(EndpointSlice {
                metadata: ObjectMeta {
                    generate_name: Some(prefix(&name)),
                    namespace: ep.metadata.namespace.clone(),
                    labels: Some(labels.clone()),
                    annotations: (!annotations.is_empty()).then(|| annotations.clone()),
                    owner_references: Some(vec![owner.clone()]),
                    ..Default::default()
                },
                address_type: family.into(),
                endpoints,
                ports: Some(ports.clone()),
            });
        }
    }
    out
}

/// Upstream's `addressToEndpoint`.
fn endpoint(addr: &EndpointAddress, ready: bool) -> Endpoint {
    Endpoint {
        addresses: vec![addr.ip.clone()],
        conditions: Some(EndpointConditions {
            ready: Some(ready),
            ..Default::default()
        }),
        hostname: addr.hostname.clone().filter(|h| !h.is_empty()),
        node_name: addr.node_name.clone(),
        target_ref: addr.target_ref.clone(),
        ..Default::default()
    }
}

/// The generated-name prefix: the name and a dash, the name cut so a generated suffix fits.
fn prefix(name: &str) -> String {
    let cut: String = name.chars().take(63 - 6).collect();
    format!("{cut}-")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn endpoints(v: serde_json::Value) -> Endpoints {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_subset_becomes_a_slice_per_family_with_the_endpoints_labels_and_owner() {
        let ep = endpoints(json!({
            "metadata": {"name": "db", "namespace": "prod", "uid": "u-1",
                "labels": {"app": "db"},
                "annotations": {"team": "data", LAST_APPLIED: "{}", LAST_CHANGE_TRIGGER_TIME: "2026-01-01T00:00:00Z"}},
            "subsets": [{
                "addresses": [{"ip": "192.0.2.10", "hostname": "db-0", "nodeName": "n1"}, {"ip": "2001:db8::1"}],
                "notReadyAddresses": [{"ip": "192.0.2.11"}, {"ip": "not-an-ip"}],
                "ports": [{"name": "pg", "port": 5432}]
            }]
        }));
        let slices = mirror(&ep);
        assert_eq!(slices.len(), 2);
        let v4 = serde_json::to_value(&slices[0]).unwrap();
        assert_eq!(
            v4,
            json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"generateName": "db-", "namespace": "prod",
                    "labels": {"app": "db", "kubernetes.io/service-name": "db",
                        "endpointslice.kubernetes.io/managed-by": "endpointslicemirroring-controller.k8s.io"},
                    "annotations": {"team": "data"},
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Endpoints", "name": "db", "uid": "u-1",
                        "controller": true, "blockOwnerDeletion": true}]},
                "addressType": "IPv4",
                "endpoints": [
                    {"addresses": ["192.0.2.10"], "conditions": {"ready": true}, "hostname": "db-0", "nodeName": "n1"},
                    {"addresses": ["192.0.2.11"], "conditions": {"ready": false}}
                ],
                "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}]
            })
        );
        assert_eq!(slices[1].address_type, "IPv6");
        assert_eq!(slices[1].endpoints[0].addresses, ["2001:db8::1"]);
    }

    #[test]
    fn only_selectorless_services_are_mirrored_and_never_skipped_endpoints() {
        let svc: Service =
            serde_json::from_value(json!({"metadata": {"name": "db"}, "spec": {"ports": [{"port": 1}]}}))
                .unwrap();
        let ep = endpoints(json!({"metadata": {"name": "db"}}));
        assert!(should_mirror(&svc, &ep));
        let skip = endpoints(json!({"metadata": {"name": "db", "labels": {SKIP_MIRROR_LABEL: "true"}}}));
        assert!(!should_mirror(&svc, &skip));
        let selected: Service =
            serde_json::from_value(json!({"metadata": {"name": "db"}, "spec": {"selector": {"app": "db"}}}))
                .unwrap();
        assert!(!should_mirror(&selected, &ep));
    }

    #[test]
    fn a_subset_is_cut_at_a_thousand() {
        let addrs: Vec<_> = (0..1200)
            .map(|i| json!({"ip": format!("10.1.{}.{}", i / 250, i % 250)}))
            .collect();
        let ep = endpoints(
            json!({"metadata": {"name": "big"}, "subsets": [{"addresses": addrs, "ports": [{"port": 80}]}]}),
        );
        assert_eq!(mirror(&ep)[0].endpoints.len(), MAX_ENDPOINTS_PER_SUBSET);
    }
}
