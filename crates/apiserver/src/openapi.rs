//! `/openapi/v3`: one OpenAPI 3.0 document per group version, listed at `/openapi/v3` with a
//! content hash, as upstream serves it. Schemas come from the k8s-openapi types (with their
//! upstream descriptions), so `kubectl explain` reads the real field documentation; paths list
//! each resource's operations with the query parameters kubectl looks for (`fieldValidation`,
//! `dryRun`, `fieldManager`).
//!
//! `/openapi/v2` (Swagger 2.0, JSON or protobuf) is built from the same schemas in
//! `openapi_v2.rs`.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::OnceLock;

use bytes::Bytes;
use http::{header, HeaderMap, Response, StatusCode};
use r8s_api::{catalogue, group_versions, ResourceDef};

use crate::registry::catalogue::ServedSet;
use serde_json::{json, Map, Value};

use crate::http::{full, json_response, Body};

/// "api/v1" or "apis/<group>/<version>", as the v3 index names group versions.
fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

fn operation(def: &ResourceDef, action: &str, schema: &str, write: bool) -> Value {
    let mut params = Vec::new();
    if write {
        for (name, desc) in [
            ("dryRun", "When present, indicates that modifications should not be persisted."),
            ("fieldManager", "fieldManager is a name associated with the actor or entity that is making these changes."),
            ("fieldValidation", "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields. Valid values are: Ignore, Warn (the default) and Strict."),
        ] {
            params.push(json!({"name": name, "in": "query", "description": desc, "schema": {"type": "string", "uniqueItems": true}}));
        }
    }
    let content = json!({"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}});
    let mut op = json!({
        "operationId": format!("{action}{}{}", def.kind, if def.namespaced { "Namespaced" } else { "" }),
        "parameters": params,
        "responses": {"200": {"description": "OK", "content": content}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": def.group, "version": def.version, "kind": def.kind},
    });
    if write && action != "delete" {
        op["requestBody"] = json!({"content": content, "required": true});
    }
    // No empty list: Go's kube-openapi omits one, so a document with one does not survive
    // a decode and encode unchanged (upstream's e2e suite checks that it does).
    if !write {
        if let Some(o) = op.as_object_mut() {
            o.remove("parameters");
        }
    }
    op
}

/// The v3 document of one group version.
fn document(group: &str, version: &str) -> Value {
    let defs: Vec<&ResourceDef> = catalogue()
        .iter()
        .filter(|d| d.group == group && d.version == version)
        .collect();
    let schemas = r8s_api::typed::openapi_schemas(defs.iter().copied());
    // The root schema name of each kind, from its group-version-kind mark.
    let root = |def: &ResourceDef| {
        schemas
            .iter()
            .find(|(_, s)| s["x-kubernetes-group-version-kind"][0]["kind"] == def.kind)
            .map(|(name, _)| name.clone())
    };
    let mut paths = Map::new();
    for def in &defs {
        let Some(schema) = root(def) else { continue };
        let base = if def.namespaced {
            format!(
                "/{}/namespaces/{{namespace}}/{}",
                gv_path(group, version),
                def.plural
            )
        } else {
            format!("/{}/{}", gv_path(group, version), def.plural)
        };
        paths.insert(
            base.clone(),
            json!({
                "get": operation(def, "list", &schema, false),
                "post": operation(def, "post", &schema, true),
            }),
        );
        paths.insert(
            format!("{base}/{{name}}"),
            json!({
                "get": operation(def, "get", &schema, false),
                "put": operation(def, "put", &schema, true),
                "patch": operation(def, "patch", &schema, true),
                "delete": operation(def, "delete", &schema, true),
            }),
        );
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": crate::KUBERNETES_VERSION},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

struct Documents {
    /// gv path → (hash, JSON).
    by_path: BTreeMap<String, (String, Bytes)>,
}

fn documents() -> &'static Documents {
    static DOCS: OnceLock<Documents> = OnceLock::new();
    DOCS.get_or_init(|| {
        let mut by_path = BTreeMap::new();
        for (g, v) in group_versions() {
            let bytes = serde_json::to_vec(&document(g, v)).expect("JSON serializes");
            let mut h = std::collections::hash_map::DefaultHasher::new();
            bytes.hash(&mut h);
            by_path.insert(
                gv_path(g, v),
                (format!("{:016X}", h.finish()), Bytes::from(bytes)),
            );
        }
        Documents { by_path }
    })
}

/// The apimachinery schemas (ObjectMeta, ListMeta, Time, …) a custom resource's v3 document
/// refers to, from the core document.
fn meta_schemas() -> &'static Map<String, Value> {
    static META: OnceLock<Map<String, Value>> = OnceLock::new();
    META.get_or_init(|| {
        let core: Value = serde_json::from_slice(&documents().by_path["api/v1"].1).expect("JSON");
        core["components"]["schemas"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| k.starts_with("io.k8s.apimachinery."))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    })
}

/// The v3 document of a group version of custom resources.
fn custom_document(defs: &[&crate::registry::Resource]) -> Value {
    let mut schemas = meta_schemas().clone();
    let mut paths = Map::new();
    for def in defs {
        let own = crate::registry::custom::openapi::schemas(def, false);
        let base = if def.namespaced {
            format!(
                "/{}/namespaces/{{namespace}}/{}",
                gv_path(def.group, def.version),
                def.plural
            )
        } else {
            format!("/{}/{}", gv_path(def.group, def.version), def.plural)
        };
        paths.insert(
            base.clone(),
            json!({
                "get": operation(def, "list", &own[1].0, false),
                "post": operation(def, "post", &own[0].0, true),
            }),
        );
        paths.insert(
            format!("{base}/{{name}}"),
            json!({
                "get": operation(def, "get", &own[0].0, false),
                "put": operation(def, "put", &own[0].0, true),
                "patch": operation(def, "patch", &own[0].0, true),
                "delete": operation(def, "delete", &own[0].0, true),
            }),
        );
        schemas.extend(own);
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes CRD Swagger", "version": "v0.1.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

/// The documents of what one server serves now: built once per change of its custom
/// resources.
pub(crate) struct Built {
    v2: Option<crate::openapi_v2::Served>,
    /// gv path → (hash, JSON) of the custom group versions.
    v3: BTreeMap<String, (String, Bytes)>,
}

/// A server's documents, rebuilt when its served resources change.
#[derive(Default)]
pub(crate) struct Cache(std::sync::Mutex<Option<(std::sync::Arc<ServedSet>, std::sync::Arc<Built>)>>);

impl Cache {
    fn get(&self, set: std::sync::Arc<ServedSet>) -> std::sync::Arc<Built> {
        let mut cur = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((s, b)) = cur.as_ref() {
            if std::sync::Arc::ptr_eq(s, &set) {
                return b.clone();
            }
        }
        let custom: Vec<&crate::registry::Resource> = set.defs.iter().filter(|d| d.custom).copied().collect();
        let mut v3 = BTreeMap::new();
        for (g, v) in set.group_versions() {
            let defs: Vec<&crate::registry::Resource> = custom
                .iter()
                .filter(|d| d.group == g && d.version == v)
                .copied()
                .collect();
            if defs.is_empty() {
                continue;
            }
            let bytes = serde_json::to_vec(&custom_document(&defs)).expect("JSON serializes");
            let mut h = std::collections::hash_map::DefaultHasher::new();
            bytes.hash(&mut h);
            v3.insert(
                gv_path(g, v),
                (format!("{:016X}", h.finish()), Bytes::from(bytes)),
            );
        }
        let built = std::sync::Arc::new(Built {
            v2: (!custom.is_empty()).then(|| crate::openapi_v2::served_with(&custom)),
            v3,
        });
        *cur = Some((set, built.clone()));
        built
    }
}

/// A response with an ETag, or 304 when the client has it already.
fn tagged(headers: &HeaderMap, etag: &str, content_type: &str, body: Bytes) -> Response<Body> {
    let tag = format!("\"{etag}\"");
    let matches = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag));
    let builder = Response::builder().header(header::ETAG, &tag);
    if matches {
        return builder
            .status(StatusCode::NOT_MODIFIED)
            .body(full(Bytes::new()))
            .expect("valid response");
    }
    builder
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, content_type)
        .body(full(body))
        .expect("valid response")
}

pub(crate) fn route(shared: &crate::Shared, path: &str, headers: &HeaderMap) -> Option<Response<Body>> {
    if !path.starts_with("/openapi/") {
        return None;
    }
    let built = shared.openapi.get(shared.served.current());
    match path {
        "/openapi/v3" => {
            let paths: Map<String, Value> = documents()
                .by_path
                .iter()
                .chain(built.v3.iter())
                .map(|(p, (hash, _))| {
                    (
                        p.clone(),
                        json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={hash}")}),
                    )
                })
                .collect();
            Some(json_response(StatusCode::OK, &json!({"paths": paths})))
        }
        // Swagger 2.0 for every served type: protobuf (gnostic's Document) when the client asks
        // for it, as client-go's discovery does, else JSON.
        "/openapi/v2" => {
            let doc = built.v2.as_ref().unwrap_or_else(|| crate::openapi_v2::served());
            let protobuf = headers
                .get(header::ACCEPT)
                .and_then(|a| a.to_str().ok())
                .is_some_and(|a| a.contains("protobuf"));
            let (content_type, body, etag) = if protobuf {
                (
                    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
                    doc.protobuf.clone(),
                    format!("{}-pb", doc.etag),
                )
            } else {
                ("application/json", doc.json.clone(), doc.etag.clone())
            };
            Some(tagged(headers, &etag, content_type, body))
        }
        _ => {
            let gv = path.strip_prefix("/openapi/v3/")?;
            let (hash, doc) = documents().by_path.get(gv).or_else(|| built.v3.get(gv))?;
            Some(tagged(headers, hash, "application/json", doc.clone()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Go's kube-openapi omits empty lists when it encodes, so a document holding one does
    /// not decode and encode to itself (upstream's e2e suite checks that a CRD's does).
    #[test]
    fn documents_hold_no_empty_lists() {
        fn empty_lists(v: &Value, at: &str, found: &mut Vec<String>) {
            match v {
                Value::Array(items) if items.is_empty() => found.push(at.to_owned()),
                Value::Array(items) => {
                    for (i, x) in items.iter().enumerate() {
                        empty_lists(x, &format!("{at}/{i}"), found);
                    }
                }
                Value::Object(m) => {
                    for (k, x) in m {
                        empty_lists(x, &format!("{at}/{k}"), found);
                    }
                }
                _ => {}
            }
        }
        let mut found = Vec::new();
        for (gv, (_, doc)) in &documents().by_path {
            let doc: Value = serde_json::from_slice(doc).unwrap();
            empty_lists(&doc, gv, &mut found);
        }
        assert_eq!(found, Vec::<String>::new());
    }

    #[test]
    fn every_group_version_has_a_document_with_paths_and_schemas() {
        let docs = documents();
        assert!(docs.by_path.contains_key("api/v1"));
        assert!(docs.by_path.contains_key("apis/apps/v1"));
        let apps: Value = serde_json::from_slice(&docs.by_path["apis/apps/v1"].1).unwrap();
        let post = &apps["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments"]["post"];
        assert_eq!(post["x-kubernetes-group-version-kind"]["kind"], "Deployment");
        assert!(post["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "fieldValidation"));
        assert!(apps["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"].is_object());
        let tsc = &apps["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"]["properties"]
            ["topologySpreadConstraints"];
        assert_eq!(tsc["x-kubernetes-patch-merge-key"], "topologyKey");
        assert_eq!(tsc["x-kubernetes-list-type"], "map");
        let core: Value = serde_json::from_slice(&docs.by_path["api/v1"].1).unwrap();
        assert!(core["paths"]["/api/v1/nodes/{name}"]["get"].is_object());
    }
}
