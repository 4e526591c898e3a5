//! The log backend (`--audit-log-path`): one JSON line per event, written by a thread of its
//! own so a request never waits for the disk. Requests hand events over through a bounded
//! channel; when it is full the event is dropped and counted (`apiserver_audit_error_total
//! {plugin="log"}`), never waited for.
//!
//! The file rotates as upstream's (lumberjack): when a line would take it past
//! `--audit-log-maxsize` megabytes it is renamed `<name>-<UTC time>.<ext>`
//! (`audit-2026-11-22T08-00-00.000.log`) and a new one started; then backups beyond
//! `--audit-log-maxbackup` (newest kept) and older than `--audit-log-maxage` days go.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};

use prometheus_client::metrics::counter::Counter;
use time::OffsetDateTime;

use super::policy::Stage;

const MEGABYTE: u64 = 1024 * 1024;

/// Where and how the log is written.
#[derive(Clone, Debug)]
pub struct LogOptions {
    /// The file, or `-` for standard output.
    pub path: PathBuf,
    /// Megabytes before the file rotates (0: upstream's default, 100).
    pub max_size_mb: u64,
    /// Backups kept (0: all).
    pub max_backups: usize,
    /// Days a backup is kept (0: no limit).
    pub max_age_days: u64,
    /// Events that may wait for the writer before new ones are dropped.
    pub buffer_size: usize,
}

impl LogOptions {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            max_size_mb: 0,
            max_backups: 0,
            max_age_days: 0,
            buffer_size: 10_000,
        }
    }
}

/// The requests' end of the log: hands events to the writer without ever blocking.
pub(crate) struct LogBackend {
    /// Events as JSON lines, encoded by the request that wrote them.
    tx: SyncSender<Vec<u8>>,
    /// `apiserver_audit_error_total{plugin="log"}`.
    errors: Counter,
}

impl LogBackend {
    /// Open the log and start its writer thread.
    pub fn start(options: &LogOptions, errors: Counter) -> std::io::Result<Self> {
        let mut out = if options.path.as_os_str() == "-" {
            Output::Stdout(BufWriter::new(std::io::stdout()))
        } else {
            let max = if options.max_size_mb == 0 {
                100 * MEGABYTE
            } else {
                options.max_size_mb * MEGABYTE
            };
            let mut file = RotatingFile::new(&options.path, max, options.max_backups, options.max_age_days);
            // Fail at start, not at the first event, when the file cannot be written.
            file.open_existing_or_new(0)?;
            Output::File(file)
        };
        let (backend, rx) = Self::channel(options.buffer_size, errors.clone());
        std::thread::Builder::new()
            .name("audit-log".into())
            .spawn(move || write_events(rx, &mut out, &errors))?;
        Ok(backend)
    }

    /// The backend and the receiving end of its channel.
    pub(super) fn channel(capacity: usize, errors: Counter) -> (Self, Receiver<Vec<u8>>) {
        let (tx, rx) = mpsc::sync_channel(capacity.max(1));
        (Self { tx, errors }, rx)
    }

    /// Queue an event (one JSON line, newline included) for writing; `false` if it was
    /// dropped (the queue is full or the writer is gone).
    pub fn process(&self, line: Vec<u8>, audit_id: &str, stage: Stage) -> bool {
        match self.tx.try_send(line) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.errors.inc();
                tracing::warn!(audit_id, ?stage, "audit: the log's queue is full, event dropped");
                false
            }
        }
    }
}

enum Output {
    Stdout(BufWriter<std::io::Stdout>),
    File(RotatingFile),
}

impl Output {
    fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        match self {
            Output::Stdout(w) => w.write_all(line),
            Output::File(f) => f.write_line(line),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Output::Stdout(w) => w.flush(),
            Output::File(f) => f.flush(),
        }
    }
}

/// The writer thread: write what is queued, flush whenever the queue runs dry, end when every
/// sender is gone.
fn write_events(rx: Receiver<Vec<u8>>, out: &mut Output, errors: &Counter) {
    let write = |out: &mut Output, line: Vec<u8>| {
        if let Err(e) = out.write_line(&line) {
            errors.inc();
            tracing::error!(error = %e, "audit: writing the log");
        }
    };
    while let Ok(ev) = rx.recv() {
        write(out, ev);
        while let Ok(ev) = rx.try_recv() {
            write(out, ev);
        }
        if let Err(e) = out.flush() {
            tracing::error!(error = %e, "audit: writing the log");
        }
        // Under load, let events gather for a moment instead of being woken for each one: a
        // sender only wakes this thread when it waits in `recv`, and two wake-ups per request
        // cost the request path more than the writing (the queue holds `buffer_size` events,
        // far more than arrive in this pause).
        std::thread::sleep(GATHER);
    }
}

/// The log file's write buffer: a batch of events in a few system calls.
const WRITE_BUFFER: usize = 64 * 1024;

/// How long the writer lets events gather after writing a batch.
const GATHER: std::time::Duration = std::time::Duration::from_millis(2);

/// A log file that rotates by size, as lumberjack does.
pub(crate) struct RotatingFile {
    path: PathBuf,
    max_bytes: u64,
    max_backups: usize,
    max_age_days: u64,
    file: Option<BufWriter<File>>,
    size: u64,
    /// The clock backup names are made from (a test's own).
    now: fn() -> OffsetDateTime,
}

impl RotatingFile {
    pub fn new(path: &Path, max_bytes: u64, max_backups: usize, max_age_days: u64) -> Self {
        Self {
            path: path.to_owned(),
            max_bytes,
            max_backups,
            max_age_days,
            file: None,
            size: 0,
            now: OffsetDateTime::now_utc,
        }
    }

    /// Write one line, rotating first if it would not fit. A line longer than the maximum
    /// size is refused.
    pub fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        let len = line.len() as u64;
        if len > self.max_bytes {
            return Err(std::io::Error::other(format!(
                "write length {len} exceeds maximum file size {}",
                self.max_bytes
            )));
        }
        if self.file.is_none() {
            self.open_existing_or_new(len)?;
        }
        if self.size + len > self.max_bytes {
            self.rotate()?;
        }
        let file = self.file.as_mut().expect("opened above");
        file.write_all(line)?;
        self.size += len;
        Ok(())
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        match self.file.as_mut() {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }

    /// Append to the file as it is, unless `next` more bytes would take it past the maximum.
    fn open_existing_or_new(&mut self, next: u64) -> std::io::Result<()> {
        let size = match std::fs::metadata(&self.path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return self.open_new(),
            Err(e) => return Err(e),
        };
        if size + next >= self.max_bytes {
            return self.rotate();
        }
        let file = OpenOptions::new().append(true).open(&self.path)?;
        self.file = Some(BufWriter::with_capacity(WRITE_BUFFER, file));
        self.size = size;
        Ok(())
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        if let Some(mut f) = self.file.take() {
            f.flush()?;
        }
        self.open_new()?;
        self.remove_old_backups();
        Ok(())
    }

    /// Move the current file aside (keeping its mode) and start an empty one.
    fn open_new(&mut self) -> std::io::Result<()> {
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        // Audit logs hold what users sent: readable by the owner only, unless the operator
        // gave the existing file another mode.
        let mut mode = 0o600;
        if let Ok(m) = std::fs::metadata(&self.path) {
            mode = m.permissions().mode() & 0o7777;
            std::fs::rename(&self.path, self.backup_name((self.now)()))?;
        }
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&self.path)?;
        self.file = Some(BufWriter::with_capacity(WRITE_BUFFER, file));
        self.size = 0;
        Ok(())
    }

    /// The name and extension around the timestamp: `audit` and `.log` for `audit.log`.
    fn prefix_and_ext(&self) -> (String, String) {
        let file_name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match file_name.rfind('.') {
            Some(dot) if dot > 0 => (file_name[..dot].to_owned(), file_name[dot..].to_owned()),
            _ => (file_name, String::new()),
        }
    }

    fn dir(&self) -> PathBuf {
        match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
            _ => PathBuf::from("."),
        }
    }

    fn backup_name(&self, t: OffsetDateTime) -> PathBuf {
        let (prefix, ext) = self.prefix_and_ext();
        self.dir()
            .join(format!("{prefix}-{}{ext}", format_backup_time(t)))
    }

    /// The backups of this log, newest first.
    fn backups(&self) -> Vec<(OffsetDateTime, PathBuf)> {
        let (prefix, ext) = self.prefix_and_ext();
        let prefix = format!("{prefix}-");
        let Ok(entries) = std::fs::read_dir(self.dir()) else {
            return Vec::new();
        };
        let mut found: Vec<_> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let stamp = name.strip_prefix(&prefix)?.strip_suffix(ext.as_str())?;
                Some((parse_backup_time(stamp)?, e.path()))
            })
            .collect();
        found.sort_by_key(|b| std::cmp::Reverse(b.0));
        found
    }

    /// Remove backups beyond the newest `max_backups` and those older than `max_age_days`.
    fn remove_old_backups(&self) {
        if self.max_backups == 0 && self.max_age_days == 0 {
            return;
        }
        let cutoff =
            (self.max_age_days > 0).then(|| (self.now)() - time::Duration::days(self.max_age_days as i64));
        for (i, (stamp, path)) in self.backups().into_iter().enumerate() {
            let too_many = self.max_backups > 0 && i >= self.max_backups;
            let too_old = cutoff.is_some_and(|cutoff| stamp < cutoff);
            if too_many || too_old {
                if let Err(e) = std::fs::remove_file(&path) {
                    tracing::warn!(path = %path.display(), error = %e, "audit: removing an old log");
                }
            }
        }
    }
}

/// `2006-01-02T15-04-05.000` in UTC.
fn format_backup_time(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}-{:02}-{:02}.{:03}",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

fn parse_backup_time(s: &str) -> Option<OffsetDateTime> {
    let b = s.as_bytes();
    if b.len() != 23
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b'-'
        || b[16] != b'-'
        || b[19] != b'.'
    {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<u32> {
        let part = &s[from..to];
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let date = time::Date::from_calendar_date(
        num(0, 4)? as i32,
        time::Month::try_from(num(5, 7)? as u8).ok()?,
        num(8, 10)? as u8,
    )
    .ok()?;
    let t = time::Time::from_hms_milli(
        num(11, 13)? as u8,
        num(14, 16)? as u8,
        num(17, 19)? as u8,
        num(20, 23)? as u16,
    )
    .ok()?;
    Some(time::PrimitiveDateTime::new(date, t).assume_utc())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::time::{Duration, Instant};

    use crate::audit::event::{Event, EventUser, ResponseStatus};
    use crate::audit::policy::{Level, Stage};

    fn event(id: &str) -> Event {
        let t = OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap();
        Event {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level: Level::Metadata,
            audit_id: id.into(),
            stage: Stage::ResponseComplete,
            request_uri: "/healthz".into(),
            verb: "get".into(),
            user: EventUser::default(),
            impersonated_user: None,
            source_ips: vec![],
            user_agent: String::new(),
            object_ref: None,
            response_status: Some(ResponseStatus::code(200)),
            request_object: None,
            response_object: None,
            request_received_timestamp: t,
            stage_timestamp: t,
            annotations: Default::default(),
        }
    }

    fn line(ev: &Event) -> Vec<u8> {
        let mut line = serde_json::to_vec(ev).unwrap();
        line.push(b'\n');
        line
    }

    fn audit_id(line: &[u8]) -> String {
        serde_json::from_slice::<serde_json::Value>(line).unwrap()["auditID"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    #[test]
    fn backup_times_round_trip() {
        let t = OffsetDateTime::from_unix_timestamp_nanos(1_795_334_400_123_000_000).unwrap();
        assert_eq!(format_backup_time(t), "2026-11-22T08-00-00.123");
        assert_eq!(parse_backup_time("2026-11-22T08-00-00.123"), Some(t));
        assert_eq!(parse_backup_time("2026-11-22T08:00:00.123"), None);
        assert_eq!(parse_backup_time("2026-13-22T08-00-00.123"), None);
        assert_eq!(parse_backup_time("x"), None);
    }

    // The test clock: a second later at every reading, from 2026-11-22T08:00:00Z.
    static CLOCK: AtomicI64 = AtomicI64::new(0);
    fn tick() -> OffsetDateTime {
        let s = CLOCK.fetch_add(1, Ordering::SeqCst);
        OffsetDateTime::from_unix_timestamp(1_795_334_400 + s).unwrap()
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn rotates_by_size_and_keeps_the_newest_backups() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let mut f = RotatingFile::new(&path, 25, 2, 0);
        f.now = tick;
        CLOCK.store(0, Ordering::SeqCst);
        // 10-byte lines: two fit in 25 bytes, the third rotates.
        for i in 0..7 {
            f.write_line(format!("line {i:04}\n").as_bytes()).unwrap();
        }
        f.flush().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "line 0006\n");
        // Three rotations happened (at 08:00:00, :01, :02); the oldest backup is gone.
        assert_eq!(
            names(dir.path()),
            [
                "audit-2026-11-22T08-00-01.000.log",
                "audit-2026-11-22T08-00-02.000.log",
                "audit.log"
            ]
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("audit-2026-11-22T08-00-02.000.log")).unwrap(),
            "line 0004\nline 0005\n"
        );
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // A line longer than the maximum is refused; the file stays as it was.
        assert!(f.write_line(&[b'x'; 26]).is_err());
        // Reopening appends to the current file while it has room.
        drop(f);
        let mut f = RotatingFile::new(&path, 25, 2, 0);
        f.write_line(b"line 0007\n").unwrap();
        f.flush().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "line 0006\nline 0007\n");
    }

    #[test]
    fn removes_backups_past_their_age_and_leaves_other_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit");
        for name in [
            "audit-2026-11-01T00-00-00.000",
            "audit-2026-11-21T00-00-00.000",
            "audit-notatime",
            "other-2026-11-01T00-00-00.000",
        ] {
            std::fs::write(dir.path().join(name), "old\n").unwrap();
        }
        let mut f = RotatingFile::new(&path, 1024, 0, 7);
        f.now = || OffsetDateTime::from_unix_timestamp(1_795_334_400).unwrap();
        f.write_line(b"first\n").unwrap();
        f.rotate().unwrap();
        assert_eq!(
            names(dir.path()),
            [
                "audit",
                "audit-2026-11-21T00-00-00.000",
                "audit-2026-11-22T08-00-00.000",
                "audit-notatime",
                "other-2026-11-01T00-00-00.000",
            ]
        );
    }

    /// The audit write never blocks a request: with the writer stuck (here: not running at
    /// all), a full queue drops new events at once and counts them.
    #[test]
    fn a_full_queue_drops_and_counts_instead_of_waiting() {
        let errors = Counter::default();
        let (backend, rx) = LogBackend::channel(2, errors.clone());
        let (done_tx, done_rx) = mpsc::channel();
        let started = Instant::now();
        std::thread::spawn(move || {
            let accepted: Vec<bool> = (0..5)
                .map(|i| {
                    let ev = event(&i.to_string());
                    backend.process(line(&ev), &ev.audit_id, ev.stage)
                })
                .collect();
            let _ = done_tx.send(accepted);
        });
        let accepted = done_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("sending to a full audit queue must not wait");
        assert_eq!(accepted, [true, true, false, false, false]);
        assert_eq!(errors.get(), 3);
        assert!(started.elapsed() < Duration::from_secs(1));
        // What was queued is still there for the writer.
        let queued: Vec<_> = rx.try_iter().map(|l| audit_id(&l)).collect();
        assert_eq!(queued, ["0", "1"]);
    }

    #[test]
    fn the_writer_writes_json_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let errors = Counter::default();
        let backend = LogBackend::start(&LogOptions::new(&path), errors.clone()).unwrap();
        for id in ["a", "b"] {
            let ev = event(id);
            assert!(backend.process(line(&ev), &ev.audit_id, ev.stage));
        }
        drop(backend);
        let deadline = Instant::now() + Duration::from_secs(10);
        let text = loop {
            let text = std::fs::read_to_string(&path).unwrap();
            if text.lines().count() == 2 || Instant::now() > deadline {
                break text;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let ids: Vec<String> = text.lines().map(|l| audit_id(l.as_bytes())).collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(errors.get(), 0);
    }
}
