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
use std::ops::Bound;

use serde_json::{json, Map, Value};

use r8s_api::patch_strategy::{self, ListKind, Node};

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

/// The leaf paths `v`, an object of the type `root` says, sets.
pub(crate) fn field_set(v: &Value, root: Node) -> BTreeSet<Path> {
    let mut out = BTreeSet::new();
    walk(v, root, &mut Vec::new(), &mut out);
    out.retain(|p| !p.is_empty() && !ignored(p));
    out
}

/// The path segment of a keyed list item: its key fields (or their defaults, when upstream's
/// schema has one) as a JSON object with sorted keys, as structured-merge-diff writes it.
/// `None` when the item is no object or has none of the keys.
fn item_key(item: &Value, keys: &[&str], item_type: Option<&str>) -> Option<String> {
    let obj = item.as_object()?;
    let mut sorted = keys.to_vec();
    sorted.sort_unstable();
    let mut key = Map::new();
    for k in sorted {
        let value = match obj.get(k) {
            Some(v) => v.clone(),
            None => match item_type.and_then(|t| patch_strategy::key_default(t, k)) {
                Some(d) => serde_json::from_str(d).ok()?,
                // Upstream refuses such an item; it is kept by the keys it has.
                None => continue,
            },
        };
        key.insert(k.to_owned(), value);
    }
    (!key.is_empty()).then(|| Value::Object(key).to_string())
}

fn walk(v: &Value, node: Node, prefix: &mut Path, out: &mut BTreeSet<Path>) {
    // An atomic object (a label selector, say) is one value.
    let granular = prefix.is_empty() || !node.is_atomic_map();
    match v {
        Value::Object(m) if granular && !m.is_empty() => {
            for (k, child) in m {
                prefix.push(Seg::Field(k.clone()));
                if !ignored(prefix) {
                    walk(child, node.member(k), prefix, out);
                }
                prefix.pop();
            }
        }
        Value::Array(items) if !items.is_empty() => {
            let kind = node.ssa_list();
            let item_node = node.item();
            match kind {
                ListKind::Set => {
                    for item in items {
                        let mut p = prefix.clone();
                        p.push(Seg::Value(item.to_string()));
                        out.insert(p);
                    }
                }
                ListKind::Map(keys) => {
                    let segs: Option<Vec<String>> =
                        items.iter().map(|i| item_key(i, keys, item_node.def())).collect();
                    let Some(segs) = segs else {
                        // Items without keys: the list is one value.
                        out.insert(prefix.clone());
                        return;
                    };
                    for (item, seg) in items.iter().zip(segs) {
                        prefix.push(Seg::Key(seg));
                        // The item itself, then its fields.
                        out.insert(prefix.clone());
                        walk(item, item_node, prefix, out);
                        prefix.pop();
                    }
                }
                ListKind::Atomic => {
                    out.insert(prefix.clone());
                }
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

/// `item` has the key: each key field, or, where the item leaves one out, its default (a
/// container port without a protocol is the key's `"protocol":"TCP"`).
fn matches_key(item: &Value, key: &Map<String, Value>) -> bool {
    key.iter().all(|(k, v)| match item.get(k) {
        Some(have) => have == v,
        None => patch_strategy::key_defaults().iter().any(|(_, field, default)| {
            field == k && serde_json::from_str::<Value>(default).ok().as_ref() == Some(v)
        }),
    })
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

/// Set `path` in `target` to what it is in `source`, creating what lies between. A keyed list
/// item's own path sets only its keys, unless `whole` (an atomic item, whose path is its
/// only one).
fn set_from(target: &mut Value, source: &Value, path: &[Seg], whole: bool) {
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
                    if whole {
                        items[pos] = value.clone();
                    }
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

/// Record a non-apply write by `manager` of an object of the type `root` says: the fields it
/// changed become its own.
pub(crate) fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    api_version: &str,
    root: Node,
) {
    let mut entries = old.map(read_entries).unwrap_or_default();
    let changed: BTreeSet<Path> = field_set(new, root)
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

/// Apply `applied` by `manager` over `live`, objects of the type `root` says: the merged
/// object, or the conflicts.
pub(crate) fn apply(
    live: &Value,
    applied: &Value,
    manager: &str,
    api_version: &str,
    force: bool,
    root: Node,
) -> Result<Value, ApiError> {
    let wanted = field_set(applied, root);
    let mut entries = read_entries(live);
    let is_me = |e: &Entry| e.manager == manager && e.operation == "Apply";
    let mut conflicts: Vec<(String, String, String)> = Vec::new();
    // A keyed list item's own path stands for its existence, not its whole value, unless the
    // item is atomic (its path has no fields below it).
    let atomic_item = |p: &Path| {
        matches!(p.last(), Some(Seg::Key(_)))
            && !wanted
                .range::<Path, _>((Bound::Excluded(p), Bound::Unbounded))
                .next()
                .is_some_and(|q| q.starts_with(p))
    };
    let differs = |p: &Path| {
        (!matches!(p.last(), Some(Seg::Key(_))) || atomic_item(p)) && get(live, p) != get(applied, p)
    };
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
        set_from(&mut merged, applied, p, atomic_item(p));
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

    fn deploy() -> Node {
        Node::root("apps", "v1", "Deployment")
    }

    fn deployment(replicas: i64, image: &str) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "web", "image": image}]}}}
        })
    }

    #[test]
    fn field_sets_key_lists_and_round_trip_through_managed_fields() {
        let set = field_set(&deployment(2, "nginx"), deploy());
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
    fn field_sets_follow_the_type_path() {
        let d = json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "finalizers": ["f"]},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {"spec": {
                "containers": [{"name": "web", "image": "nginx", "ports": [{"containerPort": 80}, {"containerPort": 53, "protocol": "UDP"}]}],
                "tolerations": [{"key": "a", "operator": "Exists"}],
                "topologySpreadConstraints": [{"topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", "maxSkew": 1}]
            }}}
        });
        let mut obj = d.clone();
        let set = field_set(&d, deploy());
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
        // Label selectors are atomic: one leaf.
        assert_eq!(trie["f:spec"]["f:selector"], json!({}));
        let pod = &trie["f:spec"]["f:template"]["f:spec"];
        let ports = &pod["f:containers"]["k:{\"name\":\"web\"}"]["f:ports"];
        // Keys in sorted order, an omitted protocol as its default.
        assert!(
            ports["k:{\"containerPort\":80,\"protocol\":\"TCP\"}"]["."].is_object(),
            "{ports}"
        );
        assert!(ports["k:{\"containerPort\":53,\"protocol\":\"UDP\"}"]["f:protocol"].is_object());
        assert_eq!(pod["f:tolerations"], json!({}));
        assert!(pod["f:topologySpreadConstraints"]
            ["k:{\"topologyKey\":\"zone\",\"whenUnsatisfiable\":\"DoNotSchedule\"}"]["f:maxSkew"]
            .is_object());
        assert!(trie["f:metadata"]["f:finalizers"]["v:\"f\""].is_object());
        assert_eq!(read_entries(&obj)[0].fields, set);
        // The item is found by its key, the default standing in for what it leaves out.
        let path = set
            .iter()
            .find(|p| display(p).ends_with("ports[containerPort=80,protocol=\"TCP\"]"))
            .unwrap();
        assert_eq!(get(&d, path).unwrap()["containerPort"], 80);
    }

    #[test]
    fn apply_conflicts_forces_and_removes_what_is_no_longer_applied() {
        let live = apply(
            &json!({}),
            &deployment(2, "nginx"),
            "alice",
            "apps/v1",
            false,
            deploy(),
        )
        .unwrap();
        // Same manager, changed values: no conflict.
        let live = apply(
            &live,
            &deployment(3, "nginx"),
            "alice",
            "apps/v1",
            false,
            deploy(),
        )
        .unwrap();
        assert_eq!(live["spec"]["replicas"], 3);
        // Another manager changing a field alice owns: conflict, in upstream's words.
        let bobs = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {"replicas": 5}});
        let err = apply(&live, &bobs, "bob", "apps/v1", false, deploy()).unwrap_err();
        assert_eq!(err.code, 409);
        assert_eq!(
            err.message,
            "Apply failed with 1 conflict: conflict with \"alice\" using apps/v1: .spec.replicas"
        );
        // Forced: bob takes replicas over; alice keeps the rest.
        let live = apply(&live, &bobs, "bob", "apps/v1", true, deploy()).unwrap();
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
        let live = apply(&live, &without_label, "alice", "apps/v1", false, deploy()).unwrap();
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
        let created = apply(
            &json!({}),
            &cm,
            "m",
            "v1",
            false,
            Node::root("", "v1", "ConfigMap"),
        )
        .unwrap();
        assert_eq!(read_entries(&created)[0].manager, "m");
        assert_eq!(created["data"]["a"], "1");
    }

    #[test]
    fn updates_take_the_fields_they_change() {
        let live = apply(
            &json!({}),
            &deployment(2, "nginx"),
            "alice",
            "apps/v1",
            false,
            deploy(),
        )
        .unwrap();
        let mut scaled = live.clone();
        scaled["spec"]["replicas"] = json!(7);
        record_update(Some(&live), &mut scaled, "kubectl-scale", "apps/v1", deploy());
        let err = apply(
            &scaled,
            &deployment(2, "nginx"),
            "alice",
            "apps/v1",
            false,
            deploy(),
        )
        .unwrap_err();
        assert!(
            err.message.contains("conflict with \"kubectl-scale\""),
            "{}",
            err.message
        );
    }
}
