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
