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

// Name, label and annotation checks, as upstream's `k8s.io/apimachinery/pkg/util/validation`
// words them. Each check reports the length problem first and the format problem second; the
// format patterns themselves carry no length, so a value that is only too long gets only the
// length message.

const DNS1123_LABEL_MAX: usize = 63;
const DNS1123_SUBDOMAIN_MAX: usize = 253;
const DNS1035_LABEL_MAX: usize = 63;
const QUALIFIED_NAME_MAX: usize = 63;
const LABEL_VALUE_MAX: usize = 63;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const DNS1035_LABEL_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character";
const WILDCARD_DNS1123_SUBDOMAIN_FMT: &str =
    "\\*\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const WILDCARD_DNS1123_SUBDOMAIN_MSG: &str = "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, which must consist of lower case alphanumeric characters, '-' or '.' and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// Upstream's `MaxLenError`.
fn max_len_error(max: usize) -> String {
    format!("must be no more than {max} characters")
}

/// Upstream's `RegexError`: the message, then the examples and the pattern in parentheses.
/// Each example is followed by `", "`, and examples after the first are led by `" or "`, hence
/// upstream's doubled space (`'my-name',  or '123-abc'`).
fn regex_error(msg: &str, pattern: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{pattern}')");
    }
    let mut out = format!("{msg} (e.g. ");
    for (i, ex) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push('\'');
        out.push_str(ex);
        out.push_str("', ");
    }
    out.push_str("regex used for validation is '");
    out.push_str(pattern);
    out.push_str("')");
    out
}

/// Non-empty, made of `inner` bytes, and starting and ending with an `edge` byte.
fn framed(s: &str, edge: fn(u8) -> bool, inner: fn(u8) -> bool) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(&first), Some(&last)) => edge(first) && edge(last) && b.iter().all(|&c| inner(c)),
        _ => false,
    }
}

fn lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// Matches `[a-z0-9]([-a-z0-9]*[a-z0-9])?` (any length).
fn matches_dns1123_label(s: &str) -> bool {
    framed(s, lower_alnum, |b| lower_alnum(b) || b == b'-')
}

/// Matches the RFC 1123 subdomain pattern: labels joined by single dots (any length).
fn matches_dns1123_subdomain(s: &str) -> bool {
    s.split('.').all(matches_dns1123_label)
}

/// Matches `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]` (any length).
fn matches_qualified_name_part(s: &str) -> bool {
    framed(
        s,
        |b| b.is_ascii_alphanumeric(),
        |b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'),
    )
}

/// Why `s` is not an RFC 1123 label (max 63), in upstream's words (`IsDNS1123Label`).
pub fn dns1123_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_LABEL_MAX {
        errs.push(max_len_error(DNS1123_LABEL_MAX));
    }
    if !matches_dns1123_label(s) {
        if matches_dns1123_subdomain(s) {
            // A well-formed subdomain that is no label: the dots are the trouble.
            errs.push("must not contain dots".to_owned());
        } else {
            errs.push(regex_error(
                DNS1123_LABEL_MSG,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// Why `s` is not an RFC 1035 label (max 63), in upstream's words (`IsDNS1035Label`, Service
/// names).
pub fn dns1035_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1035_LABEL_MAX {
        errs.push(max_len_error(DNS1035_LABEL_MAX));
    }
    if !(matches_dns1123_label(s) && s.as_bytes()[0].is_ascii_lowercase()) {
        errs.push(regex_error(
            DNS1035_LABEL_MSG,
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    errs
}

/// Why `s` is not a wildcard RFC 1123 subdomain (`*.example.com`), in upstream's words
/// (`IsWildcardDNS1123Subdomain`).
pub fn wildcard_dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX));
    }
    if !s.strip_prefix("*.").is_some_and(matches_dns1123_subdomain) {
        errs.push(regex_error(
            WILDCARD_DNS1123_SUBDOMAIN_MSG,
            WILDCARD_DNS1123_SUBDOMAIN_FMT,
            &["*.example.com"],
        ));
    }
    errs
}

/// Why `s` is not an RFC 1123 subdomain (max 253), in upstream's words (`IsDNS1123Subdomain`).
pub fn dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX));
    }
    if !matches_dns1123_subdomain(s) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_MSG,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// Why `key` is not a qualified name (`[prefix/]name`), as label and annotation keys must be
/// (`IsQualifiedName`). The prefix, when there is one, must be a DNS subdomain; the name is
/// checked for emptiness or length and, independently, for its characters.
pub fn qualified_name(key: &str) -> Vec<String> {
    let name_regex_error = || {
        regex_error(
            QUALIFIED_NAME_MSG,
            QUALIFIED_NAME_FMT,
            &["MyName", "my.name", "123-abc"],
        )
    };
    let mut errs = Vec::new();
    let name = match key.split_once('/') {
        None => key,
        Some((_, rest)) if rest.contains('/') => {
            return vec![format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                name_regex_error()
            )];
        }
        Some((prefix, name)) => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_owned());
            } else {
                errs.extend(
                    dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|e| format!("prefix part {e}")),
                );
            }
            name
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > QUALIFIED_NAME_MAX {
        errs.push(format!("name part {}", max_len_error(QUALIFIED_NAME_MAX)));
    }
    if !matches_qualified_name_part(name) {
        errs.push(format!("name part {}", name_regex_error()));
    }
    errs
}

/// Why `value` is not a valid label value (`IsValidLabelValue`): empty, or a qualified name's
/// name part, at most 63 characters.
pub fn label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_VALUE_MAX {
        errs.push(max_len_error(LABEL_VALUE_MAX));
    }
    if !value.is_empty() && !matches_qualified_name_part(value) {
        errs.push(regex_error(
            LABEL_VALUE_MSG,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
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

    // Upstream's messages written out in full, as `k8s.io/apimachinery/pkg/util/validation`
    // v0.33 prints them (checked against a Go program calling it).
    const QN_NAME_REGEX: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    const QN_MANY_SLASHES: &str = "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')";
    const LABEL_VALUE_REGEX: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
    const DNS1123_LABEL_REGEX: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
    const DNS1123_SUBDOMAIN_REGEX: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    const DNS1035_LABEL_REGEX: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
    const WILDCARD_REGEX: &str = "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, which must consist of lower case alphanumeric characters, '-' or '.' and end with an alphanumeric character (e.g. '*.example.com', regex used for validation is '\\*\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

    #[track_caller]
    fn check(got: Vec<String>, want: &[&str]) {
        assert_eq!(got, want);
    }

    #[test]
    fn qualified_name_empty_name_part_is_both_empty_and_malformed() {
        let both = &["name part must be non-empty", QN_NAME_REGEX];
        check(qualified_name(""), both);
        check(qualified_name("example.com/"), both);
        check(
            qualified_name("/"),
            &[
                "prefix part must be non-empty",
                "name part must be non-empty",
                QN_NAME_REGEX,
            ],
        );
        check(qualified_name("/app"), &["prefix part must be non-empty"]);
    }

    #[test]
    fn qualified_name_too_long_reports_bad_characters_too() {
        let too_long = "name part must be no more than 63 characters";
        // Only too long: the pattern itself has no length.
        check(qualified_name(&"a".repeat(64)), &[too_long]);
        check(
            qualified_name(&format!("example.com/{}", "a".repeat(64))),
            &[too_long],
        );
        // Too long and malformed: both.
        check(
            qualified_name(&format!("-{}", "a".repeat(63))),
            &[too_long, QN_NAME_REGEX],
        );
        check(
            qualified_name(&format!("example.com/{}-", "a".repeat(63))),
            &[too_long, QN_NAME_REGEX],
        );
        check(qualified_name(&"a".repeat(63)), &[]);
    }

    #[test]
    fn qualified_name_with_more_than_one_slash_is_one_message() {
        check(qualified_name("a/b/c"), &[QN_MANY_SLASHES]);
        check(qualified_name("a/b/"), &[QN_MANY_SLASHES]);
        check(qualified_name("//"), &[QN_MANY_SLASHES]);
        // Nothing else is looked at, however long the parts.
        check(
            qualified_name(&format!("a/{}/c", "a".repeat(64))),
            &[QN_MANY_SLASHES],
        );
    }

    #[test]
    fn qualified_name_prefixes_and_characters() {
        check(qualified_name("example.com/name"), &[]);
        check(qualified_name("example.com/MyName_1.x"), &[]);
        check(
            qualified_name("Example.com/name"),
            &[&format!("prefix part {DNS1123_SUBDOMAIN_REGEX}")],
        );
        check(
            qualified_name("-bad.com/-x"),
            &[&format!("prefix part {DNS1123_SUBDOMAIN_REGEX}"), QN_NAME_REGEX],
        );
        let long_prefix = format!("{}/x", "a".repeat(254));
        check(
            qualified_name(&long_prefix),
            &["prefix part must be no more than 253 characters"],
        );
        for bad in ["-a", "a-", ".a", "a.", "_a", "a_", "a b"] {
            check(qualified_name(bad), &[QN_NAME_REGEX]);
        }
    }

    #[test]
    fn label_value_too_long_is_only_the_length_unless_malformed_too() {
        let too_long = "must be no more than 63 characters";
        check(label_value(&"a".repeat(64)), &[too_long]);
        check(label_value(&"A".repeat(64)), &[too_long]);
        check(label_value(&format!("{}.b", "a".repeat(63))), &[too_long]);
        check(
            label_value(&format!("{}-", "a".repeat(64))),
            &[too_long, LABEL_VALUE_REGEX],
        );
        check(label_value(&"a".repeat(63)), &[]);
        check(label_value(""), &[]);
        for bad in ["-a", "a-", ".a", "a.", "_a", "a_", "a b", "a/b"] {
            check(label_value(bad), &[LABEL_VALUE_REGEX]);
        }
    }

    #[test]
    fn dns1123_label_with_dots_says_so() {
        check(dns1123_label("a.b"), &["must not contain dots"]);
        check(dns1123_label("my.name"), &["must not contain dots"]);
        check(
            dns1123_label(&format!("{}.b", "a".repeat(63))),
            &["must be no more than 63 characters", "must not contain dots"],
        );
        // Not a subdomain either: the label pattern.
        for bad in ["", "a..b", "a.", ".a", "-a", "a-", "A", "a_b", "a.B"] {
            check(dns1123_label(bad), &[DNS1123_LABEL_REGEX]);
        }
        check(
            dns1123_label(&"a".repeat(64)),
            &["must be no more than 63 characters"],
        );
        check(
            dns1123_label(&format!("{}-", "a".repeat(64))),
            &["must be no more than 63 characters", DNS1123_LABEL_REGEX],
        );
    }

    #[test]
    fn subdomains_and_dns1035_labels() {
        check(dns1123_subdomain("nginx-1.example"), &[]);
        check(dns1123_subdomain(&"a".repeat(253)), &[]);
        check(
            dns1123_subdomain(&"a".repeat(254)),
            &["must be no more than 253 characters"],
        );
        check(
            dns1123_subdomain(&format!("{}..x", "a".repeat(252))),
            &["must be no more than 253 characters", DNS1123_SUBDOMAIN_REGEX],
        );
        for bad in ["", "Nginx", "-a", "a-", ".a", "a.", "a..b", "a_b"] {
            check(dns1123_subdomain(bad), &[DNS1123_SUBDOMAIN_REGEX]);
        }
        check(dns1035_label("my-name"), &[]);
        for bad in ["", "1abc", "-a", "a-", "a.b", "A"] {
            check(dns1035_label(bad), &[DNS1035_LABEL_REGEX]);
        }
        check(
            dns1035_label(&"a".repeat(64)),
            &["must be no more than 63 characters"],
        );
        check(wildcard_dns1123_subdomain("*.example.com"), &[]);
        for bad in ["", "*", "*.", "example.com", "*.*.b", "*.A.com", "**.a"] {
            check(wildcard_dns1123_subdomain(bad), &[WILDCARD_REGEX]);
        }
    }
}
