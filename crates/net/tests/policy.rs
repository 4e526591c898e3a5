//! Network policy's table in a network namespace (root only): a "node" with three "pods" on a
//! bridge (as the CNI bridge plugin makes them; bridged traffic passes the node's forward
//! hook), policies compiled by the model and written by the table, checked with real TCP
//! between the pods. Everything lives in namespaces the test owns.

#[path = "common/netns.rs"]
mod netns;

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use k8s_openapi::api::networking::v1::NetworkPolicy;
use netns::Netns;
use r8s_net::nft::Conn;
use r8s_net::policy::model::{program, PodInfo, Program};
use r8s_net::policy::table;
use serde_json::json;

struct Pod {
    ns: Netns,
    ip: Ipv4Addr,
    info: PodInfo,
}

fn node_with_pods() -> Option<(Netns, Vec<Pod>)> {
    let node = Netns::new("pol")?;
    node.ip(&["link", "add", "br0", "type", "bridge"]);
    node.ip(&["addr", "add", "10.244.1.1/24", "dev", "br0"]);
    node.ip(&["link", "set", "br0", "up"]);
    let mut pods = Vec::new();
    for (i, (name, app, ns)) in [("a", "a", "default"), ("b", "b", "default"), ("c", "c", "other")]
        .into_iter()
        .enumerate()
    {
        let p = Netns::new(&format!("pol{name}")).unwrap();
        let ip = Ipv4Addr::new(10, 244, 1, 2 + i as u8);
        let veth = format!("v{name}");
        node.ip(&[
            "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &p.name,
        ]);
        node.ip(&["link", "set", &veth, "master", "br0", "up"]);
        p.ip(&["addr", "add", &format!("{ip}/24"), "dev", "eth0"]);
        p.ip(&["link", "set", "eth0", "up"]);
        p.ip(&["route", "add", "default", "via", "10.244.1.1"]);
        pods.push(Pod {
            ns: p,
            ip,
            info: PodInfo {
                namespace: ns.into(),
                name: name.into(),
                labels: BTreeMap::from([("app".to_string(), app.to_string())]),
                ip,
                named_ports: vec![("http".into(), 6, 8080)],
                local: true,
            },
        });
    }
    Some((node, pods))
}

fn namespaces() -> HashMap<String, BTreeMap<String, String>> {
    [
        (
            "default".to_string(),
            BTreeMap::from([("team".to_string(), "one".to_string())]),
        ),
        (
            "other".to_string(),
            BTreeMap::from([("team".to_string(), "two".to_string())]),
        ),
    ]
    .into()
}

fn policy(ns: &str, name: &str, spec: serde_json::Value) -> NetworkPolicy {
    serde_json::from_value(json!({"metadata": {"namespace": ns, "name": name}, "spec": spec})).unwrap()
}

/// Bring the node's table to the program for `policies`: the whole table the first time,
/// then only what changed (as the engine does).
fn enforce(node: &Netns, pods: &[Pod], in_force: &mut Option<Program>, policies: &[NetworkPolicy]) {
    let infos: Vec<PodInfo> = pods.iter().map(|p| p.info.clone()).collect();
    let refs: Vec<&NetworkPolicy> = policies.iter().collect();
    let prog = program(&refs, &infos, &namespaces());
    let batch = match in_force {
        None => table::batch("r8s-policy", &prog),
        Some(old) => table::update("r8s-policy", old, &prog),
    };
    node.run(|| Conn::new().unwrap().apply(batch).expect("table"));
    // What is in force equals what a whole rewrite would give: the chains the kernel holds.
    let listed = node.nft(&["list", "table", "ip", "r8s-policy"]);
    assert!(node.lists_with_nft().contains("table ip r8s-policy"));
    for chain in prog.chains.keys() {
        assert!(
            listed.contains(&format!("chain {chain} ")),
            "{chain} missing:\n{listed}"
        );
    }
    assert_eq!(
        listed.matches("\tchain ").count(),
        prog.chains.len() + 1,
        "{listed}"
    );
    *in_force = Some(prog);
}

/// Whether a TCP connection from `from` to `to:port` gets through (and an exchange on it).
fn reaches(from: &Pod, to: &Pod, port: u16) -> bool {
    let listener = to.ns.run(|| TcpListener::bind((to.ip, port)).unwrap());
    listener.set_nonblocking(true).unwrap();
    let ok = from.ns.run(|| {
        TcpStream::connect_timeout(&SocketAddr::from((to.ip, port)), Duration::from_millis(400)).is_ok()
    });
    if ok {
        // The answer path (established) works: the server side accepts.
        std::thread::sleep(Duration::from_millis(20));
        assert!(listener.accept().is_ok(), "connected but never accepted");
    }
    ok
}

#[test]
fn policies_isolate_pods_and_admit_exactly_what_they_name() {
    let Some((node, pods)) = node_with_pods() else {
        return;
    };
    let (a, b, c) = (&pods[0], &pods[1], &pods[2]);
    let mut in_force = None;
    let st = &mut in_force;
    // No policy: everything reaches everything.
    enforce(&node, &pods, st, &[]);
    assert!(reaches(a, b, 8080) && reaches(c, b, 8080) && reaches(b, a, 8080));

    // Default deny ingress for b: nobody reaches b, b still reaches out.
    let deny = policy(
        "default",
        "deny-b",
        json!({"podSelector": {"matchLabels": {"app": "b"}}}),
    );
    enforce(&node, &pods, st, std::slice::from_ref(&deny));
    assert!(!reaches(a, b, 8080), "default deny");
    assert!(!reaches(c, b, 8080));
    assert!(reaches(b, a, 8080), "egress is not isolated");
    assert!(reaches(b, c, 8080));

    // Allow b's named port from app=a of its namespace: exactly that.
    let allow_a = policy(
        "default",
        "b-from-a",
        json!({"podSelector": {"matchLabels": {"app": "b"}},
               "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "a"}}}], "ports": [{"port": "http", "protocol": "TCP"}]}]}),
    );
    enforce(&node, &pods, st, &[deny.clone(), allow_a.clone()]);
    assert!(reaches(a, b, 8080), "a to b's http port");
    assert!(!reaches(a, b, 8081), "another port");
    assert!(!reaches(c, b, 8080), "c is not app=a of b's namespace");

    // By namespace label, with a port range.
    let allow_ns = policy(
        "default",
        "b-from-team-two",
        json!({"podSelector": {"matchLabels": {"app": "b"}},
               "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "two"}}}], "ports": [{"port": 9000, "endPort": 9010, "protocol": "TCP"}]}]}),
    );
    enforce(&node, &pods, st, &[deny.clone(), allow_ns]);
    assert!(reaches(c, b, 9005), "c's namespace, in the range");
    assert!(!reaches(c, b, 9011), "out of the range");
    assert!(!reaches(a, b, 9005), "a's namespace is not team=two");

    // By ipBlock with an exception: the /30 holding a and b's addresses (.2, .3), except a.
    let allow_block = policy(
        "default",
        "b-from-block",
        json!({"podSelector": {"matchLabels": {"app": "b"}},
               "ingress": [{"from": [{"ipBlock": {"cidr": "10.244.1.0/29", "except": ["10.244.1.2/32"]}}]}]}),
    );
    enforce(&node, &pods, st, &[deny, allow_block]);
    assert!(reaches(c, b, 8080), "c (10.244.1.4) is in the block");
    assert!(!reaches(a, b, 8080), "a is the exception");

    // Egress: a may reach only app=b; c is cut off, and so is a new connection from c back
    // to a (ingress is not isolated for a, so that one works).
    let egress = policy(
        "default",
        "a-out",
        json!({"podSelector": {"matchLabels": {"app": "a"}}, "policyTypes": ["Egress"],
               "egress": [{"to": [{"podSelector": {"matchLabels": {"app": "b"}}}]}]}),
    );
    enforce(&node, &pods, st, &[egress]);
    assert!(reaches(a, b, 8080));
    assert!(!reaches(a, c, 8080), "egress to c is not allowed");
    assert!(
        reaches(c, a, 8080),
        "a's ingress is open; its answers are established traffic"
    );

    // Removing the policies opens everything again; the table goes on removal.
    enforce(&node, &pods, st, &[]);
    assert!(reaches(a, c, 8080) && reaches(a, b, 8080));
    node.run(|| table::remove(&Conn::new().unwrap(), "r8s-policy").unwrap());
    assert!(!node.nft(&["list", "tables"]).contains("r8s-policy"));
}
