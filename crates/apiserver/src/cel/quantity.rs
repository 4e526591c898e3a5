//! The quantity library (upstream's `library/quantity.go`): `quantity()`, `isQuantity()`,
//! `sign()`, and on a `kubernetes.Quantity` `isInteger`, `asInteger`, `asApproximateFloat`,
//! `add`, `sub`, `isGreaterThan`, `isLessThan`, `compareTo`. Equality compares values
//! (`quantity('1k') == quantity('1000')`).
//!
//! Values are `r8s_api`'s quantities, exact to the nano unit as upstream's. What that type does
//! not keep is written here: upstream's three parse errors, and which of its two
//! representations upstream would hold a value in (an int64 at a power of ten, or an
//! arbitrary-precision decimal), since only the former converts to an int: `asInteger` fails
//! for `quantity('1.5Gi')` or `quantity('1000m')` although both are whole numbers.

use ::cel::common::functions::Function;
use ::cel::common::types::{Kind, Type, INT_TYPE, STRING_TYPE};
use ::cel::common::value::CowVal;
use ::cel::objects::Opaque;
use ::cel::{DeclarationError, Env, ExecutionError};
use r8s_api::quantity::Quantity as Amount;

use super::{error, int, of_bool, of_double, of_int, of_opaque, opaque, string, take, Ret};

/// Upstream's `ErrFormatWrong`.
pub(super) const FORMAT_ERROR: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
/// Upstream's `ErrSuffix`.
const SUFFIX_ERROR: &str = "unable to parse quantity's suffix";
/// Upstream's `ErrNumeric`: here, a value beyond what `r8s_api`'s quantities hold (about
/// 1.7e29), which upstream's would.
const NUMERIC_ERROR: &str = "unable to parse numeric part of quantity";
/// A sum beyond what `r8s_api`'s quantities hold (upstream's would hold it).
const OUT_OF_RANGE: &str = "quantity out of range";

const TYPE_NAME: &str = "kubernetes.Quantity";
const QUANTITY: Type = Type::simple_type(Kind::Opaque, TYPE_NAME);

const NANO: i128 = 1_000_000_000;

#[derive(Clone, Debug)]
struct Quantity {
    amount: Amount,
    /// The power of ten of upstream's int64 representation (`int64Amount`), `None` when
    /// upstream holds the value as a decimal (`inf.Dec`).
    scale: Option<i32>,
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.amount == other.amount
    }
}

impl Eq for Quantity {}

impl Opaque for Quantity {
    fn runtime_type_name(&self) -> &str {
        TYPE_NAME
    }
}

pub(super) fn library(env: &mut Env) -> Result<(), DeclarationError> {
    // Not `env.add_type`: upstream's object types can't be named in an expression.
    env.add_overload("quantity", "string_to_quantity", vec![STRING_TYPE], to_quantity)?;
    env.add_overload("isQuantity", "is_quantity_string", vec![STRING_TYPE], is_quantity)?;
    // Global only, as upstream declares it: `q.sign()` does not compile there.
    env.add_overload("sign", "quantity_sign", vec![QUANTITY], sign)?;
    let member = |env: &mut Env, name: &str, id: &str, args: Vec<Type>, f: Function| {
        env.add_member_overload(name, id, QUANTITY, args, f)
    };
    member(
        env,
        "isGreaterThan",
        "quantity_is_greater_than",
        vec![QUANTITY],
        greater,
    )?;
    member(env, "isLessThan", "quantity_is_less_than", vec![QUANTITY], less)?;
    member(
        env,
        "compareTo",
        "quantity_compare_to",
        vec![QUANTITY],
        compare_to,
    )?;
    member(env, "asApproximateFloat", "quantity_get_float", vec![], as_float)?;
    member(env, "asInteger", "quantity_get_int", vec![], as_integer)?;
    member(env, "isInteger", "quantity_is_integer", vec![], is_integer)?;
    member(env, "add", "quantity_add", vec![QUANTITY], add)?;
    member(env, "add", "quantity_add_int", vec![INT_TYPE], add)?;
    member(env, "sub", "quantity_sub", vec![QUANTITY], sub)?;
    member(env, "sub", "quantity_sub_int", vec![INT_TYPE], sub)?;
    Ok(())
}

/// A quantity string taken apart as upstream's `parseQuantityString` does.
struct Parts<'a> {
    negative: bool,
    /// The integer digits, leading zeros stripped: "0" if none are left.
    num: &'a str,
    /// The fraction digits.
    denom: &'a str,
    suffix: &'a str,
}

/// Upstream's `parseQuantityString`, for its error (which tells a malformed quantity from
/// one of an unknown suffix) and its parts (which decide the representation). Written here
/// as `r8s_api`'s parser is more lenient ("1 " is a quantity there) and does not expose
/// them.
fn scan(s: &str) -> Result<Parts<'_>, &'static str> {
    let b = s.as_bytes();
    let digits_from = |mut pos: usize| {
        while pos < b.len() && b[pos].is_ascii_digit() {
            pos += 1;
        }
        pos
    };
    let (negative, mut pos) = match b.first() {
        Some(b'-') => (true, 1),
        Some(b'+') => (false, 1),
        _ => (false, 0),
    };
    while pos < b.len() && b[pos] == b'0' {
        pos += 1;
    }
    let start = pos;
    pos = digits_from(pos);
    let num = if pos == start { "0" } else { &s[start..pos] };
    let mut denom = "";
    if pos < b.len() && b[pos] == b'.' {
        let start = pos + 1;
        pos = digits_from(start);
        denom = &s[start..pos];
    }
    let suffix_start = pos;
    while pos < b.len() && b"eEinumkKMGTP".contains(&b[pos]) {
        pos += 1;
    }
    if pos < b.len() && (b[pos] == b'-' || b[pos] == b'+') {
        pos += 1;
    }
    if digits_from(pos) < b.len() {
        return Err(FORMAT_ERROR);
    }
    Ok(Parts {
        negative,
        num,
        denom,
        suffix: &s[suffix_start..],
    })
}

/// A suffix as upstream's `quantitySuffixer.interpret`: the base (10 or 2) and exponent it
/// multiplies by.
fn suffix(s: &str) -> Option<(u32, i32)> {
    let decimal = match s {
        "" => Some(0),
        "n" => Some(-9),
        "u" => Some(-6),
        "m" => Some(-3),
        "k" => Some(3),
        "M" => Some(6),
        "G" => Some(9),
        "T" => Some(12),
        "P" => Some(15),
        "E" => Some(18),
        _ => None,
    };
    let binary = match s {
        "Ki" => Some(10),
        "Mi" => Some(20),
        "Gi" => Some(30),
        "Ti" => Some(40),
        "Pi" => Some(50),
        "Ei" => Some(60),
        _ => None,
    };
    match (decimal, binary) {
        (Some(e), _) => Some((10, e)),
        (_, Some(e)) => Some((2, e)),
        _ if s.len() > 1 && s.starts_with(['e', 'E']) => s[1..].parse::<i64>().ok().map(|e| (10, e as i32)),
        _ => None,
    }
}

/// The power of ten upstream's `ParseQuantity` keeps an int64 at, if it does (its fast path).
fn int64_scale(p: &Parts<'_>, base: u32, exponent: i32) -> Option<i32> {
    if base == 10 {
        // At most 18 digits, which fit in an int64, no finer than nano.
        let scale = exponent - p.denom.len() as i32;
        (p.num.len() + p.denom.len() <= 18 && scale >= -9).then_some(scale)
    } else {
        // 1Mi (2^20) has ~6 digits of decimal precision: upstream's estimate.
        let precision = 15 - p.num.len() as i32 - (exponent as f32 * 3.0 / 10.0) as i32 - 1;
        if !p.denom.is_empty() || precision < 0 {
            return None;
        }
        let value: i64 = p.num.parse().ok()?;
        value.checked_mul(1i64.checked_shl(exponent as u32)?)?;
        Some(0)
    }
}

/// Upstream's `ParseQuantity`.
fn parse(s: &str) -> Result<Quantity, &'static str> {
    if s.is_empty() {
        return Err(FORMAT_ERROR);
    }
    let parts = scan(s)?;
    let (base, exponent) = suffix(parts.suffix).ok_or(SUFFIX_ERROR)?;
    let scale = int64_scale(&parts, base, exponent);
    // What upstream accepts and `r8s_api` does not ("-", ".", "1.G") is a number once
    // written out in full.
    let sign = if parts.negative { "-" } else { "" };
    let full = format!("{sign}{}.{}{}", parts.num, parts.denom, parts.suffix);
    let mut amount = Amount::parse(&full).map_err(|_| NUMERIC_ERROR)?;
    // Upstream caps binary quantities past an int64's range (its fast path never is).
    let max = Amount::from_units(i64::MAX);
    if base == 2 && scale.is_none() && amount > max {
        amount = max;
    }
    Ok(Quantity { amount, scale })
}

/// The value in nano units. `r8s_api`'s quantities keep it private, but print it exactly (in
/// their canonical form, a quantity string): it is read back from there.
fn nanos(a: &Amount) -> i128 {
    let text = a.to_string();
    let Ok(p) = scan(&text) else { return 0 };
    let Some((base, exponent)) = suffix(p.suffix) else {
        return 0;
    };
    let digits: i128 = format!("{}{}", p.num, p.denom).parse().unwrap_or(0);
    let magnitude = if base == 2 {
        digits * (1i128 << exponent) * NANO
    } else {
        let exp = exponent - p.denom.len() as i32 + 9;
        if exp >= 0 {
            digits * 10i128.pow(exp as u32)
        } else {
            digits / 10i128.pow(exp.unsigned_abs())
        }
    };
    if p.negative {
        -magnitude
    } else {
        magnitude
    }
}

/// Upstream's `AsInt64`: only an int64 at a scale of 0 or more converts.
fn as_i64(q: &Quantity) -> Option<i64> {
    match q.scale {
        Some(scale) if scale >= 0 => i64::try_from(nanos(&q.amount) / NANO).ok(),
        _ => None,
    }
}

/// Upstream's `AsApproximateFloat64`: the int64, or the decimal's digits, times a power of
/// ten.
fn as_f64(q: &Quantity) -> f64 {
    // Go's `math.Pow10`: the double nearest 10^e.
    let pow10 = |e: i32| format!("1e{e}").parse::<f64>().unwrap_or(f64::NAN);
    let nanos = nanos(&q.amount);
    match q.scale {
        Some(scale) => (nanos / 10i128.pow((scale + 9) as u32)) as f64 * pow10(scale),
        None => {
            let (mut digits, mut exp) = (nanos, -9);
            while digits != 0 && digits % 10 == 0 {
                digits /= 10;
                exp += 1;
            }
            digits as f64 * pow10(exp)
        }
    }
}

/// Upstream's `Add` (of `y`'s value negated for `Sub`): an int64 plus an int64 stays one, at
/// the finer scale, unless it overflows; anything else is a decimal.
fn sum(x: &Quantity, y: &Quantity, negate: bool) -> Result<Quantity, ExecutionError> {
    let (a, b) = (nanos(&x.amount), nanos(&y.amount));
    if (if negate {
        a.checked_sub(b)
    } else {
        a.checked_add(b)
    })
    .is_none()
    {
        let function = if negate { "sub" } else { "add" };
        return Err(error(function, OUT_OF_RANGE));
    }
    let amount = if negate {
        x.amount.sub(&y.amount)
    } else {
        x.amount.add(&y.amount)
    };
    let scale = match (x.scale, y.scale) {
        _ if y.amount.is_zero() => x.scale,
        (Some(_), Some(b)) if x.amount.is_zero() => Some(b),
        (Some(a), Some(b)) => {
            let scale = a.min(b);
            let value = nanos(&amount) / 10i128.pow((scale + 9) as u32);
            i64::try_from(value).is_ok().then_some(scale)
        }
        _ => None,
    };
    Ok(Quantity { amount, scale })
}

fn quantity_arg(v: &CowVal<'_, '_>) -> Result<Quantity, ExecutionError> {
    opaque(v.as_ref(), TYPE_NAME)
}

fn to_quantity<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [s] = take(args)?;
    of_opaque(parse(string(&s)?).map_err(|e| error("quantity", e))?)
}

fn is_quantity<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [s] = take(args)?;
    of_bool(parse(string(&s)?).is_ok())
}

fn sign<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [q] = take(args)?;
    of_int(quantity_arg(&q)?.amount.sign().into())
}

fn compared(args: Vec<CowVal<'_, '_>>) -> Result<std::cmp::Ordering, ExecutionError> {
    let [a, b] = take(args)?;
    Ok(quantity_arg(&a)?.amount.cmp(&quantity_arg(&b)?.amount))
}

fn greater<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    of_bool(compared(args)?.is_gt())
}

fn less<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    of_bool(compared(args)?.is_lt())
}

fn compare_to<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    of_int(compared(args)? as i64)
}

fn as_float<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [q] = take(args)?;
    of_double(as_f64(&quantity_arg(&q)?))
}

fn as_integer<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [q] = take(args)?;
    let i =
        as_i64(&quantity_arg(&q)?).ok_or_else(|| error("asInteger", "cannot convert value to integer"))?;
    of_int(i)
}

fn is_integer<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [q] = take(args)?;
    of_bool(as_i64(&quantity_arg(&q)?).is_some())
}

/// The operand of `add` or `sub`: a quantity, or an int as upstream's
/// `NewQuantity(i, DecimalExponent)`.
fn operand(v: &CowVal<'_, '_>) -> Result<Quantity, ExecutionError> {
    match int(v) {
        Ok(i) => Ok(Quantity {
            amount: Amount::from_units(i),
            scale: Some(0),
        }),
        Err(_) => quantity_arg(v),
    }
}

fn add<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [a, b] = take(args)?;
    of_opaque(sum(&quantity_arg(&a)?, &operand(&b)?, false)?)
}

fn sub<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [a, b] = take(args)?;
    of_opaque(sum(&quantity_arg(&a)?, &operand(&b)?, true)?)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{check, fails, holds};

    // Expected values are upstream's (k8s.io/apiserver 1.33's base environment).

    #[test]
    fn quantities_compare_by_value() {
        holds("quantity('1Gi').isGreaterThan(quantity('1G'))");
        holds("quantity('50M').isLessThan(quantity('100M'))");
        check("quantity('200M').compareTo(quantity('0.2G'))", 0);
        check("quantity('50M').compareTo(quantity('50Mi'))", -1);
        check("quantity('1Ki').compareTo(quantity('1k'))", 1);
        holds("quantity('1Gi') == quantity('1024Mi')");
        holds("quantity('1k') != quantity('1Ki')");
        check("sign(quantity('-1'))", -1);
        check("sign(quantity('0'))", 0);
        check("sign(quantity('3m'))", 1);
    }

    #[test]
    fn arithmetic_with_quantities_and_ints() {
        holds("quantity('50k').add(20).sub(quantity('100k')).sub(-50000) == quantity('20')");
        holds("quantity('1').add(quantity('100m')) == quantity('1100m')");
        check("quantity('5').add(3).asInteger()", 8);
        check("quantity('5').sub(quantity('7')).asInteger()", -2);
        check("quantity('50k').sub(20000).asApproximateFloat()", 30000.0);
        let big = "quantity('100000000000000000000000000000')";
        fails(&format!("{big}.add({big})"), super::OUT_OF_RANGE);
    }

    #[test]
    fn integers_are_upstreams_int64_values() {
        check("quantity('50k').asInteger()", 50000);
        check("quantity('1Gi').asInteger()", 1 << 30);
        check("quantity('1e3').asInteger()", 1000);
        check("quantity('5.').asInteger()", 5);
        holds("quantity('50000000G').isInteger()");
        holds("quantity('-1').sub(-1).isInteger()");
        // Whole, but not held as an int64 at a scale of 0 or more upstream.
        check("quantity('1.5Gi').isInteger()", false);
        check("quantity('1m').add(quantity('999m')).isInteger()", false);
        check("quantity('100000000000000000000').isInteger()", false);
        check("quantity('.5').isInteger()", false);
        fails("quantity('1.5').asInteger()", "cannot convert value to integer");
        // Beyond what `r8s_api`'s quantities hold; upstream holds it as a decimal.
        fails(
            "quantity('9999999999999999999999999999999999999G').asInteger()",
            super::NUMERIC_ERROR,
        );
    }

    #[test]
    fn approximate_floats() {
        check("quantity('1n').asApproximateFloat()", 1e-9);
        check("quantity('0.0000000001').asApproximateFloat()", 1e-9);
        check("quantity('1.5Gi').asApproximateFloat()", 1610612736.0);
        check("quantity('0.1m').asApproximateFloat()", 0.0001);
        check("quantity('1E-3').asApproximateFloat()", 0.001);
        check("quantity('16Ei').asApproximateFloat()", 9.223372036854776e18);
        check("quantity('-').asApproximateFloat()", 0.0);
    }

    #[test]
    fn malformed_quantities_fail_as_upstream() {
        for bad in ["''", "'abc'", "'1.2.3'", "'0x10'", "' 1'", "'1 '"] {
            fails(&format!("quantity({bad})"), super::FORMAT_ERROR);
            check(&format!("isQuantity({bad})"), false);
        }
        for bad in ["'200K'", "'1e'", "'1Mi3'"] {
            fails(&format!("quantity({bad})"), super::SUFFIX_ERROR);
            check(&format!("isQuantity({bad})"), false);
        }
        for good in ["'1.3G'", "'1.3Gi'", "'10000k'", "'+1'", "'.'", "'e3'", "'1E3'"] {
            check(&format!("isQuantity({good})"), true);
        }
    }
}
