//! ConfigMaps (upstream's `pkg/registry/core/configmap`): keys, the size limit, immutability,
//! the table. The key and immutability rules are shared with Secrets.

use r8s_api::validation::FieldError;
use serde_json::{json, Value};

use super::strategy::{age_cell, col, count, name_cell, total_size, Column, Strategy, AGE, NAME};

/// Upstream's limit on a ConfigMap's or Secret's data (`MaxSecretSize`).
pub(super) const MAX_DATA_BYTES: usize = 1024 * 1024;

const IMMUTABLE_SET: &str = "field is immutable when `immutable` is set";

pub(crate) struct ConfigMaps;

impl Strategy for ConfigMaps {
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        // binaryData counts decoded, as Go holds it.
        let binary: usize = obj["binaryData"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| k.len() + v.as_str().map_or(0, |b| b.len() / 4 * 3))
            .sum();
        if total_size(&obj["data"]) + binary > MAX_DATA_BYTES {
            errs.push(FieldError::too_long("[]", MAX_DATA_BYTES));
        }
        validate_keys(&mut errs, obj);
        errs
    }

    fn validate_update(&self, obj: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        validate_immutable(&mut errs, obj, old, &["data", "binaryData"]);
        errs
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col("Data", "string", "Data contains the configuration data."),
            AGE,
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        vec![
            name_cell(obj),
            json!(count(&obj["data"]) + count(&obj["binaryData"])),
            age_cell(obj),
        ]
    }
}

/// The keys of data, binaryData and stringData (upstream's `IsConfigMapKey`).
pub(super) fn validate_keys(errs: &mut Vec<FieldError>, obj: &Value) {
    for field in ["data", "binaryData", "stringData"] {
        if let Some(m) = obj[field].as_object() {
            for k in m.keys() {
                let ok = !k.is_empty()
                    && k.len() <= 253
                    && k.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
                if !ok {
                    errs.push(FieldError::invalid(
                        format!("{field}[{k}]"),
                        k,
                        "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
                    ));
                }
            }
        }
    }
}

/// Once `immutable` is set, it stays and so do the `data` maps.
pub(super) fn validate_immutable(errs: &mut Vec<FieldError>, obj: &Value, old: &Value, data: &[&str]) {
    // Absent and empty are the same map.
    let map = |v: &Value| v.as_object().filter(|m| !m.is_empty()).cloned();
    if old["immutable"] == true {
        if obj["immutable"] != true {
            errs.push(FieldError::forbidden("immutable", IMMUTABLE_SET));
        }
        for field in data {
            if map(&obj[*field]) != map(&old[*field]) {
                errs.push(FieldError::forbidden(*field, IMMUTABLE_SET));
            }
        }
    }
}
