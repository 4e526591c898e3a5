//! Field validation as upstream words it: names, labels and annotations. Errors are collected,
//! not returned at the first, so a 422 names every field at fault.

use std::fmt;

/// One invalid field, as `field.Error` upstream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldValueNotSupported`, ...
    pub reason: &'static str,
    /// JSON path such as `metadata.name`.
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn invalid(field: impl Into<String>, value: &str, detail: impl fmt::Display) -> Self {
        Self {
            reason: "FieldValueInvalid",
            field: field.into(),
            message: format!("Invalid value: {}: {detail}", quote(value)),
        }
    }

    /// An invalid value shown as it is (for values that are not strings, e.g. Go's
    /// `[]string{"10.0.0.1"}` or a number).
    pub fn invalid_raw(field: impl Into<String>, value: &str, detail: impl fmt::Display) -> Self {
        Self {
            reason: "FieldValueInvalid",
            field: field.into(),
            message: format!("Invalid value: {value}: {detail}"),
        }
    }

    pub fn duplicate(field: impl Into<String>, value: &str) -> Self {
        Self {
            reason: "FieldValueDuplicate",
            field: field.into(),
            message: format!("Duplicate value: {}", quote(value)),
        }
    }

    /// A duplicate shown as it is (Go's `%#v` of a struct, say).
    pub fn duplicate_raw(field: impl Into<String>, value: &str) -> Self {
        Self {
            reason: "FieldValueDuplicate",
            field: field.into(),
            message: format!("Duplicate value: {value}"),
        }
    }

    pub fn not_found(field: impl Into<String>, value: &str) -> Self {
        Self {
            reason: "FieldValueNotFound",
            field: field.into(),
            message: format!("Not found: {}", quote(value)),
        }
    }

    /// Longer than `max` bytes (the value is not repeated, as upstream leaves it out).
    pub fn too_long(field: impl Into<String>, max: usize) -> Self {
        Self {
            reason: "FieldValueTooLong",
            field: field.into(),
            message: format!("Too long: may not be more than {max} bytes"),
        }
    }

    pub fn forbidden(field: impl Into<String>, detail: impl fmt::Display) -> Self {
        Self {
            reason: "FieldValueForbidden",
            field: field.into(),
            message: format!("Forbidden: {detail}"),
        }
    }

    pub fn required(field: impl Into<String>, detail: &str) -> Self {
        let field = field.into();
        Self {
            reason: "FieldValueRequired",
            message: if detail.is_empty() {
                "Required value".to_owned()
            } else {
                format!("Required value: {detail}")
            },
            field,
        }
    }

    pub fn not_supported(field: impl Into<String>, value: &str, supported: &[&str]) -> Self {
        let list: Vec<String> = supported.iter().map(|s| quote(s)).collect();
        Self {
            reason: "FieldValueNotSupported",
            field: field.into(),
            message: format!(
                "Unsupported value: {}: supported values: {}",
                quote(value),
                list.join(", ")
            ),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

fn quote(s: &str) -> String {
    serde_like_quote(s)
}

/// Go's `%#v` of a `metav1.LabelSelector` (JSON), as upstream prints one in an error such as
/// `spec.selector: Invalid value: v1.LabelSelector{...}: field is immutable`.
pub fn go_label_selector(sel: &serde_json::Value) -> String {
    let strings = |v: &serde_json::Value| match v.as_array() {
        Some(a) => {
            let items: Vec<String> = a.iter().map(|s| quote(s.as_str().unwrap_or(""))).collect();
            format!("[]string{{{}}}", items.join(", "))
        }
        None => "[]string(nil)".to_owned(),
    };
    let labels = match sel["matchLabels"].as_object() {
        Some(m) => {
            // fmt prints a map's keys sorted.
            let mut kv: Vec<(&String, &serde_json::Value)> = m.iter().collect();
            kv.sort_by(|a, b| a.0.cmp(b.0));
            let items: Vec<String> = kv
                .iter()
                .map(|(k, v)| format!("{}:{}", quote(k), quote(v.as_str().unwrap_or(""))))
                .collect();
            format!("map[string]string{{{}}}", items.join(", "))
        }
        None => "map[string]string(nil)".to_owned(),
    };
    let expressions = match sel["matchExpressions"].as_array() {
        Some(a) => {
            let items: Vec<String> = a
                .iter()
                .map(|r| {
                    format!(
                        "v1.LabelSelectorRequirement{{Key:{}, Operator:{}, Values:{}}}",
                        quote(r["key"].as_str().unwrap_or("")),
                        quote(r["operator"].as_str().unwrap_or("")),
                        strings(&r["values"])
                    )
                })
                .collect();
            format!("[]v1.LabelSelectorRequirement{{{}}}", items.join(", "))
        }
        None => "[]v1.LabelSelectorRequirement(nil)".to_owned(),
    };
    format!("v1.LabelSelector{{MatchLabels:{labels}, MatchExpressions:{expressions}}}")
}

/// Go's %q for the plain strings names are made of.
fn serde_like_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_SUBDOMAIN_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";

fn is_label(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && s.as_bytes()[0] != b'-'
        && s.as_bytes()[s.len() - 1] != b'-'
}

/// Why `s` is not an RFC 1123 label (max 63), in upstream's words.
pub fn dns1123_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push("must be no more than 63 characters".to_owned());
    }
    if !is_label(s) {
        errs.push(format!(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '{DNS1123_LABEL_FMT}')"
        ));
    }
    errs
}

/// Why `s` is not an RFC 1035 label (max 63), in upstream's words (Service names).
pub fn dns1035_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push("must be no more than 63 characters".to_owned());
    }
    if !is_label(s) || !s.as_bytes()[0].is_ascii_lowercase() {
        errs.push("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')".to_owned());
    }
    errs
}

/// Why `s` is not a wildcard RFC 1123 subdomain (`*.example.com`), in upstream's words.
pub fn wildcard_dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push("must be no more than 253 characters".to_owned());
    }
    let ok = s
        .strip_prefix("*.")
        .is_some_and(|rest| !rest.is_empty() && rest.split('.').all(is_label));
    if !ok {
        errs.push("a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, which must consist of lower case alphanumeric characters, '-' or '.' and end with an alphanumeric character (e.g. '*.example.com', regex used for validation is '\\*\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".to_owned());
    }
    errs
}

/// Why `s` is not an RFC 1123 subdomain (max 253), in upstream's words.
pub fn dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push("must be no more than 253 characters".to_owned());
    }
    if s.is_empty() || !s.split('.').all(is_label) {
        errs.push(format!(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '{DNS1123_SUBDOMAIN_FMT}')"
        ));
    }
    errs
}

fn is_qualified_name_part(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && s.as_bytes()[0].is_ascii_alphanumeric()
        && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()
}

const QUALIFIED_NAME_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

/// Why `key` is not a qualified name (`prefix/name`), as label and annotation keys must be.
pub fn qualified_name(key: &str) -> Vec<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let mut errs = Vec::new();
    if let Some(p) = prefix {
        if p.is_empty() {
            errs.push("prefix part must be non-empty".to_owned());
        } else {
            for e in dns1123_subdomain(p) {
                errs.push(format!("prefix part {e}"));
            }
        }
    }
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".to_owned());
    } else if !is_qualified_name_part(name) {
        errs.push(QUALIFIED_NAME_MSG.to_owned());
    }
    errs
}

/// Why `value` is not a valid label value.
pub fn label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push("must be no more than 63 characters".to_owned());
    }
    if !value.is_empty() && !is_qualified_name_part(value) {
        errs.push("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".to_owned());
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_selectors_print_as_gos_sharp_v() {
        let sel = serde_json::json!({"matchLabels": {"tier": "web", "app": "nginx"}});
        assert_eq!(
            go_label_selector(&sel),
            r#"v1.LabelSelector{MatchLabels:map[string]string{"app":"nginx", "tier":"web"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}"#
        );
        let sel = serde_json::json!({"matchExpressions": [
            {"key": "app", "operator": "In", "values": ["a", "b"]},
            {"key": "x", "operator": "Exists"}]});
        assert_eq!(
            go_label_selector(&sel),
            r#"v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement{v1.LabelSelectorRequirement{Key:"app", Operator:"In", Values:[]string{"a", "b"}}, v1.LabelSelectorRequirement{Key:"x", Operator:"Exists", Values:[]string(nil)}}}"#
        );
    }

    #[test]
    fn names() {
        assert!(dns1123_subdomain("nginx-1.example").is_empty());
        assert!(!dns1123_subdomain("Nginx").is_empty());
        assert!(!dns1123_subdomain("-a").is_empty());
        assert!(!dns1123_subdomain("a..b").is_empty());
        assert!(dns1123_label("kube-system").is_empty());
        assert!(!dns1123_label("a.b").is_empty());
        assert_eq!(dns1123_label(&"a".repeat(64)).len(), 1);
    }

    #[test]
    fn label_keys_and_values() {
        assert!(qualified_name("app.kubernetes.io/name").is_empty());
        assert!(qualified_name("app").is_empty());
        assert!(!qualified_name("/app").is_empty());
        assert!(!qualified_name("app/").is_empty());
        assert!(!qualified_name("bad key").is_empty());
        assert!(label_value("").is_empty());
        assert!(label_value("v1.2_3").is_empty());
        assert!(!label_value("has space").is_empty());
    }

    #[test]
    fn messages_read_like_upstream() {
        let e = FieldError::invalid("metadata.name", "Foo", "x");
        assert_eq!(e.to_string(), "metadata.name: Invalid value: \"Foo\": x");
        assert_eq!(
            FieldError::required("spec.containers", "").to_string(),
            "spec.containers: Required value"
        );
    }
}
