//! `ServiceAccount` admission (upstream's plugin of that name, on by default): a new pod runs
//! as a ServiceAccount — `default` unless it names one — which must exist; unless the pod or
//! the account turns `automountServiceAccountToken` off, every container gets the
//! `kube-api-access-<random>` projected volume (a bound token, the cluster's CA from the
//! `kube-root-ca.crt` ConfigMap, the namespace) at `/var/run/secrets/kubernetes.io/serviceaccount`;
//! a pod without image pull secrets gets the account's.
//!
//! As upstream, a pod naming an account that does not exist is refused. The `default` account
//! is made by the serviceaccount controller just after its namespace; a pod created in that
//! moment waits for it a little (up to ten reads, 100–200 ms apart), as upstream does, and is
//! refused if it still is not there.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};

use super::{Attributes, MutatingPlugin, Operation, ValidatingPlugin};
use crate::status::ApiError;

pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";
pub const VOLUME_PREFIX: &str = "kube-api-access-";
pub const MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// Tokens of the projected volume live an hour and a bit (upstream's
/// `WarnOnlyBoundTokenExpirationSeconds`, 3607).
pub const TOKEN_EXPIRATION_SECONDS: i64 = 3607;
const ENFORCE_MOUNTABLE_SECRETS: &str = "kubernetes.io/enforce-mountable-secrets";
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

pub struct ServiceAccount {
    pub listers: super::listers::Listers,
}

/// Pod creates (and ephemeral-container updates) are this plugin's business.
fn ignored(attrs: &Attributes<'_>) -> bool {
    let r = attrs.request;
    !(r.api_group.is_empty()
        && r.resource == "pods"
        && (r.subresource.is_empty() || r.subresource == "ephemeralcontainers"))
        || attrs.object.is_none()
}

fn is_mirror_pod(pod: &Value) -> bool {
    pod["metadata"]["annotations"].get(MIRROR_ANNOTATION).is_some()
}

/// Go's `strconv.ParseBool` truth.
fn parse_bool(s: &str) -> bool {
    matches!(s, "1" | "t" | "T" | "TRUE" | "true" | "True")
}

/// The projected volume that holds the pod's token, CA and namespace.
pub fn token_volume(name: &str) -> Value {
    // Built once and copied (copying a JSON tree is cheaper than building it key by key).
    static TEMPLATE: std::sync::LazyLock<Value> = std::sync::LazyLock::new(token_volume_template);
    let mut v = TEMPLATE.clone();
    v["name"] = Value::String(name.to_owned());
    v
}

fn token_volume_template() -> Value {
    json!({
        "name": "",
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": TOKEN_EXPIRATION_SECONDS, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{
                    "path": "namespace",
                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                }]}},
            ],
        },
    })
}

/// Add the token volume and its mount to every container and init container that does not
/// already mount something at the token path (upstream `mountServiceAccountToken`).
fn mount_token(pod: &mut Value) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let existing = spec
        .get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find_map(|v| v["name"].as_str().filter(|n| n.starts_with(VOLUME_PREFIX)))
        .map(String::from);
    let name = existing
        .clone()
        .unwrap_or_else(|| format!("{VOLUME_PREFIX}{}", crate::registry::meta::random_suffix()));
    let mount = json!({"name": name, "readOnly": true, "mountPath": MOUNT_PATH});
    let mut needs_volume = false;
    // Lists and fields are looked up, not indexed mutably: indexing would add `null`s for
    // the ones a pod does not have.
    for list in ["initContainers", "containers"] {
        let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for c in cs.iter_mut().filter_map(Value::as_object_mut) {
            let mounted = c
                .get("volumeMounts")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|m| m["mountPath"] == MOUNT_PATH);
            if mounted {
                continue;
            }
            super::push_to_list(c, "volumeMounts", mount.clone());
            needs_volume = true;
        }
    }
    if existing.is_none() && needs_volume {
        super::push_to_list(spec, "volumes", token_volume(&name));
    }
}

/// Whether the token is mounted: the pod's choice, else the account's, else yes.
fn should_automount(sa: &Value, pod: &Value) -> bool {
    pod["spec"]["automountServiceAccountToken"]
        .as_bool()
        .or(sa["automountServiceAccountToken"].as_bool())
        .unwrap_or(true)
}

fn names<'a>(list: &'a Value, field: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(move |v| v[field].as_str())
}

/// The secrets a pod may use when its account enforces mountable secrets (upstream
/// `limitSecretReferences`).
fn limit_secret_references(sa: &Value, pod: &Value) -> Result<(), String> {
    let sa_name = sa["metadata"]["name"].as_str().unwrap_or("");
    let mountable: Vec<&str> = names(&sa["secrets"], "name").collect();
    let spec = &pod["spec"];
    for v in spec["volumes"].as_array().into_iter().flatten() {
        if let Some(secret) = v["secret"]["secretName"].as_str() {
            if !mountable.contains(&secret) {
                return Err(format!(
                    "volume with secret.secretName=\"{secret}\" is not allowed because service account {sa_name} does not reference that secret"
                ));
            }
        }
    }
    for (list, label) in [("initContainers", "init container"), ("containers", "container")] {
        for c in spec[list].as_array().into_iter().flatten() {
            let cname = c["name"].as_str().unwrap_or("");
            for env in c["env"].as_array().into_iter().flatten() {
                if let Some(secret) = env["valueFrom"]["secretKeyRef"]["name"].as_str() {
                    if !mountable.contains(&secret) {
                        return Err(format!(
                            "{label} {cname} with envVar {} referencing secret.secretName=\"{secret}\" is not allowed because service account {sa_name} does not reference that secret",
                            env["name"].as_str().unwrap_or("")
                        ));
                    }
                }
            }
            for from in c["envFrom"].as_array().into_iter().flatten() {
                if let Some(secret) = from["secretRef"]["name"].as_str() {
                    if !mountable.contains(&secret) {
                        return Err(format!(
                            "{label} {cname} with envFrom referencing secret.secretName=\"{secret}\" is not allowed because service account {sa_name} does not reference that secret"
                        ));
                    }
                }
            }
        }
    }
    let pull: Vec<&str> = names(&sa["imagePullSecrets"], "name").collect();
    for (i, name) in names(&spec["imagePullSecrets"], "name").enumerate() {
        if !pull.contains(&name) {
            return Err(format!(
                "imagePullSecrets[{i}].name=\"{name}\" is not allowed because service account {sa_name} does not reference that imagePullSecret"
            ));
        }
    }
    Ok(())
}

/// Whether a pod names any secret (volumes, projections, environment, pull secrets).
fn references_secrets(spec: &Value) -> bool {
    let volumes = spec["volumes"].as_array().into_iter().flatten().any(|v| {
        v["secret"].is_object()
            || v["projected"]["sources"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|s| s["secret"].is_object())
    });
    let env = ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|l| spec[*l].as_array().into_iter().flatten())
        .any(|c| {
            c["env"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|e| e["valueFrom"]["secretKeyRef"].is_object())
                || c["envFrom"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|e| e["secretRef"].is_object())
        });
    volumes || env || spec["imagePullSecrets"].as_array().is_some_and(|a| !a.is_empty())
}

impl ServiceAccount {
    async fn read(&self, ns: &str, name: &str) -> Result<Option<Arc<Value>>, ApiError> {
        self.listers.service_account(ns, name).await
    }

    /// The account, waiting a little for `default` (its controller may be about to make it).
    async fn service_account(&self, ns: &str, name: &str) -> Result<Arc<Value>, String> {
        let attempts = if name == DEFAULT_SERVICE_ACCOUNT { 10 } else { 1 };
        for i in 0..attempts {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(fastrand::u64(100..200))).await;
            }
            match self.read(ns, name).await {
                Ok(Some(sa)) => return Ok(sa),
                Ok(None) => {}
                Err(e) => return Err(e.message),
            }
        }
        Err(format!("serviceaccount \"{name}\" not found"))
    }

    fn lookup_error(attrs: &Attributes<'_>, sa: &str, e: &str) -> ApiError {
        attrs.forbidden(format!(
            "error looking up service account {}/{sa}: {e}",
            attrs.request.namespace
        ))
    }
}

#[async_trait]
impl MutatingPlugin for ServiceAccount {
    fn name(&self) -> &'static str {
        "ServiceAccount"
    }

    async fn admit(&self, attrs: &mut Attributes<'_>) -> Result<(), ApiError> {
        if ignored(attrs) || attrs.operation != Operation::Create || !attrs.request.subresource.is_empty() {
            return Ok(());
        }
        let ns = attrs.request.namespace.clone();
        let Some(pod) = attrs.object.as_deref_mut() else {
            return Ok(());
        };
        if is_mirror_pod(pod) {
            return ValidatingPlugin::validate(self, attrs).await;
        }
        let sa_name = match pod["spec"]["serviceAccountName"].as_str() {
            Some(n) if !n.is_empty() => n.to_owned(),
            _ => {
                pod["spec"]["serviceAccountName"] = json!(DEFAULT_SERVICE_ACCOUNT);
                DEFAULT_SERVICE_ACCOUNT.to_owned()
            }
        };
        let sa = match self.service_account(&ns, &sa_name).await {
            Ok(sa) => sa,
            Err(e) => return Err(Self::lookup_error(attrs, &sa_name, &e)),
        };
        let Some(pod) = attrs.object.as_deref_mut() else {
            return Ok(());
        };
        if should_automount(&sa, pod) {
            mount_token(pod);
        }
        let has_pull_secrets = pod["spec"]["imagePullSecrets"]
            .as_array()
            .is_some_and(|a| !a.is_empty());
        let sa_pull: Vec<Value> = names(&sa["imagePullSecrets"], "name")
            .map(|n| json!({"name": n}))
            .collect();
        if !has_pull_secrets && !sa_pull.is_empty() {
            pod["spec"]["imagePullSecrets"] = Value::Array(sa_pull);
        }
        // What validation checks, with the account just read (validation runs again, with its
        // own read, after the other mutating plugins).
        check_mountable_secrets(&sa, pod).map_err(|e| attrs.forbidden(e))
    }
}

#[async_trait]
impl ValidatingPlugin for ServiceAccount {
    fn name(&self) -> &'static str {
        "ServiceAccount"
    }

    async fn validate(&self, attrs: &Attributes<'_>) -> Result<(), ApiError> {
        if ignored(attrs) || attrs.operation != Operation::Create || !attrs.request.subresource.is_empty() {
            return Ok(());
        }
        let Some(pod) = attrs.object.as_deref() else {
            return Ok(());
        };
        let ns = &attrs.request.namespace;
        if is_mirror_pod(pod) {
            let spec = &pod["spec"];
            if spec["serviceAccountName"].as_str().is_some_and(|s| !s.is_empty()) {
                return Err(attrs.forbidden("a mirror pod may not reference service accounts"));
            }
            if references_secrets(spec) {
                return Err(attrs.forbidden("a mirror pod may not reference secrets"));
            }
            let token_projection = spec["volumes"].as_array().into_iter().flatten().any(|v| {
                v["projected"]["sources"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|s| s["serviceAccountToken"].is_object())
            });
            if token_projection {
                return Err(
                    attrs.forbidden("a mirror pod may not use ServiceAccountToken volume projections")
                );
            }
            return Ok(());
        }
        let Some(sa_name) = pod["spec"]["serviceAccountName"]
            .as_str()
            .filter(|s| !s.is_empty())
        else {
            return Err(attrs.forbidden(format!(
                "no service account specified for pod {ns}/{}",
                pod["metadata"]["name"].as_str().unwrap_or("")
            )));
        };
        let sa = self
            .service_account(ns, sa_name)
            .await
            .map_err(|e| Self::lookup_error(attrs, sa_name, &e))?;
        check_mountable_secrets(&sa, pod).map_err(|e| attrs.forbidden(e))
    }
}

/// An account annotated to enforce mountable secrets limits the pod to the secrets it lists.
fn check_mountable_secrets(sa: &Value, pod: &Value) -> Result<(), String> {
    let enforce = sa["metadata"]["annotations"][ENFORCE_MOUNTABLE_SECRETS]
        .as_str()
        .is_some_and(parse_bool);
    if enforce {
        limit_secret_references(sa, pod)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use r8s_store::Store;
    use std::sync::Arc;

    async fn store_with(accounts: &[Value]) -> (tempfile::TempDir, Arc<dyn Store>) {
        let dir = tempfile::tempdir().unwrap();
        let s =
            r8s_store::embedded::EmbeddedStore::open(r8s_store::embedded::EmbeddedOptions::new(dir.path()))
                .unwrap();
        for a in accounts {
            let key = format!(
                "/registry/serviceaccounts/dev/{}",
                a["metadata"]["name"].as_str().unwrap()
            );
            s.create(&key, serde_json::to_vec(a).unwrap().into())
                .await
                .unwrap();
        }
        (dir, Arc::new(s))
    }

    async fn admit(store: Arc<dyn Store>, pod: &mut Value) -> Result<(), ApiError> {
        let plugin = ServiceAccount {
            listers: crate::admission::listers::Listers::new(store),
        };
        crate::admission::testing::create_pod("dev", pod, Some(&plugin), Some(&plugin)).await
    }

    #[tokio::test]
    async fn default_account_token_volume_and_mounts() {
        let (_d, s) =
            store_with(&[json!({"metadata": {"name": "default"}, "imagePullSecrets": [{"name": "reg"}]})])
                .await;
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {
            "initContainers": [{"name": "i", "image": "x"}],
            "containers": [{"name": "c", "image": "x"}],
        }});
        admit(s, &mut pod).await.unwrap();
        assert_eq!(pod["spec"]["serviceAccountName"], "default");
        let volumes = pod["spec"]["volumes"].as_array().unwrap();
        assert_eq!(volumes.len(), 1);
        let name = volumes[0]["name"].as_str().unwrap();
        assert!(name.starts_with("kube-api-access-") && name.len() == "kube-api-access-".len() + 5);
        assert_eq!(volumes[0], token_volume(name));
        for list in ["initContainers", "containers"] {
            assert_eq!(
                pod["spec"][list][0]["volumeMounts"],
                json!([{"name": name, "readOnly": true, "mountPath": MOUNT_PATH}])
            );
        }
        assert_eq!(pod["spec"]["imagePullSecrets"], json!([{"name": "reg"}]));
    }

    #[tokio::test]
    async fn missing_account_and_opt_out() {
        let (_d, s) = store_with(&[
            json!({"metadata": {"name": "default"}}),
            json!({"metadata": {"name": "quiet"}, "automountServiceAccountToken": false}),
        ])
        .await;
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"serviceAccountName": "x", "containers": [{"name": "c"}]}});
        let err = admit(s.clone(), &mut pod).await.unwrap_err();
        assert_eq!(
            err.message,
            "pods \"p\" is forbidden: error looking up service account dev/x: serviceaccount \"x\" not found"
        );
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"serviceAccountName": "quiet", "containers": [{"name": "c"}]}});
        admit(s.clone(), &mut pod).await.unwrap();
        assert!(pod["spec"]["volumes"].is_null());
        // The pod's own choice wins over the account's.
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"automountServiceAccountToken": false, "containers": [{"name": "c"}]}});
        admit(s.clone(), &mut pod).await.unwrap();
        assert!(pod["spec"]["volumes"].is_null());
        // Something already mounted at the path keeps its place.
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c",
            "volumeMounts": [{"name": "own", "mountPath": MOUNT_PATH}]}], "volumes": [{"name": "own", "emptyDir": {}}]}});
        admit(s, &mut pod).await.unwrap();
        assert_eq!(pod["spec"]["volumes"].as_array().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn enforced_mountable_secrets() {
        let (_d, s) = store_with(&[json!({"metadata": {"name": "default",
            "annotations": {"kubernetes.io/enforce-mountable-secrets": "true"}},
            "secrets": [{"name": "ok"}]})])
        .await;
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c",
            "env": [{"name": "E", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k"}}}]}]}});
        let err = admit(s, &mut pod).await.unwrap_err();
        assert_eq!(
            err.message,
            "pods \"p\" is forbidden: container c with envVar E referencing secret.secretName=\"nope\" is not allowed because service account default does not reference that secret"
        );
    }
}
