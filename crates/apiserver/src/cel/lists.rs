//! Kubernetes' lists library (upstream's `library/lists.go`), member functions of lists:
//! `isSorted`, `sum`, `min`, `max`, `indexOf`, `lastIndexOf`.
//!
//! Upstream declares them for lists of its comparable (or summable) types and checks that
//! when compiling; here the elements are checked when evaluating, through the capabilities
//! the `cel` crate gives them (`<` for comparable, `+` for summable).

use std::cmp::Ordering;

use ::cel::common::types::{CelInt, DYN_TYPE, LIST_TYPE};
use ::cel::common::value::{CowVal, Val};
use ::cel::{DeclarationError, Env, ExecutionError};

use super::{elements, error, of_bool, of_int, take, Ret};

pub(super) fn library(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload("isSorted", "list_is_sorted", LIST_TYPE, vec![], is_sorted)?;
    env.add_member_overload("sum", "list_sum", LIST_TYPE, vec![], sum)?;
    env.add_member_overload("min", "list_min", LIST_TYPE, vec![], min)?;
    env.add_member_overload("max", "list_max", LIST_TYPE, vec![], max)?;
    env.add_member_overload(
        "indexOf",
        "list_a_index_of_int",
        LIST_TYPE,
        vec![DYN_TYPE],
        index_of,
    )?;
    env.add_member_overload(
        "lastIndexOf",
        "list_a_last_index_of_int",
        LIST_TYPE,
        vec![DYN_TYPE],
        last_index_of,
    )?;
    Ok(())
}

fn compare(function: &str, a: &dyn Val, b: &dyn Val) -> Result<Ordering, ExecutionError> {
    a.as_comparer()
        .ok_or_else(|| error(function, format!("no such overload: {}", a.get_type().name())))?
        .compare(b)
}

fn is_sorted<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [list] = take(args)?;
    let elements = elements(list.as_ref())?;
    for pair in elements.windows(2) {
        if compare("isSorted", pair[0], pair[1])?.is_gt() {
            return of_bool(false);
        }
    }
    of_bool(true)
}

/// The sum of the elements, `0` for none (upstream's is the zero of the list's static type,
/// unknown here).
fn sum<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [list] = take(args)?;
    let elements = elements(list.as_ref())?;
    let Some((first, rest)) = elements.split_first() else {
        return Ok(CowVal::owned(CelInt::from(0)));
    };
    let mut total = first.clone_as_boxed();
    for item in rest {
        let adder = total
            .as_adder()
            .ok_or_else(|| error("sum", format!("no such overload: {}", total.get_type().name())))?;
        let next = adder.add(*item)?.into_owned();
        total = next;
    }
    Ok(CowVal::Owned(total))
}

/// The first of the least (or greatest, as `wanted` says) elements.
fn extreme<'b, 'v>(function: &str, wanted: Ordering, args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [list] = take(args)?;
    let elements = elements(list.as_ref())?;
    let mut best = *elements
        .first()
        .ok_or_else(|| error(function, format!("{function} called on empty list")))?;
    for &item in &elements[1..] {
        if compare(function, item, best)? == wanted {
            best = item;
        }
    }
    Ok(CowVal::Owned(best.clone_as_boxed()))
}

fn min<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    extreme("min", Ordering::Less, args)
}

fn max<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    extreme("max", Ordering::Greater, args)
}

fn index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [list, item] = take(args)?;
    let elements = elements(list.as_ref())?;
    let i = elements.iter().position(|e| e.equals(item.as_ref()));
    of_int(i.map_or(-1, |i| i as i64))
}

fn last_index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [list, item] = take(args)?;
    let elements = elements(list.as_ref())?;
    let i = elements.iter().rposition(|e| e.equals(item.as_ref()));
    of_int(i.map_or(-1, |i| i as i64))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{check, eval, fails, holds};
    use ::cel::Value;

    // Expected values are upstream's (k8s.io/apiserver 1.33's base environment).

    #[test]
    fn sums() {
        check("[1, 2, 3].sum()", 6);
        check("[1.0, 2.5].sum()", 3.5);
        check("[1u, 2u].sum()", Value::UInt(3));
        check("[].sum()", 0);
        assert!(eval("[1, 'a'].sum()").is_err());
    }

    #[test]
    fn extremes() {
        check("[3, 1, 2].min()", 1);
        check("[3, 1, 2].max()", 3);
        check("['b', 'a', 'c'].min()", "a");
        check("[1].min()", 1);
        check("([0] + []).min()", 0);
        fails("[].max()", "max called on empty list");
        fails("[].min()", "min called on empty list");
    }

    #[test]
    fn sortedness() {
        holds("[1, 2, 3].isSorted()");
        holds("['a', 'b', 'b', 'c'].isSorted()");
        check("[2.0, 1.0].isSorted()", false);
        holds("[1].isSorted() && [].isSorted()");
    }

    #[test]
    fn indexes() {
        check("[1, 2, 2, 3].indexOf(2)", 1);
        check("['a', 'b', 'b', 'c'].lastIndexOf('b')", 2);
        check("[1.0].indexOf(1.1)", -1);
        check("[].indexOf('string')", -1);
        // The strings extension's `indexOf` is still there.
        check("'abcb'.lastIndexOf('b')", 3);
    }
}
