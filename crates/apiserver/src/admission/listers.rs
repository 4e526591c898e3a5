//! Admission's reads from memory (upstream's admission plugins read through shared informers'
//! listers, not from etcd): a `Store` in front of the datastore that keeps every object under
//! some key prefixes (namespaces, ServiceAccounts, LimitRanges, PriorityClasses) in memory,
//! filled by a list and kept by a watch, and answers the plugins' latest-revision gets and
//! ranges under those prefixes from it. Everything else — writes, reads at a revision, other
//! prefixes — goes to the datastore.
//!
//! As upstream's listers, it is eventually consistent: a change is seen once its watch event
//! arrives (within milliseconds). A get that misses falls back to the datastore (upstream's
//! "live lookup", so an object created a moment ago is found), and until a prefix's first list
//! is in, its reads go to the datastore.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use r8s_store::{
    DeleteResponse, EventKind, GetResponse, KeyValue, RangeRequest, RangeResponse, Result, Revision, Store,
    Watch,
};

use crate::status::ApiError;

/// The prefixes admission reads on every pod create (ResourceQuota only to see whether a
/// namespace has quotas).
pub const ADMISSION_PREFIXES: &[&str] = &[
    "/registry/namespaces/",
    "/registry/serviceaccounts/",
    "/registry/limitranges/",
    "/registry/priorityclasses/",
    "/registry/resourcequotas/",
    "/registry/ingressclasses/",
];

struct Cached {
    prefix: String,
    /// `None` until the first list is in (and again while the watch is re-established).
    state: RwLock<Option<State>>,
}

struct State {
    objects: BTreeMap<String, KeyValue>,
    revision: Revision,
}

pub struct ListerStore {
    inner: Arc<dyn Store>,
    cached: Vec<Arc<Cached>>,
}

impl ListerStore {
    /// Keep `prefixes` of `inner` in memory (each prefix ends with '/'), from now on.
    pub fn start(inner: Arc<dyn Store>, prefixes: &[&str]) -> Arc<Self> {
        let cached: Vec<Arc<Cached>> = prefixes
            .iter()
            .map(|p| {
                Arc::new(Cached {
                    prefix: p.to_string(),
                    state: RwLock::new(None),
                })
            })
            .collect();
        for c in &cached {
            tokio::spawn(follow(inner.clone(), c.clone()));
        }
        Arc::new(ListerStore { inner, cached })
    }

    /// The cached prefix holding `key`, if it is synced.
    fn cache_for(&self, key: &str) -> Option<&Arc<Cached>> {
        self.cached.iter().find(|c| key.starts_with(&c.prefix))
    }

    /// Whether every prefix has had its first list (for tests and start-up).
    pub fn synced(&self) -> bool {
        self.cached
            .iter()
            .all(|c| c.state.read().unwrap_or_else(|e| e.into_inner()).is_some())
    }
}

/// List then watch one prefix, for ever; on a lost watch, start over.
async fn follow(store: Arc<dyn Store>, c: Arc<Cached>) {
    loop {
        let listed = store
            .range(RangeRequest {
                prefix: c.prefix.clone(),
                ..Default::default()
            })
            .await;
        let Ok(listed) = listed else {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        let revision = listed.revision;
        let mut watch = match store.watch(&c.prefix, revision + 1).await {
            Ok(w) => w,
            Err(_) => {
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        *c.state.write().unwrap_or_else(|e| e.into_inner()) = Some(State {
            objects: listed.kvs.into_iter().map(|kv| (kv.key.clone(), kv)).collect(),
            revision,
        });
        while let Some(Ok(batch)) = watch.next().await {
            let mut guard = c.state.write().unwrap_or_else(|e| e.into_inner());
            let Some(state) = guard.as_mut() else { break };
            for ev in batch {
                state.revision = state.revision.max(ev.kv.mod_revision);
                match ev.kind {
                    EventKind::Put => {
                        state.objects.insert(ev.kv.key.clone(), ev.kv);
                    }
                    EventKind::Delete => {
                        state.objects.remove(&ev.kv.key);
                    }
                }
            }
        }
        // The watch ended (compaction, lag, datastore restart): read from the datastore until
        // the next list is in.
        *c.state.write().unwrap_or_else(|e| e.into_inner()) = None;
        tracing::debug!(prefix = %c.prefix, "admission lister lost its watch; listing again");
    }
}

#[async_trait]
impl Store for ListerStore {
    async fn get(&self, key: &str, revision: Revision) -> Result<GetResponse> {
        if revision == 0 {
            if let Some(c) = self.cache_for(key) {
                let found = c
                    .state
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .as_ref()
                    .and_then(|s| s.objects.get(key).map(|kv| (kv.clone(), s.revision)));
                if let Some((kv, revision)) = found {
                    return Ok(GetResponse {
                        kv: Some(kv),
                        revision,
                    });
                }
            }
        }
        // Not cached, not synced, or not there yet: a live lookup.
        self.inner.get(key, revision).await
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        let plain = req.revision == 0 && req.limit == 0 && req.start_after.is_none();
        if plain {
            if let Some(c) = self.cache_for(&req.prefix) {
                let guard = c.state.read().unwrap_or_else(|e| e.into_inner());
                if let Some(s) = guard.as_ref() {
                    let kvs: Vec<KeyValue> = s
                        .objects
                        .range::<str, _>((
                            std::ops::Bound::Included(req.prefix.as_str()),
                            std::ops::Bound::Unbounded,
                        ))
                        .take_while(|(k, _)| k.starts_with(&req.prefix))
                        .map(|(_, kv)| kv.clone())
                        .collect();
                    return Ok(RangeResponse {
                        count: req.count.then_some(kvs.len() as i64),
                        kvs,
                        more: false,
                        revision: s.revision,
                    });
                }
            }
        }
        self.inner.range(req).await
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        self.inner.create(key, value).await
    }

    async fn update(&self, key: &str, value: Bytes, expected_mod_revision: Revision) -> Result<KeyValue> {
        self.inner.update(key, value, expected_mod_revision).await
    }

    async fn delete(&self, key: &str, expected_mod_revision: Option<Revision>) -> Result<DeleteResponse> {
        self.inner.delete(key, expected_mod_revision).await
    }

    async fn watch(&self, prefix: &str, start_revision: Revision) -> Result<Watch> {
        self.inner.watch(prefix, start_revision).await
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.inner.compact(revision).await
    }

    async fn current_revision(&self) -> Result<Revision> {
        self.inner.current_revision().await
    }

    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
}

/// What admission reads, by kind (upstream's typed listers): each plugin asks for a namespace,
/// a ServiceAccount, the LimitRanges of a namespace, …; the datastore keys are the registry's
/// and are built here, nowhere in the plugins. Reads go to the store it is given — a
/// [`ListerStore`] in the server, so the kinds of [`ADMISSION_PREFIXES`] come from memory.
/// Objects are parsed once per stored version and shared (see `admission::parsed`).
#[derive(Clone)]
pub struct Listers {
    store: Arc<dyn Store>,
}

/// The kinds admission reads: (group, version, resource).
const NAMESPACES: (&str, &str, &str) = ("", "v1", "namespaces");
const SERVICE_ACCOUNTS: (&str, &str, &str) = ("", "v1", "serviceaccounts");
const LIMIT_RANGES: (&str, &str, &str) = ("", "v1", "limitranges");
const RESOURCE_QUOTAS: (&str, &str, &str) = ("", "v1", "resourcequotas");
const PRIORITY_CLASSES: (&str, &str, &str) = ("scheduling.k8s.io", "v1", "priorityclasses");
const SERVICES: (&str, &str, &str) = ("", "v1", "services");
const PODS: (&str, &str, &str) = ("", "v1", "pods");
const INGRESS_CLASSES: (&str, &str, &str) = ("networking.k8s.io", "v1", "ingressclasses");
const STORAGE_CLASSES: (&str, &str, &str) = ("storage.k8s.io", "v1", "storageclasses");
const RUNTIME_CLASSES: (&str, &str, &str) = ("node.k8s.io", "v1", "runtimeclasses");

fn def_of((group, version, resource): (&str, &str, &str)) -> &'static crate::registry::Resource {
    crate::registry::catalogue::builtin(group, version, resource).expect("admission reads served kinds")
}

impl Listers {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Listers { store }
    }

    /// One object of a kind, parsed (shared), or `None` if there is none.
    async fn get(
        &self,
        kind: (&str, &str, &str),
        ns: &str,
        name: &str,
    ) -> std::result::Result<Option<Arc<serde_json::Value>>, ApiError> {
        let def = def_of(kind);
        let resp = self
            .store
            .get(&crate::registry::key(def, ns, name), 0)
            .await
            .map_err(|e| ApiError::internal(format!("reading {} {name}: {e}", def.plural)))?;
        match resp.kv {
            None => Ok(None),
            Some(kv) => super::parsed(&kv.value)
                .map(Some)
                .ok_or_else(|| ApiError::internal(format!("stored {} {name} is unreadable", def.plural))),
        }
    }

    /// Every object of a kind in a namespace ("" for all, or for a cluster-scoped kind),
    /// parsed (shared); unreadable ones are skipped.
    async fn list(
        &self,
        kind: (&str, &str, &str),
        ns: &str,
    ) -> std::result::Result<Vec<Arc<serde_json::Value>>, ApiError> {
        let def = def_of(kind);
        let prefix = crate::registry::prefix(def, ns);
        let resp = self
            .store
            .range(RangeRequest {
                prefix,
                ..Default::default()
            })
            .await
            .map_err(|e| ApiError::internal(format!("listing {}: {e}", def.plural)))?;
        Ok(resp
            .kvs
            .iter()
            .filter_map(|kv| super::parsed(&kv.value))
            .collect())
    }

    pub async fn namespace(
        &self,
        name: &str,
    ) -> std::result::Result<Option<Arc<serde_json::Value>>, ApiError> {
        self.get(NAMESPACES, "", name).await
    }

    pub async fn service_account(
        &self,
        ns: &str,
        name: &str,
    ) -> std::result::Result<Option<Arc<serde_json::Value>>, ApiError> {
        self.get(SERVICE_ACCOUNTS, ns, name).await
    }

    pub async fn service(
        &self,
        ns: &str,
        name: &str,
    ) -> std::result::Result<Option<Arc<serde_json::Value>>, ApiError> {
        self.get(SERVICES, ns, name).await
    }

    pub async fn priority_class(
        &self,
        name: &str,
    ) -> std::result::Result<Option<Arc<serde_json::Value>>, ApiError> {
        self.get(PRIORITY_CLASSES, "", name).await
    }

    pub async fn priority_classes(&self) -> std::result::Result<Vec<Arc<serde_json::Value>>, ApiError> {
        self.list(PRIORITY_CLASSES, "").await
    }

    /// A RuntimeClass; not among [`ADMISSION_PREFIXES`], so read from the store itself.
    pub async fn runtime_class(
        &self,
        name: &str,
    ) -> std::result::Result<Option<Arc<serde_json::Value>>, ApiError> {
        self.get(RUNTIME_CLASSES, "", name).await
    }

    pub async fn ingress_classes(&self) -> std::result::Result<Vec<Arc<serde_json::Value>>, ApiError> {
        self.list(INGRESS_CLASSES, "").await
    }

    pub async fn storage_classes(&self) -> std::result::Result<Vec<Arc<serde_json::Value>>, ApiError> {
        self.list(STORAGE_CLASSES, "").await
    }

    pub async fn limit_ranges(&self, ns: &str) -> std::result::Result<Vec<Arc<serde_json::Value>>, ApiError> {
        self.list(LIMIT_RANGES, ns).await
    }

    pub async fn resource_quotas(
        &self,
        ns: &str,
    ) -> std::result::Result<Vec<Arc<serde_json::Value>>, ApiError> {
        self.list(RESOURCE_QUOTAS, ns).await
    }

    /// The pods of a namespace, decoded (not kept in memory: read from the datastore, and not
    /// put in the shared parse cache, which they would flush).
    pub async fn pods(&self, ns: &str) -> std::result::Result<Vec<serde_json::Value>, ApiError> {
        crate::registry::system::list(&*self.store, def_of(PODS), ns).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn store() -> (tempfile::TempDir, Arc<dyn Store>) {
        let dir = tempfile::tempdir().unwrap();
        let s: Arc<dyn Store> = Arc::new(
            r8s_store::embedded::EmbeddedStore::open(r8s_store::embedded::EmbeddedOptions::new(dir.path()))
                .unwrap(),
        );
        (dir, s)
    }

    async fn until(what: &str, f: impl Fn() -> bool) {
        for _ in 0..200 {
            if f() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("timed out: {what}");
    }

    #[tokio::test]
    async fn cached_prefixes_are_served_from_memory_and_follow_changes() {
        let (_d, inner) = store().await;
        inner
            .create("/registry/limitranges/a/one", Bytes::from_static(b"1"))
            .await
            .unwrap();
        inner
            .create("/registry/pods/a/p", Bytes::from_static(b"p"))
            .await
            .unwrap();
        let l = ListerStore::start(inner.clone(), &["/registry/limitranges/"]);
        until("synced", || l.synced()).await;
        let r = l
            .range(RangeRequest {
                prefix: "/registry/limitranges/a/".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(r.kvs.len(), 1);
        // A change reaches the cache through its watch; a delete leaves it.
        let kv = inner
            .create("/registry/limitranges/a/two", Bytes::from_static(b"2"))
            .await
            .unwrap();
        let cache = l.cached[0].clone();
        let has = |k: &str| {
            cache
                .state
                .read()
                .unwrap()
                .as_ref()
                .is_some_and(|s| s.objects.contains_key(k))
        };
        until("two cached", || has("/registry/limitranges/a/two")).await;
        let got = l.get("/registry/limitranges/a/two", 0).await.unwrap();
        assert_eq!(got.kv.unwrap().mod_revision, kv.mod_revision);
        inner.delete("/registry/limitranges/a/one", None).await.unwrap();
        until("one gone", || !has("/registry/limitranges/a/one")).await;
        let r = l
            .range(RangeRequest {
                prefix: "/registry/limitranges/a/".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(
            r.kvs.iter().map(|k| k.key.as_str()).collect::<Vec<_>>(),
            ["/registry/limitranges/a/two"]
        );
        // Served from memory: an entry only the cache holds is found.
        cache.state.write().unwrap().as_mut().unwrap().objects.insert(
            "/registry/limitranges/z/ghost".into(),
            KeyValue {
                key: "/registry/limitranges/z/ghost".into(),
                value: Bytes::from_static(b"g"),
                create_revision: 1,
                mod_revision: 1,
                version: 1,
            },
        );
        assert!(l
            .get("/registry/limitranges/z/ghost", 0)
            .await
            .unwrap()
            .kv
            .is_some());
        assert!(inner
            .get("/registry/limitranges/z/ghost", 0)
            .await
            .unwrap()
            .kv
            .is_none());
        // Other prefixes and writes go to the datastore.
        assert!(l.get("/registry/pods/a/p", 0).await.unwrap().kv.is_some());
        l.create("/registry/limitranges/b/x", Bytes::from_static(b"x"))
            .await
            .unwrap();
        assert!(inner
            .get("/registry/limitranges/b/x", 0)
            .await
            .unwrap()
            .kv
            .is_some());
    }

    #[tokio::test]
    async fn a_get_that_misses_the_cache_looks_live() {
        let (_d, inner) = store().await;
        let l = ListerStore::start(inner.clone(), &["/registry/serviceaccounts/"]);
        until("synced", || l.synced()).await;
        // Written and read at once, before the watch could deliver it: found anyway.
        inner
            .create("/registry/serviceaccounts/a/default", Bytes::from_static(b"sa"))
            .await
            .unwrap();
        let got = l.get("/registry/serviceaccounts/a/default", 0).await.unwrap();
        assert_eq!(got.kv.unwrap().value, Bytes::from_static(b"sa"));
        assert!(l
            .get("/registry/serviceaccounts/a/none", 0)
            .await
            .unwrap()
            .kv
            .is_none());
    }

    #[tokio::test]
    async fn typed_reads_find_each_kind_by_its_registry_key() {
        let (_d, inner) = store().await;
        let put = |def: (&str, &str, &str), ns: &str, name: &str, extra: serde_json::Value| {
            let inner = inner.clone();
            let d = def_of(def);
            let key = crate::registry::key(d, ns, name);
            let mut obj = serde_json::json!({"metadata": {"name": name, "namespace": ns}});
            obj.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            async move {
                inner
                    .create(&key, crate::registry::encode(d, &obj))
                    .await
                    .unwrap()
            }
        };
        put(NAMESPACES, "", "dev", serde_json::json!({"spec": {}})).await;
        put(SERVICE_ACCOUNTS, "dev", "default", serde_json::json!({})).await;
        put(
            LIMIT_RANGES,
            "dev",
            "a",
            serde_json::json!({"spec": {"limits": []}}),
        )
        .await;
        put(
            LIMIT_RANGES,
            "prod",
            "b",
            serde_json::json!({"spec": {"limits": []}}),
        )
        .await;
        put(
            PRIORITY_CLASSES,
            "",
            "high",
            serde_json::json!({"value": 1000, "globalDefault": true}),
        )
        .await;
        put(
            SERVICES,
            "dev",
            "hook",
            serde_json::json!({"spec": {"clusterIP": "10.43.0.9"}}),
        )
        .await;
        let l = Listers::new(ListerStore::start(inner.clone(), ADMISSION_PREFIXES));
        let ns = l.namespace("dev").await.unwrap().expect("namespace");
        assert_eq!(ns["metadata"]["name"], "dev");
        assert!(l.namespace("nope").await.unwrap().is_none());
        assert!(l.service_account("dev", "default").await.unwrap().is_some());
        assert!(l.service_account("prod", "default").await.unwrap().is_none());
        let ranges = l.limit_ranges("dev").await.unwrap();
        assert_eq!(ranges.len(), 1);
        assert_eq!(ranges[0]["metadata"]["name"], "a");
        assert_eq!(l.priority_classes().await.unwrap()[0]["value"], 1000);
        assert!(l.priority_class("high").await.unwrap().is_some());
        assert_eq!(
            l.service("dev", "hook").await.unwrap().unwrap()["spec"]["clusterIP"],
            "10.43.0.9"
        );
        assert!(l.resource_quotas("dev").await.unwrap().is_empty());
        assert!(l.pods("dev").await.unwrap().is_empty());
    }
}
