//! Time-driven work, scheduled: a pod's worker asks to be woken at the instant something of
//! its pod falls due — its activeDeadlineSeconds, a container's restart back-off or an image
//! pull back-off ending, its next status resync — and one timer task hands the key back to the
//! work queue then (upstream's pod workers requeue a pod after `workerResyncInterval` or its
//! back-off the same way). Nothing looks at a pod only because time passed.
//!
//! One due instant per key, the earliest asked for: a later wake-up a sync asks for while an
//! earlier one is pending is already covered, since the earlier sync asks again.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

#[derive(Default)]
pub struct Wakeups {
    due: Mutex<HashMap<String, Instant>>,
    changed: Notify,
}

impl Wakeups {
    pub fn new() -> Self {
        Self::default()
    }

    /// Wake `key` at `at` (or at the earlier instant it is already due).
    pub fn at(&self, key: &str, at: Instant) {
        let mut due = self.due.lock().unwrap();
        match due.get_mut(key) {
            Some(d) if *d <= at => return,
            Some(d) => *d = at,
            None => {
                due.insert(key.to_string(), at);
            }
        }
        drop(due);
        self.changed.notify_one();
    }

    /// Wake `key` after `delay`.
    pub fn after(&self, key: &str, delay: Duration) {
        self.at(key, Instant::now() + delay);
    }

    /// Forget `key`'s wake-up (its pod is gone).
    pub fn cancel(&self, key: &str) {
        self.due.lock().unwrap().remove(key);
    }

    /// When `key` is due, if it is.
    pub fn due(&self, key: &str) -> Option<Instant> {
        self.due.lock().unwrap().get(key).copied()
    }

    /// The keys due at `now`, removed.
    fn take_due(&self, now: Instant) -> Vec<String> {
        let mut due = self.due.lock().unwrap();
        let keys: Vec<String> = due
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for k in &keys {
            due.remove(k);
        }
        keys
    }

    /// Hand each key to `wake` when it falls due, until `stop`.
    pub async fn run(&self, stop: CancellationToken, wake: impl Fn(String)) {
        loop {
            for key in self.take_due(Instant::now()) {
                wake(key);
            }
            let next = self.due.lock().unwrap().values().min().copied();
            let sleep = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.changed.notified() => {}
                _ = sleep => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn keeps_the_earliest_instant_per_key() {
        let w = Wakeups::new();
        let t0 = Instant::now();
        w.at("a", t0 + Duration::from_secs(10));
        w.at("a", t0 + Duration::from_secs(3));
        w.at("a", t0 + Duration::from_secs(7));
        assert_eq!(w.due("a"), Some(t0 + Duration::from_secs(3)));
        w.cancel("a");
        assert_eq!(w.due("a"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn wakes_each_key_at_its_due_instant() {
        let w = Arc::new(Wakeups::new());
        let woken = Arc::new(Mutex::new(Vec::<(String, u64)>::new()));
        let stop = CancellationToken::new();
        let t0 = Instant::now();
        let task = {
            let (w, woken, stop) = (w.clone(), woken.clone(), stop.clone());
            tokio::spawn(async move {
                w.run(stop, |k| {
                    woken.lock().unwrap().push((k, (Instant::now() - t0).as_secs()));
                })
                .await
            })
        };
        w.after("deadline", Duration::from_secs(3));
        w.after("resync", Duration::from_secs(10));
        tokio::time::sleep(Duration::from_secs(1)).await;
        // Asked for while the timer sleeps towards a later instant: it wakes sooner.
        w.after("backoff", Duration::from_secs(1));
        tokio::time::sleep(Duration::from_secs(20)).await;
        stop.cancel();
        task.await.unwrap();
        assert_eq!(
            *woken.lock().unwrap(),
            vec![
                ("backoff".to_string(), 2),
                ("deadline".to_string(), 3),
                ("resync".to_string(), 10)
            ]
        );
    }
}
