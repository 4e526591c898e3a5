//! Kubernetes' semver library (upstream's `library/semverlib.go`, version 1): `semver()` and
//! `isSemver()` (with an optional `normalize` flag), and on a `kubernetes.Semver` `major`,
//! `minor`, `patch`, `isGreaterThan`, `isLessThan`, `compareTo`. Equality is precedence (build
//! metadata does not count).
//!
//! Versions are parsed as upstream's `github.com/blang/semver/v4` parses them, written here
//! for its error messages (the `semver` crate has its own words, and orders by build metadata
//! too).

use std::cmp::Ordering;

use ::cel::common::types::{Kind, Type, BOOL_TYPE, STRING_TYPE};
use ::cel::common::value::CowVal;
use ::cel::objects::Opaque;
use ::cel::{DeclarationError, Env, ExecutionError};

use super::{boolean, error, go_quote, of_bool, of_int, of_opaque, opaque, string, take, Ret};

const TYPE_NAME: &str = "kubernetes.Semver";
const SEMVER: Type = Type::simple_type(Kind::Opaque, TYPE_NAME);

#[derive(Clone, Debug)]
struct Version {
    major: u64,
    minor: u64,
    patch: u64,
    pre: Vec<Pre>,
    build: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Pre {
    // Numeric identifiers order before alphanumeric ones.
    Num(u64),
    Alpha(String),
}

impl Version {
    /// Precedence, as blang's `Compare`: a pre-release is less than its release, and
    /// pre-releases compare identifier by identifier, the longer winning a tie.
    fn compare(&self, other: &Version) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(other.major, other.minor, other.patch))
            .then_with(|| match (self.pre.is_empty(), other.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => self.pre.cmp(&other.pre),
            })
    }
}

impl PartialEq for Version {
    fn eq(&self, other: &Self) -> bool {
        self.compare(other).is_eq()
    }
}

impl Eq for Version {}

impl Opaque for Version {
    fn runtime_type_name(&self) -> &str {
        TYPE_NAME
    }
}

pub(super) fn library(env: &mut Env) -> Result<(), DeclarationError> {
    // Not `env.add_type`: upstream's object types can't be named in an expression.
    env.add_overload("semver", "string_to_semver", vec![STRING_TYPE], to_semver)?;
    let with_flag = || vec![STRING_TYPE, BOOL_TYPE];
    env.add_overload("semver", "string_bool_to_semver", with_flag(), to_semver)?;
    env.add_overload("isSemver", "is_semver_string", vec![STRING_TYPE], is_semver)?;
    env.add_overload("isSemver", "is_semver_string_bool", with_flag(), is_semver)?;
    env.add_member_overload(
        "isGreaterThan",
        "semver_is_greater_than",
        SEMVER,
        vec![SEMVER],
        greater,
    )?;
    env.add_member_overload("isLessThan", "semver_is_less_than", SEMVER, vec![SEMVER], less)?;
    env.add_member_overload("compareTo", "semver_compare_to", SEMVER, vec![SEMVER], compare_to)?;
    env.add_member_overload("major", "semver_major", SEMVER, vec![], major)?;
    env.add_member_overload("minor", "semver_minor", SEMVER, vec![], minor)?;
    env.add_member_overload("patch", "semver_patch", SEMVER, vec![], patch)?;
    Ok(())
}

const ALPHANUM: &str = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-0123456789";

fn only(s: &str, set: &str) -> bool {
    s.chars().all(|c| set.contains(c))
}

fn digits(s: &str) -> bool {
    s.chars().all(|c| c.is_ascii_digit())
}

/// Go's `strconv.ParseUint`, with its error.
fn parse_u64(s: &str) -> Result<u64, String> {
    s.parse().map_err(|_| {
        let why = if s.is_empty() {
            "invalid syntax"
        } else {
            "value out of range"
        };
        format!("strconv.ParseUint: parsing {}: {why}", go_quote(s))
    })
}

/// A major, minor or patch number.
fn number(s: &str, what: &str) -> Result<u64, String> {
    if !digits(s) {
        return Err(format!(
            "Invalid character(s) found in {what} number {}",
            go_quote(s)
        ));
    }
    if s.len() > 1 && s.starts_with('0') {
        let what = format!("{}{}", what[..1].to_ascii_uppercase(), &what[1..]);
        return Err(format!(
            "{what} number must not contain leading zeroes {}",
            go_quote(s)
        ));
    }
    parse_u64(s)
}

/// blang's `Parse`.
fn parse(s: &str) -> Result<Version, String> {
    if s.is_empty() {
        return Err("Version string empty".to_owned());
    }
    let parts: Vec<&str> = s.splitn(3, '.').collect();
    let [major, minor, rest] = parts[..] else {
        return Err("No Major.Minor.Patch elements found".to_owned());
    };
    let (major, minor) = (number(major, "major")?, number(minor, "minor")?);
    let (rest, build) = match rest.split_once('+') {
        Some((rest, build)) => (rest, Some(build)),
        None => (rest, None),
    };
    let (patch, pre) = match rest.split_once('-') {
        Some((patch, pre)) => (patch, Some(pre)),
        None => (rest, None),
    };
    let patch = number(patch, "patch")?;
    let mut version = Version {
        major,
        minor,
        patch,
        pre: Vec::new(),
        build: Vec::new(),
    };
    for id in pre.into_iter().flat_map(|pre| pre.split('.')) {
        version.pre.push(if id.is_empty() {
            return Err("Prerelease is empty".to_owned());
        } else if digits(id) {
            if id.len() > 1 && id.starts_with('0') {
                let e = "Numeric PreRelease version must not contain leading zeroes";
                return Err(format!("{e} {}", go_quote(id)));
            }
            Pre::Num(parse_u64(id)?)
        } else if only(id, ALPHANUM) {
            Pre::Alpha(id.to_owned())
        } else {
            return Err(format!(
                "Invalid character(s) found in prerelease {}",
                go_quote(id)
            ));
        });
    }
    for id in build.into_iter().flat_map(|build| build.split('.')) {
        if id.is_empty() {
            return Err("Build meta data is empty".to_owned());
        }
        if !only(id, ALPHANUM) {
            let e = "Invalid character(s) found in build meta data";
            return Err(format!("{e} {}", go_quote(id)));
        }
        version.build.push(id.to_owned());
    }
    Ok(version)
}

/// Upstream's `normalizeAndParse`: no "v" prefix, missing minor and patch numbers are 0, and
/// leading zeros are dropped.
fn normalize_and_parse(s: &str) -> Result<Version, String> {
    let s = s.strip_prefix('v').unwrap_or(s);
    let mut parts: Vec<String> = s
        .splitn(3, '.')
        .map(|p| {
            if p.len() <= 1 {
                return p.to_owned();
            }
            let trimmed = p.trim_start_matches('0');
            if trimmed.starts_with(|c: char| c.is_ascii_digit()) {
                trimmed.to_owned()
            } else {
                format!("0{trimmed}")
            }
        })
        .collect();
    if parts.len() < 3 {
        if parts.last().is_some_and(|p| p.contains(['+', '-'])) {
            return Err("short version cannot contain PreRelease/Build meta data".to_owned());
        }
        parts.resize(3, "0".to_owned());
    }
    parse(&parts.join("."))
}

/// The version an argument (and the optional `normalize` flag) stands for.
fn parsed(args: &[CowVal<'_, '_>]) -> Result<Result<Version, String>, ExecutionError> {
    let s = string(&args[0])?;
    let normalize = match args.get(1) {
        Some(flag) => boolean(flag)?,
        None => false,
    };
    Ok(if normalize {
        normalize_and_parse(s)
    } else {
        parse(s)
    })
}

fn to_semver<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    of_opaque(parsed(&args)?.map_err(|e| error("semver", e))?)
}

fn is_semver<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    of_bool(parsed(&args)?.is_ok())
}

fn version_arg(v: &CowVal<'_, '_>) -> Result<Version, ExecutionError> {
    opaque(v.as_ref(), TYPE_NAME)
}

fn compared(args: Vec<CowVal<'_, '_>>) -> Result<Ordering, ExecutionError> {
    let [a, b] = take(args)?;
    Ok(version_arg(&a)?.compare(&version_arg(&b)?))
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

/// A number of a version argument (an int, as upstream converts it).
fn field<'b, 'v>(args: Vec<CowVal<'b, 'v>>, f: fn(&Version) -> u64) -> Ret<'b, 'v> {
    let [v] = take(args)?;
    of_int(f(&version_arg(&v)?) as i64)
}

fn major<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    field(args, |v| v.major)
}

fn minor<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    field(args, |v| v.minor)
}

fn patch<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    field(args, |v| v.patch)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{check, fails, holds};

    // Expected values and messages are upstream's (k8s.io/apiserver 1.33's base environment).

    #[test]
    fn versions() {
        check("semver('1.2.3').major()", 1);
        check("semver('1.2.3').minor()", 2);
        check("semver('1.2.3').patch()", 3);
        check("semver('1.2.3').compareTo(semver('1.2.3'))", 0);
        check("semver('1.2.3').compareTo(semver('2.0.0'))", -1);
        check("semver('1.2.3').compareTo(semver('0.1.2'))", 1);
        holds("semver('1.0.0').isGreaterThan(semver('1.0.0-rc.1'))");
        holds("semver('1.0.0-alpha').isLessThan(semver('1.0.0-alpha.1'))");
        holds("semver('1.0.0-alpha.1').isLessThan(semver('1.0.0-alpha.beta'))");
        holds("semver('1.0.0-beta.2').isLessThan(semver('1.0.0-beta.11'))");
        holds("semver('1.0.0+a') == semver('1.0.0+b')");
        holds("isSemver('1.0.0') && !isSemver('hello') && !isSemver('v1.0')");
    }

    #[test]
    fn normalized_versions() {
        holds("semver('v1.0', true) == semver('1.0.0')");
        holds("semver('01.01.01', true) == semver('1.1.1')");
        holds("semver('1', true) == semver('1.0.0')");
        holds("isSemver('v1.0', true)");
        fails(
            "semver('1.0-rc', true)",
            "short version cannot contain PreRelease/Build meta data",
        );
    }

    #[test]
    fn bad_versions_fail_with_blangs_words() {
        fails("semver('')", "Version string empty");
        fails("semver('1.0')", "No Major.Minor.Patch elements found");
        fails(
            "semver('01.0.0')",
            r#"Major number must not contain leading zeroes "01""#,
        );
        fails(
            "semver('1.x.0')",
            r#"Invalid character(s) found in minor number "x""#,
        );
        fails(
            "semver('1.0.0-01')",
            r#"Numeric PreRelease version must not contain leading zeroes "01""#,
        );
        fails("semver('1.0.0-a..b')", "Prerelease is empty");
        fails(
            "semver('1.0.0+a_b')",
            r#"Invalid character(s) found in build meta data "a_b""#,
        );
        fails(
            "semver('1..0')",
            r#"strconv.ParseUint: parsing "": invalid syntax"#,
        );
    }
}
