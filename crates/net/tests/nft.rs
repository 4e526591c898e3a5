//! The nf_tables encoder against the real kernel, each test in a network namespace of its own
//! (root): what r8s sends is read back with `nft list`, nft's own rendering of the kernel's
//! state, so a wrongly encoded attribute shows as a refusal or a different rule.

#[path = "common/netns.rs"]
mod netns;

use std::net::Ipv4Addr;

use netns::Netns;
use r8s_net::nft::expr::{m, REG_1};
use r8s_net::nft::{types, BaseChain, Batch, ChainType, CmpOp, Conn, Expr, Family, Hook, SetSpec, Verdict};

fn service_ips() -> SetSpec {
    SetSpec {
        name: "service-ips".into(),
        key_type: types::concat(&[types::IPV4_ADDR, types::INET_PROTO, types::INET_SERVICE]),
        fields: vec![4, 1, 2],
        verdict_map: true,
        value: None,
        timeout_ms: None,
    }
}

#[test]
fn a_table_written_over_netlink_reads_back_as_nft_prints_it() {
    let Some(ns) = Netns::new("nft-enc") else { return };
    ns.run(|| {
        let conn = Conn::new().unwrap();
        let mut b = Batch::new(Family::Ipv4, "r8s");
        b.add_table();
        b.add_set(&service_ips());
        b.add_set(&SetSpec {
            name: "affinity-x".into(),
            key_type: types::IPV4_ADDR,
            fields: vec![4],
            verdict_map: false,
            value: None,
            timeout_ms: Some(10_800_000),
        });
        b.add_chain(
            "nat-output",
            Some(BaseChain {
                hook: Hook::Output,
                priority: -100,
                kind: ChainType::Nat,
            }),
        );
        b.add_chain(
            "filter-forward",
            Some(BaseChain {
                hook: Hook::Forward,
                priority: -110,
                kind: ChainType::Filter,
            }),
        );
        b.add_chain("services", None);
        b.add_chain("endpoint-a", None);
        b.add_chain("endpoint-b", None);
        b.add_chain("svc", None);
        b.add_chain("reject-chain", None);
        b.add_chain("masq", None);
        b.add_rule("nat-output", &[Expr::Verdict(Verdict::Jump("services".into()))]);
        let mut r = m::daddr_proto_port().to_vec();
        r.push(Expr::Lookup {
            set: "service-ips".into(),
            sreg: REG_1,
            dreg: Some(0),
            invert: false,
        });
        b.add_rule("services", &r);
        let mut r = m::fib_daddr_local();
        r.extend(m::ip_in(
            m::ip_daddr(REG_1),
            Ipv4Addr::new(127, 0, 0, 0),
            8,
            CmpOp::Neq,
        ));
        r.push(Expr::Verdict(Verdict::Accept));
        b.add_rule("services", &r);
        let mut r = m::ct_state_new();
        r.extend(m::ip_in(
            m::ip_daddr(REG_1),
            Ipv4Addr::new(10, 43, 0, 0),
            16,
            CmpOp::Eq,
        ));
        r.push(Expr::Verdict(Verdict::Drop));
        b.add_rule("filter-forward", &r);
        b.add_rule(
            "endpoint-a",
            &[
                m::ip_saddr(REG_1),
                Expr::DynsetUpdate {
                    set: "affinity-x".into(),
                    sreg: REG_1,
                    timeout_ms: Some(60_000),
                },
            ],
        );
        b.add_rule("endpoint-a", &m::dnat(6, Ipv4Addr::new(10, 42, 0, 2), 8080));
        b.add_rule("endpoint-b", &m::dnat(17, Ipv4Addr::new(10, 42, 0, 3), 53));
        // The proxy's random choice: each rule takes 1/(n-i) of what reaches it.
        b.add_rule(
            "svc",
            &[
                Expr::NumgenRandom {
                    dreg: REG_1,
                    modulus: 2,
                },
                Expr::Cmp {
                    sreg: REG_1,
                    op: CmpOp::Eq,
                    data: 0u32.to_ne_bytes().to_vec(),
                },
                Expr::Verdict(Verdict::Goto("endpoint-a".into())),
            ],
        );
        b.add_rule("svc", &[Expr::Verdict(Verdict::Goto("endpoint-b".into()))]);
        b.add_rule("reject-chain", &[Expr::RejectTcpReset]);
        b.add_rule("reject-chain", &[Expr::RejectIcmpPortUnreachable]);
        let mut r = m::mark_clear(0x4000);
        r.push(Expr::Verdict(Verdict::Return));
        b.add_rule("masq", &r);
        b.add_rule("masq", &m::mark_xor(0x4000));
        b.add_rule("masq", &m::mark_or(0x4000));
        b.add_rule(
            "masq",
            &[Expr::Masquerade {
                flags: r8s_net::nft::expr::NAT_PROTO_RANDOM_FULLY,
            }],
        );
        let key = [10, 43, 0, 10, 6, 0, 0, 0, 0, 80, 0, 0];
        let v = Verdict::Goto("svc".into());
        b.add_elems("service-ips", [(&key[..], Some(&v))]);
        conn.apply(b).unwrap();
    });
    let listed = ns.nft(&["list", "table", "ip", "r8s"]);
    for want in [
        "map service-ips {",
        "type ipv4_addr . inet_proto . inet_service : verdict",
        "elements = { 10.43.0.10 . tcp . 80 : goto svc }",
        "set affinity-x {",
        "type ipv4_addr",
        "flags dynamic,timeout",
        "timeout 3h",
        "type nat hook output priority -100; policy accept;",
        "type filter hook forward priority -110; policy accept;",
        "jump services",
        "ip daddr . meta l4proto . th dport vmap @service-ips",
        "fib daddr type local ip daddr != 127.0.0.0/8 accept",
        "ct state new ip daddr 10.43.0.0/16 drop",
        "update @affinity-x { ip saddr timeout 1m }",
        "meta l4proto tcp dnat to 10.42.0.2:8080",
        "meta l4proto udp dnat to 10.42.0.3:53",
        "numgen random mod 2 0 goto endpoint-a",
        "goto endpoint-b",
        "reject with tcp reset",
        "reject\n",
        "meta mark & 0x00004000 == 0x00000000 return",
        "meta mark set meta mark ^ 0x00004000",
        "meta mark set meta mark | 0x00004000",
        "masquerade fully-random",
    ] {
        assert!(listed.contains(want), "missing {want:?} in\n{listed}");
    }
}

#[test]
fn a_refused_transaction_changes_nothing_and_names_what_failed() {
    let Some(ns) = Netns::new("nft-abort") else { return };
    let err = ns.run(|| {
        let conn = Conn::new().unwrap();
        let mut b = Batch::new(Family::Ipv4, "r8s");
        b.add_table();
        b.add_chain("services", None);
        conn.apply(b).unwrap();
        // A rule jumping to a chain that does not exist: the whole batch, with its new chain,
        // is refused.
        let mut b = Batch::new(Family::Ipv4, "r8s");
        b.add_chain("other", None);
        b.add_rule("services", &[Expr::Verdict(Verdict::Jump("missing".into()))]);
        conn.apply(b).unwrap_err()
    });
    assert_eq!(err.errno(), Some(libc::ENOENT), "{err}");
    assert!(err.to_string().contains("NewRule r8s services"), "{err}");
    let listed = ns.nft(&["list", "table", "ip", "r8s"]);
    assert!(listed.contains("chain services"), "{listed}");
    assert!(
        !listed.contains("chain other"),
        "an aborted batch left a chain:\n{listed}"
    );
}

#[test]
fn changing_a_map_entry_and_deleting_the_table() {
    let Some(ns) = Netns::new("nft-upd") else { return };
    ns.run(|| {
        let conn = Conn::new().unwrap();
        let mut b = Batch::new(Family::Ipv4, "r8s");
        b.add_table();
        b.add_set(&service_ips());
        b.add_chain("a", None);
        b.add_chain("b", None);
        let key = [10, 43, 0, 10, 17, 0, 0, 0, 0, 53, 0, 0];
        let v = Verdict::Goto("a".into());
        b.add_elems("service-ips", [(&key[..], Some(&v))]);
        conn.apply(b).unwrap();
        // Same key, another verdict: delete and re-add in one transaction.
        let mut b = Batch::new(Family::Ipv4, "r8s");
        b.del_elems("service-ips", [&key[..]]);
        let v = Verdict::Goto("b".into());
        b.add_elems("service-ips", [(&key[..], Some(&v))]);
        conn.apply(b).unwrap();
    });
    let listed = ns.nft(&["list", "map", "ip", "r8s", "service-ips"]);
    assert!(listed.contains("10.43.0.10 . udp . 53 : goto b"), "{listed}");
    ns.run(|| {
        let conn = Conn::new().unwrap();
        let mut b = Batch::new(Family::Ipv4, "r8s");
        b.del_table();
        conn.apply(b).unwrap();
    });
    assert!(!ns.nft(&["list", "tables"]).contains("r8s"));
}
