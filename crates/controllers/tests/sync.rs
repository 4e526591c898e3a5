//! The ReplicaSet and Deployment controllers' syncs driven one key at a time, as upstream's
//! `replica_set_test.go` drives `syncHandler`: against the real API server running in this
//! process on the embedded datastore (no kubelet, no scheduler, no other controller), so each
//! test sees exactly what one sync wrote. And the controllers' own credentials, fenced as the
//! leader's client is.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use r8s_client::events::Events;
use r8s_client::informer::Factory;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// An API server on loopback with its datastore in a temporary directory, and an admin client.
struct TestApi {
    client: Client,
    config: kube::Config,
    _server: r8s_apiserver::ApiServer,
    _dir: tempfile::TempDir,
}

async fn start_api() -> TestApi {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let store = tokio::task::spawn_blocking(move || {
        r8s_store::embedded::EmbeddedStore::open(r8s_store::embedded::EmbeddedOptions::new(db))
    })
    .await
    .unwrap()
    .unwrap();
    let tls = dir.path().join("tls");
    let pki = tokio::task::spawn_blocking(move || {
        r8s_apiserver::pki::Pki::ensure(&tls, &["127.0.0.1".to_string()])
    })
    .await
    .unwrap()
    .unwrap();
    // Service-account tokens too, for the controllers' own credentials.
    let store: Arc<dyn r8s_store::Store> = Arc::new(store);
    let lookup = r8s_apiserver::Lookup::new(store.clone());
    let sa_tokens = Arc::new(
        r8s_apiserver::authn::service_account::ServiceAccountTokens::new(
            &pki.service_account_key_pem,
            &[],
            &["https://kubernetes.default.svc.cluster.local".to_string()],
            &[],
            lookup.clone(),
        )
        .unwrap(),
    );
    let mut authenticators = r8s_apiserver::authn::AuthenticatorChain::default();
    authenticators.push(r8s_apiserver::authn::X509Authenticator::default());
    authenticators
        .push(r8s_apiserver::authn::service_account::ServiceAccountAuthenticator(sa_tokens.clone()));
    let mut authorizers = r8s_apiserver::authz::AuthorizerChain::default();
    authorizers.push(r8s_apiserver::authz::AlwaysAllow);
    let server = r8s_apiserver::ApiServer::start(r8s_apiserver::ApiServerConfig {
        serving: r8s_apiserver::ServingConfig {
            bind_address: "127.0.0.1".parse().unwrap(),
            port: 0,
            cert_pem: format!("{}{}", pki.serving_cert_pem, pki.ca_cert_pem),
            key_pem: pki.serving_key_pem.clone(),
            client_ca_pem: pki.ca_cert_pem.clone(),
        },
        store,
        authenticators,
        authorizers,
        admission: r8s_apiserver::admission::AdmissionChain::default(),
        service_cidrs: r8s_apiserver::ServiceCidrs::parse("10.43.0.0/16").unwrap(),
        rbac: None,
        service_account_tokens: Some(sa_tokens),
        audit: None,
        kubelet: None,
        advertise_address: None,
        metric_resolution: std::time::Duration::from_secs(15),
        proxy_identity: None,
        request_header: None,
        priority_and_fairness: true,
        request_timeout: std::time::Duration::from_secs(60),
        lookup: Some(lookup),
    })
    .await
    .unwrap();
    let kubeconfig = pki.admin_kubeconfig(&format!("https://{}", server.local_addr));
    let kc = kube::config::Kubeconfig::from_yaml(&kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    TestApi {
        client: Client::try_from(config.clone()).unwrap(),
        config,
        _server: server,
        _dir: dir,
    }
}

/// Wait until `f` holds (at most 10 s).
async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn template(image: &str) -> serde_json::Value {
    json!({"metadata": {"labels": {"app": "web"}},
           "spec": {"containers": [{"name": "web", "image": image}]}})
}

async fn pods(client: &Client) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicaset_sync_creates_what_is_missing_once_adopts_orphans_and_removes_extras() {
    let api = start_api().await;
    let client = api.client.clone();
    let factory = Factory::new(client.clone(), None);
    let rsc =
        r8s_controllers::replicaset::ReplicaSetController::new(&factory, Events::new(client.clone(), "test"));
    let rs_cache = factory.get::<ReplicaSet>().store();
    let pod_cache = factory.get::<Pod>().store();
    let stop = CancellationToken::new();
    let _informers = factory.start(&stop);

    // An orphan that the ReplicaSet's selector matches: adopted, so only two are created.
    let orphan: Pod = serde_json::from_value(json!({
        "metadata": {"name": "orphan", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "web", "image": "nginx"}]}
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &orphan)
        .await
        .unwrap();
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": template("nginx")}
    }))
    .unwrap();
    let rs_api = Api::<ReplicaSet>::namespaced(client.clone(), "default");
    let rs = rs_api.create(&PostParams::default(), &rs).await.unwrap();
    until("the caches", || {
        rs_cache.state().len() == 1 && pod_cache.state().len() == 1
    })
    .await;

    rsc.sync("default/web").await.unwrap();
    // Synced again at once, before the informer may have seen the creates: the expectations
    // keep it from creating the same pods twice.
    rsc.sync("default/web").await.unwrap();
    let uid = rs.metadata.uid.clone().unwrap();
    let owned = |pods: &[Pod]| {
        pods.iter()
            .filter(|p| {
                r8s_api::owner::controller_of(&p.metadata)
                    .is_some_and(|r| r.uid == uid && r.kind == "ReplicaSet")
            })
            .count()
    };
    let now = pods(&client).await;
    assert_eq!(
        now.len(),
        3,
        "{:?}",
        now.iter().map(|p| &p.metadata.name).collect::<Vec<_>>()
    );
    assert_eq!(owned(&now), 3, "the orphan adopted, two created, all owned");
    until("the pod cache", || pod_cache.state().len() == 3).await;
    rsc.sync("default/web").await.unwrap();
    assert_eq!(
        pods(&client).await.len(),
        3,
        "a synced cache creates nothing more"
    );

    // Scaled down to one: two go.
    rs_api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
    until("the scaled ReplicaSet", || {
        rs_cache.state().first().and_then(|r| r.spec.as_ref()?.replicas) == Some(1)
    })
    .await;
    rsc.sync("default/web").await.unwrap();
    assert_eq!(pods(&client).await.len(), 1);
    // The status the sync wrote counts what it saw.
    let status = rs_api.get_status("web").await.unwrap().status.unwrap();
    assert_eq!(status.observed_generation, Some(2));
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_sync_creates_a_replicaset_and_rolls_a_new_one_on_a_template_change() {
    let api = start_api().await;
    let client = api.client.clone();
    let factory = Factory::new(client.clone(), None);
    let dc =
        r8s_controllers::deployment::DeploymentController::new(&factory, Events::new(client.clone(), "test"));
    let d_cache = factory.get::<Deployment>().store();
    let rs_cache = factory.get::<ReplicaSet>().store();
    let stop = CancellationToken::new();
    let _informers = factory.start(&stop);

    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "web"}}, "template": template("nginx:1")}
    }))
    .unwrap();
    let d_api = Api::<Deployment>::namespaced(client.clone(), "default");
    d_api.create(&PostParams::default(), &d).await.unwrap();
    until("the deployment cache", || d_cache.state().len() == 1).await;
    dc.sync("default/web").await.unwrap();
    let rs_api = Api::<ReplicaSet>::namespaced(client.clone(), "default");
    let first = rs_api.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(first.len(), 1);
    let first = &first[0];
    let hash = first.metadata.labels.as_ref().unwrap()["pod-template-hash"].clone();
    assert_eq!(
        first.metadata.name.as_deref(),
        Some(format!("web-{hash}").as_str())
    );
    assert_eq!(first.spec.as_ref().unwrap().replicas, Some(4));
    assert_eq!(
        first.metadata.annotations.as_ref().unwrap()["deployment.kubernetes.io/revision"],
        "1"
    );

    // A new image: a second ReplicaSet at revision 2. The rolling update surges by 25 % of 4
    // (one pod), and since none of the old ReplicaSet's pods is available (no ReplicaSet
    // controller runs here) it may clean one unhealthy replica up: 5 wanted in all, 3 must
    // stay available, 1 of the new is not yet (upstream's cleanupUnhealthyReplicas).
    d_api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": template("nginx:2")}})),
        )
        .await
        .unwrap();
    until("both caches", || {
        rs_cache.state().len() == 1 && d_cache.state().first().and_then(|d| d.metadata.generation) == Some(2)
    })
    .await;
    dc.sync("default/web").await.unwrap();
    let all = rs_api.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(all.len(), 2);
    let new = all
        .iter()
        .find(|r| r.metadata.name != first.metadata.name)
        .unwrap();
    assert_eq!(
        new.metadata.annotations.as_ref().unwrap()["deployment.kubernetes.io/revision"],
        "2"
    );
    let replicas = |r: &ReplicaSet| r.spec.as_ref().unwrap().replicas.unwrap_or(0);
    let old = all
        .iter()
        .find(|r| r.metadata.name == first.metadata.name)
        .unwrap();
    assert_eq!((replicas(old), replicas(new)), (3, 1));
    stop.cancel();
}

/// A CronJob whose last run was minutes ago runs the most recent missed time once, naming the
/// Job after that minute and recording it as active and as the last schedule time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cronjob_sync_runs_the_most_recent_missed_time_once() {
    use k8s_openapi::api::batch::v1::{CronJob, Job};
    let api = start_api().await;
    let client = api.client.clone();
    let factory = Factory::new(client.clone(), None);
    let cjc = r8s_controllers::cronjob::CronJobController::new(&factory, Events::new(client.clone(), "test"));
    let cj_cache = factory.get::<CronJob>().store();
    let stop = CancellationToken::new();
    factory.start(&stop);
    let cj_api = Api::<CronJob>::namespaced(client.clone(), "default");
    let cj: CronJob = serde_json::from_value(json!({
        "metadata": {"name": "tick"},
        "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "OnFailure", "containers": [{"name": "c", "image": "busybox"}]}}}}}
    }))
    .unwrap();
    let mut cj = cj_api.create(&PostParams::default(), &cj).await.unwrap();
    let five_ago = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(300);
    cj.status = Some(serde_json::from_value(json!({"lastScheduleTime": five_ago.to_string()})).unwrap());
    cj_api
        .replace_status("tick", &PostParams::default(), &cj)
        .await
        .unwrap();
    until("the CronJob in the cache", || {
        cj_cache
            .state()
            .iter()
            .any(|c| c.status.as_ref().is_some_and(|s| s.last_schedule_time.is_some()))
    })
    .await;
    let again = cjc.sync("default/tick").await.unwrap();
    assert!(again.is_some_and(|d| d <= Duration::from_secs(61)), "{again:?}");
    let jobs = Api::<Job>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(jobs.len(), 1, "one Job for the most recent missed minute");
    let minute = jiff::Timestamp::now().as_second() / 60;
    assert_eq!(
        jobs[0].metadata.name.as_deref(),
        Some(format!("tick-{minute}").as_str())
    );
    let cj = cj_api.get("tick").await.unwrap();
    let status = cj.status.unwrap();
    assert_eq!(status.active.unwrap().len(), 1);
    assert_eq!(status.last_schedule_time.unwrap().0.as_second(), minute * 60);
    stop.cancel();
}

/// A controller writing as its own ServiceAccount writes through the leader's fence as the
/// controller manager's own client does: a leader that stalled and woke (its fence lapsed)
/// writes nothing through it, not even with credentials of the controller's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controllers_own_credentials_write_only_within_the_leaders_fence() {
    let api = start_api().await;
    let dir = tempfile::tempdir().unwrap();
    let creds = r8s_controllers::credentials::Credentials::ServiceAccounts {
        config: Box::new(api.config.clone()),
        dir: dir.path().to_path_buf(),
    };
    let fence = r8s_client::leader::Fence::default();
    let stop = CancellationToken::new();
    let own = r8s_controllers::credentials::client_for(
        &api.client,
        &creds,
        Some(&fence),
        "replicaset-controller",
        &stop,
    )
    .await
    .unwrap();
    let as_own: Api<ConfigMap> = Api::namespaced(own.clone(), "default");
    let as_admin: Api<ConfigMap> = Api::namespaced(api.client.clone(), "default");
    let stale = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("stale".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    // No renewal within the renew deadline: refused before reaching the server.
    let refused = as_own.create(&PostParams::default(), &stale).await;
    assert!(
        matches!(&refused, Err(kube::Error::Service(e)) if e.to_string().contains("not leading")),
        "{refused:?}"
    );
    assert!(as_admin.get_opt("stale").await.unwrap().is_none());
    // Reads go through.
    as_own.list(&ListParams::default()).await.unwrap();
    // A renewal just now: writes go through, as the controller's ServiceAccount.
    fence.set(Some(std::time::Instant::now() + Duration::from_secs(10)));
    let review: SelfSubjectReview = Api::all(own)
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .unwrap();
    let user = review.status.and_then(|s| s.user_info).and_then(|u| u.username);
    assert_eq!(
        user.as_deref(),
        Some("system:serviceaccount:kube-system:replicaset-controller")
    );
    stop.cancel();
}
