//! Every keyed list of every served kind, from the generated patch-strategy table: a strategic
//! merge patch of one item by its merge key, and server-side applies of one item by two
//! managers, leave the other item alone and change the one addressed.

use std::collections::{BTreeMap, VecDeque};

use r8s_api::patch_strategy::{self, FieldInfo, ListKind, Node, Shape};
use serde_json::{json, Map, Value};

use super::{apply, patch};

/// One step from a kind's root to a type.
#[derive(Clone, Debug)]
enum Step {
    Field(&'static str),
    /// The one item of a keyed list (identified by all its keys).
    Item(&'static str, Vec<&'static str>),
    /// The value `x` of a map.
    MapValue(&'static str),
}

/// A keyed list somewhere in a kind: the root, the steps to the list's owner, and the list.
struct Site {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    path: Vec<Step>,
    list: &'static FieldInfo,
}

/// Every key a list's items need to be addressed by SMP and by SSA.
fn all_keys(f: &'static FieldInfo) -> Vec<&'static str> {
    let mut keys: Vec<&'static str> = match f.ssa_list() {
        ListKind::Map(keys) => keys.to_vec(),
        _ => Vec::new(),
    };
    if let Some(k) = f.smp_merge_key() {
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys
}

fn keyed(f: &'static FieldInfo) -> bool {
    f.shape == Shape::List
        && f.child().is_some()
        && (f.smp_merge_key().is_some() || matches!(f.ssa_list(), ListKind::Map(_)))
}

/// The keyed lists reachable from the served kinds' roots, each with the shortest path to its
/// owner that passes only through objects, maps and keyed lists (an atomic list or map on the
/// way would make the patch replace everything below it).
fn sites() -> Vec<Site> {
    let mut out = Vec::new();
    for def in r8s_api::catalogue() {
        let Some(root) = patch_strategy::root_type(def.group, def.version, def.kind) else {
            continue;
        };
        let mut seen: BTreeMap<&str, Vec<Step>> = BTreeMap::new();
        let mut queue = VecDeque::from([(root, Vec::new())]);
        while let Some((ty, path)) = queue.pop_front() {
            if seen.contains_key(ty) || (patch_strategy::map_type(ty) == Some("atomic") && !path.is_empty()) {
                continue;
            }
            seen.insert(ty, path.clone());
            for f in patch_strategy::fields_of(ty) {
                let Some(child) = f.child() else { continue };
                if keyed(f) {
                    out.push(Site {
                        group: def.group,
                        version: def.version,
                        kind: def.kind,
                        path: path.clone(),
                        list: f,
                    });
                }
                let step = match f.shape {
                    _ if f.map_type == "atomic" => continue,
                    Shape::Object => Step::Field(f.name),
                    Shape::Map => Step::MapValue(f.name),
                    Shape::List if keyed(f) && f.smp_merge_key().is_some() => Step::Item(f.name, all_keys(f)),
                    _ => continue,
                };
                let mut p = path.clone();
                p.push(step);
                queue.push_back((child, p));
            }
        }
    }
    out
}

/// A value for a key field: numbers for ports, strings otherwise.
fn key_value(field: &str, n: u64) -> Value {
    if field.to_ascii_lowercase().ends_with("port") {
        json!(8000 + n)
    } else if field == "protocol" {
        json!(["TCP", "UDP"][n as usize % 2])
    } else {
        json!(format!("{field}-{n}"))
    }
}

fn item(keys: &[&str], n: u64, extra: &[(&str, Value)]) -> Value {
    let mut m = Map::new();
    for k in keys {
        m.insert((*k).to_owned(), key_value(k, n));
    }
    for (k, v) in extra {
        m.insert((*k).to_owned(), v.clone());
    }
    Value::Object(m)
}

/// An object of the site's kind with `list` at the site.
fn object_with(site: &Site, list: Value) -> Value {
    let mut inner = json!({ site.list.name: list });
    for step in site.path.iter().rev() {
        inner = match step {
            Step::Field(name) => json!({ *name: inner }),
            Step::MapValue(name) => json!({ *name: {"x": inner} }),
            Step::Item(name, keys) => {
                let mut it = item(keys, 0, &[]);
                it.as_object_mut().unwrap().append(inner.as_object_mut().unwrap());
                json!({ *name: [it] })
            }
        };
    }
    let mut obj = inner;
    let api_version = if site.group.is_empty() {
        site.version.to_owned()
    } else {
        format!("{}/{}", site.group, site.version)
    };
    let m = obj.as_object_mut().unwrap();
    m.insert("apiVersion".into(), json!(api_version));
    m.insert("kind".into(), json!(site.kind));
    let meta = m.entry("metadata").or_insert(json!({}));
    meta.as_object_mut().unwrap().insert("name".into(), json!("o"));
    obj
}

/// The list at the site in `obj`.
fn list_at<'a>(site: &Site, obj: &'a Value) -> &'a Vec<Value> {
    let mut cur = obj;
    for step in &site.path {
        cur = match step {
            Step::Field(name) => &cur[*name],
            Step::MapValue(name) => &cur[*name]["x"],
            Step::Item(name, _) => {
                let items = cur[*name]
                    .as_array()
                    .unwrap_or_else(|| panic!("{name} is a list in {obj}"));
                assert_eq!(items.len(), 1, "{name} in {obj}");
                &items[0]
            }
        };
    }
    cur[site.list.name]
        .as_array()
        .unwrap_or_else(|| panic!("{} is a list in {obj}", site.list.name))
}

fn describe(site: &Site) -> String {
    format!(
        "{}/{} {}: {}.{}",
        site.group, site.version, site.kind, site.list.owner, site.list.name
    )
}

fn find<'a>(items: &'a [Value], keys: &[&str], n: u64) -> Option<&'a Value> {
    items
        .iter()
        .find(|i| keys.iter().all(|k| i[*k] == key_value(k, n)))
}

/// Item 1 of the list carries the patched value and item 2 its own, untouched.
fn assert_changed_and_kept(site: &Site, items: &[Value], keys: &[&str]) {
    assert_eq!(
        find(items, keys, 1).unwrap()["zzTest"],
        "changed",
        "{}",
        describe(site)
    );
    assert_eq!(
        find(items, keys, 2).unwrap()["zzTest"],
        "two",
        "{}",
        describe(site)
    );
}

#[test]
fn the_table_reaches_the_keyed_lists_of_the_served_kinds() {
    let sites = sites();
    let names: Vec<String> = sites.iter().map(describe).collect();
    for want in [
        "apps/v1 Deployment: io.k8s.api.core.v1.PodSpec.topologySpreadConstraints",
        "apps/v1 Deployment: io.k8s.api.core.v1.Container.ports",
        "/v1 Pod: io.k8s.api.core.v1.PodSpec.hostAliases",
        "/v1 Service: io.k8s.api.core.v1.ServiceSpec.ports",
        "/v1 Pod: io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta.ownerReferences",
        "/v1 Node: io.k8s.api.core.v1.NodeStatus.addresses",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} not in {names:#?}");
    }
    assert!(sites.len() > 50, "{}", sites.len());
}

#[test]
fn a_strategic_merge_patch_of_one_item_keeps_the_other_in_every_keyed_list() {
    let mut tested = 0;
    for site in sites() {
        let Some(key) = site.list.smp_merge_key() else {
            continue;
        };
        let keys = all_keys(site.list);
        let old = object_with(
            &site,
            json!([
                item(&keys, 1, &[("zzTest", json!("one"))]),
                item(&keys, 2, &[("zzTest", json!("two"))])
            ]),
        );
        let patch_doc = object_with(&site, json!([item(&[key], 1, &[("zzTest", json!("changed"))])]));
        let mut doc = old.clone();
        patch::apply(
            patch::PatchType::Strategic,
            &mut doc,
            &patch_doc,
            Node::root(site.group, site.version, site.kind),
        )
        .unwrap();
        let items = list_at(&site, &doc);
        assert_eq!(items.len(), 2, "{}: {doc}", describe(&site));
        assert_changed_and_kept(&site, items, &keys);
        tested += 1;
    }
    assert!(tested > 50, "{tested}");
}

#[test]
fn server_side_apply_of_one_item_by_each_manager_keeps_both_in_every_keyed_list() {
    let mut tested = 0;
    for site in sites() {
        let ListKind::Map(_) = site.list.ssa_list() else {
            continue;
        };
        // Status is not applied through the main resource.
        if site.list.owner.ends_with("Status") || matches!(site.path.first(), Some(Step::Field("status"))) {
            continue;
        }
        let keys = all_keys(site.list);
        let root = Node::root(site.group, site.version, site.kind);
        let av = "v";
        let one = |v: &str| object_with(&site, json!([item(&keys, 1, &[("zzTest", json!(v))])]));
        let two = object_with(&site, json!([item(&keys, 2, &[("zzTest", json!("two"))])]));
        let live = apply::apply(&json!({}), &one("one"), "alice", av, false, root).unwrap();
        let live = apply::apply(&live, &two, "bob", av, false, root)
            .unwrap_or_else(|e| panic!("{}: {}", describe(&site), e.message));
        let items = list_at(&site, &live);
        assert_eq!(items.len(), 2, "{}: {live}", describe(&site));
        // Alice changes her item; bob's stays.
        let live = apply::apply(&live, &one("changed"), "alice", av, false, root)
            .unwrap_or_else(|e| panic!("{}: {}", describe(&site), e.message));
        let items = list_at(&site, &live);
        assert_eq!(items.len(), 2, "{}: {live}", describe(&site));
        assert_changed_and_kept(&site, items, &keys);
        // Bob taking alice's item's field is a conflict, named by the item's keys.
        let bobs = object_with(
            &site,
            json!([
                item(&keys, 1, &[("zzTest", json!("bob's"))]),
                item(&keys, 2, &[("zzTest", json!("two"))])
            ]),
        );
        let err = apply::apply(&live, &bobs, "bob", av, false, root).unwrap_err();
        assert_eq!(err.code, 409, "{}", describe(&site));
        // An atomic item conflicts as a whole.
        let atomic = patch_strategy::map_type(site.list.child) == Some("atomic");
        let tail = if atomic { "]" } else { "].zzTest" };
        assert!(
            err.message.contains(&format!("{}[", site.list.name)) && err.message.ends_with(tail),
            "{}: {}",
            describe(&site),
            err.message
        );
        tested += 1;
    }
    assert!(tested > 20, "{tested}");
}
