//! `ResourceQuota` admission (upstream's plugin of that name, the last of the default set): a
//! create (or an update that grows what a service or claim uses) is charged against every
//! ResourceQuota of its namespace that covers it, and refused if any would go over its hard
//! limit. The charge is written to the quota's `status.used` at once, compare-and-swap on the
//! quota's resource version and retried on conflict as upstream's evaluator does, so
//! concurrent creates cannot together overshoot; the resourcequota controller later recounts
//! usage from the objects themselves (which is also what gives back what deleted objects
//! used).
//!
//! Requests of one namespace are charged one at a time (upstream batches them per namespace
//! on a work queue; one lock per namespace has the same effect here).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use r8s_api::quota::{
    self, add, less_than_or_equal, mask, names, negative, parse_list, pretty_print, remove_zeros,
    subtract_non_negative, to_json, Evaluator, ResourceList,
};
use r8s_store::Store;
use serde_json::Value;

use super::{Attributes, Operation, ValidatingPlugin};
use crate::status::ApiError;

/// How often a conflicting quota update is retried with the quota read again.
const RETRIES: usize = 3;

/// What quota never charges (upstream's default ignored resources): requests that store
/// nothing, and events.
const IGNORED: &[(&str, &str)] = &[
    ("", "bindings"),
    ("", "componentstatuses"),
    ("authentication.k8s.io", "tokenreviews"),
    ("authentication.k8s.io", "selfsubjectreviews"),
    ("authorization.k8s.io", "subjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectaccessreviews"),
    ("authorization.k8s.io", "localsubjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectrulesreviews"),
    ("", "events"),
    ("events.k8s.io", "events"),
];

pub struct ResourceQuota {
    store: Arc<dyn Store>,
    /// Where to see whether a namespace has quotas at all (an in-memory lister, as upstream's
    /// plugin reads its informer); charging reads and writes `store`, through the registry.
    lister: super::listers::Listers,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl ResourceQuota {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            lister: super::listers::Listers::new(store.clone()),
            store,
            locks: Mutex::new(HashMap::new()),
        }
    }

    /// Look quotas up in `lister` before charging them.
    pub fn with_lister(mut self, lister: Arc<dyn Store>) -> Self {
        self.lister = super::listers::Listers::new(lister);
        self
    }

    fn lock_for(&self, ns: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(ns.to_owned()).or_default().clone()
    }

    /// Forget a namespace's lock once nobody holds or waits for it.
    fn release(&self, ns: &str, lock: Arc<tokio::sync::Mutex<()>>) {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        // The map's reference and ours.
        if Arc::strong_count(&lock) == 2 {
            locks.remove(ns);
        }
    }

    async fn quotas(&self, ns: &str) -> Result<Vec<Value>, ApiError> {
        crate::registry::system::list(&*self.store, quota_def(), ns).await
    }

    /// Write a quota's new `status.used`, compare-and-swap on the version it was read at.
    /// `Ok(false)` if it changed meanwhile.
    async fn write_status(&self, quota: &Value, read: &Value) -> Result<bool, ApiError> {
        crate::registry::system::update_status(&*self.store, quota_def(), quota, read).await
    }
}

fn quota_def() -> &'static crate::registry::Resource {
    crate::registry::catalogue::builtin("", "v1", "resourcequotas")
        .expect("resourcequotas are in the catalogue")
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Whether the evaluator has anything to charge for this operation (upstream `Handles`).
fn handles(ev: &Evaluator, op: Operation) -> bool {
    match ev {
        Evaluator::Pods | Evaluator::ObjectCount { .. } => op == Operation::Create,
        Evaluator::Services | Evaluator::PersistentVolumeClaims => {
            matches!(op, Operation::Create | Operation::Update)
        }
    }
}

fn quota_name(q: &Value) -> &str {
    q["metadata"]["name"].as_str().unwrap_or("")
}

/// The quotas as they would be with this request charged, or why it may not be (upstream
/// `CheckRequest`).
fn check_request(quotas: &[Value], attrs: &Attributes<'_>, ev: &Evaluator) -> Result<Vec<Value>, ApiError> {
    let Some(obj) = attrs.object.as_deref() else {
        return Ok(quotas.to_vec());
    };
    let mut interesting = Vec::new();
    for (i, q) in quotas.iter().enumerate() {
        if !ev.matches(q, obj) {
            continue;
        }
        let hard = parse_list(&q["status"]["hard"]);
        let restricted = ev.matching_resources(&names(&hard));
        ev.constraints(&restricted, obj)
            .map_err(|e| attrs.forbidden(format!("failed quota: {}: {e}", quota_name(q))))?;
        let used = parse_list(&q["status"]["used"]);
        let mut unknown: Vec<&String> = restricted.iter().filter(|r| !used.contains_key(*r)).collect();
        if !unknown.is_empty() {
            unknown.sort();
            return Err(attrs.forbidden(format!(
                "status unknown for quota: {}, resources: {}",
                quota_name(q),
                unknown.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(",")
            )));
        }
        interesting.push(i);
    }
    if interesting.is_empty() {
        return Ok(quotas.to_vec());
    }
    let input = ev.usage(obj, now());
    let mut neg = negative(&input);
    if !neg.is_empty() {
        neg.sort();
        return Err(attrs.forbidden(format!(
            "quota usage is negative for resource(s): {}",
            neg.join(",")
        )));
    }
    let mut deltas: HashMap<usize, ResourceList> = interesting.iter().map(|i| (*i, input.clone())).collect();
    if attrs.operation == Operation::Update {
        let Some(old) = attrs.old_object else {
            return Err(
                attrs.forbidden("unable to get previous usage since prior version of object was not found")
            );
        };
        if old["metadata"]["resourceVersion"]
            .as_str()
            .is_some_and(|v| !v.is_empty())
        {
            let delta = subtract_non_negative(&input, &ev.usage(old, now()));
            for i in &interesting {
                if ev.matches(&quotas[*i], old) {
                    deltas.insert(*i, delta.clone());
                }
            }
        }
    }
    deltas = deltas
        .into_iter()
        .map(|(i, d)| (i, remove_zeros(&d)))
        .filter(|(_, d)| !d.is_empty())
        .collect();
    let mut out = quotas.to_vec();
    for i in interesting {
        let Some(delta) = deltas.get(&i) else {
            continue;
        };
        let q = &quotas[i];
        let hard = parse_list(&q["status"]["hard"]);
        let used = parse_list(&q["status"]["used"]);
        let requested = mask(delta, hard.keys());
        let new_used = add(&used, &requested);
        let (ok, exceeded) = less_than_or_equal(&mask(&new_used, requested.keys()), &hard);
        if !ok {
            return Err(attrs.forbidden(format!(
                "exceeded quota: {}, requested: {}, used: {}, limited: {}",
                quota_name(q),
                pretty_print(&mask(&requested, &exceeded)),
                pretty_print(&mask(&used, &exceeded)),
                pretty_print(&mask(&hard, &exceeded)),
            )));
        }
        out[i]["status"]["used"] = to_json(&new_used);
    }
    Ok(out)
}

impl ResourceQuota {
    /// Check the request against the namespace's quotas and record its charge.
    async fn evaluate(&self, attrs: &Attributes<'_>, ev: &Evaluator) -> Result<(), ApiError> {
        let ns = &attrs.request.namespace;
        let mut quotas = self.quotas(ns).await?;
        for attempt in 0..=RETRIES {
            if quotas.is_empty() {
                return Ok(());
            }
            let charged = check_request(&quotas, attrs, ev)?;
            if attrs.dry_run {
                return Ok(());
            }
            let mut failed = Vec::new();
            for (before, after) in quotas.iter().zip(&charged) {
                if quota::equals(
                    &parse_list(&before["status"]["used"]),
                    &parse_list(&after["status"]["used"]),
                ) {
                    continue;
                }
                if !self.write_status(after, before).await? {
                    failed.push(quota_name(after).to_owned());
                }
            }
            let Some(last) = failed.last() else {
                return Ok(());
            };
            if attempt == RETRIES {
                return Err(crate::registry::conflict(quota_def(), last));
            }
            // Check again, against the new versions of the quotas that could not be written
            // (the others carry this request's charge already).
            quotas = self
                .quotas(ns)
                .await?
                .into_iter()
                .filter(|q| failed.iter().any(|f| f == quota_name(q)))
                .collect();
        }
        Ok(())
    }
}

#[async_trait]
impl ValidatingPlugin for ResourceQuota {
    fn name(&self) -> &'static str {
        "ResourceQuota"
    }

    async fn validate(&self, attrs: &Attributes<'_>) -> Result<(), ApiError> {
        let r = attrs.request;
        if !r.subresource.is_empty()
            || r.namespace.is_empty()
            || (r.api_group.is_empty() && r.resource == "namespaces")
            || IGNORED.contains(&(r.api_group.as_str(), r.resource.as_str()))
        {
            return Ok(());
        }
        let ev = Evaluator::for_resource(&r.api_group, &r.resource);
        if !handles(&ev, attrs.operation) {
            return Ok(());
        }
        // A namespace without quotas is the common case: nothing to charge, and no reason to
        // queue its writes behind the namespace's lock.
        if self.lister.resource_quotas(&r.namespace).await?.is_empty() {
            return Ok(());
        }
        let lock = self.lock_for(&r.namespace);
        let result = {
            let _held = lock.lock().await;
            self.evaluate(attrs, &ev).await
        };
        self.release(&r.namespace, lock);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authn::UserInfo;
    use crate::request_info::parse_request;
    use serde_json::json;

    async fn store_with(quotas: &[Value]) -> (tempfile::TempDir, Arc<dyn Store>) {
        let dir = tempfile::tempdir().unwrap();
        let s =
            r8s_store::embedded::EmbeddedStore::open(r8s_store::embedded::EmbeddedOptions::new(dir.path()))
                .unwrap();
        for q in quotas {
            let key = format!(
                "/registry/resourcequotas/dev/{}",
                q["metadata"]["name"].as_str().unwrap()
            );
            s.create(&key, serde_json::to_vec(q).unwrap().into())
                .await
                .unwrap();
        }
        (dir, Arc::new(s))
    }

    async fn create(plugin: &ResourceQuota, resource: &str, obj: &mut Value) -> Result<(), ApiError> {
        let info = parse_request(
            &http::Method::POST,
            &format!("/api/v1/namespaces/dev/{resource}"),
            None,
        );
        let user = UserInfo::default();
        let attrs = Attributes {
            operation: Operation::Create,
            request: &info,
            user: &user,
            object: Some(obj),
            old_object: None,
            dry_run: false,
            options: None,
            warnings: &Default::default(),
        };
        plugin.validate(&attrs).await
    }

    async fn used(store: &Arc<dyn Store>, name: &str) -> Value {
        let kv = store
            .get(&format!("/registry/resourcequotas/dev/{name}"), 0)
            .await
            .unwrap()
            .kv
            .unwrap();
        serde_json::from_slice::<Value>(&kv.value).unwrap()["status"]["used"].clone()
    }

    fn pod(name: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "dev"}, "spec": {"containers": [{"name": "c", "image": "x"}]}})
    }

    #[tokio::test]
    async fn pods_are_charged_until_the_hard_limit() {
        let (_d, s) = store_with(&[json!({"metadata": {"name": "q", "namespace": "dev"},
            "spec": {"hard": {"pods": "2"}},
            "status": {"hard": {"pods": "2"}, "used": {"pods": "0"}}})])
        .await;
        let plugin = ResourceQuota::new(s.clone());
        create(&plugin, "pods", &mut pod("a")).await.unwrap();
        create(&plugin, "pods", &mut pod("b")).await.unwrap();
        assert_eq!(used(&s, "q").await, json!({"pods": "2"}));
        let err = create(&plugin, "pods", &mut pod("p")).await.unwrap_err();
        assert_eq!(err.code, 403);
        assert_eq!(
            err.message,
            "pods \"p\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2"
        );
        // Objects the quota does not track pass without a charge.
        create(&plugin, "configmaps", &mut json!({"metadata": {"name": "c"}}))
            .await
            .unwrap();
        assert_eq!(used(&s, "q").await, json!({"pods": "2"}));
    }

    #[tokio::test]
    async fn compute_quota_needs_values_and_known_usage() {
        let (_d, s) = store_with(&[
            json!({"metadata": {"name": "compute", "namespace": "dev"},
                "status": {"hard": {"requests.cpu": "1", "limits.cpu": "2"}, "used": {"requests.cpu": "0", "limits.cpu": "0"}}}),
            json!({"metadata": {"name": "fresh", "namespace": "dev"}, "spec": {"hard": {"configmaps": "1"}},
                "status": {"hard": {"configmaps": "1"}}}),
        ])
        .await;
        let plugin = ResourceQuota::new(s.clone());
        let err = create(&plugin, "pods", &mut pod("p")).await.unwrap_err();
        assert_eq!(
            err.message,
            "pods \"p\" is forbidden: failed quota: compute: must specify limits.cpu for: c; requests.cpu for: c"
        );
        let mut sized = json!({"metadata": {"name": "s"}, "spec": {"containers": [{"name": "c",
            "resources": {"requests": {"cpu": "600m"}, "limits": {"cpu": "1"}}}]}});
        create(&plugin, "pods", &mut sized).await.unwrap();
        assert_eq!(
            used(&s, "compute").await,
            json!({"limits.cpu": "1", "requests.cpu": "600m"})
        );
        let err = create(&plugin, "pods", &mut sized).await.unwrap_err();
        assert_eq!(
            err.message,
            "pods \"s\" is forbidden: exceeded quota: compute, requested: requests.cpu=600m, used: requests.cpu=600m, limited: requests.cpu=1"
        );
        let err = create(&plugin, "configmaps", &mut json!({"metadata": {"name": "c"}}))
            .await
            .unwrap_err();
        assert_eq!(
            err.message,
            "configmaps \"c\" is forbidden: status unknown for quota: fresh, resources: configmaps"
        );
    }

    #[tokio::test]
    async fn concurrent_creates_never_overshoot() {
        let (_d, s) = store_with(&[json!({"metadata": {"name": "q", "namespace": "dev"},
            "status": {"hard": {"count/configmaps": "5"}, "used": {"count/configmaps": "0"}}})])
        .await;
        let plugin = Arc::new(ResourceQuota::new(s.clone()));
        let mut tasks = Vec::new();
        for i in 0..12 {
            let plugin = plugin.clone();
            tasks.push(tokio::spawn(async move {
                create(
                    &plugin,
                    "configmaps",
                    &mut json!({"metadata": {"name": format!("c{i}")}}),
                )
                .await
                .is_ok()
            }));
        }
        let mut admitted = 0;
        for t in tasks {
            admitted += usize::from(t.await.unwrap());
        }
        assert_eq!(admitted, 5);
        assert_eq!(used(&s, "q").await, json!({"count/configmaps": "5"}));
        assert!(plugin.locks.lock().unwrap().is_empty());
    }
}
