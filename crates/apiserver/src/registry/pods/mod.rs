//! Pods (upstream's `pkg/registry/core/pod`): defaults, validation, what an update may change,
//! the status a new pod starts with, graceful deletion (the kubelet removes a pod bound to a
//! node), field selectors, the table, and the subresources served by the kubelet.

pub(crate) mod defaults;
pub(crate) mod ephemeral;
mod update;
pub(crate) mod validation;

use std::collections::BTreeMap;

use r8s_api::validation::FieldError;
use serde_json::{json, Value};

use super::meta::str_field;
use super::strategy::{age_cell, col, drop_status, name_cell, wide, Column, Connect, Strategy, AGE, NAME};
use crate::authn::UserInfo;

pub(crate) struct Pods;

impl Strategy for Pods {
    fn status_keeps_metadata(&self) -> &'static [&'static str] {
        &["ownerReferences", "deletionTimestamp"]
    }

    fn canonicalize_quantities(&self, obj: &mut Value) -> Result<(), &'static str> {
        super::quantities::pod_spec(obj.get_mut("spec"))
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn status_subresource(&self) -> bool {
        true
    }

    fn prepare_for_create(&self, _: &UserInfo, obj: &mut Value) {
        drop_status(obj);
        if let Some(spec) = obj.get_mut("spec") {
            defaults::service_account_alias(spec);
        }
        obj["status"] = json!({"phase": "Pending", "qosClass": qos_class(&obj["spec"])});
    }

    fn default(&self, obj: &mut Value) {
        defaults::pod(&mut obj["spec"]);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        validation::pod_spec(&mut errs, "spec", &obj["spec"]);
        errs
    }

    fn validate_create(&self, obj: &Value) -> Vec<FieldError> {
        ephemeral::validate_create(obj)
    }

    fn validate_main_update(&self, obj: &Value, old: &Value) -> Vec<FieldError> {
        update::validate_pod_update(obj, old)
    }

    fn default_grace_period(&self, obj: &Value) -> Option<i64> {
        Some(
            obj["spec"]["terminationGracePeriodSeconds"]
                .as_i64()
                .unwrap_or(30),
        )
    }

    /// A pod on a node is deleted gracefully: its kubelet stops it and removes the object.
    fn is_graceful_delete(&self, obj: &Value, grace: i64) -> bool {
        obj["spec"]["nodeName"].is_string() && grace > 0
    }

    fn fields(&self, obj: &Value, f: &mut BTreeMap<String, String>) {
        for (k, path) in [
            ("spec.nodeName", &["spec", "nodeName"]),
            ("spec.restartPolicy", &["spec", "restartPolicy"]),
            ("spec.schedulerName", &["spec", "schedulerName"]),
            ("spec.serviceAccountName", &["spec", "serviceAccountName"]),
            ("status.phase", &["status", "phase"]),
            ("status.podIP", &["status", "podIP"]),
            ("status.nominatedNodeName", &["status", "nominatedNodeName"]),
        ] {
            f.insert(k.to_owned(), str_field(obj, path).unwrap_or("").to_owned());
        }
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col("Ready", "string", "The aggregate readiness state of this pod for accepting traffic."),
            col("Status", "string", "The aggregate status of the containers in this pod."),
            col("Restarts", "string", "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."),
            AGE,
            wide("IP", "IP address allocated to the pod. Routable at least within the cluster."),
            wide("Node", "Name of the node this pod is running on."),
            wide("Nominated Node", "Name of the node where the pod is nominated to run."),
            wide("Readiness Gates", "Readiness gates of the pod."),
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let (spec, status) = (&obj["spec"], &obj["status"]);
        let total = spec["containers"].as_array().map(Vec::len).unwrap_or(0);
        let statuses = status["containerStatuses"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let ready = statuses.iter().filter(|c| c["ready"] == true).count();
        let restarts: i64 = statuses.iter().filter_map(|c| c["restartCount"].as_i64()).sum();
        let gates = spec["readinessGates"].as_array().map(Vec::len).unwrap_or(0);
        vec![
            name_cell(obj),
            json!(format!("{ready}/{total}")),
            json!(status_reason(obj)),
            json!(restarts.to_string()),
            age_cell(obj),
            json!(status["podIP"].as_str().unwrap_or("<none>")),
            json!(spec["nodeName"].as_str().unwrap_or("<none>")),
            json!(status["nominatedNodeName"].as_str().unwrap_or("<none>")),
            json!(if gates == 0 {
                "<none>".to_owned()
            } else {
                format!("0/{gates}")
            }),
        ]
    }

    fn connect(&self, sub: &str) -> Option<Connect> {
        match sub {
            "binding" => Some(Connect::Binding),
            "eviction" => Some(Connect::Eviction),
            "log" => Some(Connect::PodLog),
            "proxy" => Some(Connect::PodProxy),
            _ => None,
        }
    }
}

fn status_reason(obj: &Value) -> String {
    if obj["metadata"]["deletionTimestamp"].is_string() {
        return "Terminating".into();
    }
    let status = &obj["status"];
    let mut reason = status["reason"]
        .as_str()
        .or(status["phase"].as_str())
        .unwrap_or("Pending")
        .to_owned();
    for cs in status["containerStatuses"].as_array().into_iter().flatten() {
        if let Some(r) = cs["state"]["waiting"]["reason"].as_str() {
            reason = r.to_owned();
        } else if let Some(r) = cs["state"]["terminated"]["reason"].as_str() {
            reason = r.to_owned();
        }
    }
    reason
}

/// The pod's QoS class from its containers' requests and limits (upstream `GetPodQOS`).
pub(crate) fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = spec["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(spec["initContainers"].as_array().into_iter().flatten())
        .collect();
    let mut any = false;
    let mut guaranteed = true;
    for c in &containers {
        let req = &c["resources"]["requests"];
        let lim = &c["resources"]["limits"];
        for r in ["cpu", "memory"] {
            let (q, l) = (
                req.get(r).filter(|v| !v.is_null()),
                lim.get(r).filter(|v| !v.is_null()),
            );
            if q.is_some() || l.is_some() {
                any = true;
            }
            match (q, l) {
                (_, None) => guaranteed = false,
                (Some(q), Some(l)) if !same_quantity(q, l) => guaranteed = false,
                _ => {}
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// Two quantities with the same value ("0.5" and "500m").
fn same_quantity(a: &Value, b: &Value) -> bool {
    match (a.as_str(), b.as_str()) {
        (Some(x), Some(y)) => match (
            r8s_api::quantity::parse_milli(x),
            r8s_api::quantity::parse_milli(y),
        ) {
            (Ok(x), Ok(y)) => x == y,
            _ => x == y,
        },
        _ => a == b,
    }
}
