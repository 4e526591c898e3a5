//! What the API server makes at start, as upstream's bootstrap controller does: the
//! `default`, `kube-system`, `kube-public` and `kube-node-lease` namespaces.

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
        match store.create(&registry::key(def, "", ns), value).await {
            Ok(_) | Err(StoreError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
