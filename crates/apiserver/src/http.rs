//! HTTP framing: the response body type and the builders every endpoint answers with. Nothing
//! here knows about resources; the registry returns values and the endpoints frame them.

use bytes::Bytes;
use http::{header, HeaderMap, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use serde_json::Value;

use crate::status::ApiError;

pub(crate) type Body = BoxBody<Bytes, std::convert::Infallible>;

/// How much of a request body left unread is read and thrown away after the answer (Go's
/// server reads up to 256 KiB for the same reason), and for how long at most.
const DRAIN_LIMIT: usize = 256 << 10;
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(5);

/// A request's body as the handlers see it. A handler may answer without reading it (a 401 or
/// 403 before the body was looked at); dropping an HTTP/2 request body unread resets its stream
/// (RST_STREAM CANCEL), and the reset can overtake the answer, so that a client still sending
/// sees "stream error" instead of the 401 (curl does). What is left unread is therefore read in
/// the background, bounded in bytes and time, so the answer goes out before the stream ends.
pub(crate) struct RequestBody {
    inner: Option<hyper::body::Incoming>,
}

impl RequestBody {
    pub(crate) fn new(inner: hyper::body::Incoming) -> Self {
        Self { inner: Some(inner) }
    }
}

impl hyper::body::Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, hyper::Error>>> {
        match self.inner.as_mut() {
            Some(inner) => std::pin::Pin::new(inner).poll_frame(cx),
            None => std::task::Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.as_ref().map(|b| b.size_hint()).unwrap_or_default()
    }
}

impl Drop for RequestBody {
    fn drop(&mut self) {
        use hyper::body::Body as _;
        let Some(mut body) = self.inner.take() else { return };
        if body.is_end_stream() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let drain = async {
                let mut read = 0usize;
                while let Some(Ok(frame)) = body.frame().await {
                    read += frame.data_ref().map_or(0, |d| d.len());
                    if read > DRAIN_LIMIT {
                        break;
                    }
                }
            };
            let _ = tokio::time::timeout(DRAIN_TIME, drain).await;
        });
    }
}

pub(crate) fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

/// A JSON value as upstream's serializer writes it: Go's `json.Encoder` ends each value with a
/// newline (clients that print or compare an error body verbatim see it).
pub(crate) fn json_response(code: StatusCode, value: &Value) -> Response<Body> {
    let mut body = serde_json::to_vec(value).unwrap_or_default();
    body.push(b'\n');
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .body(full(body))
        .expect("valid response")
}

pub(crate) fn text_response(code: StatusCode, text: String) -> Response<Body> {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .header("X-Content-Type-Options", "nosniff")
        .body(full(text))
        .expect("valid response")
}

pub(crate) fn error_response(err: &ApiError) -> Response<Body> {
    let mut resp = json_response(
        StatusCode::from_u16(err.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &err.to_status(),
    );
    // A Status that says when to retry says it in the header too, as upstream's response
    // writers do.
    let retry = err.details.as_ref().and_then(|d| d["retryAfterSeconds"].as_i64());
    if let Some(secs) = retry.filter(|s| *s > 0) {
        if let Ok(v) = http::HeaderValue::from_str(&secs.to_string()) {
            resp.headers_mut().entry(header::RETRY_AFTER).or_insert(v);
        }
    }
    resp
}

/// A JSON body sent as it is (stored bytes, already encoded).
pub(crate) fn raw_json(code: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .body(full(body))
        .expect("valid response")
}

/// Add `Warning` headers (RFC 7234 code 299), which kubectl prints as "Warning: ...".
pub(crate) fn with_warnings(mut resp: Response<Body>, warnings: &[String]) -> Response<Body> {
    for w in warnings {
        let value = format!("299 - \"{}\"", w.replace('\\', "\\\\").replace('"', "\\\""));
        if let Ok(v) = http::HeaderValue::from_str(&value) {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
    resp
}

/// The request's `Content-Type`, or "".
pub(crate) fn content_type(headers: &HeaderMap) -> &str {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// What `Accept: application/json;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1` (first)
/// asks for: objects cut down to their metadata (kube-rs's `get_metadata`, `list_metadata`,
/// `watch_metadata`, `patch_metadata`; client-go's metadata client).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Partial {
    One,
    List,
}

pub(crate) fn wants_partial(headers: &HeaderMap) -> Option<Partial> {
    let first = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())?
        .split(',')
        .next()?;
    let params: Vec<&str> = first.split(';').map(str::trim).collect();
    if !params.contains(&"g=meta.k8s.io") {
        return None;
    }
    if params.contains(&"as=PartialObjectMetadataList") {
        Some(Partial::List)
    } else if params.contains(&"as=PartialObjectMetadata") {
        Some(Partial::One)
    } else {
        None
    }
}

/// `obj` as a `meta.k8s.io/v1` PartialObjectMetadata.
pub(crate) fn partial_object(obj: &serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| serde_json::json!({})),
    })
}

/// A PartialObjectMetadataList of `items` with the list's metadata.
pub(crate) fn partial_list(meta: &serde_json::Value, items: &[serde_json::Value]) -> serde_json::Value {
    serde_json::json!({
        "kind": "PartialObjectMetadataList",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "items": items.iter().map(partial_object).collect::<Vec<_>>(),
    })
}

/// Whether the client asks for a Table (`Accept: application/json;as=Table;…` first).
pub(crate) fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.split(',').next().unwrap_or("").contains("as=Table"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_error_body_is_a_status_ending_with_a_newline() {
        let resp = error_response(&ApiError::forbidden("no"));
        assert_eq!(resp.status(), StatusCode::FORBIDDEN);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert!(body.ends_with(b"}\n"), "{body:?}");
        let status: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["reason"], "Forbidden");
        assert_eq!(status["code"], 403);
    }
}
