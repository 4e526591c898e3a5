//! The etcd backend against a 3-member etcd cluster on loopback: reads and writes keep being
//! served while one member is killed.

mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use r8s_store::{RangeRequest, Store};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeps_serving_reads_and_writes_while_a_member_is_killed() {
    let (mut cluster, store) = support::etcd_cluster(3).await;
    for i in 0..20 {
        store
            .create(&format!("/registry/ha/before-{i}"), Bytes::from_static(b"x"))
            .await
            .unwrap();
    }
    // Kill the leader: the hardest member to lose (an election follows).
    let leader = leader_index(&cluster).await;
    cluster.members[leader].kill();
    assert!(!cluster.members[leader].is_running());

    // Every request from the moment of the kill on must succeed; the first ones wait out the
    // election (etcd's election timeout is 1 s; our per-request timeout 4 s, then a retry).
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    let rounds = 30;
    for i in 0..rounds {
        let t = Instant::now();
        let key = format!("/registry/ha/after-{i}");
        let kv = store
            .create(&key, Bytes::from_static(b"1"))
            .await
            .unwrap_or_else(|e| panic!("write {i} after the kill failed: {e}"));
        store
            .update(&key, Bytes::from_static(b"2"), kv.mod_revision)
            .await
            .unwrap_or_else(|e| panic!("update {i} after the kill failed: {e}"));
        let got = store
            .get(&key, 0)
            .await
            .unwrap_or_else(|e| panic!("read {i} failed: {e}"));
        assert_eq!(got.kv.unwrap().value, Bytes::from_static(b"2"));
        slowest = slowest.max(t.elapsed());
    }
    eprintln!(
        "{rounds} rounds in {:?}; slowest {:?}",
        started.elapsed(),
        slowest
    );
    assert!(
        slowest < Duration::from_secs(12),
        "a round stalled for {slowest:?}"
    );
    let i = rounds;
    let all = store
        .range(RangeRequest {
            prefix: "/registry/ha/".into(),
            count: true,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(all.count, Some(20 + i));
}

/// Which member leads, asked of the members themselves.
async fn leader_index(cluster: &r8s_store::etcd_process::EtcdCluster) -> usize {
    let mut first = etcd_client::Client::connect([cluster.members[0].client_url.as_str()], None)
        .await
        .unwrap();
    let leader_id = first.status().await.unwrap().leader();
    for (i, m) in cluster.members.iter().enumerate() {
        let mut c = etcd_client::Client::connect([m.client_url.as_str()], None)
            .await
            .unwrap();
        if c.status().await.unwrap().header().unwrap().member_id() == leader_id {
            return i;
        }
    }
    panic!("no member is leader {leader_id}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_etcd_backend_compacts_by_itself() {
    let (_cluster, store) = support::etcd_cluster(1).await;
    store.start_compactor(r8s_store::CompactionPolicy {
        interval: Some(Duration::from_millis(200)),
        retain_revisions: 10,
    });
    let first = store
        .create("/registry/compact/a", Bytes::from_static(b"0"))
        .await
        .unwrap();
    let mut rev = first.mod_revision;
    for i in 1..50 {
        rev = store
            .update("/registry/compact/a", Bytes::from(format!("{i}")), rev)
            .await
            .unwrap()
            .mod_revision;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match store.get("/registry/compact/a", first.mod_revision).await {
            Err(r8s_store::StoreError::Compacted { .. }) => break,
            Ok(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(100)).await,
            other => panic!("history was never compacted: {other:?}"),
        }
    }
    // The retained window is still readable.
    assert!(store
        .get("/registry/compact/a", rev - 5)
        .await
        .unwrap()
        .kv
        .is_some());
}
