//! Shared informers: one list+watch per resource type, feeding a local cache and the event
//! handlers of every controller that registered for that type.
//!
//! Built on kube-rs's `watcher` (list, watch, relist on 410 Gone, back-off) and its reflector
//! `Store`. kube-rs's own `Controller` cannot share one watch between controllers without its
//! unstable stream-sharing features, and those do not dispatch deletions (kube-runtime 5's
//! `Writer::dispatch_event` skips `Delete`), which the ReplicaSet controller must see. So the
//! fan-out to handlers — with the old object on updates, as client-go gives it — is ours.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

/// What happened to an object, as a handler sees it.
pub enum Change<'a, K> {
    Added(&'a Arc<K>),
    /// Old and new state. A periodic resync delivers the same object twice.
    Updated(&'a Arc<K>, &'a Arc<K>),
    Deleted(&'a Arc<K>),
}

type Handler<K> = Box<dyn Fn(Change<'_, K>) + Send + Sync>;

/// The object types the informers serve.
pub trait Object:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}
impl<K> Object for K where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}

pub struct Informer<K: Object>
where
    ObjectRef<K>: Hash + Eq,
{
    api: Api<K>,
    store: Store<K>,
    writer: Mutex<Option<Writer<K>>>,
    handlers: Mutex<Vec<Arc<Handler<K>>>>,
    resync: Option<Duration>,
    /// Set after the first complete list. (kube-rs's `Store::wait_until_ready` wakes only the
    /// last of several waiters: its oneshot keeps one waker.)
    synced: tokio::sync::watch::Sender<bool>,
}

impl<K: Object> Informer<K> {
    pub fn new(api: Api<K>, resync: Option<Duration>) -> Arc<Self> {
        let writer = Writer::default();
        Arc::new(Self {
            api,
            store: writer.as_reader(),
            writer: Mutex::new(Some(writer)),
            handlers: Mutex::new(Vec::new()),
            resync,
            synced: tokio::sync::watch::Sender::new(false),
        })
    }

    /// The local cache. Empty until the first list has arrived (see `wait_synced`).
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// Register a handler. Handlers run on the informer's task and must not block: they
    /// enqueue keys.
    pub fn add_handler(&self, f: impl Fn(Change<'_, K>) + Send + Sync + 'static) {
        self.handlers.lock().unwrap().push(Arc::new(Box::new(f)));
    }

    /// Wait until the first complete list is in the cache.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// `wait_synced` as an owned future, for [`crate::queue::run_controller`].
    pub fn synced(self: Arc<Self>) -> futures::future::BoxFuture<'static, ()> {
        Box::pin(async move { self.wait_synced().await })
    }

    fn notify(&self, change: Change<'_, K>) {
        let handlers: Vec<_> = self.handlers.lock().unwrap().clone();
        for h in handlers {
            match &change {
                Change::Added(o) => h(Change::Added(o)),
                Change::Updated(a, b) => h(Change::Updated(a, b)),
                Change::Deleted(o) => h(Change::Deleted(o)),
            }
        }
    }

    /// List and watch until `stop` is cancelled. Called once.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let Some(mut writer) = self.writer.lock().unwrap().take() else {
            return;
        };
        // Cached without managedFields, as upstream's informers keep them
        // (TransformStripManagedFields): no controller reads them, and they are a large part of
        // each object. `None`, not empty: an update built from a cached object keeps the
        // server's entries.
        let stream = watcher(self.api.clone(), watcher::Config::default())
            .modify(|o| o.meta_mut().managed_fields = None)
            .default_backoff();
        let mut stream = std::pin::pin!(stream);
        let mut resync = self
            .resync
            .map(|p| tokio::time::interval_at(tokio::time::Instant::now() + p, p));
        // Objects as they were before a relist began, to tell handlers what changed.
        let mut before_relist: Option<HashMap<ObjectRef<K>, Arc<K>>> = None;
        loop {
            let event = tokio::select! {
                _ = stop.cancelled() => return,
                _ = async { resync.as_mut().unwrap().tick().await }, if resync.is_some() => {
                    for obj in self.store.state() {
                        self.notify(Change::Updated(&obj, &obj));
                    }
                    continue;
                }
                e = stream.next() => e,
            };
            let Some(event) = event else { return };
            let event = match event {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!(kind = %K::kind(&()), error = %e, "watch failed; retrying");
                    continue;
                }
            };
            match &event {
                watcher::Event::Apply(obj) => {
                    let key = ObjectRef::from_obj(obj);
                    let old = self.store.get(&key);
                    writer.apply_watcher_event(&event);
                    let new = self.store.get(&key).unwrap_or_else(|| Arc::new(obj.clone()));
                    match old {
                        Some(old) => self.notify(Change::Updated(&old, &new)),
                        None => self.notify(Change::Added(&new)),
                    }
                }
                watcher::Event::Delete(obj) => {
                    writer.apply_watcher_event(&event);
                    self.notify(Change::Deleted(&Arc::new(obj.clone())));
                }
                watcher::Event::Init => {
                    before_relist = Some(
                        self.store
                            .state()
                            .into_iter()
                            .map(|o| (ObjectRef::from_obj(&*o), o))
                            .collect(),
                    );
                    writer.apply_watcher_event(&event);
                }
                watcher::Event::InitApply(_) => writer.apply_watcher_event(&event),
                watcher::Event::InitDone => {
                    writer.apply_watcher_event(&event);
                    let mut before = before_relist.take().unwrap_or_default();
                    for obj in self.store.state() {
                        match before.remove(&ObjectRef::from_obj(&*obj)) {
                            Some(old) => self.notify(Change::Updated(&old, &obj)),
                            None => self.notify(Change::Added(&obj)),
                        }
                    }
                    for (_, gone) in before {
                        self.notify(Change::Deleted(&gone));
                    }
                    self.synced.send_replace(true);
                }
            }
        }
    }
}

/// Starts one informer's list+watch.
type Runner = Box<dyn FnOnce(CancellationToken) -> tokio::task::JoinHandle<()> + Send>;

/// One informer per type, shared by every controller of the manager.
///
/// Informers read with the controller manager's own client; a controller's view of the factory
/// ([`Factory::for_controller`]) shares them but hands out the client that controller writes with.
pub struct Factory {
    /// What informers read with.
    root: Client,
    /// What [`Factory::client`] gives a controller to write with.
    client: Client,
    resync: Option<Duration>,
    informers: Arc<Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>>,
    runners: Arc<Mutex<Vec<Runner>>>,
    discovery: Arc<crate::discovery::DiscoveryCache>,
}

/// How long the factory's discovery cache keeps what the server serves (client-go's memory
/// cache is invalidated by its users; the controllers that read it tolerate this much delay in
/// seeing a new resource).
pub const DISCOVERY_TTL: Duration = Duration::from_secs(30);

impl Factory {
    pub fn new(client: Client, resync: Option<Duration>) -> Self {
        Self {
            discovery: crate::discovery::DiscoveryCache::new(client.clone(), DISCOVERY_TTL),
            root: client.clone(),
            client,
            resync,
            informers: Arc::new(Mutex::new(HashMap::new())),
            runners: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// The same informers, with `client` for the controller's writes.
    pub fn for_controller(&self, client: Client) -> Self {
        Self {
            root: self.root.clone(),
            client,
            resync: self.resync,
            informers: self.informers.clone(),
            runners: self.runners.clone(),
            discovery: self.discovery.clone(),
        }
    }

    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The discovery cache every controller of this factory shares.
    pub fn discovery(&self) -> Arc<crate::discovery::DiscoveryCache> {
        self.discovery.clone()
    }

    /// The informer for `K` over all namespaces, created on first use.
    pub fn get<K: Object>(&self) -> Arc<Informer<K>> {
        let mut map = self.informers.lock().unwrap();
        if let Some(i) = map.get(&TypeId::of::<K>()) {
            return i.clone().downcast::<Informer<K>>().expect("informer type");
        }
        let informer = Informer::new(Api::<K>::all(self.root.clone()), self.resync);
        map.insert(TypeId::of::<K>(), informer.clone());
        let runner = informer.clone();
        self.runners
            .lock()
            .unwrap()
            .push(Box::new(move |stop| tokio::spawn(runner.run(stop))));
        informer
    }

    /// Start every informer created so far.
    pub fn start(&self, stop: &CancellationToken) -> Vec<tokio::task::JoinHandle<()>> {
        self.runners
            .lock()
            .unwrap()
            .drain(..)
            .map(|r| r(stop.clone()))
            .collect()
    }
}

/// The work-queue key of an object: `namespace/name`, or `name` for cluster-scoped ones.
pub fn key_of<K: Resource>(obj: &K) -> String {
    let meta = obj.meta();
    let name = meta.name.clone().unwrap_or_default();
    match &meta.namespace {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name,
    }
}

/// Split a key back into namespace (empty for cluster-scoped) and name.
pub fn split_key(key: &str) -> (&str, &str) {
    match key.split_once('/') {
        Some((ns, name)) => (ns, name),
        None => ("", key),
    }
}

/// Look an object up in a store by key.
pub fn lookup<K: Object>(store: &Store<K>, key: &str) -> Option<Arc<K>> {
    let (ns, name) = split_key(key);
    let mut r = ObjectRef::<K>::new(name);
    if !ns.is_empty() {
        r = r.within(ns);
    }
    store.get(&r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip() {
        assert_eq!(split_key("default/web"), ("default", "web"));
        assert_eq!(split_key("node-1"), ("", "node-1"));
        let mut pod = k8s_openapi::api::core::v1::Pod::default();
        pod.metadata.name = Some("p".into());
        pod.metadata.namespace = Some("ns".into());
        assert_eq!(key_of(&pod), "ns/p");
    }
}
