//! cel-go's two-variable comprehensions (`ext.TwoVarComprehensions()`): `all`, `exists`,
//! `existsOne` (and `exists_one`) with an index (or key) and a value, `transformList`,
//! `transformMap` and `transformMapEntry`, with an optional filter.
//!
//! The `cel` crate parses comprehensions of two variables but evaluates those of one only, so
//! the macros expand, as cel-go's do, into its comprehensions, over a list of the `[index,
//! value]` (or `[key, value]`) pairs of the target, with the two variables bound around each
//! expression of the call. Maps are built with `@mapInsert`, cel-go's `cel.@mapInsert`.

use std::collections::HashMap;
use std::sync::Arc;

use ::cel::common::ast::{
    operators, CallExpr, ComprehensionExpr, Expr, IdedExpr, ListExpr, LiteralValue, MapExpr,
};
use ::cel::common::types::{DYN_TYPE, LIST_TYPE, MAP_TYPE};
use ::cel::common::value::{CowVal, Val};
use ::cel::objects::{Key, Map};
use ::cel::parser::{Macro, MacroExprHelper};
use ::cel::{DeclarationError, Env, ExecutionError, ParseError, Value};

use super::{error, take, Ret};

/// The function listing a list's or a map's pairs (a name no expression can write).
const PAIRS: &str = "@pairs";
/// The function inserting into a map, cel-go's `cel.@mapInsert`.
const MAP_INSERT: &str = "@mapInsert";
/// The variable a comprehension iterates over the pairs with.
const PAIR: &str = "@pair";
/// The accumulator, as the standard macros name it.
const RESULT: &str = "@result";

pub(super) fn library(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload(PAIRS, "@pairs_list", vec![LIST_TYPE], pairs)?;
    env.add_overload(PAIRS, "@pairs_map", vec![MAP_TYPE], pairs)?;
    env.add_overload(
        MAP_INSERT,
        "@mapInsert_map_map",
        vec![MAP_TYPE, MAP_TYPE],
        map_insert,
    )?;
    let key_value = vec![MAP_TYPE, DYN_TYPE, DYN_TYPE];
    env.add_overload(MAP_INSERT, "@mapInsert_map_key_value", key_value, map_insert)?;
    for (name, kind) in [
        ("all", Kind::All),
        ("exists", Kind::Exists),
        ("existsOne", Kind::ExistsOne),
        ("exists_one", Kind::ExistsOne),
    ] {
        env.add_macro(Macro::receiver(name, 3, move |h, t, a| expand(h, t, a, kind)))?;
    }
    for (name, kind) in [
        ("transformList", Kind::TransformList),
        ("transformMap", Kind::TransformMap),
        ("transformMapEntry", Kind::TransformMapEntry),
    ] {
        for args in [3, 4] {
            env.add_macro(Macro::receiver(name, args, move |h, t, a| expand(h, t, a, kind)))?;
        }
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Kind {
    All,
    Exists,
    ExistsOne,
    TransformList,
    TransformMap,
    TransformMapEntry,
}

fn call(h: &mut MacroExprHelper<'_>, func_name: &str, args: Vec<IdedExpr>) -> IdedExpr {
    h.next_expr(Expr::Call(CallExpr {
        func_name: func_name.to_owned(),
        target: None,
        args,
    }))
}

fn ident(h: &mut MacroExprHelper<'_>, name: &str) -> IdedExpr {
    h.next_expr(Expr::Ident(name.to_owned()))
}

fn literal(h: &mut MacroExprHelper<'_>, value: LiteralValue) -> IdedExpr {
    h.next_expr(Expr::Literal(value))
}

/// `@pair[i]`.
fn pair_part(h: &mut MacroExprHelper<'_>, i: i64) -> IdedExpr {
    let pair = ident(h, PAIR);
    let i = literal(h, LiteralValue::Int(i.into()));
    call(h, operators::INDEX, vec![pair, i])
}

/// `result` with `var` bound to `init` (cel-go's `cel.bind`).
fn bind(h: &mut MacroExprHelper<'_>, var: &str, init: IdedExpr, result: IdedExpr) -> IdedExpr {
    let iter_range = h.next_expr(Expr::List(ListExpr::new(Vec::new())));
    let loop_cond = literal(h, LiteralValue::Boolean(false.into()));
    let loop_step = ident(h, var);
    h.next_expr(Expr::Comprehension(Box::new(ComprehensionExpr {
        iter_range,
        iter_var: "#unused".to_owned(),
        iter_var2: None,
        accu_var: var.to_owned(),
        accu_init: init,
        loop_cond,
        loop_step,
        result,
    })))
}

/// `expr` with the two variables bound to the current pair.
fn with_vars(h: &mut MacroExprHelper<'_>, vars: &(String, String), expr: IdedExpr) -> IdedExpr {
    let value = pair_part(h, 1);
    let inner = bind(h, &vars.1, value, expr);
    let key = pair_part(h, 0);
    bind(h, &vars.0, key, inner)
}

/// cel-go's `extractIterVars`.
fn iter_vars(
    h: &mut MacroExprHelper<'_>,
    first: &IdedExpr,
    second: &IdedExpr,
) -> Result<(String, String), ParseError> {
    let name = |e: &IdedExpr| match &e.expr {
        Expr::Ident(name) => Ok(name.clone()),
        _ => Err(h.new_error(e.id, "argument must be a simple name")),
    };
    let (a, b) = (name(first)?, name(second)?);
    if a == b {
        return Err(h.new_error(second.id, format!("duplicate variable name: {a}")));
    }
    for (var, e) in [(&a, first), (&b, second)] {
        if var == RESULT {
            return Err(h.new_error(e.id, "iteration variable overwrites accumulator variable"));
        }
    }
    Ok((a, b))
}

fn expand(
    h: &mut MacroExprHelper<'_>,
    target: &mut Option<IdedExpr>,
    args: &mut Vec<IdedExpr>,
    kind: Kind,
) -> Result<Option<IdedExpr>, ParseError> {
    let vars = iter_vars(h, &args[0], &args[1])?;
    let target = target.take().expect("a receiver macro has a target");
    let mut args = std::mem::take(args).into_iter().skip(2);
    let (first, second) = (args.next(), args.next());
    // The filter, if any, and the expression.
    let (filter, expr) = match (first, second) {
        (Some(filter), Some(expr)) => (Some(filter), expr),
        (Some(expr), None) => (None, expr),
        _ => unreachable!("the macros take three or four arguments"),
    };
    let expr = with_vars(h, &vars, expr);
    let filter = filter.map(|f| with_vars(h, &vars, f));
    let accu = |h: &mut MacroExprHelper<'_>| ident(h, RESULT);
    let (init, cond, step, result) = match kind {
        Kind::All | Kind::Exists => {
            let all = matches!(kind, Kind::All);
            let init = literal(h, LiteralValue::Boolean(all.into()));
            let mut cond = accu(h);
            if !all {
                cond = call(h, operators::LOGICAL_NOT, vec![cond]);
            }
            let cond = call(h, operators::NOT_STRICTLY_FALSE, vec![cond]);
            let op = if all {
                operators::LOGICAL_AND
            } else {
                operators::LOGICAL_OR
            };
            let a = accu(h);
            let step = call(h, op, vec![a, expr]);
            (init, cond, step, accu(h))
        }
        Kind::ExistsOne => {
            let init = literal(h, LiteralValue::Int(0.into()));
            let cond = literal(h, LiteralValue::Boolean(true.into()));
            let (a, one) = (accu(h), literal(h, LiteralValue::Int(1.into())));
            let plus_one = call(h, operators::ADD, vec![a, one]);
            let a = accu(h);
            let step = call(h, operators::CONDITIONAL, vec![expr, plus_one, a]);
            let (a, one) = (accu(h), literal(h, LiteralValue::Int(1.into())));
            let result = call(h, operators::EQUALS, vec![a, one]);
            (init, cond, step, result)
        }
        Kind::TransformList | Kind::TransformMap | Kind::TransformMapEntry => {
            let (init, step) = match kind {
                Kind::TransformList => {
                    let init = h.next_expr(Expr::List(ListExpr::new(Vec::new())));
                    let (a, item) = (accu(h), h.next_expr(Expr::List(ListExpr::new(vec![expr]))));
                    (init, call(h, operators::ADD, vec![a, item]))
                }
                Kind::TransformMap => {
                    let init = h.next_expr(Expr::Map(MapExpr { entries: vec![] }));
                    let (a, key) = (accu(h), pair_part(h, 0));
                    (init, call(h, MAP_INSERT, vec![a, key, expr]))
                }
                _ => {
                    let init = h.next_expr(Expr::Map(MapExpr { entries: vec![] }));
                    let a = accu(h);
                    (init, call(h, MAP_INSERT, vec![a, expr]))
                }
            };
            let step = match filter {
                Some(filter) => {
                    let a = accu(h);
                    call(h, operators::CONDITIONAL, vec![filter, step, a])
                }
                None => step,
            };
            let cond = literal(h, LiteralValue::Boolean(true.into()));
            (init, cond, step, accu(h))
        }
    };
    let iter_range = call(h, PAIRS, vec![target]);
    Ok(Some(h.next_expr(Expr::Comprehension(Box::new(
        ComprehensionExpr {
            iter_range,
            iter_var: PAIR.to_owned(),
            iter_var2: None,
            accu_var: RESULT.to_owned(),
            accu_init: init,
            loop_cond: cond,
            loop_step: step,
            result,
        },
    )))))
}

/// The `[index, element]` pairs of a list, or the `[key, value]` pairs of a map.
fn pairs<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [target] = take(args)?;
    let pairs: Vec<Value> = match Value::try_from(target.as_ref())? {
        Value::List(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| Value::from(vec![Value::Int(i as i64), v.clone()]))
            .collect(),
        Value::Map(map) => map
            .map
            .iter()
            .map(|(k, v)| Value::from(vec![Value::from(k), v.clone()]))
            .collect(),
        _ => return Err(super::unexpected(target.as_ref(), "list or map")),
    };
    let val: Box<dyn Val> = Value::from(pairs).try_into()?;
    Ok(CowVal::Owned(val))
}

/// The key as cel-go prints it in its error.
fn key_text(k: &Key) -> String {
    match k {
        Key::Int(i) => i.to_string(),
        Key::Uint(u) => u.to_string(),
        Key::Bool(b) => b.to_string(),
        Key::String(s) => s.to_string(),
    }
}

/// The map with the entry `key: value`, or the entries of another map, added: an error for a
/// key it has.
fn map_insert<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let map_of = |v: &dyn Val| match Value::try_from(v)? {
        Value::Map(m) => Ok(m),
        _ => Err(super::unexpected(v, "map")),
    };
    let mut args = args.into_iter();
    let map = map_of(args.next().as_deref().ok_or_else(missing)?)?;
    let entries: Vec<(Key, Value)> = match (args.next(), args.next()) {
        (Some(key), Some(value)) => {
            let key: Key = Value::try_from(key.as_ref())?
                .try_into()
                .map_err(ExecutionError::unsupported_key_type)?;
            vec![(key, Value::try_from(value.as_ref())?)]
        }
        (Some(other), None) => map_of(other.as_ref())?
            .map
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        _ => return Err(missing()),
    };
    let mut map: HashMap<Key, Value> = Arc::unwrap_or_clone(map.map);
    for (key, value) in entries {
        if map.contains_key(&key) {
            let message = format!("insert failed: key {} already exists", key_text(&key));
            return Err(error(MAP_INSERT, message));
        }
        map.insert(key, value);
    }
    let val: Box<dyn Val> = Value::Map(Map { map: Arc::new(map) }).try_into()?;
    Ok(CowVal::Owned(val))
}

fn missing() -> ExecutionError {
    ExecutionError::invalid_argument_count(2, 1)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{check, eval, fails, holds};
    use ::cel::Value;
    use std::collections::HashMap;

    // Expected values and messages are upstream's (k8s.io/apiserver 1.33's base environment).

    #[test]
    fn quantifiers() {
        holds("[1, 2].all(i, v, v > i)");
        check("[0, 2].all(i, v, v > i)", false);
        holds("{'a': 1, 'b': 2}.exists(k, v, k == 'b' && v == 2)");
        check("{'a': 1}.exists(k, v, v == 2)", false);
        holds("[5, 1, 5].existsOne(i, v, v == 1)");
        check("[5, 1, 5].exists_one(i, v, v == 5)", false);
        // Errors are absorbed as in the one-variable forms.
        holds("[0, 1].exists(i, v, 1 / v == 1)");
        // The variables shadow others, and do not leak.
        holds("[1].all(i, v, [10].all(i, w, i == 0 && v == 1 && w == 10))");
        // The one-variable forms are still there.
        holds("[1, 2].all(v, v > 0) && {'a': 1}.exists(k, k == 'a')");
    }

    #[test]
    fn transforms() {
        check("[1, 2, 3].transformList(i, v, i * v)", vec![0, 2, 6]);
        check("[1, 2, 3].transformList(i, v, v > 1, v * 10)", vec![20, 30]);
        check(
            "{'a': 1, 'b': 2}.transformMap(k, v, v + 1)",
            Value::from(HashMap::from([("a", 2), ("b", 3)])),
        );
        check(
            "{'a': 1, 'b': 2}.transformMap(k, v, v > 1, k + k)",
            Value::from(HashMap::from([("b", "bb")])),
        );
        check(
            "['x', 'y'].transformMap(i, v, v)",
            Value::from(HashMap::from([(0, "x"), (1, "y")])),
        );
        check(
            "{'a': 1}.transformMapEntry(k, v, {v: k})",
            Value::from(HashMap::from([(1, "a")])),
        );
        check("[1, 2].transformList(i, v, v).size()", 2);
        fails(
            "{'a': 1, 'b': 1}.transformMapEntry(k, v, {'same': v})",
            "insert failed: key same already exists",
        );
    }

    #[test]
    fn variables_must_be_two_names() {
        for (expr, message) in [
            ("[1].all(i, i, true)", "duplicate variable name: i"),
            ("[1].all(i, 1, true)", "argument must be a simple name"),
        ] {
            let e = super::super::Expr::compile(expr);
            let err = e.compile_error().unwrap_or_else(|| panic!("{expr} compiles"));
            assert!(err.contains(message), "{expr}: {err}");
        }
        assert!(eval("1.all(i, v, true)").is_err());
    }
}
