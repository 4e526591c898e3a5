//! The filter chain and dispatch: authentication → audit → impersonation → authorization →
//! the endpoints (health, OpenAPI, discovery, or `endpoints` for resources, which call the
//! registry; admission runs inside the registry's writes, where the object is known).

use std::net::SocketAddr;
use std::sync::Arc;

use crate::http::RequestBody;
use http::{header, Request, Response, StatusCode};
use http_body_util::BodyExt;

use crate::audit::RequestAudit;
use crate::authn::{AuthnRequest, UserInfo};
use crate::context::Ctx;
use crate::http::{error_response, json_response, text_response, Body};
use crate::request_info::parse_request;
use crate::status::ApiError;
use crate::{discovery, health, Shared};

pub(crate) async fn handle(
    shared: Arc<Shared>,
    req: Request<RequestBody>,
    peer_certificates: Arc<crate::authn::PeerCertificates>,
    peer: SocketAddr,
) -> Response<Body> {
    let origin = crate::audit::Origin::new(req.headers(), peer);
    // `/trace/<object path>` is authorized, audited and limited as a get of the object.
    let info = crate::journey::authorized_as(req.uri().path(), req.uri().query())
        .unwrap_or_else(|| parse_request(req.method(), req.uri().path(), req.uri().query()));
    let apply = req
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/apply-patch"));
    let dry_run = req
        .uri()
        .query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "dryRun=All"));
    let metrics_info = info.clone();
    let began = std::time::Instant::now();
    // The journey `r8s trace` tells: a span for a write, its stages as children.
    let journey = crate::journey::request(&info, &origin.audit_id);
    let mut resp = tracing::Instrument::instrument(
        authenticated(shared.clone(), req, info, peer_certificates, &origin),
        journey.clone(),
    )
    .await;
    journey.record("code", resp.status().as_u16());
    shared.metrics.observe(
        &metrics_info,
        apply,
        dry_run,
        resp.status().as_u16(),
        began.elapsed().as_secs_f64(),
    );
    // Every response names its audit ID, as upstream's.
    if let Ok(id) = http::HeaderValue::from_str(&origin.audit_id) {
        resp.headers_mut()
            .entry(crate::audit::AUDIT_ID_HEADER)
            .or_insert(id);
    }
    resp
}

async fn authenticated(
    shared: Arc<Shared>,
    req: Request<RequestBody>,
    info: crate::request_info::RequestInfo,
    peer_certificates: Arc<crate::authn::PeerCertificates>,
    origin: &crate::audit::Origin,
) -> Response<Body> {
    // Authentication: first success wins; all failing is 401.
    let authn = tracing::Instrument::instrument(
        shared.authenticators.authenticate(&AuthnRequest {
            headers: req.headers(),
            peer_certificates: &peer_certificates,
            path: req.uri().path(),
            audiences: None,
        }),
        crate::journey::stage!(
            "authn",
            authenticator = tracing::field::Empty,
            user = tracing::field::Empty
        ),
    )
    .await;
    let begin_audit = |user: Option<&UserInfo>, req: &Request<RequestBody>| match &shared.audit {
        Some(auditor) => auditor.begin(origin, req.uri(), req.headers(), &info, user),
        None => RequestAudit::disabled(),
    };
    let user = match authn {
        Ok(user) => user,
        Err(errors) => {
            tracing::debug!(path = %info.path, ?errors, "authn: request rejected");
            let resp = error_response(&ApiError::unauthorized("Unauthorized"));
            return begin_audit(None, &req).failed_authentication(resp).await;
        }
    };

    // Audit: the policy decides, for the authenticated user, how much of this request is
    // recorded; the request is received now.
    let audit = begin_audit(Some(&user), &req);
    audit.emit(crate::audit::Stage::RequestReceived);
    let long_running = crate::audit::is_long_running(&info);
    // A handler that panics answers 500 (and is audited so) instead of taking the connection.
    let rest = impersonated(shared, req, info, user, audit.clone());
    crate::audit::guarded(&audit, long_running, rest).await
}

async fn impersonated(
    shared: Arc<Shared>,
    mut req: Request<RequestBody>,
    info: crate::request_info::RequestInfo,
    mut user: UserInfo,
    audit: RequestAudit,
) -> Response<Body> {
    // Impersonation: act as another user once the authorizers allow it.
    if crate::authn::impersonation::requested(req.headers()) {
        match crate::authn::impersonation::impersonate(&shared.authorizers, &user, req.headers()).await {
            Ok(as_user) => user = as_user,
            Err(e) => return error_response(&e),
        }
        audit.impersonated(&user);
        let names: Vec<_> = req
            .headers()
            .keys()
            .filter(|k| k.as_str().starts_with("impersonate-"))
            .cloned()
            .collect();
        for n in names {
            req.headers_mut().remove(n);
        }
    }
    // The credentials go no further than authentication.
    req.headers_mut().remove(header::AUTHORIZATION);
    // API priority and fairness: a seat in the request's priority level, held until the
    // response is made (or 429).
    let long_running = crate::audit::is_long_running(&info);
    let seat = match shared.flow_control.admit(&user, &info, long_running).await {
        Ok(seat) => seat,
        Err(rejected) => {
            tracing::debug!(reason = rejected.reason, user = %user.name, "flow control: rejected");
            let mut resp = error_response(
                &ApiError::new(
                    429,
                    "TooManyRequests",
                    "Too many requests, please try again later.",
                )
                .with_details(serde_json::json!({"retryAfterSeconds": 1})),
            );
            resp.headers_mut()
                .insert(header::RETRY_AFTER, http::HeaderValue::from_static("1"));
            flow_headers(&mut resp, &rejected.headers);
            return resp;
        }
    };
    let mut resp = authorized(shared, req, info, user, audit).await;
    if let Some(h) = &seat.headers {
        flow_headers(&mut resp, h);
    }
    drop(seat);
    resp
}

/// Upstream's `X-Kubernetes-PF-FlowSchema-UID` and `X-Kubernetes-PF-PriorityLevel-UID`.
fn flow_headers(resp: &mut Response<Body>, (schema, level): &(String, String)) {
    for (name, value) in [
        ("x-kubernetes-pf-flowschema-uid", schema),
        ("x-kubernetes-pf-prioritylevel-uid", level),
    ] {
        if let Ok(v) = http::HeaderValue::from_str(value) {
            resp.headers_mut().insert(name, v);
        }
    }
}

async fn authorized(
    shared: Arc<Shared>,
    req: Request<RequestBody>,
    info: crate::request_info::RequestInfo,
    user: crate::authn::UserInfo,
    audit: RequestAudit,
) -> Response<Body> {
    // Authorization: any allow admits; otherwise 403.
    let journey = crate::journey::current();
    journey.record("user", user.name.as_str());
    let authz = crate::journey::stage!(
        "authz",
        authorizer = tracing::field::Empty,
        decision = tracing::field::Empty,
        error = tracing::field::Empty
    );
    let verdict =
        tracing::Instrument::instrument(shared.authorizers.authorize(&user, &info), authz.clone()).await;
    match verdict {
        Ok(reason) => {
            authz.record(
                "decision",
                if reason.is_empty() {
                    "allowed"
                } else {
                    reason.as_str()
                },
            );
            audit.authorization(true, &reason)
        }
        Err(reason) => {
            authz.record("error", reason.as_deref().unwrap_or("no authorizer allowed it"));
            audit.authorization(false, reason.as_deref().unwrap_or(""));
            let msg = crate::authz::forbidden_message(&user, &info, reason.as_deref());
            tracing::debug!(%msg, "authz: forbidden");
            return error_response(&ApiError::forbidden(msg));
        }
    }

    // The stage ends with the verdict, not with the request.
    drop(authz);
    let ctx = Ctx {
        query: req.uri().query().map(str::to_owned),
        user_agent: req
            .headers()
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned(),
        shared,
        info,
        user,
        warnings: Default::default(),
        audit,
        journey,
    };
    let warnings = ctx.warnings.clone();
    let deadline = match request_deadline(&ctx.info, ctx.query.as_deref(), ctx.shared.request_timeout) {
        Ok(d) => d,
        Err(err) => return error_response(&err),
    };
    let result = match deadline {
        None => route(ctx, req).await,
        // As upstream's finisher: the handler runs on (a write may still land) while the
        // client is told it did not complete in time.
        Some(timeout) => {
            let mut handler = tokio::spawn(tracing::Instrument::in_current_span(route(ctx, req)));
            match tokio::time::timeout(timeout, &mut handler).await {
                Ok(Ok(result)) => result,
                // A panic goes on to the panic guard around the chain.
                Ok(Err(e)) => std::panic::resume_unwind(e.into_panic()),
                Err(_) => Err(timed_out()),
            }
        }
    };
    let resp = match result {
        Ok(resp) => resp,
        Err(err) => error_response(&err),
    };
    crate::http::with_warnings(resp, &warnings.take())
}

/// The 504 of a request that outlived its deadline (upstream's `NewTimeoutError` from the
/// finisher, with its empty details).
fn timed_out() -> ApiError {
    ApiError::new(
        504,
        "Timeout",
        "Timeout: request did not complete within requested timeout - context deadline exceeded",
    )
    .with_details(serde_json::json!({}))
}

/// How long a request may take (upstream's `WithRequestDeadline`): `None` for long-running
/// requests (watches keep their own `timeoutSeconds`); otherwise the request's `timeout`
/// parameter when it is shorter than the server's `--request-timeout` and positive, else that.
fn request_deadline(
    info: &crate::request_info::RequestInfo,
    query: Option<&str>,
    request_timeout: std::time::Duration,
) -> Result<Option<std::time::Duration>, ApiError> {
    if crate::audit::is_long_running(info) {
        return Ok(None);
    }
    let value = form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .find(|(k, _)| k == "timeout")
        .map(|(_, v)| v.into_owned())
        .filter(|v| !v.is_empty());
    let Some(value) = value else {
        return Ok(Some(request_timeout));
    };
    // Go's ParseDuration takes a negative duration, which then means "the server's".
    let asked = match value.strip_prefix('-') {
        Some(rest) => r8s_api::duration::parse(rest).map(|_| std::time::Duration::ZERO),
        None => r8s_api::duration::parse(&value),
    }
    .map_err(|e| ApiError::bad_request(format!("invalid timeout specified in the request URL - {e}")))?;
    Ok(Some(if asked.is_zero() || asked > request_timeout {
        request_timeout
    } else {
        asked
    }))
}

async fn route(ctx: Ctx, req: Request<RequestBody>) -> Result<Response<Body>, ApiError> {
    if req.uri().path().starts_with("/trace/") && ctx.info.is_resource_request {
        // A browser (HTML first in its Accept) gets the page; clients get JSON.
        let html = req
            .headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .and_then(|a| a.split(',').next())
            .is_some_and(|first| first.trim().starts_with("text/html"));
        return crate::journey::story(&ctx, html).await;
    }
    let path = ctx.info.path.trim_end_matches('/').to_owned();
    let path = if path.is_empty() { "/".to_owned() } else { path };
    if let Some(resp) = health::route(&ctx, &path).await {
        return Ok(resp);
    }
    if let Some(resp) = crate::openapi::route(&ctx.shared, &path, req.headers()) {
        return Ok(resp);
    }
    if path == "/metrics" {
        let mut resp = text_response(StatusCode::OK, ctx.shared.metrics.render());
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            http::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        );
        return Ok(resp);
    }
    if let Some(tokens) = ctx.shared.service_account_tokens.as_ref() {
        // Service-account issuer discovery, for relying parties that verify our tokens.
        if path == "/.well-known/openid-configuration" {
            let alg = tokens.jwks()["keys"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|k| k["alg"].as_str())
                .collect::<Vec<_>>();
            return Ok(json_response(
                StatusCode::OK,
                &serde_json::json!({
                    "issuer": tokens.issuer,
                    "jwks_uri": format!("https://{}/openid/v1/jwks", ctx.shared.advertise),
                    "response_types_supported": ["id_token"],
                    "subject_types_supported": ["public"],
                    "id_token_signing_alg_values_supported": alg,
                }),
            ));
        }
        if path == "/openid/v1/jwks" {
            return Ok(json_response(StatusCode::OK, tokens.jwks()));
        }
    }
    if path == "/version" {
        return Ok(json_response(StatusCode::OK, &crate::discovery::version()));
    }
    // A group version another API server serves (an APIService with a service): proxied,
    // its discovery document included.
    if let Some(rest) = path.strip_prefix("/apis/") {
        let mut parts = rest.splitn(3, '/');
        if let (Some(g), Some(v)) = (parts.next(), parts.next()) {
            if ctx.shared.served.current().find_group_version(g, v).is_none() {
                if let Some(route) = ctx.shared.aggregator.route(g, v) {
                    return crate::aggregator::proxy(&ctx.shared, &route, &ctx.user, req).await;
                }
            }
        }
    }
    if let Some(resp) = discovery::route(&ctx, &path, req.headers()) {
        return resp;
    }
    if ctx.info.is_resource_request
        && ctx.info.api_group.is_empty()
        && ctx.info.resource == "pods"
        && matches!(ctx.info.subresource.as_str(), "exec" | "attach" | "portforward")
    {
        // Streams: the connection is upgraded and joined to the kubelet's, not read here.
        return crate::endpoints::kubelet::stream(&ctx, req).await;
    }
    if ctx.info.is_resource_request
        && ctx.info.api_group.is_empty()
        && ctx.info.resource == "pods"
        && ctx.info.subresource == "log"
        && crate::endpoints::kubelet::is_websocket(req.headers())
    {
        // A log read over WebSocket (upstream's wsstream reader): upgraded here.
        return crate::endpoints::kubelet::pod_log_websocket(&ctx, req).await;
    }
    if ctx.info.is_resource_request {
        let (parts, body) = req.into_parts();
        // Read the body now: handlers work on whole objects.
        let body = body
            .collect()
            .await
            .map_err(|e| ApiError::bad_request(format!("reading the request body: {e}")))?
            .to_bytes();
        return crate::endpoints::resource(&ctx, &parts.method, &parts.headers, body).await;
    }
    Err(ApiError::not_found_path())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn deadline(method: http::Method, path: &str, query: &str) -> Result<Option<Duration>, ApiError> {
        let info = parse_request(&method, path, Some(query));
        request_deadline(&info, Some(query), Duration::from_secs(60))
    }

    /// Upstream's `WithRequestDeadline`: the server's timeout unless the request asks for less;
    /// zero, negative or larger asks mean the server's; a malformed one is a 400; long-running
    /// requests have none.
    #[test]
    fn the_deadline_is_the_servers_or_the_shorter_one_asked_for() {
        let pods = "/api/v1/namespaces/default/pods";
        let post = || http::Method::POST;
        assert_eq!(deadline(post(), pods, "").unwrap(), Some(Duration::from_secs(60)));
        assert_eq!(
            deadline(post(), pods, "timeout=3s").unwrap(),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            deadline(post(), pods, "timeout=1m30s").unwrap(),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            deadline(post(), pods, "timeout=0s").unwrap(),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            deadline(post(), pods, "timeout=-5s").unwrap(),
            Some(Duration::from_secs(60))
        );
        let err = deadline(post(), pods, "timeout=foo").unwrap_err();
        assert_eq!((err.code, err.reason), (400, "BadRequest"));
        assert_eq!(
            err.message,
            "invalid timeout specified in the request URL - time: invalid duration \"foo\""
        );
        assert_eq!(
            deadline(http::Method::GET, pods, "watch=true&timeout=1s").unwrap(),
            None
        );
        assert_eq!(
            deadline(http::Method::GET, &format!("{pods}/x/log"), "timeout=1s").unwrap(),
            None
        );
        let t = timed_out().to_status();
        assert_eq!(t["code"], 504);
        assert_eq!(t["reason"], "Timeout");
        assert_eq!(t["details"], serde_json::json!({}));
    }
}
