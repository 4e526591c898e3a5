//! A deleted server leaves the etcd cluster, as k3s's member controller has it: a server with an
//! etcd member writes the member's name on its Node (`etcd.r8s.io/node-name`) with a finalizer;
//! when that Node is deleted (`kubectl delete node`), or annotated `etcd.r8s.io/remove=true`, a
//! server removes the member (etcd's MemberRemove), then lets the Node go (the finalizer) or
//! records `etcd.r8s.io/removed-node-name`. A member is never removed by its own server, nor the
//! last one: its Node just goes.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch, PatchParams};
use r8s_store::etcd::EtcdOptions;
use serde_json::json;

pub const NAME_ANNOTATION: &str = "etcd.r8s.io/node-name";
pub const REMOVE_ANNOTATION: &str = "etcd.r8s.io/remove";
pub const REMOVED_ANNOTATION: &str = "etcd.r8s.io/removed-node-name";
pub const FINALIZER: &str = "etcd.r8s.io/member";

/// What is left to do once a Node's member is out of the cluster.
#[derive(Debug, PartialEq)]
pub enum Then {
    /// The Node is being deleted: drop the finalizer so it goes.
    LetGo,
    /// The Node asked for it by annotation: record the member removed.
    MarkRemoved,
}

/// The member a Node's server ran that must leave the cluster now, and what then; `None` if
/// nothing is asked of this Node.
pub fn decide(node: &Node) -> Option<(String, Then)> {
    let meta = &node.metadata;
    let annotations = meta.annotations.as_ref()?;
    let member = annotations.get(NAME_ANNOTATION)?.clone();
    let finalized = meta
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == FINALIZER));
    if meta.deletion_timestamp.is_some() {
        return finalized.then_some((member, Then::LetGo));
    }
    let asked = annotations.get(REMOVE_ANNOTATION).is_some_and(|v| v == "true");
    let done = annotations.get(REMOVED_ANNOTATION) == Some(&member);
    (asked && !done).then_some((member, Then::MarkRemoved))
}

/// Write this server's member on its Node, with the finalizer, once the Node has registered.
pub async fn annotate_own_node(nodes: Api<Node>, node: &str, member: &str) -> kube::Result<()> {
    let current = nodes.get(node).await?;
    let mut finalizers = current.metadata.finalizers.clone().unwrap_or_default();
    let has_name = current
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(NAME_ANNOTATION))
        .is_some_and(|n| n == member);
    if has_name && finalizers.iter().any(|f| f == FINALIZER) {
        return Ok(());
    }
    if !finalizers.iter().any(|f| f == FINALIZER) {
        finalizers.push(FINALIZER.to_owned());
    }
    // The resourceVersion makes the finalizer list a compare-and-swap.
    let patch = json!({"metadata": {
        "resourceVersion": current.metadata.resource_version,
        "annotations": {NAME_ANNOTATION: member},
        "finalizers": finalizers,
    }});
    nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Remove `member` from the cluster unless it is `own` (this server's) or the last one;
/// whether it is out of the cluster (or may be let go) now.
async fn remove_member(etcd: &EtcdOptions, member: &str, own: &str) -> anyhow::Result<bool> {
    let members = r8s_store::etcd::member_list(etcd).await?;
    let Some(m) = members.iter().find(|m| m.name == member) else {
        return Ok(true);
    };
    if members.len() == 1 {
        tracing::warn!(member, "the last etcd member is not removed; its Node goes");
        return Ok(true);
    }
    if member == own {
        // Another server removes it: a member removed by itself stops before it answers.
        return Ok(false);
    }
    r8s_store::etcd::member_remove(etcd, m.id).await?;
    tracing::info!(member, "removed the etcd member of a deleted server");
    Ok(true)
}

async fn reconcile(nodes: &Api<Node>, etcd: &EtcdOptions, own: &str) -> anyhow::Result<()> {
    for node in nodes.list(&ListParams::default()).await? {
        let Some((member, then)) = decide(&node) else {
            continue;
        };
        let name = node.metadata.name.clone().unwrap_or_default();
        if !remove_member(etcd, &member, own).await? {
            continue;
        }
        let patch = match then {
            Then::LetGo => json!({"metadata": {
                "resourceVersion": node.metadata.resource_version,
                "finalizers": node.metadata.finalizers.unwrap_or_default()
                    .into_iter().filter(|f| f != FINALIZER).collect::<Vec<_>>(),
            }}),
            Then::MarkRemoved => json!({"metadata": {"annotations": {REMOVED_ANNOTATION: member}}}),
        };
        nodes
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(())
}

/// Every server with a member runs this until `stop`: its own Node annotated once it
/// registers, and the members of deleted servers removed (looked at every 2 s).
pub async fn run(
    client: kube::Client,
    etcd: EtcdOptions,
    node: String,
    own: String,
    stop: tokio_util::sync::CancellationToken,
) {
    let nodes: Api<Node> = Api::all(client);
    let mut annotated = false;
    loop {
        if !annotated {
            match annotate_own_node(nodes.clone(), &node, &own).await {
                Ok(()) => annotated = true,
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => tracing::debug!(error = %e, "writing the etcd member on this server's node"),
            }
        }
        if let Err(e) = reconcile(&nodes, &etcd, &own).await {
            tracing::debug!(error = format!("{e:#}"), "etcd member controller");
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(annotations: &[(&str, &str)], finalizer: bool, deleted: bool) -> Node {
        let mut n: Node = serde_json::from_value(json!({"metadata": {"name": "n"}})).unwrap();
        n.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        if finalizer {
            n.metadata.finalizers = Some(vec![FINALIZER.to_owned()]);
        }
        if deleted {
            n.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-11-29T00:00:00Z".parse().unwrap(),
            ));
        }
        n
    }

    #[test]
    fn a_deleted_or_annotated_server_node_names_its_member() {
        let m = (NAME_ANNOTATION, "node3-abcd");
        assert_eq!(
            decide(&node(&[m], true, true)),
            Some(("node3-abcd".into(), Then::LetGo))
        );
        // Let go already, or never a server's: nothing to do.
        assert_eq!(decide(&node(&[m], false, true)), None);
        assert_eq!(decide(&node(&[], true, true)), None);
        assert_eq!(decide(&node(&[m], true, false)), None);
        assert_eq!(
            decide(&node(&[m, (REMOVE_ANNOTATION, "true")], true, false)),
            Some(("node3-abcd".into(), Then::MarkRemoved))
        );
        assert_eq!(
            decide(&node(
                &[m, (REMOVE_ANNOTATION, "true"), (REMOVED_ANNOTATION, "node3-abcd")],
                true,
                false
            )),
            None
        );
    }
}
