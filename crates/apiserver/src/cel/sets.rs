//! cel-go's sets extension (`ext.Sets()`): `sets.contains`, `sets.equivalent` and
//! `sets.intersects`, on lists as sets, elements compared with CEL's equality (so `1`, `1u`
//! and `1.0` are one element).

use ::cel::common::types::LIST_TYPE;
use ::cel::common::value::{CowVal, Val};
use ::cel::{DeclarationError, Env, ExecutionError};

use super::{elements, of_bool, take, Ret};

pub(super) fn library(env: &mut Env) -> Result<(), DeclarationError> {
    let lists = || vec![LIST_TYPE, LIST_TYPE];
    env.add_overload("sets.contains", "list_sets_contains_list", lists(), contains)?;
    env.add_overload(
        "sets.equivalent",
        "list_sets_equivalent_list",
        lists(),
        equivalent,
    )?;
    env.add_overload(
        "sets.intersects",
        "list_sets_intersects_list",
        lists(),
        intersects,
    )?;
    Ok(())
}

/// The elements of two lists.
fn two_lists<'a>(a: &'a dyn Val, b: &'a dyn Val) -> Result<[Vec<&'a dyn Val>; 2], ExecutionError> {
    Ok([elements(a)?, elements(b)?])
}

/// Whether every element of `sub` is in `list`.
fn all_in(list: &[&dyn Val], sub: &[&dyn Val]) -> bool {
    sub.iter().all(|x| list.iter().any(|y| y.equals(*x)))
}

fn contains<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [a, b] = take(args)?;
    let [a, b] = two_lists(a.as_ref(), b.as_ref())?;
    of_bool(all_in(&a, &b))
}

fn equivalent<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [a, b] = take(args)?;
    let [a, b] = two_lists(a.as_ref(), b.as_ref())?;
    of_bool(all_in(&a, &b) && all_in(&b, &a))
}

fn intersects<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [a, b] = take(args)?;
    let [a, b] = two_lists(a.as_ref(), b.as_ref())?;
    of_bool(a.iter().any(|x| b.iter().any(|y| y.equals(*x))))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{check, holds};

    // Expected values are upstream's (k8s.io/apiserver 1.33's base environment).

    #[test]
    fn sets() {
        holds("sets.contains([1, 2, 3], [2])");
        holds("sets.contains([1, 2], [])");
        check("sets.contains([1, 2], [3])", false);
        holds("sets.equivalent([1, 2, 2], [2, 1])");
        check("sets.equivalent([1, 2], [1])", false);
        holds("sets.intersects([1, 2], [2, 3])");
        check("sets.intersects([1], [2])", false);
        check("sets.intersects([], [])", false);
        holds("sets.contains([1, 2.0, 3u], [1u, 2, 3.0])");
        holds("sets.contains([[1], {'a': 'b'}], [{'a': 'b'}])");
    }
}
