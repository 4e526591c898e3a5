//! CEL for the API server (ValidatingAdmissionPolicies, webhook matchConditions, CRD
//! `x-kubernetes-validations`): the `cel` crate's parser and interpreter, with Kubernetes
//! objects as variables and the libraries of upstream's base environment
//! (`k8s.io/apiserver/pkg/cel/environment/base.go`, as of 1.33) on top of the standard one:
//!
//! - cel-go's extensions: strings (`charAt`, `indexOf`, `split`, `format`, `strings.quote`, ...,
//!   the `cel` crate's), sets (`sets.contains`, ...), optional types (the crate's), two-variable
//!   comprehensions (`all(k, v, ...)`, `transformMap`, ...);
//! - Kubernetes' own: lists (`sum`, `min`, `isSorted`, ...), regex (`find`, `findAll`), urls,
//!   quantity, ip and cidr, format, semver.
//!
//! - authz (`authorizer`, see [`authz`]).
//!
//! Timestamps and durations are the crate's (its `chrono` feature). Compiling does not
//! type-check; `check` does, where upstream does it: CRD rules when a CRD is written, admission
//! policies' expressions for their status. Costs are estimated and limited as upstream limits
//! them ([`cost`]).
//!
//! The environment is built once, and every expression is compiled (macros expanded) and
//! evaluated with it. The libraries' own types (`kubernetes.Quantity`, `net.IP`, `net.CIDR`,
//! `kubernetes.URL`, `kubernetes.Semver`, `kubernetes.NamedFormat`) are opaque values: they
//! pass through `Value` unchanged, so a policy's variable may hold one.

pub(crate) mod authz;
pub(crate) mod check;
mod comprehensions;
pub(crate) mod cost;
mod format;
mod lists;
pub(crate) mod mutation;
mod net;
mod quantity;
mod regex;
mod semver;
mod sets;
mod urls;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use ::cel::common::types::{CelBool, CelDouble, CelInt, CelList, CelString};
use ::cel::common::value::{CowVal, Val};
use ::cel::objects::Opaque;
pub(crate) use ::cel::Value;
use ::cel::{Context, DeclarationError, Env, ExecutionError, Program};

/// The environment every expression is compiled and evaluated with.
fn env() -> &'static Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| Arc::new(kubernetes_env().expect("the CEL libraries declare each overload once")))
}

/// The standard environment with upstream's libraries.
fn kubernetes_env() -> Result<Env, DeclarationError> {
    // `Env::stdlib` supports optional values (`a.?b`, `optional.of`, ...), as upstream's
    // `cel.OptionalTypes()`.
    let mut env = Env::stdlib();
    env.add_extension(::cel::extensions::strings)?;
    env.add_extension(sets::library)?;
    env.add_extension(comprehensions::library)?;
    env.add_extension(lists::library)?;
    env.add_extension(regex::library)?;
    env.add_extension(urls::library)?;
    env.add_extension(quantity::library)?;
    env.add_extension(net::library)?;
    env.add_extension(format::library)?;
    env.add_extension(semver::library)?;
    env.add_extension(authz::library)?;
    Ok(env)
}

/// A compiled expression with its source (for messages).
pub(crate) struct Expr {
    pub source: String,
    program: Result<Program, String>,
    /// The environment it was compiled in and evaluates in (the shared one, but for
    /// mutations: see [`mutation`]).
    env: Arc<Env>,
    /// The expression checked with the variables of its first evaluation as `dyn`: what its
    /// cost at run time is bounded by (see [`cost`]); `None` if it does not check.
    checked: OnceLock<Option<check::Checked>>,
}

/// Why an expression was not run (upstream's words).
#[derive(Debug, PartialEq)]
pub(crate) enum OverBudget {
    /// Over the per-call limit.
    CallLimit,
    /// Over what is left of the budget of the evaluations it is one of.
    Budget,
}

impl std::fmt::Display for OverBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OverBudget::CallLimit => "operation cancelled: actual cost limit exceeded",
            OverBudget::Budget => {
                "validation failed due to running out of cost budget, no further validation rules will be run"
            }
        })
    }
}

/// cel-go's parser limits (`maxRecursionDepth`, `expressionSizeCodePointLimit`).
const MAX_RECURSION_DEPTH: usize = 250;
const MAX_CODE_POINTS: usize = 100_000;

/// Why `source` is beyond what cel-go's parser takes, if it is: longer than its code point
/// limit, or nesting deeper than its recursion limit. The depth counted is brackets plus the
/// operators chained inside each (an AST level each), outside string literals: an estimate
/// from above of cel-go's count. Found by the object fuzzer: a policy whose expression
/// nested 40 braces took the parser over 256 KiB of stack; a few thousand would have
/// overflowed the server's.
fn too_deep(source: &str) -> Option<String> {
    let size = source.chars().count();
    if size > MAX_CODE_POINTS {
        return Some(format!(
            "expression code point size exceeds limit: size: {size}, limit {MAX_CODE_POINTS}"
        ));
    }
    // Operators chained at each open bracket level.
    let mut levels: Vec<usize> = vec![0];
    let mut quote: Option<char> = None;
    let mut chars = source.chars().peekable();
    while let Some(c) = chars.next() {
        if let Some(q) = quote {
            match c {
                '\\' => {
                    chars.next();
                }
                c if c == q => quote = None,
                _ => {}
            }
            continue;
        }
        match c {
            '"' | '\'' => quote = Some(c),
            '(' | '[' | '{' => levels.push(0),
            ')' | ']' | '}' if levels.len() > 1 => {
                levels.pop();
            }
            // One level per operator (`==`, `&&`, `<=` … once).
            '+' | '-' | '*' | '/' | '%' | '!' | '<' | '>' | '=' | '&' | '|' | '?' | '.' => {
                if matches!(chars.peek(), Some('=' | '&' | '|')) && "=!<>&|".contains(c) {
                    chars.next();
                }
                if let Some(n) = levels.last_mut() {
                    *n += 1;
                }
            }
            _ => {}
        }
        let depth = levels.len() + levels.iter().sum::<usize>();
        if depth > MAX_RECURSION_DEPTH {
            return Some("max recursion depth exceeded".to_owned());
        }
    }
    None
}

/// Run `f` (the cel crate's parser, our checker) on a thread with a large stack: the
/// ANTLR-generated parser takes several KiB of stack per nesting level, so the depth cel-go
/// accepts does not fit a tokio worker's 2 MiB.
pub(crate) fn on_parser_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("cel-parser".into())
            .stack_size(64 << 20)
            .spawn_scoped(s, f)
            .expect("a thread for the CEL parser")
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

impl Expr {
    pub fn compile(source: &str) -> Self {
        Self::compile_in(Arc::clone(env()), source)
    }

    /// Compile in an environment of its own.
    fn compile_in(env: Arc<Env>, source: &str) -> Self {
        if let Some(why) = too_deep(source) {
            return Self::failed(source, why);
        }
        let program = on_parser_stack(|| env.compile(source).map_err(|e| e.to_string()));
        Self {
            source: source.to_owned(),
            program,
            env,
            checked: OnceLock::new(),
        }
    }

    /// An expression that could not be compiled, for `why`.
    fn failed(source: &str, why: String) -> Self {
        Self {
            source: source.to_owned(),
            program: Err(why),
            env: Arc::clone(env()),
            checked: OnceLock::new(),
        }
    }

    /// What evaluating with `vars` bound costs at most, in cel-go's units ([`cost`]).
    pub fn cost(&self, vars: &[(&str, Value)]) -> u64 {
        let checked = self.checked.get_or_init(|| {
            let decls: Vec<check::Var<'_>> = vars.iter().map(|(n, _)| (*n, check::Type::Dyn)).collect();
            on_parser_stack(|| check::check(&self.source, &decls).ok())
        });
        checked.as_ref().map_or(0, |c| cost::runtime_cost(c, vars))
    }

    /// Charge the cost of evaluating with `vars` to `left` (what is left of a budget), if it
    /// is within the per-call limit and what is left; the expression must not run otherwise.
    pub fn charge(&self, vars: &[(&str, Value)], left: &mut u64) -> Result<(), OverBudget> {
        let cost = self.cost(vars);
        if cost > cost::PER_CALL_LIMIT {
            return Err(OverBudget::CallLimit);
        }
        *left = left.checked_sub(cost).ok_or(OverBudget::Budget)?;
        Ok(())
    }

    /// Why the expression does not compile, if it does not.
    pub fn compile_error(&self) -> Option<&str> {
        self.program.as_ref().err().map(String::as_str)
    }

    /// Evaluate with `vars` (name, value) bound.
    pub fn eval(&self, vars: &[(&str, Value)]) -> Result<Value, String> {
        let program = self.program.as_ref().map_err(Clone::clone)?;
        let mut ctx = Context::with_env(Arc::clone(&self.env));
        for (name, v) in vars {
            ctx.add_variable_from_value(*name, v.clone());
        }
        program.execute(&ctx).map_err(|e| match e {
            // A library's error is its message alone, as cel-go reports it.
            ExecutionError::FunctionError { message, .. } => message,
            e => e.to_string(),
        })
    }

    /// Evaluate to a boolean (an error if the result is of another type).
    pub fn eval_bool(&self, vars: &[(&str, Value)]) -> Result<bool, String> {
        match self.eval(vars)? {
            Value::Bool(b) => Ok(b),
            other => Err(format!(
                "expression '{}' resulted in a non-bool value: {other:?}",
                self.source
            )),
        }
    }
}

/// A JSON value as CEL sees it: integers as int (or uint beyond int's range), other numbers
/// as double, objects as maps with string keys, null as null.
pub(crate) fn value(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::Int(i),
            (None, Some(u)) => Value::UInt(u),
            _ => Value::Float(n.as_f64().unwrap_or(0.0)),
        },
        serde_json::Value::String(s) => Value::String(Arc::new(s.clone())),
        serde_json::Value::Array(items) => Value::List(Arc::new(items.iter().map(value).collect())),
        serde_json::Value::Object(m) => {
            let map: HashMap<::cel::objects::Key, Value> = m
                .iter()
                .map(|(k, v)| (::cel::objects::Key::String(Arc::new(k.clone())), value(v)))
                .collect();
            Value::Map(::cel::objects::Map { map: Arc::new(map) })
        }
    }
}

/// A JSON value as CEL sees it under its structural schema (upstream's `UnstructuredToVal`):
/// strings of format `date-time` or `date` are timestamps, `duration` durations, `byte` bytes;
/// the rest as [`value`]. A string that does not parse stays a string (validation reports it).
pub(crate) fn typed_value(schema: &serde_json::Value, v: &serde_json::Value) -> Value {
    use base64::Engine;
    match v {
        serde_json::Value::String(s) => {
            let converted = match schema.get("format").and_then(serde_json::Value::as_str) {
                Some("date-time") => chrono::DateTime::parse_from_rfc3339(s).ok().map(Value::Timestamp),
                Some("date") => chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
                    .ok()
                    .and_then(|d| {
                        let midnight = d.and_hms_opt(0, 0, 0)?;
                        Some(Value::Timestamp(midnight.and_utc().fixed_offset()))
                    }),
                Some("duration") => r8s_api::duration::parse(s)
                    .ok()
                    .and_then(|d| chrono::Duration::from_std(d).ok())
                    .map(Value::Duration),
                Some("byte") => base64::engine::general_purpose::STANDARD
                    .decode(s)
                    .ok()
                    .map(|b| Value::Bytes(Arc::new(b))),
                _ => None,
            };
            converted.unwrap_or_else(|| value(v))
        }
        serde_json::Value::Array(items) => {
            let item_schema = &schema["items"];
            Value::List(Arc::new(
                items.iter().map(|i| typed_value(item_schema, i)).collect(),
            ))
        }
        serde_json::Value::Object(m) => {
            let map: HashMap<::cel::objects::Key, Value> = m
                .iter()
                .map(|(k, child)| {
                    let s = schema["properties"]
                        .get(k)
                        .unwrap_or(&schema["additionalProperties"]);
                    (
                        ::cel::objects::Key::String(Arc::new(k.clone())),
                        typed_value(s, child),
                    )
                })
                .collect();
            Value::Map(::cel::objects::Map { map: Arc::new(map) })
        }
        _ => value(v),
    }
}

/// A CEL map of string keys.
pub(crate) fn map<'a>(entries: impl IntoIterator<Item = (&'a String, &'a Value)>) -> Value {
    let map: HashMap<::cel::objects::Key, Value> = entries
        .into_iter()
        .map(|(k, v)| (::cel::objects::Key::String(Arc::new(k.clone())), v.clone()))
        .collect();
    Value::Map(::cel::objects::Map { map: Arc::new(map) })
}

/// A CEL string result as Rust text.
pub(crate) fn as_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.to_string()),
        _ => None,
    }
}

// What the libraries share: taking their arguments apart and making their results. Overloads
// are picked by the types of the arguments, so an argument of another type than declared is
// not expected; it is an error all the same, not a panic.

/// The result of an overload.
type Ret<'b, 'v> = Result<CowVal<'b, 'v>, ExecutionError>;

/// `args` as the `N` arguments of an overload.
fn take<'b, 'v, const N: usize>(args: Vec<CowVal<'b, 'v>>) -> Result<[CowVal<'b, 'v>; N], ExecutionError> {
    args.try_into()
        .map_err(|args: Vec<_>| ExecutionError::invalid_argument_count(N, args.len()))
}

fn unexpected(v: &dyn Val, want: &str) -> ExecutionError {
    ExecutionError::UnexpectedType {
        got: v.get_type().name().to_owned(),
        want: want.to_owned(),
    }
}

fn string<'a>(v: &'a CowVal<'_, '_>) -> Result<&'a str, ExecutionError> {
    v.downcast_ref::<CelString>()
        .map(|s| s.inner())
        .ok_or_else(|| unexpected(v.as_ref(), "string"))
}

fn int(v: &CowVal<'_, '_>) -> Result<i64, ExecutionError> {
    v.downcast_ref::<CelInt>()
        .map(|i| *i.inner())
        .ok_or_else(|| unexpected(v.as_ref(), "int"))
}

fn boolean(v: &CowVal<'_, '_>) -> Result<bool, ExecutionError> {
    v.downcast_ref::<CelBool>()
        .map(|b| *b.inner())
        .ok_or_else(|| unexpected(v.as_ref(), "bool"))
}

/// The elements of a list (the keys of a map).
fn elements<'b, 'v>(list: &'b (dyn Val + 'v)) -> Result<Vec<&'b (dyn Val + 'v)>, ExecutionError> {
    let mut items = list.as_iterable().ok_or_else(|| unexpected(list, "list"))?.iter();
    let mut elements = Vec::new();
    while let Some(item) = items.next() {
        elements.push(item);
    }
    Ok(elements)
}

/// The library value of type `T` that `v` holds. Opaque values are only reachable through
/// `Value` (the `cel` crate keeps their `Val` private): the `Arc` is cloned, then `T`.
fn opaque<T: Opaque + Clone>(v: &dyn Val, type_name: &str) -> Result<T, ExecutionError> {
    match Value::try_from(v) {
        Ok(Value::Opaque(o)) => o.downcast_ref::<T>().cloned(),
        _ => None,
    }
    .ok_or_else(|| unexpected(v, type_name))
}

fn of_opaque<'b, 'v>(o: impl Opaque) -> Ret<'b, 'v> {
    let val: Box<dyn Val> = Value::Opaque(Arc::new(o)).try_into()?;
    Ok(CowVal::Owned(val))
}

fn of_bool<'b, 'v>(b: bool) -> Ret<'b, 'v> {
    Ok(CowVal::owned(CelBool::from(b)))
}

fn of_int<'b, 'v>(i: i64) -> Ret<'b, 'v> {
    Ok(CowVal::owned(CelInt::from(i)))
}

fn of_double<'b, 'v>(d: f64) -> Ret<'b, 'v> {
    Ok(CowVal::owned(CelDouble::from(d)))
}

fn of_string<'b, 'v>(s: impl Into<String>) -> Ret<'b, 'v> {
    Ok(CowVal::owned(CelString::from(s.into())))
}

fn of_strings<'b, 'v>(items: impl IntoIterator<Item = String>) -> Ret<'b, 'v> {
    let items: Vec<Box<dyn Val>> = items
        .into_iter()
        .map(|s| Box::new(CelString::from(s)) as Box<dyn Val>)
        .collect();
    Ok(CowVal::owned(CelList::from(items)))
}

/// An error of the function `function`, reported as `message` alone (see `Expr::eval`).
fn error(function: &str, message: impl ToString) -> ExecutionError {
    ExecutionError::function_error(function, message)
}

/// `s` quoted as Go's `strconv.Quote` does, for upstream's messages.
pub(crate) fn go_quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\x07' => q.push_str("\\a"),
            '\x08' => q.push_str("\\b"),
            '\x0c' => q.push_str("\\f"),
            '\n' => q.push_str("\\n"),
            '\r' => q.push_str("\\r"),
            '\t' => q.push_str("\\t"),
            '\x0b' => q.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\x7f' => q.push_str(&format!("\\x{:02x}", c as u32)),
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Found by the object fuzzer (fuzz/regressions/object): deep nesting is refused with
    /// cel-go's words, and what is accepted parses on its own stack, even when the caller's is
    /// small (a 256 KiB thread here; 40 nested braces took more than that in the parser).
    #[test]
    fn deep_expressions_are_refused_or_parsed_off_the_callers_stack() {
        let deep = format!("{}1{}", "[".repeat(300), "]".repeat(300));
        assert_eq!(
            Expr::compile(&deep).compile_error(),
            Some("max recursion depth exceeded")
        );
        let chain = vec!["1"; 300].join(" + ");
        assert_eq!(
            Expr::compile(&chain).compile_error(),
            Some("max recursion depth exceeded")
        );
        let huge = format!("'{}'", "a".repeat(100_001));
        assert!(Expr::compile(&huge)
            .compile_error()
            .is_some_and(|e| e.starts_with("expression code point size exceeds limit")));
        let fine = std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(|| {
                let nested = format!("{}1{}", "(".repeat(60), ")".repeat(60));
                let e = Expr::compile(&nested);
                (e.compile_error().map(str::to_owned), e.cost(&[]) > 0)
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(fine.0, None);
        // Long flat expressions are not deep: sixty alternatives, a list of three hundred.
        let alternatives = (0..60)
            .map(|i| format!("x == {i}"))
            .collect::<Vec<_>>()
            .join(" || ");
        assert_eq!(too_deep(&alternatives), None);
        let list = format!("[{}].size() == 300", vec!["1"; 300].join(", "));
        assert_eq!(too_deep(&list), None);
        assert_eq!(eval(&list).unwrap(), Value::Bool(true));
        // Brackets inside strings are not nesting.
        assert_eq!(too_deep(&format!("'{}' != ''", "(".repeat(400))), None);
    }

    /// Evaluates `expr` with no variables.
    pub(super) fn eval(expr: &str) -> Result<Value, String> {
        let e = Expr::compile(expr);
        if let Some(err) = e.compile_error() {
            panic!("{expr} does not compile: {err}");
        }
        e.eval(&[])
    }

    /// Asserts that `expr` evaluates to `want`.
    pub(super) fn check(expr: &str, want: impl Into<Value>) {
        assert_eq!(eval(expr), Ok(want.into()), "{expr}");
    }

    /// Asserts that `expr` holds.
    pub(super) fn holds(expr: &str) {
        check(expr, true);
    }

    /// Asserts that `expr` fails with `message`.
    pub(super) fn fails(expr: &str, message: &str) {
        assert_eq!(eval(expr), Err(message.to_owned()), "{expr}");
    }

    #[test]
    fn objects_are_variables_of_expressions() {
        let obj = value(&json!({"spec": {"replicas": 3, "name": "web"}, "metadata": {"labels": {"a": "b"}}}));
        let e = Expr::compile("object.spec.replicas > 1 && object.metadata.labels.a == 'b'");
        assert_eq!(e.eval_bool(&[("object", obj.clone())]), Ok(true));
        let e = Expr::compile("has(object.spec.missing)");
        assert_eq!(e.eval_bool(&[("object", obj.clone())]), Ok(false));
        let e = Expr::compile("'name: ' + object.spec.name");
        assert_eq!(
            as_string(&e.eval(&[("object", obj.clone())]).unwrap()).as_deref(),
            Some("name: web")
        );
        // A string plus an int is a runtime error, as upstream's CEL has it.
        assert!(Expr::compile("'n: ' + object.spec.replicas")
            .eval(&[("object", obj)])
            .is_err());
        assert!(Expr::compile("object.spec.(").compile_error().is_some());
    }

    #[test]
    fn formatted_strings_are_timestamps_durations_and_bytes_under_their_schema() {
        let schema = json!({"type": "object", "properties": {
            "at": {"type": "string", "format": "date-time"},
            "day": {"type": "string", "format": "date"},
            "every": {"type": "string", "format": "duration"},
            "raw": {"type": "string", "format": "byte"},
            "name": {"type": "string"},
            "times": {"type": "array", "items": {"type": "string", "format": "date-time"}},
        }});
        let obj = typed_value(
            &schema,
            &json!({"at": "2024-01-01T10:00:00Z", "day": "2024-01-02", "every": "1h30m", "raw": "aGk=",
                    "name": "2024-01-01T10:00:00Z", "times": ["2025-01-01T00:00:00Z"]}),
        );
        let holds = |e: &str| Expr::compile(e).eval_bool(&[("self", obj.clone())]);
        assert_eq!(holds("self.at < timestamp('2024-01-02T00:00:00Z')"), Ok(true));
        assert_eq!(holds("self.day == timestamp('2024-01-02T00:00:00Z')"), Ok(true));
        assert_eq!(holds("self.every == duration('90m')"), Ok(true));
        assert_eq!(holds("self.raw == b'hi'"), Ok(true));
        assert_eq!(holds("self.times[0] > self.at"), Ok(true));
        // A string without a format stays a string.
        assert_eq!(holds("self.name.startsWith('2024')"), Ok(true));
    }

    #[test]
    fn timestamps_and_durations_are_the_standard_ones() {
        holds("timestamp('2024-01-01T00:00:00Z') < timestamp('2025-01-01T00:00:00Z')");
        holds("duration('1h') > duration('30m') && duration('90s') == duration('1m30s')");
        holds("timestamp('2024-01-01T00:00:00Z') + duration('24h') == timestamp('2024-01-02T00:00:00Z')");
        holds("timestamp('2024-03-05T10:00:00Z').getFullYear() == 2024");
        assert!(eval("duration('forever')").is_err());
    }

    #[test]
    fn the_strings_extension_is_cel_gos() {
        check("'a,b'.split(',')", vec!["a", "b"]);
        check("'hello'.charAt(1)", "e");
        check("'hello mellow'.indexOf('ello', 2)", 7);
        check("'hello mellow'.lastIndexOf('ello')", 7);
        check("'TacoCat'.lowerAscii() + 'x'.upperAscii()", "tacocatX");
        check("'a-b-c'.replace('-', '+', 1)", "a+b-c");
        check("'tacocat'.substring(4)", "cat");
        check("'  x \\t'.trim()", "x");
        check("['a', 'b'].join(', ')", "a, b");
        check("strings.quote('a\"b')", "\"a\\\"b\"");
        check("'%d items, %s'.format([3, 'ok'])", "3 items, ok");
        fails("'abc'.charAt(9)", "index out of range: 9");
    }

    #[test]
    fn optional_values_are_supported() {
        let obj = value(&json!({"spec": {"a": 1}}));
        let e = Expr::compile("object.?spec.?b.orValue(5) + object.?spec.?a.orValue(0)");
        assert_eq!(e.eval(&[("object", obj)]), Ok(Value::Int(6)));
        check("optional.none().hasValue()", false);
        check("optional.of(1).value()", 1);
        check("[?optional.none(), ?optional.of(2)]", vec![2]);
    }

    /// A policy's variable holding a library value is bound again for the expressions after
    /// it (as `Value`, see `admission::policy`).
    #[test]
    fn library_values_pass_through_variables() {
        let q = Expr::compile("quantity(object.spec.memory)")
            .eval(&[("object", value(&json!({"spec": {"memory": "1Gi"}})))])
            .unwrap();
        let vars = map([(&"limit".to_owned(), &q)]);
        let e = Expr::compile("variables.limit.isGreaterThan(quantity('512Mi'))");
        assert_eq!(e.eval_bool(&[("variables", vars.clone())]), Ok(true));
        let e = Expr::compile("variables.limit == quantity('1024Mi')");
        assert_eq!(e.eval_bool(&[("variables", vars)]), Ok(true));
    }

    /// A CRD's `x-kubernetes-validations` rules using the libraries, through the schema
    /// validator that custom resources are checked with.
    #[test]
    fn crd_rules_use_the_libraries() {
        use crate::registry::custom::schema::validate;

        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": [
                {"rule": "quantity(self.limit).compareTo(quantity(self.request)) >= 0",
                 "message": "limit below request"},
                {"rule": "cidr('10.0.0.0/8').containsIP(self.address)",
                 "messageExpression": "'address ' + self.address + ' is outside 10.0.0.0/8'"},
                {"rule": "url(self.endpoint).getScheme() == 'https'", "fieldPath": ".endpoint"},
                {"rule": "self.ports.all(i, p, p > i)"}],
            "properties": {"limit": {"type": "string"}, "request": {"type": "string"},
                "address": {"type": "string"}, "endpoint": {"type": "string"},
                "ports": {"type": "array", "items": {"type": "integer"}}}}}});
        let messages = |spec: serde_json::Value| -> Vec<String> {
            let errs = validate(&schema, &json!({ "spec": spec }));
            errs.iter().map(ToString::to_string).collect()
        };
        let good = json!({"limit": "2", "request": "1500m", "address": "10.1.2.3",
            "endpoint": "https://x.y/z", "ports": [80, 443]});
        assert_eq!(messages(good), Vec::<String>::new());
        let bad = json!({"limit": "1", "request": "1500m", "address": "11.1.2.3",
            "endpoint": "http://x.y/z", "ports": [0]});
        assert_eq!(
            messages(bad),
            [
                r#"spec: Invalid value: "object": limit below request"#,
                r#"spec: Invalid value: "object": address 11.1.2.3 is outside 10.0.0.0/8"#,
                r#"spec.endpoint: Invalid value: "object": failed rule: url(self.endpoint).getScheme() == 'https'"#,
                r#"spec: Invalid value: "object": failed rule: self.ports.all(i, p, p > i)"#,
            ]
        );
        let broken = json!({"limit": "1x", "request": "1", "address": "10.1.2.3",
            "endpoint": "https://x.y/z", "ports": []});
        assert_eq!(
            messages(broken),
            [format!(
                r#"spec: Invalid value: "object": rule evaluation error: {}"#,
                quantity::FORMAT_ERROR
            )]
        );
    }

    #[test]
    fn strings_are_quoted_as_go_does() {
        assert_eq!(go_quote("a\"b\\c\n\x01é"), "\"a\\\"b\\\\c\\n\\x01é\"");
    }
}
