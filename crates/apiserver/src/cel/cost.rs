//! What an expression costs, in cel-go's cost units (about 50 ns each), as upstream limits it:
//!
//! - **Estimated**, when a CRD is written: the most a rule could cost on any object its schema
//!   admits (cel-go's `checker.Cost` with Kubernetes' library estimator,
//!   `k8s.io/apiserver/pkg/cel/library/cost.go`). The sizes of strings, lists and maps come
//!   from the schema's `maxLength`, `maxItems` and `maxProperties`, or, where it sets none, from
//!   how many could fit in a request of 3 MiB ([`SchemaSizes`]).
//! - **At run time**, for each evaluation. cel-go counts the cost while it evaluates and cancels
//!   past the limit; the `cel` crate's interpreter keeps no such count, and its evaluation
//!   cannot be interrupted. So r8s bounds the cost *before* evaluating: the same estimate, with
//!   the sizes of the values the expression is given ([`ValueSizes`]) instead of the schema's.
//!   That is an upper bound of what cel-go would count on the same values (it assumes no
//!   short-circuit), and nothing too costly ever runs.
//!
//! The estimator is written here because the `cel` crate has none; it follows cel-go's
//! (`checker/cost.go`, v0.23) rule for rule, over the types the checker (`super::check`)
//! gave each node.

use std::collections::HashMap;

use ::cel::common::ast::{operators, EntryExpr, Expr, IdedExpr, LiteralValue};

use super::check::Type;
use super::Value;

/// The most one evaluation may cost (upstream's `PerCallLimit`).
pub(crate) const PER_CALL_LIMIT: u64 = 1_000_000;
/// The most the evaluations for one object and one CRD (or one policy binding) may cost
/// together (upstream's `RuntimeCELCostBudget`).
pub(crate) const RUNTIME_BUDGET: u64 = 10_000_000;
/// The same for a webhook's or a policy's match conditions (`RuntimeCELCostBudgetMatchConditions`).
pub(crate) const MATCH_CONDITIONS_BUDGET: u64 = 2_500_000;
/// The most a CRD rule's estimate may be, times how often it can run on one object
/// (`StaticEstimatedCostLimit`).
pub(crate) const STATIC_LIMIT: u64 = 10_000_000;
/// The most all of a CRD version's rules' estimates may be together (`StaticEstimatedCRDCostLimit`).
pub(crate) const STATIC_CRD_LIMIT: u64 = 100_000_000;
/// The largest request the API server accepts, which bounds every unbounded size.
pub(crate) const MAX_REQUEST_BYTES: u64 = 3 * 1024 * 1024;

const SELECT_AND_IDENT: u64 = 1;
const LIST_CREATE: u64 = 10;
const MAP_CREATE: u64 = 30;
const STRUCT_CREATE: u64 = 40;
const STRING_TRAVERSAL: f64 = 0.1;
const REGEX_STRING_LENGTH: f64 = 0.25;
/// Authorization checks are priced to allow two per expression.
const AUTHZ_CHECK: u64 = 350_000;

/// A range of costs, or of sizes (cel-go's `CostEstimate` and `SizeEstimate`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Range {
    pub min: u64,
    pub max: u64,
}

impl Range {
    pub const fn fixed(v: u64) -> Self {
        Self { min: v, max: v }
    }
    const UNKNOWN: Range = Range {
        min: 0,
        max: u64::MAX,
    };

    fn add(self, o: Range) -> Range {
        Range {
            min: self.min.saturating_add(o.min),
            max: self.max.saturating_add(o.max),
        }
    }
    fn union(self, o: Range) -> Range {
        Range {
            min: self.min.min(o.min),
            max: self.max.max(o.max),
        }
    }
    fn times(self, o: Range) -> Range {
        Range {
            min: self.min.saturating_mul(o.min),
            max: self.max.saturating_mul(o.max),
        }
    }
    fn factor(self, f: f64) -> Range {
        Range {
            min: by_factor(self.min, f),
            max: by_factor(self.max, f),
        }
    }
}

/// cel-go's `multiplyByCostFactor`: rounded up, saturating.
fn by_factor(x: u64, f: f64) -> u64 {
    let product = (x as f64 * f).ceil();
    if product >= u64::MAX as f64 {
        u64::MAX
    } else {
        product as u64
    }
}

/// Where the sizes of an expression's variables come from. A path starts with a variable's
/// name and goes on with field names, `@items` (a list's elements), `@keys` and `@values` (a
/// map's).
pub(crate) trait Sizes {
    fn size(&mut self, path: &[String]) -> Option<Range>;

    /// The size of a value the estimator cannot tell (a function's result of no known
    /// size): any size, unless the values are known.
    fn unknown(&mut self) -> Range {
        Range::UNKNOWN
    }
}

/// The estimated cost of a checked expression, each node typed in `types`.
pub(crate) fn estimate(ast: &IdedExpr, types: &HashMap<u64, Type>, sizes: &mut dyn Sizes) -> Range {
    let mut c = Coster {
        types,
        sizes,
        paths: HashMap::new(),
        computed: HashMap::new(),
        locals: Vec::new(),
    };
    c.cost(ast)
}

struct Local {
    name: String,
    path: Option<Vec<String>>,
    size: Option<Range>,
}

struct Coster<'a> {
    types: &'a HashMap<u64, Type>,
    sizes: &'a mut dyn Sizes,
    /// The path of each node that names a part of a variable.
    paths: HashMap<u64, Vec<String>>,
    /// Sizes computed for nodes (function results).
    computed: HashMap<u64, Range>,
    /// Comprehension variables, innermost last.
    locals: Vec<Local>,
}

fn is_dyn(t: Option<&Type>) -> bool {
    matches!(
        t,
        None | Some(Type::Dyn | Type::Free | Type::Error | Type::Param(_))
    )
}

impl Coster<'_> {
    fn ty(&self, e: &IdedExpr) -> Option<&Type> {
        self.types.get(&e.id)
    }

    fn local(&self, name: &str) -> Option<&Local> {
        self.locals.iter().rev().find(|l| l.name == name)
    }

    /// cel-go's `sizeOrUnknown`.
    fn size(&mut self, e: &IdedExpr) -> Range {
        if let Some(s) = self.computed.get(&e.id) {
            return *s;
        }
        match &e.expr {
            Expr::Literal(LiteralValue::String(s)) => return Range::fixed(s.inner().chars().count() as u64),
            Expr::Literal(LiteralValue::Bytes(b)) => return Range::fixed(b.inner().len() as u64),
            Expr::List(l) => return Range::fixed(l.elements.len() as u64),
            Expr::Map(m) => return Range::fixed(m.entries.len() as u64),
            _ => {}
        }
        if let Some(path) = self.paths.get(&e.id).cloned() {
            if let Some(s) = self.sizes.size(&path) {
                self.computed.insert(e.id, s);
                return s;
            }
        }
        if matches!(
            self.ty(e),
            Some(
                Type::Bool
                    | Type::Double
                    | Type::Duration
                    | Type::Int
                    | Type::Timestamp
                    | Type::Uint
                    | Type::Null
            )
        ) {
            return Range::fixed(1);
        }
        if let Expr::Ident(name) = &e.expr {
            if let Some(s) = self.local(name).and_then(|l| l.size) {
                return s;
            }
        }
        self.sizes.unknown()
    }

    fn cost(&mut self, e: &IdedExpr) -> Range {
        match &e.expr {
            Expr::Unspecified | Expr::Literal(_) => Range::default(),
            Expr::Ident(name) => {
                let path = match self.local(name) {
                    Some(l) => l.path.clone(),
                    None => Some(vec![name.clone()]),
                };
                if let Some(p) = path {
                    self.paths.insert(e.id, p);
                }
                Range::fixed(SELECT_AND_IDENT)
            }
            Expr::Select(sel) => {
                let mut sum = self.cost(&sel.operand);
                if sel.test {
                    return sum.add(Range::fixed(SELECT_AND_IDENT));
                }
                // cel-go charges a selection from a map or an object; r8s charges one from a
                // `dyn` too (at run time every variable is `dyn`, and cel-go's run-time count
                // charges each selection).
                if matches!(self.ty(&sel.operand), Some(Type::Map(..) | Type::Object(_)))
                    || is_dyn(self.ty(&sel.operand))
                {
                    sum = sum.add(Range::fixed(SELECT_AND_IDENT));
                }
                if let Some(p) = self.paths.get(&sel.operand.id) {
                    let mut p = p.clone();
                    p.push(sel.field.clone());
                    self.paths.insert(e.id, p);
                }
                sum
            }
            Expr::Call(call) => self.call(e, call),
            Expr::List(list) => {
                let mut sum = Range::fixed(LIST_CREATE);
                for item in &list.elements {
                    sum = sum.add(self.cost(item));
                }
                sum
            }
            Expr::Map(map) => {
                let mut sum = Range::fixed(MAP_CREATE);
                for entry in &map.entries {
                    if let EntryExpr::MapEntry(m) = &entry.expr {
                        sum = sum.add(self.cost(&m.key)).add(self.cost(&m.value));
                    }
                }
                sum
            }
            Expr::Struct(s) => {
                let mut sum = Range::fixed(STRUCT_CREATE);
                for entry in &s.entries {
                    if let EntryExpr::StructField(f) = &entry.expr {
                        sum = sum.add(self.cost(&f.value));
                    }
                }
                sum
            }
            Expr::Comprehension(c) => {
                let mut sum = self.cost(&c.iter_range).add(self.cost(&c.accu_init));
                let accu_size = match &c.accu_init.expr {
                    Expr::Literal(_) => Some(self.size(&c.accu_init)),
                    _ => None,
                };
                self.locals.push(Local {
                    name: c.accu_var.clone(),
                    path: self.paths.get(&c.accu_init.id).cloned(),
                    size: accu_size,
                });
                let range_path = self.paths.get(&c.iter_range.id).cloned();
                let is_map = matches!(self.ty(&c.iter_range), Some(Type::Map(..)));
                let child = |suffix: &str| {
                    range_path.clone().map(|mut p| {
                        p.push(suffix.to_owned());
                        p
                    })
                };
                let pushed = match &c.iter_var2 {
                    Some(v2) => {
                        // Two variables: a list's index and element, a map's key and value.
                        let (first, second) = if is_map {
                            (child("@keys"), child("@values"))
                        } else {
                            (None, child("@items"))
                        };
                        self.locals.push(Local {
                            name: c.iter_var.clone(),
                            path: first,
                            size: (!is_map).then(|| Range::fixed(1)),
                        });
                        self.locals.push(Local {
                            name: v2.clone(),
                            path: second,
                            size: None,
                        });
                        2
                    }
                    None => {
                        self.locals.push(Local {
                            name: c.iter_var.clone(),
                            path: child(if is_map { "@keys" } else { "@items" }),
                            size: None,
                        });
                        1
                    }
                };
                let per_item = self.cost(&c.loop_cond).add(self.cost(&c.loop_step));
                self.locals.truncate(self.locals.len() - pushed);
                sum = sum.add(self.cost(&c.result));
                self.locals.pop();
                let count = self.size(&c.iter_range);
                let size = match &c.accu_init.expr {
                    Expr::Literal(_) => Some(self.size(&c.accu_init)),
                    Expr::List(_) | Expr::Map(_) => Some(count),
                    _ => None,
                };
                if let Some(s) = size {
                    self.computed.insert(e.id, s);
                }
                sum.add(count.times(per_item))
            }
        }
    }

    fn call(&mut self, e: &IdedExpr, call: &::cel::common::ast::CallExpr) -> Range {
        let name = call.func_name.as_str();
        let arg_costs: Vec<Range> = call.args.iter().map(|a| self.cost(a)).collect();
        let args_sum = arg_costs.iter().fold(Range::default(), |s, c| s.add(*c));
        let target_cost = match &call.target {
            Some(t) => self.cost(t),
            None => Range::default(),
        };
        // The index operators: the result is an element of the container.
        if name == operators::INDEX || name == operators::OPT_INDEX {
            if let Some(p) = call.args.first().and_then(|a| self.paths.get(&a.id)) {
                let mut p = p.clone();
                let is_map = matches!(self.ty(&call.args[0]), Some(Type::Map(..)) | None)
                    || is_dyn(self.ty(&call.args[0]));
                p.push(if is_map { "@values" } else { "@items" }.to_owned());
                self.paths.insert(e.id, p);
            }
        }
        let (cost, result_size) = self.function(name, call, &arg_costs);
        if let Some(s) = result_size {
            self.computed.insert(e.id, s);
        }
        target_cost.add(cost.unwrap_or(Range::fixed(1).add(args_sum)))
    }

    /// The cost of calling `name` (with its arguments' costs), and its result's size where
    /// known; `None` for the cost of an O(1) function (1 plus the arguments).
    fn function(
        &mut self,
        name: &str,
        call: &::cel::common::ast::CallExpr,
        arg_costs: &[Range],
    ) -> (Option<Range>, Option<Range>) {
        let args_sum = arg_costs.iter().fold(Range::default(), |s, c| s.add(*c));
        let args = &call.args;
        let target = call.target.as_deref();
        let kind = |c: &Self, x: &IdedExpr| c.ty(x).cloned();
        let stringish =
            |t: &Option<Type>| matches!(t, Some(Type::String | Type::Bytes)) || is_dyn(t.as_ref());
        let listish = |t: &Option<Type>| matches!(t, Some(Type::List(_))) || is_dyn(t.as_ref());
        match (name, target, args.len()) {
            // Kubernetes' library (its estimator comes first, as upstream registers it).
            ("check", Some(_), _) => return (Some(Range::fixed(AUTHZ_CHECK)), None),
            (
                "serviceAccount" | "path" | "group" | "resource" | "subresource" | "namespace" | "name"
                | "allowed" | "reason" | "error" | "errored",
                Some(_),
                _,
            ) if matches!(kind(self, target.unwrap()), Some(Type::Opaque(_))) => {
                return (Some(Range::fixed(1)), None)
            }
            ("isSorted" | "sum" | "max" | "min" | "indexOf" | "lastIndexOf", Some(t), _) => {
                let target_size = self.size(t);
                let cost = match kind(self, t) {
                    Some(Type::List(elem)) => {
                        let mut per = Range::fixed(1);
                        if matches!(*elem, Type::String | Type::Bytes) {
                            let elem_size = self.element_size(t);
                            per = per.add(elem_size.factor(STRING_TRAVERSAL));
                        }
                        target_size.times(per)
                    }
                    Some(Type::String) => target_size.factor(STRING_TRAVERSAL),
                    _ => {
                        let elem_size = self.element_size(t);
                        target_size.times(Range::fixed(1).add(elem_size.factor(STRING_TRAVERSAL)))
                    }
                };
                return (Some(cost.add(args_sum)), None);
            }
            ("url" | "jsonpatch.escapeKey", None, 1) => {
                let s = self.size(&args[0]);
                return (Some(s.factor(STRING_TRAVERSAL).add(args_sum)), Some(s));
            }
            ("lowerAscii" | "upperAscii" | "substring" | "trim", Some(t), _) => {
                let s = self.size(t);
                return (Some(s.factor(STRING_TRAVERSAL).add(args_sum)), Some(s));
            }
            ("replace", Some(t), n) if n >= 2 => {
                let s = self.size(t);
                let from = self.size(&args[0]);
                let with = self.size(&args[1]);
                let size = replaced_size(s, from, with);
                return (Some(s.factor(2.0 * STRING_TRAVERSAL).add(args_sum)), Some(size));
            }
            ("split", Some(t), _) => {
                let s = self.size(t);
                let mut max = s.max;
                if let Some(IdedExpr {
                    expr: Expr::Literal(LiteralValue::Int(i)),
                    ..
                }) = args.get(1)
                {
                    max = u64::try_from(*i.inner()).unwrap_or(0);
                }
                return (
                    Some(s.factor(2.0 * STRING_TRAVERSAL).add(args_sum)),
                    Some(Range { min: 0, max }),
                );
            }
            ("join", Some(t), _) => {
                let list = self.size(t);
                let mut size = list.times(self.element_size(t));
                if let Some(sep) = args.first() {
                    let sep = self.size(sep);
                    let separators = Range {
                        min: list.min.saturating_sub(1),
                        max: list.max.saturating_sub(1),
                    };
                    size = size.add(sep.times(separators));
                }
                return (Some(size.factor(STRING_TRAVERSAL).add(args_sum)), Some(size));
            }
            ("find" | "findAll", Some(t), n) if n >= 1 => {
                let s = self.size(t);
                let string = s.add(Range::fixed(1)).factor(STRING_TRAVERSAL);
                let regex = self.size(&args[0]).factor(REGEX_STRING_LENGTH);
                return (
                    Some(string.times(regex).add(args_sum)),
                    Some(Range { min: 0, max: s.max }),
                );
            }
            ("cidr" | "isIP" | "isCIDR" | "quantity" | "isQuantity" | "semver" | "isSemver", None, n)
                if n >= 1 =>
            {
                let s = self.size(&args[0]);
                return (Some(s.factor(STRING_TRAVERSAL).add(args_sum)), None);
            }
            ("ip", None, 1) => {
                let s = self.size(&args[0]);
                return (Some(s.factor(STRING_TRAVERSAL).add(args_sum)), None);
            }
            ("ip", Some(_), 0) => return (Some(Range::fixed(1)), None),
            ("ip.isCanonical", None, 1) => {
                let s = self.size(&args[0]);
                return (Some(s.factor(2.0 * STRING_TRAVERSAL).add(args_sum)), None);
            }
            (
                "masked"
                | "prefixLength"
                | "family"
                | "isUnspecified"
                | "isLoopback"
                | "isLinkLocalMulticast"
                | "isLinkLocalUnicast"
                | "isGlobalUnicast",
                Some(_),
                _,
            ) => return (Some(Range::fixed(1)), None),
            ("containsIP" | "containsCIDR", Some(_), n) if n >= 1 => {
                let ip = Range { min: 4, max: 16 };
                let mut cost = ip.add(ip).factor(STRING_TRAVERSAL);
                if name == "containsCIDR" {
                    cost = cost.add(ip.factor(STRING_TRAVERSAL)).add(Range::fixed(1));
                }
                if matches!(kind(self, &args[0]), Some(Type::String)) {
                    cost = cost.add(self.size(&args[0]).factor(STRING_TRAVERSAL));
                }
                return (Some(cost.add(args_sum)), None);
            }
            ("validate", Some(_), 1) => {
                // The longest of the named formats' patterns (upstream's `MaxNameFormatRegexSize`).
                let s = self.size(&args[0]);
                let cost = s.factor(STRING_TRAVERSAL).factor(128.0 * REGEX_STRING_LENGTH);
                return (Some(cost.add(args_sum)), None);
            }
            (
                "format.named" | "sign" | "asInteger" | "isInteger" | "asApproximateFloat" | "isGreaterThan"
                | "isLessThan" | "compareTo" | "add" | "sub" | "major" | "minor" | "patch" | "getScheme"
                | "getHostname" | "getHost" | "getPort" | "getEscapedPath" | "getQuery",
                _,
                _,
            ) if target.is_some_and(|t| matches!(kind(self, t), Some(Type::Opaque(_))))
                || name == "format.named" =>
            {
                return (Some(Range::fixed(1).add(args_sum)), None)
            }
            _ => {}
        }
        // cel-go's own.
        match name {
            // The two-variable comprehensions' list of pairs (`super::comprehensions`).
            "@pairs" if args.len() == 1 => {
                let size = self.size(&args[0]);
                (Some(size.add(args_sum)), Some(size))
            }
            operators::LOGICAL_AND | operators::LOGICAL_OR if arg_costs.len() == 2 => {
                let (l, r) = (arg_costs[0], arg_costs[1]);
                (
                    Some(Range {
                        min: l.min,
                        max: l.add(r).max,
                    }),
                    None,
                )
            }
            operators::CONDITIONAL if args.len() == 3 => {
                let size = self.size(&args[1]).union(self.size(&args[2]));
                (
                    Some(arg_costs[0].add(arg_costs[1].union(arg_costs[2]))),
                    Some(size),
                )
            }
            operators::ADD if args.len() == 2 => {
                let (lt, rt) = (kind(self, &args[0]), kind(self, &args[1]));
                let size = self.size(&args[0]).add(self.size(&args[1]));
                let string_cost = size.factor(STRING_TRAVERSAL);
                let cost = if matches!(lt, Some(Type::String | Type::Bytes))
                    || matches!(rt, Some(Type::String | Type::Bytes))
                {
                    Some(string_cost)
                } else if matches!(lt, Some(Type::List(_))) || matches!(rt, Some(Type::List(_))) {
                    Some(Range::fixed(1))
                } else if stringish(&lt) && stringish(&rt) {
                    // `dyn + dyn`: the dearer of a concatenation of strings and of lists.
                    Some(string_cost.union(Range::fixed(1)))
                } else {
                    None
                };
                match cost {
                    Some(c) => (Some(c.add(args_sum)), Some(size)),
                    None => (None, None),
                }
            }
            operators::EQUALS
            | operators::NOT_EQUALS
            | operators::LESS
            | operators::LESS_EQUALS
            | operators::GREATER
            | operators::GREATER_EQUALS
                if args.len() == 2 =>
            {
                let (lt, rt) = (kind(self, &args[0]), kind(self, &args[1]));
                let equality = name == operators::EQUALS || name == operators::NOT_EQUALS;
                if equality && matches!(lt, Some(Type::Opaque(_))) && lt == rt {
                    return (Some(Range::fixed(1).add(args_sum)), None);
                }
                if !equality && (!stringish(&lt) || !stringish(&rt)) {
                    return (None, None);
                }
                let (l, r) = (self.size(&args[0]), self.size(&args[1]));
                let smallest = l.max.min(r.max);
                let cost = Range {
                    min: u64::from(smallest > 0),
                    max: smallest,
                }
                .factor(STRING_TRAVERSAL);
                (Some(cost.add(args_sum)), None)
            }
            operators::IN if args.len() == 2 && listish(&kind(self, &args[1])) => {
                (Some(self.size(&args[1]).add(args_sum)), None)
            }
            "matches" if args.len() == 1 || (target.is_none() && args.len() == 2) => {
                let (s, re) = match target {
                    Some(t) => (t, &args[0]),
                    None => (&args[0], &args[1]),
                };
                let string = self.size(s).add(Range::fixed(1)).factor(STRING_TRAVERSAL);
                let regex = self.size(re).factor(REGEX_STRING_LENGTH);
                (Some(string.times(regex).add(args_sum)), None)
            }
            "contains" if target.is_some() && args.len() == 1 => {
                let t = target.unwrap();
                if !stringish(&kind(self, t)) {
                    return (None, None);
                }
                let s = self.size(t).factor(STRING_TRAVERSAL);
                let sub = self.size(&args[0]).factor(STRING_TRAVERSAL);
                (Some(s.times(sub).add(args_sum)), None)
            }
            "startsWith" | "endsWith" if target.is_some() && args.len() == 1 => (
                Some(self.size(&args[0]).factor(STRING_TRAVERSAL).add(args_sum)),
                None,
            ),
            "format" if target.is_some() => {
                let s = self.size(target.unwrap());
                (Some(s.factor(STRING_TRAVERSAL).add(args_sum)), None)
            }
            "bytes" | "string" if args.len() == 1 && target.is_none() => {
                let from = kind(self, &args[0]);
                let s = self.size(&args[0]);
                match (name, from) {
                    ("bytes", Some(Type::String)) => (
                        Some(s.factor(STRING_TRAVERSAL).add(args_sum)),
                        Some(Range {
                            min: s.min,
                            max: s.max.saturating_mul(4),
                        }),
                    ),
                    ("string", Some(Type::Bytes)) => (
                        Some(s.factor(STRING_TRAVERSAL).add(args_sum)),
                        Some(Range {
                            min: s.min / 4,
                            max: s.max,
                        }),
                    ),
                    _ => (None, None),
                }
            }
            "strings.quote" if args.len() == 1 => {
                let s = self.size(&args[0]);
                (
                    Some(s.factor(STRING_TRAVERSAL).add(args_sum)),
                    Some(Range {
                        min: s.min + 2,
                        max: s.max.saturating_mul(2).saturating_add(2),
                    }),
                )
            }
            _ => (None, None),
        }
    }

    /// The size of the elements of the list `list`.
    fn element_size(&mut self, list: &IdedExpr) -> Range {
        if let Some(p) = self.paths.get(&list.id) {
            let mut p = p.clone();
            p.push("@items".to_owned());
            if let Some(s) = self.sizes.size(&p) {
                return s;
            }
        }
        if let Some(Type::List(elem)) = self.ty(list) {
            if matches!(
                **elem,
                Type::Bool | Type::Double | Type::Duration | Type::Int | Type::Timestamp | Type::Uint
            ) {
                return Range::fixed(1);
            }
        }
        self.sizes.unknown()
    }
}

/// The size of `s.replace(from, with)` (upstream's estimate).
fn replaced_size(s: Range, from: Range, with: Range) -> Range {
    let (mut count, mut kept) = (Range::default(), Range::default());
    if from.min == 0 {
        count.max = s.max.saturating_add(1);
        kept.max = s.max;
    } else if with.max <= from.min {
        kept.max = s.max;
    } else {
        count.max = s.max.div_ceil(from.min);
    }
    if from.max == 0 {
        count.min = s.min.saturating_add(1);
        kept.min = s.min;
    } else if from.max <= with.min {
        kept.min = s.min;
    } else {
        count.min = s.min.div_ceil(from.max);
    }
    count.times(with).add(kept)
}

/// Sizes from a structural schema, as upstream's `SchemaDeclType` bounds them: every path
/// starts at the schema of `self`.
pub(crate) struct SchemaSizes<'s> {
    pub root: &'s serde_json::Value,
    /// Whether `root` is a resource's (or an embedded resource's) root.
    pub resource_root: bool,
}

impl Sizes for SchemaSizes<'_> {
    fn size(&mut self, path: &[String]) -> Option<Range> {
        let mut node = self.root;
        let mut at_root = self.resource_root;
        let string = serde_json::json!({"type": "string"});
        let meta = serde_json::json!({"type": "object", "properties": {"name": {"type": "string"}, "generateName": {"type": "string"}}});
        for name in path.iter().skip(1) {
            node = match name.as_str() {
                "@items" => node.get("items")?,
                "@values" => node.get("items").or_else(|| node.get("additionalProperties"))?,
                "@keys" => {
                    return Some(Range {
                        min: 0,
                        max: MAX_REQUEST_BYTES - 2,
                    })
                }
                field => {
                    let found = node
                        .get("properties")
                        .and_then(|p| p.get(super::check::unescape(field).as_str()));
                    match (found, at_root, field) {
                        (Some(f), _, _) => f,
                        (None, true, "kind" | "apiVersion") => &string,
                        (None, true, "metadata") => &meta,
                        _ => return None,
                    }
                }
            };
            at_root = node
                .get("x-kubernetes-embedded-resource")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false);
            if node.is_null() {
                return None;
            }
        }
        // The metadata stand-in's strings are plain strings; clone-free lookups above.
        Some(Range {
            min: 0,
            max: max_elements(node),
        })
    }
}

/// Upstream's `DeclType.MaxElements` of a schema: a string's most characters (bytes: times 4
/// for `maxLength`, which counts code points), a list's most items, a map's most entries, 0
/// for the rest.
pub(crate) fn max_elements(s: &serde_json::Value) -> u64 {
    let limit = |k: &str| {
        s.get(k)
            .and_then(serde_json::Value::as_i64)
            .map(|n| n.max(0) as u64)
    };
    let unbounded_string = || match s.get("format").and_then(serde_json::Value::as_str) {
        Some("duration") | Some("date-time") => 32,
        Some("date") => 12,
        _ => MAX_REQUEST_BYTES - 2,
    };
    if s.get("x-kubernetes-int-or-string")
        .and_then(serde_json::Value::as_bool)
        == Some(true)
    {
        return MAX_REQUEST_BYTES - 2;
    }
    match s.get("type").and_then(serde_json::Value::as_str) {
        Some("string") => match s.get("format").and_then(serde_json::Value::as_str) {
            Some("byte") => limit("maxLength").unwrap_or_else(unbounded_string),
            Some("duration" | "date" | "date-time") => unbounded_string(),
            _ => match limit("maxLength") {
                Some(n) => n.saturating_mul(4),
                None => match s.get("enum").and_then(serde_json::Value::as_array) {
                    Some(e) if !e.is_empty() => e
                        .iter()
                        .filter_map(serde_json::Value::as_str)
                        .map(|v| v.len() as u64)
                        .max()
                        .unwrap_or(0),
                    _ => unbounded_string(),
                },
            },
        },
        Some("array") => limit("maxItems")
            .unwrap_or_else(|| (MAX_REQUEST_BYTES - 2) / (min_serialized_size(&s["items"]) + 1)),
        Some("object")
            if s.get("additionalProperties")
                .is_some_and(serde_json::Value::is_object) =>
        {
            limit("maxProperties").unwrap_or_else(|| {
                (MAX_REQUEST_BYTES - 2) / (min_serialized_size(&s["additionalProperties"]) + 6)
            })
        }
        _ => 0,
    }
}

/// The fewest bytes a value of the schema takes in JSON (upstream's `MinSerializedSize`).
pub(crate) fn min_serialized_size(s: &serde_json::Value) -> u64 {
    if s.get("x-kubernetes-int-or-string")
        .and_then(serde_json::Value::as_bool)
        == Some(true)
    {
        return 1;
    }
    match s.get("type").and_then(serde_json::Value::as_str) {
        Some("string") => match s.get("format").and_then(serde_json::Value::as_str) {
            Some("duration") => 4,
            Some("date") => 12,
            Some("date-time") => 22,
            _ => 2,
        },
        Some("boolean") => 4,
        Some("number") | Some("integer") => 1,
        Some("object")
            if s.get("additionalProperties")
                .is_some_and(serde_json::Value::is_object) =>
        {
            2
        }
        Some("object") => {
            let required: Vec<&str> = s
                .get("required")
                .and_then(serde_json::Value::as_array)
                .map(|r| r.iter().filter_map(serde_json::Value::as_str).collect())
                .unwrap_or_default();
            let mut size = 2;
            if let Some(props) = s.get("properties").and_then(serde_json::Value::as_object) {
                for (name, p) in props {
                    if required.contains(&name.as_str()) && p.get("default").is_none() {
                        size += name.len() as u64 + min_serialized_size(p) + 4;
                    }
                }
            }
            size
        }
        _ => 2,
    }
}

/// How many times data of this schema could appear in one request: where a rule sits under
/// unbounded lists or maps (upstream's `maxCardinality`).
pub(crate) fn max_cardinality(s: &serde_json::Value) -> u64 {
    MAX_REQUEST_BYTES / (min_serialized_size(s) + 1)
}

/// Sizes from the values an expression is given: for a path, the smallest and the largest of
/// the values it reaches (every element, for `@items`), measured as cel-go measures them at
/// run time: characters of a string, bytes, items of a list, entries of a map, 1 for the rest.
///
/// A value the estimator cannot tell the size of (a function's result) is taken to be at most
/// as large as all the values given together: what an expression computes from its values
/// is no larger than they are, but for what it builds in a loop, which the estimate of the
/// loop accounts for.
pub(crate) struct ValueSizes<'v> {
    vars: &'v [(&'v str, Value)],
    memo: HashMap<Vec<String>, Option<Range>>,
    total: Option<u64>,
}

impl<'v> ValueSizes<'v> {
    pub fn new(vars: &'v [(&'v str, Value)]) -> Self {
        Self {
            vars,
            memo: HashMap::new(),
            total: None,
        }
    }
}

/// The sizes of `v` and of everything in it, added up.
fn total_size(v: &Value) -> u64 {
    match v {
        Value::List(l) => l
            .iter()
            .fold(l.len() as u64, |t, i| t.saturating_add(total_size(i))),
        Value::Map(m) => m.map.iter().fold(m.map.len() as u64, |t, (k, i)| {
            let key = match k {
                ::cel::objects::Key::String(s) => s.chars().count() as u64,
                _ => 1,
            };
            t.saturating_add(key).saturating_add(total_size(i))
        }),
        v => value_size(v),
    }
}

fn value_size(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.chars().count() as u64,
        Value::Bytes(b) => b.len() as u64,
        Value::List(l) => l.len() as u64,
        Value::Map(m) => m.map.len() as u64,
        _ => 1,
    }
}

impl Sizes for ValueSizes<'_> {
    fn unknown(&mut self) -> Range {
        let vars = self.vars;
        let total = *self.total.get_or_insert_with(|| {
            vars.iter()
                .fold(0u64, |t, (_, v)| t.saturating_add(total_size(v)))
        });
        Range { min: 0, max: total }
    }

    fn size(&mut self, path: &[String]) -> Option<Range> {
        if let Some(s) = self.memo.get(path) {
            return *s;
        }
        let root = self
            .vars
            .iter()
            .find(|(n, _)| path.first().is_some_and(|p| p == n))?;
        let mut current: Vec<&Value> = vec![&root.1];
        for step in &path[1..] {
            let mut next = Vec::new();
            for v in current {
                match (step.as_str(), v) {
                    ("@items" | "@values", Value::List(l)) => next.extend(l.iter()),
                    ("@items" | "@values", Value::Map(m)) => next.extend(m.map.values()),
                    ("@keys", Value::Map(m)) => {
                        // Keys are measured where they are strings; others count 1.
                        let longest = m
                            .map
                            .keys()
                            .map(|k| match k {
                                ::cel::objects::Key::String(s) => s.chars().count() as u64,
                                _ => 1,
                            })
                            .max()
                            .unwrap_or(0);
                        let r = Some(Range { min: 0, max: longest });
                        self.memo.insert(path.to_vec(), r);
                        return r;
                    }
                    (field, Value::Map(m)) => {
                        let key =
                            ::cel::objects::Key::String(std::sync::Arc::new(super::check::unescape(field)));
                        if let Some(child) = m.map.get(&key) {
                            next.push(child);
                        }
                    }
                    _ => {}
                }
            }
            current = next;
        }
        let r = current
            .iter()
            .map(|v| value_size(v))
            .fold(None, |acc: Option<Range>, s| {
                Some(match acc {
                    None => Range::fixed(s),
                    Some(a) => a.union(Range::fixed(s)),
                })
            });
        let r = Some(r.unwrap_or_default());
        self.memo.insert(path.to_vec(), r);
        r
    }
}

/// The cost of evaluating `source` with these values bound, bounded before it runs (see the
/// module's documentation).
pub(crate) fn runtime_cost(checked: &super::check::Checked, vars: &[(&str, Value)]) -> u64 {
    let Some(ast) = &checked.ast else { return 0 };
    estimate(ast, &checked.types, &mut ValueSizes::new(vars)).max
}

/// Upstream's words for an estimate over a limit.
pub(crate) fn over_budget(what: &str, cost: u64, limit: u64) -> String {
    let factor = cost as f64 / limit as f64;
    let factor = if factor > 100.0 {
        "more than 100x".to_owned()
    } else if factor < 1.5 {
        format!("{factor:.6}x")
    } else {
        format!("{factor:.1}x")
    };
    format!(
        "{what} exceeds budget by factor of {factor} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cel::check::check;
    use serde_json::json;

    fn static_cost(schema: serde_json::Value, rule: &str) -> Range {
        let t = Type::from_schema(&schema, false, "self").unwrap();
        let checked = check(rule, &[("self", t)]).unwrap();
        let mut sizes = SchemaSizes {
            root: &schema,
            resource_root: false,
        };
        estimate(checked.ast.as_ref().unwrap(), &checked.types, &mut sizes)
    }

    #[test]
    fn bounded_schemas_bound_the_estimate() {
        let list = |max: Option<u64>| {
            let mut s = json!({"type": "array", "items": {"type": "string", "maxLength": 10}});
            if let Some(m) = max {
                s["maxItems"] = json!(m);
            }
            s
        };
        let rule = "self.all(s, s == 'abc')";
        let small = static_cost(list(Some(10)), rule);
        let large = static_cost(list(Some(1000)), rule);
        assert!(small.max > 0 && large.max > 50 * small.max, "{small:?} {large:?}");
        // Unbounded: as many strings as fit in 3 MiB, at 3 bytes each ("",).
        let unbounded = static_cost(list(None), rule);
        assert!(unbounded.max > 1_000_000 * 5, "{unbounded:?}");
        // A comprehension inside one multiplies.
        let nested = static_cost(
            json!({"type": "array", "maxItems": 725, "items": {"type": "integer"}}),
            "self.all(x, self.all(y, y == x))",
        );
        assert!(
            (2_000_000..STATIC_LIMIT).contains(&nested.max),
            "upstream accepts this rule of its e2e suite: {nested:?}"
        );
    }

    #[test]
    fn string_functions_scale_with_length() {
        let s = |n: u64| json!({"type": "object", "properties": {"a": {"type": "string", "maxLength": n}}});
        let short = static_cost(s(10), "self.a.matches('^[a-z]+$')");
        let long = static_cost(s(10_000), "self.a.matches('^[a-z]+$')");
        assert!(long.max > 100 * short.max, "{short:?} {long:?}");
        assert_eq!(static_cost(s(10), "size(self.a) > 1").max, 4);
    }

    #[test]
    fn runtime_cost_follows_the_values() {
        let checked = check("self.all(x, self.all(y, y == x))", &[("self", Type::Dyn)]).unwrap();
        let list = |n: usize| crate::cel::value(&json!(vec![20; n]));
        let small = list(10);
        let large = list(725);
        let c_small = runtime_cost(&checked, &[("self", small)]);
        let c_large = runtime_cost(&checked, &[("self", large)]);
        assert!(c_small < 1_000, "{c_small}");
        // Upstream's e2e suite wants this one refused at run time.
        assert!(c_large > PER_CALL_LIMIT, "{c_large}");
    }

    #[test]
    fn over_budget_reads_as_upstream() {
        assert_eq!(
            over_budget("estimated rule cost", 2_000_000_000, STATIC_LIMIT),
            "estimated rule cost exceeds budget by factor of more than 100x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
        );
        assert!(over_budget("x", 14_000_000, STATIC_LIMIT).contains("factor of 1.400000x"));
        assert!(over_budget("x", 25_000_000, STATIC_LIMIT).contains("factor of 2.5x"));
    }
}
