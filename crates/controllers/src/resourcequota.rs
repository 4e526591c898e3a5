//! The resourcequota controller (upstream `pkg/controller/resourcequota`): each ResourceQuota's
//! `status.hard` follows its `spec.hard`, and `status.used` is recounted from the objects of its
//! namespace. Admission charges creates as they happen; this controller is what gives back
//! what deleted objects and finished pods (Succeeded, Failed) used, and corrects any drift.
//!
//! A quota is recounted when it is created or its hard limits change, when an object it tracks
//! is deleted (or a pod finishes, or a service changes type), and every five minutes (upstream's
//! `--resource-quota-sync-period`). Pods, services, configmaps, secrets and quotas come from
//! shared informers; any other kind a quota counts (`count/<resource>.<group>`) gets a watch of
//! its own the first time a quota needs it (upstream's quota monitor watches every resource
//! from the start).

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, ResourceQuota, ResourceQuotaStatus, Secret, Service};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use kube::api::{Api, DynamicObject};
use kube::discovery::{verbs, ApiResource, Scope};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use r8s_api::quota::{self, Evaluator, ResourceList};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::SyncResult;
use r8s_client::informer::{key_of, lookup, Change, Factory, Informer};
use r8s_client::queue::{run_workers, WorkQueue};

/// How often every quota is recounted.
pub const RESYNC: Duration = Duration::from_secs(300);

pub struct ResourceQuotaController {
    client: Client,
    quotas: Arc<Informer<ResourceQuota>>,
    quota_store: Store<ResourceQuota>,
    pods: Arc<Informer<Pod>>,
    services: Arc<Informer<Service>>,
    configmaps: Arc<Informer<ConfigMap>>,
    secrets: Arc<Informer<Secret>>,
    queue: Arc<WorkQueue>,
    discovery: Arc<r8s_client::discovery::DiscoveryCache>,
    /// Watches of the other kinds quotas count, by (group, resource).
    dynamic: std::sync::Mutex<HashMap<(String, String), Store<DynamicObject>>>,
    stop: CancellationToken,
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn to_list(map: Option<&std::collections::BTreeMap<String, ApiQuantity>>) -> ResourceList {
    map.map(|m| {
        m.iter()
            .filter_map(|(k, v)| Some((k.clone(), r8s_api::quantity::Quantity::parse(&v.0).ok()?)))
            .collect()
    })
    .unwrap_or_default()
}

fn to_api(list: &ResourceList) -> std::collections::BTreeMap<String, ApiQuantity> {
    list.iter()
        .map(|(k, v)| (k.clone(), ApiQuantity(v.to_string())))
        .collect()
}

fn spec_hard(q: &ResourceQuota) -> ResourceList {
    to_list(q.spec.as_ref().and_then(|s| s.hard.as_ref()))
}

/// Whether the pod is charged for compute resources (not finished, not past its deletion
/// grace period).
fn pod_counts(pod: &Pod) -> bool {
    let minimal = json!({
        "status": {"phase": pod.status.as_ref().and_then(|s| s.phase.clone())},
        "metadata": {
            "deletionTimestamp": pod.metadata.deletion_timestamp,
            "deletionGracePeriodSeconds": pod.metadata.deletion_grace_period_seconds,
        },
    });
    quota::pod_counts_for_quota(&minimal, now())
}

impl ResourceQuotaController {
    pub fn new(factory: &Factory) -> Arc<Self> {
        let quotas = factory.get::<ResourceQuota>();
        let this = Arc::new(Self {
            client: factory.client(),
            quota_store: quotas.store(),
            quotas,
            pods: factory.get::<Pod>(),
            services: factory.get::<Service>(),
            configmaps: factory.get::<ConfigMap>(),
            secrets: factory.get::<Secret>(),
            queue: WorkQueue::new("resourcequota"),
            discovery: factory.discovery(),
            dynamic: std::sync::Mutex::new(HashMap::new()),
            stop: CancellationToken::new(),
        });
        let q = this.queue.clone();
        this.quotas.add_handler(move |c| match c {
            Change::Added(rq) => q.add(key_of(&**rq)),
            // Only a change of the hard limits needs a recount (status writes come back here too).
            Change::Updated(old, new) => {
                if !quota::equals(&spec_hard(old), &spec_hard(new)) {
                    q.add(key_of(&**new))
                }
            }
            Change::Deleted(_) => {}
        });
        let weak = Arc::downgrade(&this);
        this.pods.add_handler(move |c| {
            let Some(this) = weak.upgrade() else { return };
            match c {
                Change::Updated(old, new) if pod_counts(old) && !pod_counts(new) => {
                    this.replenish(&Evaluator::Pods, new.namespace().as_deref())
                }
                Change::Deleted(p) => this.replenish(&Evaluator::Pods, p.namespace().as_deref()),
                _ => {}
            }
        });
        let weak = Arc::downgrade(&this);
        this.services.add_handler(move |c| {
            let Some(this) = weak.upgrade() else { return };
            match c {
                Change::Updated(old, new)
                    if old.spec.as_ref().and_then(|s| s.type_.as_ref())
                        != new.spec.as_ref().and_then(|s| s.type_.as_ref()) =>
                {
                    this.replenish(&Evaluator::Services, new.namespace().as_deref())
                }
                Change::Deleted(s) => this.replenish(&Evaluator::Services, s.namespace().as_deref()),
                _ => {}
            }
        });
        let weak = Arc::downgrade(&this);
        this.configmaps.add_handler(move |c| {
            if let (Some(this), Change::Deleted(o)) = (weak.upgrade(), c) {
                this.replenish(
                    &Evaluator::for_resource("", "configmaps"),
                    o.namespace().as_deref(),
                );
            }
        });
        let weak = Arc::downgrade(&this);
        this.secrets.add_handler(move |c| {
            if let (Some(this), Change::Deleted(o)) = (weak.upgrade(), c) {
                this.replenish(&Evaluator::for_resource("", "secrets"), o.namespace().as_deref());
            }
        });
        let weak = Arc::downgrade(&this);
        this.quotas.add_handler(move |c| {
            if let (Some(this), Change::Deleted(o)) = (weak.upgrade(), c) {
                this.replenish(
                    &Evaluator::for_resource("", "resourcequotas"),
                    o.namespace().as_deref(),
                );
            }
        });
        this
    }

    /// Queue every quota of the namespace that tracks something `ev` measures (upstream
    /// `replenishQuota`).
    fn replenish(&self, ev: &Evaluator, ns: Option<&str>) {
        let Some(ns) = ns else { return };
        for rq in self.quota_store.state() {
            if rq.metadata.namespace.as_deref() != Some(ns) {
                continue;
            }
            let hard = quota::names(&to_list(rq.status.as_ref().and_then(|s| s.hard.as_ref())));
            if !ev.matching_resources(&hard).is_empty() {
                self.queue.add(key_of(&*rq));
            }
        }
    }

    pub async fn run(self: Arc<Self>, workers: usize, stop: CancellationToken) {
        let informers = [
            self.quotas.clone().synced(),
            self.pods.clone().synced(),
            self.services.clone().synced(),
            self.configmaps.clone().synced(),
            self.secrets.clone().synced(),
        ];
        // The watches started later end with the controller.
        let (outer, inner) = (stop.clone(), self.stop.clone());
        tokio::spawn(async move {
            outer.cancelled().await;
            inner.cancel();
        });
        if !r8s_client::queue::wait_for_sync(informers.into(), &stop).await {
            return;
        }
        // Every quota, now and every RESYNC.
        let this = self.clone();
        let resync_stop = stop.clone();
        let resync = tokio::spawn(async move {
            let mut tick = tokio::time::interval(RESYNC);
            loop {
                tokio::select! {
                    _ = resync_stop.cancelled() => return,
                    _ = tick.tick() => {
                        for rq in this.quota_store.state() {
                            this.queue.add(key_of(&*rq));
                        }
                    }
                }
            }
        });
        let this = self.clone();
        run_workers(self.queue.clone(), workers, stop, move |key| {
            let this = this.clone();
            async move { this.sync(&key).await }
        })
        .await;
        resync.abort();
    }

    /// The cache of a kind no shared informer serves, watched from its first use on; a
    /// deletion recounts the quotas that count it.
    async fn dynamic_store(self: &Arc<Self>, ar: &ApiResource) -> Store<DynamicObject> {
        let key = (ar.group.clone(), ar.plural.clone());
        let existing = self.dynamic.lock().unwrap().get(&key).cloned();
        let store = match existing {
            Some(store) => store,
            None => {
                let writer = reflector::store::Writer::new(ar.clone());
                let store = writer.as_reader();
                self.dynamic.lock().unwrap().insert(key, store.clone());
                let api: Api<DynamicObject> = Api::all_with(self.client.clone(), ar);
                let ev = Evaluator::for_resource(&ar.group, &ar.plural);
                let weak: Weak<Self> = Arc::downgrade(self);
                let stop = self.stop.clone();
                tokio::spawn(async move {
                    let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()))
                        .default_backoff();
                    let mut stream = std::pin::pin!(stream);
                    loop {
                        let event = tokio::select! {
                            _ = stop.cancelled() => return,
                            e = stream.next() => e,
                        };
                        match event {
                            None => return,
                            Some(Ok(watcher::Event::Delete(obj))) => match weak.upgrade() {
                                Some(this) => this.replenish(&ev, obj.metadata.namespace.as_deref()),
                                None => return,
                            },
                            Some(Ok(_)) => {}
                            Some(Err(e)) => {
                                tracing::debug!(resource = %ev.group_resource().1, error = %e, "quota watch failed; retrying")
                            }
                        }
                    }
                });
                store
            }
        };
        // A fresh watch has listed once before its counts mean anything.
        let _ = tokio::time::timeout(Duration::from_secs(30), store.wait_until_ready()).await;
        store
    }

    /// Namespaced resources that can be listed and watched, from the shared discovery cache.
    async fn watchable(&self) -> Result<Vec<ApiResource>, crate::Error> {
        Ok(self
            .discovery
            .select(|_, caps| {
                caps.scope == Scope::Namespaced
                    && caps.supports_operation(verbs::LIST)
                    && caps.supports_operation(verbs::WATCH)
            })
            .await?)
    }

    /// The objects of the namespace `ev` measures; `None` if the API server does not serve
    /// them (then the quota cannot count them, as upstream's quota monitor cannot).
    async fn items(self: &Arc<Self>, ns: &str, ev: &Evaluator) -> Result<Option<Vec<Value>>, crate::Error> {
        fn of<K: r8s_client::informer::Object + serde::Serialize>(
            store: Store<K>,
            ns: &str,
            full: bool,
        ) -> Vec<Value> {
            store
                .state()
                .iter()
                .filter(|o| o.meta().namespace.as_deref() == Some(ns))
                // An object count needs no more than the object's existence.
                .map(|o| {
                    if full {
                        serde_json::to_value(&**o).unwrap_or_default()
                    } else {
                        json!({})
                    }
                })
                .collect()
        }
        let items = match ev.group_resource() {
            ("", "pods") => of(self.pods.store(), ns, true),
            ("", "services") => of(self.services.store(), ns, true),
            ("", "configmaps") => of(self.configmaps.store(), ns, false),
            ("", "secrets") => of(self.secrets.store(), ns, false),
            ("", "resourcequotas") => of(self.quota_store.clone(), ns, false),
            (group, resource) => {
                let resources = self.watchable().await?;
                let Some(ar) = resources
                    .iter()
                    .find(|ar| ar.group == group && ar.plural == resource)
                else {
                    return Ok(None);
                };
                self.dynamic_store(ar)
                    .await
                    .state()
                    .iter()
                    .filter(|o| o.metadata.namespace.as_deref() == Some(ns))
                    .map(|o| serde_json::to_value(&**o).unwrap_or_default())
                    .collect()
            }
        };
        Ok(Some(items))
    }

    /// Recount one quota (upstream `syncResourceQuota`).
    async fn sync(self: &Arc<Self>, key: &str) -> SyncResult {
        let Some(rq) = lookup(&self.quota_store, key) else {
            return Ok(None);
        };
        let ns = rq.metadata.namespace.clone().unwrap_or_default();
        let hard = spec_hard(&rq);
        let status = rq.status.clone().unwrap_or_default();
        let old_used = to_list(status.used.as_ref());
        let mut dirty = !quota::equals(&hard, &to_list(status.hard.as_ref()))
            || status.hard.is_none()
            || status.used.is_none();
        let hard_names = quota::names(&hard);
        let scopes = quota::scope_selectors(&serde_json::to_value(&*rq).unwrap_or_default());
        let evaluators = Evaluator::for_quota(&hard_names);
        let mut matched: Vec<String> = hard_names
            .iter()
            .filter(|n| {
                evaluators
                    .iter()
                    .any(|e| !e.matching_resources(std::slice::from_ref(*n)).is_empty())
            })
            .cloned()
            .collect();
        let mut counted = ResourceList::new();
        let mut error = None;
        for ev in &evaluators {
            let resources = ev.matching_resources(&matched);
            if resources.is_empty() {
                continue;
            }
            match self.items(&ns, ev).await {
                Ok(Some(items)) => {
                    counted = quota::add(&counted, &ev.usage_stats(&items, &scopes, &resources, now()));
                }
                Ok(None) => matched.retain(|m| !resources.contains(m)),
                Err(e) => {
                    matched.retain(|m| !resources.contains(m));
                    error = Some(e);
                }
            }
        }
        let mut used = old_used.clone();
        used.extend(quota::mask(&counted, &matched));
        let used = quota::mask(&used, &hard_names);
        dirty = dirty || !quota::equals(&used, &old_used);
        if dirty {
            let mut updated = (*rq).clone();
            updated.status = Some(ResourceQuotaStatus {
                hard: Some(to_api(&hard)),
                used: Some(to_api(&used)),
            });
            let api: Api<ResourceQuota> = Api::namespaced(self.client.clone(), &ns);
            match api
                .replace_status(&rq.name_any(), &crate::post_params(), &updated)
                .await
            {
                Ok(_) => {}
                Err(e) if r8s_client::is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        match error {
            Some(e) => Err(e),
            None => Ok(None),
        }
    }
}
