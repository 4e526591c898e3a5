//! A rate-limited work queue as client-go's `workqueue` has it: keys are de-duplicated while
//! they wait, a key being processed is never handed to a second worker (a re-add while it is
//! processed runs it again afterwards), and failures back off exponentially per key.
//!
//! Hand-written: kube-rs keeps its scheduler private to its `Controller`, which we do not use
//! (see `informer.rs`).

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

const BASE_DELAY: Duration = Duration::from_millis(5);
const MAX_DELAY: Duration = Duration::from_secs(1000);
const CONFLICT_DELAY: Duration = Duration::from_millis(20);

#[derive(Default)]
struct State {
    queue: VecDeque<String>,
    dirty: HashSet<String>,
    processing: HashSet<String>,
    failures: HashMap<String, u32>,
    shut_down: bool,
}

pub struct WorkQueue {
    name: &'static str,
    state: Mutex<State>,
    notify: Notify,
}

impl WorkQueue {
    pub fn new(name: &'static str) -> Arc<Self> {
        Arc::new(Self {
            name,
            state: Mutex::new(State::default()),
            notify: Notify::new(),
        })
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    pub fn add(&self, key: impl Into<String>) {
        let key = key.into();
        let mut s = self.state.lock().unwrap();
        if s.shut_down || s.dirty.contains(&key) {
            return;
        }
        s.dirty.insert(key.clone());
        if !s.processing.contains(&key) {
            s.queue.push_back(key);
            drop(s);
            self.notify.notify_one();
        }
    }

    /// Add the key once `delay` has passed.
    pub fn add_after(self: &Arc<Self>, key: impl Into<String>, delay: Duration) {
        let key = key.into();
        if delay.is_zero() {
            return self.add(key);
        }
        let q = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            q.add(key);
        });
    }

    /// Add the key after its back-off: 5 ms doubling per consecutive failure, capped at 1000 s.
    pub fn add_rate_limited(self: &Arc<Self>, key: &str) {
        let delay = {
            let mut s = self.state.lock().unwrap();
            let n = s.failures.entry(key.to_string()).or_insert(0);
            let d = BASE_DELAY.saturating_mul(1u32.checked_shl(*n).unwrap_or(u32::MAX));
            *n += 1;
            d.min(MAX_DELAY)
        };
        self.add_after(key.to_string(), delay);
    }

    /// Forget the key's failures (after a successful sync).
    pub fn forget(&self, key: &str) {
        self.state.lock().unwrap().failures.remove(key);
    }

    pub fn failures(&self, key: &str) -> u32 {
        self.state.lock().unwrap().failures.get(key).copied().unwrap_or(0)
    }

    /// The next key to process; `None` once shut down.
    pub async fn get(&self) -> Option<String> {
        loop {
            let notified = self.notify.notified();
            {
                let mut s = self.state.lock().unwrap();
                if let Some(key) = s.queue.pop_front() {
                    s.dirty.remove(&key);
                    s.processing.insert(key.clone());
                    if !s.queue.is_empty() {
                        self.notify.notify_one();
                    }
                    return Some(key);
                }
                if s.shut_down {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// Mark a key from `get` as processed.
    pub fn done(&self, key: &str) {
        let mut s = self.state.lock().unwrap();
        s.processing.remove(key);
        if s.dirty.contains(key) {
            s.queue.push_back(key.to_string());
            drop(s);
            self.notify.notify_one();
        }
    }

    pub fn len(&self) -> usize {
        self.state.lock().unwrap().queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn shut_down(&self) {
        self.state.lock().unwrap().shut_down = true;
        self.notify.notify_waiters();
    }
}

/// An error a sync returns: shown in the log, and a conflict (the cache is behind a write) is
/// retried at once instead of backing off.
pub trait SyncError: std::fmt::Display {
    fn is_conflict(&self) -> bool {
        false
    }
}

impl SyncError for kube::Error {
    fn is_conflict(&self) -> bool {
        crate::is_conflict(self)
    }
}

impl SyncError for String {}

/// What a sync asks of the queue when it succeeds: `Some(d)` runs the key again after `d`.
pub type SyncResult<E> = Result<Option<Duration>, E>;

/// Run `workers` workers taking keys from `queue` and calling `sync` on each, until `stop`.
/// A failed sync is retried with back-off; `Ok(Some(d))` runs the key again after `d`.
pub async fn run_workers<F, Fut, E>(queue: Arc<WorkQueue>, workers: usize, stop: CancellationToken, sync: F)
where
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = SyncResult<E>> + Send,
    E: SyncError + Send,
{
    let sync = Arc::new(sync);
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let queue = queue.clone();
        let sync = sync.clone();
        tasks.push(tokio::spawn(async move {
            while let Some(key) = queue.get().await {
                tracing::debug!(controller = queue.name(), %key, "sync");
                match sync(key.clone()).await {
                    Ok(again) => {
                        queue.forget(&key);
                        if let Some(d) = again {
                            queue.add_after(key.clone(), d);
                        }
                    }
                    Err(e) if e.is_conflict() => {
                        // The cache is behind a write: retry shortly, without the growing back-off
                        // of real failures (it resolves as soon as the watch catches up).
                        tracing::debug!(controller = queue.name(), %key, "conflict; retrying");
                        queue.add_after(key.clone(), CONFLICT_DELAY);
                    }
                    Err(e) => {
                        tracing::info!(controller = queue.name(), %key, error = %e, "sync failed; retrying");
                        queue.add_rate_limited(&key);
                    }
                }
                queue.done(&key);
            }
        }));
    }
    stop.cancelled().await;
    queue.shut_down();
    for t in tasks {
        t.abort();
    }
}

/// Wait until every future in `synced` (informers' [`crate::informer::Informer::synced`]) has
/// finished, or `stop`; false when stopped first.
pub async fn wait_for_sync(synced: Vec<BoxFuture<'static, ()>>, stop: &CancellationToken) -> bool {
    tokio::select! {
        _ = futures::future::join_all(synced) => true,
        _ = stop.cancelled() => false,
    }
}

/// The skeleton every controller runs (client-go's `WaitForCacheSync` then `N x wait.Until(
/// worker)`): wait for the informers in `synced` to list once, then run `workers` workers over
/// `queue` calling `sync`, until `stop`. Returns at once if stopped before the caches synced.
pub async fn run_controller<F, Fut, E>(
    queue: Arc<WorkQueue>,
    synced: Vec<BoxFuture<'static, ()>>,
    workers: usize,
    stop: CancellationToken,
    sync: F,
) where
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = SyncResult<E>> + Send,
    E: SyncError + Send,
{
    if !wait_for_sync(synced, &stop).await {
        return;
    }
    tracing::debug!(controller = queue.name(), "caches synced");
    run_workers(queue, workers, stop, sync).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn deduplicates_waiting_keys() {
        let q = WorkQueue::new("t");
        q.add("a");
        q.add("b");
        q.add("a");
        assert_eq!(q.len(), 2);
        assert_eq!(q.get().await.as_deref(), Some("a"));
        assert_eq!(q.get().await.as_deref(), Some("b"));
        assert!(q.is_empty());
    }

    #[tokio::test]
    async fn key_in_processing_is_not_handed_out_twice() {
        let q = WorkQueue::new("t");
        q.add("a");
        let k = q.get().await.unwrap();
        q.add("a");
        // Still processing: not in the queue.
        assert!(q.is_empty());
        q.done(&k);
        // Re-added while processing: queued again after done.
        assert_eq!(q.len(), 1);
        assert_eq!(q.get().await.as_deref(), Some("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn failures_back_off_exponentially() {
        let q = WorkQueue::new("t");
        for expected_ms in [5u64, 10, 20, 40] {
            let start = tokio::time::Instant::now();
            q.add_rate_limited("k");
            let k = q.get().await.unwrap();
            q.done(&k);
            let waited = start.elapsed();
            assert!(
                waited >= Duration::from_millis(expected_ms),
                "{waited:?} < {expected_ms}ms"
            );
            assert!(
                waited < Duration::from_millis(expected_ms * 2),
                "{waited:?} >= 2x{expected_ms}ms"
            );
        }
        assert_eq!(q.failures("k"), 4);
        q.forget("k");
        assert_eq!(q.failures("k"), 0);
    }

    #[tokio::test]
    async fn shut_down_releases_waiting_workers() {
        let q = WorkQueue::new("t");
        let q2 = q.clone();
        let waiter = tokio::spawn(async move { q2.get().await });
        tokio::task::yield_now().await;
        q.shut_down();
        assert_eq!(waiter.await.unwrap(), None);
    }

    #[derive(Debug)]
    struct TestError(bool);
    impl std::fmt::Display for TestError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "conflict: {}", self.0)
        }
    }
    impl SyncError for TestError {
        fn is_conflict(&self) -> bool {
            self.0
        }
    }

    #[tokio::test(start_paused = true)]
    async fn runner_waits_for_sync_and_retries_failures_with_the_callers_error_type() {
        let q = WorkQueue::new("t");
        let (synced_tx, synced_rx) = tokio::sync::oneshot::channel::<()>();
        let calls = Arc::new(Mutex::new(Vec::<String>::new()));
        let stop = CancellationToken::new();
        let c = calls.clone();
        let runner = tokio::spawn(run_controller(
            q.clone(),
            vec![Box::pin(async move {
                let _ = synced_rx.await;
            })],
            2,
            stop.clone(),
            move |key| {
                let c = c.clone();
                async move {
                    let n = {
                        let mut c = c.lock().unwrap();
                        c.push(key.clone());
                        c.len()
                    };
                    // First a conflict, then a failure, then success.
                    match n {
                        1 => Err(TestError(true)),
                        2 => Err(TestError(false)),
                        _ => Ok(None),
                    }
                }
            },
        ));
        q.add("a");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            calls.lock().unwrap().is_empty(),
            "no sync before the caches synced"
        );
        synced_tx.send(()).unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(*calls.lock().unwrap(), vec!["a", "a", "a"]);
        // The conflict did not count as a failure; the real failure was forgotten on success.
        assert_eq!(q.failures("a"), 0);
        stop.cancel();
        runner.await.unwrap();
    }

    #[tokio::test]
    async fn runner_returns_when_stopped_before_sync() {
        let q = WorkQueue::new("t");
        let stop = CancellationToken::new();
        stop.cancel();
        run_controller(
            q,
            vec![Box::pin(futures::future::pending::<()>())],
            1,
            stop,
            |_key| async { Ok::<_, TestError>(None) },
        )
        .await;
    }
}
