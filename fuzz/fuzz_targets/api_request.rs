//! Requests to a real API server running in this process (embedded datastore in a temporary
//! directory, upstream's default admission plugins but the webhooks, every authorization
//! allowed), sent over TLS by the admin: `data[0]` picks the method, `data[1]` the path (or
//! the input's first line is the path), `data[2]` the body's media type (JSON, YAML, protobuf,
//! the three patch kinds, apply); the first line is the query string, the rest the body.
//!
//! The oracle is upstream's: bad input is a 4xx with a Status, never a panic (the fuzzer's
//! panic hook aborts on one even though the server would catch it) and never a 500, and no
//! request hangs. Watches and `follow` are left out (they stream until cancelled).
//!
//! The server may dial what objects name (aggregated APIs, Service proxies): run this target
//! only in a network namespace of its own (`scripts/fuzz.sh` does; it refuses otherwise).
#![no_main]
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http_body_util::BodyExt;
use r8s_apiserver::admission as adm;

struct World {
    rt: tokio::runtime::Runtime,
    client: kube::Client,
    _server: r8s_apiserver::ApiServer,
    _dir: tempfile::TempDir,
}

/// Only `lo` in this network namespace (`/proc/self/net/dev` lists this namespace's devices).
fn isolated() -> bool {
    let devices = std::fs::read_to_string("/proc/self/net/dev").unwrap_or_default();
    devices
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .all(|name| name.trim() == "lo")
}

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        assert!(
            isolated(),
            "run api_request in a network namespace of its own (scripts/fuzz.sh does)"
        );
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let (client, server, dir) = rt.block_on(start());
        World {
            rt,
            client,
            _server: server,
            _dir: dir,
        }
    })
}

async fn start() -> (kube::Client, r8s_apiserver::ApiServer, tempfile::TempDir) {
    // tmpfs when there is one: the datastore syncs every commit.
    let dir = tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .expect("a temporary directory");
    let store: Arc<dyn r8s_store::Store> = Arc::new(
        r8s_store::embedded::EmbeddedStore::open(r8s_store::embedded::EmbeddedOptions::new(
            dir.path().join("db"),
        ))
        .expect("the datastore"),
    );
    let pki = r8s_apiserver::pki::Pki::ensure(&dir.path().join("tls"), &["127.0.0.1".to_string()])
        .expect("the PKI");
    let mut authenticators = r8s_apiserver::authn::AuthenticatorChain::default();
    authenticators.push(r8s_apiserver::authn::X509Authenticator::default());
    let mut authorizers = r8s_apiserver::authz::AuthorizerChain::default();
    authorizers.push(r8s_apiserver::authz::AlwaysAllow);

    // Upstream's default plugins in upstream's order, as `r8s server` builds them, without the
    // two webhooks.
    let lister_store: Arc<dyn r8s_store::Store> =
        adm::listers::ListerStore::start(store.clone(), adm::listers::ADMISSION_PREFIXES);
    let listers = adm::listers::Listers::new(lister_store.clone());
    let mut admission = adm::AdmissionChain::default();
    admission.push_mutating(adm::namespace_lifecycle::NamespaceLifecycle {
        listers: listers.clone(),
    });
    admission.push_mutating(adm::limit_ranger::LimitRanger {
        listers: listers.clone(),
    });
    admission.push_mutating(adm::service_account::ServiceAccount {
        listers: listers.clone(),
    });
    admission.push_mutating(adm::priority::Priority {
        listers: listers.clone(),
    });
    admission.push_mutating(adm::tolerations::DefaultTolerationSeconds::default());
    admission.push_mutating(adm::runtime_class::RuntimeClass {
        listers: listers.clone(),
    });
    admission.push_mutating(adm::default_storage_class::DefaultStorageClass {
        listers: listers.clone(),
    });
    admission.push_mutating(adm::storage_protection::StorageObjectInUseProtection);
    admission.push_mutating(adm::default_ingress_class::DefaultIngressClass {
        listers: listers.clone(),
    });
    admission.push_validating(adm::limit_ranger::LimitRanger {
        listers: listers.clone(),
    });
    admission.push_validating(adm::service_account::ServiceAccount {
        listers: listers.clone(),
    });
    admission.push_validating(adm::runtime_class::RuntimeClass {
        listers: listers.clone(),
    });
    admission.push_validating(adm::pvc_resize::PersistentVolumeClaimResize {
        listers: listers.clone(),
    });
    admission.push_validating(adm::node_restriction::NodeRestriction);
    admission.push_validating(adm::pod_security::PodSecurity {
        listers: listers.clone(),
    });
    admission.push_validating(adm::policy::ValidatingAdmissionPolicy::start(
        store.clone(),
        Some(authorizers.clone()),
    ));
    admission
        .push_validating(adm::resource_quota::ResourceQuota::new(store.clone()).with_lister(lister_store));

    let server = r8s_apiserver::ApiServer::start(r8s_apiserver::ApiServerConfig {
        serving: r8s_apiserver::ServingConfig {
            bind_address: "127.0.0.1".parse().expect("loopback"),
            port: 0,
            cert_pem: format!("{}{}", pki.serving_cert_pem, pki.ca_cert_pem),
            key_pem: pki.serving_key_pem.clone(),
            client_ca_pem: pki.ca_cert_pem.clone(),
        },
        store,
        authenticators,
        authorizers,
        admission,
        service_cidrs: r8s_apiserver::ServiceCidrs::parse("10.43.0.0/16").expect("a range"),
        rbac: None,
        service_account_tokens: None,
        audit: None,
        kubelet: None,
        advertise_address: None,
        metric_resolution: Duration::from_secs(15),
        proxy_identity: None,
        request_header: None,
        priority_and_fairness: true,
        request_timeout: std::time::Duration::from_secs(60),
        lookup: None,
    })
    .await
    .expect("the API server");
    let kubeconfig = pki.admin_kubeconfig(&format!("https://{}", server.local_addr));
    let kc = kube::config::Kubeconfig::from_yaml(&kubeconfig).expect("the admin kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("a client configuration");
    let client = kube::Client::try_from(config).expect("a client");
    // The namespace the paths name, and a custom resource to write.
    for (path, body) in [
        ("/api/v1/namespaces", r#"{"metadata":{"name":"fuzz"}}"#),
        (
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            r#"{"metadata":{"name":"widgets.fuzz.example.com"},"spec":{"group":"fuzz.example.com","scope":"Namespaced",
               "names":{"plural":"widgets","singular":"widget","kind":"Widget"},
               "versions":[{"name":"v1","served":true,"storage":true,"subresources":{"status":{},"scale":{"specReplicasPath":".spec.replicas","statusReplicasPath":".status.replicas"}},
                 "schema":{"openAPIV3Schema":{"type":"object","properties":{"spec":{"type":"object",
                   "x-kubernetes-validations":[{"rule":"self.replicas <= 10","message":"too many"}],
                   "properties":{"replicas":{"type":"integer","default":1},"size":{"type":"string","pattern":"^[a-z]+$"},
                     "ports":{"type":"array","x-kubernetes-list-type":"map","x-kubernetes-list-map-keys":["port"],
                       "items":{"type":"object","required":["port"],"properties":{"port":{"type":"integer"},"name":{"type":"string"}}}},
                     "extra":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}},
                   "status":{"type":"object","properties":{"replicas":{"type":"integer"}}}}}}}]}}"#,
        ),
    ] {
        let req = http::Request::post(path)
            .header("content-type", "application/json")
            .body(kube::client::Body::from(body.as_bytes().to_vec()))
            .expect("a request");
        let resp = client.send(req).await.expect("the setup request");
        assert!(resp.status().is_success(), "setup {path}: {}", resp.status());
    }
    // The custom resource is served once its CRD is established.
    for _ in 0..100 {
        let req = http::Request::get("/apis/fuzz.example.com/v1/namespaces/fuzz/widgets")
            .body(kube::client::Body::empty())
            .expect("a request");
        if client.send(req).await.is_ok_and(|r| r.status().is_success()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (client, server, dir)
}

/// The paths `data[1]` picks.
const PATHS: &[&str] = &[
    "/api/v1/namespaces/fuzz/pods",
    "/api/v1/namespaces/fuzz/pods/x",
    "/api/v1/namespaces/fuzz/pods/x/status",
    "/api/v1/namespaces/fuzz/pods/x/ephemeralcontainers",
    "/api/v1/namespaces/fuzz/pods/x/binding",
    "/api/v1/namespaces/fuzz/pods/x/eviction",
    "/api/v1/namespaces/fuzz/pods/x/resize",
    "/api/v1/namespaces/fuzz/configmaps",
    "/api/v1/namespaces/fuzz/configmaps/x",
    "/api/v1/namespaces/fuzz/secrets",
    "/api/v1/namespaces/fuzz/secrets/x",
    "/api/v1/namespaces/fuzz/services",
    "/api/v1/namespaces/fuzz/services/x",
    "/api/v1/namespaces/fuzz/services/x/status",
    "/api/v1/namespaces/fuzz/endpoints/x",
    "/api/v1/namespaces/fuzz/serviceaccounts/x",
    "/api/v1/namespaces/fuzz/serviceaccounts/x/token",
    "/api/v1/namespaces/fuzz/persistentvolumeclaims/x",
    "/api/v1/namespaces/fuzz/limitranges/x",
    "/api/v1/namespaces/fuzz/resourcequotas/x",
    "/api/v1/namespaces/fuzz/replicationcontrollers/x",
    "/api/v1/namespaces/fuzz/replicationcontrollers/x/scale",
    "/api/v1/namespaces/fuzz/podtemplates/x",
    "/api/v1/namespaces/fuzz/events",
    "/api/v1/nodes",
    "/api/v1/nodes/x",
    "/api/v1/nodes/x/status",
    "/api/v1/persistentvolumes/x",
    "/api/v1/namespaces",
    "/api/v1/namespaces/x",
    "/api/v1/namespaces/x/finalize",
    "/apis/apps/v1/namespaces/fuzz/deployments",
    "/apis/apps/v1/namespaces/fuzz/deployments/x",
    "/apis/apps/v1/namespaces/fuzz/deployments/x/scale",
    "/apis/apps/v1/namespaces/fuzz/deployments/x/status",
    "/apis/apps/v1/namespaces/fuzz/replicasets/x",
    "/apis/apps/v1/namespaces/fuzz/statefulsets/x",
    "/apis/apps/v1/namespaces/fuzz/daemonsets/x",
    "/apis/apps/v1/namespaces/fuzz/controllerrevisions/x",
    "/apis/batch/v1/namespaces/fuzz/jobs",
    "/apis/batch/v1/namespaces/fuzz/jobs/x",
    "/apis/batch/v1/namespaces/fuzz/cronjobs/x",
    "/apis/autoscaling/v1/namespaces/fuzz/horizontalpodautoscalers/x",
    "/apis/autoscaling/v2/namespaces/fuzz/horizontalpodautoscalers/x",
    "/apis/policy/v1/namespaces/fuzz/poddisruptionbudgets/x",
    "/apis/networking.k8s.io/v1/namespaces/fuzz/networkpolicies/x",
    "/apis/networking.k8s.io/v1/namespaces/fuzz/ingresses/x",
    "/apis/networking.k8s.io/v1/ingressclasses/x",
    "/apis/networking.k8s.io/v1/servicecidrs/x",
    "/apis/networking.k8s.io/v1/ipaddresses/x",
    "/apis/discovery.k8s.io/v1/namespaces/fuzz/endpointslices/x",
    "/apis/coordination.k8s.io/v1/namespaces/fuzz/leases/x",
    "/apis/events.k8s.io/v1/namespaces/fuzz/events/x",
    "/apis/rbac.authorization.k8s.io/v1/clusterroles/x",
    "/apis/rbac.authorization.k8s.io/v1/namespaces/fuzz/roles/x",
    "/apis/rbac.authorization.k8s.io/v1/namespaces/fuzz/rolebindings/x",
    "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/x",
    "/apis/storage.k8s.io/v1/storageclasses/x",
    "/apis/storage.k8s.io/v1/volumeattachments/x",
    "/apis/storage.k8s.io/v1/csidrivers/x",
    "/apis/storage.k8s.io/v1/csinodes/x",
    "/apis/scheduling.k8s.io/v1/priorityclasses/x",
    "/apis/node.k8s.io/v1/runtimeclasses/x",
    "/apis/certificates.k8s.io/v1/certificatesigningrequests/x",
    "/apis/certificates.k8s.io/v1/certificatesigningrequests/x/approval",
    "/apis/authorization.k8s.io/v1/subjectaccessreviews",
    "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
    "/apis/authorization.k8s.io/v1/namespaces/fuzz/localsubjectaccessreviews",
    "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
    "/apis/authentication.k8s.io/v1/tokenreviews",
    "/apis/authentication.k8s.io/v1/selfsubjectreviews",
    "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/x",
    "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/x",
    "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas/x",
    "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations/x",
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/x",
    "/apis/fuzz.example.com/v1/namespaces/fuzz/widgets",
    "/apis/fuzz.example.com/v1/namespaces/fuzz/widgets/x",
    "/apis/fuzz.example.com/v1/namespaces/fuzz/widgets/x/status",
    "/apis/fuzz.example.com/v1/namespaces/fuzz/widgets/x/scale",
    "/apis/apiregistration.k8s.io/v1/apiservices/x",
];

const MEDIA: &[&str] = &[
    "application/json",
    "application/vnd.kubernetes.protobuf",
    "application/yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];

const METHODS: &[http::Method] = &[
    http::Method::GET,
    http::Method::POST,
    http::Method::PUT,
    http::Method::PATCH,
    http::Method::DELETE,
];

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let [m, p, c, rest @ ..] = data else {
        return;
    };
    let (line, body) = match rest.iter().position(|b| *b == b'\n') {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => (rest, &[][..]),
    };
    let Ok(line) = std::str::from_utf8(line) else {
        return;
    };
    let uri = match PATHS.get(usize::from(*p)) {
        Some(path) if line.is_empty() => (*path).to_owned(),
        Some(path) => format!("{path}?{line}"),
        // Past the list: the line is the whole path and query.
        None if line.starts_with('/') => line.to_owned(),
        None => return,
    };
    // Streams that last until cancelled are not requests to judge here.
    let lower = uri.to_ascii_lowercase();
    if [
        "watch",
        "follow",
        "/proxy",
        "/exec",
        "/attach",
        "/portforward",
        "/log",
    ]
    .iter()
    .any(|w| lower.contains(w))
    {
        return;
    }
    let method = METHODS[usize::from(*m) % METHODS.len()].clone();
    let media = MEDIA[usize::from(*c) % MEDIA.len()];
    let Ok(req) = http::Request::builder()
        .method(method.clone())
        .uri(&uri)
        .header("content-type", media)
        .body(kube::client::Body::from(body.to_vec()))
    else {
        return;
    };
    let w = world();
    let answered = w.rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(20), async {
            let resp = w.client.send(req).await.ok()?;
            let status = resp.status();
            let bytes = resp.into_body().collect().await.ok()?.to_bytes();
            Some((status, bytes))
        })
        .await
    });
    let Ok(answer) = answered else {
        panic!("{method} {uri} ({media}) had no answer in 20 s");
    };
    // A transport error (the client refusing the URI) is not the server's.
    if let Some((status, bytes)) = answer {
        assert!(
            status != http::StatusCode::INTERNAL_SERVER_ERROR,
            "{method} {uri} ({media}) answered 500: {}",
            String::from_utf8_lossy(&bytes)
        );
    }
});
