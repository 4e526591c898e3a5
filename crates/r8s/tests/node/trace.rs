//! `r8s trace`: the journey of the reference document's command, told by the running system
//! with its real timings — every stage present, in causal order, adding up to the time the
//! Deployment took to be ready; a rollout's second ReplicaSet; a pull that fails, with its
//! stage and error.

use std::process::Output;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::support;

use serde_json::Value;
use support::cluster::*;
use support::Server;

/// `r8s trace ARGS` against `s`.
fn trace(s: &Server, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_r8s"))
        .arg("trace")
        .arg("--kubeconfig")
        .arg(&s.kubeconfig)
        .args(args)
        .env("KUBECACHEDIR", s.dir.path().join("kubecache-r8s"))
        .output()
        .unwrap()
}

fn stages_of(s: &Server, object: &str) -> Vec<Value> {
    let out = trace(s, &[object, "-o", "json"]);
    assert!(
        out.status.success(),
        "r8s trace {object}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["kind"], "Trace", "{v}");
    v["stages"].as_array().unwrap().clone()
}

fn field<'a>(s: &'a Value, name: &str) -> &'a str {
    s["fields"][name].as_str().unwrap_or("")
}

fn began(s: &Value) -> u64 {
    s["startUnixNanos"].as_u64().unwrap()
}

fn end(s: &Value) -> u64 {
    began(s) + s["durationNanos"].as_u64().unwrap()
}

/// The outermost stages (depth 0) of `component`/`stage` that `pred` accepts.
fn groups<'a>(
    stages: &'a [Value],
    component: &str,
    stage: &str,
    pred: impl Fn(&Value) -> bool,
) -> Vec<&'a Value> {
    stages
        .iter()
        .filter(|s| s["depth"] == 0 && s["component"] == component && s["stage"] == stage && pred(s))
        .collect()
}

/// The stages under the outermost stage `root` (the ones after it until the next depth 0).
fn children<'a>(stages: &'a [Value], root: &Value) -> Vec<&'a Value> {
    let i = stages.iter().position(|s| std::ptr::eq(s, root)).unwrap();
    stages[i + 1..].iter().take_while(|s| s["depth"] != 0).collect()
}

/// Create the Deployment `kubectl create deployment nginx --image=nginx --replicas=3` makes,
/// and wait until a watch shows it available; the time from just before the create to then.
fn create_and_wait_available(s: &Server) -> Duration {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let kubeconfig = Kubeconfig::read_from(&s.kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .unwrap();
        let api: kube::Api<Deployment> =
            kube::Api::namespaced(kube::Client::try_from(config).unwrap(), "default");
        let deployment: Deployment = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "nginx", "labels": {"app": "nginx"}},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "nginx"}},
                "template": {
                    "metadata": {"labels": {"app": "nginx"}},
                    "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}
                }
            }
        }))
        .unwrap();
        let listed = api.list(&Default::default()).await.unwrap();
        let rv = listed.metadata.resource_version.unwrap();
        let wp = WatchParams::default().fields("metadata.name=nginx").timeout(120);
        let mut events = api.watch(&wp, &rv).await.unwrap().boxed();
        let t0 = Instant::now();
        api.create(&PostParams::default(), &deployment).await.unwrap();
        while let Some(event) = events.next().await {
            if let WatchEvent::Modified(d) = event.unwrap() {
                let status = d.status.unwrap_or_default();
                let generation = d.metadata.generation;
                if status.observed_generation == generation
                    && status.updated_replicas == Some(3)
                    && status.available_replicas == Some(3)
                {
                    return t0.elapsed();
                }
            }
        }
        panic!("the watch ended before the Deployment was available");
    })
}

#[test]
fn the_journey_of_a_deployment_is_told_in_causal_order() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let c = start("trace-node", "10.221.0.0/16", "r8str");
    let s = &c.s;

    // The north-star command's Deployment (as `kubectl create deployment nginx --image=nginx
    // --replicas=3` makes it), timed by a client from its create request until its watch
    // shows the Deployment available: kubectl's own start-up is not the cluster's time.
    let measured = create_and_wait_available(s);
    // The last status writes (the Deployment's own) may still be closing.
    std::thread::sleep(Duration::from_millis(500));
    let stages = stages_of(s, "deployment/nginx");
    let deployment_uid = json(s, &["get", "deployment", "nginx"])["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();

    // The API server: the create, with authentication, authorization, admission and the write.
    let create = groups(&stages, "apiserver", "request", |s| {
        field(s, "verb") == "create" && field(s, "object") == "Deployment default/nginx"
    });
    assert_eq!(create.len(), 1, "{stages:#?}");
    let create = create[0];
    assert_eq!(create["uid"], deployment_uid.as_str());
    assert_eq!(field(create, "code"), "201");
    let inner = children(&stages, create);
    let named = |name: &str| inner.iter().filter(|s| s["stage"] == name).count();
    let authn = inner.iter().find(|s| s["stage"] == "authn").expect("authn");
    assert!(!field(authn, "authenticator").is_empty(), "{authn}");
    let authz = inner.iter().find(|s| s["stage"] == "authz").expect("authz");
    assert!(!field(authz, "authorizer").is_empty(), "{authz}");
    assert!(!field(authz, "decision").is_empty(), "{authz}");
    assert_eq!(named("admission"), 2, "{inner:#?}");
    let mutating = inner
        .iter()
        .find(|s| s["stage"] == "admission" && field(s, "phase") == "mutating")
        .expect("mutating admission");
    assert!(
        field(mutating, "plugins").contains("NamespaceLifecycle "),
        "{mutating}"
    );
    let store = inner
        .iter()
        .find(|s| s["stage"] == "store.create")
        .expect("store.create");
    assert!(field(store, "revision").parse::<u64>().is_ok(), "{store}");

    // The controllers: the Deployment's ReplicaSet, and the ReplicaSet's pods.
    let synced = groups(&stages, "controller-manager", "deployment.sync", |s| {
        field(s, "decision").contains("created ReplicaSet nginx-")
    });
    assert_eq!(synced.len(), 1, "{stages:#?}");
    let rs_create = groups(&stages, "apiserver", "request", |s| {
        field(s, "verb") == "create" && field(s, "object").starts_with("ReplicaSet default/nginx-")
    });
    assert_eq!(rs_create.len(), 1, "{stages:#?}");
    assert_eq!(rs_create[0]["owner"], deployment_uid.as_str());
    let rs_uid = rs_create[0]["uid"].as_str().unwrap();
    let rs_synced = groups(&stages, "controller-manager", "replicaset.sync", |s| {
        s["uid"] == rs_uid && field(s, "decision").contains("created")
    });
    assert!(!rs_synced.is_empty(), "{stages:#?}");
    let pod_creates = groups(&stages, "apiserver", "request", |s| {
        field(s, "verb") == "create"
            && field(s, "subresource").is_empty()
            && field(s, "object").starts_with("Pod default/nginx-")
            && s["owner"] == rs_uid
    });
    assert_eq!(pod_creates.len(), 3, "{stages:#?}");
    assert!(began(create) < began(synced[0]) && began(synced[0]) < began(rs_create[0]));
    assert!(began(rs_create[0]) < began(rs_synced[0]));

    // Each pod: scheduled and bound, then the kubelet's sandbox, image and container, then Ready.
    for pod in pod_creates {
        let uid = pod["uid"].as_str().unwrap();
        assert!(began(rs_synced[0]) < began(pod));
        let scheduled = groups(&stages, "scheduler", "schedule", |s| s["uid"] == uid);
        assert_eq!(scheduled.len(), 1, "{stages:#?}");
        assert!(
            field(scheduled[0], "decision").starts_with("1 of 1 node feasible; chose trace-node"),
            "{}",
            scheduled[0]
        );
        assert!(children(&stages, scheduled[0])
            .iter()
            .any(|s| s["stage"] == "bind" && field(s, "node") == "trace-node"));
        let binding = groups(&stages, "apiserver", "request", |s| {
            s["uid"] == uid && field(s, "subresource") == "binding"
        });
        assert_eq!(binding.len(), 1, "{stages:#?}");
        let synced = groups(&stages, "kubelet", "kubelet.sync_pod", |s| {
            s["uid"] == uid && field(s, "decision").contains("ran the pod's sandbox")
        });
        assert_eq!(synced.len(), 1, "{stages:#?}");
        let admitted = children(&stages, pod);
        assert!(
            admitted.iter().any(|s| s["stage"] == "admission"
                && field(s, "decision").contains("ServiceAccount")
                && field(s, "decision").ends_with("changed the object")),
            "{admitted:#?}"
        );
        let steps = children(&stages, synced[0]);
        let step = |name: &str| {
            *steps
                .iter()
                .find(|s| s["stage"] == name)
                .unwrap_or_else(|| panic!("{name} in {steps:#?}"))
        };
        assert!(
            field(step("cri.run_pod_sandbox"), "ip").starts_with("10.221."),
            "{steps:#?}"
        );
        assert!(field(step("image"), "decision").contains("already present on machine"));
        assert_eq!(field(step("cri.create_container"), "container"), "nginx");
        assert_eq!(field(step("cri.start_container"), "container"), "nginx");
        assert!(field(synced[0], "decision").contains("started container nginx"));
        let ready = groups(&stages, "kubelet", "kubelet.status", |s| {
            s["uid"] == uid && field(s, "decision").contains("Ready=True")
        });
        assert!(!ready.is_empty(), "{stages:#?}");
        // Causal order: created, scheduled, bound, run, ready.
        assert!(began(pod) < began(scheduled[0]));
        assert!(began(scheduled[0]) < began(binding[0]));
        assert!(began(binding[0]) < began(synced[0]));
        assert!(began(step("cri.run_pod_sandbox")) < began(step("cri.start_container")));
        // Ready is written (by the status manager, beside the worker) once the container runs.
        assert!(end(step("cri.start_container")) <= began(ready[0]));
    }

    // The story spans the time the client waited, within 10%.
    let first = stages.iter().map(began).min().unwrap();
    let last = stages.iter().map(end).max().unwrap();
    let told = Duration::from_nanos(last - first);
    let gap = measured.as_secs_f64() - told.as_secs_f64();
    eprintln!("trace: told {told:?}, measured {measured:?}");
    assert!(
        gap.abs() <= measured.as_secs_f64() * 0.1,
        "told {told:?}, measured {measured:?}"
    );

    // The timeline in the terminal: one line per stage, indented by component.
    let out = trace(s, &["deployment/nginx"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    eprintln!("{text}");
    assert!(
        text.starts_with(&format!("Deployment default/nginx (uid {deployment_uid})")),
        "{text}"
    );
    for line in [
        "apiserver: request create Deployment default/nginx",
        "  controller-manager: deployment.sync",
        "    scheduler: schedule",
        "      kubelet: kubelet.sync_pod",
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }

    // The web page, in a real (headless) browser through `kubectl proxy`: a swim lane per
    // component, in its colour, and the stages' labels.
    browser_shows_the_lanes(s);

    // A rollout: the second ReplicaSet, and the first scaled down.
    s.ok(V, &["set", "env", "deployment/nginx", "ROLLED=1"]);
    s.ok(V, &["rollout", "status", "deployment/nginx", "--timeout=120s"]);
    let stages = stages_of(s, "deployment/nginx");
    let replicasets: std::collections::HashSet<&str> = groups(&stages, "apiserver", "request", |s| {
        field(s, "verb") == "create" && field(s, "object").starts_with("ReplicaSet default/nginx-")
    })
    .iter()
    .map(|s| s["uid"].as_str().unwrap())
    .collect();
    assert_eq!(replicasets.len(), 2, "{stages:#?}");
    assert!(
        !groups(&stages, "controller-manager", "deployment.sync", |s| {
            field(s, "decision").contains("scaled down ReplicaSet")
        })
        .is_empty(),
        "{stages:#?}"
    );

    // A Service's story: its create, the EndpointSlice made for it, and each node's proxy and
    // DNS programming it.
    s.ok(V, &["expose", "deployment", "nginx", "--port=80"]);
    let cluster_ip = s.ok(
        V,
        &["get", "service", "nginx", "-o", "jsonpath={.spec.clusterIP}"],
    );
    let stages = wait_for(60, "the proxy's and DNS's stages of the Service", || {
        let stages = stages_of(s, "service/nginx");
        let programmed = stages.iter().any(|s| {
            s["stage"] == "proxy.sync"
                && field(s, "node") == "trace-node"
                && field(s, "decision") == "programmed 3 endpoints"
        });
        let named = stages.iter().any(|s| {
            s["stage"] == "dns.update"
                && field(s, "decision") == format!("nginx.default.svc.cluster.local. answers {cluster_ip}")
        });
        (programmed && named).then_some(stages)
    });
    assert_eq!(
        groups(&stages, "apiserver", "request", |s| {
            field(s, "verb") == "create" && field(s, "object") == "Service default/nginx"
        })
        .len(),
        1,
        "{stages:#?}"
    );
    assert!(
        !groups(&stages, "apiserver", "request", |s| {
            field(s, "verb") == "create" && field(s, "object").starts_with("EndpointSlice default/nginx-")
        })
        .is_empty(),
        "{stages:#?}"
    );

    // A pull that fails: the image stage says so, with the runtime's error.
    s.ok(V, &["run", "unpullable", "--image=127.0.0.1:1/none:1"]);
    let failed = wait_for(60, "the failed pull in the trace", || {
        let stages = stages_of(s, "pod/unpullable");
        stages
            .iter()
            .find(|s| s["stage"] == "image" && field(s, "error").starts_with("ErrImagePull"))
            .cloned()
    });
    assert_eq!(field(&failed, "image"), "127.0.0.1:1/none:1", "{failed}");
    let out = trace(s, &["pod/unpullable"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("image") && text.contains("FAILED: ErrImagePull"),
        "{text}"
    );

    // What cannot be traced is said so.
    let out = trace(s, &["deployment/absent"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("deployments.apps \"absent\" not found"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = trace(s, &["nginx"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("KIND/NAME"));
}

/// Stops a child process (`kubectl proxy`) when dropped.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn browser_shows_the_lanes(s: &Server) {
    use std::io::BufRead;
    let mut proxy = Child(
        std::process::Command::new(support::kubectl_binary(V))
            .args(["proxy", "--port=0", "--address=127.0.0.1", "--kubeconfig"])
            .arg(&s.kubeconfig)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    std::io::BufReader::new(proxy.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let address = line
        .trim()
        .strip_prefix("Starting to serve on ")
        .unwrap_or_else(|| panic!("kubectl proxy said {line:?}"))
        .to_owned();
    let url = format!("http://{address}/trace/apis/apps/v1/namespaces/default/deployments/nginx");
    let profile = tempfile::tempdir().unwrap();
    let chromium = |extra: &[&str]| {
        let out = std::process::Command::new("chromium")
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(["--window-size=1200,4000"])
            .args(extra)
            .arg(&url)
            .output()
            .expect("chromium (scripts/setup.sh installs it)");
        assert!(
            out.status.success(),
            "chromium: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    // What the browser made of the page: the lanes and the stages' labels.
    let dom = String::from_utf8(chromium(&["--dump-dom"]).stdout).unwrap();
    assert!(
        dom.contains("<title>r8s trace: Deployment default/nginx</title>"),
        "{dom}"
    );
    for lane in ["apiserver", "controller-manager", "scheduler", "kubelet"] {
        assert!(dom.contains(&format!("data-lane=\"{lane}\"")), "{lane} in {dom}");
    }
    for label in [
        "request create Deployment default/nginx",
        "deployment.sync Deployment default/nginx: created ReplicaSet nginx-",
        "schedule Pod default/nginx-",
        "cri.run_pod_sandbox",
    ] {
        assert!(dom.contains(label), "{label} in {dom}");
    }
    // What it drew: each lane's colour in the screenshot.
    let shot = profile.path().join("trace.png");
    chromium(&[&format!("--screenshot={}", shot.display())]);
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut pixels).unwrap();
    let channels = frame.color_type.samples();
    assert!(
        frame.width >= 1000 && frame.height >= 1000,
        "{}x{}",
        frame.width,
        frame.height
    );
    for (lane, colour) in &r8s_trace::page::LANES[..4] {
        let rgb = [
            u8::from_str_radix(&colour[1..3], 16).unwrap(),
            u8::from_str_radix(&colour[3..5], 16).unwrap(),
            u8::from_str_radix(&colour[5..7], 16).unwrap(),
        ];
        let count = pixels[..frame.buffer_size()]
            .chunks(channels)
            .filter(|p| p[..3] == rgb)
            .count();
        assert!(
            count > 2_000,
            "{lane}'s colour {colour}: {count} pixels in the screenshot"
        );
    }
}
