//! A small HTTPS server on 127.0.0.1 with a certificate from a CA made for the test (rcgen,
//! rustls, hyper), answering JSON requests with a handler: the peer for webhooks, OIDC issuers
//! and other services the API server calls. Stopped when dropped.

use std::convert::Infallible;
use std::future::Future;
use std::net::{SocketAddr, TcpListener};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::Value;

/// What the server answers: from the request's path and JSON body (null if none; other text
/// as a string), a JSON body.
pub type Handler = Arc<dyn Fn(String, Value) -> Pin<Box<dyn Future<Output = Value> + Send>> + Send + Sync>;

pub struct HttpsServer {
    pub addr: SocketAddr,
    /// The CA that signed the server's certificate (PEM).
    pub ca_pem: String,
    runtime: Option<tokio::runtime::Runtime>,
}

impl HttpsServer {
    pub fn start(handler: Handler) -> Self {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, SanType};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "test CA");
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params
            .subject_alt_names
            .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
        let cert = params.signed_by(&key, &issuer).unwrap();

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));

        let std_listener = TcpListener::bind("127.0.0.1:0").unwrap();
        std_listener.set_nonblocking(true).unwrap();
        let addr = std_listener.local_addr().unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let acceptor = acceptor.clone();
                let handler = handler.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                        let handler = handler.clone();
                        async move {
                            // As Go's server: an HTTP/1.1 request must name its Host.
                            if req.version() == http::Version::HTTP_11 && !req.headers().contains_key("host")
                            {
                                return Ok::<_, Infallible>(
                                    Response::builder()
                                        .status(400)
                                        .body(Full::new(Bytes::from_static(
                                            b"400 Bad Request: missing required Host header",
                                        )))
                                        .unwrap(),
                                );
                            }
                            let path = req.uri().path().to_owned();
                            let body = req
                                .into_body()
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            // JSON bodies parsed; any other text (a form) as a string.
                            let request: Value = serde_json::from_slice(&body).unwrap_or_else(|_| {
                                match std::str::from_utf8(&body) {
                                    Ok(t) if !t.is_empty() => Value::String(t.to_owned()),
                                    _ => Value::Null,
                                }
                            });
                            let answer = handler(path, request).await;
                            Ok::<_, Infallible>(
                                Response::builder()
                                    .header("Content-Type", "application/json")
                                    .body(Full::new(Bytes::from(serde_json::to_vec(&answer).unwrap())))
                                    .unwrap(),
                            )
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        HttpsServer {
            addr,
            ca_pem: ca_cert.pem(),
            runtime: Some(runtime),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    /// Stop serving: connections are refused from now on.
    pub fn stop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(Duration::from_secs(5));
        }
    }
}

impl Drop for HttpsServer {
    fn drop(&mut self) {
        self.stop();
    }
}
