//! Calling a webhook: one HTTPS POST of an AdmissionReview (HTTP/1.1 over rustls, verified
//! against the webhook's `caBundle`), bounded by its `timeoutSeconds`. Errors read as Go's
//! `net/http` client words them, since upstream's messages quote them.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

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
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    let authority = if ep.port == 443 {
        ep.server_name.clone()
    } else {
        format!("{}:{}", ep.server_name, ep.port)
    };
    let req = http::Request::builder()
        .method(method)
        .uri(&ep.path)
        .header(http::header::HOST, authority)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json, */*")
        .header(http::header::USER_AGENT, "r8s-apiserver")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let result = async {
        let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
        let code = resp.status().as_u16();
        let body = Limited::new(resp.into_body(), MAX_RESPONSE)
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((code, body))
    }
    .await;
    driver.abort();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

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
