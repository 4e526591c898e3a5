//! Kubernetes' urls library (upstream's `library/urls.go`): `url()`, `isURL()`, and on a
//! `kubernetes.URL` `getScheme`, `getHost`, `getHostname`, `getPort`, `getEscapedPath`,
//! `getQuery`.
//!
//! URLs are parsed as Go's `net/url` parses them (`ParseRequestURI` to accept one, `Parse`
//! for its parts), written here: the `url` crate follows the WHATWG standard, which is
//! another language (it drops default ports, normalizes paths, rejects or accepts other
//! strings), and the answers must be upstream's. As of the Go release Kubernetes 1.33 is
//! built with (1.24): the host is not checked beyond its port and escapes.

use std::collections::HashMap;

use ::cel::common::types::{Kind, Type, STRING_TYPE};
use ::cel::common::value::{CowVal, Val};
use ::cel::objects::Opaque;
use ::cel::{DeclarationError, Env, ExecutionError, Value};

use super::{error, go_quote, of_bool, of_opaque, of_string, opaque, string, take, Ret};

const TYPE_NAME: &str = "kubernetes.URL";
const URL: Type = Type::simple_type(Kind::Opaque, TYPE_NAME);

/// A user name and password, unescaped.
type User = (String, Option<String>);

/// A parsed URL, as Go's `url.URL`. Two are equal when all their parts are (upstream compares
/// them written back, which comes to the same).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Url {
    scheme: String,
    opaque: String,
    user: Option<User>,
    host: String,
    path: String,
    raw_path: String,
    raw_query: String,
    force_query: bool,
    fragment: String,
}

impl Opaque for Url {
    fn runtime_type_name(&self) -> &str {
        TYPE_NAME
    }
}

pub(super) fn library(env: &mut Env) -> Result<(), DeclarationError> {
    // Not `env.add_type`: upstream's object types can't be named in an expression.
    env.add_overload("url", "string_to_url", vec![STRING_TYPE], to_url)?;
    env.add_overload("isURL", "is_url_string", vec![STRING_TYPE], is_url)?;
    env.add_member_overload("getScheme", "url_get_scheme", URL, vec![], get_scheme)?;
    env.add_member_overload("getHost", "url_get_host", URL, vec![], get_host)?;
    env.add_member_overload("getHostname", "url_get_hostname", URL, vec![], get_hostname)?;
    env.add_member_overload("getPort", "url_get_port", URL, vec![], get_port)?;
    env.add_member_overload(
        "getEscapedPath",
        "url_get_escaped_path",
        URL,
        vec![],
        get_escaped_path,
    )?;
    env.add_member_overload("getQuery", "url_get_query", URL, vec![], get_query)?;
    Ok(())
}

/// The parts of a URL `net/url` escapes differently (its `encoding` modes).
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Path,
    Host,
    Zone,
    UserPassword,
    QueryComponent,
    Fragment,
}

/// Go's `shouldEscape`.
fn should_escape(c: u8, mode: Mode) -> bool {
    if c.is_ascii_alphanumeric() {
        return false;
    }
    if matches!(mode, Mode::Host | Mode::Zone) && b"!$&'()*+,;=:[]<>\"".contains(&c) {
        return false;
    }
    match c {
        b'-' | b'_' | b'.' | b'~' => false,
        b'$' | b'&' | b'+' | b',' | b'/' | b':' | b';' | b'=' | b'?' | b'@' => match mode {
            Mode::Path => c == b'?',
            Mode::UserPassword => matches!(c, b'@' | b'/' | b'?' | b':'),
            Mode::QueryComponent => true,
            Mode::Fragment => false,
            // Unreachable for these characters: the host modes returned above.
            Mode::Host | Mode::Zone => true,
        },
        b'!' | b'(' | b')' | b'*' if mode == Mode::Fragment => false,
        _ => true,
    }
}

fn unhex(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// Go's `unescape`.
fn unescape(s: &str, mode: Mode) -> Result<String, String> {
    let b = s.as_bytes();
    let escape_error = |at: usize| {
        let end = (at + 3).min(b.len());
        format!(
            "invalid URL escape {}",
            go_quote(&String::from_utf8_lossy(&b[at..end]))
        )
    };
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let (Some(hi), Some(lo)) = (
                    b.get(i + 1).copied().and_then(unhex),
                    b.get(i + 2).copied().and_then(unhex),
                ) else {
                    return Err(escape_error(i));
                };
                // In a host, %-encoding is for non-ASCII bytes only (and %25 before a zone).
                if mode == Mode::Host && hi < 8 && &s[i..i + 3] != "%25" {
                    return Err(escape_error(i));
                }
                let v = hi << 4 | lo;
                if mode == Mode::Zone && &s[i..i + 3] != "%25" && v != b' ' && should_escape(v, Mode::Host) {
                    return Err(escape_error(i));
                }
                out.push(v);
                i += 3;
            }
            b'+' => {
                out.push(if mode == Mode::QueryComponent { b' ' } else { b'+' });
                i += 1;
            }
            c => {
                if matches!(mode, Mode::Host | Mode::Zone) && c < 0x80 && should_escape(c, mode) {
                    return Err(format!(
                        "invalid character {} in host name",
                        go_quote(&(c as char).to_string())
                    ));
                }
                out.push(c);
                i += 1;
            }
        }
    }
    // Go's strings hold any bytes; these are shown as text.
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Go's `escape`.
fn escape(s: &str, mode: Mode) -> String {
    let mut out = String::with_capacity(s.len());
    for &c in s.as_bytes() {
        if c == b' ' && mode == Mode::QueryComponent {
            out.push('+');
        } else if should_escape(c, mode) {
            out.push_str(&format!("%{c:02X}"));
        } else {
            out.push(c as char);
        }
    }
    out
}

/// Go's `validEncoded`.
fn valid_encoded(s: &str, mode: Mode) -> bool {
    s.bytes()
        .all(|c| b"!$&'()*+,;=:@[]%".contains(&c) || !should_escape(c, mode))
}

/// Go's `getScheme`: the scheme and the rest, or no scheme.
fn split_scheme(raw: &str) -> Result<(&str, &str), String> {
    for (i, c) in raw.bytes().enumerate() {
        match c {
            b'a'..=b'z' | b'A'..=b'Z' => {}
            b'0'..=b'9' | b'+' | b'-' | b'.' if i > 0 => {}
            b':' if i == 0 => return Err("missing protocol scheme".to_owned()),
            b':' => return Ok((&raw[..i], &raw[i + 1..])),
            _ => return Ok(("", raw)),
        }
    }
    Ok(("", raw))
}

fn valid_optional_port(port: &str) -> bool {
    port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|p| p.bytes().all(|c| c.is_ascii_digit()))
}

/// Go's `parseHost` (of 1.24).
fn parse_host(host: &str) -> Result<String, String> {
    if host.starts_with('[') {
        let i = host.rfind(']').ok_or("missing ']' in host")?;
        let colon_port = &host[i + 1..];
        if !valid_optional_port(colon_port) {
            return Err(format!("invalid port {} after host", go_quote(colon_port)));
        }
        if let Some(zone) = host[..i].find("%25") {
            return Ok(unescape(&host[..zone], Mode::Host)?
                + &unescape(&host[zone..i], Mode::Zone)?
                + &unescape(&host[i..], Mode::Host)?);
        }
    } else if let Some(i) = host.rfind(':') {
        let colon_port = &host[i..];
        if !valid_optional_port(colon_port) {
            return Err(format!("invalid port {} after host", go_quote(colon_port)));
        }
    }
    unescape(host, Mode::Host)
}

/// Go's `validUserinfo`.
fn valid_userinfo(s: &str) -> bool {
    s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "-._:~!$&'()*+,;=%@".contains(c))
}

/// Go's `parseAuthority`: the user and the host.
fn parse_authority(authority: &str) -> Result<(Option<User>, String), String> {
    let Some(at) = authority.rfind('@') else {
        return Ok((None, parse_host(authority)?));
    };
    let host = parse_host(&authority[at + 1..])?;
    let userinfo = &authority[..at];
    if !valid_userinfo(userinfo) {
        return Err("net/url: invalid userinfo".to_owned());
    }
    let user = match userinfo.split_once(':') {
        None => (unescape(userinfo, Mode::UserPassword)?, None),
        Some((name, password)) => (
            unescape(name, Mode::UserPassword)?,
            Some(unescape(password, Mode::UserPassword)?),
        ),
    };
    Ok((Some(user), host))
}

/// Go's `parse`: `via_request` for `ParseRequestURI`, which takes only absolute URIs and
/// absolute paths (and no fragment).
fn parse(raw: &str, via_request: bool) -> Result<Url, String> {
    if raw.bytes().any(|b| b < b' ' || b == 0x7f) {
        return Err("net/url: invalid control character in URL".to_owned());
    }
    if raw.is_empty() && via_request {
        return Err("empty url".to_owned());
    }
    let mut url = Url::default();
    if raw == "*" {
        url.path = "*".to_owned();
        return Ok(url);
    }
    let (scheme, mut rest) = split_scheme(raw)?;
    url.scheme = scheme.to_ascii_lowercase();
    if rest.ends_with('?') && rest.matches('?').count() == 1 {
        url.force_query = true;
        rest = &rest[..rest.len() - 1];
    } else if let Some((before, query)) = rest.split_once('?') {
        url.raw_query = query.to_owned();
        rest = before;
    }
    if !rest.starts_with('/') {
        if !url.scheme.is_empty() {
            // A rootless path is opaque.
            url.opaque = rest.to_owned();
            return Ok(url);
        }
        if via_request {
            return Err("invalid URI for request".to_owned());
        }
        if rest
            .split('/')
            .next()
            .is_some_and(|segment| segment.contains(':'))
        {
            return Err("first path segment in URL cannot contain colon".to_owned());
        }
    }
    if (!url.scheme.is_empty() || !via_request && !rest.starts_with("///")) && rest.starts_with("//") {
        let authority = &rest[2..];
        let (authority, path) = authority.split_at(authority.find('/').unwrap_or(authority.len()));
        (url.user, url.host) = parse_authority(authority)?;
        rest = path;
    }
    // Go's `setPath`: the path unescaped, and as written if that is not how it escapes.
    url.path = unescape(rest, Mode::Path)?;
    if escape(&url.path, Mode::Path) != rest {
        url.raw_path = rest.to_owned();
    }
    Ok(url)
}

/// Why Go's `url.ParseRequestURI` rejects `raw`, in its words, if it does.
pub(super) fn request_uri_error(raw: &str) -> Option<String> {
    parse(raw, true)
        .err()
        .map(|e| format!("parse {}: {e}", go_quote(raw)))
}

/// Upstream's `url()`: what `ParseRequestURI` accepts, in the parts `Parse` finds (it
/// tells the fragment apart).
fn parse_url(raw: &str) -> Result<Url, String> {
    let error = |input: &str, e: String| {
        format!(
            "URL parse error during conversion from string: parse {}: {e}",
            go_quote(input)
        )
    };
    parse(raw, true).map_err(|e| error(raw, e))?;
    let (without_fragment, fragment) = raw.split_once('#').unwrap_or((raw, ""));
    let mut url = parse(without_fragment, false).map_err(|e| error(without_fragment, e))?;
    url.fragment = unescape(fragment, Mode::Fragment).map_err(|e| error(raw, e))?;
    Ok(url)
}

impl Url {
    /// Go's `splitHostPort`: the host without brackets, and the port if numeric.
    fn host_port(&self) -> (&str, &str) {
        let (mut host, mut port) = (self.host.as_str(), "");
        if let Some(colon) = host.rfind(':') {
            if valid_optional_port(&host[colon..]) {
                (host, port) = (&host[..colon], &host[colon + 1..]);
            }
        }
        if host.starts_with('[') && host.ends_with(']') {
            host = &host[1..host.len() - 1];
        }
        (host, port)
    }

    /// Go's `EscapedPath`.
    fn escaped_path(&self) -> String {
        if !self.raw_path.is_empty()
            && valid_encoded(&self.raw_path, Mode::Path)
            && unescape(&self.raw_path, Mode::Path).as_deref() == Ok(self.path.as_str())
        {
            return self.raw_path.clone();
        }
        if self.path == "*" {
            return "*".to_owned();
        }
        escape(&self.path, Mode::Path)
    }

    /// Go's `Query`: the values of each key, in order; malformed pairs are left out.
    fn query(&self) -> HashMap<String, Vec<String>> {
        let mut values: HashMap<String, Vec<String>> = HashMap::new();
        for pair in self.raw_query.split('&') {
            if pair.is_empty() || pair.contains(';') {
                continue;
            }
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let (Ok(key), Ok(value)) = (
                unescape(key, Mode::QueryComponent),
                unescape(value, Mode::QueryComponent),
            ) else {
                continue;
            };
            values.entry(key).or_default().push(value);
        }
        values
    }
}

fn url_arg(v: &CowVal<'_, '_>) -> Result<Url, ExecutionError> {
    opaque(v.as_ref(), TYPE_NAME)
}

fn to_url<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [s] = take(args)?;
    of_opaque(parse_url(string(&s)?).map_err(|e| error("url", e))?)
}

fn is_url<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [s] = take(args)?;
    of_bool(parse(string(&s)?, true).is_ok())
}

/// A string part of a URL argument.
fn part<'b, 'v>(args: Vec<CowVal<'b, 'v>>, part: fn(&Url) -> String) -> Ret<'b, 'v> {
    let [u] = take(args)?;
    of_string(part(&url_arg(&u)?))
}

fn get_scheme<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    part(args, |u| u.scheme.clone())
}

fn get_host<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    part(args, |u| u.host.clone())
}

fn get_hostname<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    part(args, |u| u.host_port().0.to_owned())
}

fn get_port<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    part(args, |u| u.host_port().1.to_owned())
}

fn get_escaped_path<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    part(args, Url::escaped_path)
}

/// The query as a map of each key to its values.
fn get_query<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [u] = take(args)?;
    let val: Box<dyn Val> = Value::from(url_arg(&u)?.query()).try_into()?;
    Ok(CowVal::Owned(val))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{check, fails, holds};
    use ::cel::Value;

    // Expected values and messages are upstream's (k8s.io/apiserver 1.33's base environment).

    #[test]
    fn parts() {
        check("url('https://a.b:8080/p?x=1').getPort()", "8080");
        check("url('/path').getScheme()", "");
        check("url('https://example.com/').getScheme()", "https");
        check("url('HTTPS://example.com/').getScheme()", "https");
        check("url('https://example.com:80/').getHost()", "example.com:80");
        check("url('https://[::1]:80/').getHost()", "[::1]:80");
        check("url('/path').getHost()", "");
        check("url('https://example.com:80/').getHostname()", "example.com");
        check("url('https://[::1]:80/').getHostname()", "::1");
        check("url('https://[::1]/').getHostname()", "::1");
        check("url('https://example.com/').getPort()", "");
        check("url('https://example.com:443/').getPort()", "443");
        check("url('https://example.com/path').getEscapedPath()", "/path");
        check(
            "url('https://example.com/path with spaces/').getEscapedPath()",
            "/path%20with%20spaces/",
        );
        check("url('https://example.com/a%2fb').getEscapedPath()", "/a%2fb");
        check("url('https://example.com/a/../b').getEscapedPath()", "/a/../b");
        check("url('https://example.com').getEscapedPath()", "");
        check("url('https://u:p@example.com/x#frag').getHost()", "example.com");
        check("url('/p#frag').getEscapedPath()", "/p");
        check("url('mailto:someone@example.com').getScheme()", "mailto");
        holds("url('https://a.b/c') == url('https://a.b/c')");
        check("url('https://a.b/c') == url('https://a.b/d')", false);
    }

    #[test]
    fn queries() {
        check(
            "url('https://example.com/path?k1=a&k2=b&k2=c').getQuery()",
            Value::from(std::collections::HashMap::from([
                ("k1", vec!["a"]),
                ("k2", vec!["b", "c"]),
            ])),
        );
        check(
            "url('https://example.com/path?key with spaces=value with spaces').getQuery()",
            Value::from(std::collections::HashMap::from([(
                "key with spaces",
                vec!["value with spaces"],
            )])),
        );
        check(
            "url('https://e.com/?a=1+2&b=%41&c&d=x;y').getQuery()",
            Value::from(std::collections::HashMap::from([
                ("a", vec!["1 2"]),
                ("b", vec!["A"]),
                ("c", vec![""]),
            ])),
        );
        check("url('https://example.com/path?').getQuery().size()", 0);
        check("url('https://example.com/path').getQuery().size()", 0);
    }

    #[test]
    fn only_absolute_uris_and_paths_are_urls() {
        holds("isURL('https://user:pass@example.com:80/path?query=val#fragment')");
        holds("isURL('/absolute-path')");
        check("isURL('https://a:b:c/')", false);
        check("isURL('../relative-path')", false);
        check("isURL('')", false);
        fails(
            "url('https://a:b:c/')",
            r#"URL parse error during conversion from string: parse "https://a:b:c/": invalid port ":c" after host"#,
        );
        fails(
            "url('../x')",
            r#"URL parse error during conversion from string: parse "../x": invalid URI for request"#,
        );
        fails(
            "url('')",
            r#"URL parse error during conversion from string: parse "": empty url"#,
        );
        fails(
            "url('/a%zzb')",
            r#"URL parse error during conversion from string: parse "/a%zzb": invalid URL escape "%zz""#,
        );
        fails(
            "url(':x')",
            r#"URL parse error during conversion from string: parse ":x": missing protocol scheme"#,
        );
        fails(
            "url('https://[::1/')",
            r#"URL parse error during conversion from string: parse "https://[::1/": missing ']' in host"#,
        );
        fails(
            "url('https://a b/')",
            r#"URL parse error during conversion from string: parse "https://a b/": invalid character " " in host name"#,
        );
    }
}
