//! NetworkPolicies → what the node's table holds (pure; no kernel here). For every pod on this
//! node that a policy isolates (for ingress, egress or both), a chain of its allowed traffic:
//! one rule per (policy rule, port, peer), each ending in `return` (allowed), and a final
//! `drop`. Pod-selector peers become named sets of pod addresses (shared when equal); ipBlock
//! peers prefix matches with their exceptions; named ports resolve on the pod that has them
//! (ingress: the isolated pod itself; egress: each destination pod that names the port).
//! Semantics as upstream's NetworkPolicy API: a pod is isolated in a direction when a policy
//! of its namespace selects it with that policy type; its allowed traffic is the union of
//! those policies' rules; an empty `from`/`to` or `ports` matches everything.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;

use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use r8s_api::selector::{label_selector_as_selector, Selector};

use crate::nft::expr::{m, REG_1};
use crate::nft::{CmpOp, Expr, Verdict};

pub type Rule = Vec<Expr>;

/// A pod as policies see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodInfo {
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub ip: Ipv4Addr,
    /// Its containers' named ports: (name, protocol number, port).
    pub named_ports: Vec<(String, u8, u16)>,
    /// On this node (its traffic is policed here).
    pub local: bool,
}

impl PodInfo {
    pub fn from_pod(pod: &k8s_openapi::api::core::v1::Pod, node: &str, ip: Option<Ipv4Addr>) -> Option<Self> {
        let ip = ip.or_else(|| pod.status.as_ref()?.pod_ip.as_ref()?.parse().ok())?;
        let spec = pod.spec.as_ref()?;
        if spec.host_network == Some(true) {
            return None;
        }
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            return None;
        }
        let named_ports = spec
            .containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .filter_map(|p| {
                Some((
                    p.name.clone()?,
                    proto_number(p.protocol.as_deref())?,
                    u16::try_from(p.container_port).ok()?,
                ))
            })
            .collect();
        Some(PodInfo {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            ip,
            named_ports,
            local: spec.node_name.as_deref() == Some(node),
        })
    }
}

pub fn proto_number(p: Option<&str>) -> Option<u8> {
    match p.unwrap_or("TCP") {
        "TCP" => Some(6),
        "UDP" => Some(17),
        "SCTP" => Some(132),
        _ => None,
    }
}

/// What the table holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Program {
    /// Named address sets.
    pub sets: BTreeMap<String, Vec<Ipv4Addr>>,
    /// Per isolated pod and direction, its chain.
    pub chains: BTreeMap<String, Vec<Rule>>,
    /// Pod address → its ingress chain (traffic to it) / egress chain (traffic from it).
    pub ingress: BTreeMap<Ipv4Addr, String>,
    pub egress: BTreeMap<Ipv4Addr, String>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Dir {
    Ingress,
    Egress,
}

impl Dir {
    fn addr(self) -> Expr {
        match self {
            Dir::Ingress => m::ip_saddr(REG_1),
            Dir::Egress => m::ip_daddr(REG_1),
        }
    }
}

/// A policy's types: `policyTypes`, else as upstream defaults them (Ingress, and Egress when
/// it has egress rules).
fn types(p: &NetworkPolicy) -> (bool, bool) {
    let Some(spec) = p.spec.as_ref() else {
        return (false, false);
    };
    match &spec.policy_types {
        Some(t) if !t.is_empty() => (t.iter().any(|x| x == "Ingress"), t.iter().any(|x| x == "Egress")),
        _ => (true, spec.egress.is_some()),
    }
}

struct Builder<'a> {
    pods: &'a [PodInfo],
    namespaces: &'a HashMap<String, BTreeMap<String, String>>,
    sets: BTreeMap<Vec<Ipv4Addr>, String>,
    /// The policy's own prefix for its sets' names.
    prefix: String,
}

/// A resolved port entry: the destination address it is bound to (an egress named port),
/// the protocol (0: any) and the port range (None: any).
type PortMatch = (Option<Ipv4Addr>, u8, Option<(u16, u16)>);

/// A rule's peers and ports.
type RuleParts<'a> = (
    Option<&'a Vec<NetworkPolicyPeer>>,
    Option<&'a Vec<NetworkPolicyPort>>,
);

/// One peer's match: the expressions, or None when it matches no address.
enum PeerMatch {
    Any,
    Exprs(Vec<Expr>),
}

impl Builder<'_> {
    fn set_for(&mut self, mut ips: Vec<Ipv4Addr>) -> String {
        ips.sort();
        ips.dedup();
        let n = self.sets.len();
        let prefix = &self.prefix;
        self.sets
            .entry(ips)
            .or_insert_with(|| format!("{prefix}-{n}"))
            .clone()
    }

    /// The pods a selector peer names (policy namespace `ns`).
    fn peer_pods(&self, ns: &str, peer: &NetworkPolicyPeer) -> Vec<&PodInfo> {
        let ns_sel: Option<Selector> = peer
            .namespace_selector
            .as_ref()
            .map(|s| label_selector_as_selector(Some(s)).unwrap_or_else(|_| Selector::nothing()));
        let pod_sel: Selector = match &peer.pod_selector {
            Some(s) => label_selector_as_selector(Some(s)).unwrap_or_else(|_| Selector::nothing()),
            None => Selector::new(Vec::new()),
        };
        self.pods
            .iter()
            .filter(|p| match &ns_sel {
                None => p.namespace == ns,
                Some(sel) => {
                    let empty = BTreeMap::new();
                    sel.matches(self.namespaces.get(&p.namespace).unwrap_or(&empty))
                }
            })
            .filter(|p| pod_sel.matches(&p.labels))
            .collect()
    }

    fn peer(&mut self, ns: &str, dir: Dir, peer: &NetworkPolicyPeer) -> Option<PeerMatch> {
        if let Some(block) = &peer.ip_block {
            let (net, len) = crate::overlay::parse_cidr(&block.cidr)?;
            let mut v = m::ip_in(dir.addr(), net, len, CmpOp::Eq);
            for e in block.except.iter().flatten() {
                if let Some((en, el)) = crate::overlay::parse_cidr(e) {
                    v.extend(m::ip_in(dir.addr(), en, el, CmpOp::Neq));
                }
            }
            return Some(PeerMatch::Exprs(v));
        }
        let ips: Vec<Ipv4Addr> = self.peer_pods(ns, peer).iter().map(|p| p.ip).collect();
        if ips.is_empty() {
            return None;
        }
        let set = self.set_for(ips);
        Some(PeerMatch::Exprs(vec![
            dir.addr(),
            Expr::Lookup {
                set,
                sreg: REG_1,
                dreg: None,
                invert: false,
            },
        ]))
    }

    /// A port entry as matches: (destination address it is bound to, protocol, port range).
    fn ports(
        &self,
        dir: Dir,
        pod: &PodInfo,
        candidates: &[&PodInfo],
        p: &NetworkPolicyPort,
    ) -> Vec<PortMatch> {
        let Some(proto) = proto_number(p.protocol.as_deref()) else {
            return vec![];
        };
        match &p.port {
            None => vec![(None, proto, None)],
            Some(IntOrString::Int(n)) => {
                let Ok(first) = u16::try_from(*n) else {
                    return vec![];
                };
                let last = p.end_port.and_then(|e| u16::try_from(e).ok()).unwrap_or(first);
                if last < first {
                    return vec![];
                }
                vec![(None, proto, Some((first, last)))]
            }
            Some(IntOrString::String(name)) => {
                let named = |q: &PodInfo| {
                    q.named_ports
                        .iter()
                        .find(|(n, pr, _)| n == name && *pr == proto)
                        .map(|(_, _, port)| *port)
                };
                match dir {
                    Dir::Ingress => named(pod)
                        .map(|port| (None, proto, Some((port, port))))
                        .into_iter()
                        .collect(),
                    Dir::Egress => candidates
                        .iter()
                        .filter_map(|q| named(q).map(|port| (Some(q.ip), proto, Some((port, port)))))
                        .collect(),
                }
            }
        }
    }

    /// The allow rules of `policy`'s rules in `dir` for local pod `pod`.
    fn rules(&mut self, policy: &NetworkPolicy, dir: Dir, pod: &PodInfo, out: &mut Vec<Rule>) {
        let ns = policy.metadata.namespace.clone().unwrap_or_default();
        let Some(spec) = policy.spec.as_ref() else { return };
        let rules: Vec<RuleParts<'_>> = match dir {
            Dir::Ingress => spec
                .ingress
                .iter()
                .flatten()
                .map(|r| (r.from.as_ref(), r.ports.as_ref()))
                .collect(),
            Dir::Egress => spec
                .egress
                .iter()
                .flatten()
                .map(|r| (r.to.as_ref(), r.ports.as_ref()))
                .collect(),
        };
        for (peers, ports) in rules {
            let peers: Vec<&NetworkPolicyPeer> = peers.into_iter().flatten().collect();
            // The peers' matches (none given: any address).
            let matches: Vec<PeerMatch> = if peers.is_empty() {
                vec![PeerMatch::Any]
            } else {
                peers.iter().filter_map(|p| self.peer(&ns, dir, p)).collect()
            };
            // Egress named ports resolve on the pods the rule reaches.
            let candidates: Vec<&PodInfo> = if peers.is_empty() {
                self.pods.iter().collect()
            } else {
                peers
                    .iter()
                    .filter(|p| p.ip_block.is_none())
                    .flat_map(|p| self.peer_pods(&ns, p))
                    .collect()
            };
            let port_list: Vec<PortMatch> = match ports {
                Some(ps) if !ps.is_empty() => ps
                    .iter()
                    .flat_map(|p| self.ports(dir, pod, &candidates, p))
                    .collect(),
                _ => vec![(None, 0, None)],
            };
            for pm in &matches {
                for (bound, proto, range) in &port_list {
                    let mut r: Rule = match pm {
                        PeerMatch::Any => vec![],
                        PeerMatch::Exprs(e) => e.clone(),
                    };
                    if let Some(ip) = bound {
                        r.extend(m::ip_in(m::ip_daddr(REG_1), *ip, 32, CmpOp::Eq));
                    }
                    if *proto != 0 {
                        r.extend(m::proto_ports(*proto, *range));
                    }
                    r.push(Expr::Verdict(Verdict::Return));
                    out.push(r);
                }
            }
        }
    }
}

/// A pod's allow rules from one policy: (ingress, egress), None where it does not isolate.
pub type PodRules = (Option<Vec<Rule>>, Option<Vec<Rule>>);

/// One policy compiled against the pods and namespaces: per local pod it selects, its allow
/// rules for each direction it isolates (None: it does not isolate that direction), and the
/// address sets those rules use (named after the policy, so they keep their names while it
/// lasts).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Compiled {
    pub pods: BTreeMap<Ipv4Addr, PodRules>,
    pub sets: BTreeMap<String, Vec<Ipv4Addr>>,
}

/// Compile `policy` for this node's pods (those of `pods` marked local).
pub fn compile(
    policy: &NetworkPolicy,
    pods: &[PodInfo],
    namespaces: &HashMap<String, BTreeMap<String, String>>,
) -> Compiled {
    use std::hash::{Hash, Hasher};
    let ns = policy.metadata.namespace.as_deref().unwrap_or("");
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (ns, policy.metadata.name.as_deref().unwrap_or("")).hash(&mut h);
    let mut b = Builder {
        pods,
        namespaces,
        sets: BTreeMap::new(),
        prefix: format!("s{:016x}", h.finish()),
    };
    // An absent podSelector is Go's empty one: every pod of the namespace.
    let sel = match policy.spec.as_ref().and_then(|s| s.pod_selector.as_ref()) {
        Some(s) => label_selector_as_selector(Some(s)).unwrap_or_else(|_| Selector::nothing()),
        None => Selector::new(Vec::new()),
    };
    let (ingress, egress) = types(policy);
    let mut c = Compiled::default();
    for pod in pods
        .iter()
        .filter(|p| p.local && p.namespace == ns && sel.matches(&p.labels))
    {
        let mut side = |on: bool, dir: Dir| {
            on.then(|| {
                let mut rules = Vec::new();
                b.rules(policy, dir, pod, &mut rules);
                rules
            })
        };
        let i = side(ingress, Dir::Ingress);
        let e = side(egress, Dir::Egress);
        c.pods.insert(pod.ip, (i, e));
    }
    c.sets = b.sets.into_iter().map(|(ips, name)| (name, ips)).collect();
    c
}

/// The node's program from its compiled policies (in the order given: each pod's chain
/// holds its policies' rules in that order, then the drop).
pub fn assemble<'a>(compiled: impl IntoIterator<Item = &'a Compiled>) -> Program {
    let mut prog = Program::default();
    for c in compiled {
        for (ip, (i, e)) in &c.pods {
            for (rules, prefix, map) in [(i, "in", &mut prog.ingress), (e, "eg", &mut prog.egress)] {
                let Some(rules) = rules else { continue };
                let name = format!("{prefix}-{ip}");
                map.insert(*ip, name.clone());
                prog.chains.entry(name).or_default().extend(rules.iter().cloned());
            }
        }
        prog.sets
            .extend(c.sets.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    for rules in prog.chains.values_mut() {
        rules.push(vec![Expr::Verdict(Verdict::Drop)]);
    }
    prog
}

/// The program for this node at once: every policy compiled (in namespace/name order) and
/// assembled.
pub fn program(
    policies: &[&NetworkPolicy],
    pods: &[PodInfo],
    namespaces: &HashMap<String, BTreeMap<String, String>>,
) -> Program {
    let mut sorted: Vec<&NetworkPolicy> = policies.to_vec();
    sorted.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    let compiled: Vec<Compiled> = sorted.iter().map(|p| compile(p, pods, namespaces)).collect();
    assemble(&compiled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(ns: &str, name: &str, labels: serde_json::Value, ip: [u8; 4], local: bool) -> PodInfo {
        PodInfo {
            namespace: ns.into(),
            name: name.into(),
            labels: serde_json::from_value(labels).unwrap(),
            ip: Ipv4Addr::from(ip),
            named_ports: vec![("http".into(), 6, 8080)],
            local,
        }
    }

    fn policy(ns: &str, name: &str, spec: serde_json::Value) -> NetworkPolicy {
        serde_json::from_value(json!({"metadata": {"namespace": ns, "name": name}, "spec": spec})).unwrap()
    }

    fn namespaces() -> HashMap<String, BTreeMap<String, String>> {
        [
            (
                "default".to_string(),
                BTreeMap::from([("team".to_string(), "a".to_string())]),
            ),
            (
                "other".to_string(),
                BTreeMap::from([("team".to_string(), "b".to_string())]),
            ),
        ]
        .into()
    }

    fn pods() -> Vec<PodInfo> {
        vec![
            pod("default", "db", json!({"app": "db"}), [10, 42, 0, 2], true),
            pod("default", "web", json!({"app": "web"}), [10, 42, 1, 2], false),
            pod("other", "tool", json!({"app": "web"}), [10, 42, 1, 3], false),
            pod(
                "default",
                "local-web",
                json!({"app": "web"}),
                [10, 42, 0, 3],
                true,
            ),
        ]
    }

    #[test]
    fn only_selected_local_pods_are_isolated_and_default_deny_is_a_drop() {
        let deny = policy(
            "default",
            "deny",
            json!({"podSelector": {"matchLabels": {"app": "db"}}}),
        );
        let prog = program(&[&deny], &pods(), &namespaces());
        assert_eq!(
            prog.ingress.keys().collect::<Vec<_>>(),
            [&Ipv4Addr::new(10, 42, 0, 2)]
        );
        assert!(prog.egress.is_empty(), "no Egress type: egress stays open");
        assert_eq!(
            prog.chains["in-10.42.0.2"],
            vec![vec![Expr::Verdict(Verdict::Drop)]]
        );
    }

    #[test]
    fn peers_become_shared_sets_and_ports_matches() {
        let allow = policy(
            "default",
            "allow-web",
            json!({
                "podSelector": {"matchLabels": {"app": "db"}},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}], "ports": [{"port": "http"}, {"port": 5432, "endPort": 5440, "protocol": "UDP"}]}],
                "egress": [{"to": [{"namespaceSelector": {"matchLabels": {"team": "b"}}}]}, {"to": [{"ipBlock": {"cidr": "192.168.0.0/16", "except": ["192.168.1.0/24"]}}]}]
            }),
        );
        let prog = program(&[&allow], &pods(), &namespaces());
        // web pods of the policy's namespace only (no namespaceSelector): two of them.
        let web: Vec<Ipv4Addr> = vec![Ipv4Addr::new(10, 42, 0, 3), Ipv4Addr::new(10, 42, 1, 2)];
        assert!(prog.sets.values().any(|v| *v == web), "{:?}", prog.sets);
        let other: Vec<Ipv4Addr> = vec![Ipv4Addr::new(10, 42, 1, 3)];
        assert!(prog.sets.values().any(|v| *v == other), "{:?}", prog.sets);
        let ingress = &prog.chains["in-10.42.0.2"];
        // Two port entries × one peer, then the drop.
        assert_eq!(ingress.len(), 3);
        assert!(
            ingress[0].contains(&Expr::Cmp {
                sreg: REG_1,
                op: CmpOp::Eq,
                data: 8080u16.to_be_bytes().to_vec()
            }),
            "named port resolved on the pod"
        );
        assert!(ingress[1].contains(&Expr::Cmp {
            sreg: REG_1,
            op: CmpOp::Gte,
            data: 5432u16.to_be_bytes().to_vec()
        }));
        assert!(ingress[1].contains(&Expr::Cmp {
            sreg: REG_1,
            op: CmpOp::Lte,
            data: 5440u16.to_be_bytes().to_vec()
        }));
        let egress = &prog.chains["eg-10.42.0.2"];
        assert_eq!(egress.len(), 3, "{egress:?}");
        // The ipBlock rule: in the CIDR, not in the exception.
        assert!(egress[1].contains(&Expr::Cmp {
            sreg: REG_1,
            op: CmpOp::Neq,
            data: vec![192, 168, 1, 0]
        }));
        // local-web is not selected: not isolated.
        assert!(!prog.ingress.contains_key(&Ipv4Addr::new(10, 42, 0, 3)));
    }

    #[test]
    fn a_peer_that_selects_no_pod_allows_nothing_and_egress_named_ports_bind_to_pods() {
        let p = policy(
            "default",
            "p",
            json!({
                "podSelector": {},
                "policyTypes": ["Egress"],
                "egress": [
                    {"to": [{"podSelector": {"matchLabels": {"app": "nothing"}}}]},
                    {"ports": [{"port": "http"}]}
                ]
            }),
        );
        let prog = program(&[&p], &pods(), &namespaces());
        let chain = &prog.chains["eg-10.42.0.3"];
        // First rule selects no pod: gone; the second binds to every pod naming "http" (4),
        // then the drop.
        assert_eq!(chain.len(), 5, "{chain:?}");
        assert!(prog.ingress.is_empty());
    }
}
