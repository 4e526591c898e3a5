//! The endpoints controller (upstream `endpoint-controller`): every Service with a selector
//! has an Endpoints object of its name listing the pods it selects, the Ready ones in
//! `addresses` and the others in `notReadyAddresses` (all in `addresses` with
//! `publishNotReadyAddresses`), each with the Service's ports resolved against the pod (a
//! named `targetPort` is looked up among the pod's container ports; a pod without it is left
//! out of that port). Pods without an IP, being deleted or finished are not endpoints.
//! Services without a selector (and ExternalName ones) keep whatever Endpoints others write;
//! the Endpoints of a deleted Service go.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, ObjectReference, Pod, Service,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::SyncResult;
use r8s_client::informer::{key_of, lookup, split_key, Change, Factory, Informer};
use r8s_client::queue::{run_controller, WorkQueue};

/// The label upstream puts on the Endpoints of a headless Service.
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";

/// When the change an Endpoints or EndpointSlice write carries happened (upstream's annotation;
/// the Service proxy measures network programming latency from it).
pub const LAST_CHANGE_TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// Upstream's TriggerTimeTracker: per Service, the change times last seen of it (its creation)
/// and of each pod it selects (its Ready condition's last transition, or its creation), so a
/// sync can name the earliest change it is the first to carry. None when nothing it tracks
/// changed (a pod went away, say), as upstream, which then leaves the annotation off.
#[derive(Default)]
pub(crate) struct TriggerTimes {
    seen: std::sync::Mutex<std::collections::HashMap<String, SeenTimes>>,
}

#[derive(Default)]
struct SeenTimes {
    service: Option<jiff::Timestamp>,
    /// Pod name → (trigger time, ready, IP): times are whole seconds, so a pod that turned
    /// ready within the second it was seen unready is told apart by its state.
    pods: std::collections::HashMap<String, (jiff::Timestamp, bool, Option<String>)>,
}

fn pod_trigger_time(pod: &Pod) -> Option<jiff::Timestamp> {
    let ready = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0);
    ready.or_else(|| pod.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// What a sync saw, to be recorded once its write succeeded ([`TriggerTimes::commit`]): a
/// write that fails (a conflict with a cache not yet caught up) leaves the change to be
/// carried by the next one.
pub(crate) struct SeenNow(SeenTimes);

impl TriggerTimes {
    /// The trigger time for a write of `key`'s endpoints from `svc` and `pods` now.
    pub(crate) fn compute(
        &self,
        key: &str,
        svc: &Service,
        pods: &[Arc<Pod>],
    ) -> (Option<jiff::Timestamp>, SeenNow) {
        let seen = self.seen.lock().unwrap();
        let empty = SeenTimes::default();
        let state = seen.get(key).unwrap_or(&empty);
        let mut earliest: Option<jiff::Timestamp> = None;
        let mut note = |t: jiff::Timestamp| earliest = Some(earliest.map_or(t, |e| e.min(t)));
        let created = svc.metadata.creation_timestamp.as_ref().map(|t| t.0);
        if let Some(c) = created.filter(|_| state.service != created) {
            note(c);
        }
        let mut now = std::collections::HashMap::with_capacity(pods.len());
        for pod in pods {
            let Some(t) = pod_trigger_time(pod) else { continue };
            let seen = (t, ready(pod), pod.status.as_ref().and_then(|s| s.pod_ip.clone()));
            let name = pod.name_any();
            if state.pods.get(&name) != Some(&seen) {
                note(t);
            }
            now.insert(name, seen);
        }
        (
            earliest,
            SeenNow(SeenTimes {
                service: created,
                pods: now,
            }),
        )
    }

    /// Record what a sync saw, once what it wrote is stored (or nothing needed writing).
    pub(crate) fn commit(&self, key: &str, now: SeenNow) {
        self.seen.lock().unwrap().insert(key.to_owned(), now.0);
    }

    pub(crate) fn forget(&self, key: &str) {
        self.seen.lock().unwrap().remove(key);
    }
}

/// Create `obj` carrying the trigger time.
async fn create_dated<K>(
    api: &Api<K>,
    obj: &mut K,
    trigger: Option<jiff::Timestamp>,
) -> Result<K, kube::Error>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    set_trigger_time(obj.meta_mut(), trigger);
    api.create(&crate::post_params(), obj).await
}

pub(crate) async fn create_with_trigger<K>(
    api: &Api<K>,
    obj: &K,
    trigger: Option<jiff::Timestamp>,
) -> Result<K, kube::Error>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut obj = obj.clone();
    create_dated(api, &mut obj, trigger).await
}

/// Set (or, with none, remove) the trigger-time annotation.
pub(crate) fn set_trigger_time(meta: &mut ObjectMeta, at: Option<jiff::Timestamp>) {
    match at {
        Some(t) => {
            meta.annotations
                .get_or_insert_with(Default::default)
                .insert(LAST_CHANGE_TRIGGER_TIME.into(), t.to_string());
        }
        None => {
            if let Some(a) = meta.annotations.as_mut() {
                a.remove(LAST_CHANGE_TRIGGER_TIME);
            }
        }
    }
}

pub struct EndpointsController {
    client: Client,
    services: Arc<Informer<Service>>,
    pods: Arc<Informer<Pod>>,
    endpoints: Arc<Informer<Endpoints>>,
    service_store: Store<Service>,
    pod_store: Store<Pod>,
    endpoints_store: Store<Endpoints>,
    queue: Arc<WorkQueue>,
    triggers: TriggerTimes,
}

/// Whether `svc` selects `pod` (same namespace, every selector label matching).
pub(crate) fn selects(svc: &Service, pod: &Pod) -> bool {
    let Some(selector) = svc.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return false;
    };
    let labels = pod.metadata.labels.as_ref();
    svc.namespace() == pod.namespace()
        && selector
            .iter()
            .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

impl EndpointsController {
    pub fn new(factory: &Factory) -> Arc<Self> {
        let services = factory.get::<Service>();
        let pods = factory.get::<Pod>();
        let endpoints = factory.get::<Endpoints>();
        let this = Arc::new(Self {
            client: factory.client(),
            service_store: services.store(),
            pod_store: pods.store(),
            endpoints_store: endpoints.store(),
            services,
            pods,
            endpoints,
            queue: WorkQueue::new("endpoint"),
            triggers: TriggerTimes::default(),
        });
        follow_services(&this.services, &this.pods, &this.queue);
        // Someone else's change to an Endpoints we keep (one of a Service's): put it back.
        // Endpoints with no Service of their name are the user's: left alone, as upstream.
        let q = this.queue.clone();
        let service_store = this.service_store.clone();
        this.endpoints.add_handler(move |c| match c {
            Change::Updated(_, e) | Change::Deleted(e) => {
                let key = key_of(e.as_ref());
                if lookup(&service_store, &key).is_some() {
                    q.add(key);
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
            self.endpoints.clone().synced(),
        ];
        let this = self.clone();
        run_controller(self.queue.clone(), synced, workers, stop, move |key| {
            let this = this.clone();
            async move { this.sync(&key).await }
        })
        .await;
    }

    async fn sync(&self, key: &str) -> SyncResult {
        let (ns, name) = split_key(key);
        let api: Api<Endpoints> = Api::namespaced(self.client.clone(), ns);
        let current = lookup(&self.endpoints_store, key);
        let Some(svc) = lookup(&self.service_store, key) else {
            self.triggers.forget(key);
            if current.is_some() {
                match api.delete(name, &Default::default()).await {
                    Ok(_) => {}
                    Err(e) if r8s_client::is_not_found(&e) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            return Ok(None);
        };
        let spec = svc.spec.clone().unwrap_or_default();
        if spec.selector.is_none() || spec.type_.as_deref() == Some("ExternalName") {
            return Ok(None);
        }
        let pods = selected_pods(&svc, &self.pod_store);
        let mut want = endpoints_for(&svc, &pods);
        let (trigger, seen) = self.triggers.compute(key, &svc, &pods);
        let written = match current {
            Some(cur) if cur.subsets == want.subsets && cur.metadata.labels == want.metadata.labels => {
                Ok(None)
            }
            Some(cur) => {
                let mut next = (*cur).clone();
                next.subsets = want.subsets;
                next.metadata.labels = want.metadata.labels;
                set_trigger_time(&mut next.metadata, trigger);
                match api.replace(name, &crate::post_params(), &next).await {
                    Ok(_) => Ok(None),
                    Err(e) if r8s_client::is_not_found(&e) => Ok(None),
                    Err(e) => Err(e.into()),
                }
            }
            None => match create_dated(&api, &mut want, trigger).await {
                Ok(_) => Ok(None),
                // Made meanwhile, or the namespace is going: the caches will tell.
                Err(kube::Error::Api(s)) if s.code == 409 || s.code == 403 || s.code == 404 => Ok(None),
                Err(e) => Err(e.into()),
            },
        };
        if written.is_ok() {
            self.triggers.commit(key, seen);
        }
        written
    }
}

/// Queue a Service's key when it changes, or when a pod it selects (before or after the
/// change) does: what both endpoint controllers follow.
pub(crate) fn follow_services(services: &Informer<Service>, pods: &Informer<Pod>, queue: &Arc<WorkQueue>) {
    let q = queue.clone();
    services.add_handler(move |c| match c {
        Change::Added(s) | Change::Updated(_, s) | Change::Deleted(s) => q.add(key_of(s.as_ref())),
    });
    let (q, store) = (queue.clone(), services.store());
    pods.add_handler(move |c| {
        let (old, new) = match c {
            Change::Added(p) | Change::Deleted(p) => (None, p),
            Change::Updated(o, p) => (Some(o), p),
        };
        for svc in store.state() {
            if selects(&svc, new) || old.is_some_and(|o| selects(&svc, o)) {
                q.add(key_of(svc.as_ref()));
            }
        }
    });
}

/// The pods `svc` selects, from the pod cache.
/// The hostname a pod's endpoint carries for `svc`: the pod's `hostname` when its
/// `subdomain` names the Service (upstream's `ShouldSetHostname`), which gives it a DNS name
/// `<hostname>.<service>.<namespace>.svc.<zone>`.
pub(crate) fn endpoint_hostname(svc: &Service, pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    let hostname = spec.hostname.as_deref().filter(|h| !h.is_empty())?;
    (spec.subdomain.as_deref() == svc.metadata.name.as_deref()
        && pod.metadata.namespace == svc.metadata.namespace)
        .then(|| hostname.to_owned())
}

pub(crate) fn selected_pods(svc: &Service, pods: &Store<Pod>) -> Vec<Arc<Pod>> {
    pods.state().into_iter().filter(|p| selects(svc, p)).collect()
}

/// Whether a pod is Ready (its condition).
pub(crate) fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The port a Service port reaches on `pod`: a number as it is, a name looked up among the
/// pod's container ports (`None` when the pod has no such port).
pub(crate) fn target_port(port: &k8s_openapi::api::core::v1::ServicePort, pod: &Pod) -> Option<i32> {
    match &port.target_port {
        None => Some(port.port),
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(name)) => pod
            .spec
            .as_ref()?
            .containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .map(|p| p.container_port),
    }
}

/// A Service port as it reaches one pod: name, port, protocol.
type ResolvedPort = (String, i32, String);

/// The Endpoints `svc` should have for the pods it selects.
pub fn endpoints_for(svc: &Service, pods: &[Arc<Pod>]) -> Endpoints {
    let spec = svc.spec.clone().unwrap_or_default();
    let publish_not_ready = spec.publish_not_ready_addresses == Some(true);
    // Pods with the same resolved ports share a subset.
    let mut subsets: BTreeMap<Vec<ResolvedPort>, (Vec<EndpointAddress>, Vec<EndpointAddress>)> =
        BTreeMap::new();
    let family =
        spec.ip_families
            .as_ref()
            .and_then(|f| f.first())
            .map(|f| if f == "IPv6" { "IPv6" } else { "IPv4" });
    let cluster_ip = spec
        .cluster_ip
        .as_deref()
        .filter(|ip| !ip.is_empty() && *ip != "None");
    for pod in pods {
        let status = pod.status.clone().unwrap_or_default();
        // Upstream's podToEndpointAddressForService: the pod's address of the Service's
        // primary family (from its families, else its cluster IP's, else the pod's own).
        let pod_ip = status.pod_ip.clone().unwrap_or_default();
        let family = family
            .or(cluster_ip.map(crate::endpointslice::family_of))
            .unwrap_or_else(|| crate::endpointslice::family_of(&pod_ip));
        let Some(ip) = crate::endpointslice::pod_address(pod, family) else {
            continue;
        };
        let finished = matches!(status.phase.as_deref(), Some("Succeeded" | "Failed"));
        if pod.metadata.deletion_timestamp.is_some() || finished {
            continue;
        }
        let ports: Vec<ResolvedPort> = spec
            .ports
            .iter()
            .flatten()
            .filter_map(|p| {
                let target = target_port(p, pod)?;
                let name = p.name.clone().unwrap_or_default();
                let protocol = p.protocol.clone().unwrap_or_else(|| "TCP".into());
                Some((name, target, protocol))
            })
            .collect();
        let address = EndpointAddress {
            ip,
            hostname: endpoint_hostname(svc, pod),
            node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            target_ref: Some(ObjectReference {
                kind: Some("Pod".into()),
                namespace: pod.namespace(),
                name: Some(pod.name_any()),
                uid: pod.uid(),
                ..Default::default()
            }),
        };
        let entry = subsets.entry(ports).or_default();
        if publish_not_ready || ready(pod) {
            entry.0.push(address);
        } else {
            entry.1.push(address);
        }
    }
    let subsets: Vec<EndpointSubset> = subsets
        .into_iter()
        .map(|(ports, (mut ready, mut not_ready))| {
            ready.sort_by(|a, b| a.ip.cmp(&b.ip));
            not_ready.sort_by(|a, b| a.ip.cmp(&b.ip));
            EndpointSubset {
                addresses: Some(ready).filter(|a| !a.is_empty()),
                not_ready_addresses: Some(not_ready).filter(|a| !a.is_empty()),
                ports: Some(
                    ports
                        .into_iter()
                        .map(|(name, port, protocol)| EndpointPort {
                            name: Some(name).filter(|n| !n.is_empty()),
                            port,
                            protocol: Some(protocol),
                            ..Default::default()
                        })
                        .collect(),
                )
                .filter(|p: &Vec<EndpointPort>| !p.is_empty()),
            }
        })
        .collect();
    let mut labels = svc.metadata.labels.clone().unwrap_or_default();
    if spec.cluster_ip.as_deref() == Some("None") {
        labels.insert(HEADLESS_LABEL.into(), String::new());
    }
    Endpoints {
        metadata: ObjectMeta {
            name: Some(svc.name_any()),
            namespace: svc.namespace(),
            labels: Some(labels).filter(|l| !l.is_empty()),
            ..Default::default()
        },
        subsets: Some(subsets).filter(|s| !s.is_empty()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, ip: &str, ready: bool, labels: serde_json::Value) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "labels": labels},
                "spec": {"nodeName": "n1", "containers": [{"name": "c", "ports": [{"name": "http", "containerPort": 8080}]}]},
                "status": {"podIP": ip, "phase": "Running",
                           "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
            }))
            .unwrap(),
        )
    }

    fn timed_pod(name: &str, ready_at: &str) -> Arc<Pod> {
        timed_pod_state(name, ready_at, true)
    }

    fn timed_pod_state(name: &str, at: &str, ready: bool) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "default", "creationTimestamp": "2026-01-01T00:00:00Z"},
                "status": {"podIP": "10.0.0.9", "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }, "lastTransitionTime": at}]},
            }))
            .unwrap(),
        )
    }

    #[test]
    fn trigger_time_is_the_earliest_change_not_yet_carried() {
        let svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default", "creationTimestamp": "2026-11-25T10:00:05Z"}}))
        .unwrap();
        let t = TriggerTimes::default();
        // Each sync here writes successfully: what it saw is recorded.
        let t_compute = |svc: &Service, pods: &[Arc<Pod>]| {
            let (at, seen) = t.compute("default/web", svc, pods);
            t.commit("default/web", seen);
            at
        };
        let a = timed_pod("a", "2026-11-25T10:00:07Z");
        let b = timed_pod("b", "2026-11-25T10:00:09Z");
        let at = |s: &str| Some(s.parse::<jiff::Timestamp>().unwrap());
        // A new Service: its creation is the earliest change.
        assert_eq!(
            t_compute(&svc, &[a.clone(), b.clone()]),
            at("2026-11-25T10:00:05Z")
        );
        // Nothing changed since: none (the annotation is left off).
        assert_eq!(t_compute(&svc, &[a.clone(), b.clone()]), None);
        // b's readiness moved; a new pod c too: the earlier of the two.
        let b2 = timed_pod("b", "2026-11-25T10:01:00Z");
        let c = timed_pod("c", "2026-11-25T10:00:50Z");
        assert_eq!(
            t_compute(&svc, &[a.clone(), b2.clone(), c.clone()]),
            at("2026-11-25T10:00:50Z")
        );
        // A failed write records nothing: the next sync carries the change again.
        let e = timed_pod("e", "2026-11-25T10:01:30Z");
        let (at1, _) = t.compute(
            "default/web",
            &svc,
            &[a.clone(), b2.clone(), c.clone(), e.clone()],
        );
        assert_eq!(at1, at("2026-11-25T10:01:30Z"));
        assert_eq!(
            t_compute(&svc, &[a.clone(), b2.clone(), c.clone(), e.clone()]),
            at("2026-11-25T10:01:30Z")
        );
        // A pod gone is no tracked change.
        assert_eq!(t_compute(&svc, &[a.clone(), b2.clone()]), None);
        // Ready within the same second it was last seen unready: still a change.
        let d = timed_pod_state("d", "2026-11-25T10:02:00Z", false);
        assert_eq!(
            t_compute(&svc, &[a.clone(), b2.clone(), d]),
            at("2026-11-25T10:02:00Z")
        );
        let d = timed_pod_state("d", "2026-11-25T10:02:00Z", true);
        assert_eq!(
            t_compute(&svc, &[a.clone(), b2.clone(), d]),
            at("2026-11-25T10:02:00Z")
        );
        let mut meta = ObjectMeta::default();
        set_trigger_time(&mut meta, at("2026-11-25T10:00:50.5Z"));
        assert_eq!(
            meta.annotations.as_ref().unwrap()[LAST_CHANGE_TRIGGER_TIME],
            "2026-11-25T10:00:50.5Z"
        );
        set_trigger_time(&mut meta, None);
        assert!(meta.annotations.unwrap().is_empty());
    }

    fn service(spec: serde_json::Value) -> Service {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
            "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn ready_and_not_ready_pods_with_ports_resolved() {
        let svc = service(serde_json::json!({"selector": {"app": "web"}, "ports": [
            {"name": "web", "port": 80, "targetPort": "http", "protocol": "TCP"},
            {"name": "metrics", "port": 9090, "targetPort": 9090, "protocol": "TCP"}]}));
        let pods = vec![
            pod("b", "10.0.0.2", true, serde_json::json!({"app": "web"})),
            pod("a", "10.0.0.1", true, serde_json::json!({"app": "web"})),
            pod("c", "10.0.0.3", false, serde_json::json!({"app": "web"})),
            pod("no-ip", "", true, serde_json::json!({"app": "web"})),
        ];
        let ep = serde_json::to_value(endpoints_for(&svc, &pods)).unwrap();
        assert_eq!(ep["metadata"]["labels"], serde_json::json!({"app": "web"}));
        assert_eq!(
            ep["subsets"],
            serde_json::json!([{
                "addresses": [
                    {"ip": "10.0.0.1", "nodeName": "n1", "targetRef": {"kind": "Pod", "namespace": "default", "name": "a", "uid": "uid-a"}},
                    {"ip": "10.0.0.2", "nodeName": "n1", "targetRef": {"kind": "Pod", "namespace": "default", "name": "b", "uid": "uid-b"}},
                ],
                "notReadyAddresses": [
                    {"ip": "10.0.0.3", "nodeName": "n1", "targetRef": {"kind": "Pod", "namespace": "default", "name": "c", "uid": "uid-c"}},
                ],
                "ports": [{"name": "web", "port": 8080, "protocol": "TCP"}, {"name": "metrics", "port": 9090, "protocol": "TCP"}],
            }])
        );
    }

    #[test]
    fn selection_headless_labels_publishing_and_finished_pods() {
        let svc = service(
            serde_json::json!({"selector": {"app": "web"}, "clusterIP": "None",
            "publishNotReadyAddresses": true, "ports": [{"port": 80, "targetPort": 80, "protocol": "TCP"}]}),
        );
        let mut done = (*pod("done", "10.0.0.9", false, serde_json::json!({"app": "web"}))).clone();
        done.status.as_mut().unwrap().phase = Some("Succeeded".into());
        let other = pod("other", "10.0.0.8", true, serde_json::json!({"app": "db"}));
        assert!(!selects(&svc, &other));
        let pods = vec![
            pod("slow", "10.0.0.5", false, serde_json::json!({"app": "web"})),
            Arc::new(done),
        ];
        let ep = endpoints_for(&svc, &pods);
        assert_eq!(
            ep.metadata
                .labels
                .unwrap()
                .get(HEADLESS_LABEL)
                .map(String::as_str),
            Some("")
        );
        let subsets = ep.subsets.unwrap();
        assert_eq!(subsets.len(), 1);
        let ips: Vec<&str> = subsets[0]
            .addresses
            .iter()
            .flatten()
            .map(|a| a.ip.as_str())
            .collect();
        assert_eq!(
            ips,
            ["10.0.0.5"],
            "published though not ready; the finished pod left out"
        );
        // No pods: no subsets at all.
        assert!(endpoints_for(&svc, &[]).subsets.is_none());
    }
}
