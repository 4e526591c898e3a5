//! The OpenAPI schemas a custom resource publishes (upstream's CRD OpenAPI builder): its
//! version's structural schema with the Kubernetes object's apiVersion, kind and metadata
//! added, marked with its group-version-kind, plus its list kind — in v3's form for
//! `/openapi/v3/apis/<group>/<version>` (what `kubectl explain` reads) and v2's for
//! `/openapi/v2`.

use r8s_api::ResourceDef;
use serde_json::{json, Map, Value};

use crate::registry::Resource;

const API_VERSION: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
const METADATA: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
const LIST_METADATA: &str = "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";

/// `group/version/kind` as upstream names definitions: the group's domain reversed
/// (`com.example.widgets.v1.Widget`).
pub(crate) fn definition_name(def: &ResourceDef, kind: &str) -> String {
    let group: Vec<&str> = def.group.split('.').rev().collect();
    format!("{}.{}.{kind}", group.join("."), def.version)
}

/// The list kind's name (`WidgetList`).
pub(crate) fn list_kind(def: &ResourceDef) -> String {
    format!("{}List", def.kind)
}

fn reference(name: &str, v2: bool, description: &str) -> Value {
    if v2 {
        json!({"$ref": format!("#/definitions/{name}"), "description": description})
    } else {
        // v3 keeps siblings of a reference beside it in allOf (kube-openapi's WrapRefs).
        json!({"allOf": [{"$ref": format!("#/components/schemas/{name}")}], "description": description})
    }
}

fn gvk(def: &ResourceDef, kind: &str) -> Value {
    json!([{"group": def.group, "kind": kind, "version": def.version}])
}

/// v2's form of a structural schema (upstream's `ToStructuralOpenAPIV2`): no allOf, anyOf,
/// oneOf or not; a nullable field untyped; nothing under preserved unknown fields.
fn to_v2(schema: &Value) -> Value {
    let Some(map) = schema.as_object() else {
        return schema.clone();
    };
    let mut s = map.clone();
    for k in ["allOf", "oneOf", "anyOf", "not"] {
        s.remove(k);
    }
    let preserve = s.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if s.get("nullable") == Some(&Value::Bool(true)) {
        s.remove("type");
        s.remove("nullable");
        s.remove("items");
        s.remove("properties");
    }
    if preserve {
        s.remove("items");
        s.remove("properties");
        if s.get("type").and_then(Value::as_str) == Some("object") {
            s.remove("type");
        }
    }
    if s.get("items").is_none() && s.get("type").and_then(Value::as_str) == Some("array") {
        s.remove("type");
    }
    if let Some(Value::Object(props)) = s.get("properties").cloned() {
        let nullable: Vec<String> = props
            .iter()
            .filter(|(_, p)| p.get("nullable") == Some(&Value::Bool(true)))
            .map(|(k, _)| k.clone())
            .collect();
        if let Some(Value::Array(required)) = s.get_mut("required") {
            required.retain(|r| !nullable.iter().any(|n| r == n.as_str()));
            if required.is_empty() {
                s.remove("required");
            }
        }
        let props: Map<String, Value> = props.iter().map(|(k, p)| (k.clone(), to_v2(p))).collect();
        s.insert("properties".into(), Value::Object(props));
    }
    for k in ["items", "additionalProperties"] {
        if let Some(v) = s.get(k).filter(|v| v.is_object()).cloned() {
            s.insert(k.into(), to_v2(&v));
        }
    }
    Value::Object(s)
}

/// The kind's schema and its list's, by definition name.
pub(crate) fn schemas(def: &Resource, v2: bool) -> Vec<(String, Value)> {
    let schema = def.custom().and_then(|s| s.schema.clone());
    let root_preserves = schema
        .as_ref()
        .is_some_and(|s| s.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)));
    let mut kind_schema = match schema {
        Some(s) if !(v2 && root_preserves) => {
            let mut s = if v2 { to_v2(&s) } else { s };
            if !s.is_object() {
                s = json!({});
            }
            let props = s
                .as_object_mut()
                .expect("an object")
                .entry("properties")
                .or_insert_with(|| json!({}));
            if !props.is_object() {
                *props = json!({});
            }
            props["metadata"] = reference(OBJECT_META, v2, METADATA);
            props["apiVersion"] = json!({"type": "string", "description": API_VERSION});
            props["kind"] = json!({"type": "string", "description": KIND});
            s
        }
        // Without a schema (or one keeping every field, in v2) the kind is an open object:
        // anything more would make clients refuse fields the server keeps.
        _ => json!({"type": "object"}),
    };
    kind_schema["x-kubernetes-group-version-kind"] = gvk(def, def.kind);
    let name = definition_name(def, def.kind);
    let items_ref = if v2 {
        json!({"$ref": format!("#/definitions/{name}")})
    } else {
        json!({"$ref": format!("#/components/schemas/{name}")})
    };
    let list = json!({
        "type": "object",
        "description": format!("{} is a list of {}", list_kind(def), def.kind),
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string", "description": API_VERSION},
            "kind": {"type": "string", "description": KIND},
            "items": {
                "type": "array",
                "description": format!("List of {}. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md", def.plural),
                "items": items_ref,
            },
            "metadata": reference(LIST_META, v2, LIST_METADATA),
        },
        "x-kubernetes-group-version-kind": gvk(def, &list_kind(def)),
    });
    vec![(name, kind_schema), (definition_name(def, &list_kind(def)), list)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_drops_what_swagger_cannot_say() {
        let s = json!({"type": "object", "required": ["a", "n"], "properties": {
            "a": {"type": "string", "anyOf": [{"type": "string"}]},
            "n": {"type": "string", "nullable": true},
            "p": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {"x": {"type": "string"}}},
            "l": {"type": "array"},
        }});
        assert_eq!(
            to_v2(&s),
            json!({"type": "object", "required": ["a"], "properties": {
                "a": {"type": "string"},
                "n": {},
                "p": {"x-kubernetes-preserve-unknown-fields": true},
                "l": {},
            }})
        );
    }
}
