//! Label selectors (`=`, `==`, `!=`, `in`, `notin`, exists, `!`exists) and field selectors
//! (`=`, `==`, `!=`), parsed from the query string forms kubectl sends.

use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::NotExists(k) => !labels.contains_key(k),
        }
    }
}

/// A parsed selector: every requirement must hold. The empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector(pub Vec<Requirement>);

impl Selector {
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| r.matches(labels))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Split on commas outside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

/// Parse a label selector such as `app=web,tier in (a,b),!legacy`.
pub fn parse_label_selector(s: &str) -> Result<Selector, String> {
    let mut reqs = Vec::new();
    if s.trim().is_empty() {
        return Ok(Selector(reqs));
    }
    for part in split_top(s) {
        let part = part.trim();
        if part.is_empty() {
            return Err(format!("unable to parse requirement: empty requirement in {s:?}"));
        }
        let set = |rest: &str| -> Result<Vec<String>, String> {
            let rest = rest.trim();
            let inner = rest
                .strip_prefix('(')
                .and_then(|r| r.strip_suffix(')'))
                .ok_or_else(|| format!("unable to parse requirement: found '{rest}', expected: '('"))?;
            Ok(inner
                .split(',')
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
                .collect())
        };
        let words: Vec<&str> = part.splitn(2, char::is_whitespace).collect();
        let req = if let Some(k) = part.strip_prefix('!') {
            Requirement::NotExists(k.trim().to_owned())
        } else if words.len() == 2 && words[1].trim_start().starts_with("notin") {
            Requirement::NotIn(words[0].to_owned(), set(&words[1].trim_start()[5..])?)
        } else if words.len() == 2 && words[1].trim_start().starts_with("in") {
            Requirement::In(words[0].to_owned(), set(&words[1].trim_start()[2..])?)
        } else if let Some((k, v)) = part.split_once("!=") {
            Requirement::NotEquals(k.trim().to_owned(), v.trim().to_owned())
        } else if let Some((k, v)) = part.split_once("==") {
            Requirement::Equals(k.trim().to_owned(), v.trim().to_owned())
        } else if let Some((k, v)) = part.split_once('=') {
            Requirement::Equals(k.trim().to_owned(), v.trim().to_owned())
        } else {
            Requirement::Exists(part.to_owned())
        };
        let key = match &req {
            Requirement::Equals(k, _)
            | Requirement::NotEquals(k, _)
            | Requirement::In(k, _)
            | Requirement::NotIn(k, _)
            | Requirement::Exists(k)
            | Requirement::NotExists(k) => k,
        };
        if let Some(e) = crate::validation::qualified_name(key).first() {
            return Err(format!(
                "unable to parse requirement: invalid label key \"{key}\": {e}"
            ));
        }
        reqs.push(req);
    }
    Ok(Selector(reqs))
}

/// Parse a field selector such as `metadata.name=x,status.phase!=Running`.
pub fn parse_field_selector(s: &str) -> Result<Selector, String> {
    let mut reqs = Vec::new();
    if s.trim().is_empty() {
        return Ok(Selector(reqs));
    }
    for part in s.split(',') {
        let part = part.trim();
        let req = if let Some((k, v)) = part.split_once("!=") {
            Requirement::NotEquals(k.trim().to_owned(), v.trim().to_owned())
        } else if let Some((k, v)) = part.split_once("==") {
            Requirement::Equals(k.trim().to_owned(), v.trim().to_owned())
        } else if let Some((k, v)) = part.split_once('=') {
            Requirement::Equals(k.trim().to_owned(), v.trim().to_owned())
        } else {
            return Err(format!("invalid selector: '{s}'; can't understand '{part}'"));
        };
        reqs.push(req);
    }
    Ok(Selector(reqs))
}

/// A `metav1.LabelSelector` (`matchLabels` and `matchExpressions`, as JSON) as a selector, as
/// upstream's `LabelSelectorAsSelector`: a missing or empty selector matches everything.
pub fn from_label_selector(v: &serde_json::Value) -> Result<Selector, String> {
    let mut reqs = Vec::new();
    if let Some(m) = v.get("matchLabels").and_then(serde_json::Value::as_object) {
        for (k, val) in m {
            reqs.push(Requirement::Equals(
                k.clone(),
                val.as_str().unwrap_or("").to_owned(),
            ));
        }
    }
    for e in v
        .get("matchExpressions")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = e["key"].as_str().unwrap_or("").to_owned();
        let values: Vec<String> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect();
        let op = e["operator"].as_str().unwrap_or("");
        reqs.push(match op {
            "In" | "NotIn" if values.is_empty() => {
                return Err("for 'in', 'notin' operators, values set can't be empty".to_owned())
            }
            "In" => Requirement::In(key, values),
            "NotIn" => Requirement::NotIn(key, values),
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return Err("values set must be empty for exists and does not exist".to_owned())
            }
            "Exists" => Requirement::Exists(key),
            "DoesNotExist" => Requirement::NotExists(key),
            other => return Err(format!("{other:?} is not a valid label selector operator")),
        });
    }
    Ok(Selector(reqs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn label_selectors() {
        let s = parse_label_selector("app=web,tier in (front, back),!legacy,env!=prod,team").unwrap();
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "front"), ("team", "x")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "db"), ("team", "x")])));
        assert!(!s.matches(&labels(&[
            ("app", "web"),
            ("tier", "front"),
            ("legacy", "1"),
            ("team", "x")
        ])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "front")])));
        let n = parse_label_selector("tier notin (a,b)").unwrap();
        assert!(n.matches(&labels(&[])));
        assert!(!n.matches(&labels(&[("tier", "a")])));
        assert!(parse_label_selector("").unwrap().matches(&labels(&[])));
        assert!(parse_label_selector("app==web")
            .unwrap()
            .matches(&labels(&[("app", "web")])));
        assert!(parse_label_selector("bad key=1").is_err());
    }

    #[test]
    fn field_selectors() {
        let s = parse_field_selector("metadata.name=a,status.phase!=Running").unwrap();
        assert!(s.matches(&labels(&[("metadata.name", "a"), ("status.phase", "Pending")])));
        assert!(!s.matches(&labels(&[("metadata.name", "a"), ("status.phase", "Running")])));
        assert!(parse_field_selector("nonsense").is_err());
    }

    #[test]
    fn label_selector_objects() {
        use serde_json::json;
        let labels: BTreeMap<String, String> = [
            ("env".to_owned(), "prod".to_owned()),
            ("tier".to_owned(), "web".to_owned()),
        ]
        .into();
        assert!(from_label_selector(&json!({})).unwrap().matches(&labels));
        assert!(from_label_selector(&serde_json::Value::Null).unwrap().is_empty());
        let s = from_label_selector(&json!({
            "matchLabels": {"env": "prod"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["web", "api"]},
                {"key": "legacy", "operator": "DoesNotExist"}
            ]
        }))
        .unwrap();
        assert!(s.matches(&labels));
        let s = from_label_selector(
            &json!({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]}),
        )
        .unwrap();
        assert!(!s.matches(&labels));
        assert!(
            from_label_selector(&json!({"matchExpressions": [{"key": "a", "operator": "Near"}]})).is_err()
        );
        assert!(from_label_selector(&json!({"matchExpressions": [{"key": "a", "operator": "In"}]})).is_err());
    }
}
