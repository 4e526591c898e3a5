//! nf_tables messages as bytes: netlink headers, nfgenmsg, attributes and nests, the batch that
//! makes one transaction. Written here because no well-kept MIT crate speaks nf_tables
//! (`netlink-packet-netfilter` has nflog and conntrack only; `rustables` is GPL; `nftnl` links
//! the LGPL libnftnl). Numbers are the 6.1 UAPI's (`linux/netfilter/nf_tables.h`,
//! `nfnetlink.h`, `netlink.h`); `docs/design/nftables-proxy.md` gives their sources.
//!
//! Byte order: netlink and attribute headers are host order, the nfgenmsg's `res_id` and every
//! nf_tables integer attribute big-endian, register data raw (the compared thing's order).

pub const NFNL_SUBSYS_NFTABLES: u16 = 10;
pub const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
pub const NFNL_MSG_BATCH_END: u16 = 0x11;

pub const NLM_F_REQUEST: u16 = 0x1;
pub const NLM_F_ACK: u16 = 0x4;
pub const NLM_F_EXCL: u16 = 0x200;
pub const NLM_F_CREATE: u16 = 0x400;
pub const NLA_F_NESTED: u16 = 0x8000;

pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;

/// `NFT_MSG_*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum MsgType {
    NewTable = 0,
    DelTable = 2,
    NewChain = 3,
    DelChain = 5,
    NewRule = 6,
    DelRule = 8,
    NewSet = 9,
    DelSet = 11,
    NewSetElem = 12,
    DelSetElem = 14,
}

impl MsgType {
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Self::NewTable,
            2 => Self::DelTable,
            3 => Self::NewChain,
            5 => Self::DelChain,
            6 => Self::NewRule,
            8 => Self::DelRule,
            9 => Self::NewSet,
            11 => Self::DelSet,
            12 => Self::NewSetElem,
            14 => Self::DelSetElem,
            _ => return None,
        })
    }
}

/// Table families (`NFPROTO_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    Inet = 1,
    Ipv4 = 2,
    Ipv6 = 10,
}

/// An attribute writer over a growing buffer: every attribute is padded to 4 bytes, a nest's
/// length back-patched when it closes.
pub struct Writer<'a> {
    pub buf: &'a mut Vec<u8>,
}

impl Writer<'_> {
    pub fn bytes(&mut self, ty: u16, data: &[u8]) {
        let len = 4 + data.len();
        assert!(len <= u16::MAX as usize, "netlink attribute of {len} bytes");
        self.buf.extend_from_slice(&(len as u16).to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(data);
        self.pad();
    }

    pub fn u32(&mut self, ty: u16, v: u32) {
        self.bytes(ty, &v.to_be_bytes());
    }

    pub fn u64(&mut self, ty: u16, v: u64) {
        self.bytes(ty, &v.to_be_bytes());
    }

    pub fn u8(&mut self, ty: u16, v: u8) {
        self.bytes(ty, &[v]);
    }

    /// A NUL-terminated string, as nft sends names.
    pub fn str(&mut self, ty: u16, s: &str) {
        let mut v = Vec::with_capacity(s.len() + 1);
        v.extend_from_slice(s.as_bytes());
        v.push(0);
        self.bytes(ty, &v);
    }

    /// Open a nest; close it with [`Writer::end`].
    pub fn begin(&mut self, ty: u16) -> usize {
        let at = self.buf.len();
        self.buf.extend_from_slice(&[0, 0]);
        self.buf.extend_from_slice(&(ty | NLA_F_NESTED).to_ne_bytes());
        at
    }

    pub fn end(&mut self, at: usize) {
        let len = self.buf.len() - at;
        assert!(len <= u16::MAX as usize, "netlink nest of {len} bytes");
        self.buf[at..at + 2].copy_from_slice(&(len as u16).to_ne_bytes());
    }

    fn pad(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }
}

/// Begin one netlink message (nlmsghdr + nfgenmsg) at the end of `buf`; returns where it
/// starts, for [`end_msg`].
pub fn begin_msg(buf: &mut Vec<u8>, ty: u16, flags: u16, seq: u32, family: u8, res_id: u16) -> usize {
    let at = buf.len();
    buf.extend_from_slice(&0u32.to_ne_bytes()); // length, patched by end_msg
    buf.extend_from_slice(&ty.to_ne_bytes());
    buf.extend_from_slice(&flags.to_ne_bytes());
    buf.extend_from_slice(&seq.to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel
    buf.push(family);
    buf.push(0); // NFNETLINK_V0
    buf.extend_from_slice(&res_id.to_be_bytes());
    at
}

pub fn end_msg(buf: &mut [u8], at: usize) {
    let len = (buf.len() - at) as u32;
    buf[at..at + 4].copy_from_slice(&len.to_ne_bytes());
}

/// One answer the kernel sent for a batch: the sequence number it answers and the error
/// (0 for an acknowledgement), with the kernel's extended-ack message if it gave one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    pub seq: u32,
    pub errno: i32,
    pub message: Option<String>,
}

/// Parse the netlink messages in `data` into acks and errors (other messages are skipped).
pub fn parse_acks(data: &[u8]) -> Vec<Ack> {
    const NLMSGERR_ATTR_MSG: u16 = 1;
    const NLM_F_ACK_TLVS: u16 = 0x200;
    const NLM_F_CAPPED: u16 = 0x100;
    let mut out = Vec::new();
    let mut rest = data;
    while rest.len() >= 16 {
        let len = u32::from_ne_bytes(rest[0..4].try_into().unwrap()) as usize;
        if len < 16 || len > rest.len() {
            break;
        }
        let ty = u16::from_ne_bytes(rest[4..6].try_into().unwrap());
        let flags = u16::from_ne_bytes(rest[6..8].try_into().unwrap());
        let seq = u32::from_ne_bytes(rest[8..12].try_into().unwrap());
        let body = &rest[16..len];
        if ty == NLMSG_ERROR && body.len() >= 4 {
            let errno = -i32::from_ne_bytes(body[0..4].try_into().unwrap());
            let mut message = None;
            if flags & NLM_F_ACK_TLVS != 0 && body.len() >= 20 {
                // The original header, and its payload unless capped.
                let orig_len = u32::from_ne_bytes(body[4..8].try_into().unwrap()) as usize;
                let skip = if flags & NLM_F_CAPPED != 0 {
                    16
                } else {
                    orig_len.max(16)
                };
                let mut tlvs = body.get(4 + skip..).unwrap_or(&[]);
                while tlvs.len() >= 4 {
                    let alen = u16::from_ne_bytes(tlvs[0..2].try_into().unwrap()) as usize;
                    let aty = u16::from_ne_bytes(tlvs[2..4].try_into().unwrap()) & 0x3fff;
                    if alen < 4 || alen > tlvs.len() {
                        break;
                    }
                    if aty == NLMSGERR_ATTR_MSG {
                        let s = &tlvs[4..alen];
                        let s = s.split(|b| *b == 0).next().unwrap_or(s);
                        message = Some(String::from_utf8_lossy(s).into_owned());
                    }
                    let step = (alen + 3) & !3;
                    tlvs = tlvs.get(step..).unwrap_or(&[]);
                }
            }
            out.push(Ack { seq, errno, message });
        }
        let step = (len + 3) & !3;
        rest = rest.get(step..).unwrap_or(&[]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The design note's worked example: a batch's BEGIN and a NEWTABLE "r8s" in family ip.
    #[test]
    fn begin_and_new_table_bytes() {
        let mut buf = Vec::new();
        let at = begin_msg(
            &mut buf,
            NFNL_MSG_BATCH_BEGIN,
            NLM_F_REQUEST,
            1,
            0,
            NFNL_SUBSYS_NFTABLES,
        );
        end_msg(&mut buf, at);
        let at = begin_msg(
            &mut buf,
            (NFNL_SUBSYS_NFTABLES << 8) | MsgType::NewTable as u16,
            NLM_F_REQUEST | NLM_F_CREATE | NLM_F_ACK,
            2,
            Family::Ipv4 as u8,
            0,
        );
        let mut w = Writer { buf: &mut buf };
        w.str(1, "r8s");
        w.u32(2, 0);
        end_msg(&mut buf, at);
        #[rustfmt::skip]
        let want: Vec<u8> = vec![
            0x14, 0, 0, 0, 0x10, 0, 0x01, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a,
            0x24, 0, 0, 0, 0, 0x0a, 0x05, 0x04, 2, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0,
            8, 0, 1, 0, b'r', b'8', b's', 0,
            8, 0, 2, 0, 0, 0, 0, 0,
        ];
        if cfg!(target_endian = "little") {
            assert_eq!(buf, want);
        }
    }

    #[test]
    fn nests_cover_their_padded_children() {
        let mut buf = Vec::new();
        let mut w = Writer { buf: &mut buf };
        let n = w.begin(3);
        w.u8(1, 7); // 5 bytes + 3 padding
        w.str(2, "ab"); // 7 bytes + 1 padding
        w.end(n);
        assert_eq!(buf.len(), 4 + 8 + 8);
        assert_eq!(u16::from_ne_bytes([buf[0], buf[1]]), 20);
        assert_eq!(u16::from_ne_bytes([buf[2], buf[3]]), 3 | NLA_F_NESTED);
        // The child's own length excludes its padding.
        assert_eq!(u16::from_ne_bytes([buf[4], buf[5]]), 5);
        assert_eq!(u16::from_ne_bytes([buf[12], buf[13]]), 7);
    }

    #[test]
    fn acks_and_extended_errors_parse() {
        let mut data = Vec::new();
        // An ack (error 0) for seq 5.
        let at = data.len();
        data.extend_from_slice(&36u32.to_ne_bytes());
        data.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        data.extend_from_slice(&0x100u16.to_ne_bytes());
        data.extend_from_slice(&5u32.to_ne_bytes());
        data.extend_from_slice(&0u32.to_ne_bytes());
        data.extend_from_slice(&0i32.to_ne_bytes());
        data.extend_from_slice(&[0u8; 16]);
        assert_eq!(data.len() - at, 36);
        // An error -ENOENT for seq 6 with an extended-ack message.
        let msg = b"No such chain\0";
        let attr_len = 4 + msg.len();
        let total = 16 + 4 + 16 + ((attr_len + 3) & !3);
        data.extend_from_slice(&(total as u32).to_ne_bytes());
        data.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        data.extend_from_slice(&0x300u16.to_ne_bytes());
        data.extend_from_slice(&6u32.to_ne_bytes());
        data.extend_from_slice(&0u32.to_ne_bytes());
        data.extend_from_slice(&(-2i32).to_ne_bytes());
        data.extend_from_slice(&[0u8; 16]);
        data.extend_from_slice(&(attr_len as u16).to_ne_bytes());
        data.extend_from_slice(&1u16.to_ne_bytes());
        data.extend_from_slice(msg);
        while !data.len().is_multiple_of(4) {
            data.push(0);
        }
        let acks = parse_acks(&data);
        assert_eq!(
            acks,
            vec![
                Ack {
                    seq: 5,
                    errno: 0,
                    message: None
                },
                Ack {
                    seq: 6,
                    errno: 2,
                    message: Some("No such chain".into())
                },
            ]
        );
    }
}
