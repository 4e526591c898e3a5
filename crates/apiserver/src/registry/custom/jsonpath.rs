//! The simple JSONPath of CRDs' printer columns, scale paths and selectable fields
//! (`.spec.replicas`, `.status.conditions[0].type`, `.metadata.labels['app.kubernetes.io/name']`,
//! `.items[*].name`): field steps, indices, quoted keys and wildcards, the first match taken.
//! Written by hand: the crates for JSONPath implement RFC 9535's syntax (`$.a`), not
//! Kubernetes' template form, and these paths need a few dozen lines.

use serde_json::Value;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    Field(String),
    Index(usize),
    Any,
}

/// A parsed path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Path(Vec<Step>);

impl Path {
    /// Parse `.a.b[0]['c.d']` (with or without surrounding `{}`); `None` if it is not one.
    pub fn parse(text: &str) -> Option<Path> {
        let text = text.trim();
        let text = text
            .strip_prefix('{')
            .and_then(|t| t.strip_suffix('}'))
            .unwrap_or(text);
        let mut chars = text.strip_prefix('.')?.chars().peekable();
        let mut steps = Vec::new();
        let mut field = String::new();
        let mut after_bracket = false;
        while let Some(c) = chars.next() {
            match c {
                '.' => {
                    if !field.is_empty() {
                        steps.push(Step::Field(std::mem::take(&mut field)));
                    } else if !after_bracket {
                        return None;
                    }
                    after_bracket = false;
                }
                '[' => {
                    if !field.is_empty() {
                        steps.push(Step::Field(std::mem::take(&mut field)));
                    }
                    let mut inner = String::new();
                    for c in chars.by_ref() {
                        if c == ']' {
                            break;
                        }
                        inner.push(c);
                    }
                    let inner = inner.trim();
                    let step = if inner == "*" {
                        Step::Any
                    } else if let Ok(i) = inner.parse::<usize>() {
                        Step::Index(i)
                    } else if inner.len() >= 2
                        && ((inner.starts_with('\'') && inner.ends_with('\''))
                            || (inner.starts_with('"') && inner.ends_with('"')))
                    {
                        Step::Field(inner[1..inner.len() - 1].to_owned())
                    } else {
                        return None;
                    };
                    steps.push(step);
                    after_bracket = true;
                }
                c if c.is_whitespace() => return None,
                c => {
                    after_bracket = false;
                    field.push(c)
                }
            }
        }
        if !field.is_empty() {
            steps.push(Step::Field(field));
        }
        if steps.is_empty() {
            return None;
        }
        Some(Path(steps))
    }

    /// The first value the path reaches in `v`.
    pub fn first<'a>(&self, v: &'a Value) -> Option<&'a Value> {
        fn walk<'a>(steps: &[Step], v: &'a Value) -> Option<&'a Value> {
            let Some((step, rest)) = steps.split_first() else {
                return Some(v);
            };
            match step {
                Step::Field(f) => walk(rest, v.as_object()?.get(f)?),
                Step::Index(i) => walk(rest, v.as_array()?.get(*i)?),
                Step::Any => match v {
                    Value::Array(a) => a.iter().find_map(|item| walk(rest, item)),
                    Value::Object(o) => o.values().find_map(|item| walk(rest, item)),
                    _ => None,
                },
            }
        }
        walk(&self.0, v)
    }

    /// Set the value at the path, making objects on the way; `false` if the path goes
    /// through something that is not an object (or has indices or wildcards).
    pub fn set(&self, v: &mut Value, to: Value) -> bool {
        let mut cur = v;
        for (i, step) in self.0.iter().enumerate() {
            let Step::Field(f) = step else { return false };
            if cur.is_null() {
                *cur = Value::Object(Default::default());
            }
            let Some(o) = cur.as_object_mut() else {
                return false;
            };
            if i + 1 == self.0.len() {
                o.insert(f.clone(), to);
                return true;
            }
            cur = o.entry(f.clone()).or_insert(Value::Null);
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn paths_reach_fields_indices_quoted_keys_and_wildcards() {
        let v = json!({"spec": {"replicas": 3, "items": [{"name": "a"}, {"name": "b"}]},
            "metadata": {"labels": {"app.kubernetes.io/name": "x"}}});
        let at = |p: &str| Path::parse(p).unwrap().first(&v).cloned();
        assert_eq!(at(".spec.replicas"), Some(json!(3)));
        assert_eq!(at(".spec.items[1].name"), Some(json!("b")));
        assert_eq!(at(".spec.items[*].name"), Some(json!("a")));
        assert_eq!(at(".metadata.labels['app.kubernetes.io/name']"), Some(json!("x")));
        assert_eq!(at("{.spec.replicas}"), Some(json!(3)));
        assert_eq!(at(".spec.missing"), None);
        assert!(Path::parse("spec.replicas").is_none());
        assert!(Path::parse(".spec..x").is_none());
        assert!(Path::parse(".").is_none());
    }

    #[test]
    fn set_makes_the_objects_on_the_way() {
        let mut v = json!({"spec": {}});
        assert!(Path::parse(".spec.scale.replicas").unwrap().set(&mut v, json!(5)));
        assert_eq!(v, json!({"spec": {"scale": {"replicas": 5}}}));
        assert!(!Path::parse(".spec.items[0]").unwrap().set(&mut v, json!(1)));
    }
}
