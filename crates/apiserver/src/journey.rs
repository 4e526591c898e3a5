//! The API server's part of the journey `r8s trace` tells (`r8s_trace`): a span per write
//! request with its authentication, authorization, admission plugins and store write as
//! children, and the endpoint that gathers one object's story.
//!
//! Only writes are told: a read changes nothing in anyone's journey. Leases and Events are
//! left out too: heartbeats every few seconds would push the stories out of the ring.

use serde_json::Value;
use tracing::Span;

use crate::request_info::RequestInfo;

/// Whether `span` is a journey span (so its children are worth making).
pub(crate) fn is_journey(span: &Span) -> bool {
    span.metadata()
        .is_some_and(|m| m.target().starts_with(r8s_trace::TARGET_PREFIX))
}

/// The current span if it is a journey span, else none.
pub(crate) fn current() -> Span {
    let span = Span::current();
    if is_journey(&span) {
        span
    } else {
        Span::none()
    }
}

/// A child stage of the current request's journey span (none when the request is not told).
macro_rules! stage {
    ($name:literal $(, $($fields:tt)*)?) => {
        if $crate::journey::is_journey(&tracing::Span::current()) {
            tracing::info_span!(target: "journey::apiserver", $name $(, $($fields)*)?)
        } else {
            tracing::Span::none()
        }
    };
}
pub(crate) use stage;

/// The span of a request, none unless it is a write worth telling.
pub(crate) fn request(info: &RequestInfo, audit_id: &str) -> Span {
    let told = info.is_resource_request
        && matches!(info.verb.as_str(), "create" | "update" | "patch" | "delete")
        && !matches!(info.resource.as_str(), "leases" | "events")
        && !(info.verb == "create" && info.resource.ends_with("reviews"));
    if !told {
        return Span::none();
    }
    let mut object = info.resource.clone();
    if !info.namespace.is_empty() {
        object.push(' ');
        object.push_str(&info.namespace);
        object.push('/');
    } else if !info.name.is_empty() {
        object.push(' ');
    }
    object.push_str(&info.name);
    let span = tracing::info_span!(
        target: "journey::apiserver",
        "request",
        verb = %info.verb,
        subresource = tracing::field::Empty,
        object = %object,
        audit_id = %audit_id,
        user = tracing::field::Empty,
        uid = tracing::field::Empty,
        owner = tracing::field::Empty,
        revision = tracing::field::Empty,
        code = tracing::field::Empty,
    );
    if !info.subresource.is_empty() {
        span.record("subresource", info.subresource.as_str());
    }
    span
}

/// Name the object a request wrote on its span: its uid, its controller (the `owner` that
/// joins it to the story of the object that made it), `Kind namespace/name` and the revision.
pub(crate) fn written(span: &Span, obj: &Value, revision: Option<i64>) {
    if span.is_none() {
        return;
    }
    let meta = &obj["metadata"];
    if let Some(uid) = meta["uid"].as_str() {
        span.record("uid", uid);
    }
    let controller = meta["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|o| o["controller"].as_bool() == Some(true));
    if let Some(owner) = controller.and_then(|o| o["uid"].as_str()) {
        span.record("owner", owner);
    }
    let kind = obj["kind"].as_str().unwrap_or("");
    let name = meta["name"].as_str().unwrap_or("");
    let object = match meta["namespace"].as_str() {
        Some(ns) if !ns.is_empty() => format!("{kind} {ns}/{name}"),
        _ => format!("{kind} {name}"),
    };
    span.record("object", object.trim_start());
    if let Some(rv) = revision {
        span.record("revision", rv);
    }
}

/// The path prefix of the endpoint that tells an object's story: `/trace` followed by the
/// object's own path (`/trace/apis/apps/v1/namespaces/default/deployments/nginx`).
pub(crate) const PATH_PREFIX: &str = "/trace";

/// The request a `/trace/<object path>` request is authorized as: a get of the object, so
/// whoever may read an object may read its story, and no one else.
pub(crate) fn authorized_as(path: &str, query: Option<&str>) -> Option<RequestInfo> {
    let inner = path.strip_prefix(PATH_PREFIX)?;
    if !(inner.starts_with("/api/") || inner.starts_with("/apis/")) {
        return None;
    }
    let info = crate::request_info::parse_request(&http::Method::GET, inner, query);
    Some(info).filter(|i| i.is_resource_request && i.verb == "get" && i.subresource.is_empty())
}

/// `GET /trace/<object path>`: the object's story as this server's process recorded it, as
/// JSON (`r8s trace` renders it).
pub(crate) async fn story(
    ctx: &crate::context::Ctx,
) -> Result<http::Response<crate::http::Body>, crate::status::ApiError> {
    use crate::status::ApiError;
    let info = &ctx.info;
    let served = ctx.shared.served.current();
    let def = served
        .find(&info.api_group, &info.api_version, &info.resource)
        .ok_or_else(ApiError::not_found_path)?;
    let obj = crate::registry::read(ctx, def, &info.namespace, &info.name).await?;
    let uid = obj["metadata"]["uid"].as_str().unwrap_or_default();
    let stages = r8s_trace::journal().story(uid);
    let body = serde_json::json!({
        "kind": "Trace",
        "apiVersion": "r8s.io/v1",
        "object": {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "namespace": obj["metadata"]["namespace"],
            "name": obj["metadata"]["name"],
            "uid": uid,
        },
        "stages": stages,
    });
    Ok(crate::http::json_response(http::StatusCode::OK, &body))
}
