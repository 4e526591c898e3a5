//! Decoding a request object as its Kubernetes type (from `k8s-openapi`), as the API server's
//! decoder does upstream: fields the type does not have are dropped ("pruned") and reported, so
//! `fieldValidation=Strict` can refuse them and `Warn` can warn about them; a value of the wrong
//! type is an error.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::{patch_strategy, ResourceDef};

/// A decoded object and the unknown fields dropped from it (JSON paths such as
/// `spec.containers[0].foo`).
pub struct Decoded {
    pub object: Value,
    pub unknown_fields: Vec<String>,
}

include!("resource_types.rs");

/// The match arms of `with_type!`, one per row of `resource_types!`.
macro_rules! with_type_arms {
    ($def:expr, $f:ident, $args:tt; $(($g:literal, $v:literal, $k:literal) => $($t:ident)::+ ,)*) => {
        match ($def.group, $def.version, $def.kind) {
            $( ($g, $v, $k) => Some($f::<k8s_openapi::$($t)::+> $args), )*
            _ => None,
        }
    };
}

/// Call `$f::<T>(args)` with `T` the k8s-openapi type of `$def`, or give `None` for resources
/// without one.
macro_rules! with_type {
    ($def:expr, $f:ident $args:tt) => {
        resource_types!(with_type_arms!($def, $f, $args;))
    };
}

/// Decode `input` as the type of `def`. Resources without a known type pass through as they are.
pub fn decode(def: &ResourceDef, input: &Value) -> Result<Decoded, String> {
    with_type!(def, roundtrip(input)).unwrap_or_else(|| {
        Ok(Decoded {
            object: input.clone(),
            unknown_fields: Vec::new(),
        })
    })
}

/// The OpenAPI v3 schemas (`components.schemas`, keyed by Kubernetes' definition names such as
/// `io.k8s.api.core.v1.Pod`) of `defs` and everything they refer to, each resource's root
/// schema marked with its `x-kubernetes-group-version-kind`.
pub fn openapi_schemas<'a>(
    defs: impl IntoIterator<Item = &'a ResourceDef>,
) -> serde_json::Map<String, Value> {
    let generated: Value = serde_json::from_str(SCHEMAS).expect("build.rs wrote valid JSON");
    let Value::Object(mut generated) = generated else {
        unreachable!("build.rs writes an object")
    };
    let Some(Value::Object(mut all)) = generated.remove("definitions") else {
        unreachable!("build.rs writes the definitions")
    };
    let root_of = |def: &ResourceDef| {
        generated["roots"].as_array()?.iter().find_map(|r| {
            (r[0] == def.group && r[1] == def.version && r[2] == def.kind)
                .then(|| r[3].as_str().map(str::to_owned))?
        })
    };
    let mut roots = Vec::new();
    let mut untyped = Vec::new();
    for def in defs {
        match root_of(def) {
            Some(name) => roots.push((name, def)),
            None => untyped.push(def),
        }
    }
    // The roots and every schema they refer to, in the generator's order.
    let mut wanted: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut todo: Vec<String> = roots.iter().map(|(n, _)| n.clone()).collect();
    todo.extend(generated["listMeta"].as_str().map(str::to_owned));
    while let Some(name) = todo.pop() {
        if let Some(schema) = all.get(&name) {
            if wanted.insert(name) {
                refs(schema, &mut todo);
            }
        }
    }
    all.retain(|name, _| wanted.contains(name));
    let mut schemas = all;
    // A kind k8s-openapi has no type for (one upstream removed, such as
    // InitializerConfiguration) still gets a schema, open to any field, so clients find its
    // paths: kubectl looks a kind up there to learn that the server validates fields, and
    // without it falls back to looking for a CRD.
    for def in untyped {
        let group = def
            .group
            .split('.')
            .next()
            .filter(|g| !g.is_empty())
            .unwrap_or("core");
        schemas.insert(
            format!("io.k8s.api.{group}.{}.{}", def.version, def.kind),
            serde_json::json!({
                "description": format!("{} (served by r8s without a typed schema).", def.kind),
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
                "x-kubernetes-group-version-kind": [{"group": def.group, "version": def.version, "kind": def.kind}],
            }),
        );
    }
    // Upstream's patch and list extensions, which k8s-openapi's schemas do not carry, from the
    // generated patch-strategy table: kubectl's client-side apply computes its strategic merge
    // patches from them, and clients read list types and map keys for server-side apply.
    for (name, schema) in schemas.iter_mut() {
        add_patch_extensions(name, schema);
    }
    for (name, def) in roots {
        if let Some(schema) = schemas.get_mut(&name).and_then(Value::as_object_mut) {
            schema.insert(
                "x-kubernetes-group-version-kind".into(),
                serde_json::json!([{"group": def.group, "version": def.version, "kind": def.kind}]),
            );
        }
    }
    schemas
}

/// The schemas `build.rs` generated: `{"listMeta": name, "roots": [[group, version, kind, name]],
/// "definitions": {name: schema}}`.
const SCHEMAS: &str = include_str!(concat!(env!("OUT_DIR"), "/schemas.json"));

/// Push the definition names `schema` refers to (`$ref: #/components/schemas/NAME`).
fn refs(schema: &Value, out: &mut Vec<String>) {
    match schema {
        Value::Object(o) => {
            for (k, v) in o {
                match (k.as_str(), v) {
                    ("$ref", Value::String(r)) => {
                        if let Some(name) = r.strip_prefix("#/components/schemas/") {
                            out.push(name.to_owned());
                        }
                    }
                    _ => refs(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

/// Add to the schema of the definition `name` the `x-kubernetes-*` patch, list and map
/// extensions upstream's OpenAPI gives it and its properties.
fn add_patch_extensions(name: &str, schema: &mut Value) {
    let Some(schema) = schema.as_object_mut() else {
        return;
    };
    if let Some(map_type) = patch_strategy::map_type(name) {
        schema.insert("x-kubernetes-map-type".into(), map_type.into());
    }
    let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) else {
        return;
    };
    for f in patch_strategy::fields_of(name) {
        let Some(prop) = props.get_mut(f.name).and_then(Value::as_object_mut) else {
            continue;
        };
        let mut set = |key: &str, value: Value| {
            prop.insert(key.into(), value);
        };
        if !f.list_map_keys.is_empty() {
            set("x-kubernetes-list-map-keys", f.list_map_keys.into());
        }
        if !f.list_type.is_empty() {
            set("x-kubernetes-list-type", f.list_type.into());
        }
        if !f.map_type.is_empty() {
            set("x-kubernetes-map-type", f.map_type.into());
        }
        if !f.patch_merge_key.is_empty() {
            set("x-kubernetes-patch-merge-key", f.patch_merge_key.into());
        }
        if !f.patch_strategy.is_empty() {
            set("x-kubernetes-patch-strategy", f.patch_strategy.into());
        }
    }
}

fn roundtrip<T: DeserializeOwned + Serialize>(input: &Value) -> Result<Decoded, String> {
    let typed: T = serde_json::from_value(input.clone()).map_err(|e| e.to_string())?;
    let mut object = serde_json::to_value(&typed).map_err(|e| e.to_string())?;
    // The typed value knows its apiVersion and kind; keep the client's spelling of the rest.
    keep_input_order(&mut object, input);
    let mut unknown_fields = Vec::new();
    unknown(input, &object, "", &mut unknown_fields);
    drop_empty_metadata(&mut object);
    Ok(Decoded {
        object,
        unknown_fields,
    })
}

/// Empty metadata lists and maps are left out, as Go's `omitempty` leaves them out upstream
/// (a finalizer or owner removed by a patch leaves no `finalizers: []` behind).
fn drop_empty_metadata(obj: &mut Value) {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in [
            "ownerReferences",
            "finalizers",
            "managedFields",
            "labels",
            "annotations",
        ] {
            let empty = match m.get(key) {
                Some(Value::Array(a)) => a.is_empty(),
                Some(Value::Object(o)) => o.is_empty(),
                _ => false,
            };
            if empty {
                m.remove(key);
            }
        }
    }
}

/// Put the keys of `out` back in the order the client sent them (serde writes them in the
/// type's field order), so stored objects read as they were written.
fn keep_input_order(out: &mut Value, input: &Value) {
    match (out, input) {
        (Value::Object(o), Value::Object(i)) => {
            let mut ordered = serde_json::Map::new();
            for k in i.keys() {
                if let Some(v) = o.remove(k) {
                    ordered.insert(k.clone(), v);
                }
            }
            ordered.append(o);
            for (k, v) in ordered.iter_mut() {
                if let Some(iv) = i.get(k) {
                    keep_input_order(v, iv);
                }
            }
            *o = ordered;
        }
        (Value::Array(o), Value::Array(i)) => {
            for (ov, iv) in o.iter_mut().zip(i) {
                keep_input_order(ov, iv);
            }
        }
        _ => {}
    }
}

fn unknown(input: &Value, out: &Value, path: &str, found: &mut Vec<String>) {
    match (input, out) {
        (Value::Object(i), Value::Object(o)) => {
            for (k, v) in i {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match o.get(k) {
                    Some(ov) => unknown(v, ov, &p, found),
                    None if !v.is_null() => found.push(p),
                    None => {}
                }
            }
        }
        (Value::Array(i), Value::Array(o)) => {
            for (n, (iv, ov)) in i.iter().zip(o).enumerate() {
                unknown(iv, ov, &format!("{path}[{n}]"), found);
            }
        }
        _ => {}
    }
}

/// How Go's encoding/json names a JSON value's type in its errors ("cannot unmarshal string
/// into …").
pub fn go_json_type(v: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn def(kind: &str) -> &'static ResourceDef {
        crate::catalogue()
            .iter()
            .find(|d| d.kind == kind && d.group != "events.k8s.io")
            .unwrap()
    }

    #[test]
    fn empty_metadata_lists_are_left_out() {
        let cm = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "ownerReferences": [], "finalizers": [], "labels": {}, "annotations": {"a": "b"}},
        });
        let d = decode(def("ConfigMap"), &cm).unwrap();
        assert!(d.unknown_fields.is_empty());
        assert_eq!(
            d.object["metadata"],
            json!({"name": "c", "annotations": {"a": "b"}})
        );
    }

    #[test]
    fn unknown_fields_are_dropped_and_named() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "bogus": 1},
            "spec": {"containers": [{"name": "c", "image": "nginx", "imagePullPolicyy": "Always"}]},
            "extra": true
        });
        let d = decode(def("Pod"), &pod).unwrap();
        assert_eq!(
            d.unknown_fields,
            ["metadata.bogus", "spec.containers[0].imagePullPolicyy", "extra"]
        );
        assert!(d.object["metadata"].get("bogus").is_none());
        assert_eq!(d.object["spec"]["containers"][0]["image"], "nginx");
        // The client's key order is kept.
        let keys: Vec<&String> = d.object.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["apiVersion", "kind", "metadata", "spec"]);
    }

    #[test]
    fn openapi_schemas_name_kinds_and_their_parts() {
        let defs: Vec<&ResourceDef> = crate::catalogue().iter().filter(|d| d.group == "apps").collect();
        let schemas = openapi_schemas(defs);
        let d = &schemas["io.k8s.api.apps.v1.Deployment"];
        assert_eq!(d["x-kubernetes-group-version-kind"][0]["kind"], "Deployment");
        assert!(d["description"].as_str().unwrap().contains("Deployment"));
        // A reference with a description of its own is wrapped in allOf, as upstream's v3 is.
        assert_eq!(
            d["properties"]["spec"]["allOf"][0]["$ref"],
            "#/components/schemas/io.k8s.api.apps.v1.DeploymentSpec"
        );
        let containers = &schemas["io.k8s.api.apps.v1.DeploymentSpec"];
        assert_eq!(
            containers["properties"]["strategy"]["x-kubernetes-patch-strategy"],
            "retainKeys"
        );
        let core: Vec<&ResourceDef> = crate::catalogue().iter().filter(|d| d.kind == "Pod").collect();
        let core = openapi_schemas(core);
        let containers = &core["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
        assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
        assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
        // Only the Pod's schemas and those they refer to, each reference resolved.
        assert!(!core.contains_key("io.k8s.api.apps.v1.Deployment"));
        assert!(core.contains_key("io.k8s.api.core.v1.Container"));
        assert!(core.contains_key("io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"));
        for schema in core.values() {
            let mut names = Vec::new();
            refs(schema, &mut names);
            for name in names {
                assert!(core.contains_key(&name), "{name} is referred to but missing");
            }
        }
        // Every entry of the table names a real property.
        let all = openapi_schemas(crate::catalogue());
        // Every served kind has a schema marked with its group-version-kind.
        for def in crate::catalogue() {
            assert!(
                all.values().any(|s| {
                    let gvk = &s["x-kubernetes-group-version-kind"][0];
                    gvk["kind"] == def.kind && gvk["group"] == def.group && gvk["version"] == def.version
                }),
                "{}/{} {} has no schema",
                def.group,
                def.version,
                def.kind
            );
        }
        for (name, schema) in &all {
            for f in crate::patch_strategy::fields_of(name) {
                assert!(
                    schema["properties"][f.name].is_object(),
                    "{name}.{} is not in the schemas",
                    f.name
                );
            }
        }
        let pod_spec = &all["io.k8s.api.core.v1.PodSpec"]["properties"];
        let tsc = &pod_spec["topologySpreadConstraints"];
        assert_eq!(tsc["x-kubernetes-patch-merge-key"], "topologyKey");
        assert_eq!(tsc["x-kubernetes-list-type"], "map");
        assert_eq!(
            tsc["x-kubernetes-list-map-keys"],
            json!(["topologyKey", "whenUnsatisfiable"])
        );
        assert_eq!(pod_spec["tolerations"]["x-kubernetes-list-type"], "atomic");
        assert!(pod_spec["tolerations"]
            .get("x-kubernetes-patch-strategy")
            .is_none());
        assert_eq!(pod_spec["nodeSelector"]["x-kubernetes-map-type"], "atomic");
        assert_eq!(
            all["io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector"]["x-kubernetes-map-type"],
            "atomic"
        );
        let finalizers = &all["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]["properties"]["finalizers"];
        assert_eq!(finalizers["x-kubernetes-patch-strategy"], "merge");
        assert_eq!(finalizers["x-kubernetes-list-type"], "set");
        assert_eq!(
            all["io.k8s.api.core.v1.ServiceSpec"]["properties"]["ports"]["x-kubernetes-list-map-keys"],
            json!(["port", "protocol"])
        );
        assert!(schemas.contains_key("io.k8s.api.core.v1.PodSpec"));
        assert!(schemas.contains_key("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"));
    }

    #[test]
    fn wrong_types_are_errors_and_known_objects_round_trip() {
        let bad =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": 1}});
        assert!(decode(def("ConfigMap"), &bad).is_err());
        let deployment = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "creationTimestamp": "2026-01-02T03:04:05Z", "labels": {"app": "web"}},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                     "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "web", "image": "nginx", "resources": {"limits": {"cpu": "500m"}}}]}}}
        });
        let d = decode(def("Deployment"), &deployment).unwrap();
        assert!(d.unknown_fields.is_empty(), "{:?}", d.unknown_fields);
        assert_eq!(d.object, deployment);
    }
}
