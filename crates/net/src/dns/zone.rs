//! The cluster zone: the records the Kubernetes DNS specification (kubernetes/dns
//! `docs/specification.md`, schema 1.1.0) and CoreDNS's `kubernetes` plugin give a cluster's
//! Services and pods, answered from memory. Services and EndpointSlices are put in as the
//! informers see them; each change touches only that Service's entries.
//!
//! Names under `<zone>` (`cluster.local.`):
//! - `<svc>.<ns>.svc`: a ClusterIP Service's addresses (A/AAAA), a headless Service's ready
//!   endpoints' addresses, an ExternalName Service's CNAME;
//! - `<host>.<svc>.<ns>.svc`: a headless Service's endpoint by its hostname (or its address with
//!   dashes, as CoreDNS answers for endpoints without one);
//! - `_<port>._<proto>.<svc>.<ns>.svc`: SRV, one record per address behind the port;
//! - `<a-b-c-d>.<ns>.pod`: the address the name spells (CoreDNS's `pods insecure`, k3s's
//!   default);
//! - `dns-version`: TXT with the schema version;
//! - PTR under `in-addr.arpa.`/`ip6.arpa.` for Service cluster IPs and headless endpoints.
//!
//! A name that exists with no record of the asked type answers NODATA (NOERROR, empty, the
//! zone's SOA as authority); a name that does not exist, NXDOMAIN with the SOA.

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::RwLock;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::rdata::{A, AAAA, CNAME, NS, PTR, SOA, SRV, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// The schema version `dns-version.<zone>` answers.
pub const SCHEMA_VERSION: &str = "1.1.0";

/// The label an EndpointSlice names its Service with.
/// The label EndpointSlices name their Service with.
pub(crate) const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// A Service port as DNS sees it: SRV's `_<name>._<protocol>`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Port {
    name: String,
    /// Lowercase: `tcp`, `udp`, `sctp`.
    protocol: String,
    port: u16,
}

#[derive(Clone, Debug, PartialEq)]
enum Kind {
    ClusterIp(Vec<IpAddr>),
    Headless,
    ExternalName(Name),
}

#[derive(Clone, Debug)]
struct ServiceEntry {
    kind: Kind,
    ports: Vec<Port>,
}

#[derive(Clone, Debug, PartialEq)]
struct Endpoint {
    addresses: Vec<IpAddr>,
    hostname: Option<String>,
    ready: bool,
}

#[derive(Clone, Debug)]
struct SliceEntry {
    service: String,
    endpoints: Vec<Endpoint>,
    ports: Vec<Port>,
}

type Key = (String, String);

#[derive(Default)]
struct State {
    services: HashMap<Key, ServiceEntry>,
    /// By (namespace, slice name).
    slices: HashMap<Key, SliceEntry>,
    /// (namespace, service) → its slices' names.
    slices_of: HashMap<Key, BTreeSet<String>>,
    /// Services per namespace (a namespace with Services is an existing name).
    namespaces: HashMap<String, usize>,
    /// Reverse names, and which Service put each there.
    ptr: HashMap<IpAddr, Vec<Name>>,
    ptr_of: HashMap<Key, Vec<(IpAddr, Name)>>,
    /// The SOA serial: bumped on every change.
    serial: u32,
}

/// What the zone answers for one question.
#[derive(Debug, PartialEq)]
pub enum Answer {
    /// Ours: the response code and the answer records (the SOA goes in the authority section
    /// when there are none).
    Records(ResponseCode, Vec<Record>),
    /// Not in the zone (or a reverse name the cluster does not hold): ask upstream.
    NotOurs,
}

pub struct ClusterZone {
    domain: Name,
    ttl: u32,
    state: RwLock<State>,
}

fn lower(s: &str) -> String {
    s.to_ascii_lowercase()
}

fn ports_of(service: &Service) -> Vec<Port> {
    let ports = service.spec.as_ref().and_then(|s| s.ports.as_ref());
    ports
        .into_iter()
        .flatten()
        .filter_map(|p| {
            Some(Port {
                name: lower(p.name.as_deref().unwrap_or("")),
                protocol: lower(p.protocol.as_deref().unwrap_or("TCP")),
                port: u16::try_from(p.port).ok()?,
            })
        })
        .collect()
}

/// An address written with dashes (`10-42-0-5`, `fd00--5`), as pod and endpoint names spell
/// them.
fn from_dashes(label: &str) -> Option<IpAddr> {
    if let Ok(v4) = label.replace('-', ".").parse::<Ipv4Addr>() {
        return Some(IpAddr::V4(v4));
    }
    label.replace('-', ":").parse::<Ipv6Addr>().ok().map(IpAddr::V6)
}

fn dashed(ip: &IpAddr) -> String {
    match ip {
        IpAddr::V4(a) => a.to_string().replace('.', "-"),
        IpAddr::V6(a) => a.to_string().replace(':', "-"),
    }
}

/// The name a PTR query asks about, if it is a whole address (`5.0.42.10.in-addr.arpa.`).
pub fn reverse_address(name: &Name) -> Option<IpAddr> {
    let labels: Vec<String> = name.iter().map(|l| lower(&String::from_utf8_lossy(l))).collect();
    match labels.as_slice() {
        [a, b, c, d, in_addr, arpa] if in_addr == "in-addr" && arpa == "arpa" => {
            format!("{d}.{c}.{b}.{a}").parse().ok().map(IpAddr::V4)
        }
        [nibbles @ .., ip6, arpa] if ip6 == "ip6" && arpa == "arpa" && nibbles.len() == 32 => {
            let hex: String = nibbles.iter().rev().map(String::as_str).collect();
            let mut groups = Vec::new();
            for i in 0..8 {
                groups.push(hex.get(i * 4..i * 4 + 4)?.to_owned());
            }
            groups.join(":").parse().ok().map(IpAddr::V6)
        }
        _ => None,
    }
}

impl ClusterZone {
    /// The zone `domain` (e.g. `cluster.local`), its records living `ttl` seconds.
    pub fn new(domain: &str, ttl: u32) -> Result<Self, String> {
        let mut domain = Name::from_ascii(domain).map_err(|e| format!("cluster domain {domain:?}: {e}"))?;
        domain.set_fqdn(true);
        Ok(Self {
            domain: domain.to_lowercase(),
            ttl,
            state: RwLock::new(State::default()),
        })
    }

    pub fn domain(&self) -> &Name {
        &self.domain
    }

    fn name(&self, labels: &[&str]) -> Name {
        let relative = Name::from_labels(labels.iter().map(|l| l.as_bytes())).unwrap_or_default();
        relative
            .append_domain(&self.domain)
            .unwrap_or_else(|_| self.domain.clone())
    }

    /// Put in (or replace) a Service.
    pub fn set_service(&self, service: &Service) {
        let (Some(ns), Some(name)) = (
            service.metadata.namespace.as_deref(),
            service.metadata.name.as_deref(),
        ) else {
            return;
        };
        let spec = service.spec.clone().unwrap_or_default();
        let kind = if spec.type_.as_deref() == Some("ExternalName") {
            match spec
                .external_name
                .as_deref()
                .and_then(|n| Name::from_ascii(n).ok())
            {
                Some(mut target) => {
                    target.set_fqdn(true);
                    Kind::ExternalName(target)
                }
                None => return self.remove_service(ns, name),
            }
        } else if spec.cluster_ip.as_deref() == Some("None") {
            Kind::Headless
        } else {
            let ips: Vec<IpAddr> = spec
                .cluster_ips
                .clone()
                .unwrap_or_else(|| spec.cluster_ip.clone().into_iter().collect())
                .iter()
                .filter_map(|ip| ip.parse().ok())
                .collect();
            if ips.is_empty() {
                // Not allocated yet: nothing to answer until it is.
                return self.remove_service(ns, name);
            }
            Kind::ClusterIp(ips)
        };
        let started = std::time::SystemTime::now();
        let began = std::time::Instant::now();
        // The journey's `dns.update` stage (`r8s trace`): what the name answers now.
        let answers = match &kind {
            Kind::ClusterIp(ips) => ips.iter().map(|ip| ip.to_string()).collect::<Vec<_>>().join(", "),
            Kind::Headless => "its ready endpoints (headless)".to_owned(),
            Kind::ExternalName(target) => format!("CNAME {target}"),
        };
        let entry = ServiceEntry {
            kind,
            ports: ports_of(service),
        };
        let key = (lower(ns), lower(name));
        {
            let mut st = self.state.write().unwrap_or_else(|e| e.into_inner());
            if st.services.insert(key.clone(), entry).is_none() {
                *st.namespaces.entry(key.0.clone()).or_default() += 1;
            }
            self.reindex(&mut st, &key);
        }
        let fqdn = self.name(&[&key.1, &key.0, "svc"]);
        r8s_trace::keep_stage(
            "dns",
            "dns.update",
            service.metadata.uid.as_deref().unwrap_or(""),
            started,
            began.elapsed(),
            vec![
                ("object", format!("Service {ns}/{name}")),
                ("decision", format!("{fqdn} answers {answers}")),
            ],
        );
    }

    pub fn remove_service(&self, ns: &str, name: &str) {
        let mut st = self.state.write().unwrap_or_else(|e| e.into_inner());
        let key = (lower(ns), lower(name));
        if st.services.remove(&key).is_some() {
            if let Some(n) = st.namespaces.get_mut(&key.0) {
                *n -= 1;
                if *n == 0 {
                    st.namespaces.remove(&key.0);
                }
            }
        }
        self.reindex(&mut st, &key);
    }

    /// Put in (or replace) an EndpointSlice.
    pub fn set_slice(&self, slice: &EndpointSlice) {
        let (Some(ns), Some(name)) = (
            slice.metadata.namespace.as_deref(),
            slice.metadata.name.as_deref(),
        ) else {
            return;
        };
        let service = slice
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SERVICE_NAME_LABEL))
            .map(|s| lower(s));
        let Some(service) = service.filter(|_| matches!(slice.address_type.as_str(), "IPv4" | "IPv6")) else {
            return self.remove_slice(ns, name);
        };
        let endpoints = slice
            .endpoints
            .iter()
            .map(|e| Endpoint {
                addresses: e.addresses.iter().filter_map(|a| a.parse().ok()).collect(),
                hostname: e.hostname.as_deref().map(lower),
                // An unknown state counts as ready (the API's rule for consumers).
                ready: e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true),
            })
            .collect();
        let ports = slice
            .ports
            .iter()
            .flatten()
            .filter_map(|p| {
                Some(Port {
                    name: lower(p.name.as_deref().unwrap_or("")),
                    protocol: lower(p.protocol.as_deref().unwrap_or("TCP")),
                    port: u16::try_from(p.port?).ok()?,
                })
            })
            .collect();
        let mut st = self.state.write().unwrap_or_else(|e| e.into_inner());
        let key = (lower(ns), lower(name));
        let old = st.slices.insert(
            key.clone(),
            SliceEntry {
                service: service.clone(),
                endpoints,
                ports,
            },
        );
        if let Some(old) = old.filter(|o| o.service != service) {
            let old_service = (key.0.clone(), old.service);
            if let Some(set) = st.slices_of.get_mut(&old_service) {
                set.remove(&key.1);
            }
            self.reindex(&mut st, &old_service);
        }
        let service_key = (key.0.clone(), service);
        st.slices_of.entry(service_key.clone()).or_default().insert(key.1);
        self.reindex(&mut st, &service_key);
    }

    pub fn remove_slice(&self, ns: &str, name: &str) {
        let mut st = self.state.write().unwrap_or_else(|e| e.into_inner());
        let key = (lower(ns), lower(name));
        if let Some(old) = st.slices.remove(&key) {
            let service_key = (key.0.clone(), old.service);
            if let Some(set) = st.slices_of.get_mut(&service_key) {
                set.remove(&key.1);
                if set.is_empty() {
                    st.slices_of.remove(&service_key);
                }
            }
            self.reindex(&mut st, &service_key);
        }
    }

    /// Rebuild one Service's reverse names, and bump the serial.
    fn reindex(&self, st: &mut State, key: &Key) {
        st.serial = st.serial.wrapping_add(1);
        for (ip, name) in st.ptr_of.remove(key).unwrap_or_default() {
            if let Some(names) = st.ptr.get_mut(&ip) {
                names.retain(|n| *n != name);
                if names.is_empty() {
                    st.ptr.remove(&ip);
                }
            }
        }
        let Some(svc) = st.services.get(key) else { return };
        let svc_name = self.name(&[&key.1, &key.0, "svc"]);
        let mut entries = Vec::new();
        match &svc.kind {
            Kind::ClusterIp(ips) => entries.extend(ips.iter().map(|ip| (*ip, svc_name.clone()))),
            Kind::Headless => {
                for ep in endpoints(st, key).filter(|e| e.ready) {
                    let Some(host) = &ep.hostname else { continue };
                    let name = self.name(&[host, &key.1, &key.0, "svc"]);
                    entries.extend(ep.addresses.iter().map(|ip| (*ip, name.clone())));
                }
            }
            Kind::ExternalName(_) => {}
        }
        for (ip, name) in &entries {
            st.ptr.entry(*ip).or_default().push(name.clone());
        }
        if !entries.is_empty() {
            st.ptr_of.insert(key.clone(), entries);
        }
    }

    fn soa(&self, serial: u32) -> Record {
        let soa = SOA::new(
            self.name(&["ns", "dns"]),
            self.name(&["hostmaster"]),
            serial,
            7200,
            1800,
            86400,
            self.ttl,
        );
        Record::from_rdata(self.domain.clone(), self.ttl, RData::SOA(soa))
    }

    /// The SOA record the authority section carries with an empty answer.
    pub fn authority(&self) -> Record {
        let serial = self.state.read().unwrap_or_else(|e| e.into_inner()).serial;
        self.soa(serial)
    }

    /// Answer one question (`name` of any case).
    pub fn answer(&self, name: &Name, qtype: RecordType) -> Answer {
        let name = name.to_lowercase();
        if let Some(ip) = reverse_address(&name) {
            let st = self.state.read().unwrap_or_else(|e| e.into_inner());
            return match st.ptr.get(&ip) {
                Some(names) if qtype == RecordType::PTR || qtype == RecordType::ANY => Answer::Records(
                    ResponseCode::NoError,
                    names
                        .iter()
                        .map(|n| Record::from_rdata(name.clone(), self.ttl, RData::PTR(PTR(n.clone()))))
                        .collect(),
                ),
                Some(_) => Answer::Records(ResponseCode::NoError, Vec::new()),
                None => Answer::NotOurs,
            };
        }
        if !self.domain.zone_of(&name) {
            return Answer::NotOurs;
        }
        let relative = usize::from(name.num_labels() - self.domain.num_labels());
        let labels: Vec<String> = name
            .iter()
            .take(relative)
            .map(|l| String::from_utf8_lossy(l).into_owned())
            .collect();
        let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
        let st = self.state.read().unwrap_or_else(|e| e.into_inner());
        let nodata = || Answer::Records(ResponseCode::NoError, Vec::new());
        let nxdomain = || Answer::Records(ResponseCode::NXDomain, Vec::new());
        let records = |rdata: Vec<RData>| {
            let rs = rdata
                .into_iter()
                .map(|d| Record::from_rdata(name.clone(), self.ttl, d))
                .collect();
            Answer::Records(ResponseCode::NoError, rs)
        };
        match labels.as_slice() {
            [] => match qtype {
                RecordType::SOA => records(vec![self.soa(st.serial).data().clone()]),
                RecordType::NS => records(vec![RData::NS(NS(self.name(&["ns", "dns"])))]),
                _ => nodata(),
            },
            ["dns-version"] => match qtype {
                RecordType::TXT => records(vec![RData::TXT(TXT::new(vec![SCHEMA_VERSION.into()]))]),
                _ => nodata(),
            },
            ["svc"] | ["pod"] => nodata(),
            [ns, "svc"] if st.namespaces.contains_key(*ns) => nodata(),
            [_, "pod"] => nodata(),
            [address, _, "pod"] => match from_dashes(address) {
                Some(ip) => records(address_records(&[ip], qtype)),
                None => nxdomain(),
            },
            [svc, ns, "svc"] => {
                let key = (ns.to_string(), svc.to_string());
                let Some(entry) = st.services.get(&key) else {
                    return nxdomain();
                };
                match &entry.kind {
                    Kind::ExternalName(target) => records(vec![RData::CNAME(CNAME(target.clone()))]),
                    Kind::ClusterIp(ips) => match qtype {
                        RecordType::SRV => records(
                            entry
                                .ports
                                .iter()
                                .map(|p| RData::SRV(SRV::new(0, 100, p.port, name.clone())))
                                .collect(),
                        ),
                        _ => records(address_records(ips, qtype)),
                    },
                    Kind::Headless => {
                        let ready: Vec<IpAddr> = endpoints(&st, &key)
                            .filter(|e| e.ready)
                            .flat_map(|e| e.addresses.iter().copied())
                            .collect::<BTreeSet<_>>()
                            .into_iter()
                            .collect();
                        records(address_records(&ready, qtype))
                    }
                }
            }
            [port, proto, svc, ns, "svc"] if port.starts_with('_') && proto.starts_with('_') => {
                let key = (ns.to_string(), svc.to_string());
                let Some(entry) = st.services.get(&key) else {
                    return nxdomain();
                };
                let (port, proto) = (&port[1..], &proto[1..]);
                let service_name = self.name(&[svc, ns, "svc"]);
                match &entry.kind {
                    Kind::ExternalName(_) => nxdomain(),
                    Kind::ClusterIp(_) => {
                        match entry.ports.iter().find(|p| p.name == port && p.protocol == proto) {
                            Some(p) if qtype == RecordType::SRV || qtype == RecordType::ANY => {
                                records(vec![RData::SRV(SRV::new(0, 100, p.port, service_name))])
                            }
                            Some(_) => nodata(),
                            None => nxdomain(),
                        }
                    }
                    Kind::Headless => {
                        let mut targets = Vec::new();
                        for slice in slices(&st, &key) {
                            let Some(p) = slice.ports.iter().find(|p| p.name == port && p.protocol == proto)
                            else {
                                continue;
                            };
                            for ep in slice.endpoints.iter().filter(|e| e.ready) {
                                for ip in &ep.addresses {
                                    let host = ep.hostname.clone().unwrap_or_else(|| dashed(ip));
                                    targets.push((p.port, self.name(&[&host, svc, ns, "svc"])));
                                }
                            }
                        }
                        if targets.is_empty() {
                            return nxdomain();
                        }
                        if qtype != RecordType::SRV && qtype != RecordType::ANY {
                            return nodata();
                        }
                        targets.sort();
                        targets.dedup();
                        // The weights share 100, as CoreDNS gives them.
                        let weight = (100 / targets.len()).max(1) as u16;
                        records(
                            targets
                                .into_iter()
                                .map(|(port, target)| RData::SRV(SRV::new(0, weight, port, target)))
                                .collect(),
                        )
                    }
                }
            }
            [host, svc, ns, "svc"] => {
                let key = (ns.to_string(), svc.to_string());
                if !matches!(st.services.get(&key).map(|e| &e.kind), Some(Kind::Headless)) {
                    return nxdomain();
                }
                let by_address = from_dashes(host);
                let ips: Vec<IpAddr> = endpoints(&st, &key)
                    .filter(|e| e.ready)
                    .flat_map(|e| {
                        let named = e.hostname.as_deref() == Some(*host);
                        e.addresses
                            .iter()
                            .filter(move |ip| named || (e.hostname.is_none() && Some(**ip) == by_address))
                            .copied()
                    })
                    .collect();
                if ips.is_empty() {
                    return nxdomain();
                }
                records(address_records(&ips, qtype))
            }
            _ => nxdomain(),
        }
    }
}

/// A and AAAA records of `ips` for a question of `qtype` (none for other types: NODATA).
fn address_records(ips: &[IpAddr], qtype: RecordType) -> Vec<RData> {
    ips.iter()
        .filter_map(|ip| match (ip, qtype) {
            (IpAddr::V4(a), RecordType::A | RecordType::ANY) => Some(RData::A(A(*a))),
            (IpAddr::V6(a), RecordType::AAAA | RecordType::ANY) => Some(RData::AAAA(AAAA(*a))),
            _ => None,
        })
        .collect()
}

fn slices<'a>(st: &'a State, key: &Key) -> impl Iterator<Item = &'a SliceEntry> + 'a {
    let ns = key.0.clone();
    st.slices_of
        .get(key)
        .into_iter()
        .flatten()
        .filter_map(move |s| st.slices.get(&(ns.clone(), s.clone())))
}

fn endpoints<'a>(st: &'a State, key: &Key) -> impl Iterator<Item = &'a Endpoint> + 'a {
    slices(st, key).flat_map(|s| s.endpoints.iter())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(v: serde_json::Value) -> Service {
        serde_json::from_value(v).unwrap()
    }

    fn slice(v: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(v).unwrap()
    }

    fn name(s: &str) -> Name {
        Name::from_ascii(s).unwrap()
    }

    fn zone() -> ClusterZone {
        let z = ClusterZone::new("cluster.local", 5).unwrap();
        z.set_service(&service(json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"clusterIP": "10.43.0.20", "clusterIPs": ["10.43.0.20"],
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP"}, {"name": "dns", "port": 53, "protocol": "UDP"}]}
        })));
        z.set_service(&service(json!({
            "metadata": {"name": "db", "namespace": "prod"},
            "spec": {"clusterIP": "None", "ports": [{"name": "pg", "port": 5432}]}
        })));
        z.set_slice(&slice(json!({
            "metadata": {"name": "db-abc", "namespace": "prod", "labels": {"kubernetes.io/service-name": "db"}},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.42.0.5"], "hostname": "db-0", "conditions": {"ready": true}},
                {"addresses": ["10.42.0.6"], "conditions": {"ready": true}},
                {"addresses": ["10.42.0.7"], "hostname": "db-2", "conditions": {"ready": false}}
            ],
            "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}]
        })));
        z.set_service(&service(json!({
            "metadata": {"name": "ext", "namespace": "default"},
            "spec": {"type": "ExternalName", "externalName": "www.example.org"}
        })));
        z
    }

    fn rdata(a: Answer) -> (ResponseCode, Vec<String>) {
        match a {
            Answer::Records(code, rs) => (code, rs.iter().map(|r| r.data().to_string()).collect()),
            Answer::NotOurs => panic!("not ours"),
        }
    }

    #[test]
    fn cluster_ip_services_answer_a_srv_and_ptr() {
        let z = zone();
        assert_eq!(
            rdata(z.answer(&name("web.default.svc.cluster.local."), RecordType::A)),
            (ResponseCode::NoError, vec!["10.43.0.20".to_string()])
        );
        // Any case, as DNS names are.
        assert_eq!(
            rdata(z.answer(&name("WEB.Default.svc.cluster.local."), RecordType::A)).1,
            vec!["10.43.0.20"]
        );
        // The name exists without an AAAA: NODATA, not NXDOMAIN.
        assert_eq!(
            rdata(z.answer(&name("web.default.svc.cluster.local."), RecordType::AAAA)),
            (ResponseCode::NoError, vec![])
        );
        assert_eq!(
            rdata(z.answer(
                &name("_http._tcp.web.default.svc.cluster.local."),
                RecordType::SRV
            ))
            .1,
            vec!["0 100 80 web.default.svc.cluster.local."]
        );
        assert_eq!(
            rdata(z.answer(&name("_dns._udp.web.default.svc.cluster.local."), RecordType::SRV)).1,
            vec!["0 100 53 web.default.svc.cluster.local."]
        );
        assert_eq!(
            rdata(z.answer(
                &name("_http._udp.web.default.svc.cluster.local."),
                RecordType::SRV
            ))
            .0,
            ResponseCode::NXDomain
        );
        assert_eq!(
            rdata(z.answer(&name("20.0.43.10.in-addr.arpa."), RecordType::PTR)).1,
            vec!["web.default.svc.cluster.local."]
        );
        // A reverse name the cluster does not hold goes upstream.
        assert_eq!(
            z.answer(&name("1.2.0.192.in-addr.arpa."), RecordType::PTR),
            Answer::NotOurs
        );
    }

    #[test]
    fn headless_services_answer_their_ready_endpoints() {
        let z = zone();
        assert_eq!(
            rdata(z.answer(&name("db.prod.svc.cluster.local."), RecordType::A)).1,
            vec!["10.42.0.5", "10.42.0.6"]
        );
        assert_eq!(
            rdata(z.answer(&name("db-0.db.prod.svc.cluster.local."), RecordType::A)).1,
            vec!["10.42.0.5"]
        );
        // An endpoint without a hostname by its dashed address; a not-ready one not at all.
        assert_eq!(
            rdata(z.answer(&name("10-42-0-6.db.prod.svc.cluster.local."), RecordType::A)).1,
            vec!["10.42.0.6"]
        );
        assert_eq!(
            rdata(z.answer(&name("db-2.db.prod.svc.cluster.local."), RecordType::A)).0,
            ResponseCode::NXDomain
        );
        assert_eq!(
            rdata(z.answer(&name("_pg._tcp.db.prod.svc.cluster.local."), RecordType::SRV)).1,
            vec![
                "0 50 5432 10-42-0-6.db.prod.svc.cluster.local.",
                "0 50 5432 db-0.db.prod.svc.cluster.local."
            ]
        );
        assert_eq!(
            rdata(z.answer(&name("5.0.42.10.in-addr.arpa."), RecordType::PTR)).1,
            vec!["db-0.db.prod.svc.cluster.local."]
        );
        // The endpoint turns ready: it is answered, and its PTR appears.
        z.set_slice(&slice(json!({
            "metadata": {"name": "db-abc", "namespace": "prod", "labels": {"kubernetes.io/service-name": "db"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.42.0.7"], "hostname": "db-2"}],
            "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}]
        })));
        assert_eq!(
            rdata(z.answer(&name("db.prod.svc.cluster.local."), RecordType::A)).1,
            vec!["10.42.0.7"]
        );
        assert_eq!(
            z.answer(&name("5.0.42.10.in-addr.arpa."), RecordType::PTR),
            Answer::NotOurs
        );
        z.remove_slice("prod", "db-abc");
        assert_eq!(
            rdata(z.answer(&name("db.prod.svc.cluster.local."), RecordType::A)),
            (ResponseCode::NoError, vec![])
        );
    }

    #[test]
    fn external_names_pods_and_the_rest_of_the_zone() {
        let z = zone();
        assert_eq!(
            rdata(z.answer(&name("ext.default.svc.cluster.local."), RecordType::A)).1,
            vec!["www.example.org."]
        );
        assert_eq!(
            rdata(z.answer(&name("10-42-1-9.anything.pod.cluster.local."), RecordType::A)).1,
            vec!["10.42.1.9"]
        );
        assert_eq!(
            rdata(z.answer(&name("dns-version.cluster.local."), RecordType::TXT)).1,
            vec!["1.1.0"]
        );
        // Empty non-terminals exist; unknown names do not.
        assert_eq!(
            rdata(z.answer(&name("default.svc.cluster.local."), RecordType::A)).0,
            ResponseCode::NoError
        );
        assert_eq!(
            rdata(z.answer(&name("svc.cluster.local."), RecordType::A)).0,
            ResponseCode::NoError
        );
        assert_eq!(
            rdata(z.answer(&name("nope.svc.cluster.local."), RecordType::A)).0,
            ResponseCode::NXDomain
        );
        assert_eq!(
            rdata(z.answer(&name("nope.default.svc.cluster.local."), RecordType::A)).0,
            ResponseCode::NXDomain
        );
        // What a pod's search path makes of an outside name.
        assert_eq!(
            rdata(z.answer(&name("example.com.default.svc.cluster.local."), RecordType::A)).0,
            ResponseCode::NXDomain
        );
        assert_eq!(z.answer(&name("example.com."), RecordType::A), Answer::NotOurs);
        assert_eq!(
            rdata(z.answer(&name("cluster.local."), RecordType::SOA)).1[0]
                .split(' ')
                .take(2)
                .collect::<Vec<_>>(),
            vec!["ns.dns.cluster.local.", "hostmaster.cluster.local."]
        );
        // Deleted: gone, with its reverse name.
        z.remove_service("default", "web");
        assert_eq!(
            rdata(z.answer(&name("web.default.svc.cluster.local."), RecordType::A)).0,
            ResponseCode::NXDomain
        );
        assert_eq!(
            z.answer(&name("20.0.43.10.in-addr.arpa."), RecordType::PTR),
            Answer::NotOurs
        );
    }

    #[test]
    fn reverse_names_parse_for_both_families() {
        assert_eq!(
            reverse_address(&name("4.3.2.1.in-addr.arpa.")),
            Some("1.2.3.4".parse().unwrap())
        );
        let v6 = "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa.";
        assert_eq!(reverse_address(&name(v6)), Some("fd00::1".parse().unwrap()));
        assert_eq!(reverse_address(&name("3.2.1.in-addr.arpa.")), None);
    }
}
