//! The registry for the server's own writers that act outside a request of their own —
//! ResourceQuota admission charging a quota's `status.used` while it admits another object
//! (upstream's plugin writes through its loopback client). Keys, encoding and the resource's
//! validation are the registry's, as for a request; admission does not run again (the write
//! is part of the request being admitted).

use crate::registry::Resource;
use r8s_store::{RangeRequest, Store, StoreError};
use serde_json::Value;

use super::{decode, encode, invalid, key, meta, prefix, store_error, strategy};
use crate::status::ApiError;

/// Every object of `def` in `ns`, read from the datastore at its latest revision (each with
/// its resourceVersion, for a later compare-and-swap).
pub(crate) async fn list(store: &dyn Store, def: &Resource, ns: &str) -> Result<Vec<Value>, ApiError> {
    let resp = store
        .range(RangeRequest {
            prefix: prefix(def, ns),
            ..Default::default()
        })
        .await
        .map_err(|e| store_error(def, "", e))?;
    Ok(resp.kvs.iter().filter_map(|kv| decode(def, kv).ok()).collect())
}

/// The object `name` of `def` as stored now (with its resourceVersion).
pub(crate) async fn get(store: &dyn Store, def: &Resource, ns: &str, name: &str) -> Result<Value, ApiError> {
    let resp = store
        .get(&key(def, ns, name), 0)
        .await
        .map_err(|e| store_error(def, name, e))?;
    match resp.kv {
        Some(kv) => decode(def, &kv),
        None => Err(super::not_found(def, name)),
    }
}

/// Write the status of `new`, which was read as `old`: only `status` changes (the rest stays
/// as stored), the resource's validation runs, and the write is a compare-and-swap on the
/// version `old` was read at. `Ok(false)` if the object changed or went meanwhile.
pub(crate) async fn update_status(
    store: &dyn Store,
    def: &Resource,
    new: &Value,
    old: &Value,
) -> Result<bool, ApiError> {
    let (ns, name) = (meta::namespace(old), meta::name(old));
    let mut obj = old.clone();
    obj["status"] = new["status"].clone();
    let mut errs = strategy::validate(def, &obj);
    errs.extend(strategy::validate_update(def, &obj, old));
    if !errs.is_empty() {
        return Err(invalid(def, name, &errs));
    }
    let rv = meta::resource_version(old).unwrap_or(0);
    match store.update(&key(def, ns, name), encode(def, &obj), rv).await {
        Ok(_) => Ok(true),
        Err(StoreError::Conflict { .. } | StoreError::NotFound { .. }) => Ok(false),
        Err(e) => Err(store_error(def, name, e)),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    async fn store() -> (tempfile::TempDir, Arc<dyn Store>) {
        let dir = tempfile::tempdir().unwrap();
        let s: Arc<dyn Store> = Arc::new(
            r8s_store::embedded::EmbeddedStore::open(r8s_store::embedded::EmbeddedOptions::new(dir.path()))
                .unwrap(),
        );
        (dir, s)
    }

    fn quota_def() -> &'static Resource {
        crate::registry::catalogue::builtin("", "v1", "resourcequotas").unwrap()
    }

    #[tokio::test]
    async fn status_writes_change_only_status_and_lose_to_a_newer_version() {
        let (_d, s) = store().await;
        let def = quota_def();
        let q = json!({"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": "q", "namespace": "dev", "uid": "u"},
            "spec": {"hard": {"pods": "2"}}, "status": {"hard": {"pods": "2"}, "used": {"pods": "0"}}});
        s.create(&key(def, "dev", "q"), encode(def, &q)).await.unwrap();
        let read = list(&*s, def, "dev").await.unwrap();
        assert_eq!(read.len(), 1);
        assert!(list(&*s, def, "other").await.unwrap().is_empty());
        let old = &read[0];
        let mut new = old.clone();
        new["status"]["used"]["pods"] = json!("1");
        // A writer's change outside status is not written.
        new["spec"]["hard"]["pods"] = json!("9");
        assert!(update_status(&*s, def, &new, old).await.unwrap());
        let now = &list(&*s, def, "dev").await.unwrap()[0];
        assert_eq!(now["status"]["used"]["pods"], "1");
        assert_eq!(now["spec"]["hard"]["pods"], "2");
        // Written against the version read before: refused as changed meanwhile.
        new["status"]["used"]["pods"] = json!("2");
        assert!(!update_status(&*s, def, &new, old).await.unwrap());
        assert_eq!(
            list(&*s, def, "dev").await.unwrap()[0]["status"]["used"]["pods"],
            "1"
        );
        // The resource's validation runs: a negative quantity is refused with 422.
        let mut bad = now.clone();
        bad["status"]["used"]["pods"] = json!("-1");
        let err = update_status(&*s, def, &bad, now).await.unwrap_err();
        assert_eq!(err.code, 422, "{}", err.message);
    }
}
