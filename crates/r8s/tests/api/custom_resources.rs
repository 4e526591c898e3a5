//! CustomResourceDefinitions (issue 38): a CRD installed with kubectl becomes a served kind —
//! discovery, schema validation with upstream's words, defaults, pruning, printer columns,
//! status and scale subresources — and deleting it takes its instances with it.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::Server;

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names:
    plural: widgets
    singular: widget
    kind: Widget
    shortNames: [wd]
    categories: [all]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale:
        specReplicasPath: .spec.replicas
        statusReplicasPath: .status.replicas
    additionalPrinterColumns:
    - name: Size
      type: integer
      jsonPath: .spec.size
    - name: Color
      type: string
      jsonPath: .spec.color
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            description: What the widget should be.
            required: [size]
            x-kubernetes-validations:
            - rule: self.size <= 8 || self.color == 'blue'
              message: only blue widgets may be bigger than 8
            - rule: self.color == oldSelf.color
              message: color is immutable
            properties:
              size: {type: integer, minimum: 1, maximum: 10}
              color: {type: string, enum: [red, blue], default: red}
              replicas: {type: integer}
          status:
            type: object
            properties:
              replicas: {type: integer}
"#;

fn widget(name: &str, spec: &str) -> String {
    format!("apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: {name}\nspec: {spec}\n")
}

/// Poll `f` until it holds (at most `secs` seconds).
fn eventually(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_crd_becomes_a_served_kind_with_its_schema_columns_and_subresources() {
    let server = Server::start();
    let k = "1.33";
    server.ok_stdin(k, &["apply", "-f", "-"], CRD);
    server.ok(
        k,
        &[
            "wait",
            "--for=condition=Established",
            "crd/widgets.example.com",
            "--timeout=10s",
        ],
    );
    let crd = server.ok(k, &["get", "crd", "widgets.example.com", "-o", "json"]);
    let crd: serde_json::Value = serde_json::from_str(&crd).unwrap();
    assert_eq!(
        crate::support::condition(&crd, "NamesAccepted")["reason"],
        "NoConflicts"
    );
    assert_eq!(crd["status"]["acceptedNames"]["kind"], "Widget");
    assert_eq!(crd["status"]["storedVersions"], serde_json::json!(["v1"]));
    let resources = server.ok(k, &["api-resources", "--api-group=example.com"]);
    assert!(
        resources.contains("widgets") && resources.contains("wd") && resources.contains("Widget"),
        "{resources}"
    );

    // Every group version has its APIService: the built-ins' and the CRD's, served locally.
    let apis = server.ok(k, &["get", "apiservices"]);
    assert!(
        apis.lines()
            .any(|l| l.starts_with("v1.apps ") && l.contains("Local") && l.contains("True")),
        "{apis}"
    );
    eventually(10, "the CRD's APIService", || {
        server
            .kubectl(k, &["get", "apiservice", "v1.example.com"])
            .status
            .success()
    });

    // Its schema is published: kubectl explain reads v3, clients v2.
    let explain = server.ok(k, &["explain", "widgets.spec"]);
    assert!(
        explain.contains("What the widget should be.")
            && explain.contains("size")
            && explain.contains("<integer>"),
        "{explain}"
    );
    let explain = server.ok(k, &["explain", "widgets.metadata"]);
    assert!(explain.contains("creationTimestamp"), "{explain}");
    let v2: serde_json::Value =
        serde_json::from_str(&server.ok(k, &["get", "--raw", "/openapi/v2"])).unwrap();
    let def = &v2["definitions"]["com.example.v1.Widget"];
    assert_eq!(
        def["properties"]["spec"]["properties"]["color"]["enum"],
        serde_json::json!(["red", "blue"]),
        "{def}"
    );
    assert_eq!(def["x-kubernetes-group-version-kind"][0]["kind"], "Widget");

    // Valid instances, defaulted and pruned; both kubectl versions.
    let out = server.kubectl_stdin(
        k,
        &["apply", "--validate=warn", "-f", "-"],
        &widget("w1", "{size: 3, bogus: 1}"),
    );
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        stdout.contains("widget.example.com/w1 created"),
        "{stdout} {stderr}"
    );
    assert!(
        stderr.contains(r#"Warning: unknown field "spec.bogus""#),
        "{stderr}"
    );
    server.ok_stdin(
        "1.27",
        &["create", "-f", "-"],
        &widget("w2", "{size: 4, color: blue}"),
    );
    let w1: serde_json::Value =
        serde_json::from_str(&server.ok(k, &["get", "widget", "w1", "-o", "json"])).unwrap();
    assert_eq!(w1["spec"]["color"], "red", "{w1}");
    assert!(
        w1["spec"].get("bogus").is_none(),
        "unknown fields are pruned: {w1}"
    );
    assert_eq!(w1["metadata"]["generation"], 1);
    let table = server.ok(k, &["get", "wd"]);
    let header = table.lines().next().unwrap();
    assert!(
        header.contains("SIZE") && header.contains("COLOR") && !header.contains("AGE"),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("w2") && l.contains(" 4 ") && l.contains("blue")),
        "{table}"
    );
    let all = server.ok(k, &["get", "all"]);
    assert!(
        all.contains("widget.example.com/w1"),
        "the all category lists widgets: {all}"
    );

    // Invalid instances: upstream's messages, nothing stored.
    let err = String::from_utf8(server.fails_stdin(k, &["apply", "-f", "-"], &widget("big", "{size: 11}")))
        .unwrap();
    assert!(
        err.contains("spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10"),
        "{err}"
    );
    let err = String::from_utf8(server.fails_stdin(
        "1.27",
        &["create", "-f", "-"],
        &widget("odd", "{size: two, color: green}"),
    ))
    .unwrap();
    assert!(
        err.contains(
            r#"spec.size: Invalid value: "string": spec.size in body must be of type integer: "string""#
        ) && err.contains(r#"spec.color: Unsupported value: "green": supported values: "red", "blue""#),
        "{err}"
    );
    let err = String::from_utf8(server.fails_stdin(k, &["create", "-f", "-"], &widget("huge", "{size: 9}")))
        .unwrap();
    assert!(
        err.contains(r#"spec: Invalid value: "object": only blue widgets may be bigger than 8"#),
        "{err}"
    );
    let err = server.fails(
        k,
        &[
            "patch",
            "widget",
            "w1",
            "--type=merge",
            "-p",
            r#"{"spec":{"color":"blue"}}"#,
        ],
    );
    assert!(
        err.contains("color is immutable"),
        "transition rules judge updates: {err}"
    );
    let err =
        String::from_utf8(server.fails_stdin(k, &["create", "-f", "-"], &widget("nosize", "{color: red}")))
            .unwrap();
    assert!(err.contains("spec.size: Required value"), "{err}");
    let err = String::from_utf8(server.fails_stdin(
        k,
        &["create", "--validate=strict", "-f", "-"],
        &widget("strict", "{size: 1, bogus: 1}"),
    ))
    .unwrap();
    assert!(err.contains(r#"unknown field "spec.bogus""#), "{err}");
    assert!(!server.fails(k, &["get", "widget", "big"]).is_empty());

    // Status is its own subresource; scale maps onto the CRD's paths.
    server.ok(
        k,
        &[
            "patch",
            "widget",
            "w1",
            "--type=merge",
            "-p",
            r#"{"status":{"replicas":7}}"#,
        ],
    );
    let w1: serde_json::Value =
        serde_json::from_str(&server.ok(k, &["get", "widget", "w1", "-o", "json"])).unwrap();
    assert!(
        w1["status"].is_null() || w1["status"]["replicas"].is_null(),
        "status is not written through the main resource: {w1}"
    );
    server.ok(
        k,
        &[
            "patch",
            "widget",
            "w1",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"replicas":2}}"#,
        ],
    );
    let out = server.ok(k, &["scale", "widget", "w1", "--replicas=5"]);
    assert!(out.contains("scaled"), "{out}");
    assert_eq!(
        server.ok(
            k,
            &[
                "get",
                "widget",
                "w1",
                "-o",
                "jsonpath={.spec.replicas} {.status.replicas} {.metadata.generation}"
            ]
        ),
        "5 2 2"
    );
    let scale = server.ok(
        k,
        &[
            "get",
            "--raw",
            "/apis/example.com/v1/namespaces/default/widgets/w1/scale",
        ],
    );
    let scale: serde_json::Value = serde_json::from_str(&scale).unwrap();
    assert_eq!(
        (
            scale["kind"].as_str(),
            scale["spec"]["replicas"].as_i64(),
            scale["status"]["replicas"].as_i64()
        ),
        (Some("Scale"), Some(5), Some(2))
    );
    // Custom resources have no strategic merge patch.
    let err = server.fails(
        k,
        &[
            "patch",
            "widget",
            "w1",
            "--type=strategic",
            "-p",
            r#"{"spec":{"size":2}}"#,
        ],
    );
    assert!(
        err.contains("the body of the request was in an unknown format"),
        "{err}"
    );

    // Deleting the CRD deletes its instances, then the kind is gone.
    server.ok(k, &["delete", "crd", "widgets.example.com", "--timeout=30s"]);
    eventually(20, "the CRD to go", || {
        !server
            .kubectl(k, &["get", "crd", "widgets.example.com"])
            .status
            .success()
    });
    // (kubectl's discovery cache may still name the kind: then the list itself is refused.)
    let err = server.fails(k, &["get", "widgets"]);
    assert!(
        err.contains("the server doesn't have a resource type \"widgets\"")
            || err.contains("the server could not find the requested resource"),
        "{err}"
    );
    let err = server.fails(k, &["get", "--raw", "/apis/example.com/v1"]);
    assert!(err.contains("NotFound") || err.contains("not find"), "{err}");
    let v2: serde_json::Value =
        serde_json::from_str(&server.ok(k, &["get", "--raw", "/openapi/v2"])).unwrap();
    assert!(
        v2["definitions"].get("com.example.v1.Widget").is_none(),
        "the schema goes with its CRD"
    );
    // Recreated, it starts empty.
    server.ok_stdin(k, &["apply", "-f", "-"], CRD);
    server.ok(
        k,
        &[
            "wait",
            "--for=condition=Established",
            "crd/widgets.example.com",
            "--timeout=10s",
        ],
    );
    eventually(10, "the recreated kind to be served", || {
        server.kubectl(k, &["get", "widgets"]).status.success()
    });
    let out = server.kubectl(k, &["get", "widgets", "-o", "name"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "",
        "instances went with their CRD"
    );
}

#[test]
fn crds_are_refused_with_upstreams_words_and_names_conflicts_are_reported() {
    let server = Server::start();
    let k = "1.33";
    let bad = CRD.replace("name: widgets.example.com", "name: gadgets.example.com");
    let err = String::from_utf8(server.fails_stdin(k, &["create", "-f", "-"], &bad)).unwrap();
    assert!(
        err.contains(
            r#"metadata.name: Invalid value: "gadgets.example.com": must be spec.names.plural+"."+spec.group"#
        ),
        "{err}"
    );
    let nodot = CRD
        .replace("name: widgets.example.com", "name: widgets.example")
        .replace("group: example.com", "group: example");
    let err = String::from_utf8(server.fails_stdin(k, &["create", "-f", "-"], &nodot)).unwrap();
    assert!(
        err.contains(r#"spec.group: Invalid value: "example": should be a domain with at least one dot"#),
        "{err}"
    );

    // A rule must type-check against the schema it sits on.
    let typo = CRD.replace("self.size <= 8 ||", "self.sise <= 8 ||");
    let err = String::from_utf8(server.fails_stdin(k, &["create", "-f", "-"], &typo)).unwrap();
    assert!(
        err.contains(
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: \
             Invalid value: apiextensions.ValidationRule{Rule:\"self.sise <= 8 || self.color == 'blue'\", \
             Message:\"only blue widgets may be bigger than 8\", MessageExpression:\"\", \
             Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:\"\", OptionalOldSelf:(*bool)(nil)}: \
             compilation failed: ERROR: <input>:1:5: undefined field 'sise'\n | self.sise <= 8 || self.color == 'blue'\n | ....^"
        ),
        "{err}"
    );

    // A second CRD asking for a kind the first holds is not established.
    server.ok_stdin(k, &["apply", "-f", "-"], CRD);
    server.ok(
        k,
        &[
            "wait",
            "--for=condition=Established",
            "crd/widgets.example.com",
            "--timeout=10s",
        ],
    );
    let clash = CRD
        .replace("name: widgets.example.com", "name: gizmos.example.com")
        .replace("plural: widgets", "plural: gizmos")
        .replace("singular: widget", "singular: gizmo")
        .replace("shortNames: [wd]", "shortNames: [gz]");
    server.ok_stdin(k, &["create", "-f", "-"], &clash);
    let mut crd = serde_json::Value::Null;
    eventually(10, "the conflict to be reported", || {
        crd =
            serde_json::from_str(&server.ok(k, &["get", "crd", "gizmos.example.com", "-o", "json"])).unwrap();
        crate::support::condition(&crd, "NamesAccepted")["status"] == "False"
    });
    let c = crate::support::condition(&crd, "NamesAccepted");
    assert_eq!(
        (c["reason"].as_str(), c["message"].as_str()),
        (Some("KindConflict"), Some("\"Widget\" is already in use"))
    );
    assert_eq!(crate::support::condition(&crd, "Established")["status"], "False");
    let resources = server.ok(k, &["api-resources", "--api-group=example.com", "-o", "name"]);
    assert!(
        resources.contains("widgets.example.com") && !resources.contains("gizmos"),
        "{resources}"
    );
}

/// agnhost's conversion webhook in miniature: `v1` has `hostPort: "h:p"`, `v2` has `host` and
/// `port`. A request to convert an object to its own version fails the conversion, as
/// upstream's e2e webhook does (the server must not send those).
fn convert(review: Value) -> Value {
    let request = &review["request"];
    let to = request["desiredAPIVersion"].as_str().unwrap_or("").to_owned();
    let mut out = Vec::new();
    let mut failure = None;
    for obj in request["objects"].as_array().into_iter().flatten() {
        let mut o = obj.clone();
        if o["apiVersion"] == to.as_str() {
            failure = Some("conversion from a version to itself should not call the webhook");
            break;
        }
        match to.as_str() {
            "example.com/v2" => {
                let hp = o["spec"]["hostPort"].as_str().unwrap_or("").to_owned();
                let (h, p) = hp.split_once(':').unwrap_or((&hp, ""));
                o["spec"] = json!({"host": h, "port": p});
            }
            _ => {
                let hp = format!(
                    "{}:{}",
                    o["spec"]["host"].as_str().unwrap_or(""),
                    o["spec"]["port"].as_str().unwrap_or("")
                );
                o["spec"] = json!({"hostPort": hp});
            }
        }
        o["apiVersion"] = json!(to);
        out.push(o);
    }
    let result = match failure {
        Some(m) => json!({"status": "Failure", "message": m}),
        None => json!({"status": "Success"}),
    };
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "response": {"uid": request["uid"], "convertedObjects": out, "result": result}})
}

#[test]
fn a_conversion_webhook_converts_between_versions_on_the_way_in_and_out() {
    use base64::Engine;
    let hook =
        crate::support::https::HttpsServer::start(std::sync::Arc::new(|_path: String, review: Value| {
            Box::pin(async move { convert(review) })
        }));
    let server = Server::start();
    let k = "1.33";
    let schema = |props: &str| {
        format!("      openAPIV3Schema:\n        type: object\n        properties:\n          spec:\n            type: object\n            properties: {props}\n")
    };
    let crd = format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: hosts.example.com\nspec:\n  group: example.com\n  scope: Namespaced\n  names: {{plural: hosts, singular: host, kind: Host}}\n  conversion:\n    strategy: Webhook\n    webhook:\n      conversionReviewVersions: [v1]\n      clientConfig:\n        url: {}\n        caBundle: {}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n{}  - name: v2\n    served: true\n    storage: false\n    schema:\n{}",
        hook.url("/convert"),
        base64::engine::general_purpose::STANDARD.encode(&hook.ca_pem),
        schema("{hostPort: {type: string}}"),
        schema("{host: {type: string}, port: {type: string}}"),
    );
    server.ok_stdin(k, &["apply", "-f", "-"], &crd);
    server.ok(
        k,
        &[
            "wait",
            "--for=condition=Established",
            "crd/hosts.example.com",
            "--timeout=10s",
        ],
    );
    server.ok_stdin(k, &["create", "-f", "-"], "apiVersion: example.com/v1\nkind: Host\nmetadata: {name: h1}\nspec: {hostPort: \"localhost:8080\"}\n");
    // Written as v2, stored as v1 through the webhook.
    server.ok_stdin(k, &["create", "-f", "-"], "apiVersion: example.com/v2\nkind: Host\nmetadata: {name: h2}\nspec: {host: example.org, port: \"443\"}\n");
    let v2 = server.ok(k, &["get", "hosts.v2.example.com", "-o", "jsonpath={range .items[*]}{.apiVersion} {.metadata.name} {.spec.host} {.spec.port}{\"\\n\"}{end}"]);
    assert_eq!(
        v2.trim(),
        "example.com/v2 h1 localhost 8080\nexample.com/v2 h2 example.org 443",
        "{v2}"
    );
    let v1 = server.ok(
        k,
        &[
            "get",
            "hosts.v1.example.com",
            "-o",
            "jsonpath={range .items[*]}{.apiVersion} {.metadata.name} {.spec.hostPort}{\"\\n\"}{end}",
        ],
    );
    assert_eq!(
        v1.trim(),
        "example.com/v1 h1 localhost:8080\nexample.com/v1 h2 example.org:443",
        "{v1}"
    );
    // A watch converts each event through the webhook (from the datastore, never under the
    // watch cache's lock: a conversion there once stalled the whole server).
    let events = server.ok(
        k,
        &[
            "get",
            "--raw",
            "/apis/example.com/v2/namespaces/default/hosts?watch=true&resourceVersion=0&timeoutSeconds=2",
        ],
    );
    assert!(
        events.contains("\"host\":\"localhost\"") && events.contains("\"port\":\"443\""),
        "{events}"
    );
    server.ok_stdin(
        k,
        &["create", "-f", "-"],
        "apiVersion: example.com/v1\nkind: Host\nmetadata: {name: h3}\nspec: {hostPort: \"a:1\"}\n",
    );
    assert_eq!(
        server.ok(
            k,
            &["get", "hosts.v2.example.com", "h3", "-o", "jsonpath={.spec.host}"]
        ),
        "a"
    );
}

/// Custom resources go through what built-in kinds have: the garbage collector follows their
/// owner references, namespace deletion removes them, server-side apply tracks their fields'
/// managers (and reports conflicts), RBAC names them.
#[test]
fn custom_resources_are_collected_namespaced_applied_and_authorized_like_built_in_kinds() {
    let server = Server::start();
    let k = "1.33";
    server.ok_stdin(k, &["apply", "-f", "-"], CRD);
    server.ok(
        k,
        &[
            "wait",
            "--for=condition=Established",
            "crd/widgets.example.com",
            "--timeout=10s",
        ],
    );

    // Owner references: deleting the owner collects the widget.
    server.ok(k, &["create", "configmap", "owner"]);
    let uid = server.ok(
        k,
        &["get", "configmap", "owner", "-o", "jsonpath={.metadata.uid}"],
    );
    let owned = format!(
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: owned\n  ownerReferences:\n  - {{apiVersion: v1, kind: ConfigMap, name: owner, uid: {uid}}}\nspec: {{size: 1}}\n"
    );
    server.ok_stdin(k, &["create", "-f", "-"], &owned);
    server.ok(k, &["delete", "configmap", "owner"]);
    eventually(60, "the garbage collector to delete the owned widget", || {
        !server.kubectl(k, &["get", "widget", "owned"]).status.success()
    });

    // Namespace deletion removes the namespace's widgets.
    server.ok(k, &["create", "namespace", "scratch"]);
    server.ok_stdin(
        k,
        &["create", "-n", "scratch", "-f", "-"],
        &widget("inside", "{size: 2}"),
    );
    server.ok(k, &["delete", "namespace", "scratch", "--wait=false"]);
    eventually(60, "the namespace and its widget to go", || {
        !server
            .kubectl(k, &["get", "namespace", "scratch"])
            .status
            .success()
    });

    // Server-side apply: managers are recorded; another manager's change conflicts.
    server.ok_stdin(
        k,
        &["apply", "--server-side", "--field-manager=alice", "-f", "-"],
        &widget("shared", "{size: 3}"),
    );
    let err = String::from_utf8(server.fails_stdin(
        k,
        &["apply", "--server-side", "--field-manager=bob", "-f", "-"],
        &widget("shared", "{size: 4}"),
    ))
    .unwrap();
    assert!(
        err.contains("conflict") && err.contains("alice") && err.contains(".spec.size"),
        "{err}"
    );
    server.ok_stdin(
        k,
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=bob",
            "-f",
            "-",
        ],
        &widget("shared", "{size: 4}"),
    );
    let managers = server.ok(
        k,
        &[
            "get",
            "widget",
            "shared",
            "-o",
            "jsonpath={.metadata.managedFields[*].manager} {.spec.size}",
        ],
    );
    assert!(managers.contains("bob") && managers.ends_with(" 4"), "{managers}");

    // RBAC: a user allowed to get widgets, and only that.
    server.ok(
        k,
        &[
            "create",
            "role",
            "widget-reader",
            "--verb=get",
            "--resource=widgets.example.com",
        ],
    );
    server.ok(
        k,
        &[
            "create",
            "rolebinding",
            "carol-reads",
            "--role=widget-reader",
            "--user=carol",
        ],
    );
    server.ok(k, &["get", "widget", "shared", "--as=carol"]);
    let err = server.fails(k, &["delete", "widget", "shared", "--as=carol"]);
    assert!(
        err.contains("cannot delete resource \"widgets\" in API group \"example.com\""),
        "{err}"
    );
}

const GADGETS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              ports:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name]
                items:
                  type: object
                  required: [name]
                  properties:
                    name: {type: string}
                    port: {type: integer}
              tags:
                type: array
                x-kubernetes-list-type: set
                items: {type: string}
              args:
                type: array
                items: {type: string}
"#;

/// Server-side apply merges a custom resource's lists as its schema types them: a list map by
/// its keys and a set by value, each item owned by the manager that applied it; a list
/// without a type is one value.
#[test]
fn server_side_apply_merges_custom_resource_lists_by_their_schema() {
    let server = Server::start();
    let k = "1.33";
    server.ok_stdin(k, &["apply", "-f", "-"], GADGETS);
    server.ok(
        k,
        &[
            "wait",
            "--for=condition=Established",
            "crd/gadgets.example.com",
            "--timeout=10s",
        ],
    );
    let gadget = |spec: &str| {
        format!("apiVersion: example.com/v1\nkind: Gadget\nmetadata: {{name: g}}\nspec: {spec}\n")
    };
    let apply = |manager: &str, spec: &str| {
        server.ok_stdin(
            k,
            &[
                "apply",
                "--server-side",
                &format!("--field-manager={manager}"),
                "-f",
                "-",
            ],
            &gadget(spec),
        )
    };
    apply("alice", "{ports: [{name: http, port: 80}], tags: [a], args: [x]}");
    apply("bob", "{ports: [{name: metrics, port: 9090}], tags: [b]}");
    let obj: Value =
        serde_json::from_str(&server.ok(k, &["get", "gadget", "g", "--show-managed-fields", "-o", "json"]))
            .unwrap();
    assert_eq!(
        obj["spec"]["ports"],
        json!([{"name": "http", "port": 80}, {"name": "metrics", "port": 9090}]),
        "{obj}"
    );
    assert_eq!(obj["spec"]["tags"], json!(["a", "b"]), "{obj}");
    let fields_of = |manager: &str| {
        obj["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["manager"] == manager)
            .map(|m| m["fieldsV1"].to_string())
            .unwrap_or_default()
    };
    let bob = fields_of("bob");
    assert!(
        bob.contains(r#"k:{\"name\":\"metrics\"}"#) && bob.contains(r#"v:\"b\""#),
        "{bob}"
    );
    assert!(!bob.contains("http"), "{bob}");

    // Alice drops her port: only hers goes.
    apply("alice", "{tags: [a], args: [x]}");
    let ports = server.ok(k, &["get", "gadget", "g", "-o", "jsonpath={.spec.ports[*].name}"]);
    assert_eq!(ports, "metrics");

    // A list without a type is one value, owned whole: another manager's change conflicts.
    let err = String::from_utf8(server.fails_stdin(
        k,
        &["apply", "--server-side", "--field-manager=bob", "-f", "-"],
        &gadget("{ports: [{name: metrics, port: 9090}], tags: [b], args: [y]}"),
    ))
    .unwrap();
    assert!(err.contains("conflict") && err.contains(".spec.args"), "{err}");
}
