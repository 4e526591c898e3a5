//! Claiming dependents (upstream `ControllerRefManager`): a controller owns the objects whose
//! controller reference is its uid and that its selector still matches; it adopts matching
//! orphans (after a live read proves it is neither gone nor being deleted) and releases owned
//! objects that stopped matching; and which owner a dependent's change concerns. Shared by the
//! workload controllers.

use std::sync::Arc;

use kube::api::{Api, Patch};
use kube::ResourceExt;
use serde_json::json;

use crate::Error;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::Store;
use r8s_api::owner::{controller_of, controller_ref_to};
use r8s_api::selector::Selector;
use r8s_client::informer::{lookup, Object};

/// The store key of the `K` that `meta`'s controller reference names (same kind and API group),
/// if the store holds that very object (same uid): the owner whose sync a dependent's change
/// concerns.
pub fn owner_key<K: Object + k8s_openapi::Resource>(store: &Store<K>, meta: &ObjectMeta) -> Option<String> {
    let r = controller_of(meta)?;
    let group = r.api_version.split_once('/').map_or("", |(g, _)| g);
    if r.kind != K::KIND || group != K::GROUP {
        return None;
    }
    let key = format!("{}/{}", meta.namespace.as_deref().unwrap_or(""), r.name);
    let owner = lookup(store, &key)?;
    (owner.meta().uid.as_deref() == Some(r.uid.as_str())).then_some(key)
}

/// The candidates `owner` owns after adoption and release.
pub async fn claim<O: Object, C: Object>(
    owner: &O,
    owner_api: &Api<O>,
    api: &Api<C>,
    matcher: &Selector,
    candidates: impl IntoIterator<Item = Arc<C>>,
) -> Result<Vec<Arc<C>>, Error> {
    let uid = owner.meta().uid.clone().unwrap_or_default();
    let deleting = owner.meta().deletion_timestamp.is_some();
    let mut owned = Vec::new();
    let mut can_adopt: Option<bool> = None;
    for child in candidates {
        let matches = matcher.matches_labels(child.meta().labels.as_ref());
        match controller_of(child.meta()) {
            Some(r) if r.uid == uid => {
                if matches || deleting {
                    owned.push(child);
                    continue;
                }
                // Release: drop our reference, keep the object.
                let refs: Vec<_> = child.owner_references().iter().filter(|r| r.uid != uid).collect();
                let patch = json!({"metadata": {"ownerReferences": refs, "uid": child.meta().uid}});
                match api
                    .patch(&child.name_any(), &crate::patch_params(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => {}
                    Err(e) if r8s_client::is_not_found(&e) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Some(_) => {}
            None => {
                if !matches || deleting || child.meta().deletion_timestamp.is_some() {
                    continue;
                }
                if can_adopt.is_none() {
                    // Never adopt for an owner that is gone or going although the cache lags.
                    let fresh = owner_api.get_opt(&owner.name_any()).await?;
                    can_adopt = Some(fresh.is_some_and(|f| {
                        f.meta().uid.as_deref() == Some(uid.as_str()) && f.meta().deletion_timestamp.is_none()
                    }));
                }
                if can_adopt != Some(true) {
                    continue;
                }
                let patch = json!({"metadata": {"ownerReferences": [controller_ref_to(&O::api_version(&()), &O::kind(&()), owner.meta())], "uid": child.meta().uid}});
                match api
                    .patch(
                        &child.name_any(),
                        &crate::patch_params(),
                        &Patch::Strategic(&patch),
                    )
                    .await
                {
                    Ok(adopted) => owned.push(Arc::new(adopted)),
                    Err(e) if r8s_client::is_not_found(&e) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    Ok(owned)
}
