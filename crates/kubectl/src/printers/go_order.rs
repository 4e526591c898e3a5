//! Go's field order, for what kubectl prints as typed Go values: a generator's object (`create
//! deployment`, `run`, `expose`, … with `-o json`), `config view`, `version`, `auth whoami`.
//! Go's encoder writes a struct's fields in declaration order and a map's keys sorted; kubectl
//! prints objects it reads back from the server unstructured, that is as maps, all sorted
//! (what `json::to_string` does). The declaration orders come from the Go sources
//! (`go_order_table.rs`, written by `scripts/gen-go-field-order.py`).

use serde_json::{Map, Value};

use super::go_order_table::{NONE, ROOTS, TYPES};

/// How a field holds its type.
#[derive(Clone, Copy, Debug)]
pub(super) enum Shape {
    /// One value.
    One,
    /// A list of them.
    List,
    /// A map to them (keys sorted, as Go sorts a map's).
    Map,
}

/// A field: its JSON name, shape, and type (an index into `TYPES`, or `NONE`).
pub(super) type Field = (&'static str, Shape, usize);

/// `v` (an object with apiVersion and kind) in Go's order for its type; sorted throughout if
/// r8s does not know the type.
pub fn arrange(v: &Value) -> Value {
    let root = ROOTS
        .iter()
        .find(|(api_version, kind, _)| {
            !kind.is_empty() && v["apiVersion"] == *api_version && v["kind"] == *kind
        })
        .map_or(NONE, |(_, _, t)| *t);
    arrange_as(v, root)
}

/// `v` as the Go type named `name` (`version.Info`).
pub fn arrange_type(v: &Value, name: &str) -> Value {
    let t = TYPES.iter().position(|(n, _)| *n == name).unwrap_or(NONE);
    arrange_as(v, t)
}

fn arrange_as(v: &Value, ty: usize) -> Value {
    let Some((_, fields)) = TYPES.get(ty) else {
        return sorted(v);
    };
    let Value::Object(m) = v else {
        return v.clone();
    };
    let mut out = Map::new();
    for (name, shape, t) in fields.iter() {
        if let Some(x) = m.get(*name) {
            out.insert((*name).to_owned(), shaped(x, *shape, *t));
        }
    }
    // Keys the Go type does not have (none in a valid object) after, sorted.
    let mut rest: Vec<&String> = m.keys().filter(|k| !out.contains_key(k.as_str())).collect();
    rest.sort();
    for k in rest {
        out.insert(k.clone(), sorted(&m[k.as_str()]));
    }
    Value::Object(out)
}

fn shaped(v: &Value, shape: Shape, ty: usize) -> Value {
    match (shape, v) {
        (Shape::List, Value::Array(a)) => Value::Array(a.iter().map(|x| arrange_as(x, ty)).collect()),
        (Shape::Map, Value::Object(m)) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), arrange_as(&m[k.as_str()], ty)))
                    .collect(),
            )
        }
        _ => arrange_as(v, ty),
    }
}

/// `v` with every object's keys sorted (a map, or unstructured).
fn sorted(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), sorted(&m[k.as_str()])))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn keys(v: &Value) -> Vec<&str> {
        v.as_object().unwrap().keys().map(String::as_str).collect()
    }

    #[test]
    fn structs_in_declaration_order_maps_sorted() {
        let d = json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"labels": {"z": "1", "app": "x"}, "name": "x", "creationTimestamp": null},
            "spec": {
                "strategy": {},
                "selector": {"matchLabels": {"app": "x"}},
                "replicas": 2,
                "template": {"spec": {"containers": [
                    {"resources": {}, "ports": [{"containerPort": 80}], "name": "nginx", "image": "nginx"}
                ]}, "metadata": {}}
            },
            "status": {}
        });
        let a = arrange(&d);
        assert_eq!(keys(&a), ["kind", "apiVersion", "metadata", "spec", "status"]);
        assert_eq!(keys(&a["metadata"]), ["name", "creationTimestamp", "labels"]);
        assert_eq!(keys(&a["metadata"]["labels"]), ["app", "z"]);
        assert_eq!(keys(&a["spec"]), ["replicas", "selector", "template", "strategy"]);
        assert_eq!(keys(&a["spec"]["template"]), ["metadata", "spec"]);
        let c = &a["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(keys(c), ["name", "image", "ports", "resources"]);
    }

    #[test]
    fn inline_structs_are_in_place_and_unknown_kinds_sorted() {
        // A Volume's source is an inline struct: its fields follow `name`.
        let p = json!({"apiVersion": "v1", "kind": "Pod", "spec": {"volumes": [
            {"emptyDir": {}, "name": "v"}
        ]}});
        assert_eq!(keys(&arrange(&p)["spec"]["volumes"][0]), ["name", "emptyDir"]);
        let u = json!({"kind": "Widget", "apiVersion": "x/v1", "b": {"d": 1, "c": 2}});
        let a = arrange(&u);
        assert_eq!(keys(&a), ["apiVersion", "b", "kind"]);
        assert_eq!(keys(&a["b"]), ["c", "d"]);
        let v = arrange_type(
            &json!({"gitVersion": "v1", "minor": "33", "major": "1"}),
            "version.Info",
        );
        assert_eq!(keys(&v), ["major", "minor", "gitVersion"]);
    }
}
