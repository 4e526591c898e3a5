//! Load balancers without a cloud (the role of k3s's servicelb, without its helper pods): a
//! `LoadBalancer` Service (with no `loadBalancerClass`) gets the nodes' addresses as its
//! `status.loadBalancer.ingress` (each Ready node's ExternalIP, else its InternalIP; loopback
//! addresses never), and the Service proxy on every node sends traffic to those addresses and
//! the Service's ports to its endpoints. Two such Services cannot share a port and protocol on
//! the same addresses: the one created later gets no ingress (`kubectl get svc` shows
//! `<pending>`) and a `LoadBalancerPortInUse` warning event naming the Service that holds it,
//! where k3s would leave a helper pod Pending. A Service that stops being a LoadBalancer loses
//! the addresses, as upstream's service controller clears them.

use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, Node, Service, ServiceStatus};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::SyncResult;
use r8s_client::events::Events;
use r8s_client::informer::{key_of, lookup, split_key, Change, Factory, Informer};
use r8s_client::queue::{run_controller, WorkQueue};

pub struct ServiceLbController {
    client: Client,
    services: Arc<Informer<Service>>,
    nodes: Arc<Informer<Node>>,
    service_store: Store<Service>,
    node_store: Store<Node>,
    queue: Arc<WorkQueue>,
    events: Events,
}

/// Whether this controller answers for `svc`.
fn ours(svc: &Service) -> bool {
    svc.spec
        .as_ref()
        .is_some_and(|s| s.type_.as_deref() == Some("LoadBalancer") && s.load_balancer_class.is_none())
}

fn has_ingress(svc: &Service) -> bool {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .is_some_and(|i| !i.is_empty())
}

/// The (port, protocol) pairs a Service takes on the load-balancer addresses.
fn ports(svc: &Service) -> Vec<(i32, String)> {
    svc.spec
        .iter()
        .flat_map(|s| s.ports.iter().flatten())
        .map(|p| (p.port, p.protocol.clone().unwrap_or_else(|| "TCP".into())))
        .collect()
}

/// The addresses load-balanced traffic arrives at: each Ready node's ExternalIP, else its
/// InternalIP, loopback ones left out; sorted, without repeats.
pub fn node_addresses(nodes: &[Arc<Node>]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for node in nodes {
        let status = node.status.as_ref();
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if !ready || node.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let addrs: Vec<_> = status.and_then(|s| s.addresses.clone()).unwrap_or_default();
        let pick = |t: &str| {
            addrs
                .iter()
                .filter(|a| a.type_ == t)
                .filter(|a| a.address.parse::<IpAddr>().is_ok_and(|ip| !ip.is_loopback()))
                .map(|a| a.address.clone())
                .collect::<Vec<_>>()
        };
        let external = pick("ExternalIP");
        out.extend(if external.is_empty() {
            pick("InternalIP")
        } else {
            external
        });
    }
    out.sort();
    out.dedup();
    out
}

/// The Service created before `svc` (ties by namespace/name) that holds one of its ports, and
/// that port.
pub fn port_holder<'a>(svc: &Service, all: &'a [Arc<Service>]) -> Option<(&'a Service, (i32, String))> {
    let order = |s: &Service| (s.metadata.creation_timestamp.clone().map(|t| t.0), key_of(s));
    let mine = ports(svc);
    let mut earlier: Vec<&Arc<Service>> = all
        .iter()
        .filter(|o| ours(o) && o.uid() != svc.uid() && order(o) < order(svc))
        .collect();
    earlier.sort_by_key(|o| order(o));
    for other in earlier {
        let theirs = ports(other);
        if let Some(p) = mine.iter().find(|p| theirs.contains(p)) {
            return Some((other, p.clone()));
        }
    }
    None
}

impl ServiceLbController {
    pub fn new(factory: &Factory, events: Events) -> Arc<Self> {
        let services = factory.get::<Service>();
        let nodes = factory.get::<Node>();
        let this = Arc::new(Self {
            client: factory.client(),
            service_store: services.store(),
            node_store: nodes.store(),
            services,
            nodes,
            queue: WorkQueue::new("service_lb"),
            events,
        });
        // A load balancer's change can free or take ports of the others: every one is looked
        // at again; so on any node change.
        let (q, store) = (this.queue.clone(), this.service_store.clone());
        let all = move |q: &WorkQueue| {
            for s in store.state() {
                if ours(&s) || has_ingress(&s) {
                    q.add(key_of(s.as_ref()));
                }
            }
        };
        let all2 = all.clone();
        this.services.add_handler(move |c| {
            let (old, new) = match c {
                Change::Added(s) => (None, s),
                Change::Updated(o, s) => (Some(o), s),
                Change::Deleted(s) => (None, s),
            };
            let involved = ours(new) || has_ingress(new) || old.is_some_and(|o| ours(o));
            if involved {
                q.add(key_of(new.as_ref()));
                all(&q);
            }
        });
        let q = this.queue.clone();
        // Heartbeats change a node's conditions' times every few seconds: only its addresses
        // and readiness matter here.
        let seen = |n: &Node| {
            let s = n.status.as_ref();
            let ready = s
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
                .map(|c| c.status.clone());
            (s.and_then(|s| s.addresses.clone()), ready)
        };
        this.nodes.add_handler(move |c| {
            let changed = match c {
                Change::Updated(o, n) => seen(o) != seen(n),
                _ => true,
            };
            if changed {
                all2(&q);
            }
        });
        this
    }

    pub async fn run(self: Arc<Self>, workers: usize, stop: CancellationToken) {
        let synced = vec![self.services.clone().synced(), self.nodes.clone().synced()];
        let this = self.clone();
        run_controller(self.queue.clone(), synced, workers, stop, move |key| {
            let this = this.clone();
            async move { this.sync(&key).await }
        })
        .await;
    }

    async fn sync(&self, key: &str) -> SyncResult {
        let Some(svc) = lookup(&self.service_store, key) else {
            return Ok(None);
        };
        let (ns, name) = split_key(key);
        let want: Vec<String> = if !ours(&svc) {
            Vec::new()
        } else {
            let all = self.service_store.state();
            match port_holder(&svc, &all) {
                Some((holder, (port, proto))) => {
                    // Repeats count up in one event series.
                    self.events.warning(
                        svc.as_ref(),
                        "LoadBalancerPortInUse",
                        format!(
                            "port {port}/{proto} is in use by LoadBalancer Service {}",
                            key_of(holder)
                        ),
                    );
                    Vec::new()
                }
                None => node_addresses(&self.node_store.state()),
            }
        };
        let have: Vec<String> = svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|i| i.ip.clone())
            .collect();
        if have == want && (has_ingress(&svc) || want.is_empty()) {
            return Ok(None);
        }
        let status = ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(
                    want.iter()
                        .map(|ip| LoadBalancerIngress {
                            ip: Some(ip.clone()),
                            ip_mode: Some("VIP".into()),
                            ..Default::default()
                        })
                        .collect(),
                ),
            }),
            ..svc.status.clone().unwrap_or_default()
        };
        let api: Api<Service> = Api::namespaced(self.client.clone(), ns);
        let patch = serde_json::json!({"status": {"loadBalancer": status.load_balancer}});
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(None),
            Err(e) if r8s_client::is_not_found(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(name: &str, created: &str, ports: serde_json::Value) -> Arc<Service> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"namespace": "default", "name": name, "uid": name, "creationTimestamp": created},
                "spec": {"type": "LoadBalancer", "ports": ports}
            }))
            .unwrap(),
        )
    }

    fn node(name: &str, ready: bool, addrs: serde_json::Value) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name},
                "status": {"addresses": addrs,
                    "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
            }))
            .unwrap(),
        )
    }

    #[test]
    fn ingress_is_each_ready_nodes_external_else_internal_address() {
        let nodes = vec![
            node("b", true, json!([{"type": "InternalIP", "address": "192.0.2.2"}])),
            node(
                "a",
                true,
                json!([{"type": "InternalIP", "address": "192.0.2.1"}, {"type": "ExternalIP", "address": "198.51.100.1"}]),
            ),
            node(
                "c",
                false,
                json!([{"type": "InternalIP", "address": "192.0.2.3"}]),
            ),
            node("d", true, json!([{"type": "InternalIP", "address": "127.0.0.1"}])),
        ];
        assert_eq!(node_addresses(&nodes), vec!["192.0.2.2", "198.51.100.1"]);
    }

    #[test]
    fn the_later_service_on_a_taken_port_waits() {
        let first = svc(
            "first",
            "2026-11-25T10:00:00Z",
            json!([{"port": 80, "protocol": "TCP"}]),
        );
        let second = svc(
            "second",
            "2026-11-25T10:00:01Z",
            json!([{"port": 443}, {"port": 80}]),
        );
        let udp = svc(
            "udp",
            "2026-11-25T10:00:02Z",
            json!([{"port": 80, "protocol": "UDP"}]),
        );
        let all = vec![second.clone(), first.clone(), udp.clone()];
        assert!(port_holder(&first, &all).is_none());
        let (holder, port) = port_holder(&second, &all).unwrap();
        assert_eq!(holder.name_any(), "first");
        assert_eq!(port, (80, "TCP".to_string()));
        assert!(
            port_holder(&udp, &all).is_none(),
            "another protocol is another port"
        );
    }
}
