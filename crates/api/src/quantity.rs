//! Resource quantities (`resource.Quantity`): "100m", "1.5", "512Mi", "2Gi", "1e3", "500k".
//! k8s-openapi keeps them as strings; the scheduler and the kubelet need numbers. Parsed
//! exactly in thousandths (i128), rounded up like upstream's `MilliValue`.

/// A quantity in thousandths of its unit (millicores for cpu, millibytes for memory).
pub fn parse_milli(s: &str) -> Result<i128, String> {
    parse_scaled(s, 3).map(|(v, _)| v)
}

/// The quantity times 10^`scale`, rounded up, and the format its suffix implies.
fn parse_scaled(s: &str, scale: i32) -> Result<(i128, Format), String> {
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
    // The number's power-of-ten exponent from its suffix (i64: an exponent written out may be
    // as large as it likes; what does not fit is refused below, never wrapped).
    let mut exp10: i64 = 0;
    let mut mul: i128 = 1;
    let mut format = Format::DecimalSI;
    match suffix {
        "" => {}
        "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => {
            format = Format::BinarySI;
            let power = match suffix {
                "Ki" => 10,
                "Mi" => 20,
                "Gi" => 30,
                "Ti" => 40,
                "Pi" => 50,
                _ => 60,
            };
            mul = 1 << power;
        }
        "n" => exp10 = -9,
        "u" => exp10 = -6,
        "m" => exp10 = -3,
        "k" => exp10 = 3,
        "M" => exp10 = 6,
        "G" => exp10 = 9,
        "T" => exp10 = 12,
        "P" => exp10 = 15,
        "E" => exp10 = 18,
        e if e.starts_with(['e', 'E']) => {
            format = Format::DecimalExponent;
            exp10 = e[1..].parse::<i64>().map_err(|_| bad())?;
        }
        _ => return Err(bad()),
    }
    // value * 10^scale = int.frac * mul * 10^shift. Fractional digits far below one unit of
    // the result cannot change it but by rounding up: they are dropped, and remembered.
    let shift = exp10.saturating_add(i64::from(scale));
    let frac = frac.trim_end_matches('0');
    let useful = usize::try_from(shift.saturating_add(20).max(0)).unwrap_or(usize::MAX);
    let (frac, dropped) = match frac.get(..useful) {
        Some(kept) if kept.len() < frac.len() => (kept, frac[useful..].bytes().any(|b| b != b'0')),
        _ => (frac, false),
    };
    let digits = format!("{int}{frac}");
    let digits = digits.trim_start_matches('0');
    let mantissa: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| bad())?
    };
    let scaled = mantissa.checked_mul(mul).ok_or_else(bad)?;
    let exp = shift.saturating_sub(frac.len() as i64);
    let value = if scaled == 0 && !dropped {
        0
    } else if exp >= 0 {
        let power = u32::try_from(exp).ok().and_then(|p| 10i128.checked_pow(p));
        power.and_then(|p| scaled.checked_mul(p)).ok_or_else(bad)?
    } else {
        // Rounded up: any remainder (or dropped digit) makes one more.
        match u32::try_from(-exp).ok().and_then(|p| 10i128.checked_pow(p)) {
            Some(div) => scaled / div + i128::from(scaled % div != 0 || dropped),
            None => 1,
        }
    };
    Ok((if negative { -value } else { value }, format))
}

/// How a quantity is written (upstream's `resource.Format`): its canonical form keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Format {
    /// "1.5Gi" style: powers of 1024.
    BinarySI,
    /// "500m", "2k" style: powers of 1000.
    #[default]
    DecimalSI,
    /// "1e3" style.
    DecimalExponent,
}

const NANO: i128 = 1_000_000_000;

/// A resource quantity (upstream's `resource.Quantity`), exact to the nano unit (values are
/// rounded up to it, as upstream does), with the format of the string it came from so that it
/// prints back the way upstream's `String()` does ("0.5" prints "500m", "1.5Gi" "1536Mi").
#[derive(Clone, Copy, Debug, Default)]
pub struct Quantity {
    nanos: i128,
    pub format: Format,
}

impl Quantity {
    pub fn parse(s: &str) -> Result<Self, String> {
        let (nanos, format) = parse_scaled(s, 9)?;
        Ok(Self { nanos, format })
    }

    /// A whole number of units, written in decimal SI.
    pub fn from_units(n: i64) -> Self {
        Self {
            nanos: n as i128 * NANO,
            format: Format::DecimalSI,
        }
    }

    pub fn from_milli(m: i128) -> Self {
        Self {
            nanos: m.saturating_mul(1_000_000),
            format: Format::DecimalSI,
        }
    }

    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    /// -1, 0 or 1.
    pub fn sign(&self) -> i32 {
        self.nanos.signum() as i32
    }

    /// Thousandths of the unit, rounded up (upstream `MilliValue`).
    pub fn milli_value(&self) -> i128 {
        self.nanos.div_euclid(1_000_000) + i128::from(self.nanos.rem_euclid(1_000_000) != 0)
    }

    /// Rounded up to a thousandth of the unit, in the same format (upstream `RoundUp(-3)`).
    pub fn round_up_milli(&self) -> Quantity {
        Quantity {
            nanos: self.milli_value().saturating_mul(1_000_000),
            format: self.format,
        }
    }

    /// Whole units, rounded up (upstream `Value`).
    pub fn value(&self) -> i128 {
        self.nanos.div_euclid(NANO) + i128::from(self.nanos.rem_euclid(NANO) != 0)
    }

    /// The sum, in this quantity's format (or the other's if this one is zero), as upstream's
    /// `Add`. Upstream's quantities have no bound; these stop at i128's nanos (about 1.7e29
    /// units) rather than wrap.
    pub fn add(&self, other: &Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_add(other.nanos),
            format: if self.is_zero() { other.format } else { self.format },
        }
    }

    pub fn sub(&self, other: &Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_sub(other.nanos),
            format: if self.is_zero() { other.format } else { self.format },
        }
    }

    pub fn neg(&self) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_neg(),
            format: self.format,
        }
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.nanos == other.nanos
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

impl std::str::FromStr for Quantity {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Quantity::parse(s)
    }
}

impl std::fmt::Display for Quantity {
    /// Upstream's canonical form: the largest suffix that keeps the number whole.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.nanos == 0 {
            return f.write_str("0");
        }
        let sign = if self.nanos < 0 { "-" } else { "" };
        let abs = self.nanos.unsigned_abs();
        let mut format = self.format;
        if format == Format::BinarySI && (abs < 1024 * NANO as u128 || !abs.is_multiple_of(NANO as u128)) {
            // Small or fractional binary values print in decimal, as upstream.
            format = Format::DecimalSI;
        }
        if format == Format::BinarySI {
            let mut units = abs / NANO as u128;
            let mut power = 0;
            while power < 6 && units.is_multiple_of(1024) {
                units /= 1024;
                power += 1;
            }
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][power];
            return write!(f, "{sign}{units}{suffix}");
        }
        // mantissa * 10^exp with exp a multiple of 3.
        let mut mantissa = abs;
        let mut exp: i32 = -9;
        while mantissa.is_multiple_of(10) {
            mantissa /= 10;
            exp += 1;
        }
        match exp.rem_euclid(3) {
            1 => {
                mantissa *= 10;
                exp -= 1;
            }
            2 => {
                mantissa *= 100;
                exp -= 2;
            }
            _ => {}
        }
        let suffix = match (format, exp) {
            (_, 0) => String::new(),
            (Format::DecimalExponent, e) => format!("e{e}"),
            (_, -9) => "n".into(),
            (_, -6) => "u".into(),
            (_, -3) => "m".into(),
            (_, 3) => "k".into(),
            (_, 6) => "M".into(),
            (_, 9) => "G".into(),
            (_, 12) => "T".into(),
            (_, 15) => "P".into(),
            (_, 18) => "E".into(),
            (_, e) => format!("e{e}"),
        };
        write!(f, "{sign}{mantissa}{suffix}")
    }
}

/// Whole units, rounded up (upstream `Value`).
pub fn parse_value(s: &str) -> Result<i128, String> {
    parse_milli(s).map(|m| m.div_euclid(1000) + i128::from(m.rem_euclid(1000) != 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the quantity fuzzer (fuzz/regressions/quantity): exponents beyond i32 and
    /// digits beyond i128 neither wrap nor read as zero.
    #[test]
    fn extreme_exponents_and_long_fractions_are_exact_or_refused() {
        // A tiny magnitude rounds up to one thousandth, away from zero.
        assert_eq!(parse_milli("-2.0000004E-1000000000").unwrap(), -1);
        assert_eq!(parse_milli("1e-99999999999").unwrap(), 1);
        assert_eq!(parse_milli("0e99999999999").unwrap(), 0);
        assert!(parse_milli("1e1000000000").is_err());
        assert!(parse_milli("1e99999999999999999999").is_err());
        // Trailing zeros past i128's 38 digits are still one.
        assert_eq!(
            parse_milli("1.000000000000000000000000000000000000000000000").unwrap(),
            1000
        );
        // Digits below a thousandth round up; those past i128's digits too.
        assert_eq!(parse_milli("0.0001").unwrap(), 1);
        assert_eq!(
            parse_milli("1.0000000000000000000000000000000000000000001").unwrap(),
            1001
        );
        assert_eq!(parse_value("1.5Ki").unwrap(), 1536);
        assert_eq!(parse_milli("0.0009765625Ki").unwrap(), 1000);
        // An integer part beyond i128 is refused, not read as zero.
        assert!(parse_milli("123456789012345678901234567890123456789012345").is_err());
    }

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
    fn canonical_forms_follow_upstream() {
        for (given, canonical) in [
            ("0.5", "500m"),
            ("1000m", "1"),
            ("1", "1"),
            ("1000", "1k"),
            ("1500", "1500"),
            ("100m", "100m"),
            ("10Mi", "10Mi"),
            ("1.5Gi", "1536Mi"),
            ("1024Mi", "1Gi"),
            ("512", "512"),
            ("0.5Ki", "512"),
            ("1e3", "1e3"),
            ("1.5e3", "1500"),
            ("0", "0"),
            ("0Mi", "0"),
            ("-2", "-2"),
            ("1u", "1u"),
            ("2G", "2G"),
        ] {
            assert_eq!(Quantity::parse(given).unwrap().to_string(), canonical, "{given}");
        }
        let q = |s: &str| Quantity::parse(s).unwrap();
        assert_eq!(q("100m").add(&q("200m")).to_string(), "300m");
        assert_eq!(q("64Mi").add(&q("64Mi")).to_string(), "128Mi");
        // Zero takes the other's format, as upstream's Add.
        assert_eq!(Quantity::default().add(&q("64Mi")).to_string(), "64Mi");
        assert_eq!(q("1").sub(&q("500m")).to_string(), "500m");
        assert!(q("1") > q("999m"));
        assert_eq!(q("1Gi"), q("1073741824"));
        assert_eq!(q("1.5").milli_value(), 1500);
        assert_eq!(q("100m").value(), 1);
    }

    #[test]
    fn rejects_malformed() {
        for s in ["", "abc", "1.2.3", "5x", "Mi", "1 Gi"] {
            assert!(parse_milli(s).is_err(), "{s}");
        }
    }
}
