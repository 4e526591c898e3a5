//! `PersistentVolumeClaimResize` (upstream's admission plugin, on by default): a claim may ask
//! for more storage only once it is bound, and only when its StorageClass allows expansion
//! (`allowVolumeExpansion: true`).

use async_trait::async_trait;
use serde_json::Value;

use super::{Attributes, Operation, ValidatingPlugin};
use crate::status::ApiError;

pub struct PersistentVolumeClaimResize {
    pub listers: super::listers::Listers,
}

fn storage(claim: &Value) -> Option<i128> {
    claim["spec"]["resources"]["requests"]["storage"]
        .as_str()
        .and_then(|q| r8s_api::quantity::parse_value(q).ok())
}

#[async_trait]
impl ValidatingPlugin for PersistentVolumeClaimResize {
    fn name(&self) -> &'static str {
        "PersistentVolumeClaimResize"
    }

    async fn validate(&self, attrs: &Attributes<'_>) -> Result<(), ApiError> {
        let r = attrs.request;
        if attrs.operation != Operation::Update
            || !r.api_group.is_empty()
            || r.resource != "persistentvolumeclaims"
            || !r.subresource.is_empty()
        {
            return Ok(());
        }
        let (Some(new), Some(old)) = (attrs.object.as_deref(), attrs.old_object) else {
            return Ok(());
        };
        match (storage(new), storage(old)) {
            (Some(n), Some(o)) if n > o => {}
            _ => return Ok(()),
        }
        let forbidden = |why: &str| {
            ApiError::forbidden(format!(
                "persistentvolumeclaims \"{}\" is forbidden: {why}",
                r.name
            ))
        };
        if old["status"]["phase"] != "Bound" || old["spec"]["volumeName"].as_str().unwrap_or("").is_empty() {
            return Err(forbidden("Only bound persistent volume claims can be expanded"));
        }
        let class = old["spec"]["storageClassName"].as_str().unwrap_or("");
        let allows = !class.is_empty()
            && self
                .listers
                .storage_classes()
                .await?
                .iter()
                .any(|c| c["metadata"]["name"] == class && c["allowVolumeExpansion"] == true);
        if !allows {
            return Err(forbidden(
                "only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize",
            ));
        }
        Ok(())
    }
}
