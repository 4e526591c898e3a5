//! The r8s API server: the reference document's kube-apiserver stage.
//!
//! A request goes through the filter chain in order — authentication, audit, authorization,
//! admission — and then to a handler: the health and version endpoints, discovery, or the
//! generic registry for resources.

pub mod admission;
mod aggregator;
pub mod audit;
pub mod authn;
pub mod authz;
mod bootstrap;
mod cel;
mod context;
mod discovery;
mod endpoint_reconciler;
mod endpoints;
mod flowcontrol;
/// Entry points for the fuzz targets in `fuzz/` (not an API).
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::registry::fuzzing::{object, patch, protobuf, query};
}
mod follow;
mod handler;
mod health;
mod http;
mod journey;
pub mod metrics;
mod openapi;
mod openapi_v2;
pub mod pki;
mod protobuf;
pub mod rbac;
mod registry;
pub mod request_info;
mod resource_metrics;
mod server;
pub mod status;
mod watch_cache;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use r8s_store::Store;

pub use aggregator::ProxyIdentity;
pub use endpoints::kubelet::KubeletClient;
pub use registry::allocator::{IpFamily, ServiceCidr, ServiceCidrs};
pub use server::ServingConfig;
pub use watch_cache::Lookup;

/// The Kubernetes version r8s speaks.
pub const KUBERNETES_VERSION: &str = "v1.33.0";

/// What the API server is made of.
pub struct ApiServerConfig {
    pub serving: ServingConfig,
    pub store: Arc<dyn Store>,
    pub authenticators: authn::AuthenticatorChain,
    pub authorizers: authz::AuthorizerChain,
    pub admission: admission::AdmissionChain,
    /// The ranges Service cluster IPs come from (`--service-cidr`, one per IP family).
    pub service_cidrs: ServiceCidrs,
    /// RBAC, when it is one of the authorization modes: its default roles are created and
    /// reconciled at start, and writes of roles and bindings are checked for escalation.
    pub rbac: Option<Arc<rbac::Rbac>>,
    /// Signs TokenRequest tokens (absent: `serviceaccounts/<name>/token` is unavailable).
    pub service_account_tokens: Option<Arc<authn::service_account::ServiceAccountTokens>>,
    /// The audit policy and log (absent: nothing is audited).
    pub audit: Option<audit::AuditOptions>,
    /// How to reach kubelets for `pods/log` (absent: those requests fail with 503).
    pub kubelet: Option<KubeletClient>,
    /// The address other machines and pods reach this server at, which the `kubernetes`
    /// Service's endpoints name (absent: the bind address, unless that is unspecified).
    pub advertise_address: Option<IpAddr>,
    /// How often kubelets are scraped for `metrics.k8s.io` while it is in use (metrics-server's
    /// `--metric-resolution`).
    pub metric_resolution: std::time::Duration,
    /// The client certificate the aggregator presents to aggregated API servers (upstream's
    /// `--proxy-client-cert-file`/`--proxy-client-key-file`); absent: none.
    pub proxy_identity: Option<ProxyIdentity>,
    /// Request-header authentication (`--requestheader-*`): its CA is trusted for client
    /// certificates beside the client CA and published, with the header names, in
    /// `kube-system/extension-apiserver-authentication`; the authenticator itself goes in
    /// `authenticators`. Absent: none.
    pub request_header: Option<authn::RequestHeaderConfig>,
    /// API priority and fairness (`--enable-priority-and-fairness`, on by default): requests
    /// classified by the FlowSchemas and queued by their priority levels.
    pub priority_and_fairness: bool,
    /// How long a request that is not long-running may take before it is answered 504
    /// (`--request-timeout`, upstream's default one minute; a request's own `timeout`
    /// parameter may shorten it).
    pub request_timeout: std::time::Duration,
    /// The lookup the authenticators read objects through, over `store`: the server serves
    /// from its watch cache too, so both share one (absent: the server makes its own cache).
    pub lookup: Option<Lookup>,
}

/// State shared by every request.
pub(crate) struct Shared {
    pub store: Arc<dyn Store>,
    pub authenticators: authn::AuthenticatorChain,
    pub authorizers: authz::AuthorizerChain,
    pub admission: admission::AdmissionChain,
    /// `host:port` clients reach this server at, for discovery's serverAddressByClientCIDRs.
    pub advertise: String,
    pub watch_cache: Arc<watch_cache::WatchCache>,
    /// The resources served: built-ins and established custom resources.
    pub served: registry::catalogue::Served,
    /// The OpenAPI documents of what is served.
    pub openapi: openapi::Cache,
    /// API priority and fairness.
    pub flow_control: flowcontrol::FlowControl,
    /// API aggregation: group versions served by other API servers.
    pub aggregator: aggregator::Aggregator,
    pub service_cidrs: ServiceCidrs,
    pub metrics: metrics::Metrics,
    pub rbac: Option<Arc<rbac::Rbac>>,
    pub service_account_tokens: Option<Arc<authn::service_account::ServiceAccountTokens>>,
    pub audit: Option<Arc<audit::Auditor>>,
    pub kubelet: Option<KubeletClient>,
    /// `--request-timeout`.
    pub request_timeout: std::time::Duration,
    /// The kubelets' resource usage, for `metrics.k8s.io`.
    pub resource_metrics: Arc<resource_metrics::ResourceMetrics>,
}

/// A running API server.
pub struct ApiServer {
    pub local_addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
    shared: Arc<Shared>,
    tls: Arc<rustls::ServerConfig>,
    /// Further listeners ([`ApiServer::serve_also`]) and background tasks.
    also: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// The address this server is an endpoint of the `kubernetes` Service at.
    advertise: Option<IpAddr>,
}

impl ApiServer {
    /// Bind and start serving.
    pub async fn start(config: ApiServerConfig) -> Result<Self, std::io::Error> {
        bootstrap::ensure_namespaces(config.store.as_ref())
            .await
            .map_err(|e| std::io::Error::other(format!("creating the system namespaces: {e}")))?;
        bootstrap::ensure_priority_classes(config.store.as_ref())
            .await
            .map_err(|e| std::io::Error::other(format!("creating the system priority classes: {e}")))?;
        bootstrap::ensure_extension_authentication(
            config.store.as_ref(),
            &config.serving.client_ca_pem,
            config.request_header.as_ref(),
        )
        .await
        .map_err(|e| std::io::Error::other(format!("writing extension-apiserver-authentication: {e}")))?;
        bootstrap::ensure_flow_control(config.store.as_ref())
            .await
            .map_err(|e| std::io::Error::other(format!("creating the flow-control configuration: {e}")))?;
        bootstrap::ensure_local_apiservices(config.store.as_ref())
            .await
            .map_err(|e| std::io::Error::other(format!("registering the local APIServices: {e}")))?;
        bootstrap::ensure_default_service_cidr(config.store.as_ref(), &config.service_cidrs)
            .await
            .map_err(|e| std::io::Error::other(format!("creating the default ServiceCIDR: {e}")))?;
        if let Some(rbac) = &config.rbac {
            bootstrap::ensure_rbac_policy(config.store.as_ref())
                .await
                .map_err(|e| std::io::Error::other(format!("creating the default RBAC policy: {e}")))?;
            rbac.wait_synced().await;
        }
        let listener =
            tokio::net::TcpListener::bind((config.serving.bind_address, config.serving.port)).await?;
        let local_addr = listener.local_addr()?;
        bootstrap::ensure_kubernetes_service(
            config.store.as_ref(),
            config.service_cidrs.primary(),
            local_addr.port(),
        )
        .await
        .map_err(|e| std::io::Error::other(format!("creating the kubernetes service: {e}")))?;
        let advertise = config
            .advertise_address
            .or(Some(config.serving.bind_address).filter(|a| !a.is_unspecified()));
        if let Some(ip) = advertise {
            endpoint_reconciler::reconcile(
                config.store.as_ref(),
                ip,
                local_addr.port(),
                std::time::SystemTime::now(),
            )
            .await
            .map_err(|e| std::io::Error::other(format!("writing the kubernetes endpoints: {e}")))?;
        }
        let tls = server::tls_config(
            &config.serving,
            config.request_header.as_ref().map(|r| r.client_ca_pem.as_str()),
        )
        .map_err(std::io::Error::other)?;
        let metrics = metrics::Metrics::default();
        let flow_control = if config.priority_and_fairness {
            flowcontrol::FlowControl::start(config.store.clone())
        } else {
            flowcontrol::FlowControl::disabled()
        };
        metrics.register_flow_control(&flow_control.metrics);
        let audit = match config.audit {
            Some(options) => {
                let path = options.log.path.clone();
                Some(audit::Auditor::start(options, &metrics.audit).map_err(|e| {
                    std::io::Error::other(format!("opening the audit log {}: {e}", path.display()))
                })?)
            }
            None => None,
        };
        let shared = Arc::new(Shared {
            watch_cache: match config.lookup {
                Some(l) => l.cache(),
                None => Arc::new(watch_cache::WatchCache::new(config.store.clone())),
            },
            served: registry::catalogue::Served::builtin(),
            openapi: Default::default(),
            flow_control,
            aggregator: aggregator::Aggregator::new(config.proxy_identity.clone()),
            service_cidrs: config.service_cidrs.clone(),
            metrics,
            audit,
            store: config.store,
            authenticators: config.authenticators,
            authorizers: config.authorizers,
            admission: config.admission,
            rbac: config.rbac,
            service_account_tokens: config.service_account_tokens,
            kubelet: config.kubelet,
            request_timeout: config.request_timeout,
            resource_metrics: Arc::new(resource_metrics::ResourceMetrics::new(config.metric_resolution)),
            advertise: local_addr.to_string(),
        });
        let crds = tokio::spawn(registry::custom::controller::run(shared.clone()));
        let aggregation = tokio::spawn(aggregator::run(shared.clone()));
        let task = tokio::spawn(server::serve(listener, tls.clone(), shared.clone()));
        let mut also = vec![crds, aggregation];
        if let Some(ip) = advertise {
            also.push(tokio::spawn(endpoint_reconciler::run(
                shared.store.clone(),
                ip,
                local_addr.port(),
            )));
        }
        Ok(Self {
            local_addr,
            task,
            shared,
            tls,
            also: std::sync::Mutex::new(also),
            advertise,
        })
    }

    /// Serve another in-process component's metrics on `/metrics` too.
    pub fn add_metrics(&self, source: impl Fn() -> String + Send + Sync + 'static) {
        self.shared.metrics.add_source(Box::new(source));
    }

    /// Serve on another listener too, with the same certificate and handlers (r8s serves
    /// the `kubernetes` Service's cluster IP on the node this way, so pods reach an API
    /// server that listens on loopback only).
    pub fn serve_also(&self, listener: tokio::net::TcpListener) {
        let task = tokio::spawn(server::serve(listener, self.tls.clone(), self.shared.clone()));
        self.also.lock().unwrap().push(task);
    }

    /// A clean stop: this server's lease on the `kubernetes` Service's endpoints goes, so
    /// clients are sent to the other servers at once (upstream's RemoveEndpoints at shutdown).
    pub async fn leave(&self) {
        let Some(ip) = self.advertise else { return };
        let store = self.shared.store.clone();
        let removed = endpoint_reconciler::remove(store.as_ref(), ip, self.local_addr.port());
        match tokio::time::timeout(std::time::Duration::from_secs(5), removed).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "could not remove this server from the kubernetes endpoints")
            }
            Err(_) => tracing::warn!("removing this server from the kubernetes endpoints timed out"),
        }
    }

    /// Stop accepting connections.
    pub fn stop(&self) {
        self.task.abort();
        for t in self.also.lock().unwrap().iter() {
            t.abort();
        }
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.stop();
    }
}
