//! PATCH: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and strategic merge patch (merge
//! keys per field, `$patch` directives), applied to the stored object and written through the
//! same path as an update. Without a resourceVersion in the patch, a conflict is retried on the
//! new object, as upstream does.

use bytes::Bytes;
use http::{header, HeaderMap, Response, StatusCode};
use r8s_api::ResourceDef;
use serde_json::{json, Map, Value};

use super::subresource::View;
use super::{apply, meta};
use super::{apply_update, read, typed, with_warnings, Query, Target};
use crate::handler::{json_response, Body, Ctx};
use crate::status::ApiError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PatchType {
    Json,
    Merge,
    Strategic,
}

#[allow(clippy::too_many_arguments)]
pub(crate) async fn serve(
    ctx: &Ctx,
    def: &ResourceDef,
    ns: &str,
    name: &str,
    view: View,
    headers: &HeaderMap,
    query: &Query,
    body: Bytes,
) -> Result<Response<Body>, ApiError> {
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
        apply(kind, &mut patched, &patch)?;
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
                let resp = json_response(StatusCode::OK, &View::project(view, def, &obj));
                return Ok(with_warnings(resp, &warnings));
            }
            Err(e) if e.code == 409 && e.reason == "Conflict" && !pinned && attempts < 5 => continue,
            Err(e) => return Err(e),
        }
    }
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
    def: &ResourceDef,
    ns: &str,
    name: &str,
    query: &Query,
    body: &[u8],
) -> Result<Response<Body>, ApiError> {
    let Some(manager) = query.get("fieldManager").map(str::to_owned) else {
        return Err(ApiError::new(
            422,
            "Invalid",
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        ));
    };
    let force = query.flag("force");
    let applied = decode_apply_body(body)?;
    if !applied.is_object() {
        return Err(ApiError::bad_request("the apply configuration must be an object"));
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
        let Some(live) = live else {
            let mut obj = apply::apply(&json!({}), &applied, &manager, &def.api_version(), force)?;
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
            return Ok(with_warnings(
                json_response(StatusCode::CREATED, &created),
                &warnings,
            ));
        };
        let mut merged = apply::apply(&live, &applied, &manager, &def.api_version(), force)?;
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
            Ok(obj) => return Ok(with_warnings(json_response(StatusCode::OK, &obj), &warnings)),
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

fn apply(kind: PatchType, doc: &mut Value, patch: &Value) -> Result<(), ApiError> {
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
            json_patch::merge(doc, patch);
            Ok(())
        }
        PatchType::Strategic => {
            if !patch.is_object() {
                return Err(ApiError::bad_request(
                    "a strategic merge patch must be a JSON object",
                ));
            }
            strategic_merge(doc, patch, "");
            Ok(())
        }
    }
}

/// The merge key of a list field whose elements are merged by key (upstream's
/// `patchMergeKey` tags on the core types).
fn merge_key(field: &str, sample: &Value) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "containerStatuses"
        | "initContainerStatuses" => "name",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "conditions" => "type",
        "ownerReferences" => "uid",
        "hostAliases" => "ip",
        "addresses" => "type",
        "ports" if sample.get("containerPort").is_some() => "containerPort",
        "ports" => "port",
        _ => return None,
    })
}

/// Primitive lists that merge as sets rather than being replaced.
fn merges_primitives(field: &str) -> bool {
    matches!(field, "finalizers")
}

fn strategic_merge(doc: &mut Value, patch: &Value, field: &str) {
    let Some(patch_map) = patch.as_object() else {
        *doc = patch.clone();
        return;
    };
    if patch_map.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut p = patch_map.clone();
        p.remove("$patch");
        *doc = Value::Object(p);
        return;
    }
    if !doc.is_object() {
        *doc = Value::Object(Map::new());
    }
    let _ = field;
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
        match (target.get_mut(k), v) {
            (Some(existing @ Value::Object(_)), Value::Object(_)) => strategic_merge(existing, v, k),
            (Some(Value::Array(existing)), Value::Array(patch_items)) => {
                let key = patch_items
                    .first()
                    .and_then(|s| merge_key(k, s))
                    .or_else(|| existing.first().and_then(|s| merge_key(k, s)));
                if let Some(key) = key.filter(|_| patch_items.iter().all(Value::is_object)) {
                    merge_list_by_key(existing, patch_items, key);
                } else if merges_primitives(k) {
                    for item in patch_items {
                        if !existing.contains(item) {
                            existing.push(item.clone());
                        }
                    }
                } else {
                    *existing = patch_items.clone();
                }
            }
            _ => {
                let mut value = v.clone();
                strip_directives(&mut value);
                target.insert(k.clone(), value);
            }
        }
    }
}

fn merge_list_by_key(existing: &mut Vec<Value>, patch_items: &[Value], key: &str) {
    for item in patch_items {
        let id = &item[key];
        let pos = existing.iter().position(|e| &e[key] == id);
        match (item.get("$patch").and_then(Value::as_str), pos) {
            (Some("delete"), Some(i)) => {
                existing.remove(i);
            }
            (Some("delete"), None) => {}
            (_, Some(i)) => strategic_merge(&mut existing[i], item, ""),
            (_, None) => {
                let mut value = item.clone();
                strip_directives(&mut value);
                existing.push(value);
            }
        }
    }
}

/// Directives never end up in the stored object.
fn strip_directives(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, _| !k.starts_with('$'));
            for child in m.values_mut() {
                strip_directives(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strip_directives),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        apply(PatchType::Strategic, &mut doc, &patch).unwrap();
        let cs = doc["spec"]["containers"].as_array().unwrap();
        assert_eq!(cs.len(), 2);
        assert_eq!(cs[0]["image"], "a:2");
        assert_eq!(cs[0]["env"].as_array().unwrap().len(), 2);
        assert_eq!(cs[1]["name"], "c");
        assert_eq!(doc["metadata"]["finalizers"], json!(["f1", "f2"]));
        assert_eq!(doc["metadata"]["labels"]["new"], "yes");
        assert!(doc.get("$setElementOrder/containers").is_none());
    }

    #[test]
    fn retain_keys_clears_the_fields_not_listed() {
        let mut doc =
            json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%"}}}});
        let patch = json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}});
        apply(PatchType::Strategic, &mut doc, &patch).unwrap();
        assert_eq!(doc["spec"]["strategy"], json!({"type": "Recreate"}));
    }

    #[test]
    fn merge_and_json_patches() {
        let mut doc = json!({"metadata": {"labels": {"a": "1", "b": "2"}}});
        apply(
            PatchType::Merge,
            &mut doc,
            &json!({"metadata": {"labels": {"a": null, "c": "3"}}}),
        )
        .unwrap();
        assert_eq!(doc["metadata"]["labels"], json!({"b": "2", "c": "3"}));
        apply(
            PatchType::Json,
            &mut doc,
            &json!([{"op": "replace", "path": "/metadata/labels/b", "value": "9"}]),
        )
        .unwrap();
        assert_eq!(doc["metadata"]["labels"]["b"], "9");
        let err = apply(
            PatchType::Json,
            &mut doc,
            &json!([{"op": "remove", "path": "/nope"}]),
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
