//! PriorityClasses (upstream's `pkg/registry/scheduling/priorityclass`): the preemption
//! policy by default, reserved `system-` names, a value and policy that cannot change, the
//! table.

use r8s_api::validation::FieldError;
use serde_json::{json, Value};

use super::meta;
use super::strategy::{age_cell, col, go_string, name_cell, Column, Strategy, AGE, NAME};

pub(crate) struct PriorityClasses;

impl Strategy for PriorityClasses {
    fn default(&self, obj: &mut Value) {
        if obj.get("preemptionPolicy").is_none_or(Value::is_null) {
            obj["preemptionPolicy"] = json!("PreemptLowerPriority");
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if obj.get("value").is_none_or(Value::is_null) {
            errs.push(FieldError::required("value", ""));
        }
        let name = meta::name(obj);
        if name.starts_with("system-") && !matches!(name, "system-cluster-critical" | "system-node-critical")
        {
            errs.push(FieldError::invalid(
                "metadata.name",
                name,
                "priority class names with 'system-' prefix are reserved",
            ));
        }
        errs
    }

    fn validate_update(&self, obj: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if obj["value"] != old["value"] {
            errs.push(FieldError::forbidden("value", "may not be changed in an update."));
        }
        if obj["preemptionPolicy"] != old["preemptionPolicy"] {
            errs.push(FieldError::invalid_raw(
                "preemptionPolicy",
                &go_string(&obj["preemptionPolicy"]),
                "field is immutable",
            ));
        }
        errs
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col("Value", "integer", "The value of this priority class. This is the actual priority that pods receive when they have the name of this class in their pod spec."),
            col("Global-Default", "boolean", "globalDefault specifies whether this PriorityClass should be considered as the default priority for pods that do not have any priority class."),
            AGE,
            col("PreemptionPolicy", "string", "PreemptionPolicy is the Policy for preempting pods with lower priority."),
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        vec![
            name_cell(obj),
            json!(obj["value"].as_i64().unwrap_or(0)),
            json!(obj["globalDefault"].as_bool().unwrap_or(false)),
            age_cell(obj),
            json!(obj["preemptionPolicy"].as_str().unwrap_or("PreemptLowerPriority")),
        ]
    }
}
