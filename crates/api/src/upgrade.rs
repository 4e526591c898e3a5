//! Proxying a connection upgrade, as `kubectl exec`, `attach` and `port-forward` ask for one
//! (SPDY/3.1, or WebSocket from kubectl 1.30): the API server passes the request on to the
//! node's kubelet, and the kubelet to the container runtime's streaming server. The request
//! goes on with its upgrade headers; once the backend has switched protocols the client is
//! answered with the backend's 101 and, when both sides have switched, bytes are copied both
//! ways until either end closes, never interpreted (upstream's `UpgradeAwareHandler`).
//!
//! Shared by the API server and the kubelet, which both sit in the middle of the same stream.

use bytes::Bytes;
use http::{header, HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

/// What the backend answered.
pub enum Proxied {
    /// It switched protocols: answer the client with this 101 (the stream is already being
    /// copied, from the moment the client switches too).
    Switched(Response<()>),
    /// It refused: its status, content type and (first 64 KiB of) body.
    Refused {
        status: StatusCode,
        content_type: Option<String>,
        body: Bytes,
    },
}

/// Headers not passed on: the backend has its own host and credentials.
fn passed_on(name: &header::HeaderName) -> bool {
    !(name == header::HOST
        || name == header::AUTHORIZATION
        || name == header::CONTENT_LENGTH
        || name.as_str().starts_with("impersonate-"))
}

/// Send `req` on to `path_and_query` of `host` over `backend` and, if it switches protocols,
/// join the two upgraded connections.
pub async fn proxy<S, B>(
    mut req: Request<B>,
    backend: S,
    host: &str,
    path_and_query: &str,
) -> Result<Proxied, String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    B: Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(backend))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    let mut out = Request::builder()
        .method(req.method().clone())
        .uri(path_and_query)
        .header(header::HOST, host);
    for (name, value) in req.headers().iter().filter(|(n, _)| passed_on(n)) {
        out = out.header(name, value);
    }
    let out = out.body(Empty::<Bytes>::new()).map_err(|e| e.to_string())?;
    let mut resp = sender.send_request(out).await.map_err(|e| e.to_string())?;
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        let (status, content_type, body) = refusal(resp).await;
        return Ok(Proxied::Refused {
            status,
            content_type,
            body,
        });
    }
    let mut switched = Response::new(());
    *switched.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *switched.headers_mut() = switched_headers(resp.headers());
    let backend_side = hyper::upgrade::on(&mut resp);
    let client_side = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let (Ok(backend), Ok(client)) = (backend_side.await, client_side.await) else {
            return;
        };
        let (mut backend, mut client) = (TokioIo::new(backend), TokioIo::new(client));
        let _ = tokio::io::copy_bidirectional(&mut client, &mut backend).await;
    });
    Ok(Proxied::Switched(switched))
}

/// A backend's answer that did not switch protocols: its status, content type and (first
/// 64 KiB of) body, to be passed on.
pub async fn refusal(resp: Response<Incoming>) -> (StatusCode, Option<String>, Bytes) {
    let status = resp.status();
    let content_type = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let body = Limited::new(resp.into_body(), 64 * 1024)
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    (status, content_type, body)
}

/// The backend's 101 headers, for the client (the protocol it chose, WebSocket's accept key).
fn switched_headers(from: &HeaderMap) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (name, value) in from {
        if name != header::CONTENT_LENGTH && name != header::DATE {
            h.append(name, value.clone());
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_and_host_stay_behind() {
        for (name, kept) in [
            ("host", false),
            ("authorization", false),
            ("impersonate-user", false),
            ("content-length", false),
            ("upgrade", true),
            ("connection", true),
            ("x-stream-protocol-version", true),
            ("sec-websocket-protocol", true),
            ("sec-websocket-key", true),
        ] {
            assert_eq!(passed_on(&header::HeaderName::from_static(name)), kept, "{name}");
        }
    }
}
