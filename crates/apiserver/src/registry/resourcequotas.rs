//! ResourceQuotas (upstream's `pkg/registry/core/resourcequota`): status through its
//! subresource, the table of used over hard.

use r8s_api::quantity::Quantity;
use r8s_api::validation::FieldError;
use serde_json::{json, Value};

use super::strategy::{age_cell, col, name_cell, Column, Strategy, AGE, NAME};

pub(crate) struct ResourceQuotas;

impl Strategy for ResourceQuotas {
    fn tracks_generation(&self) -> bool {
        true
    }

    fn status_subresource(&self) -> bool {
        true
    }

    fn canonicalize_quantities(&self, obj: &mut Value) -> Result<(), &'static str> {
        super::quantities::lists(obj.get_mut("spec"), &["hard"])?;
        super::quantities::lists(obj.get_mut("status"), &["hard", "used"])
    }

    /// Every quantity of `spec.hard`, `status.hard` and `status.used` is at least 0 (part of
    /// upstream's `ValidateResourceQuota`; decoding has already refused what does not parse).
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        for (at, list) in [
            ("spec.hard", &obj["spec"]["hard"]),
            ("status.hard", &obj["status"]["hard"]),
            ("status.used", &obj["status"]["used"]),
        ] {
            for (name, q) in list.as_object().into_iter().flatten() {
                let Some(q) = q.as_str().and_then(|s| Quantity::parse(s).ok()) else {
                    continue;
                };
                if q.sign() < 0 {
                    errs.push(FieldError::invalid(
                        format!("{at}[{name}]"),
                        &q.to_string(),
                        "must be greater than or equal to 0",
                    ));
                }
            }
        }
        errs
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            AGE,
            col("Request", "string", "Request represents a minimum amount of cpu/memory that a container may consume."),
            col("Limit", "string", "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node."),
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let (requests, limits) = quota_cells(obj);
        vec![name_cell(obj), age_cell(obj), json!(requests), json!(limits)]
    }
}

/// The REQUEST and LIMIT cells of a ResourceQuota: `name: used/hard` for each resource of
/// its spec, sorted, `limits.*` in the second (upstream `printResourceQuota`).
fn quota_cells(obj: &Value) -> (String, String) {
    let quantity = |v: &Value| {
        v.as_str()
            .and_then(|s| r8s_api::quantity::Quantity::parse(s).ok())
            .unwrap_or_default()
            .to_string()
    };
    let (mut requests, mut limits) = (Vec::new(), Vec::new());
    let mut names: Vec<&String> = obj["spec"]["hard"]
        .as_object()
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    names.sort();
    for r in names {
        let cell = format!(
            "{r}: {}/{}",
            quantity(&obj["status"]["used"][r.as_str()]),
            quantity(&obj["status"]["hard"][r.as_str()])
        );
        if r.starts_with("limits.") {
            limits.push(cell);
        } else {
            requests.push(cell);
        }
    }
    (requests.join(", "), limits.join(", "))
}
