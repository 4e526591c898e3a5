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

pub(crate) fn route(path: &str, headers: &HeaderMap) -> Option<Response<Body>> {
    match path {
        "/openapi/v3" => {
            let paths: Map<String, Value> = documents()
                .by_path
                .iter()
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
            let doc = crate::openapi_v2::served();
            let protobuf = headers
                .get(header::ACCEPT)
                .and_then(|a| a.to_str().ok())
                .is_some_and(|a| a.contains("protobuf"));
            let (content_type, body) = if protobuf {
                (
                    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
                    doc.protobuf.clone(),
                )
            } else {
                ("application/json", doc.json.clone())
            };
            Some(
                Response::builder()
                    .status(StatusCode::OK)
                    .header(header::CONTENT_TYPE, content_type)
                    .header(header::ETAG, format!("\"{}\"", doc.etag))
                    .body(full(body))
                    .expect("valid response"),
            )
        }
        _ => {
            let gv = path.strip_prefix("/openapi/v3/")?;
            let (hash, doc) = documents().by_path.get(gv)?;
            Some(
                Response::builder()
                    .status(StatusCode::OK)
                    .header(header::CONTENT_TYPE, "application/json")
                    .header(header::ETAG, format!("\"{hash}\""))
                    .body(full(doc.clone()))
                    .expect("valid response"),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
