//! Controller history (upstream `pkg/controller/history`): the ControllerRevisions that record
//! each pod template a DaemonSet or StatefulSet has had, so pods can tell whether they are
//! current (`controller-revision-hash`) and `kubectl rollout history/undo` can read and restore
//! old templates. A revision's data is the strategic merge patch that puts its template back.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::{Api, DeleteParams};
use kube::ResourceExt;
use serde_json::json;

use crate::Error;

/// The label pods and revisions carry: the hash of the template they were made from.
pub const REVISION_HASH: &str = "controller-revision-hash";

/// The revision data of a template: the patch that restores it (upstream's `getPatch`).
pub fn data_of(template: &PodTemplateSpec) -> serde_json::Value {
    let mut t = serde_json::to_value(template).unwrap_or_default();
    t["$patch"] = json!("replace");
    json!({"spec": {"template": t}})
}

/// The owner's revisions (controller reference to `owner_uid`), oldest first.
pub fn owned<'a>(
    revisions: impl IntoIterator<Item = &'a Arc<ControllerRevision>>,
    owner_uid: &str,
) -> Vec<Arc<ControllerRevision>> {
    let mut out: Vec<Arc<ControllerRevision>> = revisions
        .into_iter()
        .filter(|r| r8s_api::owner::controller_of(&r.metadata).is_some_and(|o| o.uid == owner_uid))
        .cloned()
        .collect();
    out.sort_by_key(|r| r.revision);
    out
}

/// The revision of `template`: an existing one with the same data (its revision number raised
/// to the newest if it was an old one: a rollback), else a new one numbered after the newest.
/// Returns it and its hash.
#[allow(clippy::too_many_arguments)]
pub async fn current(
    api: &Api<ControllerRevision>,
    owner: OwnerReference,
    owner_name: &str,
    namespace: &str,
    template: &PodTemplateSpec,
    collision_count: Option<i32>,
    existing: &[Arc<ControllerRevision>],
) -> Result<(ControllerRevision, String), Error> {
    let data = data_of(template);
    let newest = existing.iter().map(|r| r.revision).max().unwrap_or(0);
    if let Some(same) = existing
        .iter()
        .rev()
        .find(|r| r.data.as_ref().map(|d| &d.0) == Some(&data))
    {
        let hash = same
            .labels()
            .get(REVISION_HASH)
            .cloned()
            .unwrap_or_else(|| crate::deployment::pod_template_hash(template, collision_count));
        if same.revision == newest {
            return Ok(((**same).clone(), hash));
        }
        let mut raised = (**same).clone();
        raised.revision = newest + 1;
        let written = api
            .replace(&same.name_any(), &crate::post_params(), &raised)
            .await?;
        return Ok((written, hash));
    }
    let hash = crate::deployment::pod_template_hash(template, collision_count);
    let mut labels: BTreeMap<String, String> = template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    labels.insert(REVISION_HASH.into(), hash.clone());
    let revision = ControllerRevision {
        metadata: ObjectMeta {
            name: Some(format!("{owner_name}-{hash}")),
            namespace: Some(namespace.into()),
            labels: Some(labels),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        data: Some(RawExtension(data)),
        revision: newest + 1,
    };
    match api.create(&crate::post_params(), &revision).await {
        Ok(r) => Ok((r, hash)),
        Err(kube::Error::Api(e)) if e.code == 409 && e.reason == "AlreadyExists" => {
            // Same name: ours with other data is a hash collision (the owner's collisionCount
            // goes up and the next sync hashes anew); ours with this data is a cache lag.
            let found = api.get(&revision.name_any()).await?;
            if found.data.as_ref().map(|d| &d.0) == revision.data.as_ref().map(|d| &d.0) {
                Ok((found, hash))
            } else {
                Err(Error::Other(format!(
                    "controller revision {} collides",
                    revision.name_any()
                )))
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// Delete the oldest revisions beyond `limit` that no live pod uses (`in_use`: the pods'
/// revision labels — hashes for DaemonSets, revision names for StatefulSets).
pub async fn truncate(
    api: &Api<ControllerRevision>,
    existing: &[Arc<ControllerRevision>],
    current_name: &str,
    in_use: &std::collections::HashSet<String>,
    limit: i32,
) -> Result<(), Error> {
    let old: Vec<&Arc<ControllerRevision>> = existing
        .iter()
        .filter(|r| r.name_any() != current_name)
        .filter(|r| !in_use.contains(&r.name_any()))
        .filter(|r| r.labels().get(REVISION_HASH).is_none_or(|h| !in_use.contains(h)))
        .collect();
    let excess = old.len().saturating_sub(limit.max(0) as usize);
    for r in old.into_iter().take(excess) {
        match api.delete(&r.name_any(), &DeleteParams::default()).await {
            Ok(_) => {}
            Err(e) if r8s_client::is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
