//! Versions of one resource that share storage: `events.k8s.io/v1` Events are stored as core
//! `v1` Events (as upstream does), so `kubectl get events` shows what recorders write through
//! either API. Objects are converted on their way into and out of storage.

use crate::registry::Resource;
use serde_json::{json, Map, Value};

/// `events.k8s.io/v1` field → core `v1` field (upstream's `events/v1` conversion).
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// Whether `def` is stored in another version's form.
pub(crate) fn converts(def: &Resource) -> bool {
    def.strategy.converts()
}

/// Rename fields of `obj` (`from` → `to`) and make it an Event of `api_version`.
fn rename(obj: Value, pairs: impl Iterator<Item = (&'static str, &'static str)>, api_version: &str) -> Value {
    let Value::Object(mut o) = obj else { return obj };
    for (from, to) in pairs {
        if let Some(v) = o.remove(from) {
            o.insert(to.to_owned(), v);
        }
    }
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!("Event"));
    for (k, v) in o {
        if k != "apiVersion" && k != "kind" {
            out.insert(k, v);
        }
    }
    Value::Object(out)
}

/// An `events.k8s.io/v1` Event as a core `v1` Event.
pub(crate) fn event_to_core(obj: Value) -> Value {
    let mut core = rename(obj, EVENT_FIELDS.iter().copied(), "v1");
    if core.get("involvedObject").is_none() {
        core["involvedObject"] = json!({});
    }
    core
}

/// A core `v1` Event as an Event of `api_version` (`events.k8s.io/v1`).
pub(crate) fn event_from_core(obj: Value, api_version: &str) -> Value {
    rename(obj, EVENT_FIELDS.iter().map(|(a, b)| (*b, *a)), api_version)
}

/// The stored form of an object of `def`.
pub(crate) fn to_storage(def: &Resource, obj: Value) -> Value {
    let s = &def.strategy;
    if s.converts() {
        s.to_storage(obj)
    } else {
        obj
    }
}

/// An object of `def` from its stored form.
pub(crate) fn from_storage(def: &Resource, obj: Value) -> Value {
    let s = &def.strategy;
    if s.converts() {
        s.served_from_storage(obj, &def.api_version())
    } else {
        obj
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_through_core_storage() {
        let def = crate::registry::catalogue::builtin("events.k8s.io", "v1", "events").unwrap();
        let ev = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "default"},
            "regarding": {"kind": "Pod", "name": "p"},
            "note": "Successfully assigned default/p to n1",
            "reason": "Scheduled", "type": "Normal",
            "reportingController": "default-scheduler", "reportingInstance": "r8s",
            "eventTime": "2026-11-22T03:00:00.000000Z", "action": "Binding"
        });
        let stored = to_storage(def, ev.clone());
        assert_eq!(stored["apiVersion"], "v1");
        assert_eq!(stored["involvedObject"]["name"], "p");
        assert_eq!(stored["message"], "Successfully assigned default/p to n1");
        assert_eq!(stored["reportingComponent"], "default-scheduler");
        assert!(stored.get("note").is_none());
        let back = from_storage(def, stored);
        assert_eq!(back, ev);
        let core = crate::registry::catalogue::builtin("", "v1", "events").unwrap();
        assert_eq!(
            to_storage(core, ev.clone()),
            ev,
            "core events are stored as they are"
        );
    }
}
