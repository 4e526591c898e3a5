//! Calling a webhook: one HTTPS POST of an AdmissionReview (HTTP/1.1 over rustls, verified
//! against the webhook's `caBundle`), bounded by its `timeoutSeconds`. Errors read as Go's
//! `net/http` client words them, since upstream's messages quote them. Admission and
//! authorization webhooks and OIDC discovery all call through here.
//!
//! Connections are kept and reused as Go's `http.Transport` keeps them (idle for at most 90 s,
//! a few per destination), so a webhook called on every request costs one TLS handshake, not
//! one per call. The pool is ours rather than hyper-util's legacy `Client`: every webhook
//! verifies against its own CA bundle (a TLS configuration per destination), and the dial and
//! handshake errors must keep Go's words, which a connector-based client rewrites.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;

/// Where one call goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Endpoint {
    /// Host to dial: an IP address or a DNS name.
    pub host: String,
    pub port: u16,
    /// The name the server's certificate must carry.
    pub server_name: String,
    /// Path and query of the request.
    pub path: String,
}

impl Endpoint {
    /// The endpoint of `https://host[:port][/path]`, with upstream's `?timeout=` parameter.
    /// The endpoint of `https://host[:port][/path]` as it is.
    pub(crate) fn parse(url: &str) -> Result<Self, String> {
        let mut ep = Self::from_url(url, Duration::ZERO)?;
        ep.path = ep
            .path
            .split_once('?')
            .map(|(p, _)| p.to_owned())
            .unwrap_or(ep.path);
        if let Some(q) = url.split_once('?').map(|(_, q)| q) {
            ep.path = format!("{}?{q}", ep.path);
        }
        Ok(ep)
    }

    pub(crate) fn from_url(url: &str, timeout: Duration) -> Result<Self, String> {
        let rest = url
            .strip_prefix("https://")
            .ok_or_else(|| format!("unsupported protocol scheme in {url:?}"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let (host, port) = split_host_port(authority)?;
        Ok(Self {
            host: host.to_owned(),
            port,
            server_name: host.to_owned(),
            path: with_timeout(path, timeout),
        })
    }

    /// The URL as Go prints it in errors (`Post "https://...": ...`).
    pub(crate) fn url(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == 443 {
            format!("https://{host}{}", self.path)
        } else {
            format!("https://{host}:{}{}", self.port, self.path)
        }
    }
}

fn with_timeout(path: &str, timeout: Duration) -> String {
    let path = if path.is_empty() { "/" } else { path };
    format!("{path}?timeout={}s", timeout.as_secs())
}

/// The endpoint of a Service reference resolved to its cluster IP (`name.namespace.svc` is the
/// name the certificate must carry), as upstream's cluster-IP service resolver does.
pub(crate) fn service_endpoint(
    cluster_ip: &str,
    namespace: &str,
    name: &str,
    path: &str,
    port: u16,
    timeout: Duration,
) -> Endpoint {
    Endpoint {
        host: cluster_ip.to_owned(),
        port,
        server_name: format!("{name}.{namespace}.svc"),
        path: with_timeout(path, timeout),
    }
}

fn split_host_port(authority: &str) -> Result<(&str, u16), String> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("invalid host {authority:?}"))?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().map_err(|_| format!("invalid port {p:?}"))?,
            None => 443,
        };
        return Ok((host, port));
    }
    match authority.rsplit_once(':') {
        Some((h, p)) => Ok((h, p.parse().map_err(|_| format!("invalid port {p:?}"))?)),
        None => Ok((authority, 443)),
    }
}

/// The most a webhook may answer.
const MAX_RESPONSE: usize = 8 << 20;

/// POST `body` to `ep`; the status code and body of the answer, or why there is none.
pub(crate) async fn post(
    ep: &Endpoint,
    tls: Arc<rustls::ClientConfig>,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<(u16, Bytes), String> {
    let url = ep.url();
    match tokio::time::timeout(timeout, send(ep, tls, http::Method::POST, body)).await {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) => Err(format!("Post {url:?}: {e}")),
        Err(_) => Err(format!("Post {url:?}: context deadline exceeded")),
    }
}

/// GET `ep` (OIDC discovery and keys); the status code and body, or why there is none.
pub(crate) async fn get(
    ep: &Endpoint,
    tls: Arc<rustls::ClientConfig>,
    timeout: Duration,
) -> Result<(u16, Bytes), String> {
    let url = ep.url();
    match tokio::time::timeout(timeout, send(ep, tls, http::Method::GET, Vec::new())).await {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) => Err(format!("Get {url:?}: {e}")),
        Err(_) => Err(format!("Get {url:?}: context deadline exceeded")),
    }
}

/// How long an unused connection is kept (Go's `DefaultTransport.IdleConnTimeout`).
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Idle connections kept per destination (Go's `DefaultMaxIdleConnsPerHost` is 2; webhooks
/// called on every request of a busy server use a few more at once).
const MAX_IDLE_PER_DESTINATION: usize = 8;

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// Idle connections by destination: address, certificate name and TLS configuration (by
/// identity: the entry holds the configuration, so its address cannot be reused by another
/// one while connections made with it wait here).
#[derive(Default)]
struct Pool {
    idle: HashMap<PoolKey, Destination>,
}

/// A destination's TLS configuration and its idle connections, each with when it was left.
type Destination = (Arc<rustls::ClientConfig>, Vec<(Sender, Instant)>);

fn pool() -> &'static Mutex<Pool> {
    static POOL: OnceLock<Mutex<Pool>> = OnceLock::new();
    POOL.get_or_init(Mutex::default)
}

type PoolKey = (SocketAddr, String, usize);

/// An idle connection to the destination that is still open, if any.
fn checkout(key: &PoolKey) -> Option<Sender> {
    let mut pool = pool().lock().unwrap_or_else(|e| e.into_inner());
    let (_, idle) = pool.idle.get_mut(key)?;
    while let Some((sender, since)) = idle.pop() {
        if !sender.is_closed() && since.elapsed() < IDLE_TIMEOUT {
            return Some(sender);
        }
    }
    pool.idle.remove(key);
    None
}

/// Keep a connection whose last exchange ended cleanly for the next call.
fn checkin(key: PoolKey, tls: Arc<rustls::ClientConfig>, sender: Sender) {
    if sender.is_closed() {
        return;
    }
    let mut pool = pool().lock().unwrap_or_else(|e| e.into_inner());
    // What no longer serves goes, with the destinations left without connections (a webhook
    // configuration replaced leaves its old TLS configuration behind otherwise).
    pool.idle.retain(|_, (_, idle)| {
        idle.retain(|(s, since)| !s.is_closed() && since.elapsed() < IDLE_TIMEOUT);
        !idle.is_empty()
    });
    let (_, idle) = pool.idle.entry(key).or_insert_with(|| (tls, Vec::new()));
    if idle.len() < MAX_IDLE_PER_DESTINATION {
        idle.push((sender, Instant::now()));
    }
}

/// A new connection: TCP, TLS verified with `tls`, HTTP/1.1. The connection's driver runs until
/// the server closes it or the last sender is dropped.
async fn dial(ep: &Endpoint, addr: SocketAddr, tls: Arc<rustls::ClientConfig>) -> Result<Sender, String> {
    let tcp = tokio::net::TcpStream::connect(addr).await.map_err(|e| {
        let why = match e.kind() {
            std::io::ErrorKind::ConnectionRefused => "connection refused".to_owned(),
            _ => e.to_string(),
        };
        format!("dial tcp {addr}: connect: {why}")
    })?;
    let _ = tcp.set_nodelay(true);
    let server_name = ServerName::try_from(ep.server_name.clone())
        .map_err(|e| format!("tls: invalid server name {:?}: {e}", ep.server_name))?;
    let stream = tokio_rustls::TlsConnector::from(tls)
        .connect(server_name, tcp)
        .await
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => format!("tls: {e}"),
            _ => format!("remote error: {e}"),
        })?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

async fn send(
    ep: &Endpoint,
    tls: Arc<rustls::ClientConfig>,
    method: http::Method,
    body: Vec<u8>,
) -> Result<(u16, Bytes), String> {
    let addr: SocketAddr = match ep.host.parse::<IpAddr>() {
        Ok(ip) => SocketAddr::new(ip, ep.port),
        Err(_) => tokio::net::lookup_host((ep.host.as_str(), ep.port))
            .await
            .map_err(|e| format!("dial tcp: lookup {}: {e}", ep.host))?
            .next()
            .ok_or_else(|| format!("dial tcp: lookup {}: no such host", ep.host))?,
    };
    let key: PoolKey = (addr, ep.server_name.clone(), Arc::as_ptr(&tls) as usize);
    let authority = if ep.port == 443 {
        ep.server_name.clone()
    } else {
        format!("{}:{}", ep.server_name, ep.port)
    };
    let request = || {
        http::Request::builder()
            .method(method.clone())
            .uri(&ep.path)
            .header(http::header::HOST, authority.clone())
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json, */*")
            .header(http::header::USER_AGENT, "r8s-apiserver")
            .body(Full::new(Bytes::from(body.clone())))
            .map_err(|e| e.to_string())
    };
    // A kept connection the server closed meanwhile fails before anything was sent: then the
    // call goes out once more on a new connection, as Go's transport retries it.
    if let Some(mut sender) = checkout(&key) {
        if sender.ready().await.is_ok() {
            match exchange(&mut sender, request()?).await {
                Ok(r) => {
                    checkin(key, tls, sender);
                    return Ok(r);
                }
                Err((e, sent)) if sent => return Err(e),
                Err(_) => {}
            }
        }
    }
    let mut sender = dial(ep, addr, tls.clone()).await?;
    let r = exchange(&mut sender, request()?).await.map_err(|(e, _)| e)?;
    checkin(key, tls, sender);
    Ok(r)
}

/// One request and its whole answer; on failure, whether the request may have reached the
/// server (an error once the answer began, or a body too large).
async fn exchange(
    sender: &mut Sender,
    req: http::Request<Full<Bytes>>,
) -> Result<(u16, Bytes), (String, bool)> {
    let resp = sender.send_request(req).await.map_err(|e| {
        let unsent = e.is_canceled() || e.is_closed();
        (e.to_string(), !unsent)
    })?;
    let code = resp.status().as_u16();
    let body = Limited::new(resp.into_body(), MAX_RESPONSE)
        .collect()
        .await
        .map_err(|e| (e.to_string(), true))?
        .to_bytes();
    Ok((code, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TLS server on loopback for "localhost" answering every request with 200 and its body,
    /// closing the connection after `close_after` requests on it; it counts the connections it
    /// accepted. Returns (port, CA PEM, accepted connections).
    async fn echo_server(close_after: usize) -> (u16, String, Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let ca_pem = cert.pem();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
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
                    let served = Arc::new(AtomicUsize::new(0));
                    let svc = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let n = served.fetch_add(1, Ordering::SeqCst) + 1;
                        async move {
                            let body = req.into_body().collect().await?.to_bytes();
                            let mut resp = http::Response::new(Full::new(body));
                            if n >= close_after {
                                resp.headers_mut()
                                    .insert(http::header::CONNECTION, "close".parse().unwrap());
                            }
                            Ok::<_, hyper::Error>(resp)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                });
            }
        });
        (port, ca_pem, accepted)
    }

    #[tokio::test]
    async fn connections_are_kept_and_reused_until_the_server_closes_them() {
        use std::sync::atomic::Ordering;
        let (port, ca, accepted) = echo_server(3).await;
        let tls = super::super::source::tls_config(ca.as_bytes()).unwrap();
        let ep =
            Endpoint::from_url(&format!("https://localhost:{port}/hook"), Duration::from_secs(5)).unwrap();
        let ep = Endpoint {
            host: "127.0.0.1".into(),
            ..ep
        };
        for i in 0..3 {
            let body = format!("call {i}").into_bytes();
            let (code, answer) = post(&ep, tls.clone(), body.clone(), Duration::from_secs(5))
                .await
                .unwrap();
            assert_eq!((code, answer.as_ref()), (200, body.as_slice()));
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1, "three calls, one connection");
        // The server closed it after the third answer: the next call dials again and works.
        let (code, _) = post(&ep, tls.clone(), b"again".to_vec(), Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(code, 200);
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        // Another TLS configuration (another webhook's CA bundle) never shares a connection.
        let other = super::super::source::tls_config(ca.as_bytes()).unwrap();
        post(&ep, other, b"other".to_vec(), Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(accepted.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn endpoints_from_urls() {
        let t = Duration::from_secs(10);
        let ep = Endpoint::from_url("https://127.0.0.1:8443/validate", t).unwrap();
        assert_eq!(
            ep,
            Endpoint {
                host: "127.0.0.1".into(),
                port: 8443,
                server_name: "127.0.0.1".into(),
                path: "/validate?timeout=10s".into()
            }
        );
        assert_eq!(ep.url(), "https://127.0.0.1:8443/validate?timeout=10s");
        let ep = Endpoint::from_url("https://hooks.example.com", Duration::from_secs(5)).unwrap();
        assert_eq!((ep.port, ep.path.as_str()), (443, "/?timeout=5s"));
        let ep = Endpoint::from_url("https://[::1]:9000/m", t).unwrap();
        assert_eq!((ep.host.as_str(), ep.port), ("::1", 9000));
        assert_eq!(ep.url(), "https://[::1]:9000/m?timeout=10s");
        assert!(Endpoint::from_url("http://x/", t).is_err());
        let svc = service_endpoint("10.43.0.7", "ns", "hook", "/mutate", 443, t);
        assert_eq!(svc.server_name, "hook.ns.svc");
        assert_eq!(svc.url(), "https://10.43.0.7/mutate?timeout=10s");
    }
}
