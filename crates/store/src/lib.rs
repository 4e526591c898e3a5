//! The r8s datastore: the reference document's "etcd" stage.
//!
//! Everything the API server persists goes through the [`Store`] trait, whose semantics are
//! those of etcd's v3 key-value API restricted to what Kubernetes uses: one global revision
//! counter, per-key create/mod revisions and versions, ranges with consistent paging,
//! single-key compare-and-swap transactions, watches from a revision with previous values,
//! and compaction. Two backends implement it:
//!
//! - [`embedded::EmbeddedStore`] (the default): an MVCC index in memory over an append-only
//!   revision log in a redb file, with group commit.
//! - [`etcd::EtcdStore`]: a real etcd cluster over its v3 gRPC API.
//!
//! Both pass the same conformance suite (`tests/conformance.rs`).

pub mod embedded;
pub mod etcd;
pub mod etcd_process;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::mpsc;

/// A store revision. Revisions start at 1 for the first write; 0 means "latest" in requests.
pub type Revision = i64;

/// One version of one key, as etcd's `mvccpb.KeyValue`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyValue {
    pub key: String,
    pub value: Bytes,
    /// Revision of the write that created this generation of the key.
    pub create_revision: Revision,
    /// Revision of the write that produced this version.
    pub mod_revision: Revision,
    /// Number of writes to this generation of the key (1 after create).
    pub version: i64,
}

/// What happened to a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Put,
    Delete,
}

/// One change seen by a watch.
///
/// For a `Put`, `kv` is the new version. For a `Delete`, `kv` carries the key and the
/// deletion's revision in `mod_revision` (value empty, versions zero), as etcd reports it.
/// `prev` is the version the change replaced, present for updates and deletes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    pub kv: KeyValue,
    pub prev: Option<KeyValue>,
}

impl Event {
    /// The revision at which this change happened.
    pub fn revision(&self) -> Revision {
        self.kv.mod_revision
    }
}

/// A read of one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GetResponse {
    pub kv: Option<KeyValue>,
    /// The revision the read was served at.
    pub revision: Revision,
}

/// A read of the keys under a prefix, in key order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeRequest {
    /// Every key returned starts with this prefix.
    pub prefix: String,
    /// Continue a paged read: only keys strictly after this one are returned.
    pub start_after: Option<String>,
    /// At most this many keys; 0 means no limit.
    pub limit: usize,
    /// Read at this revision; 0 means the latest. Pass the revision of the first page to
    /// every later page to get a consistent snapshot.
    pub revision: Revision,
    /// Also count the keys in the requested range (from `start_after` to the end of the prefix).
    pub count: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeResponse {
    pub kvs: Vec<KeyValue>,
    /// More keys remain after the last one returned.
    pub more: bool,
    /// The number of keys in the requested range, when asked for.
    pub count: Option<i64>,
    /// The revision the read was served at.
    pub revision: Revision,
}

/// The result of a successful delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeleteResponse {
    /// The version that was deleted.
    pub prev: KeyValue,
    /// The revision of the deletion.
    pub revision: Revision,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("key {key:?} not found")]
    NotFound { key: String },
    #[error("key {key:?} already exists")]
    AlreadyExists { key: String },
    /// A compare-and-swap failed: the key is at another revision than the one expected.
    #[error("key {key:?} was modified: expected mod revision {expected}, found {}", current.mod_revision)]
    Conflict {
        key: String,
        expected: Revision,
        current: Box<KeyValue>,
    },
    /// The requested revision is older than what compaction kept. `compacted` is the oldest
    /// revision still available, when the backend says.
    #[error("required revision {requested} has been compacted{}", compacted.map(|c| format!(" (compacted revision is {c})")).unwrap_or_default())]
    Compacted {
        requested: Revision,
        compacted: Option<Revision>,
    },
    /// The requested revision has not been written yet.
    #[error("required revision {requested} is a future revision (current revision is {current})")]
    FutureRevision { requested: Revision, current: Revision },
    /// A watcher fell too far behind and was dropped; watch again from its last revision.
    #[error("watch fell behind and was closed; resume from the last revision received")]
    WatchLagged,
    /// The backend cannot be reached or is shutting down.
    #[error("datastore unavailable: {0}")]
    Unavailable(String),
    /// The data on disk cannot be read: corrupt, or written by a newer r8s.
    #[error("datastore at {path} cannot be used: {reason}")]
    Unreadable { path: String, reason: String },
    #[error("datastore I/O error: {0}")]
    Io(String),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// What a watch delivers: a batch of events, or a progress notification — every change under
/// the watch's prefix up to that revision has been delivered before it (etcd's progress
/// notify; what upstream's watch cache needs to serve consistent reads).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchItem {
    Events(Vec<Event>),
    Progress(Revision),
}

/// Asks a watch for a progress notification (answered on the watch, in order, soon).
#[derive(Clone)]
pub struct ProgressRequester(Arc<dyn Fn() + Send + Sync>);

impl ProgressRequester {
    pub(crate) fn new(f: impl Fn() + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }

    pub fn request(&self) {
        (self.0)()
    }
}

/// An open watch: batches of events in revision order, each change exactly once.
///
/// Dropping it cancels the watch.
pub struct Watch {
    rx: mpsc::Receiver<Result<WatchItem>>,
    /// Set by the backend when it closed this watch for falling behind.
    lagged: Arc<AtomicBool>,
    progress: Option<ProgressRequester>,
}

impl Watch {
    pub(crate) fn new(
        rx: mpsc::Receiver<Result<WatchItem>>,
        lagged: Arc<AtomicBool>,
        progress: Option<ProgressRequester>,
    ) -> Self {
        Self { rx, lagged, progress }
    }

    /// The next batch of events (never empty), an error that ends the watch, or `None` once the
    /// store has shut down. Progress notifications are skipped.
    pub async fn next(&mut self) -> Option<Result<Vec<Event>>> {
        loop {
            match self.next_item().await? {
                Ok(WatchItem::Events(events)) => return Some(Ok(events)),
                Ok(WatchItem::Progress(_)) => continue,
                Err(e) => return Some(Err(e)),
            }
        }
    }

    /// The next batch of events or progress notification, an error that ends the watch, or
    /// `None` once the store has shut down.
    pub async fn next_item(&mut self) -> Option<Result<WatchItem>> {
        match self.rx.recv().await {
            Some(item) => Some(item),
            None if self.lagged.swap(false, Ordering::SeqCst) => Some(Err(StoreError::WatchLagged)),
            None => None,
        }
    }

    /// How to ask this watch for progress notifications (it may be moved elsewhere).
    pub fn progress_requester(&self) -> Option<ProgressRequester> {
        self.progress.clone()
    }
}

/// How many event batches a watcher may have waiting before it is considered lagging.
pub(crate) const WATCH_BUFFER: usize = 1024;

/// The datastore contract, with etcd v3 semantics.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Read one key at `revision` (0 = latest).
    async fn get(&self, key: &str, revision: Revision) -> Result<GetResponse>;

    /// Read the keys under a prefix.
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse>;

    /// Create a key that must not exist (`AlreadyExists` otherwise).
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue>;

    /// Replace a key whose mod revision is `expected_mod_revision`: `NotFound` if it does not
    /// exist, `Conflict` (with the current version) if it is at another revision.
    async fn update(&self, key: &str, value: Bytes, expected_mod_revision: Revision) -> Result<KeyValue>;

    /// Delete a key, only if its mod revision matches when `expected_mod_revision` is given.
    async fn delete(&self, key: &str, expected_mod_revision: Option<Revision>) -> Result<DeleteResponse>;

    /// Watch every key under `prefix`, starting with the change at `start_revision`
    /// (inclusive; 0 = only changes after now). `Compacted` if that revision is gone (returned
    /// here, or as the watch's first item if the revision is compacted while it is set up).
    async fn watch(&self, prefix: &str, start_revision: Revision) -> Result<Watch>;

    /// Discard the history before `revision`: reads and watches below it get `Compacted`.
    async fn compact(&self, revision: Revision) -> Result<()>;

    /// The latest revision.
    async fn current_revision(&self) -> Result<Revision>;

    /// The backend's name, for logs and `/readyz`.
    fn backend(&self) -> &'static str;
}

/// When and how much the store compacts by itself.
#[derive(Clone, Debug)]
pub struct CompactionPolicy {
    /// How often to compact; `None` disables automatic compaction.
    pub interval: Option<Duration>,
    /// At most how many of the latest revisions a compaction keeps.
    pub retain_revisions: i64,
}

impl CompactionPolicy {
    /// Where a compaction goes, with the store at `current` and `previous` the revision it
    /// was at one interval ago (0 on the first tick): history older than one interval goes,
    /// as kube-apiserver's compactor does it (a paged list's continue token so expires within
    /// two intervals), and under heavy churn no more than `retain_revisions` stay (kine's
    /// bound).
    pub fn target(&self, current: Revision, previous: Revision) -> Revision {
        previous.max(current - self.retain_revisions)
    }
}

impl Default for CompactionPolicy {
    /// Every 5 minutes (kube-apiserver's `--etcd-compaction-interval`): one interval of
    /// history, and at most the last 1,000 revisions (kine's retention), so watchers that
    /// reconnect quickly can resume.
    fn default() -> Self {
        Self {
            interval: Some(Duration::from_secs(300)),
            retain_revisions: 1000,
        }
    }
}

/// The end of a prefix range in etcd's sense: the smallest key greater than every key that
/// starts with `prefix`.
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // All 0xff (or empty): the range runs to the end of the keyspace, "\0" in etcd's encoding.
    vec![0]
}

#[cfg(test)]
mod compaction_tests {
    use super::*;

    #[test]
    fn compaction_drops_one_interval_old_history_and_bounds_churn() {
        let p = CompactionPolicy::default();
        // Quiet: what was current one interval ago goes, however few revisions since.
        assert_eq!(p.target(120, 100), 100);
        // First tick: only the churn bound.
        assert_eq!(p.target(120, 0), 0, "nothing to compact yet");
        assert_eq!(p.target(5_000, 0), 4_000);
        // Heavy churn: no more than 1,000 revisions stay.
        assert_eq!(p.target(5_000, 1_000), 4_000);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_increments_last_byte() {
        assert_eq!(prefix_end(b"/registry/pods/"), b"/registry/pods0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b""), vec![0]);
    }
}
