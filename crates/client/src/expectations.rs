//! Expectations: what a controller has asked the API server to create or delete and not yet
//! seen come back through its informer. While a key has outstanding expectations its sync does
//! not create or delete again, so a lagging cache never causes duplicates (client-go's
//! `ControllerExpectations`, here tracking names rather than counts, like upstream's
//! `UIDTrackingControllerExpectations` does for deletions).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Upstream's `ExpectationsTimeout`: after this, a controller stops waiting and syncs anyway.
pub const TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Default)]
struct Entry {
    adds: HashSet<String>,
    dels: HashSet<String>,
    /// Names observed while a batch of requests was in flight, before their names were known.
    seen_adds: HashSet<String>,
    seen_dels: HashSet<String>,
    in_flight: bool,
    since: Option<Instant>,
}

#[derive(Default)]
pub struct Expectations {
    entries: Mutex<HashMap<String, Entry>>,
}

impl Expectations {
    /// Whether the controller may act for `key`: nothing outstanding, or waited too long.
    pub fn satisfied(&self, key: &str) -> bool {
        let map = self.entries.lock().unwrap();
        match map.get(key) {
            None => true,
            Some(e) => {
                (e.adds.is_empty() && e.dels.is_empty()) || e.since.is_some_and(|t| t.elapsed() > TIMEOUT)
            }
        }
    }

    /// Start a batch of requests for `key`: observations arriving before `record_*` are kept.
    pub fn begin(&self, key: &str) {
        let mut map = self.entries.lock().unwrap();
        let e = map.entry(key.to_string()).or_default();
        e.adds.clear();
        e.dels.clear();
        e.in_flight = true;
        e.since = Some(Instant::now());
    }

    /// The names created by the batch.
    pub fn record_adds(&self, key: &str, names: impl IntoIterator<Item = String>) {
        let mut map = self.entries.lock().unwrap();
        let e = map.entry(key.to_string()).or_default();
        for n in names {
            if !e.seen_adds.remove(&n) {
                e.adds.insert(n);
            }
        }
    }

    /// The names deleted by the batch.
    pub fn record_dels(&self, key: &str, names: impl IntoIterator<Item = String>) {
        let mut map = self.entries.lock().unwrap();
        let e = map.entry(key.to_string()).or_default();
        for n in names {
            if !e.seen_dels.remove(&n) {
                e.dels.insert(n);
            }
        }
    }

    /// The batch is over.
    pub fn end(&self, key: &str) {
        let mut map = self.entries.lock().unwrap();
        if let Some(e) = map.get_mut(key) {
            e.in_flight = false;
            e.seen_adds.clear();
            e.seen_dels.clear();
        }
    }

    /// The informer showed an object named `name` of `key` (created, or already existing).
    pub fn observe_add(&self, key: &str, name: &str) {
        let mut map = self.entries.lock().unwrap();
        if let Some(e) = map.get_mut(key) {
            if !e.adds.remove(name) && e.in_flight {
                e.seen_adds.insert(name.to_string());
            }
        }
    }

    /// The informer showed `name` of `key` deleted or being deleted.
    pub fn observe_del(&self, key: &str, name: &str) {
        let mut map = self.entries.lock().unwrap();
        if let Some(e) = map.get_mut(key) {
            if !e.dels.remove(name) && e.in_flight {
                e.seen_dels.insert(name.to_string());
            }
        }
    }

    /// The owner is gone: forget it.
    pub fn forget(&self, key: &str) {
        self.entries.lock().unwrap().remove(key);
    }

    /// Outstanding (creates, deletes) for `key`.
    pub fn pending(&self, key: &str) -> (usize, usize) {
        let map = self.entries.lock().unwrap();
        map.get(key).map_or((0, 0), |e| (e.adds.len(), e.dels.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsatisfied_until_every_create_is_observed() {
        let x = Expectations::default();
        assert!(x.satisfied("ns/rs"));
        x.begin("ns/rs");
        x.record_adds("ns/rs", ["a".to_string(), "b".to_string()]);
        x.end("ns/rs");
        assert!(!x.satisfied("ns/rs"));
        x.observe_add("ns/rs", "a");
        assert_eq!(x.pending("ns/rs"), (1, 0));
        assert!(!x.satisfied("ns/rs"));
        x.observe_add("ns/rs", "b");
        assert!(x.satisfied("ns/rs"));
    }

    #[test]
    fn observation_racing_ahead_of_the_response_counts() {
        let x = Expectations::default();
        x.begin("k");
        // The watch event arrives before the create call returned the generated name.
        x.observe_add("k", "web-abcde");
        x.record_adds("k", ["web-abcde".to_string()]);
        x.end("k");
        assert!(x.satisfied("k"));
    }

    #[test]
    fn deletions_are_tracked_by_name() {
        let x = Expectations::default();
        x.begin("k");
        x.record_dels("k", ["p1".to_string()]);
        x.end("k");
        x.observe_del("k", "other");
        assert!(!x.satisfied("k"));
        x.observe_del("k", "p1");
        assert!(x.satisfied("k"));
        // Observations outside a batch do not accumulate.
        x.observe_add("k", "stray");
        x.begin("k");
        x.record_adds("k", ["stray".to_string()]);
        assert!(!x.satisfied("k"));
    }
}
