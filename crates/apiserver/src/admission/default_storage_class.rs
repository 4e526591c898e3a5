//! `DefaultStorageClass` (upstream's admission plugin of that name, on by default): a new
//! PersistentVolumeClaim that names no class (`spec.storageClassName` absent — an empty string
//! asks for no class and is kept) gets the StorageClass annotated
//! `storageclass.kubernetes.io/is-default-class: "true"`; with several such classes, the newest
//! (as upstream since 1.26, the same choice as the default IngressClass's).

use async_trait::async_trait;
use serde_json::json;

use super::{Attributes, MutatingPlugin, Operation};
use crate::status::ApiError;

pub const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";

pub struct DefaultStorageClass {
    pub listers: super::listers::Listers,
}

#[async_trait]
impl MutatingPlugin for DefaultStorageClass {
    fn name(&self) -> &'static str {
        "DefaultStorageClass"
    }

    async fn admit(&self, attrs: &mut Attributes<'_>) -> Result<(), ApiError> {
        let r = attrs.request;
        if attrs.operation != Operation::Create
            || !r.api_group.is_empty()
            || r.resource != "persistentvolumeclaims"
            || !r.subresource.is_empty()
        {
            return Ok(());
        }
        let Some(claim) = attrs.object.as_deref_mut() else {
            return Ok(());
        };
        // The beta annotation names a class too (upstream's `GetPersistentVolumeClaimClass`).
        if !claim["spec"]["storageClassName"].is_null()
            || !claim["metadata"]["annotations"]["volume.beta.kubernetes.io/storage-class"].is_null()
        {
            return Ok(());
        }
        let classes = self.listers.storage_classes().await?;
        if let Some(class) = super::default_ingress_class::default_marked(&classes, DEFAULT_CLASS_ANNOTATION)
        {
            if !claim["spec"].is_object() {
                claim["spec"] = json!({});
            }
            claim["spec"]["storageClassName"] = json!(class);
        }
        Ok(())
    }
}
