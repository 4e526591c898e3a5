//! Wire behaviour other official clients depend on (issue 23), checked on raw HTTP through
//! kube-rs's client: boolean query parameters as upstream decodes them (the Python client's
//! `watch=True`), error bodies byte for byte, malformed patches as 4xx, and fields upstream
//! always returns.

use crate::support;

use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Client;
use support::Server;

async fn client(server: &Server) -> Client {
    let kubeconfig = Kubeconfig::read_from(&server.kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

async fn send(
    client: &Client,
    method: Method,
    path: &str,
    content_type: &str,
    body: &str,
) -> (StatusCode, String) {
    let what = format!("{method} {path}");
    tokio::time::timeout(
        std::time::Duration::from_secs(30),
        send_now(client, method, path, content_type, body),
    )
    .await
    .unwrap_or_else(|_| panic!("{what}: no answer within 30 s"))
}

async fn send_now(
    client: &Client,
    method: Method,
    path: &str,
    content_type: &str,
    body: &str,
) -> (StatusCode, String) {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .body(kube::client::Body::from(body.as_bytes().to_vec()))
        .unwrap();
    let resp = client.send(req).await.unwrap();
    let code = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (code, String::from_utf8_lossy(&bytes).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_see_upstreams_wire_behaviour() {
    let server = Server::start();
    let c = client(&server).await;
    let json = "application/json";
    let (code, _) = send(
        &c,
        Method::POST,
        "/api/v1/namespaces/default/configmaps",
        json,
        r#"{"metadata": {"name": "one"}, "data": {"a": "1"}}"#,
    )
    .await;
    assert_eq!(code, StatusCode::CREATED);

    // `watch=True` (Python) is a watch: events, not a list.
    let (code, body) = send(
        &c,
        Method::GET,
        "/api/v1/namespaces/default/configmaps?watch=True&timeoutSeconds=1",
        json,
        "",
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    let first: serde_json::Value = serde_json::from_str(body.lines().next().unwrap()).unwrap();
    assert_eq!(first["type"], "ADDED", "{body}");
    // `watch=false` is a list.
    let (_, body) = send(
        &c,
        Method::GET,
        "/api/v1/namespaces/default/configmaps?watch=False",
        json,
        "",
    )
    .await;
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["kind"],
        "ConfigMapList"
    );

    // An error body is upstream's, byte for byte (fields in Go's order).
    let (code, body) = send(&c, Method::GET, "/api/v1/namespaces/default/pods/nope", json, "").await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert_eq!(
        body.trim_end(),
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"nope\" not found","reason":"NotFound","details":{"name":"nope","kind":"pods"},"code":404}"#
    );

    // A merge patch that is not an object: 400 with upstream's message, and nothing changed.
    for (patch, message) in [
        (
            "[1]",
            "json: cannot unmarshal array into Go value of type map[string]interface {}",
        ),
        ("3", "Invalid JSON Patch"),
        ("\"x\"", "Invalid JSON Patch"),
    ] {
        let (code, body) = send(
            &c,
            Method::PATCH,
            "/api/v1/namespaces/default/configmaps/one",
            "application/merge-patch+json",
            patch,
        )
        .await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{patch}: {body}");
        let status: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(status["message"], message, "{patch}");
        assert_eq!(status["reason"], "BadRequest");
    }
    let (_, body) = send(
        &c,
        Method::GET,
        "/api/v1/namespaces/default/configmaps/one",
        json,
        "",
    )
    .await;
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["data"]["a"],
        "1"
    );

    // A Service comes back with status.loadBalancer {}, on create and on get.
    let (code, body) = send(
        &c,
        Method::POST,
        "/api/v1/namespaces/default/services",
        json,
        r#"{"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}}"#,
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["status"],
        serde_json::json!({"loadBalancer": {}})
    );
    let (_, body) = send(
        &c,
        Method::GET,
        "/api/v1/namespaces/default/services/web",
        json,
        "",
    )
    .await;
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["status"],
        serde_json::json!({"loadBalancer": {}})
    );
}

/// A bounded sweep of bad input over every verb and body type: truncated, wrongly typed,
/// deeply nested and oversized bodies, malformed selectors and query values. Nothing may
/// answer 5xx or take the server down; each answer is a Status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_never_answers_5xx() {
    let server = Server::start();
    let c = client(&server).await;
    let json = "application/json";
    for (path, body) in [
        (
            "/api/v1/namespaces/default/configmaps",
            r#"{"metadata": {"name": "cm"}}"#,
        ),
        (
            "/apis/apps/v1/namespaces/default/deployments",
            r#"{"metadata": {"name": "d"}, "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}}"#,
        ),
    ] {
        let (code, out) = send(&c, Method::POST, path, json, body).await;
        assert_eq!(code, StatusCode::CREATED, "{out}");
    }
    let nested = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let nested_object = format!("{}1{}", "{\"a\":".repeat(5_000), "}".repeat(5_000));
    let big = format!(
        "{{\"metadata\": {{\"name\": \"big\"}}, \"data\": {{\"a\": \"{}\"}}}}",
        "x".repeat(4 << 20)
    );
    let bodies: Vec<&str> = vec![
        "",
        "{",
        "[]",
        "1",
        "\"x\"",
        "null",
        "true",
        r#"{"metadata": 5}"#,
        r#"{"metadata": {"name": 5}}"#,
        r#"{"metadata": {"labels": []}}"#,
        r#"{"spec": "x", "metadata": {"name": "cm"}}"#,
        r#"{"kind": 5, "apiVersion": []}"#,
        r#"{"data": {"a": 1}, "metadata": {"name": "cm"}}"#,
        r#"[{"op": "replace"}]"#,
        r#"[{"op": "add", "path": 5}]"#,
        "\u{0}\u{1}\u{2}",
        &nested,
        &nested_object,
        &big,
    ];
    let writes: Vec<(Method, &str, &str)> = vec![
        (Method::POST, "/api/v1/namespaces/default/configmaps", json),
        (Method::PUT, "/api/v1/namespaces/default/configmaps/cm", json),
        (
            Method::PATCH,
            "/api/v1/namespaces/default/configmaps/cm",
            "application/merge-patch+json",
        ),
        (
            Method::PATCH,
            "/api/v1/namespaces/default/configmaps/cm",
            "application/strategic-merge-patch+json",
        ),
        (
            Method::PATCH,
            "/api/v1/namespaces/default/configmaps/cm",
            "application/json-patch+json",
        ),
        (
            Method::PATCH,
            "/api/v1/namespaces/default/configmaps/cm?fieldManager=t",
            "application/apply-patch+yaml",
        ),
        (Method::DELETE, "/api/v1/namespaces/default/configmaps/none", json),
        (Method::POST, "/apis/apps/v1/namespaces/default/deployments", json),
        (
            Method::PUT,
            "/apis/apps/v1/namespaces/default/deployments/d/scale",
            json,
        ),
        (
            Method::PATCH,
            "/apis/apps/v1/namespaces/default/deployments/d/status",
            "application/merge-patch+json",
        ),
        (
            Method::POST,
            "/api/v1/namespaces",
            "application/vnd.kubernetes.protobuf",
        ),
        (
            Method::POST,
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            json,
        ),
        (Method::POST, "/apis/authentication.k8s.io/v1/tokenreviews", json),
        (
            Method::POST,
            "/api/v1/namespaces/default/serviceaccounts/default/token",
            json,
        ),
        (Method::POST, "/api/v1/namespaces/default/pods/p/binding", json),
        (Method::PUT, "/api/v1/namespaces/default/finalize", json),
    ];
    let mut answered = 0;
    for (method, path, content_type) in &writes {
        for body in &bodies {
            let (code, out) = send(&c, method.clone(), path, content_type, body).await;
            let shown: String = body.chars().take(40).collect();
            assert!(
                code.as_u16() < 500,
                "{method} {path} ({content_type}) with {shown:?}: {code} {}",
                out.chars().take(300).collect::<String>()
            );
            if !code.is_success() {
                let status: serde_json::Value = serde_json::from_str(&out)
                    .unwrap_or_else(|_| panic!("{method} {path} with {shown:?}: not a Status: {out}"));
                assert_eq!(status["kind"], "Status", "{method} {path} with {shown:?}");
            }
            answered += 1;
        }
    }
    let queries = [
        "labelSelector=a%20in%20(",
        "labelSelector=!!",
        "fieldSelector===",
        "fieldSelector=spec.nodeName%3Dx",
        "limit=abc",
        "limit=-1",
        "resourceVersion=abc",
        "resourceVersion=abc&resourceVersionMatch=Exact",
        "resourceVersionMatch=Bogus&resourceVersion=1",
        "continue=%%%",
        "continue=eyJ4Ijo1fQ",
        "timeoutSeconds=-1&watch=1",
        "watch=1&resourceVersion=x",
        "watch=1&resourceVersion=99999999999999999999",
        "sendInitialEvents=true&watch=1&timeoutSeconds=1",
    ];
    for q in queries {
        for path in [
            "/api/v1/namespaces/default/configmaps",
            "/api/v1/pods",
            "/apis/apps/v1/namespaces/default/deployments",
        ] {
            let full = format!("{path}?{q}");
            let (code, out) = send(&c, Method::GET, &full, json, "").await;
            assert!(
                code.as_u16() < 500,
                "GET {full}: {code} {}",
                out.chars().take(300).collect::<String>()
            );
            answered += 1;
        }
    }
    // Still serving.
    let (code, body) = send(&c, Method::GET, "/readyz", json, "").await;
    assert_eq!(
        (code, body.as_str()),
        (StatusCode::OK, "ok"),
        "after {answered} bad requests"
    );
}

/// kube-rs's metadata calls (client-go's metadata client): `Accept: application/json;
/// as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1` on get, list, watch and patch answers
/// PartialObjectMetadata; the list form on a single object (and the reverse) is upstream's 406.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_only_reads_and_writes() {
    use futures::{StreamExt, TryStreamExt};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};

    let server = Server::start();
    let c = client(&server).await;
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "meta", "labels": {"a": "1"}}, "data": {"secret": "payload"}
    }))
    .unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();

    let got = cms.get_metadata("meta").await.unwrap();
    assert_eq!(got.metadata.labels.unwrap()["a"], "1");
    assert_eq!(got.types.unwrap().kind, "PartialObjectMetadata");
    let list = cms
        .list_metadata(&ListParams::default().fields("metadata.name=meta"))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].metadata.name.as_deref(), Some("meta"));

    let patched = cms
        .patch_metadata(
            "meta",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {"b": "2"}}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.labels.unwrap()["b"], "2");

    let mut events = cms
        .watch_metadata(
            &WatchParams::default().fields("metadata.name=meta").timeout(2),
            "0",
        )
        .await
        .unwrap()
        .boxed();
    match events.try_next().await.unwrap() {
        Some(WatchEvent::Added(m)) => assert_eq!(m.metadata.name.as_deref(), Some("meta")),
        other => panic!("{other:?}"),
    }

    // The raw bodies: no data, upstream's kinds; mismatched forms refused.
    let partial = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
    let partial_list = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
    let get = |accept: &'static str, path: &'static str| {
        let c = c.clone();
        async move {
            let req = Request::builder()
                .uri(path)
                .header("accept", accept)
                .body(kube::client::Body::empty())
                .unwrap();
            let resp = c.send(req).await.unwrap();
            let code = resp.status();
            let bytes = resp.into_body().collect().await.unwrap().to_bytes();
            (code, serde_json::from_slice::<serde_json::Value>(&bytes).unwrap())
        }
    };
    let (code, body) = get(partial, "/api/v1/namespaces/default/configmaps/meta").await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(body["apiVersion"], "meta.k8s.io/v1");
    assert!(body.get("data").is_none(), "{body}");
    let (code, body) = get(partial_list, "/api/v1/namespaces/default/configmaps").await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(body["kind"], "PartialObjectMetadataList");
    assert_eq!(body["items"][0]["kind"], "PartialObjectMetadata");
    let (code, body) = get(partial_list, "/api/v1/namespaces/default/configmaps/meta").await;
    assert_eq!(code, StatusCode::NOT_ACCEPTABLE, "{body}");
    assert_eq!(body["reason"], "NotAcceptable");
    assert_eq!(
        body["message"],
        "you requested PartialObjectMetadataList, but the requested object is not a list (*core.ConfigMap)"
    );
    let (code, body) = get(partial, "/api/v1/namespaces/default/configmaps").await;
    assert_eq!(code, StatusCode::NOT_ACCEPTABLE, "{body}");

    // An integer parameter that is not one: upstream's 400 with Go's words.
    let (code, body) = get(
        "application/json",
        "/api/v1/namespaces/default/configmaps?limit=abc",
    )
    .await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(
        body["message"],
        "strconv.ParseInt: parsing \"abc\": invalid syntax"
    );

    // A write answered as a Table (upstream renders every verb's object so).
    let req = Request::builder()
        .method(Method::PATCH)
        .uri("/api/v1/namespaces/default/configmaps/meta")
        .header("accept", "application/json;as=Table;g=meta.k8s.io;v=v1")
        .header("content-type", "application/merge-patch+json")
        .body(kube::client::Body::from(
            br#"{"metadata":{"labels":{"c":"3"}}}"#.to_vec(),
        ))
        .unwrap();
    let resp = c.send(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let table: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(table["kind"], "Table", "{table}");
    assert_eq!(table["rows"][0]["cells"][0], "meta", "{table}");
}

/// A paged list whose first page's revision has been compacted away (history older than one
/// compaction interval goes, however few revisions since, as kube-apiserver compacts): 410
/// Expired with upstream's message and, in the Status's metadata, a continue token that goes
/// on from the same key at the latest revision, so the pages together hold every object once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continue_past_compaction_gets_an_inconsistent_continue_token() {
    let server = Server::start_with(&["--datastore-compaction-interval", "1s"]);
    let c = client(&server).await;
    let json = "application/json";
    for i in 0..30 {
        let body = format!(r#"{{"metadata":{{"name":"cm-{i:02}"}}}}"#);
        let (code, out) = send(
            &c,
            Method::POST,
            "/api/v1/namespaces/default/configmaps",
            json,
            &body,
        )
        .await;
        assert_eq!(code, StatusCode::CREATED, "{out}");
    }
    let list = |token: String| {
        let c = c.clone();
        async move {
            let path = format!("/api/v1/namespaces/default/configmaps?limit=10&continue={token}");
            let (code, out) = send(&c, Method::GET, &path, json, "").await;
            (code, serde_json::from_str::<serde_json::Value>(&out).unwrap())
        }
    };
    let (code, first) = list(String::new()).await;
    assert_eq!(code, StatusCode::OK, "{first}");
    let names = |page: &serde_json::Value| -> Vec<String> {
        page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
            .filter(|n| n.starts_with("cm-"))
            .collect()
    };
    let mut seen = names(&first);
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();
    // A few writes elsewhere move the revision on; two compaction ticks later the first
    // page's revision is gone.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let expired = loop {
        let body = r#"{"metadata":{"generateName":"churn-"}}"#;
        send(
            &c,
            Method::POST,
            "/api/v1/namespaces/kube-system/configmaps",
            json,
            body,
        )
        .await;
        let (code, page) = list(token.clone()).await;
        if code == StatusCode::GONE {
            break page;
        }
        assert_eq!(code, StatusCode::OK, "{page}");
        assert!(
            std::time::Instant::now() < deadline,
            "the continue token never expired"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    };
    assert_eq!(expired["reason"], "Expired", "{expired}");
    assert!(
        expired["message"]
            .as_str()
            .unwrap()
            .starts_with("The provided continue parameter is too old to display a consistent list result."),
        "{expired}"
    );
    let mut token = expired["metadata"]["continue"]
        .as_str()
        .unwrap_or_else(|| panic!("no inconsistent continue token: {expired}"))
        .to_string();
    let mut revisions = Vec::new();
    while !token.is_empty() {
        let (code, page) = list(token).await;
        assert_eq!(code, StatusCode::OK, "{page}");
        seen.extend(names(&page));
        revisions.push(page["metadata"]["resourceVersion"].clone());
        token = page["metadata"]["continue"].as_str().unwrap_or("").to_string();
    }
    let expected: Vec<String> = (0..30).map(|i| format!("cm-{i:02}")).collect();
    assert_eq!(seen, expected, "every object once, in order");
    assert_ne!(
        revisions[0], first["metadata"]["resourceVersion"],
        "read at the latest revision"
    );
    assert!(revisions.iter().all(|r| *r == revisions[0]), "{revisions:?}");
}

/// An update without a resourceVersion is unconditional (upstream's GuaranteedUpdate): however
/// often someone else writes the object meanwhile, it is never refused with a 409 Conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_without_a_resource_version_never_conflicts() {
    let server = Server::start();
    let c = client(&server).await;
    let json = "application/json";
    let path = "/api/v1/namespaces/default/configmaps";
    let (code, out) = send(
        &c,
        Method::POST,
        path,
        json,
        r#"{"metadata":{"name":"cm"},"data":{"n":"0"}}"#,
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{out}");
    // Someone else keeps writing the object (a bounded number of times).
    let writer = {
        let c = c.clone();
        tokio::spawn(async move {
            for i in 0..400 {
                let body = format!(r#"{{"metadata":{{"labels":{{"w":"{i}"}}}}}}"#);
                let (code, out) = send(
                    &c,
                    Method::PATCH,
                    "/api/v1/namespaces/default/configmaps/cm",
                    "application/merge-patch+json",
                    &body,
                )
                .await;
                assert_eq!(code, StatusCode::OK, "{out}");
            }
        })
    };
    for i in 0..100 {
        let body = format!(r#"{{"metadata":{{"name":"cm"}},"data":{{"n":"{i}"}}}}"#);
        let (code, out) = send(
            &c,
            Method::PUT,
            "/api/v1/namespaces/default/configmaps/cm",
            json,
            &body,
        )
        .await;
        assert_eq!(code, StatusCode::OK, "update {i}: {out}");
    }
    writer.await.unwrap();
    // With a stale resourceVersion it is still a conflict.
    let body = r#"{"metadata":{"name":"cm","resourceVersion":"1"},"data":{"n":"x"}}"#;
    let (code, out) = send(
        &c,
        Method::PUT,
        "/api/v1/namespaces/default/configmaps/cm",
        json,
        body,
    )
    .await;
    assert_eq!(code, StatusCode::CONFLICT, "{out}");
}
