//! YAML as kubectl prints it (`-o yaml`). kubectl turns an object's JSON into YAML with
//! sigs.k8s.io/yaml, which is go-yaml v2: keys in its "natural" order, a string quoted only
//! where YAML 1.1 would read it as something else (a number, a boolean, a timestamp, an
//! indicator), long plain strings folded past column 80, multi-line strings as literal blocks,
//! sequences not indented under their key. No Rust YAML crate writes that exact layout and the
//! differential tests compare bytes, so the emitter is written here, following go-yaml's
//! emitter rules (`yaml_emitter_analyze_scalar`, `select_style`, the scalar writers).

use serde_json::Value;

const BEST_WIDTH: usize = 80;
const INDENT: usize = 2;

/// The YAML document for `v`, ending in a newline.
pub fn to_string(v: &Value) -> String {
    let mut e = Emitter::default();
    match v {
        Value::Object(m) if !m.is_empty() => e.mapping(m, 0),
        Value::Array(a) if !a.is_empty() => e.sequence(a, 0),
        other => {
            e.inline(other, 0, false);
            e.end_line();
        }
    }
    e.out
}

#[derive(Default)]
struct Emitter {
    out: String,
    column: usize,
}

impl Emitter {
    fn push(&mut self, s: &str) {
        self.out.push_str(s);
        self.column += s.chars().count();
    }

    fn newline(&mut self) {
        self.out.push('\n');
        self.column = 0;
    }

    /// Ends the current line unless it is already ended (a literal block ends its own).
    fn end_line(&mut self) {
        if self.column != 0 {
            self.newline();
        }
    }

    fn pad_to(&mut self, indent: usize) {
        while self.column < indent {
            self.out.push(' ');
            self.column += 1;
        }
    }

    /// A block mapping whose keys start at column `indent`; the first key is written where
    /// the cursor is (after "- " in a sequence), the others on new lines.
    fn mapping(&mut self, m: &serde_json::Map<String, Value>, indent: usize) {
        let mut keys: Vec<&String> = m.keys().collect();
        keys.sort_by(|a, b| natural_cmp(a, b));
        for (i, k) in keys.into_iter().enumerate() {
            if i > 0 {
                self.end_line();
            }
            self.pad_to(indent);
            self.scalar(k, indent, true);
            self.push(":");
            let v = &m[k.as_str()];
            match v {
                Value::Object(c) if !c.is_empty() => {
                    self.newline();
                    self.mapping(c, indent + INDENT);
                }
                // go-yaml v2 does not indent a sequence under a mapping key.
                Value::Array(a) if !a.is_empty() => {
                    self.newline();
                    self.sequence(a, indent);
                }
                other => {
                    self.push(" ");
                    self.inline(other, indent, false);
                    self.end_line();
                }
            }
        }
    }

    fn sequence(&mut self, a: &[Value], indent: usize) {
        for (i, v) in a.iter().enumerate() {
            if i > 0 {
                self.end_line();
            }
            self.pad_to(indent);
            self.push("- ");
            match v {
                Value::Object(c) if !c.is_empty() => self.mapping(c, indent + INDENT),
                Value::Array(inner) if !inner.is_empty() => self.sequence(inner, indent + INDENT),
                other => {
                    self.inline(other, indent, false);
                    self.end_line();
                }
            }
        }
    }

    /// A scalar or an empty collection; `indent` is the column of the block it belongs to
    /// (continuation lines go two further, as go-yaml's emitter indents a scalar).
    fn inline(&mut self, v: &Value, indent: usize, key: bool) {
        match v {
            Value::Null => self.push("null"),
            Value::Bool(b) => self.push(if *b { "true" } else { "false" }),
            Value::Number(n) => self.push(&number(n)),
            Value::String(s) => self.scalar(s, indent, key),
            Value::Array(_) => self.push("[]"),
            Value::Object(_) => self.push("{}"),
        }
    }

    fn scalar(&mut self, s: &str, indent: usize, key: bool) {
        let continuation = indent + INDENT;
        match style(s, key) {
            Style::Plain => self.plain(s, continuation, !key),
            Style::Single => self.single_quoted(s, continuation, !key),
            Style::Double => self.double_quoted(s, continuation, !key),
            Style::Literal => self.literal(s, continuation),
        }
    }

    fn break_line(&mut self, indent: usize) {
        self.newline();
        self.pad_to(indent);
    }

    fn plain(&mut self, s: &str, indent: usize, allow_breaks: bool) {
        let chars: Vec<char> = s.chars().collect();
        let mut spaces = false;
        for (i, &c) in chars.iter().enumerate() {
            if c == ' ' {
                if allow_breaks && !spaces && self.column > BEST_WIDTH && chars.get(i + 1) != Some(&' ') {
                    self.break_line(indent);
                } else {
                    self.push_char(c);
                }
                spaces = true;
            } else {
                self.push_char(c);
                spaces = false;
            }
        }
    }

    fn single_quoted(&mut self, s: &str, indent: usize, allow_breaks: bool) {
        self.push("'");
        let chars: Vec<char> = s.chars().collect();
        let mut spaces = false;
        for (i, &c) in chars.iter().enumerate() {
            if c == ' ' {
                if allow_breaks
                    && !spaces
                    && self.column > BEST_WIDTH
                    && i > 0
                    && i + 1 < chars.len()
                    && chars[i + 1] != ' '
                {
                    self.break_line(indent);
                } else {
                    self.push_char(c);
                }
                spaces = true;
            } else {
                if c == '\'' {
                    self.push_char('\'');
                }
                self.push_char(c);
                spaces = false;
            }
        }
        self.push("'");
    }

    fn double_quoted(&mut self, s: &str, indent: usize, allow_breaks: bool) {
        self.push("\"");
        let chars: Vec<char> = s.chars().collect();
        let mut spaces = false;
        for (i, &c) in chars.iter().enumerate() {
            if !printable(c) || c == '\u{feff}' || is_break(c) || c == '"' || c == '\\' {
                let esc = match c {
                    '\0' => "\\0".to_owned(),
                    '\u{7}' => "\\a".to_owned(),
                    '\u{8}' => "\\b".to_owned(),
                    '\t' => "\\t".to_owned(),
                    '\n' => "\\n".to_owned(),
                    '\u{b}' => "\\v".to_owned(),
                    '\u{c}' => "\\f".to_owned(),
                    '\r' => "\\r".to_owned(),
                    '\u{1b}' => "\\e".to_owned(),
                    '"' => "\\\"".to_owned(),
                    '\\' => "\\\\".to_owned(),
                    '\u{85}' => "\\N".to_owned(),
                    '\u{a0}' => "\\_".to_owned(),
                    '\u{2028}' => "\\L".to_owned(),
                    '\u{2029}' => "\\P".to_owned(),
                    c if (c as u32) <= 0xff => format!("\\x{:02X}", c as u32),
                    c if (c as u32) <= 0xffff => format!("\\u{:04X}", c as u32),
                    c => format!("\\U{:08X}", c as u32),
                };
                self.push(&esc);
                spaces = false;
            } else if c == ' ' {
                if allow_breaks && !spaces && self.column > BEST_WIDTH && i > 0 && i + 1 < chars.len() {
                    self.break_line(indent);
                    if chars[i + 1] == ' ' {
                        self.push("\\");
                    }
                } else {
                    self.push_char(c);
                }
                spaces = true;
            } else {
                self.push_char(c);
                spaces = false;
            }
        }
        self.push("\"");
    }

    fn literal(&mut self, s: &str, indent: usize) {
        self.push("|");
        let first = s.chars().next();
        if matches!(first, Some(c) if c == ' ' || is_break(c)) {
            self.push(&INDENT.to_string());
        }
        let mut rev = s.chars().rev();
        match (rev.next(), rev.next()) {
            (None, _) => self.push("-"),
            (Some(last), _) if !is_break(last) => self.push("-"),
            (Some(_), None) => self.push("+"),
            (Some(_), Some(prev)) if is_break(prev) => self.push("+"),
            _ => {}
        }
        self.newline();
        let mut at_line_start = true;
        for c in s.chars() {
            if is_break(c) {
                self.newline();
                at_line_start = true;
            } else {
                if at_line_start {
                    self.pad_to(indent);
                    at_line_start = false;
                }
                self.push_char(c);
            }
        }
    }

    fn push_char(&mut self, c: char) {
        self.out.push(c);
        self.column += 1;
    }
}

#[derive(Debug, PartialEq)]
enum Style {
    Plain,
    Single,
    Double,
    Literal,
}

/// go-yaml v2's choice of style for a string: `encoder.stringv` asks for plain where the
/// string reads back as a string, literal for several lines, else double quotes; the emitter
/// then falls back to single or double quotes where the characters forbid the asked style.
fn style(s: &str, key: bool) -> Style {
    let asked = if s.contains('\n') {
        Style::Literal
    } else if resolves_to_string(s) && !is_base60_float(s) {
        Style::Plain
    } else {
        Style::Double
    };
    let a = analyze(s);
    match asked {
        Style::Plain => {
            if !a.block_plain_allowed || (s.is_empty() && key) {
                if a.single_quoted_allowed {
                    Style::Single
                } else {
                    Style::Double
                }
            } else {
                Style::Plain
            }
        }
        Style::Literal if !a.block_allowed || key => Style::Double,
        other => other,
    }
}

struct Analysis {
    block_plain_allowed: bool,
    single_quoted_allowed: bool,
    block_allowed: bool,
}

fn analyze(s: &str) -> Analysis {
    if s.is_empty() {
        return Analysis {
            block_plain_allowed: true,
            single_quoted_allowed: true,
            block_allowed: false,
        };
    }
    let chars: Vec<char> = s.chars().collect();
    let mut block_indicators = s.starts_with("---") || s.starts_with("...");
    let (mut leading_space, mut leading_break, mut trailing_space, mut trailing_break) =
        (false, false, false, false);
    let (mut break_space, mut space_break, mut previous_space, mut previous_break) =
        (false, false, false, false);
    let (mut line_breaks, mut special) = (false, false);
    let mut preceded_by_whitespace = true;
    for (i, &c) in chars.iter().enumerate() {
        let followed_by_whitespace = chars.get(i + 1).is_none_or(|&n| n == ' ' || n == '\t');
        if i == 0 {
            match c {
                '#' | ',' | '[' | ']' | '{' | '}' | '&' | '*' | '!' | '|' | '>' | '\'' | '"' | '%' | '@'
                | '`' => block_indicators = true,
                '?' | ':' | '-' if followed_by_whitespace => block_indicators = true,
                _ => {}
            }
        } else {
            match c {
                ':' if followed_by_whitespace => block_indicators = true,
                '#' if preceded_by_whitespace => block_indicators = true,
                _ => {}
            }
        }
        if !printable(c) {
            special = true;
        }
        let last = i + 1 == chars.len();
        if c == ' ' {
            leading_space |= i == 0;
            trailing_space |= last;
            break_space |= previous_break;
            previous_space = true;
            previous_break = false;
        } else if is_break(c) {
            line_breaks = true;
            leading_break |= i == 0;
            trailing_break |= last;
            space_break |= previous_space;
            previous_space = false;
            previous_break = true;
        } else {
            previous_space = false;
            previous_break = false;
        }
        preceded_by_whitespace = c == ' ' || c == '\t' || is_break(c) || c == '\0';
    }
    let mut a = Analysis {
        block_plain_allowed: true,
        single_quoted_allowed: true,
        block_allowed: true,
    };
    if leading_space || leading_break || trailing_space || trailing_break {
        a.block_plain_allowed = false;
    }
    if trailing_space {
        a.block_allowed = false;
    }
    if break_space {
        a.block_plain_allowed = false;
        a.single_quoted_allowed = false;
    }
    if space_break || special {
        a.block_plain_allowed = false;
        a.single_quoted_allowed = false;
        a.block_allowed = false;
    }
    if line_breaks || block_indicators {
        a.block_plain_allowed = false;
    }
    a
}

fn is_break(c: char) -> bool {
    matches!(c, '\r' | '\n' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

/// YAML's printable set as go-yaml checks it (tab is not in it; neither is anything beyond
/// the Basic Multilingual Plane).
fn printable(c: char) -> bool {
    let u = c as u32;
    u == 0x0a
        || (0x20..=0x7e).contains(&u)
        || u == 0x85
        || ((0xa0..=0xd7ff).contains(&u))
        || ((0xe000..=0xfffd).contains(&u) && u != 0xfeff)
}

/// Whether go-yaml's `resolve` reads the plain scalar as a string (YAML 1.1: y/n/on/off are
/// booleans, `~` and the empty string null, numbers in Go's bases, timestamps).
fn resolves_to_string(s: &str) -> bool {
    const SPECIAL: &[&str] = &[
        "y", "Y", "yes", "Yes", "YES", "on", "On", "ON", "true", "True", "TRUE", "n", "N", "no", "No", "NO",
        "off", "Off", "OFF", "false", "False", "FALSE", "", "~", "null", "Null", "NULL", ".nan", ".NaN",
        ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF", "<<",
    ];
    if SPECIAL.contains(&s) {
        return false;
    }
    let Some(first) = s.chars().next() else {
        return false;
    };
    match first {
        '.' => go_parse_float(s).is_none(),
        '+' | '-' | '0'..='9' => {
            if is_timestamp(s) {
                return false;
            }
            let plain = s.replace('_', "");
            if go_parse_int(&plain) || is_yaml_float(&plain) {
                return false;
            }
            if let Some(bits) = plain.strip_prefix("0b").or_else(|| plain.strip_prefix("-0b")) {
                if !bits.is_empty() && bits.chars().all(|c| c == '0' || c == '1') {
                    return false;
                }
            }
            true
        }
        _ => true,
    }
}

/// strconv.ParseInt/ParseUint with base 0: an optional sign, then decimal, 0x hex, 0o or
/// leading-0 octal, or 0b binary.
fn go_parse_int(s: &str) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (digits, radix) = if let Some(h) = body.strip_prefix("0x").or(body.strip_prefix("0X")) {
        (h, 16)
    } else if let Some(b) = body.strip_prefix("0b").or(body.strip_prefix("0B")) {
        (b, 2)
    } else if let Some(o) = body.strip_prefix("0o").or(body.strip_prefix("0O")) {
        (o, 8)
    } else if body.len() > 1 && body.starts_with('0') {
        (&body[1..], 8)
    } else {
        (body, 10)
    };
    !digits.is_empty() && u64::from_str_radix(digits, radix).is_ok()
}

/// go-yaml's `yamlStyleFloat`: `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`.
fn is_yaml_float(s: &str) -> bool {
    let b = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (mantissa, exp) = match b.find(['e', 'E']) {
        Some(i) => (&b[..i], Some(&b[i + 1..])),
        None => (b, None),
    };
    let digits = |x: &str| !x.is_empty() && x.bytes().all(|c| c.is_ascii_digit());
    let mantissa_ok = if let Some(frac) = mantissa.strip_prefix('.') {
        digits(frac)
    } else {
        match mantissa.split_once('.') {
            Some((int, frac)) => digits(int) && (frac.is_empty() || digits(frac)),
            None => digits(mantissa),
        }
    };
    mantissa_ok && exp.is_none_or(|e| digits(e.strip_prefix(['+', '-']).unwrap_or(e)))
}

/// strconv.ParseFloat for what starts with '.' (".5", ".5e3").
fn go_parse_float(s: &str) -> Option<f64> {
    if is_yaml_float(s) {
        s.parse().ok()
    } else {
        None
    }
}

/// go-yaml's timestamp check: four digits and '-', then one of Go's layouts
/// (`2006-1-2`, `2006-1-2T15:4:5.999999999Z07:00`, with 't' or ' ' instead of 'T').
fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() < 5 || !b[..4].iter().all(u8::is_ascii_digit) || b[4] != b'-' {
        return false;
    }
    let rest = &s[5..];
    let (date, time) = match rest.find(['T', 't', ' ']) {
        Some(i) => (&rest[..i], Some((&rest[i..i + 1], &rest[i + 1..]))),
        None => (rest, None),
    };
    let Some((m, d)) = date.split_once('-') else {
        return false;
    };
    let num = |x: &str, max: u32| {
        (1..=2).contains(&x.len())
            && x.bytes().all(|c| c.is_ascii_digit())
            && x.parse::<u32>().is_ok_and(|n| n <= max)
    };
    if !num(m, 12) || m.parse::<u32>() == Ok(0) || !num(d, 31) || d.parse::<u32>() == Ok(0) {
        return false;
    }
    let Some((sep, time)) = time else {
        return true;
    };
    // Hours, minutes, seconds with an optional fraction; 'T'/'t' need a zone, ' ' has none.
    let (clock, zone) = match time.find(['Z', '+', '-']) {
        Some(i) => (&time[..i], Some(&time[i..])),
        None => (time, None),
    };
    let mut parts = clock.splitn(3, ':');
    let (Some(h), Some(mi), Some(sec)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let sec = sec.split_once('.').map_or(sec, |(s, frac)| {
        if frac.bytes().all(|c| c.is_ascii_digit()) && !frac.is_empty() {
            s
        } else {
            "x"
        }
    });
    if !num(h, 23) || !num(mi, 59) || !num(sec, 59) {
        return false;
    }
    match (sep, zone) {
        (" ", None) => true,
        (" ", Some(_)) => false,
        (_, Some("Z")) => true,
        (_, Some(z)) => {
            let z = &z[1..];
            z.len() == 5 && z.as_bytes()[2] == b':' && num(&z[..2], 23) && num(&z[3..], 59)
        }
        _ => false,
    }
}

/// go-yaml's `isBase60Float`: `^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$`.
fn is_base60_float(s: &str) -> bool {
    let b = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (main, frac) = match b.split_once('.') {
        Some((m, f)) => (m, Some(f)),
        None => (b, None),
    };
    if frac.is_some_and(|f| !f.bytes().all(|c| c.is_ascii_digit() || c == b'_')) {
        return false;
    }
    let mut parts = main.split(':');
    let head = parts.next().unwrap_or("");
    if !head.starts_with(|c: char| c.is_ascii_digit())
        || !head.bytes().all(|c| c.is_ascii_digit() || c == b'_')
    {
        return false;
    }
    let mut any = false;
    for p in parts {
        any = true;
        let ok = match p.as_bytes() {
            [d] => d.is_ascii_digit(),
            [a, d] => (b'0'..=b'5').contains(a) && d.is_ascii_digit(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    any
}

/// A JSON number as go-yaml writes what it decoded: integers as they are, floats with Go's
/// `strconv.FormatFloat(f, 'g', -1, 64)`.
fn number(n: &serde_json::Number) -> String {
    if n.is_i64() || n.is_u64() {
        return n.to_string();
    }
    let f = n.as_f64().unwrap_or(0.0);
    go_format_g(f)
}

pub(crate) fn go_format_g(f: f64) -> String {
    if f == 0.0 {
        return "0".into();
    }
    if !f.is_finite() {
        return if f.is_nan() {
            ".nan".into()
        } else if f > 0.0 {
            ".inf".into()
        } else {
            "-.inf".into()
        };
    }
    // Rust's `{:e}` gives the shortest digits that read back exactly, as Go's -1 precision.
    let e = format!("{f:e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    // Go's shortest 'g' switches to an exponent below 1e-4 and from 1e6 on (precision 6).
    if !(-4..6).contains(&exp) {
        return format!("{mantissa}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
    format!("{f}")
}

/// go-yaml's key order (`keyList.Less`): letters by code point, a non-letter before a letter,
/// runs of digits by their value, a prefix before what it prefixes.
pub fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let ar: Vec<char> = a.chars().collect();
    let br: Vec<char> = b.chars().collect();
    let mut i = 0;
    while i < ar.len() && i < br.len() {
        if ar[i] == br[i] {
            i += 1;
            continue;
        }
        let al = ar[i].is_alphabetic();
        let bl = br[i].is_alphabetic();
        if al && bl {
            return ar[i].cmp(&br[i]);
        }
        if al || bl {
            return if bl { Ordering::Less } else { Ordering::Greater };
        }
        let (mut an, mut bn): (i64, i64) = (0, 0);
        if ar[i] == '0' || br[i] == '0' {
            let mut j = i;
            while j > 0 && ar[j - 1].is_ascii_digit() {
                j -= 1;
                if ar[j] != '0' {
                    an = 1;
                    bn = 1;
                    break;
                }
            }
        }
        let mut ai = i;
        while ai < ar.len() && ar[ai].is_ascii_digit() {
            an = an.wrapping_mul(10).wrapping_add(ar[ai] as i64 - '0' as i64);
            ai += 1;
        }
        let mut bi = i;
        while bi < br.len() && br[bi].is_ascii_digit() {
            bn = bn.wrapping_mul(10).wrapping_add(br[bi] as i64 - '0' as i64);
            bi += 1;
        }
        if an != bn {
            return an.cmp(&bn);
        }
        if ai != bi {
            return ai.cmp(&bi);
        }
        return ar[i].cmp(&br[i]);
    }
    ar.len().cmp(&br.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strings_are_quoted_as_go_yaml_quotes_them() {
        // Taken from kubectl 1.33's `get configmap -o yaml` of the same data.
        let cm = json!({"data": {
            "a": "this is a long value with spaces that goes on and on and on past eighty columns for sure yes",
            "b": "multi\nline\n", "c": "123", "d": "- x", "e": "a: b", "f": " lead",
            "g": "x<y&z", "h": "yes", "i": "1:20", "j": "ünï"
        }, "metadata": {"creationTimestamp": "2026-11-26T11:13:22Z", "resourceVersion": "193"}});
        assert_eq!(
            to_string(&cm),
            "data:\n  a: this is a long value with spaces that goes on and on and on past eighty columns\n    for sure yes\n  b: |\n    multi\n    line\n  c: \"123\"\n  d: '- x'\n  e: 'a: b'\n  f: ' lead'\n  g: x<y&z\n  h: \"yes\"\n  i: \"1:20\"\n  j: ünï\nmetadata:\n  creationTimestamp: \"2026-11-26T11:13:22Z\"\n  resourceVersion: \"193\"\n"
        );
    }

    #[test]
    fn sequences_and_empty_collections() {
        let pod = json!({"spec": {"containers": [{"name": "a", "args": ["x", "y"], "env": []}],
            "empty": {}}, "list": [["a"], {}], "n": null, "t": true, "f": 1.5, "i": 3});
        assert_eq!(
            to_string(&pod),
            "f: 1.5\ni: 3\nlist:\n- - a\n- {}\n\"n\": null\nspec:\n  containers:\n  - args:\n    - x\n    - \"y\"\n    env: []\n    name: a\n  empty: {}\nt: true\n"
        );
    }

    #[test]
    fn literal_blocks_and_double_quotes() {
        assert_eq!(to_string(&json!({"k": "a\nb"})), "k: |-\n  a\n  b\n");
        assert_eq!(to_string(&json!({"k": "a\n\nb\n\n"})), "k: |+\n  a\n\n  b\n\n");
        assert_eq!(to_string(&json!({"k": " a\nb\n"})), "k: |2\n   a\n  b\n");
        // A line ending in a space before a break cannot be a block.
        assert_eq!(to_string(&json!({"k": "a \nb"})), "k: \"a \\nb\"\n");
        assert_eq!(to_string(&json!({"k": "tab\there"})), "k: \"tab\\there\"\n");
        assert_eq!(to_string(&json!({"k": ""})), "k: \"\"\n");
        assert_eq!(to_string(&json!({"k": "it's"})), "k: it's\n");
        assert_eq!(to_string(&json!({"k": "'q'"})), "k: '''q'''\n");
        assert_eq!(to_string(&json!({"k": "0x1F"})), "k: \"0x1F\"\n");
        assert_eq!(to_string(&json!({"k": "1e3"})), "k: \"1e3\"\n");
        assert_eq!(to_string(&json!({"k": "1.2.3"})), "k: 1.2.3\n");
        assert_eq!(to_string(&json!({"k": "2024-01-02"})), "k: \"2024-01-02\"\n");
        assert_eq!(to_string(&json!({"k": "nginx:1.25"})), "k: nginx:1.25\n");
        assert_eq!(to_string(&json!({"k": "*"})), "k: '*'\n");
        assert_eq!(to_string(&json!({"k": "a #b"})), "k: 'a #b'\n");
        assert_eq!(to_string(&json!({"k": "a#b"})), "k: a#b\n");
    }

    #[test]
    fn keys_in_natural_order() {
        let mut keys = vec!["port10", "port9", "b", "_a", "B", "a-b", "aB", "a"];
        keys.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(keys, ["_a", "B", "a", "a-b", "aB", "b", "port9", "port10"]);
    }

    #[test]
    fn floats_as_go_formats_them() {
        assert_eq!(go_format_g(1.5), "1.5");
        assert_eq!(go_format_g(1e21), "1e+21");
        assert_eq!(go_format_g(1234567.5), "1.2345675e+06");
        assert_eq!(go_format_g(123456.5), "123456.5");
        assert_eq!(go_format_g(0.25), "0.25");
        assert_eq!(go_format_g(1e-5), "1e-05");
    }
}
