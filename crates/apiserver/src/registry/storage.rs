//! PersistentVolumeClaims and PersistentVolumes (upstream's `pkg/registry/core/
//! persistentvolumeclaim` and `…/persistentvolume`): defaults, validation in upstream's words,
//! status kept apart (a new object is `Pending`), the tables `kubectl get` prints. Nothing binds
//! claims to volumes yet (no provisioner runs): a pod using an unbound claim stays Pending with
//! the scheduler's upstream reason.

use r8s_api::validation::FieldError;
use serde_json::{json, Value};

use super::strategy::{
    age_cell, col, drop_status, keep_status, name_cell, wide, Column, Strategy, AGE, NAME,
};
use crate::status::ApiError;

const ACCESS_MODES: [&str; 4] = [
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];
const VOLUME_MODES: [&str; 2] = ["Block", "Filesystem"];
const RECLAIM_POLICIES: [&str; 3] = ["Delete", "Recycle", "Retain"];
/// The volume sources a PersistentVolume may name (one of them).
const VOLUME_SOURCES: [&str; 20] = [
    "awsElasticBlockStore",
    "azureDisk",
    "azureFile",
    "cephfs",
    "cinder",
    "csi",
    "fc",
    "flexVolume",
    "flocker",
    "gcePersistentDisk",
    "glusterfs",
    "hostPath",
    "iscsi",
    "local",
    "nfs",
    "photonPersistentDisk",
    "portworxVolume",
    "quobyte",
    "rbd",
    "storageos",
];

/// Access modes as `kubectl get` abbreviates them (upstream's `GetAccessModesAsString`).
fn access_modes_string(modes: &Value) -> String {
    let modes: Vec<&str> = modes
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut out = Vec::new();
    for (mode, short) in [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ] {
        if modes.contains(&mode) {
            out.push(short);
        }
    }
    out.join(",")
}

/// Upstream's `ValidatePersistentVolumeAccessModes`-style checks of `modes` at `path`.
fn validate_access_modes(errs: &mut Vec<FieldError>, path: &str, modes: &Value) {
    let modes: Vec<&str> = modes
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if modes.is_empty() {
        errs.push(FieldError::required(path, "at least 1 access mode is required"));
        return;
    }
    for m in &modes {
        if !ACCESS_MODES.contains(m) {
            errs.push(FieldError::not_supported(path, m, &ACCESS_MODES));
        }
    }
    if modes.contains(&"ReadWriteOncePod") && modes.len() > 1 {
        errs.push(FieldError::forbidden(
            path,
            "may not use ReadWriteOncePod with other access modes",
        ));
    }
}

fn validate_volume_mode(errs: &mut Vec<FieldError>, path: &str, mode: &Value) {
    if let Some(m) = mode.as_str() {
        if !VOLUME_MODES.contains(&m) {
            errs.push(FieldError::not_supported(path, m, &VOLUME_MODES));
        }
    }
}

/// A storage quantity that must be there and above zero.
fn validate_storage(errs: &mut Vec<FieldError>, path: &str, q: &Value) {
    match q.as_str() {
        None => errs.push(FieldError::required(path, "")),
        Some(s) => {
            let positive = r8s_api::quantity::Quantity::parse(s).is_ok_and(|q| q.milli_value() > 0);
            if !positive {
                errs.push(FieldError::invalid(path, s, "must be greater than zero"));
            }
        }
    }
}

/// The class a claim or volume asks for: the beta annotation wins, as upstream's helper has it.
fn class_of(obj: &Value) -> String {
    obj["metadata"]["annotations"]["volume.beta.kubernetes.io/storage-class"]
        .as_str()
        .or_else(|| obj["spec"]["storageClassName"].as_str())
        .unwrap_or("")
        .to_owned()
}

fn attributes_class(obj: &Value) -> String {
    obj["spec"]["volumeAttributesClassName"]
        .as_str()
        .filter(|s| !s.is_empty())
        .unwrap_or("<unset>")
        .to_owned()
}

fn phase(obj: &Value) -> String {
    if obj["metadata"]["deletionTimestamp"].is_string() {
        return "Terminating".into();
    }
    obj["status"]["phase"].as_str().unwrap_or("").to_owned()
}

/// A new claim's or volume's status: whatever the request said, `Pending`.
fn pending(obj: &mut Value) {
    drop_status(obj);
    obj["status"] = json!({"phase": "Pending"});
}

pub(crate) struct PersistentVolumeClaims;

impl Strategy for PersistentVolumeClaims {
    fn status_subresource(&self) -> bool {
        true
    }

    fn canonicalize_quantities(&self, obj: &mut Value) -> Result<(), &'static str> {
        let spec = obj.get_mut("spec");
        super::quantities::lists(spec.and_then(|s| s.get_mut("resources")), &["limits", "requests"])?;
        super::quantities::lists(obj.get_mut("status"), &["capacity", "allocatedResources"])
    }

    /// A new claim waits to be bound.
    fn prepare_for_create(&self, _user: &crate::authn::UserInfo, obj: &mut Value) {
        pending(obj);
    }

    fn prepare_for_update(&self, obj: &mut Value, old: &Value) -> Result<(), ApiError> {
        keep_status(obj, old);
        Ok(())
    }

    /// Upstream's `SetDefaults_PersistentVolumeClaimSpec`.
    fn default(&self, obj: &mut Value) {
        if obj["spec"].is_object() && obj["spec"]["volumeMode"].is_null() {
            obj["spec"]["volumeMode"] = json!("Filesystem");
        }
    }

    /// Upstream's `ValidatePersistentVolumeClaimSpec`.
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let spec = &obj["spec"];
        validate_access_modes(&mut errs, "spec.accessModes", &spec["accessModes"]);
        validate_storage(
            &mut errs,
            "spec.resources[storage]",
            &spec["resources"]["requests"]["storage"],
        );
        validate_volume_mode(&mut errs, "spec.volumeMode", &spec["volumeMode"]);
        errs
    }

    /// The spec is fixed once created, but for a bound claim's requests (expansion) and its
    /// attributes class.
    fn validate_main_update(&self, obj: &Value, old: &Value) -> Vec<FieldError> {
        let mut new_spec = obj["spec"].clone();
        let old_spec = &old["spec"];
        if old["status"]["phase"] == "Bound" {
            // A bound claim may grow. Asking for less than before is allowed only down to above
            // what it has (upstream's RecoverVolumeExpansionFailure, on by default in 1.33:
            // undoing an expansion that failed; nothing shrinks a volume).
            let quantity = |v: &Value| v.as_str().and_then(|q| r8s_api::quantity::parse_value(q).ok());
            let want = quantity(&obj["spec"]["resources"]["requests"]["storage"]);
            let before = quantity(&old_spec["resources"]["requests"]["storage"]);
            let have = quantity(&old["status"]["capacity"]["storage"]);
            if let (Some(want), Some(before)) = (want, before) {
                if want < before && have.is_some_and(|have| want <= have) {
                    return vec![FieldError::forbidden(
                        "spec.resources.requests.storage",
                        "field can not be less than status.capacity",
                    )];
                }
            }
            new_spec["resources"]["requests"] = old_spec["resources"]["requests"].clone();
            new_spec["volumeAttributesClassName"] = old_spec["volumeAttributesClassName"].clone();
            if let Some(m) = new_spec.as_object_mut() {
                if old_spec.get("volumeAttributesClassName").is_none() {
                    m.remove("volumeAttributesClassName");
                }
            }
        }
        // A volume name set by the binder on an unbound claim is the one allowed change.
        if old_spec["volumeName"].as_str().unwrap_or("").is_empty() {
            new_spec["volumeName"] = old_spec["volumeName"].clone();
            if old_spec.get("volumeName").is_none() {
                if let Some(m) = new_spec.as_object_mut() {
                    m.remove("volumeName");
                }
            }
        }
        if &new_spec != old_spec {
            return vec![FieldError::forbidden(
                "spec",
                "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
            )];
        }
        Vec::new()
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col(
                "Status",
                "string",
                "PersistentVolumeClaimStatus is the current status of a persistent volume claim.",
            ),
            col(
                "Volume",
                "string",
                "VolumeName is the binding reference to the PersistentVolume backing this claim.",
            ),
            col(
                "Capacity",
                "string",
                "capacity represents the actual resources of the underlying volume.",
            ),
            col(
                "Access Modes",
                "string",
                "accessModes contains the actual access modes the volume backing the PVC has.",
            ),
            col("StorageClass", "string", "StorageClass of the PVC"),
            col(
                "VolumeAttributesClass",
                "string",
                "VolumeAttributesClass of the PVC",
            ),
            AGE,
            wide(
                "VolumeMode",
                "volumeMode defines what type of volume is required by the claim.",
            ),
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let spec = &obj["spec"];
        let volume = spec["volumeName"].as_str().unwrap_or("");
        let (capacity, modes) = if volume.is_empty() {
            (String::new(), String::new())
        } else {
            (
                obj["status"]["capacity"]["storage"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
                access_modes_string(&obj["status"]["accessModes"]),
            )
        };
        vec![
            name_cell(obj),
            json!(phase(obj)),
            json!(volume),
            json!(capacity),
            json!(modes),
            json!(class_of(obj)),
            json!(attributes_class(obj)),
            age_cell(obj),
            json!(spec["volumeMode"].as_str().unwrap_or("<unset>")),
        ]
    }
}

pub(crate) struct PersistentVolumes;

impl Strategy for PersistentVolumes {
    fn status_subresource(&self) -> bool {
        true
    }

    fn canonicalize_quantities(&self, obj: &mut Value) -> Result<(), &'static str> {
        super::quantities::lists(obj.get_mut("spec"), &["capacity"])
    }

    /// A new volume is `Pending` until the binder makes it `Available`.
    fn prepare_for_create(&self, _user: &crate::authn::UserInfo, obj: &mut Value) {
        pending(obj);
    }

    fn prepare_for_update(&self, obj: &mut Value, old: &Value) -> Result<(), ApiError> {
        keep_status(obj, old);
        Ok(())
    }

    /// Upstream's `SetDefaults_PersistentVolume`.
    fn default(&self, obj: &mut Value) {
        let spec = &mut obj["spec"];
        if !spec.is_object() {
            return;
        }
        if spec["persistentVolumeReclaimPolicy"].is_null() {
            spec["persistentVolumeReclaimPolicy"] = json!("Retain");
        }
        if spec["volumeMode"].is_null() {
            spec["volumeMode"] = json!("Filesystem");
        }
    }

    /// Upstream's `ValidatePersistentVolumeSpec`, its main rules.
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let spec = &obj["spec"];
        validate_access_modes(&mut errs, "spec.accessModes", &spec["accessModes"]);
        match spec["capacity"].as_object() {
            None => errs.push(FieldError::required("spec.capacity", "")),
            Some(c) if !c.contains_key("storage") || c.len() > 1 => errs.push(FieldError::not_supported(
                "spec.capacity",
                c.keys().find(|k| *k != "storage").map_or("", |k| k.as_str()),
                &["storage"],
            )),
            Some(_) => validate_storage(&mut errs, "spec.capacity[storage]", &spec["capacity"]["storage"]),
        }
        if let Some(p) = spec["persistentVolumeReclaimPolicy"].as_str() {
            if !RECLAIM_POLICIES.contains(&p) {
                errs.push(FieldError::not_supported(
                    "spec.persistentVolumeReclaimPolicy",
                    p,
                    &RECLAIM_POLICIES,
                ));
            }
        }
        validate_volume_mode(&mut errs, "spec.volumeMode", &spec["volumeMode"]);
        let sources = VOLUME_SOURCES
            .iter()
            .filter(|s| spec.get(**s).is_some_and(|v| !v.is_null()))
            .count();
        match sources {
            0 => errs.push(FieldError::required("spec", "must specify a volume type")),
            1 => {}
            _ => errs.push(FieldError::forbidden(
                "spec",
                "may not specify more than 1 volume type",
            )),
        }
        errs
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col("Capacity", "string", "capacity is the description of the persistent volume's resources and capacity."),
            col("Access Modes", "string", "accessModes contains all ways the volume can be mounted."),
            col("Reclaim Policy", "string", "persistentVolumeReclaimPolicy defines what happens to a persistent volume when released from its claim."),
            col("Status", "string", "phase indicates if a volume is available, bound to a claim, or released by a claim."),
            col("Claim", "string", "claimRef is part of a bi-directional binding between PersistentVolume and PersistentVolumeClaim."),
            col("StorageClass", "string", "StorageClass of the pv"),
            col("VolumeAttributesClass", "string", "VolumeAttributesClass of the pv"),
            col("Reason", "string", "reason is a brief CamelCase string that describes any failure and is meant for machine parsing and tidy display in the CLI."),
            AGE,
            wide("VolumeMode", "volumeMode defines if a volume is intended to be used with a formatted filesystem or to remain in raw block state."),
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let spec = &obj["spec"];
        let claim = match (
            spec["claimRef"]["namespace"].as_str(),
            spec["claimRef"]["name"].as_str(),
        ) {
            (Some(ns), Some(n)) => format!("{ns}/{n}"),
            _ => String::new(),
        };
        vec![
            name_cell(obj),
            json!(spec["capacity"]["storage"].as_str().unwrap_or("")),
            json!(access_modes_string(&spec["accessModes"])),
            json!(spec["persistentVolumeReclaimPolicy"].as_str().unwrap_or("")),
            json!(phase(obj)),
            json!(claim),
            json!(class_of(obj)),
            json!(attributes_class(obj)),
            json!(obj["status"]["reason"].as_str().unwrap_or("")),
            age_cell(obj),
            json!(spec["volumeMode"].as_str().unwrap_or("<unset>")),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim_errors(spec: Value) -> Vec<String> {
        PersistentVolumeClaims
            .validate(&json!({"spec": spec}))
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn claims_are_validated_in_upstreams_words() {
        assert!(claim_errors(
            json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}})
        )
        .is_empty());
        assert_eq!(
            claim_errors(json!({"resources": {"requests": {"storage": "0"}}, "volumeMode": "Raw"})),
            [
                "spec.accessModes: Required value: at least 1 access mode is required",
                "spec.resources[storage]: Invalid value: \"0\": must be greater than zero",
                "spec.volumeMode: Unsupported value: \"Raw\": supported values: \"Block\", \"Filesystem\"",
            ]
        );
        assert_eq!(
            claim_errors(json!({"accessModes": ["ReadWriteOncePod", "ReadWriteOnce"]})),
            [
                "spec.accessModes: Forbidden: may not use ReadWriteOncePod with other access modes",
                "spec.resources[storage]: Required value",
            ]
        );
    }

    #[test]
    fn a_claims_spec_is_fixed_but_a_bound_claims_requests() {
        let old = json!({"spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Pending"}});
        let mut grown = old.clone();
        grown["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
        assert_eq!(
            PersistentVolumeClaims.validate_main_update(&grown, &old)[0].to_string(),
            "spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims"
        );
        let mut bound = old.clone();
        bound["status"]["phase"] = json!("Bound");
        bound["spec"]["volumeName"] = json!("pv-1");
        let mut grown = bound.clone();
        grown["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
        assert!(PersistentVolumeClaims
            .validate_main_update(&grown, &bound)
            .is_empty());
        // A claim bound to a bigger volume than it asked for may still be updated; it may ask
        // for less than before only down to above its capacity.
        bound["status"]["capacity"] = json!({"storage": "2Gi"});
        let mut labelled = bound.clone();
        labelled["metadata"] = json!({"labels": {"a": "b"}});
        assert!(PersistentVolumeClaims
            .validate_main_update(&labelled, &bound)
            .is_empty());
        let mut asked = bound.clone();
        asked["spec"]["resources"]["requests"]["storage"] = json!("4Gi");
        let mut less = asked.clone();
        less["spec"]["resources"]["requests"]["storage"] = json!("3Gi");
        assert!(PersistentVolumeClaims
            .validate_main_update(&less, &asked)
            .is_empty());
        less["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
        assert_eq!(
            PersistentVolumeClaims.validate_main_update(&less, &asked)[0].to_string(),
            "spec.resources.requests.storage: Forbidden: field can not be less than status.capacity"
        );
        // The binder naming the volume of an unbound claim.
        let mut named = old.clone();
        named["spec"]["volumeName"] = json!("pv-1");
        assert!(PersistentVolumeClaims
            .validate_main_update(&named, &old)
            .is_empty());
    }

    #[test]
    fn tables_print_as_kubectl_does() {
        let claim = json!({"metadata": {"name": "data-web-0", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, "volumeMode": "Filesystem", "storageClassName": "local-path"},
            "status": {"phase": "Pending"}});
        let cells = PersistentVolumeClaims.cells(&claim);
        assert_eq!(
            cells[1..7],
            [
                json!("Pending"),
                json!(""),
                json!(""),
                json!(""),
                json!("local-path"),
                json!("<unset>")
            ]
        );
        let pv = json!({"metadata": {"name": "pv-1"},
            "spec": {"capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteOnce", "ReadOnlyMany"], "hostPath": {"path": "/x"},
                     "persistentVolumeReclaimPolicy": "Retain", "claimRef": {"namespace": "default", "name": "data"}},
            "status": {"phase": "Bound"}});
        let cells = PersistentVolumes.cells(&pv);
        assert_eq!(
            cells[1..6],
            [
                json!("5Gi"),
                json!("RWO,ROX"),
                json!("Retain"),
                json!("Bound"),
                json!("default/data")
            ]
        );
        assert!(PersistentVolumes.validate(&pv).is_empty());
        let mut none = pv.clone();
        none["spec"].as_object_mut().unwrap().remove("hostPath");
        assert_eq!(
            PersistentVolumes.validate(&none)[0].to_string(),
            "spec: Required value: must specify a volume type"
        );
    }
}
