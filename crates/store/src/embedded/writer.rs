//! The single writer: group commit, publication, and compaction in small steps.
//!
//! Every write goes through one thread, so revisions are assigned in order without locks and
//! writes are never refused for contention (kine's `database is locked`). The thread takes all
//! waiting requests (up to `max_batch`), applies them in one redb transaction with one sync,
//! then — holding the watch hub so no watcher can register in between — publishes them to the
//! index and to watchers, and only then answers the callers.
//!
//! Compaction removes old revisions a bounded number at a time, in the same transactions as
//! writes (or alone when idle), so it never holds writers up for long and the file does not grow
//! under steady churn.

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use redb::{Table, WriteTransaction};
use tokio::sync::oneshot;

use super::index::Entry;
use super::record::Record;
use super::{Shared, LOG, META, META_COMPACTED};
use crate::{CompactionPolicy, DeleteResponse, Event, EventKind, KeyValue, Result, Revision, StoreError};

/// Revisions removed per compaction step.
const COMPACTION_STEP: usize = 512;

#[derive(Debug)]
pub(crate) enum Op {
    Create {
        key: String,
        value: Bytes,
    },
    Update {
        key: String,
        value: Bytes,
        expected: Revision,
    },
    Delete {
        key: String,
        expected: Option<Revision>,
    },
    Compact {
        revision: Revision,
    },
}

#[derive(Debug)]
pub(crate) enum Outcome {
    Put(KeyValue),
    Deleted(DeleteResponse),
    Compacted,
}

pub(crate) struct Request {
    pub op: Op,
    pub reply: oneshot::Sender<Result<Outcome>>,
}

/// The test hooks standing for a bad disk ([`super::EmbeddedOptions`]); none in normal use.
pub(crate) struct Hooks {
    pub stall_while: Option<std::path::PathBuf>,
    pub fail_while: Option<std::path::PathBuf>,
}

/// How often a datastore that failed an I/O is tried again (reopened) while no write comes.
const REOPEN_EVERY: Duration = Duration::from_millis(500);

/// The writer thread's loop; returns when every sender is gone.
pub(crate) fn run(
    shared: Arc<Shared>,
    rx: Receiver<Request>,
    policy: CompactionPolicy,
    max_batch: usize,
    min_free: u64,
    hooks: Hooks,
) {
    let mut w = Writer {
        shared,
        min_free,
        stall_while: hooks.stall_while,
        fail_while: hooks.fail_while,
        broken: None,
        warned_full: None,
        // Resume an interrupted compaction pass: leftovers below the mark are removed again.
        compaction_cursor: Some(None),
    };
    let mut next_auto = policy.interval.map(|i| Instant::now() + i);
    // The revision at the previous automatic compaction's tick.
    let mut previous_tick: Revision = 0;
    loop {
        let wait = if w.compaction_cursor.is_some() {
            Duration::ZERO
        } else {
            next_auto
                .map(|t| t.saturating_duration_since(Instant::now()))
                .unwrap_or(Duration::from_secs(3600))
        };
        // After a failed I/O, reads wait for the reopen too: try it soon even without writes.
        let wait = if w.broken.is_some() {
            wait.min(REOPEN_EVERY)
        } else {
            wait
        };
        let mut batch = Vec::new();
        match rx.recv_timeout(wait) {
            Ok(first) => {
                batch.push(first);
                while batch.len() < max_batch {
                    match rx.try_recv() {
                        Ok(more) => batch.push(more),
                        Err(_) => break,
                    }
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                if w.broken.is_some() {
                    w.reopen();
                }
            }
            Err(RecvTimeoutError::Disconnected) => return,
        }
        if let (Some(due), Some(interval)) = (next_auto, policy.interval) {
            if Instant::now() >= due {
                next_auto = Some(Instant::now() + interval);
                let current = w.shared.index().current;
                let target = policy.target(current, previous_tick);
                previous_tick = current;
                if target > w.shared.index().compacted {
                    tracing::debug!(target, "automatic compaction");
                    w.compact_to(target);
                }
            }
        }
        w.commit(batch);
    }
}

struct Writer {
    shared: Arc<Shared>,
    /// Free space below which creates and updates are refused.
    min_free: u64,
    /// The slow-disk test hook ([`super::EmbeddedOptions::stall_while`]).
    stall_while: Option<std::path::PathBuf>,
    /// The failing-disk test hook ([`super::EmbeddedOptions::fail_while`]), for reopening.
    fail_while: Option<std::path::PathBuf>,
    /// Since when, and why, the database is unusable after a failed I/O (until reopened).
    broken: Option<(Instant, String)>,
    /// When a full disk was last logged (once a minute is enough while it stays full).
    warned_full: Option<Instant>,
    /// `Some(cursor)` while a compaction pass is under way: the key after which to go on.
    compaction_cursor: Option<Option<String>>,
}

/// What one request did inside the batch, to publish after the commit.
struct Applied {
    reply: oneshot::Sender<Result<Outcome>>,
    result: Result<Outcome>,
}

impl Writer {
    /// Record a new compaction mark on its own (used by the automatic policy).
    fn compact_to(&mut self, revision: Revision) {
        let (reply, _ignored) = oneshot::channel();
        self.commit(vec![Request {
            op: Op::Compact { revision },
            reply,
        }]);
    }

    /// Note a failed I/O: the database is unusable until reopened.
    fn broke(&mut self, err: &str) {
        if self.broken.is_none() {
            tracing::error!(%err, "datastore I/O failed; reopening it (writes are refused until then)");
            self.broken = Some((Instant::now(), err.to_string()));
        }
    }

    /// What a write is told while the database is unusable.
    fn unavailable(&self) -> String {
        let why = self.broken.as_ref().map_or("", |(_, why)| why.as_str());
        format!("the datastore's disk failed an I/O ({why}); it is being reopened")
    }

    /// Close the database that failed an I/O and open it again (redb then recovers it from
    /// its last commit). What is on disk decides: a commit whose sync reported an error but
    /// that landed is published now, to the index and to watchers. True once it is open.
    fn reopen(&mut self) -> bool {
        let shared = self.shared.clone();
        // No new reader takes the failed database; the file closes when the last one that
        // holds it (a read or a watch catching up) lets go.
        drop(shared.set_db(None));
        let db = match super::open_database(&shared.path, self.fail_while.as_deref()) {
            Ok(db) => db,
            Err(e) => {
                tracing::debug!(error = %e, "datastore reopen failed; trying again");
                return false;
            }
        };
        let index = match super::load(&db, true) {
            Ok(ix) => ix,
            Err(e) => {
                tracing::warn!(error = %e, "datastore reopened but unreadable; trying again");
                return false;
            }
        };
        let events = {
            let published = shared.index().current;
            if index.current < published {
                // The disk lost what it had acknowledged: say so loudly, and go on from it.
                tracing::error!(
                    published,
                    on_disk = index.current,
                    "the datastore's disk lost acknowledged writes"
                );
            }
            match landed(&shared, &db, published, index.current) {
                Ok(events) => events,
                Err(e) => {
                    tracing::warn!(error = %e, "datastore reopened but its log is unreadable; trying again");
                    return false;
                }
            }
        };
        {
            let mut hub = shared.hub.lock().unwrap_or_else(|e| e.into_inner());
            *shared.index.write().unwrap_or_else(|e| e.into_inner()) = index;
            shared.set_db(Some(db));
            hub.broadcast(&events);
        }
        if let Some((since, _)) = self.broken.take() {
            tracing::info!(
                after = ?since.elapsed(),
                landed = events.len(),
                "datastore reopened after an I/O error; writes are taken again"
            );
        }
        true
    }

    /// The slow-disk hook: wait, as a sync that stalls, while its file exists.
    fn stall(&self) {
        let Some(path) = &self.stall_while else {
            return;
        };
        if path.exists() {
            tracing::warn!(path = %path.display(), "test hook: the datastore's commits stall while this file exists");
            while path.exists() {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    fn commit(&mut self, batch: Vec<Request>) {
        let batch = self.refuse_when_full(batch);
        if batch.is_empty() && self.compaction_cursor.is_none() {
            return;
        }
        if self.broken.is_some() && !self.reopen() {
            let why = self.unavailable();
            return fail(batch, || StoreError::Unavailable(why.clone()));
        }
        let shared = self.shared.clone();
        let (current, compacted) = {
            let ix = shared.index();
            (ix.current, ix.compacted)
        };
        let mut state = BatchState {
            shared: &shared,
            revision: current,
            compacted,
            new_compacted: None,
            overlay: HashMap::new(),
            entries: Vec::new(),
            events: Vec::new(),
        };
        let txn = match shared
            .db()
            .and_then(|db| db.begin_write().map_err(|e| shared.io(e)))
        {
            Ok(t) => t,
            Err(e) => {
                self.broke(&e.to_string());
                let why = self.unavailable();
                return fail(batch, || StoreError::Unavailable(why.clone()));
            }
        };
        let mut applied = Vec::with_capacity(batch.len());
        let mut removed = Vec::new();
        let body = (|| -> Result<()> {
            let mut log = txn.open_table(LOG).map_err(|e| shared.io(e))?;
            for req in batch {
                let result = state.apply(&mut log, req.op);
                applied.push(Applied {
                    reply: req.reply,
                    result,
                });
            }
            if let Some(cursor) = &self.compaction_cursor {
                let (step, next) = shared.index().compaction_step(cursor.as_deref(), COMPACTION_STEP);
                for (_, rev) in &step {
                    log.remove(*rev as u64).map_err(|e| shared.io(e))?;
                }
                removed = step;
                self.compaction_cursor = next.map(Some);
            }
            drop(log);
            if let Some(mark) = state.new_compacted {
                write_compacted(&txn, mark).map_err(|e| shared.io(e))?;
            }
            Ok(())
        })();
        self.stall();
        let committed = body.and_then(|()| txn.commit().map_err(|e| shared.io(e)));
        if let Err(err) = committed {
            // Nothing was published; a compaction pass in progress starts over next time. A
            // commit whose sync failed may still be on disk: the reopen finds out and publishes
            // it then, so a write answered with an error may turn out applied (as a write to
            // etcd that timed out).
            self.compaction_cursor = Some(None);
            self.broke(&err.to_string());
            let why = format!("{}; the write may not have been applied", self.unavailable());
            for a in applied {
                let _ = a.reply.send(Err(StoreError::Unavailable(why.clone())));
            }
            return;
        }
        if state.new_compacted.is_some() {
            self.compaction_cursor = Some(None);
        }
        // Publish: index first, then watchers, with the hub held so that a watch registering
        // concurrently sees either none or all of this batch.
        {
            let mut hub = shared.hub.lock().unwrap_or_else(|e| e.into_inner());
            {
                let mut ix = shared.index.write().unwrap_or_else(|e| e.into_inner());
                for (key, entry) in &state.entries {
                    ix.push(key, *entry);
                }
                ix.current = state.revision;
                if let Some(mark) = state.new_compacted {
                    ix.compacted = mark;
                }
                ix.forget(&removed);
            }
            hub.broadcast(&state.events);
        }
        for a in applied {
            let _ = a.reply.send(a.result);
        }
    }
}

impl Writer {
    /// The batch without its creates and updates when the filesystem is short of space (they
    /// are answered with an error that says so); deletes and compaction, which let space be
    /// reclaimed, go on.
    fn refuse_when_full(&mut self, batch: Vec<Request>) -> Vec<Request> {
        let grows = |op: &Op| matches!(op, Op::Create { .. } | Op::Update { .. });
        if self.min_free == 0 || !batch.iter().any(|r| grows(&r.op)) {
            return batch;
        }
        let dir = self.shared.path.parent().unwrap_or(std::path::Path::new("."));
        let Some(free) = free_bytes(dir) else {
            return batch;
        };
        if free >= self.min_free {
            return batch;
        }
        let msg = format!(
            "the datastore's disk is full: {} MiB free at {}, {} MiB kept free; creates and updates are refused until space is freed",
            free >> 20,
            dir.display(),
            self.min_free >> 20
        );
        if self
            .warned_full
            .is_none_or(|t| t.elapsed() > Duration::from_secs(60))
        {
            tracing::warn!("{msg}");
            self.warned_full = Some(Instant::now());
        }
        let (refused, kept): (Vec<_>, Vec<_>) = batch.into_iter().partition(|r| grows(&r.op));
        for r in refused {
            let _ = r.reply.send(Err(StoreError::Unavailable(msg.clone())));
        }
        kept
    }
}

/// The space unprivileged writers may still use on the filesystem holding `dir`.
fn free_bytes(dir: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is NUL-terminated and `st` is a valid statvfs to fill.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_bavail as u64 * st.f_frsize as u64)
}

fn fail(batch: Vec<Request>, err: impl Fn() -> StoreError) {
    for req in batch {
        let _ = req.reply.send(Err(err()));
    }
}

fn write_compacted(txn: &WriteTransaction, mark: Revision) -> std::result::Result<(), String> {
    let mut meta = txn.open_table(META).map_err(|e| e.to_string())?;
    meta.insert(META_COMPACTED, mark as u64)
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// The effect of a batch so far, so later requests in it see earlier ones.
struct BatchState<'a> {
    shared: &'a Shared,
    revision: Revision,
    compacted: Revision,
    new_compacted: Option<Revision>,
    /// Keys written in this batch: their latest entry and value.
    overlay: HashMap<String, (Entry, Bytes)>,
    entries: Vec<(String, Entry)>,
    events: Vec<Event>,
}

impl BatchState<'_> {
    /// The latest live version of `key` as of this point in the batch.
    fn live(&self, log: &Table<u64, &[u8]>, key: &str) -> Result<Option<KeyValue>> {
        if let Some((entry, value)) = self.overlay.get(key) {
            return Ok((!entry.tombstone).then(|| kv(key, entry, value.clone())));
        }
        let latest = self.shared.index().latest(key);
        match latest {
            Some(entry) if !entry.tombstone => {
                let rec = self.shared.record(log, entry.mod_revision)?;
                Ok(Some(kv(key, &entry, rec.value)))
            }
            _ => Ok(None),
        }
    }

    fn apply(&mut self, log: &mut Table<u64, &[u8]>, op: Op) -> Result<Outcome> {
        match op {
            Op::Create { key, value } => {
                if self.live(log, &key)?.is_some() {
                    return Err(StoreError::AlreadyExists { key });
                }
                let kv = self.write(log, key, value, None)?;
                Ok(Outcome::Put(kv))
            }
            Op::Update { key, value, expected } => {
                let Some(current) = self.live(log, &key)? else {
                    return Err(StoreError::NotFound { key });
                };
                if current.mod_revision != expected {
                    return Err(StoreError::Conflict {
                        key,
                        expected,
                        current: Box::new(current),
                    });
                }
                let kv = self.write(log, key, value, Some(current))?;
                Ok(Outcome::Put(kv))
            }
            Op::Delete { key, expected } => {
                let Some(current) = self.live(log, &key)? else {
                    return Err(StoreError::NotFound { key });
                };
                if let Some(expected) = expected {
                    if current.mod_revision != expected {
                        return Err(StoreError::Conflict {
                            key,
                            expected,
                            current: Box::new(current),
                        });
                    }
                }
                let revision = self.delete(log, key, current.clone())?;
                Ok(Outcome::Deleted(DeleteResponse {
                    prev: current,
                    revision,
                }))
            }
            Op::Compact { revision } => {
                let mark = self.new_compacted.unwrap_or(self.compacted);
                if revision <= mark {
                    return Err(StoreError::Compacted {
                        requested: revision,
                        compacted: Some(mark),
                    });
                }
                if revision > self.revision {
                    return Err(StoreError::FutureRevision {
                        requested: revision,
                        current: self.revision,
                    });
                }
                self.new_compacted = Some(revision);
                Ok(Outcome::Compacted)
            }
        }
    }

    fn write(
        &mut self,
        log: &mut Table<u64, &[u8]>,
        key: String,
        value: Bytes,
        prev: Option<KeyValue>,
    ) -> Result<KeyValue> {
        self.revision += 1;
        let rev = self.revision;
        let (create_revision, version, prev_revision) = match &prev {
            Some(p) => (p.create_revision, p.version + 1, p.mod_revision),
            None => (rev, 1, 0),
        };
        let rec = Record {
            key,
            value,
            tombstone: false,
            create_revision,
            version,
            prev_revision,
        };
        log.insert(rev as u64, rec.encode().as_slice())
            .map_err(|e| self.shared.io(e))?;
        let entry = Entry {
            mod_revision: rev,
            create_revision,
            version,
            tombstone: false,
        };
        let kv = kv(&rec.key, &entry, rec.value.clone());
        self.record(rec.key, entry, rec.value, kv.clone(), prev);
        Ok(kv)
    }

    fn delete(&mut self, log: &mut Table<u64, &[u8]>, key: String, prev: KeyValue) -> Result<Revision> {
        self.revision += 1;
        let rev = self.revision;
        let rec = Record {
            key,
            value: Bytes::new(),
            tombstone: true,
            create_revision: 0,
            version: 0,
            prev_revision: prev.mod_revision,
        };
        log.insert(rev as u64, rec.encode().as_slice())
            .map_err(|e| self.shared.io(e))?;
        let entry = Entry {
            mod_revision: rev,
            create_revision: 0,
            version: 0,
            tombstone: true,
        };
        let kv = rec.clone().into_kv(rev);
        self.record(rec.key, entry, Bytes::new(), kv, Some(prev));
        Ok(rev)
    }

    fn record(&mut self, key: String, entry: Entry, value: Bytes, kv: KeyValue, prev: Option<KeyValue>) {
        self.events.push(Event {
            kind: if entry.tombstone {
                EventKind::Delete
            } else {
                EventKind::Put
            },
            kv,
            prev,
        });
        self.entries.push((key.clone(), entry));
        self.overlay.insert(key, (entry, value));
    }
}

fn kv(key: &str, entry: &Entry, value: Bytes) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value,
        create_revision: entry.create_revision,
        mod_revision: entry.mod_revision,
        version: entry.version,
    }
}

/// The events of the revisions after `published` up to `current` that are in `db`'s log: a
/// commit that reported an error but reached the disk.
fn landed(
    shared: &Shared,
    db: &redb::Database,
    published: Revision,
    current: Revision,
) -> Result<Vec<Event>> {
    if current <= published {
        return Ok(Vec::new());
    }
    let snapshot = db.begin_read().map_err(|e| shared.io(e))?;
    let log = snapshot.open_table(LOG).map_err(|e| shared.io(e))?;
    let mut events = Vec::new();
    for item in log
        .range(published as u64 + 1..=current as u64)
        .map_err(|e| shared.io(e))?
    {
        let (rev, raw) = item.map_err(|e| shared.io(e))?;
        let rev = rev.value() as Revision;
        let rec = Record::decode(raw.value()).map_err(|e| shared.io(format!("revision {rev}: {e}")))?;
        events.push(super::watch::event(shared, &log, rev, rec)?);
    }
    Ok(events)
}
