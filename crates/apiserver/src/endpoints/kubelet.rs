//! What the API server asks of kubelets, connecting with its kubelet client certificate
//! (`--kubelet-client-certificate` upstream):
//! - `pods/log` (upstream `pkg/registry/core/pod/rest/log.go` and `LogLocation`): the options
//!   and the container are checked, then what the pod's node's kubelet serves at
//!   `/containerLogs/<ns>/<pod>/<container>` is streamed back;
//! - `nodes/proxy` (GET): `/api/v1/nodes/<name>/proxy/<path>` is the kubelet's `/<path>`
//!   (e.g. `kubectl get --raw /api/v1/nodes/<name>/proxy/metrics`).
//!
//! Plain requests (logs, node proxy) reuse connections: each kubelet keeps a few idle
//! HTTP/1.1 connections for a while (as Go's `http.Transport` does for upstream), and a
//! connection goes back to them once its response has been read to the end — a followed log
//! holds its connection until the client stops. Upgraded streams (exec, attach, port-forward)
//! take a connection of their own.
//!
//! The kubelet's serving certificate is not verified: upstream's default when no
//! `--kubelet-certificate-authority` is given, since kubelets sign their own.
//! The node's address is chosen in k3s's order of address types (InternalIP, ExternalIP,
//! Hostname): upstream's default puts Hostname first, which names nothing resolvable on a
//! machine without cluster DNS for node names.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use http::{Response, StatusCode};
use http_body_util::{BodyExt, Limited, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use serde_json::{json, Value};

use crate::context::Ctx;
use crate::http::Body;
use crate::registry::{read, Query};
use crate::status::ApiError;

/// How the API server reaches kubelets.
#[derive(Clone)]
pub struct KubeletClient {
    tls: Arc<rustls::ClientConfig>,
    idle: Arc<Mutex<Idle>>,
}

type Sender = hyper::client::conn::http1::SendRequest<http_body_util::Empty<Bytes>>;

/// Idle connections by kubelet (host, port), each with when it was left.
type Idle = HashMap<(String, u16), Vec<(Sender, Instant)>>;

/// How long a connection may wait idle, and how many wait per kubelet (Go's defaults:
/// `IdleConnTimeout` 90 s, `MaxIdleConnsPerHost` 2).
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
const MAX_IDLE_PER_KUBELET: usize = 2;

impl KubeletClient {
    /// With this client certificate and key (PEM).
    pub fn new(cert_pem: &str, key_pem: &str) -> Result<Self, String> {
        use rustls::pki_types::pem::PemObject;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let certs = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("kubelet client certificate: {e}"))?;
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
            .map_err(|e| format!("kubelet client key: {e}"))?;
        let tls = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyServer(provider)))
            .with_client_auth_cert(certs, key)
            .map_err(|e| format!("kubelet client certificate: {e}"))?;
        Ok(Self {
            tls: Arc::new(tls),
            idle: Arc::default(),
        })
    }

    /// An idle connection to the kubelet that is still open, if any.
    fn checkout(&self, to: &(String, u16)) -> Option<Sender> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = idle.get_mut(to)?;
        let found = std::iter::from_fn(|| list.pop())
            .find(|(s, since)| !s.is_closed() && since.elapsed() < IDLE_TIMEOUT)
            .map(|(s, _)| s);
        if list.is_empty() {
            idle.remove(to);
        }
        found
    }

    /// Keep a connection whose response was read to the end for the next request.
    fn checkin(&self, to: (String, u16), sender: Sender) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        // What no longer serves goes, with kubelets left without connections.
        idle.retain(|_, list| {
            list.retain(|(s, since)| !s.is_closed() && since.elapsed() < IDLE_TIMEOUT);
            !list.is_empty()
        });
        let list = idle.entry(to).or_default();
        if list.len() < MAX_IDLE_PER_KUBELET {
            list.push((sender, Instant::now()));
        }
    }

    /// How many connections wait idle for the kubelet at `host:port` (for tests).
    #[cfg(test)]
    fn idle_count(&self, host: &str, port: u16) -> usize {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.get(&(host.to_owned(), port)).map_or(0, Vec::len)
    }
}

/// Accepts the kubelet's self-signed certificate, still checking the handshake's signatures
/// with it (so the peer holds the certificate's key).
#[derive(Debug)]
struct AnyServer(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn invalid(field: &str, value: &Value, detail: &str) -> ApiError {
    let shown = match value {
        Value::String(s) => format!("{s:?}"),
        v => v.to_string(),
    };
    ApiError::new(
        422,
        "Invalid",
        format!("PodLogOptions \"\" is invalid: {field}: Invalid value: {shown}: {detail}"),
    )
    .with_details(json!({
        "kind": "PodLogOptions",
        "causes": [{"reason": "FieldValueInvalid", "message": format!("Invalid value: {shown}: {detail}"), "field": field}]
    }))
}

/// The options as the kubelet takes them, checked as upstream's `ValidatePodLogOptions`.
fn kubelet_query(q: &Query) -> Result<String, ApiError> {
    let mut out = form_urlencoded::Serializer::new(String::new());
    for flag in ["follow", "previous", "timestamps"] {
        if q.flag(flag) {
            out.append_pair(flag, "true");
        }
    }
    let int = |k: &str| -> Result<Option<i64>, ApiError> {
        match q.get(k) {
            None => Ok(None),
            Some(v) => v
                .parse::<i64>()
                .map(Some)
                .map_err(|_| ApiError::bad_request(format!("{k}: invalid value {v:?}"))),
        }
    };
    if let Some(n) = int("tailLines")? {
        if n < 0 {
            return Err(invalid(
                "tailLines",
                &json!(n),
                "must be greater than or equal to 0",
            ));
        }
        out.append_pair("tailLines", &n.to_string());
    }
    if let Some(n) = int("limitBytes")? {
        if n < 1 {
            return Err(invalid("limitBytes", &json!(n), "must be greater than 0"));
        }
        out.append_pair("limitBytes", &n.to_string());
    }
    let since_seconds = int("sinceSeconds")?;
    if let Some(n) = since_seconds {
        if n < 1 {
            return Err(invalid("sinceSeconds", &json!(n), "must be greater than 0"));
        }
        out.append_pair("sinceSeconds", &n.to_string());
    }
    if let Some(t) = q.get("sinceTime") {
        if since_seconds.is_some() {
            return Err(ApiError::new(
                422,
                "Invalid",
                "PodLogOptions \"\" is invalid: [] : Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified",
            ));
        }
        time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339)
            .ok()
            .ok_or_else(|| ApiError::bad_request(format!("sinceTime: invalid time {t:?}")))?;
        out.append_pair("sinceTime", t);
    }
    Ok(out.finish())
}

/// The container a log request means (upstream `LogLocation`'s checks).
fn container_of(pod: &Value, name: &str, asked: Option<&str>) -> Result<String, ApiError> {
    let names = |list: &str| -> Vec<String> {
        pod["spec"][list]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str().map(String::from))
            .collect()
    };
    let (main, init, eph) = (
        names("containers"),
        names("initContainers"),
        names("ephemeralContainers"),
    );
    match asked {
        Some(c) => {
            if main.iter().chain(&init).chain(&eph).any(|n| n == c) {
                Ok(c.to_string())
            } else {
                Err(ApiError::bad_request(format!(
                    "container {c} is not valid for pod {name}"
                )))
            }
        }
        None if main.len() == 1 => Ok(main[0].clone()),
        None => {
            let mut msg = format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                main.join(" ")
            );
            if !init.is_empty() {
                msg.push_str(&format!(" or one of the init containers: [{}]", init.join(" ")));
            }
            if !eph.is_empty() {
                msg.push_str(&format!(
                    " or one of the ephemeral containers: [{}]",
                    eph.join(" ")
                ));
            }
            Err(ApiError::bad_request(msg))
        }
    }
}

/// The node's kubelet: its address and port.
pub(crate) fn kubelet_endpoint(node: &Value) -> Option<(String, u16)> {
    let addresses = node["status"]["addresses"].as_array()?;
    let address = ["InternalIP", "ExternalIP", "Hostname"].iter().find_map(|t| {
        addresses
            .iter()
            .find(|a| a["type"] == *t)
            .and_then(|a| a["address"].as_str())
            .map(String::from)
    })?;
    let port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
        .as_u64()
        .filter(|p| *p > 0 && *p <= u16::MAX as u64)
        .unwrap_or(10250) as u16;
    Some((address, port))
}

fn reason_of(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        _ => "InternalError",
    }
}

/// GET `pods/<name>/log`.
pub(crate) async fn pod_log(
    ctx: &Ctx,
    ns: &str,
    name: &str,
    query: &Query,
) -> Result<Response<Body>, ApiError> {
    let pods = crate::registry::catalogue::builtin("", "v1", "pods").expect("pods are served");
    let pod = read(ctx, pods, ns, name).await?;
    let container = container_of(&pod, name, query.get("container"))?;
    let kq = kubelet_query(query)?;
    let text_response = |body: Body| {
        Response::builder()
            .status(StatusCode::OK)
            .header(http::header::CONTENT_TYPE, "text/plain")
            .body(body)
            .expect("valid response")
    };
    // Not scheduled yet: nothing to show (upstream streams from no location).
    let Some(node_name) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) else {
        return Ok(text_response(crate::http::full(Bytes::new())));
    };
    let path = format!(
        "/containerLogs/{}/{}/{}{}{kq}",
        enc(ns),
        enc(name),
        enc(&container),
        if kq.is_empty() { "" } else { "?" }
    );
    from_kubelet(ctx, node_name, &path, name, "text/plain").await
}

/// Whether the request asks to upgrade to WebSocket.
pub(crate) fn is_websocket(headers: &http::HeaderMap) -> bool {
    let has = |name: http::header::HeaderName, token: &str| {
        headers.get_all(name).iter().any(|v| {
            v.to_str()
                .unwrap_or("")
                .split(',')
                .any(|t| t.trim().eq_ignore_ascii_case(token))
        })
    };
    has(http::header::CONNECTION, "upgrade") && has(http::header::UPGRADE, "websocket")
}

/// GET `pods/<name>/log` upgraded to WebSocket (upstream's wsstream reader): the log is read
/// as for a plain GET, then sent in messages — binary for the `binary.k8s.io` protocol (and
/// for none), base64 text for `base64.binary.k8s.io` — and the socket closed at its end.
pub(crate) async fn pod_log_websocket(
    ctx: &Ctx,
    mut req: http::Request<crate::http::RequestBody>,
) -> Result<Response<Body>, ApiError> {
    use tokio_tungstenite::tungstenite::{protocol::Role, Message};
    let key = req
        .headers()
        .get(http::header::SEC_WEBSOCKET_KEY)
        .cloned()
        .ok_or_else(|| ApiError::bad_request("missing Sec-WebSocket-Key"))?;
    let offered: Vec<String> = req
        .headers()
        .get_all(http::header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .flat_map(|v| v.to_str().unwrap_or("").split(',').map(|p| p.trim().to_string()))
        .filter(|p| !p.is_empty())
        .collect();
    let protocol = ["binary.k8s.io", "base64.binary.k8s.io"]
        .into_iter()
        .find(|p| offered.iter().any(|o| o == p));
    if protocol.is_none() && !offered.is_empty() {
        return Err(ApiError::bad_request(format!(
            "requested protocols are not supported: {offered:?}"
        )));
    }
    let base64 = protocol == Some("base64.binary.k8s.io");
    let query = Query::parse(req.uri().query());
    let log = pod_log(ctx, &ctx.info.namespace, &ctx.info.name, &query).await?;
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let client = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(upgraded) = client.await else { return };
        let mut ws =
            tokio_tungstenite::WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None)
                .await;
        let mut body = log.into_body();
        while let Some(Ok(frame)) = body.frame().await {
            let Ok(data) = frame.into_data() else { continue };
            let msg = if base64 {
                use base64::Engine;
                Message::text(base64::engine::general_purpose::STANDARD.encode(&data))
            } else {
                Message::binary(data)
            };
            if futures_util::SinkExt::send(&mut ws, msg).await.is_err() {
                return;
            }
        }
        let _ = ws.close(None).await;
    });
    let mut resp = Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(http::header::UPGRADE, "websocket")
        .header(http::header::CONNECTION, "Upgrade")
        .header(http::header::SEC_WEBSOCKET_ACCEPT, accept);
    if let Some(p) = protocol {
        resp = resp.header(http::header::SEC_WEBSOCKET_PROTOCOL, p);
    }
    Ok(resp
        .body(crate::http::full(Bytes::new()))
        .expect("valid response"))
}

/// GET `nodes/<[scheme:]name[:port]>/proxy/<rest>`: the kubelet's `/<rest>?<query>` when no
/// port or the kubelet's is named; another port of the node is proxied to as a pod's is
/// (upstream's node `ResourceLocation`).
pub(crate) async fn node_proxy(
    ctx: &Ctx,
    id: &str,
    rest: &str,
    query: Option<&str>,
) -> Result<Response<Body>, ApiError> {
    let (scheme, name, port) = proxied(id, "node")?;
    let path = match query.filter(|q| !q.is_empty()) {
        Some(q) => format!("/{rest}?{q}"),
        None => format!("/{rest}"),
    };
    if !port.is_empty() {
        let nodes = crate::registry::catalogue::builtin("", "v1", "nodes").expect("nodes are served");
        let node = read(ctx, nodes, "", name).await?;
        let (host, kubelet_port) = kubelet_endpoint(&node)
            .ok_or_else(|| ApiError::internal(format!("node {name:?} has no address")))?;
        let port: u16 = port
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid node request {id:?}")))?;
        if port != kubelet_port {
            let ip: std::net::IpAddr = host
                .parse()
                .map_err(|_| ApiError::bad_request("address not allowed"))?;
            let target = std::net::SocketAddr::new(ip, port);
            return proxy_http(
                ctx,
                scheme,
                target,
                &http::Method::GET,
                &http::HeaderMap::new(),
                Bytes::new(),
            )
            .await;
        }
    }
    from_kubelet(ctx, name, &path, name, "").await
}

/// Stream what the kubelet of node `node_name` serves at `path` (its error status as the
/// API's); `content_type` overrides the kubelet's.
async fn from_kubelet(
    ctx: &Ctx,
    node_name: &str,
    path: &str,
    object: &str,
    content_type: &str,
) -> Result<Response<Body>, ApiError> {
    let (host, port, kubelet) = kubelet_of(ctx, node_name).await?;
    let url = format!("https://{host}:{port}{path}");
    let (resp, sender) = tokio::time::timeout(Duration::from_secs(30), get(&kubelet, &host, port, path))
        .await
        .map_err(|_| ApiError::internal(format!("Get {url:?}: context deadline exceeded")))?
        .map_err(|e| ApiError::internal(format!("Get {url:?}: {e}")))?;
    let code = resp.status().as_u16();
    if !(200..300).contains(&code) {
        let body = match Limited::new(resp.into_body(), 64 * 1024).collect().await {
            Ok(b) => {
                // Read to the end: the connection serves again.
                kubelet.checkin((host, port), sender);
                b.to_bytes()
            }
            Err(_) => Bytes::new(),
        };
        let msg = String::from_utf8_lossy(&body).trim().to_string();
        let msg = if msg.is_empty() {
            format!("the server responded with the status code {code} but did not return more information ({object})")
        } else {
            msg
        };
        return Err(ApiError::new(code, reason_of(code), msg));
    }
    let content_type = if content_type.is_empty() {
        resp.headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("text/plain")
            .to_string()
    } else {
        content_type.to_string()
    };
    // Stream what the kubelet sends, as it sends it (follow), until it ends or fails; at its
    // clean end the connection goes back to the kubelet's idle ones.
    let frames = read_then_return(resp.into_body(), kubelet, (host, port), sender);
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header(http::header::CONTENT_TYPE, content_type)
        .body(BodyExt::boxed(StreamBody::new(frames)))
        .expect("valid response"))
}

fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// `pods/<name>/exec`, `attach` and `portforward` (GET or POST, asking to upgrade the
/// connection): passed on to the kubelet of the pod's node (`/exec/<ns>/<pod>/<container>`,
/// `/attach/...`, `/portForward/<ns>/<pod>`, the query as the client sent it), and the two
/// connections joined once the kubelet has switched protocols.
pub(crate) async fn stream(
    ctx: &Ctx,
    req: http::Request<crate::http::RequestBody>,
) -> Result<Response<Body>, ApiError> {
    let (ns, name, sub) = (&ctx.info.namespace, &ctx.info.name, ctx.info.subresource.as_str());
    if !matches!(*req.method(), http::Method::GET | http::Method::POST) {
        return Err(ApiError::method_not_allowed(
            req.method().as_str(),
            &format!("pods/{sub}"),
        ));
    }
    let pods = crate::registry::catalogue::builtin("", "v1", "pods").expect("pods are served");
    let pod = read(ctx, pods, ns, name).await?;
    let mut raw_query = req.uri().query().unwrap_or("").to_owned();
    connect_admission(ctx, sub, &raw_query).await?;
    let path = if sub == "portforward" {
        // PodPortForwardOptions' `ports` (repeated or comma-separated) go to the kubelet as
        // `port` values, as upstream's streamParams sends them.
        let ports: Vec<String> = form_urlencoded::parse(raw_query.as_bytes())
            .filter(|(k, _)| k == "ports")
            .flat_map(|(_, v)| v.split(',').map(str::to_owned).collect::<Vec<_>>())
            .collect();
        for p in &ports {
            if !p.parse::<u16>().is_ok_and(|n| n >= 1) {
                return Err(ApiError::bad_request(format!(
                    "invalid port {p:?}: must be between 1 and 65535, inclusive"
                )));
            }
        }
        raw_query = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(ports.iter().map(|p| ("port", p.as_str())))
            .finish();
        format!("/portForward/{}/{}", enc(ns), enc(name))
    } else {
        let container = container_of(&pod, name, Query::parse(Some(&raw_query)).get("container"))?;
        format!("/{sub}/{}/{}/{}", enc(ns), enc(name), enc(&container))
    };
    let path = if raw_query.is_empty() {
        path
    } else {
        format!("{path}?{raw_query}")
    };
    let node_name = pod["spec"]["nodeName"]
        .as_str()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ApiError::bad_request(format!("pod {name} does not have a host assigned")))?;
    let (host, port, kubelet) = kubelet_of(ctx, node_name).await?;
    let url = format!("https://{host}:{port}{path}");
    let backend = tokio::time::timeout(Duration::from_secs(30), dial(&kubelet, &host, port))
        .await
        .map_err(|_| {
            ApiError::internal(format!(
                "error dialing backend: {url:?}: context deadline exceeded"
            ))
        })?
        .map_err(|e| ApiError::internal(format!("error dialing backend: {e}")))?;
    match r8s_api::upgrade::proxy(req, backend, &format!("{host}:{port}"), &path).await {
        Ok(r8s_api::upgrade::Proxied::Switched(resp)) => Ok(resp.map(|()| crate::http::full(Bytes::new()))),
        Ok(r8s_api::upgrade::Proxied::Refused { status, body, .. }) => {
            let code = status.as_u16();
            let msg = String::from_utf8_lossy(&body).trim().to_string();
            Err(ApiError::new(code, reason_of(code), msg))
        }
        Err(e) => Err(ApiError::internal(format!("error dialing backend: {e}"))),
    }
}

/// Admission of a CONNECT (`pods/exec`, `attach`, `portforward`), as upstream's connect
/// handler runs it: the plugins and webhooks see the request's options object
/// (`PodExecOptions`, `PodAttachOptions`, `PodPortForwardOptions`), and any may refuse.
async fn connect_admission(ctx: &Ctx, sub: &str, raw_query: &str) -> Result<(), ApiError> {
    let pairs: Vec<(String, String)> = form_urlencoded::parse(raw_query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let first = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let flag = |k: &str| first(k).is_some_and(|v| crate::request_info::query_bool(&v));
    let mut options = match sub {
        "portforward" => json!({
            "kind": "PodPortForwardOptions",
            "ports": pairs.iter().filter(|(k, _)| k == "ports")
                .flat_map(|(_, v)| v.split(',').filter_map(|p| p.trim().parse::<i64>().ok()).collect::<Vec<_>>())
                .collect::<Vec<_>>(),
        }),
        _ => {
            let mut o = json!({
                "kind": if sub == "exec" { "PodExecOptions" } else { "PodAttachOptions" },
                "stdin": flag("stdin"), "stdout": flag("stdout"), "stderr": flag("stderr"),
                "tty": flag("tty"),
            });
            if let Some(c) = first("container") {
                o["container"] = json!(c);
            }
            if sub == "exec" {
                let command: Vec<&String> = pairs
                    .iter()
                    .filter(|(k, _)| k == "command")
                    .map(|(_, v)| v)
                    .collect();
                o["command"] = json!(command);
            }
            o
        }
    };
    options["apiVersion"] = json!("v1");
    ctx.shared
        .admission
        .run(&mut crate::admission::Attributes {
            operation: crate::admission::Operation::Connect,
            request: &ctx.info,
            user: &ctx.user,
            object: Some(&mut options),
            old_object: None,
            dry_run: false,
            options: None,
            warnings: &ctx.warnings,
        })
        .await
}

/// Upstream's `SplitSchemeNamePort`: `name`, `name:port` or `scheme:name:port` (scheme http
/// or https); `None` when it is none of these.
fn split_scheme_name_port(id: &str) -> Option<(&str, &str, &str)> {
    let parts: Vec<&str> = id.split(':').collect();
    let (scheme, name, port) = match parts.as_slice() {
        [name] => ("", *name, ""),
        [name, port] => ("", *name, *port),
        [scheme, name, port] => (*scheme, *name, *port),
        _ => return None,
    };
    (!name.is_empty() && matches!(scheme, "" | "http" | "https")).then_some((scheme, name, port))
}

/// The scheme, name and port of a proxy request's `[scheme:]name[:port]`; `what` names the
/// resource in the error.
fn proxied<'a>(id: &'a str, what: &str) -> Result<(Scheme, &'a str, &'a str), ApiError> {
    let (scheme, name, port) = split_scheme_name_port(id)
        .ok_or_else(|| ApiError::bad_request(format!("invalid {what} request {id:?}")))?;
    let scheme = if scheme == "https" {
        Scheme::Https
    } else {
        Scheme::Http
    };
    Ok((scheme, name, port))
}

/// How a proxied request reaches its backend. Over https the backend's certificate is not
/// verified, as upstream's proxy transport does not (pods and Services serve what they like).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scheme {
    Http,
    Https,
}

/// Any method on `pods/<name>[:port]/proxy/<path>`: the request passed on over HTTP to the
/// pod's IP and port (the first container port when none is named), and the answer streamed
/// back (upstream's pod `ResourceLocation` and proxy handler, without rewriting links in
/// HTML).
pub(crate) async fn pod_proxy(
    ctx: &Ctx,
    ns: &str,
    id: &str,
    method: &http::Method,
    headers: &http::HeaderMap,
    body: Bytes,
) -> Result<Response<Body>, ApiError> {
    let (scheme, name, port) = proxied(id, "pod")?;
    let pods = crate::registry::catalogue::builtin("", "v1", "pods").expect("pods are served");
    let pod = read(ctx, pods, ns, name).await?;
    let first_port = || {
        pod["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|c| c["ports"][0]["containerPort"].as_i64().map(|p| p.to_string()))
    };
    let port = if port.is_empty() {
        first_port().unwrap_or_else(|| "80".into())
    } else {
        port.to_owned()
    };
    let ip: std::net::IpAddr = pod["status"]["podIP"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| ApiError::bad_request("address not allowed"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| ApiError::bad_request(format!("invalid pod request {id:?}")))?;
    proxy_http(
        ctx,
        scheme,
        std::net::SocketAddr::new(ip, port),
        method,
        headers,
        body,
    )
    .await
}

/// Any method on `services/<name>[:port]/proxy/<path>`: passed on to one of the Service's
/// ready endpoints for that port, picked at random (upstream's service `ResourceLocation`).
pub(crate) async fn service_proxy(
    ctx: &Ctx,
    ns: &str,
    id: &str,
    method: &http::Method,
    headers: &http::HeaderMap,
    body: Bytes,
) -> Result<Response<Body>, ApiError> {
    let (scheme, name, port) = proxied(id, "service")?;
    let services = crate::registry::catalogue::builtin("", "v1", "services").expect("services are served");
    let svc = read(ctx, services, ns, name).await?;
    // A port number names the Service port it is; the endpoints know ports by name.
    let mut port_name = port.to_owned();
    if let Ok(number) = port.parse::<i64>() {
        let found = svc["spec"]["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["port"].as_i64() == Some(number));
        match found {
            Some(p) => port_name = p["name"].as_str().unwrap_or("").to_owned(),
            None => {
                return Err(ApiError::service_unavailable(format!(
                    "no service port {number} found for service {name:?}"
                )))
            }
        }
    }
    let endpoints = crate::registry::catalogue::builtin("", "v1", "endpoints").expect("endpoints are served");
    let none = || ApiError::service_unavailable(format!("no endpoints available for service {name:?}"));
    let ep = read(ctx, endpoints, ns, name).await.map_err(|_| none())?;
    let mut candidates = Vec::new();
    for subset in ep["subsets"].as_array().into_iter().flatten() {
        let Some(p) = subset["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"].as_str().unwrap_or("") == port_name)
        else {
            continue;
        };
        let Some(port) = p["port"].as_u64().and_then(|p| u16::try_from(p).ok()) else {
            continue;
        };
        for a in subset["addresses"].as_array().into_iter().flatten() {
            if let Some(ip) = a["ip"]
                .as_str()
                .and_then(|ip| ip.parse::<std::net::IpAddr>().ok())
            {
                candidates.push(std::net::SocketAddr::new(ip, port));
            }
        }
    }
    if candidates.is_empty() {
        return Err(none());
    }
    let target = candidates[fastrand::usize(..candidates.len())];
    proxy_http(ctx, scheme, target, method, headers, body).await
}

/// Pass a request on over HTTP or HTTPS to `target` (the path after `.../proxy`), and stream
/// the answer back.
async fn proxy_http(
    ctx: &Ctx,
    scheme: Scheme,
    target: std::net::SocketAddr,
    method: &http::Method,
    headers: &http::HeaderMap,
    body: Bytes,
) -> Result<Response<Body>, ApiError> {
    // The path after `.../proxy`, and the query as the client sent it.
    let parts = &ctx.info.parts;
    let after = parts
        .iter()
        .position(|p| p == "proxy")
        .map_or(&[][..], |i| &parts[i + 1..]);
    // `…/proxy` with nothing after it: GET and HEAD are redirected to `…/proxy/`, as upstream's
    // proxy handler does (so relative links resolve under the proxy).
    if after.is_empty()
        && !ctx.info.path.ends_with('/')
        && matches!(*method, http::Method::GET | http::Method::HEAD)
    {
        let location = match ctx.query.as_deref().filter(|q| !q.is_empty()) {
            Some(q) => format!("{}/?{q}", ctx.info.path),
            None => format!("{}/", ctx.info.path),
        };
        return Ok(Response::builder()
            .status(StatusCode::MOVED_PERMANENTLY)
            .header(http::header::LOCATION, location)
            .body(crate::http::full(Bytes::new()))
            .expect("valid response"));
    }
    let mut path = format!("/{}", after.join("/"));
    if ctx.info.path.ends_with('/') && !path.ends_with('/') {
        path.push('/');
    }
    if let Some(q) = ctx.query.as_deref().filter(|q| !q.is_empty()) {
        path = format!("{path}?{q}");
    }
    let host = target.to_string();
    let tcp = tokio::time::timeout(Duration::from_secs(30), tokio::net::TcpStream::connect(&host))
        .await
        .map_err(|_| {
            ApiError::service_unavailable(format!(
                "error trying to reach service: dial tcp {host}: i/o timeout"
            ))
        })?
        .map_err(|e| {
            ApiError::service_unavailable(format!("error trying to reach service: dial tcp {host}: {e}"))
        })?;
    let unreachable = |e: &dyn std::fmt::Display| {
        ApiError::service_unavailable(format!("error trying to reach service: {e}"))
    };
    let mut sender = match scheme {
        Scheme::Http => handshake(tcp).await.map_err(|e| unreachable(&e))?,
        Scheme::Https => {
            let connector = tokio_rustls::TlsConnector::from(proxy_tls());
            let tls = connector
                .connect(ServerName::IpAddress(target.ip().into()), tcp)
                .await
                .map_err(|e| unreachable(&e))?;
            handshake(tls).await.map_err(|e| unreachable(&e))?
        }
    };
    let mut req = http::Request::builder()
        .method(method.clone())
        .uri(&path)
        .header(http::header::HOST, &host);
    for (k, v) in headers {
        if k != http::header::HOST
            && k != http::header::AUTHORIZATION
            && !k.as_str().starts_with("impersonate-")
        {
            req = req.header(k, v);
        }
    }
    let req = req
        .body(http_body_util::Full::new(body))
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| ApiError::service_unavailable(format!("error trying to reach service: {e}")))?;
    let (parts, incoming) = resp.into_parts();
    // HTML is read whole and its links rewritten under the proxy's path (upstream's proxy
    // transport), unless it is compressed (left as it is).
    let is_html = parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.trim_start().to_ascii_lowercase().starts_with("text/html"));
    let encoded = parts
        .headers
        .get(http::header::CONTENT_ENCODING)
        .is_some_and(|v| v.as_bytes() != b"identity");
    if is_html && !encoded {
        let html = incoming
            .collect()
            .await
            .map_err(|e| ApiError::service_unavailable(format!("error trying to reach service: {e}")))?
            .to_bytes();
        // The path up to its `proxy` segment (a namespace may be called `proxy-…`).
        let path = ctx.info.path.as_str();
        let prefix = path
            .match_indices("/proxy")
            .map(|(i, m)| i + m.len())
            .find(|end| matches!(path.as_bytes().get(*end), None | Some(b'/')))
            .map_or(path, |end| &path[..end]);
        let body = super::html_links::rewrite(&html, prefix, &host);
        return Ok(backend_head(&parts)
            .body(crate::http::full(body))
            .expect("valid response"));
    }
    let frames = http_body_util::BodyStream::new(incoming)
        .take_while(|f| std::future::ready(f.is_ok()))
        .filter_map(|f| {
            std::future::ready(
                f.ok()
                    .and_then(|f| f.into_data().ok())
                    .map(|d| Ok::<_, std::convert::Infallible>(Frame::data(d))),
            )
        });
    Ok(backend_head(&parts)
        .body(BodyExt::boxed(StreamBody::new(frames)))
        .expect("valid response"))
}

/// The backend's status and headers for the client, but for those of its own connection and
/// framing (the body is sent again by this server).
fn backend_head(parts: &http::response::Parts) -> http::response::Builder {
    let mut out = Response::builder().status(parts.status);
    for (k, v) in &parts.headers {
        if k != http::header::CONTENT_LENGTH
            && k != http::header::TRANSFER_ENCODING
            && k != http::header::CONNECTION
        {
            out = out.header(k, v);
        }
    }
    out
}

type ProxySender = hyper::client::conn::http1::SendRequest<http_body_util::Full<Bytes>>;

/// An HTTP/1.1 connection over `io`, driven by a task of its own.
async fn handshake<I>(io: I) -> Result<ProxySender, hyper::Error>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// The TLS client of proxied https requests: no client certificate, any server certificate
/// (its handshake signatures still checked).
fn proxy_tls() -> Arc<rustls::ClientConfig> {
    static TLS: std::sync::OnceLock<Arc<rustls::ClientConfig>> = std::sync::OnceLock::new();
    TLS.get_or_init(|| {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyServer(provider)))
            .with_no_client_auth();
        Arc::new(tls)
    })
    .clone()
}

/// The node's kubelet: address, port, and the client this API server reaches it with.
pub(crate) async fn kubelet_of(ctx: &Ctx, node_name: &str) -> Result<(String, u16, KubeletClient), ApiError> {
    let nodes = crate::registry::catalogue::builtin("", "v1", "nodes").expect("nodes are served");
    let node = read(ctx, nodes, "", node_name).await?;
    let (host, port) = kubelet_endpoint(&node)
        .ok_or_else(|| ApiError::internal(format!("node {node_name:?} has no address")))?;
    let kubelet =
        ctx.shared.kubelet.clone().ok_or_else(|| {
            ApiError::service_unavailable("this API server has no kubelet client credentials")
        })?;
    Ok((host, port, kubelet))
}

/// The text a kubelet serves at `path` (at most 16 MiB), or why not; the connection is kept
/// for the next request.
pub(crate) async fn get_text(
    kubelet: &KubeletClient,
    host: &str,
    port: u16,
    path: &str,
) -> Result<String, String> {
    let (resp, sender) = get(kubelet, host, port, path).await?;
    let code = resp.status();
    let body = Limited::new(resp.into_body(), 16 << 20)
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    kubelet.checkin((host.to_owned(), port), sender);
    if !code.is_success() {
        return Err(format!("{code}: {}", String::from_utf8_lossy(&body).trim()));
    }
    String::from_utf8(body.to_vec()).map_err(|e| e.to_string())
}

/// A TLS connection to a kubelet, authenticated with this API server's client certificate.
async fn dial(
    kubelet: &KubeletClient,
    host: &str,
    port: u16,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    let tcp = tokio::net::TcpStream::connect((host, port)).await.map_err(|e| {
        let why = match e.kind() {
            std::io::ErrorKind::ConnectionRefused => "connection refused".to_owned(),
            _ => e.to_string(),
        };
        format!("dial tcp {host}:{port}: connect: {why}")
    })?;
    let _ = tcp.set_nodelay(true);
    let server_name = ServerName::try_from(host.to_string()).map_err(|e| e.to_string())?;
    tokio_rustls::TlsConnector::from(kubelet.tls.clone())
        .connect(server_name, tcp)
        .await
        .map_err(|e| format!("tls: {e}"))
}

/// A kubelet's response body as frames, streamed as they come; at its clean end the
/// connection goes back to the kubelet's idle ones (on an error it is dropped).
fn read_then_return(
    body: hyper::body::Incoming,
    kubelet: KubeletClient,
    to: (String, u16),
    sender: Sender,
) -> impl futures_util::Stream<Item = Result<Frame<Bytes>, std::convert::Infallible>> {
    let returned = Some((kubelet, to, sender));
    futures_util::stream::unfold((body, returned), |(mut body, mut returned)| async move {
        loop {
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        return Some((Ok(Frame::data(data)), (body, returned)));
                    }
                }
                Some(Err(_)) => return None,
                None => {
                    if let Some((kubelet, to, sender)) = returned.take() {
                        kubelet.checkin(to, sender);
                    }
                    return None;
                }
            }
        }
    })
}

/// GET `path` from the kubelet, on an idle connection when there is one, else a new one.
/// Returns the response and the connection's sender, to check in once the body is read.
async fn get(
    kubelet: &KubeletClient,
    host: &str,
    port: u16,
    path: &str,
) -> Result<(Response<hyper::body::Incoming>, Sender), String> {
    let request = || {
        http::Request::builder()
            .method(http::Method::GET)
            .uri(path)
            .header(http::header::HOST, format!("{host}:{port}"))
            .header(http::header::USER_AGENT, "r8s-apiserver")
            .body(http_body_util::Empty::<Bytes>::new())
            .map_err(|e| e.to_string())
    };
    let to = (host.to_owned(), port);
    if let Some(mut sender) = kubelet.checkout(&to) {
        // A kept connection the kubelet closed meanwhile fails at once: then dial anew.
        if sender.ready().await.is_ok() {
            if let Ok(resp) = sender.send_request(request()?).await {
                return Ok((resp, sender));
            }
        }
    }
    let stream = dial(kubelet, host, port).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    // The connection's driver runs until the kubelet closes it or the last sender goes.
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let resp = sender.send_request(request()?).await.map_err(|e| e.to_string())?;
    Ok((resp, sender))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: Value) -> Value {
        json!({"metadata": {"name": "p"}, "spec": spec})
    }

    #[test]
    fn proxy_names_split_as_upstream() {
        assert_eq!(split_scheme_name_port("web"), Some(("", "web", "")));
        assert_eq!(split_scheme_name_port("web:8080"), Some(("", "web", "8080")));
        assert_eq!(
            split_scheme_name_port("https:web:443"),
            Some(("https", "web", "443"))
        );
        assert_eq!(split_scheme_name_port("ftp:web:21"), None);
        assert_eq!(split_scheme_name_port("a:b:c:d"), None);
        assert_eq!(split_scheme_name_port(":80"), None);
    }

    #[test]
    fn the_container_is_checked_as_upstream() {
        let one = pod(json!({"containers": [{"name": "a"}]}));
        assert_eq!(container_of(&one, "p", None).unwrap(), "a");
        let two =
            pod(json!({"containers": [{"name": "a"}, {"name": "b"}], "initContainers": [{"name": "i"}]}));
        assert_eq!(
            container_of(&two, "p", None).unwrap_err().to_status()["message"],
            "a container name must be specified for pod p, choose one of: [a b] or one of the init containers: [i]"
        );
        assert_eq!(container_of(&two, "p", Some("i")).unwrap(), "i");
        let err = container_of(&two, "p", Some("x")).unwrap_err().to_status();
        assert_eq!(err["message"], "container x is not valid for pod p");
        assert_eq!(err["code"], 400);
    }

    #[test]
    fn options_are_validated_and_passed_on() {
        let q = Query::parse(Some(
            "follow=true&tailLines=5&timestamps=true&container=c&limitBytes=10",
        ));
        assert_eq!(
            kubelet_query(&q).unwrap(),
            "follow=true&timestamps=true&tailLines=5&limitBytes=10"
        );
        let bad = kubelet_query(&Query::parse(Some("tailLines=-1")))
            .unwrap_err()
            .to_status();
        assert_eq!(bad["code"], 422);
        assert_eq!(
            bad["message"],
            "PodLogOptions \"\" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0"
        );
        assert_eq!(
            kubelet_query(&Query::parse(Some("limitBytes=0")))
                .unwrap_err()
                .to_status()["code"],
            422
        );
        assert_eq!(
            kubelet_query(&Query::parse(Some(
                "sinceSeconds=5&sinceTime=2026-01-01T00:00:00Z"
            )))
            .unwrap_err()
            .to_status()["code"],
            422
        );
        assert_eq!(
            kubelet_query(&Query::parse(Some("sinceTime=2026-01-01T00:00:00Z"))).unwrap(),
            "sinceTime=2026-01-01T00%3A00%3A00Z"
        );
    }

    #[test]
    fn kubelets_are_found_by_address_type_and_port() {
        let node = json!({"status": {
            "addresses": [{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "10.0.0.5"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 12345}}
        }});
        assert_eq!(kubelet_endpoint(&node), Some(("10.0.0.5".into(), 12345)));
        let plain = json!({"status": {"addresses": [{"type": "Hostname", "address": "n1"}]}});
        assert_eq!(kubelet_endpoint(&plain), Some(("n1".into(), 10250)));
        assert_eq!(kubelet_endpoint(&json!({})), None);
    }

    /// A TLS server on loopback answering every GET with its path; counts connections.
    async fn kubelet_server() -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let svc =
                        hyper::service::service_fn(|req: http::Request<hyper::body::Incoming>| async move {
                            let body = Bytes::from(req.uri().path().to_owned());
                            Ok::<_, hyper::Error>(http::Response::new(http_body_util::Full::new(body)))
                        });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                });
            }
        });
        (port, accepted)
    }

    fn client() -> KubeletClient {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["kube-apiserver-kubelet-client".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        KubeletClient::new(&cert.pem(), &key.serialize_pem()).unwrap()
    }

    async fn fetch(kubelet: &KubeletClient, port: u16, path: &str) -> Vec<u8> {
        let (resp, sender) = get(kubelet, "127.0.0.1", port, path).await.unwrap();
        assert_eq!(resp.status(), 200);
        let frames = read_then_return(
            resp.into_body(),
            kubelet.clone(),
            ("127.0.0.1".into(), port),
            sender,
        );
        let mut out = Vec::new();
        futures_util::pin_mut!(frames);
        while let Some(Ok(frame)) = frames.next().await {
            out.extend_from_slice(&frame.into_data().unwrap());
        }
        out
    }

    #[tokio::test]
    async fn connections_to_a_kubelet_are_reused_once_a_response_is_read() {
        use std::sync::atomic::Ordering;
        let (port, accepted) = kubelet_server().await;
        let kubelet = client();
        for i in 0..3 {
            let path = format!("/containerLogs/ns/p/c{i}");
            assert_eq!(fetch(&kubelet, port, &path).await, path.as_bytes());
        }
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            1,
            "three requests, one connection"
        );
        assert_eq!(kubelet.idle_count("127.0.0.1", port), 1);
        // A response still being read holds its connection: a second request meanwhile dials.
        let (held, _sender) = get(&kubelet, "127.0.0.1", port, "/metrics").await.unwrap();
        assert_eq!(kubelet.idle_count("127.0.0.1", port), 0);
        assert_eq!(fetch(&kubelet, port, "/healthz").await, b"/healthz");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        drop(held);
    }
}
