//! Creating and deleting a controller's pods (upstream's `RealPodControl` and the slow-start
//! loop every workload controller shares): creates go in batches of 1, 2, 4, … and a batch only
//! starts when the previous one fully succeeded, so a systematic failure (quota, admission)
//! costs one request, not hundreds; deletes go at once. Each outcome is an event on the owner
//! in upstream's words.

use std::collections::HashSet;
use std::sync::Arc;

use futures::future::join_all;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use kube::{Resource, ResourceExt};

use crate::Error;
use r8s_client::events::Events;

/// The message of an API error as its Status words it, else the error itself.
pub fn error_message(e: &Error) -> String {
    match e {
        Error::Kube(kube::Error::Api(s)) => s.message.clone(),
        other => other.to_string(),
    }
}

/// Create `pods` in slow-start batches. Returns the names created and the first error.
pub async fn create<K: Resource<DynamicType = ()>>(
    api: &Api<Pod>,
    events: &Events,
    owner: &K,
    pods: Vec<Pod>,
) -> (Vec<String>, Option<Error>) {
    let mut created = Vec::new();
    let mut first_err = None;
    let mut batch = 1usize;
    let mut rest = pods.as_slice();
    while !rest.is_empty() && first_err.is_none() {
        let (now, later) = rest.split_at(batch.min(rest.len()));
        rest = later;
        let pp = crate::post_params();
        let results = join_all(now.iter().map(|pod| api.create(&pp, pod))).await;
        for r in results {
            match r {
                Ok(p) => {
                    let name = p.name_any();
                    events.normal(owner, "SuccessfulCreate", format!("Created pod: {name}"));
                    created.push(name);
                }
                Err(e) => {
                    let e = Error::from(e);
                    events.warning(
                        owner,
                        "FailedCreate",
                        format!("Error creating: {}", error_message(&e)),
                    );
                    first_err.get_or_insert(e);
                }
            }
        }
        batch *= 2;
    }
    (created, first_err)
}

/// Delete `pods` (each once; those already being deleted are left). Returns the names deleted
/// (or already gone) and the first error.
pub async fn delete<K: Resource<DynamicType = ()>>(
    api: &Api<Pod>,
    events: &Events,
    owner: &K,
    pods: &[Arc<Pod>],
) -> (Vec<String>, Option<Error>) {
    let mut seen = HashSet::new();
    let names: Vec<String> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| p.name_any())
        .filter(|n| seen.insert(n.clone()))
        .collect();
    let results = join_all(names.into_iter().map(|name| async move {
        let r = api.delete(&name, &DeleteParams::default()).await;
        (name, r)
    }))
    .await;
    let mut deleted = Vec::new();
    let mut first_err = None;
    for (name, r) in results {
        match r {
            Ok(_) => {
                events.normal(owner, "SuccessfulDelete", format!("Deleted pod: {name}"));
                deleted.push(name);
            }
            Err(e) if r8s_client::is_not_found(&e) => {}
            Err(e) => {
                let e = Error::from(e);
                events.warning(
                    owner,
                    "FailedDelete",
                    format!("Error deleting: {}", error_message(&e)),
                );
                first_err.get_or_insert(e);
            }
        }
    }
    (deleted, first_err)
}
