//! The custom resource benchmark (issue 38): a real `r8s server` (API server alone, embedded
//! datastore) driven over TLS.
//!
//!   cargo build --release -p r8s --bins --examples && target/release/examples/crd-bench
//!
//! 1. CRD to first instance: create a CRD, then try to create its first instance every 2 ms
//!    until one is accepted; the time from the CRD's create to that instance (20 rounds).
//! 2. Create throughput of a custom resource whose schema has 50 fields and 5 CEL rules,
//!    against ConfigMaps in the same run: 64 concurrent clients, the two kinds alternated
//!    (ConfigMaps, custom resources, ConfigMaps, custom resources) so neither gets the warm
//!    or the cold half of the run.

#[path = "common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::Api;
use serde_json::{json, Value};

fn crd(plural: &str, kind: &str, fields: usize, rules: usize) -> Value {
    let mut props = serde_json::Map::new();
    for i in 0..fields {
        let schema = match i % 5 {
            0 => json!({"type": "string", "maxLength": 64}),
            1 => json!({"type": "integer", "minimum": 0, "maximum": 1_000_000}),
            2 => json!({"type": "string", "enum": ["a", "b", "c"]}),
            3 => json!({"type": "boolean"}),
            _ => json!({"type": "string", "pattern": "^[a-z0-9-]+$"}),
        };
        props.insert(format!("f{i:02}"), schema);
    }
    let checks = [
        "self.f01 >= 0",
        "self.f00.size() <= 64",
        "self.f02 in ['a', 'b', 'c']",
        "!self.f03 || self.f06 < 1000000",
        "self.f04.startsWith('x')",
    ];
    let validations: Vec<Value> = checks.iter().take(rules).map(|r| json!({"rule": r})).collect();
    let mut spec = json!({"type": "object", "properties": props});
    if !validations.is_empty() {
        spec["x-kubernetes-validations"] = json!(validations);
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.bench.example.com")},
        "spec": {
            "group": "bench.example.com",
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec}}}}],
        },
    })
}

fn instance(kind: &str, name: &str, fields: usize) -> DynamicObject {
    let mut spec = serde_json::Map::new();
    for i in 0..fields {
        let v = match i % 5 {
            0 => json!(format!("value-{i}")),
            1 => json!(i * 1000),
            2 => json!("b"),
            3 => json!(true),
            _ => json!(format!("x-{i}")),
        };
        spec.insert(format!("f{i:02}"), v);
    }
    serde_json::from_value(json!({
        "apiVersion": "bench.example.com/v1", "kind": kind,
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap()
}

fn configmap(name: &str, fields: usize) -> DynamicObject {
    let data: serde_json::Map<String, Value> = (0..fields)
        .map(|i| (format!("f{i:02}"), json!(format!("value-{i}"))))
        .collect();
    serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}),
    )
    .unwrap()
}

async fn post_crd(client: &kube::Client, body: &Value) {
    let req = http::Request::post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(body).unwrap())
        .unwrap();
    client.request_text(req).await.unwrap();
}

/// Create `n` objects with 64 concurrent clients: creates per second.
async fn creates(
    api: &Api<DynamicObject>,
    n: usize,
    make: Arc<dyn Fn(usize) -> DynamicObject + Send + Sync>,
) -> f64 {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let (api, next, make) = (api.clone(), next.clone(), make.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return;
                    }
                    api.create(&PostParams::default(), &make(i)).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    n as f64 / started.elapsed().as_secs_f64()
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let objects = common::arg("--objects", 4_000);
    let rounds = common::arg("--rounds", 20);
    let dir = tempfile::tempdir().unwrap();
    let (mut server, client) = common::start_server(
        dir.path(),
        &[
            "--disable-agent",
            "--disable-controller-manager",
            "--disable-scheduler",
        ],
        None,
    )
    .await;
    println!(
        "crd-bench: r8s server pid {}, {rounds} CRDs, {objects} objects of each kind per half",
        server.id()
    );

    // 1. CRD to first instance.
    let mut took = Vec::new();
    for r in 0..rounds {
        let (plural, kind) = (format!("probe{r}s"), format!("Probe{r}"));
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("bench.example.com", "v1", &kind),
            &plural,
        );
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
        let t = Instant::now();
        post_crd(&client, &crd(&plural, &kind, 5, 0)).await;
        loop {
            if api
                .create(&PostParams::default(), &instance(&kind, "first", 5))
                .await
                .is_ok()
            {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(30), "the CRD never served");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        took.push(t.elapsed());
    }
    took.sort();
    println!(
        "CRD create to first instance created: p50 {}  max {}  ({} rounds)",
        common::ms(common::pct(&took, 0.5)),
        common::ms(common::pct(&took, 1.0)),
        took.len()
    );

    // 2. Throughput, 50 fields and 5 CEL rules against ConfigMaps of 50 keys.
    post_crd(&client, &crd("widgets", "Widget", 50, 5)).await;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("bench.example.com", "v1", "Widget"),
        "widgets",
    );
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let t = Instant::now();
    while widgets
        .create(&PostParams::default(), &instance("Widget", "warm", 50))
        .await
        .is_err()
    {
        assert!(t.elapsed() < Duration::from_secs(30));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let cm_ar = ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap"));
    let cms: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &cm_ar);
    let (mut cm_rates, mut cr_rates) = (Vec::new(), Vec::new());
    for half in 0..2 {
        cm_rates.push(
            creates(
                &cms,
                objects,
                Arc::new(move |i| configmap(&format!("cm-{half}-{i:06}"), 50)),
            )
            .await,
        );
        cr_rates.push(
            creates(
                &widgets,
                objects,
                Arc::new(move |i| instance("Widget", &format!("w-{half}-{i:06}"), 50)),
            )
            .await,
        );
    }
    let avg = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    println!(
        "creates/s, 64 clients: ConfigMaps {:.0} ({}), custom resources (50 fields, 5 CEL rules) {:.0} ({}): {:.0}% of ConfigMaps",
        avg(&cm_rates),
        cm_rates.iter().map(|r| format!("{r:.0}")).collect::<Vec<_>>().join(", "),
        avg(&cr_rates),
        cr_rates.iter().map(|r| format!("{r:.0}")).collect::<Vec<_>>().join(", "),
        100.0 * avg(&cr_rates) / avg(&cm_rates)
    );
    println!(
        "server RSS after the run: {:.0} MiB",
        common::rss_mib(server.id())
    );
    let _ = server.kill();
    let _ = server.wait();
}
