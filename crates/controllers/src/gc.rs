//! The garbage collector (upstream `pkg/controller/garbagecollector`): a graph of every object
//! the API server serves (except events), linked by ownerReferences, kept current by one watch
//! per resource. It keeps only identities and owner links, never whole objects.
//!
//! - An object whose owners are all gone is deleted (background cascading deletion); one that
//!   keeps a live owner only loses its references to the gone ones.
//! - An owner deleted in the foreground (`foregroundDeletion` finalizer) has its dependents
//!   deleted first; the finalizer is removed once no dependent that blocks it
//!   (`blockOwnerDeletion`) remains.
//! - An owner deleted with `orphan` has its dependents' references to it removed, then the
//!   `orphan` finalizer.
//!
//! Owners are always checked with a live read before anything is deleted: the graph only says
//! where to look.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, Preconditions, PropagationPolicy};
use kube::discovery::{verbs, ApiResource, Scope};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::SyncResult;
use r8s_client::queue::{run_workers, WorkQueue};

pub const FOREGROUND: &str = "foregroundDeletion";
pub const ORPHAN: &str = "orphan";
/// How often the resources to watch are discovered again (upstream resyncs its monitors every
/// 30 s; custom resources of a new CRD are followed within this).
const RESYNC: std::time::Duration = std::time::Duration::from_secs(10);

#[derive(Clone, Debug)]
struct Node {
    resource: usize,
    namespace: Option<String>,
    name: String,
    owners: Vec<OwnerReference>,
    deleting: bool,
    finalizers: Vec<String>,
}

#[derive(Default)]
struct Graph {
    nodes: HashMap<String, Node>,
    dependents: HashMap<String, HashSet<String>>,
    /// Per resource: uids seen during a relist in progress.
    relisting: HashMap<usize, HashSet<String>>,
    synced: HashSet<usize>,
}

#[derive(Clone)]
struct Resource {
    ar: ApiResource,
    namespaced: bool,
}

pub struct GarbageCollector {
    client: Client,
    graph: Mutex<Graph>,
    resources: Mutex<Vec<Resource>>,
    attempt_to_delete: Arc<WorkQueue>,
    attempt_to_orphan: Arc<WorkQueue>,
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("")
}

impl GarbageCollector {
    pub fn new(client: Client) -> Arc<Self> {
        Arc::new(Self {
            client,
            graph: Mutex::new(Graph::default()),
            resources: Mutex::new(Vec::new()),
            attempt_to_delete: WorkQueue::new("garbagecollector"),
            attempt_to_orphan: WorkQueue::new("garbagecollector-orphan"),
        })
    }

    /// Resources to watch: everything listable, watchable and deletable, events excepted.
    async fn discover(&self) -> Result<Vec<Resource>, Error> {
        let discovery = r8s_client::discovery::discover(&self.client).await?;
        let mut out = Vec::new();
        for group in discovery.groups() {
            for (ar, caps) in group.recommended_resources() {
                if ar.plural == "events" {
                    continue;
                }
                if [verbs::LIST, verbs::WATCH, verbs::DELETE, verbs::PATCH]
                    .iter()
                    .all(|v| caps.supports_operation(v))
                {
                    out.push(Resource {
                        ar,
                        namespaced: caps.scope == Scope::Namespaced,
                    });
                }
            }
        }
        Ok(out)
    }

    fn resource_for(&self, api_version: &str, kind: &str) -> Option<Resource> {
        let group = group_of(api_version);
        self.resources
            .lock()
            .unwrap()
            .iter()
            .find(|r| r.ar.group == group && r.ar.kind == kind)
            .cloned()
    }

    pub async fn run(self: Arc<Self>, workers: usize, stop: CancellationToken) {
        let resources = loop {
            match self.discover().await {
                Ok(r) => break r,
                Err(e) => {
                    tracing::warn!(error = %e, "garbage collector: discovery failed; retrying");
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(std::time::Duration::from_secs(2)) => {}
                    }
                }
            }
        };
        *self.resources.lock().unwrap() = resources.clone();
        // One watch per resource, all feeding the graph; resources that appear later (custom
        // resources of a new CRD) get theirs from the periodic rediscovery below, as upstream's
        // monitors are resynced.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let client = self.client.clone();
        let watch = move |i: usize, r: &Resource| {
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &r.ar);
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut events = watcher(api, watcher::Config::default()).default_backoff().boxed();
                while let Some(e) = events.next().await {
                    if tx.send((i, e)).is_err() {
                        return;
                    }
                }
            })
        };
        let mut watching: HashMap<(String, String), tokio::task::JoinHandle<()>> = resources
            .iter()
            .enumerate()
            .map(|(i, r)| ((r.ar.group.clone(), r.ar.plural.clone()), watch(i, r)))
            .collect();
        let count = resources.len();
        let this = self.clone();
        let graph_task = tokio::spawn(async move {
            while let Some((i, event)) = rx.recv().await {
                match event {
                    Ok(e) => this.process(i, e, count),
                    Err(e) => tracing::debug!(error = %e, "garbage collector watch failed; retrying"),
                }
            }
        });
        let this = self.clone();
        let stop_resync = stop.clone();
        let resync = tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop_resync.cancelled() => break,
                    _ = tokio::time::sleep(RESYNC) => {}
                }
                let Ok(now) = this.discover().await else { continue };
                for r in &now {
                    let key = (r.ar.group.clone(), r.ar.plural.clone());
                    if watching.get(&key).is_some_and(|t| !t.is_finished()) {
                        continue;
                    }
                    let i = {
                        let mut known = this.resources.lock().unwrap();
                        match known
                            .iter()
                            .position(|k| k.ar.group == r.ar.group && k.ar.plural == r.ar.plural)
                        {
                            Some(i) => {
                                known[i] = r.clone();
                                i
                            }
                            None => {
                                known.push(r.clone());
                                known.len() - 1
                            }
                        }
                    };
                    tracing::debug!(resource = %r.ar.plural, group = %r.ar.group, "garbage collector: watching a new resource");
                    watching.insert(key, watch(i, r));
                }
                watching.retain(|(g, p), task| {
                    let served = now.iter().any(|r| &r.ar.group == g && &r.ar.plural == p);
                    if !served {
                        task.abort();
                    }
                    served
                });
            }
            for t in watching.values() {
                t.abort();
            }
        });
        let this = self.clone();
        let deleter = tokio::spawn(run_workers(
            self.attempt_to_delete.clone(),
            workers,
            stop.clone(),
            move |uid| {
                let this = this.clone();
                async move { this.attempt_to_delete_item(&uid).await }
            },
        ));
        let this = self.clone();
        let orphaner = tokio::spawn(run_workers(
            self.attempt_to_orphan.clone(),
            workers,
            stop.clone(),
            move |uid| {
                let this = this.clone();
                async move { this.orphan_dependents(&uid).await }
            },
        ));
        stop.cancelled().await;
        resync.abort();
        graph_task.abort();
        let _ = deleter.await;
        let _ = orphaner.await;
    }

    /// Apply one watch event to the graph and queue what it calls for.
    fn process(&self, resource: usize, event: watcher::Event<DynamicObject>, monitors: usize) {
        let mut g = self.graph.lock().unwrap();
        match event {
            watcher::Event::Init => {
                g.relisting.insert(resource, HashSet::new());
            }
            watcher::Event::InitApply(obj) => {
                if let Some(uid) = obj.uid() {
                    g.relisting.entry(resource).or_default().insert(uid);
                }
                self.upsert(&mut g, resource, &obj);
            }
            watcher::Event::InitDone => {
                let seen = g.relisting.remove(&resource).unwrap_or_default();
                let gone: Vec<String> = g
                    .nodes
                    .iter()
                    .filter(|(uid, n)| n.resource == resource && !seen.contains(*uid))
                    .map(|(uid, _)| uid.clone())
                    .collect();
                for uid in gone {
                    self.remove(&mut g, &uid);
                }
                // The first time every resource is listed, or when a resource found later (a
                // new CRD's) has been listed: an owner missing from the graph now means
                // something.
                let _ = monitors;
                let newly = g.synced.insert(resource);
                let all = g.relisting.is_empty() && g.synced.len() >= self.resources.lock().unwrap().len();
                if newly && all {
                    // Every resource is listed: now an owner missing from the graph means
                    // something. Check every object that names one.
                    let suspects: Vec<String> = g
                        .nodes
                        .iter()
                        .filter(|(_, n)| n.owners.iter().any(|o| !g.nodes.contains_key(&o.uid)))
                        .map(|(uid, _)| uid.clone())
                        .collect();
                    for uid in suspects {
                        self.attempt_to_delete.add(uid);
                    }
                }
            }
            watcher::Event::Apply(obj) => self.upsert(&mut g, resource, &obj),
            watcher::Event::Delete(obj) => {
                if let Some(uid) = obj.uid() {
                    self.remove(&mut g, &uid);
                }
            }
        }
    }

    fn upsert(&self, g: &mut Graph, resource: usize, obj: &DynamicObject) {
        let Some(uid) = obj.uid() else { return };
        let node = Node {
            resource,
            namespace: obj.namespace(),
            name: obj.name_any(),
            owners: obj.owner_references().to_vec(),
            deleting: obj.metadata.deletion_timestamp.is_some(),
            finalizers: obj.finalizers().to_vec(),
        };
        let all_synced = !g.synced.is_empty()
            && g.relisting.is_empty()
            && g.synced.len() >= self.resources.lock().unwrap().len();
        let old = g.nodes.insert(uid.clone(), node.clone());
        let old_owners: HashSet<String> = old
            .iter()
            .flat_map(|o| o.owners.iter().map(|r| r.uid.clone()))
            .collect();
        let new_owners: HashSet<String> = node.owners.iter().map(|r| r.uid.clone()).collect();
        for removed in old_owners.difference(&new_owners) {
            if let Some(d) = g.dependents.get_mut(removed) {
                d.remove(&uid);
            }
            // An owner waiting for its dependents may have lost its last blocker.
            if g.nodes
                .get(removed)
                .is_some_and(|o| o.deleting && o.finalizers.iter().any(|f| f == FOREGROUND))
            {
                self.attempt_to_delete.add(removed.clone());
            }
        }
        for added in new_owners.difference(&old_owners) {
            g.dependents.entry(added.clone()).or_default().insert(uid.clone());
        }
        // A reference that stopped blocking (the cycle breaker above, or a user): its owner,
        // waiting for its dependents, may have no blocker left.
        let blocked: HashSet<&str> = old
            .iter()
            .flat_map(|o| o.owners.iter())
            .filter(|r| r.block_owner_deletion == Some(true))
            .map(|r| r.uid.as_str())
            .collect();
        for r in &node.owners {
            if blocked.contains(r.uid.as_str())
                && r.block_owner_deletion != Some(true)
                && g.nodes
                    .get(&r.uid)
                    .is_some_and(|o| o.deleting && o.finalizers.iter().any(|f| f == FOREGROUND))
            {
                self.attempt_to_delete.add(r.uid.clone());
            }
        }
        if all_synced && node.owners.iter().any(|o| !g.nodes.contains_key(&o.uid)) {
            self.attempt_to_delete.add(uid.clone());
        }
        if node.deleting {
            let was = old.as_ref().map(|o| (o.deleting, o.finalizers.clone()));
            let changed = was != Some((true, node.finalizers.clone()));
            if changed && node.finalizers.iter().any(|f| f == ORPHAN) {
                self.attempt_to_orphan.add(uid.clone());
            }
            if changed && node.finalizers.iter().any(|f| f == FOREGROUND) {
                self.attempt_to_delete.add(uid.clone());
                for dep in g.dependents.get(&uid).into_iter().flatten() {
                    self.attempt_to_delete.add(dep.clone());
                }
            }
        }
    }

    fn remove(&self, g: &mut Graph, uid: &str) {
        let Some(node) = g.nodes.remove(uid) else { return };
        for o in &node.owners {
            if let Some(d) = g.dependents.get_mut(&o.uid) {
                d.remove(uid);
                if d.is_empty() {
                    g.dependents.remove(&o.uid);
                }
            }
            if g.nodes
                .get(&o.uid)
                .is_some_and(|n| n.deleting && n.finalizers.iter().any(|f| f == FOREGROUND))
            {
                self.attempt_to_delete.add(o.uid.clone());
            }
        }
        // Its dependents may now be garbage.
        for dep in g.dependents.get(uid).into_iter().flatten() {
            self.attempt_to_delete.add(dep.clone());
        }
    }

    fn api_for(&self, r: &Resource, namespace: Option<&str>) -> Api<DynamicObject> {
        match (r.namespaced, namespace) {
            (true, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, &r.ar),
            _ => Api::all_with(self.client.clone(), &r.ar),
        }
    }

    fn node_api(&self, node: &Node) -> Option<Api<DynamicObject>> {
        let r = self.resources.lock().unwrap().get(node.resource).cloned()?;
        Some(self.api_for(&r, node.namespace.as_deref()))
    }

    /// The live object if it is still the one the graph knows.
    async fn live(
        &self,
        api: &Api<DynamicObject>,
        name: &str,
        uid: &str,
    ) -> Result<Option<DynamicObject>, Error> {
        Ok(api
            .get_opt(name)
            .await?
            .filter(|o| o.uid().as_deref() == Some(uid)))
    }

    async fn attempt_to_delete_item(&self, uid: &str) -> SyncResult {
        let Some(node) = self.graph.lock().unwrap().nodes.get(uid).cloned() else {
            return Ok(None);
        };
        let Some(api) = self.node_api(&node) else {
            return Ok(None);
        };
        let Some(live) = self.live(&api, &node.name, uid).await? else {
            return Ok(None);
        };
        if live.metadata.deletion_timestamp.is_some() {
            if live.finalizers().iter().any(|f| f == FOREGROUND) {
                return self.process_deleting_dependents(&api, &live).await;
            }
            return Ok(None);
        }
        let owners = live.owner_references().to_vec();
        if owners.is_empty() {
            return Ok(None);
        }
        let mut solid = Vec::new();
        let mut dangling = Vec::new();
        let mut waiting = Vec::new();
        for o in &owners {
            let Some(r) = self.resource_for(&o.api_version, &o.kind) else {
                // A kind the server does not serve (yet): leave the reference alone.
                solid.push(o.clone());
                continue;
            };
            let owner_api = self.api_for(&r, node.namespace.as_deref());
            match self.live(&owner_api, &o.name, &o.uid).await? {
                None => dangling.push(o.clone()),
                Some(owner)
                    if owner.metadata.deletion_timestamp.is_some()
                        && owner.finalizers().iter().any(|f| f == FOREGROUND) =>
                {
                    waiting.push(o.clone())
                }
                Some(_) => solid.push(o.clone()),
            }
        }
        if !solid.is_empty() {
            if dangling.is_empty() && waiting.is_empty() {
                return Ok(None);
            }
            // Keep the object; drop the references to owners that are gone or going.
            let gone: HashSet<&str> = dangling.iter().chain(&waiting).map(|o| o.uid.as_str()).collect();
            let keep: Vec<&OwnerReference> =
                owners.iter().filter(|o| !gone.contains(o.uid.as_str())).collect();
            let patch = json!({"metadata": {
                "ownerReferences": keep,
                "uid": uid,
                "resourceVersion": live.resource_version(),
            }});
            match api
                .patch(&node.name, &crate::patch_params(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return Ok(None),
                Err(e) if r8s_client::is_not_found(&e) => return Ok(None),
                Err(e) => return Err(e.into()),
            }
        }
        let (has_dependents, dependent_deleting_dependents) = {
            let g = self.graph.lock().unwrap();
            let deps = g.dependents.get(uid);
            let deleting_dependents = deps.into_iter().flatten().any(|d| {
                g.nodes
                    .get(d)
                    .is_some_and(|n| n.deleting && n.finalizers.iter().any(|f| f == FOREGROUND))
            });
            (deps.is_some_and(|d| !d.is_empty()), deleting_dependents)
        };
        if !waiting.is_empty() && has_dependents && dependent_deleting_dependents {
            // An owner and a dependent both wait for their dependents: a cycle, perhaps
            // (upstream's detection). This object's references stop blocking its owners, so
            // the owner waiting on it is not held by it, and it is then deleted in foreground.
            let unblocked: Vec<OwnerReference> = owners
                .iter()
                .map(|o| OwnerReference {
                    block_owner_deletion: o.block_owner_deletion.map(|_| false),
                    ..o.clone()
                })
                .collect();
            let patch = json!({"metadata": {
                "ownerReferences": unblocked,
                "uid": uid,
                "resourceVersion": live.resource_version(),
            }});
            match api
                .patch(&node.name, &crate::patch_params(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                Err(e) if r8s_client::is_not_found(&e) => return Ok(None),
                Err(e) => return Err(e.into()),
            }
        }
        let policy = if !waiting.is_empty() && has_dependents {
            PropagationPolicy::Foreground
        } else if live.finalizers().iter().any(|f| f == ORPHAN) {
            PropagationPolicy::Orphan
        } else if live.finalizers().iter().any(|f| f == FOREGROUND) {
            PropagationPolicy::Foreground
        } else {
            PropagationPolicy::Background
        };
        tracing::debug!(name = %node.name, ?policy, "garbage collector deleting object");
        let dp = DeleteParams {
            propagation_policy: Some(policy),
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(&node.name, &dp).await {
            Ok(_) => Ok(None),
            Err(e) if r8s_client::is_not_found(&e) => Ok(None),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// A foreground deletion: delete the blocking dependents; once none is left, remove the
    /// `foregroundDeletion` finalizer so the owner goes too.
    async fn process_deleting_dependents(
        &self,
        api: &Api<DynamicObject>,
        owner: &DynamicObject,
    ) -> SyncResult {
        let uid = owner.uid().unwrap_or_default();
        let blocking: Vec<(String, bool)> = {
            let g = self.graph.lock().unwrap();
            g.dependents
                .get(&uid)
                .into_iter()
                .flatten()
                .filter_map(|d| {
                    let n = g.nodes.get(d)?;
                    let blocks = n
                        .owners
                        .iter()
                        .any(|o| o.uid == uid && o.block_owner_deletion == Some(true));
                    blocks.then(|| (d.clone(), n.deleting))
                })
                .collect()
        };
        if blocking.is_empty() {
            return self.remove_finalizer(api, owner, FOREGROUND).await;
        }
        for (dep, deleting) in blocking {
            if !deleting {
                self.attempt_to_delete.add(dep);
            }
        }
        // Woken again when a dependent goes away.
        Ok(None)
    }

    /// An orphaning deletion: remove the owner from its dependents, then the `orphan` finalizer.
    async fn orphan_dependents(&self, uid: &str) -> SyncResult {
        let (node, dependents) = {
            let g = self.graph.lock().unwrap();
            let Some(node) = g.nodes.get(uid).cloned() else {
                return Ok(None);
            };
            let deps: Vec<Node> = g
                .dependents
                .get(uid)
                .into_iter()
                .flatten()
                .filter_map(|d| g.nodes.get(d).cloned().map(|n| (d.clone(), n)))
                .map(|(_, n)| n)
                .collect();
            (node, deps)
        };
        for dep in dependents {
            let Some(api) = self.node_api(&dep) else { continue };
            let Some(live) = api.get_opt(&dep.name).await? else {
                continue;
            };
            let refs = live.owner_references();
            if !refs.iter().any(|r| r.uid == uid) {
                continue;
            }
            let keep: Vec<&OwnerReference> = refs.iter().filter(|r| r.uid != uid).collect();
            let patch = json!({"metadata": {
                "ownerReferences": keep,
                "resourceVersion": live.resource_version(),
            }});
            match api
                .patch(&dep.name, &crate::patch_params(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                Err(e) if r8s_client::is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let Some(api) = self.node_api(&node) else {
            return Ok(None);
        };
        let Some(live) = self.live(&api, &node.name, uid).await? else {
            return Ok(None);
        };
        self.remove_finalizer(&api, &live, ORPHAN).await
    }

    async fn remove_finalizer(
        &self,
        api: &Api<DynamicObject>,
        obj: &DynamicObject,
        finalizer: &str,
    ) -> SyncResult {
        if !obj.finalizers().iter().any(|f| f == finalizer) {
            return Ok(None);
        }
        let keep: Vec<&String> = obj.finalizers().iter().filter(|f| *f != finalizer).collect();
        let patch = json!({"metadata": {
            "finalizers": keep,
            "resourceVersion": obj.resource_version(),
        }});
        match api
            .patch(&obj.name_any(), &crate::patch_params(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(None),
            Err(e) if r8s_client::is_not_found(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ar() -> Resource {
        Resource {
            ar: ApiResource {
                group: "apps".into(),
                version: "v1".into(),
                api_version: "apps/v1".into(),
                kind: "ReplicaSet".into(),
                plural: "replicasets".into(),
            },
            namespaced: true,
        }
    }

    fn obj(uid: &str, owners: &[&str], deleting: bool, finalizers: &[&str]) -> DynamicObject {
        let mut o = DynamicObject::new(uid, &ar().ar).within("default");
        o.metadata.uid = Some(uid.into());
        o.metadata.owner_references = Some(
            owners
                .iter()
                .map(|u| OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: "Deployment".into(),
                    name: format!("owner-{u}"),
                    uid: u.to_string(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                })
                .collect(),
        );
        if deleting {
            o.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::now(),
            ));
        }
        o.metadata.finalizers = Some(finalizers.iter().map(|s| s.to_string()).collect());
        o
    }

    async fn gc() -> Arc<GarbageCollector> {
        // A client that is never called: graph bookkeeping needs none.
        let config = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
        let gc = GarbageCollector::new(Client::try_from(config).unwrap());
        *gc.resources.lock().unwrap() = vec![ar()];
        gc
    }

    #[tokio::test]
    async fn graph_links_dependents_and_queues_them_when_the_owner_goes() {
        let gc = gc().await;
        gc.process(0, watcher::Event::Init, 1);
        gc.process(0, watcher::Event::InitApply(obj("owner", &[], false, &[])), 1);
        gc.process(
            0,
            watcher::Event::InitApply(obj("child", &["owner"], false, &[])),
            1,
        );
        gc.process(0, watcher::Event::InitDone, 1);
        assert!(gc.attempt_to_delete.is_empty(), "owner present: nothing to check");
        assert!(gc.graph.lock().unwrap().dependents["owner"].contains("child"));
        gc.process(0, watcher::Event::Delete(obj("owner", &[], false, &[])), 1);
        assert_eq!(gc.attempt_to_delete.get().await.as_deref(), Some("child"));
    }

    #[tokio::test]
    async fn dangling_owner_found_after_sync_is_checked() {
        let gc = gc().await;
        gc.process(0, watcher::Event::Init, 1);
        gc.process(
            0,
            watcher::Event::InitApply(obj("orphan-child", &["missing"], false, &[])),
            1,
        );
        assert!(
            gc.attempt_to_delete.is_empty(),
            "not judged before every resource is listed"
        );
        gc.process(0, watcher::Event::InitDone, 1);
        assert_eq!(gc.attempt_to_delete.get().await.as_deref(), Some("orphan-child"));
    }

    #[tokio::test]
    async fn deletion_finalizers_route_to_their_queues() {
        let gc = gc().await;
        gc.process(0, watcher::Event::Init, 1);
        gc.process(0, watcher::Event::InitApply(obj("o", &[], false, &[])), 1);
        gc.process(0, watcher::Event::InitApply(obj("c", &["o"], false, &[])), 1);
        gc.process(0, watcher::Event::InitDone, 1);
        gc.process(0, watcher::Event::Apply(obj("o", &[], true, &[ORPHAN])), 1);
        assert_eq!(gc.attempt_to_orphan.get().await.as_deref(), Some("o"));
        gc.process(0, watcher::Event::Apply(obj("o", &[], true, &[FOREGROUND])), 1);
        let mut queued = vec![
            gc.attempt_to_delete.get().await.unwrap(),
            gc.attempt_to_delete.get().await.unwrap(),
        ];
        queued.sort();
        assert_eq!(queued, ["c", "o"]);
    }

    /// A dependent whose reference stops blocking (the cycle breaker's patch) wakes its owner
    /// waiting in foreground deletion: it may have no blocker left.
    #[tokio::test]
    async fn an_unblocked_reference_wakes_its_waiting_owner() {
        let gc = gc().await;
        gc.process(0, watcher::Event::Init, 1);
        gc.process(
            0,
            watcher::Event::InitApply(obj("o", &[], true, &[FOREGROUND])),
            1,
        );
        gc.process(
            0,
            watcher::Event::InitApply(obj("c", &["o"], true, &[FOREGROUND])),
            1,
        );
        gc.process(0, watcher::Event::InitDone, 1);
        while !gc.attempt_to_delete.is_empty() {
            let key = gc.attempt_to_delete.get().await.unwrap();
            gc.attempt_to_delete.done(&key);
        }
        let mut unblocked = obj("c", &["o"], true, &[FOREGROUND]);
        for r in unblocked.metadata.owner_references.iter_mut().flatten() {
            r.block_owner_deletion = Some(false);
        }
        gc.process(0, watcher::Event::Apply(unblocked), 1);
        assert_eq!(gc.attempt_to_delete.get().await.as_deref(), Some("o"));
    }
}
