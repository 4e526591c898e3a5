//! End to end: `r8s server` driven by the real kubectl, oldest and newest supported minor
//! versions (1.27 and 1.33), through the whole chain over TLS.

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use support::{kubectl_binary, Server};

const VERSIONS: &[&str] = &["1.27", "1.33"];

fn configmap(ns: &str, name: &str, extra: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {ns}\n{extra}data:\n  key: value\n")
}

fn namespace(name: &str) -> String {
    format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n")
}

#[test]
fn version_health_and_discovery() {
    let s = Server::start();
    for v in VERSIONS {
        let out: serde_json::Value = serde_json::from_str(&s.ok(v, &["version", "-o", "json"])).unwrap();
        assert_eq!(out["serverVersion"]["minor"], "33");
        assert!(
            out["serverVersion"]["gitVersion"]
                .as_str()
                .unwrap()
                .starts_with("v1.33.0"),
            "{out}"
        );
        assert_eq!(s.ok(v, &["get", "--raw", "/healthz"]), "ok");
        let ready = s.ok(v, &["get", "--raw", "/readyz?verbose"]);
        assert!(
            ready.contains("[+]etcd ok") && ready.contains("readyz check passed"),
            "{ready}"
        );
        let resources = s.ok(v, &["api-resources"]);
        let pods = resources
            .lines()
            .find(|l| l.starts_with("pods "))
            .expect("pods listed");
        assert!(pods.contains(" po ") && pods.contains("Pod"), "{pods}");
        assert!(resources
            .lines()
            .any(|l| l.starts_with("deployments ") && l.contains("apps/v1")));
        let versions = s.ok(v, &["api-versions"]);
        for gv in ["v1", "apps/v1", "coordination.k8s.io/v1", "events.k8s.io/v1"] {
            assert!(versions.lines().any(|l| l == gv), "{gv} missing from {versions}");
        }
        if *v == "1.33" {
            // Aggregated discovery: two requests (/api, /apis), no per-group-version ones.
            let out = s.kubectl(
                v,
                &[
                    "api-resources",
                    "-v=6",
                    "--cache-dir",
                    s.dir.path().join("fresh-cache").to_str().unwrap(),
                ],
            );
            let log = String::from_utf8_lossy(&out.stderr);
            assert!(log.contains("/apis?timeout"), "{log}");
            assert!(
                !log.contains("/apis/apps/v1?timeout"),
                "legacy discovery was used:\n{log}"
            );
        }
        // kubectl explain reads the OpenAPI v3 documents.
        let explain = s.ok(v, &["explain", "deployment.spec.replicas"]);
        assert!(
            explain.contains("replicas <integer>") && explain.contains("Number of desired pods"),
            "{explain}"
        );
        let explain = s.ok(v, &["explain", "pods.spec.containers.image"]);
        assert!(explain.contains("image <string>"), "{explain}");
        // ... and the OpenAPI v2 document (protobuf) when asked for it.
        let explain = s.ok(
            v,
            &[
                "explain",
                "deployment.spec.strategy",
                "--output=plaintext-openapiv2",
            ],
        );
        assert!(
            explain.contains("KIND:") && explain.contains("Deployment"),
            "{explain}"
        );
        assert!(
            explain.contains("rollingUpdate") && explain.contains("DeploymentStrategy"),
            "{explain}"
        );
        let v2: serde_json::Value = serde_json::from_str(&s.ok(v, &["get", "--raw", "/openapi/v2"])).unwrap();
        assert_eq!(v2["swagger"], "2.0");
        assert_eq!(
            v2["definitions"]["io.k8s.api.core.v1.Pod"]["x-kubernetes-group-version-kind"][0]["kind"],
            "Pod"
        );
        let ns = s.ok(v, &["get", "namespaces", "-o", "name"]);
        for n in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            assert!(ns.contains(&format!("namespace/{n}")), "{ns}");
        }
    }
}

#[test]
fn crud_with_output_formats_labels_and_selectors() {
    let s = Server::start();
    for v in VERSIONS {
        let ns = format!("crud-{}", v.replace('.', ""));
        s.ok_stdin(v, &["apply", "-f", "-"], &namespace(&ns));
        assert_eq!(
            s.ok(v, &["get", "ns", &ns, "-o", "jsonpath={.status.phase}"]),
            "Active"
        );

        let out = s.ok_stdin(v, &["create", "-f", "-"], &configmap(&ns, "cfg", ""));
        assert_eq!(out.trim(), "configmap/cfg created");
        let yaml = s.ok(v, &["-n", &ns, "get", "configmap", "cfg", "-o", "yaml"]);
        assert!(
            yaml.contains("key: value") && yaml.contains("uid:") && yaml.contains("resourceVersion:"),
            "{yaml}"
        );
        let json: serde_json::Value =
            serde_json::from_str(&s.ok(v, &["-n", &ns, "get", "cm", "cfg", "-o", "json"])).unwrap();
        assert_eq!(json["kind"], "ConfigMap");
        assert_eq!(json["metadata"]["namespace"], ns.as_str());
        // Every namespace also holds the controller manager's kube-root-ca.crt.
        let ours = |out: String| {
            out.lines()
                .filter(|l| *l != "configmap/kube-root-ca.crt")
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(
            ours(s.ok(v, &["-n", &ns, "get", "cm", "-o", "name"])),
            "configmap/cfg"
        );
        let table = s.ok(v, &["-n", &ns, "get", "cm"]);
        let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
        assert_eq!(header, ["NAME", "DATA", "AGE"]);
        assert!(table.lines().nth(1).unwrap().starts_with("cfg "), "{table}");

        s.ok_stdin(v, &["create", "-f", "-"], &configmap(&ns, "other", ""));
        assert_eq!(
            s.ok(v, &["-n", &ns, "label", "cm", "cfg", "tier=web"]).trim(),
            "configmap/cfg labeled"
        );
        s.ok(v, &["-n", &ns, "annotate", "cm", "cfg", "note=hello"]);
        assert_eq!(
            s.ok(v, &["-n", &ns, "get", "cm", "-l", "tier=web", "-o", "name"])
                .trim(),
            "configmap/cfg"
        );
        assert_eq!(
            ours(s.ok(v, &["-n", &ns, "get", "cm", "-l", "tier!=web", "-o", "name"])),
            "configmap/other"
        );
        assert_eq!(
            s.ok(
                v,
                &[
                    "-n",
                    &ns,
                    "get",
                    "cm",
                    "--field-selector",
                    "metadata.name=other",
                    "-o",
                    "name"
                ]
            )
            .trim(),
            "configmap/other"
        );
        assert_eq!(
            s.ok(
                v,
                &[
                    "-n",
                    &ns,
                    "get",
                    "cm",
                    "cfg",
                    "-o",
                    "jsonpath={.metadata.annotations.note}"
                ]
            ),
            "hello"
        );
        // A second label write with a stale resourceVersion is a conflict, in upstream's words.
        let mut stale = json.clone();
        stale["data"]["key"] = "changed".into();
        let replace = Command::new(kubectl_binary(v))
            .args([
                "--kubeconfig",
                s.kubeconfig.to_str().unwrap(),
                "replace",
                "-f",
                "-",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        {
            use std::io::Write;
            let mut child = replace;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(stale.to_string().as_bytes())
                .unwrap();
            let out = child.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success());
            assert!(
                err.contains(
                    "Operation cannot be fulfilled on configmaps \"cfg\": the object has been modified"
                ),
                "{err}"
            );
        }

        assert_eq!(
            s.ok(v, &["-n", &ns, "delete", "cm", "cfg"]).trim(),
            "configmap \"cfg\" deleted"
        );
        let err = s.fails(v, &["-n", &ns, "get", "cm", "cfg"]);
        assert!(
            err.contains("Error from server (NotFound): configmaps \"cfg\" not found"),
            "{err}"
        );
    }
}

#[test]
fn apply_twice_dry_run_and_paging() {
    let s = Server::start();
    for v in VERSIONS {
        let name = format!("web{}", v.replace('.', ""));
        let deployment = |replicas: u32, image: &str| {
            format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      containers:\n      - name: web\n        image: {image}\n"
            )
        };
        // --dry-run=server validates and defaults but stores nothing.
        let dry = s.ok_stdin(
            v,
            &["apply", "--dry-run=server", "-o", "json", "-f", "-"],
            &deployment(2, "nginx:1.25"),
        );
        let dry: serde_json::Value = serde_json::from_str(&dry).unwrap();
        assert_eq!(dry["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%");
        assert_eq!(
            dry["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"],
            "IfNotPresent"
        );
        assert!(s.kubectl(v, &["get", "deployment", &name]).status.code() != Some(0));

        assert!(s
            .ok_stdin(v, &["apply", "-f", "-"], &deployment(2, "nginx:1.25"))
            .contains("created"));
        assert!(s
            .ok_stdin(v, &["apply", "-f", "-"], &deployment(3, "nginx:1.26"))
            .contains("configured"));
        let got = s.ok(
            v,
            &[
                "get",
                "deploy",
                &name,
                "-o",
                "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].image} {.metadata.generation}",
            ],
        );
        assert_eq!(got, "3 nginx:1.26 2");
        // A container removed from the applied manifest leaves the live object (the patch
        // kubectl computes needs the containers' merge key from the OpenAPI documents), and
        // a strategy switched to Recreate drops rollingUpdate ($retainKeys).
        let two = deployment(3, "nginx:1.26").replace(
            "        image: nginx:1.26\n",
            "        image: nginx:1.26\n      - name: side\n        image: busybox\n",
        );
        s.ok_stdin(v, &["apply", "-f", "-"], &two);
        let names = s.ok(
            v,
            &[
                "get",
                "deploy",
                &name,
                "-o",
                "jsonpath={.spec.template.spec.containers[*].name}",
            ],
        );
        assert_eq!(names, "web side");
        let recreate = deployment(3, "nginx:1.26").replace(
            "  replicas: 3\n",
            "  replicas: 3\n  strategy:\n    type: Recreate\n",
        );
        s.ok_stdin(v, &["apply", "-f", "-"], &recreate);
        let got = s.ok(
            v,
            &[
                "get",
                "deploy",
                &name,
                "-o",
                "jsonpath={.spec.template.spec.containers[*].name} {.spec.strategy}",
            ],
        );
        assert_eq!(got, "web {\"type\":\"Recreate\"}");
        let wide = s.ok(v, &["get", "deploy", &name, "-o", "wide"]);
        let header: Vec<&str> = wide.lines().next().unwrap().split_whitespace().collect();
        assert_eq!(
            header,
            [
                "NAME",
                "READY",
                "UP-TO-DATE",
                "AVAILABLE",
                "AGE",
                "CONTAINERS",
                "IMAGES",
                "SELECTOR"
            ]
        );
        s.ok(v, &["delete", "deploy", &name]);
    }
    // Paging: kubectl fetches in chunks and still shows everything.
    for i in 0..7 {
        s.ok_stdin(
            "1.33",
            &["create", "-f", "-"],
            &configmap("default", &format!("page-{i}"), ""),
        );
    }
    for v in VERSIONS {
        let names = s.ok(v, &["get", "cm", "--chunk-size=2", "-o", "name"]);
        assert_eq!(
            names.lines().filter(|l| l.starts_with("configmap/page-")).count(),
            7,
            "{names}"
        );
    }
}

#[test]
fn bad_input_gets_upstream_errors() {
    let s = Server::start();
    for v in VERSIONS {
        let err = String::from_utf8(s.fails_stdin(
            v,
            &["create", "-f", "-"],
            &configmap("default", "Bad_Name", ""),
        ))
        .unwrap();
        assert!(
            err.contains("The ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters"),
            "{err}"
        );
        let err =
            String::from_utf8(s.fails_stdin(v, &["create", "-f", "-"], &configmap("nowhere", "cfg", "")))
                .unwrap();
        assert!(err.contains("namespaces \"nowhere\" not found"), "{err}");
        s.ok_stdin(v, &["apply", "-f", "-"], &configmap("default", "dup", ""));
        let err =
            String::from_utf8(s.fails_stdin(v, &["create", "-f", "-"], &configmap("default", "dup", "")))
                .unwrap();
        assert!(err.contains("configmaps \"dup\" already exists"), "{err}");
        s.ok(v, &["delete", "cm", "dup"]);
        // Unknown fields: kubectl asks for strict field validation and gets upstream's words.
        let err = String::from_utf8(s.fails_stdin(
            v,
            &["create", "-f", "-"],
            &configmap("default", "unknown", "bogus: 1\n"),
        ))
        .unwrap();
        assert!(
            err.contains("ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"bogus\""),
            "{err}"
        );
        assert!(
            s.kubectl(v, &["get", "cm", "unknown"]).status.code() != Some(0),
            "nothing was stored"
        );
        // With --validate=warn the unknown field is dropped with a warning.
        let out = s.kubectl_stdin(
            v,
            &["create", "--validate=warn", "-f", "-"],
            &configmap("default", "pruned", "bogus: 1\n"),
        );
        assert!(out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("unknown field \"bogus\""),
            "{out:?}"
        );
        assert!(!s.ok(v, &["get", "cm", "pruned", "-o", "yaml"]).contains("bogus"));
        s.ok(v, &["delete", "cm", "pruned"]);
        let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: default\nspec:\n  containers:\n  - name: c\n";
        let err = String::from_utf8(s.fails_stdin(v, &["create", "-f", "-"], pod)).unwrap();
        assert!(err.contains("spec.containers[0].image: Required value"), "{err}");
        // A pod's spec is immutable but for its images, deadline, added tolerations, ...
        s.ok(v, &["run", "imm", "--image=busybox", "--", "sleep", "1"]);
        let err = s.fails(
            v,
            &[
                "patch",
                "pod",
                "imm",
                "-p",
                r#"{"spec":{"containers":[{"name":"imm","command":["sleep","2"]}]}}"#,
            ],
        );
        assert!(
            err.contains("The Pod \"imm\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`"),
            "{err}"
        );
        s.ok(v, &["set", "image", "pod/imm", "imm=nginx"]);
        assert_eq!(
            s.ok(
                v,
                &["get", "pod", "imm", "-o", "jsonpath={.spec.containers[0].image}"]
            ),
            "nginx"
        );
        s.ok(v, &["delete", "pod", "imm"]);
        // A list not older than a revision that does not exist yet times out as upstream's does.
        let err = s.fails(
            v,
            &[
                "get",
                "--raw",
                "/api/v1/namespaces/default/configmaps?resourceVersion=99999999",
            ],
        );
        assert!(err.contains("Too large resource version: 99999999"), "{err}");
    }
}

#[test]
fn get_watch_streams_changes() {
    let s = Server::start();
    for v in VERSIONS {
        let name = format!("watched{}", v.replace('.', ""));
        let mut watcher = Command::new(kubectl_binary(v))
            .args([
                "--kubeconfig",
                s.kubeconfig.to_str().unwrap(),
                "get",
                "cm",
                "-w",
                "-o",
                "name",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = watcher.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        std::thread::sleep(Duration::from_millis(500));
        s.ok_stdin(v, &["create", "-f", "-"], &configmap("default", &name, ""));
        let want = format!("configmap/{name}");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut seen = Vec::new();
        while !seen.contains(&want) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => seen.push(line),
                Err(_) => panic!("kubectl get -w never showed {want}; saw {seen:?}"),
            }
        }
        let _ = watcher.kill();
        let _ = watcher.wait();
    }
}

#[test]
fn authentication_and_authorization_chains() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(
        &tokens,
        "admintoken,alice,1001,\"system:masters\"\nplaintoken,bob,1002,dev\n",
    )
    .unwrap();
    let s = Server::start_with(&["--token-auth-file", tokens.to_str().unwrap()]);
    let server = format!("https://127.0.0.1:{}", s.port);
    let ca = s.dir.path().join("server/tls/ca.crt");
    let with_token = |token: &str, args: &[&str]| {
        Command::new(kubectl_binary("1.33"))
            .args([
                "--kubeconfig",
                "/dev/null",
                "--server",
                &server,
                "--certificate-authority",
            ])
            .arg(&ca)
            .args(["--token", token])
            .args(args)
            .output()
            .unwrap()
    };
    let out = with_token("admintoken", &["get", "ns", "default", "-o", "name"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "namespace/default");

    let out = with_token("plaintoken", &["get", "pods", "-n", "default"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("pods is forbidden: User \"bob\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""),
        "{err}"
    );
    let out = with_token("wrongtoken", &["get", "pods"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Unauthorized"), "{err}");
}

/// Imperative creates (kubectl >= 1.32 sends these in protobuf), scale and the status and
/// binding subresources.
#[test]
fn imperative_creates_scale_and_subresources() {
    let s = Server::start();
    for v in VERSIONS {
        let ns = format!("imp-{}", v.replace('.', ""));
        assert_eq!(
            s.ok(v, &["create", "namespace", &ns]).trim(),
            format!("namespace/{ns} created")
        );
        s.ok(
            v,
            &["-n", &ns, "create", "configmap", "cfg", "--from-literal=a=1"],
        );
        s.ok(
            v,
            &[
                "-n",
                &ns,
                "create",
                "secret",
                "generic",
                "pw",
                "--from-literal=pw=hunter2",
            ],
        );
        assert_eq!(
            s.ok(
                v,
                &["-n", &ns, "get", "secret", "pw", "-o", "jsonpath={.data.pw}"]
            ),
            "aHVudGVyMg=="
        );
        assert_eq!(
            s.ok(
                v,
                &[
                    "-n",
                    &ns,
                    "create",
                    "deployment",
                    "nginx",
                    "--image=nginx",
                    "--replicas=3"
                ]
            )
            .trim(),
            "deployment.apps/nginx created"
        );
        let d: serde_json::Value =
            serde_json::from_str(&s.ok(v, &["-n", &ns, "get", "deploy", "nginx", "-o", "json"])).unwrap();
        assert_eq!(d["spec"]["replicas"], 3);
        assert_eq!(d["spec"]["selector"]["matchLabels"]["app"], "nginx");
        assert_eq!(d["spec"]["strategy"]["type"], "RollingUpdate");
        assert_eq!(d["spec"]["template"]["spec"]["containers"][0]["image"], "nginx");
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"],
            "Always"
        );

        assert_eq!(
            s.ok(v, &["-n", &ns, "scale", "deploy", "nginx", "--replicas=5"])
                .trim(),
            "deployment.apps/nginx scaled"
        );
        assert_eq!(
            s.ok(
                v,
                &[
                    "-n",
                    &ns,
                    "get",
                    "deploy",
                    "nginx",
                    "-o",
                    "jsonpath={.spec.replicas} {.metadata.generation}"
                ]
            ),
            "5 2"
        );
        let described = s.ok(v, &["-n", &ns, "describe", "deployment", "nginx"]);
        assert!(
            described.contains("Replicas:               5 desired"),
            "{described}"
        );
        assert!(
            described.contains("RollingUpdateStrategy:  25% max unavailable, 25% max surge"),
            "{described}"
        );
        let pc = format!("high{}", v.replace('.', ""));
        s.ok(
            v,
            &[
                "create",
                "priorityclass",
                &pc,
                "--value=1000",
                "--description=test",
            ],
        );
        assert_eq!(
            s.ok(
                v,
                &["get", "pc", &pc, "-o", "jsonpath={.value} {.preemptionPolicy}"]
            ),
            "1000 PreemptLowerPriority"
        );
        let pcs = s.ok(v, &["get", "priorityclasses", "-o", "name"]);
        assert!(
            pcs.contains("system-node-critical") && pcs.contains("system-cluster-critical"),
            "{pcs}"
        );

        s.ok(v, &["-n", &ns, "run", "p", "--image=nginx"]);
        assert_eq!(
            s.ok(
                v,
                &["-n", &ns, "get", "pod", "p", "-o", "jsonpath={.status.phase}"]
            ),
            "Pending"
        );
        // The main resource cannot change status; the status subresource can.
        s.ok(
            v,
            &[
                "-n",
                &ns,
                "patch",
                "pod",
                "p",
                "--type=merge",
                "-p",
                r#"{"status":{"phase":"Failed"}}"#,
            ],
        );
        assert_eq!(
            s.ok(
                v,
                &["-n", &ns, "get", "pod", "p", "-o", "jsonpath={.status.phase}"]
            ),
            "Pending"
        );
        s.ok(
            v,
            &[
                "-n",
                &ns,
                "patch",
                "pod",
                "p",
                "--subresource=status",
                "--type=merge",
                "-p",
                r#"{"status":{"phase":"Running"}}"#,
            ],
        );
        assert_eq!(
            s.ok(
                v,
                &["-n", &ns, "get", "pod", "p", "-o", "jsonpath={.status.phase}"]
            ),
            "Running"
        );

        // Binding assigns the pod to a node once.
        let binding = r#"{"apiVersion":"v1","kind":"Binding","metadata":{"name":"p"},"target":{"kind":"Node","name":"n1"}}"#;
        let path = format!("/api/v1/namespaces/{ns}/pods/p/binding");
        s.ok_stdin(v, &["create", "--raw", &path, "-f", "-"], binding);
        assert_eq!(
            s.ok(
                v,
                &[
                    "-n",
                    &ns,
                    "get",
                    "pod",
                    "p",
                    "-o",
                    "jsonpath={.spec.nodeName} {.status.conditions[0].type}={.status.conditions[0].status}"
                ]
            ),
            "n1 PodScheduled=True"
        );
        let err =
            String::from_utf8(s.fails_stdin(v, &["create", "--raw", &path, "-f", "-"], binding)).unwrap();
        assert!(err.contains("is already assigned to node \"n1\""), "{err}");
    }
}

/// events.k8s.io/v1 Events and core v1 Events are one resource in two versions.
#[test]
fn events_are_shared_between_both_apis() {
    let s = Server::start();
    let ev = "apiVersion: events.k8s.io/v1\nkind: Event\nmetadata:\n  name: p.scheduled\n  namespace: default\neventTime: \"2026-11-22T03:00:00.000000Z\"\nregarding:\n  kind: Pod\n  name: p\n  namespace: default\nnote: Successfully assigned default/p to n1\nreason: Scheduled\ntype: Normal\naction: Binding\nreportingController: default-scheduler\nreportingInstance: r8s\n";
    s.ok_stdin("1.33", &["create", "-f", "-"], ev);
    for v in VERSIONS {
        let core: serde_json::Value =
            serde_json::from_str(&s.ok(v, &["get", "events.v1.", "p.scheduled", "-o", "json"])).unwrap();
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "p");
        assert_eq!(core["message"], "Successfully assigned default/p to n1");
        assert_eq!(core["reportingComponent"], "default-scheduler");
        let new: serde_json::Value = serde_json::from_str(&s.ok(
            v,
            &["get", "events.v1.events.k8s.io", "p.scheduled", "-o", "json"],
        ))
        .unwrap();
        assert_eq!(new["apiVersion"], "events.k8s.io/v1");
        assert_eq!(new["note"], "Successfully assigned default/p to n1");
        assert_eq!(new["regarding"]["kind"], "Pod");
    }
}

/// Services get cluster IPs from --service-cidr and node ports, once each; the `kubernetes`
/// service holds the first address.
#[test]
fn services_get_cluster_ips_and_node_ports() {
    let s = Server::start_with(&["--service-cidr", "10.96.0.0/24"]);
    assert_eq!(
        s.ok(
            "1.33",
            &["get", "svc", "kubernetes", "-o", "jsonpath={.spec.clusterIP}"]
        ),
        "10.96.0.1"
    );
    // Its endpoints are this API server's address and port, in both APIs.
    let port = s.ok(
        "1.33",
        &[
            "config",
            "view",
            "--minify",
            "-o",
            "jsonpath={.clusters[0].cluster.server}",
        ],
    );
    let port = port.rsplit(':').next().unwrap().to_string();
    assert_eq!(
        s.ok(
            "1.33",
            &[
                "get",
                "endpoints",
                "kubernetes",
                "-o",
                "jsonpath={.subsets[0].addresses[0].ip}:{.subsets[0].ports[0].port}"
            ]
        ),
        format!("127.0.0.1:{port}")
    );
    assert_eq!(
        s.ok(
            "1.33",
            &[
                "get",
                "endpointslice",
                "kubernetes",
                "-o",
                "jsonpath={.endpoints[0].addresses[0]}:{.ports[0].port}"
            ]
        ),
        format!("127.0.0.1:{port}")
    );
    for v in VERSIONS {
        let web = format!("web{}", v.replace('.', ""));
        let np = format!("np{}", v.replace('.', ""));
        s.ok(v, &["create", "service", "clusterip", &web, "--tcp=80:8080"]);
        s.ok(v, &["create", "service", "nodeport", &np, "--tcp=80:8080"]);
        let ip = s.ok(v, &["get", "svc", &web, "-o", "jsonpath={.spec.clusterIP}"]);
        let addr: std::net::Ipv4Addr = ip.parse().unwrap();
        assert_eq!(addr.octets()[..3], [10, 96, 0], "{ip}");
        assert_ne!(ip, "10.96.0.1");
        let port: u16 = s
            .ok(
                v,
                &["get", "svc", &np, "-o", "jsonpath={.spec.ports[0].nodePort}"],
            )
            .parse()
            .unwrap();
        assert!((30000..=32767).contains(&port));
        // The address is taken: asking for it again is refused in upstream's words.
        let taken = format!("apiVersion: v1\nkind: Service\nmetadata:\n  name: taken\n  namespace: default\nspec:\n  clusterIP: {ip}\n  ports:\n  - port: 80\n");
        let err = String::from_utf8(s.fails_stdin(v, &["create", "-f", "-"], &taken)).unwrap();
        assert!(
            err.contains(&format!("The Service \"taken\" is invalid: spec.clusterIPs: Invalid value: []string{{\"{ip}\"}}: failed to allocate IP {ip}: provided IP is already allocated")),
            "{err}"
        );
        // Immutable once set; labels and other changes keep it. (Another address than the
        // one allocated: patching to the same one is no change.)
        let other = if ip == "10.96.0.99" {
            "10.96.0.98"
        } else {
            "10.96.0.99"
        };
        let other_ip_patch = format!(r#"{{"spec":{{"clusterIP":"{other}"}}}}"#);
        let err = String::from_utf8_lossy(
            &s.kubectl(v, &["patch", "svc", &web, "-p", &other_ip_patch])
                .stderr,
        )
        .to_string();
        assert!(err.contains("may not change once set"), "{err}");
        s.ok(v, &["label", "svc", &web, "tier=front"]);
        assert_eq!(
            s.ok(v, &["get", "svc", &web, "-o", "jsonpath={.spec.clusterIP}"]),
            ip
        );
        // A type change allocates what the new type needs (a node port; a health-check port
        // for a LoadBalancer keeping client addresses) and gives back what it no longer does.
        let fields = "jsonpath={.spec.clusterIP} {.spec.ports[0].nodePort} {.spec.externalTrafficPolicy} {.spec.healthCheckNodePort}";
        s.ok(
            v,
            &["patch", "svc", &web, "-p", r#"{"spec":{"type":"NodePort"}}"#],
        );
        let got = s.ok(v, &["get", "svc", &web, "-o", fields]);
        let parts: Vec<&str> = got.split(' ').collect();
        assert_eq!(
            (parts[0], parts[2], parts[3]),
            (ip.as_str(), "Cluster", ""),
            "{got}"
        );
        let node_port: u16 = parts[1].parse().unwrap();
        assert!((30000..=32767).contains(&node_port), "{got}");
        s.ok(
            v,
            &[
                "patch",
                "svc",
                &web,
                "-p",
                r#"{"spec":{"type":"LoadBalancer","externalTrafficPolicy":"Local"}}"#,
            ],
        );
        let got = s.ok(v, &["get", "svc", &web, "-o", fields]);
        let parts: Vec<&str> = got.split(' ').collect();
        assert_eq!(
            (parts[1], parts[2]),
            (node_port.to_string().as_str(), "Local"),
            "{got}"
        );
        let health: u16 = parts[3].parse().unwrap();
        assert!((30000..=32767).contains(&health) && health != node_port, "{got}");
        let again = format!("again{}", v.replace('.', ""));
        let reuse = format!("apiVersion: v1\nkind: Service\nmetadata:\n  name: {again}\n  namespace: default\nspec:\n  type: LoadBalancer\n  externalTrafficPolicy: Local\n  healthCheckNodePort: {health}\n  ports:\n  - port: 80\n");
        // A dry run that would give the health-check port up keeps it.
        s.ok(
            v,
            &[
                "patch",
                "svc",
                &web,
                "-p",
                r#"{"spec":{"externalTrafficPolicy":"Cluster"}}"#,
                "--dry-run=server",
            ],
        );
        let err = String::from_utf8(s.fails_stdin(v, &["create", "-f", "-"], &reuse)).unwrap();
        assert!(err.contains("spec.healthCheckNodePort: Invalid value"), "{err}");
        s.ok(
            v,
            &["patch", "svc", &web, "-p", r#"{"spec":{"type":"ClusterIP"}}"#],
        );
        assert_eq!(s.ok(v, &["get", "svc", &web, "-o", fields]), format!("{ip}   "));
        // Both ports are free again.
        s.ok(
            v,
            &[
                "create",
                "service",
                "nodeport",
                &again,
                "--tcp=80:8080",
                &format!("--node-port={node_port}"),
            ],
        );
        s.ok(v, &["delete", "svc", &again]);
        s.ok_stdin(v, &["create", "-f", "-"], &reuse);
        s.ok(v, &["delete", "svc", &again]);
        // Fields a type cannot have, in upstream's words.
        let err = String::from_utf8_lossy(
            &s.kubectl(
                v,
                &[
                    "patch",
                    "svc",
                    &web,
                    "-p",
                    r#"{"spec":{"externalTrafficPolicy":"Local"}}"#,
                ],
            )
            .stderr,
        )
        .to_string();
        assert!(
            err.contains("spec.externalTrafficPolicy: Invalid value: \"Local\": may only be set for externally-accessible services"),
            "{err}"
        );
        // Deleting gives the address back.
        s.ok(v, &["delete", "svc", &web]);
        s.ok_stdin(v, &["create", "-f", "-"], &taken);
        s.ok(v, &["delete", "svc", "taken", &np]);
        // A Service held by a finalizer keeps its address until the finalizer goes; the update
        // that removes the last one deletes it, and gives the address back as a DELETE does.
        let held = format!("apiVersion: v1\nkind: Service\nmetadata:\n  name: held\n  namespace: default\n  finalizers: [example.com/hold]\nspec:\n  clusterIP: {ip}\n  ports:\n  - port: 80\n");
        s.ok_stdin(v, &["create", "-f", "-"], &held);
        s.ok(v, &["delete", "svc", "held", "--wait=false"]);
        s.fails_stdin(v, &["create", "-f", "-"], &taken);
        s.ok(
            v,
            &[
                "patch",
                "svc",
                "held",
                "--type=merge",
                "-p",
                r#"{"metadata":{"finalizers":null}}"#,
            ],
        );
        assert!(!s.kubectl(v, &["get", "svc", "held"]).status.success());
        s.ok_stdin(v, &["create", "-f", "-"], &taken);
        s.ok(v, &["delete", "svc", "taken"]);
        // A spec with mistakes is refused whole, before any address is taken.
        let bad = "apiVersion: v1\nkind: Service\nmetadata:\n  name: bad\n  namespace: default\nspec:\n  type: Ingress\n  ports:\n  - port: 0\n";
        let err = String::from_utf8(s.fails_stdin(v, &["create", "-f", "-"], bad)).unwrap();
        for want in [
            "The Service \"bad\" is invalid: ",
            "spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive",
            "spec.type: Unsupported value: \"Ingress\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\"",
        ] {
            assert!(err.contains(want), "{want}\n{err}");
        }
        assert!(!s.kubectl(v, &["get", "svc", "bad"]).status.success());
    }
}

/// Server-side apply: create, change, conflicts with another manager, forced take-over.
#[test]
fn server_side_apply_with_field_managers() {
    let s = Server::start();
    for v in VERSIONS {
        let name = format!("ssa{}", v.replace('.', ""));
        let deployment = |replicas: u32, image: &str| {
            format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      containers:\n      - name: web\n        image: {image}\n"
            )
        };
        let out = s.ok_stdin(
            v,
            &["apply", "--server-side", "-f", "-"],
            &deployment(2, "nginx:1.25"),
        );
        assert!(out.contains("serverside-applied"), "{out}");
        s.ok_stdin(
            v,
            &["apply", "--server-side", "-f", "-"],
            &deployment(3, "nginx:1.26"),
        );
        assert_eq!(
            s.ok(
                v,
                &[
                    "get",
                    "deploy",
                    &name,
                    "-o",
                    "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].image}"
                ]
            ),
            "3 nginx:1.26"
        );
        let managers = s.ok(
            v,
            &[
                "get",
                "deploy",
                &name,
                "--show-managed-fields",
                "-o",
                "jsonpath={.metadata.managedFields[*].manager}",
            ],
        );
        // kubectl's apply, and the deployment controller's revision annotation and status.
        let mut managers: Vec<&str> = managers.split(' ').collect();
        managers.sort();
        managers.dedup();
        assert!(
            managers == ["kubectl"] || managers == ["kube-controller-manager", "kubectl"],
            "{managers:?}"
        );
        // Another manager changing replicas conflicts, in upstream's words; forcing takes over.
        let err = String::from_utf8(s.fails_stdin(
            v,
            &["apply", "--server-side", "--field-manager=other", "-f", "-"],
            &deployment(5, "nginx:1.26"),
        ))
        .unwrap();
        assert!(
            err.contains(
                "Apply failed with 1 conflict: conflict with \"kubectl\" using apps/v1: .spec.replicas"
            ),
            "{err}"
        );
        s.ok_stdin(
            v,
            &[
                "apply",
                "--server-side",
                "--field-manager=other",
                "--force-conflicts",
                "-f",
                "-",
            ],
            &deployment(5, "nginx:1.26"),
        );
        assert_eq!(
            s.ok(v, &["get", "deploy", &name, "-o", "jsonpath={.spec.replicas}"]),
            "5"
        );
        s.ok(v, &["delete", "deploy", &name]);
    }
}

#[test]
fn pod_security_admission_enforces_and_warns() {
    let s = Server::start();
    const RESTRICTED_POD: &str = r#"{"apiVersion":"v1","spec":{"securityContext":{"runAsNonRoot":true,"seccompProfile":{"type":"RuntimeDefault"}},"containers":[{"name":"ok","image":"nginx","securityContext":{"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]}}}]}}"#;
    for v in VERSIONS {
        let suffix = v.replace('.', "");
        let (enforced, warned) = (format!("psa-enforce-{suffix}"), format!("psa-warn-{suffix}"));
        s.ok(v, &["create", "namespace", &enforced]);
        s.ok(v, &["create", "namespace", &warned]);
        s.ok(
            v,
            &[
                "label",
                "namespace",
                &enforced,
                "pod-security.kubernetes.io/enforce=restricted",
            ],
        );
        s.ok(
            v,
            &[
                "label",
                "namespace",
                &warned,
                "pod-security.kubernetes.io/warn=baseline",
            ],
        );

        // Enforce: a privileged pod is refused with upstream's message.
        let err = s.fails(
            v,
            &["-n", &enforced, "run", "priv", "--image=nginx", "--privileged"],
        );
        assert!(
            err.contains(
                "pods \"priv\" is forbidden: violates PodSecurity \"restricted:latest\": privileged (container \"priv\" must not set securityContext.privileged=true), allowPrivilegeEscalation != false (container \"priv\" must set securityContext.allowPrivilegeEscalation=false)"
            ),
            "{err}"
        );
        // A compliant pod is created, without warnings.
        let out = s.kubectl(
            v,
            &[
                "-n",
                &enforced,
                "run",
                "ok",
                "--image=nginx",
                "--overrides",
                RESTRICTED_POD,
            ],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && !stderr.contains("Warning"), "{stderr}");
        assert_eq!(
            s.ok(v, &["-n", &enforced, "get", "pod", "ok", "-o", "name"])
                .trim(),
            "pod/ok"
        );
        // Workloads are only warned about: their pods are what is enforced.
        let out = s.kubectl(
            v,
            &["-n", &enforced, "create", "deployment", "web", "--image=nginx"],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(
            stderr.contains("Warning: would violate PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false (container \"nginx\" must set securityContext.allowPrivilegeEscalation=false)"),
            "{stderr}"
        );

        // Warn: the privileged pod is created, and kubectl shows the warning.
        let out = s.kubectl(
            v,
            &["-n", &warned, "run", "priv", "--image=nginx", "--privileged"],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(
            stderr.contains("Warning: would violate PodSecurity \"baseline:latest\": privileged (container \"priv\" must not set securityContext.privileged=true)"),
            "{stderr}"
        );
        assert_eq!(
            s.ok(v, &["-n", &warned, "get", "pod", "priv", "-o", "name"])
                .trim(),
            "pod/priv"
        );

        // Enforcing baseline where a privileged pod runs warns about it; a bad level is refused.
        let out = s.kubectl(
            v,
            &[
                "label",
                "namespace",
                &warned,
                "pod-security.kubernetes.io/enforce=baseline",
            ],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(
            stderr.contains(&format!("Warning: existing pods in namespace \"{warned}\" violate the new PodSecurity enforce level \"baseline:latest\""))
                && stderr.contains("Warning: priv: privileged"),
            "{stderr}"
        );
        let err = s.fails(
            v,
            &[
                "label",
                "--overwrite",
                "namespace",
                &warned,
                "pod-security.kubernetes.io/enforce=strict",
            ],
        );
        assert!(
            err.contains("metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: \"strict\": must be one of privileged, baseline, restricted"),
            "{err}"
        );
    }
}

/// A watch that allows bookmarks gets one shortly before its timeout, carrying the latest
/// revision, also of changes it was not shown (another namespace).
#[test]
fn watches_get_bookmarks_before_they_time_out() {
    let s = Server::start();
    s.ok("1.33", &["create", "configmap", "first"]);
    s.ok("1.33", &["create", "namespace", "elsewhere"]);
    let watch = std::process::Command::new(support::kubectl_binary("1.33"))
        .arg("--kubeconfig")
        .arg(&s.kubeconfig)
        .args([
            "get",
            "--raw",
            "/api/v1/namespaces/default/configmaps?watch=true&allowWatchBookmarks=true&timeoutSeconds=4",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let other = s.ok(
        "1.33",
        &[
            "-n",
            "elsewhere",
            "create",
            "configmap",
            "later",
            "-o",
            "jsonpath={.metadata.resourceVersion}",
        ],
    );
    let started = std::time::Instant::now();
    let out = watch.wait_with_output().unwrap();
    assert!(
        started.elapsed() < std::time::Duration::from_secs(6),
        "the watch ended at its timeout"
    );
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert!(
        types.starts_with(&["ADDED"]) && types.contains(&"BOOKMARK"),
        "{types:?}"
    );
    let bm = events.iter().find(|e| e["type"] == "BOOKMARK").unwrap();
    let bm_rv: i64 = bm["object"]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(bm_rv >= other.trim().parse::<i64>().unwrap(), "{bm} vs {other}");
    assert_eq!(bm["object"]["kind"], "ConfigMap");
}

/// What a client reads back carries upstream's defaults: the namespace's name label, a pod's
/// probes, volumes and field references, a LimitRange's limits from its max, and no pod-only
/// defaults in a workload's template.
#[test]
fn served_objects_carry_upstreams_defaults() {
    let s = Server::start();
    let json = |args: &[&str]| -> serde_json::Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        serde_json::from_str(&s.ok("1.33", &all)).unwrap()
    };
    for v in VERSIONS {
        let ns = format!("defaults{}", v.replace('.', ""));
        s.ok(v, &["create", "namespace", &ns]);
        let got = json(&["get", "namespace", &ns]);
        assert_eq!(
            got["metadata"]["labels"]["kubernetes.io/metadata.name"],
            ns.as_str()
        );
        // The label cannot be changed: it always reads as the name.
        s.ok(
            v,
            &[
                "label",
                "namespace",
                &ns,
                "--overwrite",
                "kubernetes.io/metadata.name=x",
            ],
        );
        let got = json(&["get", "namespace", &ns]);
        assert_eq!(
            got["metadata"]["labels"]["kubernetes.io/metadata.name"],
            ns.as_str()
        );
    }

    let pod = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"},
      "spec": {"containers": [{"name": "c", "image": "nginx:1.25",
        "readinessProbe": {"httpGet": {"port": 80}},
        "env": [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "volumeMounts": [{"name": "conf", "mountPath": "/etc/conf"}, {"name": "scratch", "mountPath": "/tmp"}]}],
        "volumes": [{"name": "conf", "configMap": {"name": "conf"}}, {"name": "scratch"}]}}"#;
    s.ok_stdin("1.33", &["create", "-f", "-"], pod);
    let got = json(&["get", "pod", "web"]);
    let c = &got["spec"]["containers"][0];
    assert_eq!(
        c["readinessProbe"],
        serde_json::json!({"httpGet": {"port": 80, "path": "/", "scheme": "HTTP"},
            "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3})
    );
    assert_eq!(c["env"][0]["valueFrom"]["fieldRef"]["apiVersion"], "v1");
    assert_eq!(got["spec"]["volumes"][0]["configMap"]["defaultMode"], 420);
    assert_eq!(
        got["spec"]["volumes"][1],
        serde_json::json!({"name": "scratch", "emptyDir": {}})
    );
    assert_eq!(got["spec"]["enableServiceLinks"], true);

    s.ok("1.33", &["create", "deployment", "d", "--image=nginx:1.25"]);
    let got = json(&["get", "deployment", "d"]);
    let template = &got["spec"]["template"]["spec"];
    assert_eq!(template["schedulerName"], "default-scheduler");
    assert!(
        template.get("enableServiceLinks").is_none(),
        "pod-only defaults stay out of templates: {template}"
    );

    let lr = "apiVersion: v1\nkind: LimitRange\nmetadata:\n  name: bounds\n  namespace: default\nspec:\n  limits:\n  - type: Container\n    max: {cpu: 800m}\n    min: {cpu: 200m, memory: 64Mi}\n";
    s.ok_stdin("1.33", &["create", "-f", "-"], lr);
    let got = json(&["get", "limitrange", "bounds"]);
    let item = &got["spec"]["limits"][0];
    assert_eq!(item["default"], serde_json::json!({"cpu": "800m"}));
    assert_eq!(
        item["defaultRequest"],
        serde_json::json!({"cpu": "800m", "memory": "64Mi"})
    );
}

/// Objects over upstream's size limits are refused in its words.
#[test]
fn oversized_data_is_refused() {
    let s = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("big.txt");
    std::fs::write(&file, "x".repeat(1024 * 1024 + 1)).unwrap();
    let from = format!("--from-file={}", file.display());
    for v in VERSIONS {
        let err = s.fails(v, &["create", "configmap", "big", &from]);
        assert!(
            err.contains("ConfigMap \"big\" is invalid: []: Too long: may not be more than 1048576 bytes"),
            "{err}"
        );
        assert!(!s.kubectl(v, &["get", "configmap", "big"]).status.success());
    }
}

/// Fields upstream will not let change are refused with its words, and the object is kept as
/// it was.
#[test]
fn immutable_fields_are_refused() {
    let s = Server::start();
    for v in VERSIONS {
        let cm = format!("frozen{}", v.replace('.', ""));
        s.ok_stdin(
            v,
            &["create", "-f", "-"],
            &configmap("default", &cm, "immutable: true\n"),
        );
        let err = s.fails(
            v,
            &["patch", "configmap", &cm, "-p", r#"{"data":{"key":"changed"}}"#],
        );
        assert!(
            err.contains(&format!(
                "The ConfigMap \"{cm}\" is invalid: data: Forbidden: field is immutable when `immutable` is set"
            )),
            "{err}"
        );
        assert_eq!(
            s.ok(v, &["get", "configmap", &cm, "-o", "jsonpath={.data.key}"]),
            "value"
        );
        // Labels may still change.
        s.ok(v, &["label", "configmap", &cm, "tier=x"]);

        let d = format!("sel{}", v.replace('.', ""));
        s.ok(v, &["create", "deployment", &d, "--image=nginx:1.25"]);
        let err = s.fails(
            v,
            &[
                "patch",
                "deployment",
                &d,
                "-p",
                r#"{"spec":{"selector":{"matchLabels":{"app":"other"}},"template":{"metadata":{"labels":{"app":"other"}}}}}"#,
            ],
        );
        assert!(
            err.contains(&format!("The Deployment \"{d}\" is invalid: spec.selector: Invalid value: v1.LabelSelector{{MatchLabels:map[string]string{{\"app\":\"other\"}}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}}: field is immutable")),
            "{err}"
        );
        assert_eq!(
            s.ok(
                v,
                &[
                    "get",
                    "deployment",
                    &d,
                    "-o",
                    "jsonpath={.spec.selector.matchLabels.app}"
                ]
            ),
            d
        );
    }
}

/// A pod spec with mistakes is refused with every mistake named, as upstream words them; a
/// malformed quantity fails decoding; quantities are stored canonical. Nothing is stored for
/// a refused pod.
#[test]
fn pod_specs_are_validated_and_quantities_canonical() {
    let s = Server::start();
    let pod = |name: &str, container: &str, volumes: &str| {
        format!(
            r#"{{"apiVersion": "v1", "kind": "Pod", "metadata": {{"name": "{name}", "namespace": "default"}},
              "spec": {{"containers": [{{"name": "c", "image": "nginx:1.25", {container}}}], "volumes": [{volumes}]}}}}"#
        )
    };
    for v in VERSIONS {
        let bad = pod(
            "bad",
            r#""volumeMounts": [{"name": "nope", "mountPath": "/x"}],
               "ports": [{"containerPort": 70000}],
               "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}"#,
            r#"{"name": "v"}, {"name": "v", "emptyDir": {}}"#,
        );
        let err = String::from_utf8(s.fails_stdin(v, &["create", "-f", "-"], &bad)).unwrap();
        for want in [
            "The Pod \"bad\" is invalid: ",
            "spec.volumes[1].name: Duplicate value: \"v\"",
            "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
            "spec.containers[0].volumeMounts[0].name: Not found: \"nope\"",
            "spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1",
        ] {
            assert!(err.contains(want), "{want}\n{err}");
        }
        let malformed = pod("malformed", r#""resources": {"requests": {"cpu": "lots"}}"#, "");
        let err = String::from_utf8(s.fails_stdin(v, &["create", "-f", "-"], &malformed)).unwrap();
        assert!(
            err.contains("Error from server (BadRequest)")
                && err.contains("Pod in version \"v1\" cannot be handled as a Pod: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
            "{err}"
        );
        for name in ["bad", "malformed"] {
            assert!(
                !s.kubectl(v, &["get", "pod", name]).status.success(),
                "{name} was stored"
            );
        }
    }
    let good = pod(
        "good",
        r#""resources": {"requests": {"cpu": "0.25", "memory": "1.5Gi"}, "limits": {"cpu": 1, "memory": "2048Mi"}}"#,
        "",
    );
    s.ok_stdin("1.33", &["create", "-f", "-"], &good);
    let got: serde_json::Value = serde_json::from_str(&s.ok(
        "1.33",
        &[
            "get",
            "pod",
            "good",
            "-o",
            "jsonpath={.spec.containers[0].resources}",
        ],
    ))
    .unwrap();
    assert_eq!(
        got,
        serde_json::json!({"requests": {"cpu": "250m", "memory": "1536Mi"}, "limits": {"cpu": "1", "memory": "2Gi"}})
    );
}

/// A dual-stack cluster (two --service-cidr and --cluster-cidr ranges, one per family):
/// Services get the families their ipFamilyPolicy asks for, an address of each, upgrade and
/// downgrade as upstream; nodes get a pod CIDR of each family; a dual-stack pod's addresses
/// land in an EndpointSlice of each address type.
#[test]
fn dual_stack_services_nodes_and_slices() {
    let s = Server::start_with(&[
        "--service-cidr",
        "10.96.0.0/24,fd96::/112",
        "--cluster-cidr",
        "10.244.0.0/16,fd44::/56",
    ]);
    let v = "1.33";
    let svc = |name: &str, spec: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  selector:\n    app: dual\n  ports:\n  - port: 80\n{spec}"
        )
    };
    let fields = |name: &str| {
        s.ok(
            v,
            &[
                "get",
                "svc",
                name,
                "-o",
                "jsonpath={.spec.ipFamilyPolicy} {.spec.ipFamilies} {.spec.clusterIPs}",
            ],
        )
    };
    s.ok_stdin(v, &["apply", "-f", "-"], &svc("single", ""));
    s.ok_stdin(
        v,
        &["apply", "-f", "-"],
        &svc("both", "  ipFamilyPolicy: RequireDualStack\n"),
    );
    s.ok_stdin(
        v,
        &["apply", "-f", "-"],
        &svc("six", "  ipFamilyPolicy: PreferDualStack\n  ipFamilies: [IPv6]\n"),
    );
    let single = fields("single");
    assert!(
        single.starts_with("SingleStack [\"IPv4\"] [\"10.96.0."),
        "{single}"
    );
    let both = fields("both");
    assert!(
        both.starts_with("RequireDualStack [\"IPv4\",\"IPv6\"] [\"10.96.0.") && both.contains("\"fd96::"),
        "{both}"
    );
    let six = fields("six");
    assert!(
        six.starts_with("PreferDualStack [\"IPv6\",\"IPv4\"] [\"fd96::"),
        "{six}"
    );
    let primary = s.ok(v, &["get", "svc", "six", "-o", "jsonpath={.spec.clusterIP}"]);
    assert!(primary.starts_with("fd96::"), "{primary}");

    // Downgrade: SingleStack releases the secondary address, which another Service can take.
    let secondary = s.ok(v, &["get", "svc", "both", "-o", "jsonpath={.spec.clusterIPs[1]}"]);
    s.ok(
        v,
        &[
            "patch",
            "svc",
            "both",
            "--type=merge",
            "-p",
            r#"{"spec":{"ipFamilyPolicy":"SingleStack"}}"#,
        ],
    );
    let down = fields("both");
    assert!(down.starts_with("SingleStack [\"IPv4\"] [\"10.96.0."), "{down}");
    assert!(!down.contains("fd96"), "{down}");
    s.ok_stdin(
        v,
        &["apply", "-f", "-"],
        &svc(
            "taker",
            &format!("  ipFamilies: [IPv6]\n  clusterIP: {secondary}\n"),
        ),
    );
    assert_eq!(
        s.ok(v, &["get", "svc", "taker", "-o", "jsonpath={.spec.clusterIPs}"]),
        format!("[\"{secondary}\"]")
    );
    // Upgrade: the policy adds an address of the other family, the first one stays.
    let first = s.ok(v, &["get", "svc", "single", "-o", "jsonpath={.spec.clusterIP}"]);
    s.ok(
        v,
        &[
            "patch",
            "svc",
            "single",
            "--type=merge",
            "-p",
            r#"{"spec":{"ipFamilyPolicy":"PreferDualStack"}}"#,
        ],
    );
    let up = fields("single");
    assert!(
        up.starts_with(&format!(
            "PreferDualStack [\"IPv4\",\"IPv6\"] [\"{first}\",\"fd96::"
        )),
        "{up}"
    );
    // The primary address cannot change; a policy that cannot hold two families says so.
    let err = s.fails(
        v,
        &[
            "patch",
            "svc",
            "single",
            "--type=merge",
            "-p",
            r#"{"spec":{"clusterIP":"10.96.0.200","clusterIPs":["10.96.0.200"]}}"#,
        ],
    );
    assert!(
        err.contains("spec.clusterIPs[0]: Invalid value: []string{\"10.96.0.200\"}: may not change once set"),
        "{err}"
    );
    let err = s.fails_stdin(
        v,
        &["apply", "-f", "-"],
        &svc(
            "bad",
            "  ipFamilyPolicy: SingleStack\n  ipFamilies: [IPv4, IPv6]\n",
        ),
    );
    let err = String::from_utf8_lossy(&err);
    assert!(
        err.contains("spec.ipFamilyPolicy: Invalid value: \"SingleStack\": must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified"),
        "{err}"
    );

    // A node gets a pod CIDR of each family.
    s.ok_stdin(
        v,
        &["create", "-f", "-"],
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: dual-node\n",
    );
    let mut cidrs = String::new();
    for _ in 0..100 {
        cidrs = s.ok(
            v,
            &["get", "node", "dual-node", "-o", "jsonpath={.spec.podCIDRs}"],
        );
        if !cidrs.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        cidrs.starts_with("[\"10.244.") && cidrs.contains("/24\",\"fd44:") && cidrs.ends_with("::/64\"]"),
        "{cidrs}"
    );

    // A ready pod with an address of each family: one endpoint in a slice of each type.
    s.ok_stdin(
        v,
        &["create", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: dual-pod\n  labels:\n    app: dual\nspec:\n  nodeName: dual-node\n  containers:\n  - name: c\n    image: busybox\n",
    );
    s.ok(
        v,
        &[
            "patch",
            "pod",
            "dual-pod",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"phase":"Running","podIP":"10.244.0.5","podIPs":[{"ip":"10.244.0.5"},{"ip":"fd44::5"}],"conditions":[{"type":"Ready","status":"True"}]}}"#,
        ],
    );
    let mut got = String::new();
    for _ in 0..100 {
        got = s.ok(
            v,
            &[
                "get",
                "endpointslices",
                "-l",
                "kubernetes.io/service-name=six",
                "-o",
                "jsonpath={range .items[*]}{.addressType}={.endpoints[*].addresses[0]};{end}",
            ],
        );
        if got.contains("IPv6=fd44::5") && got.contains("IPv4=10.244.0.5") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut types: Vec<&str> = got.split(';').filter(|t| !t.is_empty()).collect();
    types.sort();
    assert_eq!(types, ["IPv4=10.244.0.5", "IPv6=fd44::5"], "{got}");
    // The Endpoints of an IPv6-primary Service hold the pod's IPv6 address.
    let mut ep = String::new();
    for _ in 0..100 {
        ep = s.ok(
            v,
            &[
                "get",
                "endpoints",
                "six",
                "-o",
                "jsonpath={.subsets[0].addresses[0].ip}",
            ],
        );
        if !ep.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(ep, "fd44::5");
}

/// `kubectl get --subresource`: the status subresource is shown with the resource's own
/// columns, the scale subresource with upstream's Scale columns (and as the Scale object
/// with `-o yaml`).
#[test]
fn get_shows_subresources_as_upstream_tables() {
    let s = Server::start();
    let v = "1.33";
    s.ok(
        v,
        &["create", "deployment", "web", "--image=busybox", "--replicas=3"],
    );
    let status = s.ok(v, &["get", "deploy", "web", "--subresource=status"]);
    let header: Vec<&str> = status.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
        "{status}"
    );
    let scale = s.ok(v, &["get", "deploy", "web", "--subresource=scale"]);
    let lines: Vec<Vec<&str>> = scale.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines[0], ["NAME", "DESIRED", "AVAILABLE", "AGE"], "{scale}");
    assert_eq!(lines[1][..2], ["web", "3"], "{scale}");
    let yaml = s.ok(v, &["get", "deploy", "web", "--subresource=scale", "-o", "yaml"]);
    assert!(
        yaml.contains("kind: Scale") && yaml.contains("replicas: 3"),
        "{yaml}"
    );
}

/// Ingresses and IngressClasses (networking.k8s.io/v1): `kubectl create ingress` in both
/// versions, the default class filled in by the DefaultIngressClass admission plugin, the
/// tables, upstream's validation words, status through its subresource, and describe.
#[test]
fn ingresses_and_their_classes_are_served() {
    let s = Server::start();
    s.wait_for_default_service_account("default");
    s.ok_stdin(
        "1.33",
        &["create", "-f", "-"],
        "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata:\n  name: traefik\n  annotations: {ingressclass.kubernetes.io/is-default-class: \"true\"}\nspec:\n  controller: traefik.io/ingress-controller\n",
    );
    for v in VERSIONS {
        let name = format!("web-{}", v.replace('.', "-"));
        let out = s.ok(
            v,
            &[
                "create",
                "ingress",
                &name,
                "--rule=foo.com/bar=svc1:8080,tls=my-cert",
            ],
        );
        assert_eq!(out.trim(), format!("ingress.networking.k8s.io/{name} created"));
        let table = s.ok(v, &["get", "ing", &name]);
        let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
        assert_eq!(
            table
                .lines()
                .next()
                .unwrap()
                .split_whitespace()
                .collect::<Vec<_>>(),
            ["NAME", "CLASS", "HOSTS", "ADDRESS", "PORTS", "AGE"]
        );
        // The default class was filled in; ADDRESS is empty until a controller reports one.
        assert_eq!(
            &row[..5],
            [name.as_str(), "traefik", "foo.com", "80,", "443"],
            "{table}"
        );
    }
    // A class named explicitly is kept; a bare rule is for every host.
    s.ok(
        "1.33",
        &[
            "create",
            "ingress",
            "other",
            "--class=nginx",
            "--rule=/path=svc:http",
        ],
    );
    let table = s.ok("1.27", &["get", "ing", "other"]);
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&row[..4], ["other", "nginx", "*", "80"], "{table}");
    let err = s.fails(
        "1.33",
        &["create", "ingress", "bad", "--rule=foo.com/bar=9svc:8080"],
    );
    assert!(
        err.contains(
            "spec.rules[0].http.paths[0].backend.service.name: Invalid value: \"9svc\": a DNS-1035 label"
        ),
        "{err}"
    );
    let err = String::from_utf8(s.fails_stdin(
        "1.33",
        &["create", "-f", "-"],
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: empty}\nspec: {}\n",
    ))
    .unwrap();
    assert!(
        err.contains("either `defaultBackend` or `rules` must be specified"),
        "{err}"
    );
    // Status is a subresource: a controller reports the address there.
    s.ok(
        "1.33",
        &[
            "patch",
            "ing",
            "other",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.10"}]}}}"#,
        ],
    );
    assert!(s.ok("1.33", &["get", "ing", "other"]).contains("192.0.2.10"));
    let described = s.ok("1.33", &["describe", "ing", "other"]);
    assert!(described.contains("Ingress Class:    nginx"), "{described}");
    let classes = s.ok("1.33", &["get", "ingressclass"]);
    assert!(classes.starts_with("NAME      CONTROLLER                      PARAMETERS   AGE\ntraefik   traefik.io/ingress-controller   <none>"), "{classes}");
    let err = s.fails(
        "1.33",
        &[
            "patch",
            "ingressclass",
            "traefik",
            "-p",
            r#"{"spec":{"controller":"other.io/x"}}"#,
        ],
    );
    assert!(
        err.contains("spec.controller: Invalid value: \"other.io/x\": field is immutable"),
        "{err}"
    );
}
