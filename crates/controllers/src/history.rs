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

/// The revision data of a template: the patch that restores it (upstream's `getPatch`), in the
/// very form upstream writes it — Go's encoding of the typed template (the zero-valued fields Go
/// always writes included) with every object's keys sorted, as Go marshals a map — since
/// clients compare it byte for byte with their own `getPatch` (the e2e suite's
/// `daemon.Match`).
pub fn data_of(template: &PodTemplateSpec) -> serde_json::Value {
    let mut t = serde_json::to_value(template).unwrap_or_default();
    t["$patch"] = json!("replace");
    go_encoded(sorted(json!({"spec": {"template": t}})))
}

/// Whether a stored revision's data is `data` (one written before data took Go's form
/// included).
pub fn same_data(stored: &serde_json::Value, data: &serde_json::Value) -> bool {
    go_encoded(stored.clone()) == *data
}

/// Add the fields of a template patch that Go's encoder writes even when they are zero: structs
/// under `omitempty` (a template's `creationTimestamp: null`, a container's `resources: {}`) and
/// a resource field selector's `divisor` (a Quantity, "0").
fn go_encoded(mut data: serde_json::Value) -> serde_json::Value {
    let Some(t) = at(&mut data, &["spec", "template"]).filter(|t| t.is_object()) else {
        return data;
    };
    if !t["metadata"].is_object() {
        t["metadata"] = json!({});
    }
    if t["metadata"].get("creationTimestamp").is_none() {
        t["metadata"]["creationTimestamp"] = serde_json::Value::Null;
    }
    if let Some(spec) = at(t, &["spec"]) {
        for list in ["initContainers", "containers", "ephemeralContainers"] {
            for c in items(spec, &[list]) {
                if c.get("resources").is_none() {
                    c["resources"] = json!({});
                }
                for e in items(c, &["env"]) {
                    default_divisor(at(e, &["valueFrom", "resourceFieldRef"]));
                }
            }
        }
        for v in items(spec, &["volumes"]) {
            for item in items(v, &["downwardAPI", "items"]) {
                default_divisor(at(item, &["resourceFieldRef"]));
            }
            for source in items(v, &["projected", "sources"]) {
                for item in items(source, &["downwardAPI", "items"]) {
                    default_divisor(at(item, &["resourceFieldRef"]));
                }
            }
        }
    }
    sorted(data)
}

/// The value at `path` under `v`, if there is one (indexing would add what is missing).
fn at<'a>(v: &'a mut serde_json::Value, path: &[&str]) -> Option<&'a mut serde_json::Value> {
    path.iter().try_fold(v, |v, k| v.get_mut(*k))
}

/// The items of the array at `path` under `v` (none if there is no array).
fn items<'a>(v: &'a mut serde_json::Value, path: &[&str]) -> impl Iterator<Item = &'a mut serde_json::Value> {
    at(v, path).and_then(|a| a.as_array_mut()).into_iter().flatten()
}

fn default_divisor(selector: Option<&mut serde_json::Value>) {
    if let Some(o) = selector.and_then(|s| s.as_object_mut()) {
        o.entry("divisor").or_insert_with(|| json!("0"));
    }
}

/// `v` with every object's keys in byte order (Go's encoding of a map).
fn sorted(v: serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(m) => {
            let mut entries: Vec<(String, serde_json::Value)> = m.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            serde_json::Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        serde_json::Value::Array(a) => serde_json::Value::Array(a.into_iter().map(sorted).collect()),
        other => other,
    }
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
        .find(|r| r.data.as_ref().is_some_and(|d| same_data(&d.0, &data)))
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
        data: Some(RawExtension(data.clone())),
        revision: newest + 1,
    };
    match api.create(&crate::post_params(), &revision).await {
        Ok(r) => Ok((r, hash)),
        Err(kube::Error::Api(e)) if e.code == 409 && e.reason == "AlreadyExists" => {
            // Same name: ours with other data is a hash collision (the owner's collisionCount
            // goes up and the next sync hashes anew); ours with this data is a cache lag.
            let found = api.get(&revision.name_any()).await?;
            if found.data.as_ref().is_some_and(|d| same_data(&d.0, &data)) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revision_data_is_byte_for_byte_what_go_writes() {
        // A DaemonSet template as the API server returns it (defaults applied), keys in its
        // own order.
        let template: PodTemplateSpec = serde_json::from_value(json!({
            "metadata": {"labels": {"daemonset-name": "daemon-set"}},
            "spec": {
                "containers": [{"name": "app", "image": "httpd", "ports": [{"containerPort": 9376, "protocol": "TCP"}],
                    "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                    "env": [{"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory"}}}]}],
                "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
                "securityContext": {}, "schedulerName": "default-scheduler"
            }
        }))
        .unwrap();
        let data = data_of(&template);
        // Go's getPatch: json.Marshal of a map (sorted keys), the typed template's zero
        // structs written (creationTimestamp null, resources {}, divisor "0").
        assert_eq!(
            serde_json::to_string(&data).unwrap(),
            concat!(
                r#"{"spec":{"template":{"$patch":"replace","metadata":{"creationTimestamp":null,"labels":{"daemonset-name":"daemon-set"}},"#,
                r#""spec":{"containers":[{"env":[{"name":"MEM","valueFrom":{"resourceFieldRef":{"divisor":"0","resource":"limits.memory"}}}],"#,
                r#""image":"httpd","imagePullPolicy":"IfNotPresent","name":"app","ports":[{"containerPort":9376,"protocol":"TCP"}],"#,
                r#""resources":{},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File"}],"#,
                r#""dnsPolicy":"ClusterFirst","restartPolicy":"Always","schedulerName":"default-scheduler","securityContext":{},"#,
                r#""terminationGracePeriodSeconds":30}}}}"#
            )
        );
        // A revision written before (no Go zero fields, keys unsorted) is the same revision.
        let mut old = serde_json::to_value(&template).unwrap();
        old["$patch"] = json!("replace");
        assert!(same_data(&json!({"spec": {"template": old}}), &data));
        let mut other = template.clone();
        other.spec.as_mut().unwrap().containers[0].image = Some("nginx".into());
        assert!(!same_data(&data_of(&other), &data));
    }
}
