//! r8s's nftables table and keeping it in step with the Services, one atomic transaction per
//! sync: the fixed part (base chains hooked where kube-proxy's nftables mode hooks them, the
//! dispatch and check chains, the maps), then per Service only what changed — its chains
//! rewritten in place, its map elements added, replaced or removed. What was applied is kept
//! in memory, so a sync never reads the kernel back.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use super::model::*;
use crate::nft::expr::{m, reg32, CmpOp, Expr, REG_1};
use crate::nft::{
    octets, types, AddrFamily, BaseChain, Batch, ChainType, Conn, Data, Error, Hook, SetSpec, Verdict,
};

/// Fixed chains.
const SERVICES: &str = "services";
const SERVICE_ENDPOINTS_CHECK: &str = "service-endpoints-check";
const NODEPORT_ENDPOINTS_CHECK: &str = "nodeport-endpoints-check";
const CLUSTER_IPS_CHECK: &str = "cluster-ips-check";
const MASQUERADING: &str = "masquerading";
const FLAT_SERVICES: &str = "flat-services";
const FLAT_NODEPORTS: &str = "flat-nodeports";

/// Chains no longer used are emptied at once and deleted this much later: before 6.2 the
/// kernel notices a chain is unreferenced only a moment after the map element pointing at it
/// goes (kube-proxy's note).
const STALE_CHAIN_DELAY: Duration = Duration::from_secs(2);

/// Counts from one sync.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SyncStats {
    /// Messages in the transaction.
    pub messages: usize,
    /// Its size in bytes.
    pub bytes: usize,
}

pub struct Proxier {
    cfg: ProxyConfig,
    conn: Conn,
    /// What the kernel holds, per Service key (namespace/name).
    applied: HashMap<String, ServiceRules>,
    /// Which Service holds each element (two Services wanting the same key: the first wins).
    owners: HashMap<(&'static str, Vec<u8>), String>,
    /// Emptied chains waiting to be deleted, with when they were emptied.
    stale: BTreeMap<String, Instant>,
    /// How many Services have each address in the hairpin set.
    hairpin: HashMap<IpAddr, usize>,
}

fn base_chains() -> [(&'static str, BaseChain); 7] {
    use ChainType::*;
    use Hook::*;
    let c = |hook, priority, kind| BaseChain { hook, priority, kind };
    // dstnat = -100, srcnat = 100; the filter checks run just before DNAT and (for output)
    // just after it, as kube-proxy's.
    [
        ("filter-input", c(Input, -110, Filter)),
        ("filter-forward", c(Forward, -110, Filter)),
        ("filter-output", c(Output, -110, Filter)),
        ("filter-output-post-dnat", c(Output, -90, Filter)),
        ("nat-prerouting", c(Prerouting, -100, Nat)),
        ("nat-output", c(Output, -100, Nat)),
        ("nat-postrouting", c(Postrouting, 100, Nat)),
    ]
}

fn three_field_map(f: AddrFamily, name: &str) -> SetSpec {
    SetSpec {
        name: name.into(),
        key_type: types::concat(&[f.addr_type(), types::INET_PROTO, types::INET_SERVICE]),
        fields: vec![f.addr_len(), 1, 2],
        verdict_map: true,
        value: None,
        timeout_ms: None,
    }
}

fn two_field_map(name: &str) -> SetSpec {
    SetSpec {
        name: name.into(),
        key_type: types::concat(&[types::INET_PROTO, types::INET_SERVICE]),
        fields: vec![1, 2],
        verdict_map: true,
        value: None,
        timeout_ms: None,
    }
}

/// The flat path's sets and maps (see `model`).
fn flat_sets(f: AddrFamily) -> Vec<SetSpec> {
    use types::*;
    let set = |name: &str, fields: &[(u32, u32)], value: Option<(u32, u32)>| SetSpec {
        name: name.into(),
        key_type: concat(&fields.iter().map(|f| f.0).collect::<Vec<_>>()),
        fields: fields.iter().map(|f| f.1).collect(),
        verdict_map: false,
        value,
        timeout_ms: None,
    };
    let count = Some((INTEGER, 4));
    let endpoint = Some((concat(&[f.addr_type(), INET_SERVICE]), f.addr_len() + 4));
    let (addr, proto, port, bucket) = (
        (f.addr_type(), f.addr_len()),
        (INET_PROTO, 1),
        (INET_SERVICE, 2),
        (MARK, 4),
    );
    vec![
        set(FLAT_COUNTS, &[addr, proto, port], count),
        set(FLAT_ENDPOINTS, &[addr, proto, port, bucket], endpoint),
        set(FLAT_EXTERNAL, &[addr, proto, port], None),
        set(FLAT_NODEPORT_COUNTS, &[proto, port], count),
        set(FLAT_NODEPORT_ENDPOINTS, &[proto, port, bucket], endpoint),
        set(FLAT_HAIRPIN, &[addr, addr], None),
    ]
}

/// One rule per endpoint count `n`: the key (`width` registers from register 1 on) has `n`
/// endpoints in `counts`; a bucket below `n` at random completes the key of `endpoints`,
/// whose value (`addr . port`, the address `f`'s) is the DNAT target.
fn flat_rules(f: AddrFamily, key: &[Expr], width: u32, counts: &str, endpoints: &str) -> Vec<Vec<Expr>> {
    (1..=FLAT_MAX_ENDPOINTS as u32)
        .map(|n| {
            let mut r = key.to_vec();
            r.extend([
                Expr::Lookup {
                    set: counts.into(),
                    sreg: REG_1,
                    dreg: Some(reg32(width + 1)),
                    invert: false,
                },
                Expr::Cmp {
                    sreg: reg32(width + 1),
                    op: CmpOp::Eq,
                    data: n.to_ne_bytes().to_vec(),
                },
                Expr::NumgenRandom {
                    dreg: reg32(width),
                    modulus: n,
                },
                Expr::Lookup {
                    set: endpoints.into(),
                    sreg: REG_1,
                    dreg: Some(REG_1),
                    invert: false,
                },
                Expr::Dnat {
                    family: f.nfproto(),
                    addr_reg: REG_1,
                    proto_reg: Some(reg32(f.addr_regs())),
                },
            ]);
            r
        })
        .collect()
}

fn affinity(f: AddrFamily, name: &str) -> SetSpec {
    SetSpec {
        name: name.into(),
        key_type: f.addr_type(),
        fields: vec![f.addr_len()],
        verdict_map: false,
        value: None,
        // Each element gets the Service's timeout from the rule that adds it; this default
        // is never used but makes the set a timeout set.
        timeout_ms: Some(10_800_000),
    }
}

fn jump(chain: &str) -> Expr {
    Expr::Verdict(Verdict::Jump(chain.into()))
}

fn with(mut v: Vec<Expr>, more: impl IntoIterator<Item = Expr>) -> Vec<Expr> {
    v.extend(more);
    v
}

fn write_rule(b: &mut Batch, chain: &str, rule: &Rule) {
    b.add_rule(chain, rule);
}

impl Proxier {
    /// Open the netlink socket (in the caller's network namespace).
    pub fn new(cfg: ProxyConfig) -> Result<Self, Error> {
        Ok(Proxier {
            cfg,
            conn: Conn::new()?,
            applied: HashMap::new(),
            owners: HashMap::new(),
            stale: BTreeMap::new(),
            hairpin: HashMap::new(),
        })
    }

    pub fn config(&self) -> &ProxyConfig {
        &self.cfg
    }

    /// The fixed part of the table: maps, check and dispatch chains, base chains.
    /// `existing`: the table may be there from an earlier run (its maps are kept, its base
    /// chains re-made, so connections keep their routing until the first full sync).
    fn write_fixed(&self, b: &mut Batch, existing: bool) {
        let mark = self.cfg.masquerade_mark();
        let f = self.cfg.family;
        b.add_table();
        b.add_set(&SetSpec {
            name: CLUSTER_IPS.into(),
            key_type: f.addr_type(),
            fields: vec![f.addr_len()],
            verdict_map: false,
            value: None,
            timeout_ms: None,
        });
        for set in flat_sets(f) {
            b.add_set(&set);
        }
        b.add_set(&three_field_map(f, SERVICE_IPS));
        b.add_set(&three_field_map(f, NO_ENDPOINT_SERVICES));
        b.add_set(&two_field_map(SERVICE_NODEPORTS));
        b.add_set(&two_field_map(NO_ENDPOINT_NODEPORTS));
        let not_loopback = || {
            let (net, prefix) = f.loopback();
            m::addr_in(m::daddr(f, REG_1), net, prefix, CmpOp::Neq)
        };
        let port_unreachable = || match f {
            AddrFamily::V4 => Expr::RejectIcmpPortUnreachable,
            AddrFamily::V6 => Expr::RejectIcmpv6PortUnreachable,
        };
        let daddr_proto_port = || m::daddr_proto_port_of(f);
        let lookup = |set: &str| Expr::Lookup {
            set: set.into(),
            sreg: REG_1,
            dreg: Some(0),
            invert: false,
        };
        let is_in = |set: &str| Expr::Lookup {
            set: set.into(),
            sreg: REG_1,
            dreg: None,
            invert: false,
        };
        let mut cluster_ips_check = vec![
            // Addresses the node holds itself (the cluster DNS address) are delivered here,
            // never routed out.
            with(m::fib_daddr_local(), [Expr::Verdict(Verdict::Return)]),
            // A Service's address on a port it does not have: refused (TCP with a reset, as
            // the reject chain does: an ICMP error may be lost to the per-host budget).
            vec![
                m::daddr(f, REG_1),
                Expr::Lookup {
                    set: CLUSTER_IPS.into(),
                    sreg: REG_1,
                    dreg: None,
                    invert: false,
                },
                Expr::Verdict(Verdict::Goto(REJECT_CHAIN.into())),
            ],
        ];
        for (net, prefix) in self.cfg.family_service_cidrs() {
            // An address of the range no Service holds: dropped, never sent out.
            cluster_ips_check.push(with(
                m::addr_in(m::daddr(f, REG_1), net, prefix, CmpOp::Eq),
                [Expr::Verdict(Verdict::Drop)],
            ));
        }
        let fixed: Vec<(&str, Vec<Vec<Expr>>)> = vec![
            // TCP is refused with a reset: ICMP errors share a per-host budget (one a second)
            // with the redirects a node sends pods whose Service endpoint is on their own
            // bridge, so an ICMP refusal right after such traffic would be silently dropped
            // and the client would wait for its timeout.
            (
                REJECT_CHAIN,
                vec![
                    vec![
                        m::l4proto(REG_1),
                        Expr::Cmp {
                            sreg: REG_1,
                            op: CmpOp::Eq,
                            data: vec![6],
                        },
                        Expr::RejectTcpReset,
                    ],
                    vec![port_unreachable()],
                ],
            ),
            (MARK_FOR_MASQUERADE, vec![m::mark_or(mark)]),
            (
                MASQUERADING,
                vec![
                    // A pod that reached itself through a flat Service.
                    vec![
                        m::saddr(f, REG_1),
                        m::daddr(f, reg32(f.addr_regs())),
                        Expr::Lookup {
                            set: FLAT_HAIRPIN.into(),
                            sreg: REG_1,
                            dreg: None,
                            invert: false,
                        },
                        Expr::Masquerade {
                            flags: crate::nft::expr::NAT_PROTO_RANDOM_FULLY,
                        },
                    ],
                    with(m::mark_clear(mark), [Expr::Verdict(Verdict::Return)]),
                    m::mark_xor(mark),
                    vec![Expr::Masquerade {
                        flags: crate::nft::expr::NAT_PROTO_RANDOM_FULLY,
                    }],
                ],
            ),
            (
                SERVICES,
                vec![
                    with(daddr_proto_port(), [lookup(SERVICE_IPS)]),
                    with(
                        daddr_proto_port(),
                        [
                            is_in(FLAT_COUNTS),
                            Expr::Verdict(Verdict::Goto(FLAT_SERVICES.into())),
                        ],
                    ),
                    with(
                        with(m::fib_daddr_local(), not_loopback()),
                        with(m::proto_port().to_vec(), [lookup(SERVICE_NODEPORTS)]),
                    ),
                    with(
                        with(m::fib_daddr_local(), not_loopback()),
                        with(
                            m::proto_port().to_vec(),
                            [
                                is_in(FLAT_NODEPORT_COUNTS),
                                Expr::Verdict(Verdict::Goto(FLAT_NODEPORTS.into())),
                            ],
                        ),
                    ),
                ],
            ),
            (FLAT_SERVICES, {
                // External IPs and load-balancer ingress are always masqueraded, cluster IPs
                // when the source is off the cluster (as the service chains do).
                let mut rules = vec![with(
                    daddr_proto_port(),
                    with(vec![is_in(FLAT_EXTERNAL)], m::mark_or(mark)),
                )];
                rules.push(match self.cfg.cluster_cidr() {
                    Some((net, prefix)) => with(
                        m::addr_in(m::saddr(f, REG_1), net, prefix, CmpOp::Neq),
                        m::mark_or(mark),
                    ),
                    None => m::mark_or(mark),
                });
                rules.extend(flat_rules(
                    f,
                    &daddr_proto_port(),
                    f.addr_regs() + 2,
                    FLAT_COUNTS,
                    FLAT_ENDPOINTS,
                ));
                rules
            }),
            (FLAT_NODEPORTS, {
                let mut rules = vec![m::mark_or(mark)];
                rules.extend(flat_rules(
                    f,
                    &m::proto_port(),
                    2,
                    FLAT_NODEPORT_COUNTS,
                    FLAT_NODEPORT_ENDPOINTS,
                ));
                rules
            }),
            (
                SERVICE_ENDPOINTS_CHECK,
                vec![with(daddr_proto_port(), [lookup(NO_ENDPOINT_SERVICES)])],
            ),
            (
                NODEPORT_ENDPOINTS_CHECK,
                vec![with(
                    not_loopback(),
                    with(m::proto_port().to_vec(), [lookup(NO_ENDPOINT_NODEPORTS)]),
                )],
            ),
            (CLUSTER_IPS_CHECK, cluster_ips_check),
        ];
        // All chains first: rules may jump to a chain listed after theirs.
        for (chain, _) in &fixed {
            b.add_chain(chain, None);
            if existing {
                b.flush_chain(chain);
            }
        }
        for (chain, rules) in &fixed {
            for r in rules {
                b.add_rule(chain, r);
            }
        }
        let new = m::ct_state_new;
        let base_rules: [(&str, Vec<Vec<Expr>>); 7] = [
            (
                "filter-input",
                vec![
                    with(new(), [jump(NODEPORT_ENDPOINTS_CHECK)]),
                    with(new(), [jump(SERVICE_ENDPOINTS_CHECK)]),
                ],
            ),
            (
                "filter-forward",
                vec![
                    with(new(), [jump(SERVICE_ENDPOINTS_CHECK)]),
                    with(new(), [jump(CLUSTER_IPS_CHECK)]),
                ],
            ),
            (
                "filter-output",
                vec![with(new(), [jump(SERVICE_ENDPOINTS_CHECK)])],
            ),
            (
                "filter-output-post-dnat",
                vec![with(new(), [jump(CLUSTER_IPS_CHECK)])],
            ),
            ("nat-prerouting", vec![vec![jump(SERVICES)]]),
            ("nat-output", vec![vec![jump(SERVICES)]]),
            ("nat-postrouting", vec![vec![jump(MASQUERADING)]]),
        ];
        for ((name, base), (_, rules)) in base_chains().iter().zip(base_rules.iter()) {
            b.add_chain(name, Some(*base));
            if existing {
                // A base chain's hook cannot change in place: deleted (with its rules) and
                // made again, in the same transaction.
                b.del_chain(name);
                b.add_chain(name, Some(*base));
            }
            for r in rules {
                b.add_rule(name, r);
            }
        }
    }

    /// Install the fixed part at once (before any Service is known): from here on nothing
    /// addressed to the Service range leaves the node. A table from an earlier run keeps its
    /// Services until the first full sync.
    pub fn guard(&mut self) -> Result<(), Error> {
        let mut b = Batch::new(self.cfg.family.table(), &self.cfg.table);
        self.write_fixed(&mut b, true);
        match self.conn.apply(b) {
            Ok(()) => Ok(()),
            Err(e) => {
                // A table of another layout (an older r8s): replaced whole.
                tracing::info!(error = %e, "proxy: replacing an incompatible table");
                let mut b = Batch::new(self.cfg.family.table(), &self.cfg.table);
                b.add_table();
                b.del_table();
                self.write_fixed(&mut b, false);
                self.conn.apply(b)
            }
        }
    }

    /// Replace the whole table with `all` (Service key → rules), in one transaction: after a
    /// start, or when an incremental sync failed and the kernel's state is in doubt.
    pub fn full_sync(&mut self, all: Vec<(String, ServiceRules)>) -> Result<SyncStats, Error> {
        let mut b = Batch::new(self.cfg.family.table(), &self.cfg.table);
        b.add_table();
        b.del_table();
        self.write_fixed(&mut b, false);
        let mut owners = HashMap::new();
        let mut applied = HashMap::new();
        let mut sorted = all;
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        let mut filtered = Vec::with_capacity(sorted.len());
        for (key, rules) in sorted {
            let rules = claim(&mut owners, &key, rules);
            filtered.push((key, rules));
        }
        for (_, r) in &filtered {
            for s in &r.affinity_sets {
                b.add_set(&affinity(self.cfg.family, s));
            }
            for c in r.chains.keys() {
                b.add_chain(c, None);
            }
        }
        let mut hairpin: HashMap<IpAddr, usize> = HashMap::new();
        for (_, r) in &filtered {
            add_elems(&mut b, r.elems.iter().map(|((s, k), v)| (*s, k, v.as_ref())));
            for ip in &r.hairpin {
                *hairpin.entry(*ip).or_default() += 1;
            }
        }
        let keys: Vec<Vec<u8>> = hairpin.keys().map(|ip| hairpin_key(*ip)).collect();
        add_elems(&mut b, keys.iter().map(|k| (FLAT_HAIRPIN, k, None)));
        for (_, r) in &filtered {
            for (c, rules) in &r.chains {
                for rule in rules {
                    write_rule(&mut b, c, rule);
                }
            }
        }
        for (key, r) in filtered {
            applied.insert(key, r);
        }
        let stats = SyncStats {
            messages: b.len(),
            bytes: b.bytes(),
        };
        self.conn.apply(b)?;
        self.applied = applied;
        self.owners = owners;
        self.stale.clear();
        self.hairpin = hairpin;
        Ok(stats)
    }

    /// Apply what changed: each (Service key, its rules now; empty when it is gone).
    pub fn sync(&mut self, changes: Vec<(String, ServiceRules)>) -> Result<SyncStats, Error> {
        let now = Instant::now();
        let mut b = Batch::new(self.cfg.family.table(), &self.cfg.table);
        // Claims are made in place (no copy of every element's owner per sync); a refused
        // transaction puts them back from what is applied.
        let empty = ServiceRules::default();
        let mut next: Vec<(String, ServiceRules)> = Vec::with_capacity(changes.len());
        for (key, rules) in changes {
            // Release what this Service held, then claim what it wants now.
            if let Some(old) = self.applied.get(&key) {
                for k in old.elems.keys() {
                    self.owners.remove(k);
                }
            }
            let rules = claim(&mut self.owners, &key, rules);
            next.push((key, rules));
        }
        let old_of = |key: &str| self.applied.get(key).unwrap_or(&empty);
        let mut new_chains: Vec<&str> = Vec::new();
        // 1. New affinity sets and chains (empty for now).
        for (key, new) in &next {
            let old = old_of(key);
            for s in new.affinity_sets.difference(&old.affinity_sets) {
                b.add_set(&affinity(self.cfg.family, s));
            }
            for c in new.chains.keys() {
                if !old.chains.contains_key(c) {
                    b.add_chain(c, None);
                    new_chains.push(c);
                }
            }
        }
        // 2. Elements gone or changed, then elements new or changed.
        let mut dels: Vec<(&'static str, &Vec<u8>)> = Vec::new();
        let mut adds: Vec<(&'static str, &Vec<u8>, Option<&Data>)> = Vec::new();
        for (key, new) in &next {
            let old = old_of(key);
            for ((set, k), v) in &old.elems {
                match new.elems.get(&(*set, k.clone())) {
                    Some(nv) if nv == v => {}
                    _ => dels.push((set, k)),
                }
            }
            for ((set, k), v) in &new.elems {
                if old.elems.get(&(*set, k.clone())) != Some(v) {
                    adds.push((set, k, v.as_ref()));
                }
            }
        }
        // Hairpin addresses: an element while any Service has it.
        let mut hairpin = self.hairpin.clone();
        for (key, new) in &next {
            let old = old_of(key);
            for ip in old.hairpin.difference(&new.hairpin) {
                if let Some(n) = hairpin.get_mut(ip) {
                    *n -= 1;
                }
            }
            for ip in new.hairpin.difference(&old.hairpin) {
                *hairpin.entry(*ip).or_default() += 1;
            }
        }
        hairpin.retain(|_, n| *n > 0);
        let hairpin_gone: Vec<Vec<u8>> = self
            .hairpin
            .keys()
            .filter(|ip| !hairpin.contains_key(ip))
            .map(|ip| hairpin_key(*ip))
            .collect();
        let hairpin_new: Vec<Vec<u8>> = hairpin
            .keys()
            .filter(|ip| !self.hairpin.contains_key(ip))
            .map(|ip| hairpin_key(*ip))
            .collect();
        dels.extend(hairpin_gone.iter().map(|k| (FLAT_HAIRPIN, k)));
        adds.extend(hairpin_new.iter().map(|k| (FLAT_HAIRPIN, k, None)));
        del_elems(&mut b, dels);
        add_elems(&mut b, adds);
        // 3. Chains rewritten in place; chains no longer used emptied.
        let mut emptied: Vec<String> = Vec::new();
        for (key, new) in &next {
            let old = old_of(key);
            for (c, rules) in &new.chains {
                match old.chains.get(c) {
                    Some(o) if o == rules => continue,
                    Some(_) => b.flush_chain(c),
                    None => {}
                }
                for r in rules {
                    write_rule(&mut b, c, r);
                }
            }
            for c in old.chains.keys() {
                if !new.chains.contains_key(c) {
                    b.flush_chain(c);
                    emptied.push(c.clone());
                }
            }
        }
        // 4. Affinity sets no longer used (their rules went in step 3).
        for (key, new) in &next {
            for s in old_of(key).affinity_sets.difference(&new.affinity_sets) {
                b.del_set(s);
            }
        }
        // 5. Chains emptied long enough ago.
        let wanted: std::collections::HashSet<&str> = new_chains.iter().copied().collect();
        let due: Vec<String> = self
            .stale
            .iter()
            .filter(|(c, at)| now.duration_since(**at) >= STALE_CHAIN_DELAY && !wanted.contains(c.as_str()))
            .map(|(c, _)| c.clone())
            .collect();
        for c in &due {
            b.del_chain(c);
        }
        let stats = SyncStats {
            messages: b.len(),
            bytes: b.bytes(),
        };
        let new_names: Vec<String> = new_chains.iter().map(|s| s.to_string()).collect();
        if let Err(e) = self.conn.apply(b) {
            self.owners = self
                .applied
                .iter()
                .flat_map(|(key, r)| r.elems.keys().map(move |k| (k.clone(), key.clone())))
                .collect();
            return Err(e);
        }
        self.hairpin = hairpin;
        for c in due {
            self.stale.remove(&c);
        }
        for c in new_names {
            self.stale.remove(&c);
        }
        for c in emptied {
            // A chain another Service now uses under the same name is not stale.
            if !next.iter().any(|(_, r)| r.chains.contains_key(&c)) {
                self.stale.insert(c, now);
            }
        }
        for (key, rules) in next {
            if rules == ServiceRules::default() {
                self.applied.remove(&key);
            } else {
                self.applied.insert(key, rules);
            }
        }
        Ok(stats)
    }

    /// When the next stale chain may be deleted (a sync with no changes does it).
    pub fn next_stale_due(&self) -> Option<Instant> {
        self.stale.values().min().map(|at| *at + STALE_CHAIN_DELAY)
    }

    /// Remove the table (a clean stop).
    pub fn remove(&mut self) -> Result<(), Error> {
        let mut b = Batch::new(self.cfg.family.table(), &self.cfg.table);
        b.add_table();
        b.del_table();
        self.conn.apply(b)?;
        self.applied.clear();
        self.owners.clear();
        self.stale.clear();
        self.hairpin.clear();
        Ok(())
    }

    /// How many Services have rules.
    pub fn services(&self) -> usize {
        self.applied.len()
    }

    /// Per-Service chains and elements in the table.
    pub fn counts(&self) -> (usize, usize) {
        self.applied
            .values()
            .fold((0, 0), |(c, e), r| (c + r.chains.len(), e + r.elems.len()))
    }
}

/// Keep only the elements no other Service holds; record the rest as `key`'s.
fn claim(
    owners: &mut HashMap<(&'static str, Vec<u8>), String>,
    key: &str,
    mut rules: ServiceRules,
) -> ServiceRules {
    rules.elems.retain(|k, _| match owners.get(k) {
        Some(owner) if owner != key => {
            tracing::warn!(service = key, held_by = %owner, set = k.0, "proxy: address and port already used by another Service");
            false
        }
        _ => true,
    });
    for k in rules.elems.keys() {
        owners.insert(k.clone(), key.to_owned());
    }
    rules
}

fn add_elems<'a>(
    b: &mut Batch,
    elems: impl IntoIterator<Item = (&'static str, &'a Vec<u8>, Option<&'a Data>)>,
) {
    type Elem<'e> = (&'e [u8], Option<&'e Data>);
    let mut by_set: BTreeMap<&str, Vec<Elem>> = BTreeMap::new();
    for (s, k, v) in elems {
        by_set.entry(s).or_default().push((k, v));
    }
    for (s, es) in by_set {
        b.add_data_elems(s, es);
    }
}

/// The hairpin set's key for `ip`: `ip . ip`.
fn hairpin_key(ip: IpAddr) -> Vec<u8> {
    [octets(&ip), octets(&ip)].concat()
}

fn del_elems<'a>(b: &mut Batch, elems: impl IntoIterator<Item = (&'static str, &'a Vec<u8>)>) {
    let mut by_set: BTreeMap<&str, Vec<&[u8]>> = BTreeMap::new();
    for (s, k) in elems {
        by_set.entry(s).or_default().push(k);
    }
    for (s, ks) in by_set {
        b.del_elems(s, ks);
    }
}
