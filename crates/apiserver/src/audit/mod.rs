//! Auditing, as upstream's advanced auditing: after authentication, the policy decides how much
//! of a request is recorded (None, Metadata, Request, RequestResponse), and the request leaves
//! `audit.k8s.io/v1` events in the log at its stages: RequestReceived, ResponseStarted (only for
//! long-running requests such as watches), ResponseComplete, or Panic when a handler panics.
//!
//! Every response carries the request's audit ID in an `Audit-ID` header (the client's own
//! `Audit-ID`, if it sent one), whether or not the request is audited.

pub mod event;
pub mod log;
pub mod policy;

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::FutureExt;
use http::{header, HeaderMap, Response};
use http_body_util::BodyExt;
use hyper::body::{Body as _, Frame, SizeHint};
use prometheus_client::metrics::counter::Counter;
use serde_json::{json, Value};
use time::OffsetDateTime;

use crate::authn::UserInfo;
use crate::http::{error_response, full, Body};
use crate::metrics::{AuditMetrics, LevelLabels, PluginLabels};
use crate::request_info::RequestInfo;
use crate::status::ApiError;
use event::{ObjectRef, Record, ResponseStatus};
use log::LogBackend;
pub use log::LogOptions;
pub use policy::{Level, Policy, Stage};

/// The request header, and the response header, that carry the audit ID.
pub const AUDIT_ID_HEADER: &str = "audit-id";

const MAX_USER_AGENT: usize = 1024;

/// `--audit-policy-file` and the `--audit-log-*` settings.
pub struct AuditOptions {
    pub policy: Policy,
    pub log: LogOptions,
}

/// The policy and where events go; one per API server.
pub(crate) struct Auditor {
    policy: Policy,
    backend: LogBackend,
    /// `apiserver_audit_event_total`.
    events: Counter,
    /// `apiserver_audit_level_total{level}`, by [`Level`] (looked up once, not per request).
    level_counts: [Counter; 4],
}

/// Room for a typical event's JSON line at level Metadata (700 bytes to over 1 KB, with
/// the authorization reason), so that writing it does not grow the buffer.
const LINE_CAPACITY: usize = 2048;

/// Where a request came from and when: known before authentication.
pub(crate) struct Origin {
    pub audit_id: String,
    pub received: OffsetDateTime,
    pub peer: SocketAddr,
}

impl Origin {
    /// The client's `Audit-ID`, or a new UUID.
    pub fn new(headers: &HeaderMap, peer: SocketAddr) -> Self {
        let audit_id = headers
            .get(AUDIT_ID_HEADER)
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
            // A random (version 4) UUID from a fast thread-local generator: audit IDs only
            // need to be unique, and every request gets one.
            .unwrap_or_else(|| {
                uuid::Builder::from_random_bytes(fastrand::u128(..).to_le_bytes())
                    .into_uuid()
                    .to_string()
            });
        Self {
            audit_id,
            received: OffsetDateTime::now_utc(),
            peer,
        }
    }
}

impl Auditor {
    /// Open the log and start its writer.
    pub fn start(options: AuditOptions, metrics: &AuditMetrics) -> std::io::Result<Arc<Self>> {
        let errors = metrics
            .errors
            .get_or_create(&PluginLabels { plugin: "log".into() })
            .clone();
        let backend = LogBackend::start(&options.log, errors)?;
        Ok(Arc::new(Self::new(options.policy, backend, metrics.clone())))
    }

    fn new(policy: Policy, backend: LogBackend, metrics: AuditMetrics) -> Self {
        Self {
            policy,
            backend,
            events: metrics.events.clone(),
            level_counts: [
                Level::None,
                Level::Metadata,
                Level::Request,
                Level::RequestResponse,
            ]
            .map(|l| {
                metrics
                    .levels
                    .get_or_create(&LevelLabels {
                        level: l.as_str().into(),
                    })
                    .clone()
            }),
        }
    }

    /// Decide the request's level and, when it is audited, make its event. `user` is absent
    /// when authentication failed.
    pub fn begin(
        self: &Arc<Self>,
        origin: &Origin,
        uri: &http::Uri,
        headers: &HeaderMap,
        info: &RequestInfo,
        user: Option<&UserInfo>,
    ) -> RequestAudit {
        let config = self.policy.evaluate(user, info);
        self.level_counts[config.level as usize].inc();
        if config.level == Level::None {
            return RequestAudit::disabled();
        }
        let user_agent = headers
            .get(header::USER_AGENT)
            .map(|v| String::from_utf8_lossy(v.as_bytes()))
            .unwrap_or_default();
        let user_agent = if user_agent.len() > MAX_USER_AGENT {
            let mut end = MAX_USER_AGENT;
            while !user_agent.is_char_boundary(end) {
                end -= 1;
            }
            std::borrow::Cow::Owned(format!("{}...TRUNCATED", &user_agent[..end]))
        } else {
            user_agent
        };
        let object_ref = info.is_resource_request.then(|| ObjectRef {
            resource: info.resource.clone(),
            namespace: info.namespace.clone(),
            name: info.name.clone(),
            api_group: info.api_group.clone(),
            api_version: info.api_version.clone(),
            subresource: info.subresource.clone(),
            ..Default::default()
        });
        let unauthenticated = UserInfo::default();
        let record = Record::new(
            config.level,
            origin.audit_id.clone(),
            origin.received,
            &event::Request {
                request_uri: uri.path_and_query().map_or(uri.path(), |pq| pq.as_str()),
                verb: &info.verb,
                user: user.unwrap_or(&unauthenticated),
                source_ips: &source_ips(headers, origin.peer.ip()),
                user_agent: &user_agent,
            },
            object_ref,
        );
        let record = match record {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "audit: encoding an event");
                return RequestAudit::disabled();
            }
        };
        RequestAudit(Some(Arc::new(Recording {
            auditor: self.clone(),
            level: config.level,
            omit_stages: config.omit_stages,
            omit_managed_fields: config.omit_managed_fields,
            is_resource_request: info.is_resource_request,
            event: Mutex::new(record),
        })))
    }

    fn process(&self, line: Vec<u8>, event: &Record) {
        self.events.inc();
        self.backend.process(line, event.audit_id(), event.stage);
    }
}

/// Upstream's source IPs: those of `X-Forwarded-For`, then `X-Real-Ip` unless already listed,
/// then the connection's peer unless it is the last one already.
fn source_ips(headers: &HeaderMap, peer: IpAddr) -> Vec<IpAddr> {
    let mut ips: Vec<IpAddr> = Vec::new();
    if let Some(fwd) = headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
        ips.extend(fwd.split(',').filter_map(|p| p.trim().parse::<IpAddr>().ok()));
    }
    if let Some(real) = headers
        .get("x-real-ip")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<IpAddr>().ok())
    {
        if !ips.contains(&real) {
            ips.push(real);
        }
    }
    let peer = peer.to_canonical();
    if ips.last() != Some(&peer) {
        ips.push(peer);
    }
    ips
}

/// Requests whose response streams: they get a ResponseStarted event, and ResponseComplete
/// when the stream ends (upstream's long-running check).
pub(crate) fn is_long_running(info: &RequestInfo) -> bool {
    matches!(info.verb.as_str(), "watch" | "proxy")
        || matches!(
            info.subresource.as_str(),
            "attach" | "exec" | "proxy" | "log" | "portforward"
        )
}

/// One request's audit record; a no-op when the request is not audited. Clones share it.
#[derive(Clone, Default)]
pub(crate) struct RequestAudit(Option<Arc<Recording>>);

struct Recording {
    auditor: Arc<Auditor>,
    level: Level,
    omit_stages: Vec<Stage>,
    omit_managed_fields: bool,
    is_resource_request: bool,
    event: Mutex<Record>,
}

impl Recording {
    fn event(&self) -> std::sync::MutexGuard<'_, Record> {
        self.event.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn without_managed_fields(&self, mut obj: Value) -> Value {
        if self.omit_managed_fields {
            remove_managed_fields(&mut obj);
        }
        obj
    }
}

impl RequestAudit {
    pub fn disabled() -> Self {
        Self(None)
    }

    /// The request's level (None when it is not audited).
    pub fn level(&self) -> Level {
        self.0.as_ref().map_or(Level::None, |r| r.level)
    }

    /// Write the event as it is now at `stage`, unless the policy omits the stage.
    pub fn emit(&self, stage: Stage) {
        let Some(r) = &self.0 else { return };
        if r.omit_stages.contains(&stage) {
            return;
        }
        let mut ev = r.event();
        if let Some(body) = ev.unnamed_body.take() {
            let meta = serde_json::from_slice::<BodyHead>(&body)
                .ok()
                .and_then(|h| h.metadata)
                .unwrap_or_default();
            name_object(&mut ev, meta);
        }
        ev.stage = stage;
        ev.stage_timestamp = if stage == Stage::RequestReceived {
            ev.request_received_timestamp
        } else {
            OffsetDateTime::now_utc()
        };
        // Encoded here, from the event as it is now, instead of handing the writer a copy.
        let mut line = Vec::with_capacity(LINE_CAPACITY);
        if let Err(e) = ev.write_line(&mut line) {
            tracing::error!(error = %e, "audit: encoding an event");
            return;
        }
        r.auditor.process(line, &ev);
    }

    /// The request acts as another user.
    pub fn impersonated(&self, user: &UserInfo) {
        if let Some(r) = &self.0 {
            if let Err(e) = r.event().impersonated(user) {
                tracing::error!(error = %e, "audit: encoding an event");
            }
        }
    }

    /// An annotation of the event; the first value set for a key stays.
    pub fn annotate(&self, key: &str, value: &str) {
        let Some(r) = &self.0 else { return };
        let mut ev = r.event();
        if let Some(existing) = ev.annotate(key, value).map(str::to_owned) {
            tracing::warn!(key, value, %existing, audit_id = %ev.audit_id(), "audit: annotation already set");
        }
    }

    /// What authorization decided, as upstream's annotations.
    pub fn authorization(&self, allowed: bool, reason: &str) {
        self.annotate(
            "authorization.k8s.io/decision",
            if allowed { "allow" } else { "forbid" },
        );
        self.annotate("authorization.k8s.io/reason", reason);
    }

    /// The body of a write, as JSON (after a protobuf body was decoded): it names the object
    /// (for the objectRef of a create) and, from level Request, is the event's requestObject.
    pub fn request_body(&self, verb: &str, body: &Bytes) {
        let Some(r) = &self.0 else { return };
        let wants_object = r.level >= Level::Request;
        let object = match verb {
            "create" | "update" => {
                if !wants_object {
                    // Below level Request only the names are needed. The handler decodes the
                    // body anyway and names the object with what it decoded
                    // ([`RequestAudit::object_decoded`]); a handler that does not has its
                    // body's metadata read at the next stage.
                    r.event().unnamed_body = Some(body.clone());
                    return;
                }
                let Ok(obj) = serde_json::from_slice::<Value>(body) else {
                    return;
                };
                let meta = serde_json::from_value::<BodyMeta>(obj["metadata"].clone()).unwrap_or_default();
                name_object(&mut r.event(), meta);
                Some(r.without_managed_fields(obj))
            }
            // A patch is recorded as it was sent (an apply configuration may be YAML).
            "patch" if wants_object => serde_json::from_slice::<Value>(body).ok().or_else(|| {
                std::str::from_utf8(body)
                    .ok()
                    .and_then(|t| serde_saphyr::from_str::<Value>(t).ok())
            }),
            "delete" | "deletecollection" if wants_object => {
                if body.iter().all(u8::is_ascii_whitespace) {
                    Some(json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"}))
                } else {
                    serde_json::from_slice::<Value>(body).ok()
                }
            }
            _ => None,
        };
        if let Some(obj) = object {
            r.event().request_object = Some(obj);
        }
    }

    /// The body of a create or update as the handler decoded it: names the object, instead
    /// of a second read of the body's metadata.
    pub fn object_decoded(&self, obj: &Value) {
        let Some(r) = &self.0 else { return };
        let mut ev = r.event();
        if ev.unnamed_body.take().is_none() {
            return;
        }
        let meta = &obj["metadata"];
        let s = |k: &str| meta[k].as_str().map(str::to_owned);
        name_object(
            &mut ev,
            BodyMeta {
                namespace: s("namespace"),
                name: s("name"),
                uid: s("uid"),
                resource_version: s("resourceVersion"),
            },
        );
    }

    /// Take in the response: its code, the Status of an error, and the object from level
    /// RequestResponse. A buffered body is read (and put back); a streaming one is left alone.
    async fn observe_response(&self, parts: &http::response::Parts, body: Body) -> Body {
        let Some(r) = &self.0 else { return body };
        let code = parts.status.as_u16();
        let wants_object = r.level >= Level::RequestResponse && r.is_resource_request;
        let json = parts
            .headers
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
        let buffered = body.size_hint().exact().is_some();
        if !(json && buffered && (code >= 300 || wants_object)) {
            r.event().response_status = Some(ResponseStatus::code(code));
            return body;
        }
        let bytes = match body.collect().await {
            Ok(c) => c.to_bytes(),
            Err(never) => match never {},
        };
        let value = serde_json::from_slice::<Value>(&bytes).ok();
        let status = match &value {
            Some(v) if v["kind"] == "Status" => ResponseStatus::from_status(code, v),
            _ => ResponseStatus::code(code),
        };
        let object = if wants_object {
            value.map(|v| r.without_managed_fields(v))
        } else {
            None
        };
        let mut ev = r.event();
        ev.response_status = Some(status);
        ev.response_object = object;
        drop(ev);
        full(bytes)
    }

    /// The handler answered: ResponseComplete now, or for a long-running request
    /// ResponseStarted now and ResponseComplete when its body ends (or the client goes).
    pub async fn finish(&self, resp: Response<Body>, long_running: bool) -> Response<Body> {
        if self.0.is_none() {
            return resp;
        }
        let (parts, body) = resp.into_parts();
        let body = self.observe_response(&parts, body).await;
        if long_running {
            self.emit(Stage::ResponseStarted);
            let body = CompleteOnEnd {
                body,
                audit: Some(self.clone()),
            };
            Response::from_parts(parts, BodyExt::boxed(body))
        } else {
            self.emit(Stage::ResponseComplete);
            Response::from_parts(parts, body)
        }
    }

    /// Authentication failed: as upstream, one event at ResponseStarted with the 401.
    pub async fn failed_authentication(&self, resp: Response<Body>) -> Response<Body> {
        if self.0.is_none() {
            return resp;
        }
        let (parts, body) = resp.into_parts();
        let body = self.observe_response(&parts, body).await;
        self.emit(Stage::ResponseStarted);
        Response::from_parts(parts, body)
    }

    /// The handler panicked: the Panic stage, with upstream's status.
    pub fn panicked(&self, message: &str) {
        let Some(r) = &self.0 else { return };
        r.event().response_status = Some(ResponseStatus {
            status: "Failure".into(),
            reason: "InternalError".into(),
            message: format!("APIServer panic'd: {message}"),
            code: 500,
            ..Default::default()
        });
        self.emit(Stage::Panic);
    }
}

/// Run what follows auditing in the filter chain with a panic guard: a panic becomes a 500
/// for the client and a Panic event for the log, and the connection lives on.
pub(crate) async fn guarded(
    audit: &RequestAudit,
    long_running: bool,
    handler: impl Future<Output = Response<Body>>,
) -> Response<Body> {
    match AssertUnwindSafe(handler).catch_unwind().await {
        Ok(resp) => audit.finish(resp, long_running).await,
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            tracing::error!(%message, "a request handler panicked");
            audit.panicked(&message);
            error_response(&ApiError::new(
                500,
                "InternalError",
                "This request caused apiserver to panic. Look in the logs for details.",
            ))
        }
    }
}

/// The body of a long-running response; its end (or the client going away, which drops it)
/// is the request's ResponseComplete.
struct CompleteOnEnd {
    body: Body,
    audit: Option<RequestAudit>,
}

impl CompleteOnEnd {
    fn complete(&mut self) {
        if let Some(audit) = self.audit.take() {
            audit.emit(Stage::ResponseComplete);
        }
    }
}

impl hyper::body::Body for CompleteOnEnd {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.body).poll_frame(cx);
        if let Poll::Ready(None) = poll {
            this.complete();
        }
        poll
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for CompleteOnEnd {
    fn drop(&mut self) {
        self.complete();
    }
}

/// Drop `metadata.managedFields` of an object, of a list's items, or of a Table's rows.
fn remove_managed_fields(obj: &mut Value) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    if let Some(items) = obj.get_mut("items").and_then(Value::as_array_mut) {
        for item in items {
            if let Some(meta) = item.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("managedFields");
            }
        }
    }
    if let Some(rows) = obj.get_mut("rows").and_then(Value::as_array_mut) {
        for row in rows {
            if let Some(meta) = row
                .get_mut("object")
                .and_then(|o| o.get_mut("metadata"))
                .and_then(Value::as_object_mut)
            {
                meta.remove("managedFields");
            }
        }
    }
}

/// Fill the objectRef's names that the request's path did not give from the body's metadata.
fn name_object(ev: &mut Record, meta: BodyMeta) {
    if let Some(oref) = ev.object_ref_mut() {
        let fill = |field: &mut String, value: Option<String>| {
            if field.is_empty() {
                *field = value.unwrap_or_default();
            }
        };
        fill(&mut oref.namespace, meta.namespace);
        fill(&mut oref.name, meta.name);
        fill(&mut oref.uid, meta.uid);
        fill(&mut oref.resource_version, meta.resource_version);
    }
}

/// The part of a request body an event names its object by.
#[derive(serde::Deserialize)]
struct BodyHead {
    metadata: Option<BodyMeta>,
}

#[derive(serde::Deserialize, Default)]
struct BodyMeta {
    namespace: Option<String>,
    name: Option<String>,
    uid: Option<String>,
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::json_response;
    use crate::request_info::parse_request;
    use http::{Method, StatusCode};
    use std::sync::mpsc::Receiver;

    fn auditor(policy: &str, capacity: usize) -> (Arc<Auditor>, Receiver<Vec<u8>>, AuditMetrics) {
        let metrics = AuditMetrics::default();
        let errors = metrics
            .errors
            .get_or_create(&PluginLabels { plugin: "log".into() })
            .clone();
        let (backend, rx) = LogBackend::channel(capacity, errors);
        let policy = Policy::parse(policy).unwrap();
        (
            Arc::new(Auditor::new(policy, backend, metrics.clone())),
            rx,
            metrics,
        )
    }

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
rules:
  - level: Metadata
    resources: [{group: "", resources: ["configmaps"]}]
  - level: RequestResponse
    omitManagedFields: true
    resources: [{group: "", resources: ["pods"]}]
"#;

    fn admin() -> UserInfo {
        UserInfo {
            name: "admin".into(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
            ..Default::default()
        }
    }

    fn begin(
        auditor: &Arc<Auditor>,
        method: Method,
        uri: &str,
        headers: HeaderMap,
    ) -> (RequestAudit, RequestInfo) {
        let uri: http::Uri = uri.parse().unwrap();
        let info = parse_request(&method, uri.path(), uri.query());
        let origin = Origin::new(&headers, "127.0.0.1:50000".parse().unwrap());
        let audit = auditor.begin(&origin, &uri, &headers, &info, Some(&admin()));
        (audit, info)
    }

    fn to_json(line: &[u8]) -> Value {
        assert_eq!(line.last(), Some(&b'\n'), "one event a line");
        serde_json::from_slice(line).unwrap()
    }

    fn stage(line: &[u8]) -> Stage {
        serde_json::from_value(to_json(line)["stage"].clone()).unwrap()
    }

    #[tokio::test]
    async fn a_create_leaves_request_received_and_response_complete() {
        let (auditor, rx, metrics) = auditor(POLICY, 100);
        let mut headers = HeaderMap::new();
        headers.insert(header::USER_AGENT, "kubectl/v1.33.0".parse().unwrap());
        headers.insert("x-forwarded-for", "10.0.0.1, 10.0.0.2".parse().unwrap());
        let (audit, info) = begin(
            &auditor,
            Method::POST,
            "/api/v1/namespaces/default/pods?fieldManager=kubectl-run",
            headers,
        );
        assert_eq!(audit.level(), Level::RequestResponse);
        audit.emit(Stage::RequestReceived);
        audit.authorization(true, "");
        audit.request_body(
            "create",
            &Bytes::from_static(
                br#"{"metadata":{"name":"web","managedFields":[{"manager":"x"}]},"spec":{}}"#,
            ),
        );
        let resp = json_response(
            StatusCode::CREATED,
            &json!({"kind": "Pod", "metadata": {"name": "web", "uid": "u1", "managedFields": []}}),
        );
        let resp = guarded(&audit, is_long_running(&info), async { resp }).await;
        assert_eq!(resp.status(), 201);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(
            serde_json::from_slice::<Value>(&body).unwrap()["metadata"]["uid"],
            "u1"
        );

        let events: Vec<Value> = rx.try_iter().map(|e| to_json(&e)).collect();
        assert_eq!(events.len(), 2);
        let (received, complete) = (&events[0], &events[1]);
        assert_eq!(received["stage"], "RequestReceived");
        assert_eq!(
            received["requestURI"],
            "/api/v1/namespaces/default/pods?fieldManager=kubectl-run"
        );
        assert_eq!(
            received["sourceIPs"],
            json!(["10.0.0.1", "10.0.0.2", "127.0.0.1"])
        );
        assert_eq!(received["userAgent"], "kubectl/v1.33.0");
        assert_eq!(
            received["objectRef"],
            json!({"resource": "pods", "namespace": "default", "apiVersion": "v1"})
        );
        assert!(received.get("annotations").is_none() && received.get("requestObject").is_none());
        assert_eq!(received["stageTimestamp"], received["requestReceivedTimestamp"]);
        assert_eq!(complete["stage"], "ResponseComplete");
        assert_eq!(complete["auditID"], received["auditID"]);
        assert_eq!(complete["user"]["username"], "admin");
        assert_eq!(
            complete["objectRef"]["name"], "web",
            "named by the created object"
        );
        assert_eq!(complete["responseStatus"], json!({"metadata": {}, "code": 201}));
        assert_eq!(
            complete["requestObject"],
            json!({"metadata": {"name": "web"}, "spec": {}})
        );
        assert_eq!(
            complete["responseObject"]["metadata"],
            json!({"name": "web", "uid": "u1"})
        );
        assert_eq!(
            complete["annotations"],
            json!({"authorization.k8s.io/decision": "allow", "authorization.k8s.io/reason": ""})
        );
        assert_eq!(metrics.events.get(), 2);
    }

    #[tokio::test]
    async fn a_later_stage_shows_what_changed_since_the_first() {
        let (auditor, rx, _) = auditor(POLICY, 100);
        let (audit, _) = begin(
            &auditor,
            Method::GET,
            "/api/v1/namespaces/default/configmaps/c",
            HeaderMap::new(),
        );
        audit.emit(Stage::RequestReceived);
        audit.impersonated(&UserInfo {
            name: "jane".into(),
            ..Default::default()
        });
        audit.emit(Stage::ResponseComplete);
        let events: Vec<Value> = rx.try_iter().map(|l| to_json(&l)).collect();
        assert!(events[0].get("impersonatedUser").is_none());
        assert_eq!(events[1]["impersonatedUser"], json!({"username": "jane"}));
        assert_eq!(events[1]["objectRef"]["name"], "c");
    }

    /// A ConfigMap create that `POLICY` audits at level Metadata, its body (naming `name`)
    /// taken in.
    fn metadata_configmap_create(auditor: &Arc<Auditor>, name: &str) -> (RequestAudit, RequestInfo) {
        let (audit, info) = begin(
            auditor,
            Method::POST,
            "/api/v1/namespaces/default/configmaps",
            HeaderMap::new(),
        );
        assert_eq!(audit.level(), Level::Metadata);
        let body = json!({"metadata": {"name": name}, "data": {"a": "b"}});
        audit.request_body("create", &Bytes::from(serde_json::to_vec(&body).unwrap()));
        (audit, info)
    }

    #[tokio::test]
    async fn below_level_request_the_handlers_decoded_object_names_the_object_ref() {
        let (auditor, rx, _) = auditor(POLICY, 100);
        let (audit, info) = metadata_configmap_create(&auditor, "from-body");
        // (A handler's decoded object is the body; a different name here shows which was read.)
        audit.object_decoded(&json!({"metadata": {"name": "decoded", "uid": "u9", "namespace": "other"}}));
        let resp = json_response(StatusCode::CREATED, &json!({"kind": "ConfigMap"}));
        guarded(&audit, is_long_running(&info), async { resp }).await;
        let ev = to_json(&rx.try_recv().unwrap());
        assert_eq!(
            ev["objectRef"],
            json!({"resource": "configmaps", "namespace": "default", "name": "decoded", "uid": "u9", "apiVersion": "v1"}),
            "the path's namespace stays; the rest comes from the decoded object"
        );
    }

    #[tokio::test]
    async fn metadata_level_keeps_objects_out_and_errors_carry_their_status() {
        let (auditor, rx, _) = auditor(POLICY, 100);
        let (audit, info) = metadata_configmap_create(&auditor, "cm");
        audit.authorization(false, "no RBAC policy matched");
        let resp = error_response(&ApiError::forbidden("configmaps is forbidden"));
        let resp = guarded(&audit, is_long_running(&info), async { resp }).await;
        assert_eq!(resp.status(), 403);
        let ev = to_json(&rx.try_recv().unwrap());
        assert_eq!(ev["level"], "Metadata");
        assert!(ev.get("requestObject").is_none() && ev.get("responseObject").is_none());
        assert_eq!(ev["objectRef"]["name"], "cm");
        assert_eq!(
            ev["responseStatus"],
            json!({"metadata": {}, "status": "Failure", "message": "configmaps is forbidden", "reason": "Forbidden", "code": 403})
        );
        assert_eq!(ev["annotations"]["authorization.k8s.io/decision"], "forbid");
        assert_eq!(
            ev["annotations"]["authorization.k8s.io/reason"],
            "no RBAC policy matched"
        );
        // Not audited: nothing at all.
        let (audit, _) = begin(
            &auditor,
            Method::GET,
            "/api/v1/namespaces/default/secrets",
            HeaderMap::new(),
        );
        assert_eq!(audit.level(), Level::None);
        audit.emit(Stage::RequestReceived);
        assert!(rx.try_recv().is_err());
    }

    #[tokio::test]
    async fn a_watch_starts_and_completes_when_its_stream_ends() {
        let (auditor, rx, _) = auditor(POLICY, 100);
        let (audit, info) = begin(
            &auditor,
            Method::GET,
            "/api/v1/namespaces/default/pods?watch=1",
            HeaderMap::new(),
        );
        assert!(is_long_running(&info));
        let (tx, chunks) = tokio::sync::mpsc::channel::<Bytes>(1);
        let stream =
            http_body_util::StreamBody::new(futures_util::stream::unfold(chunks, |mut rx| async move {
                rx.recv()
                    .await
                    .map(|b| (Ok::<_, std::convert::Infallible>(Frame::data(b)), rx))
            }));
        let resp = Response::builder()
            .header(header::CONTENT_TYPE, "application/json")
            .body(BodyExt::boxed(stream))
            .unwrap();
        let resp = guarded(&audit, true, async { resp }).await;
        let started = to_json(&rx.try_recv().unwrap());
        assert_eq!(started["stage"], "ResponseStarted");
        assert_eq!(started["responseStatus"]["code"], 200);
        assert!(started.get("responseObject").is_none());
        assert!(rx.try_recv().is_err(), "not complete while the watch streams");
        tx.send(Bytes::from_static(b"{}\n")).await.unwrap();
        drop(tx);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"{}\n");
        let complete = to_json(&rx.try_recv().unwrap());
        assert_eq!(complete["stage"], "ResponseComplete");
        assert!(rx.try_recv().is_err(), "exactly once");
    }

    #[tokio::test]
    async fn a_panicking_handler_answers_500_and_logs_the_panic_stage() {
        let (auditor, rx, _) = auditor(POLICY, 100);
        let (audit, _) = begin(
            &auditor,
            Method::GET,
            "/api/v1/namespaces/default/pods/web",
            HeaderMap::new(),
        );
        let resp = guarded(&audit, false, async {
            if audit.level() > Level::None {
                panic!("boom");
            }
            json_response(StatusCode::OK, &json!({}))
        })
        .await;
        assert_eq!(resp.status(), 500);
        let ev = to_json(&rx.try_recv().unwrap());
        assert_eq!(ev["stage"], "Panic");
        assert_eq!(
            ev["responseStatus"],
            json!({"metadata": {}, "status": "Failure", "message": "APIServer panic'd: boom", "reason": "InternalError", "code": 500})
        );
        assert!(rx.try_recv().is_err());
    }

    #[tokio::test]
    async fn omitted_stages_are_not_written() {
        let policy = "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n";
        let (auditor, rx, metrics) = auditor(policy, 100);
        let (audit, info) = begin(&auditor, Method::GET, "/healthz", HeaderMap::new());
        audit.emit(Stage::RequestReceived);
        let resp = guarded(&audit, is_long_running(&info), async {
            json_response(StatusCode::OK, &json!({}))
        })
        .await;
        assert_eq!(resp.status(), 200);
        let stages: Vec<Stage> = rx.try_iter().map(|l| stage(&l)).collect();
        assert_eq!(stages, [Stage::ResponseComplete]);
        let ev = metrics
            .levels
            .get_or_create(&LevelLabels {
                level: "Metadata".into(),
            })
            .get();
        assert_eq!(ev, 1);
    }

    /// A request never waits for the log: with the writer behind, its events are dropped and
    /// counted, and the request goes on.
    #[tokio::test]
    async fn events_beyond_a_full_queue_are_dropped_and_counted() {
        let (auditor, rx, metrics) = auditor(POLICY, 1);
        let started = std::time::Instant::now();
        let (audit, info) = begin(
            &auditor,
            Method::GET,
            "/api/v1/namespaces/default/pods/web",
            HeaderMap::new(),
        );
        audit.emit(Stage::RequestReceived);
        let resp = guarded(&audit, is_long_running(&info), async {
            json_response(StatusCode::OK, &json!({"kind": "Pod"}))
        })
        .await;
        assert_eq!(resp.status(), 200);
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        let dropped = metrics
            .errors
            .get_or_create(&PluginLabels { plugin: "log".into() })
            .get();
        assert_eq!((metrics.events.get(), dropped), (2, 1));
        let stages: Vec<Stage> = rx.try_iter().map(|l| stage(&l)).collect();
        assert_eq!(stages, [Stage::RequestReceived]);
    }

    #[test]
    fn source_ips_as_upstream() {
        let peer: IpAddr = "192.168.1.5".parse().unwrap();
        let strings = |ips: Vec<IpAddr>| ips.iter().map(IpAddr::to_string).collect::<Vec<_>>();
        assert_eq!(strings(source_ips(&HeaderMap::new(), peer)), ["192.168.1.5"]);
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", "1.1.1.1, bad, 192.168.1.5".parse().unwrap());
        h.insert("x-real-ip", "1.1.1.1".parse().unwrap());
        assert_eq!(strings(source_ips(&h, peer)), ["1.1.1.1", "192.168.1.5"]);
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(strings(source_ips(&HeaderMap::new(), mapped)), ["10.0.0.1"]);
    }

    #[test]
    fn the_audit_id_is_the_clients_or_a_uuid() {
        let peer = "127.0.0.1:1".parse().unwrap();
        let mut h = HeaderMap::new();
        assert_eq!(
            uuid::Uuid::parse_str(&Origin::new(&h, peer).audit_id)
                .unwrap()
                .get_version_num(),
            4
        );
        h.insert(AUDIT_ID_HEADER, "from-client".parse().unwrap());
        assert_eq!(Origin::new(&h, peer).audit_id, "from-client");
    }
}
