//! API aggregation (upstream's kube-aggregator): an APIService with a `service` hands its
//! group version to another API server. Requests for it are proxied to one of the Service's
//! ready endpoints (as upstream's `--enable-aggregator-routing`: the API server needs no
//! Service proxy on its own machine) over TLS, verified against the APIService's `caBundle`
//! (or not, with `insecureSkipTLSVerify`), with the front-proxy client certificate and the
//! requesting user in `X-Remote-User`, `X-Remote-Group` and `X-Remote-Extra-*`. An
//! availability check sets each APIService's `Available` condition as upstream words it, and
//! discovery lists the available ones.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use bytes::Bytes;
use http::{header, Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};

use crate::authn::UserInfo;
use crate::http::Body;
use crate::status::ApiError;
use crate::Shared;

/// The front-proxy identity the aggregator presents (PEM certificate chain and key).
#[derive(Clone)]
pub struct ProxyIdentity {
    pub cert_pem: String,
    pub key_pem: String,
    /// The CA that signed it (what aggregated servers trust for request headers).
    pub ca_pem: String,
}

/// Where one aggregated group version goes.
#[derive(Clone)]
pub(crate) struct Route {
    pub group: String,
    pub version: String,
    pub group_priority: i64,
    pub version_priority: i64,
    namespace: String,
    service: String,
    port: u16,
    tls: Arc<rustls::ClientConfig>,
    /// Whether the last check passed (requests go only to available APIServices).
    pub available: bool,
    /// The backend's APIResourceList for the group version, from the last check.
    pub resources: Value,
}

/// The aggregated group versions of one server.
#[derive(Default)]
pub(crate) struct Aggregator {
    routes: RwLock<HashMap<(String, String), Route>>,
    identity: Option<ProxyIdentity>,
    /// The APIServices' condition last written, to write only changes.
    written: Mutex<HashMap<String, (bool, String)>>,
}

/// Accepts any server certificate (`insecureSkipTLSVerify: true`).
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// TLS settings for an APIService: its CA bundle (or no verification) and our front-proxy
/// client certificate.
fn tls_for(spec: &Value, identity: Option<&ProxyIdentity>) -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = if spec["insecureSkipTLSVerify"] == true {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
    } else {
        use base64::Engine;
        let ca = base64::engine::general_purpose::STANDARD
            .decode(spec["caBundle"].as_str().unwrap_or(""))
            .map_err(|e| format!("caBundle is not valid base64: {e}"))?;
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(&ca) {
            roots
                .add(c.map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        }
        builder.with_root_certificates(roots)
    };
    let cfg = match identity {
        Some(id) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(id.cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|e| e.to_string())?;
            let key = PrivateKeyDer::from_pem_slice(id.key_pem.as_bytes()).map_err(|e| e.to_string())?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| e.to_string())?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(cfg))
}

impl Aggregator {
    pub fn new(identity: Option<ProxyIdentity>) -> Self {
        Self {
            identity,
            ..Default::default()
        }
    }

    /// The route of `group`/`version`, if an APIService hands it elsewhere.
    pub fn route(&self, group: &str, version: &str) -> Option<Route> {
        self.routes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(group.to_owned(), version.to_owned()))
            .cloned()
    }

    /// The available aggregated group versions.
    pub fn available(&self) -> Vec<Route> {
        let mut out: Vec<Route> = self
            .routes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .filter(|r| r.available)
            .cloned()
            .collect();
        out.sort_by(|a, b| {
            b.group_priority
                .cmp(&a.group_priority)
                .then_with(|| a.group.cmp(&b.group))
                .then_with(|| b.version_priority.cmp(&a.version_priority))
        });
        out
    }
}

impl Route {
    /// The Host an HTTP/1.1 request to the backend names (its Service's DNS name).
    fn host(&self) -> String {
        format!("{}.{}.svc:{}", self.service, self.namespace, self.port)
    }
}

/// A ready address of the Service's endpoints for `port` (the Service port's target).
async fn endpoint(shared: &Shared, ns: &str, name: &str, port: u16) -> Result<SocketAddr, (String, String)> {
    let svc_def = crate::registry::catalogue::builtin("", "v1", "services").expect("served");
    let svc = crate::registry::system::get(shared.store.as_ref(), svc_def, ns, name)
        .await
        .map_err(|_| {
            (
                "ServiceNotFound".to_owned(),
                format!("service/{name} in \"{ns}\" is not present"),
            )
        })?;
    let sp = svc["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["port"].as_u64() == Some(port as u64))
        .cloned()
        .ok_or_else(|| {
            (
                "ServiceNotFound".to_owned(),
                format!("service/{name} in \"{ns}\" is not listening on port {port}"),
            )
        })?;
    let ep_def = crate::registry::catalogue::builtin("", "v1", "endpoints").expect("served");
    let eps = crate::registry::system::get(shared.store.as_ref(), ep_def, ns, name)
        .await
        .map_err(|_| {
            (
                "MissingEndpoints".to_owned(),
                format!(
                    "endpoints for service/{name} in \"{ns}\" have no addresses with port name {:?}",
                    sp["name"].as_str().unwrap_or("")
                ),
            )
        })?;
    for subset in eps["subsets"].as_array().into_iter().flatten() {
        let target = subset["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"] == sp["name"] || subset["ports"].as_array().map_or(0, Vec::len) == 1)
            .and_then(|p| p["port"].as_u64());
        let Some(target) = target else { continue };
        if let Some(ip) = subset["addresses"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a["ip"].as_str())
            .find_map(|ip| ip.parse::<std::net::IpAddr>().ok())
        {
            return Ok(SocketAddr::new(ip, target as u16));
        }
    }
    Err((
        "MissingEndpoints".to_owned(),
        format!(
            "endpoints for service/{name} in \"{ns}\" have no addresses with port name {:?}",
            sp["name"].as_str().unwrap_or("")
        ),
    ))
}

/// Open a TLS connection to `route`'s backend and hand back a request sender.
async fn connect(
    shared: &Shared,
    route: &Route,
) -> Result<hyper::client::conn::http1::SendRequest<Body>, (String, String)> {
    let addr = endpoint(shared, &route.namespace, &route.service, route.port).await?;
    let failed = |e: String| ("FailedDiscoveryCheck".to_owned(), e);
    let tcp = tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| failed(format!("dial tcp {addr}: i/o timeout")))?
        .map_err(|e| failed(format!("dial tcp {addr}: {e}")))?;
    let server_name =
        rustls::pki_types::ServerName::try_from(format!("{}.{}.svc", route.service, route.namespace))
            .map_err(|e| failed(e.to_string()))?;
    let tls = tokio_rustls::TlsConnector::from(route.tls.clone())
        .connect(server_name, tcp)
        .await
        .map_err(|e| failed(format!("tls: {e}")))?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| failed(e.to_string()))?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    Ok(sender)
}

/// A streamed response body (watches included) as the server's body type: ends at the first
/// error (the client sees the stream end, as when the backend goes).
fn stream_body<B>(body: B) -> Body
where
    B: hyper::body::Body<Data = Bytes> + Send + Sync + Unpin + 'static,
{
    let stream = futures_util::stream::unfold(Some(body), |state| async move {
        let mut body = state?;
        match body.frame().await {
            Some(Ok(frame)) => Some((Ok::<Frame<Bytes>, std::convert::Infallible>(frame), Some(body))),
            _ => None,
        }
    });
    BodyExt::boxed(StreamBody::new(stream))
}

/// Proxy a request for an aggregated group version to its backend.
pub(crate) async fn proxy(
    shared: &Shared,
    route: &Route,
    user: &UserInfo,
    req: Request<crate::http::RequestBody>,
) -> Result<Response<Body>, ApiError> {
    if !route.available {
        return Err(ApiError::service_unavailable(format!(
            "the server is currently unable to handle the request ({}/{} is not available)",
            route.group, route.version
        )));
    }
    let mut sender = connect(shared, route)
        .await
        .map_err(|(_, e)| ApiError::service_unavailable(format!("error trying to reach service: {e}")))?;
    let (parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/")
        .to_owned();
    // HTTP/1.1 names its Host (a Go server refuses a request without one; a client speaking
    // HTTP/2 to us sent `:authority` instead).
    let mut out = Request::builder()
        .method(parts.method.clone())
        .uri(path)
        .header(header::HOST, route.host());
    for (k, v) in parts.headers.iter() {
        let name = k.as_str();
        let hop = matches!(
            name,
            "connection"
                | "keep-alive"
                | "proxy-connection"
                | "transfer-encoding"
                | "upgrade"
                | "te"
                | "authorization"
                | "host"
        ) || name.starts_with("impersonate-")
            || name.starts_with("x-remote-");
        if !hop {
            out = out.header(k, v);
        }
    }
    out = out.header("X-Remote-User", user.name.as_str());
    for g in &user.groups {
        out = out.header("X-Remote-Group", g.as_str());
    }
    for (k, vs) in &user.extra {
        for v in vs {
            out = out.header(format!("X-Remote-Extra-{k}"), v.as_str());
        }
    }
    let out = out
        .body(stream_body(body))
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let resp = sender
        .send_request(out)
        .await
        .map_err(|e| ApiError::service_unavailable(format!("error trying to reach service: {e}")))?;
    let (parts, body) = resp.into_parts();
    let mut resp = Response::from_parts(parts, stream_body(body));
    resp.headers_mut().remove(header::TRANSFER_ENCODING);
    Ok(resp)
}

/// GET `path` from `route`'s backend: the status and body.
async fn get(shared: &Shared, route: &Route, path: &str) -> Result<(StatusCode, Bytes), (String, String)> {
    let mut sender = connect(shared, route).await?;
    let req = Request::get(path)
        .header(header::HOST, route.host())
        .header(header::ACCEPT, "application/json")
        .header("X-Remote-User", "system:kube-aggregator")
        .header("X-Remote-Group", "system:masters")
        .body(crate::http::full(Bytes::new()))
        .expect("a valid request");
    let resp = tokio::time::timeout(Duration::from_secs(5), sender.send_request(req))
        .await
        .map_err(|_| ("FailedDiscoveryCheck".to_owned(), "timed out".to_owned()))?
        .map_err(|e| ("FailedDiscoveryCheck".to_owned(), e.to_string()))?;
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| ("FailedDiscoveryCheck".to_owned(), e.to_string()))?
        .to_bytes();
    Ok((status, body))
}

/// Follow the APIServices: route the non-local ones, check each every few seconds, and keep
/// their `Available` condition true to what the check found.
pub(crate) async fn run(shared: Arc<Shared>) {
    let def =
        crate::registry::catalogue::builtin("apiregistration.k8s.io", "v1", "apiservices").expect("served");
    loop {
        let services = crate::registry::system::list(shared.store.as_ref(), def, "")
            .await
            .unwrap_or_default();
        let mut routes = HashMap::new();
        for s in &services {
            let spec = &s["spec"];
            if !spec["service"].is_object() {
                continue;
            }
            let (group, version) = (
                spec["group"].as_str().unwrap_or("").to_owned(),
                spec["version"].as_str().unwrap_or("").to_owned(),
            );
            let tls = match tls_for(spec, shared.aggregator.identity.as_ref()) {
                Ok(t) => t,
                Err(e) => {
                    write_condition(&shared, s, false, "FailedDiscoveryCheck", &e).await;
                    continue;
                }
            };
            let mut route = Route {
                group: group.clone(),
                version: version.clone(),
                group_priority: spec["groupPriorityMinimum"].as_i64().unwrap_or(1000),
                version_priority: spec["versionPriority"].as_i64().unwrap_or(15),
                namespace: spec["service"]["namespace"].as_str().unwrap_or("").to_owned(),
                service: spec["service"]["name"].as_str().unwrap_or("").to_owned(),
                port: spec["service"]["port"].as_u64().unwrap_or(443) as u16,
                tls,
                available: false,
                resources: Value::Null,
            };
            let path = format!("/apis/{group}/{version}");
            let (ok, reason, message) = match get(&shared, &route, &path).await {
                Ok((status, body)) if status.is_success() => {
                    route.resources = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    (true, "Passed".to_owned(), "all checks passed".to_owned())
                }
                Ok((status, body)) => (
                    false,
                    "FailedDiscoveryCheck".to_owned(),
                    format!(
                        "failing or missing response from https://{}.{}.svc:{}{path}: bad status from https://{}.{}.svc:{}{path}: {} {}",
                        route.service, route.namespace, route.port, route.service, route.namespace, route.port,
                        status.as_u16(), String::from_utf8_lossy(&body).trim()
                    ),
                ),
                Err((reason, message)) => (false, reason, message),
            };
            route.available = ok;
            write_condition(&shared, s, ok, &reason, &message).await;
            routes.insert((group, version), route);
        }
        *shared
            .aggregator
            .routes
            .write()
            .unwrap_or_else(PoisonError::into_inner) = routes;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Set an APIService's `Available` condition when it changes.
async fn write_condition(shared: &Shared, s: &Value, ok: bool, reason: &str, message: &str) {
    let name = s["metadata"]["name"].as_str().unwrap_or("").to_owned();
    let now = (ok, message.to_owned());
    if shared
        .aggregator
        .written
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&name)
        == Some(&now)
    {
        return;
    }
    let current = s["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Available")
        .cloned();
    let status = if ok { "True" } else { "False" };
    if current
        .as_ref()
        .is_some_and(|c| c["status"] == status && c["message"] == message)
    {
        shared
            .aggregator
            .written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name, now);
        return;
    }
    let mut next = s.clone();
    let transition = match &current {
        Some(c) if c["status"] == status => c["lastTransitionTime"].clone(),
        _ => json!(crate::registry::meta::now_rfc3339()),
    };
    next["status"]["conditions"] = json!([{"type": "Available", "status": status,
        "lastTransitionTime": transition, "reason": reason, "message": message}]);
    let def =
        crate::registry::catalogue::builtin("apiregistration.k8s.io", "v1", "apiservices").expect("served");
    if let Ok(true) = crate::registry::system::update_status(shared.store.as_ref(), def, &next, s).await {
        shared
            .aggregator
            .written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name, now);
    }
}
