//! A dual-stack node end to end: `--cluster-cidr` and `--service-cidr` with a range of each
//! family. The node gets a pod CIDR of each, real pods (containerd, the CNI bridge plugin)
//! an address of each, a RequireDualStack Service a cluster IP of each, and the proxy's `ip6`
//! table routes the IPv6 one beside the `ip` table, from a pod and from the host; cluster DNS
//! answers AAAA with it; the guard keeps the IPv6 ranges on the node.

use std::process::Command;

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
    ipFamilyPolicy: RequireDualStack
    selector: {app: web}
    ports: [{name: http, port: 80, targetPort: 8080}]
- apiVersion: v1
  kind: Pod
  metadata: {name: client}
  spec:
    terminationGracePeriodSeconds: 1
    containers: [{name: c, image: busybox, command: [sleep, "3600"]}]
- apiVersion: v1
  kind: Pod
  metadata: {name: web-1, labels: {app: web}}
  spec:
    terminationGracePeriodSeconds: 1
    containers:
    - name: c
      image: busybox
      command: [sh, -c, "mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www"]
      readinessProbe:
        tcpSocket: {port: 8080}
        periodSeconds: 1
"#;

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

fn curl(url: &str) -> String {
    let out = Command::new("curl")
        .args(["-sS", "-g", "-m", "5", url])
        .output()
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout).trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    )
}

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_dual_stack_node_routes_and_resolves_both_families() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = start_with(
        "dual-node",
        "10.215.0.0/16,fd15::/56",
        "r8sds",
        &[
            "--service-cidr",
            "10.43.0.0/16,fd43::/112",
            "--node-ip",
            "127.0.0.1,::1",
        ],
    );
    let s = &c.s;
    // The guard of each family is there before any Service: both tables, both blackholes.
    let t6 = run("nft", &["list", "table", "ip6", "r8s"]);
    assert!(t6.contains("ip6 daddr fd43::/112 drop"), "{t6}");
    assert!(run("nft", &["list", "table", "ip", "r8s"]).contains("ip daddr 10.43.0.0/16 drop"));
    let holes = run("ip", &["-6", "route", "show", "type", "blackhole"]);
    assert!(holes.contains("fd15::/56"), "{holes}");

    let cidrs = s.ok(
        V,
        &["get", "node", "dual-node", "-o", "jsonpath={.spec.podCIDRs}"],
    );
    assert!(
        cidrs.starts_with("[\"10.215.") && cidrs.contains("\"fd15:"),
        "{cidrs}"
    );
    s.wait_for_default_service_account("default");
    s.ok_stdin(V, &["create", "-f", "-"], OBJECTS);
    wait_for(90, "web-1 ready and the client running", || {
        let web = pod_json(s, "web-1")?;
        let ready = web["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        (ready && pod_json(s, "client")?["status"]["phase"] == "Running").then_some(())
    });
    // Each pod has an address of each family, the primary (IPv4) first.
    let web = pod_json(s, "web-1").unwrap();
    let ips: Vec<String> = web["status"]["podIPs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["ip"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ips.len(), 2, "{ips:?}");
    assert!(
        ips[0].starts_with("10.215.") && ips[1].starts_with("fd15:"),
        "{ips:?}"
    );
    assert_eq!(web["status"]["podIP"], ips[0].as_str());
    // A dual-stack node (`--node-ip v4,v6`): an InternalIP of each family, and both as the
    // pods' hostIPs, the primary first.
    assert_eq!(web["status"]["hostIP"], "127.0.0.1");
    assert_eq!(
        web["status"]["hostIPs"],
        serde_json::json!([{"ip": "127.0.0.1"}, {"ip": "::1"}])
    );
    let internal = s.ok(
        V,
        &[
            "get",
            "node",
            "dual-node",
            "-o",
            "jsonpath={.status.addresses[?(@.type==\"InternalIP\")].address}",
        ],
    );
    assert_eq!(internal, "127.0.0.1 ::1");
    // The host reaches the pod on its IPv6 address.
    assert_eq!(curl(&format!("http://[{}]:8080/", ips[1])), "web-1");

    let cluster_ips = s.ok(V, &["get", "svc", "web", "-o", "jsonpath={.spec.clusterIPs[*]}"]);
    let cluster_ips: Vec<&str> = cluster_ips.split_whitespace().collect();
    assert_eq!(cluster_ips.len(), 2, "{cluster_ips:?}");
    let v6 = cluster_ips[1].to_owned();
    assert!(v6.starts_with("fd43::"), "{v6}");
    // Slices of both address types; then both cluster IPs route, from a pod and the host.
    wait_for(30, "the IPv6 slice with web-1", || {
        let got = s.ok(
            V,
            &[
                "get",
                "endpointslices",
                "-l",
                "kubernetes.io/service-name=web",
                "-o",
                "jsonpath={range .items[*]}{.addressType}={.endpoints[*].addresses[0]};{end}",
            ],
        );
        got.contains(&format!("IPv6={};", ips[1])).then_some(())
    });
    for ip in [cluster_ips[0], v6.as_str()] {
        let body = wait_for(30, "the Service from the client pod", || get(s, ip, 80).ok());
        assert_eq!(body, "web-1", "{ip}");
    }
    assert_eq!(curl(&format!("http://[{v6}]/")), "web-1");
    // Cluster DNS answers AAAA with the IPv6 cluster IP (and A with the IPv4 one).
    let out = s.kubectl(
        V,
        &[
            "exec",
            "client",
            "--",
            "nslookup",
            "-type=AAAA",
            "web.default.svc.cluster.local",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&v6),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // An IPv6 Service address nobody holds: dropped on the node, not routed.
    assert!(get(s, "fd43::fffe", 80).is_err());
    // Deleting the Service removes its IPv6 rules.
    s.ok(V, &["delete", "svc", "web"]);
    wait_for(30, "the IPv6 cluster IP gone from the table", || {
        (!run("nft", &["list", "table", "ip6", "r8s"]).contains(&v6)).then_some(())
    });
    // A clean stop removes both tables (before the test's own cleanup would).
    assert!(
        c.s.terminate(std::time::Duration::from_secs(30)),
        "the server stops"
    );
    let tables = run("nft", &["list", "tables"]);
    assert!(
        !tables
            .lines()
            .any(|l| l.trim() == "table ip6 r8s" || l.trim() == "table ip r8s"),
        "{tables}"
    );
}
