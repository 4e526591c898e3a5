//! Requests to the API server over kube-rs's client (TLS, credentials, impersonation from the
//! kubeconfig), with kubectl's content negotiation and its errors.

use http::{Method, Request};
use http_body_util::BodyExt;
use serde_json::Value;

use crate::error::{msg, ApiError, Error, Result};

pub const JSON: &str = "application/json";
/// What `kubectl get` asks for when it prints a table.
pub const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

pub struct Rest {
    client: kube::Client,
    /// host:port, for kubectl's "The connection to the server … was refused".
    host: String,
}

impl Rest {
    pub fn new(client: kube::Client, host: String) -> Self {
        Rest { client, host }
    }

    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// A GET whose body is read as it comes (`logs -f`).
    pub async fn stream(&self, method: Method, uri: &str) -> Result<(u16, kube::client::Body)> {
        self.stream_accept(method, uri, "*/*").await
    }

    /// The same with an Accept header (`get -w` asks for Tables).
    pub async fn stream_accept(
        &self,
        method: Method,
        uri: &str,
        accept: &str,
    ) -> Result<(u16, kube::client::Body)> {
        let req = Request::builder()
            .method(method)
            .uri(uri)
            .header(http::header::ACCEPT, accept)
            .body(kube::client::Body::empty())
            .map_err(|e| msg(e.to_string()))?;
        let resp = self
            .client
            .send(req)
            .await
            .map_err(|e| self.connection_error(e))?;
        Ok((resp.status().as_u16(), resp.into_body()))
    }

    /// One request; the status code and body of any answer, an error only when there is none.
    pub async fn send(
        &self,
        method: Method,
        uri: &str,
        accept: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> Result<(u16, Vec<u8>)> {
        let mut req = Request::builder()
            .method(method)
            .uri(uri)
            .header(http::header::ACCEPT, accept);
        let body = match body {
            Some((content_type, bytes)) => {
                req = req.header(http::header::CONTENT_TYPE, content_type);
                bytes
            }
            None => Vec::new(),
        };
        let req = req
            .body(kube::client::Body::from(body))
            .map_err(|e| msg(e.to_string()))?;
        let resp = self
            .client
            .send(req)
            .await
            .map_err(|e| self.connection_error(e))?;
        let code = resp.status().as_u16();
        for w in resp.headers().get_all("warning") {
            if let Some(text) = w.to_str().ok().and_then(warning_text) {
                warn_once(&text);
            }
        }
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| msg(e.to_string()))?
            .to_bytes();
        Ok((code, bytes.to_vec()))
    }

    /// A request whose success is JSON; any other answer is the server's Status.
    pub async fn json(
        &self,
        method: Method,
        uri: &str,
        accept: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> Result<Value> {
        let (code, bytes) = self.send(method, uri, accept, body).await?;
        if !(200..300).contains(&code) {
            return Err(Error::Api(ApiError::from_response(code, &bytes)));
        }
        serde_json::from_slice(&bytes).map_err(|e| msg(format!("unable to decode the server's answer: {e}")))
    }

    /// A PATCH of `body` as `content_type` (merge, strategic, JSON or apply patch).
    pub async fn patch(&self, uri: &str, content_type: &str, body: &Value) -> Result<Value> {
        let bytes = serde_json::to_vec(body).map_err(|e| msg(e.to_string()))?;
        self.json(Method::PATCH, uri, JSON, Some((content_type, bytes)))
            .await
    }

    pub async fn get(&self, uri: &str) -> Result<Value> {
        self.json(Method::GET, uri, JSON, None).await
    }

    fn connection_error(&self, e: kube::Error) -> Error {
        let mut text = e.to_string();
        let mut source: Option<&dyn std::error::Error> = std::error::Error::source(&e);
        while let Some(s) = source {
            text = format!("{text}: {s}");
            source = s.source();
        }
        if text.contains("Connection refused") || text.contains("connection refused") {
            Error::Raw(format!(
                "The connection to the server {} was refused - did you specify the right host or port?",
                self.host
            ))
        } else {
            Error::Raw(format!("Unable to connect to the server: {text}"))
        }
    }
}

/// The text of a `Warning: 299 - "text"` response header (RFC 7234 warn-code, agent and a
/// quoted text); other codes are not the API server's and are left out, as client-go does.
pub(crate) fn warning_text(header: &str) -> Option<String> {
    let rest = header.strip_prefix("299 ")?;
    let (_agent, quoted) = rest.split_once(' ')?;
    let quoted = quoted.trim_start().strip_prefix('"')?;
    let mut out = String::new();
    let mut chars = quoted.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next()?),
            '"' => return Some(out),
            c => out.push(c),
        }
    }
    None
}

/// Print a server warning as kubectl does (`Warning: …` on stderr), each text once a run.
fn warn_once(text: &str) {
    static SEEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if seen.iter().any(|t| t == text) {
        return;
    }
    seen.push(text.to_string());
    eprintln!("Warning: {text}");
}

#[cfg(test)]
mod warning_tests {
    use super::warning_text;

    #[test]
    fn warning_headers_are_unquoted() {
        assert_eq!(
            warning_text(r#"299 - "unknown field \"foo\"""#).as_deref(),
            Some(r#"unknown field "foo""#)
        );
        assert_eq!(warning_text("199 - \"misc\"").as_deref(), None);
        assert_eq!(warning_text("299 - unquoted"), None);
    }
}
