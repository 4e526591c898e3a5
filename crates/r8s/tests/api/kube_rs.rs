//! End to end with kube-rs, the other client the API must satisfy unchanged: typed CRUD, and a
//! runtime watcher that survives its resourceVersion being compacted away (410 → relist).

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use kube::{Api, Client};
use support::Server;

async fn client(server: &Server) -> Client {
    let kubeconfig = Kubeconfig::read_from(&server.kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

fn lease(name: &str) -> Lease {
    serde_json::from_value(
        serde_json::json!({"metadata": {"name": name}, "spec": {"holderIdentity": "test"}}),
    )
    .unwrap()
}

fn configmap(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([("app".into(), "kube-rs".into())])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("key".into(), value.into())])),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_crud() {
    let server = Server::start();
    let client = client(&server).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

    let created = cms
        .create(&PostParams::default(), &configmap("one", "1"))
        .await
        .unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    assert!(created.metadata.resource_version.is_some());
    let got = cms.get("one").await.unwrap();
    assert_eq!(got.metadata.uid.as_deref(), Some(uid.as_str()));
    assert_eq!(got.data.as_ref().unwrap()["key"], "1");

    // Replace with the current resourceVersion succeeds; with a stale one it is a 409.
    let mut next = got.clone();
    next.data = Some(BTreeMap::from([("key".into(), "2".into())]));
    let replaced = cms.replace("one", &PostParams::default(), &next).await.unwrap();
    assert_ne!(replaced.metadata.resource_version, got.metadata.resource_version);
    match cms.replace("one", &PostParams::default(), &next).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 409);
            assert_eq!(status.reason, "Conflict");
        }
        other => panic!("expected a conflict, got {other:?}"),
    }

    let patched = cms
        .patch(
            "one",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {"patched": "yes"}}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.labels.unwrap()["patched"], "yes");
    // A uid in a patch is a precondition: another object's uid is refused (422, immutable),
    // the stored one is accepted.
    match cms
        .patch(
            "one",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"uid": "not-this-one", "labels": {"x": "y"}}})),
        )
        .await
    {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{status:?}");
            assert!(
                status
                    .message
                    .contains("metadata.uid: Invalid value: \"not-this-one\": field is immutable"),
                "{}",
                status.message
            );
        }
        other => panic!("expected 422, got {other:?}"),
    }
    cms.patch(
        "one",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"uid": uid, "labels": {"x": "y"}}})),
    )
    .await
    .unwrap();

    cms.create(&PostParams::default(), &configmap("two", "2"))
        .await
        .unwrap();
    let list = cms
        .list(&ListParams::default().labels("patched=yes"))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    // resourceVersion=0 (what informers ask for) is served from the watch cache.
    let cached = cms.list(&ListParams::default().match_any()).await.unwrap();
    let mut names: Vec<String> = cached
        .items
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    names.sort();
    // (kube-root-ca.crt is the CA bundle the controller manager publishes in every namespace.)
    names.retain(|n| n != "kube-root-ca.crt");
    assert_eq!(names, ["one", "two"]);
    let cached_labelled = cms
        .list(&ListParams::default().match_any().labels("patched=yes"))
        .await
        .unwrap();
    assert_eq!(cached_labelled.items.len(), 1);
    let all = cms.list(&ListParams::default().limit(1)).await.unwrap();
    assert_eq!(all.items.len(), 1);
    assert!(all.metadata.continue_.is_some(), "a limited list pages");

    cms.delete("one", &DeleteParams::default()).await.unwrap();
    match cms.get("one").await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 404),
        other => panic!("expected 404, got {other:?}"),
    }

    // Server-side apply: creates, then merges by field ownership.
    let applied = cms
        .patch(
            "ssa",
            &PatchParams::apply("kube-rs-test"),
            &Patch::Apply(serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "ssa"},
                "data": {"a": "1", "b": "2"}
            })),
        )
        .await
        .unwrap();
    assert_eq!(applied.data.as_ref().unwrap().len(), 2);
    let applied = cms
        .patch(
            "ssa",
            &PatchParams::apply("kube-rs-test"),
            &Patch::Apply(serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "ssa"},
                "data": {"a": "1"}
            })),
        )
        .await
        .unwrap();
    assert_eq!(
        applied.data.unwrap(),
        BTreeMap::from([("a".to_owned(), "1".to_owned())]),
        "b is no longer applied"
    );
    let managed = applied.metadata.managed_fields.unwrap();
    assert_eq!(managed[0].manager.as_deref(), Some("kube-rs-test"));
    assert_eq!(managed[0].operation.as_deref(), Some("Apply"));

    // A typed Deployment round-trips with defaults applied.
    let deployments: Api<Deployment> = Api::namespaced(client, "default");
    let d: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx:1.25"}]}}
        }
    }))
    .unwrap();
    let d = deployments.create(&PostParams::default(), &d).await.unwrap();
    let spec = d.spec.unwrap();
    assert_eq!(spec.replicas, Some(1));
    assert_eq!(spec.revision_history_limit, Some(10));
    assert_eq!(d.metadata.generation, Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_survives_a_compacted_resource_version() {
    // Compact every second, keeping only 5 revisions: a watch from a revision older than both the
    // datastore's history and the watch cache's window gets 410 Gone; a watcher relists.
    let server = Server::start_with(&[
        "--datastore-compaction-interval",
        "1s",
        "--datastore-compaction-retain",
        "5",
    ]);
    let client = client(&server).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    leases
        .create(&PostParams::default(), &lease("before"))
        .await
        .unwrap();
    for i in 0..30 {
        let s: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("churn-{i}")},
            "stringData": {"k": "v"}
        }))
        .unwrap();
        secrets.create(&PostParams::default(), &s).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(2500)).await;

    // A watch from revision 1, long compacted: one ERROR event, 410 Expired.
    let mut stream = leases
        .watch(&kube::api::WatchParams::default().timeout(5), "1")
        .await
        .unwrap()
        .boxed();
    let first = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("an event")
        .expect("stream open");
    match first {
        Ok(kube::api::WatchEvent::Error(e)) => {
            assert_eq!(e.code, 410, "{e:?}");
            assert!(e.message.contains("too old resource version"), "{e:?}");
        }
        Err(e) => assert!(e.to_string().contains("too old resource version"), "{e}"),
        other => panic!("expected 410 Gone, got {other:?}"),
    }

    // A watcher (which relists whenever it must) keeps up: it lists, then sees a new object live.
    let config = watcher::Config::default().timeout(1);
    let mut events = watcher(leases.clone(), config).boxed();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    let mut created = false;
    loop {
        let ev = tokio::time::timeout_at(deadline, events.next())
            .await
            .unwrap_or_else(|_| panic!("watcher stalled\n{}", server.log()))
            .expect("stream open");
        match ev {
            Ok(watcher::Event::InitDone) if !created => {
                leases
                    .create(&PostParams::default(), &lease("after"))
                    .await
                    .unwrap();
                created = true;
            }
            Ok(watcher::Event::Apply(l)) | Ok(watcher::Event::InitApply(l))
                if l.metadata.name.as_deref() == Some("after") =>
            {
                break
            }
            _ => {}
        }
    }
}

/// Server-side apply with a YAML body (the media type says YAML; kubectl and kube-rs happen to
/// send JSON, other clients send YAML).
#[tokio::test]
async fn server_side_apply_accepts_yaml_bodies() {
    let server = Server::start();
    let client = client(&server).await;
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-yaml\n  labels:\n    tier: \"2\"\ndata:\n  greeting: hello\n  count: \"3\"\n";
    let req =
        http::Request::patch("/api/v1/namespaces/default/configmaps/from-yaml?fieldManager=yaml-client")
            .header("Content-Type", "application/apply-patch+yaml")
            .body(yaml.as_bytes().to_vec())
            .unwrap();
    client.request_text(req).await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm = api.get("from-yaml").await.unwrap();
    let data = cm.data.unwrap();
    assert_eq!(data["greeting"], "hello");
    assert_eq!(data["count"], "3");
    assert_eq!(cm.metadata.labels.unwrap()["tier"], "2");
    let managers: Vec<String> = cm
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(managers, ["yaml-client"]);
    // Bad YAML is a 400 with the decoder's words.
    let bad = http::Request::patch("/api/v1/namespaces/default/configmaps/bad?fieldManager=yaml-client")
        .header("Content-Type", "application/apply-patch+yaml")
        .body(b"metadata: [unclosed".to_vec())
        .unwrap();
    match client.request_text(bad).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 400);
            assert!(s.message.starts_with("error decoding YAML"), "{}", s.message);
        }
        other => panic!("expected 400, got {other:?}"),
    }
}

/// A watch with a label selector, served from the watch cache: an object entering the selection
/// is ADDED, changing inside it MODIFIED, leaving it DELETED (with its new state), and a
/// deletion inside it DELETED; changes outside it are not seen. An unfiltered watch sees every
/// change with its natural type; both carry each change's resourceVersion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selector_watches_see_objects_enter_and_leave() {
    use kube::api::WatchParams;
    let server = Server::start();
    let client = client(&server).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let rv = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut selected = cms
        .watch(&WatchParams::default().labels("tier=web").timeout(20), &rv)
        .await
        .unwrap()
        .boxed();
    let mut all = cms
        .watch(&WatchParams::default().timeout(20), &rv)
        .await
        .unwrap()
        .boxed();
    let labelled = |tier: &str| {
        let mut cm = configmap("sel", "v");
        cm.metadata.labels = Some(BTreeMap::from([("tier".into(), tier.into())]));
        cm
    };
    let relabel = |tier: &str| Patch::Merge(serde_json::json!({"metadata": {"labels": {"tier": tier}}}));
    let pp = PatchParams::default();
    let mut rvs = vec![cms.create(&PostParams::default(), &labelled("db")).await.unwrap()];
    rvs.push(cms.patch("sel", &pp, &relabel("web")).await.unwrap());
    rvs.push(
        cms.patch(
            "sel",
            &pp,
            &Patch::Merge(serde_json::json!({"data": {"key": "w"}})),
        )
        .await
        .unwrap(),
    );
    rvs.push(cms.patch("sel", &pp, &relabel("db")).await.unwrap());
    rvs.push(cms.patch("sel", &pp, &relabel("web")).await.unwrap());
    cms.delete("sel", &DeleteParams::default()).await.unwrap();
    let rv_of = |cm: &ConfigMap| cm.metadata.resource_version.clone().unwrap();

    let mut seen = Vec::new();
    for _ in 0..5 {
        let (kind, cm) = next_event(&mut selected).await;
        let tier = cm.metadata.labels.as_ref().unwrap()["tier"].clone();
        seen.push((kind, tier, rv_of(&cm)));
    }
    let expect = |kind: &str, tier: &str, rv: &ConfigMap| (kind.to_string(), tier.to_string(), rv_of(rv));
    let seen: Vec<(String, String, String)> =
        seen.into_iter().map(|(k, t, r)| (k.to_string(), t, r)).collect();
    assert_eq!(seen[0], expect("ADDED", "web", &rvs[1]));
    assert_eq!(seen[1], expect("MODIFIED", "web", &rvs[2]));
    assert_eq!(seen[2], expect("DELETED", "db", &rvs[3]));
    assert_eq!(seen[3], expect("ADDED", "web", &rvs[4]));
    assert_eq!(seen[4].0, "DELETED");
    assert_eq!(seen[4].1, "web");

    let mut kinds = Vec::new();
    for _ in 0..6 {
        kinds.push(next_event(&mut all).await.0);
    }
    assert_eq!(
        kinds,
        ["ADDED", "MODIFIED", "MODIFIED", "MODIFIED", "MODIFIED", "DELETED"]
    );
}

type EventStream = futures::stream::BoxStream<'static, kube::Result<kube::api::WatchEvent<ConfigMap>>>;

/// The next change on a watch (within 10 s), as its type and object.
async fn next_event(stream: &mut EventStream) -> (&'static str, ConfigMap) {
    use kube::api::WatchEvent;
    match tokio::time::timeout(Duration::from_secs(10), stream.next()).await {
        Ok(Some(Ok(WatchEvent::Added(o)))) => ("ADDED", o),
        Ok(Some(Ok(WatchEvent::Modified(o)))) => ("MODIFIED", o),
        Ok(Some(Ok(WatchEvent::Deleted(o)))) => ("DELETED", o),
        other => panic!("no change: {other:?}"),
    }
}

/// The controllers' shared informers cache objects without managedFields (as upstream's
/// informers strip them); an update made from a cached object keeps the server's entries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informers_cache_objects_without_managed_fields() {
    let server = Server::start_with(&["--disable-controller-manager", "--disable-scheduler"]);
    let client = client(&server).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let created = cms
        .create(&PostParams::default(), &configmap("cached", "1"))
        .await
        .unwrap();
    assert!(
        created.metadata.managed_fields.is_some(),
        "the server records managedFields"
    );

    let factory = r8s_client::informer::Factory::new(client.clone(), None);
    let informer = factory.get::<ConfigMap>();
    let stop = tokio_util::sync::CancellationToken::new();
    let _tasks = factory.start(&stop);
    tokio::time::timeout(Duration::from_secs(10), informer.wait_synced())
        .await
        .expect("informer synced");
    let cached = r8s_client::informer::lookup(&informer.store(), "default/cached").expect("cached");
    assert_eq!(cached.metadata.managed_fields, None);
    assert_eq!(cached.data.as_ref().unwrap()["key"], "1");

    let mut changed = (*cached).clone();
    changed.data = Some(BTreeMap::from([("key".into(), "2".into())]));
    let updated = cms
        .replace("cached", &PostParams::default(), &changed)
        .await
        .unwrap();
    let managers: Vec<_> = updated
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| e.manager)
        .collect();
    assert!(
        !managers.is_empty(),
        "managedFields kept after an update without them"
    );
    stop.cancel();
}

/// Lists at the latest revision (no resourceVersion, no limit) are served from the watch cache
/// as upstream's ConsistentListFromCache does — counted in `apiserver_cache_list_total` — and
/// stay consistent: a list right after a write sees it, also when the write was to another
/// resource (the cache asks its datastore watch for progress rather than wait for an event).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consistent_lists_come_from_the_watch_cache() {
    let server = Server::start();
    let client = client(&server).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let served = || async {
        let text = client
            .request_text(http::Request::get("/metrics").body(Vec::new()).unwrap())
            .await
            .unwrap();
        text.lines()
            .find(|l| {
                l.starts_with("apiserver_cache_list_total") && l.contains("resource_prefix=\"/configmaps\"")
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let before = served().await;
    for i in 0..20 {
        let cm: ConfigMap =
            serde_json::from_value(serde_json::json!({"metadata": {"name": format!("c{i}")}})).unwrap();
        let created = cms.create(&PostParams::default(), &cm).await.unwrap();
        // Another resource moves the datastore on; the ConfigMap cache has no event for it.
        let s: Secret =
            serde_json::from_value(serde_json::json!({"metadata": {"name": format!("s{i}")}})).unwrap();
        secrets.create(&PostParams::default(), &s).await.unwrap();
        let list = cms.list(&kube::api::ListParams::default()).await.unwrap();
        assert!(
            list.items.iter().any(|c| c.metadata.uid == created.metadata.uid),
            "a list right after a create misses it"
        );
        let rv: i64 = list.metadata.resource_version.unwrap().parse().unwrap();
        let srv: i64 = secrets
            .get(&format!("s{i}"))
            .await
            .unwrap()
            .metadata
            .resource_version
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            rv >= srv,
            "the list's revision {rv} is older than a write before it ({srv})"
        );
    }
    let after = served().await;
    assert!(after - before >= 20.0, "lists from the cache: {before} → {after}");
}
