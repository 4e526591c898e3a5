//! Entry points for the fuzz targets in `fuzz/` (cargo-fuzz): the decoders and the object
//! pipeline a request body goes through, callable on raw bytes without a running server.
//! Each returns nothing: the oracle is that none of them panics (the fuzzer aborts on a
//! panic) and that what they promise of their results holds (asserted here).
//!
//! The server's own target (`fuzz/fuzz_targets/api_request.rs`) drives these same paths
//! through HTTP; these are the fast, deterministic halves.

use serde_json::Value;

use super::apply;
use super::catalogue::{builtins, Resource};
use super::patch::{self, PatchType};
use super::subresource::View;
use super::{strategy, Filter, Query};
use crate::authn::UserInfo;

/// The built-in resource `pick` selects (every one is reachable).
fn resource(pick: u8) -> &'static Resource {
    let all = builtins();
    &all[usize::from(pick) % all.len()]
}

/// Split `data` at the first NUL: two inputs for targets that take two (an object and a
/// patch, a live object and an apply configuration).
fn two(data: &[u8]) -> (&[u8], &[u8]) {
    match data.iter().position(|b| *b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[]),
    }
}

/// An object body, as the create and update paths take it: `data[0]` picks the resource,
/// `data[1]` the encoding (JSON, or Kubernetes' protobuf), the rest is the body. Typed,
/// defaulted, prepared, validated for create and for an update onto itself, converted for
/// storage and back, its table row and selectable fields read.
pub fn object(data: &[u8]) {
    let [pick, how, body @ ..] = data else {
        return;
    };
    let def = resource(*pick);
    let decoded = if how % 2 == 0 {
        serde_json::from_slice::<Value>(body).ok()
    } else {
        crate::protobuf::decode(body).ok()
    };
    let Some(obj) = decoded else {
        return;
    };
    let Ok((mut obj, _warnings)) =
        super::typed(def, obj, "fuzz", &Query::parse(Some("fieldValidation=Warn")))
    else {
        return;
    };
    let s = &def.strategy;
    apply::record_update(
        None,
        &mut obj,
        "fuzz",
        &def.api_version(),
        patch::root_node(def, View::Main),
    );
    s.default(&mut obj);
    s.prepare_for_create(&UserInfo::default(), &mut obj);
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_owned();
    let _ = s.validate_name(&name);
    let _ = strategy::validate(def, &obj);
    let _ = s.validate_create(&obj);
    let _ = strategy::fields(def, &obj);
    let _ = s.cells(&obj);
    let _ = s.scale(&obj);
    let _ = s.holds_deletion(&obj);
    if let Some(grace) = s.default_grace_period(&obj) {
        let _ = s.is_graceful_delete(&obj, grace);
    }
    let old = obj.clone();
    let mut new = obj.clone();
    if s.prepare_for_update(&mut new, &old).is_ok() {
        let _ = strategy::validate_update(def, &new, &old);
        let _ = s.validate_main_update(&new, &old);
        let _ = s.generation_changed(&new, &old);
    }
    let mut deleting = obj.clone();
    s.prepare_for_delete(&mut deleting);
    if s.converts() {
        if let Ok(stored) = s.try_to_storage(obj) {
            let _ = s.try_served_from_storage(stored, &def.api_version());
        }
    }
}

/// A patch onto an object: `data[0]` picks the resource, `data[1]` the patch type (JSON
/// patch, merge patch, strategic merge patch, server-side apply); the rest is the live object
/// and the patch, split at the first NUL. The result is validated as an update.
pub fn patch(data: &[u8]) {
    let [pick, how, rest @ ..] = data else {
        return;
    };
    let def = resource(*pick);
    let (live, body) = two(rest);
    let Ok(mut live) = serde_json::from_slice::<Value>(live) else {
        return;
    };
    if !live.is_object() {
        return;
    }
    let root = patch::root_node(def, View::Main);
    let patched = match how % 4 {
        3 => {
            let Ok(applied) = patch::decode_apply_body(body) else {
                return;
            };
            if !applied.is_object() {
                return;
            }
            match apply::apply(&live, &applied, "fuzz", &def.api_version(), how & 4 != 0, root) {
                Ok(merged) => merged,
                Err(_) => return,
            }
        }
        kind => {
            let Ok(body) = serde_json::from_slice::<Value>(body) else {
                return;
            };
            let kind = match kind {
                0 => PatchType::Json,
                1 => PatchType::Merge,
                _ => PatchType::Strategic,
            };
            let old = live.clone();
            if patch::apply(kind, &mut live, &body, root).is_err() {
                return;
            }
            apply::record_update(Some(&old), &mut live, "fuzz", &def.api_version(), root);
            live
        }
    };
    assert!(
        patched.is_object(),
        "a patch that succeeds leaves an object, not {patched}"
    );
    let Ok((obj, _)) = super::typed(def, patched, "fuzz", &Query::parse(None)) else {
        return;
    };
    let old = obj.clone();
    let _ = strategy::validate_update(def, &obj, &old);
}

/// A list or watch request's query string: the parameters, the label and field selectors for
/// the resource `data[0]` picks, the continue token, the integers.
pub fn query(data: &[u8]) {
    let [pick, rest @ ..] = data else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let def = resource(*pick);
    let query = Query::parse(Some(text));
    let _ = query.check_integers(&["limit", "timeoutSeconds", "gracePeriodSeconds"]);
    let _ = query.flag("watch");
    if let Ok(filter) = Filter::from_query(def, &query) {
        let _ = filter;
    }
    if let Some(token) = query.get("continue") {
        if let Ok((revision, start)) = super::decode_continue(token) {
            // What a token decodes to encodes back to a token that decodes to the same.
            let again = super::encode_continue(revision, &start);
            let (r2, s2) = super::decode_continue(&again).expect("a token made here decodes");
            assert_eq!((r2, s2), (revision, start));
        }
    }
    let _ = crate::request_info::parse_request(&http::Method::GET, text, Some(text));
}

/// A body in Kubernetes' protobuf encoding (the `k8s\0` envelope), read into JSON.
pub fn protobuf(data: &[u8]) {
    if let Ok(v) = crate::protobuf::decode(data) {
        assert!(
            serde_json::to_vec(&v).is_ok(),
            "a decoded body serializes as JSON"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use r8s_api::fuzzing::replay;

    /// The seed corpora and every input the fuzzers once crashed on (`fuzz/corpus/*`,
    /// `fuzz/regressions/*`) go through the entry points again.
    #[test]
    fn the_corpora_replay_without_a_panic() {
        for (target, run) in [
            ("object", object as fn(&[u8])),
            ("patch", patch),
            ("query", query),
            ("protobuf", protobuf),
        ] {
            assert!(replay(target, run) > 0, "the {target} corpus is empty");
        }
    }
}
