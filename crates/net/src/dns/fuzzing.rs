//! Entry point for the fuzz target `dns` in `fuzz/` (not an API): DNS queries as the cluster
//! DNS server receives them over UDP (`data[0]` odd) or TCP, answered from a zone of a
//! ClusterIP Service, a headless Service with endpoints and an ExternalName (no upstream: what
//! is not the cluster's fails without leaving the process). An answer, when there is one, is a
//! DNS message with the query's ID.

use std::sync::{Arc, OnceLock};

use hickory_proto::op::Message;
use serde_json::json;

use super::{ClusterZone, DnsServer, Forwarder, Transport};

struct World {
    rt: tokio::runtime::Runtime,
    server: Arc<DnsServer>,
}

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        let zone = ClusterZone::new("cluster.local", 5).expect("the zone");
        let service = |v| serde_json::from_value(v).expect("a Service");
        zone.set_service(&service(json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"clusterIP": "10.43.0.20", "clusterIPs": ["10.43.0.20", "fd00::20"],
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}
        })));
        zone.set_service(&service(json!({
            "metadata": {"name": "db", "namespace": "prod"},
            "spec": {"clusterIP": "None", "ports": [{"name": "pg", "port": 5432}]}
        })));
        zone.set_service(&service(json!({
            "metadata": {"name": "ext", "namespace": "default"},
            "spec": {"type": "ExternalName", "externalName": "db.prod.svc.cluster.local"}
        })));
        zone.set_slice(
            &serde_json::from_value(json!({
                "metadata": {"name": "db-abc", "namespace": "prod",
                             "labels": {"kubernetes.io/service-name": "db"}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": ["10.42.0.5"], "hostname": "db-0", "conditions": {"ready": true}}],
                "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}]
            }))
            .expect("an EndpointSlice"),
        );
        World {
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime"),
            server: DnsServer::new(Arc::new(zone), Forwarder::new(Vec::new())),
        }
    })
}

pub fn query(data: &[u8]) {
    let Some((&how, request)) = data.split_first() else {
        return;
    };
    let w = world();
    let transport = if how % 2 == 1 {
        Transport::Udp
    } else {
        Transport::Tcp
    };
    if let Some(answer) = w.rt.block_on(w.server.respond(request, transport)) {
        let m = Message::from_vec(&answer).expect("an answer is a DNS message");
        assert_eq!(
            m.id(),
            u16::from_be_bytes([request[0], request[1]]),
            "an answer carries the query's ID"
        );
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_corpus_replays_without_a_panic() {
        assert!(
            r8s_api::fuzzing::replay("dns", super::query) > 0,
            "the dns corpus is empty"
        );
    }
}
