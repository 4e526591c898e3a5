//! LimitRanges (upstream's `pkg/registry/core/limitrange`): Container items' defaults, the
//! table.

use serde_json::{json, Map, Value};

use super::strategy::{col, name_cell, Column, Strategy, NAME};

pub(crate) struct LimitRanges;

impl Strategy for LimitRanges {
    fn canonicalize_quantities(&self, obj: &mut Value) -> Result<(), &'static str> {
        let items = obj
            .get_mut("spec")
            .and_then(|s| s.get_mut("limits"))
            .and_then(Value::as_array_mut);
        for item in items.into_iter().flatten() {
            super::quantities::lists(
                Some(item),
                &["max", "min", "default", "defaultRequest", "maxLimitRequestRatio"],
            )?;
        }
        Ok(())
    }

    fn default(&self, obj: &mut Value) {
        defaults(obj);
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col(
                "Created At",
                "date",
                "CreationTimestamp is a timestamp representing the server time when this object was created.",
            ),
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        vec![name_cell(obj), obj["metadata"]["creationTimestamp"].clone()]
    }
}

/// A LimitRange's Container items: the default limit is the max where none is given, and
/// the default request the default limit, else the min (upstream `SetDefaults_LimitRangeItem`).
fn defaults(obj: &mut Value) {
    let items = obj
        .get_mut("spec")
        .and_then(|s| s.get_mut("limits"))
        .and_then(Value::as_array_mut);
    for item in items.into_iter().flatten() {
        if item["type"] != "Container" {
            continue;
        }
        let fill = |item: &mut Value, into: &str, from: &str| {
            let Some(from) = item[from].as_object().cloned() else {
                return;
            };
            if !item[into].is_object() {
                item[into] = json!({});
            }
            let into = item[into].as_object_mut().expect("made an object above");
            for (k, v) in from {
                into.entry(k).or_insert(v);
            }
        };
        fill(item, "default", "max");
        fill(item, "defaultRequest", "default");
        fill(item, "defaultRequest", "min");
        // Empty maps are not written, as Go leaves them out.
        for key in ["default", "defaultRequest"] {
            if item[key].as_object().is_some_and(Map::is_empty) {
                item.as_object_mut().expect("indexed above").remove(key);
            }
        }
    }
}
