//! Cluster DNS end to end: pods resolve Services by name through the resolv.conf the kubelet
//! gives them (nameserver --cluster-dns, search <ns>.svc.cluster.local …), answered by the
//! agent from the Services and EndpointSlices it follows; busybox's nslookup is the client,
//! and dig (the dnsutils image of Kubernetes' DNS debugging page) for what nslookup cannot
//! show: record types, TCP, NODATA against NXDOMAIN, names forwarded to the node's resolvers.

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
    ports: [{name: http, port: 80}]
- apiVersion: v1
  kind: Service
  metadata: {name: db}
  spec:
    clusterIP: None
    selector: {app: db}
    ports: [{name: pg, port: 5432}]
- apiVersion: v1
  kind: Service
  metadata: {name: ext}
  spec: {type: ExternalName, externalName: web.default.svc.cluster.local}
- apiVersion: v1
  kind: Pod
  metadata: {name: db-0, labels: {app: db}}
  spec:
    hostname: db-0
    subdomain: db
    containers: [{name: c, image: busybox, command: [sleep, "3600"]}]
- apiVersion: v1
  kind: Pod
  metadata: {name: client}
  spec:
    containers: [{name: c, image: busybox, command: [sleep, "3600"]}]
- apiVersion: v1
  kind: Pod
  metadata: {name: dnsutils}
  spec:
    terminationGracePeriodSeconds: 1
    containers: [{name: dnsutils, image: "registry.k8s.io/e2e-test-images/jessie-dnsutils:1.3", command: [sleep, "3600"]}]
- apiVersion: v1
  kind: Pod
  metadata: {name: plain}
  spec:
    dnsPolicy: Default
    terminationGracePeriodSeconds: 1
    containers: [{name: c, image: busybox, command: [sleep, "3600"]}]
"#;

/// What busybox's nslookup prints as the addresses of `name` (run in the client pod).
fn lookup(s: &support::Server, args: &[&str]) -> (bool, String) {
    let mut a = vec!["exec", "client", "--", "nslookup"];
    a.extend_from_slice(args);
    let out = s.kubectl(V, &a);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// What `dig ARGS` prints in the dnsutils pod.
fn dig(s: &support::Server, args: &[&str]) -> String {
    let mut a = vec!["exec", "dnsutils", "--", "dig"];
    a.extend_from_slice(args);
    let out = s.kubectl(V, &a);
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout).trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    )
}

/// The node's own resolver, as far as cluster DNS knows it: a server on loopback that
/// answers `outside.example.` with 192.0.2.55 and anything else with NXDOMAIN, until dropped.
struct Upstream {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

const UPSTREAM: &str = "127.0.0.88";

impl Upstream {
    fn start() -> Self {
        use hickory_proto::op::{Message, MessageType, ResponseCode};
        use hickory_proto::rr::{rdata::A, RData, Record};
        let socket = std::net::UdpSocket::bind((UPSTREAM, 53)).unwrap();
        socket
            .set_read_timeout(Some(std::time::Duration::from_millis(100)))
            .unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 1500];
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                let Ok((n, from)) = socket.recv_from(&mut buf) else {
                    continue;
                };
                let Ok(q) = Message::from_vec(&buf[..n]) else {
                    continue;
                };
                let mut a = Message::new();
                a.set_id(q.id())
                    .set_message_type(MessageType::Response)
                    .set_recursion_desired(q.recursion_desired())
                    .set_recursion_available(true)
                    .add_queries(q.queries().to_vec());
                match q.queries().first() {
                    Some(query) if query.name().to_ascii() == "outside.example." => {
                        a.add_answer(Record::from_rdata(
                            query.name().clone(),
                            30,
                            RData::A(A::new(192, 0, 2, 55)),
                        ));
                    }
                    _ => {
                        a.set_response_code(ResponseCode::NXDomain);
                    }
                }
                let _ = socket.send_to(&a.to_vec().unwrap(), from);
            }
        });
        Upstream {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn pods_resolve_services_through_cluster_dns() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    // Queries go to 10.43.0.10: should cluster DNS not hold it, they must not leave the host.
    let _guard = Blackhole::install("10.43.0.0/16");
    let _upstream = Upstream::start();
    let c = start_prepared("dns-node", "10.197.0.0/16", "r8sd", &[], |data| {
        stage_image(data, "dnsutils.tar");
        std::fs::write(
            data.join("resolv.conf"),
            format!("nameserver {UPSTREAM}\nsearch r8s-node.test\n"),
        )
        .unwrap();
    });
    let s = &c.s;
    s.wait_for_default_service_account("default");
    s.ok_stdin(V, &["create", "-f", "-"], OBJECTS);
    for name in ["db-0", "client", "plain", "dnsutils"] {
        wait_for(90, &format!("{name} Running"), || {
            (pod_json(s, name)?["status"]["phase"] == "Running").then_some(())
        });
    }
    // The server's own node shows its roles, as k3s's does.
    wait_for(30, "the node's roles", || {
        let out = s.ok(V, &["get", "node", "dns-node"]);
        out.contains("control-plane,master").then_some(())
    });
    let web_ip = s.ok(V, &["get", "service", "web", "-o", "jsonpath={.spec.clusterIP}"]);
    let db_ip = wait_for(30, "db-0's address", || {
        let ip = pod_json(s, "db-0")?["status"]["podIP"].as_str()?.to_owned();
        (!ip.is_empty()).then_some(ip)
    });
    // The pod's resolv.conf names the cluster DNS address, which answers.
    let resolv = s.ok(V, &["exec", "client", "--", "cat", "/etc/resolv.conf"]);
    assert!(resolv.contains("nameserver 10.43.0.10"), "{resolv}");
    assert!(
        resolv.contains("search default.svc.cluster.local svc.cluster.local cluster.local"),
        "{resolv}"
    );
    // dnsPolicy Default: the node's resolver, from the agent's --resolv-conf.
    let plain = s.ok(V, &["exec", "plain", "--", "cat", "/etc/resolv.conf"]);
    assert!(plain.contains("search r8s-node.test"), "{plain}");
    assert!(!plain.contains("10.43.0.10"), "{plain}");

    // A ClusterIP Service by its full name.
    let (ok, out) = lookup(s, &["web.default.svc.cluster.local"]);
    let dns_log: Vec<String> = s
        .log()
        .lines()
        .filter(|l| l.contains("dns"))
        .map(String::from)
        .collect();
    assert!(
        ok && out.contains(&format!("Address: {web_ip}")),
        "{out}\n{}",
        dns_log.join("\n")
    );
    // A headless Service: its ready pod, and the pod by hostname.subdomain (once its
    // endpoint is in the EndpointSlice).
    let out = wait_for(30, "db's endpoint in DNS", || {
        let (ok, out) = lookup(s, &["db.default.svc.cluster.local"]);
        (ok && out.contains(&format!("Address: {db_ip}"))).then_some(out)
    });
    assert!(!out.contains(&web_ip), "{out}");
    let (ok, out) = lookup(s, &["db-0.db.default.svc.cluster.local"]);
    assert!(ok && out.contains(&format!("Address: {db_ip}")), "{out}");
    // SRV for a named port.
    let (ok, out) = lookup(s, &["-type=srv", "_http._tcp.web.default.svc.cluster.local"]);
    assert!(ok && out.contains("web.default.svc.cluster.local"), "{out}");
    assert!(out.contains("80"), "{out}");
    // An ExternalName's CNAME, followed to its target inside the cluster.
    let (ok, out) = lookup(s, &["ext.default.svc.cluster.local"]);
    assert!(ok && out.contains(&format!("Address: {web_ip}")), "{out}");
    // kube-dns's Endpoints (and the slice mirrored from them) name where DNS answers.
    assert_eq!(
        s.ok(
            V,
            &[
                "get",
                "endpoints",
                "kube-dns",
                "-n",
                "kube-system",
                "-o",
                "jsonpath={.subsets[0].addresses[0].ip} {.subsets[0].ports[*].port}"
            ],
        ),
        "10.43.0.10 53 53"
    );
    wait_for(30, "kube-dns's EndpointSlice", || {
        let out = s.ok(
            V,
            &[
                "get",
                "endpointslices",
                "-n",
                "kube-system",
                "-l",
                "kubernetes.io/service-name=kube-dns",
                "-o",
                "jsonpath={.items[*].endpoints[*].addresses[0]}",
            ],
        );
        (out == "10.43.0.10").then_some(())
    });
    // The kube-dns Service names cluster DNS itself, as on k3s.
    let (ok, out) = lookup(s, &["kube-dns.kube-system.svc.cluster.local"]);
    assert!(ok && out.contains("Address: 10.43.0.10"), "{out}");
    // A name that does not exist is NXDOMAIN, at once.
    let started = std::time::Instant::now();
    let (ok, out) = lookup(s, &["nope.default.svc.cluster.local"]);
    assert!(!ok && out.contains("NXDOMAIN"), "{out}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));

    // With dig: the answers' types and codes, as CoreDNS gives them.
    assert_eq!(dig(s, &["+short", "web.default.svc.cluster.local"]), web_ip);
    assert_eq!(
        dig(s, &["+short", "+tcp", "web.default.svc.cluster.local"]),
        web_ip
    );
    assert_eq!(
        dig(s, &["+short", "-x", &web_ip]),
        "web.default.svc.cluster.local."
    );
    let out = dig(s, &["+short", "-x", &db_ip]);
    assert_eq!(out, "db-0.db.default.svc.cluster.local.", "{out}");
    assert_eq!(
        dig(s, &["+short", "TXT", "dns-version.cluster.local"]),
        "\"1.1.0\""
    );
    assert_eq!(
        dig(s, &["+short", "SRV", "_http._tcp.web.default.svc.cluster.local"]),
        "0 100 80 web.default.svc.cluster.local."
    );
    // A name that exists without records of the type asked: NODATA (NOERROR, no answer).
    let out = dig(s, &["AAAA", "web.default.svc.cluster.local"]);
    assert!(
        out.contains("status: NOERROR") && out.contains("ANSWER: 0"),
        "{out}"
    );
    let out = dig(s, &["nope.default.svc.cluster.local"]);
    assert!(out.contains("status: NXDOMAIN"), "{out}");
    // Names outside the cluster go to the node's resolvers (here, the test's).
    assert_eq!(dig(s, &["+short", "outside.example"]), "192.0.2.55");
    let out = dig(s, &["elsewhere.example"]);
    assert!(out.contains("status: NXDOMAIN"), "{out}");

    // A Service created now resolves within moments; deleted, it is gone.
    s.ok(V, &["create", "service", "clusterip", "late", "--tcp=8080:8080"]);
    let late_ip = s.ok(V, &["get", "service", "late", "-o", "jsonpath={.spec.clusterIP}"]);
    wait_for(10, "late in DNS", || {
        let (ok, out) = lookup(s, &["late.default.svc.cluster.local"]);
        (ok && out.contains(&format!("Address: {late_ip}"))).then_some(())
    });
    s.ok(V, &["delete", "service", "late"]);
    wait_for(10, "late gone from DNS", || {
        let (ok, out) = lookup(s, &["late.default.svc.cluster.local"]);
        (!ok && out.contains("NXDOMAIN")).then_some(())
    });
}
