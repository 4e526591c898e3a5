//! A type checker for CEL expressions, as cel-go's `checker` runs when upstream compiles an
//! expression: over the parsed AST (macros expanded), with the variables' declared types, the
//! standard operators and functions and the libraries of the environment (`super`), it finds
//! the errors cel-go reports and words them as cel-go does (`ERROR: <input>:1:6: undefined field
//! 'foo'`, then the source line and a caret under the column).
//!
//! The type system is a modest one: the primitive types, `list(T)`, `map(K, V)`, objects
//! with known fields (from an OpenAPI / structural schema, see [`Type::from_schema`]),
//! `optional_type(T)`, `type(T)`, timestamps and durations, the libraries' opaque types and
//! `dyn`. Wherever the checker cannot tell, the type is `dyn`, which is assignable to and from
//! anything: an expression upstream accepts is never refused. Where this checker is laxer than
//! cel-go: two object types are always assignable to each other (upstream tells them apart by
//! generated names), empty list and map literals and the two-variable comprehensions' variables
//! are typed loosely, struct literals are `dyn`, and a few literal validators (durations,
//! timestamps, regular expressions) do not run.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, OnceLock};

use ::cel::common::ast::{operators, EntryExpr, Expr, IdedExpr, LiteralValue, SourceInfo};
use serde_json::Value as Json;

/// A CEL type as the checker sees it.
#[derive(Clone, Debug, PartialEq)]
#[allow(clippy::enum_variant_names)] // `Type::Type`: the type of a type value, as CEL names it.
pub(crate) enum Type {
    /// Anything: assignable to and from every type.
    Dyn,
    /// The element type of an empty list or map literal: as `dyn`, but a later, more
    /// specific type takes its place (cel-go's type variables).
    Free,
    /// The type of an expression with an error: as `dyn`, so errors do not cascade.
    Error,
    Null,
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    Timestamp,
    Duration,
    List(Box<Type>),
    Map(Box<Type>, Box<Type>),
    Optional(Box<Type>),
    /// The type of a type value (`int`, `type(x)`).
    Type(Box<Type>),
    Object(Arc<Object>),
    /// A library's type: `kubernetes.Quantity`, `net.IP`, ...
    Opaque(&'static str),
    /// A type parameter of an overload (`A`, `B`, ...): only in declarations.
    Param(char),
}

/// An object type: a schema's object with its properties as fields.
#[derive(Debug, PartialEq)]
pub(crate) struct Object {
    pub name: String,
    pub fields: BTreeMap<String, Type>,
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Dyn | Type::Free => f.write_str("dyn"),
            Type::Error => f.write_str("!error!"),
            Type::Null => f.write_str("null"),
            Type::Bool => f.write_str("bool"),
            Type::Int => f.write_str("int"),
            Type::Uint => f.write_str("uint"),
            Type::Double => f.write_str("double"),
            Type::String => f.write_str("string"),
            Type::Bytes => f.write_str("bytes"),
            Type::Timestamp => f.write_str("google.protobuf.Timestamp"),
            Type::Duration => f.write_str("google.protobuf.Duration"),
            Type::List(t) => write!(f, "list({t})"),
            Type::Map(k, v) => write!(f, "map({k}, {v})"),
            Type::Optional(t) => write!(f, "optional_type({t})"),
            Type::Type(t) => write!(f, "type({t})"),
            Type::Object(o) => f.write_str(&o.name),
            Type::Opaque(name) => f.write_str(name),
            Type::Param(p) => write!(f, "{p}"),
        }
    }
}

/// cel-go's `FormatCELType`: as `Display`, but timestamps and durations by their short names.
fn format_type(t: &Type) -> String {
    match t {
        Type::Timestamp => "timestamp".to_owned(),
        Type::Duration => "duration".to_owned(),
        Type::List(e) => format!("list({})", format_type(e)),
        Type::Map(k, v) => format!("map({}, {})", format_type(k), format_type(v)),
        Type::Optional(e) => format!("optional_type({})", format_type(e)),
        Type::Type(e) => format!("type({})", format_type(e)),
        t => t.to_string(),
    }
}

impl Type {
    fn is_dyn(&self) -> bool {
        matches!(self, Type::Dyn | Type::Free | Type::Error)
    }

    fn has_free(&self) -> bool {
        match self {
            Type::Free => true,
            Type::List(t) | Type::Optional(t) | Type::Type(t) => t.has_free(),
            Type::Map(k, v) => k.has_free() || v.has_free(),
            _ => false,
        }
    }

    /// Whether a null may stand for a value of this type (cel-go's legacy nullability).
    fn nullable(&self) -> bool {
        matches!(
            self,
            Type::Null
                | Type::Object(_)
                | Type::Opaque(_)
                | Type::Timestamp
                | Type::Duration
                | Type::Optional(_)
        ) || self.is_dyn()
    }

    /// The object type named `name` with `fields`.
    pub(crate) fn object(name: &str, fields: impl IntoIterator<Item = (String, Type)>) -> Type {
        Type::Object(Arc::new(Object {
            name: name.to_owned(),
            fields: fields.into_iter().collect(),
        }))
    }

    /// The type a value of the (structural) schema `s` has in CEL, as upstream's
    /// `SchemaDeclType` declares it, or `None` if the schema's values are not exposed (a
    /// property of such a schema is not a field of its object). `resource_root`: the root of a
    /// resource (or an embedded one), where `apiVersion`, `kind`, `metadata.name` and
    /// `metadata.generateName` are always fields. `name`: the object's type name.
    pub(crate) fn from_schema(s: &Json, resource_root: bool, name: &str) -> Option<Type> {
        from_schema(s, resource_root, name, 0)
    }
}

fn flag(s: &Json, name: &str) -> bool {
    s.get(name).and_then(Json::as_bool).unwrap_or(false)
}

fn from_schema(s: &Json, resource_root: bool, name: &str, depth: usize) -> Option<Type> {
    if depth > 64 {
        return Some(Type::Dyn);
    }
    if flag(s, "x-kubernetes-int-or-string") {
        return Some(Type::Dyn);
    }
    let kind = s.get("type").and_then(Json::as_str).unwrap_or("");
    let kind = if resource_root && kind.is_empty() {
        "object"
    } else {
        kind
    };
    match kind {
        "array" => {
            let items = s.get("items").filter(|i| i.is_object())?;
            let embedded = flag(items, "x-kubernetes-embedded-resource");
            let t = from_schema(items, embedded, &format!("{name}.@idx"), depth + 1)?;
            Some(Type::List(Box::new(t)))
        }
        "object" => {
            if let Some(add) = s.get("additionalProperties").filter(|a| a.is_object()) {
                let embedded = flag(add, "x-kubernetes-embedded-resource");
                let t = from_schema(add, embedded, &format!("{name}.@elem"), depth + 1)?;
                return Some(Type::Map(Box::new(Type::String), Box::new(t)));
            }
            let mut fields = BTreeMap::new();
            let props = s.get("properties").and_then(Json::as_object);
            for (prop, sub) in props.into_iter().flatten() {
                if resource_root && matches!(prop.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                let embedded = flag(sub, "x-kubernetes-embedded-resource");
                if let Some(t) = from_schema(sub, embedded, &format!("{name}.{prop}"), depth + 1) {
                    // Upstream names a property that is a CEL keyword (or has characters
                    // an identifier may not) by its escaped name; both are fields here.
                    if let Some(escaped) = escape(prop) {
                        fields.insert(escaped, t.clone());
                    }
                    fields.insert(prop.clone(), t);
                }
            }
            if resource_root {
                let prop = |p: &str| props.and_then(|m| m.get(p));
                for p in ["apiVersion", "kind"] {
                    fields.insert(p.to_owned(), Type::String);
                }
                // The root's own metadata when it declares name and generateName as strings
                // (a built-in kind's ObjectMeta), else just those two.
                let meta = prop("metadata").filter(|m| {
                    ["name", "generateName"]
                        .iter()
                        .all(|f| m["properties"][f]["type"] == "string")
                });
                let meta = meta
                    .and_then(|m| from_schema(m, false, &format!("{name}.metadata"), depth + 1))
                    .unwrap_or_else(|| {
                        Type::object(
                            &format!("{name}.metadata"),
                            [
                                ("name".to_owned(), Type::String),
                                ("generateName".to_owned(), Type::String),
                            ],
                        )
                    });
                fields.insert("metadata".to_owned(), meta);
            }
            Some(Type::Object(Arc::new(Object {
                name: name.to_owned(),
                fields,
            })))
        }
        "string" => Some(match s.get("format").and_then(Json::as_str).unwrap_or("") {
            "byte" => Type::Bytes,
            "duration" => Type::Duration,
            "date" | "date-time" => Type::Timestamp,
            "int-or-string" => Type::Dyn,
            _ => Type::String,
        }),
        "boolean" => Some(Type::Bool),
        "number" => Some(Type::Double),
        "integer" => Some(Type::Int),
        _ => None,
    }
}

/// The CEL words upstream escapes a property name of.
const RESERVED: &[&str] = &[
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// Upstream's escaping of a property name, when it differs from the name.
fn escape(name: &str) -> Option<String> {
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    if !name.contains(['_', '.', '-', '/']) {
        return None;
    }
    let mut out = String::new();
    let mut rest = name;
    while let Some(c) = rest.chars().next() {
        if rest.starts_with("__") {
            out.push_str("__underscores__");
            rest = &rest[2..];
            continue;
        }
        match c {
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c => out.push(c),
        }
        rest = &rest[c.len_utf8()..];
    }
    (out != name).then_some(out)
}

/// The property name a CEL field name stands for (the inverse of [`escape`]).
pub(crate) fn unescape(field: &str) -> String {
    if let Some(inner) = field.strip_prefix("__").and_then(|f| f.strip_suffix("__")) {
        if RESERVED.contains(&inner) {
            return inner.to_owned();
        }
    }
    if !field.contains("__") {
        return field.to_owned();
    }
    field
        .replace("__underscores__", "\u{0}")
        .replace("__dot__", ".")
        .replace("__dash__", "-")
        .replace("__slash__", "/")
        .replace("\u{0}", "__")
}

// Declarations: the functions of the environment, each with its overloads written as
// `(arg, ...) result` (a global function) or `receiver.(arg, ...) result` (a member one).

struct Overload {
    member: bool,
    args: Vec<Type>,
    result: Type,
}

const STANDARD: &[(&str, &str)] = &[
    ("!_", "(bool) bool"),
    ("-_", "(int) int | (double) double"),
    ("@not_strictly_false", "(bool) bool"),
    ("_==_", "(A, A) bool"),
    ("_!=_", "(A, A) bool"),
    ("_&&_", "(bool, bool) bool"),
    ("_||_", "(bool, bool) bool"),
    ("_?_:_", "(bool, A, A) A"),
    ("@in", "(A, list(A)) bool | (A, map(A, B)) bool"),
    ("_[_]", "(list(A), int) A | (map(A, B), A) B"),
    (
        "_[?_]",
        "(list(A), int) optional(A) | (map(A, B), A) optional(B) \
         | (optional(list(A)), int) optional(A) | (optional(map(A, B)), A) optional(B)",
    ),
    (
        "_+_",
        "(int, int) int | (uint, uint) uint | (double, double) double | (string, string) string \
         | (bytes, bytes) bytes | (list(A), list(A)) list(A) | (timestamp, duration) timestamp \
         | (duration, timestamp) timestamp | (duration, duration) duration",
    ),
    (
        "_-_",
        "(int, int) int | (uint, uint) uint | (double, double) double \
         | (timestamp, timestamp) duration | (timestamp, duration) timestamp \
         | (duration, duration) duration",
    ),
    (
        "_*_",
        "(int, int) int | (uint, uint) uint | (double, double) double",
    ),
    (
        "_/_",
        "(int, int) int | (uint, uint) uint | (double, double) double",
    ),
    ("_%_", "(int, int) int | (uint, uint) uint"),
    (
        "size",
        "(string) int | (bytes) int | (list(A)) int | (map(A, B)) int | string.() int \
         | bytes.() int | list(A).() int | map(A, B).() int",
    ),
    ("contains", "string.(string) bool"),
    ("startsWith", "string.(string) bool"),
    ("endsWith", "string.(string) bool"),
    ("matches", "(string, string) bool | string.(string) bool"),
    (
        "int",
        "(int) int | (uint) int | (double) int | (string) int | (timestamp) int | (duration) int",
    ),
    ("uint", "(int) uint | (uint) uint | (double) uint | (string) uint"),
    (
        "double",
        "(int) double | (uint) double | (double) double | (string) double",
    ),
    (
        "string",
        "(int) string | (uint) string | (double) string | (bool) string | (string) string \
         | (bytes) string | (timestamp) string | (duration) string | (net.IP) string \
         | (net.CIDR) string",
    ),
    ("bytes", "(bytes) bytes | (string) bytes"),
    ("bool", "(bool) bool | (string) bool"),
    (
        "timestamp",
        "(string) timestamp | (int) timestamp | (timestamp) timestamp",
    ),
    ("duration", "(string) duration | (duration) duration"),
    ("dyn", "(A) dyn"),
    ("type", "(A) type(A)"),
    // Optional types.
    ("optional.of", "(A) optional(A)"),
    ("optional.ofNonZeroValue", "(A) optional(A)"),
    ("optional.none", "() optional(dyn)"),
    ("hasValue", "optional(A).() bool"),
    ("value", "optional(A).() A"),
    ("or", "optional(A).(optional(A)) optional(A)"),
    ("orValue", "optional(A).(A) A"),
    // cel-go's strings extension.
    ("charAt", "string.(int) string"),
    (
        "indexOf",
        "string.(string) int | string.(string, int) int | list(A).(A) int",
    ),
    (
        "lastIndexOf",
        "string.(string) int | string.(string, int) int | list(A).(A) int",
    ),
    ("lowerAscii", "string.() string"),
    ("upperAscii", "string.() string"),
    (
        "replace",
        "string.(string, string) string | string.(string, string, int) string",
    ),
    (
        "split",
        "string.(string) list(string) | string.(string, int) list(string)",
    ),
    ("substring", "string.(int) string | string.(int, int) string"),
    ("trim", "string.() string"),
    ("reverse", "string.() string"),
    ("join", "list(string).() string | list(string).(string) string"),
    ("strings.quote", "(string) string"),
    ("format", "string.(list(dyn)) string"),
    // Sets.
    ("sets.contains", "(list(A), list(A)) bool"),
    ("sets.equivalent", "(list(A), list(A)) bool"),
    ("sets.intersects", "(list(A), list(A)) bool"),
    // Kubernetes' lists (the element types as upstream's overloads list them).
    (
        "isSorted",
        "list(int).() bool | list(uint).() bool | list(double).() bool | list(bool).() bool \
         | list(duration).() bool | list(timestamp).() bool | list(string).() bool \
         | list(bytes).() bool",
    ),
    (
        "sum",
        "list(int).() int | list(uint).() uint | list(double).() double \
         | list(duration).() duration",
    ),
    (
        "min",
        "list(int).() int | list(uint).() uint | list(double).() double | list(bool).() bool \
         | list(duration).() duration | list(timestamp).() timestamp | list(string).() string \
         | list(bytes).() bytes",
    ),
    (
        "max",
        "list(int).() int | list(uint).() uint | list(double).() double | list(bool).() bool \
         | list(duration).() duration | list(timestamp).() timestamp | list(string).() string \
         | list(bytes).() bytes",
    ),
    // Regex.
    ("find", "string.(string) string"),
    (
        "findAll",
        "string.(string) list(string) | string.(string, int) list(string)",
    ),
    // URLs.
    ("url", "(string) kubernetes.URL"),
    ("isURL", "(string) bool"),
    ("getScheme", "kubernetes.URL.() string"),
    ("getHost", "kubernetes.URL.() string"),
    ("getHostname", "kubernetes.URL.() string"),
    ("getPort", "kubernetes.URL.() string"),
    ("getEscapedPath", "kubernetes.URL.() string"),
    ("getQuery", "kubernetes.URL.() map(string, list(string))"),
    // Quantity.
    ("quantity", "(string) kubernetes.Quantity"),
    ("isQuantity", "(string) bool"),
    ("sign", "kubernetes.Quantity.() int"),
    ("isInteger", "kubernetes.Quantity.() bool"),
    ("asInteger", "kubernetes.Quantity.() int"),
    ("asApproximateFloat", "kubernetes.Quantity.() double"),
    (
        "isGreaterThan",
        "kubernetes.Quantity.(kubernetes.Quantity) bool | kubernetes.Semver.(kubernetes.Semver) bool",
    ),
    (
        "isLessThan",
        "kubernetes.Quantity.(kubernetes.Quantity) bool | kubernetes.Semver.(kubernetes.Semver) bool",
    ),
    (
        "compareTo",
        "kubernetes.Quantity.(kubernetes.Quantity) int | kubernetes.Semver.(kubernetes.Semver) int",
    ),
    (
        "add",
        "kubernetes.Quantity.(kubernetes.Quantity) kubernetes.Quantity \
         | kubernetes.Quantity.(int) kubernetes.Quantity",
    ),
    (
        "sub",
        "kubernetes.Quantity.(kubernetes.Quantity) kubernetes.Quantity \
         | kubernetes.Quantity.(int) kubernetes.Quantity",
    ),
    // IP and CIDR.
    ("ip", "(string) net.IP | net.CIDR.() net.IP"),
    ("isIP", "(string) bool"),
    ("ip.isCanonical", "(string) bool"),
    ("family", "net.IP.() int"),
    ("isUnspecified", "net.IP.() bool"),
    ("isLoopback", "net.IP.() bool"),
    ("isLinkLocalMulticast", "net.IP.() bool"),
    ("isLinkLocalUnicast", "net.IP.() bool"),
    ("isGlobalUnicast", "net.IP.() bool"),
    ("cidr", "(string) net.CIDR"),
    ("isCIDR", "(string) bool"),
    ("containsIP", "net.CIDR.(net.IP) bool | net.CIDR.(string) bool"),
    (
        "containsCIDR",
        "net.CIDR.(net.CIDR) bool | net.CIDR.(string) bool",
    ),
    ("masked", "net.CIDR.() net.CIDR"),
    ("prefixLength", "net.CIDR.() int"),
    // Format.
    ("format.named", "(string) optional(kubernetes.NamedFormat)"),
    (
        "validate",
        "kubernetes.NamedFormat.(string) optional(list(string))",
    ),
    // Semver.
    (
        "semver",
        "(string) kubernetes.Semver | (string, bool) kubernetes.Semver",
    ),
    ("isSemver", "(string) bool | (string, bool) bool"),
    ("major", "kubernetes.Semver.() int"),
    ("minor", "kubernetes.Semver.() int"),
    ("patch", "kubernetes.Semver.() int"),
    // The authorizer (admission policies' `authorizer` variable).
    (
        "path",
        "kubernetes.authorization.Authorizer.(string) kubernetes.authorization.PathCheck",
    ),
    (
        "group",
        "kubernetes.authorization.Authorizer.(string) kubernetes.authorization.GroupCheck",
    ),
    (
        "serviceAccount",
        "kubernetes.authorization.Authorizer.(string, string) kubernetes.authorization.Authorizer",
    ),
    (
        "resource",
        "kubernetes.authorization.GroupCheck.(string) kubernetes.authorization.ResourceCheck",
    ),
    (
        "subresource",
        "kubernetes.authorization.ResourceCheck.(string) kubernetes.authorization.ResourceCheck",
    ),
    (
        "namespace",
        "kubernetes.authorization.ResourceCheck.(string) kubernetes.authorization.ResourceCheck",
    ),
    (
        "name",
        "kubernetes.authorization.ResourceCheck.(string) kubernetes.authorization.ResourceCheck",
    ),
    (
        "fieldSelector",
        "kubernetes.authorization.ResourceCheck.(string) kubernetes.authorization.ResourceCheck",
    ),
    (
        "labelSelector",
        "kubernetes.authorization.ResourceCheck.(string) kubernetes.authorization.ResourceCheck",
    ),
    (
        "check",
        "kubernetes.authorization.PathCheck.(string) kubernetes.authorization.Decision \
         | kubernetes.authorization.ResourceCheck.(string) kubernetes.authorization.Decision",
    ),
    ("allowed", "kubernetes.authorization.Decision.() bool"),
    ("reason", "kubernetes.authorization.Decision.() string"),
    ("errored", "kubernetes.authorization.Decision.() bool"),
    ("error", "kubernetes.authorization.Decision.() string"),
    // What the two-variable comprehensions expand to (see `comprehensions`).
    (
        "@pairs",
        "(list(A)) list(list(dyn)) | (map(A, B)) list(list(dyn))",
    ),
    (
        "@mapInsert",
        "(map(A, B), map(A, B)) map(A, B) | (map(A, B), A, B) map(A, B)",
    ),
];

/// The named formats of the format library, each a function `format.<name>()`.
const FORMATS: &[&str] = &[
    "dns1123Label",
    "dns1123Subdomain",
    "dns1035Label",
    "qualifiedName",
    "dns1123LabelPrefix",
    "dns1123SubdomainPrefix",
    "dns1035LabelPrefix",
    "labelValue",
    "uri",
    "uuid",
    "byte",
    "date",
    "datetime",
];

/// The timestamp and duration accessors.
const TIME_ACCESSORS: &[&str] = &[
    "getFullYear",
    "getMonth",
    "getDate",
    "getDayOfMonth",
    "getDayOfWeek",
    "getDayOfYear",
    "getHours",
    "getMinutes",
    "getSeconds",
    "getMilliseconds",
];

/// A type written in a declaration.
fn parse_type(s: &str) -> Type {
    let s = s.trim();
    let (name, params) = match s.find('(') {
        Some(i) => (&s[..i], split_top(&s[i + 1..s.len() - 1])),
        None => (s, Vec::new()),
    };
    let mut params = params.into_iter().map(parse_type);
    let mut next = || Box::new(params.next().unwrap_or(Type::Dyn));
    match name {
        "dyn" => Type::Dyn,
        "null" => Type::Null,
        "bool" => Type::Bool,
        "int" => Type::Int,
        "uint" => Type::Uint,
        "double" => Type::Double,
        "string" => Type::String,
        "bytes" => Type::Bytes,
        "timestamp" => Type::Timestamp,
        "duration" => Type::Duration,
        "list" => Type::List(next()),
        "map" => {
            let k = next();
            Type::Map(k, next())
        }
        "optional" => Type::Optional(next()),
        "type" => Type::Type(next()),
        p if p.len() == 1 => Type::Param(p.chars().next().unwrap_or('A')),
        other => Type::Opaque(opaque_name(other)),
    }
}

/// The library type names as `'static` strings.
fn opaque_name(name: &str) -> &'static str {
    const NAMES: &[&str] = &[
        "kubernetes.URL",
        "kubernetes.Quantity",
        "kubernetes.Semver",
        "kubernetes.NamedFormat",
        "net.IP",
        "net.CIDR",
        "kubernetes.authorization.Authorizer",
        "kubernetes.authorization.PathCheck",
        "kubernetes.authorization.GroupCheck",
        "kubernetes.authorization.ResourceCheck",
        "kubernetes.authorization.Decision",
    ];
    NAMES.iter().find(|n| **n == name).copied().unwrap_or("dyn")
}

/// `s` split at its commas outside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let (mut depth, mut start, mut parts) = (0, 0, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if !s[start..].trim().is_empty() {
        parts.push(&s[start..]);
    }
    parts
}

fn parse_overload(s: &str) -> Overload {
    let s = s.trim();
    let open = s.rfind(".(").map(|i| i + 1).unwrap_or(0);
    let member = open > 0;
    let mut depth = 0;
    let close = s[open..]
        .char_indices()
        .find(|(_, c)| {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ => {}
            }
            depth == 0
        })
        .map_or(s.len() - 1, |(i, _)| i + open);
    let mut args: Vec<Type> = split_top(&s[open + 1..close])
        .into_iter()
        .map(parse_type)
        .collect();
    if member {
        args.insert(0, parse_type(&s[..open - 1]));
    }
    Overload {
        member,
        args,
        result: parse_type(&s[close + 1..]),
    }
}

fn declarations() -> &'static HashMap<String, Vec<Overload>> {
    static DECLS: OnceLock<HashMap<String, Vec<Overload>>> = OnceLock::new();
    DECLS.get_or_init(|| {
        let mut decls: HashMap<String, Vec<Overload>> = HashMap::new();
        for (name, overloads) in STANDARD {
            let list = decls.entry((*name).to_owned()).or_default();
            list.extend(overloads.split('|').map(parse_overload));
        }
        for name in FORMATS {
            decls.insert(
                format!("format.{name}"),
                vec![parse_overload("() kubernetes.NamedFormat")],
            );
        }
        for (i, name) in TIME_ACCESSORS.iter().enumerate() {
            let list = decls.entry((*name).to_owned()).or_default();
            list.push(parse_overload("timestamp.() int"));
            list.push(parse_overload("timestamp.(string) int"));
            // getHours and after are durations' too.
            if i >= 6 {
                list.push(parse_overload("duration.() int"));
            }
        }
        for op in [
            operators::LESS,
            operators::LESS_EQUALS,
            operators::GREATER,
            operators::GREATER_EQUALS,
        ] {
            let mut list = Vec::new();
            for t in ["bool", "string", "bytes", "timestamp", "duration"] {
                list.push(parse_overload(&format!("({t}, {t}) bool")));
            }
            // Numbers compare across their types (upstream's CrossTypeNumericComparisons).
            for a in ["int", "uint", "double"] {
                for b in ["int", "uint", "double"] {
                    list.push(parse_overload(&format!("({a}, {b}) bool")));
                }
            }
            decls.insert(op.to_owned(), list);
        }
        decls
    })
}

/// The bindings of an overload's type parameters.
#[derive(Default)]
struct Bindings(HashMap<char, Type>);

impl Bindings {
    fn apply(&self, t: &Type) -> Type {
        match t {
            Type::Param(p) => match self.0.get(p) {
                Some(Type::Free) | None => Type::Dyn,
                Some(t) => t.clone(),
            },
            Type::List(e) => Type::List(Box::new(self.apply(e))),
            Type::Map(k, v) => Type::Map(Box::new(self.apply(k)), Box::new(self.apply(v))),
            Type::Optional(e) => Type::Optional(Box::new(self.apply(e))),
            Type::Type(e) => Type::Type(Box::new(self.apply(e))),
            t => t.clone(),
        }
    }
}

/// Whether a value of type `from` may be passed where `to` is declared (binding `to`'s type
/// parameters).
fn assignable(to: &Type, from: &Type, b: &mut Bindings) -> bool {
    match (to, from) {
        (Type::Param(p), _) => match b.0.get(p).cloned() {
            None => {
                b.0.insert(*p, from.clone());
                true
            }
            Some(bound) => {
                if !assignable(&bound, from, &mut Bindings::default()) {
                    return false;
                }
                // A more specific type takes the place of an empty literal's or a null.
                if (bound.has_free() && !from.has_free()) || (bound == Type::Null && from != &Type::Null) {
                    b.0.insert(*p, from.clone());
                }
                true
            }
        },
        (t, f) if t.is_dyn() || f.is_dyn() => true,
        (Type::Null, f) => f.nullable(),
        (t, Type::Null) => t.nullable(),
        (Type::List(t), Type::List(f)) | (Type::Optional(t), Type::Optional(f)) => assignable(t, f, b),
        (Type::Map(tk, tv), Type::Map(fk, fv)) => assignable(tk, fk, b) && assignable(tv, fv, b),
        (Type::Type(_), Type::Type(_)) | (Type::Object(_), Type::Object(_)) => true,
        (t, f) => t == f,
    }
}

/// The more general of two types an aggregate literal's elements have.
fn join(a: &Type, b: &Type) -> Type {
    match (a, b) {
        (Type::Null, t) | (t, Type::Null) => t.clone(),
        (a, b) if a == b => a.clone(),
        (a, b) if a.has_free() && !b.has_free() => b.clone(),
        (a, b) if b.has_free() && !a.has_free() => a.clone(),
        _ => Type::Dyn,
    }
}

/// A variable of an expression and its type.
pub(crate) type Var<'a> = (&'a str, Type);

/// What checking an expression found.
pub(crate) struct Checked {
    /// The type of the expression.
    pub result: Type,
    /// Whether it refers to the variable `oldSelf`.
    pub uses_old_self: bool,
    /// The parsed expression (macros expanded) and the type of each of its nodes, by id: what
    /// the cost estimator (`super::cost`) reads.
    pub ast: Option<IdedExpr>,
    pub types: HashMap<u64, Type>,
}

/// Type-checks `source` with `vars` declared. A source that does not parse is `dyn` here
/// (the parse error is the compiler's to report). Fails with cel-go's display of the issues.
pub(crate) fn check(source: &str, vars: &[Var<'_>]) -> Result<Checked, String> {
    let Ok((ast, info)) = super::env().parser().parse_with_source_info(source) else {
        return Ok(Checked {
            result: Type::Dyn,
            uses_old_self: false,
            ast: None,
            types: HashMap::new(),
        });
    };
    let mut c = Checker {
        info: &info,
        scopes: vars.iter().map(|(n, t)| ((*n).to_owned(), t.clone())).collect(),
        globals: vars.len(),
        errors: Vec::new(),
        uses_old_self: false,
        types: HashMap::new(),
    };
    let result = c.check(&ast);
    if c.errors.is_empty() {
        return Ok(Checked {
            result,
            uses_old_self: c.uses_old_self,
            types: c.types,
            ast: Some(ast),
        });
    }
    Err(c.display(source))
}

struct Checker<'i> {
    info: &'i SourceInfo,
    /// Declared variables, then the comprehensions' (innermost last).
    scopes: Vec<(String, Type)>,
    /// How many of `scopes` are the declared variables.
    globals: usize,
    /// Each error's offset in the source and message.
    errors: Vec<(usize, String)>,
    uses_old_self: bool,
    /// Each node's type, by id.
    types: HashMap<u64, Type>,
}

impl Checker<'_> {
    fn error(&mut self, id: u64, message: String) {
        let offset = self.info.offset_for(id).map_or(0, |(start, _)| start as usize);
        self.errors.push((offset, message));
    }

    /// cel-go's `Errors.ToDisplayString`: each error by position, with its source line and a
    /// caret under its column.
    fn display(&self, source: &str) -> String {
        let mut located: Vec<(usize, usize, &str, &str)> = self
            .errors
            .iter()
            .map(|(offset, message)| {
                // Offsets count characters; lines and columns too.
                let (mut line, mut col) = (1, 0);
                for (i, c) in source.chars().enumerate() {
                    if i == *offset {
                        break;
                    }
                    if c == '\n' {
                        line += 1;
                        col = 0;
                    } else {
                        col += 1;
                    }
                }
                let text = source.split('\n').nth(line - 1).unwrap_or("");
                (line, col, message.as_str(), text)
            })
            .collect();
        located.sort_by_key(|(line, col, _, _)| (*line, *col));
        let shown: Vec<String> = located
            .into_iter()
            .map(|(line, col, message, text)| {
                let text = text.replace('\t', " ");
                let mut caret = String::new();
                let mut chars = text.chars();
                for _ in 0..col {
                    match chars.next() {
                        Some(c) if c.len_utf8() > 1 => caret.push('\u{ff0e}'),
                        Some(_) => caret.push('.'),
                        None => break,
                    }
                }
                match chars.next() {
                    Some(c) if c.len_utf8() > 1 => caret.push('\u{ff3e}'),
                    _ => caret.push('^'),
                }
                format!(
                    "ERROR: <input>:{line}:{}: {message}\n | {text}\n | {caret}",
                    col + 1
                )
            })
            .collect();
        shown.join("\n")
    }

    fn lookup(&mut self, name: &str) -> Option<Type> {
        let i = self.scopes.iter().rposition(|(n, _)| n == name)?;
        if name == "oldSelf" && i < self.globals {
            self.uses_old_self = true;
        }
        Some(self.scopes[i].1.clone())
    }

    fn check(&mut self, e: &IdedExpr) -> Type {
        let t = self.check_node(e);
        self.types.insert(e.id, t.clone());
        t
    }

    fn check_node(&mut self, e: &IdedExpr) -> Type {
        match &e.expr {
            Expr::Unspecified => Type::Dyn,
            Expr::Literal(l) => match l {
                LiteralValue::Boolean(_) => Type::Bool,
                LiteralValue::Bytes(_) => Type::Bytes,
                LiteralValue::Double(_) => Type::Double,
                LiteralValue::Int(_) => Type::Int,
                LiteralValue::Null => Type::Null,
                LiteralValue::String(_) => Type::String,
                LiteralValue::UInt(_) => Type::Uint,
            },
            Expr::Ident(name) => self.ident(e.id, name),
            Expr::Select(sel) => {
                // A variable of a qualified name (`authorizer.requestResource`).
                if !sel.test {
                    if let Some(t) = e
                        .expr
                        .qualified_name_segments_pub()
                        .filter(|n| n.contains('.'))
                        .and_then(|n| self.lookup(&n))
                    {
                        return t;
                    }
                }
                let operand = self.check(&sel.operand);
                let t = self.select(e.id, &operand, &sel.field, false);
                if sel.test {
                    Type::Bool
                } else {
                    t
                }
            }
            Expr::Call(call) => self.call(e, call),
            Expr::List(list) => {
                let mut elem: Option<Type> = None;
                for (i, item) in list.elements.iter().enumerate() {
                    let mut t = self.check(item);
                    if list.optional_indices.contains(&i) {
                        t = match t {
                            Type::Optional(inner) => *inner,
                            t if t.is_dyn() => t,
                            t => {
                                self.error(
                                    item.id,
                                    format!(
                                        "expected type '{}' but found '{}'",
                                        format_type(&Type::Optional(Box::new(t.clone()))),
                                        format_type(&t)
                                    ),
                                );
                                t
                            }
                        };
                    }
                    elem = Some(self.join(item.id, elem, t));
                }
                Type::List(Box::new(elem.unwrap_or(Type::Free)))
            }
            Expr::Map(map) => {
                let (mut key, mut value): (Option<Type>, Option<Type>) = (None, None);
                for entry in &map.entries {
                    if let EntryExpr::MapEntry(m) = &entry.expr {
                        let k = self.check(&m.key);
                        key = Some(self.join(m.key.id, key, k));
                        let mut v = self.check(&m.value);
                        if m.optional {
                            if let Type::Optional(inner) = v {
                                v = *inner;
                            }
                        }
                        value = Some(self.join(m.value.id, value, v));
                    }
                }
                Type::Map(
                    Box::new(key.unwrap_or(Type::Free)),
                    Box::new(value.unwrap_or(Type::Free)),
                )
            }
            Expr::Struct(s) => {
                for entry in &s.entries {
                    if let EntryExpr::StructField(f) = &entry.expr {
                        self.check(&f.value);
                    }
                }
                Type::Dyn
            }
            Expr::Comprehension(c) => {
                let range = self.check(&c.iter_range);
                let (first, second) = match &range {
                    Type::List(t) if c.iter_var2.is_some() => (Type::Int, (**t).clone()),
                    Type::List(t) => ((**t).clone(), Type::Dyn),
                    Type::Map(k, v) => ((**k).clone(), (**v).clone()),
                    t if t.is_dyn() => (Type::Dyn, Type::Dyn),
                    t => {
                        self.error(
                            c.iter_range.id,
                            format!(
                                "expression of type '{}' cannot be range of a comprehension (must be list, map, or dynamic)",
                                format_type(t)
                            ),
                        );
                        (Type::Dyn, Type::Dyn)
                    }
                };
                let accu = self.check(&c.accu_init);
                self.scopes.push((c.accu_var.clone(), accu.clone()));
                self.scopes.push((c.iter_var.clone(), first));
                if let Some(v2) = &c.iter_var2 {
                    self.scopes.push((v2.clone(), second));
                }
                let cond = self.check(&c.loop_cond);
                self.expect(c.loop_cond.id, &Type::Bool, &cond);
                let step = self.check(&c.loop_step);
                self.expect(c.loop_step.id, &accu, &step);
                self.scopes
                    .truncate(self.scopes.len() - 1 - usize::from(c.iter_var2.is_some()));
                // An empty literal's accumulator takes the type its step builds.
                if accu.has_free() && assignable(&accu, &step, &mut Bindings::default()) {
                    if let Some(last) = self.scopes.last_mut() {
                        last.1 = step;
                    }
                }
                let result = self.check(&c.result);
                self.scopes.pop();
                result
            }
        }
    }

    /// cel-go's `assertType`.
    fn expect(&mut self, id: u64, want: &Type, got: &Type) {
        if !assignable(want, got, &mut Bindings::default()) {
            self.error(
                id,
                format!(
                    "expected type '{}' but found '{}'",
                    format_type(want),
                    format_type(got)
                ),
            );
        }
    }

    /// cel-go's `joinTypes` of an aggregate literal's elements (all of one type, as upstream's
    /// `HomogeneousAggregateLiterals` wants).
    fn join(&mut self, id: u64, previous: Option<Type>, current: Type) -> Type {
        let Some(previous) = previous else {
            return current;
        };
        if assignable(&previous, &current, &mut Bindings::default()) {
            return join(&previous, &current);
        }
        self.error(
            id,
            format!(
                "expected type '{}' but found '{}'",
                format_type(&previous),
                format_type(&current)
            ),
        );
        Type::Error
    }

    fn ident(&mut self, id: u64, name: &str) -> Type {
        if let Some(t) = self.lookup(name) {
            return t;
        }
        let named = match name {
            "int" => Type::Int,
            "uint" => Type::Uint,
            "double" => Type::Double,
            "bool" => Type::Bool,
            "string" => Type::String,
            "bytes" => Type::Bytes,
            "null_type" => Type::Null,
            "list" => Type::List(Box::new(Type::Dyn)),
            "map" => Type::Map(Box::new(Type::Dyn), Box::new(Type::Dyn)),
            "type" | "dyn" | "optional_type" => Type::Dyn,
            "google.protobuf.Timestamp" => Type::Timestamp,
            "google.protobuf.Duration" => Type::Duration,
            _ => {
                self.error(id, format!("undeclared reference to '{name}' (in container '')"));
                return Type::Error;
            }
        };
        Type::Type(Box::new(named))
    }

    /// The type of `field` selected from a value of type `operand` (`optional`: with `.?`).
    fn select(&mut self, id: u64, operand: &Type, field: &str, optional: bool) -> Type {
        let (target, was_optional) = match operand {
            Type::Optional(t) => ((**t).clone(), true),
            t => (t.clone(), false),
        };
        let t = match &target {
            Type::Map(_, v) => (**v).clone(),
            Type::Object(o) => match o.fields.get(field) {
                Some(t) => t.clone(),
                None => {
                    self.error(id, format!("undefined field '{field}'"));
                    Type::Error
                }
            },
            t if t.is_dyn() => Type::Dyn,
            t => {
                self.error(
                    id,
                    format!("type '{}' does not support field selection", format_type(t)),
                );
                Type::Dyn
            }
        };
        if optional || was_optional {
            Type::Optional(Box::new(t))
        } else {
            t
        }
    }

    fn call(&mut self, e: &IdedExpr, call: &::cel::common::ast::CallExpr) -> Type {
        let name = call.func_name.as_str();
        if name == operators::OPT_SELECT && call.args.len() == 2 && call.target.is_none() {
            let operand = self.check(&call.args[0]);
            return match &call.args[1].expr {
                Expr::Literal(LiteralValue::String(field)) => {
                    let field = field.inner().to_owned();
                    self.select(e.id, &operand, &field, true)
                }
                _ => Type::Dyn,
            };
        }
        // cel-go's `optMap` and `optFlatMap` are macros (their first argument names a
        // variable) the parser does not expand: nothing to tell of them.
        if matches!(name, "optMap" | "optFlatMap") && call.target.is_some() && call.args.len() == 2 {
            return Type::Dyn;
        }
        let args: Vec<Type> = call.args.iter().map(|a| self.check(a)).collect();
        let decls = declarations();
        let Some(target) = &call.target else {
            let Some(overloads) = decls.get(name) else {
                self.error(
                    e.id,
                    format!("undeclared reference to '{name}' (in container '')"),
                );
                return Type::Error;
            };
            if name == operators::LOGICAL_AND || name == operators::LOGICAL_OR {
                for (arg, t) in call.args.iter().zip(&args) {
                    self.expect(arg.id, &Type::Bool, t);
                }
                return Type::Bool;
            }
            return self.resolve(e.id, name, overloads, args, false);
        };
        // `strings.quote(...)`, `format.dns1123Label()`: a function of a qualified name.
        if let Some(prefix) = target.expr.qualified_name_segments_pub() {
            let qualified = format!("{prefix}.{name}");
            if self.lookup(&prefix).is_none() {
                if let Some(overloads) = decls.get(&qualified) {
                    return self.resolve(e.id, &qualified, overloads, args, false);
                }
            }
        }
        let target_type = self.check(target);
        let Some(overloads) = decls.get(name) else {
            self.error(
                e.id,
                format!("undeclared reference to '{name}' (in container '')"),
            );
            return Type::Error;
        };
        let mut all = vec![target_type];
        all.extend(args);
        self.resolve(e.id, name, overloads, all, true)
    }

    /// cel-go's overload resolution: the result of the overloads the arguments fit (`dyn`
    /// when they differ), or an error if none does.
    fn resolve(
        &mut self,
        id: u64,
        name: &str,
        overloads: &[Overload],
        args: Vec<Type>,
        member: bool,
    ) -> Type {
        let mut result: Option<Type> = None;
        for o in overloads
            .iter()
            .filter(|o| o.member == member && o.args.len() == args.len())
        {
            let mut b = Bindings::default();
            if o.args
                .iter()
                .zip(&args)
                .all(|(to, from)| assignable(to, from, &mut b))
            {
                let r = b.apply(&o.result);
                result = Some(match result {
                    None => r,
                    Some(prev) if prev.is_dyn() || prev == r => prev,
                    Some(_) => Type::Dyn,
                });
            }
        }
        if let Some(r) = result {
            return r;
        }
        let shown: Vec<String> = args.iter().map(format_type).collect();
        let signature = if member {
            format!("{}.({})", shown[0], shown[1..].join(", "))
        } else {
            format!("({})", shown.join(", "))
        };
        self.error(
            id,
            format!("found no matching overload for '{name}' applied to '{signature}'"),
        );
        Type::Error
    }
}

/// `a.b.c` as the qualified name `"a.b"`... spelled by an expression of identifiers and
/// field selections.
trait QualifiedName {
    fn qualified_name_segments_pub(&self) -> Option<String>;
}

impl QualifiedName for Expr {
    fn qualified_name_segments_pub(&self) -> Option<String> {
        match self {
            Expr::Ident(name) => Some(name.clone()),
            Expr::Select(s) if !s.test => {
                let prefix = s.operand.expr.qualified_name_segments_pub()?;
                Some(format!("{prefix}.{}", s.field))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec_type() -> Type {
        let schema = json!({"type": "object", "properties": {
            "replicas": {"type": "integer"},
            "name": {"type": "string"},
            "ratio": {"type": "number"},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "ports": {"type": "array", "items": {"type": "object", "properties": {
                "port": {"type": "integer"}, "protocol": {"type": "string"}}}},
            "size": {"x-kubernetes-int-or-string": true},
            "anything": {"x-kubernetes-preserve-unknown-fields": true},
            "open": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "created": {"type": "string", "format": "date-time"},
            "timeout": {"type": "string", "format": "duration"},
            "namespace": {"type": "string"}}});
        Type::from_schema(&schema, false, "spec").unwrap()
    }

    fn errors(source: &str) -> String {
        match check(source, &[("self", spec_type())]) {
            Ok(c) => panic!("{source} type-checks as {}", c.result),
            Err(e) => e,
        }
    }

    fn result(source: &str) -> Type {
        match check(source, &[("self", spec_type())]) {
            Ok(c) => c.result,
            Err(e) => panic!("{source}: {e}"),
        }
    }

    #[test]
    fn fields_of_objects_are_known() {
        assert_eq!(
            errors("self.foo > 0"),
            "ERROR: <input>:1:5: undefined field 'foo'\n | self.foo > 0\n | ....^"
        );
        assert_eq!(
            errors("has(self.foo)"),
            "ERROR: <input>:1:4: undefined field 'foo'\n | has(self.foo)\n | ...^"
        );
        assert_eq!(
            errors("self.ports.all(p, p.prot == 'TCP')"),
            "ERROR: <input>:1:20: undefined field 'prot'\n | self.ports.all(p, p.prot == 'TCP')\n | ...................^"
        );
        // Fields the schema does not expose are not fields.
        assert_eq!(
            errors("has(self.anything)"),
            "ERROR: <input>:1:4: undefined field 'anything'\n | has(self.anything)\n | ...^"
        );
        assert!(errors("self.open.x == 1").contains("undefined field 'x'"));
        // Maps select any key; int-or-string is dyn.
        assert_eq!(result("self.labels.foo == 'a' && self.size == 1"), Type::Bool);
        assert_eq!(result("self.__namespace__ + self.namespace"), Type::String);
        assert_eq!(
            result("self.ports.map(p, p.port)"),
            Type::List(Box::new(Type::Int))
        );
        assert_eq!(
            result("self.ports.filter(p, p.port > 1)[0].protocol"),
            Type::String
        );
    }

    #[test]
    fn operators_need_an_overload() {
        assert_eq!(
            errors("self.name + 1 == 'a'"),
            "ERROR: <input>:1:11: found no matching overload for '_+_' applied to '(string, int)'\n | self.name + 1 == 'a'\n | ..........^"
        );
        assert!(errors("self.name == null")
            .contains("found no matching overload for '_==_' applied to '(string, null)'"));
        assert!(errors("self.replicas == 1.0").contains("'_==_' applied to '(int, double)'"));
        assert_eq!(result("self.replicas < 1.5 && self.ratio > 1"), Type::Bool);
        assert!(errors("self.ports['a'] == 1")
            .contains("found no matching overload for '_[_]' applied to '(list(spec.ports.@idx), string)'"));
        assert!(errors("['a', 'b'].sum() == 'c'")
            .contains("found no matching overload for 'sum' applied to 'list(string).()'"));
        assert!(errors("self.replicas && true").contains("expected type 'bool' but found 'int'"));
        assert_eq!(
            errors("[1, 'a', false].filter(x, string(x) == 'a')"),
            "ERROR: <input>:1:5: expected type 'int' but found 'string'\n | [1, 'a', false].filter(x, string(x) == 'a')\n | ....^"
        );
        assert_eq!(
            result("self.created + self.timeout < timestamp('2024-01-01T00:00:00Z')"),
            Type::Bool
        );
    }

    #[test]
    fn functions_must_be_declared() {
        assert_eq!(
            errors("foo(self.name)"),
            "ERROR: <input>:1:4: undeclared reference to 'foo' (in container '')\n | foo(self.name)\n | ...^"
        );
        assert!(errors("self.name.bar()").contains("undeclared reference to 'bar' (in container '')"));
        assert!(errors("nothing > 1")
            .contains("ERROR: <input>:1:1: undeclared reference to 'nothing' (in container '')"));
        assert_eq!(
            result("quantity(self.name).isGreaterThan(quantity('1'))"),
            Type::Bool
        );
        assert_eq!(result("cidr('10.0.0.0/8').containsIP(self.name)"), Type::Bool);
        assert_eq!(
            result("url(self.name).getQuery()"),
            parse_type("map(string, list(string))")
        );
        assert_eq!(
            result("format.dns1123Label().validate(self.name).hasValue()"),
            Type::Bool
        );
        assert_eq!(
            result("strings.quote(self.name).split(',').join('-')"),
            Type::String
        );
        assert_eq!(result("sets.contains([1], [self.replicas])"), Type::Bool);
        assert_eq!(result("self.?labels.?x.orValue('') == ''"), Type::Bool);
        assert_eq!(result("self.ports.all(i, p, p.port > i)"), Type::Bool);
        assert_eq!(result("type(self.size) == string"), Type::Bool);
        assert_eq!(
            result("self.?name.optMap(n, n + 'x').orValue('') == ''"),
            Type::Bool
        );
        assert!(errors("self.name.size() + 'a' == 1").contains("'(int, string)'"));
    }

    #[test]
    fn schemas_are_typed_as_upstream_declares_them() {
        let root = json!({"type": "object", "properties": {"spec": {"type": "object"}}});
        let t = Type::from_schema(&root, true, "root").unwrap();
        let check_root = |s: &str| check(s, &[("self", t.clone())]).map(|c| c.result);
        assert_eq!(
            check_root("self.metadata.name + self.kind + self.apiVersion"),
            Ok(Type::String)
        );
        assert!(check_root("has(self.metadata.namespace)")
            .unwrap_err()
            .contains("undefined field 'namespace'"));
        assert_eq!(escape("a-b.c"), Some("a__dash__b__dot__c".to_owned()));
        assert_eq!(escape("x__y"), Some("x__underscores__y".to_owned()));
        assert_eq!(escape("plain"), None);
    }

    #[test]
    fn old_self_is_noticed() {
        let c = check(
            "self.replicas >= oldSelf.replicas",
            &[("self", spec_type()), ("oldSelf", spec_type())],
        );
        assert!(c.unwrap().uses_old_self);
        let c = check(
            "[1].all(oldSelf, oldSelf > 0)",
            &[("self", spec_type()), ("oldSelf", spec_type())],
        );
        assert!(!c.unwrap().uses_old_self);
    }
}
