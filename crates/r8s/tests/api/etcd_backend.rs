//! `r8s server --datastore-endpoint` on a real 3-member etcd cluster on loopback: the API keeps
//! serving reads and writes while one member is killed (the store-level test kills the leader).

use crate::support;

use std::time::{Duration, Instant};

use r8s_store::etcd_process::EtcdCluster;
use support::Server;

#[test]
fn api_keeps_serving_while_an_etcd_member_is_killed() {
    let mut cluster = EtcdCluster::start(3).expect("start etcd (CI installs Debian's etcd-server)");
    let endpoints = cluster.endpoints();
    let s = Server::start_with(&["--datastore-endpoint", &endpoints]);
    let cm = |name: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: default\ndata:\n  k: v\n")
    };
    for i in 0..5 {
        s.ok_stdin("1.33", &["create", "-f", "-"], &cm(&format!("before-{i}")));
    }
    // Everything lives in etcd, not in the data directory's embedded store.
    assert!(!s.dir.path().join("server/db/state.redb").exists());

    // Kill a member; every request from then on must still succeed (the first ones may wait
    // out an election).
    cluster.members[0].kill();
    let started = Instant::now();
    for i in 0..10 {
        let name = format!("after-{i}");
        s.ok_stdin("1.33", &["create", "-f", "-"], &cm(&name));
        s.ok("1.33", &["label", "cm", &name, "round=1"]);
        assert_eq!(
            s.ok(
                "1.33",
                &["get", "cm", &name, "-o", "jsonpath={.metadata.labels.round}"]
            ),
            "1"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "too slow: {:?}",
        started.elapsed()
    );
    let names = s.ok("1.33", &["get", "cm", "-o", "name"]);
    assert_eq!(
        names
            .lines()
            .filter(|l| l.starts_with("configmap/before-") || l.starts_with("configmap/after-"))
            .count(),
        15,
        "{names}"
    );
}
