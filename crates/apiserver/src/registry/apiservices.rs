//! APIServices (apiregistration.k8s.io/v1, upstream's kube-aggregator API): one per served
//! group version. The built-in group versions and those of established CRDs are registered
//! as local (served by this server, always Available).

use async_trait::async_trait;
use r8s_api::validation::FieldError;
use serde_json::{json, Value};

use super::meta::str_field;
use super::strategy::{age_cell, col, name_cell, Column, Strategy, AGE, NAME};

/// The label upstream marks registered APIServices with: `onstart` for the built-ins,
/// `true` for those of CRDs.
pub(crate) const AUTOMANAGED: &str = "kube-aggregator.kubernetes.io/automanaged";

/// `v1.apps`, `v1.` for the core group.
pub(crate) fn name_of(group: &str, version: &str) -> String {
    format!("{version}.{group}")
}

/// A local APIService for `group`/`version`; `rank` orders the built-in groups (upstream's
/// table gives the core group 18000 and later groups less).
pub(crate) fn local(group: &str, version: &str, rank: usize, managed: &str) -> Value {
    let priority = 18000i64.saturating_sub(100 * rank as i64).max(1000);
    json!({
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {
            "name": name_of(group, version),
            "uid": uuid::Uuid::new_v4().to_string(),
            "creationTimestamp": super::meta::now_rfc3339(),
            "labels": {AUTOMANAGED: managed},
        },
        "spec": {
            "group": group,
            "version": version,
            "groupPriorityMinimum": if managed == "true" { 1000 } else { priority },
            "versionPriority": if managed == "true" { 100 } else { 15 },
        },
        "status": {"conditions": [{
            "type": "Available",
            "status": "True",
            "lastTransitionTime": super::meta::now_rfc3339(),
            "reason": "Local",
            "message": "Local APIServices are always available",
        }]},
    })
}

pub(crate) struct ApiServices;

#[async_trait]
impl Strategy for ApiServices {
    fn status_subresource(&self) -> bool {
        true
    }

    fn tracks_generation(&self) -> bool {
        false
    }

    /// Upstream's `ValidateAPIService`.
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let spec = &obj["spec"];
        let group = spec["group"].as_str().unwrap_or("");
        let version = spec["version"].as_str().unwrap_or("");
        let name = super::meta::name(obj);
        if !name.is_empty() && name != name_of(group, version) {
            errs.push(FieldError::invalid(
                "metadata.name",
                name,
                format!(
                    "must be `spec.version+\".\"+spec.group`: {:?}",
                    name_of(group, version)
                ),
            ));
        }
        if version.is_empty() {
            errs.push(FieldError::required("spec.version", ""));
        }
        for (field, max) in [("groupPriorityMinimum", 20000), ("versionPriority", 1000)] {
            let v = spec[field].as_i64().unwrap_or(0);
            if v <= 0 || v > max {
                errs.push(FieldError::invalid_raw(
                    format!("spec.{field}"),
                    &v.to_string(),
                    format!("must be positive and less than {max}"),
                ));
            }
        }
        if spec["service"].is_object() {
            if spec["caBundle"].is_null() && spec["insecureSkipTLSVerify"] != true {
                errs.push(FieldError::required(
                    "spec.caBundle",
                    "must be set when insecureSkipTLSVerify is false",
                ));
            }
        } else if spec["insecureSkipTLSVerify"] == true {
            errs.push(FieldError::invalid_raw(
                "spec.insecureSkipTLSVerify",
                "true",
                "local APIServices may not have insecureSkipTLSVerify",
            ));
        }
        errs
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col(
                "Service",
                "string",
                "The reference to the service that hosts this API endpoint.",
            ),
            col("Available", "string", "Whether this service is available."),
            AGE,
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let service = match (
            str_field(obj, &["spec", "service", "namespace"]),
            str_field(obj, &["spec", "service", "name"]),
        ) {
            (Some(ns), Some(n)) => format!("{ns}/{n}"),
            _ => "Local".to_owned(),
        };
        let available = obj["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Available")
            .map(|c| match (c["status"].as_str(), c["reason"].as_str()) {
                (Some("True"), _) => "True".to_owned(),
                (Some(s), Some(r)) if !r.is_empty() => format!("{s} ({r})"),
                (Some(s), _) => s.to_owned(),
                _ => "Unknown".to_owned(),
            })
            .unwrap_or_else(|| "Unknown".to_owned());
        vec![name_cell(obj), json!(service), json!(available), age_cell(obj)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_apiservices_are_valid_and_available() {
        let s = local("apps", "v1", 3, "onstart");
        assert_eq!(s["metadata"]["name"], "v1.apps");
        assert!(
            ApiServices.validate(&s).is_empty(),
            "{:?}",
            ApiServices.validate(&s)
        );
        assert_eq!(ApiServices.cells(&s)[1..3], [json!("Local"), json!("True")]);
        assert_eq!(local("", "v1", 0, "onstart")["metadata"]["name"], "v1.");
        let mut bad = s.clone();
        bad["metadata"]["name"] = json!("v2.apps");
        assert_eq!(ApiServices.validate(&bad).len(), 1);
    }
}
