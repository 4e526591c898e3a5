//! Policy rules: whether a rule allows a request, whether one set of rules covers another (the
//! privilege-escalation check), and how upstream prints a rule in its refusals.

use serde_json::Value;

use crate::request_info::RequestInfo;

/// One `PolicyRule` of a Role or ClusterRole.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
    pub non_resource_urls: Vec<String>,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

impl Rule {
    pub fn from_json(v: &Value) -> Self {
        Self {
            verbs: strings(&v["verbs"]),
            api_groups: strings(&v["apiGroups"]),
            resources: strings(&v["resources"]),
            resource_names: strings(&v["resourceNames"]),
            non_resource_urls: strings(&v["nonResourceURLs"]),
        }
    }

    /// The `rules` of a Role or ClusterRole object.
    pub fn all_from_json(obj: &Value) -> Vec<Self> {
        obj["rules"]
            .as_array()
            .map(|a| a.iter().map(Self::from_json).collect())
            .unwrap_or_default()
    }

    pub fn to_json(&self) -> Value {
        let mut m = serde_json::Map::new();
        m.insert("verbs".into(), self.verbs.clone().into());
        if !self.api_groups.is_empty() {
            m.insert("apiGroups".into(), self.api_groups.clone().into());
        }
        if !self.resources.is_empty() {
            m.insert("resources".into(), self.resources.clone().into());
        }
        if !self.resource_names.is_empty() {
            m.insert("resourceNames".into(), self.resource_names.clone().into());
        }
        if !self.non_resource_urls.is_empty() {
            m.insert("nonResourceURLs".into(), self.non_resource_urls.clone().into());
        }
        Value::Object(m)
    }

    /// Whether this rule allows the request `r` (upstream's `RuleAllows`).
    pub fn allows(&self, r: &RequestInfo) -> bool {
        if !has_or_star(&self.verbs, &r.verb) {
            return false;
        }
        if !r.is_resource_request {
            return self.non_resource_urls.iter().any(|u| url_matches(u, &r.path));
        }
        if !has_or_star(&self.api_groups, &r.api_group) {
            return false;
        }
        // `resource` or `resource/subresource`, compared without building the string.
        let is_combined = |res: &str| {
            if r.subresource.is_empty() {
                res == r.resource
            } else {
                res.strip_prefix(r.resource.as_str())
                    .and_then(|rest| rest.strip_prefix('/'))
                    .is_some_and(|sub| sub == r.subresource)
            }
        };
        let resource_ok = self.resources.iter().any(|res| {
            res == "*"
                || is_combined(res)
                || (!r.subresource.is_empty()
                    && res.strip_prefix("*/").is_some_and(|sub| sub == r.subresource))
        });
        resource_ok && (self.resource_names.is_empty() || self.resource_names.contains(&r.name))
    }
}

fn has_or_star(set: &[String], item: &str) -> bool {
    set.iter().any(|s| s == "*" || s == item)
}

fn url_matches(rule: &str, path: &str) -> bool {
    rule == "*"
        || rule == path
        || rule
            .strip_suffix('*')
            .is_some_and(|prefix| path.starts_with(prefix))
}

/// One permission of a rule broken down to a single verb, group, resource and name (or URL),
/// so coverage can be checked piece by piece as upstream's `BreakdownRule` does.
fn breakdown(rule: &Rule) -> Vec<Rule> {
    let one = |s: &String| vec![s.clone()];
    let mut out = Vec::new();
    for verb in &rule.verbs {
        for group in &rule.api_groups {
            for resource in &rule.resources {
                if rule.resource_names.is_empty() {
                    out.push(Rule {
                        verbs: one(verb),
                        api_groups: one(group),
                        resources: one(resource),
                        ..Default::default()
                    });
                }
                for name in &rule.resource_names {
                    out.push(Rule {
                        verbs: one(verb),
                        api_groups: one(group),
                        resources: one(resource),
                        resource_names: one(name),
                        ..Default::default()
                    });
                }
            }
        }
        for url in &rule.non_resource_urls {
            out.push(Rule {
                verbs: one(verb),
                non_resource_urls: one(url),
                ..Default::default()
            });
        }
    }
    out
}

/// Whether `owner` includes everything `requested` does (a wildcard in `owner` covers anything;
/// `*/sub` covers that subresource of any resource; a URL pattern `p*` covers URLs below `p`).
fn rule_covers(owner: &Rule, requested: &Rule) -> bool {
    let all = |set: &[String], items: &[String]| {
        set.iter().any(|s| s == "*") || items.iter().all(|i| set.contains(i))
    };
    if !all(&owner.verbs, &requested.verbs) || !all(&owner.api_groups, &requested.api_groups) {
        return false;
    }
    let resources_ok = owner.resources.iter().any(|r| r == "*")
        || requested.resources.iter().all(|res| {
            owner.resources.contains(res)
                || res
                    .split_once('/')
                    .is_some_and(|(_, sub)| owner.resources.contains(&format!("*/{sub}")))
        });
    let urls_ok = requested.non_resource_urls.iter().all(|u| {
        owner
            .non_resource_urls
            .iter()
            .any(|o| o == "*" || o == u || o.strip_suffix('*').is_some_and(|p| u.starts_with(p)))
    });
    let names_ok = owner.resource_names.is_empty()
        || (!requested.resource_names.is_empty()
            && requested
                .resource_names
                .iter()
                .all(|n| owner.resource_names.contains(n)));
    resources_ok && urls_ok && names_ok
}

/// The pieces of `requested` that no rule of `owner` covers (empty: `owner` covers it all).
pub fn uncovered(owner: &[Rule], requested: &[Rule]) -> Vec<Rule> {
    requested
        .iter()
        .flat_map(breakdown)
        .filter(|piece| !owner.iter().any(|o| rule_covers(o, piece)))
        .collect()
}

/// A rule as upstream's `CompactString` prints it: `{APIGroups:[""], Resources:["pods"], Verbs:["get"]}`.
pub fn compact_string(r: &Rule) -> String {
    let quoted = |v: &[String]| v.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(" ");
    let mut parts = Vec::new();
    if !r.api_groups.is_empty() {
        parts.push(format!("APIGroups:[{}]", quoted(&r.api_groups)));
    }
    if !r.resources.is_empty() {
        parts.push(format!("Resources:[{}]", quoted(&r.resources)));
    }
    if !r.non_resource_urls.is_empty() {
        parts.push(format!("NonResourceURLs:[{}]", quoted(&r.non_resource_urls)));
    }
    if !r.resource_names.is_empty() {
        parts.push(format!("ResourceNames:[{}]", quoted(&r.resource_names)));
    }
    if !r.verbs.is_empty() {
        parts.push(format!("Verbs:[{}]", quoted(&r.verbs)));
    }
    format!("{{{}}}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request_info::parse_request;
    use http::Method;

    fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Rule {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
        Rule {
            verbs: v(verbs),
            api_groups: v(groups),
            resources: v(resources),
            ..Default::default()
        }
    }

    #[test]
    fn resource_rules_match_verb_group_resource_subresource_and_name() {
        let get_pods = parse_request(&Method::GET, "/api/v1/namespaces/d/pods/p", None);
        let list_pods = parse_request(&Method::GET, "/api/v1/namespaces/d/pods", None);
        let pod_status = parse_request(&Method::PATCH, "/api/v1/namespaces/d/pods/p/status", None);
        let deploys = parse_request(&Method::GET, "/apis/apps/v1/namespaces/d/deployments", None);
        let r = rule(&["get", "list"], &[""], &["pods"]);
        assert!(r.allows(&get_pods) && r.allows(&list_pods));
        assert!(!r.allows(&pod_status), "a subresource needs its own entry");
        assert!(!r.allows(&deploys), "another group");
        assert!(rule(&["patch"], &[""], &["pods/status"]).allows(&pod_status));
        assert!(rule(&["patch"], &[""], &["*/status"]).allows(&pod_status));
        assert!(!rule(&["patch"], &[""], &["*/status"]).allows(&get_pods));
        assert!(rule(&["*"], &["*"], &["*"]).allows(&deploys));
        let mut named = rule(&["get"], &[""], &["pods"]);
        named.resource_names = vec!["p".into()];
        assert!(named.allows(&get_pods));
        assert!(!named.allows(&parse_request(&Method::GET, "/api/v1/namespaces/d/pods/q", None)));
        // A list carries no name, so a named rule cannot allow it.
        named.verbs.push("list".into());
        assert!(!named.allows(&list_pods));
    }

    #[test]
    fn non_resource_rules_match_exact_urls_and_star_suffixes() {
        let mut r = Rule {
            verbs: vec!["get".into()],
            non_resource_urls: vec!["/healthz".into(), "/apis/*".into()],
            ..Default::default()
        };
        assert!(r.allows(&parse_request(&Method::GET, "/healthz", None)));
        assert!(r.allows(&parse_request(&Method::GET, "/apis/apps/v1", None)));
        assert!(!r.allows(&parse_request(&Method::GET, "/livez", None)));
        assert!(!r.allows(&parse_request(&Method::POST, "/healthz", None)));
        r.non_resource_urls = vec!["*".into()];
        assert!(r.allows(&parse_request(&Method::GET, "/metrics", None)));
        // A non-resource rule never allows resource requests.
        assert!(!r.allows(&parse_request(&Method::GET, "/api/v1/namespaces/d/pods", None)));
    }

    #[test]
    fn coverage_breaks_rules_down_and_honours_wildcards() {
        let owner = vec![
            rule(&["get", "list"], &[""], &["pods", "services"]),
            rule(&["*"], &["apps"], &["*"]),
        ];
        assert!(uncovered(&owner, &[rule(&["get"], &[""], &["pods"])]).is_empty());
        assert!(uncovered(
            &owner,
            &[rule(&["create", "delete"], &["apps"], &["deployments"])]
        )
        .is_empty());
        let missing = uncovered(&owner, &[rule(&["get", "create"], &[""], &["pods", "secrets"])]);
        let printed: Vec<String> = missing.iter().map(compact_string).collect();
        assert_eq!(
            printed,
            vec![
                r#"{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}"#,
                r#"{APIGroups:[""], Resources:["pods"], Verbs:["create"]}"#,
                r#"{APIGroups:[""], Resources:["secrets"], Verbs:["create"]}"#,
            ]
        );
        // Named grants cover only those names; unnamed grants cover any name.
        let mut named_owner = rule(&["get"], &[""], &["secrets"]);
        named_owner.resource_names = vec!["a".into()];
        let mut want_a = rule(&["get"], &[""], &["secrets"]);
        want_a.resource_names = vec!["a".into()];
        assert!(uncovered(std::slice::from_ref(&named_owner), &[want_a.clone()]).is_empty());
        assert_eq!(
            uncovered(&[named_owner], &[rule(&["get"], &[""], &["secrets"])]).len(),
            1
        );
        assert!(uncovered(&[rule(&["get"], &[""], &["secrets"])], &[want_a]).is_empty());
        // */status covers the status of anything.
        assert!(uncovered(
            &[rule(&["update"], &[""], &["*/status"])],
            &[rule(&["update"], &[""], &["pods/status"])]
        )
        .is_empty());
    }
}
