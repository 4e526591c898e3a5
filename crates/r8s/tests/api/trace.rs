//! The journey recorder seen through the API: `GET /trace/<object path>` answers whoever may
//! get the object (and 403 to others, 404 for what does not exist), and each component's ring
//! keeps at most `--trace-ring-size` stages however many objects are written (telling a
//! sample of writes that come faster than it holds); with
//! `--tracing-endpoint` the stages reach an OTLP collector as spans.

use crate::support;

use std::collections::BTreeMap;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::PostParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Api;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use opentelemetry_proto::tonic::trace::v1::Span;
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
    // Far more writes than the ring holds, this fast: most were not told (a sample was).
    let untold = metric(&metrics, "r8s_trace_requests_untold_total");
    assert!(untold > OBJECTS / 2 && untold < OBJECTS, "{untold} writes untold");

    // A write once the rush is over is told whole; the first one's story has left the ring.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    server.ok(K, &["create", "configmap", "cm-last", "--from-literal=i=last"]);
    let last = "/trace/api/v1/namespaces/default/configmaps/cm-last";
    let story: Value = serde_json::from_str(&server.ok(K, &["get", "--raw", last])).unwrap();
    assert_eq!(story["kind"], "Trace");
    assert_eq!(story["object"]["name"], "cm-last");
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
    let refused = server.fails(K, &["get", "--raw", last, "--as", "nobody"]);
    assert!(
        refused
            .contains(r#"configmaps "cm-last" is forbidden: User "nobody" cannot get resource "configmaps""#),
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

/// A collector: what OTLP exports it receives, handed to the test.
struct Collector(tokio::sync::mpsc::UnboundedSender<ExportTraceServiceRequest>);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let _ = self.0.send(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

fn attribute<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a str> {
    attributes
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| match &a.value.as_ref()?.value {
            Some(any_value::Value::StringValue(s)) => Some(s.as_str()),
            _ => None,
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_journey_is_exported_over_otlp_with_tracing_endpoint() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (tx, mut exports) = tokio::sync::mpsc::unbounded_channel();
    let collector = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(Collector(tx)))
            .serve(([127, 0, 0, 1], port).into()),
    );
    let endpoint = format!("http://127.0.0.1:{port}");
    let server = Server::start_with(&["--tracing-endpoint", &endpoint]);
    server.ok(K, &["create", "configmap", "exported", "--from-literal=a=b"]);
    let uid = server.ok(
        K,
        &["get", "configmap", "exported", "-o", "jsonpath={.metadata.uid}"],
    );

    // The create's spans arrive: the request in the configmap's trace, its stages nested in it.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut spans = Vec::new();
    while !spans
        .iter()
        .any(|(_, s): &(String, Span)| s.name == "store.create")
    {
        let export = tokio::time::timeout_at(deadline, exports.recv())
            .await
            .expect("the create's spans within 30 s")
            .unwrap();
        for rs in export.resource_spans {
            let service = attribute(&rs.resource.unwrap_or_default().attributes, "service.name")
                .unwrap_or("")
                .to_owned();
            for ss in rs.scope_spans {
                for s in ss.spans {
                    if attribute(&s.attributes, "r8s.uid") == Some(uid.as_str()) {
                        spans.push((service.clone(), s));
                    }
                }
            }
        }
    }
    let (service, request) = spans
        .iter()
        .find(|(_, s)| s.name == "request")
        .expect("the request span");
    assert_eq!(service, "r8s-apiserver");
    assert_eq!(attribute(&request.attributes, "r8s.verb"), Some("create"));
    assert_eq!(
        attribute(&request.attributes, "r8s.object"),
        Some("ConfigMap default/exported")
    );
    let trace: Vec<u8> = uid
        .replace('-', "")
        .as_bytes()
        .chunks(2)
        .map(|h| u8::from_str_radix(std::str::from_utf8(h).unwrap(), 16).unwrap())
        .collect();
    assert_eq!(request.trace_id, trace, "the trace is the object's uid");
    assert!(request.parent_span_id.is_empty());
    for name in ["authn", "authz", "admission", "store.create"] {
        let (_, s) = spans
            .iter()
            .find(|(_, s)| s.name == name)
            .unwrap_or_else(|| panic!("{name}"));
        assert_eq!(s.trace_id, trace);
        assert_eq!(s.parent_span_id, request.span_id, "{name} in the request");
        assert!(s.start_time_unix_nano >= request.start_time_unix_nano);
        assert!(s.end_time_unix_nano <= request.end_time_unix_nano);
    }
    collector.abort();
}
