//! `/openapi/v2`: one Swagger 2.0 document for every served type, as upstream serves it — JSON
//! when asked for JSON, and otherwise the protobuf encoding of gnostic's `openapi.v2.Document`
//! that client-go's discovery client asks for (`kubectl explain --output=plaintext-openapiv2`,
//! and older kubectls' validation, apply and query-parameter checks read it).
//!
//! The protobuf messages are declared here with prost's derive, as a subset of gnostic's
//! `OpenAPIv2.proto` with its field numbers: no maintained crate ships those types, and only the
//! fields a Kubernetes document uses are declared (protobuf readers skip nothing they need).

use std::hash::{Hash, Hasher};
use std::sync::OnceLock;

use bytes::Bytes;
use prost::Message;
use r8s_api::{catalogue, group_versions, ResourceDef};
use serde_json::{json, Map, Value};

/// gnostic's `openapi.v2` messages (the subset r8s writes), with upstream's field numbers.
pub(crate) mod pb {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Document {
        #[prost(string, tag = "1")]
        pub swagger: String,
        #[prost(message, optional, tag = "2")]
        pub info: Option<Info>,
        #[prost(message, optional, tag = "8")]
        pub paths: Option<Paths>,
        #[prost(message, optional, tag = "9")]
        pub definitions: Option<Definitions>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Info {
        #[prost(string, tag = "1")]
        pub title: String,
        #[prost(string, tag = "2")]
        pub version: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Paths {
        #[prost(message, repeated, tag = "2")]
        pub path: Vec<NamedPathItem>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NamedPathItem {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<PathItem>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PathItem {
        #[prost(message, optional, tag = "2")]
        pub get: Option<Operation>,
        #[prost(message, optional, tag = "3")]
        pub put: Option<Operation>,
        #[prost(message, optional, tag = "4")]
        pub post: Option<Operation>,
        #[prost(message, optional, tag = "5")]
        pub delete: Option<Operation>,
        #[prost(message, optional, tag = "8")]
        pub patch: Option<Operation>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Operation {
        #[prost(string, tag = "3")]
        pub description: String,
        #[prost(string, tag = "5")]
        pub operation_id: String,
        #[prost(string, repeated, tag = "6")]
        pub produces: Vec<String>,
        #[prost(string, repeated, tag = "7")]
        pub consumes: Vec<String>,
        #[prost(message, repeated, tag = "8")]
        pub parameters: Vec<ParametersItem>,
        #[prost(message, optional, tag = "9")]
        pub responses: Option<Responses>,
        #[prost(string, repeated, tag = "10")]
        pub schemes: Vec<String>,
        #[prost(message, repeated, tag = "13")]
        pub vendor_extension: Vec<NamedAny>,
    }

    /// oneof { Parameter parameter = 1; JsonReference json_reference = 2; } — only the first.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ParametersItem {
        #[prost(message, optional, tag = "1")]
        pub parameter: Option<Parameter>,
    }

    /// oneof { BodyParameter body_parameter = 1; NonBodyParameter non_body_parameter = 2; }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Parameter {
        #[prost(message, optional, tag = "1")]
        pub body_parameter: Option<BodyParameter>,
        #[prost(message, optional, tag = "2")]
        pub non_body_parameter: Option<NonBodyParameter>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct BodyParameter {
        #[prost(string, tag = "1")]
        pub description: String,
        #[prost(string, tag = "2")]
        pub name: String,
        #[prost(string, tag = "3")]
        pub r#in: String,
        #[prost(bool, tag = "4")]
        pub required: bool,
        #[prost(message, optional, tag = "5")]
        pub schema: Option<Schema>,
    }

    /// oneof { header = 1; form data = 2; QueryParameterSubSchema query = 3; path = 4; }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NonBodyParameter {
        #[prost(message, optional, tag = "3")]
        pub query_parameter_sub_schema: Option<QueryParameterSubSchema>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct QueryParameterSubSchema {
        #[prost(bool, tag = "1")]
        pub required: bool,
        #[prost(string, tag = "2")]
        pub r#in: String,
        #[prost(string, tag = "3")]
        pub description: String,
        #[prost(string, tag = "4")]
        pub name: String,
        #[prost(string, tag = "6")]
        pub r#type: String,
        #[prost(bool, tag = "20")]
        pub unique_items: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Responses {
        #[prost(message, repeated, tag = "1")]
        pub response_code: Vec<NamedResponseValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NamedResponseValue {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<ResponseValue>,
    }

    /// oneof { Response response = 1; JsonReference json_reference = 2; } — only the first.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ResponseValue {
        #[prost(message, optional, tag = "1")]
        pub response: Option<Response>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Response {
        #[prost(string, tag = "1")]
        pub description: String,
        #[prost(message, optional, tag = "2")]
        pub schema: Option<SchemaItem>,
    }

    /// oneof { Schema schema = 1; FileSchema file_schema = 2; } — only the first.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct SchemaItem {
        #[prost(message, optional, tag = "1")]
        pub schema: Option<Schema>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Definitions {
        #[prost(message, repeated, tag = "1")]
        pub additional_properties: Vec<NamedSchema>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NamedSchema {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<Schema>,
    }

    /// `Any { google.protobuf.Any value = 1; string yaml = 2; }`: r8s writes YAML (JSON is YAML).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Any {
        #[prost(string, tag = "2")]
        pub yaml: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NamedAny {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<Any>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Schema {
        #[prost(string, tag = "1")]
        pub r#ref: String,
        #[prost(string, tag = "2")]
        pub format: String,
        #[prost(string, tag = "3")]
        pub title: String,
        #[prost(string, tag = "4")]
        pub description: String,
        #[prost(message, optional, tag = "5")]
        pub default: Option<Any>,
        #[prost(double, optional, tag = "7")]
        pub maximum: Option<f64>,
        #[prost(double, optional, tag = "9")]
        pub minimum: Option<f64>,
        #[prost(string, repeated, tag = "19")]
        pub required: Vec<String>,
        #[prost(message, repeated, tag = "20")]
        pub r#enum: Vec<Any>,
        #[prost(message, optional, boxed, tag = "21")]
        pub additional_properties: Option<Box<AdditionalPropertiesItem>>,
        #[prost(message, optional, tag = "22")]
        pub r#type: Option<TypeItem>,
        #[prost(message, optional, tag = "23")]
        pub items: Option<ItemsItem>,
        #[prost(message, repeated, tag = "24")]
        pub all_of: Vec<Schema>,
        #[prost(message, optional, tag = "25")]
        pub properties: Option<Properties>,
        #[prost(bool, tag = "27")]
        pub read_only: bool,
        #[prost(message, repeated, tag = "31")]
        pub vendor_extension: Vec<NamedAny>,
    }

    /// oneof { Schema schema = 1; bool boolean = 2; }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AdditionalPropertiesItem {
        #[prost(message, optional, tag = "1")]
        pub schema: Option<Schema>,
        #[prost(bool, optional, tag = "2")]
        pub boolean: Option<bool>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TypeItem {
        #[prost(string, repeated, tag = "1")]
        pub value: Vec<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ItemsItem {
        #[prost(message, repeated, tag = "1")]
        pub schema: Vec<Schema>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Properties {
        #[prost(message, repeated, tag = "1")]
        pub additional_properties: Vec<NamedSchema>,
    }
}

const V3_REF: &str = "#/components/schemas/";
const V2_REF: &str = "#/definitions/";

/// A v3 schema (as the v3 documents hold it) in v2's form: references point into
/// `#/definitions/`, a described reference is a `$ref` with a description beside it (v3 wraps it
/// in `allOf`), and v3-only keywords go.
fn v2_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => {
            let mut out = Map::new();
            for (k, v) in map {
                match k.as_str() {
                    "$ref" => {
                        let r = v.as_str().unwrap_or_default();
                        let r = r
                            .strip_prefix(V3_REF)
                            .map_or(r.to_string(), |name| format!("{V2_REF}{name}"));
                        out.insert(k.clone(), Value::String(r));
                    }
                    "allOf"
                        if v.as_array()
                            .is_some_and(|a| a.len() == 1 && a[0].get("$ref").is_some()) =>
                    {
                        if let Value::Object(inner) = v2_schema(&v[0]) {
                            out.extend(inner);
                        }
                    }
                    "nullable" | "oneOf" | "anyOf" => {}
                    "properties" => {
                        let props: Map<String, Value> = v
                            .as_object()
                            .map(|p| p.iter().map(|(n, s)| (n.clone(), v2_schema(s))).collect())
                            .unwrap_or_default();
                        out.insert(k.clone(), Value::Object(props));
                    }
                    _ => {
                        out.insert(k.clone(), v2_schema(v));
                    }
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(v2_schema).collect()),
        other => other.clone(),
    }
}

fn gv_prefix(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    }
}

fn operation(def: &ResourceDef, action: &str, schema: &str, write: bool, body: bool) -> Value {
    let mut params = Vec::new();
    if body {
        params.push(json!({"name": "body", "in": "body", "required": true, "schema": {"$ref": format!("{V2_REF}{schema}")}}));
    }
    if write {
        for (name, desc) in [
            ("dryRun", "When present, indicates that modifications should not be persisted."),
            ("fieldManager", "fieldManager is a name associated with the actor or entity that is making these changes."),
            ("fieldValidation", "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields. Valid values are: Ignore, Warn (the default) and Strict."),
        ] {
            params.push(json!({"name": name, "in": "query", "description": desc, "type": "string", "uniqueItems": true}));
        }
    }
    let kind_suffix = if def.namespaced { "Namespaced" } else { "" };
    let group_id: String = def
        .group
        .split('.')
        .next()
        .map(|g| {
            let mut c = g.chars();
            c.next()
                .map(|f| f.to_uppercase().chain(c).collect())
                .unwrap_or_default()
        })
        .unwrap_or_else(|| "Core".into());
    let group_id = if group_id.is_empty() {
        "Core".into()
    } else {
        group_id
    };
    let version = {
        let mut c = def.version.chars();
        c.next()
            .map(|f| f.to_uppercase().chain(c).collect::<String>())
            .unwrap_or_default()
    };
    json!({
        "operationId": format!("{action}{group_id}{version}{kind_suffix}{}", def.kind),
        "consumes": if action == "patch" {
            json!(["application/json-patch+json", "application/merge-patch+json", "application/strategic-merge-patch+json", "application/apply-patch+yaml"])
        } else {
            json!(["*/*"])
        },
        "produces": ["application/json", "application/yaml", "application/vnd.kubernetes.protobuf"],
        "schemes": ["https"],
        "parameters": params,
        "responses": {"200": {"description": "OK", "schema": {"$ref": format!("{V2_REF}{schema}")}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": def.group, "version": def.version, "kind": def.kind},
    })
}

/// The v2 document of every served group version.
pub(crate) fn document() -> Value {
    let mut definitions = Map::new();
    let mut paths = Map::new();
    for (group, version) in group_versions() {
        let defs: Vec<&ResourceDef> = catalogue()
            .iter()
            .filter(|d| d.group == group && d.version == version)
            .collect();
        let schemas = r8s_api::typed::openapi_schemas(defs.iter().copied());
        for def in &defs {
            let Some(schema) = schemas
                .iter()
                .find(|(_, s)| s["x-kubernetes-group-version-kind"][0]["kind"] == def.kind)
                .map(|(name, _)| name.clone())
            else {
                continue;
            };
            let prefix = gv_prefix(group, version);
            let base = if def.namespaced {
                format!("{prefix}/namespaces/{{namespace}}/{}", def.plural)
            } else {
                format!("{prefix}/{}", def.plural)
            };
            paths.insert(
                base.clone(),
                json!({
                    "get": operation(def, "list", &schema, false, false),
                    "post": operation(def, "post", &schema, true, true),
                }),
            );
            paths.insert(
                format!("{base}/{{name}}"),
                json!({
                    "get": operation(def, "get", &schema, false, false),
                    "put": operation(def, "put", &schema, true, true),
                    "patch": operation(def, "patch", &schema, true, true),
                    "delete": operation(def, "delete", &schema, true, false),
                }),
            );
        }
        for (name, schema) in schemas {
            definitions.entry(name).or_insert_with(|| v2_schema(&schema));
        }
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": crate::KUBERNETES_VERSION},
        "paths": paths,
        "definitions": definitions,
    })
}

fn any(v: &Value) -> pb::Any {
    pb::Any {
        yaml: match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        },
    }
}

fn extensions(map: &Map<String, Value>) -> Vec<pb::NamedAny> {
    map.iter()
        .filter(|(k, _)| k.starts_with("x-"))
        .map(|(k, v)| pb::NamedAny {
            name: k.clone(),
            value: Some(any(v)),
        })
        .collect()
}

fn str_of(map: &Map<String, Value>, key: &str) -> String {
    map.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn strings(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::Array(a)) => a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect(),
        Some(Value::String(s)) => vec![s.clone()],
        _ => Vec::new(),
    }
}

fn schema_pb(v: &Value) -> pb::Schema {
    let Some(m) = v.as_object() else {
        return pb::Schema::default();
    };
    let named = |props: &Map<String, Value>| {
        props
            .iter()
            .map(|(n, s)| pb::NamedSchema {
                name: n.clone(),
                value: Some(schema_pb(s)),
            })
            .collect::<Vec<_>>()
    };
    pb::Schema {
        r#ref: str_of(m, "$ref"),
        format: str_of(m, "format"),
        title: str_of(m, "title"),
        description: str_of(m, "description"),
        default: m.get("default").map(any),
        maximum: m.get("maximum").and_then(Value::as_f64),
        minimum: m.get("minimum").and_then(Value::as_f64),
        required: strings(m.get("required")),
        r#enum: m
            .get("enum")
            .and_then(Value::as_array)
            .map(|e| e.iter().map(any).collect())
            .unwrap_or_default(),
        additional_properties: match m.get("additionalProperties") {
            Some(Value::Bool(b)) => Some(Box::new(pb::AdditionalPropertiesItem {
                schema: None,
                boolean: Some(*b),
            })),
            Some(s @ Value::Object(_)) => Some(Box::new(pb::AdditionalPropertiesItem {
                schema: Some(schema_pb(s)),
                boolean: None,
            })),
            _ => None,
        },
        r#type: m.get("type").map(|t| pb::TypeItem {
            value: strings(Some(t)),
        }),
        items: match m.get("items") {
            Some(Value::Array(a)) => Some(pb::ItemsItem {
                schema: a.iter().map(schema_pb).collect(),
            }),
            Some(s @ Value::Object(_)) => Some(pb::ItemsItem {
                schema: vec![schema_pb(s)],
            }),
            _ => None,
        },
        all_of: m
            .get("allOf")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(schema_pb).collect())
            .unwrap_or_default(),
        properties: m
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| pb::Properties {
                additional_properties: named(p),
            }),
        read_only: m.get("readOnly").and_then(Value::as_bool).unwrap_or(false),
        vendor_extension: extensions(m),
    }
}

fn operation_pb(v: &Value) -> Option<pb::Operation> {
    let m = v.as_object()?;
    let parameters = m
        .get("parameters")
        .and_then(Value::as_array)
        .map(|ps| {
            ps.iter()
                .filter_map(Value::as_object)
                .map(|p| {
                    let parameter = if p.get("in").and_then(Value::as_str) == Some("body") {
                        pb::Parameter {
                            body_parameter: Some(pb::BodyParameter {
                                description: str_of(p, "description"),
                                name: str_of(p, "name"),
                                r#in: "body".into(),
                                required: p.get("required").and_then(Value::as_bool).unwrap_or(false),
                                schema: p.get("schema").map(schema_pb),
                            }),
                            non_body_parameter: None,
                        }
                    } else {
                        pb::Parameter {
                            body_parameter: None,
                            non_body_parameter: Some(pb::NonBodyParameter {
                                query_parameter_sub_schema: Some(pb::QueryParameterSubSchema {
                                    required: p.get("required").and_then(Value::as_bool).unwrap_or(false),
                                    r#in: str_of(p, "in"),
                                    description: str_of(p, "description"),
                                    name: str_of(p, "name"),
                                    r#type: str_of(p, "type"),
                                    unique_items: p
                                        .get("uniqueItems")
                                        .and_then(Value::as_bool)
                                        .unwrap_or(false),
                                }),
                            }),
                        }
                    };
                    pb::ParametersItem {
                        parameter: Some(parameter),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let responses = m
        .get("responses")
        .and_then(Value::as_object)
        .map(|rs| pb::Responses {
            response_code: rs
                .iter()
                .map(|(code, r)| pb::NamedResponseValue {
                    name: code.clone(),
                    value: Some(pb::ResponseValue {
                        response: Some(pb::Response {
                            description: r["description"].as_str().unwrap_or_default().to_string(),
                            schema: r.get("schema").map(|s| pb::SchemaItem {
                                schema: Some(schema_pb(s)),
                            }),
                        }),
                    }),
                })
                .collect(),
        });
    Some(pb::Operation {
        description: str_of(m, "description"),
        operation_id: str_of(m, "operationId"),
        produces: strings(m.get("produces")),
        consumes: strings(m.get("consumes")),
        parameters,
        responses,
        schemes: strings(m.get("schemes")),
        vendor_extension: extensions(m),
    })
}

/// The protobuf form of a v2 document (gnostic's `openapi.v2.Document`).
pub(crate) fn to_protobuf(doc: &Value) -> pb::Document {
    let paths = doc["paths"].as_object().map(|ps| pb::Paths {
        path: ps
            .iter()
            .map(|(name, item)| pb::NamedPathItem {
                name: name.clone(),
                value: Some(pb::PathItem {
                    get: operation_pb(&item["get"]),
                    put: operation_pb(&item["put"]),
                    post: operation_pb(&item["post"]),
                    delete: operation_pb(&item["delete"]),
                    patch: operation_pb(&item["patch"]),
                }),
            })
            .collect(),
    });
    let definitions = doc["definitions"].as_object().map(|ds| pb::Definitions {
        additional_properties: ds
            .iter()
            .map(|(name, s)| pb::NamedSchema {
                name: name.clone(),
                value: Some(schema_pb(s)),
            })
            .collect(),
    });
    pb::Document {
        swagger: doc["swagger"].as_str().unwrap_or("2.0").to_string(),
        info: Some(pb::Info {
            title: doc["info"]["title"].as_str().unwrap_or_default().to_string(),
            version: doc["info"]["version"].as_str().unwrap_or_default().to_string(),
        }),
        paths,
        definitions,
    }
}

/// The served forms: (etag, JSON, protobuf), built once.
pub(crate) struct Served {
    pub etag: String,
    pub json: Bytes,
    pub protobuf: Bytes,
}

fn serve(doc: &Value) -> Served {
    let json = serde_json::to_vec(doc).expect("JSON serializes");
    let protobuf = to_protobuf(doc).encode_to_vec();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    json.hash(&mut h);
    Served {
        etag: format!("{:016X}", h.finish()),
        json: Bytes::from(json),
        protobuf: Bytes::from(protobuf),
    }
}

fn builtin_document() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(document)
}

pub(crate) fn served() -> &'static Served {
    static DOC: OnceLock<Served> = OnceLock::new();
    DOC.get_or_init(|| serve(builtin_document()))
}

/// The document with the custom resources `custom` besides the built-in ones.
pub(crate) fn served_with(custom: &[&crate::registry::Resource]) -> Served {
    let mut doc = builtin_document().clone();
    for def in custom {
        let schemas = crate::registry::custom::openapi::schemas(def, true);
        let schema = schemas[0].0.clone();
        let prefix = gv_prefix(def.group, def.version);
        let base = if def.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}", def.plural)
        } else {
            format!("{prefix}/{}", def.plural)
        };
        doc["paths"][base.as_str()] = json!({
            "get": operation(def, "list", &schemas[1].0, false, false),
            "post": operation(def, "post", &schema, true, true),
        });
        doc["paths"][format!("{base}/{{name}}").as_str()] = json!({
            "get": operation(def, "get", &schema, false, false),
            "put": operation(def, "put", &schema, true, true),
            "patch": operation(def, "patch", &schema, true, true),
            "delete": operation(def, "delete", &schema, true, false),
        });
        for (name, s) in schemas {
            doc["definitions"][name.as_str()] = s;
        }
    }
    serve(&doc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_has_every_kind_with_v2_references() {
        let doc = document();
        assert_eq!(doc["swagger"], "2.0");
        let pod = &doc["definitions"]["io.k8s.api.core.v1.Pod"];
        assert_eq!(pod["x-kubernetes-group-version-kind"][0]["kind"], "Pod");
        // A described reference is a plain $ref into #/definitions/ with its description.
        let spec = &pod["properties"]["spec"];
        assert_eq!(spec["$ref"], "#/definitions/io.k8s.api.core.v1.PodSpec");
        assert!(spec.get("allOf").is_none());
        // Upstream's patch and list extensions, as kubectl reads them.
        let ports = &doc["definitions"]["io.k8s.api.core.v1.Container"]["properties"]["ports"];
        assert_eq!(ports["x-kubernetes-patch-strategy"], "merge");
        assert_eq!(ports["x-kubernetes-patch-merge-key"], "containerPort");
        assert_eq!(
            ports["x-kubernetes-list-map-keys"],
            json!(["containerPort", "protocol"])
        );
        assert!(doc["definitions"]["io.k8s.api.apps.v1.Deployment"].is_object());
        let text = doc.to_string();
        assert!(!text.contains(V3_REF), "a v3 reference is left");
        let patch = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "Deployment");
        assert!(patch["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "fieldValidation" && p["in"] == "query"));
    }

    #[test]
    fn the_protobuf_form_decodes_to_the_same_document() {
        let doc = document();
        let bytes = to_protobuf(&doc).encode_to_vec();
        let back = pb::Document::decode(bytes.as_slice()).unwrap();
        assert_eq!(back.swagger, "2.0");
        let defs = back.definitions.unwrap().additional_properties;
        assert_eq!(defs.len(), doc["definitions"].as_object().unwrap().len());
        let pod = defs.iter().find(|d| d.name == "io.k8s.api.core.v1.Pod").unwrap();
        let pod = pod.value.as_ref().unwrap();
        let gvk = pod
            .vendor_extension
            .iter()
            .find(|e| e.name == "x-kubernetes-group-version-kind")
            .unwrap();
        let gvk: Value = serde_json::from_str(&gvk.value.as_ref().unwrap().yaml).unwrap();
        assert_eq!(gvk[0]["kind"], "Pod");
        let props = &pod.properties.as_ref().unwrap().additional_properties;
        let spec = props.iter().find(|p| p.name == "spec").unwrap();
        assert_eq!(
            spec.value.as_ref().unwrap().r#ref,
            "#/definitions/io.k8s.api.core.v1.PodSpec"
        );
        let cm = defs
            .iter()
            .find(|d| d.name == "io.k8s.api.core.v1.ConfigMap")
            .unwrap();
        let data = cm.value.as_ref().unwrap().properties.as_ref().unwrap();
        let data = data
            .additional_properties
            .iter()
            .find(|p| p.name == "data")
            .unwrap();
        let data = data.value.as_ref().unwrap();
        assert_eq!(data.r#type.as_ref().unwrap().value, ["object"]);
        assert_eq!(
            data.additional_properties
                .as_ref()
                .unwrap()
                .schema
                .as_ref()
                .unwrap()
                .r#type
                .as_ref()
                .unwrap()
                .value,
            ["string"]
        );
        let paths = back.paths.unwrap().path;
        let deploy = paths
            .iter()
            .find(|p| p.name == "/apis/apps/v1/namespaces/{namespace}/deployments/{name}")
            .unwrap();
        let patch = deploy.value.as_ref().unwrap().patch.as_ref().unwrap();
        assert!(patch.parameters.iter().any(|p| p
            .parameter
            .as_ref()
            .and_then(|p| p.non_body_parameter.as_ref())
            .and_then(|p| p.query_parameter_sub_schema.as_ref())
            .is_some_and(|q| q.name == "fieldValidation")));
    }
}
