//! The request context: what an endpoint, the registry and admission know of the request once
//! the filters (authentication, audit, impersonation, authorization) have passed it.

use std::sync::Arc;

use crate::audit::RequestAudit;
use crate::authn::UserInfo;
use crate::request_info::RequestInfo;
use crate::Shared;

/// What a handler needs of the request after the filters.
pub(crate) struct Ctx {
    pub shared: Arc<Shared>,
    pub info: RequestInfo,
    pub user: UserInfo,
    pub query: Option<String>,
    /// The client's User-Agent, which names its field manager when it does not.
    pub user_agent: String,
    /// Warnings for the client, sent as `Warning` headers with the response (success or not).
    pub warnings: crate::admission::Warnings,
    /// The request's audit record (handlers add the request object to it).
    pub audit: RequestAudit,
    /// The request's journey span (`r8s trace`), none for a request that is not told.
    pub journey: tracing::Span,
}

impl Ctx {
    /// The field manager of a write: `?fieldManager=`, else the User-Agent's program name
    /// (`kubectl/v1.33 (...)` → `kubectl`), as upstream does.
    pub fn field_manager(&self) -> String {
        let query = crate::registry::Query::parse(self.query.as_deref());
        if let Some(m) = query.get("fieldManager") {
            return m.to_owned();
        }
        let ua = self.user_agent.split('/').next().unwrap_or("").trim();
        if ua.is_empty() {
            "unknown".to_owned()
        } else {
            ua.chars().take(128).collect()
        }
    }
}
