//! `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`: a `meta.k8s.io/v1` Table with the
//! resource's columns, what `kubectl get` prints.

use crate::registry::Resource;
use serde_json::{json, Value};

use super::{strategy, Query};

pub(crate) fn render(def: &Resource, objects: &[Value], list_meta: Option<Value>, query: &Query) -> Value {
    let strategy = def.strategy.clone();
    render_with(
        &strategy.columns(),
        |o| strategy.cells(o),
        objects,
        list_meta,
        query,
    )
}

/// A `scale` subresource's Table (upstream's printScale): the replicas wanted and had.
pub(crate) fn render_scale(scale: &Value, query: &Query) -> Value {
    let columns = [
        strategy::Column {
            format: "",
            ..strategy::NAME
        },
        strategy::col(
            "Desired",
            "integer",
            "replicas is the desired number of instances for the scaled object.",
        ),
        strategy::col(
            "Available",
            "integer",
            "replicas is the actual number of observed instances of the scaled object.",
        ),
        strategy::AGE,
    ];
    let cells = |o: &Value| {
        vec![
            strategy::name_cell(o),
            json!(o["spec"]["replicas"].as_i64().unwrap_or(0)),
            json!(o["status"]["replicas"].as_i64().unwrap_or(0)),
            strategy::age_cell(o),
        ]
    };
    render_with(&columns, cells, std::slice::from_ref(scale), None, query)
}

fn render_with(
    columns: &[strategy::Column],
    cells: impl Fn(&Value) -> Vec<Value>,
    objects: &[Value],
    list_meta: Option<Value>,
    query: &Query,
) -> Value {
    let columns: Vec<Value> = columns
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
            let mut row = json!({"cells": cells(obj)});
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
        let def = crate::registry::catalogue::builtin("", "v1", "pods").unwrap();
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
