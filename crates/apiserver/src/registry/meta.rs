//! Object metadata as Kubernetes keeps it, on JSON objects.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

pub(crate) fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc()
        .replace_nanosecond(0)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    now.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".into())
}

/// `ts` (RFC 3339) moved by `secs` seconds, in the same whole-second form as `now_rfc3339`.
pub(crate) fn rfc3339_plus(ts: &str, secs: i64) -> Option<String> {
    let t = time::OffsetDateTime::parse(ts, &time::format_description::well_known::Rfc3339).ok()?;
    (t.replace_nanosecond(0).ok()? + time::Duration::seconds(secs))
        .format(&time::format_description::well_known::Rfc3339)
        .ok()
}

/// Seconds since an RFC 3339 timestamp (for AGE columns).
pub(crate) fn age_seconds(ts: &str) -> Option<i64> {
    let t = time::OffsetDateTime::parse(ts, &time::format_description::well_known::Rfc3339).ok()?;
    Some((time::OffsetDateTime::now_utc() - t).whole_seconds())
}

/// kubectl's short age form: 5s, 3m, 2h, 4d (upstream `duration.HumanDuration`, simplified).
pub(crate) fn human_age(ts: Option<&str>) -> String {
    let Some(secs) = ts.and_then(age_seconds) else {
        return "<unknown>".into();
    };
    human_duration(secs)
}

/// A duration in kubectl's short form (upstream `duration.HumanDuration`, simplified).
pub(crate) fn human_duration(secs: i64) -> String {
    let secs = secs.max(0);
    if secs < 120 {
        format!("{secs}s")
    } else if secs < 600 {
        let (m, s) = (secs / 60, secs % 60);
        if s == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{s}s")
        }
    } else if secs < 3 * 3600 {
        format!("{}m", secs / 60)
    } else if secs < 8 * 3600 {
        let (h, m) = (secs / 3600, (secs % 3600) / 60);
        if m == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{m}m")
        }
    } else if secs < 48 * 3600 {
        format!("{}h", secs / 3600)
    } else if secs < 8 * 86400 {
        let (d, h) = (secs / 86400, (secs % 86400) / 3600);
        if h == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{h}h")
        }
    } else {
        format!("{}d", secs / 86400)
    }
}

/// The metadata object, created if missing.
pub(crate) fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    obj["metadata"].as_object_mut().expect("metadata is an object")
}

pub(crate) fn str_field<'a>(obj: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut v = obj;
    for p in path {
        v = v.get(p)?;
    }
    v.as_str()
}

pub(crate) fn name(obj: &Value) -> &str {
    str_field(obj, &["metadata", "name"]).unwrap_or("")
}

pub(crate) fn namespace(obj: &Value) -> &str {
    str_field(obj, &["metadata", "namespace"]).unwrap_or("")
}

pub(crate) fn string_map(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn labels(obj: &Value) -> BTreeMap<String, String> {
    string_map(&obj["metadata"]["labels"])
}

pub(crate) fn finalizers(obj: &Value) -> Vec<String> {
    obj["metadata"]["finalizers"]
        .as_array()
        .map(|a| a.iter().filter_map(|f| f.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

pub(crate) fn set_resource_version(obj: &mut Value, rv: i64) {
    meta_mut(obj).insert("resourceVersion".into(), Value::String(rv.to_string()));
}

pub(crate) fn resource_version(obj: &Value) -> Option<i64> {
    str_field(obj, &["metadata", "resourceVersion"]).and_then(|s| s.parse().ok())
}

/// A random suffix for `generateName`, from upstream's alphabet (no vowels, no look-alikes).
pub(crate) fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    // Not a secret (upstream draws it from math/rand too): a fast thread-local generator, no
    // system call per name.
    (0..5)
        .map(|_| ALPHABET[fastrand::usize(..ALPHABET.len())] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_like_kubectl() {
        let ts = |secs: i64| {
            (time::OffsetDateTime::now_utc() - time::Duration::seconds(secs))
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap()
        };
        assert_eq!(human_age(Some(&ts(5))), "5s");
        assert_eq!(human_age(Some(&ts(300))), "5m");
        assert_eq!(human_age(Some(&ts(3 * 86400))), "3d");
        assert_eq!(human_age(None), "<unknown>");
    }

    #[test]
    fn generated_suffixes_use_the_safe_alphabet() {
        let s = random_suffix();
        assert_eq!(s.len(), 5);
        assert!(s.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
    }
}
