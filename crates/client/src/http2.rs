//! A kube-rs client over HTTP/2, as client-go's: one connection to the server carries every
//! request and watch of a component. kube-rs's own client speaks HTTP/1.1, which takes a
//! connection per watch and per request in flight: the server's own components held 109 TLS
//! connections at rest, and a process running thousands of hollow nodes would run out of file
//! descriptors (and so would the server).
//!
//! The service stack is kube-rs's own (`kube::client::ClientBuilder::try_from`) but for the
//! protocol: the base URI, the server-error retry policy, the credentials (refreshed as
//! kube-rs refreshes them), the configured extra headers, and the connect timeout. Like
//! client-go's HTTP/2 transport it pings a connection that has read nothing for 30 s and drops
//! it when no answer comes within 15 s, so a watch on a server that vanished without closing
//! its socket fails over instead of hanging (HTTP/1.1 watches rely on the server's timeout).

use std::time::Duration;

use kube::client::ConfigExt;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// client-go's `ReadIdleTimeout` and `PingTimeout` for HTTP/2 (`k8s.io/client-go/transport`).
const PING_AFTER_IDLE: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(15);

/// A client for `config` (its server, credentials and default namespace) speaking HTTP/2 only
/// (ALPN `h2`: the r8s API server offers it, as kube-apiserver does). Only for servers known to
/// speak HTTP/2 over TLS: r8s's own.
pub fn client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    // Through a proxy (a kubeconfig's `proxy-url`): kube-rs's own client, which speaks to
    // proxies, over HTTP/1.1.
    if config.proxy_url.is_some() {
        return kube::Client::try_from(config);
    }
    let tls = config.rustls_client_config()?;
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(config.connect_timeout);
    http.set_nodelay(true);
    let mut https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    // A kubeconfig's `tls-server-name`: the name the server's certificate is checked for.
    if let Some(name) = &config.tls_server_name {
        let name = rustls::pki_types::ServerName::try_from(name.clone())
            .map_err(|e| kube::Error::Service(format!("tls-server-name {name:?}: {e}").into()))?;
        https = https.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
    }
    let https = https.enable_http2().wrap_connector(http);
    let hyper = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .timer(hyper_util::rt::TokioTimer::new())
        .http2_keep_alive_interval(PING_AFTER_IDLE)
        .http2_keep_alive_timeout(PING_TIMEOUT)
        .http2_keep_alive_while_idle(true)
        .build(https);
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(hyper);
    Ok(kube::Client::new(service, config.default_namespace))
}
