//! JSON as kubectl prints it (`-o json`): Go's `json.MarshalIndent(obj, "", "    ")` of an
//! unstructured object, so keys sorted bytewise, `<`, `>` and `&` escaped as `\u003c` …
//! (Go's HTML-safe default), and floats in Go's format. serde_json's pretty printer differs in
//! all three, hence this small writer.

use serde_json::Value;

/// The indented JSON of `v`, with kubectl's trailing newline.
pub fn to_string(v: &Value) -> String {
    let mut out = String::new();
    write(&mut out, v, 0, true);
    out.push('\n');
    out
}

/// The same for a value kubectl holds as a typed Go object: keys in Go's field order (see
/// `go_order`), as `v` has them.
pub fn to_string_typed(v: &Value) -> String {
    to_string_typed_indent(v, "    ")
}

/// The same indented by `indent` (kubectl's `version -o json` uses two spaces).
pub fn to_string_typed_indent(v: &Value, indent: &str) -> String {
    let mut out = String::new();
    write(&mut out, v, 0, false);
    out.push('\n');
    if indent == "    " {
        return out;
    }
    // Re-indent: only line starts carry indentation (strings hold no raw newlines).
    out.lines()
        .map(|l| {
            let spaces = l.len() - l.trim_start_matches(' ').len();
            format!("{}{}\n", indent.repeat(spaces / 4), &l[spaces..])
        })
        .collect()
}

/// Go's `json.Marshal` of an unstructured object: compact, keys sorted, HTML-safe escapes.
pub fn compact(v: &Value) -> String {
    let mut out = String::new();
    write_compact(&mut out, v);
    out
}

fn write_compact(out: &mut String, v: &Value) {
    match v {
        Value::Array(a) => {
            out.push('[');
            for (i, item) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_compact(out, item);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push('{');
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                string(out, k);
                out.push(':');
                write_compact(out, &m[k.as_str()]);
            }
            out.push('}');
        }
        scalar => write(out, scalar, 0, true),
    }
}

fn write(out: &mut String, v: &Value, depth: usize, sort: bool) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&number(n)),
        Value::String(s) => string(out, s),
        Value::Array(a) if a.is_empty() => out.push_str("[]"),
        Value::Object(m) if m.is_empty() => out.push_str("{}"),
        Value::Array(a) => {
            out.push('[');
            for (i, item) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, depth + 1);
                write(out, item, depth + 1, sort);
            }
            newline(out, depth);
            out.push(']');
        }
        Value::Object(m) => {
            out.push('{');
            let mut keys: Vec<&String> = m.keys().collect();
            if sort {
                keys.sort();
            }
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, depth + 1);
                string(out, k);
                out.push_str(": ");
                write(out, &m[k.as_str()], depth + 1, sort);
            }
            newline(out, depth);
            out.push('}');
        }
    }
}

fn newline(out: &mut String, depth: usize) {
    out.push('\n');
    for _ in 0..depth {
        out.push_str("    ");
    }
}

/// A string as Go's encoder escapes it.
pub(crate) fn string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Go's encoding of a float64: plain decimals, an exponent only below 1e-6 or from 1e21 on.
fn number(n: &serde_json::Number) -> String {
    if n.is_i64() || n.is_u64() {
        return n.to_string();
    }
    let f = n.as_f64().unwrap_or(0.0);
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let e = format!("{f:e}");
        let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
        let exp: i32 = exp.parse().unwrap_or(0);
        return format!(
            "{mantissa}e{}{exp_abs:02}",
            if exp < 0 { '-' } else { '+' },
            exp_abs = exp.abs()
        )
        .replace("e-0", "e-")
        .replace("e+0", "e+");
    }
    format!("{f}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn as_go_marshal_indent_writes_it() {
        let v = json!({"kind": "ConfigMap", "data": {"g": "x<y&z", "b": "multi\nline\n"},
            "apiVersion": "v1", "items": [], "meta": {}, "n": [1, 2.5, null, true]});
        assert_eq!(
            to_string(&v),
            "{\n    \"apiVersion\": \"v1\",\n    \"data\": {\n        \"b\": \"multi\\nline\\n\",\n        \"g\": \"x\\u003cy\\u0026z\"\n    },\n    \"items\": [],\n    \"kind\": \"ConfigMap\",\n    \"meta\": {},\n    \"n\": [\n        1,\n        2.5,\n        null,\n        true\n    ]\n}\n"
        );
        assert_eq!(
            compact(&json!({"b": [1, {"z": "<", "a": null}], "a": {}})),
            r#"{"a":{},"b":[1,{"a":null,"z":"\u003c"}]}"#
        );
        assert_eq!(number(&serde_json::Number::from_f64(1e21).unwrap()), "1e+21");
        assert_eq!(number(&serde_json::Number::from_f64(1e-7).unwrap()), "1e-7");
    }
}
