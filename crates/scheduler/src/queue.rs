//! The scheduling queue (upstream `internal/queue`): an active queue ordered by priority then
//! arrival, a back-off area for pods whose attempt failed (1 s doubling to 10 s), and an
//! unschedulable area for pods no node fits, moved back when the cluster changes (a node added
//! or updated, a pod deleted) or after five minutes.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::Notify;

pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
pub const MAX_UNSCHEDULABLE: Duration = Duration::from_secs(300);

#[derive(Clone, Copy, Debug, PartialEq)]
enum Where {
    Active,
    InFlight,
    Backoff(Instant),
    Unschedulable(Instant),
}

struct Entry {
    pod: Arc<Pod>,
    attempts: u32,
    seq: u64,
    at: Where,
    /// A cluster event arrived while the pod was being scheduled: retry it soon.
    moved_in_flight: bool,
}

#[derive(Default)]
struct State {
    entries: HashMap<String, Entry>,
    heap: BinaryHeap<(i32, Reverse<u64>, String)>,
    seq: u64,
    closed: bool,
}

/// How an attempt ended.
pub enum Outcome {
    Scheduled,
    Unschedulable,
    Error,
}

#[derive(Default)]
pub struct SchedulingQueue {
    state: Mutex<State>,
    notify: Notify,
}

fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

fn backoff(attempts: u32) -> Duration {
    let d = INITIAL_BACKOFF.saturating_mul(1u32.checked_shl(attempts.saturating_sub(1)).unwrap_or(u32::MAX));
    d.min(MAX_BACKOFF)
}

impl State {
    fn activate(&mut self, key: &str) {
        self.seq += 1;
        let seq = self.seq;
        if let Some(e) = self.entries.get_mut(key) {
            e.at = Where::Active;
            e.seq = seq;
            self.heap.push((priority(&e.pod), Reverse(seq), key.to_string()));
        }
    }
}

impl SchedulingQueue {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A pod to schedule appeared or changed.
    pub fn add_or_update(&self, key: &str, pod: Arc<Pod>) {
        let mut s = self.state.lock().unwrap();
        match s.entries.get_mut(key) {
            Some(e) => {
                let changed_spec = e.pod.spec != pod.spec || e.pod.metadata.labels != pod.metadata.labels;
                e.pod = pod;
                if changed_spec && matches!(e.at, Where::Unschedulable(_)) {
                    s.activate(key);
                }
            }
            None => {
                s.entries.insert(
                    key.to_string(),
                    Entry {
                        pod,
                        attempts: 0,
                        seq: 0,
                        at: Where::Active,
                        moved_in_flight: false,
                    },
                );
                s.activate(key);
            }
        }
        drop(s);
        self.notify.notify_one();
    }

    pub fn delete(&self, key: &str) {
        self.state.lock().unwrap().entries.remove(key);
    }

    /// Something changed that may let unschedulable pods fit: retry them (after their back-off).
    pub fn move_all_to_active(&self) {
        let mut s = self.state.lock().unwrap();
        let now = Instant::now();
        let keys: Vec<(String, Where, u32)> = s
            .entries
            .iter()
            .map(|(k, e)| (k.clone(), e.at, e.attempts))
            .collect();
        for (k, at, attempts) in keys {
            match at {
                Where::Unschedulable(since) => {
                    let until = since + backoff(attempts);
                    if until <= now {
                        s.activate(&k);
                    } else if let Some(e) = s.entries.get_mut(&k) {
                        e.at = Where::Backoff(until);
                    }
                }
                Where::InFlight => {
                    if let Some(e) = s.entries.get_mut(&k) {
                        e.moved_in_flight = true;
                    }
                }
                _ => {}
            }
        }
        drop(s);
        self.notify.notify_one();
    }

    /// The next pod to schedule, highest priority first; `None` once closed.
    pub async fn pop(&self) -> Option<(String, Arc<Pod>)> {
        loop {
            let notified = self.notify.notified();
            {
                let mut s = self.state.lock().unwrap();
                if s.closed {
                    return None;
                }
                let now = Instant::now();
                // Flush: back-off over, or unschedulable for too long.
                let due: Vec<String> = s
                    .entries
                    .iter()
                    .filter(|(_, e)| match e.at {
                        Where::Backoff(t) => t <= now,
                        Where::Unschedulable(t) => now.duration_since(t) >= MAX_UNSCHEDULABLE,
                        _ => false,
                    })
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in due {
                    s.activate(&k);
                }
                while let Some((_, Reverse(seq), key)) = s.heap.pop() {
                    let Some(e) = s.entries.get_mut(&key) else {
                        continue;
                    };
                    if e.seq != seq || e.at != Where::Active {
                        continue;
                    }
                    e.at = Where::InFlight;
                    e.moved_in_flight = false;
                    e.attempts += 1;
                    return Some((key, e.pod.clone()));
                }
            }
            // Wake for new pods, or to flush back-offs.
            let _ = tokio::time::timeout(Duration::from_millis(200), notified).await;
        }
    }

    /// Record how the attempt for `key` ended.
    pub fn done(&self, key: &str, outcome: Outcome) {
        let mut s = self.state.lock().unwrap();
        let Some(e) = s.entries.get_mut(key) else { return };
        if e.at != Where::InFlight {
            return;
        }
        let now = Instant::now();
        match outcome {
            Outcome::Scheduled => {
                s.entries.remove(key);
            }
            Outcome::Unschedulable if !e.moved_in_flight => e.at = Where::Unschedulable(now),
            Outcome::Unschedulable | Outcome::Error => e.at = Where::Backoff(now + backoff(e.attempts)),
        }
    }

    /// Pods waiting: (active, backing off, unschedulable); pods being scheduled count as active.
    pub fn counts(&self) -> (usize, usize, usize) {
        let s = self.state.lock().unwrap();
        let (mut active, mut backoff, mut unschedulable) = (0, 0, 0);
        for e in s.entries.values() {
            match e.at {
                Where::Active | Where::InFlight => active += 1,
                Where::Backoff(_) => backoff += 1,
                Where::Unschedulable(_) => unschedulable += 1,
            }
        }
        (active, backoff, unschedulable)
    }

    pub fn len(&self) -> usize {
        self.state.lock().unwrap().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn close(&self) {
        self.state.lock().unwrap().closed = true;
        self.notify.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, prio: i32) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name},
                "spec": {"priority": prio, "containers": []}
            }))
            .unwrap(),
        )
    }

    #[tokio::test]
    async fn higher_priority_first_then_arrival_order() {
        let q = SchedulingQueue::new();
        q.add_or_update("a", pod("a", 0));
        q.add_or_update("b", pod("b", 10));
        q.add_or_update("c", pod("c", 0));
        let order: Vec<String> = [q.pop().await, q.pop().await, q.pop().await]
            .into_iter()
            .map(|p| p.unwrap().0)
            .collect();
        assert_eq!(order, ["b", "a", "c"]);
    }

    #[tokio::test(start_paused = true)]
    async fn unschedulable_pods_wait_for_a_cluster_event() {
        let q = SchedulingQueue::new();
        q.add_or_update("a", pod("a", 0));
        let (k, _) = q.pop().await.unwrap();
        q.done(&k, Outcome::Unschedulable);
        // Nothing changed: not retried (within the five minutes).
        assert!(tokio::time::timeout(Duration::from_secs(30), q.pop())
            .await
            .is_err());
        // A node appeared: retried (its 1 s back-off is long over).
        q.move_all_to_active();
        assert_eq!(q.pop().await.unwrap().0, "a");
        q.done("a", Outcome::Scheduled);
        assert!(q.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn errors_back_off() {
        let q = SchedulingQueue::new();
        q.add_or_update("a", pod("a", 0));
        q.pop().await.unwrap();
        q.done("a", Outcome::Error);
        let start = tokio::time::Instant::now();
        q.pop().await.unwrap();
        assert!(
            start.elapsed() >= Duration::from_millis(900),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(3), Duration::from_secs(4));
        assert_eq!(backoff(10), MAX_BACKOFF);
    }
}
