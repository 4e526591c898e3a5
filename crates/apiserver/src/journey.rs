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

/// About how many stages a told write leaves in the ring (the request, authn, authz, two
/// admission phases, the store write).
const STAGES_PER_REQUEST: usize = 6;
/// The ring's worth of requests is told at most once per this many seconds, on average.
const WINDOW_SECS: f64 = 10.0;

/// Writes not told because they came faster than the ring can hold them.
pub(crate) static UNTOLD: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Whether one more write may be told: a token bucket holding a ring's worth of requests,
/// refilled at a ring's worth per ten seconds. A story is told so that someone can read it;
/// writes coming faster than the ring can hold them for that long would only push each other
/// out, at a cost on every request, so beyond that rate a sample is told (and the rest
/// counted in `r8s_trace_requests_untold_total`).
fn within_budget() -> bool {
    struct Bucket {
        tokens: f64,
        at: std::time::Instant,
    }
    static BUCKET: std::sync::Mutex<Option<Bucket>> = std::sync::Mutex::new(None);
    let burst = (r8s_trace::journal().capacity() / STAGES_PER_REQUEST).max(1) as f64;
    let now = std::time::Instant::now();
    let mut bucket = BUCKET.lock().unwrap_or_else(|e| e.into_inner());
    let b = bucket.get_or_insert(Bucket {
        tokens: burst,
        at: now,
    });
    b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * burst / WINDOW_SECS).min(burst);
    b.at = now;
    if b.tokens >= 1.0 {
        b.tokens -= 1.0;
        true
    } else {
        UNTOLD.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        false
    }
}

/// The span of a request, none unless it is a write worth telling.
pub(crate) fn request(info: &RequestInfo, audit_id: &str) -> Span {
    let told = info.is_resource_request
        && matches!(info.verb.as_str(), "create" | "update" | "patch" | "delete")
        && !matches!(info.resource.as_str(), "leases" | "events")
        && !(info.verb == "create" && info.resource.ends_with("reviews"));
    if !told || !within_budget() {
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

/// At most how many nodes a Service's story asks for their proxy's and DNS's stages.
const MAX_NODES_ASKED: usize = 50;

/// `GET /trace/<object path>`: the object's story as this server's process and the kubelets of
/// its pods recorded it, as JSON (`r8s trace` renders it). A kubelet that cannot be asked is
/// named under `incomplete`.
pub(crate) async fn story(
    ctx: &crate::context::Ctx,
    html: bool,
) -> Result<http::Response<crate::http::Body>, crate::status::ApiError> {
    use crate::status::ApiError;
    let info = &ctx.info;
    let served = ctx.shared.served.current();
    let def = served
        .find(&info.api_group, &info.api_version, &info.resource)
        .ok_or_else(ApiError::not_found_path)?;
    let obj = crate::registry::read(ctx, def, &info.namespace, &info.name).await?;
    let uid = obj["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
    let local = r8s_trace::journal().story(&uid);
    // The kubelets keep the stages of their pods: each node with pods in the story is asked.
    let mut by_node: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    if obj["kind"] == "Pod" {
        if let Some(node) = obj["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
            by_node.entry(node.to_owned()).or_default().push(uid.clone());
        }
    }
    // Every node's proxy and DNS program a Service: each (up to a few dozen) is asked.
    if obj["kind"] == "Service" && info.api_group.is_empty() {
        if let Ok(nodes) = crate::resource_metrics::ready_nodes(&ctx.shared).await {
            for (node, _, _) in nodes.into_iter().take(MAX_NODES_ASKED) {
                by_node.entry(node).or_default().push(uid.clone());
            }
        }
    }
    let pods = crate::registry::catalogue::builtin("", "v1", "pods").expect("pods are served");
    let mut seen = std::collections::HashSet::new();
    for s in local
        .iter()
        .filter(|s| s.depth == 0 && s.component == "apiserver")
    {
        let Some((ns, name)) = s
            .field("object")
            .and_then(|o| o.strip_prefix("Pod "))
            .and_then(|o| o.split_once('/'))
        else {
            continue;
        };
        if s.uid == uid || !seen.insert(s.uid.clone()) {
            continue;
        }
        let Ok(pod) = crate::registry::read(ctx, pods, ns, name).await else {
            continue;
        };
        if pod["metadata"]["uid"] != s.uid.as_str() {
            continue;
        }
        if let Some(node) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
            by_node.entry(node.to_owned()).or_default().push(s.uid.clone());
        }
    }
    let asked = by_node.iter().map(|(node, uids)| async move {
        let query: Vec<String> = uids.iter().map(|u| format!("uid={u}")).collect();
        let path = format!("/trace?{}", query.join("&"));
        let answer = match crate::endpoints::kubelet::kubelet_of(ctx, node).await {
            Ok((host, port, kubelet)) => {
                crate::endpoints::kubelet::get_text(&kubelet, &host, port, &path).await
            }
            Err(e) => Err(e.message),
        };
        answer
            .and_then(|text| serde_json::from_str::<Vec<r8s_trace::Stage>>(&text).map_err(|e| e.to_string()))
            .map_err(|e| format!("node {node}: {e}"))
    });
    let mut incomplete = Vec::new();
    let mut sources = vec![local];
    for answer in futures_util::future::join_all(asked).await {
        match answer {
            Ok(stages) => sources.push(stages),
            Err(e) => incomplete.push(e),
        }
    }
    let merged = r8s_trace::story::merge(sources);
    let stages = r8s_trace::story::join(&uid, &merged);
    if html {
        let kind = obj["kind"].as_str().unwrap_or("");
        let title = match obj["metadata"]["namespace"].as_str() {
            Some(ns) => format!("{kind} {ns}/{}", info.name),
            None => format!("{kind} {}", info.name),
        };
        let follow = crate::registry::Query::parse(ctx.query.as_deref()).flag("follow");
        let mut resp = crate::http::text_response(
            http::StatusCode::OK,
            r8s_trace::page::html(&title, &stages, follow),
        );
        resp.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("text/html; charset=utf-8"),
        );
        return Ok(resp);
    }
    let mut body = serde_json::json!({
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
    if !incomplete.is_empty() {
        body["incomplete"] = serde_json::json!(incomplete);
    }
    Ok(crate::http::json_response(http::StatusCode::OK, &body))
}
