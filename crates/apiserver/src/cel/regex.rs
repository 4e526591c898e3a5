//! Kubernetes' regex library (upstream's `library/regex.go`): `find` and `findAll` (with an
//! optional limit) on strings, RE2 syntax as the `regex` crate has it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use ::cel::common::types::{INT_TYPE, STRING_TYPE};
use ::cel::common::value::CowVal;
use ::cel::{DeclarationError, Env, ExecutionError};
use regex::Regex;

use super::{error, int, of_string, of_strings, string, take, Ret};

pub(super) fn library(env: &mut Env) -> Result<(), DeclarationError> {
    let (find_all_id, find_all_n_id) = ("string_find_all_string", "string_find_all_string_int");
    env.add_member_overload("find", "string_find_string", STRING_TYPE, vec![STRING_TYPE], find)?;
    env.add_member_overload("findAll", find_all_id, STRING_TYPE, vec![STRING_TYPE], find_all)?;
    let args = vec![STRING_TYPE, INT_TYPE];
    env.add_member_overload("findAll", find_all_n_id, STRING_TYPE, args, find_all_n)?;
    Ok(())
}

/// `pattern` compiled, once per process for the patterns seen last (upstream compiles a
/// literal pattern once per program).
fn compiled(function: &str, pattern: &str) -> Result<Arc<Regex>, ExecutionError> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<Regex>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(re) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(pattern) {
        return Ok(Arc::clone(re));
    }
    let re = Arc::new(Regex::new(pattern).map_err(|e| error(function, format!("Illegal regex: {e}")))?);
    let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    if cache.len() >= 256 {
        cache.clear();
    }
    cache.insert(pattern.to_owned(), Arc::clone(&re));
    Ok(re)
}

fn find<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [s, pattern] = take(args)?;
    let re = compiled("find", string(&pattern)?)?;
    of_string(re.find(string(&s)?).map_or("", |m| m.as_str()))
}

fn find_all<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [s, pattern] = take(args)?;
    matches(string(&s)?, string(&pattern)?, -1)
}

fn find_all_n<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [s, pattern, n] = take(args)?;
    matches(string(&s)?, string(&pattern)?, int(&n)?)
}

/// The matches, at most `limit` of them unless it is negative (Go's `FindAllString`).
fn matches<'b, 'v>(s: &str, pattern: &str, limit: i64) -> Ret<'b, 'v> {
    let re = compiled("findAll", pattern)?;
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    of_strings(re.find_iter(s).take(limit).map(|m| m.as_str().to_owned()))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{check, eval};
    use ::cel::Value;

    // Expected values are upstream's (k8s.io/apiserver 1.33's base environment).

    #[test]
    fn find() {
        check("'abc'.find('[bc]+')", "bc");
        check("'abc 123'.find('[0-9]+')", "123");
        check("'abc 123'.find('xyz')", "");
        let err = eval("'abc'.find('[')").unwrap_err();
        assert!(err.starts_with("Illegal regex: "), "{err}");
    }

    #[test]
    fn find_all() {
        check("'123 abc 456'.findAll('[0-9]+')", vec!["123", "456"]);
        // Empty matches too, but not one right after a match: as Go's.
        check(
            "'123 abc 456'.findAll('[0-9]*')",
            vec!["123", "", "", "", "", "456"],
        );
        check("'123 abc 456'.findAll('[0-9]+', 1)", vec!["123"]);
        check("'123 abc 456'.findAll('[0-9]+', 0)", Value::List(vec![].into()));
        check("'123 abc 456'.findAll('[0-9]+', -1)", vec!["123", "456"]);
        check("'123 abc 456'.findAll('xyz')", Value::List(vec![].into()));
    }
}
