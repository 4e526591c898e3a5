//! Authorization: an ordered list of authorizers; the first to allow admits the request, a
//! deny stops it, and if none allows it is 403 Forbidden (the reference document's
//! "Authorization" stage).

pub mod abac;
pub mod node;
pub mod webhook;

use async_trait::async_trait;

use crate::authn::UserInfo;
use crate::request_info::RequestInfo;

pub enum Decision {
    /// Allowed, and why (upstream's reason: RBAC names the binding, others say nothing).
    Allow(String),
    Deny(String),
    NoOpinion,
}

#[async_trait]
pub trait Authorizer: Send + Sync {
    fn name(&self) -> &'static str;
    async fn authorize(&self, user: &UserInfo, request: &RequestInfo) -> Decision;
}

/// Cloned where something besides the request path asks (admission policies' `authorizer`).
#[derive(Default, Clone)]
pub struct AuthorizerChain {
    authorizers: Vec<std::sync::Arc<dyn Authorizer>>,
}

impl AuthorizerChain {
    pub fn push(&mut self, a: impl Authorizer + 'static) {
        self.authorizers.push(std::sync::Arc::new(a));
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.authorizers.iter().map(|a| a.name()).collect()
    }

    /// `Ok` with the reason of the authorizer that allows; otherwise the reason of the one that
    /// denied, if any.
    pub async fn authorize(&self, user: &UserInfo, request: &RequestInfo) -> Result<String, Option<String>> {
        for a in &self.authorizers {
            match a.authorize(user, request).await {
                Decision::Allow(reason) => {
                    // The journey's authz stage (`r8s trace`) names who allowed it.
                    tracing::Span::current().record("authorizer", a.name());
                    return Ok(reason);
                }
                Decision::Deny(reason) => {
                    tracing::Span::current().record("authorizer", a.name());
                    return Err(Some(reason));
                }
                Decision::NoOpinion => {}
            }
        }
        Err(None)
    }
}

/// Members of these groups may do anything: upstream's `system:masters`, which no RBAC rule
/// can restrict.
pub struct PrivilegedGroups(pub Vec<String>);

impl PrivilegedGroups {
    pub fn masters() -> Self {
        Self(vec!["system:masters".into()])
    }
}

#[async_trait]
impl Authorizer for PrivilegedGroups {
    fn name(&self) -> &'static str {
        "privileged-groups"
    }

    async fn authorize(&self, user: &UserInfo, _: &RequestInfo) -> Decision {
        if user.groups.iter().any(|g| self.0.contains(g)) {
            Decision::Allow(String::new())
        } else {
            Decision::NoOpinion
        }
    }
}

/// `--authorization-mode=AlwaysAllow`: everything is allowed.
pub struct AlwaysAllow;

#[async_trait]
impl Authorizer for AlwaysAllow {
    fn name(&self) -> &'static str {
        "AlwaysAllow"
    }
    async fn authorize(&self, _: &UserInfo, _: &RequestInfo) -> Decision {
        Decision::Allow(String::new())
    }
}

/// `--authorization-mode=AlwaysDeny`: everything is refused (system:masters still passes, as
/// upstream's privileged-group authorizer comes first).
pub struct AlwaysDeny;

#[async_trait]
impl Authorizer for AlwaysDeny {
    fn name(&self) -> &'static str {
        "AlwaysDeny"
    }
    async fn authorize(&self, _: &UserInfo, _: &RequestInfo) -> Decision {
        Decision::Deny("Everything is forbidden.".into())
    }
}

/// The message of a 403, in upstream's words.
pub fn forbidden_message(user: &UserInfo, r: &RequestInfo, reason: Option<&str>) -> String {
    let mut msg = if r.is_resource_request {
        let resource = if r.subresource.is_empty() {
            r.resource.clone()
        } else {
            format!("{}/{}", r.resource, r.subresource)
        };
        let what = if r.name.is_empty() {
            resource.clone()
        } else {
            format!("{resource} \"{}\"", r.name)
        };
        let scope = if r.namespace.is_empty() || r.resource == "namespaces" {
            "at the cluster scope".to_owned()
        } else {
            format!("in the namespace \"{}\"", r.namespace)
        };
        format!(
            "{what} is forbidden: User \"{}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}",
            user.name, r.verb, r.api_group
        )
    } else {
        format!(
            "forbidden: User \"{}\" cannot {} path \"{}\"",
            user.name, r.verb, r.path
        )
    };
    if let Some(reason) = reason.filter(|r| !r.is_empty()) {
        msg.push_str(": ");
        msg.push_str(reason);
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(groups: &[&str]) -> UserInfo {
        UserInfo {
            name: "bob".into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn masters_are_allowed_others_are_forbidden() {
        let mut chain = AuthorizerChain::default();
        chain.push(PrivilegedGroups::masters());
        let r =
            crate::request_info::parse_request(&http::Method::GET, "/api/v1/namespaces/default/pods", None);
        assert!(chain.authorize(&user(&["system:masters"]), &r).await.is_ok());
        assert_eq!(chain.authorize(&user(&["dev"]), &r).await, Err(None));
        assert_eq!(
            forbidden_message(&user(&[]), &r, None),
            "pods is forbidden: User \"bob\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
        );
        let n = crate::request_info::parse_request(&http::Method::GET, "/api/v1/nodes/n1", None);
        assert_eq!(
            forbidden_message(&user(&[]), &n, None),
            "nodes \"n1\" is forbidden: User \"bob\" cannot get resource \"nodes\" in API group \"\" at the cluster scope"
        );
    }
}
