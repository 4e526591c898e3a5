//! `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`: a `meta.k8s.io/v1` Table with the
//! resource's columns, what `kubectl get` prints.

use r8s_api::ResourceDef;
use serde_json::{json, Value};

use super::{strategy, Query};

pub(crate) fn render(def: &ResourceDef, objects: &[Value], list_meta: Option<Value>, query: &Query) -> Value {
    let strategy = strategy::of(def);
    let columns: Vec<Value> = strategy
        .columns()
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "type": c.kind,
                "format": c.format,
                "description": c.description,
                "priority": c.priority,
            })
        })
        .collect();
    let include = query.get("includeObject").unwrap_or("Metadata");
    let rows: Vec<Value> = objects
        .iter()
        .map(|obj| {
            let mut row = json!({"cells": strategy.cells(obj)});
            match include {
                "None" => {}
                "Object" => row["object"] = obj.clone(),
                _ => {
                    row["object"] = json!({
                        "kind": "PartialObjectMetadata",
                        "apiVersion": "meta.k8s.io/v1",
                        "metadata": obj["metadata"],
                    })
                }
            }
            row
        })
        .collect();
    let mut table = json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta.unwrap_or_else(|| json!({})),
        "columnDefinitions": columns,
        "rows": rows,
    });
    if table["metadata"].get("resourceVersion").is_none() {
        if let Some(rv) = objects
            .first()
            .and_then(|o| o["metadata"]["resourceVersion"].as_str())
        {
            table["metadata"]["resourceVersion"] = json!(rv);
        }
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_table_has_upstream_columns_and_metadata_rows() {
        let def = r8s_api::find("", "v1", "pods").unwrap();
        let pod = json!({"metadata": {"name": "p", "resourceVersion": "7"}, "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Pending"}});
        let t = render(def, &[pod], None, &Query::parse(None));
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(&names[..5], &["Name", "Ready", "Status", "Restarts", "Age"]);
        assert_eq!(t["rows"][0]["cells"][0], "p");
        assert_eq!(t["rows"][0]["cells"][1], "0/1");
        assert_eq!(t["rows"][0]["cells"][2], "Pending");
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(t["metadata"]["resourceVersion"], "7");
    }
}
