//! The embedded backend: r8s's zero-setup datastore.
//!
//! Layout, as etcd does it with bbolt and its `treeIndex`:
//! - a redb file (`<dir>/state.redb`) holding an append-only log, one record per revision
//!   (key, value, create revision, version, previous revision), and a small meta table
//!   (format version, compacted revision);
//! - an in-memory [`index::Index`] from key to the revisions it was written at, rebuilt from the
//!   log at start, so reads at any retained revision are a lookup plus one record read;
//! - one writer thread ([`writer`]) that takes every waiting write, applies them in revision
//!   order in one redb transaction and syncs once (group commit), then publishes them to the
//!   index and to watchers before acknowledging, so an acknowledged write is on disk and visible;
//! - a watch hub ([`watch`]) that pushes committed events to watchers as they commit.
//!
//! redb was picked over SQLite by measurement (BENCHMARKS.md, "engine choice"): both clear the
//! throughput target by far, redb has the lower commit p99 and gives cheap snapshot reads from
//! any thread, which consistent paging and watch catch-up need.

mod index;
mod record;
mod watch;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};
use std::thread::JoinHandle;

use async_trait::async_trait;
use bytes::Bytes;
use redb::{Database, ReadableTable, TableDefinition};
use tokio::sync::oneshot;

use crate::{
    CompactionPolicy, DeleteResponse, GetResponse, KeyValue, RangeRequest, RangeResponse, Result, Revision,
    Store, StoreError, Watch,
};
use index::{Entry, Index};
use record::Record;
use writer::{Op, Outcome, Request};

/// The log: revision → record.
pub(crate) const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
/// Format version and compaction mark.
pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const META_FORMAT: &str = "format";
const META_COMPACTED: &str = "compacted";
/// The on-disk format this build writes and reads. A file with a larger number was written by
/// a newer r8s and is refused rather than misread.
pub const FORMAT_VERSION: u64 = 1;
/// The file under the data directory.
pub const FILE_NAME: &str = "state.redb";

#[derive(Clone, Debug)]
pub struct EmbeddedOptions {
    /// Directory holding the datastore file; created if missing.
    pub dir: PathBuf,
    pub compaction: CompactionPolicy,
    /// Most writes committed together in one sync.
    pub max_batch: usize,
    /// Creates and updates are refused (deletes and compaction go on) while the datastore's
    /// filesystem has less free space than this, as etcd refuses writes past its quota: redb
    /// grows its file in steps while it commits, and a commit that runs out of space leaves
    /// the open database unusable for reads too until it is reopened.
    pub min_free_bytes: u64,
    /// A test hook standing for a disk whose sync stalls: while this file exists, every commit
    /// waits before it syncs (`r8s server --test-datastore-stall-while`, hidden; the slow-disk
    /// tests use it). `None` in normal use.
    pub stall_while: Option<PathBuf>,
    /// A test hook standing for a disk that fails: while this file exists, every write and
    /// sync of the datastore file fails with EIO (`r8s server --test-datastore-fail-while`,
    /// hidden). `None` in normal use.
    pub fail_while: Option<PathBuf>,
}

/// [`EmbeddedOptions::min_free_bytes`] by default.
pub const DEFAULT_MIN_FREE_BYTES: u64 = 64 << 20;

impl EmbeddedOptions {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            compaction: CompactionPolicy::default(),
            max_batch: 1024,
            min_free_bytes: DEFAULT_MIN_FREE_BYTES,
            stall_while: None,
            fail_while: None,
        }
    }
}

/// State shared by the request handlers, the writer thread and watch tasks.
pub(crate) struct Shared {
    /// The open database; `None` while the writer reopens it after an I/O error (redb refuses
    /// every read and write of a database once one of its I/Os failed, until it is reopened).
    db: RwLock<Option<Arc<Database>>>,
    pub index: RwLock<Index>,
    pub hub: Mutex<watch::Hub>,
    pub path: PathBuf,
}

impl Shared {
    pub fn index(&self) -> RwLockReadGuard<'_, Index> {
        self.index.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn io(&self, err: impl std::fmt::Display) -> StoreError {
        StoreError::Io(format!("{}: {err}", self.path.display()))
    }

    /// The open database, or why there is none just now.
    pub fn db(&self) -> Result<Arc<Database>> {
        self.db
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| {
                StoreError::Unavailable(format!(
                    "{}: the datastore is being reopened after an I/O error",
                    self.path.display()
                ))
            })
    }

    /// A snapshot to read from.
    pub fn begin_read(&self) -> Result<redb::ReadTransaction> {
        self.db()?.begin_read().map_err(|e| self.io(e))
    }

    /// Put `db` in place (after a reopen), or take the open one away (`None`).
    pub fn set_db(&self, db: Option<Database>) -> Option<Arc<Database>> {
        let mut slot = self.db.write().unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut *slot, db.map(Arc::new))
    }

    /// The revision a read at `requested` (0 = latest) is served at, or why it cannot be.
    fn read_revision(ix: &Index, requested: Revision) -> Result<Revision> {
        if requested == 0 {
            return Ok(ix.current);
        }
        if requested < ix.compacted {
            return Err(StoreError::Compacted {
                requested,
                compacted: Some(ix.compacted),
            });
        }
        if requested > ix.current {
            return Err(StoreError::FutureRevision {
                requested,
                current: ix.current,
            });
        }
        Ok(requested)
    }

    /// Read the record written at `revision` from a snapshot.
    pub fn record(&self, log: &impl ReadableTable<u64, &'static [u8]>, revision: Revision) -> Result<Record> {
        let raw = log
            .get(revision as u64)
            .map_err(|e| self.io(e))?
            .ok_or_else(|| self.io(format!("log record for revision {revision} is missing")))?;
        Record::decode(raw.value()).map_err(|e| self.io(format!("revision {revision}: {e}")))
    }
}

/// Owns the writer thread: when the last handle goes, the writer drains and stops, and the
/// database file is closed.
struct Handle {
    tx: Option<std::sync::mpsc::Sender<Request>>,
    writer: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

/// The embedded datastore. Cheap to clone; all clones share one writer.
#[derive(Clone)]
pub struct EmbeddedStore {
    handle: Arc<Handle>,
}

impl EmbeddedStore {
    /// Open (or create) the datastore under `opts.dir`. A file that is corrupt, not an r8s
    /// datastore, or of a newer format is refused with [`StoreError::Unreadable`]; it is never
    /// reset.
    pub fn open(opts: EmbeddedOptions) -> Result<Self> {
        std::fs::create_dir_all(&opts.dir).map_err(|e| StoreError::Unreadable {
            path: opts.dir.display().to_string(),
            reason: format!("cannot create the data directory: {e}"),
        })?;
        let path = opts.dir.join(FILE_NAME);
        let unreadable = |reason: String| StoreError::Unreadable {
            path: path.display().to_string(),
            reason,
        };
        let existed = std::fs::metadata(&path).map(|m| m.len() > 0).unwrap_or(false);
        let db = open_database(&path, opts.fail_while.as_deref()).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => unreadable(
                "it is already open (is another r8s server running on this data directory?)".into(),
            ),
            other => unreadable(format!(
                "the file is corrupt or not a datastore ({other}); it was left untouched"
            )),
        })?;
        let index = load(&db, existed).map_err(unreadable)?;
        tracing::info!(
            path = %path.display(),
            revision = index.current,
            compacted = index.compacted,
            "embedded datastore opened"
        );
        let shared = Arc::new(Shared {
            db: RwLock::new(Some(Arc::new(db))),
            index: RwLock::new(index),
            hub: Mutex::new(watch::Hub::default()),
            path,
        });
        let (tx, rx) = std::sync::mpsc::channel();
        let writer = {
            let shared = shared.clone();
            let policy = opts.compaction.clone();
            let max_batch = opts.max_batch.max(1);
            let min_free = opts.min_free_bytes;
            let hooks = writer::Hooks {
                stall_while: opts.stall_while.clone(),
                fail_while: opts.fail_while.clone(),
            };
            std::thread::Builder::new()
                .name("store-writer".into())
                .spawn(move || writer::run(shared, rx, policy, max_batch, min_free, hooks))
                .map_err(|e| StoreError::Io(format!("cannot start the writer thread: {e}")))?
        };
        Ok(Self {
            handle: Arc::new(Handle {
                tx: Some(tx),
                writer: Some(writer),
                shared,
            }),
        })
    }

    /// The datastore file.
    pub fn path(&self) -> &Path {
        &self.handle.shared.path
    }

    /// The oldest revision that can still be read or watched from.
    pub fn compacted_revision(&self) -> Revision {
        self.shared().index().compacted
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.handle.shared
    }

    async fn submit(&self, op: Op) -> Result<Outcome> {
        let (reply, rx) = oneshot::channel();
        let tx = self
            .handle
            .tx
            .as_ref()
            .expect("sender lives as long as the handle");
        tx.send(Request { op, reply })
            .map_err(|_| StoreError::Unavailable("the datastore writer has stopped".into()))?;
        rx.await
            .map_err(|_| StoreError::Unavailable("the datastore writer has stopped".into()))?
    }
}

/// Open (or create) the database file at `path`; with `fail_while` (the failing-disk test
/// hook), through a backend whose writes and syncs fail while that file exists.
pub(crate) fn open_database(
    path: &Path,
    fail_while: Option<&Path>,
) -> std::result::Result<Database, redb::DatabaseError> {
    let Some(fail_while) = fail_while else {
        return Database::create(path);
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    let backend = FailingDisk {
        inner: redb::backends::FileBackend::new(file)?,
        fail_while: fail_while.to_owned(),
    };
    redb::Builder::new().create_with_backend(backend)
}

/// The failing-disk test hook's storage: the file's own backend, whose writes, syncs and
/// resizes fail with EIO while `fail_while` exists (reads go on, as on a disk whose writes
/// fail). redb's backend trait is the one seam for this; a device-mapper `dm-flakey` device
/// would need a loop device and root in every test.
#[derive(Debug)]
struct FailingDisk {
    inner: redb::backends::FileBackend,
    fail_while: PathBuf,
}

impl FailingDisk {
    fn check(&self) -> std::io::Result<()> {
        if self.fail_while.exists() {
            Err(std::io::Error::from_raw_os_error(libc_eio()))
        } else {
            Ok(())
        }
    }
}

/// EIO, the error a failing disk gives.
const fn libc_eio() -> i32 {
    5
}

impl redb::StorageBackend for FailingDisk {
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }

    fn read(&self, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
        self.inner.read(offset, len)
    }

    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.check()?;
        self.inner.set_len(len)
    }

    fn sync_data(&self, eventual: bool) -> std::io::Result<()> {
        self.check()?;
        self.inner.sync_data(eventual)
    }

    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.check()?;
        self.inner.write(offset, data)
    }
}

/// Check the format marker (or write it to a new file) and rebuild the index from the log.
pub(crate) fn load(db: &Database, existed: bool) -> std::result::Result<Index, String> {
    if !existed {
        let w = db.begin_write().map_err(|e| e.to_string())?;
        {
            let mut meta = w.open_table(META).map_err(|e| e.to_string())?;
            meta.insert(META_FORMAT, FORMAT_VERSION)
                .map_err(|e| e.to_string())?;
            meta.insert(META_COMPACTED, 0).map_err(|e| e.to_string())?;
            w.open_table(LOG).map_err(|e| e.to_string())?;
        }
        w.commit().map_err(|e| e.to_string())?;
    }
    let r = db.begin_read().map_err(|e| e.to_string())?;
    let meta = r
        .open_table(META)
        .map_err(|e| format!("not an r8s datastore (no meta table: {e}); it was left untouched"))?;
    let format = meta
        .get(META_FORMAT)
        .map_err(|e| e.to_string())?
        .map(|v| v.value())
        .ok_or("not an r8s datastore (no format marker); it was left untouched")?;
    if format > FORMAT_VERSION {
        return Err(format!(
            "it was written by a newer r8s (datastore format {format}; this r8s reads up to {FORMAT_VERSION}); \
             run a newer r8s or restore a backup"
        ));
    }
    let compacted = meta
        .get(META_COMPACTED)
        .map_err(|e| e.to_string())?
        .map(|v| v.value())
        .unwrap_or(0) as Revision;
    let log = r
        .open_table(LOG)
        .map_err(|e| format!("log table unreadable: {e}"))?;
    let mut index = Index::default();
    for item in log.iter().map_err(|e| e.to_string())? {
        let (rev, raw) = item.map_err(|e| format!("log unreadable: {e}"))?;
        let rev = rev.value() as Revision;
        let rec =
            Record::decode(raw.value()).map_err(|e| format!("corrupt log record at revision {rev}: {e}"))?;
        index.push(
            &rec.key,
            Entry {
                mod_revision: rev,
                create_revision: rec.create_revision,
                version: rec.version,
                tombstone: rec.tombstone,
            },
        );
    }
    index.compacted = compacted;
    index.current = index.current.max(compacted);
    Ok(index)
}

#[async_trait]
impl Store for EmbeddedStore {
    async fn get(&self, key: &str, revision: Revision) -> Result<GetResponse> {
        let shared = self.shared();
        let (entry, revision, snapshot) = {
            let ix = shared.index();
            let revision = Shared::read_revision(&ix, revision)?;
            let entry = ix.at(key, revision);
            // Open the snapshot before releasing the index, so compaction cannot remove the
            // record between the lookup and the read.
            let snapshot = match entry {
                Some(_) => Some(shared.begin_read()?),
                None => None,
            };
            (entry, revision, snapshot)
        };
        let kv = match (entry, snapshot) {
            (Some(entry), Some(snapshot)) => {
                let log = snapshot.open_table(LOG).map_err(|e| shared.io(e))?;
                Some(
                    shared
                        .record(&log, entry.mod_revision)?
                        .into_kv(entry.mod_revision),
                )
            }
            _ => None,
        };
        Ok(GetResponse { kv, revision })
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        let shared = self.shared();
        let (found, more, count, revision, snapshot) = {
            let ix = shared.index();
            let revision = Shared::read_revision(&ix, req.revision)?;
            let (found, more, count) = ix.range(
                &req.prefix,
                req.start_after.as_deref(),
                req.limit,
                revision,
                req.count,
            );
            let snapshot = shared.begin_read()?;
            (found, more, count, revision, snapshot)
        };
        let log = snapshot.open_table(LOG).map_err(|e| shared.io(e))?;
        let mut kvs = Vec::with_capacity(found.len());
        for (_, entry) in found {
            kvs.push(
                shared
                    .record(&log, entry.mod_revision)?
                    .into_kv(entry.mod_revision),
            );
        }
        Ok(RangeResponse {
            kvs,
            more,
            count,
            revision,
        })
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        match self
            .submit(Op::Create {
                key: key.to_owned(),
                value,
            })
            .await?
        {
            Outcome::Put(kv) => Ok(kv),
            other => unreachable!("create answered with {other:?}"),
        }
    }

    async fn update(&self, key: &str, value: Bytes, expected_mod_revision: Revision) -> Result<KeyValue> {
        match self
            .submit(Op::Update {
                key: key.to_owned(),
                value,
                expected: expected_mod_revision,
            })
            .await?
        {
            Outcome::Put(kv) => Ok(kv),
            other => unreachable!("update answered with {other:?}"),
        }
    }

    async fn delete(&self, key: &str, expected_mod_revision: Option<Revision>) -> Result<DeleteResponse> {
        match self
            .submit(Op::Delete {
                key: key.to_owned(),
                expected: expected_mod_revision,
            })
            .await?
        {
            Outcome::Deleted(d) => Ok(d),
            other => unreachable!("delete answered with {other:?}"),
        }
    }

    async fn watch(&self, prefix: &str, start_revision: Revision) -> Result<Watch> {
        watch::register(self.shared().clone(), prefix, start_revision)
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.submit(Op::Compact { revision }).await.map(|_| ())
    }

    async fn current_revision(&self) -> Result<Revision> {
        Ok(self.shared().index().current)
    }

    fn backend(&self) -> &'static str {
        "embedded"
    }
}

/// Entry point for the fuzz target `store_record` in `fuzz/` (not an API): one log record as
/// read back from the disk. A record that decodes encodes back to the same bytes (the layout
/// has one form), and a revision's key-value comes of it.
#[doc(hidden)]
pub fn fuzz_record(bytes: &[u8]) {
    if let Ok(r) = record::Record::decode(bytes) {
        assert_eq!(r.encode(), bytes, "a decoded record re-encodes to its bytes");
        let _ = r.into_kv(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_corpus_replays_and_round_trips() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
        let mut n = 0;
        for sub in ["corpus/store_record", "regressions/store_record"] {
            for e in std::fs::read_dir(dir.join(sub)).into_iter().flatten().flatten() {
                fuzz_record(&std::fs::read(e.path()).unwrap());
                n += 1;
            }
        }
        assert!(n > 0, "the store_record corpus is empty");
    }

    #[tokio::test]
    async fn refuses_a_newer_format_and_leaves_it_untouched() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = EmbeddedStore::open(EmbeddedOptions::new(dir.path())).unwrap();
            store.create("/a", Bytes::from_static(b"1")).await.unwrap();
        }
        let path = dir.path().join(FILE_NAME);
        {
            let db = Database::create(&path).unwrap();
            let w = db.begin_write().unwrap();
            w.open_table(META)
                .unwrap()
                .insert(META_FORMAT, FORMAT_VERSION + 1)
                .unwrap();
            w.commit().unwrap();
        }
        let before = std::fs::read(&path).unwrap();
        let err = EmbeddedStore::open(EmbeddedOptions::new(dir.path()))
            .err()
            .unwrap();
        let msg = err.to_string();
        assert!(matches!(err, StoreError::Unreadable { .. }), "{msg}");
        assert!(msg.contains("newer r8s"), "{msg}");
        assert_eq!(
            std::fs::read(&path).unwrap(),
            before,
            "the file must not be modified"
        );
    }

    #[tokio::test]
    async fn a_disk_short_of_space_refuses_creates_and_updates_only() {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = EmbeddedOptions::new(dir.path());
        let store = EmbeddedStore::open(opts.clone()).unwrap();
        let a = store.create("/a", Bytes::from_static(b"1")).await.unwrap();
        drop(store);
        // More kept free than any disk has.
        opts.min_free_bytes = u64::MAX;
        let store = EmbeddedStore::open(opts).unwrap();
        let err = store.create("/b", Bytes::from_static(b"2")).await.unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
        assert!(err.to_string().contains("the datastore's disk is full"), "{err}");
        let err = store
            .update("/a", Bytes::from_static(b"3"), a.mod_revision)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("disk is full"), "{err}");
        // Reads go on; nothing changed; a delete (which lets space be reclaimed) is taken.
        let got = store.get("/a", 0).await.unwrap().kv.unwrap();
        assert_eq!(&got.value[..], b"1");
        assert!(store.get("/b", 0).await.unwrap().kv.is_none());
        store.delete("/a", None).await.unwrap();
        assert!(store.get("/a", 0).await.unwrap().kv.is_none());
    }

    #[tokio::test]
    async fn a_failing_disk_refuses_writes_and_the_store_is_reopened_once_it_works() {
        let dir = tempfile::tempdir().unwrap();
        let failing = dir.path().join("failing");
        let mut opts = EmbeddedOptions::new(dir.path().join("db"));
        opts.fail_while = Some(failing.clone());
        let store = EmbeddedStore::open(opts).unwrap();
        let a = store.create("/a", Bytes::from_static(b"1")).await.unwrap();
        let mut watch = store.watch("/", a.mod_revision + 1).await.unwrap();

        std::fs::write(&failing, "").unwrap();
        let err = store.create("/b", Bytes::from_static(b"2")).await.unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
        assert!(err.to_string().contains("disk failed an I/O"), "{err}");
        // While the disk fails, writes stay refused (the reopen fails too) and say why.
        let err = store
            .update("/a", Bytes::from_static(b"3"), a.mod_revision)
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{err}");

        // The disk works again: within seconds the store is reopened and takes writes.
        std::fs::remove_file(&failing).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let c = loop {
            match store.create("/c", Bytes::from_static(b"3")).await {
                Ok(kv) => break kv,
                Err(StoreError::Unavailable(m)) => {
                    assert!(std::time::Instant::now() < deadline, "not reopened: {m}");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                Err(e) => panic!("{e}"),
            }
        };
        // Nothing lost, nothing half-written: /a as it was, /b never landed, /c next in line.
        assert_eq!(&store.get("/a", 0).await.unwrap().kv.unwrap().value[..], b"1");
        assert!(store.get("/b", 0).await.unwrap().kv.is_none());
        assert_eq!(c.mod_revision, a.mod_revision + 1);
        // The watch opened before the failure goes on with the write after it.
        let events = tokio::time::timeout(std::time::Duration::from_secs(5), watch.next())
            .await
            .expect("the watch delivers the write after the reopen")
            .unwrap()
            .unwrap();
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(
            (events[0].kv.key.as_str(), events[0].kv.mod_revision),
            ("/c", c.mod_revision)
        );
        // A new store on the same directory reads the same (the reopened file closed cleanly).
        drop(watch);
        drop(store);
        let store = EmbeddedStore::open(EmbeddedOptions::new(dir.path().join("db"))).unwrap();
        assert_eq!(&store.get("/c", 0).await.unwrap().kv.unwrap().value[..], b"3");
    }

    #[tokio::test]
    async fn refuses_a_second_open_of_the_same_directory() {
        let dir = tempfile::tempdir().unwrap();
        let _first = EmbeddedStore::open(EmbeddedOptions::new(dir.path())).unwrap();
        let err = EmbeddedStore::open(EmbeddedOptions::new(dir.path()))
            .err()
            .unwrap();
        assert!(err.to_string().contains("already open"), "{err}");
    }
}
