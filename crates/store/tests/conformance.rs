//! The datastore conformance suite: every case runs against the embedded backend and against a
//! real etcd started for the test. Both must give the same observable answers.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use r8s_store::{EventKind, RangeRequest, Store, StoreError, WatchItem};

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        mod embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let backend = super::support::embedded();
                    super::$case(&*backend.store).await;
                }
            )*
        }
        mod etcd {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let backend = super::support::etcd().await;
                    super::$case(&*backend.store).await;
                }
            )*
        }
    };
}

conformance!(
    revisions_versions_and_history,
    create_is_create_if_absent,
    update_is_compare_and_swap,
    concurrent_updates_lose_nothing,
    delete_with_precondition,
    range_pages_at_a_fixed_revision,
    reads_below_compaction_fail_and_future_reads_fail,
    watch_replays_history_then_live_changes_exactly_once,
    watch_from_now_sees_only_later_changes,
    watch_below_compaction_is_compacted,
    progress_notifications_follow_the_events_before_them,
);

async fn revisions_versions_and_history(s: &dyn Store) {
    let base = s.current_revision().await.unwrap();
    let a1 = s.create("/registry/t/a", b("one")).await.unwrap();
    assert_eq!(a1.mod_revision, base + 1);
    assert_eq!(a1.create_revision, a1.mod_revision);
    assert_eq!(a1.version, 1);
    let a2 = s
        .update("/registry/t/a", b("two"), a1.mod_revision)
        .await
        .unwrap();
    assert_eq!(a2.mod_revision, base + 2);
    assert_eq!(a2.create_revision, a1.create_revision);
    assert_eq!(a2.version, 2);
    let other = s.create("/registry/t/b", b("x")).await.unwrap();
    assert_eq!(other.mod_revision, base + 3);
    assert_eq!(s.current_revision().await.unwrap(), base + 3);

    // Reads at past revisions see the past.
    let at1 = s.get("/registry/t/a", a1.mod_revision).await.unwrap();
    assert_eq!(at1.kv.unwrap().value, b("one"));
    assert_eq!(at1.revision, a1.mod_revision);
    let latest = s.get("/registry/t/a", 0).await.unwrap();
    assert_eq!(latest.kv.as_ref().unwrap(), &a2);
    assert_eq!(latest.revision, base + 3);

    let del = s.delete("/registry/t/a", None).await.unwrap();
    assert_eq!(del.prev, a2);
    assert_eq!(del.revision, base + 4);
    assert!(s.get("/registry/t/a", 0).await.unwrap().kv.is_none());
    assert_eq!(
        s.get("/registry/t/a", base + 3).await.unwrap().kv.unwrap().value,
        b("two")
    );

    // A new generation starts over.
    let again = s.create("/registry/t/a", b("three")).await.unwrap();
    assert_eq!(again.version, 1);
    assert_eq!(again.create_revision, base + 5);
    assert!(s.get("/registry/t/missing", 0).await.unwrap().kv.is_none());
}

async fn create_is_create_if_absent(s: &dyn Store) {
    let first = s.create("/registry/t/x", b("1")).await.unwrap();
    let err = s.create("/registry/t/x", b("2")).await.unwrap_err();
    assert!(matches!(err, StoreError::AlreadyExists { .. }), "{err:?}");
    assert_eq!(s.get("/registry/t/x", 0).await.unwrap().kv.unwrap(), first);
    // No revision was spent on the failed create.
    assert_eq!(s.current_revision().await.unwrap(), first.mod_revision);
    s.delete("/registry/t/x", None).await.unwrap();
    s.create("/registry/t/x", b("3")).await.unwrap();
}

async fn update_is_compare_and_swap(s: &dyn Store) {
    let v1 = s.create("/registry/t/cas", b("1")).await.unwrap();
    let v2 = s
        .update("/registry/t/cas", b("2"), v1.mod_revision)
        .await
        .unwrap();
    match s
        .update("/registry/t/cas", b("stale"), v1.mod_revision)
        .await
        .unwrap_err()
    {
        StoreError::Conflict {
            current, expected, ..
        } => {
            assert_eq!(*current, v2);
            assert_eq!(expected, v1.mod_revision);
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(
        s.get("/registry/t/cas", 0).await.unwrap().kv.unwrap().value,
        b("2")
    );
    let err = s.update("/registry/t/none", b("x"), 1).await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }), "{err:?}");
}

async fn concurrent_updates_lose_nothing(s: &dyn Store) {
    s.create("/registry/t/counter", b("0")).await.unwrap();
    let tasks = 8;
    let per_task = 10;
    let conflicts = std::sync::atomic::AtomicUsize::new(0);
    let work = (0..tasks).map(|_| async {
        for _ in 0..per_task {
            loop {
                let cur = s.get("/registry/t/counter", 0).await.unwrap().kv.unwrap();
                let n: u64 = std::str::from_utf8(&cur.value).unwrap().parse().unwrap();
                match s
                    .update("/registry/t/counter", b(&(n + 1).to_string()), cur.mod_revision)
                    .await
                {
                    Ok(_) => break,
                    Err(StoreError::Conflict { .. }) => {
                        conflicts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }
    });
    futures::future::join_all(work).await;
    let end = s.get("/registry/t/counter", 0).await.unwrap().kv.unwrap();
    assert_eq!(end.value, b(&(tasks * per_task).to_string()));
    assert_eq!(end.version, (tasks * per_task) as i64 + 1);
}

async fn delete_with_precondition(s: &dyn Store) {
    let v1 = s.create("/registry/t/d", b("1")).await.unwrap();
    let v2 = s.update("/registry/t/d", b("2"), v1.mod_revision).await.unwrap();
    match s
        .delete("/registry/t/d", Some(v1.mod_revision))
        .await
        .unwrap_err()
    {
        StoreError::Conflict { current, .. } => assert_eq!(*current, v2),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(s.get("/registry/t/d", 0).await.unwrap().kv.is_some());
    let del = s.delete("/registry/t/d", Some(v2.mod_revision)).await.unwrap();
    assert_eq!(del.prev, v2);
    let err = s.delete("/registry/t/d", None).await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }), "{err:?}");
}

async fn range_pages_at_a_fixed_revision(s: &dyn Store) {
    for i in 0..25 {
        s.create(&format!("/registry/pods/ns/p{i:02}"), b(&format!("v{i}")))
            .await
            .unwrap();
    }
    // Neighbours that share the prefix's text but not the prefix.
    s.create("/registry/pods/nsx/other", b("no")).await.unwrap();
    s.create("/registry/podsecurity/x", b("no")).await.unwrap();
    let prefix = "/registry/pods/ns/".to_owned();
    let first = s
        .range(RangeRequest {
            prefix: prefix.clone(),
            limit: 10,
            count: true,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(first.kvs.len(), 10);
    assert!(first.more);
    assert_eq!(first.count, Some(25));
    let snapshot = first.revision;

    // Change the data between pages.
    s.delete("/registry/pods/ns/p12", None).await.unwrap();
    s.create("/registry/pods/ns/p15a", b("new")).await.unwrap();
    let p20 = s.get("/registry/pods/ns/p20", 0).await.unwrap().kv.unwrap();
    s.update("/registry/pods/ns/p20", b("changed"), p20.mod_revision)
        .await
        .unwrap();

    let mut all = first.kvs.clone();
    let mut last = first.kvs.last().unwrap().key.clone();
    loop {
        let page = s
            .range(RangeRequest {
                prefix: prefix.clone(),
                start_after: Some(last.clone()),
                limit: 10,
                revision: snapshot,
                count: true,
            })
            .await
            .unwrap();
        assert_eq!(page.revision, snapshot);
        assert_eq!(page.count, Some(25 - all.len() as i64));
        all.extend(page.kvs.iter().cloned());
        if !page.more {
            break;
        }
        last = page.kvs.last().unwrap().key.clone();
    }
    let keys: Vec<String> = all.iter().map(|kv| kv.key.clone()).collect();
    let expected: Vec<String> = (0..25).map(|i| format!("/registry/pods/ns/p{i:02}")).collect();
    assert_eq!(keys, expected, "paging at a fixed revision sees the snapshot");
    assert_eq!(all[20].value, b("v20"));

    // The latest read sees the changes.
    let now = s
        .range(RangeRequest {
            prefix: prefix.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(now.kvs.len(), 25);
    assert!(!now.more);
    assert!(now.kvs.iter().any(|kv| kv.key.ends_with("p15a")));
    assert!(!now.kvs.iter().any(|kv| kv.key.ends_with("p12")));
}

async fn reads_below_compaction_fail_and_future_reads_fail(s: &dyn Store) {
    let v1 = s.create("/registry/t/c", b("1")).await.unwrap();
    let v2 = s.update("/registry/t/c", b("2"), v1.mod_revision).await.unwrap();
    let v3 = s.update("/registry/t/c", b("3"), v2.mod_revision).await.unwrap();
    s.compact(v2.mod_revision).await.unwrap();
    let err = s.get("/registry/t/c", v1.mod_revision).await.unwrap_err();
    assert!(
        matches!(err, StoreError::Compacted { requested, .. } if requested == v1.mod_revision),
        "{err:?}"
    );
    let err = s
        .range(RangeRequest {
            prefix: "/registry/t/".into(),
            revision: v1.mod_revision,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Compacted { .. }), "{err:?}");
    // The compaction revision itself and later are still readable.
    assert_eq!(
        s.get("/registry/t/c", v2.mod_revision)
            .await
            .unwrap()
            .kv
            .unwrap()
            .value,
        b("2")
    );
    assert_eq!(s.get("/registry/t/c", 0).await.unwrap().kv.unwrap(), v3);
    // Compacting again at or below the mark is an error too.
    let err = s.compact(v1.mod_revision).await.unwrap_err();
    assert!(matches!(err, StoreError::Compacted { .. }), "{err:?}");
    let err = s.get("/registry/t/c", v3.mod_revision + 100).await.unwrap_err();
    assert!(matches!(err, StoreError::FutureRevision { .. }), "{err:?}");
}

/// What a client saw acknowledged.
#[derive(Clone, Debug, PartialEq)]
struct Acked {
    revision: i64,
    key: String,
    kind: EventKind,
    value: Bytes,
}

async fn watch_replays_history_then_live_changes_exactly_once(s: &dyn Store) {
    // History before the watch starts.
    let start = s.current_revision().await.unwrap() + 1;
    let mut acked = Vec::new();
    for i in 0..5 {
        let kv = s.create(&format!("/registry/w/pre{i}"), b("pre")).await.unwrap();
        acked.push(Acked {
            revision: kv.mod_revision,
            key: kv.key,
            kind: EventKind::Put,
            value: kv.value,
        });
    }
    s.create("/registry/elsewhere/x", b("not watched")).await.unwrap();
    let mut watch = s.watch("/registry/w/", start).await.unwrap();

    // Concurrent writers while the watch runs: creates, updates and deletes.
    let writers = (0..4).map(|w| async move {
        let mut mine = Vec::new();
        for i in 0..15 {
            let key = format!("/registry/w/k{w}-{}", i % 5);
            let cur = s.get(&key, 0).await.unwrap().kv;
            let ack = match (cur, i % 3) {
                (None, _) => {
                    let kv = s.create(&key, b(&format!("c{i}"))).await.unwrap();
                    (kv.mod_revision, EventKind::Put, kv.value)
                }
                (Some(cur), 2) => {
                    let d = s.delete(&key, Some(cur.mod_revision)).await.unwrap();
                    (d.revision, EventKind::Delete, Bytes::new())
                }
                (Some(cur), _) => {
                    let kv = s
                        .update(&key, b(&format!("u{i}")), cur.mod_revision)
                        .await
                        .unwrap();
                    (kv.mod_revision, EventKind::Put, kv.value)
                }
            };
            mine.push(Acked {
                revision: ack.0,
                key,
                kind: ack.1,
                value: ack.2,
            });
        }
        mine
    });
    for mine in futures::future::join_all(writers).await {
        acked.extend(mine);
    }
    acked.sort_by_key(|a| a.revision);

    let mut seen = Vec::new();
    let mut prev_by_key: HashMap<String, Bytes> = HashMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while seen.len() < acked.len() {
        let batch = tokio::time::timeout_at(deadline, watch.next())
            .await
            .unwrap_or_else(|_| panic!("watch delivered {} of {} events", seen.len(), acked.len()))
            .expect("watch open")
            .expect("no watch error");
        assert!(!batch.is_empty());
        for ev in batch {
            assert!(ev.kv.key.starts_with("/registry/w/"), "{}", ev.kv.key);
            // Previous values: present for updates and deletes, and equal to what was there.
            match prev_by_key.get(&ev.kv.key) {
                Some(prev) => assert_eq!(ev.prev.as_ref().map(|p| &p.value), Some(prev), "prev of {ev:?}"),
                None => assert!(ev.prev.is_none(), "create with prev: {ev:?}"),
            }
            match ev.kind {
                EventKind::Put => prev_by_key.insert(ev.kv.key.clone(), ev.kv.value.clone()),
                EventKind::Delete => prev_by_key.remove(&ev.kv.key),
            };
            seen.push(Acked {
                revision: ev.kv.mod_revision,
                key: ev.kv.key,
                kind: ev.kind,
                value: ev.kv.value,
            });
        }
    }
    assert_eq!(seen, acked, "every change exactly once, in revision order");
    // Nothing more arrives.
    let extra = tokio::time::timeout(Duration::from_millis(300), watch.next()).await;
    assert!(extra.is_err(), "unexpected extra events: {extra:?}");
}

async fn watch_from_now_sees_only_later_changes(s: &dyn Store) {
    s.create("/registry/n/before", b("0")).await.unwrap();
    let mut watch = s.watch("/registry/n/", 0).await.unwrap();
    let after = s.create("/registry/n/after", b("1")).await.unwrap();
    let batch = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await
        .expect("event in time")
        .unwrap()
        .unwrap();
    assert_eq!(batch.len(), 1);
    assert_eq!(batch[0].kv, after);
    assert_eq!(batch[0].kind, EventKind::Put);
    let del = s.delete("/registry/n/before", None).await.unwrap();
    let batch = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await
        .expect("event in time")
        .unwrap()
        .unwrap();
    assert_eq!(batch[0].kind, EventKind::Delete);
    assert_eq!(batch[0].kv.key, "/registry/n/before");
    assert_eq!(batch[0].kv.mod_revision, del.revision);
    assert_eq!(batch[0].prev.as_ref().unwrap().value, b("0"));
}

async fn watch_below_compaction_is_compacted(s: &dyn Store) {
    let v1 = s.create("/registry/k/a", b("1")).await.unwrap();
    let v2 = s.update("/registry/k/a", b("2"), v1.mod_revision).await.unwrap();
    s.update("/registry/k/a", b("3"), v2.mod_revision).await.unwrap();
    s.compact(v2.mod_revision).await.unwrap();
    let err = match s.watch("/registry/k/", v1.mod_revision).await {
        Err(e) => e,
        Ok(mut w) => tokio::time::timeout(Duration::from_secs(10), w.next())
            .await
            .expect("an answer in time")
            .expect("an item")
            .expect_err("a compacted error"),
    };
    assert!(matches!(err, StoreError::Compacted { .. }), "{err:?}");
    // From the compaction revision on, the history is there, with previous values after it.
    // (etcd may omit the previous value of the change at the compaction revision itself.)
    let mut w = s.watch("/registry/k/", v2.mod_revision).await.unwrap();
    let mut events = Vec::new();
    while events.len() < 2 {
        let batch = tokio::time::timeout(Duration::from_secs(10), w.next())
            .await
            .expect("history in time")
            .unwrap()
            .unwrap();
        events.extend(batch);
    }
    assert_eq!(events[0].kv.value, b("2"));
    assert_eq!(events[1].kv.value, b("3"));
    assert_eq!(events[1].prev.as_ref().unwrap().value, b("2"));
}

async fn next(w: &mut r8s_store::Watch) -> WatchItem {
    tokio::time::timeout(Duration::from_secs(10), w.next_item())
        .await
        .expect("an item in time")
        .unwrap()
        .unwrap()
}

/// A progress notification asked of a watch comes after every change under its prefix up to
/// its revision, and that revision covers changes elsewhere too (what a watch cache needs to
/// know it is current).
async fn progress_notifications_follow_the_events_before_them(s: &dyn Store) {
    let mut watch = s.watch("/registry/p/", 0).await.unwrap();
    let progress = watch.progress_requester().expect("progress requests");
    let mine = s.create("/registry/p/a", b("1")).await.unwrap();
    let other = s.create("/registry/q/b", b("2")).await.unwrap();
    // Watches are synced as soon as they start delivering live events: ask once the event
    // is in, as a cache would.
    match next(&mut watch).await {
        WatchItem::Events(events) => assert_eq!(events[0].kv, mine),
        other => panic!("expected the event first, got {other:?}"),
    }
    progress.request();
    loop {
        match next(&mut watch).await {
            WatchItem::Progress(rev) if rev >= other.mod_revision => break,
            WatchItem::Progress(_) => progress.request(),
            other => panic!("expected progress, got {other:?}"),
        }
    }
    // Later events still come, after it.
    let later = s.create("/registry/p/c", b("3")).await.unwrap();
    loop {
        match next(&mut watch).await {
            WatchItem::Events(events) => {
                assert_eq!(events[0].kv, later);
                break;
            }
            WatchItem::Progress(_) => {}
        }
    }
}
