//! ABAC (`--authorization-mode=ABAC`, `--authorization-policy-file`): one
//! `abac.authorization.kubernetes.io/v1beta1` Policy per line; a request is allowed when some
//! policy's subject (user or group, `*` for any) and its attributes (namespace, resource,
//! apiGroup, or nonResourcePath; `readonly` for get/list/watch only) match, as upstream's ABAC.

use std::path::Path;

use async_trait::async_trait;
use serde::Deserialize;

use super::{Authorizer, Decision};
use crate::authn::UserInfo;
use crate::request_info::RequestInfo;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Spec {
    user: String,
    group: String,
    readonly: bool,
    api_group: String,
    resource: String,
    namespace: String,
    non_resource_path: String,
}

#[derive(Deserialize)]
struct Policy {
    #[serde(rename = "apiVersion", default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    spec: Spec,
}

pub struct AbacAuthorizer {
    policies: Vec<Spec>,
}

impl AbacAuthorizer {
    pub fn from_file(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let mut policies = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let p: Policy = serde_json::from_str(line).map_err(|e| format!("line {}: {e}", i + 1))?;
            if p.api_version != "abac.authorization.kubernetes.io/v1beta1" || p.kind != "Policy" {
                return Err(format!(
                    "line {}: want apiVersion abac.authorization.kubernetes.io/v1beta1 and kind Policy",
                    i + 1
                ));
            }
            policies.push(p.spec);
        }
        Ok(Self { policies })
    }
}

fn star_or(pattern: &str, value: &str) -> bool {
    pattern == "*" || pattern == value
}

fn matches(p: &Spec, user: &UserInfo, r: &RequestInfo) -> bool {
    let user_ok = !p.user.is_empty() && star_or(&p.user, &user.name);
    let group_ok = !p.group.is_empty() && (p.group == "*" || user.groups.contains(&p.group));
    if !user_ok && !group_ok {
        return false;
    }
    if p.readonly && !matches!(r.verb.as_str(), "get" | "list" | "watch") {
        return false;
    }
    if r.is_resource_request {
        // Empty matches empty: `"namespace": ""` is the cluster scope, `"apiGroup": ""` core.
        star_or(&p.namespace, &r.namespace)
            && star_or(&p.resource, &r.resource)
            && star_or(&p.api_group, &r.api_group)
    } else {
        let np = &p.non_resource_path;
        !np.is_empty()
            && (np == "*"
                || *np == r.path
                || np
                    .strip_suffix('*')
                    .is_some_and(|prefix| r.path.starts_with(prefix)))
    }
}

#[async_trait]
impl Authorizer for AbacAuthorizer {
    fn name(&self) -> &'static str {
        "ABAC"
    }

    async fn authorize(&self, user: &UserInfo, r: &RequestInfo) -> Decision {
        if self.policies.iter().any(|p| matches(p, user, r)) {
            Decision::Allow(String::new())
        } else {
            Decision::NoOpinion
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request_info::parse_request;
    use http::Method;

    #[tokio::test]
    async fn policies_match_subject_and_attributes() {
        let a = AbacAuthorizer::parse(concat!(
            r#"{"apiVersion": "abac.authorization.kubernetes.io/v1beta1", "kind": "Policy", "spec": {"user": "alice", "namespace": "*", "resource": "*", "apiGroup": "*"}}"#,
            "\n",
            r#"{"apiVersion": "abac.authorization.kubernetes.io/v1beta1", "kind": "Policy", "spec": {"group": "readers", "readonly": true, "namespace": "dev", "resource": "pods", "apiGroup": ""}}"#,
            "\n",
            r#"{"apiVersion": "abac.authorization.kubernetes.io/v1beta1", "kind": "Policy", "spec": {"group": "system:authenticated", "readonly": true, "nonResourcePath": "/apis/*"}}"#,
        ))
        .unwrap();
        let u = |name: &str, groups: &[&str]| UserInfo {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        };
        let allowed = |user: &UserInfo, m: Method, path: &str| {
            let r = parse_request(&m, path, None);
            let a = &a;
            let user = user.clone();
            async move { matches!(a.authorize(&user, &r).await, Decision::Allow(_)) }
        };
        assert!(
            allowed(
                &u("alice", &[]),
                Method::DELETE,
                "/apis/apps/v1/namespaces/x/deployments/d"
            )
            .await
        );
        let bob = u("bob", &["readers", "system:authenticated"]);
        assert!(allowed(&bob, Method::GET, "/api/v1/namespaces/dev/pods").await);
        assert!(!allowed(&bob, Method::POST, "/api/v1/namespaces/dev/pods").await);
        assert!(!allowed(&bob, Method::GET, "/api/v1/namespaces/prod/pods").await);
        assert!(!allowed(&bob, Method::GET, "/api/v1/namespaces/dev/secrets").await);
        assert!(allowed(&bob, Method::GET, "/apis/apps/v1").await);
        assert!(!allowed(&bob, Method::GET, "/metrics").await);
        assert!(AbacAuthorizer::parse(r#"{"kind": "Policy", "spec": {}}"#).is_err());
    }
}
