//! nf_tables expressions (what a rule is made of) and their attribute encodings.

use super::wire::Writer;

/// Registers (`nft_registers`): the verdict register, and the 4-byte registers nft uses for
/// concatenations (`NFT_REG32_00` shares storage with the legacy `NFT_REG_1`).
pub const REG_VERDICT: u32 = 0;
pub const REG_1: u32 = 1;
pub const REG_2: u32 = 2;
pub const REG32_00: u32 = 8;

/// The 4-byte register `n` places after [`REG32_00`].
pub const fn reg32(n: u32) -> u32 {
    REG32_00 + n
}

/// Payload bases.
pub const BASE_NETWORK: u32 = 1;
pub const BASE_TRANSPORT: u32 = 2;

/// Meta keys.
pub const META_MARK: u32 = 3;
pub const META_L4PROTO: u32 = 16;

/// Conntrack keys and state bits.
pub const CT_STATE: u32 = 0;
pub const CT_STATE_NEW: u32 = 0x8;
pub const CT_STATE_ESTABLISHED: u32 = 0x2;
pub const CT_STATE_RELATED: u32 = 0x4;

/// fib: result and flags; route types.
pub const FIB_RESULT_ADDRTYPE: u32 = 3;
pub const FIB_F_SADDR: u32 = 0x1;
pub const FIB_F_DADDR: u32 = 0x2;
pub const RTN_LOCAL: u32 = 2;

/// Comparison operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    Eq = 0,
    Neq = 1,
    /// Orderings compare the data as bytes: network-order (big-endian) values compare as
    /// numbers.
    Lte = 3,
    Gte = 5,
}

/// NAT range flags.
pub const NAT_PROTO_SPECIFIED: u32 = 0x2;
pub const NAT_PROTO_RANDOM_FULLY: u32 = 0x10;

/// dynset operations.
pub const DYNSET_UPDATE: u32 = 1;

/// A verdict: in an `immediate` or as a verdict map's value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    Drop,
    Accept,
    Return,
    Jump(String),
    Goto(String),
}

/// What a map element carries: a verdict, or (in a data map) a value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Data {
    Verdict(Verdict),
    Value(Vec<u8>),
}

impl From<Verdict> for Data {
    fn from(v: Verdict) -> Self {
        Data::Verdict(v)
    }
}

impl Verdict {
    fn code(&self) -> u32 {
        match self {
            Verdict::Drop => 0,
            Verdict::Accept => 1,
            Verdict::Return => -5i32 as u32,
            Verdict::Jump(_) => -3i32 as u32,
            Verdict::Goto(_) => -4i32 as u32,
        }
    }

    /// `NFTA_DATA_VERDICT` nest (inside an `NFTA_*_DATA` nest the caller opened).
    pub(crate) fn write(&self, w: &mut Writer) {
        let v = w.begin(2); // NFTA_DATA_VERDICT
        w.u32(1, self.code()); // NFTA_VERDICT_CODE
        if let Verdict::Jump(c) | Verdict::Goto(c) = self {
            w.str(2, c); // NFTA_VERDICT_CHAIN
        }
        w.end(v);
    }
}

/// One expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expr {
    /// Load `len` bytes at `offset` from header `base` into `dreg`.
    Payload {
        dreg: u32,
        base: u32,
        offset: u32,
        len: u32,
    },
    /// Load a meta key into `dreg`.
    Meta {
        dreg: u32,
        key: u32,
    },
    /// Set a meta key from `sreg`.
    MetaSet {
        sreg: u32,
        key: u32,
    },
    Cmp {
        sreg: u32,
        op: CmpOp,
        data: Vec<u8>,
    },
    /// `dreg = (sreg & mask) ^ xor` over `mask.len()` bytes.
    Bitwise {
        sreg: u32,
        dreg: u32,
        mask: Vec<u8>,
        xor: Vec<u8>,
    },
    /// Put raw data into a register.
    Immediate {
        dreg: u32,
        data: Vec<u8>,
    },
    /// End the rule with a verdict.
    Verdict(Verdict),
    /// Look `sreg` up in a set: a match (or, inverted, a miss) continues; with `dreg` 0 the
    /// set is a verdict map.
    Lookup {
        set: String,
        sreg: u32,
        dreg: Option<u32>,
        invert: bool,
    },
    Ct {
        dreg: u32,
        key: u32,
    },
    Fib {
        dreg: u32,
        result: u32,
        flags: u32,
    },
    /// Destination NAT to the address in `addr_reg` and port in `proto_reg`.
    Dnat {
        family: u8,
        addr_reg: u32,
        proto_reg: Option<u32>,
    },
    Masquerade {
        flags: u32,
    },
    /// ICMP port unreachable (in an `ip` table).
    RejectIcmpPortUnreachable,
    /// ICMPv6 port unreachable (in an ip6 table).
    RejectIcmpv6PortUnreachable,
    /// A TCP reset (for TCP packets only).
    RejectTcpReset,
    /// `numgen random mod modulus` into `dreg`.
    NumgenRandom {
        dreg: u32,
        modulus: u32,
    },
    /// Update a dynamic set with the key in `sreg`.
    DynsetUpdate {
        set: String,
        sreg: u32,
        timeout_ms: Option<u64>,
    },
    Counter,
}

impl Expr {
    fn name(&self) -> &'static str {
        match self {
            Expr::Payload { .. } => "payload",
            Expr::Meta { .. } | Expr::MetaSet { .. } => "meta",
            Expr::Cmp { .. } => "cmp",
            Expr::Bitwise { .. } => "bitwise",
            Expr::Immediate { .. } | Expr::Verdict(_) => "immediate",
            Expr::Lookup { .. } => "lookup",
            Expr::Ct { .. } => "ct",
            Expr::Fib { .. } => "fib",
            Expr::Dnat { .. } => "nat",
            Expr::Masquerade { .. } => "masq",
            Expr::RejectIcmpPortUnreachable | Expr::RejectIcmpv6PortUnreachable | Expr::RejectTcpReset => {
                "reject"
            }
            Expr::NumgenRandom { .. } => "numgen",
            Expr::DynsetUpdate { .. } => "dynset",
            Expr::Counter => "counter",
        }
    }

    /// `NFTA_LIST_ELEM { NFTA_EXPR_NAME, NFTA_EXPR_DATA { ... } }`.
    pub(crate) fn write(&self, w: &mut Writer) {
        let elem = w.begin(1); // NFTA_LIST_ELEM
        w.str(1, self.name()); // NFTA_EXPR_NAME
        let data = w.begin(2); // NFTA_EXPR_DATA
        match self {
            Expr::Payload {
                dreg,
                base,
                offset,
                len,
            } => {
                w.u32(1, *dreg);
                w.u32(2, *base);
                w.u32(3, *offset);
                w.u32(4, *len);
            }
            Expr::Meta { dreg, key } => {
                w.u32(2, *key);
                w.u32(1, *dreg);
            }
            Expr::MetaSet { sreg, key } => {
                w.u32(2, *key);
                w.u32(3, *sreg);
            }
            Expr::Cmp { sreg, op, data } => {
                w.u32(1, *sreg);
                w.u32(2, *op as u32);
                let d = w.begin(3);
                w.bytes(1, data); // NFTA_DATA_VALUE
                w.end(d);
            }
            Expr::Bitwise {
                sreg,
                dreg,
                mask,
                xor,
            } => {
                w.u32(1, *sreg);
                w.u32(2, *dreg);
                w.u32(3, mask.len() as u32);
                let m = w.begin(4);
                w.bytes(1, mask);
                w.end(m);
                let x = w.begin(5);
                w.bytes(1, xor);
                w.end(x);
            }
            Expr::Immediate { dreg, data } => {
                w.u32(1, *dreg);
                let d = w.begin(2);
                w.bytes(1, data);
                w.end(d);
            }
            Expr::Verdict(v) => {
                w.u32(1, REG_VERDICT);
                let d = w.begin(2);
                v.write(w);
                w.end(d);
            }
            Expr::Lookup {
                set,
                sreg,
                dreg,
                invert,
            } => {
                w.str(1, set);
                w.u32(2, *sreg);
                if let Some(d) = dreg {
                    w.u32(3, *d);
                }
                if *invert {
                    w.u32(5, 1); // NFT_LOOKUP_F_INV
                }
            }
            Expr::Ct { dreg, key } => {
                w.u32(2, *key);
                w.u32(1, *dreg);
            }
            Expr::Fib { dreg, result, flags } => {
                w.u32(1, *dreg);
                w.u32(2, *result);
                w.u32(3, *flags);
            }
            Expr::Dnat {
                family,
                addr_reg,
                proto_reg,
            } => {
                w.u32(1, 1); // NFT_NAT_DNAT
                w.u32(2, *family as u32);
                w.u32(3, *addr_reg);
                // The kernel adds NF_NAT_RANGE_MAP_IPS itself for an address register.
                if let Some(p) = proto_reg {
                    w.u32(5, *p);
                    w.u32(7, NAT_PROTO_SPECIFIED);
                }
            }
            Expr::Masquerade { flags } => {
                if *flags != 0 {
                    w.u32(1, *flags);
                }
            }
            Expr::RejectIcmpPortUnreachable => {
                w.u32(1, 0); // NFT_REJECT_ICMP_UNREACH
                w.u8(2, 3); // ICMP_PORT_UNREACH
            }
            Expr::RejectIcmpv6PortUnreachable => {
                w.u32(1, 0); // NFT_REJECT_ICMP_UNREACH (ICMPv6 in an ip6 table)
                w.u8(2, 4); // ICMPV6_PORT_UNREACH
            }
            Expr::RejectTcpReset => {
                w.u32(1, 1); // NFT_REJECT_TCP_RST
                w.u8(2, 0);
            }
            Expr::NumgenRandom { dreg, modulus } => {
                w.u32(1, *dreg);
                w.u32(2, *modulus);
                w.u32(3, 1); // NFT_NG_RANDOM
                w.u32(4, 0);
            }
            Expr::DynsetUpdate {
                set,
                sreg,
                timeout_ms,
            } => {
                w.str(1, set);
                w.u32(3, DYNSET_UPDATE);
                w.u32(4, *sreg);
                if let Some(t) = timeout_ms {
                    w.u64(6, *t);
                }
            }
            Expr::Counter => {
                w.u64(1, 0);
                w.u64(2, 0);
            }
        }
        w.end(data);
        w.end(elem);
    }
}

/// Expressions for the common matches, in nft's register layout.
pub mod m {
    use super::*;
    use crate::nft::AddrFamily;
    use std::net::{IpAddr, Ipv4Addr};

    /// `ip daddr` / `ip6 daddr` into `reg`.
    pub fn daddr(f: AddrFamily, reg: u32) -> Expr {
        match f {
            AddrFamily::V4 => ip_daddr(reg),
            AddrFamily::V6 => Expr::Payload {
                dreg: reg,
                base: BASE_NETWORK,
                offset: 24,
                len: 16,
            },
        }
    }

    /// `ip saddr` / `ip6 saddr` into `reg`.
    pub fn saddr(f: AddrFamily, reg: u32) -> Expr {
        match f {
            AddrFamily::V4 => ip_saddr(reg),
            AddrFamily::V6 => Expr::Payload {
                dreg: reg,
                base: BASE_NETWORK,
                offset: 8,
                len: 16,
            },
        }
    }

    /// `daddr . meta l4proto . th dport` from register 1 on.
    pub fn daddr_proto_port_of(f: AddrFamily) -> Vec<Expr> {
        let w = f.addr_regs();
        vec![daddr(f, REG_1), l4proto(reg32(w)), th_dport(reg32(w + 1))]
    }

    /// `<load> == net` or `!=`, as a prefix match when `prefix` is shorter than the address
    /// (IPv4 or IPv6, as `net` is).
    pub fn addr_in(load: Expr, net: IpAddr, prefix: u8, op: CmpOp) -> Vec<Expr> {
        let bytes = crate::nft::octets(&net);
        let bits = bytes.len() * 8;
        let mut v = vec![load];
        if (prefix as usize) < bits {
            let mask: Vec<u8> = (0..bytes.len())
                .map(|i| {
                    let have = (prefix as usize).saturating_sub(i * 8).min(8);
                    if have == 0 {
                        0
                    } else {
                        0xffu8 << (8 - have)
                    }
                })
                .collect();
            let masked: Vec<u8> = bytes.iter().zip(&mask).map(|(b, m)| b & m).collect();
            v.push(Expr::Bitwise {
                sreg: REG_1,
                dreg: REG_1,
                xor: vec![0; mask.len()],
                mask,
            });
            v.push(Expr::Cmp {
                sreg: REG_1,
                op,
                data: masked,
            });
        } else {
            v.push(Expr::Cmp {
                sreg: REG_1,
                op,
                data: bytes,
            });
        }
        v
    }

    /// `meta l4proto <p> dnat to addr:port`, IPv4 or IPv6 as `addr` is.
    pub fn dnat_to(proto: u8, addr: IpAddr, port: u16) -> Vec<Expr> {
        vec![
            l4proto(REG_1),
            Expr::Cmp {
                sreg: REG_1,
                op: CmpOp::Eq,
                data: vec![proto],
            },
            Expr::Immediate {
                dreg: REG_1,
                data: crate::nft::octets(&addr),
            },
            Expr::Immediate {
                dreg: REG_2,
                data: port.to_be_bytes().to_vec(),
            },
            Expr::Dnat {
                family: AddrFamily::of(&addr).nfproto(),
                addr_reg: REG_1,
                proto_reg: Some(REG_2),
            },
        ]
    }

    /// `ip daddr` (or saddr) into `reg`.
    pub fn ip_daddr(reg: u32) -> Expr {
        Expr::Payload {
            dreg: reg,
            base: BASE_NETWORK,
            offset: 16,
            len: 4,
        }
    }

    pub fn ip_saddr(reg: u32) -> Expr {
        Expr::Payload {
            dreg: reg,
            base: BASE_NETWORK,
            offset: 12,
            len: 4,
        }
    }

    /// `th dport` into `reg`.
    pub fn th_dport(reg: u32) -> Expr {
        Expr::Payload {
            dreg: reg,
            base: BASE_TRANSPORT,
            offset: 2,
            len: 2,
        }
    }

    pub fn l4proto(reg: u32) -> Expr {
        Expr::Meta {
            dreg: reg,
            key: META_L4PROTO,
        }
    }

    /// `ip daddr . meta l4proto . th dport` from register 1 on (a 12-byte key).
    pub fn daddr_proto_port() -> [Expr; 3] {
        [ip_daddr(REG_1), l4proto(reg32(1)), th_dport(reg32(2))]
    }

    /// `meta l4proto . th dport` from register 1 on (an 8-byte key).
    pub fn proto_port() -> [Expr; 2] {
        [l4proto(REG_1), th_dport(reg32(1))]
    }

    /// `<reg> == addr` or `!=`, as a prefix match when `prefix < 32`.
    pub fn ip_in(load: Expr, net: Ipv4Addr, prefix: u8, op: CmpOp) -> Vec<Expr> {
        addr_in(load, IpAddr::V4(net), prefix, op)
    }

    /// `<load> & mask <op> 0`, for host-order 4-byte values (ct state, mark).
    fn masked(load: Expr, mask: u32, op: CmpOp) -> Vec<Expr> {
        vec![
            load,
            Expr::Bitwise {
                sreg: REG_1,
                dreg: REG_1,
                mask: mask.to_ne_bytes().to_vec(),
                xor: vec![0; 4],
            },
            Expr::Cmp {
                sreg: REG_1,
                op,
                data: vec![0; 4],
            },
        ]
    }

    /// `ct state new`.
    pub fn ct_state_new() -> Vec<Expr> {
        masked(
            Expr::Ct {
                dreg: REG_1,
                key: CT_STATE,
            },
            CT_STATE_NEW,
            CmpOp::Neq,
        )
    }

    /// `ct state established,related`.
    pub fn ct_state_established_related() -> Vec<Expr> {
        masked(
            Expr::Ct {
                dreg: REG_1,
                key: CT_STATE,
            },
            CT_STATE_ESTABLISHED | CT_STATE_RELATED,
            CmpOp::Neq,
        )
    }

    /// `meta l4proto <proto>`, and with `ports` `th dport <first>-<last>` (one port when
    /// they are equal).
    pub fn proto_ports(proto: u8, ports: Option<(u16, u16)>) -> Vec<Expr> {
        let mut v = vec![
            l4proto(REG_1),
            Expr::Cmp {
                sreg: REG_1,
                op: CmpOp::Eq,
                data: vec![proto],
            },
        ];
        match ports {
            None => {}
            Some((a, b)) if a == b => v.extend([
                th_dport(REG_1),
                Expr::Cmp {
                    sreg: REG_1,
                    op: CmpOp::Eq,
                    data: a.to_be_bytes().to_vec(),
                },
            ]),
            Some((a, b)) => v.extend([
                th_dport(REG_1),
                Expr::Cmp {
                    sreg: REG_1,
                    op: CmpOp::Gte,
                    data: a.to_be_bytes().to_vec(),
                },
                Expr::Cmp {
                    sreg: REG_1,
                    op: CmpOp::Lte,
                    data: b.to_be_bytes().to_vec(),
                },
            ]),
        }
        v
    }

    /// `fib daddr type local`.
    pub fn fib_daddr_local() -> Vec<Expr> {
        vec![
            Expr::Fib {
                dreg: REG_1,
                result: FIB_RESULT_ADDRTYPE,
                flags: FIB_F_DADDR,
            },
            Expr::Cmp {
                sreg: REG_1,
                op: CmpOp::Eq,
                data: RTN_LOCAL.to_ne_bytes().to_vec(),
            },
        ]
    }

    /// `fib saddr type local`.
    pub fn fib_saddr_local() -> Vec<Expr> {
        vec![
            Expr::Fib {
                dreg: REG_1,
                result: FIB_RESULT_ADDRTYPE,
                flags: FIB_F_SADDR,
            },
            Expr::Cmp {
                sreg: REG_1,
                op: CmpOp::Eq,
                data: RTN_LOCAL.to_ne_bytes().to_vec(),
            },
        ]
    }

    /// `meta mark set meta mark | bits`.
    pub fn mark_or(bits: u32) -> Vec<Expr> {
        vec![
            Expr::Meta {
                dreg: REG_1,
                key: META_MARK,
            },
            Expr::Bitwise {
                sreg: REG_1,
                dreg: REG_1,
                mask: (!bits).to_ne_bytes().to_vec(),
                xor: bits.to_ne_bytes().to_vec(),
            },
            Expr::MetaSet {
                sreg: REG_1,
                key: META_MARK,
            },
        ]
    }

    /// `meta mark set meta mark ^ bits`.
    pub fn mark_xor(bits: u32) -> Vec<Expr> {
        vec![
            Expr::Meta {
                dreg: REG_1,
                key: META_MARK,
            },
            Expr::Bitwise {
                sreg: REG_1,
                dreg: REG_1,
                mask: u32::MAX.to_ne_bytes().to_vec(),
                xor: bits.to_ne_bytes().to_vec(),
            },
            Expr::MetaSet {
                sreg: REG_1,
                key: META_MARK,
            },
        ]
    }

    /// `meta mark & bits == 0`.
    pub fn mark_clear(bits: u32) -> Vec<Expr> {
        masked(
            Expr::Meta {
                dreg: REG_1,
                key: META_MARK,
            },
            bits,
            CmpOp::Eq,
        )
    }

    /// `meta l4proto <p> dnat to addr:port`.
    pub fn dnat(proto: u8, addr: Ipv4Addr, port: u16) -> Vec<Expr> {
        dnat_to(proto, IpAddr::V4(addr), port)
    }
}
