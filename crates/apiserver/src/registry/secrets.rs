//! Secrets (upstream's `pkg/registry/core/secret`): `Opaque` and stringData by default, the
//! size limit, type and immutability, the `type` field selector, the table.

use std::collections::BTreeMap;

use r8s_api::validation::FieldError;
use serde_json::{json, Value};

use super::configmaps::{validate_immutable, validate_keys, MAX_DATA_BYTES};
use super::strategy::{age_cell, col, count, go_string, name_cell, Column, Strategy, AGE, NAME};

pub(crate) struct Secrets;

impl Strategy for Secrets {
    fn default(&self, obj: &mut Value) {
        if obj.get("type").is_none_or(Value::is_null) {
            obj["type"] = json!("Opaque");
        }
        // stringData is write-only: its entries become data (base64), overriding data's, and
        // it is never stored or returned (upstream's conversion does this).
        if let Some(Value::Object(string_data)) = obj.as_object_mut().and_then(|o| o.remove("stringData")) {
            use base64::Engine;
            if !obj["data"].is_object() {
                obj["data"] = json!({});
            }
            for (k, v) in string_data {
                let text = v.as_str().unwrap_or_default();
                obj["data"][k] = json!(base64::engine::general_purpose::STANDARD.encode(text));
            }
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let decoded: usize = obj["data"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| k.len() + v.as_str().map_or(0, |b| b.len() / 4 * 3))
            .sum();
        if decoded > MAX_DATA_BYTES {
            errs.push(FieldError::too_long("data", MAX_DATA_BYTES));
        }
        validate_keys(&mut errs, obj);
        errs
    }

    fn validate_update(&self, obj: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if obj["type"] != old["type"] {
            errs.push(FieldError::invalid_raw(
                "type",
                &go_string(&obj["type"]),
                "field is immutable",
            ));
        }
        validate_immutable(&mut errs, obj, old, &["data"]);
        errs
    }

    fn fields(&self, obj: &Value, f: &mut BTreeMap<String, String>) {
        f.insert("type".into(), obj["type"].as_str().unwrap_or("").to_owned());
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col("Type", "string", "The type of the secret"),
            col("Data", "string", "The number of data items in the secret"),
            AGE,
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        vec![
            name_cell(obj),
            json!(obj["type"].as_str().unwrap_or("")),
            json!(count(&obj["data"])),
            age_cell(obj),
        ]
    }
}
