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

/// The prefixes admission reads on every pod create (ResourceQuota only to see whether a
/// namespace has quotas).
pub const ADMISSION_PREFIXES: &[&str] = &[
    "/registry/namespaces/",
    "/registry/serviceaccounts/",
    "/registry/limitranges/",
    "/registry/priorityclasses/",
    "/registry/resourcequotas/",
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
}
