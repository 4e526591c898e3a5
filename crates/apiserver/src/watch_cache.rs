//! The watch cache (upstream's cacher): one datastore watch per resource, each event decoded
//! once and kept in a window of recent history, fanned out to every watcher of that resource
//! from memory. A thousand watchers cost one datastore watch and one decode per change, and the
//! JSON line of an event is serialised once for all watchers that see it unchanged.
//!
//! The cache also holds every object of the resource (as JSON ready to send, with its labels
//! and selectable fields), so lists at a resourceVersion are served from memory too.
//!
//! Nothing is kept as a `serde_json::Value` (a pod as a Value takes several times its JSON's
//! size): an event holds its line, the object's JSON is a slice of that line, and the state
//! before the change is the cache's previous entry for the key, shared, not decoded again.
//!
//! A watch whose start revision is older than the window falls back to a direct datastore
//! watch (which answers 410 if compaction took it).
//!
//! Watchers that select on a resource's trigger field (upstream's cacher `triggerFunc`: a pod's
//! `spec.nodeName`, a node's `metadata.name`) are woken only by changes to objects with their
//! value, before or after the change: each of a thousand kubelets watching its node's pods
//! sees its own pods' changes, not every pod's.

use crate::registry::Resource;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use r8s_store::{EventKind, RangeRequest, Store, WatchItem};
use serde_json::{json, Value};
use tokio::sync::broadcast;

/// Events kept per resource for watchers that resume from a recent revision.
const HISTORY: usize = 4096;
/// Events a slow watcher may fall behind before it is closed (it then resumes from its last
/// revision, from the history while that still holds it): for the resources a cluster writes
/// most, and for the rest. A broadcast channel allocates all its slots at once, and every
/// resource has one while anything watches it (the garbage collector watches them all): 16,384
/// slots for each of the 100-odd resources held 26 MiB of an idle server.
const LAG: usize = 16384;
const QUIET_LAG: usize = 1024;
/// The same for a watcher of one trigger value (a node's pods): few events are its, and each
/// value's channel holds this many slots.
const TRIGGERED_LAG: usize = 512;

/// The field whose exact value routes a resource's changes to its watchers (upstream's
/// cacher trigger functions: pods by node, nodes by name).
fn trigger_field(def: &Resource) -> Option<&'static str> {
    match (def.group, def.plural) {
        ("", "pods") => Some("spec.nodeName"),
        ("", "nodes") => Some("metadata.name"),
        _ => None,
    }
}

/// How far a watcher of `def` may fall behind (see `LAG`): upstream's watch cache, too, sizes
/// itself by how busy a resource is.
fn lag(def: &Resource) -> usize {
    match (def.group, def.plural) {
        ("", "pods" | "nodes" | "events" | "endpoints")
        | ("events.k8s.io", "events")
        | ("coordination.k8s.io", "leases")
        | ("discovery.k8s.io", "endpointslices")
        | ("apps", "replicasets" | "deployments") => LAG,
        _ => QUIET_LAG,
    }
}

/// One change, decoded once.
pub(crate) struct CachedEvent {
    pub revision: i64,
    pub key: String,
    pub kind: EventKind,
    /// The object's namespace ("" for cluster-scoped resources).
    pub namespace: String,
    /// The object after the change (for deletes: the last state, at the deletion revision).
    pub object: Arc<CachedObject>,
    /// The object before the change, for updates and deletes.
    pub prev: Option<Arc<CachedObject>>,
    /// `{"type": ..., "object": ...}\n` for the natural type.
    line: Bytes,
}

impl CachedEvent {
    /// The watch type this change has for a watcher that sees both sides of it.
    #[cfg(test)]
    pub fn natural_type(&self) -> &'static str {
        natural_type(self.kind, self.prev.is_some())
    }

    /// `{"type": ..., "object": ...}\n` for the natural type, serialised once.
    pub fn line(&self) -> Bytes {
        self.line.clone()
    }
}

pub(crate) fn encode_line(kind: &str, object: &Value) -> Bytes {
    let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).expect("JSON serializes");
    line.push(b'\n');
    Bytes::from(line)
}

const LINE_OBJECT: &[u8] = b"\",\"object\":";

/// A watch line around an object already serialised: `{"type":"<kind>","object":<json>}\n`.
/// (The same bytes `encode_line` gives, without going through a `Value`.)
pub(crate) fn line_around(kind: &str, json: &[u8]) -> Vec<u8> {
    let mut line = Vec::with_capacity(json.len() + kind.len() + 22);
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(kind.as_bytes());
    line.extend_from_slice(LINE_OBJECT);
    line.extend_from_slice(json);
    line.extend_from_slice(b"}\n");
    line
}

/// One current object, ready to list.
pub(crate) struct CachedObject {
    /// The object's JSON, resourceVersion included.
    pub json: Bytes,
    pub labels: BTreeMap<String, String>,
    pub fields: BTreeMap<String, String>,
    /// Initializers still pending (Initializers gate).
    pub uninitialized: bool,
}

impl CachedObject {
    fn new(def: &Resource, obj: &Value) -> Self {
        Self::with_json(
            def,
            obj,
            Bytes::from(serde_json::to_vec(obj).expect("JSON serializes")),
        )
    }

    /// `json` must be `obj` serialised.
    fn with_json(def: &Resource, obj: &Value, json: Bytes) -> Self {
        Self {
            json,
            labels: crate::registry::meta::labels(obj),
            fields: crate::registry::strategy::fields(def, obj),
            uninitialized: crate::registry::uninitialized(obj),
        }
    }

    /// The object decoded (for the rare watcher that needs more than its JSON, e.g. a table).
    pub fn value(&self) -> Value {
        serde_json::from_slice(&self.json).expect("the cache holds valid JSON")
    }
}

struct Window {
    /// The latest revision applied.
    revision: i64,
    /// Every current object by key.
    objects: BTreeMap<String, Arc<CachedObject>>,
    /// Every event with a revision at or above this one is in `history`.
    covered_from: i64,
    history: VecDeque<Arc<CachedEvent>>,
}

pub(crate) struct ResourceCache {
    def: &'static Resource,
    window: RwLock<Window>,
    tx: broadcast::Sender<Arc<CachedEvent>>,
    /// The trigger field, and a channel per value watched: a change goes to the channels of
    /// its object's value before and after it.
    trigger: Option<&'static str>,
    triggered: Mutex<HashMap<String, broadcast::Sender<Arc<CachedEvent>>>>,
    /// The revision applied so far, for reads that wait for the cache to catch up.
    applied: tokio::sync::watch::Sender<i64>,
    /// Asks the datastore watch to say how far it has come (consistent reads).
    progress: Option<r8s_store::ProgressRequester>,
}

/// What a watcher gets: the history it missed, then live events.
pub(crate) struct Subscription {
    pub backlog: Vec<Arc<CachedEvent>>,
    pub live: broadcast::Receiver<Arc<CachedEvent>>,
    /// The revision the cache has applied: every change up to it has been sent to `live`
    /// (a watcher that drained `live` has seen all of them that concern it).
    pub applied: tokio::sync::watch::Receiver<i64>,
}

impl ResourceCache {
    /// The field whose exact value a watcher may subscribe by (see `subscribe`).
    pub fn trigger_field(&self) -> Option<&'static str> {
        self.trigger
    }

    /// Subscribe from `start` (inclusive), or `None` if the window no longer reaches back there.
    /// With `trigger`, the value of the trigger field the watcher selects: it is woken only by
    /// changes to objects with that value before or after (its backlog is not narrowed; the
    /// watcher filters as always).
    pub fn subscribe(&self, start: i64, trigger: Option<&str>) -> Option<Subscription> {
        let w = self.window.read().unwrap_or_else(|e| e.into_inner());
        if start < w.covered_from {
            return None;
        }
        let live = match trigger.filter(|_| self.trigger.is_some()) {
            Some(value) => self
                .triggered
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(value.to_string())
                .or_insert_with(|| broadcast::channel(TRIGGERED_LAG).0)
                .subscribe(),
            None => self.tx.subscribe(),
        };
        let backlog = w
            .history
            .iter()
            .filter(|e| e.revision >= start)
            .cloned()
            .collect();
        Some(Subscription {
            backlog,
            live,
            applied: self.applied.subscribe(),
        })
    }

    /// The objects under `key_prefix` that `keep` accepts with the revision they are at, if the
    /// cache has applied `min_revision` (waiting briefly for changes in flight).
    pub async fn list(
        &self,
        key_prefix: &str,
        min_revision: i64,
        keep: impl Fn(&CachedObject) -> bool,
    ) -> Option<(Vec<Arc<CachedObject>>, i64)> {
        self.list_within(key_prefix, min_revision, Duration::from_millis(100), keep)
            .await
    }

    /// A consistent list (upstream's ConsistentListFromCache): the objects as of `current`
    /// (the datastore's revision when the request came), once the cache has applied it —
    /// asking the datastore watch for progress when nothing under this resource changed since
    /// — or `None` if that takes longer than a second (then the datastore answers).
    pub async fn list_consistent(
        &self,
        key_prefix: &str,
        current: i64,
        keep: impl Fn(&CachedObject) -> bool,
    ) -> Option<(Vec<Arc<CachedObject>>, i64)> {
        if *self.applied.borrow() < current {
            self.progress.as_ref()?.request();
        }
        self.list_within(key_prefix, current, Duration::from_secs(1), keep)
            .await
    }

    /// The current object under `key`, as far as the cache has applied (upstream's cacher
    /// answers a get at resourceVersion "0" this way: any state, served from memory).
    pub fn object(&self, key: &str) -> Option<Arc<CachedObject>> {
        let w = self.window.read().unwrap_or_else(|e| e.into_inner());
        w.objects.get(key).cloned()
    }

    async fn list_within(
        &self,
        key_prefix: &str,
        min_revision: i64,
        wait: Duration,
        keep: impl Fn(&CachedObject) -> bool,
    ) -> Option<(Vec<Arc<CachedObject>>, i64)> {
        let mut applied = self.applied.subscribe();
        tokio::time::timeout(wait, applied.wait_for(|r| *r >= min_revision))
            .await
            .ok()?
            .ok()?;
        let w = self.window.read().unwrap_or_else(|e| e.into_inner());
        let items = w
            .objects
            .range::<str, _>((std::ops::Bound::Included(key_prefix), std::ops::Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(key_prefix))
            .filter(|(_, o)| keep(o))
            .map(|(_, o)| o.clone())
            .collect();
        Some((items, w.revision))
    }
}

/// All resource caches of one API server.
pub(crate) struct WatchCache {
    store: Arc<dyn Store>,
    caches: Mutex<HashMap<String, Arc<ResourceCache>>>,
    /// The task feeding each cache from its datastore watch.
    feeders: Mutex<HashMap<String, tokio::task::AbortHandle>>,
}

/// The name a resource's cache goes by: its group and resource (two versions sharing a
/// prefix each convert objects on their way out); a custom resource's also by its
/// definition, which changes with its CRD.
fn cache_name(def: &Resource) -> String {
    if def.custom {
        format!("{}/{}@{:p}", def.group_resource(), def.version, def)
    } else {
        def.group_resource()
    }
}

impl WatchCache {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            caches: Mutex::new(HashMap::new()),
            feeders: Mutex::new(HashMap::new()),
        }
    }

    /// Drop the cache of a resource no longer served: its watchers' streams end.
    pub fn forget(&self, def: &Resource) {
        let name = cache_name(def);
        self.caches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&name);
        if let Some(task) = self
            .feeders
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&name)
        {
            task.abort();
        }
    }

    /// The cache of resource `def`, started on first use: a list of every object, then a
    /// watch from the list's revision.
    pub async fn get(self: &Arc<Self>, def: &'static Resource) -> Option<Arc<ResourceCache>> {
        // Objects converted by a webhook are decoded outside any lock: straight from the
        // datastore, never through a cache that decodes while it holds its window.
        if def.strategy.converts_remotely() {
            return None;
        }
        // Keyed by resource, not storage prefix: two versions may share one prefix and each
        // needs objects in its own form.
        let name = cache_name(def);
        let prefix = crate::registry::prefix(def, "");
        let prefix = prefix.as_str();
        if let Some(c) = self.caches.lock().unwrap_or_else(|e| e.into_inner()).get(&name) {
            return Some(c.clone());
        }
        let initial = self
            .store
            .range(RangeRequest {
                prefix: prefix.to_owned(),
                ..Default::default()
            })
            .await
            .ok()?;
        let revision = initial.revision;
        let mut objects = BTreeMap::new();
        for kv in &initial.kvs {
            if let Ok(obj) = crate::registry::decode(def, kv) {
                objects.insert(kv.key.clone(), Arc::new(CachedObject::new(def, &obj)));
            }
        }
        tracing::debug!(%prefix, revision, objects = objects.len(), "watch cache starts");
        let mut watch = self.store.watch(prefix, revision + 1).await.ok()?;
        let (tx, _) = broadcast::channel(lag(def));
        let cache = Arc::new(ResourceCache {
            def,
            window: RwLock::new(Window {
                revision,
                objects,
                covered_from: revision + 1,
                history: VecDeque::with_capacity(HISTORY),
            }),
            tx,
            trigger: trigger_field(def),
            triggered: Mutex::new(HashMap::new()),
            applied: tokio::sync::watch::Sender::new(revision),
            progress: watch.progress_requester(),
        });
        {
            let mut caches = self.caches.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(existing) = caches.get(&name) {
                // Another request started it meanwhile.
                return Some(existing.clone());
            }
            caches.insert(name.clone(), cache.clone());
        }
        let this = self.clone();
        let feeding = cache.clone();
        let feeder_name = name.clone();
        let task = tokio::spawn(async move {
            loop {
                match watch.next_item().await {
                    Some(Ok(WatchItem::Events(batch))) => feeding.apply(batch),
                    Some(Ok(WatchItem::Progress(revision))) => feeding.progressed(revision),
                    other => {
                        // The datastore watch ended: drop this cache so its watchers end and
                        // reconnect; the next watch starts a fresh one.
                        tracing::warn!(resource = %name, ?other, "watch cache lost its datastore watch");
                        this.caches
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .remove(&name);
                        return;
                    }
                }
            }
        });
        self.feeders
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(feeder_name, task.abort_handle());
        Some(cache)
    }
}

impl ResourceCache {
    /// Every change under this resource up to `revision` is applied: lists may be served at it.
    fn progressed(&self, revision: i64) {
        let mut w = self.window.write().unwrap_or_else(|e| e.into_inner());
        if revision > w.revision {
            w.revision = revision;
            drop(w);
            self.applied.send_if_modified(|r| {
                let newer = revision > *r;
                if newer {
                    *r = revision;
                }
                newer
            });
        }
    }

    /// Send `event` to the watchers of its trigger values (the object's before and after);
    /// a value no one watches any more loses its channel.
    fn send_triggered(&self, event: &Arc<CachedEvent>) {
        let Some(field) = self.trigger else { return };
        let mut triggered = self.triggered.lock().unwrap_or_else(|e| e.into_inner());
        if triggered.is_empty() {
            return;
        }
        let after = event.object.fields.get(field);
        let before = event.prev.as_ref().and_then(|p| p.fields.get(field));
        let values = [after, before.filter(|b| Some(*b) != after)];
        for value in values.into_iter().flatten() {
            if let Some(tx) = triggered.get(value.as_str()) {
                if tx.send(event.clone()).is_err() {
                    triggered.remove(value.as_str());
                }
            }
        }
    }

    fn apply(&self, batch: Vec<r8s_store::Event>) {
        let mut w = self.window.write().unwrap_or_else(|e| e.into_inner());
        for ev in batch {
            let prev = w.objects.get(&ev.kv.key).cloned();
            let Some(event) = decode(self.def, ev, prev) else {
                continue;
            };
            let event = Arc::new(event);
            w.revision = event.revision;
            match event.kind {
                EventKind::Put => {
                    w.objects.insert(event.key.clone(), event.object.clone());
                }
                EventKind::Delete => {
                    w.objects.remove(&event.key);
                }
            }
            if w.history.len() == HISTORY {
                if let Some(old) = w.history.pop_front() {
                    w.covered_from = old.revision + 1;
                }
            }
            w.history.push_back(event.clone());
            // Sent while the window is held, so a subscriber sees each event exactly once:
            // either in its backlog or live.
            self.send_triggered(&event);
            let _ = self.tx.send(event);
        }
        let revision = w.revision;
        drop(w);
        self.applied.send_replace(revision);
    }
}

/// The watch type of a change for a watcher that sees both sides of it.
fn natural_type(kind: EventKind, had_prev: bool) -> &'static str {
    match (kind, had_prev) {
        (EventKind::Delete, _) => "DELETED",
        (EventKind::Put, false) => "ADDED",
        (EventKind::Put, true) => "MODIFIED",
    }
}

/// Single objects by name for the server's own per-request work (the authenticators' service
/// accounts, pods and bootstrap token Secrets): from the watch cache, as upstream's
/// authenticators read their informers' listers, so a datastore without quorum does not turn
/// every token away; an object the cache does not hold (yet) is read from the datastore, as
/// upstream's getters fall back to the API on a lister miss.
#[derive(Clone)]
pub struct Lookup {
    cache: Arc<WatchCache>,
}

impl Lookup {
    /// A lookup with a watch cache of its own over `store` (the API server given it in its
    /// config serves from the same cache).
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            cache: Arc::new(WatchCache::new(store)),
        }
    }

    pub(crate) fn cache(&self) -> Arc<WatchCache> {
        self.cache.clone()
    }

    /// The built-in object `plural` of `group` `version` named `name` in `namespace` ("" for
    /// cluster-scoped ones), or `None` if there is none.
    pub async fn get(
        &self,
        group: &str,
        version: &str,
        plural: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, r8s_store::StoreError> {
        let def = crate::registry::catalogue::builtin(group, version, plural)
            .unwrap_or_else(|| panic!("{plural}.{group}/{version} is not a built-in resource"));
        let key = crate::registry::key(def, namespace, name);
        if let Some(cache) = self.cache.get(def).await {
            if let Some(o) = cache.object(&key) {
                return Ok(Some(o.value()));
            }
        }
        let got = self.cache.store.get(&key, 0).await?;
        Ok(got.kv.and_then(|kv| serde_json::from_slice(&kv.value).ok()))
    }
}

/// One datastore event as the cache keeps it. `cached`: the cache's entry for the key before
/// this event (the state the event's `prev` holds, already decoded).
fn decode(def: &Resource, ev: r8s_store::Event, cached: Option<Arc<CachedObject>>) -> Option<CachedEvent> {
    let revision = ev.kv.mod_revision;
    let prev = match (&ev.prev, cached) {
        (None, _) => None,
        (Some(_), Some(c)) => Some(c),
        (Some(p), None) => crate::registry::decode(def, p)
            .ok()
            .map(|v| Arc::new(CachedObject::new(def, &v))),
    };
    let object = match ev.kind {
        EventKind::Put => crate::registry::decode(def, &ev.kv).ok()?,
        EventKind::Delete => {
            let mut last = prev.as_ref()?.value();
            crate::registry::meta::set_resource_version(&mut last, revision);
            last
        }
    };
    let kind = natural_type(ev.kind, prev.is_some());
    let json = serde_json::to_vec(&object).expect("JSON serializes");
    let start = line_around(kind, b"").len() - 2;
    let line = Bytes::from(line_around(kind, &json));
    let json = line.slice(start..start + json.len());
    Some(CachedEvent {
        revision,
        key: ev.kv.key.clone(),
        kind: ev.kind,
        namespace: crate::registry::meta::namespace(&object).to_owned(),
        object: Arc::new(CachedObject::with_json(def, &object, json)),
        prev,
        line,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use r8s_store::embedded::{EmbeddedOptions, EmbeddedStore};

    #[test]
    fn a_line_around_serialised_json_is_the_line_of_the_value() {
        let obj = json!({"metadata": {"name": "a", "labels": {"x": "\"y\""}}, "spec": {"n": [1, 2]}});
        let json = serde_json::to_vec(&obj).unwrap();
        assert_eq!(
            line_around("MODIFIED", &json),
            encode_line("MODIFIED", &obj).to_vec()
        );
    }

    #[tokio::test]
    async fn backlog_then_live_each_event_once() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(EmbeddedOptions::new(dir.path())).unwrap());
        let cache = Arc::new(WatchCache::new(store.clone()));
        let def = crate::registry::catalogue::builtin("", "v1", "configmaps").unwrap();
        let rc = cache.get(def).await.unwrap();
        let obj = |n: &str| bytes::Bytes::from(json!({"metadata": {"name": n}}).to_string());
        let a = store.create("/registry/configmaps/ns/a", obj("a")).await.unwrap();
        store
            .update("/registry/configmaps/ns/a", obj("a"), a.mod_revision)
            .await
            .unwrap();
        // Wait until the cache has both.
        for _ in 0..100 {
            if rc.window.read().unwrap().history.len() == 2 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let mut sub = rc.subscribe(a.mod_revision, None).unwrap();
        assert_eq!(sub.backlog.len(), 2);
        assert_eq!(sub.backlog[0].natural_type(), "ADDED");
        assert_eq!(sub.backlog[1].natural_type(), "MODIFIED");
        store.delete("/registry/configmaps/ns/a", None).await.unwrap();
        let live = sub.live.recv().await.unwrap();
        assert_eq!(live.natural_type(), "DELETED");
        assert_eq!(live.object.value()["metadata"]["name"], "a");
        assert_eq!(
            live.object.value()["metadata"]["resourceVersion"],
            live.revision.to_string()
        );
        assert!(std::str::from_utf8(&live.line())
            .unwrap()
            .starts_with("{\"type\":\"DELETED\""));
        // Before the window: not served from the cache.
        assert!(rc.subscribe(a.mod_revision - 1, None).is_none());
        // Lists wait for the revision asked for and see the current objects.
        let b = store.create("/registry/configmaps/ns/b", obj("b")).await.unwrap();
        let (items, rev) = rc
            .list("/registry/configmaps/ns/", b.mod_revision, |_| true)
            .await
            .unwrap();
        assert_eq!(rev, b.mod_revision);
        assert_eq!(items.len(), 1);
        let listed: Value = serde_json::from_slice(&items[0].json).unwrap();
        assert_eq!(listed["metadata"]["name"], "b");
        assert_eq!(listed["metadata"]["resourceVersion"], b.mod_revision.to_string());
    }

    #[tokio::test]
    async fn a_watcher_of_one_node_is_woken_only_by_its_pods_before_and_after() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(EmbeddedOptions::new(dir.path())).unwrap());
        let cache = Arc::new(WatchCache::new(store.clone()));
        let def = crate::registry::catalogue::builtin("", "v1", "pods").unwrap();
        let rc = cache.get(def).await.unwrap();
        assert_eq!(rc.trigger_field(), Some("spec.nodeName"));
        let start = *rc.applied.borrow() + 1;
        let mut node1 = rc.subscribe(start, Some("node-1")).unwrap();
        let mut unbound = rc.subscribe(start, Some("")).unwrap();
        let mut all = rc.subscribe(start, None).unwrap();
        let pod = |name: &str, node: &str| {
            let mut p = json!({"metadata": {"name": name, "namespace": "ns"}, "spec": {"containers": []}});
            if !node.is_empty() {
                p["spec"]["nodeName"] = json!(node);
            }
            bytes::Bytes::from(p.to_string())
        };
        let key = |n: &str| format!("/registry/pods/ns/{n}");
        // a created unbound and bound to node-1; b created on node-2; c created on node-1
        // and deleted.
        let a = store.create(&key("a"), pod("a", "")).await.unwrap();
        store
            .update(&key("a"), pod("a", "node-1"), a.mod_revision)
            .await
            .unwrap();
        store.create(&key("b"), pod("b", "node-2")).await.unwrap();
        store.create(&key("c"), pod("c", "node-1")).await.unwrap();
        let last = store.delete(&key("c"), None).await.unwrap();
        let mut applied = node1.applied.clone();
        applied.wait_for(|r| *r >= last.revision).await.unwrap();
        let drain = |rx: &mut broadcast::Receiver<Arc<CachedEvent>>| {
            let mut got = Vec::new();
            while let Ok(ev) = rx.try_recv() {
                got.push(format!(
                    "{} {}",
                    ev.natural_type(),
                    ev.key.rsplit('/').next().unwrap()
                ));
            }
            got
        };
        // node-1's watcher hears of a's binding (node-1 after), and c's create and delete.
        assert_eq!(drain(&mut node1.live), ["MODIFIED a", "ADDED c", "DELETED c"]);
        // The unscheduled pods' watcher hears of a's create and of its binding (unbound
        // before): it sees the pod leave.
        assert_eq!(drain(&mut unbound.live), ["ADDED a", "MODIFIED a"]);
        assert_eq!(drain(&mut all.live).len(), 5);
        // A value no one watches any more loses its channel at its next change.
        drop(node1);
        store.create(&key("d"), pod("d", "node-1")).await.unwrap();
        for _ in 0..100 {
            if !rc.triggered.lock().unwrap().contains_key("node-1") {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(!rc.triggered.lock().unwrap().contains_key("node-1"));
        assert!(rc.triggered.lock().unwrap().contains_key(""));
        // Other resources have no trigger: the value is ignored.
        let cms = cache
            .get(crate::registry::catalogue::builtin("", "v1", "configmaps").unwrap())
            .await
            .unwrap();
        assert_eq!(cms.trigger_field(), None);
        let start = *cms.applied.borrow() + 1;
        let mut sub = cms.subscribe(start, Some("x")).unwrap();
        let c = store
            .create(
                "/registry/configmaps/ns/a",
                bytes::Bytes::from(json!({"metadata": {"name": "a"}}).to_string()),
            )
            .await
            .unwrap();
        assert_eq!(sub.live.recv().await.unwrap().revision, c.mod_revision);
    }
}
