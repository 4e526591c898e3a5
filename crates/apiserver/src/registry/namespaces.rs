//! Namespaces (upstream's `pkg/registry/core/namespace`): the `kubernetes` finalizer and the
//! name label by default, Active when created, Terminating when deleted, held until the
//! namespace controller has emptied `spec.finalizers` (through `finalize`).

use std::collections::BTreeMap;

use r8s_api::validation::dns1123_label;
use serde_json::{json, Value};

use super::meta;
use super::strategy::{age_cell, col, drop_status, name_cell, Column, Strategy, AGE, NAME};
use crate::authn::UserInfo;

pub(crate) struct Namespaces;

impl Strategy for Namespaces {
    fn tracks_generation(&self) -> bool {
        true
    }

    fn status_subresource(&self) -> bool {
        true
    }

    fn prepare_for_create(&self, _: &UserInfo, obj: &mut Value) {
        drop_status(obj);
        name_label(obj);
        obj["status"] = json!({"phase": "Active"});
    }

    fn default(&self, obj: &mut Value) {
        if obj["spec"]["finalizers"].is_null() {
            obj["spec"] = json!({"finalizers": ["kubernetes"]});
        }
        name_label(obj);
    }

    fn validate_name(&self, name: &str) -> Vec<String> {
        dns1123_label(name)
    }

    fn holds_deletion(&self, obj: &Value) -> bool {
        obj["spec"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty())
    }

    fn prepare_for_delete(&self, obj: &mut Value) {
        obj["status"]["phase"] = json!("Terminating");
    }

    fn fields(&self, obj: &Value, f: &mut BTreeMap<String, String>) {
        f.insert(
            "status.phase".into(),
            meta::str_field(obj, &["status", "phase"])
                .unwrap_or("")
                .to_owned(),
        );
    }

    fn columns(&self) -> Vec<Column> {
        vec![NAME, col("Status", "string", "The status of the namespace"), AGE]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        vec![
            name_cell(obj),
            json!(obj["status"]["phase"].as_str().unwrap_or("")),
            age_cell(obj),
        ]
    }
}

/// Every namespace carries its name as the label `kubernetes.io/metadata.name` (upstream's
/// defaulting and namespace strategy), whatever the client sent, so that selectors of
/// namespaces (webhooks', network policies') can name one. Run when defaulting and again once a
/// generated name is known (`prepare_for_create`).
fn name_label(obj: &mut Value) {
    let name = meta::name(obj).to_owned();
    if name.is_empty() {
        return;
    }
    let m = meta::meta_mut(obj);
    if !m.get("labels").is_some_and(Value::is_object) {
        m.insert("labels".into(), json!({}));
    }
    m["labels"]["kubernetes.io/metadata.name"] = json!(name);
}
