//! The storage.k8s.io/v1 API objects (upstream's `pkg/registry/storage`): StorageClasses,
//! VolumeAttachments, CSIDrivers, CSINodes and CSIStorageCapacities, with upstream's
//! defaults, immutable fields and printer columns. What acts on them (provisioning,
//! attaching) is the storage controllers' part.

use async_trait::async_trait;
use r8s_api::validation::FieldError;
use serde_json::{json, Value};

use super::strategy::{age_cell, col, name_cell, wide, Column, Strategy, AGE, NAME};

/// The annotation that marks the default StorageClass.
pub(crate) const DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";

pub(crate) struct StorageClasses;
pub(crate) struct VolumeAttachments;
pub(crate) struct CsiDrivers;
pub(crate) struct CsiNodes;
pub(crate) struct CsiStorageCapacities;

/// `field` may not change once set: upstream's "updates to X are forbidden." errors.
fn immutable(errs: &mut Vec<FieldError>, obj: &Value, old: &Value, path: &[&str], what: &str) {
    let get = |v: &Value| path.iter().fold(v.clone(), |v, k| v[*k].clone());
    if get(obj) != get(old) {
        errs.push(FieldError::forbidden(
            path.join("."),
            format!("updates to {what} are forbidden."),
        ));
    }
}

#[async_trait]
impl Strategy for StorageClasses {
    fn default(&self, obj: &mut Value) {
        if obj["reclaimPolicy"].is_null() {
            obj["reclaimPolicy"] = json!("Delete");
        }
        if obj["volumeBindingMode"].is_null() {
            obj["volumeBindingMode"] = json!("Immediate");
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        match obj["provisioner"].as_str() {
            None | Some("") => errs.push(FieldError::required("provisioner", "")),
            Some(p) => {
                for e in r8s_api::validation::qualified_name(p) {
                    errs.push(FieldError::invalid("provisioner", p, e));
                }
            }
        }
        match obj["reclaimPolicy"].as_str().unwrap_or("") {
            "Delete" | "Retain" => {}
            other => errs.push(FieldError::not_supported(
                "reclaimPolicy",
                other,
                &["Delete", "Retain"],
            )),
        }
        match obj["volumeBindingMode"].as_str().unwrap_or("") {
            "Immediate" | "WaitForFirstConsumer" => {}
            other => errs.push(FieldError::not_supported(
                "volumeBindingMode",
                other,
                &["Immediate", "WaitForFirstConsumer"],
            )),
        }
        errs
    }

    fn validate_update(&self, obj: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        immutable(&mut errs, obj, old, &["parameters"], "parameters");
        immutable(&mut errs, obj, old, &["provisioner"], "provisioner");
        immutable(&mut errs, obj, old, &["reclaimPolicy"], "reclaimPolicy");
        immutable(&mut errs, obj, old, &["volumeBindingMode"], "volumeBindingMode");
        errs
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col("Provisioner", "string", "Indicates the type of the provisioner."),
            col("ReclaimPolicy", "string", "Dynamically provisioned PersistentVolumes of this storage class are created with this reclaimPolicy. Defaults to Delete."),
            col("VolumeBindingMode", "string", "VolumeBindingMode indicates how PersistentVolumeClaims should be provisioned and bound. When unset, VolumeBindingImmediate is used."),
            col("AllowVolumeExpansion", "string", "AllowVolumeExpansion shows whether the storage class allow volume expand."),
            AGE,
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let mut name = super::meta::name(obj).to_owned();
        if obj["metadata"]["annotations"][DEFAULT_CLASS] == "true" {
            name.push_str(" (default)");
        }
        vec![
            json!(name),
            json!(obj["provisioner"].as_str().unwrap_or("")),
            json!(obj["reclaimPolicy"].as_str().unwrap_or("Delete")),
            json!(obj["volumeBindingMode"].as_str().unwrap_or("Immediate")),
            json!(obj["allowVolumeExpansion"].as_bool().unwrap_or(false).to_string()),
            age_cell(obj),
        ]
    }
}

#[async_trait]
impl Strategy for VolumeAttachments {
    fn status_subresource(&self) -> bool {
        true
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let spec = &obj["spec"];
        if spec["attacher"].as_str().is_none_or(str::is_empty) {
            errs.push(FieldError::required("spec.attacher", ""));
        }
        if spec["nodeName"].as_str().is_none_or(str::is_empty) {
            errs.push(FieldError::required("spec.nodeName", ""));
        }
        let source = &spec["source"];
        if source["persistentVolumeName"].is_null() == source["inlineVolumeSpec"].is_null() {
            errs.push(FieldError::invalid_raw(
                "spec.source",
                "{}",
                "must specify exactly one of persistentVolumeName and inlineVolumeSpec",
            ));
        }
        errs
    }

    fn validate_main_update(&self, obj: &Value, old: &Value) -> Vec<FieldError> {
        if obj["spec"] != old["spec"] {
            return vec![FieldError::invalid_raw("spec", "{...}", "field is immutable")];
        }
        Vec::new()
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col(
                "Attacher",
                "string",
                "Attacher indicates the name of the volume driver that MUST handle this request.",
            ),
            col("PV", "string", "Name of the persistent volume to attach."),
            col(
                "Node",
                "string",
                "The node that the volume should be attached to.",
            ),
            col(
                "Attached",
                "boolean",
                "Indicates the volume is successfully attached.",
            ),
            AGE,
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        vec![
            name_cell(obj),
            json!(obj["spec"]["attacher"].as_str().unwrap_or("")),
            json!(obj["spec"]["source"]["persistentVolumeName"]
                .as_str()
                .unwrap_or("")),
            json!(obj["spec"]["nodeName"].as_str().unwrap_or("")),
            json!(obj["status"]["attached"].as_bool().unwrap_or(false)),
            age_cell(obj),
        ]
    }
}

#[async_trait]
impl Strategy for CsiDrivers {
    /// Upstream's `SetDefaults_CSIDriverSpec`.
    fn default(&self, obj: &mut Value) {
        let spec = &mut obj["spec"];
        if !spec.is_object() {
            *spec = json!({});
        }
        for (k, v) in [
            ("attachRequired", json!(true)),
            ("podInfoOnMount", json!(false)),
            ("storageCapacity", json!(false)),
            ("fsGroupPolicy", json!("ReadWriteOnceWithFSType")),
            ("requiresRepublish", json!(false)),
            ("volumeLifecycleModes", json!(["Persistent"])),
            ("seLinuxMount", json!(false)),
        ] {
            if spec[k].is_null() {
                spec[k] = v;
            }
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        for (i, m) in obj["spec"]["volumeLifecycleModes"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let m = m.as_str().unwrap_or("");
            if !matches!(m, "Persistent" | "Ephemeral") {
                errs.push(FieldError::not_supported(
                    format!("spec.volumeLifecycleModes[{i}]"),
                    m,
                    &["Ephemeral", "Persistent"],
                ));
            }
        }
        errs
    }

    fn validate_update(&self, obj: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        immutable(
            &mut errs,
            obj,
            old,
            &["spec", "attachRequired"],
            "spec.attachRequired",
        );
        errs
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col("AttachRequired", "boolean", "Indicates this CSI volume driver requires an attach operation, and that Kubernetes should call attach and wait for any attach operation to complete before proceeding to mount."),
            col("PodInfoOnMount", "boolean", "Indicates this CSI volume driver requires additional pod information (like podName, podUID, etc.) during mount operations."),
            col("StorageCapacity", "boolean", "Indicates that the CSI volume driver wants pod scheduling to consider the storage capacity that the driver deployment will report by creating CSIStorageCapacity objects with capacity information."),
            col("TokenRequests", "string", "Indicates the CSI driver needs pods' service account tokens it is mounting volume for to do necessary authentication."),
            col("RequiresRepublish", "boolean", "RequiresRepublish indicates the CSI driver wants `NodePublishVolume` being periodically called to reflect any possible change in the mounted volume."),
            col("Modes", "string", "Defines the kinds of volumes this CSI volume driver supports."),
            AGE,
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let spec = &obj["spec"];
        let modes: Vec<&str> = spec["volumeLifecycleModes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let tokens: Vec<String> = spec["tokenRequests"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| {
                let aud = t["audience"].as_str().unwrap_or("");
                match t["expirationSeconds"].as_i64() {
                    Some(s) => format!("{aud}:{s}"),
                    None => aud.to_owned(),
                }
            })
            .collect();
        vec![
            name_cell(obj),
            json!(spec["attachRequired"].as_bool().unwrap_or(true)),
            json!(spec["podInfoOnMount"].as_bool().unwrap_or(false)),
            json!(spec["storageCapacity"].as_bool().unwrap_or(false)),
            json!(if tokens.is_empty() {
                "<unset>".to_owned()
            } else {
                tokens.join(",")
            }),
            json!(spec["requiresRepublish"].as_bool().unwrap_or(false)),
            json!(if modes.is_empty() {
                "<none>".to_owned()
            } else {
                modes.join(",")
            }),
            age_cell(obj),
        ]
    }
}

#[async_trait]
impl Strategy for CsiNodes {
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let mut seen = Vec::new();
        for (i, d) in obj["spec"]["drivers"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let name = d["name"].as_str().unwrap_or("");
            if name.is_empty() {
                errs.push(FieldError::required(format!("spec.drivers[{i}].name"), ""));
            } else if seen.contains(&name) {
                errs.push(FieldError::duplicate(format!("spec.drivers[{i}].name"), name));
            }
            seen.push(name);
            if d["nodeID"].as_str().is_none_or(str::is_empty) {
                errs.push(FieldError::required(format!("spec.drivers[{i}].nodeID"), ""));
            }
        }
        errs
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col(
                "Drivers",
                "integer",
                "Drivers indicates the number of CSI drivers registered on the node",
            ),
            AGE,
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let n = obj["spec"]["drivers"].as_array().map_or(0, Vec::len);
        vec![name_cell(obj), json!(n), age_cell(obj)]
    }
}

#[async_trait]
impl Strategy for CsiStorageCapacities {
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        match obj["storageClassName"].as_str() {
            None | Some("") => errs.push(FieldError::required("storageClassName", "")),
            Some(c) => {
                for e in r8s_api::validation::dns1123_subdomain(c) {
                    errs.push(FieldError::invalid("storageClassName", c, e));
                }
            }
        }
        errs
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col("StorageClassName", "string", "The name of the StorageClass that the reported capacity applies to."),
            col("Capacity", "string", "Capacity is the value reported by the CSI driver in its GetCapacityResponse for a GetCapacityRequest with topology and parameters that match the previous fields."),
            AGE,
            wide("MaximumVolumeSize", "MaximumVolumeSize is the value reported by the CSI driver in its GetCapacityResponse for a GetCapacityRequest with topology and parameters that match the previous fields."),
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let q = |k: &str| json!(obj[k].as_str().unwrap_or("<unset>"));
        vec![
            name_cell(obj),
            json!(obj["storageClassName"].as_str().unwrap_or("")),
            q("capacity"),
            age_cell(obj),
            q("maximumVolumeSize"),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_classes_are_defaulted_and_their_provisioning_is_immutable() {
        let mut sc = json!({"metadata": {"name": "fast", "annotations": {DEFAULT_CLASS: "true"}},
            "provisioner": "r8s.io/local-path"});
        StorageClasses.default(&mut sc);
        assert_eq!(
            (sc["reclaimPolicy"].as_str(), sc["volumeBindingMode"].as_str()),
            (Some("Delete"), Some("Immediate"))
        );
        assert!(StorageClasses.validate(&sc).is_empty());
        assert_eq!(StorageClasses.cells(&sc)[0], "fast (default)");
        let mut changed = sc.clone();
        changed["reclaimPolicy"] = json!("Retain");
        let errs: Vec<String> = StorageClasses
            .validate_update(&changed, &sc)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            errs,
            ["reclaimPolicy: Forbidden: updates to reclaimPolicy are forbidden."]
        );
    }

    #[test]
    fn csi_drivers_get_upstreams_defaults() {
        let mut d = json!({"metadata": {"name": "d"}});
        CsiDrivers.default(&mut d);
        assert_eq!(d["spec"]["attachRequired"], true);
        assert_eq!(d["spec"]["volumeLifecycleModes"], json!(["Persistent"]));
        assert_eq!(CsiDrivers.cells(&d).len(), CsiDrivers.columns().len());
    }
}
