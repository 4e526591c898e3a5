//! A kube-rs client over HTTP/2, as client-go's: one connection to the server carries every
//! request and watch of a component. kube-rs's own client speaks HTTP/1.1, which takes a
//! connection per watch and per request in flight; a process running thousands of hollow
//! nodes would run out of file descriptors (and so would the server).

use kube::client::ConfigExt;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A client for `config` (its server, credentials and default namespace) speaking HTTP/2 only
/// (ALPN `h2`: the r8s API server offers it, as kube-apiserver does).
pub fn client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    let tls = config.rustls_client_config()?;
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http2()
        .wrap_connector(http);
    let hyper = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build(https);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .map_err(BoxError::from)
        .service(hyper);
    Ok(kube::Client::new(service, config.default_namespace))
}
