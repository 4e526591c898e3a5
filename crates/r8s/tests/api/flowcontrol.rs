//! API priority and fairness's configuration (issue 38): FlowSchemas and
//! PriorityLevelConfigurations served with upstream's bootstrap objects, defaults, columns and
//! status subresource.

use crate::support::Server;

#[test]
fn flow_schemas_and_priority_levels_are_served_with_the_bootstrap_configuration() {
    let server = Server::start();
    let k = "1.33";
    let schemas = server.ok(k, &["get", "flowschemas"]);
    let header = schemas.lines().next().unwrap();
    assert!(
        header.contains("PRIORITYLEVEL") && header.contains("MATCHINGPRECEDENCE"),
        "{schemas}"
    );
    assert!(
        schemas
            .lines()
            .any(|l| l.starts_with("exempt ") && l.contains(" 1 ")),
        "{schemas}"
    );
    assert!(
        schemas
            .lines()
            .any(|l| l.starts_with("catch-all ") && l.contains("10000") && l.contains("ByUser")),
        "{schemas}"
    );
    let levels = server.ok(k, &["get", "prioritylevelconfigurations"]);
    assert!(
        levels
            .lines()
            .any(|l| l.starts_with("workload-low ") && l.contains("Limited") && l.contains("100")),
        "{levels}"
    );

    // A new priority level gets upstream's queuing defaults.
    server.ok_stdin(k, &["create", "-f", "-"], "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\nmetadata: {name: batch}\nspec:\n  type: Limited\n  limited:\n    limitResponse: {type: Queue}\n");
    let q = server.ok(k, &["get", "prioritylevelconfiguration", "batch", "-o",
        "jsonpath={.spec.limited.nominalConcurrencyShares} {.spec.limited.limitResponse.queuing.queues} {.spec.limited.limitResponse.queuing.handSize} {.spec.limited.limitResponse.queuing.queueLengthLimit}"]);
    assert_eq!(q, "30 64 8 50");
    let fs = "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata: {name: batch}\nspec:\n  priorityLevelConfiguration: {name: batch}\n  matchingPrecedence: 0\n  rules:\n  - subjects: [{kind: Group, group: {name: batch-users}}]\n    resourceRules: [{verbs: ['*'], apiGroups: ['*'], resources: ['*'], namespaces: ['*']}]\n";
    let err = String::from_utf8(server.fails_stdin(k, &["create", "-f", "-"], fs)).unwrap();
    assert!(
        err.contains("spec.matchingPrecedence: Invalid value: 0: must be between 1 and 10000 inclusively"),
        "{err}"
    );
    server.ok_stdin(
        k,
        &["create", "-f", "-"],
        &fs.replace("matchingPrecedence: 0", "matchingPrecedence: 500"),
    );
    // The server keeps each schema's Dangling condition, as upstream's configuration
    // controller: False while its level exists, True while it does not.
    let dangling = |name: &str, want: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let got = server.ok(
                k,
                &["get", "flowschema", name, "-o",
                    "jsonpath={.status.conditions[?(@.type==\"Dangling\")].status} {.status.conditions[?(@.type==\"Dangling\")].reason}"],
            );
            if got == want {
                return;
            }
            assert!(std::time::Instant::now() < deadline, "{name}: {got}, not {want}");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    dangling("batch", "False Found");
    server.ok_stdin(
        k,
        &["create", "-f", "-"],
        &fs.replace("matchingPrecedence: 0", "matchingPrecedence: 600")
            .replace("metadata: {name: batch}", "metadata: {name: orphan}")
            .replace("{name: batch}", "{name: nowhere}"),
    );
    dangling("orphan", "True NotFound");
    server.ok_stdin(k, &["create", "-f", "-"], "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\nmetadata: {name: nowhere}\nspec:\n  type: Limited\n  limited:\n    limitResponse: {type: Reject}\n");
    dangling("orphan", "False Found");
    server.ok(
        k,
        &[
            "patch",
            "flowschema",
            "batch",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"conditions":[{"type":"Dangling","status":"False","reason":"Found"}]}}"#,
        ],
    );
    let dangling = server.ok(
        k,
        &[
            "get",
            "flowschema",
            "batch",
            "-o",
            "jsonpath={.status.conditions[0].type} {.metadata.generation}",
        ],
    );
    assert_eq!(dangling, "Dangling 1");
}

/// A request as `user` (in `groups`), through impersonation (flow control classifies the
/// impersonated user): its status code and how long it took.
async fn request_as(
    client: &kube::Client,
    user: &str,
    groups: &[&str],
    method: http::Method,
    uri: &str,
    body: Option<serde_json::Value>,
) -> (u16, std::time::Duration, Option<String>) {
    let mut req = http::Request::builder()
        .method(method)
        .uri(uri)
        .header("Impersonate-User", user);
    for g in groups {
        req = req.header("Impersonate-Group", *g);
    }
    if body.is_some() {
        req = req.header("Content-Type", "application/merge-patch+json");
    }
    let req = req
        .body(kube::client::Body::from(
            body.map(|b| serde_json::to_vec(&b).unwrap()).unwrap_or_default(),
        ))
        .unwrap();
    let t = std::time::Instant::now();
    let resp = client.send(req).await.unwrap();
    let retry = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let code = resp.status().as_u16();
    let _ = http_body_util::BodyExt::collect(resp.into_body()).await;
    (code, t.elapsed(), retry)
}

#[test]
fn a_flood_from_one_user_is_queued_and_shed_while_node_status_updates_keep_their_latency() {
    let server = Server::start();
    let k = "1.33";
    // The flooder's own narrow priority level: one seat (its single share against a large
    // level's thousand), none to borrow from the levels that lend, and one short queue.
    server.ok_stdin(k, &["create", "-f", "-"], "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\nmetadata: {name: reserved}\nspec:\n  type: Limited\n  limited:\n    nominalConcurrencyShares: 1000\n    limitResponse: {type: Reject}\n");
    server.ok_stdin(k, &["create", "-f", "-"], "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\nmetadata: {name: flood}\nspec:\n  type: Limited\n  limited:\n    nominalConcurrencyShares: 1\n    borrowingLimitPercent: 0\n    limitResponse: {type: Queue, queuing: {queues: 1, handSize: 1, queueLengthLimit: 1}}\n");
    server.ok_stdin(k, &["create", "-f", "-"], "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata: {name: flooders}\nspec:\n  priorityLevelConfiguration: {name: flood}\n  matchingPrecedence: 200\n  distinguisherMethod: {type: ByUser}\n  rules:\n  - subjects: [{kind: User, user: {name: flooder}}]\n    resourceRules: [{verbs: ['*'], apiGroups: ['*'], resources: ['*'], namespaces: ['*'], clusterScope: true}]\n");
    server.ok_stdin(
        k,
        &["create", "-f", "-"],
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n",
    );
    server.ok(
        k,
        &[
            "create",
            "clusterrolebinding",
            "flooder-view",
            "--clusterrole=view",
            "--user=flooder",
        ],
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let kubeconfig = kube::config::Kubeconfig::read_from(&server.kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
        let client = kube::Client::try_from(config).unwrap();
        // Something worth listing: 100 ConfigMaps of 20 kB (a LIST of them takes a while).
        let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> = kube::Api::namespaced(client.clone(), "default");
        for i in 0..100 {
            let cm: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("cm-{i}")}, "data": {"k": "x".repeat(20_000)}})).unwrap();
            cms.create(&Default::default(), &cm).await.unwrap();
        }
        // Forty clients, each on its own warmed-up connection (a TLS handshake per request
        // would pace the flood), fire together.
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(40));
        let mut flood = Vec::new();
        for _ in 0..40 {
            let kubeconfig = kube::config::Kubeconfig::read_from(&server.kubeconfig).unwrap();
            let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
            let c = kube::Client::try_from(config).unwrap();
            c.apiserver_version().await.unwrap();
            let barrier = barrier.clone();
            flood.push(tokio::spawn(async move {
                barrier.wait().await;
                let mut out = Vec::new();
                for _ in 0..5 {
                    out.push(request_as(&c, "flooder", &["system:authenticated"], http::Method::GET, "/api/v1/configmaps", None).await);
                }
                out
            }));
        }
        let mut node = Vec::new();
        for i in 0..30 {
            let patch = serde_json::json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": format!("r{i}")}]}});
            node.push(request_as(&client, "system:node:n1", &["system:nodes", "system:authenticated"], http::Method::PATCH, "/api/v1/nodes/n1/status", Some(patch)).await);
        }
        let mut flooded = Vec::new();
        for f in flood {
            flooded.extend(f.await.unwrap());
        }
        // kube-rs retries a 429 a few times as told (Retry-After): the flood is served at its
        // level's pace, what still ends in 429 is shed; the rejections show in the server's
        // metrics below. Nothing else goes wrong.
        assert!(flooded.iter().all(|(c, _, _)| *c == 200 || *c == 429), "{flooded:?}");
        assert!(flooded.iter().any(|(c, _, _)| *c == 200), "{flooded:?}");
        assert!(node.iter().all(|(c, _, _)| *c == 200), "{node:?}");
        let mut lat: Vec<_> = node.iter().map(|(_, d, _)| *d).collect();
        lat.sort();
        assert!(lat[lat.len() * 9 / 10] < std::time::Duration::from_secs(1), "node status p90 {:?}", lat[lat.len() * 9 / 10]);
    });
    let metrics = server.ok(k, &["get", "--raw", "/metrics"]);
    let count = |name: &str, labels: &[&str]| -> f64 {
        metrics
            .lines()
            .filter(|l| l.starts_with(name) && labels.iter().all(|x| l.contains(x)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let shed = count(
        "apiserver_flowcontrol_rejected_requests_total{",
        &["priority_level=\"flood\"", "reason=\"queue-full\""],
    );
    assert!(shed > 0.0, "a full queue sheds the flood:\n{metrics}");
    assert!(
        count(
            "apiserver_flowcontrol_dispatched_requests_total{",
            &["priority_level=\"flood\"", "flow_schema=\"flooders\""]
        ) >= 200.0
    );
    assert_eq!(
        count(
            "apiserver_flowcontrol_rejected_requests_total{",
            &["priority_level=\"node-high\""]
        ),
        0.0
    );
}
