//! The EndpointSlice controller (upstream `endpointslice-controller`): the discovery.k8s.io/v1
//! view of the same endpoints, which newer clients read (kubectl 1.31 and later describe a
//! Service's endpoints from its slices). Every Service with a selector has slices labelled
//! `kubernetes.io/service-name` and owned by the Service: the selected pods with an IP, each
//! with its ready, serving and terminating conditions, grouped by the ports they resolve to,
//! at most 100 to a slice; a Service selecting none keeps one empty placeholder slice.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ObjectReference, Pod, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::endpoints::{
    create_with_trigger, follow_services, ready, selected_pods, set_trigger_time, target_port, TriggerTimes,
    HEADLESS_LABEL,
};
use crate::SyncResult;
use r8s_client::informer::{lookup, split_key, Change, Factory, Informer};
use r8s_client::queue::{run_controller, WorkQueue};

pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "endpointslice-controller.k8s.io";
/// Endpoints in one slice at most (upstream's `--max-endpoints-per-slice` default).
pub const MAX_ENDPOINTS: usize = 100;

pub struct EndpointSliceController {
    client: Client,
    services: Arc<Informer<Service>>,
    pods: Arc<Informer<Pod>>,
    slices: Arc<Informer<EndpointSlice>>,
    service_store: Store<Service>,
    pod_store: Store<Pod>,
    slice_store: Store<EndpointSlice>,
    queue: Arc<WorkQueue>,
    triggers: TriggerTimes,
}

/// The Service key a slice of ours belongs to.
fn service_key(slice: &EndpointSlice) -> Option<String> {
    let labels = slice.metadata.labels.as_ref()?;
    if labels.get(MANAGED_BY_LABEL).map(String::as_str) != Some(MANAGED_BY) {
        return None;
    }
    let svc = labels.get(SERVICE_NAME_LABEL)?;
    Some(format!("{}/{svc}", slice.namespace().unwrap_or_default()))
}

impl EndpointSliceController {
    pub fn new(factory: &Factory) -> Arc<Self> {
        let services = factory.get::<Service>();
        let pods = factory.get::<Pod>();
        let slices = factory.get::<EndpointSlice>();
        let this = Arc::new(Self {
            client: factory.client(),
            service_store: services.store(),
            pod_store: pods.store(),
            slice_store: slices.store(),
            services,
            pods,
            slices,
            queue: WorkQueue::new("endpoint_slice"),
            triggers: TriggerTimes::default(),
        });
        follow_services(&this.services, &this.pods, &this.queue);
        let q = this.queue.clone();
        this.slices.add_handler(move |c| match c {
            Change::Updated(_, s) | Change::Deleted(s) => {
                if let Some(k) = service_key(s) {
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
            self.pods.clone().synced(),
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
            .filter(|s| service_key(s).as_deref() == Some(key))
            .collect();
        existing.sort_by_key(|s| s.name_any());
        let svc = lookup(&self.service_store, key).filter(|svc| {
            let spec = svc.spec.as_ref();
            spec.is_some_and(|s| s.selector.is_some() && s.type_.as_deref() != Some("ExternalName"))
        });
        let (want, trigger, seen) = match &svc {
            Some(svc) => {
                let pods = selected_pods(svc, &self.pod_store);
                let (trigger, seen) = self.triggers.compute(key, svc, &pods);
                (slices_for(svc, &pods), trigger, Some(seen))
            }
            None => {
                self.triggers.forget(key);
                (Vec::new(), None, None)
            }
        };
        let same = |a: &EndpointSlice, b: &EndpointSlice| {
            a.endpoints == b.endpoints
                && a.ports == b.ports
                && a.metadata.labels == b.metadata.labels
                && a.metadata.owner_references == b.metadata.owner_references
        };
        // Each wanted slice takes an existing one of its address type (immutable), in name
        // order; what is left over goes.
        let mut unused = existing;
        for slice in &want {
            let cur = unused
                .iter()
                .position(|c| c.address_type == slice.address_type)
                .map(|i| unused.remove(i));
            match cur {
                Some(cur) if same(&cur, slice) => {}
                Some(cur) => {
                    let mut next = (*cur).clone();
                    next.endpoints = slice.endpoints.clone();
                    next.ports = slice.ports.clone();
                    next.metadata.labels = slice.metadata.labels.clone();
                    next.metadata.owner_references = slice.metadata.owner_references.clone();
                    set_trigger_time(&mut next.metadata, trigger);
                    match api.replace(&cur.name_any(), &crate::post_params(), &next).await {
                        Ok(_) => {}
                        Err(e) if r8s_client::is_not_found(&e) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                None => match create_with_trigger(&api, slice, trigger).await {
                    Ok(_) => {}
                    // The namespace is going: nothing to keep.
                    Err(kube::Error::Api(s)) if s.code == 403 || s.code == 404 => {}
                    Err(e) => return Err(e.into()),
                },
            }
        }
        for surplus in &unused {
            match api.delete(&surplus.name_any(), &Default::default()).await {
                Ok(_) => {}
                Err(e) if r8s_client::is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if let Some(seen) = seen {
            self.triggers.commit(key, seen);
        }
        Ok(None)
    }
}

/// The address types a Service's slices have (upstream's `getAddressTypesForService`): its
/// IP families; for a Service from before families were set, its cluster IP's, or both for a
/// headless one.
pub fn address_types(svc: &Service) -> Vec<&'static str> {
    let spec = svc.spec.as_ref();
    let mut out = Vec::new();
    for family in spec.and_then(|s| s.ip_families.as_ref()).into_iter().flatten() {
        let t = match family.as_str() {
            "IPv4" => "IPv4",
            "IPv6" => "IPv6",
            _ => continue,
        };
        if !out.contains(&t) {
            out.push(t);
        }
    }
    if !out.is_empty() {
        return out;
    }
    match spec.and_then(|s| s.cluster_ip.as_deref()) {
        Some(ip) if !ip.is_empty() && ip != "None" => vec![family_of(ip)],
        _ => vec!["IPv4", "IPv6"],
    }
}

pub(crate) fn family_of(ip: &str) -> &'static str {
    if ip.contains(':') {
        "IPv6"
    } else {
        "IPv4"
    }
}

/// The pod's address of `address_type` (from status.podIPs, or podIP for older kubelets).
pub(crate) fn pod_address(pod: &Pod, address_type: &str) -> Option<String> {
    let status = pod.status.as_ref()?;
    status
        .pod_ips
        .iter()
        .flatten()
        .map(|p| p.ip.clone())
        .chain(status.pod_ip.clone())
        .find(|ip| !ip.is_empty() && family_of(ip) == address_type)
}

/// The slices `svc` should have for the pods it selects (names to be generated): per address
/// type, the pods' addresses of that family grouped by the ports they resolve to, 100 to a
/// slice, or one empty placeholder.
pub fn slices_for(svc: &Service, pods: &[Arc<Pod>]) -> Vec<EndpointSlice> {
    let spec = svc.spec.clone().unwrap_or_default();
    let publish_not_ready = spec.publish_not_ready_addresses == Some(true);
    let mut sorted: Vec<&Arc<Pod>> = pods.iter().collect();
    sorted.sort_by_key(|p| p.name_any());
    let mut labels = svc.metadata.labels.clone().unwrap_or_default();
    labels.insert(SERVICE_NAME_LABEL.into(), svc.name_any());
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY.into());
    if spec.cluster_ip.as_deref() == Some("None") {
        labels.insert(HEADLESS_LABEL.into(), String::new());
    }
    let slice =
        |address_type: &str, ports: Option<Vec<EndpointPort>>, endpoints: Vec<Endpoint>| EndpointSlice {
            metadata: ObjectMeta {
                generate_name: Some(format!("{}-", svc.name_any())),
                namespace: svc.namespace(),
                labels: Some(labels.clone()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Service".into(),
                    name: svc.name_any(),
                    uid: svc.uid().unwrap_or_default(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]),
                ..Default::default()
            },
            address_type: address_type.into(),
            endpoints,
            ports,
        };
    let mut out = Vec::new();
    for address_type in address_types(svc) {
        let mut groups: BTreeMap<Vec<(String, i32, String)>, Vec<Endpoint>> = BTreeMap::new();
        for pod in &sorted {
            let Some(ip) = pod_address(pod, address_type) else {
                continue;
            };
            let status = pod.status.clone().unwrap_or_default();
            if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
                continue;
            }
            let terminating = pod.metadata.deletion_timestamp.is_some();
            let serving = publish_not_ready || ready(pod);
            let ports = spec
                .ports
                .iter()
                .flatten()
                .filter_map(|p| {
                    let target = target_port(p, pod)?;
                    Some((
                        p.name.clone().unwrap_or_default(),
                        target,
                        p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                    ))
                })
                .collect();
            groups.entry(ports).or_default().push(Endpoint {
                addresses: vec![ip],
                hostname: crate::endpoints::endpoint_hostname(svc, pod),
                conditions: Some(EndpointConditions {
                    ready: Some(serving && !terminating),
                    serving: Some(serving),
                    terminating: Some(terminating),
                }),
                node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
                target_ref: Some(ObjectReference {
                    kind: Some("Pod".into()),
                    namespace: pod.namespace(),
                    name: Some(pod.name_any()),
                    uid: pod.uid(),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        let before = out.len();
        for (ports, endpoints) in groups {
            let ports: Vec<EndpointPort> = ports
                .into_iter()
                .map(|(name, port, protocol)| EndpointPort {
                    name: Some(name),
                    port: Some(port),
                    protocol: Some(protocol),
                    ..Default::default()
                })
                .collect();
            for chunk in endpoints.chunks(MAX_ENDPOINTS) {
                out.push(slice(address_type, Some(ports.clone()), chunk.to_vec()));
            }
        }
        if out.len() == before {
            // The placeholder: no endpoints, no ports.
            out.push(slice(address_type, None, Vec::new()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, ip: &str, ready: bool, deleting: bool) -> Arc<Pod> {
        let mut meta = serde_json::json!({"name": name, "namespace": "default", "uid": format!("uid-{name}"), "labels": {"app": "web"}});
        if deleting {
            meta["deletionTimestamp"] = serde_json::json!("2026-11-25T10:00:00Z");
        }
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": meta,
                "spec": {"nodeName": "n1", "containers": [{"name": "c", "ports": [{"name": "http", "containerPort": 8080}]}]},
                "status": {"podIP": ip, "phase": "Running",
                           "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
            }))
            .unwrap(),
        )
    }

    fn service() -> Service {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "svc-uid", "labels": {"tier": "front"}},
            "spec": {"selector": {"app": "web"}, "ports": [{"name": "web", "port": 80, "targetPort": "http", "protocol": "TCP"}],
                     "clusterIP": "10.43.0.9", "clusterIPs": ["10.43.0.9"], "ipFamilies": ["IPv4"]},
        }))
        .unwrap()
    }

    #[test]
    fn a_dual_stack_service_has_slices_per_family() {
        let mut svc = service();
        let spec = svc.spec.as_mut().unwrap();
        spec.ip_families = Some(vec!["IPv6".into(), "IPv4".into()]);
        let mut dual = (*pod("a", "10.0.0.1", true, false)).clone();
        dual.status.as_mut().unwrap().pod_ips = Some(vec![
            k8s_openapi::api::core::v1::PodIP {
                ip: "10.0.0.1".into(),
            },
            k8s_openapi::api::core::v1::PodIP { ip: "fd42::1".into() },
        ]);
        let pods = vec![Arc::new(dual), pod("b", "10.0.0.2", true, false)];
        let slices = slices_for(&svc, &pods);
        let got: Vec<(String, Vec<String>)> = slices
            .iter()
            .map(|s| {
                (
                    s.address_type.clone(),
                    s.endpoints.iter().map(|e| e.addresses[0].clone()).collect(),
                )
            })
            .collect();
        // b has no IPv6 address: only its IPv4 one is an endpoint.
        assert_eq!(
            got,
            [
                ("IPv6".to_string(), vec!["fd42::1".to_string()]),
                (
                    "IPv4".to_string(),
                    vec!["10.0.0.1".to_string(), "10.0.0.2".to_string()]
                ),
            ]
        );
        // No pods: a placeholder per family; a headless Service from before families: both.
        assert_eq!(slices_for(&svc, &[]).len(), 2);
        let mut old = service();
        let spec = old.spec.as_mut().unwrap();
        spec.ip_families = None;
        spec.cluster_ip = Some("None".into());
        assert_eq!(address_types(&old), ["IPv4", "IPv6"]);
        old.spec.as_mut().unwrap().cluster_ip = Some("fd43::9".into());
        assert_eq!(address_types(&old), ["IPv6"]);
    }

    #[test]
    fn pods_become_endpoints_with_their_conditions() {
        let pods = vec![
            pod("b", "10.0.0.2", false, false),
            pod("a", "10.0.0.1", true, false),
            pod("c", "10.0.0.3", true, true),
        ];
        let slices = slices_for(&service(), &pods);
        assert_eq!(slices.len(), 1);
        let s = serde_json::to_value(&slices[0]).unwrap();
        assert_eq!(s["metadata"]["generateName"], "web-");
        assert_eq!(
            s["metadata"]["labels"],
            serde_json::json!({"tier": "front", "kubernetes.io/service-name": "web",
                "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"})
        );
        assert_eq!(s["metadata"]["ownerReferences"][0]["uid"], "svc-uid");
        assert_eq!(s["addressType"], "IPv4");
        assert_eq!(
            s["ports"],
            serde_json::json!([{"name": "web", "port": 8080, "protocol": "TCP"}])
        );
        let conditions: Vec<(String, serde_json::Value)> = s["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["addresses"][0].as_str().unwrap().to_string(),
                    e["conditions"].clone(),
                )
            })
            .collect();
        assert_eq!(
            conditions,
            [
                (
                    "10.0.0.1".to_string(),
                    serde_json::json!({"ready": true, "serving": true, "terminating": false})
                ),
                (
                    "10.0.0.2".to_string(),
                    serde_json::json!({"ready": false, "serving": false, "terminating": false})
                ),
                (
                    "10.0.0.3".to_string(),
                    serde_json::json!({"ready": false, "serving": true, "terminating": true})
                ),
            ]
        );
    }

    #[test]
    fn a_pod_whose_subdomain_names_the_service_gets_its_hostname() {
        let with = |hostname: &str, subdomain: &str| {
            let mut p = (*pod("a", "10.0.0.1", true, false)).clone();
            let spec = p.spec.as_mut().unwrap();
            spec.hostname = Some(hostname.into());
            spec.subdomain = Some(subdomain.into());
            Arc::new(p)
        };
        let hostnames = |pods: Vec<Arc<Pod>>| {
            let s = serde_json::to_value(&slices_for(&service(), &pods)[0]).unwrap();
            s["endpoints"][0]["hostname"].clone()
        };
        assert_eq!(hostnames(vec![with("web-0", "web")]), "web-0");
        // Another subdomain, or none: no hostname (upstream's ShouldSetHostname).
        assert!(hostnames(vec![with("web-0", "other")]).is_null());
        assert!(hostnames(vec![pod("a", "10.0.0.1", true, false)]).is_null());
        let ep = crate::endpoints::endpoints_for(&service(), &[with("web-0", "web")]);
        let ep = serde_json::to_value(&ep).unwrap();
        assert_eq!(ep["subsets"][0]["addresses"][0]["hostname"], "web-0");
    }

    #[test]
    fn no_pods_leave_a_placeholder_and_many_are_split() {
        let empty = slices_for(&service(), &[]);
        assert_eq!(empty.len(), 1);
        assert!(empty[0].endpoints.is_empty() && empty[0].ports.is_none());
        let many: Vec<Arc<Pod>> = (0..250)
            .map(|i| {
                pod(
                    &format!("p{i:03}"),
                    &format!("10.0.{}.{}", i / 200, i % 200 + 1),
                    true,
                    false,
                )
            })
            .collect();
        let slices = slices_for(&service(), &many);
        let sizes: Vec<usize> = slices.iter().map(|s| s.endpoints.len()).collect();
        assert_eq!(sizes, [100, 100, 50]);
    }
}
