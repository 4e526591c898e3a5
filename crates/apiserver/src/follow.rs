//! Following a few key prefixes of the datastore: one consistent list, then a watch from its
//! revision, handed to a callback a batch at a time. The authorizers that keep their own view
//! of some objects (RBAC's roles and bindings, the Node authorizer's pods) are built on it.

use r8s_store::{EventKind, RangeRequest, Store};

/// What the follower saw.
pub(crate) enum Change<'a> {
    /// A fresh list starts: forget everything seen before.
    Reset,
    /// A key and its stored JSON (each follower parses what it needs of it).
    Put(&'a str, &'a [u8]),
    Delete(&'a str),
    /// The end of the initial list or of a batch of watch events: a good moment to publish.
    BatchEnd,
}

/// Follow `prefixes` until the datastore watch fails (then return the error; callers relist).
pub(crate) async fn follow(
    store: &dyn Store,
    prefixes: &[&str],
    apply: &mut (dyn FnMut(Change<'_>) + Send),
) -> Result<(), String> {
    let mut revision = 0;
    let mut kvs = Vec::new();
    for prefix in prefixes {
        let got = store
            .range(RangeRequest {
                prefix: (*prefix).into(),
                revision,
                ..Default::default()
            })
            .await
            .map_err(|e| e.to_string())?;
        revision = got.revision;
        kvs.extend(got.kvs);
    }
    apply(Change::Reset);
    for kv in &kvs {
        apply(Change::Put(&kv.key, &kv.value));
    }
    apply(Change::BatchEnd);
    // The store watches one prefix at a time; the watches feed one channel.
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let mut tasks = Vec::new();
    for prefix in prefixes {
        let mut w = store
            .watch(prefix, revision + 1)
            .await
            .map_err(|e| e.to_string())?;
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            while let Some(batch) = w.next().await {
                if tx.send(batch).await.is_err() {
                    return;
                }
            }
        }));
    }
    drop(tx);
    let result = loop {
        let Some(batch) = rx.recv().await else {
            break Err("the datastore watch ended".to_owned());
        };
        let mut batches = vec![batch];
        // Take everything already waiting, then publish once.
        while let Ok(b) = rx.try_recv() {
            batches.push(b);
        }
        let mut failed = None;
        for batch in batches {
            match batch {
                Ok(events) => {
                    for ev in events {
                        match ev.kind {
                            EventKind::Put => apply(Change::Put(&ev.kv.key, &ev.kv.value)),
                            EventKind::Delete => apply(Change::Delete(&ev.kv.key)),
                        }
                    }
                }
                Err(e) => failed = Some(e.to_string()),
            }
        }
        apply(Change::BatchEnd);
        if let Some(e) = failed {
            break Err(e);
        }
    };
    for t in tasks {
        t.abort();
    }
    result
}

/// Run [`follow`] for as long as the process lives, relisting after a failure.
pub(crate) fn spawn(
    store: std::sync::Arc<dyn Store>,
    prefixes: &'static [&'static str],
    what: &'static str,
    mut apply: impl FnMut(Change<'_>) + Send + 'static,
) {
    tokio::spawn(async move {
        loop {
            if let Err(e) = follow(store.as_ref(), prefixes, &mut apply).await {
                tracing::warn!(error = %e, "{what}: lost the datastore watch; relisting");
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    });
}
