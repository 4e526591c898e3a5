//! The audit policy (`audit.k8s.io/v1` `Policy`, `--audit-policy-file`): ordered rules, the
//! first that matches a request decides its level and the stages left out, as upstream's policy
//! checker. No matching rule means level None: the request is not audited.

use serde::{Deserialize, Serialize};

use crate::authn::UserInfo;
use crate::request_info::RequestInfo;

/// How much of a request is recorded, in increasing order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
pub enum Level {
    None,
    Metadata,
    Request,
    RequestResponse,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::None => "None",
            Level::Metadata => "Metadata",
            Level::Request => "Request",
            Level::RequestResponse => "RequestResponse",
        }
    }
}

/// The moments of a request at which an event is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
pub enum Stage {
    RequestReceived,
    /// Once the response headers are sent; only for long-running requests (watches).
    ResponseStarted,
    ResponseComplete,
    Panic,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::RequestReceived => "RequestReceived",
            Stage::ResponseStarted => "ResponseStarted",
            Stage::ResponseComplete => "ResponseComplete",
            Stage::Panic => "Panic",
        }
    }
}

/// `audit.k8s.io/v1` `Policy`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Policy {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub rules: Vec<PolicyRule>,
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
    #[serde(default)]
    pub omit_managed_fields: bool,
}

/// One rule; every field that is set must match (an empty list matches everything).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    pub level: Level,
    #[serde(default)]
    pub users: Vec<String>,
    #[serde(default)]
    pub user_groups: Vec<String>,
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(default)]
    pub resources: Vec<GroupResources>,
    #[serde(default)]
    pub namespaces: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
    #[serde(default)]
    pub omit_managed_fields: Option<bool>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupResources {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub resources: Vec<String>,
    #[serde(default)]
    pub resource_names: Vec<String>,
}

/// What the policy decides for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestAuditConfig {
    pub level: Level,
    /// The rule's stages and the policy's together.
    pub omit_stages: Vec<Stage>,
    pub omit_managed_fields: bool,
}

impl Policy {
    /// Read a policy file's text: YAML or JSON, `apiVersion: audit.k8s.io/v1`, `kind: Policy`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let policy: Policy = if text.trim_start().starts_with('{') {
            serde_json::from_str(text).map_err(|e| format!("invalid audit policy: {e}"))?
        } else {
            serde_saphyr::from_str(text).map_err(|e| format!("invalid audit policy: {e}"))?
        };
        if policy.api_version != "audit.k8s.io/v1" {
            return Err(format!(
                "audit policy: unsupported apiVersion {:?} (expected audit.k8s.io/v1)",
                policy.api_version
            ));
        }
        if policy.kind != "Policy" {
            return Err(format!(
                "audit policy: unexpected kind {:?} (expected Policy)",
                policy.kind
            ));
        }
        policy.validate()?;
        Ok(policy)
    }

    /// Upstream's validation of a policy: at least one rule, rules about resources or about
    /// URLs but not both, `*` only as the last character of a URL.
    fn validate(&self) -> Result<(), String> {
        if self.rules.is_empty() {
            return Err("audit policy: loaded illegal policy with 0 rules".into());
        }
        for (i, rule) in self.rules.iter().enumerate() {
            let at = format!("audit policy: rules[{i}]");
            if !rule.non_resource_urls.is_empty()
                && (!rule.resources.is_empty() || !rule.namespaces.is_empty())
            {
                return Err(format!(
                    "{at}: rules cannot apply to both regular resources and non-resource URLs"
                ));
            }
            for url in &rule.non_resource_urls {
                let star = url.find('*');
                if url.is_empty() || star.is_some_and(|at| at != url.len() - 1) {
                    return Err(format!(
                        "{at}.nonResourceURLs: {url:?}: '*' may only be the final character"
                    ));
                }
                if url != "*" && !url.starts_with('/') {
                    return Err(format!("{at}.nonResourceURLs: {url:?}: must start with '/'"));
                }
            }
            for gr in &rule.resources {
                if gr.group.contains('/') {
                    return Err(format!(
                        "{at}.resources.group: {:?}: must not contain '/'",
                        gr.group
                    ));
                }
                if !gr.resource_names.is_empty() && gr.resources.is_empty() {
                    return Err(format!(
                        "{at}.resources.resourceNames: using resourceNames requires resources"
                    ));
                }
            }
        }
        Ok(())
    }

    /// The level and omitted stages for a request by `user` (absent when authentication
    /// failed): the first matching rule's, else None.
    pub fn evaluate(&self, user: Option<&UserInfo>, info: &RequestInfo) -> RequestAuditConfig {
        let union = |rule: &[Stage]| {
            let mut stages = self.omit_stages.clone();
            for s in rule {
                if !stages.contains(s) {
                    stages.push(*s);
                }
            }
            stages
        };
        for rule in &self.rules {
            if rule.matches(user, info) {
                return RequestAuditConfig {
                    level: rule.level,
                    omit_stages: union(&rule.omit_stages),
                    omit_managed_fields: rule.omit_managed_fields.unwrap_or(self.omit_managed_fields),
                };
            }
        }
        RequestAuditConfig {
            level: Level::None,
            omit_stages: self.omit_stages.clone(),
            omit_managed_fields: self.omit_managed_fields,
        }
    }
}

impl PolicyRule {
    fn matches(&self, user: Option<&UserInfo>, info: &RequestInfo) -> bool {
        if !self.users.is_empty() && !user.is_some_and(|u| self.users.contains(&u.name)) {
            return false;
        }
        if !self.user_groups.is_empty()
            && !user.is_some_and(|u| u.groups.iter().any(|g| self.user_groups.contains(g)))
        {
            return false;
        }
        if !self.verbs.is_empty() && !self.verbs.contains(&info.verb) {
            return false;
        }
        if !self.namespaces.is_empty() || !self.resources.is_empty() {
            return self.matches_resource(info);
        }
        if !self.non_resource_urls.is_empty() {
            return !info.is_resource_request
                && self
                    .non_resource_urls
                    .iter()
                    .any(|spec| path_matches(&info.path, spec));
        }
        true
    }

    fn matches_resource(&self, info: &RequestInfo) -> bool {
        if !info.is_resource_request {
            return false;
        }
        // Cluster-scoped resources have the namespace "".
        if !self.namespaces.is_empty() && !self.namespaces.contains(&info.namespace) {
            return false;
        }
        if self.resources.is_empty() {
            return true;
        }
        let combined = if info.subresource.is_empty() {
            info.resource.clone()
        } else {
            format!("{}/{}", info.resource, info.subresource)
        };
        self.resources
            .iter()
            .filter(|gr| gr.group == info.api_group)
            .any(|gr| {
                if gr.resources.is_empty() {
                    return true;
                }
                if !gr.resource_names.is_empty() && !gr.resource_names.contains(&info.name) {
                    return false;
                }
                gr.resources.iter().any(|res| {
                    res == "*"
                        || *res == combined
                        || (!info.subresource.is_empty()
                            && res.strip_prefix("*/") == Some(info.subresource.as_str()))
                        || res.strip_suffix("/*") == Some(info.resource.as_str())
                })
            })
    }
}

/// `*` matches every path, `/a*` every path that starts with `/a`, anything else itself.
fn path_matches(path: &str, spec: &str) -> bool {
    spec == "*"
        || spec == path
        || spec
            .strip_suffix('*')
            .is_some_and(|prefix| path.starts_with(prefix.trim_end_matches('*')))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request_info::parse_request;
    use http::Method;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        }
    }

    fn req(method: Method, path: &str) -> RequestInfo {
        parse_request(&method, path, None)
    }

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  # Nothing about the scheduler's own reads.
  - level: None
    users: ["system:kube-scheduler"]
    verbs: ["get", "list", "watch"]
  - level: None
    userGroups: ["system:nodes"]
    resources:
      - group: ""
        resources: ["nodes/status", "*/log"]
  - level: RequestResponse
    resources:
      - group: ""
        resources: ["pods"]
    omitStages: ["ResponseStarted"]
    omitManagedFields: true
  - level: Request
    resources:
      - group: ""
        resources: ["configmaps"]
        resourceNames: ["cluster-info"]
  - level: Metadata
    resources:
      - group: ""
        resources: ["secrets", "configmaps"]
  - level: Metadata
    resources:
      - group: "apps"
        resources: ["deployments/*"]
      - group: "rbac.authorization.k8s.io"
  - level: Request
    namespaces: ["kube-system"]
  - level: Metadata
    nonResourceURLs: ["/healthz*", "/version"]
"#;

    #[test]
    fn the_first_matching_rule_wins() {
        let p = Policy::parse(POLICY).unwrap();
        let admin = user("admin", &["system:masters"]);
        let sched = user("system:kube-scheduler", &["system:authenticated"]);
        let pods = req(Method::GET, "/api/v1/namespaces/default/pods");
        assert_eq!(p.evaluate(Some(&admin), &pods).level, Level::RequestResponse);
        // The scheduler's reads hit the first rule, its writes fall through.
        assert_eq!(p.evaluate(Some(&sched), &pods).level, Level::None);
        let bind = req(Method::POST, "/api/v1/namespaces/default/pods/web/binding");
        assert_eq!(
            p.evaluate(Some(&sched), &bind).level,
            Level::None,
            "pods/binding is not pods"
        );
        let create = req(Method::POST, "/api/v1/namespaces/default/pods");
        assert_eq!(p.evaluate(Some(&sched), &create).level, Level::RequestResponse);
        // resourceNames narrow a rule; the next rule catches the other names.
        let ci = req(
            Method::GET,
            "/api/v1/namespaces/kube-public/configmaps/cluster-info",
        );
        assert_eq!(p.evaluate(Some(&admin), &ci).level, Level::Request);
        let other = req(Method::GET, "/api/v1/namespaces/kube-public/configmaps/x");
        assert_eq!(p.evaluate(Some(&admin), &other).level, Level::Metadata);
        // Namespaces: anything else in kube-system.
        let sa = req(Method::GET, "/api/v1/namespaces/kube-system/serviceaccounts");
        assert_eq!(p.evaluate(Some(&admin), &sa).level, Level::Request);
        let sa = req(Method::GET, "/api/v1/namespaces/default/serviceaccounts");
        assert_eq!(p.evaluate(Some(&admin), &sa).level, Level::None, "no rule: None");
    }

    #[test]
    fn wildcards_subresources_and_groups() {
        let p = Policy::parse(POLICY).unwrap();
        let kubelet = user("system:node:n1", &["system:nodes", "system:authenticated"]);
        let admin = user("admin", &["system:masters"]);
        let status = req(Method::PUT, "/api/v1/nodes/n1/status");
        assert_eq!(p.evaluate(Some(&kubelet), &status).level, Level::None);
        let log = req(Method::GET, "/api/v1/namespaces/default/pods/web/log");
        assert_eq!(p.evaluate(Some(&kubelet), &log).level, Level::None, "*/log");
        // Another user's pods/log is not pods: nothing matches it.
        assert_eq!(p.evaluate(Some(&admin), &log).level, Level::None);
        let scale = req(
            Method::PUT,
            "/apis/apps/v1/namespaces/default/deployments/web/scale",
        );
        assert_eq!(
            p.evaluate(Some(&admin), &scale).level,
            Level::Metadata,
            "deployments/*"
        );
        let deploy = req(Method::PUT, "/apis/apps/v1/namespaces/default/deployments/web");
        // As upstream's checker, `deployments/*` matches the resource itself too.
        assert_eq!(p.evaluate(Some(&admin), &deploy).level, Level::Metadata);
        let rs = req(Method::PUT, "/apis/apps/v1/namespaces/default/replicasets/web");
        assert_eq!(p.evaluate(Some(&admin), &rs).level, Level::None);
        // A group without resources: all of it.
        let roles = req(Method::GET, "/apis/rbac.authorization.k8s.io/v1/clusterroles");
        assert_eq!(p.evaluate(Some(&admin), &roles).level, Level::Metadata);
        // Non-resource URLs with a trailing '*'; never for resource requests.
        for (path, level) in [
            ("/healthz", Level::Metadata),
            ("/healthz/etcd", Level::Metadata),
            ("/version", Level::Metadata),
            ("/version/x", Level::None),
            ("/metrics", Level::None),
        ] {
            assert_eq!(
                p.evaluate(Some(&admin), &req(Method::GET, path)).level,
                level,
                "{path}"
            );
        }
        // An unauthenticated request matches no rule that names users or groups.
        assert_eq!(
            p.evaluate(None, &req(Method::GET, "/healthz")).level,
            Level::Metadata
        );
        let wide = Policy::parse(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n  resources:\n  - group: \"\"\n    resources: [\"*\"]\n",
        )
        .unwrap();
        assert_eq!(
            wide.evaluate(Some(&admin), &log).level,
            Level::Metadata,
            "* covers subresources"
        );
        assert_eq!(
            wide.evaluate(Some(&admin), &scale).level,
            Level::None,
            "other group"
        );
    }

    #[test]
    fn omitted_stages_and_managed_fields() {
        let p = Policy::parse(POLICY).unwrap();
        let admin = user("admin", &["system:masters"]);
        let pods = p.evaluate(Some(&admin), &req(Method::GET, "/api/v1/namespaces/default/pods"));
        assert_eq!(
            pods.omit_stages,
            vec![Stage::RequestReceived, Stage::ResponseStarted],
            "the union of the policy's and the rule's"
        );
        assert!(pods.omit_managed_fields);
        let secrets = p.evaluate(
            Some(&admin),
            &req(Method::GET, "/api/v1/namespaces/default/secrets"),
        );
        assert_eq!(secrets.omit_stages, vec![Stage::RequestReceived]);
        assert!(!secrets.omit_managed_fields);
    }

    #[test]
    fn json_policies_and_invalid_ones() {
        let p = Policy::parse(
            r#"{"apiVersion":"audit.k8s.io/v1","kind":"Policy","omitManagedFields":true,
                "rules":[{"level":"Request","verbs":["create"]}]}"#,
        )
        .unwrap();
        let create = req(Method::POST, "/api/v1/namespaces/default/configmaps");
        let c = p.evaluate(None, &create);
        assert_eq!((c.level, c.omit_managed_fields), (Level::Request, true));
        for bad in [
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: []\n",
            "apiVersion: audit.k8s.io/v1beta1\nkind: Policy\nrules:\n- level: None\n",
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Everything\n",
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  omitStages: [Later]\n",
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  nonResourceURLs: [\"/a*b\"]\n",
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  namespaces: [a]\n  nonResourceURLs: [\"/a\"]\n",
        ] {
            assert!(Policy::parse(bad).is_err(), "{bad}");
        }
    }
}
