//! `StorageObjectInUseProtection` (upstream's admission plugin, on by default): a new
//! PersistentVolumeClaim gets the `kubernetes.io/pvc-protection` finalizer and a new
//! PersistentVolume `kubernetes.io/pv-protection`, so that neither goes while in use — the
//! protection controllers remove them once a claim no pod uses, or a volume no claim is bound
//! to, is deleted.

use async_trait::async_trait;
use serde_json::{json, Value};

use super::{Attributes, MutatingPlugin, Operation};
use crate::status::ApiError;

pub const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";
pub const PV_PROTECTION: &str = "kubernetes.io/pv-protection";

pub struct StorageObjectInUseProtection;

/// Add `finalizer` to `obj`'s finalizers, once.
fn add_finalizer(obj: &mut Value, finalizer: &str) {
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    let list = &mut obj["metadata"]["finalizers"];
    if !list.is_array() {
        *list = json!([]);
    }
    let items = list.as_array_mut().expect("made an array");
    if !items.iter().any(|f| f == finalizer) {
        items.push(json!(finalizer));
    }
}

#[async_trait]
impl MutatingPlugin for StorageObjectInUseProtection {
    fn name(&self) -> &'static str {
        "StorageObjectInUseProtection"
    }

    async fn admit(&self, attrs: &mut Attributes<'_>) -> Result<(), ApiError> {
        let r = attrs.request;
        if attrs.operation != Operation::Create || !r.api_group.is_empty() || !r.subresource.is_empty() {
            return Ok(());
        }
        let finalizer = match r.resource.as_str() {
            "persistentvolumeclaims" => PVC_PROTECTION,
            "persistentvolumes" => PV_PROTECTION,
            _ => return Ok(()),
        };
        if let Some(obj) = attrs.object.as_deref_mut() {
            add_finalizer(obj, finalizer);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_finalizer_is_added_once() {
        let mut claim = json!({"metadata": {"name": "c", "finalizers": ["example.com/keep"]}});
        add_finalizer(&mut claim, PVC_PROTECTION);
        add_finalizer(&mut claim, PVC_PROTECTION);
        assert_eq!(
            claim["metadata"]["finalizers"],
            json!(["example.com/keep", "kubernetes.io/pvc-protection"])
        );
        let mut volume = json!({});
        add_finalizer(&mut volume, PV_PROTECTION);
        assert_eq!(
            volume["metadata"]["finalizers"],
            json!(["kubernetes.io/pv-protection"])
        );
    }
}
