//! Entry points for the fuzz targets in `fuzz/` (cargo-fuzz): the decoders of this crate on
//! raw bytes. The oracle is that none panics and that what each promises of its results
//! holds (asserted here). Not an API.

use std::collections::BTreeMap;

use crate::cron::Schedule;
use crate::quantity::{parse_milli, parse_value, Quantity};
use crate::selector::{from_label_selector, parse_field_selector, parse_label_selector};

/// Label and field selectors as query parameters carry them, and label selectors as objects
/// carry them (`matchLabels`/`matchExpressions`).
pub fn selectors(data: &[u8]) {
    let labels: BTreeMap<String, String> = [("app", "web"), ("tier", "1"), ("a.b/c", "")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(s) = parse_label_selector(text) {
            let _ = s.matches(&labels);
            let _ = (s.is_empty(), s.selects_all(), s.selects_nothing());
        }
        if let Ok(s) = parse_field_selector(text) {
            let _ = s.matches(&labels);
        }
    }
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) {
        if let Ok(s) = from_label_selector(&v) {
            let _ = s.matches(&labels);
        }
    }
}

/// Resource quantities (`500m`, `1.5Gi`, `1e3`): parsed, printed and parsed back to the same
/// value, and the arithmetic quotas and the scheduler do on them.
pub fn quantity(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = parse_milli(text);
    let _ = parse_value(text);
    if let Ok(q) = Quantity::parse(text) {
        let printed = q.to_string();
        let again = Quantity::parse(&printed)
            .unwrap_or_else(|e| panic!("{text:?} printed as {printed:?}, which does not parse: {e}"));
        assert!(
            again == q,
            "{text:?} printed as {printed:?}, which reads back as {again}"
        );
        let _ = (
            q.add(&again),
            q.sub(&again),
            q.neg(),
            q.value(),
            q.sign(),
            q.is_zero(),
        );
        let _ = q.round_up_milli();
    }
}

/// CronJob schedules (the `@` descriptors too) with their next firing, and Go durations
/// (printed and parsed back to the same).
pub fn schedules(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(s) = Schedule::parse(text) {
        // 2026-11-29T00:00:00Z: the next firing, if any, is later.
        let after = jiff::Timestamp::from_second(1_795_910_400).expect("a valid time");
        if let Some(next) = s.next(after, &jiff::tz::TimeZone::UTC) {
            assert!(next > after, "{text:?} fires at {next}, not after {after}");
        }
    }
    if let Ok(d) = crate::duration::parse(text) {
        let printed = crate::duration::format(d);
        assert_eq!(
            crate::duration::parse(&printed).ok(),
            Some(d),
            "{text:?} printed as {printed:?}"
        );
    }
}

/// SPDY/3.1 frames as the container runtime's streaming server sends them to the kubelet's
/// exec, attach and port-forward client: the stream is cut into frames until one is partial.
pub fn spdy(data: &[u8]) {
    let mut rest = data;
    while let Ok(Some((_frame, used))) = crate::spdy::parse(rest) {
        assert!(used >= 8 && used <= rest.len(), "a frame takes what it has");
        rest = &rest[used..];
    }
}

/// Every file of `fuzz/corpus/<target>` and `fuzz/regressions/<target>` (the workspace's), for
/// the crates' replay tests; how many there were.
pub fn replay(target: &str, run: fn(&[u8])) -> usize {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut n = 0;
    for dir in [
        root.join("corpus").join(target),
        root.join("regressions").join(target),
    ] {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let bytes = std::fs::read(e.path()).expect("reading a corpus file");
            run(&bytes);
            n += 1;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seed corpora and every input the fuzzers once crashed on go through again.
    #[test]
    fn the_corpora_replay_without_a_panic() {
        for (target, run) in [
            ("selectors", selectors as fn(&[u8])),
            ("quantity", quantity),
            ("schedules", schedules),
            ("spdy", spdy),
        ] {
            assert!(replay(target, run) > 0, "the {target} corpus is empty");
        }
    }
}
