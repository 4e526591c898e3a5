//! The policy table (`ip r8s-policy`): a `forward` base chain lets established traffic through
//! and sends a new packet from an isolated pod to that pod's egress chain and one to an
//! isolated pod to its ingress chain, through two verdict maps keyed on the pod's address.
//! Each sync rewrites the table in one transaction (deleted and made again), so what is in
//! force is always one whole program.

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

pub fn remove(conn: &Conn, table: &str) -> Result<(), Error> {
    let mut b = Batch::new(Family::Ipv4, table);
    b.add_table();
    b.del_table();
    conn.apply(b)
}
