//! The Service proxy end to end: `r8s server` programs its nftables table from the Services
//! and EndpointSlices, and pods reach Services by cluster IP and by name, across replicas; the
//! host reaches a NodePort on the node's pod-network address; a Service without endpoints
//! refuses at once; scaling to zero and back and deleting a Service follow; a clean stop
//! removes the table. Clients are busybox's `nc` in a pod and curl on the host.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::support;

use support::cluster::*;

const OBJECTS: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {name: web}
  spec:
    selector: {app: web}
    ports: [{name: http, port: 80, targetPort: 8080}]
- apiVersion: v1
  kind: Service
  metadata: {name: web-np}
  spec:
    type: NodePort
    selector: {app: web}
    ports: [{port: 80, targetPort: 8080, nodePort: 30080}]
- apiVersion: v1
  kind: Service
  metadata: {name: empty}
  spec:
    selector: {app: nothing}
    ports: [{port: 80}]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: Role
  metadata: {name: pod-reader}
  rules: [{apiGroups: [""], resources: [pods], verbs: [list]}]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: RoleBinding
  metadata: {name: default-reads-pods}
  roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-reader}
  subjects: [{kind: ServiceAccount, name: default, namespace: default}]
"#;

/// The client pod: busybox, with the host's (static) kubectl mounted, to be an in-cluster
/// client.
fn client_pod() -> String {
    let kubectl = support::kubectl_binary(V);
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: client}}
spec:
  containers:
  - name: c
    image: busybox
    command: [sleep, "3600"]
    volumeMounts: [{{name: kubectl, mountPath: /kubectl, readOnly: true}}]
  volumes:
  - name: kubectl
    hostPath: {{path: "{}", type: File}}
"#,
        kubectl.display()
    )
}

fn web_pod(name: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}, labels: {{app: web}}}}
spec:
  containers:
  - name: c
    image: busybox
    command: [sh, -c, "mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www"]
    readinessProbe:
      tcpSocket: {{port: 8080}}
      periodSeconds: 1
"#
    )
}

/// An HTTP GET from the client pod with busybox's nc: the body, or why it failed.
fn get(s: &support::Server, host: &str, port: u16) -> Result<String, String> {
    let script = format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {host} {port}");
    let out = s.kubectl(V, &["exec", "client", "--", "sh", "-c", &script]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    match text.split_once("\r\n\r\n") {
        Some((head, body)) if head.contains("200") => Ok(body.trim().to_owned()),
        _ => Err(format!("{text}{}", String::from_utf8_lossy(&out.stderr))),
    }
}

fn ready_endpoints(s: &support::Server, svc: &str) -> usize {
    let out = s.kubectl(
        V,
        &[
            "get",
            "endpointslices",
            "-l",
            &format!("kubernetes.io/service-name={svc}"),
            "-o",
            "json",
        ],
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
        .filter(|e| e["conditions"]["ready"] != false)
        .count()
}

/// An address the test puts on the loopback link (the node's "external" address, where
/// load-balanced Services are reached), removed when dropped.
struct LoAddress(&'static str);

impl LoAddress {
    fn add(addr: &'static str) -> Self {
        let _ = Command::new("ip")
            .args([
                "addr",
                "add",
                &format!("{addr}/32"),
                "dev",
                "lo",
                "label",
                "lo:r8s-test",
            ])
            .status();
        LoAddress(addr)
    }
}

impl Drop for LoAddress {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["addr", "del", &format!("{}/32", self.0), "dev", "lo"])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

fn curl(url: &str) -> String {
    let out = Command::new("curl")
        .args(["-sS", "-m", "5", url])
        .output()
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout).trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    )
}

/// What `ip ARGS` prints.
fn ip(args: &[&str]) -> String {
    String::from_utf8_lossy(&Command::new("ip").args(args).output().unwrap().stdout).into_owned()
}

fn table() -> Option<String> {
    let out = Command::new("nft")
        .args(["list", "table", "ip", "r8s"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn pods_reach_services_by_address_and_name_through_the_proxy() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    // No blackhole route for the Service range here: r8s guards it itself (checked before
    // any traffic), and a route would drop refused connections before the proxy refuses them.
    let external = LoAddress::add("10.199.255.1");
    let mut c = start_with(
        "proxy-node",
        "10.198.0.0/16",
        "r8sb",
        &["--node-external-ip", external.0],
    );
    let s = &c.s;
    // The guard is there before any Service of the test: the Service range's unallocated
    // addresses are dropped, the cluster CIDR outside the node's bridge is a blackhole.
    let t = table().expect("the r8s table");
    assert!(t.contains("ip daddr 10.43.0.0/16 drop"), "{t}");
    let routes = ip(&["route", "show", "type", "blackhole"]);
    assert!(routes.contains("10.198.0.0/16"), "{routes}");

    s.wait_for_default_service_account("default");
    s.ok_stdin(V, &["create", "-f", "-"], OBJECTS);
    s.ok_stdin(V, &["create", "-f", "-"], &client_pod());
    for name in ["web-1", "web-2"] {
        s.ok_stdin(V, &["create", "-f", "-"], &web_pod(name));
    }
    wait_for(90, "client Running", || {
        (pod_json(s, "client")?["status"]["phase"] == "Running").then_some(())
    });
    wait_for(90, "two ready web endpoints", || {
        (ready_endpoints(s, "web") == 2).then_some(())
    });
    let web_ip = s.ok(V, &["get", "service", "web", "-o", "jsonpath={.spec.clusterIP}"]);

    // By cluster IP: both replicas answer over repeated requests.
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..30 {
        match get(s, &web_ip, 80) {
            Ok(body) => {
                seen.insert(body);
            }
            Err(e) => panic!("GET {web_ip}:80 from a pod: {e}\n{}", table().unwrap_or_default()),
        }
        if seen.len() == 2 {
            break;
        }
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec!["web-1", "web-2"]);
    // A Service without a selector routes to the Endpoints someone writes for it (mirrored
    // into an EndpointSlice, as upstream's mirroring controller does).
    let web_1 = pod_json(s, "web-1").unwrap()["status"]["podIP"]
        .as_str()
        .unwrap()
        .to_owned();
    s.ok_stdin(
        V,
        &["create", "-f", "-"],
        &format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: manual\nspec:\n  ports:\n  - port: 80\n    targetPort: 8080\n---\napiVersion: v1\nkind: Endpoints\nmetadata:\n  name: manual\nsubsets:\n- addresses:\n  - ip: {web_1}\n  ports:\n  - port: 8080\n"
        ),
    );
    let manual_ip = s.ok(
        V,
        &["get", "service", "manual", "-o", "jsonpath={.spec.clusterIP}"],
    );
    let body = wait_for(20, "the selector-less Service answering", || {
        get(s, &manual_ip, 80).ok()
    });
    assert_eq!(body, "web-1");
    let managed = s.ok(
        V,
        &[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=manual",
            "-o",
            "jsonpath={.items[*].metadata.labels.endpointslice\\.kubernetes\\.io/managed-by}",
        ],
    );
    assert_eq!(managed, "endpointslicemirroring-controller.k8s.io");
    // Deleting the Service takes its Endpoints (the endpoints controller's rule, selector or
    // not) and the mirrored slice with it.
    s.ok(V, &["delete", "service", "manual"]);
    wait_for(20, "manual's Endpoints and slice gone", || {
        let ep = s.kubectl(V, &["get", "endpoints", "manual"]);
        let slices = s.ok(
            V,
            &[
                "get",
                "endpointslices",
                "-l",
                "kubernetes.io/service-name=manual",
                "-o",
                "name",
            ],
        );
        (!ep.status.success() && slices.is_empty()).then_some(())
    });

    // By name, through cluster DNS.
    for name in ["web", "web.default", "web.default.svc.cluster.local"] {
        let body = get(s, name, 80).unwrap_or_else(|e| panic!("GET {name}: {e}"));
        assert!(body == "web-1" || body == "web-2", "{body}");
    }
    // A NodePort, from the host, on the node's address on the pod network.
    let cidr = s.ok(
        V,
        &["get", "node", "proxy-node", "-o", "jsonpath={.spec.podCIDR}"],
    );
    let base = cidr.split('/').next().unwrap().to_owned();
    let gateway = format!("{}.1", base.rsplit_once('.').unwrap().0);
    let out = Command::new("curl")
        .args(["-sS", "-m", "5", &format!("http://{gateway}:30080/")])
        .output()
        .unwrap();
    let body = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(
        body == "web-1" || body == "web-2",
        "NodePort: {body}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // LoadBalancer Services get the node's (external) address, and it routes; a second one
    // on the same port waits with an event naming the first, and gets the address once the
    // first is gone.
    for name in ["web-lb", "web-lb2"] {
        s.ok(V, &["create", "service", "loadbalancer", name, "--tcp=8081:8080"]);
        s.ok(
            V,
            &[
                "patch",
                "service",
                name,
                "-p",
                r#"{"spec":{"selector":{"app":"web"}}}"#,
            ],
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let ingress = |name: &str| {
        s.ok(
            V,
            &[
                "get",
                "service",
                name,
                "-o",
                "jsonpath={.status.loadBalancer.ingress[*].ip}",
            ],
        )
    };
    wait_for(20, "web-lb's ingress", || {
        (ingress("web-lb") == external.0).then_some(())
    });
    let body = wait_for(20, "web-lb answering", || {
        let b = curl(&format!("http://{}:8081/", external.0));
        (b == "web-1" || b == "web-2").then_some(b)
    });
    assert!(body.starts_with("web-"));
    wait_for(20, "web-lb2's warning", || {
        let ev = s.ok(
            V,
            &["get", "events", "--field-selector", "involvedObject.name=web-lb2"],
        );
        ev.contains("LoadBalancerPortInUse").then_some(())
    });
    assert_eq!(ingress("web-lb2"), "");
    let listed = s.ok(V, &["get", "service", "web-lb2"]);
    assert!(listed.contains("<pending>"), "{listed}");
    s.ok(V, &["delete", "service", "web-lb"]);
    wait_for(20, "web-lb2's ingress", || {
        (ingress("web-lb2") == external.0).then_some(())
    });
    // Keeping client addresses (externalTrafficPolicy Local): a health-check node port
    // answers as kube-proxy's, and the ingress still routes (to this node's endpoints).
    s.ok(
        V,
        &[
            "patch",
            "service",
            "web-lb2",
            "-p",
            r#"{"spec":{"externalTrafficPolicy":"Local"}}"#,
        ],
    );
    let health = s.ok(
        V,
        &[
            "get",
            "service",
            "web-lb2",
            "-o",
            "jsonpath={.spec.healthCheckNodePort}",
        ],
    );
    let health_url = format!("http://127.0.0.1:{health}/");
    let answer = wait_for(20, "the health check answering", || {
        let b = curl(&health_url);
        b.contains("\"localEndpoints\": 2").then_some(b)
    });
    assert!(
        answer.contains("\"name\": \"web-lb2\"") && answer.contains("\"serviceProxyHealthy\": true"),
        "{answer}"
    );
    let body = curl(&format!("http://{}:8081/", external.0));
    assert!(body == "web-1" || body == "web-2", "{body}");
    s.ok(V, &["delete", "service", "web-lb2"]);
    wait_for(20, "the health check gone", || {
        curl(&health_url).contains("curl: (7)").then_some(())
    });

    // No endpoints: refused at once, not a timeout.
    let empty_ip = s.ok(
        V,
        &["get", "service", "empty", "-o", "jsonpath={.spec.clusterIP}"],
    );
    let started = Instant::now();
    let err = get(s, &empty_ip, 80).unwrap_err();
    assert!(err.contains("refused"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );

    // Scaled to zero: refused; back to one: answered again.
    s.ok(V, &["delete", "pod", "web-1", "web-2", "--grace-period=1"]);
    wait_for(30, "web refusing", || {
        get(s, &web_ip, 80)
            .err()
            .filter(|e| e.contains("refused"))
            .map(|_| ())
    });
    s.ok_stdin(V, &["create", "-f", "-"], &web_pod("web-3"));
    wait_for(60, "web answering again", || {
        (get(s, &web_ip, 80).ok()? == "web-3").then_some(())
    });

    // An in-cluster client: kubectl in a pod finds the API server through the kubernetes
    // Service's variables and the service account token, and has the account's rights.
    let env = s.ok(V, &["exec", "client", "--", "env"]);
    assert!(env.contains("KUBERNETES_SERVICE_HOST=10.43.0.1"), "{env}");
    assert!(env.contains("KUBERNETES_SERVICE_PORT=443"), "{env}");
    assert!(env.contains(&format!("WEB_SERVICE_HOST={web_ip}")), "{env}");
    let pods = s.ok(
        V,
        &["exec", "client", "--", "/kubectl", "get", "pods", "-o", "name"],
    );
    assert!(
        pods.contains("pod/client") && pods.contains("pod/web-3"),
        "{pods}"
    );
    let out = s.kubectl(V, &["exec", "client", "--", "/kubectl", "get", "secrets"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("system:serviceaccount:default:default")
            && err.contains("forbidden"),
        "{err}"
    );

    // The endpoint controllers date the change they write, and the proxy measures from it
    // to its rules being live; its metrics are on the agent's /metrics.
    for what in [
        &["endpointslices", "-l", "kubernetes.io/service-name=web"][..],
        &["endpoints", "web"],
    ] {
        wait_for(15, &format!("the trigger time on {what:?}"), || {
            let mut args = vec!["get"];
            args.extend_from_slice(what);
            args.extend(["-o", "json"]);
            let out = s.ok(V, &args);
            (out.contains("endpoints.kubernetes.io/last-change-trigger-time") && out.contains("web-3"))
                .then_some(())
        });
    }
    let metrics = s.ok(V, &["get", "--raw", "/api/v1/nodes/proxy-node/proxy/metrics"]);
    let value = |name: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("{name} not in\n{metrics}"))
    };
    assert!(
        value("kubeproxy_sync_proxy_rules_duration_seconds_count") >= 2.0,
        "{metrics}"
    );
    assert!(value("kubeproxy_network_programming_duration_seconds_count") >= 1.0);
    assert!(
        value("r8s_proxy_services") >= 3.0,
        "web, web-np, empty (and kubernetes)"
    );

    // Deleting the Service removes its rules (its chains a moment later).
    s.ok(V, &["delete", "service", "web"]);
    wait_for(15, "web's rules gone", || {
        let t = table()?;
        (!t.contains("default/web/") && !t.contains(&format!("{web_ip} . tcp . 80"))).then_some(())
    });

    // A clean stop removes the table and the route.
    assert!(c.s.terminate(Duration::from_secs(60)), "the server did not stop");
    assert!(table().is_none(), "the r8s table outlived the server");
    let routes = ip(&["route", "show", "type", "blackhole"]);
    assert!(!routes.contains("10.198.0.0/16"), "{routes}");
    let lo = ip(&["addr", "show", "dev", "lo"]);
    assert!(!lo.contains("10.43.0.1/32"), "{lo}");
}
