//! The one selector model of r8s: label selectors (`=`, `==`, `!=`, `in`, `notin`, exists,
//! `!`exists) and field selectors (`=`, `==`, `!=`), parsed from the query string forms kubectl
//! sends, or built from a `metav1.LabelSelector` (typed or as JSON) as upstream's
//! `LabelSelectorAsSelector` builds it: a missing selector matches nothing, an empty one
//! everything. The API server's list filters, the admission webhooks' selectors, the
//! controllers' and the scheduler's label matching all use this type.

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

/// A parsed selector: every requirement must hold. The empty selector matches everything;
/// [`Selector::nothing`] (upstream's `labels.Nothing()`, what a missing `metav1.LabelSelector`
/// becomes) matches no object at all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector(pub Vec<Requirement>, Nothing);

/// Whether a selector is `labels.Nothing()`; private so that only [`Selector::nothing`] makes one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Nothing(bool);

impl Selector {
    /// A selector with these requirements (none: everything matches).
    pub fn new(requirements: Vec<Requirement>) -> Self {
        Selector(requirements, Nothing(false))
    }

    /// The selector that matches nothing.
    pub fn nothing() -> Self {
        Selector(Vec::new(), Nothing(true))
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        !self.1 .0 && self.0.iter().all(|r| r.matches(labels))
    }

    /// `matches` for an object's optional labels (none are the same as empty).
    pub fn matches_labels(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.matches(labels.unwrap_or(&EMPTY))
    }

    /// No requirement: matches everything (the empty selector; not [`Selector::nothing`]).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty() && !self.1 .0
    }

    /// Matches every object (upstream's `Selector.Empty()`).
    pub fn selects_all(&self) -> bool {
        self.is_empty()
    }

    /// Matches no object.
    pub fn selects_nothing(&self) -> bool {
        self.1 .0
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
        return Ok(Selector::new(reqs));
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
    Ok(Selector::new(reqs))
}

/// Parse a field selector such as `metadata.name=x,status.phase!=Running`.
pub fn parse_field_selector(s: &str) -> Result<Selector, String> {
    let mut reqs = Vec::new();
    if s.trim().is_empty() {
        return Ok(Selector::new(reqs));
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
    Ok(Selector::new(reqs))
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
        reqs.push(requirement(key, op, values)?);
    }
    Ok(Selector::new(reqs))
}

/// A typed `metav1.LabelSelector` as a selector (upstream's `LabelSelectorAsSelector`): `None`
/// matches nothing, an empty selector everything; an invalid operator or value set is an error.
pub fn label_selector_as_selector(
    sel: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
) -> Result<Selector, String> {
    let Some(sel) = sel else {
        return Ok(Selector::nothing());
    };
    let mut reqs = Vec::new();
    for (k, v) in sel.match_labels.iter().flatten() {
        reqs.push(Requirement::Equals(k.clone(), v.clone()));
    }
    for e in sel.match_expressions.iter().flatten() {
        reqs.push(requirement(
            e.key.clone(),
            &e.operator,
            e.values.clone().unwrap_or_default(),
        )?);
    }
    Ok(Selector::new(reqs))
}

/// One `matchExpressions` entry as a requirement.
fn requirement(key: String, op: &str, values: Vec<String>) -> Result<Requirement, String> {
    Ok(match op {
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
    })
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

    #[test]
    fn typed_label_selectors_missing_matches_nothing_empty_everything() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
        let l = labels(&[("app", "web"), ("tier", "front")]);
        let nothing = label_selector_as_selector(None).unwrap();
        assert!(nothing.selects_nothing() && !nothing.selects_all());
        assert!(!nothing.matches(&l) && !nothing.matches_labels(None));
        let all = label_selector_as_selector(Some(&LabelSelector::default())).unwrap();
        assert!(all.selects_all() && all.matches_labels(None) && all.matches(&l));
        let sel = LabelSelector {
            match_labels: Some([("app".to_string(), "web".to_string())].into()),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "In".into(),
                values: Some(vec!["front".into()]),
            }]),
        };
        let s = label_selector_as_selector(Some(&sel)).unwrap();
        assert!(s.matches(&l));
        assert!(!s.matches(&labels(&[("app", "web")])));
        assert!(!s.matches_labels(None));
        let bad = LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "In".into(),
                values: None,
            }]),
            ..Default::default()
        };
        assert!(label_selector_as_selector(Some(&bad)).is_err());
    }
}
