//! Kubernetes' format library (upstream's `library/format.go`): named string formats,
//! `format.dns1123Label()` and the like or `format.named('dns1123Label')` (an optional), and
//! `<format>.validate(s)`: `optional.none()` if `s` is of the format, else the list of what
//! is wrong, in upstream's words.
//!
//! The name validations are `r8s_api`'s but for qualified names and label values, written
//! here as upstream words them (two errors where `r8s_api` has one, for an empty or long
//! name).

use std::sync::OnceLock;

use ::cel::common::functions::Function;
use ::cel::common::types::{CelOptional, Kind, Type, STRING_TYPE};
use ::cel::common::value::CowVal;
use ::cel::objects::Opaque;
use ::cel::{DeclarationError, Env};
use r8s_api::validation as names;
use regex::Regex;

use super::{error, of_opaque, opaque, string, take, Ret};

const TYPE_NAME: &str = "kubernetes.NamedFormat";
const FORMAT: Type = Type::simple_type(Kind::Opaque, TYPE_NAME);

/// What is wrong with a string, for a format.
type Validation = fn(&str) -> Vec<String>;

/// The formats, by the names `format.named` knows them by, with their validation.
const FORMATS: [(&str, Validation); 13] = [
    ("dns1123Label", |s| names::dns1123_label(s)),
    ("dns1123Subdomain", |s| names::dns1123_subdomain(s)),
    ("dns1035Label", |s| names::dns1035_label(s)),
    ("qualifiedName", qualified_name),
    ("dns1123LabelPrefix", |s| {
        names::dns1123_label(&mask_trailing_dash(s))
    }),
    ("dns1123SubdomainPrefix", |s| {
        names::dns1123_subdomain(&mask_trailing_dash(s))
    }),
    ("dns1035LabelPrefix", |s| {
        names::dns1035_label(&mask_trailing_dash(s))
    }),
    ("labelValue", label_value),
    ("uri", uri),
    ("uuid", |s| {
        matches(uuid_pattern(), s, "does not match the UUID format")
    }),
    ("byte", |s| matches(base64_pattern(), s, "invalid base64")),
    ("date", |s| fails(is_date(s), "invalid date")),
    ("datetime", |s| fails(is_datetime(s), "invalid datetime")),
];

/// A format, by its index in `FORMATS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Format(usize);

impl Opaque for Format {
    fn runtime_type_name(&self) -> &str {
        TYPE_NAME
    }
}

pub(super) fn library(env: &mut Env) -> Result<(), DeclarationError> {
    // Not `env.add_type`: upstream's object types can't be named in an expression.
    const CONSTANTS: [Function; 13] = [
        constant::<0>,
        constant::<1>,
        constant::<2>,
        constant::<3>,
        constant::<4>,
        constant::<5>,
        constant::<6>,
        constant::<7>,
        constant::<8>,
        constant::<9>,
        constant::<10>,
        constant::<11>,
        constant::<12>,
    ];
    for ((name, _), f) in FORMATS.iter().zip(CONSTANTS) {
        let name = format!("format.{name}");
        env.add_overload(&name, &name, vec![], f)?;
    }
    env.add_overload("format.named", "format-named", vec![STRING_TYPE], named)?;
    env.add_member_overload("validate", "format-validate", FORMAT, vec![STRING_TYPE], validate)?;
    Ok(())
}

/// `format.<name>()` for the `I`th format.
fn constant<'b, 'v, const I: usize>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [] = take(args)?;
    of_opaque(Format(I))
}

fn named<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [name] = take(args)?;
    let name = string(&name)?;
    let format = match FORMATS.iter().position(|(n, _)| *n == name) {
        Some(i) => CelOptional::of(of_opaque(Format(i))?.into_owned()),
        None => CelOptional::none(),
    };
    Ok(CowVal::owned(format))
}

fn validate<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [format, s] = take(args)?;
    let Format(i) = opaque(format.as_ref(), TYPE_NAME)?;
    let (_, check) = FORMATS
        .get(i)
        .ok_or_else(|| error("validate", "unknown format"))?;
    let errors = check(string(&s)?);
    Ok(CowVal::owned(if errors.is_empty() {
        CelOptional::none()
    } else {
        CelOptional::of(super::of_strings(errors)?.into_owned())
    }))
}

/// Upstream's `maskTrailingDash`, as it is: for a name that only has to be a prefix of one, a
/// trailing dash is fine (so are the two characters before it).
fn mask_trailing_dash(s: &str) -> String {
    match s.strip_suffix('-') {
        Some(_) if s.len() > 1 => format!("{}a", &s[..s.len() - 2]),
        _ => s.to_owned(),
    }
}

/// Upstream's `qualifiedNameFmt`: `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    let edge = |c: Option<&u8>| c.is_some_and(u8::is_ascii_alphanumeric);
    edge(b.first()) && edge(b.last()) && b.iter().all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(c))
}

const QUALIFIED_NAME_ERROR: &str = "must consist of alphanumeric characters, '-', '_' or '.', \
    and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or \
    '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

/// Upstream's `IsQualifiedName`.
fn qualified_name(s: &str) -> Vec<String> {
    let mut errors = Vec::new();
    let name = match s.split('/').collect::<Vec<_>>()[..] {
        [name] => name,
        [prefix, name] => {
            if prefix.is_empty() {
                errors.push("prefix part must be non-empty".to_owned());
            } else {
                let msgs = names::dns1123_subdomain(prefix);
                errors.extend(msgs.into_iter().map(|e| format!("prefix part {e}")));
            }
            name
        }
        _ => {
            return vec![format!(
                "a qualified name {QUALIFIED_NAME_ERROR} with an optional DNS subdomain prefix \
                 and '/' (e.g. 'example.com/MyName')"
            )]
        }
    };
    if name.is_empty() {
        errors.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        errors.push("name part must be no more than 63 characters".to_owned());
    }
    if !is_qualified_name_part(name) {
        errors.push(format!("name part {QUALIFIED_NAME_ERROR}"));
    }
    errors
}

/// Upstream's `IsValidLabelValue`.
fn label_value(s: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if s.len() > 63 {
        errors.push("must be no more than 63 characters".to_owned());
    }
    if !s.is_empty() && !is_qualified_name_part(s) {
        errors.push(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', \
             '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  \
             or 'my_value',  or '12345', regex used for validation is \
             '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
                .to_owned(),
        );
    }
    errors
}

/// Go's `url.ParseRequestURI`, its error if any.
fn uri(s: &str) -> Vec<String> {
    super::urls::request_uri_error(s).into_iter().collect()
}

/// kube-openapi's `strfmt.UUIDPattern`.
fn uuid_pattern() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new("(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
            .expect("a valid pattern")
    })
}

/// kube-openapi's govalidator `Base64` pattern: padded standard base64, not empty.
fn base64_pattern() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new("^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})$")
            .expect("a valid pattern")
    })
}

fn matches(re: &Regex, s: &str, message: &str) -> Vec<String> {
    fails(re.is_match(s), message)
}

fn fails(ok: bool, message: &str) -> Vec<String> {
    if ok {
        Vec::new()
    } else {
        vec![message.to_owned()]
    }
}

/// Go's `time.Parse("2006-01-02", s)` succeeds: a date of the calendar, written in full.
fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    let number = |range: std::ops::Range<usize>| -> Option<i32> {
        let digits = b.get(range)?;
        digits
            .iter()
            .all(u8::is_ascii_digit)
            .then(|| std::str::from_utf8(digits).ok()?.parse().ok())?
    };
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let (Some(year), Some(month), Some(day)) = (number(0..4), number(5..7), number(8..10)) else {
        return false;
    };
    let Ok(month) = time::Month::try_from(month as u8) else {
        return false;
    };
    time::Date::from_calendar_date(year, month, day as u8).is_ok()
}

/// kube-openapi's `strfmt.IsDateTime`: a date, a "t", and a time of RFC 3339's pattern.
fn is_datetime(s: &str) -> bool {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| {
        Regex::new(r"^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$")
            .expect("a valid pattern")
    });
    if s.len() < 4 {
        return false;
    }
    let lower = s.to_lowercase();
    let parts: Vec<&str> = lower.split('t').collect();
    if parts.len() < 2 || !is_date(parts[0]) {
        return false;
    }
    re.captures(parts[1])
        .is_some_and(|m| &m[1] <= "23" && &m[2] <= "59" && &m[3] <= "59")
}

#[cfg(test)]
mod tests {
    use super::super::tests::{check, holds};
    use ::cel::Value;

    // Expected values and messages are upstream's (k8s.io/apiserver 1.33's base environment).

    fn errors(expr: &str, want: &[&str]) {
        check(&format!("{expr}.value()"), want.to_vec());
    }

    #[test]
    fn names() {
        holds("!format.dns1123Label().validate('abc').hasValue()");
        errors(
            "format.dns1123Label().validate('Abc')",
            &["a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"],
        );
        errors(
            "format.dns1123Subdomain().validate('a..b')",
            &["a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"],
        );
        errors(
            "format.named('dns1035Label').value().validate('1a')",
            &["a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"],
        );
        holds("!format.dns1123LabelPrefix().validate('abc-').hasValue()");
        holds("!format.dns1123LabelPrefix().validate('a-').hasValue()");
        holds("format.dns1123LabelPrefix().validate('-').hasValue()");
        holds("!format.dns1035LabelPrefix().validate('a-').hasValue()");
        holds("!format.dns1123SubdomainPrefix().validate('a.b-').hasValue()");
        errors(
            "format.labelValue().validate('-a')",
            &["a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"],
        );
    }

    #[test]
    fn qualified_names() {
        let regex = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
        holds("!format.qualifiedName().validate('example.com/My.Name').hasValue()");
        errors(
            "format.qualifiedName().validate('a/b/c')",
            &[&format!("a qualified name {regex} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')")],
        );
        errors(
            "format.qualifiedName().validate('')",
            &["name part must be non-empty", &format!("name part {regex}")],
        );
        errors(
            "format.qualifiedName().validate('/a')",
            &["prefix part must be non-empty"],
        );
        errors(
            &format!("format.qualifiedName().validate('{}-')", "a".repeat(64)),
            &[
                "name part must be no more than 63 characters",
                &format!("name part {regex}"),
            ],
        );
    }

    #[test]
    fn openapi_formats() {
        errors(
            "format.uri().validate('x')",
            &[r#"parse "x": invalid URI for request"#],
        );
        errors(
            "format.uri().validate('https://a:b:c/')",
            &[r#"parse "https://a:b:c/": invalid port ":c" after host"#],
        );
        holds("!format.uri().validate('http://example.com').hasValue()");
        holds("!format.uuid().validate('123e4567-e89b-12d3-a456-426614174000').hasValue()");
        holds("!format.uuid().validate('123E4567e89b12d3a456426614174000').hasValue()");
        errors("format.uuid().validate('x')", &["does not match the UUID format"]);
        holds("!format.byte().validate('aGVsbG8=').hasValue()");
        errors("format.byte().validate('aGVsbG8')", &["invalid base64"]);
        errors("format.byte().validate('')", &["invalid base64"]);
        holds("!format.date().validate('2024-02-29').hasValue()");
        errors("format.date().validate('2021-02-30')", &["invalid date"]);
        errors("format.date().validate('2021-1-01')", &["invalid date"]);
        holds("!format.datetime().validate('2021-01-01T00:00:00Z').hasValue()");
        holds("!format.datetime().validate('2021-01-01T23:59:59.5-07:00').hasValue()");
        errors(
            "format.datetime().validate('2021-01-01T00:00:00')",
            &["invalid datetime"],
        );
        errors(
            "format.datetime().validate('2021-01-01t24:00:00z')",
            &["invalid datetime"],
        );
    }

    #[test]
    fn named_formats() {
        check("format.named('nope').hasValue()", false);
        holds("format.named('dns1123Label') == optional.of(format.dns1123Label())");
        holds("format.uuid() != format.uri()");
        check(
            "format.labelValue().validate('ok')",
            Value::Opaque(std::sync::Arc::new(::cel::objects::OptionalValue::none())),
        );
    }
}
