//! The policy table (`ip r8s-policy`): a `forward` base chain lets established traffic through
//! and sends a new packet from an isolated pod to that pod's egress chain and one to an
//! isolated pod to its ingress chain, through two verdict maps keyed on the pod's address.
//! The first sync writes the whole table in one transaction (deleted and made again); later
//! ones change only what differs from the program in force ([`update`]), also in one
//! transaction, so what is in force is always one whole program.

use crate::nft::expr::{m, REG_1};
use crate::nft::{types, BaseChain, Batch, ChainType, Conn, Error, Expr, Family, Hook, SetSpec, Verdict};

use super::model::Program;

const INGRESS_MAP: &str = "ingress-pods";
const EGRESS_MAP: &str = "egress-pods";

fn addr_set(name: &str, verdict_map: bool) -> SetSpec {
    SetSpec {
        name: name.into(),
        key_type: types::IPV4_ADDR,
        fields: vec![4],
        verdict_map,
        value: None,
        timeout_ms: None,
    }
}

/// The whole table for `prog`, replacing what is there.
pub fn batch(table: &str, prog: &Program) -> Batch {
    let mut b = Batch::new(Family::Ipv4, table);
    b.add_table();
    b.del_table();
    b.add_table();
    for (name, ips) in &prog.sets {
        b.add_set(&addr_set(name, false));
        let keys: Vec<[u8; 4]> = ips.iter().map(|ip| ip.octets()).collect();
        if !keys.is_empty() {
            b.add_elems(name, keys.iter().map(|k| (k.as_slice(), None)));
        }
    }
    for (name, rules) in &prog.chains {
        b.add_chain(name, None);
        for r in rules {
            b.add_rule(name, r);
        }
    }
    for (map, entries) in [(INGRESS_MAP, &prog.ingress), (EGRESS_MAP, &prog.egress)] {
        b.add_set(&addr_set(map, true));
        let elems: Vec<([u8; 4], Verdict)> = entries
            .iter()
            .map(|(ip, chain)| (ip.octets(), Verdict::Jump(chain.clone())))
            .collect();
        if !elems.is_empty() {
            b.add_elems(map, elems.iter().map(|(k, v)| (k.as_slice(), Some(v))));
        }
    }
    b.add_chain(
        "forward",
        Some(BaseChain {
            hook: Hook::Forward,
            priority: 0,
            kind: ChainType::Filter,
        }),
    );
    let vmap = |load: Expr, map: &str| {
        vec![
            load,
            Expr::Lookup {
                set: map.into(),
                sreg: REG_1,
                dreg: Some(0),
                invert: false,
            },
        ]
    };
    let mut established = m::ct_state_established_related();
    established.push(Expr::Verdict(Verdict::Accept));
    b.add_rule("forward", &established);
    b.add_rule("forward", &vmap(m::ip_saddr(REG_1), EGRESS_MAP));
    b.add_rule("forward", &vmap(m::ip_daddr(REG_1), INGRESS_MAP));
    b
}

pub fn apply(conn: &Conn, table: &str, prog: &Program) -> Result<(), Error> {
    conn.apply(batch(table, prog))
}

/// What turns the table holding `old` into one holding `new`, in one transaction: only the
/// sets, chains and map entries that differ. New sets and chains first, then changed ones
/// refilled, then the maps' entries, then what is gone (nothing refers to it any more).
pub fn update(table: &str, old: &Program, new: &Program) -> Batch {
    let mut b = Batch::new(Family::Ipv4, table);
    for (name, ips) in &new.sets {
        match old.sets.get(name) {
            Some(before) if before == ips => continue,
            Some(_) => b.flush_set(name),
            None => b.add_set(&addr_set(name, false)),
        }
        let keys: Vec<[u8; 4]> = ips.iter().map(|ip| ip.octets()).collect();
        if !keys.is_empty() {
            b.add_elems(name, keys.iter().map(|k| (k.as_slice(), None)));
        }
    }
    for (name, rules) in &new.chains {
        match old.chains.get(name) {
            Some(before) if before == rules => continue,
            Some(_) => b.flush_chain(name),
            None => b.add_chain(name, None),
        }
        for r in rules {
            b.add_rule(name, r);
        }
    }
    for (map, before, after) in [
        (INGRESS_MAP, &old.ingress, &new.ingress),
        (EGRESS_MAP, &old.egress, &new.egress),
    ] {
        let gone: Vec<[u8; 4]> = before
            .iter()
            .filter(|(ip, chain)| after.get(ip) != Some(chain))
            .map(|(ip, _)| ip.octets())
            .collect();
        if !gone.is_empty() {
            b.del_elems(map, gone.iter().map(|k| k.as_slice()));
        }
        let added: Vec<([u8; 4], Verdict)> = after
            .iter()
            .filter(|(ip, chain)| before.get(ip) != Some(chain))
            .map(|(ip, chain)| (ip.octets(), Verdict::Jump(chain.clone())))
            .collect();
        if !added.is_empty() {
            b.add_elems(map, added.iter().map(|(k, v)| (k.as_slice(), Some(v))));
        }
    }
    for name in old.chains.keys().filter(|n| !new.chains.contains_key(*n)) {
        b.del_chain(name);
    }
    for name in old.sets.keys().filter(|n| !new.sets.contains_key(*n)) {
        b.del_set(name);
    }
    b
}

pub fn remove(conn: &Conn, table: &str) -> Result<(), Error> {
    let mut b = Batch::new(Family::Ipv4, table);
    b.add_table();
    b.del_table();
    conn.apply(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn prog(rule_port: u16) -> Program {
        let mut p = Program::default();
        let ip = Ipv4Addr::new(10, 42, 0, 2);
        p.sets.insert("s1".into(), vec![Ipv4Addr::new(10, 42, 0, 3)]);
        p.chains.insert(
            "in-10.42.0.2".into(),
            vec![
                m::proto_ports(6, Some((rule_port, rule_port))),
                vec![Expr::Verdict(Verdict::Drop)],
            ],
        );
        p.ingress.insert(ip, "in-10.42.0.2".into());
        p
    }

    #[test]
    fn an_update_carries_only_what_changed() {
        let a = prog(80);
        assert!(update("t", &a, &a).is_empty(), "nothing changed: nothing sent");
        // One chain's rule changed: the chain is flushed and refilled (two rules), nothing
        // else is touched.
        let b = prog(81);
        assert_eq!(update("t", &a, &b).len(), 3);
        // Everything gone: the map entry, the chain, the set.
        assert_eq!(update("t", &a, &Program::default()).len(), 3);
    }
}
