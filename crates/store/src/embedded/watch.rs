//! Watches: events are pushed to watchers as their batch commits (no polling).
//!
//! A watch from a past revision first replays the log from a snapshot taken at registration,
//! then forwards live events; registration and publication both hold the hub, so every change
//! is delivered exactly once and in revision order. A watcher that lets `WATCH_BUFFER` batches
//! pile up is dropped with `WatchLagged` rather than letting memory grow; it resumes by
//! watching again from the last revision it saw.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use redb::ReadTransaction;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

use super::record::Record;
use super::{Shared, LOG};
use crate::{
    Event, EventKind, ProgressRequester, Result, Revision, StoreError, Watch, WatchItem, WATCH_BUFFER,
};

/// Watch ids, for progress requests to find their watch's slot.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Records replayed per message when catching up.
const CATCH_UP_CHUNK: usize = 256;

#[derive(Default)]
pub(crate) struct Hub {
    slots: Vec<Slot>,
}

struct Slot {
    id: u64,
    prefix: String,
    /// Events below this revision are not for this watcher (a watch from a future revision).
    from: Revision,
    tx: mpsc::Sender<Result<WatchItem>>,
    lagged: Arc<AtomicBool>,
}

impl Hub {
    /// Deliver one committed batch to every interested watcher.
    pub fn broadcast(&mut self, events: &[Event]) {
        if events.is_empty() {
            return;
        }
        self.slots.retain(|slot| {
            if slot.tx.is_closed() {
                return false;
            }
            let mine: Vec<Event> = events
                .iter()
                .filter(|e| e.revision() >= slot.from && e.kv.key.starts_with(&slot.prefix))
                .cloned()
                .collect();
            if mine.is_empty() {
                return true;
            }
            match slot.tx.try_send(Ok(WatchItem::Events(mine))) {
                Ok(()) => true,
                Err(TrySendError::Full(_)) => {
                    tracing::warn!(prefix = %slot.prefix, "closing a watch that fell behind");
                    slot.lagged.store(true, Ordering::SeqCst);
                    false
                }
                Err(TrySendError::Closed(_)) => false,
            }
        });
    }
}

pub(crate) fn register(shared: Arc<Shared>, prefix: &str, start: Revision) -> Result<Watch> {
    let lagged = Arc::new(AtomicBool::new(false));
    let mut hub = shared.hub.lock().unwrap_or_else(|e| e.into_inner());
    let (current, compacted) = {
        let ix = shared.index();
        (ix.current, ix.compacted)
    };
    let start = if start <= 0 { current + 1 } else { start };
    if start < compacted {
        return Err(StoreError::Compacted {
            requested: start,
            compacted: Some(compacted),
        });
    }
    let (live_tx, live_rx) = mpsc::channel(WATCH_BUFFER);
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    // A progress notification is queued behind everything already published: the hub is
    // held, and publication updates the index and broadcasts under the hub.
    let weak = Arc::downgrade(&shared);
    let progress = ProgressRequester::new(move || {
        let Some(shared) = weak.upgrade() else { return };
        let hub = shared.hub.lock().unwrap_or_else(|e| e.into_inner());
        let current = shared.index().current;
        if let Some(slot) = hub.slots.iter().find(|s| s.id == id) {
            let _ = slot.tx.try_send(Ok(WatchItem::Progress(current)));
        }
    });
    hub.slots.push(Slot {
        id,
        prefix: prefix.to_owned(),
        from: start,
        tx: live_tx,
        lagged: lagged.clone(),
    });
    if start > current {
        return Ok(Watch::new(live_rx, lagged, Some(progress)));
    }
    // Everything up to `current` is committed; the snapshot holds it even if compaction runs.
    let snapshot = shared.begin_read()?;
    drop(hub);
    let (out_tx, out_rx) = mpsc::channel(WATCH_BUFFER);
    let prefix = prefix.to_owned();
    tokio::spawn(async move {
        if let Err(err) = catch_up(&shared, snapshot, &prefix, start, current, &out_tx).await {
            let _ = out_tx.send(Err(err)).await;
            return;
        }
        let mut live_rx = live_rx;
        while let Some(batch) = live_rx.recv().await {
            if out_tx.send(batch).await.is_err() {
                return;
            }
        }
    });
    Ok(Watch::new(out_rx, lagged, Some(progress)))
}

/// Replay the log from `start` to `current` (inclusive) for keys under `prefix`.
async fn catch_up(
    shared: &Shared,
    snapshot: ReadTransaction,
    prefix: &str,
    start: Revision,
    current: Revision,
    out: &mpsc::Sender<Result<WatchItem>>,
) -> Result<()> {
    let log = snapshot.open_table(LOG).map_err(|e| shared.io(e))?;
    let mut next = start;
    while next <= current {
        let mut chunk = Vec::new();
        let mut read = 0;
        {
            let range = log
                .range(next as u64..=current as u64)
                .map_err(|e| shared.io(e))?;
            for item in range {
                let (rev, raw) = item.map_err(|e| shared.io(e))?;
                let rev = rev.value() as Revision;
                next = rev + 1;
                read += 1;
                let rec =
                    Record::decode(raw.value()).map_err(|e| shared.io(format!("revision {rev}: {e}")))?;
                if rec.key.starts_with(prefix) {
                    chunk.push(event(shared, &log, rev, rec)?);
                }
                if read >= CATCH_UP_CHUNK {
                    break;
                }
            }
            if read == 0 {
                break;
            }
        }
        if !chunk.is_empty() && out.send(Ok(WatchItem::Events(chunk))).await.is_err() {
            return Ok(());
        }
    }
    Ok(())
}

/// The event the log record `rec` at revision `rev` stands for, with the key's previous value.
pub(crate) fn event(
    shared: &Shared,
    log: &impl redb::ReadableTable<u64, &'static [u8]>,
    rev: Revision,
    rec: Record,
) -> Result<Event> {
    let prev = match rec.prev_revision {
        0 => None,
        p => Some(shared.record(log, p)?.into_kv(p)),
    };
    let kind = if rec.tombstone {
        EventKind::Delete
    } else {
        EventKind::Put
    };
    Ok(Event {
        kind,
        kv: rec.into_kv(rev),
        prev,
    })
}
