//! From one Service and its EndpointSlices to what the table holds for it: the chains (service,
//! external, endpoint), the map elements that dispatch to them and the affinity sets — a pure
//! function, as kube-proxy's nftables mode lays them out (KEP-3866): one `service-…` chain
//! choosing among `endpoint-…` chains, an `external-…` chain for NodePort, external and
//! load-balancer traffic, verdict-map elements keyed on address, protocol and port.
//!
//! Most Service ports take a flatter path instead ("flat" below): no chains of their own,
//! only elements of data maps — the endpoint count under the port's key, and each endpoint's
//! address under the key and a bucket number — that a fixed set of rules reads, picking a
//! bucket with `numgen random mod <count>` and DNATing to what the map holds. The reason is
//! the kernel, not the packet path: any change that adds a rule with a jump, a NAT or a
//! verdict-map element with a jump makes nf_tables re-check every chain reachable from the
//! table's base chains (about 35 ms at 10,000 Services on this kernel), while a change of
//! plain map elements is checked against nothing (about 2 ms). Ports that need per-Service
//! rules — ClientIP affinity, a Local traffic policy, more endpoints than the fixed rules
//! count up to — keep kube-proxy's chain layout.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::nft::expr::{m, CmpOp, Expr, REG_1};
use crate::nft::{octets, AddrFamily, Data, Verdict};

/// The maps and sets of the table.
pub const CLUSTER_IPS: &str = "cluster-ips";
pub const SERVICE_IPS: &str = "service-ips";
pub const SERVICE_NODEPORTS: &str = "service-nodeports";
pub const NO_ENDPOINT_SERVICES: &str = "no-endpoint-services";
pub const NO_ENDPOINT_NODEPORTS: &str = "no-endpoint-nodeports";
/// The flat path: `addr . proto . port` → how many endpoints; `… . bucket` → `addr . port`.
pub const FLAT_COUNTS: &str = "flat-counts";
pub const FLAT_ENDPOINTS: &str = "flat-endpoints";
/// Flat keys of external IPs and load-balancer ingress (always masqueraded).
pub const FLAT_EXTERNAL: &str = "flat-external";
/// The same for node ports, keyed `proto . port`.
pub const FLAT_NODEPORT_COUNTS: &str = "flat-nodeport-counts";
pub const FLAT_NODEPORT_ENDPOINTS: &str = "flat-nodeport-endpoints";
/// `addr . addr` of this node's flat endpoints: a pod reaching itself through a Service is
/// masqueraded (shared between Services, so counted by the table rather than claimed).
pub const FLAT_HAIRPIN: &str = "flat-hairpin";
/// The most endpoints a flat port may have: one fixed rule per count.
pub const FLAT_MAX_ENDPOINTS: usize = 64;
/// Fixed chains the per-Service rules use.
pub const MARK_FOR_MASQUERADE: &str = "mark-for-masquerade";
pub const REJECT_CHAIN: &str = "reject-chain";

/// What the proxy needs to know about the cluster and the node.
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    /// The nftables table's name (one table of that name per family: `ip` and `ip6`).
    pub table: String,
    /// The family a proxier programs; `run` runs one per family of `service_cidrs` (the
    /// rules of a family see only that family's addresses, as kube-proxy's).
    pub family: AddrFamily,
    /// The Service range(s): addresses in them that no Service holds are dropped.
    pub service_cidrs: Vec<(IpAddr, u8)>,
    /// The pod range(s), one per family: traffic from outside it to a Service is
    /// masqueraded.
    pub cluster_cidrs: Vec<(IpAddr, u8)>,
    /// The packet mark bit meaning "masquerade this" (kube-proxy's --masquerade-bit).
    pub masquerade_bit: u32,
    /// This node's name (for traffic policy Local).
    pub node_name: String,
    /// Service addresses the agent serves itself (the cluster DNS address): not proxied.
    pub local_service_ips: Vec<IpAddr>,
    /// Leave the table and the blackhole route in place on a clean stop (an agent that keeps
    /// its pods for the next start to adopt keeps their Services routing too).
    pub keep_on_exit: bool,
}

impl ProxyConfig {
    pub fn masquerade_mark(&self) -> u32 {
        1 << self.masquerade_bit
    }

    fn mine(&self, ip: &IpAddr) -> bool {
        AddrFamily::of(ip) == self.family
    }

    /// The pod range of this family.
    pub fn cluster_cidr(&self) -> Option<(IpAddr, u8)> {
        self.cluster_cidrs.iter().copied().find(|(n, _)| self.mine(n))
    }

    /// The Service ranges of this family.
    pub fn family_service_cidrs(&self) -> impl Iterator<Item = (IpAddr, u8)> + '_ {
        self.service_cidrs.iter().copied().filter(|(n, _)| self.mine(n))
    }

    /// The families of the Service ranges, the primary first.
    pub fn families(&self) -> Vec<AddrFamily> {
        let mut out = Vec::new();
        for (n, _) in &self.service_cidrs {
            let f = AddrFamily::of(n);
            if !out.contains(&f) {
                out.push(f);
            }
        }
        out
    }

    /// This configuration for one family.
    pub fn for_family(&self, family: AddrFamily) -> ProxyConfig {
        ProxyConfig {
            family,
            ..self.clone()
        }
    }
}

/// One rule of a chain: its expressions.
pub type Rule = Vec<Expr>;

/// Everything the table holds for one Service.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceRules {
    /// Chain name → its rules.
    pub chains: BTreeMap<String, Vec<Rule>>,
    /// (set, key) → the element's verdict or value (None for a plain set).
    pub elems: BTreeMap<(&'static str, Vec<u8>), Option<Data>>,
    /// Affinity sets (each element carries its own timeout, set by the rule that adds it).
    pub affinity_sets: BTreeSet<String>,
    /// This node's endpoints on flat paths (hairpin masquerade).
    pub hairpin: BTreeSet<IpAddr>,
}

/// A flat map's key: `key . bucket` (the bucket as `numgen` leaves it in a register).
pub fn bucket_key(key: &[u8], bucket: u32) -> Vec<u8> {
    let mut k = key.to_vec();
    k.extend_from_slice(&bucket.to_ne_bytes());
    k
}

/// A flat endpoint map's value: `addr . port`.
fn endpoint_value(ip: IpAddr, port: u16) -> Data {
    let mut v = octets(&ip);
    v.extend_from_slice(&port.to_be_bytes());
    v.extend_from_slice(&[0, 0]);
    Data::Value(v)
}

/// The elements that send `key` to one of `eps` on the flat path.
fn flat_dispatch(
    out: &mut ServiceRules,
    counts: &'static str,
    map: &'static str,
    key: &[u8],
    eps: &[&Endpoint],
) {
    out.elems.insert(
        (counts, key.to_vec()),
        Some(Data::Value((eps.len() as u32).to_ne_bytes().to_vec())),
    );
    for (i, ep) in eps.iter().enumerate() {
        out.elems.insert(
            (map, bucket_key(key, i as u32)),
            Some(endpoint_value(ep.ip, ep.port)),
        );
    }
}

/// One endpoint of a Service port.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Endpoint {
    ip: IpAddr,
    port: u16,
    ready: bool,
    serving: bool,
    terminating: bool,
    local: bool,
}

fn protocol_number(p: Option<&str>) -> Option<(u8, &'static str)> {
    match p.unwrap_or("TCP") {
        "TCP" => Some((6, "tcp")),
        "UDP" => Some((17, "udp")),
        "SCTP" => Some((132, "sctp")),
        _ => None,
    }
}

/// The key `addr . proto . port` of the three-field maps.
pub fn ip_key(ip: IpAddr, proto: u8, port: u16) -> Vec<u8> {
    let mut k = Vec::with_capacity(24);
    k.extend_from_slice(&octets(&ip));
    k.extend_from_slice(&[proto, 0, 0, 0]);
    k.extend_from_slice(&port.to_be_bytes());
    k.extend_from_slice(&[0, 0]);
    k
}

/// The key `proto . port` of the node-port maps.
pub fn port_key(proto: u8, port: u16) -> Vec<u8> {
    let mut k = Vec::with_capacity(8);
    k.extend_from_slice(&[proto, 0, 0, 0]);
    k.extend_from_slice(&port.to_be_bytes());
    k.extend_from_slice(&[0, 0]);
    k
}

/// Endpoints the Service's traffic may go to: the ready ones, or when none is ready the
/// serving-and-terminating ones (upstream's CategorizeEndpoints fallback).
fn usable<'a>(eps: impl Iterator<Item = &'a Endpoint> + Clone) -> Vec<&'a Endpoint> {
    let ready: Vec<&Endpoint> = eps.clone().filter(|e| e.ready).collect();
    if !ready.is_empty() {
        return ready;
    }
    eps.filter(|e| e.serving && e.terminating).collect()
}

/// The rules for `svc` with `slices` (its EndpointSlices) in `cfg.family`. Headless and
/// ExternalName Services, Services without an address of the family and addresses the agent
/// serves itself get none.
pub fn service_rules(cfg: &ProxyConfig, svc: &Service, slices: &[&EndpointSlice]) -> ServiceRules {
    let mut out = ServiceRules::default();
    let (Some(spec), Some(ns), Some(name)) = (
        svc.spec.as_ref(),
        svc.metadata.namespace.as_deref(),
        svc.metadata.name.as_deref(),
    ) else {
        return out;
    };
    if spec.type_.as_deref() == Some("ExternalName") {
        return out;
    }
    let cluster_ip = spec
        .cluster_ips
        .iter()
        .flatten()
        .chain(spec.cluster_ip.iter())
        .filter_map(|ip| ip.parse::<IpAddr>().ok())
        .find(|ip| cfg.mine(ip));
    let Some(cluster_ip) = cluster_ip else {
        return out; // headless, or none of this family
    };
    if cfg.local_service_ips.contains(&cluster_ip) {
        return out;
    }
    let affinity_ms = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
        let secs = spec
            .session_affinity_config
            .as_ref()
            .and_then(|c| c.client_ip.as_ref())
            .and_then(|c| c.timeout_seconds)
            .unwrap_or(10_800);
        secs.max(1) as u64 * 1000
    });
    // Marked for masquerade in place (kube-proxy jumps to a chain that does this; the
    // kernel re-checks every jump of the table on each change, so fewer jumps make every
    // sync cheaper).
    let mark = || m::mark_or(cfg.masquerade_mark());
    let internal_local = spec.internal_traffic_policy.as_deref() == Some("Local");
    let external_local = spec.external_traffic_policy.as_deref() == Some("Local");
    let external_ips: Vec<IpAddr> = spec
        .external_ips
        .iter()
        .flatten()
        .filter_map(|ip| ip.parse().ok())
        .chain(
            svc.status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref())
                .and_then(|lb| lb.ingress.as_ref())
                .into_iter()
                .flatten()
                .filter(|i| i.ip_mode.as_deref() != Some("Proxy"))
                .filter_map(|i| i.ip.as_deref()?.parse().ok()),
        )
        .filter(|ip| cfg.mine(ip))
        .collect();

    for port in spec.ports.iter().flatten() {
        let Some((proto, proto_name)) = protocol_number(port.protocol.as_deref()) else {
            continue;
        };
        let Ok(svc_port) = u16::try_from(port.port) else {
            continue;
        };
        let port_name = port.name.clone().unwrap_or_default();
        let base = format!(
            "{ns}/{name}/{proto_name}/{}",
            if port_name.is_empty() {
                format!("p{svc_port}")
            } else {
                port_name.clone()
            }
        );
        let eps = endpoints(cfg, slices, &port_name, port.protocol.as_deref().unwrap_or("TCP"));
        let cluster_eps = usable(eps.iter());
        let local_eps = usable(eps.iter().filter(|e| e.local));
        let node_port = port
            .node_port
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p != 0);
        let has_external = node_port.is_some() || !external_ips.is_empty();
        if affinity_ms.is_none()
            && !internal_local
            && !(external_local && has_external)
            && (1..=FLAT_MAX_ENDPOINTS).contains(&cluster_eps.len())
        {
            out.elems.insert((CLUSTER_IPS, octets(&cluster_ip)), None);
            let key = ip_key(cluster_ip, proto, svc_port);
            flat_dispatch(&mut out, FLAT_COUNTS, FLAT_ENDPOINTS, &key, &cluster_eps);
            for ip in &external_ips {
                let key = ip_key(*ip, proto, svc_port);
                out.elems.insert((FLAT_EXTERNAL, key.clone()), None);
                flat_dispatch(&mut out, FLAT_COUNTS, FLAT_ENDPOINTS, &key, &cluster_eps);
            }
            if let Some(np) = node_port {
                let key = port_key(proto, np);
                flat_dispatch(
                    &mut out,
                    FLAT_NODEPORT_COUNTS,
                    FLAT_NODEPORT_ENDPOINTS,
                    &key,
                    &cluster_eps,
                );
            }
            out.hairpin
                .extend(cluster_eps.iter().filter(|e| e.local).map(|e| e.ip));
            continue;
        }
        let service_chain = format!("service-{base}");
        let external_chain = format!("external-{base}");
        let local_chain = format!("local-{base}");
        // Hairpin (a pod reaching itself through its Service is masqueraded) and DNAT.
        let family = cfg.family;
        let to_endpoint = |ep: &Endpoint| -> [Rule; 2] {
            let mut hairpin = m::addr_in(m::saddr(family, REG_1), ep.ip, family.bits(), CmpOp::Eq);
            hairpin.extend(mark());
            [hairpin, m::dnat_to(proto, ep.ip, ep.port)]
        };
        let endpoint_chain = |ep: &Endpoint, out: &mut ServiceRules| -> String {
            let chain = format!("endpoint-{base}__{}/{}", ep.ip, ep.port);
            if out.chains.contains_key(&chain) {
                return chain;
            }
            let [hairpin, dnat] = to_endpoint(ep);
            let mut rules = vec![hairpin];
            if let Some(ms) = affinity_ms {
                let set = affinity_set(&chain);
                out.affinity_sets.insert(set.clone());
                rules.push(vec![
                    m::saddr(family, REG_1),
                    Expr::DynsetUpdate {
                        set,
                        sreg: REG_1,
                        timeout_ms: Some(ms),
                    },
                ]);
            }
            rules.push(dnat);
            out.chains.insert(chain.clone(), rules);
            chain
        };
        // A chain that picks one of `eps` (sticky per client with ClientIP affinity).
        let choose = |chain: &str, pre: Vec<Rule>, eps: &[&Endpoint], out: &mut ServiceRules| {
            let mut rules = pre;
            let targets: Vec<String> = eps.iter().map(|e| endpoint_chain(e, out)).collect();
            if affinity_ms.is_some() {
                for t in &targets {
                    let mut r = vec![
                        m::saddr(family, REG_1),
                        Expr::Lookup {
                            set: affinity_set(t),
                            sreg: REG_1,
                            dreg: None,
                            invert: false,
                        },
                    ];
                    r.push(Expr::Verdict(Verdict::Goto(t.clone())));
                    rules.push(r);
                }
            }
            // One endpoint at random: rule i takes the new connection with probability
            // 1/(n-i) given the ones before did not, so each gets 1/n. (Not kube-proxy's
            // `numgen … vmap` on an anonymous map: the kernel looks a new anonymous set up
            // by scanning the table's sets and the transaction, which made a full sync of
            // thousands of Services take minutes; these rules need no lookup at all.)
            let n = targets.len() as u32;
            for (i, t) in targets.into_iter().enumerate() {
                let left = n - i as u32;
                let mut r = Vec::new();
                if left > 1 {
                    r.push(Expr::NumgenRandom {
                        dreg: REG_1,
                        modulus: left,
                    });
                    r.push(Expr::Cmp {
                        sreg: REG_1,
                        op: CmpOp::Eq,
                        data: 0u32.to_ne_bytes().to_vec(),
                    });
                }
                r.push(Expr::Verdict(Verdict::Goto(t)));
                rules.push(r);
            }
            out.chains.insert(chain.to_owned(), rules);
        };

        out.elems.insert((CLUSTER_IPS, octets(&cluster_ip)), None);
        // Traffic to the cluster IP.
        let internal_eps = if internal_local { &local_eps } else { &cluster_eps };
        let cluster_key = ip_key(cluster_ip, proto, svc_port);
        if !cluster_eps.is_empty() {
            // Off-cluster sources (the node itself, other hosts) are masqueraded so replies
            // come back through this node.
            let mut masq = Vec::new();
            match cfg.cluster_cidr() {
                Some((net, prefix)) => {
                    let mut r = m::addr_in(m::saddr(family, REG_1), net, prefix, CmpOp::Neq);
                    r.extend(mark());
                    masq.push(r);
                }
                None => masq.push(mark()),
            }
            choose(&service_chain, masq, &cluster_eps, &mut out);
        }
        if internal_eps.is_empty() {
            // Nothing to send it to: refused at once (dropped when only other nodes have
            // endpoints and the policy is Local, as upstream).
            let verdict = if cluster_eps.is_empty() {
                Verdict::Goto(REJECT_CHAIN.into())
            } else {
                Verdict::Drop
            };
            out.elems
                .insert((NO_ENDPOINT_SERVICES, cluster_key), Some(verdict.into()));
        } else if internal_local {
            choose(&local_chain, Vec::new(), &local_eps, &mut out);
            out.elems.insert(
                (SERVICE_IPS, cluster_key),
                Some(Verdict::Goto(local_chain.clone()).into()),
            );
        } else {
            out.elems.insert(
                (SERVICE_IPS, cluster_key),
                Some(Verdict::Goto(service_chain.clone()).into()),
            );
        }

        // Traffic from outside: node ports, external IPs, load-balancer ingress.
        if !has_external {
            continue;
        }
        let external_eps = if external_local { &local_eps } else { &cluster_eps };
        let external_target = if external_eps.is_empty() {
            None
        } else if external_local {
            // Source address kept; pods and the node itself still go anywhere (upstream's
            // short circuits), others only to this node's endpoints.
            let mut rules = Vec::new();
            if let Some((net, prefix)) = cfg.cluster_cidr() {
                let mut r = m::addr_in(m::saddr(family, REG_1), net, prefix, CmpOp::Eq);
                r.push(Expr::Verdict(Verdict::Goto(service_chain.clone())));
                rules.push(r);
            }
            let mut r = m::fib_saddr_local();
            r.extend(mark());
            rules.push(r);
            let mut r = m::fib_saddr_local();
            r.push(Expr::Verdict(Verdict::Goto(service_chain.clone())));
            rules.push(r);
            choose(&external_chain, rules, &local_eps, &mut out);
            Some(Verdict::Goto(external_chain.clone()))
        } else {
            out.chains.insert(
                external_chain.clone(),
                vec![mark(), vec![Expr::Verdict(Verdict::Goto(service_chain.clone()))]],
            );
            Some(Verdict::Goto(external_chain.clone()))
        };
        let no_endpoints = if cluster_eps.is_empty() {
            Verdict::Goto(REJECT_CHAIN.into())
        } else {
            Verdict::Drop
        };
        for ip in &external_ips {
            let key = ip_key(*ip, proto, svc_port);
            match &external_target {
                Some(v) => out.elems.insert((SERVICE_IPS, key), Some(v.clone().into())),
                None => out
                    .elems
                    .insert((NO_ENDPOINT_SERVICES, key), Some(no_endpoints.clone().into())),
            };
        }
        if let Some(np) = node_port {
            let key = port_key(proto, np);
            match &external_target {
                Some(v) => out.elems.insert((SERVICE_NODEPORTS, key), Some(v.clone().into())),
                None => out
                    .elems
                    .insert((NO_ENDPOINT_NODEPORTS, key), Some(no_endpoints.clone().into())),
            };
        }
    }
    out
}

/// The health-check node port `svc` needs on this node (a LoadBalancer with
/// `externalTrafficPolicy: Local`) and how many ready endpoints this node has for it.
pub fn health_check(cfg: &ProxyConfig, svc: &Service, slices: &[&EndpointSlice]) -> Option<(u16, usize)> {
    let spec = svc.spec.as_ref()?;
    if spec.type_.as_deref() != Some("LoadBalancer")
        || spec.external_traffic_policy.as_deref() != Some("Local")
    {
        return None;
    }
    let port = u16::try_from(spec.health_check_node_port?)
        .ok()
        .filter(|p| *p != 0)?;
    let mut local = BTreeSet::new();
    for slice in slices {
        for ep in &slice.endpoints {
            let ready = ep.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
            if ready && ep.node_name.as_deref() == Some(cfg.node_name.as_str()) {
                local.extend(ep.addresses.iter().cloned());
            }
        }
    }
    Some((port, local.len()))
}

/// The affinity set of an endpoint chain.
fn affinity_set(endpoint_chain: &str) -> String {
    format!("affinity-{}", endpoint_chain.trim_start_matches("endpoint-"))
}

/// The Service port's endpoints from its slices (those of `cfg.family`; ports matched by
/// name and protocol).
fn endpoints(cfg: &ProxyConfig, slices: &[&EndpointSlice], port_name: &str, protocol: &str) -> Vec<Endpoint> {
    let mut out: Vec<Endpoint> = Vec::new();
    for slice in slices {
        if slice.address_type != cfg.family.name() {
            continue;
        }
        let Some(port) = slice.ports.iter().flatten().find(|p| {
            p.name.as_deref().unwrap_or("") == port_name && p.protocol.as_deref().unwrap_or("TCP") == protocol
        }) else {
            continue;
        };
        let Some(port) = port.port.and_then(|p| u16::try_from(p).ok()) else {
            continue;
        };
        for ep in &slice.endpoints {
            let c = ep.conditions.as_ref();
            let ready = c.and_then(|c| c.ready).unwrap_or(true);
            let serving = c.and_then(|c| c.serving).unwrap_or(ready);
            let terminating = c.and_then(|c| c.terminating).unwrap_or(false);
            let local = ep.node_name.as_deref() == Some(cfg.node_name.as_str());
            for addr in &ep.addresses {
                let Ok(ip) = addr.parse::<IpAddr>() else {
                    continue;
                };
                if !cfg.mine(&ip) {
                    continue;
                }
                if out.iter().any(|e| e.ip == ip && e.port == port) {
                    continue; // the same endpoint in two slices (during a move)
                }
                out.push(Endpoint {
                    ip,
                    port,
                    ready,
                    serving,
                    terminating,
                    local,
                });
            }
        }
    }
    out.sort_by_key(|e| (e.ip, e.port));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::net::Ipv4Addr;

    fn cfg() -> ProxyConfig {
        ProxyConfig {
            table: "r8s".into(),
            family: AddrFamily::V4,
            service_cidrs: vec![
                (Ipv4Addr::new(10, 43, 0, 0).into(), 16),
                ("fd43::".parse().unwrap(), 112),
            ],
            cluster_cidrs: vec![
                (Ipv4Addr::new(10, 42, 0, 0).into(), 16),
                ("fd42::".parse().unwrap(), 56),
            ],
            masquerade_bit: 14,
            node_name: "n1".into(),
            local_service_ips: vec![Ipv4Addr::new(10, 43, 0, 10).into()],
            keep_on_exit: false,
        }
    }

    fn svc(v: serde_json::Value) -> Service {
        serde_json::from_value(v).unwrap()
    }

    fn slice(v: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(v).unwrap()
    }

    fn web() -> Service {
        svc(json!({"metadata": {"namespace": "default", "name": "web"},
            "spec": {"clusterIP": "10.43.0.20", "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}], "type": "NodePort"}}))
    }

    fn web_slice(eps: serde_json::Value) -> EndpointSlice {
        slice(
            json!({"metadata": {"namespace": "default", "name": "web-abc", "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}], "endpoints": eps}),
        )
    }

    /// The endpoint chains the random choice at the end of `chain` picks from.
    fn numgen_targets(r: &ServiceRules, chain: &str) -> Vec<String> {
        let mut out = Vec::new();
        for rule in r.chains[chain].iter().rev() {
            let e = rule;
            let random = e.iter().any(|x| matches!(x, Expr::NumgenRandom { .. }));
            match e.last() {
                Some(Expr::Verdict(Verdict::Goto(c)))
                    if c.starts_with("endpoint-") && (random || out.is_empty()) =>
                {
                    out.push(c.clone())
                }
                _ => break,
            }
            if !random && out.len() > 1 {
                break;
            }
        }
        out.reverse();
        out
    }

    /// The flat path's endpoints of `key`: (count, each bucket's `addr:port`).
    fn flat(r: &ServiceRules, counts: &'static str, map: &'static str, key: &[u8]) -> (u32, Vec<String>) {
        let Some(Some(Data::Value(n))) = r.elems.get(&(counts, key.to_vec())) else {
            panic!(
                "{key:?} is not in {counts}: {:?}",
                r.elems.keys().collect::<Vec<_>>()
            );
        };
        let n = u32::from_ne_bytes(n[..4].try_into().unwrap());
        let eps = (0..n)
            .map(|b| match &r.elems[&(map, bucket_key(key, b))] {
                Some(Data::Value(v)) => format!(
                    "{}:{}",
                    Ipv4Addr::new(v[0], v[1], v[2], v[3]),
                    u16::from_be_bytes([v[4], v[5]])
                ),
                other => panic!("{other:?}"),
            })
            .collect();
        (n, eps)
    }

    #[test]
    fn ready_endpoints_are_dispatched_from_the_cluster_ip_and_the_node_port() {
        let s = web_slice(json!([
            {"addresses": ["10.42.0.5"], "conditions": {"ready": true}, "nodeName": "n1"},
            {"addresses": ["10.42.1.7"], "conditions": {"ready": true}, "nodeName": "n2"},
            {"addresses": ["10.42.0.9"], "conditions": {"ready": false}, "nodeName": "n1"},
        ]));
        let r = service_rules(&cfg(), &web(), &[&s]);
        // The flat path: no chains, only map elements; this node's endpoint is a hairpin.
        assert!(r.chains.is_empty(), "{:?}", r.chains.keys());
        let both = vec!["10.42.0.5:8080".to_string(), "10.42.1.7:8080".to_string()];
        let key = ip_key(Ipv4Addr::new(10, 43, 0, 20).into(), 6, 80);
        assert_eq!(flat(&r, FLAT_COUNTS, FLAT_ENDPOINTS, &key), (2, both.clone()));
        assert_eq!(
            flat(
                &r,
                FLAT_NODEPORT_COUNTS,
                FLAT_NODEPORT_ENDPOINTS,
                &port_key(6, 30080)
            ),
            (2, both)
        );
        assert_eq!(r.hairpin, [IpAddr::from([10, 42, 0, 5])].into());
        assert!(!r.elems.contains_key(&(FLAT_EXTERNAL, key.clone())));
        assert!(!r
            .elems
            .keys()
            .any(|(s, _)| *s == NO_ENDPOINT_SERVICES || *s == SERVICE_IPS));

        // Session affinity needs per-Service chains: kube-proxy's layout.
        let mut sticky = web();
        sticky.spec.as_mut().unwrap().session_affinity = Some("ClientIP".into());
        let r = service_rules(&cfg(), &sticky, &[&s]);
        let chain = "service-default/web/tcp/http";
        assert_eq!(
            r.elems[&(SERVICE_IPS, key)],
            Some(Verdict::Goto(chain.into()).into())
        );
        assert_eq!(
            r.elems[&(SERVICE_NODEPORTS, port_key(6, 30080))],
            Some(Verdict::Goto("external-default/web/tcp/http".into()).into())
        );
        assert_eq!(
            numgen_targets(&r, chain),
            vec![
                "endpoint-default/web/tcp/http__10.42.0.5/8080",
                "endpoint-default/web/tcp/http__10.42.1.7/8080"
            ]
        );
        assert!(
            r.chains["endpoint-default/web/tcp/http__10.42.0.5/8080"].contains(&m::dnat(
                6,
                Ipv4Addr::new(10, 42, 0, 5),
                8080
            ))
        );
        assert!(!r.elems.keys().any(|(s, _)| s.starts_with("flat-")));
        assert!(r.hairpin.is_empty());
    }

    #[test]
    fn load_balancers_keeping_client_addresses_get_a_health_check() {
        let mut s = web();
        let sl = web_slice(json!([
            {"addresses": ["10.42.0.5"], "conditions": {"ready": true}, "nodeName": "n1"},
            {"addresses": ["10.42.0.6"], "conditions": {"ready": false}, "nodeName": "n1"},
            {"addresses": ["10.42.1.7"], "conditions": {"ready": true}, "nodeName": "n2"},
        ]));
        assert_eq!(health_check(&cfg(), &s, &[&sl]), None);
        let spec = s.spec.as_mut().unwrap();
        spec.type_ = Some("LoadBalancer".into());
        spec.external_traffic_policy = Some("Local".into());
        spec.health_check_node_port = Some(31999);
        assert_eq!(health_check(&cfg(), &s, &[&sl]), Some((31999, 1)));
        assert_eq!(health_check(&cfg(), &s, &[]), Some((31999, 0)));
        s.spec.as_mut().unwrap().external_traffic_policy = Some("Cluster".into());
        assert_eq!(health_check(&cfg(), &s, &[&sl]), None);
    }

    #[test]
    fn more_endpoints_than_the_flat_rules_count_take_the_chains() {
        let eps: Vec<_> = (0..=FLAT_MAX_ENDPOINTS)
            .map(|i| json!({"addresses": [format!("10.42.2.{i}")]}))
            .collect();
        let key = ip_key(Ipv4Addr::new(10, 43, 0, 20).into(), 6, 80);
        let r = service_rules(&cfg(), &web(), &[&web_slice(json!(eps))]);
        assert!(r.elems.contains_key(&(SERVICE_IPS, key.clone())));
        assert_eq!(
            numgen_targets(&r, "service-default/web/tcp/http").len(),
            FLAT_MAX_ENDPOINTS + 1
        );
        let r = service_rules(&cfg(), &web(), &[&web_slice(json!(eps[..FLAT_MAX_ENDPOINTS]))]);
        assert_eq!(
            flat(&r, FLAT_COUNTS, FLAT_ENDPOINTS, &key).0,
            FLAT_MAX_ENDPOINTS as u32
        );
    }

    #[test]
    fn no_endpoints_rejects_and_terminating_ones_are_the_fallback() {
        let r = service_rules(&cfg(), &web(), &[]);
        assert_eq!(
            r.elems[&(
                NO_ENDPOINT_SERVICES,
                ip_key(Ipv4Addr::new(10, 43, 0, 20).into(), 6, 80)
            )],
            Some(Verdict::Goto(REJECT_CHAIN.into()).into())
        );
        assert_eq!(
            r.elems[&(NO_ENDPOINT_NODEPORTS, port_key(6, 30080))],
            Some(Verdict::Goto(REJECT_CHAIN.into()).into())
        );
        assert!(r.chains.is_empty());
        let s = web_slice(json!([
            {"addresses": ["10.42.0.5"], "conditions": {"ready": false, "serving": true, "terminating": true}},
            {"addresses": ["10.42.0.6"], "conditions": {"ready": false, "serving": false, "terminating": true}},
        ]));
        let r = service_rules(&cfg(), &web(), &[&s]);
        assert_eq!(
            flat(
                &r,
                FLAT_COUNTS,
                FLAT_ENDPOINTS,
                &ip_key(Ipv4Addr::new(10, 43, 0, 20).into(), 6, 80)
            ),
            (1, vec!["10.42.0.5:8080".to_string()])
        );
    }

    #[test]
    fn headless_external_name_and_locally_served_addresses_are_left_alone() {
        let headless = svc(
            json!({"metadata": {"namespace": "d", "name": "h"}, "spec": {"clusterIP": "None", "ports": [{"port": 80}]}}),
        );
        assert_eq!(service_rules(&cfg(), &headless, &[]), ServiceRules::default());
        let ext = svc(
            json!({"metadata": {"namespace": "d", "name": "e"}, "spec": {"type": "ExternalName", "externalName": "example.com"}}),
        );
        assert_eq!(service_rules(&cfg(), &ext, &[]), ServiceRules::default());
        let dns = svc(
            json!({"metadata": {"namespace": "kube-system", "name": "kube-dns"}, "spec": {"clusterIP": "10.43.0.10", "ports": [{"port": 53, "protocol": "UDP"}]}}),
        );
        assert_eq!(service_rules(&cfg(), &dns, &[]), ServiceRules::default());
    }

    #[test]
    fn client_ip_affinity_adds_a_set_per_endpoint() {
        let mut s = web();
        let spec = s.spec.as_mut().unwrap();
        spec.session_affinity = Some("ClientIP".into());
        let sl = web_slice(json!([{"addresses": ["10.42.0.5"]}]));
        let r = service_rules(&cfg(), &s, &[&sl]);
        assert!(r
            .affinity_sets
            .contains("affinity-default/web/tcp/http__10.42.0.5/8080"));
        assert!(r.chains["endpoint-default/web/tcp/http__10.42.0.5/8080"]
            .iter()
            .any(|rule| matches!(rule,
            e if e.iter().any(|x| matches!(x, Expr::DynsetUpdate { timeout_ms: Some(10_800_000), .. })))));
        let chain = &r.chains["service-default/web/tcp/http"];
        assert!(chain.iter().any(|rule| matches!(rule, e if e.iter().any(|x| matches!(x, Expr::Lookup { set, .. } if set.starts_with("affinity-"))))));
    }

    #[test]
    fn internal_traffic_policy_local_uses_this_nodes_endpoints_or_drops() {
        let mut s = web();
        s.spec.as_mut().unwrap().internal_traffic_policy = Some("Local".into());
        let remote = web_slice(json!([{"addresses": ["10.42.1.7"], "nodeName": "n2"}]));
        let r = service_rules(&cfg(), &s, &[&remote]);
        assert_eq!(
            r.elems[&(
                NO_ENDPOINT_SERVICES,
                ip_key(Ipv4Addr::new(10, 43, 0, 20).into(), 6, 80)
            )],
            Some(Verdict::Drop.into())
        );
        let both = web_slice(json!([
            {"addresses": ["10.42.1.7"], "nodeName": "n2"},
            {"addresses": ["10.42.0.5"], "nodeName": "n1"},
        ]));
        let r = service_rules(&cfg(), &s, &[&both]);
        assert_eq!(
            r.elems[&(SERVICE_IPS, ip_key(Ipv4Addr::new(10, 43, 0, 20).into(), 6, 80))],
            Some(Verdict::Goto("local-default/web/tcp/http".into()).into())
        );
        assert_eq!(
            numgen_targets(&r, "local-default/web/tcp/http"),
            vec!["endpoint-default/web/tcp/http__10.42.0.5/8080"]
        );
    }

    #[test]
    fn external_ips_and_load_balancer_ingress_are_dispatched_and_masqueraded() {
        let mut s = web();
        s.spec.as_mut().unwrap().external_ips = Some(vec!["192.0.2.10".into()]);
        s.status = Some(
            serde_json::from_value(json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.11"}]}})).unwrap(),
        );
        let sl = web_slice(json!([{"addresses": ["10.42.0.5"], "nodeName": "n1"}]));
        let r = service_rules(&cfg(), &s, &[&sl]);
        for ip in [IpAddr::from([192, 0, 2, 10]), IpAddr::from([192, 0, 2, 11])] {
            let key = ip_key(ip, 6, 80);
            assert_eq!(
                flat(&r, FLAT_COUNTS, FLAT_ENDPOINTS, &key),
                (1, vec!["10.42.0.5:8080".to_string()])
            );
            assert_eq!(r.elems.get(&(FLAT_EXTERNAL, key)), Some(&None));
        }
        // With externalTrafficPolicy Local: the external chain.
        s.spec.as_mut().unwrap().external_traffic_policy = Some("Local".into());
        let r = service_rules(&cfg(), &s, &[&sl]);
        for ip in [IpAddr::from([192, 0, 2, 10]), IpAddr::from([192, 0, 2, 11])] {
            assert_eq!(
                r.elems[&(SERVICE_IPS, ip_key(ip, 6, 80))],
                Some(Verdict::Goto("external-default/web/tcp/http".into()).into())
            );
        }
    }
}
