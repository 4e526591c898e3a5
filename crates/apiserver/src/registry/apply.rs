//! Server-side apply (`PATCH` with `application/apply-patch+yaml`) and field ownership
//! (`metadata.managedFields`), in the shape of upstream's structured-merge-diff:
//!
//! - a field set is the set of leaf paths an object sets; lists with a merge key are keyed by
//!   it (`k:{"name":"web"}`), `finalizers` are sets of values (`v:"x"`), other lists are atomic;
//! - every write records which manager set which fields: `Apply` for appliers, `Update` for
//!   the fields a create, update or patch changed (taking them from other managers);
//! - an apply that changes a field another manager owns is a conflict (409) unless forced
//!   (`force=true`), which takes the field over; fields the applier owned and no longer applies
//!   are removed if no one else owns them.

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};

use crate::status::ApiError;

/// One step of a field path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Seg {
    Field(String),
    /// A list item by its merge key, e.g. `{"name":"web"}` (serialised JSON, sorted keys).
    Key(String),
    /// A member of a set-like list of values (serialised JSON).
    Value(String),
}

pub(crate) type Path = Vec<Seg>;

/// Fields no manager owns: identity and bookkeeping.
fn ignored(path: &[Seg]) -> bool {
    match path {
        [Seg::Field(f)] => matches!(f.as_str(), "apiVersion" | "kind" | "status"),
        [Seg::Field(m), Seg::Field(f), ..] if m == "metadata" => matches!(
            f.as_str(),
            "name"
                | "namespace"
                | "uid"
                | "resourceVersion"
                | "generation"
                | "creationTimestamp"
                | "managedFields"
                | "deletionTimestamp"
                | "deletionGracePeriodSeconds"
                | "selfLink"
        ),
        _ => false,
    }
}

fn merge_key(field: &str, sample: &Value) -> Option<&'static str> {
    Some(match field {
        "containers" | "initContainers" | "ephemeralContainers" | "env" | "volumes" | "imagePullSecrets" => {
            "name"
        }
        "volumeMounts" => "mountPath",
        "ports" if sample.get("containerPort").is_some() => "containerPort",
        "ports" => "port",
        "conditions" | "addresses" => "type",
        "ownerReferences" => "uid",
        _ => return None,
    })
}

/// The leaf paths `v` sets.
pub(crate) fn field_set(v: &Value) -> BTreeSet<Path> {
    let mut out = BTreeSet::new();
    walk(v, None, &mut Vec::new(), &mut out);
    out.retain(|p| !p.is_empty() && !ignored(p));
    out
}

fn walk(v: &Value, field: Option<&str>, prefix: &mut Path, out: &mut BTreeSet<Path>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                prefix.push(Seg::Field(k.clone()));
                if !ignored(prefix) {
                    walk(child, Some(k), prefix, out);
                }
                prefix.pop();
            }
        }
        Value::Array(items) if field == Some("finalizers") => {
            for item in items {
                let mut p = prefix.clone();
                p.push(Seg::Value(item.to_string()));
                out.insert(p);
            }
        }
        Value::Array(items) if !items.is_empty() && field.and_then(|f| merge_key(f, &items[0])).is_some() => {
            let key = field.and_then(|f| merge_key(f, &items[0])).expect("checked");
            for item in items {
                prefix.push(Seg::Key(json!({ key: item[key] }).to_string()));
                // The item itself, then its fields.
                out.insert(prefix.clone());
                walk(item, None, prefix, out);
                prefix.pop();
            }
        }
        _ => {
            out.insert(prefix.clone());
        }
    }
}

fn key_of(seg: &str) -> Option<Map<String, Value>> {
    serde_json::from_str::<Value>(seg)
        .ok()
        .and_then(|v| v.as_object().cloned())
}

fn matches_key(item: &Value, key: &Map<String, Value>) -> bool {
    key.iter().all(|(k, v)| item.get(k) == Some(v))
}

/// The value at `path`, if present.
pub(crate) fn get<'a>(v: &'a Value, path: &[Seg]) -> Option<&'a Value> {
    let mut cur = v;
    for seg in path {
        cur = match seg {
            Seg::Field(f) => cur.get(f)?,
            Seg::Key(k) => {
                let key = key_of(k)?;
                cur.as_array()?.iter().find(|i| matches_key(i, &key))?
            }
            Seg::Value(val) => {
                let want: Value = serde_json::from_str(val).ok()?;
                cur.as_array()?.iter().find(|i| **i == want)?
            }
        };
    }
    Some(cur)
}

/// Set `path` in `target` to what it is in `source`, creating what lies between.
fn set_from(target: &mut Value, source: &Value, path: &[Seg]) {
    let Some(value) = get(source, path) else { return };
    let mut cur = target;
    for (i, seg) in path.iter().enumerate() {
        let last = i + 1 == path.len();
        match seg {
            Seg::Field(f) => {
                if !cur.is_object() {
                    *cur = json!({});
                }
                let m = cur.as_object_mut().expect("made an object");
                if last {
                    m.insert(f.clone(), value.clone());
                    return;
                }
                cur = m.entry(f.clone()).or_insert(Value::Null);
            }
            Seg::Key(k) => {
                let Some(key) = key_of(k) else { return };
                if !cur.is_array() {
                    *cur = json!([]);
                }
                let items = cur.as_array_mut().expect("made an array");
                let pos = match items.iter().position(|it| matches_key(it, &key)) {
                    Some(p) => p,
                    None => {
                        items.push(Value::Object(key.clone()));
                        items.len() - 1
                    }
                };
                if last {
                    return;
                }
                cur = &mut items[pos];
            }
            Seg::Value(_) => {
                if !cur.is_array() {
                    *cur = json!([]);
                }
                let items = cur.as_array_mut().expect("made an array");
                if !items.contains(value) {
                    items.push(value.clone());
                }
                return;
            }
        }
    }
}

/// Remove `path` from `v`.
fn remove(v: &mut Value, path: &[Seg]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for seg in parents {
        let next = match seg {
            Seg::Field(f) => cur.get_mut(f),
            Seg::Key(k) => {
                let Some(key) = key_of(k) else { return };
                cur.as_array_mut()
                    .and_then(|a| a.iter_mut().find(|i| matches_key(i, &key)))
            }
            Seg::Value(_) => None,
        };
        let Some(next) = next else { return };
        cur = next;
    }
    match last {
        Seg::Field(f) => {
            if let Some(m) = cur.as_object_mut() {
                m.remove(f);
            }
        }
        Seg::Key(k) => {
            if let (Some(key), Some(a)) = (key_of(k), cur.as_array_mut()) {
                a.retain(|i| !matches_key(i, &key));
            }
        }
        Seg::Value(val) => {
            if let (Ok(want), Some(a)) = (serde_json::from_str::<Value>(val), cur.as_array_mut()) {
                a.retain(|i| *i != want);
            }
        }
    }
}

/// One `managedFields` entry.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub manager: String,
    pub operation: String,
    pub api_version: String,
    pub time: String,
    pub fields: BTreeSet<Path>,
}

fn to_trie(fields: &BTreeSet<Path>) -> Value {
    let mut root = json!({});
    for path in fields {
        let mut cur = &mut root;
        for seg in path {
            let k = match seg {
                Seg::Field(f) => format!("f:{f}"),
                Seg::Key(k) => format!("k:{k}"),
                Seg::Value(v) => format!("v:{v}"),
            };
            cur = cur
                .as_object_mut()
                .expect("trie nodes are objects")
                .entry(k)
                .or_insert(json!({}));
        }
        if matches!(path.last(), Some(Seg::Key(_))) {
            cur.as_object_mut().expect("object").insert(".".into(), json!({}));
        }
    }
    root
}

fn from_trie(v: &Value, prefix: &mut Path, out: &mut BTreeSet<Path>) {
    let Some(m) = v.as_object() else { return };
    if m.is_empty() && !prefix.is_empty() {
        out.insert(prefix.clone());
        return;
    }
    for (k, child) in m {
        if k == "." {
            out.insert(prefix.clone());
            continue;
        }
        let seg = if let Some(f) = k.strip_prefix("f:") {
            Seg::Field(f.to_owned())
        } else if let Some(key) = k.strip_prefix("k:") {
            Seg::Key(key.to_owned())
        } else if let Some(val) = k.strip_prefix("v:") {
            Seg::Value(val.to_owned())
        } else {
            continue;
        };
        prefix.push(seg);
        from_trie(child, prefix, out);
        prefix.pop();
    }
}

pub(crate) fn read_entries(obj: &Value) -> Vec<Entry> {
    obj["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let mut fields = BTreeSet::new();
            from_trie(&e["fieldsV1"], &mut Vec::new(), &mut fields);
            Entry {
                manager: e["manager"].as_str().unwrap_or("").to_owned(),
                operation: e["operation"].as_str().unwrap_or("Update").to_owned(),
                api_version: e["apiVersion"].as_str().unwrap_or("").to_owned(),
                time: e["time"].as_str().unwrap_or("").to_owned(),
                fields,
            }
        })
        .collect()
}

pub(crate) fn write_entries(obj: &mut Value, entries: &[Entry]) {
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": e.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": to_trie(&e.fields),
            })
        })
        .collect();
    let m = super::meta::meta_mut(obj);
    if list.is_empty() {
        m.remove("managedFields");
    } else {
        m.insert("managedFields".into(), Value::Array(list));
    }
}

/// Record a non-apply write by `manager`: the fields it changed become its own.
pub(crate) fn record_update(old: Option<&Value>, new: &mut Value, manager: &str, api_version: &str) {
    let mut entries = old.map(read_entries).unwrap_or_default();
    let changed: BTreeSet<Path> = field_set(new)
        .into_iter()
        .filter(|p| old.map(|o| get(o, p) != get(new, p)).unwrap_or(true))
        .collect();
    if changed.is_empty() {
        write_entries(new, &entries);
        return;
    }
    for e in entries
        .iter_mut()
        .filter(|e| !(e.manager == manager && e.operation == "Update"))
    {
        e.fields.retain(|p| !changed.contains(p));
    }
    match entries
        .iter_mut()
        .find(|e| e.manager == manager && e.operation == "Update")
    {
        Some(e) => {
            e.fields.extend(changed);
            e.time = super::meta::now_rfc3339();
        }
        None => entries.push(Entry {
            manager: manager.to_owned(),
            operation: "Update".into(),
            api_version: api_version.to_owned(),
            time: super::meta::now_rfc3339(),
            fields: changed,
        }),
    }
    write_entries(new, &entries);
}

/// Apply `applied` by `manager` over `live`: the merged object, or the conflicts.
pub(crate) fn apply(
    live: &Value,
    applied: &Value,
    manager: &str,
    api_version: &str,
    force: bool,
) -> Result<Value, ApiError> {
    let wanted = field_set(applied);
    let mut entries = read_entries(live);
    let is_me = |e: &Entry| e.manager == manager && e.operation == "Apply";
    let mut conflicts: Vec<(String, String, String)> = Vec::new();
    // A keyed list item's own path stands for its existence, not its whole value.
    let differs = |p: &Path| !matches!(p.last(), Some(Seg::Key(_))) && get(live, p) != get(applied, p);
    for e in entries.iter().filter(|e| !is_me(e)) {
        for p in e.fields.intersection(&wanted) {
            if differs(p) {
                conflicts.push((e.manager.clone(), e.api_version.clone(), display(p)));
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflict_error(&conflicts));
    }
    if force {
        for e in entries.iter_mut().filter(|e| !is_me(e)) {
            e.fields.retain(|p| !(wanted.contains(p) && differs(p)));
        }
    }
    let previous = entries
        .iter()
        .find(|e| is_me(e))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    let mut merged = live.clone();
    for p in &wanted {
        set_from(&mut merged, applied, p);
    }
    // What this manager applied before and no longer does goes, unless someone else owns it.
    for p in previous.difference(&wanted) {
        if !entries.iter().filter(|e| !is_me(e)).any(|e| e.fields.contains(p)) {
            remove(&mut merged, p);
        }
    }
    entries.retain(|e| !is_me(e));
    entries.push(Entry {
        manager: manager.to_owned(),
        operation: "Apply".into(),
        api_version: api_version.to_owned(),
        time: super::meta::now_rfc3339(),
        fields: wanted,
    });
    write_entries(&mut merged, &entries);
    Ok(merged)
}

/// A path as upstream prints it in conflicts: `.spec.replicas`,
/// `.spec.containers[name="web"].image`.
fn display(p: &[Seg]) -> String {
    let mut s = String::new();
    for seg in p {
        match seg {
            Seg::Field(f) => {
                s.push('.');
                s.push_str(f);
            }
            Seg::Key(k) => {
                let key = key_of(k).unwrap_or_default();
                let inner: Vec<String> = key.iter().map(|(k, v)| format!("{k}={v}")).collect();
                s.push_str(&format!("[{}]", inner.join(",")));
            }
            Seg::Value(v) => s.push_str(&format!("[{v}]")),
        }
    }
    s
}

fn conflict_error(conflicts: &[(String, String, String)]) -> ApiError {
    let message = if conflicts.len() == 1 {
        let (m, v, p) = &conflicts[0];
        format!("Apply failed with 1 conflict: conflict with \"{m}\" using {v}: {p}")
    } else {
        let mut by_manager: Vec<(String, String, Vec<String>)> = Vec::new();
        for (m, v, p) in conflicts {
            match by_manager.iter_mut().find(|(bm, _, _)| bm == m) {
                Some((_, _, ps)) => ps.push(p.clone()),
                None => by_manager.push((m.clone(), v.clone(), vec![p.clone()])),
            }
        }
        let parts: Vec<String> = by_manager
            .iter()
            .map(|(m, v, ps)| format!("conflicts with \"{m}\" using {v}:\n- {}", ps.join("\n- ")))
            .collect();
        format!(
            "Apply failed with {} conflicts: {}",
            conflicts.len(),
            parts.join("\n")
        )
    };
    ApiError::new(409, "Conflict", message).with_details(json!({
        "causes": conflicts.iter().map(|(m, _, p)| json!({
            "reason": "FieldManagerConflict",
            "message": format!("conflict with \"{m}\""),
            "field": p,
        })).collect::<Vec<_>>(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(replicas: i64, image: &str) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "web", "image": image}]}}}
        })
    }

    #[test]
    fn field_sets_key_lists_and_round_trip_through_managed_fields() {
        let set = field_set(&deployment(2, "nginx"));
        let shown: Vec<String> = set.iter().map(|p| display(p)).collect();
        assert!(shown.contains(&".spec.replicas".to_owned()));
        assert!(shown.contains(&".spec.template.spec.containers[name=\"web\"].image".to_owned()));
        assert!(shown.contains(&".metadata.labels.app".to_owned()));
        assert!(!shown.iter().any(|s| s == ".metadata.name" || s == ".kind"));
        let mut obj = deployment(2, "nginx");
        write_entries(
            &mut obj,
            &[Entry {
                manager: "m".into(),
                operation: "Apply".into(),
                api_version: "apps/v1".into(),
                time: "t".into(),
                fields: set.clone(),
            }],
        );
        let trie = &obj["metadata"]["managedFields"][0]["fieldsV1"];
        assert!(
            trie["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"web\"}"]["."].is_object()
        );
        assert_eq!(read_entries(&obj)[0].fields, set);
    }

    #[test]
    fn apply_conflicts_forces_and_removes_what_is_no_longer_applied() {
        let live = apply(&json!({}), &deployment(2, "nginx"), "alice", "apps/v1", false).unwrap();
        // Same manager, changed values: no conflict.
        let live = apply(&live, &deployment(3, "nginx"), "alice", "apps/v1", false).unwrap();
        assert_eq!(live["spec"]["replicas"], 3);
        // Another manager changing a field alice owns: conflict, in upstream's words.
        let bobs = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {"replicas": 5}});
        let err = apply(&live, &bobs, "bob", "apps/v1", false).unwrap_err();
        assert_eq!(err.code, 409);
        assert_eq!(
            err.message,
            "Apply failed with 1 conflict: conflict with \"alice\" using apps/v1: .spec.replicas"
        );
        // Forced: bob takes replicas over; alice keeps the rest.
        let live = apply(&live, &bobs, "bob", "apps/v1", true).unwrap();
        assert_eq!(live["spec"]["replicas"], 5);
        let entries = read_entries(&live);
        let alice = entries.iter().find(|e| e.manager == "alice").unwrap();
        assert!(!alice.fields.iter().any(|p| display(p) == ".spec.replicas"));
        // Alice stops applying the label: it goes (no one else owns it).
        let mut without_label = deployment(5, "nginx");
        without_label["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("labels");
        without_label["spec"].as_object_mut().unwrap().remove("replicas");
        let live = apply(&live, &without_label, "alice", "apps/v1", false).unwrap();
        assert!(live["metadata"]["labels"].get("app").is_none(), "{live}");
        assert_eq!(
            live["spec"]["template"]["spec"]["containers"][0]["image"],
            "nginx"
        );
        assert_eq!(live["spec"]["replicas"], 5, "bob still owns replicas");
    }

    #[test]
    fn applying_to_nothing_records_the_applier() {
        let cm =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}});
        let created = apply(&json!({}), &cm, "m", "v1", false).unwrap();
        assert_eq!(read_entries(&created)[0].manager, "m");
        assert_eq!(created["data"]["a"], "1");
    }

    #[test]
    fn updates_take_the_fields_they_change() {
        let live = apply(&json!({}), &deployment(2, "nginx"), "alice", "apps/v1", false).unwrap();
        let mut scaled = live.clone();
        scaled["spec"]["replicas"] = json!(7);
        record_update(Some(&live), &mut scaled, "kubectl-scale", "apps/v1");
        let err = apply(&scaled, &deployment(2, "nginx"), "alice", "apps/v1", false).unwrap_err();
        assert!(
            err.message.contains("conflict with \"kubectl-scale\""),
            "{}",
            err.message
        );
    }
}
