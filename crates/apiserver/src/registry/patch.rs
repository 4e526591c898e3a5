//! PATCH: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and strategic merge patch (merge
//! keys per field, `$patch` directives), applied to the stored object and written through the
//! same path as an update. Without a resourceVersion in the patch, a conflict is retried on the
//! new object, as upstream does.

use crate::registry::Resource;
use bytes::Bytes;
use http::{header, HeaderMap};
use r8s_api::patch_strategy::Node;
use serde_json::{json, Map, Value};

use super::subresource::View;
use super::{apply, meta};
use super::{apply_update, read, typed, Query, Target, Written};
use crate::context::Ctx;
use crate::status::ApiError;

/// How many times a write without a resourceVersion (a patch, an update) starts over after
/// someone else wrote the object between its read and its write. Upstream's GuaranteedUpdate
/// has no bound; a write contended this often is refused with the 409 it last met.
pub(crate) const MAX_ATTEMPTS: u32 = 100;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PatchType {
    Json,
    Merge,
    Strategic,
}

/// Patch an object (or its status or scale view) as the request's content type says.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn patch(
    ctx: &Ctx,
    def: &Resource,
    ns: &str,
    name: &str,
    view: View,
    headers: &HeaderMap,
    query: &Query,
    body: Bytes,
) -> Result<Written, ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_owned();
    let kind = match content_type.as_str() {
        // Custom resources have no patch strategy to merge by (upstream answers so too).
        "application/strategic-merge-patch+json" if def.custom => {
            return Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            ))
        }
        "application/json-patch+json" => PatchType::Json,
        "application/merge-patch+json" => PatchType::Merge,
        "application/strategic-merge-patch+json" => PatchType::Strategic,
        "application/apply-patch+yaml" if view == View::Main => {
            return server_side_apply(ctx, def, ns, name, query, &body).await
        }
        other => {
            return Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml (got {other:?})"),
            ))
        }
    };
    let patch: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    let pinned = patch["metadata"]["resourceVersion"].is_string();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let old = read(ctx, def, ns, name).await?;
        // Patch what the client sees (the object, or its status or scale), then write it back.
        let mut patched = View::project(view, def, &old);
        apply(kind, &mut patched, &patch, root_node(def, view))?;
        // The patched object is decoded as its type like any other write (the scale view is
        // not the resource's type).
        let (patched, warnings) = if view == View::Scale {
            (patched, Vec::new())
        } else {
            typed(def, patched, ns, query)?
        };
        let full = view.merge_back(def, &old, patched)?;
        match apply_update(ctx, Target { def, ns, name }, full, &old, query.dry_run(), view).await {
            Ok(obj) => {
                return Ok(Written {
                    object: View::project(view, def, &obj),
                    stored: None,
                    created: false,
                    warnings,
                })
            }
            // Unpinned, a patch goes on over whatever was written meanwhile (upstream's
            // GuaranteedUpdate retries until it lands; bounded here).
            Err(e) if e.code == 409 && e.reason == "Conflict" && !pinned && attempts < MAX_ATTEMPTS => {
                continue
            }
            Err(e) => return Err(e),
        }
    }
}

/// The type of what a patch of `view` of `def` patches: the resource's kind (a custom
/// resource's schema), or autoscaling/v1 Scale for the scale subresource.
pub(crate) fn root_node(def: &Resource, view: View) -> Node {
    if view == View::Scale {
        Node::root("autoscaling", "v1", "Scale")
    } else if let Some(schema) = def.custom().and_then(|c| c.apply_schema) {
        // A custom resource: as its CRD's schema has it.
        Node::Schema(schema)
    } else {
        Node::root(def.group, def.version, def.kind)
    }
}

/// The first key a YAML document repeats in one block mapping: its (1-based) line and the
/// key, as the Go YAML decoder reports it under strict decoding. Block style only (what
/// clients write by hand; JSON bodies are checked by the JSON decoder).
fn duplicate_yaml_key(body: &[u8]) -> Option<(usize, String)> {
    let text = std::str::from_utf8(body).ok()?;
    if text.trim_start().starts_with('{') {
        return None;
    }
    // Open mappings: (indent of their keys, the keys seen).
    let mut open: Vec<(usize, Vec<String>)> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim_end();
        let content = line.trim_start();
        if content.is_empty() || content.starts_with('#') || content == "---" {
            continue;
        }
        let mut indent = line.len() - content.len();
        let mut rest = content;
        let mut new_item = false;
        while let Some(r) = rest.strip_prefix("- ") {
            // A list item opens a mapping two columns further in.
            indent += 2;
            rest = r.trim_start();
            new_item = true;
        }
        let Some((key, _)) = rest.split_once(':') else {
            continue;
        };
        if key.is_empty()
            || key.contains(' ') && !key.starts_with('"')
            || rest.starts_with('{')
            || rest.starts_with('[')
        {
            continue;
        }
        let key = key.trim_matches('"').trim_matches('\'').to_owned();
        while open.last().is_some_and(|(ind, _)| *ind > indent) {
            open.pop();
        }
        if new_item && open.last().is_some_and(|(ind, _)| *ind == indent) {
            open.pop();
        }
        match open.last_mut() {
            Some((ind, keys)) if *ind == indent => {
                if keys.contains(&key) {
                    return Some((i + 1, key));
                }
                keys.push(key);
            }
            _ => open.push((indent, vec![key])),
        }
    }
    None
}

/// Server-side apply: create the object from the applied configuration, or merge it into the
/// live object by field ownership (see `apply`).
/// An apply configuration: YAML (JSON, what kubectl and kube-rs send, is YAML too).
pub(crate) fn decode_apply_body(body: &[u8]) -> Result<Value, ApiError> {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        return Ok(v);
    }
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::bad_request("error decoding the apply configuration: not UTF-8"))?;
    serde_saphyr::from_str::<Value>(text)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
}

async fn server_side_apply(
    ctx: &Ctx,
    def: &Resource,
    ns: &str,
    name: &str,
    query: &Query,
    body: &[u8],
) -> Result<Written, ApiError> {
    let Some(manager) = query.get("fieldManager").map(str::to_owned) else {
        return Err(ApiError::new(
            422,
            "Invalid",
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        ));
    };
    let force = query.flag("force");
    if query.get("fieldValidation") == Some("Strict") {
        if let Some((line, key)) = duplicate_yaml_key(body) {
            return Err(ApiError::bad_request(format!(
                "error strict decoding YAML: error converting YAML to JSON: yaml: unmarshal errors:\n  line {line}: key {key:?} already set in map"
            )));
        }
    }
    let applied = decode_apply_body(body)?;
    if !applied.is_object() {
        return Err(ApiError::bad_request("the apply configuration must be an object"));
    }
    if let Some(s) = def.custom() {
        // A custom resource's apply configuration is typed by its schema: a field the schema
        // does not declare fails it whatever fieldValidation says (upstream's structured
        // merge, which answers with an internal error).
        let unknown = s.prune(&mut applied.clone());
        if !unknown.is_empty() {
            let errs: Vec<String> = unknown
                .iter()
                .map(|f| format!(".{f}: field not declared in schema"))
                .collect();
            let errs = if errs.len() == 1 {
                errs[0].clone()
            } else {
                format!("errors:\n  {}", errs.join("\n  "))
            };
            return Err(ApiError::new(
                500,
                "InternalError",
                format!(
                    "failed to create typed patch object ({ns}/{name}; {}, Kind={}): {errs}",
                    def.api_version(),
                    def.kind
                ),
            ));
        }
    }
    let (applied, warnings) = typed(def, applied, ns, query)?;
    if meta::name(&applied) != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            meta::name(&applied)
        )));
    }
    for _ in 0..5 {
        let live = match read(ctx, def, ns, name).await {
            Ok(live) => Some(live),
            Err(e) if e.code == 404 => None,
            Err(e) => return Err(e),
        };
        // Applied over the live object, or over nothing when there is none yet.
        let mut merged = apply::apply(
            live.as_ref().unwrap_or(&json!({})),
            &applied,
            &manager,
            &def.api_version(),
            force,
            root_node(def, View::Apply),
        )?;
        let Some(live) = live else {
            let mut obj = merged;
            for k in ["apiVersion", "kind"] {
                obj[k] = applied[k].clone();
            }
            meta::meta_mut(&mut obj).insert("name".into(), json!(name));
            if def.namespaced {
                meta::meta_mut(&mut obj).insert("namespace".into(), json!(ns));
            }
            let created = match super::create_object(ctx, def, ns, obj, query.dry_run()).await {
                // Created meanwhile by someone else: apply over it.
                Err(e) if e.code == 409 && e.reason == "AlreadyExists" => continue,
                other => other?,
            };
            return Ok(Written {
                object: created,
                stored: None,
                created: true,
                warnings,
            });
        };
        if let Some(rv) = applied["metadata"]["resourceVersion"].as_str() {
            meta::meta_mut(&mut merged).insert("resourceVersion".into(), json!(rv));
        }
        match apply_update(
            ctx,
            Target { def, ns, name },
            merged,
            &live,
            query.dry_run(),
            View::Apply,
        )
        .await
        {
            Ok(object) => {
                return Ok(Written {
                    object,
                    stored: None,
                    created: false,
                    warnings,
                })
            }
            Err(e)
                if e.code == 409
                    && e.reason == "Conflict"
                    && !applied["metadata"]["resourceVersion"].is_string() =>
            {
                continue
            }
            Err(e) => return Err(e),
        }
    }
    Err(ApiError::new(409, "Conflict", format!("Operation cannot be fulfilled on {} \"{name}\": the object kept changing while it was applied; try again", def.group_resource())))
}

/// Apply a MutatingAdmissionPolicy's mutation to `doc`, an object of the resource
/// `group`/`version`/`plural`: an apply configuration merged in as a strategic merge patch of
/// its kind (a custom resource's by its schema), or a JSON patch.
pub(crate) fn apply_mutation(
    (group, version, plural): (&str, &str, &str),
    doc: &mut Value,
    patch: &Value,
    json_patch: bool,
) -> Result<(), String> {
    let def = super::catalogue::builtin(group, version, plural)
        .or_else(|| super::custom::find_made(group, version, plural))
        .ok_or_else(|| format!("the resource {plural} of {group}/{version} is not served"))?;
    let kind = if json_patch {
        PatchType::Json
    } else {
        PatchType::Strategic
    };
    apply(kind, doc, patch, root_node(def, View::Main)).map_err(|e| e.message)
}

/// Apply a patch of `kind` to `doc`, an object of the type `root` says (strategic merge patch
/// merges by it).
pub(super) fn apply(kind: PatchType, doc: &mut Value, patch: &Value, root: Node) -> Result<(), ApiError> {
    match kind {
        PatchType::Json => {
            let ops: json_patch::Patch = serde_json::from_value(patch.clone())
                .map_err(|e| ApiError::bad_request(format!("the JSON patch is not valid: {e}")))?;
            json_patch::patch(doc, &ops.0).map_err(|e| {
                ApiError::new(
                    422,
                    "Invalid",
                    format!("the JSON patch could not be applied: {e}"),
                )
            })
        }
        PatchType::Merge => {
            // As upstream's merge (evanphx/json-patch): a patch that is neither an object nor
            // an array is not a merge patch; one that turns the object into something else
            // cannot be decoded as one.
            if !patch.is_object() && !patch.is_array() {
                return Err(ApiError::bad_request("Invalid JSON Patch"));
            }
            json_patch::merge(doc, patch);
            if !doc.is_object() {
                return Err(ApiError::bad_request(format!(
                    "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                    r8s_api::typed::go_json_type(doc)
                )));
            }
            Ok(())
        }
        PatchType::Strategic => {
            if !patch.is_object() {
                return Err(ApiError::bad_request(
                    "a strategic merge patch must be a JSON object",
                ));
            }
            strategic_merge(doc, patch, root);
            Ok(())
        }
    }
}

/// Strategic merge of `patch` into `doc`, an object (or part of one) of the type `node` says:
/// lists merge as upstream's OpenAPI tags their property (`x-kubernetes-patch-strategy` and
/// `x-kubernetes-patch-merge-key`, looked up by type path); lists of unknown type are
/// replaced, as upstream does for objects without a schema.
fn strategic_merge(doc: &mut Value, patch: &Value, node: Node) {
    let Some(patch_map) = patch.as_object() else {
        *doc = patch.clone();
        return;
    };
    if patch_map.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut value = patch.clone();
        strip_directives(&mut value);
        *doc = value;
        return;
    }
    if !doc.is_object() {
        *doc = Value::Object(Map::new());
    }
    let target = doc.as_object_mut().expect("made an object");
    // retainKeys: the fields not listed are cleared (a union such as a Deployment's strategy).
    if let Some(keep) = patch_map.get("$retainKeys").and_then(Value::as_array) {
        target.retain(|k, _| keep.iter().any(|r| r.as_str() == Some(k.as_str())));
    }
    for (k, v) in patch_map {
        if k.starts_with("$setElementOrder/") || k == "$retainKeys" || k == "$patch" {
            continue;
        }
        if let Some(list) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(items)), Some(remove)) = (target.get_mut(list), v.as_array()) {
                items.retain(|i| !remove.contains(i));
            }
            continue;
        }
        if v.is_null() {
            target.remove(k);
            continue;
        }
        let child = node.member(k);
        match (target.get_mut(k), v) {
            (Some(existing @ Value::Object(_)), Value::Object(_)) => strategic_merge(existing, v, child),
            (Some(Value::Array(existing)), Value::Array(patch_items)) => {
                let order = patch_map
                    .get(&format!("$setElementOrder/{k}"))
                    .and_then(Value::as_array)
                    .map(Vec::as_slice);
                merge_list(existing, patch_items, order, child)
            }
            _ => {
                let mut value = v.clone();
                strip_directives(&mut value);
                target.insert(k.clone(), value);
            }
        }
    }
}

/// A `{"$patch": "replace"}` item: the list becomes the patch's other items.
fn is_replace_marker(item: &Value) -> bool {
    item.as_object()
        .is_some_and(|m| m.len() == 1 && m.get("$patch").and_then(Value::as_str) == Some("replace"))
}

fn merge_list(existing: &mut Vec<Value>, patch_items: &[Value], order: Option<&[Value]>, node: Node) {
    let info = node.list();
    if patch_items.iter().any(is_replace_marker) {
        let mut value = Value::Array(patch_items.to_vec());
        strip_directives(&mut value);
        *existing = match value {
            Value::Array(items) => items,
            _ => unreachable!("stripping keeps an array an array"),
        };
        return;
    }
    match info {
        Some(f) if f.smp_merge_key().is_some() && patch_items.iter().all(Value::is_object) => {
            let key = f.smp_merge_key().expect("checked");
            let original = existing.clone();
            merge_list_by_key(existing, patch_items, key, node.item());
            let id = |v: &Value| v[key].clone();
            // With `$setElementOrder`, the items it names are the patch's (upstream).
            let order = order.unwrap_or(patch_items);
            *existing = element_order(std::mem::take(existing), order, order, &original, id);
        }
        // `merge` without a key: a set of values (finalizers).
        Some(f) if f.smp_merges() && !patch_items.iter().any(Value::is_object) => {
            let original = existing.clone();
            for item in patch_items {
                if !existing.contains(item) {
                    existing.push(item.clone());
                }
            }
            let order = order.unwrap_or(patch_items);
            *existing = element_order(std::mem::take(existing), order, order, &original, Value::clone);
        }
        _ => {
            let mut value = Value::Array(patch_items.to_vec());
            strip_directives(&mut value);
            if let Value::Array(items) = value {
                *existing = items;
            }
        }
    }
}

/// The order of a merged list, as upstream's `normalizeElementOrder`: the items the patch
/// names in the patch's order (its `$setElementOrder` list when it sends one), the others in
/// their stored order, the two interleaved by the stored order where both are known — so an
/// item new to the list comes before the stored items the patch does not name.
fn element_order(
    merged: Vec<Value>,
    patch_items: &[Value],
    patch_order: &[Value],
    original: &[Value],
    id: impl Fn(&Value) -> Value,
) -> Vec<Value> {
    let ids = |list: &[Value]| -> Vec<Value> {
        list.iter()
            .filter(|p| {
                !matches!(
                    p.get("$patch").and_then(Value::as_str),
                    Some("delete" | "replace")
                )
            })
            .map(&id)
            .collect()
    };
    let (patch_ids, order_ids) = (ids(patch_items), ids(patch_order));
    let server_ids: Vec<Value> = original.iter().map(&id).collect();
    let (mut named, server_only): (Vec<Value>, Vec<Value>) =
        merged.into_iter().partition(|v| patch_ids.contains(&id(v)));
    named.sort_by_key(|v| order_ids.iter().position(|p| *p == id(v)));
    let at = |v: &Value| server_ids.iter().position(|s| *s == id(v));
    let (mut left, mut right) = (server_only.into_iter().peekable(), named.into_iter().peekable());
    let mut out = Vec::new();
    loop {
        match (left.peek(), right.peek()) {
            (Some(l), Some(r)) => match (at(l), at(r)) {
                (Some(li), Some(ri)) if li < ri => out.extend(left.next()),
                _ => out.extend(right.next()),
            },
            (Some(_), None) => out.extend(left.next()),
            (None, Some(_)) => out.extend(right.next()),
            (None, None) => break,
        }
    }
    out
}

fn merge_list_by_key(existing: &mut Vec<Value>, patch_items: &[Value], key: &str, item: Node) {
    for patch_item in patch_items {
        let id = &patch_item[key];
        let pos = existing.iter().position(|e| &e[key] == id);
        match (patch_item.get("$patch").and_then(Value::as_str), pos) {
            (Some("delete"), Some(i)) => {
                existing.remove(i);
            }
            (Some("delete"), None) => {}
            (_, Some(i)) => strategic_merge(&mut existing[i], patch_item, item),
            (_, None) => {
                let mut value = patch_item.clone();
                strip_directives(&mut value);
                existing.push(value);
            }
        }
    }
}

/// Directives never end up in the stored object (nor items a patch deletes from a list it
/// sets).
fn strip_directives(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, _| !k.starts_with('$'));
            for child in m.values_mut() {
                strip_directives(child);
            }
        }
        Value::Array(items) => {
            items.retain(|i| {
                !matches!(
                    i.get("$patch").and_then(Value::as_str),
                    Some("delete") | Some("replace")
                )
            });
            items.iter_mut().for_each(strip_directives)
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Node {
        Node::root("", "v1", "Pod")
    }

    fn deployment() -> Node {
        Node::root("apps", "v1", "Deployment")
    }

    #[test]
    fn repeated_yaml_keys_are_found_with_their_line() {
        let yaml = "\napiVersion: v1\nkind: X\nmetadata:\n  name: a\nspec:\n  ports:\n  - name: x\n    port: 1\n  - name: y\n    port: 2\n  foo: 1\n  foo: 2\n";
        assert_eq!(duplicate_yaml_key(yaml.as_bytes()), Some((13, "foo".to_owned())));
        let fine = "a: 1\nb:\n  a: 2\n  c:\n  - a: 1\n  - a: 2\nc: 3\n";
        assert_eq!(duplicate_yaml_key(fine.as_bytes()), None);
        assert_eq!(duplicate_yaml_key(b"{\"a\": 1}"), None);
    }

    #[test]
    fn strategic_merge_merges_containers_by_name() {
        let mut doc = json!({"spec": {"containers": [
            {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}]},
            {"name": "b", "image": "b:1"}
        ]}, "metadata": {"finalizers": ["f1"]}});
        let patch = json!({
            "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
            "spec": {"containers": [
                {"name": "a", "image": "a:2", "env": [{"name": "Y", "value": "2"}]},
                {"name": "b", "$patch": "delete"},
                {"name": "c", "image": "c:1"}
            ]},
            "metadata": {"finalizers": ["f2"], "labels": {"new": "yes"}}
        });
        apply(PatchType::Strategic, &mut doc, &patch, pod()).unwrap();
        let cs = doc["spec"]["containers"].as_array().unwrap();
        assert_eq!(cs.len(), 2);
        assert_eq!(cs[0]["image"], "a:2");
        assert_eq!(cs[0]["env"].as_array().unwrap().len(), 2);
        assert_eq!(cs[1]["name"], "c");
        assert_eq!(doc["metadata"]["finalizers"], json!(["f2", "f1"]));
        assert_eq!(doc["metadata"]["labels"]["new"], "yes");
        assert!(doc.get("$setElementOrder/containers").is_none());
    }

    /// Upstream's element order: an item new to the list comes before the stored ones the
    /// patch does not name (the ReplicaSet conformance spec patches in a container and reads
    /// it back as containers[0]); `$setElementOrder` orders the named ones.
    #[test]
    fn merged_lists_keep_upstreams_element_order() {
        let mut doc = json!({"spec": {"containers": [{"name": "httpd", "image": "httpd"}]}});
        let patch = json!({"spec": {"containers": [{"name": "test-rs", "image": "pause"}]}});
        apply(PatchType::Strategic, &mut doc, &patch, pod()).unwrap();
        let names: Vec<&str> = doc["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["test-rs", "httpd"]);
        let mut doc = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}});
        let patch = json!({"spec": {
            "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}],
            "containers": [{"name": "a", "image": "x"}]}});
        apply(PatchType::Strategic, &mut doc, &patch, pod()).unwrap();
        let names: Vec<&str> = doc["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        // The items $setElementOrder names go in its order, b (not named) where the stored
        // order puts it among them, as upstream's normalizeElementOrder does.
        assert_eq!(names, ["b", "c", "a"]);
        // kubectl apply adding a container: its $setElementOrder keeps the stored one first.
        let mut doc = json!({"spec": {"containers": [{"name": "web"}]}});
        let patch = json!({"spec": {
            "$setElementOrder/containers": [{"name": "web"}, {"name": "side"}],
            "containers": [{"name": "side", "image": "x"}]}});
        apply(PatchType::Strategic, &mut doc, &patch, pod()).unwrap();
        assert_eq!(doc["spec"]["containers"][0]["name"], "web");
        assert_eq!(doc["spec"]["containers"][1]["name"], "side");
    }

    #[test]
    fn topology_spread_constraints_merge_by_topology_key() {
        let constraint = |key: &str, skew: i64| json!({"topologyKey": key, "maxSkew": skew, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}});
        let mut doc = json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"template": {"spec": {
            "containers": [{"name": "web", "image": "nginx"}],
            "topologySpreadConstraints": [constraint("zone", 1), constraint("hostname", 1)]
        }}}});
        let patch = json!({"spec":{"template":{"spec":{"topologySpreadConstraints":[{"topologyKey":"zone","maxSkew":2,"whenUnsatisfiable":"DoNotSchedule","labelSelector":{}}]}}}});
        apply(PatchType::Strategic, &mut doc, &patch, deployment()).unwrap();
        let tsc = doc["spec"]["template"]["spec"]["topologySpreadConstraints"]
            .as_array()
            .unwrap();
        assert_eq!(tsc.len(), 2, "{doc}");
        assert_eq!(tsc[0]["topologyKey"], "zone");
        assert_eq!(tsc[0]["maxSkew"], 2);
        assert_eq!(tsc[1], constraint("hostname", 1));
    }

    #[test]
    fn lists_merge_by_their_type_path_not_their_name() {
        // Container ports merge by containerPort, service ports by port, and lists tagged
        // atomic (tolerations, endpoints' ports) are replaced.
        let mut p = json!({"spec": {
            "containers": [{"name": "web", "ports": [{"containerPort": 80, "name": "http"}, {"containerPort": 443}]}],
            "tolerations": [{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Exists"}],
            "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["a"]}, {"ip": "10.0.0.2", "hostnames": ["b"]}]
        }});
        let patch = json!({"spec": {
            "containers": [{"name": "web", "ports": [{"containerPort": 80, "name": "web"}]}],
            "tolerations": [{"key": "c", "operator": "Exists"}],
            "hostAliases": [{"ip": "10.0.0.2", "hostnames": ["c"]}]
        }});
        apply(PatchType::Strategic, &mut p, &patch, pod()).unwrap();
        let ports = &p["spec"]["containers"][0]["ports"];
        assert_eq!(
            ports,
            &json!([{"containerPort": 80, "name": "web"}, {"containerPort": 443}])
        );
        assert_eq!(
            p["spec"]["tolerations"],
            json!([{"key": "c", "operator": "Exists"}])
        );
        assert_eq!(p["spec"]["hostAliases"][1]["hostnames"], json!(["c"]));
        assert_eq!(p["spec"]["hostAliases"].as_array().unwrap().len(), 2);

        let mut svc = json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443}]}});
        let patch = json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}]}});
        apply(
            PatchType::Strategic,
            &mut svc,
            &patch,
            Node::root("", "v1", "Service"),
        )
        .unwrap();
        assert_eq!(
            svc["spec"]["ports"],
            json!([{"port": 80, "targetPort": 9090}, {"port": 443}])
        );

        let mut ep = json!({"subsets": [{"ports": [{"port": 80}, {"port": 443}]}]});
        let patch = json!({"subsets": [{"ports": [{"port": 80, "name": "x"}]}]});
        apply(
            PatchType::Strategic,
            &mut ep,
            &patch,
            Node::root("", "v1", "Endpoints"),
        )
        .unwrap();
        assert_eq!(ep["subsets"], json!([{"ports": [{"port": 80, "name": "x"}]}]));
    }

    #[test]
    fn objects_of_unknown_type_replace_lists_but_metadata_is_still_typed() {
        let mut doc = json!({"metadata": {"finalizers": ["a"]}, "spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        let patch =
            json!({"metadata": {"finalizers": ["b"]}, "spec": {"containers": [{"name": "a", "image": "x"}]}});
        apply(
            PatchType::Strategic,
            &mut doc,
            &patch,
            Node::root("example.com", "v1", "Widget"),
        )
        .unwrap();
        assert_eq!(doc["spec"]["containers"], json!([{"name": "a", "image": "x"}]));
        // Upstream's element order: what the patch adds comes first.
        assert_eq!(doc["metadata"]["finalizers"], json!(["b", "a"]));
    }

    #[test]
    fn a_replace_directive_in_a_merged_list_replaces_it() {
        let mut doc = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        let patch = json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "c"}]}});
        apply(PatchType::Strategic, &mut doc, &patch, pod()).unwrap();
        assert_eq!(doc["spec"]["containers"], json!([{"name": "c"}]));
    }

    #[test]
    fn retain_keys_clears_the_fields_not_listed() {
        let mut doc =
            json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%"}}}});
        let patch = json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}});
        apply(PatchType::Strategic, &mut doc, &patch, deployment()).unwrap();
        assert_eq!(doc["spec"]["strategy"], json!({"type": "Recreate"}));
    }

    #[test]
    fn merge_patches_that_are_not_objects_are_bad_requests() {
        for (patch, message) in [
            (
                json!([1, 2]),
                "json: cannot unmarshal array into Go value of type map[string]interface {}",
            ),
            (json!(3), "Invalid JSON Patch"),
            (json!("x"), "Invalid JSON Patch"),
            (json!(null), "Invalid JSON Patch"),
        ] {
            let mut doc = json!({"metadata": {"name": "p"}});
            let err = apply(PatchType::Merge, &mut doc, &patch, pod()).unwrap_err();
            assert_eq!((err.code, err.message.as_str()), (400, message), "{patch}");
        }
    }

    #[test]
    fn merge_and_json_patches() {
        let mut doc = json!({"metadata": {"labels": {"a": "1", "b": "2"}}});
        apply(
            PatchType::Merge,
            &mut doc,
            &json!({"metadata": {"labels": {"a": null, "c": "3"}}}),
            pod(),
        )
        .unwrap();
        assert_eq!(doc["metadata"]["labels"], json!({"b": "2", "c": "3"}));
        apply(
            PatchType::Json,
            &mut doc,
            &json!([{"op": "replace", "path": "/metadata/labels/b", "value": "9"}]),
            pod(),
        )
        .unwrap();
        assert_eq!(doc["metadata"]["labels"]["b"], "9");
        let err = apply(
            PatchType::Json,
            &mut doc,
            &json!([{"op": "remove", "path": "/nope"}]),
            pod(),
        )
        .unwrap_err();
        assert_eq!(err.code, 422);
    }
}

#[cfg(test)]
mod apply_body_tests {
    use super::*;

    #[test]
    fn apply_bodies_may_be_yaml_or_json() {
        let yaml = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: \"1\"\n  b: text\n";
        let v = decode_apply_body(yaml).unwrap();
        assert_eq!(v["metadata"]["name"], "c");
        assert_eq!(v["data"]["a"], "1");
        let json = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}}"#;
        assert_eq!(decode_apply_body(json).unwrap()["kind"], "ConfigMap");
        let err = decode_apply_body(b"a: [unclosed").unwrap_err();
        assert!(err.to_status()["message"]
            .as_str()
            .unwrap()
            .starts_with("error decoding YAML"));
    }
}
