//! Which webhooks a request reaches: rules (operations, API groups and versions, resources with
//! `*` and `resource/subresource` forms, scope), `matchPolicy: Equivalent` across the versions of
//! one resource, and the namespace and object selectors (upstream's `predicates/rules`,
//! `predicates/namespace`, `predicates/object` and `generic.Webhook.ShouldCallHook`).

use crate::registry::Resource;
use std::collections::BTreeMap;

use super::source::{Hook, Rule};

/// What a request is, as rules see it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RequestAttrs<'a> {
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub operation: &'a str,
    pub group: &'a str,
    pub version: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    /// "" for cluster-scoped objects; a namespace's own name for namespace objects.
    pub namespace: &'a str,
}

fn exact_or_wildcard(items: &[String], requested: &str) -> bool {
    items.iter().any(|i| i == "*" || i == requested)
}

/// Upstream's `rules.Matcher.Matches`.
pub(crate) fn rule_matches(rule: &Rule, r: &RequestAttrs<'_>) -> bool {
    let is_namespace = r.group.is_empty() && r.version == "v1" && r.resource == "namespaces";
    let scope = match rule.scope.as_str() {
        "" | "*" => true,
        "Namespaced" => !is_namespace && !r.namespace.is_empty(),
        "Cluster" => is_namespace || r.namespace.is_empty(),
        _ => false,
    };
    let operation = rule.operations.iter().any(|op| op == "*" || op == r.operation);
    let resource = rule.resources.iter().any(|rs| {
        let (res, sub) = rs.split_once('/').unwrap_or((rs, ""));
        (res == "*" || res == r.resource) && (sub == "*" || sub == r.subresource)
    });
    scope
        && operation
        && exact_or_wildcard(&rule.api_groups, r.group)
        && exact_or_wildcard(&rule.api_versions, r.version)
        && resource
}

/// The other served versions of a resource stored as one (upstream's equivalent resources):
/// core and `events.k8s.io` Events here.
pub(crate) fn equivalents(def: &Resource) -> Vec<&'static Resource> {
    crate::registry::catalogue::builtins()
        .iter()
        .filter(|d| {
            d.plural == def.plural
                && (d.group, d.version) != (def.group, def.version)
                && (crate::registry::convert::converts(d) || crate::registry::convert::converts(def))
        })
        .collect()
}

/// Group, version and kind of `def`'s `subresource` (its own kind where it has one, as Scale).
pub(crate) fn kind_of(def: &Resource, subresource: &str) -> (String, String, String) {
    if let Some(s) = def.subresource(subresource).filter(|s| !s.kind.is_empty()) {
        let gv = s
            .group_version
            .map(str::to_owned)
            .unwrap_or_else(|| def.api_version());
        let (g, v) = gv.split_once('/').unwrap_or(("", gv.as_str()));
        return (g.to_owned(), v.to_owned(), s.kind.to_owned());
    }
    (def.group.to_owned(), def.version.to_owned(), def.kind.to_owned())
}

/// The resource a webhook is called for: the request's own, or an equivalent one under
/// `matchPolicy: Equivalent`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Invocation {
    pub def: &'static Resource,
    /// Whether `def` is not the request's resource (the object is converted for the webhook).
    pub converted: bool,
}

/// Which resource (if any) of `hook`'s rules the request matches: its own first, then, with
/// `matchPolicy: Equivalent`, an equivalent one, earlier rules first.
pub(crate) fn match_rules(hook: &Hook, def: &'static Resource, r: &RequestAttrs<'_>) -> Option<Invocation> {
    if hook.rules.iter().any(|rule| rule_matches(rule, r)) {
        return Some(Invocation {
            def,
            converted: false,
        });
    }
    if !hook.equivalent {
        return None;
    }
    let equivalents = equivalents(def);
    for rule in &hook.rules {
        for eq in &equivalents {
            let attrs = RequestAttrs {
                group: eq.group,
                version: eq.version,
                ..*r
            };
            if rule_matches(rule, &attrs) {
                return Some(Invocation {
                    def: eq,
                    converted: true,
                });
            }
        }
    }
    None
}

/// Whether the namespace selector needs the namespace's labels at all: cluster-scoped objects
/// (other than namespaces) always match, as does the empty selector.
pub(crate) fn needs_namespace_labels(hook: &Hook, r: &RequestAttrs<'_>) -> bool {
    if r.namespace.is_empty() && r.resource != "namespaces" {
        return false;
    }
    !matches!(&hook.namespace_selector, Ok(s) if s.is_empty())
}

/// Upstream's object matcher: an empty selector matches; otherwise the object's or the old
/// object's labels must.
pub(crate) fn object_selector_matches(
    hook: &Hook,
    object: Option<&BTreeMap<String, String>>,
    old_object: Option<&BTreeMap<String, String>>,
) -> Result<bool, String> {
    let sel = hook.object_selector.as_ref().map_err(Clone::clone)?;
    if sel.is_empty() {
        return Ok(true);
    }
    Ok(object.is_some_and(|l| sel.matches(l)) || old_object.is_some_and(|l| sel.matches(l)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(ops: &[&str], groups: &[&str], versions: &[&str], resources: &[&str], scope: &str) -> Rule {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
        Rule {
            operations: v(ops),
            api_groups: v(groups),
            api_versions: v(versions),
            resources: v(resources),
            scope: scope.into(),
        }
    }

    fn pod_create(sub: &'static str) -> RequestAttrs<'static> {
        RequestAttrs {
            operation: "CREATE",
            group: "",
            version: "v1",
            resource: "pods",
            subresource: sub,
            namespace: "default",
        }
    }

    #[test]
    fn rules_match_operations_groups_versions_and_resources() {
        let r = pod_create("");
        assert!(rule_matches(
            &rule(&["CREATE"], &[""], &["v1"], &["pods"], "*"),
            &r
        ));
        assert!(rule_matches(&rule(&["*"], &["*"], &["*"], &["*"], "*"), &r));
        assert!(!rule_matches(
            &rule(&["UPDATE"], &[""], &["v1"], &["pods"], "*"),
            &r
        ));
        assert!(!rule_matches(
            &rule(&["CREATE"], &["apps"], &["v1"], &["pods"], "*"),
            &r
        ));
        assert!(!rule_matches(
            &rule(&["CREATE"], &[""], &["v2"], &["pods"], "*"),
            &r
        ));
        assert!(!rule_matches(
            &rule(&["CREATE"], &[""], &["v1"], &["services"], "*"),
            &r
        ));
        // Subresources: `pods` alone does not match pods/status; `pods/*` and `*/status` do.
        let st = pod_create("status");
        assert!(!rule_matches(&rule(&["*"], &[""], &["v1"], &["pods"], "*"), &st));
        assert!(!rule_matches(&rule(&["*"], &[""], &["v1"], &["*"], "*"), &st));
        assert!(rule_matches(&rule(&["*"], &[""], &["v1"], &["pods/*"], "*"), &st));
        assert!(rule_matches(
            &rule(&["*"], &[""], &["v1"], &["*/status"], "*"),
            &st
        ));
        assert!(rule_matches(&rule(&["*"], &[""], &["v1"], &["*/*"], "*"), &st));
        assert!(rule_matches(
            &rule(&["*"], &[""], &["v1"], &["pods/status"], "*"),
            &st
        ));
        assert!(!rule_matches(
            &rule(&["*"], &[""], &["v1"], &["pods/status"], "*"),
            &r
        ));
    }

    #[test]
    fn scopes() {
        let namespaced = rule(&["*"], &["*"], &["*"], &["*"], "Namespaced");
        let cluster = rule(&["*"], &["*"], &["*"], &["*"], "Cluster");
        let pod = pod_create("");
        assert!(rule_matches(&namespaced, &pod));
        assert!(!rule_matches(&cluster, &pod));
        let node = RequestAttrs {
            resource: "nodes",
            namespace: "",
            ..pod
        };
        assert!(!rule_matches(&namespaced, &node));
        assert!(rule_matches(&cluster, &node));
        // A namespace carries its own name as its namespace, but is cluster-scoped.
        let ns = RequestAttrs {
            resource: "namespaces",
            namespace: "dev",
            ..pod
        };
        assert!(!rule_matches(&namespaced, &ns));
        assert!(rule_matches(&cluster, &ns));
    }

    fn hook(rules: Vec<Rule>, equivalent: bool) -> Hook {
        let mut h = Hook::parse("c", &json!({"name": "h.example.com"}));
        h.rules = rules;
        h.equivalent = equivalent;
        h
    }

    #[test]
    fn equivalent_versions_match_under_equivalent_policy() {
        let core = crate::registry::catalogue::builtin("", "v1", "events").unwrap();
        let r = RequestAttrs {
            operation: "CREATE",
            group: "",
            version: "v1",
            resource: "events",
            subresource: "",
            namespace: "default",
        };
        let only_new = vec![rule(&["CREATE"], &["events.k8s.io"], &["v1"], &["events"], "*")];
        let inv = match_rules(&hook(only_new.clone(), true), core, &r).unwrap();
        assert_eq!((inv.def.group, inv.converted), ("events.k8s.io", true));
        assert!(match_rules(&hook(only_new, false), core, &r).is_none());
        let both = vec![rule(
            &["CREATE"],
            &["", "events.k8s.io"],
            &["v1"],
            &["events"],
            "*",
        )];
        let inv = match_rules(&hook(both, true), core, &r).unwrap();
        assert_eq!((inv.def.group, inv.converted), ("", false));
        let pods = crate::registry::catalogue::builtin("", "v1", "pods").unwrap();
        assert!(equivalents(pods).is_empty());
    }

    #[test]
    fn selectors() {
        let mut h = hook(vec![], true);
        let pod = pod_create("");
        assert!(
            !needs_namespace_labels(&h, &pod),
            "the empty selector needs no lookup"
        );
        h.namespace_selector = r8s_api::selector::from_label_selector(&json!({"matchLabels": {"team": "a"}}));
        assert!(needs_namespace_labels(&h, &pod));
        let node = RequestAttrs {
            resource: "nodes",
            namespace: "",
            ..pod
        };
        assert!(
            !needs_namespace_labels(&h, &node),
            "cluster-scoped objects always match"
        );

        let labels: BTreeMap<String, String> = [("app".to_owned(), "web".to_owned())].into();
        let other: BTreeMap<String, String> = [("app".to_owned(), "db".to_owned())].into();
        assert_eq!(object_selector_matches(&h, Some(&other), None), Ok(true));
        h.object_selector = r8s_api::selector::from_label_selector(&json!({"matchLabels": {"app": "web"}}));
        assert_eq!(object_selector_matches(&h, Some(&labels), None), Ok(true));
        assert_eq!(object_selector_matches(&h, Some(&other), None), Ok(false));
        assert_eq!(
            object_selector_matches(&h, None, Some(&labels)),
            Ok(true),
            "old object counts"
        );
        assert_eq!(object_selector_matches(&h, Some(&other), Some(&labels)), Ok(true));
    }

    #[test]
    fn kinds_of_subresources() {
        let d = crate::registry::catalogue::builtin("apps", "v1", "deployments").unwrap();
        assert_eq!(
            kind_of(d, "scale"),
            ("autoscaling".into(), "v1".into(), "Scale".into())
        );
        assert_eq!(
            kind_of(d, "status"),
            ("apps".into(), "v1".into(), "Deployment".into())
        );
        assert_eq!(kind_of(d, ""), ("apps".into(), "v1".into(), "Deployment".into()));
    }
}
