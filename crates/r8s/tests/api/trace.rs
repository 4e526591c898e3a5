//! The journey recorder seen through the API: `GET /trace/<object path>` answers whoever may
//! get the object (and 403 to others, 404 for what does not exist), and each component's ring
//! keeps at most `--trace-ring-size` stages however many objects are written.

use crate::support;

use std::collections::BTreeMap;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::PostParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Api;
use serde_json::Value;
use support::Server;

const K: &str = "1.33";
const RING: usize = 300;
const OBJECTS: usize = 10_000;

fn metric(metrics: &str, name: &str) -> usize {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{metrics}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trace_endpoint_is_a_read_of_the_object_and_the_ring_stays_bounded() {
    let ring = RING.to_string();
    let server = Server::start_with(&["--trace-ring-size", &ring]);
    let kubeconfig = Kubeconfig::read_from(&server.kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");

    // Ten thousand objects written, sixteen at a time.
    let made = futures::stream::iter(0..OBJECTS)
        .map(|i| {
            let cms = cms.clone();
            async move {
                let cm = ConfigMap {
                    metadata: kube::api::ObjectMeta {
                        name: Some(format!("cm-{i}")),
                        ..Default::default()
                    },
                    data: Some(BTreeMap::from([("i".into(), i.to_string())])),
                    ..Default::default()
                };
                cms.create(&PostParams::default(), &cm).await.map(|_| ())
            }
        })
        .buffer_unordered(16)
        .filter(|r| std::future::ready(r.is_ok()))
        .count()
        .await;
    assert_eq!(made, OBJECTS);

    let metrics = server.ok(K, &["get", "--raw", "/metrics"]);
    assert_eq!(metric(&metrics, "r8s_trace_ring_capacity"), RING);
    let kept = metric(&metrics, "r8s_trace_ring_stages{component=\"apiserver\"}");
    assert!(kept <= RING && kept > RING / 2, "{kept} stages kept");

    // The last object's story is whole; the first one's has left the ring.
    let last = format!("/trace/api/v1/namespaces/default/configmaps/cm-{}", OBJECTS - 1);
    let story: Value = serde_json::from_str(&server.ok(K, &["get", "--raw", &last])).unwrap();
    assert_eq!(story["kind"], "Trace");
    assert_eq!(story["object"]["name"], format!("cm-{}", OBJECTS - 1));
    let stages = story["stages"].as_array().unwrap();
    let request = &stages[0];
    assert_eq!(request["stage"], "request");
    assert_eq!(request["uid"], story["object"]["uid"]);
    assert_eq!(request["fields"]["verb"], "create");
    assert_eq!(request["fields"]["code"], "201");
    for stage in ["authn", "authz", "admission", "store.create"] {
        assert!(
            stages.iter().any(|s| s["stage"] == stage && s["depth"] == 1),
            "{stage} in {story}"
        );
    }
    let first: Value = serde_json::from_str(&server.ok(
        K,
        &["get", "--raw", "/trace/api/v1/namespaces/default/configmaps/cm-0"],
    ))
    .unwrap();
    assert_eq!(first["stages"], serde_json::json!([]), "{first}");

    // Reading a story is reading the object: someone who may not is refused, as for a get.
    let refused = server.fails(K, &["get", "--raw", &last, "--as", "nobody"]);
    assert!(
        refused
            .contains(r#"configmaps "cm-9999" is forbidden: User "nobody" cannot get resource "configmaps""#),
        "{refused}"
    );
    let missing = server.fails(
        K,
        &[
            "get",
            "--raw",
            "/trace/api/v1/namespaces/default/configmaps/absent",
        ],
    );
    assert!(missing.contains(r#"configmaps "absent" not found"#), "{missing}");
}
