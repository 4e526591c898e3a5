//! nf_tables over netlink: the tables, chains, sets, elements and rules r8s programs, built
//! into one batch that the kernel applies as a single atomic transaction ([`Batch`]), sent on
//! a `NETLINK_NETFILTER` socket ([`Conn`]). The byte layer is in [`wire`], expressions in
//! [`expr`]; `docs/design/nftables-proxy.md` is the reference for every number.

pub mod expr;
pub mod wire;

use std::io;

pub use expr::{CmpOp, Data, Expr, Verdict};
pub use wire::Family;

/// One IP family's addresses as rules and sets see them: the table family they live in, the
/// address's size in bytes and in 4-byte registers, its set datatype.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AddrFamily {
    V4,
    V6,
}

impl AddrFamily {
    pub fn of(ip: &std::net::IpAddr) -> Self {
        if ip.is_ipv4() {
            AddrFamily::V4
        } else {
            AddrFamily::V6
        }
    }

    pub fn table(self) -> Family {
        match self {
            AddrFamily::V4 => Family::Ipv4,
            AddrFamily::V6 => Family::Ipv6,
        }
    }

    /// `NFPROTO_*`, as NAT expressions name the family of their addresses.
    pub fn nfproto(self) -> u8 {
        self.table() as u8
    }

    pub fn addr_len(self) -> u32 {
        match self {
            AddrFamily::V4 => 4,
            AddrFamily::V6 => 16,
        }
    }

    /// 4-byte registers an address takes in a concatenation.
    pub fn addr_regs(self) -> u32 {
        self.addr_len() / 4
    }

    pub fn addr_type(self) -> u32 {
        match self {
            AddrFamily::V4 => types::IPV4_ADDR,
            AddrFamily::V6 => types::IPV6_ADDR,
        }
    }

    pub fn bits(self) -> u8 {
        (self.addr_len() * 8) as u8
    }

    /// The name Kubernetes gives it (ipFamilies, EndpointSlice addressType).
    pub fn name(self) -> &'static str {
        match self {
            AddrFamily::V4 => "IPv4",
            AddrFamily::V6 => "IPv6",
        }
    }

    /// The loopback range.
    pub fn loopback(self) -> (std::net::IpAddr, u8) {
        match self {
            AddrFamily::V4 => (std::net::Ipv4Addr::new(127, 0, 0, 0).into(), 8),
            AddrFamily::V6 => (std::net::Ipv6Addr::LOCALHOST.into(), 128),
        }
    }
}

/// An address's bytes, network order (4 or 16).
pub fn octets(ip: &std::net::IpAddr) -> Vec<u8> {
    match ip {
        std::net::IpAddr::V4(a) => a.octets().to_vec(),
        std::net::IpAddr::V6(a) => a.octets().to_vec(),
    }
}
use wire::{begin_msg, end_msg, MsgType, Writer, NFNL_SUBSYS_NFTABLES};
use wire::{NLM_F_ACK, NLM_F_CREATE, NLM_F_REQUEST};

const NLM_F_APPEND: u16 = 0x800;

/// Set flags.
const SET_MAP: u32 = 0x8;
const SET_TIMEOUT: u32 = 0x10;
const SET_EVAL: u32 = 0x20;
const SET_CONCAT: u32 = 0x80;
const DATA_VERDICT: u32 = 0xffff_ff00;

/// nft's datatype ids (only for `nft list` to print keys; the kernel ignores them), packed 6
/// bits per field for concatenations.
pub mod types {
    pub const IPV4_ADDR: u32 = 7;
    pub const IPV6_ADDR: u32 = 8;
    pub const INET_PROTO: u32 = 12;
    pub const INET_SERVICE: u32 = 13;
    /// A number of no fixed size: only for a whole key or value, never a field of a
    /// concatenation (nft splits a concatenated element by its fields' type sizes, and this
    /// one's is 0: Debian 12's nft 1.0.6 then aborts listing the whole ruleset).
    pub const INTEGER: u32 = 4;
    /// 32 bits in host byte order (nft's `mark`): a number that is a concatenation's field.
    pub const MARK: u32 = 19;

    pub const fn concat(fields: &[u32]) -> u32 {
        let mut v = 0;
        let mut i = 0;
        while i < fields.len() {
            v = (v << 6) | fields[i];
            i += 1;
        }
        v
    }
}

/// Hooks and chain types of base chains.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    Prerouting = 0,
    Input = 1,
    Forward = 2,
    Output = 3,
    Postrouting = 4,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChainType {
    Filter,
    Nat,
}

/// A base chain's hook: where packets enter it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BaseChain {
    pub hook: Hook,
    pub priority: i32,
    pub kind: ChainType,
}

/// A named set or map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetSpec {
    pub name: String,
    /// nft's datatype id of the key (see [`types`]).
    pub key_type: u32,
    /// Each key field's length in bytes (unpadded).
    pub fields: Vec<u32>,
    /// A verdict map rather than a set.
    pub verdict_map: bool,
    /// A data map: each element carries a value of this (nft datatype, length in bytes).
    pub value: Option<(u32, u32)>,
    /// Elements expire after this long (a dynamic set updated from the packet path).
    pub timeout_ms: Option<u64>,
}

impl SetSpec {
    /// The key's length: each field padded to a 4-byte register.
    pub fn key_len(&self) -> u32 {
        self.fields.iter().map(|f| f.div_ceil(4) * 4).sum()
    }
}

/// One transaction on one table: messages accumulate and [`Conn::apply`] sends them as one
/// batch, which the kernel applies whole or not at all.
pub struct Batch {
    buf: Vec<u8>,
    family: Family,
    table: String,
    seq: u32,
    next_id: u32,
    /// (seq, where the message starts) of every message, to name a failing one.
    msgs: Vec<(u32, usize)>,
}

/// What one element being written carries.
enum ElemData<'e> {
    Verdict(&'e Verdict),
    Value(&'e [u8]),
}

/// The largest element-list attribute put into one message (an attribute's length is a u16).
const MAX_ELEMS_BYTES: usize = 60_000;

impl Batch {
    pub fn new(family: Family, table: &str) -> Self {
        let mut buf = Vec::with_capacity(4096);
        let at = begin_msg(
            &mut buf,
            wire::NFNL_MSG_BATCH_BEGIN,
            NLM_F_REQUEST,
            1,
            0,
            NFNL_SUBSYS_NFTABLES,
        );
        end_msg(&mut buf, at);
        Batch {
            buf,
            family,
            table: table.to_owned(),
            seq: 1,
            next_id: 1,
            msgs: Vec::new(),
        }
    }

    /// How many messages are in the batch (beyond its begin and end).
    pub fn len(&self) -> usize {
        self.msgs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.msgs.is_empty()
    }

    /// The batch's size in bytes so far.
    pub fn bytes(&self) -> usize {
        self.buf.len()
    }

    fn start(&mut self, ty: MsgType, flags: u16) -> usize {
        self.seq += 1;
        let at = begin_msg(
            &mut self.buf,
            (NFNL_SUBSYS_NFTABLES << 8) | ty as u16,
            NLM_F_REQUEST | flags,
            self.seq,
            self.family as u8,
            0,
        );
        self.msgs.push((self.seq, at));
        at
    }

    fn w(&mut self) -> Writer<'_> {
        Writer { buf: &mut self.buf }
    }

    /// Create the table if it does not exist.
    pub fn add_table(&mut self) {
        let at = self.start(MsgType::NewTable, NLM_F_CREATE);
        let table = self.table.clone();
        let mut w = self.w();
        w.str(1, &table);
        w.u32(2, 0);
        end_msg(&mut self.buf, at);
    }

    /// Delete the table and everything in it.
    pub fn del_table(&mut self) {
        let at = self.start(MsgType::DelTable, 0);
        let table = self.table.clone();
        self.w().str(1, &table);
        end_msg(&mut self.buf, at);
    }

    /// Create a chain if it does not exist (a base chain with its hook).
    pub fn add_chain(&mut self, name: &str, base: Option<BaseChain>) {
        let at = self.start(MsgType::NewChain, NLM_F_CREATE);
        let table = self.table.clone();
        let mut w = self.w();
        w.str(1, &table);
        w.str(3, name);
        if let Some(b) = base {
            let h = w.begin(4);
            w.u32(1, b.hook as u32);
            w.u32(2, b.priority as u32);
            w.end(h);
            w.u32(5, 1); // policy accept
            w.str(
                7,
                match b.kind {
                    ChainType::Filter => "filter",
                    ChainType::Nat => "nat",
                },
            );
        }
        end_msg(&mut self.buf, at);
    }

    /// A message naming only the table (attribute 1) and one object in it (`name_attr`).
    fn named(&mut self, ty: MsgType, name_attr: u16, name: &str) {
        let at = self.start(ty, 0);
        let table = self.table.clone();
        let mut w = self.w();
        w.str(1, &table);
        w.str(name_attr, name);
        end_msg(&mut self.buf, at);
    }

    /// Remove every rule of a chain.
    pub fn flush_chain(&mut self, name: &str) {
        self.named(MsgType::DelRule, 2, name);
    }

    pub fn del_chain(&mut self, name: &str) {
        self.named(MsgType::DelChain, 3, name);
    }

    /// Create a named set or map if it does not exist (its properties must then be the same).
    pub fn add_set(&mut self, set: &SetSpec) {
        let mut flags = 0;
        if set.verdict_map || set.value.is_some() {
            flags |= SET_MAP;
        }
        if set.fields.len() > 1 {
            flags |= SET_CONCAT;
        }
        if set.timeout_ms.is_some() {
            flags |= SET_TIMEOUT | SET_EVAL;
        }
        let id = self.next_id;
        self.next_id += 1;
        let at = self.start(MsgType::NewSet, NLM_F_CREATE);
        let table = self.table.clone();
        let mut w = self.w();
        w.str(1, &table);
        w.str(2, &set.name);
        w.u32(3, flags);
        w.u32(4, set.key_type);
        w.u32(5, set.key_len());
        if set.verdict_map {
            w.u32(6, DATA_VERDICT);
        } else if let Some((ty, len)) = set.value {
            w.u32(6, ty); // NFTA_SET_DATA_TYPE
            w.u32(7, len); // NFTA_SET_DATA_LEN
        }
        w.u32(10, id);
        if let Some(t) = set.timeout_ms {
            w.u64(11, t);
        }
        if set.fields.len() > 1 {
            let desc = w.begin(9);
            let concat = w.begin(2);
            for f in &set.fields {
                let e = w.begin(1);
                w.u32(1, *f);
                w.end(e);
            }
            w.end(concat);
            w.end(desc);
        }
        end_msg(&mut self.buf, at);
    }

    /// Remove every element of a set.
    pub fn flush_set(&mut self, name: &str) {
        self.named(MsgType::DelSetElem, 2, name);
    }

    pub fn del_set(&mut self, name: &str) {
        self.named(MsgType::DelSet, 2, name);
    }

    /// Add elements (with their verdicts, for a map), in as many messages as their size needs.
    pub fn add_elems<'e>(
        &mut self,
        set: &str,
        elems: impl IntoIterator<Item = (&'e [u8], Option<&'e Verdict>)>,
    ) {
        self.elems(
            MsgType::NewSetElem,
            set,
            elems.into_iter().map(|(k, v)| (k, v.map(ElemData::Verdict))),
        );
    }

    /// Add elements of a set, a verdict map or a data map.
    pub fn add_data_elems<'e>(
        &mut self,
        set: &str,
        elems: impl IntoIterator<Item = (&'e [u8], Option<&'e Data>)>,
    ) {
        let elems = elems.into_iter().map(|(k, d)| {
            let d = d.map(|d| match d {
                Data::Verdict(v) => ElemData::Verdict(v),
                Data::Value(v) => ElemData::Value(v),
            });
            (k, d)
        });
        self.elems(MsgType::NewSetElem, set, elems);
    }

    /// Delete elements by key.
    pub fn del_elems<'e>(&mut self, set: &str, keys: impl IntoIterator<Item = &'e [u8]>) {
        self.elems(MsgType::DelSetElem, set, keys.into_iter().map(|k| (k, None)));
    }

    fn elems<'e>(
        &mut self,
        ty: MsgType,
        set: &str,
        elems: impl IntoIterator<Item = (&'e [u8], Option<ElemData<'e>>)>,
    ) {
        let mut open: Option<(usize, usize)> = None;
        for (key, data) in elems {
            if let Some((at, list)) = open {
                if self.buf.len() - list > MAX_ELEMS_BYTES {
                    self.w().end(list);
                    end_msg(&mut self.buf, at);
                    open = None;
                }
            }
            let (_, _) = *open.get_or_insert_with(|| {
                let flags = if ty == MsgType::NewSetElem {
                    NLM_F_CREATE
                } else {
                    0
                };
                let at = self.start(ty, flags);
                let table = self.table.clone();
                let mut w = self.w();
                w.str(1, &table);
                w.str(2, set);
                let list = w.begin(3);
                (at, list)
            });
            let mut w = self.w();
            let e = w.begin(1);
            let k = w.begin(1);
            w.bytes(1, key);
            w.end(k);
            match data {
                Some(ElemData::Verdict(v)) => {
                    let d = w.begin(2); // NFTA_SET_ELEM_DATA
                    v.write(&mut w);
                    w.end(d);
                }
                Some(ElemData::Value(v)) => {
                    let d = w.begin(2);
                    w.bytes(1, v); // NFTA_DATA_VALUE
                    w.end(d);
                }
                None => {}
            }
            w.end(e);
        }
        if let Some((at, list)) = open {
            self.w().end(list);
            end_msg(&mut self.buf, at);
        }
    }

    /// Append a rule to a chain.
    pub fn add_rule(&mut self, chain: &str, exprs: &[Expr]) {
        let at = self.start(MsgType::NewRule, NLM_F_CREATE | NLM_F_APPEND);
        let table = self.table.clone();
        let mut w = self.w();
        w.str(1, &table);
        w.str(2, chain);
        let list = w.begin(4);
        for e in exprs {
            e.write(&mut w);
        }
        w.end(list);
        end_msg(&mut self.buf, at);
    }

    /// Close the batch: the end message, acknowledged on commit.
    fn finish(mut self) -> (Vec<u8>, u32, Vec<(u32, usize)>) {
        self.seq += 1;
        let at = begin_msg(
            &mut self.buf,
            wire::NFNL_MSG_BATCH_END,
            NLM_F_REQUEST | NLM_F_ACK,
            self.seq,
            0,
            NFNL_SUBSYS_NFTABLES,
        );
        end_msg(&mut self.buf, at);
        (self.buf, self.seq, self.msgs)
    }
}

/// Why a transaction failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("nftables: {0}")]
    Io(#[from] io::Error),
    #[error("nftables: the kernel refused {what}: {err}{}", .message.as_deref().map(|m| format!(" ({m})")).unwrap_or_default())]
    Refused {
        what: String,
        err: io::Error,
        message: Option<String>,
    },
    #[error("nftables: the kernel did not answer the transaction")]
    NoAnswer,
}

impl Error {
    /// The errno of a refusal.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Refused { err, .. } => err.raw_os_error(),
            Error::Io(e) => e.raw_os_error(),
            Error::NoAnswer => None,
        }
    }
}

/// A `NETLINK_NETFILTER` socket in the network namespace it was opened in.
pub struct Conn {
    sock: netlink_sys::Socket,
}

impl Conn {
    pub fn new() -> io::Result<Self> {
        let mut sock = netlink_sys::Socket::new(netlink_sys::protocols::NETLINK_NETFILTER)?;
        sock.bind_auto()?;
        // Errors name the failing message without echoing it; the kernel's reason comes along.
        sock.set_cap_ack(true)?;
        sock.set_ext_ack(true)?;
        Ok(Conn { sock })
    }

    /// Apply a batch as one transaction.
    pub fn apply(&self, batch: Batch) -> Result<(), Error> {
        if batch.is_empty() {
            return Ok(());
        }
        let (buf, end_seq, msgs) = batch.finish();
        grow_sndbuf(&self.sock, buf.len())?;
        let kernel = netlink_sys::SocketAddr::new(0, 0);
        self.sock.send_to(&buf, &kernel, 0)?;
        // The kernel processes the batch inside the send and queues every answer before it
        // returns: read until the queue is empty.
        let mut acks = Vec::new();
        let mut rx: Vec<u8> = Vec::with_capacity(1 << 16);
        loop {
            rx.clear();
            match self.sock.recv(&mut rx, libc::MSG_DONTWAIT) {
                Ok(_) => acks.extend(wire::parse_acks(&rx)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::Io(e)),
            }
        }
        if let Some(bad) = acks.iter().find(|a| a.errno != 0) {
            let what = match msgs.binary_search_by_key(&bad.seq, |m| m.0) {
                Ok(i) => describe(&buf[msgs[i].1..]),
                Err(_) => "the transaction".to_owned(),
            };
            return Err(Error::Refused {
                what,
                err: io::Error::from_raw_os_error(bad.errno),
                message: bad.message.clone(),
            });
        }
        if acks.iter().any(|a| a.seq == end_seq) {
            Ok(())
        } else {
            Err(Error::NoAnswer)
        }
    }
}

/// Make room for one batch in the socket's send buffer (a batch is one datagram).
fn grow_sndbuf(sock: &netlink_sys::Socket, len: usize) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let want = (len + 64 * 1024).min(i32::MAX as usize) as libc::c_int;
    let fd = sock.as_raw_fd();
    let set = |opt| unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            &want as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    // SO_SNDBUFFORCE passes net.core.wmem_max (the agent has CAP_NET_ADMIN); SO_SNDBUF is the
    // fallback, capped by it.
    if set(libc::SO_SNDBUFFORCE) != 0 && set(libc::SO_SNDBUF) != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Name a message for an error: its type and the names it carries.
fn describe(msg: &[u8]) -> String {
    let ty = msg.get(4).copied().and_then(MsgType::from_u8);
    let mut names = Vec::new();
    let mut rest = msg.get(20..).unwrap_or(&[]);
    let total = u32::from_ne_bytes(msg[0..4].try_into().unwrap_or([0; 4])) as usize;
    rest = &rest[..rest.len().min(total.saturating_sub(20))];
    while rest.len() >= 4 {
        let len = u16::from_ne_bytes([rest[0], rest[1]]) as usize;
        let nested = u16::from_ne_bytes([rest[2], rest[3]]) & wire::NLA_F_NESTED != 0;
        if len < 4 || len > rest.len() {
            break;
        }
        let v = &rest[4..len];
        if !nested
            && v.len() > 1
            && v.last() == Some(&0)
            && v[..v.len() - 1].iter().all(|b| b.is_ascii_graphic())
        {
            names.push(String::from_utf8_lossy(&v[..v.len() - 1]).into_owned());
        }
        rest = rest.get((len + 3) & !3..).unwrap_or(&[]);
    }
    format!(
        "{} {}",
        ty.map(|t| format!("{t:?}")).unwrap_or_else(|| "message".into()),
        names.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concat_key_lengths_and_types() {
        let s = SetSpec {
            name: "service-ips".into(),
            key_type: types::concat(&[types::IPV4_ADDR, types::INET_PROTO, types::INET_SERVICE]),
            fields: vec![4, 1, 2],
            verdict_map: true,
            value: None,
            timeout_ms: None,
        };
        assert_eq!(s.key_len(), 12);
        assert_eq!(s.key_type, 0x730d);
    }

    #[test]
    fn large_element_lists_split_into_messages_under_64k() {
        let mut b = Batch::new(Family::Ipv4, "r8s");
        let keys: Vec<[u8; 12]> = (0..5000u32)
            .map(|i| {
                let mut k = [0u8; 12];
                k[..4].copy_from_slice(&i.to_be_bytes());
                k
            })
            .collect();
        let v = Verdict::Goto("service-0123456789-ns/name/tcp/http".into());
        b.add_elems("service-ips", keys.iter().map(|k| (&k[..], Some(&v))));
        assert!(b.len() > 1, "one message for 5000 elements");
        // Every message fits in a u16-length attribute.
        let (buf, _, msgs) = b.finish();
        for (_, at) in &msgs {
            let len = u32::from_ne_bytes(buf[*at..*at + 4].try_into().unwrap()) as usize;
            assert!(len < 65_535, "message of {len} bytes");
        }
    }

    #[test]
    fn describe_names_the_failing_object() {
        let mut b = Batch::new(Family::Ipv4, "r8s");
        b.add_chain("services", None);
        let (buf, _, msgs) = b.finish();
        assert_eq!(describe(&buf[msgs[0].1..]), "NewChain r8s services");
    }
}
