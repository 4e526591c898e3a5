//! What the API server makes at start, as upstream's bootstrap controllers do: the
//! `default`, `kube-system`, `kube-public` and `kube-node-lease` namespaces, and the
//! `system-node-critical` and `system-cluster-critical` PriorityClasses.

use r8s_store::{Store, StoreError};
use serde_json::json;

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
