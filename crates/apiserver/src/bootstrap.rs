//! What the API server makes at start, as upstream's bootstrap controllers do: the
//! `default`, `kube-system`, `kube-public` and `kube-node-lease` namespaces, and the
//! `system-node-critical` and `system-cluster-critical` PriorityClasses.

use r8s_store::{Store, StoreError};
use serde_json::{json, Value};

use crate::registry;

const SYSTEM_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

pub(crate) async fn ensure_namespaces(store: &dyn Store) -> Result<(), StoreError> {
    let def = r8s_api::find("", "v1", "namespaces").expect("namespaces are in the catalogue");
    for ns in SYSTEM_NAMESPACES {
        let obj = json!({
            "kind": "Namespace",
            "apiVersion": "v1",
            "metadata": {
                "name": ns,
                "uid": uuid::Uuid::new_v4().to_string(),
                "creationTimestamp": registry::meta::now_rfc3339(),
                "labels": {"kubernetes.io/metadata.name": ns},
            },
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        });
        let value = registry::encode(def, &obj);
        create_if_absent(store, &registry::key(def, "", ns), value).await?;
    }
    Ok(())
}

pub(crate) async fn ensure_priority_classes(store: &dyn Store) -> Result<(), StoreError> {
    let def = r8s_api::find("scheduling.k8s.io", "v1", "priorityclasses").expect("in the catalogue");
    for (name, value, description) in [
        ("system-node-critical", 2_000_001_000, "Used for system critical pods that must not be moved from their current node."),
        ("system-cluster-critical", 2_000_000_000, "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary."),
    ] {
        let obj = json!({
            "kind": "PriorityClass",
            "apiVersion": "scheduling.k8s.io/v1",
            "metadata": {
                "name": name,
                "uid": uuid::Uuid::new_v4().to_string(),
                "creationTimestamp": registry::meta::now_rfc3339(),
            },
            "value": value,
            "globalDefault": false,
            "description": description,
            "preemptionPolicy": "PreemptLowerPriority",
        });
        create_if_absent(store, &registry::key(def, "", name), registry::encode(def, &obj)).await?;
    }
    Ok(())
}

/// The `kubernetes` Service in `default`, on the first address of the service range, as
/// upstream's bootstrap controller makes it. (Its endpoints come with the node's address.)
pub(crate) async fn ensure_kubernetes_service(
    store: &dyn Store,
    cidr: registry::allocator::ServiceCidr,
    port: u16,
) -> Result<(), StoreError> {
    let def = r8s_api::find("", "v1", "services").expect("in the catalogue");
    let ip = cidr.first().to_string();
    create_if_absent(
        store,
        &format!("/registry/ranges/serviceips/{ip}"),
        bytes::Bytes::from("default/kubernetes"),
    )
    .await?;
    let obj = json!({
        "kind": "Service",
        "apiVersion": "v1",
        "metadata": {
            "name": "kubernetes",
            "namespace": "default",
            "uid": uuid::Uuid::new_v4().to_string(),
            "creationTimestamp": registry::meta::now_rfc3339(),
            "labels": {"component": "apiserver", "provider": "kubernetes"},
        },
        "spec": {
            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}],
            "clusterIP": ip,
            "clusterIPs": [ip],
            "type": "ClusterIP",
            "sessionAffinity": "None",
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "internalTrafficPolicy": "Cluster",
        },
        "status": {"loadBalancer": {}},
    });
    create_if_absent(
        store,
        &registry::key(def, "default", "kubernetes"),
        registry::encode(def, &obj),
    )
    .await
}

async fn create_if_absent(store: &dyn Store, key: &str, value: bytes::Bytes) -> Result<(), StoreError> {
    match store.create(key, value).await {
        Ok(_) | Err(StoreError::AlreadyExists { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The default roles and bindings of [`crate::rbac::bootstrap_policy`]: created when missing,
/// and, as upstream's reconciliation does, topped up with rules or subjects an older version
/// lacked unless an object is annotated `rbac.authorization.kubernetes.io/autoupdate: "false"`.
/// Nothing an administrator added is removed; the rules of aggregated ClusterRoles are left to
/// the aggregation controller.
pub(crate) async fn ensure_rbac_policy(store: &dyn Store) -> Result<(), StoreError> {
    let policy = crate::rbac::bootstrap_policy::policy();
    let mut objects: Vec<(&str, Value)> = Vec::new();
    let value = |o: Result<Value, serde_json::Error>| o.expect("policy objects serialize");
    objects.extend(
        policy
            .cluster_roles
            .iter()
            .map(|o| ("clusterroles", value(serde_json::to_value(o)))),
    );
    objects.extend(
        policy
            .roles
            .iter()
            .map(|o| ("roles", value(serde_json::to_value(o)))),
    );
    objects.extend(
        policy
            .cluster_role_bindings
            .iter()
            .map(|o| ("clusterrolebindings", value(serde_json::to_value(o)))),
    );
    objects.extend(
        policy
            .role_bindings
            .iter()
            .map(|o| ("rolebindings", value(serde_json::to_value(o)))),
    );
    for (plural, mut obj) in objects {
        let def = r8s_api::find("rbac.authorization.k8s.io", "v1", plural).expect("in the catalogue");
        let ns = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        let key = registry::key(def, &ns, &name);
        let existing = store.get(&key, 0).await?.kv;
        let Some(kv) = existing else {
            obj["metadata"]["uid"] = json!(uuid::Uuid::new_v4().to_string());
            obj["metadata"]["creationTimestamp"] = json!(registry::meta::now_rfc3339());
            create_if_absent(store, &key, registry::encode(def, &obj)).await?;
            continue;
        };
        let Ok(mut current) = serde_json::from_slice::<Value>(&kv.value) else {
            continue;
        };
        if current["metadata"]["annotations"]["rbac.authorization.kubernetes.io/autoupdate"] == "false" {
            continue;
        }
        let before = current.clone();
        for field in ["labels", "annotations"] {
            for (k, v) in obj["metadata"][field].as_object().into_iter().flatten() {
                if current["metadata"][field].get(k).is_none() {
                    current["metadata"][field][k] = v.clone();
                }
            }
        }
        if !obj["aggregationRule"].is_null() {
            current["aggregationRule"] = obj["aggregationRule"].clone();
        } else {
            let list = if plural.ends_with("bindings") {
                "subjects"
            } else {
                "rules"
            };
            for item in obj[list].as_array().cloned().unwrap_or_default() {
                let have = current[list].as_array().is_some_and(|a| a.contains(&item));
                if !have {
                    if !current[list].is_array() {
                        current[list] = json!([]);
                    }
                    current[list].as_array_mut().expect("an array").push(item);
                }
            }
        }
        if current != before {
            tracing::info!(resource = plural, %name, "reconciling a default RBAC object");
            match store
                .update(&key, registry::encode(def, &current), kv.mod_revision)
                .await
            {
                Ok(_) | Err(StoreError::Conflict { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}
