//! Durations as Go writes and reads them (`time.ParseDuration`, `Duration.String`): what
//! upstream's flags accept (`--node-monitor-grace-period=1m30s`) and how its API prints a
//! `metav1.Duration`. No maintained crate speaks exactly Go's syntax (humantime, for one,
//! accepts `1min`, rejects `1.5h`'s neighbours differently and prints `1m 30s`), and the
//! messages are Go's, which users compare with upstream's.

use std::time::Duration;

/// The units Go knows, in nanoseconds.
fn unit_nanos(unit: &str) -> Option<u128> {
    Some(match unit {
        "ns" => 1,
        "us" | "µs" | "μs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    })
}

/// Parse a duration such as `300ms`, `1.5h` or `2h45m` as Go's `time.ParseDuration` does; a
/// negative duration is refused (no flag of r8s takes one). Errors read as Go's.
pub fn parse(s: &str) -> Result<Duration, String> {
    let invalid = || format!("time: invalid duration {s:?}");
    let mut rest = s;
    if let Some(r) = rest.strip_prefix('+') {
        rest = r;
    } else if rest.starts_with('-') {
        if rest == "-0" {
            return Ok(Duration::ZERO);
        }
        return Err(format!("invalid duration {s:?}: a duration must not be negative"));
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        // The number: digits, optionally a fraction.
        let int_len = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let (int, after) = rest.split_at(int_len);
        let (frac, after) = match after.strip_prefix('.') {
            Some(a) => {
                let n = a.find(|c: char| !c.is_ascii_digit()).unwrap_or(a.len());
                a.split_at(n)
            }
            None => ("", after),
        };
        if int.is_empty() && frac.is_empty() {
            return Err(invalid());
        }
        let unit_len = after
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        if unit.is_empty() {
            return Err(format!("time: missing unit in duration {s:?}"));
        }
        let scale =
            unit_nanos(unit).ok_or_else(|| format!("time: unknown unit {unit:?} in duration {s:?}"))?;
        let whole: u128 = if int.is_empty() {
            0
        } else {
            int.parse().map_err(|_| invalid())?
        };
        let mut value = whole.checked_mul(scale).ok_or_else(invalid)?;
        // The fraction, digit by digit, as far as it is still worth a nanosecond.
        let mut place = scale;
        for d in frac.bytes() {
            place /= 10;
            if place == 0 {
                break;
            }
            value += u128::from(d - b'0') * place;
        }
        total = total.checked_add(value).ok_or_else(invalid)?;
        rest = after;
    }
    if total > i64::MAX as u128 {
        return Err(invalid());
    }
    Ok(Duration::from_nanos(total as u64))
}

/// A number of nanoseconds as Go's `Duration.String` prints it: `0s`, `1.5µs`, `523ms`,
/// `1m30s`, `2h0m0.5s`.
pub fn format_nanos(ns: i64) -> String {
    if ns == 0 {
        return "0s".into();
    }
    let sign = if ns < 0 { "-" } else { "" };
    let n = ns.unsigned_abs();
    // The integer and trimmed fraction of n / unit.
    let fixed = |n: u64, unit: u64, digits: usize| -> String {
        let (whole, frac) = (n / unit, n % unit);
        if frac == 0 {
            return whole.to_string();
        }
        let f = format!("{frac:0digits$}");
        format!("{whole}.{}", f.trim_end_matches('0'))
    };
    if n < 1_000_000_000 {
        let (unit, digits, name) = if n < 1_000 {
            (1, 0, "ns")
        } else if n < 1_000_000 {
            (1_000, 3, "µs")
        } else {
            (1_000_000, 6, "ms")
        };
        return format!("{sign}{}{name}", fixed(n, unit, digits));
    }
    let (h, rest) = (n / 3_600_000_000_000, n % 3_600_000_000_000);
    let (m, rest) = (rest / 60_000_000_000, rest % 60_000_000_000);
    let secs = format!("{}s", fixed(rest, 1_000_000_000, 9));
    if h > 0 {
        format!("{sign}{h}h{m}m{secs}")
    } else if m > 0 {
        format!("{sign}{m}m{secs}")
    } else {
        format!("{sign}{secs}")
    }
}

/// A duration as Go prints it.
pub fn format(d: Duration) -> String {
    format_nanos(d.as_nanos().min(i64::MAX as u128) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_syntax() {
        let ok = |s: &str| parse(s).unwrap();
        assert_eq!(ok("1m30s"), Duration::from_secs(90));
        assert_eq!(ok("5m"), Duration::from_secs(300));
        assert_eq!(ok("250ms"), Duration::from_millis(250));
        assert_eq!(ok("1.5h"), Duration::from_secs(5400));
        assert_eq!(ok("2h45m"), Duration::from_secs(9900));
        assert_eq!(ok(".5s"), Duration::from_millis(500));
        assert_eq!(ok("1.s"), Duration::from_secs(1));
        assert_eq!(ok("10us"), Duration::from_micros(10));
        assert_eq!(ok("10µs"), Duration::from_micros(10));
        assert_eq!(ok("100ns"), Duration::from_nanos(100));
        assert_eq!(ok("+3s"), Duration::from_secs(3));
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(ok("1h1m1s1ms"), Duration::from_millis(3_661_001));
    }

    #[test]
    fn refuses_what_go_refuses_in_its_words() {
        assert_eq!(parse("30").unwrap_err(), "time: missing unit in duration \"30\"");
        assert_eq!(
            parse("5x").unwrap_err(),
            "time: unknown unit \"x\" in duration \"5x\""
        );
        assert_eq!(parse("").unwrap_err(), "time: invalid duration \"\"");
        assert_eq!(parse("m").unwrap_err(), "time: invalid duration \"m\"");
        assert_eq!(parse(".s").unwrap_err(), "time: invalid duration \".s\"");
        assert!(parse("-1s").unwrap_err().contains("negative"));
        assert!(parse("9999999999h").is_err());
    }

    #[test]
    fn prints_as_go() {
        let cases = [
            (0, "0s"),
            (1, "1ns"),
            (1_500, "1.5µs"),
            (523_000_000, "523ms"),
            (1_500_000_000, "1.5s"),
            (90_000_000_000, "1m30s"),
            (3_600_000_000_000, "1h0m0s"),
            (7_200_500_000_000, "2h0m0.5s"),
            (-2_000_000_000, "-2s"),
        ];
        for (ns, want) in cases {
            assert_eq!(format_nanos(ns), want, "{ns}");
        }
        assert_eq!(format(Duration::from_secs(300)), "5m0s");
    }
}
