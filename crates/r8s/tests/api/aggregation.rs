//! API aggregation (issue 38): an APIService with a service hands its group version to another
//! API server — here a small one on loopback, reached through its Service's endpoints. The
//! APIService becomes Available, discovery lists the group, and kubectl's requests for its
//! resources are proxied.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::Server;

/// The extension API server: wardle.example.com/v1alpha1 with one kind, Flunder.
fn wardle(path: String, _body: Value) -> Value {
    match path.as_str() {
        "/apis/wardle.example.com/v1alpha1" => json!({
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "wardle.example.com/v1alpha1",
            "resources": [{"name": "flunders", "singularName": "flunder", "namespaced": true, "kind": "Flunder",
                "verbs": ["get", "list"]}],
        }),
        p if p.ends_with("/flunders") => json!({
            "kind": "FlunderList", "apiVersion": "wardle.example.com/v1alpha1", "metadata": {"resourceVersion": "1"},
            "items": [{"apiVersion": "wardle.example.com/v1alpha1", "kind": "Flunder",
                "metadata": {"name": "first-flunder", "namespace": "default", "creationTimestamp": "2026-01-01T00:00:00Z"}}],
        }),
        _ => {
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404, "reason": "NotFound"})
        }
    }
}

fn eventually(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn an_aggregated_api_server_is_reached_through_r8s() {
    let backend =
        crate::support::https::HttpsServer::start(std::sync::Arc::new(|path: String, body: Value| {
            Box::pin(async move { wardle(path, body) })
        }));
    let server = Server::start();
    let k = "1.33";
    let port = backend.addr.port();
    server.ok_stdin(k, &["apply", "-f", "-"], &format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: wardle, namespace: default}}\nspec:\n  ports: [{{name: https, port: 443, targetPort: {port}}}]\n---\napiVersion: v1\nkind: Endpoints\nmetadata: {{name: wardle, namespace: default}}\nsubsets:\n- addresses: [{{ip: 127.0.0.1}}]\n  ports: [{{name: https, port: {port}}}]\n---\napiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {{name: v1alpha1.wardle.example.com}}\nspec:\n  group: wardle.example.com\n  version: v1alpha1\n  groupPriorityMinimum: 2000\n  versionPriority: 200\n  insecureSkipTLSVerify: true\n  service: {{namespace: default, name: wardle, port: 443}}\n"
    ));
    eventually(20, "the APIService to be Available", || {
        let out = server.kubectl(
            k,
            &[
                "get",
                "apiservice",
                "v1alpha1.wardle.example.com",
                "-o",
                "jsonpath={.status.conditions[0].status} {.status.conditions[0].reason}",
            ],
        );
        String::from_utf8_lossy(&out.stdout) == "True Passed"
    });
    let table = server.ok(k, &["get", "apiservices", "v1alpha1.wardle.example.com"]);
    assert!(
        table.contains("default/wardle") && table.contains("True"),
        "{table}"
    );
    let resources = server.ok(k, &["api-resources", "--api-group=wardle.example.com"]);
    assert!(
        resources.contains("flunders") && resources.contains("Flunder"),
        "{resources}"
    );
    let groups = server.ok(k, &["api-versions"]);
    assert!(
        groups.lines().any(|l| l == "wardle.example.com/v1alpha1"),
        "{groups}"
    );
    let flunders = server.ok(k, &["get", "flunders", "-o", "name"]);
    assert_eq!(flunders.trim(), "flunder.wardle.example.com/first-flunder");

    // Without endpoints the APIService is unavailable, as upstream words it.
    server.ok(k, &["delete", "endpoints", "wardle"]);
    eventually(20, "the APIService to be unavailable", || {
        let out = server.kubectl(
            k,
            &[
                "get",
                "apiservice",
                "v1alpha1.wardle.example.com",
                "-o",
                "jsonpath={.status.conditions[0].reason}",
            ],
        );
        String::from_utf8_lossy(&out.stdout) == "MissingEndpoints"
    });
    let err = server.fails(
        k,
        &[
            "get",
            "--raw",
            "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders",
        ],
    );
    assert!(
        err.contains("ServiceUnavailable")
            || err.contains("unable to handle the request")
            || err.contains("not found"),
        "{err}"
    );
}
