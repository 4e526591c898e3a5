//! Resource quantities (`resource.Quantity`): "100m", "1.5", "512Mi", "2Gi", "1e3", "500k".
//! k8s-openapi keeps them as strings; the scheduler and the kubelet need numbers. Parsed
//! exactly in thousandths (i128), rounded up like upstream's `MilliValue`.

/// A quantity in thousandths of its unit (millicores for cpu, millibytes for memory).
pub fn parse_milli(s: &str) -> Result<i128, String> {
    let bad = || {
        format!("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {s:?}")
    };
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    if number.is_empty() {
        return Err(bad());
    }
    let (negative, number) = match number.as_bytes()[0] {
        b'-' => (true, &number[1..]),
        b'+' => (false, &number[1..]),
        _ => (false, number),
    };
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if (int.is_empty() && frac.is_empty()) || !int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit()) {
        return Err(bad());
    }
    // The number as an integer mantissa and a power-of-ten exponent.
    let digits = format!("{int}{frac}");
    let mantissa: i128 = digits.trim_start_matches('0').parse().unwrap_or(0);
    let mut exp10: i32 = -(frac.len() as i32);
    let mut mul: i128 = 1;
    match suffix {
        "" => {}
        "Ki" => mul = 1 << 10,
        "Mi" => mul = 1 << 20,
        "Gi" => mul = 1 << 30,
        "Ti" => mul = 1 << 40,
        "Pi" => mul = 1 << 50,
        "Ei" => mul = 1 << 60,
        "n" => exp10 -= 9,
        "u" => exp10 -= 6,
        "m" => exp10 -= 3,
        "k" => exp10 += 3,
        "M" => exp10 += 6,
        "G" => exp10 += 9,
        "T" => exp10 += 12,
        "P" => exp10 += 15,
        "E" => exp10 += 18,
        e if e.starts_with(['e', 'E']) => {
            exp10 += e[1..].parse::<i32>().map_err(|_| bad())?;
        }
        _ => return Err(bad()),
    }
    // value * 1000 = mantissa * mul * 10^(exp10 + 3), rounded up.
    let exp = exp10 + 3;
    let scaled = mantissa.checked_mul(mul).ok_or_else(bad)?;
    let value = if exp >= 0 {
        scaled
            .checked_mul(10i128.checked_pow(exp as u32).ok_or_else(bad)?)
            .ok_or_else(bad)?
    } else {
        let div = 10i128.checked_pow((-exp) as u32).unwrap_or(i128::MAX);
        (scaled + div - 1) / div
    };
    Ok(if negative { -value } else { value })
}

/// Whole units, rounded up (upstream `Value`).
pub fn parse_value(s: &str) -> Result<i128, String> {
    parse_milli(s).map(|m| (m + 999).div_euclid(1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_and_memory_forms() {
        assert_eq!(parse_milli("100m").unwrap(), 100);
        assert_eq!(parse_milli("1").unwrap(), 1000);
        assert_eq!(parse_milli("1.5").unwrap(), 1500);
        assert_eq!(parse_milli("0.1").unwrap(), 100);
        assert_eq!(parse_value("512Mi").unwrap(), 512 << 20);
        assert_eq!(parse_value("2Gi").unwrap(), 2 << 30);
        assert_eq!(parse_value("1G").unwrap(), 1_000_000_000);
        assert_eq!(parse_value("500k").unwrap(), 500_000);
        assert_eq!(parse_value("1e3").unwrap(), 1000);
        assert_eq!(parse_value("1.5Gi").unwrap(), 3 << 29);
        assert_eq!(parse_milli("-2").unwrap(), -2000);
        // Rounded up, as MilliValue does.
        assert_eq!(parse_milli("1u").unwrap(), 1);
        assert_eq!(parse_value("100m").unwrap(), 1);
    }

    #[test]
    fn rejects_malformed() {
        for s in ["", "abc", "1.2.3", "5x", "Mi", "1 Gi"] {
            assert!(parse_milli(s).is_err(), "{s}");
        }
    }
}
