//! Label selectors of controllers (apimachinery's `LabelSelectorAsSelector`), on kube-rs's
//! `Selector`: a missing selector matches nothing, an empty one everything.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};

pub enum Matcher {
    Nothing,
    Selector(Selector),
}

impl Matcher {
    pub fn new(sel: Option<&LabelSelector>) -> Result<Self, crate::Error> {
        match sel {
            None => Ok(Matcher::Nothing),
            Some(s) => Selector::try_from(s.clone())
                .map(Matcher::Selector)
                .map_err(|e| crate::Error::Other(format!("invalid label selector: {e}"))),
        }
    }

    pub fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        match self {
            Matcher::Nothing => false,
            Matcher::Selector(s) => {
                let empty = BTreeMap::new();
                s.matches(labels.unwrap_or(&empty))
            }
        }
    }

    pub fn selects_all(&self) -> bool {
        matches!(self, Matcher::Selector(s) if s.selects_all())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn match_labels_and_expressions() {
        let sel = LabelSelector {
            match_labels: Some(labels(&[("app", "web")])),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "In".into(),
                values: Some(vec!["front".into()]),
            }]),
        };
        let m = Matcher::new(Some(&sel)).unwrap();
        assert!(m.matches(Some(&labels(&[("app", "web"), ("tier", "front")]))));
        assert!(!m.matches(Some(&labels(&[("app", "web")]))));
        assert!(!m.matches(None));
        assert!(!Matcher::new(None).unwrap().matches(Some(&labels(&[("a", "b")]))));
        let all = Matcher::new(Some(&LabelSelector::default())).unwrap();
        assert!(all.selects_all() && all.matches(None));
    }
}
