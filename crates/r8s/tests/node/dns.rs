//! Cluster DNS end to end: pods resolve Services by name through the resolv.conf the kubelet
//! gives them (nameserver --cluster-dns, search <ns>.svc.cluster.local …), answered by the
//! agent from the Services and EndpointSlices it follows; busybox's nslookup is the client.

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

#[test]
fn pods_resolve_services_through_cluster_dns() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    // Queries go to 10.43.0.10: should cluster DNS not hold it, they must not leave the host.
    let _guard = Blackhole::install("10.43.0.0/16");
    let c = start("dns-node", "10.197.0.0/16", "r8sd");
    let s = &c.s;
    s.wait_for_default_service_account("default");
    s.ok_stdin(V, &["create", "-f", "-"], OBJECTS);
    for name in ["db-0", "client", "plain"] {
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
    // The kube-dns Service names cluster DNS itself, as on k3s.
    let (ok, out) = lookup(s, &["kube-dns.kube-system.svc.cluster.local"]);
    assert!(ok && out.contains("Address: 10.43.0.10"), "{out}");
    // A name that does not exist is NXDOMAIN, at once.
    let started = std::time::Instant::now();
    let (ok, out) = lookup(s, &["nope.default.svc.cluster.local"]);
    assert!(!ok && out.contains("NXDOMAIN"), "{out}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));

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
