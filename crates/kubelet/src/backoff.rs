//! Restart and image-pull back-off (upstream `flowcontrol.Backoff` as the kubelet uses it):
//! 10 s doubling to 5 minutes per key; an entry not updated for twice the maximum is forgotten,
//! and a container that ran for 10 minutes before it exited starts over at 10 s.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

pub const INITIAL: Duration = Duration::from_secs(10);
pub const MAX: Duration = Duration::from_secs(300);
/// A container that ran this long before exiting is restarted without back-off history.
pub const RESET_AFTER_RUN: Duration = Duration::from_secs(600);

#[derive(Clone, Copy, Debug)]
struct Entry {
    delay: Duration,
    last_update: SystemTime,
}

#[derive(Clone, Debug, Default)]
pub struct Backoff {
    entries: HashMap<String, Entry>,
}

fn since(later: SystemTime, earlier: SystemTime) -> Duration {
    later.duration_since(earlier).unwrap_or_default()
}

impl Backoff {
    fn live(&self, key: &str, at: SystemTime) -> Option<Entry> {
        self.entries
            .get(key)
            .copied()
            .filter(|e| since(at, e.last_update) <= MAX * 2)
    }

    /// The current delay of `key`, if it has one.
    pub fn delay(&self, key: &str) -> Option<Duration> {
        self.entries.get(key).map(|e| e.delay)
    }

    /// Whether something that happened at `event` (a container's exit) is still backing off at
    /// `now`: the delay, if so (upstream `IsInBackOffSince`).
    pub fn in_backoff_since(&self, key: &str, event: SystemTime, now: SystemTime) -> Option<Duration> {
        let e = self.live(key, event)?;
        (since(now, event) < e.delay).then_some(e.delay)
    }

    /// Whether `key` was updated less than its delay before `now` (upstream
    /// `IsInBackOffSinceUpdate`, for image pulls).
    pub fn in_backoff_since_update(&self, key: &str, now: SystemTime) -> Option<Duration> {
        let e = self.live(key, now)?;
        (since(now, e.last_update) < e.delay).then_some(e.delay)
    }

    /// How long `key` still backs off from its last update at `now` (when its worker is due
    /// to try again).
    pub fn remaining_since_update(&self, key: &str, now: SystemTime) -> Option<Duration> {
        let e = self.live(key, now)?;
        e.delay
            .checked_sub(since(now, e.last_update))
            .filter(|d| !d.is_zero())
    }

    /// Move `key` to its next delay, as of `event` (upstream `Next`).
    pub fn next(&mut self, key: &str, event: SystemTime) -> Duration {
        let delay = match self.live(key, event) {
            Some(e) => (e.delay * 2).min(MAX),
            None => INITIAL,
        };
        self.entries.insert(
            key.to_string(),
            Entry {
                delay,
                last_update: event,
            },
        );
        delay
    }

    pub fn reset(&mut self, key: &str) {
        self.entries.remove(key);
    }

    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.entries.retain(|k, _| keep(k));
    }
}

/// Whether a container that exited at `finished` may restart at `now`, recording the restart
/// in `b` when it may; otherwise the delay it waits for (upstream `doBackOff`).
pub fn restart_delay(
    b: &mut Backoff,
    key: &str,
    started: SystemTime,
    finished: SystemTime,
    now: SystemTime,
) -> Option<Duration> {
    if since(finished, started) >= RESET_AFTER_RUN {
        b.reset(key);
    }
    if let Some(d) = b.in_backoff_since(key, finished, now) {
        return Some(d);
    }
    b.next(key, finished);
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
    }

    #[test]
    fn restarts_back_off_10s_doubling_to_5_minutes() {
        let mut b = Backoff::default();
        let k = "uid/app";
        // First exit: restart at once; the next exit then waits 10 s from when it happened.
        assert_eq!(restart_delay(&mut b, k, t(0), t(1), t(1)), None);
        assert_eq!(b.delay(k), Some(INITIAL));
        assert_eq!(restart_delay(&mut b, k, t(2), t(3), t(3)), Some(INITIAL));
        assert_eq!(restart_delay(&mut b, k, t(2), t(3), t(12)), Some(INITIAL));
        assert_eq!(restart_delay(&mut b, k, t(2), t(3), t(13)), None);
        assert_eq!(b.delay(k), Some(Duration::from_secs(20)));
        let mut at = 20;
        let mut delays = vec![];
        for _ in 0..6 {
            let exit = t(at);
            let d = restart_delay(&mut b, k, exit, exit, exit).unwrap();
            delays.push(d.as_secs());
            assert_eq!(restart_delay(&mut b, k, exit, exit, exit + d), None);
            at += d.as_secs() + 1;
        }
        assert_eq!(delays, [20, 40, 80, 160, 300, 300]);
    }

    #[test]
    fn a_long_run_or_a_long_quiet_resets_the_back_off() {
        let mut b = Backoff::default();
        let k = "uid/app";
        for i in 0..5 {
            let _ = restart_delay(&mut b, k, t(i * 100), t(i * 100), t(i * 100 + 99));
        }
        assert_eq!(b.delay(k), Some(Duration::from_secs(160)));
        // Ran 10 minutes before exiting: back to restarting at once, then 10 s.
        assert_eq!(restart_delay(&mut b, k, t(400), t(1000), t(1000)), None);
        assert_eq!(b.delay(k), Some(INITIAL));
        // Not updated for twice the maximum: forgotten.
        b.next(k, t(20_000));
        b.next(k, t(20_001));
        assert_eq!(b.delay(k), Some(Duration::from_secs(20)));
        assert_eq!(restart_delay(&mut b, k, t(20_700), t(20_702), t(20_702)), None);
        assert_eq!(b.delay(k), Some(INITIAL));
    }

    #[test]
    fn pulls_back_off_from_their_last_attempt() {
        let mut b = Backoff::default();
        assert_eq!(b.in_backoff_since_update("p", t(0)), None);
        b.next("p", t(0));
        assert_eq!(b.in_backoff_since_update("p", t(9)), Some(INITIAL));
        assert_eq!(b.in_backoff_since_update("p", t(10)), None);
        b.next("p", t(10));
        assert_eq!(
            b.in_backoff_since_update("p", t(29)),
            Some(Duration::from_secs(20))
        );
    }
}
