//! The ip and cidr libraries (upstream's `library/ip.go` and `library/cidr.go`):
//!
//! - `ip()`, `isIP()`, `ip.isCanonical()`, and on a `net.IP` `family`, `isUnspecified`,
//!   `isLoopback`, `isLinkLocalMulticast`, `isLinkLocalUnicast`, `isGlobalUnicast`, and
//!   `string(ip)`;
//! - `cidr()`, `isCIDR()`, and on a `net.CIDR` `containsIP` (an IP or a string),
//!   `containsCIDR` (a CIDR or a string), `ip`, `masked`, `prefixLength`, and `string(cidr)`.
//!
//! Addresses are `std::net`'s. They are parsed as Go's `netip` parses them (no leading zeros
//! in IPv4 octets, in prefix lengths neither), because upstream's error messages are
//! `netip`'s, which tell what is wrong where `std` only says that something is. As upstream,
//! IPv4-mapped IPv6 addresses (`::ffff:1.2.3.4`) and zones (`fe80::1%eth0`) are refused.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ::cel::common::types::{Kind, Type, STRING_TYPE};
use ::cel::common::value::CowVal;
use ::cel::objects::Opaque;
use ::cel::{DeclarationError, Env, ExecutionError};

use super::{error, go_quote, of_bool, of_int, of_opaque, of_string, opaque, string, take, Ret};

const IP_NAME: &str = "net.IP";
const IP: Type = Type::simple_type(Kind::Opaque, IP_NAME);
const CIDR_NAME: &str = "net.CIDR";
const CIDR: Type = Type::simple_type(Kind::Opaque, CIDR_NAME);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ip(IpAddr);

impl Opaque for Ip {
    fn runtime_type_name(&self) -> &str {
        IP_NAME
    }
}

/// A prefix as `netip.Prefix`: the address as written (`ip()`), host bits and all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cidr {
    addr: IpAddr,
    bits: u8,
}

impl Opaque for Cidr {
    fn runtime_type_name(&self) -> &str {
        CIDR_NAME
    }
}

pub(super) fn library(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_type(IP)?;
    env.add_type(CIDR)?;
    env.add_overload("ip", "string_to_ip", vec![STRING_TYPE], to_ip)?;
    env.add_overload("isIP", "is_ip", vec![STRING_TYPE], is_ip)?;
    env.add_overload(
        "ip.isCanonical",
        "ip_is_canonical",
        vec![STRING_TYPE],
        is_canonical,
    )?;
    env.add_overload("string", "ip_to_string", vec![IP], ip_to_string)?;
    env.add_member_overload("family", "ip_family", IP, vec![], family)?;
    for (name, id, f) in [
        (
            "isUnspecified",
            "ip_is_unspecified",
            is_unspecified as ::cel::common::functions::Function,
        ),
        ("isLoopback", "ip_is_loopback", is_loopback),
        (
            "isLinkLocalMulticast",
            "ip_is_link_local_multicast",
            is_link_local_multicast,
        ),
        (
            "isLinkLocalUnicast",
            "ip_is_link_local_unicast",
            is_link_local_unicast,
        ),
        ("isGlobalUnicast", "ip_is_global_unicast", is_global_unicast),
    ] {
        env.add_member_overload(name, id, IP, vec![], f)?;
    }

    env.add_overload("cidr", "string_to_cidr", vec![STRING_TYPE], to_cidr)?;
    env.add_overload("isCIDR", "is_cidr", vec![STRING_TYPE], is_cidr)?;
    env.add_overload("string", "cidr_to_string", vec![CIDR], cidr_to_string)?;
    let contains_ip = "containsIP";
    env.add_member_overload(
        contains_ip,
        "cidr_contains_ip_string",
        CIDR,
        vec![STRING_TYPE],
        contains_ip_string,
    )?;
    env.add_member_overload(contains_ip, "cidr_contains_ip_ip", CIDR, vec![IP], contains_ip_ip)?;
    let contains_cidr = "containsCIDR";
    env.add_member_overload(
        contains_cidr,
        "cidr_contains_cidr_string",
        CIDR,
        vec![STRING_TYPE],
        contains_cidr_string,
    )?;
    env.add_member_overload(
        contains_cidr,
        "cidr_contains_cidr",
        CIDR,
        vec![CIDR],
        contains_cidr_cidr,
    )?;
    env.add_member_overload("ip", "cidr_ip", CIDR, vec![], cidr_ip)?;
    env.add_member_overload("prefixLength", "cidr_prefix_length", CIDR, vec![], prefix_length)?;
    env.add_member_overload("masked", "cidr_masked", CIDR, vec![], masked)?;
    Ok(())
}

/// `netip`'s `parseAddrError`.
fn addr_error(input: &str, msg: &str, at: &str) -> String {
    let mut e = format!("ParseAddr({}): {msg}", go_quote(input));
    if !at.is_empty() {
        e.push_str(&format!(" (at {})", go_quote(at)));
    }
    e
}

/// `netip.ParseAddr`: the address, and whether it had a zone.
fn parse_addr(s: &str) -> Result<(IpAddr, bool), String> {
    match s.bytes().find(|b| matches!(b, b'.' | b':' | b'%')) {
        Some(b'.') => Ok((IpAddr::V4(Ipv4Addr::from(parse_v4(s, s)?)), false)),
        Some(b':') => parse_v6(s).map(|(ip, zone)| (IpAddr::V6(Ipv6Addr::from(ip)), zone)),
        Some(_) => Err(addr_error(s, "missing IPv6 address", "")),
        None => Err(addr_error(s, "unable to parse IP", "")),
    }
}

/// `netip`'s `parseIPv4Fields`: the dotted quad `s`, part of `input`.
fn parse_v4(input: &str, s: &str) -> Result<[u8; 4], String> {
    let b = s.as_bytes();
    let (mut fields, mut pos, mut val, mut digits) = ([0u8; 4], 0, 0u32, 0);
    for (i, &c) in b.iter().enumerate() {
        if c.is_ascii_digit() {
            if digits == 1 && val == 0 {
                return Err(addr_error(input, "IPv4 field has octet with leading zero", ""));
            }
            val = val * 10 + u32::from(c - b'0');
            digits += 1;
            if val > 255 {
                return Err(addr_error(input, "IPv4 field has value >255", ""));
            }
        } else if c == b'.' {
            if i == 0 || i == b.len() - 1 || b[i - 1] == b'.' {
                let msg = "IPv4 field must have at least one digit";
                return Err(addr_error(input, msg, &s[i..]));
            }
            if pos == 3 {
                return Err(addr_error(input, "IPv4 address too long", ""));
            }
            fields[pos] = val as u8;
            pos += 1;
            val = 0;
            digits = 0;
        } else {
            return Err(addr_error(input, "unexpected character", &s[i..]));
        }
    }
    if pos < 3 {
        return Err(addr_error(input, "IPv4 address too short", ""));
    }
    fields[3] = val as u8;
    Ok(fields)
}

/// `netip`'s `parseIPv6`: the address, and whether it had a zone.
fn parse_v6(input: &str) -> Result<([u8; 16], bool), String> {
    let err = |msg: &str, at: &str| Err(addr_error(input, msg, at));
    let (mut s, zone) = match input.split_once('%') {
        Some((_, "")) => return err("zone must be a non-empty string", ""),
        Some((s, _)) => (s, true),
        None => (input, false),
    };
    let mut ip = [0u8; 16];
    let mut ellipsis = None;
    if let Some(rest) = s.strip_prefix("::") {
        ellipsis = Some(0);
        s = rest;
        if s.is_empty() {
            return Ok((ip, zone));
        }
    }
    let mut i = 0;
    while i < 16 {
        let b = s.as_bytes();
        let (mut off, mut acc) = (0, 0u32);
        while let Some(digit) = b.get(off).and_then(|c| (*c as char).to_digit(16)) {
            acc = (acc << 4) + digit;
            if off > 3 {
                return err("each group must have 4 or less digits", s);
            }
            if acc > 0xffff {
                return err("IPv6 field has value >=2^16", s);
            }
            off += 1;
        }
        if off == 0 {
            return err("each colon-separated field must have at least one digit", s);
        }
        if b.get(off) == Some(&b'.') {
            if ellipsis.is_none() && i != 12 {
                let msg = "embedded IPv4 address must replace the final 2 fields of the address";
                return err(msg, s);
            }
            if i + 4 > 16 {
                let msg = "too many hex fields to fit an embedded IPv4 at the end of the address";
                return err(msg, s);
            }
            ip[i..i + 4].copy_from_slice(&parse_v4(input, s)?);
            s = "";
            i += 4;
            break;
        }
        ip[i] = (acc >> 8) as u8;
        ip[i + 1] = acc as u8;
        i += 2;
        s = &s[off..];
        if s.is_empty() {
            break;
        }
        if !s.starts_with(':') {
            return err("unexpected character, want colon", s);
        } else if s.len() == 1 {
            return err("colon must be followed by more characters", s);
        }
        s = &s[1..];
        if s.starts_with(':') {
            if ellipsis.is_some() {
                return err("multiple :: in address", s);
            }
            ellipsis = Some(i);
            s = &s[1..];
            if s.is_empty() {
                break;
            }
        }
    }
    if !s.is_empty() {
        return err("trailing garbage after address", s);
    }
    if i < 16 {
        let Some(e) = ellipsis else {
            return err("address string too short", "");
        };
        let n = 16 - i;
        ip.copy_within(e..i, e + n);
        ip[e..e + n].fill(0);
    } else if ellipsis.is_some() {
        return err("the :: must expand to at least one field of zeros", "");
    }
    Ok((ip, zone))
}

fn is_4in6(addr: &IpAddr) -> bool {
    matches!(addr, IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some())
}

/// Upstream's `parseIPAddr`.
fn parse_ip(raw: &str) -> Result<IpAddr, String> {
    let (addr, zone) = parse_addr(raw).map_err(|e| {
        format!(
            "IP Address {} parse error during conversion from string: {e}",
            go_quote(raw)
        )
    })?;
    if zone {
        return Err(format!(
            "IP address {} with zone value is not allowed",
            go_quote(raw)
        ));
    }
    if is_4in6(&addr) {
        return Err(format!(
            "IPv4-mapped IPv6 address {} is not allowed",
            go_quote(raw)
        ));
    }
    Ok(addr)
}

/// `netip.ParsePrefix`.
fn parse_prefix(s: &str) -> Result<Cidr, String> {
    let err = |msg: &str| format!("netip.ParsePrefix({}): {msg}", go_quote(s));
    let (addr, bits) = s.rsplit_once('/').ok_or_else(|| err("no '/'"))?;
    let (addr, zone) = parse_addr(addr).map_err(|e| err(&e))?;
    if zone {
        return Err(err("IPv6 zones cannot be present in a prefix"));
    }
    let bad_bits = || err(&format!("bad bits after slash: {}", go_quote(bits)));
    // Neither a sign nor leading zeros.
    if bits.len() > 1 && !(b'1'..=b'9').contains(&bits.as_bytes()[0]) {
        return Err(bad_bits());
    }
    let bits: i64 = bits.parse().map_err(|_| bad_bits())?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    if !(0..=max).contains(&bits) {
        return Err(err("prefix length out of range"));
    }
    Ok(Cidr {
        addr,
        bits: bits as u8,
    })
}

/// Upstream's `stringToCIDR` (over its `parseCIDR`, each adding its words).
fn parse_cidr(raw: &str) -> Result<Cidr, String> {
    let words = "network address parse error during conversion from string";
    let cidr = parse_prefix(raw).map_err(|e| format!("{words}: {words}: {e}"))?;
    if is_4in6(&cidr.addr) {
        let e = format!("IPv4-mapped IPv6 address {} is not allowed", go_quote(raw));
        return Err(format!("{words}: {e}"));
    }
    Ok(cidr)
}

/// `addr` with all but its first `bits` bits zero.
fn mask(addr: IpAddr, bits: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & m))
        }
        IpAddr::V6(a) => {
            let m = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & m))
        }
    }
}

/// `netip.Prefix.Contains`: of the same family, and in the network.
fn contains(cidr: &Cidr, addr: IpAddr) -> bool {
    cidr.addr.is_ipv4() == addr.is_ipv4() && mask(addr, cidr.bits) == mask(cidr.addr, cidr.bits)
}

fn ip_arg(v: &CowVal<'_, '_>) -> Result<IpAddr, ExecutionError> {
    opaque::<Ip>(v.as_ref(), IP_NAME).map(|ip| ip.0)
}

fn cidr_arg(v: &CowVal<'_, '_>) -> Result<Cidr, ExecutionError> {
    opaque(v.as_ref(), CIDR_NAME)
}

fn to_ip<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [s] = take(args)?;
    of_opaque(Ip(parse_ip(string(&s)?).map_err(|e| error("ip", e))?))
}

fn is_ip<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [s] = take(args)?;
    of_bool(parse_ip(string(&s)?).is_ok())
}

/// Whether the address is written as `string(ip(s))` writes it.
fn is_canonical<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [s] = take(args)?;
    let s = string(&s)?;
    let addr = parse_ip(s).map_err(|e| error("ip.isCanonical", e))?;
    of_bool(addr.to_string() == s)
}

fn ip_to_string<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [ip] = take(args)?;
    of_string(ip_arg(&ip)?.to_string())
}

fn family<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [ip] = take(args)?;
    of_int(if ip_arg(&ip)?.is_ipv4() { 4 } else { 6 })
}

/// A predicate on the address of an IP argument.
fn ip_test<'b, 'v>(args: Vec<CowVal<'b, 'v>>, test: fn(IpAddr) -> bool) -> Ret<'b, 'v> {
    let [ip] = take(args)?;
    of_bool(test(ip_arg(&ip)?))
}

fn is_unspecified<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    ip_test(args, |ip| ip.is_unspecified())
}

fn is_loopback<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    ip_test(args, |ip| ip.is_loopback())
}

/// `netip`'s: 224.0.0.0/24, or ff02::/16 whatever the flags (ffX2::).
fn is_link_local_multicast<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    ip_test(args, |ip| match ip {
        IpAddr::V4(a) => a.octets()[..3] == [224, 0, 0],
        IpAddr::V6(a) => a.segments()[0] & 0xff0f == 0xff02,
    })
}

fn link_local_unicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => a.is_link_local(),
        IpAddr::V6(a) => a.segments()[0] & 0xffc0 == 0xfe80,
    }
}

fn is_link_local_unicast<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    ip_test(args, link_local_unicast)
}

/// `netip`'s (as package `net`'s): private and unique local addresses are global unicast
/// too.
fn is_global_unicast<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    ip_test(args, |ip| {
        !ip.is_unspecified()
            && ip != IpAddr::V4(Ipv4Addr::BROADCAST)
            && !ip.is_loopback()
            && !ip.is_multicast()
            && !link_local_unicast(ip)
    })
}

fn to_cidr<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [s] = take(args)?;
    of_opaque(parse_cidr(string(&s)?).map_err(|e| error("cidr", e))?)
}

fn is_cidr<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [s] = take(args)?;
    of_bool(parse_cidr(string(&s)?).is_ok())
}

fn cidr_to_string<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [c] = take(args)?;
    let c = cidr_arg(&c)?;
    of_string(format!("{}/{}", c.addr, c.bits))
}

fn contains_ip_string<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [c, s] = take(args)?;
    // Upstream's answer to a string that is no IP (its parse error is lost on the way).
    let addr = parse_ip(string(&s)?).map_err(|_| error("containsIP", "no such overload"))?;
    of_bool(contains(&cidr_arg(&c)?, addr))
}

fn contains_ip_ip<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [c, ip] = take(args)?;
    of_bool(contains(&cidr_arg(&c)?, ip_arg(&ip)?))
}

/// `netip.Prefix.Overlaps`, and no shorter a prefix than `cidr`'s.
fn contains_cidr(cidr: &Cidr, other: &Cidr) -> bool {
    let bits = cidr.bits.min(other.bits);
    cidr.addr.is_ipv4() == other.addr.is_ipv4()
        && mask(cidr.addr, bits) == mask(other.addr, bits)
        && cidr.bits <= other.bits
}

fn contains_cidr_string<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [c, s] = take(args)?;
    let other = parse_cidr(string(&s)?).map_err(|e| error("containsCIDR", e))?;
    of_bool(contains_cidr(&cidr_arg(&c)?, &other))
}

fn contains_cidr_cidr<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [c, other] = take(args)?;
    of_bool(contains_cidr(&cidr_arg(&c)?, &cidr_arg(&other)?))
}

fn cidr_ip<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [c] = take(args)?;
    of_opaque(Ip(cidr_arg(&c)?.addr))
}

fn prefix_length<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [c] = take(args)?;
    of_int(cidr_arg(&c)?.bits.into())
}

fn masked<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [c] = take(args)?;
    let c = cidr_arg(&c)?;
    of_opaque(Cidr {
        addr: mask(c.addr, c.bits),
        bits: c.bits,
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{check, fails, holds};

    // Expected values and messages are upstream's (k8s.io/apiserver 1.33's base environment).

    #[test]
    fn ips() {
        holds("ip('127.0.0.1') == ip('127.0.0.1')");
        holds("ip('::1') != ip('::2')");
        check("string(ip('2001:DB8::1'))", "2001:db8::1");
        check("string(ip('2001:db8:0:0:1:0:0:1'))", "2001:db8::1:0:0:1");
        check("ip('127.0.0.1').family()", 4);
        check("ip('::1').family()", 6);
        holds("isIP('::1') && !isIP('127.0.0.256') && !isIP(':::1')");
        holds("ip.isCanonical('2001:db8::abcd') && !ip.isCanonical('2001:DB8::ABCD')");
        check("ip.isCanonical('2001:db8::0:0:0:abcd')", false);
        holds("type(ip('1.2.3.4')) == net.IP");
    }

    #[test]
    fn ip_kinds_are_netips() {
        holds("ip('0.0.0.0').isUnspecified() && ip('::').isUnspecified()");
        check("ip('127.0.0.1').isUnspecified()", false);
        holds("ip('127.0.0.1').isLoopback() && ip('::1').isLoopback()");
        check("ip('192.168.0.1').isLoopback()", false);
        holds("ip('224.0.0.1').isLinkLocalMulticast() && ip('ff02::1').isLinkLocalMulticast()");
        check("ip('224.0.1.1').isLinkLocalMulticast()", false);
        check("ip('fd00::1').isLinkLocalMulticast()", false);
        holds("ip('169.254.169.254').isLinkLocalUnicast() && ip('fe80::1').isLinkLocalUnicast()");
        check("ip('fd80::1').isLinkLocalUnicast()", false);
        holds("ip('192.168.0.1').isGlobalUnicast() && ip('2001:db8::abcd').isGlobalUnicast()");
        check("ip('255.255.255.255').isGlobalUnicast()", false);
        check("ip('ff00::1').isGlobalUnicast()", false);
    }

    #[test]
    fn bad_ips_fail_with_netips_words() {
        fails(
            "ip('300.1.1.1')",
            r#"IP Address "300.1.1.1" parse error during conversion from string: ParseAddr("300.1.1.1"): IPv4 field has value >255"#,
        );
        fails(
            "ip('1.2.3')",
            r#"IP Address "1.2.3" parse error during conversion from string: ParseAddr("1.2.3"): IPv4 address too short"#,
        );
        fails(
            "ip('01.2.3.4')",
            r#"IP Address "01.2.3.4" parse error during conversion from string: ParseAddr("01.2.3.4"): IPv4 field has octet with leading zero"#,
        );
        fails(
            "ip(':::1')",
            r#"IP Address ":::1" parse error during conversion from string: ParseAddr(":::1"): each colon-separated field must have at least one digit (at ":1")"#,
        );
        fails(
            "ip('2001:db8::g')",
            r#"IP Address "2001:db8::g" parse error during conversion from string: ParseAddr("2001:db8::g"): each colon-separated field must have at least one digit (at "g")"#,
        );
        fails(
            "ip('::ffff:1.2.3.4')",
            r#"IPv4-mapped IPv6 address "::ffff:1.2.3.4" is not allowed"#,
        );
        fails(
            "ip('fe80::1%eth0')",
            r#"IP address "fe80::1%eth0" with zone value is not allowed"#,
        );
        let parse_error = |given: &str, detail: &str| {
            format!(
                r#"IP Address "{given}" parse error during conversion from string: ParseAddr("{given}"): {detail}"#
            )
        };
        for (given, detail) in [
            ("1.2.3.4%eth0", r#"unexpected character (at "%eth0")"#),
            ("%eth0", "missing IPv6 address"),
            ("fe80::1%", "zone must be a non-empty string"),
            ("", "unable to parse IP"),
            (
                "1:2:3:4:5:6:7:8:1.2.3.4",
                r#"trailing garbage after address (at "1.2.3.4")"#,
            ),
            (
                "1:2:3:4:5:6:7:1.2.3.4",
                r#"embedded IPv4 address must replace the final 2 fields of the address (at "1.2.3.4")"#,
            ),
            ("::1.2.3", "IPv4 address too short"),
        ] {
            fails(&format!("ip('{given}')"), &parse_error(given, detail));
        }
    }

    #[test]
    fn the_ipv6_parser_is_netips() {
        for (given, want) in [
            ("::", "::"),
            ("1::", "1::"),
            ("::1.2.3.4", "::102:304"),
            ("1:2:3:4:5:6:1.2.3.4", "1:2:3:4:5:6:102:304"),
            ("fe80:0:0:0:0:0:0:1", "fe80::1"),
        ] {
            check(&format!("string(ip('{given}'))"), want);
        }
        for bad in [
            "1:2",
            "1:2:3:4:5:6:7:8:9",
            "1::2::3",
            "12345::",
            "1:2:3:4:5:6:7::8",
            "1:",
            "1.2.3.4.5",
        ] {
            check(&format!("isIP('{bad}')"), false);
        }
    }

    #[test]
    fn cidrs() {
        holds("cidr('10.0.0.0/8').containsIP('10.1.2.3')");
        holds("cidr('10.0.0.0/8').containsIP(ip('10.1.2.3'))");
        check("cidr('10.0.0.0/8').containsIP('11.0.0.1')", false);
        check("cidr('::/0').containsIP('1.2.3.4')", false);
        holds("cidr('10.0.0.0/8').containsCIDR('10.1.0.0/16')");
        holds("cidr('10.0.0.0/8').containsCIDR(cidr('10.0.0.0/8'))");
        check("cidr('10.1.0.0/16').containsCIDR('10.0.0.0/8')", false);
        holds("cidr('10.0.0.0/8') == cidr('10.0.0.0/8')");
        check("cidr('10.0.0.1/8') == cidr('10.0.0.0/8')", false);
        holds("cidr('10.0.0.1/8').ip() == ip('10.0.0.1')");
        check("string(cidr('10.0.0.1/8').masked())", "10.0.0.0/8");
        check("string(cidr('2001:db8::1/32').masked())", "2001:db8::/32");
        check("cidr('2001:db8::/32').prefixLength()", 32);
        check("cidr('0.0.0.0/0').containsIP('255.1.1.1')", true);
        holds("isCIDR('10.0.0.0/8') && !isCIDR('10.0.0.0') && !isCIDR('::ffff:1.2.3.4/120')");
        fails("cidr('10.0.0.0/8').containsIP('300.1.2.3')", "no such overload");
    }

    #[test]
    fn bad_cidrs_fail_with_netips_words() {
        let twice = "network address parse error during conversion from string: \
                     network address parse error during conversion from string";
        fails(
            "cidr('10.0.0.0/33')",
            &format!(r#"{twice}: netip.ParsePrefix("10.0.0.0/33"): prefix length out of range"#),
        );
        fails(
            "cidr('10.0.0.0')",
            &format!(r#"{twice}: netip.ParsePrefix("10.0.0.0"): no '/'"#),
        );
        fails(
            "cidr('10.0.0.0/08')",
            &format!(r#"{twice}: netip.ParsePrefix("10.0.0.0/08"): bad bits after slash: "08""#),
        );
        fails(
            "cidr('::ffff:1.2.3.4/120')",
            r#"network address parse error during conversion from string: IPv4-mapped IPv6 address "::ffff:1.2.3.4/120" is not allowed"#,
        );
        fails(
            "cidr('10.0.0.0/8').containsCIDR('10.0.0.0')",
            &format!(r#"{twice}: netip.ParsePrefix("10.0.0.0"): no '/'"#),
        );
        for (given, detail) in [
            ("fe80::1%eth0/64", "IPv6 zones cannot be present in a prefix"),
            ("1.2.3.4/+8", r#"bad bits after slash: "+8""#),
            ("1.2.3.4/", r#"bad bits after slash: """#),
            ("x/8", r#"ParseAddr("x"): unable to parse IP"#),
        ] {
            fails(
                &format!("cidr('{given}')"),
                &format!(r#"{twice}: netip.ParsePrefix("{given}"): {detail}"#),
            );
        }
    }
}
