//! The other pod-template workloads (upstream's `pkg/registry/apps/{statefulset,daemonset,
//! controllerrevision}` and `pkg/registry/core/{replicationcontroller,podtemplate}`): defaults,
//! validation and tables as upstream has them.

use std::collections::BTreeMap;

use r8s_api::validation::FieldError;
use serde_json::{json, Value};

use super::apps::{
    container_summary, format_label_map, format_labels, go_int_or_string, int_or_percent, non_negative,
    replicas_not_negative, selector_matches_template, selector_string,
};
use super::meta;
use super::pods::{defaults as pod_defaults, validation as pod_validation};
use super::strategy::{age_cell, col, name_cell, wide, Column, Strategy, AGE, NAME};
use crate::authn::UserInfo;
use crate::status::ApiError;

/// The DaemonSet annotation holding its template's generation.
pub(crate) const TEMPLATE_GENERATION: &str = "deprecated.daemonset.template.generation";

const CONTAINERS: Column = wide("Containers", "Names of each container in the template.");
const IMAGES: Column = wide("Images", "Images referenced by each container in the template.");

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

/// Unset (or null) `obj[key]` becomes `value`.
pub(super) fn default_field(obj: &mut Value, key: &str, value: Value) {
    if obj.get(key).is_none_or(Value::is_null) {
        obj[key] = value;
    }
}

fn template_quantities(obj: &mut Value) -> Result<(), &'static str> {
    let template = obj
        .get_mut("spec")
        .and_then(|s| s.get_mut("template"))
        .and_then(|t| t.get_mut("spec"));
    super::quantities::pod_spec(template)
}

/// The template's pods restart always and have no deadline (upstream's
/// `ValidatePodTemplateSpecForStatefulSet`/`…ForReplicaSet`).
fn restarts_always(errs: &mut Vec<FieldError>, template_spec: &Value, kind: &str) {
    if let Some(p) = template_spec["restartPolicy"].as_str().filter(|p| *p != "Always") {
        errs.push(FieldError::not_supported(
            "spec.template.spec.restartPolicy",
            p,
            &["Always"],
        ));
    }
    if !template_spec["activeDeadlineSeconds"].is_null() {
        errs.push(FieldError::forbidden(
            "spec.template.spec.activeDeadlineSeconds",
            format!("activeDeadlineSeconds in {kind} is not Supported"),
        ));
    }
}

fn immutable_selector(obj: &Value, old: &Value) -> Vec<FieldError> {
    if obj["spec"]["selector"] == old["spec"]["selector"] {
        return Vec::new();
    }
    vec![FieldError::invalid_raw(
        "spec.selector",
        &r8s_api::validation::go_label_selector(&obj["spec"]["selector"]),
        "field is immutable",
    )]
}

/// Upstream's `dropStatefulSetDisabledFields`: `rollingUpdate.maxUnavailable` is kept only
/// with the MaxUnavailableStatefulSet gate on, or when the old object has it already.
fn drop_disabled_max_unavailable(obj: &mut Value, old: &Value) {
    let in_use = !old["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"].is_null();
    if r8s_api::features::max_unavailable_stateful_set() || in_use {
        return;
    }
    if let Some(ru) = obj["spec"]["updateStrategy"]["rollingUpdate"].as_object_mut() {
        ru.remove("maxUnavailable");
    }
}

/// StatefulSets.
pub(crate) struct StatefulSets;

impl Strategy for StatefulSets {
    fn canonicalize_quantities(&self, obj: &mut Value) -> Result<(), &'static str> {
        template_quantities(obj)
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn status_subresource(&self) -> bool {
        true
    }

    fn validate_name(&self, name: &str) -> Vec<String> {
        r8s_api::validation::dns1123_label(name)
    }

    fn prepare_for_create(&self, _user: &UserInfo, obj: &mut Value) {
        super::strategy::drop_status(obj);
        drop_disabled_max_unavailable(obj, &Value::Null);
    }

    fn prepare_for_update(&self, obj: &mut Value, old: &Value) -> Result<(), ApiError> {
        super::strategy::keep_status(obj, old);
        drop_disabled_max_unavailable(obj, old);
        Ok(())
    }

    fn default(&self, obj: &mut Value) {
        let spec = &mut obj["spec"];
        if !spec.is_object() {
            return;
        }
        default_field(spec, "replicas", json!(1));
        default_field(spec, "podManagementPolicy", json!("OrderedReady"));
        default_field(spec, "revisionHistoryLimit", json!(10));
        default_field(spec, "updateStrategy", json!({}));
        let us = &mut spec["updateStrategy"];
        // A defaulted type brings a rolling update with it; a given one only gets its partition.
        if us["type"].as_str().is_none_or(str::is_empty) {
            us["type"] = json!("RollingUpdate");
            default_field(us, "rollingUpdate", json!({}));
        }
        if us["type"] == "RollingUpdate" && us["rollingUpdate"].is_object() {
            default_field(&mut us["rollingUpdate"], "partition", json!(0));
        }
        default_field(spec, "persistentVolumeClaimRetentionPolicy", json!({}));
        let retention = &mut spec["persistentVolumeClaimRetentionPolicy"];
        default_field(retention, "whenDeleted", json!("Retain"));
        default_field(retention, "whenScaled", json!("Retain"));
        for pvc in spec["volumeClaimTemplates"].as_array_mut().into_iter().flatten() {
            default_field(pvc, "apiVersion", json!("v1"));
            default_field(pvc, "kind", json!("PersistentVolumeClaim"));
            default_field(pvc, "spec", json!({}));
            default_field(&mut pvc["spec"], "volumeMode", json!("Filesystem"));
            default_field(pvc, "status", json!({}));
            default_field(&mut pvc["status"], "phase", json!("Pending"));
        }
        pod_defaults::pod_spec(&mut spec["template"]["spec"]);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let spec = &obj["spec"];
        match spec["podManagementPolicy"].as_str().unwrap_or("") {
            "OrderedReady" | "Parallel" => {}
            p => errs.push(FieldError::invalid(
                "spec.podManagementPolicy",
                p,
                "must be 'OrderedReady' or 'Parallel'",
            )),
        }
        let us = &spec["updateStrategy"];
        match us["type"].as_str().unwrap_or("") {
            "RollingUpdate" => {
                non_negative(
                    &mut errs,
                    &us["rollingUpdate"],
                    "spec.updateStrategy.rollingUpdate",
                    "partition",
                );
                let mu = &us["rollingUpdate"]["maxUnavailable"];
                if !mu.is_null() {
                    let field = "spec.updateStrategy.rollingUpdate.maxUnavailable";
                    let n = int_or_percent(&mut errs, mu, field);
                    if n == 0 {
                        errs.push(FieldError::invalid_raw(
                            field,
                            &go_int_or_string(mu),
                            "cannot be 0",
                        ));
                    }
                    if mu.is_string() && n > 100 {
                        errs.push(FieldError::invalid_raw(
                            field,
                            &go_int_or_string(mu),
                            "must not be greater than 100%",
                        ));
                    }
                }
            }
            "OnDelete" => {
                if !us["rollingUpdate"].is_null() {
                    errs.push(FieldError::invalid(
                        "spec.updateStrategy.rollingUpdate",
                        &us["rollingUpdate"].to_string(),
                        "only allowed for updateStrategy 'RollingUpdate'",
                    ));
                }
            }
            t => errs.push(FieldError::invalid(
                "spec.updateStrategy",
                t,
                "must be 'RollingUpdate' or 'OnDelete'",
            )),
        }
        for (key, allowed) in [
            ("whenDeleted", ["Retain", "Delete"]),
            ("whenScaled", ["Retain", "Delete"]),
        ] {
            let v = spec["persistentVolumeClaimRetentionPolicy"][key]
                .as_str()
                .unwrap_or("");
            if !allowed.contains(&v) {
                errs.push(FieldError::not_supported(
                    format!("spec.persistentVolumeClaimRetentionPolicy.{key}"),
                    v,
                    &allowed,
                ));
            }
        }
        replicas_not_negative(&mut errs, spec);
        non_negative(&mut errs, spec, "spec", "minReadySeconds");
        selector_matches_template(&mut errs, spec, "statefulset");
        if let Some(service) = spec["serviceName"].as_str().filter(|s| !s.is_empty()) {
            for e in r8s_api::validation::dns1123_label(service) {
                errs.push(FieldError::invalid("spec.serviceName", service, e));
            }
        }
        restarts_always(&mut errs, &spec["template"]["spec"], "StatefulSet");
        errs
    }

    /// Upstream's `ValidateStatefulSetUpdate`: only some of the spec may change.
    fn validate_main_update(&self, obj: &Value, old: &Value) -> Vec<FieldError> {
        const MUTABLE: &[&str] = &[
            "replicas",
            "ordinals",
            "template",
            "updateStrategy",
            "persistentVolumeClaimRetentionPolicy",
            "minReadySeconds",
        ];
        let rest = |v: &Value| {
            let mut spec = v["spec"].as_object().cloned().unwrap_or_default();
            spec.retain(|k, _| !MUTABLE.contains(&k.as_str()));
            spec
        };
        if rest(obj) == rest(old) {
            return Vec::new();
        }
        vec![FieldError::forbidden(
            "spec",
            "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
        )]
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col("Ready", "string", "Number of the pod with ready state"),
            AGE,
            CONTAINERS,
            IMAGES,
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let (containers, images) = container_summary(&obj["spec"]["template"]["spec"]);
        vec![
            name_cell(obj),
            json!(format!(
                "{}/{}",
                int(&obj["status"]["readyReplicas"]),
                int(&obj["spec"]["replicas"])
            )),
            age_cell(obj),
            json!(containers),
            json!(images),
        ]
    }
}

/// DaemonSets.
pub(crate) struct DaemonSets;

impl Strategy for DaemonSets {
    fn canonicalize_quantities(&self, obj: &mut Value) -> Result<(), &'static str> {
        template_quantities(obj)
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn status_subresource(&self) -> bool {
        true
    }

    /// apps/v1 keeps the template's generation (extensions/v1beta1's templateGeneration) in an
    /// annotation, starting at 1.
    fn prepare_for_create(&self, _user: &UserInfo, obj: &mut Value) {
        super::strategy::drop_status(obj);
        obj["metadata"]["annotations"][TEMPLATE_GENERATION] = json!("1");
    }

    /// A new template is a new template generation.
    fn prepare_for_update(&self, obj: &mut Value, old: &Value) -> Result<(), ApiError> {
        super::strategy::keep_status(obj, old);
        let was: i64 = old["metadata"]["annotations"][TEMPLATE_GENERATION]
            .as_str()
            .and_then(|g| g.parse().ok())
            .unwrap_or(1);
        let now = if obj["spec"]["template"] != old["spec"]["template"] {
            was + 1
        } else {
            was
        };
        if !obj["metadata"]["annotations"].is_object() {
            obj["metadata"]["annotations"] = json!({});
        }
        obj["metadata"]["annotations"][TEMPLATE_GENERATION] = json!(now.to_string());
        Ok(())
    }

    fn default(&self, obj: &mut Value) {
        let spec = &mut obj["spec"];
        if !spec.is_object() {
            return;
        }
        default_field(spec, "revisionHistoryLimit", json!(10));
        default_field(spec, "updateStrategy", json!({}));
        default_field(&mut spec["updateStrategy"], "type", json!("RollingUpdate"));
        if spec["updateStrategy"]["type"] == "RollingUpdate" {
            let us = &mut spec["updateStrategy"];
            default_field(us, "rollingUpdate", json!({}));
            default_field(&mut us["rollingUpdate"], "maxUnavailable", json!(1));
            default_field(&mut us["rollingUpdate"], "maxSurge", json!(0));
        }
        pod_defaults::pod_spec(&mut spec["template"]["spec"]);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let spec = &obj["spec"];
        selector_matches_template(&mut errs, spec, "daemonset");
        non_negative(&mut errs, spec, "spec", "minReadySeconds");
        non_negative(&mut errs, spec, "spec", "revisionHistoryLimit");
        pod_validation::pod_spec(&mut errs, "spec.template.spec", &spec["template"]["spec"]);
        restarts_always(&mut errs, &spec["template"]["spec"], "DaemonSet");
        let us = &spec["updateStrategy"];
        match us["type"].as_str().unwrap_or("") {
            "OnDelete" => {}
            "RollingUpdate" => {
                let ru = &us["rollingUpdate"];
                let path = "spec.updateStrategy.rollingUpdate";
                let unavailable = int_or_percent(
                    &mut errs,
                    &ru["maxUnavailable"],
                    &format!("{path}.maxUnavailable"),
                );
                let surge = int_or_percent(&mut errs, &ru["maxSurge"], &format!("{path}.maxSurge"));
                for (key, n) in [("maxUnavailable", unavailable), ("maxSurge", surge)] {
                    if ru[key].as_str().is_some_and(|s| s.ends_with('%')) && n > 100 {
                        errs.push(FieldError::invalid_raw(
                            format!("{path}.{key}"),
                            &go_int_or_string(&ru[key]),
                            "must not be greater than 100%",
                        ));
                    }
                }
                match (unavailable != 0, surge != 0) {
                    (true, true) => errs.push(FieldError::invalid_raw(
                        format!("{path}.maxSurge"),
                        &go_int_or_string(&ru["maxSurge"]),
                        "may not be set when maxUnavailable is non-zero",
                    )),
                    (false, false) => errs.push(FieldError::required(
                        format!("{path}.maxUnavailable"),
                        "cannot be 0 when maxSurge is 0",
                    )),
                    _ => {}
                }
            }
            t => errs.push(FieldError::not_supported(
                "spec.updateStrategy.type",
                t,
                &["OnDelete", "RollingUpdate"],
            )),
        }
        errs
    }

    fn validate_update(&self, obj: &Value, old: &Value) -> Vec<FieldError> {
        immutable_selector(obj, old)
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col("Desired", "integer", "The total number of nodes that should be running the daemon pod (including nodes correctly running the daemon pod). More info: https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/"),
            col("Current", "integer", "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod. More info: https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/"),
            col("Ready", "integer", "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and ready."),
            col("Up-to-date", "integer", "The total number of nodes that are running updated daemon pod"),
            col("Available", "integer", "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)"),
            col("Node Selector", "string", "NodeSelector is a selector which must be true for the pod to fit on a node. Selector which must match a node's labels for the pod to be scheduled on that node. More info: https://kubernetes.io/docs/concepts/configuration/assign-pod-node/"),
            AGE,
            CONTAINERS,
            IMAGES,
            wide("Selector", "A label query over pods that are managed by the daemon set. Must match in order to be controlled. If empty, defaulted to labels on Pod template. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors"),
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let (spec, status) = (&obj["spec"], &obj["status"]);
        let (containers, images) = container_summary(&spec["template"]["spec"]);
        vec![
            name_cell(obj),
            json!(int(&status["desiredNumberScheduled"])),
            json!(int(&status["currentNumberScheduled"])),
            json!(int(&status["numberReady"])),
            json!(int(&status["updatedNumberScheduled"])),
            json!(int(&status["numberAvailable"])),
            json!(format_label_map(&spec["template"]["spec"]["nodeSelector"])),
            age_cell(obj),
            json!(containers),
            json!(images),
            json!(selector_string(&spec["selector"])),
        ]
    }
}

/// ControllerRevisions: a DaemonSet's or StatefulSet's template at one revision.
pub(crate) struct ControllerRevisions;

impl Strategy for ControllerRevisions {
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if obj["data"].is_null() {
            errs.push(FieldError::required("data", "data is mandatory"));
        }
        if let Some(r) = obj["revision"].as_i64().filter(|r| *r < 0) {
            errs.push(FieldError::invalid_raw(
                "revision",
                &r.to_string(),
                "must be greater than or equal to 0",
            ));
        }
        errs
    }

    fn validate_update(&self, obj: &Value, old: &Value) -> Vec<FieldError> {
        if obj["data"] == old["data"] {
            return Vec::new();
        }
        vec![FieldError::invalid("data", "", "field is immutable")]
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col("Controller", "string", "Controller of the object"),
            col(
                "Revision",
                "string",
                "revision indicates the revision of the state represented by Data.",
            ),
            AGE,
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let controller = obj["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["controller"] == true)
            .map(|r| {
                let group = r["apiVersion"]
                    .as_str()
                    .and_then(|v| v.split_once('/'))
                    .map(|(g, _)| g)
                    .unwrap_or("");
                let kind = r["kind"].as_str().unwrap_or("").to_lowercase();
                let resource = if group.is_empty() {
                    kind
                } else {
                    format!("{kind}.{group}")
                };
                format!("{resource}/{}", r["name"].as_str().unwrap_or(""))
            })
            .unwrap_or_else(|| "<none>".into());
        vec![
            name_cell(obj),
            json!(controller),
            json!(int(&obj["revision"])),
            age_cell(obj),
        ]
    }
}

/// ReplicationControllers (v1): the ReplicaSet's older form with a plain map as selector.
pub(crate) struct ReplicationControllers;

impl Strategy for ReplicationControllers {
    /// A ReplicationController's selector is the label map itself; "" selects all.
    fn scale(&self, obj: &Value) -> (i64, i64, String) {
        let selector = super::apps::format_label_map(&obj["spec"]["selector"]);
        (
            obj["spec"]["replicas"].as_i64().unwrap_or(0),
            obj["status"]["replicas"].as_i64().unwrap_or(0),
            if selector == "<none>" {
                String::new()
            } else {
                selector
            },
        )
    }

    fn canonicalize_quantities(&self, obj: &mut Value) -> Result<(), &'static str> {
        template_quantities(obj)
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn status_subresource(&self) -> bool {
        true
    }

    /// Upstream's `SetDefaults_ReplicationController`: the selector and the labels default to
    /// the template's labels.
    fn default(&self, obj: &mut Value) {
        if !obj["spec"].is_object() {
            return;
        }
        let labels = obj["spec"]["template"]["metadata"]["labels"].clone();
        if labels.as_object().is_some_and(|l| !l.is_empty()) {
            if obj["spec"]["selector"].as_object().is_none_or(|s| s.is_empty()) {
                obj["spec"]["selector"] = labels.clone();
            }
            if obj["metadata"]["labels"].as_object().is_none_or(|l| l.is_empty()) {
                obj["metadata"]["labels"] = labels;
            }
        }
        default_field(&mut obj["spec"], "replicas", json!(1));
        if obj["spec"]["template"].is_object() {
            pod_defaults::pod_spec(&mut obj["spec"]["template"]["spec"]);
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let spec = &obj["spec"];
        let selector = meta::string_map(&spec["selector"]);
        if selector.is_empty() {
            errs.push(FieldError::required("spec.selector", ""));
        }
        replicas_not_negative(&mut errs, spec);
        non_negative(&mut errs, spec, "spec", "minReadySeconds");
        if spec["template"].is_null() {
            errs.push(FieldError::required("spec.template", ""));
            return errs;
        }
        let labels = meta::string_map(&spec["template"]["metadata"]["labels"]);
        if !selector.is_empty() && !selector.iter().all(|(k, v)| labels.get(k) == Some(v)) {
            errs.push(FieldError::invalid(
                "spec.template.metadata.labels",
                &format_labels(&labels),
                "`selector` does not match template `labels`",
            ));
        }
        pod_validation::pod_spec(&mut errs, "spec.template.spec", &spec["template"]["spec"]);
        restarts_always(&mut errs, &spec["template"]["spec"], "ReplicationController");
        errs
    }

    fn fields(&self, obj: &Value, f: &mut BTreeMap<String, String>) {
        f.insert(
            "status.replicas".into(),
            int(&obj["status"]["replicas"]).to_string(),
        );
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col("Desired", "integer", "Replicas is the number of desired replicas. This is a pointer to distinguish between explicit zero and unspecified. Defaults to 1. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicationcontroller#what-is-a-replicationcontroller"),
            col("Current", "integer", "Replicas is the most recently observed number of replicas. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicationcontroller#what-is-a-replicationcontroller"),
            col("Ready", "integer", "The number of ready replicas for this replication controller."),
            AGE,
            CONTAINERS,
            IMAGES,
            wide("Selector", "Selector is a label query over pods that should match the Replicas count. If Selector is empty, it is defaulted to the labels present on the Pod template. Label keys and values that must match in order to be controlled by this replication controller, if empty defaulted to labels on Pod template. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors"),
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let (spec, status) = (&obj["spec"], &obj["status"]);
        let (containers, images) = container_summary(&spec["template"]["spec"]);
        vec![
            name_cell(obj),
            json!(int(&spec["replicas"])),
            json!(int(&status["replicas"])),
            json!(int(&status["readyReplicas"])),
            age_cell(obj),
            json!(containers),
            json!(images),
            json!(format_label_map(&spec["selector"])),
        ]
    }
}

/// PodTemplates (v1).
pub(crate) struct PodTemplates;

impl Strategy for PodTemplates {
    fn canonicalize_quantities(&self, obj: &mut Value) -> Result<(), &'static str> {
        let spec = obj.get_mut("template").and_then(|t| t.get_mut("spec"));
        super::quantities::pod_spec(spec)
    }

    fn default(&self, obj: &mut Value) {
        if obj["template"].is_object() {
            pod_defaults::pod_spec(&mut obj["template"]["spec"]);
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        pod_validation::pod_spec(&mut errs, "template.spec", &obj["template"]["spec"]);
        errs
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col("Containers", "string", "Names of each container in the template."),
            col(
                "Images",
                "string",
                "Images referenced by each container in the template.",
            ),
            col("Pod Labels", "string", "The labels for the pod template."),
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let (containers, images) = container_summary(&obj["template"]["spec"]);
        vec![
            name_cell(obj),
            json!(containers),
            json!(images),
            json!(format_label_map(&obj["template"]["metadata"]["labels"])),
        ]
    }
}
