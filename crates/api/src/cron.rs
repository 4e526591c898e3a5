//! CronJob schedules as upstream reads them (`robfig/cron/v3`'s `ParseStandard`): five fields
//! (minute, hour, day of month, month, day of week) with lists, ranges, steps, `*`/`?` and
//! month and weekday names, or a descriptor (`@hourly`, `@daily`, …, `@every 90m`).
//!
//! Written here rather than taken from a crate: the cron crates (`cron`, `croner`) read other
//! dialects (a seconds field, `L`/`W`/`#`, different day-of-month/day-of-week rules) and word
//! their errors otherwise, while a CronJob must accept exactly what upstream accepts, fire when
//! upstream fires (the day fields OR-ed unless one is `*`), and refuse with upstream's message.

use std::time::Duration;

use jiff::{civil, tz::TimeZone, Timestamp, ToSpan, Zoned};

/// Set in a field's bits when it was written as `*` or `?` (robfig's `starBit`).
const STAR: u64 = 1 << 63;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Schedule {
    Fields {
        minute: u64,
        hour: u64,
        dom: u64,
        month: u64,
        dow: u64,
    },
    /// `@every <duration>`: fixed intervals (rounded to whole seconds, at least one).
    Every(Duration),
}

struct Bounds {
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MINUTE: Bounds = Bounds {
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: Bounds = Bounds {
    min: 0,
    max: 23,
    names: &[],
};
const DOM: Bounds = Bounds {
    min: 1,
    max: 31,
    names: &[],
};
const MONTH: Bounds = Bounds {
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
const DOW: Bounds = Bounds {
    min: 0,
    max: 6,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

fn bits(min: u32, max: u32, step: u32) -> u64 {
    if step == 1 {
        return (!(u64::MAX << (max + 1))) & (u64::MAX << min);
    }
    (min..=max).step_by(step as usize).fold(0, |b, i| b | 1 << i)
}

fn parse_int(expr: &str) -> Result<u32, String> {
    let n: i64 = expr.parse().map_err(|e: std::num::ParseIntError| {
        format!(
            "failed to parse int from {expr}: strconv.Atoi: parsing {expr:?}: {}",
            go_parse_error(&e)
        )
    })?;
    if n < 0 {
        return Err(format!("negative number ({n}) not allowed: {expr}"));
    }
    Ok(n as u32)
}

fn go_parse_error(e: &std::num::ParseIntError) -> &'static str {
    match e.kind() {
        std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => "value out of range",
        _ => "invalid syntax",
    }
}

/// A number or one of the field's names.
fn parse_value(expr: &str, b: &Bounds) -> Result<u32, String> {
    let lower = expr.to_ascii_lowercase();
    if let Some(i) = b.names.iter().position(|n| *n == lower) {
        return Ok(i as u32 + b.min);
    }
    parse_int(expr)
}

/// One comma-separated part of a field: `*`, `?`, `n`, `a-b`, each with an optional `/step`.
fn parse_range(expr: &str, b: &Bounds) -> Result<u64, String> {
    let (range, step) = match expr.split('/').collect::<Vec<_>>()[..] {
        [r] => (r, None),
        [r, s] => (r, Some(s)),
        _ => return Err(format!("too many slashes: {expr}")),
    };
    let low_high: Vec<&str> = range.split('-').collect();
    let (start, mut end, mut extra);
    if low_high[0] == "*" || low_high[0] == "?" {
        (start, end, extra) = (b.min, b.max, STAR);
    } else {
        start = parse_value(low_high[0], b)?;
        extra = 0;
        end = match low_high[..] {
            [_] => start,
            [_, e] => parse_value(e, b)?,
            _ => return Err(format!("too many hyphens: {expr}")),
        };
    }
    let step = match step {
        None => 1,
        Some(s) => {
            let step = parse_int(s)?;
            // "n/step" means "n-max/step".
            if low_high.len() == 1 && low_high[0] != "*" && low_high[0] != "?" {
                end = b.max;
            }
            if step > 1 {
                extra = 0;
            }
            step
        }
    };
    if start < b.min {
        return Err(format!(
            "beginning of range ({start}) below minimum ({}): {expr}",
            b.min
        ));
    }
    if end > b.max {
        return Err(format!("end of range ({end}) above maximum ({}): {expr}", b.max));
    }
    if start > end {
        return Err(format!(
            "beginning of range ({start}) beyond end of range ({end}): {expr}"
        ));
    }
    if step == 0 {
        return Err(format!("step of range should be a positive number: {expr}"));
    }
    Ok(bits(start, end, step) | extra)
}

fn parse_field(field: &str, b: &Bounds) -> Result<u64, String> {
    field
        .split(',')
        .try_fold(0, |acc, part| Ok(acc | parse_range(part, b)?))
}

impl Schedule {
    /// Parse a schedule as upstream's `cron.ParseStandard` does, with its error messages.
    pub fn parse(spec: &str) -> Result<Schedule, String> {
        let spec = spec.trim();
        if spec.is_empty() {
            return Err("empty spec string".into());
        }
        let all = |b: &Bounds| bits(b.min, b.max, 1) | STAR;
        if let Some(descriptor) = spec.strip_prefix('@') {
            let fields = |minute, hour, dom, month, dow| Schedule::Fields {
                minute,
                hour,
                dom,
                month,
                dow,
            };
            let one = |i: u32| 1u64 << i;
            return Ok(match descriptor {
                "yearly" | "annually" => fields(one(0), one(0), one(1), one(1), all(&DOW)),
                "monthly" => fields(one(0), one(0), one(1), all(&MONTH), all(&DOW)),
                "weekly" => fields(one(0), one(0), all(&DOM), all(&MONTH), one(0)),
                "daily" | "midnight" => fields(one(0), one(0), all(&DOM), all(&MONTH), all(&DOW)),
                "hourly" => fields(one(0), all(&HOUR), all(&DOM), all(&MONTH), all(&DOW)),
                d => match d.strip_prefix("every ") {
                    Some(every) => {
                        let d = crate::duration::parse(every)
                            .map_err(|e| format!("failed to parse duration {spec}: {e}"))?;
                        Schedule::Every(Duration::from_secs(d.as_secs().max(1)))
                    }
                    None => return Err(format!("unrecognized descriptor: {spec}")),
                },
            });
        }
        let fields: Vec<&str> = spec.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(format!(
                "expected exactly 5 fields, found {}: [{}]",
                fields.len(),
                fields.join(" ")
            ));
        }
        Ok(Schedule::Fields {
            minute: parse_field(fields[0], &MINUTE)?,
            hour: parse_field(fields[1], &HOUR)?,
            dom: parse_field(fields[2], &DOM)?,
            month: parse_field(fields[3], &MONTH)?,
            dow: parse_field(fields[4], &DOW)?,
        })
    }

    /// The first time this schedule fires strictly after `after`, in `tz`; `None` if it never
    /// does within five years (February 30th).
    pub fn next(&self, after: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        let (minute, hour, dom, month, dow) = match *self {
            Schedule::Every(d) => {
                let secs = (after.as_second() / d.as_secs() as i64 + 1) * d.as_secs() as i64;
                return Timestamp::from_second(secs).ok();
            }
            Schedule::Fields {
                minute,
                hour,
                dom,
                month,
                dow,
            } => (minute, hour, dom, month, dow),
        };
        let has = |set: u64, i: i8| set & (1u64 << i as u32) != 0;
        let day_matches = |d: civil::Date| {
            let dom_match = has(dom, d.day());
            let dow_match = has(dow, d.weekday().to_sunday_zero_offset());
            if dom & STAR != 0 || dow & STAR != 0 {
                dom_match && dow_match
            } else {
                dom_match || dow_match
            }
        };
        let start = after.to_zoned(tz.clone());
        let mut t: civil::DateTime = start
            .datetime()
            .with()
            .second(0)
            .subsec_nanosecond(0)
            .build()
            .ok()?;
        t = t.checked_add(1.minute()).ok()?;
        let limit = t.checked_add(5.years()).ok()?;
        while t < limit {
            if !has(month, t.month()) {
                t = t
                    .first_of_month()
                    .checked_add(1.month())
                    .ok()?
                    .with()
                    .hour(0)
                    .minute(0)
                    .build()
                    .ok()?;
                continue;
            }
            if !day_matches(t.date()) {
                t = t
                    .date()
                    .checked_add(1.day())
                    .ok()?
                    .to_datetime(civil::Time::midnight());
                continue;
            }
            if !has(hour, t.hour()) {
                t = t.with().minute(0).build().ok()?.checked_add(1.hour()).ok()?;
                continue;
            }
            if !has(minute, t.minute()) {
                t = t.checked_add(1.minute()).ok()?;
                continue;
            }
            // A local time a DST gap skips fires at the instant it maps to, as Go's time.Date.
            let z: Zoned = tz.to_ambiguous_zoned(t).compatible().ok()?;
            if z.timestamp() > after {
                return Some(z.timestamp());
            }
            t = t.checked_add(1.minute()).ok()?;
        }
        None
    }
}

/// Whether `name` is a time zone a CronJob may name (upstream refuses "" and "Local").
pub fn known_time_zone(name: &str) -> bool {
    !name.is_empty() && name != "Local" && TimeZone::get(name).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn next(spec: &str, after: &str) -> String {
        Schedule::parse(spec)
            .unwrap()
            .next(ts(after), &TimeZone::UTC)
            .unwrap()
            .to_string()
    }

    #[test]
    fn standard_fields_fire_when_upstream_does() {
        assert_eq!(next("* * * * *", "2026-01-01T00:00:30Z"), "2026-01-01T00:01:00Z");
        assert_eq!(
            next("*/15 * * * *", "2026-01-01T00:16:00Z"),
            "2026-01-01T00:30:00Z"
        );
        assert_eq!(next("5 4 * * *", "2026-01-01T04:05:00Z"), "2026-01-02T04:05:00Z");
        assert_eq!(
            next("0 0 1 jan *", "2026-03-01T00:00:00Z"),
            "2027-01-01T00:00:00Z"
        );
        assert_eq!(
            next("30 9 * * MON-FRI", "2026-11-27T10:00:00Z"),
            "2026-11-30T09:30:00Z"
        );
        // Both day fields restricted: either one fires (1st of the month or a Sunday).
        assert_eq!(
            next("0 0 1 * sun", "2026-11-25T00:00:00Z"),
            "2026-11-29T00:00:00Z"
        );
        assert_eq!(
            next("0 0 1 * sun", "2026-11-29T00:00:00Z"),
            "2026-12-01T00:00:00Z"
        );
        // One of them `*`: both must hold.
        assert_eq!(
            next("0 0 * * sun", "2026-11-25T00:00:00Z"),
            "2026-11-29T00:00:00Z"
        );
        assert_eq!(next("@hourly", "2026-01-01T00:00:00Z"), "2026-01-01T01:00:00Z");
        assert_eq!(next("@weekly", "2026-11-25T00:00:00Z"), "2026-11-29T00:00:00Z");
        assert_eq!(next("@every 90m", "2026-01-01T00:00:00Z"), "2026-01-01T01:30:00Z");
        assert_eq!(
            next("0 12 29 2 *", "2026-01-01T00:00:00Z"),
            "2028-02-29T12:00:00Z"
        );
        assert!(Schedule::parse("0 0 30 2 *")
            .unwrap()
            .next(ts("2026-01-01T00:00:00Z"), &TimeZone::UTC)
            .is_none());
    }

    #[test]
    fn time_zones_shift_the_firing_instant() {
        let tz = TimeZone::get("America/New_York").unwrap();
        let at = Schedule::parse("0 9 * * *")
            .unwrap()
            .next(ts("2026-06-01T00:00:00Z"), &tz)
            .unwrap();
        assert_eq!(at.to_string(), "2026-06-01T13:00:00Z");
    }

    #[test]
    fn bad_schedules_are_refused_with_upstreams_messages() {
        let err = |s: &str| Schedule::parse(s).unwrap_err();
        assert_eq!(err("* * *"), "expected exactly 5 fields, found 3: [* * *]");
        assert_eq!(err("60 * * * *"), "end of range (60) above maximum (59): 60");
        assert_eq!(err("* * 0 * *"), "beginning of range (0) below minimum (1): 0");
        assert_eq!(
            err("5-1 * * * *"),
            "beginning of range (5) beyond end of range (1): 5-1"
        );
        assert_eq!(
            err("*/0 * * * *"),
            "step of range should be a positive number: */0"
        );
        assert_eq!(err("1-2-3 * * * *"), "too many hyphens: 1-2-3");
        assert_eq!(err("@sometimes"), "unrecognized descriptor: @sometimes");
        assert_eq!(
            err("x * * * *"),
            "failed to parse int from x: strconv.Atoi: parsing \"x\": invalid syntax"
        );
        assert_eq!(err(""), "empty spec string");
    }
}
