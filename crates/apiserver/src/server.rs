//! HTTPS serving: rustls with optional client certificates verified against the client CA,
//! HTTP/1.1 and HTTP/2 (kubectl speaks h2), one task per connection.

use std::net::IpAddr;
use std::sync::Arc;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::Shared;

/// Where and how to serve.
pub struct ServingConfig {
    pub bind_address: IpAddr,
    pub port: u16,
    /// Serving certificate chain and key (PEM).
    pub cert_pem: String,
    pub key_pem: String,
    /// CA bundle that signs client certificates (PEM), `--client-ca-file`.
    pub client_ca_pem: String,
}

fn certs(pem: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("bad PEM certificate: {e}"))
}

/// The TLS configuration: `cfg`'s serving certificate, client certificates of its client CA
/// or of `request_header_ca` (each authenticator then checks the chain against its own CA).
pub(crate) fn tls_config(
    cfg: &ServingConfig,
    request_header_ca: Option<&str>,
) -> Result<Arc<rustls::ServerConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in certs(&cfg.client_ca_pem)? {
        roots.add(c).map_err(|e| format!("bad client CA: {e}"))?;
    }
    for c in certs(request_header_ca.unwrap_or_default())? {
        roots.add(c).map_err(|e| format!("bad request-header CA: {e}"))?;
    }
    // Clients may come without a certificate (bearer tokens); one they present must verify.
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .map_err(|e| format!("client verifier: {e}"))?;
    let key =
        PrivateKeyDer::from_pem_slice(cfg.key_pem.as_bytes()).map_err(|e| format!("bad serving key: {e}"))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs(&cfg.cert_pem)?, key)
        .map_err(|e| format!("serving certificate: {e}"))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Streams one HTTP/2 connection may have open at once.
pub(crate) const MAX_STREAMS_PER_CONNECTION: u32 = 1000;

pub(crate) async fn serve(listener: TcpListener, tls: Arc<rustls::ServerConfig>, shared: Arc<Shared>) {
    let acceptor = TlsAcceptor::from(tls);
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let shared = shared.clone();
        tokio::spawn(async move {
            let stream = match acceptor.accept(tcp).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
            };
            let peer_certs = Arc::new(crate::authn::PeerCertificates::new(
                stream
                    .get_ref()
                    .1
                    .peer_certificates()
                    .map(|c| c.to_vec())
                    .unwrap_or_default(),
            ));
            let service = service_fn(move |req| {
                let shared = shared.clone();
                let peer_certs = peer_certs.clone();
                async move {
                    Ok::<_, std::convert::Infallible>(
                        crate::handler::handle(
                            shared,
                            req.map(crate::http::RequestBody::new),
                            peer_certs,
                            peer,
                        )
                        .await,
                    )
                }
            });
            let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            // A component's one HTTP/2 connection carries all its watches (the garbage
            // collector alone has one per resource), and hyper's client waits for a free
            // stream where Go's opens another connection: 1,000, as upstream's recommended
            // options give servers that multiplex long-running requests (hyper's default: 200).
            builder.http2().max_concurrent_streams(MAX_STREAMS_PER_CONNECTION);
            if let Err(e) = builder
                .serve_connection_with_upgrades(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}
