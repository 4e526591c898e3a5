//! ComponentStatuses (v1, deprecated since 1.19 but still listed by clients): the health of the
//! datastore, the scheduler and the controller manager, computed on each read, never stored.
//! Upstream probes each component's healthz port; r8s's scheduler and controller manager run
//! behind leader election wherever they run, so each is healthy while a holder keeps renewing
//! its kube-system Lease, and the datastore while it answers a read.

use serde_json::{json, Value};

use super::strategy::{col, name_cell, Column, Strategy, NAME};
use super::{meta, read};
use crate::context::Ctx;
use crate::status::ApiError;

/// The warning upstream sends with every ComponentStatus read.
pub(crate) const DEPRECATED: &str = "v1 ComponentStatus is deprecated in v1.19+";

pub(crate) struct ComponentStatuses;

impl Strategy for ComponentStatuses {
    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col("Status", "string", "Status of the component conditions"),
            col("Message", "string", "Message of the component conditions"),
            col("Error", "string", "Error of the component conditions"),
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let healthy = obj["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Healthy");
        let (status, message, error) = match healthy {
            Some(c) => (
                if c["status"] == "True" {
                    "Healthy"
                } else {
                    "Unhealthy"
                },
                c["message"].as_str().unwrap_or(""),
                c["error"].as_str().unwrap_or(""),
            ),
            None => ("Unknown", "", ""),
        };
        vec![name_cell(obj), json!(status), json!(message), json!(error)]
    }
}

fn component(name: &str, healthy: Result<(), String>) -> Value {
    let condition = match healthy {
        Ok(()) => json!({"type": "Healthy", "status": "True", "message": "ok"}),
        Err(e) => json!({"type": "Healthy", "status": "False", "error": e}),
    };
    json!({"kind": "ComponentStatus", "apiVersion": "v1", "metadata": {"name": name}, "conditions": [condition]})
}

/// Whether someone holds and keeps renewing the kube-system Lease `name`.
async fn lease_held(ctx: &Ctx, name: &str) -> Result<(), String> {
    let def = crate::registry::catalogue::builtin("coordination.k8s.io", "v1", "leases").expect("served");
    let lease = read(ctx, def, "kube-system", name)
        .await
        .map_err(|_| format!("no leader holds the kube-system/{name} Lease"))?;
    let spec = &lease["spec"];
    let holder = spec["holderIdentity"].as_str().unwrap_or("");
    let duration = spec["leaseDurationSeconds"].as_i64().unwrap_or(15);
    let age = spec["renewTime"].as_str().and_then(meta::age_seconds);
    match age {
        Some(age) if !holder.is_empty() && age <= duration => Ok(()),
        _ => Err(format!(
            "the kube-system/{name} Lease has not been renewed within {duration}s"
        )),
    }
}

/// Every component, in upstream's order.
pub(crate) async fn all(ctx: &Ctx) -> Vec<Value> {
    let store = match ctx.shared.store.get("/registry/health", 0).await {
        Ok(_) => Ok(()),
        Err(e) => Err(e.to_string()),
    };
    vec![
        component(
            "controller-manager",
            lease_held(ctx, "kube-controller-manager").await,
        ),
        component("scheduler", lease_held(ctx, "kube-scheduler").await),
        component("etcd-0", store),
    ]
}

/// One component by name.
pub(crate) async fn one(ctx: &Ctx, name: &str) -> Result<Value, ApiError> {
    all(ctx)
        .await
        .into_iter()
        .find(|c| c["metadata"]["name"] == name)
        .ok_or_else(|| ApiError::new(404, "NotFound", format!("componentstatuses \"{name}\" not found")))
}
