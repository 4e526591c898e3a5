//! The webhooks of all MutatingWebhookConfigurations (or ValidatingWebhookConfigurations), kept
//! current by following the datastore (as the RBAC authorizer follows roles), compiled once per
//! change: selectors parsed, CA bundles turned into TLS client configurations. Upstream's
//! `configuration.NewMutatingWebhookConfigurationManager`, which sorts configurations by name.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use r8s_api::selector::{from_label_selector, Selector};
use r8s_store::Store;
use serde_json::Value;
use tokio::sync::watch;

use crate::follow::{self, Change};

/// One rule of a webhook (`RuleWithOperations`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Rule {
    pub operations: Vec<String>,
    pub api_groups: Vec<String>,
    pub api_versions: Vec<String>,
    pub resources: Vec<String>,
    /// `*`, `Cluster` or `Namespaced`.
    pub scope: String,
}

/// `clientConfig.service`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ServiceRef {
    pub namespace: String,
    pub name: String,
    pub path: String,
    pub port: u16,
}

/// One webhook of a configuration, ready to match and call.
pub(crate) struct Hook {
    /// The configuration it belongs to.
    pub configuration: String,
    pub name: String,
    pub rules: Vec<Rule>,
    /// `failurePolicy: Ignore`.
    pub fail_open: bool,
    /// `matchPolicy: Equivalent`.
    pub equivalent: bool,
    pub namespace_selector: Result<Selector, String>,
    pub object_selector: Result<Selector, String>,
    pub side_effects: Option<String>,
    pub timeout: Duration,
    /// `reinvocationPolicy: IfNeeded` (mutating webhooks).
    pub reinvoke: bool,
    pub review_versions: Vec<String>,
    pub url: Option<String>,
    pub service: Option<ServiceRef>,
    /// TLS client settings trusting `caBundle` (or the system's roots without one).
    pub tls: Result<Arc<rustls::ClientConfig>, String>,
    /// `matchConditions`: CEL expressions that must all hold for the webhook to be called.
    pub match_conditions: Vec<(String, crate::cel::Expr)>,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect()
}

fn selector(v: &Value) -> Result<Selector, String> {
    if v.is_null() {
        return Ok(Selector::default());
    }
    from_label_selector(v)
}

/// TLS client settings that trust the PEM certificates of `ca_bundle`, or the system's roots
/// when it is empty (as upstream).
pub(crate) fn tls_config(ca_bundle: &[u8]) -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    if ca_bundle.is_empty() {
        let native = rustls_native_certs::load_native_certs();
        for c in native.certs {
            let _ = roots.add(c);
        }
    } else {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(ca_bundle)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("unable to load root certificates: {e}"))?;
        if certs.is_empty() {
            return Err("unable to load root certificates: no certificates found in caBundle".into());
        }
        for c in certs {
            roots
                .add(c)
                .map_err(|e| format!("unable to load root certificates: {e}"))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(cfg))
}

impl Hook {
    /// The webhook at `v` (already defaulted when stored) of configuration `configuration`.
    pub(crate) fn parse(configuration: &str, v: &Value) -> Hook {
        let rules = v["rules"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| Rule {
                operations: strings(&r["operations"]),
                api_groups: strings(&r["apiGroups"]),
                api_versions: strings(&r["apiVersions"]),
                resources: strings(&r["resources"]),
                scope: r["scope"].as_str().unwrap_or("*").to_owned(),
            })
            .collect();
        let cc = &v["clientConfig"];
        let service = cc["service"].is_object().then(|| ServiceRef {
            namespace: cc["service"]["namespace"].as_str().unwrap_or("").to_owned(),
            name: cc["service"]["name"].as_str().unwrap_or("").to_owned(),
            path: cc["service"]["path"].as_str().unwrap_or("").to_owned(),
            port: cc["service"]["port"]
                .as_u64()
                .and_then(|p| u16::try_from(p).ok())
                .unwrap_or(443),
        });
        let tls = base64::engine::general_purpose::STANDARD
            .decode(cc["caBundle"].as_str().unwrap_or(""))
            .map_err(|e| format!("caBundle is not valid base64: {e}"))
            .and_then(|ca| tls_config(&ca));
        Hook {
            configuration: configuration.to_owned(),
            name: v["name"].as_str().unwrap_or("").to_owned(),
            rules,
            fail_open: v["failurePolicy"] == "Ignore",
            equivalent: v["matchPolicy"] != "Exact",
            namespace_selector: selector(&v["namespaceSelector"]),
            object_selector: selector(&v["objectSelector"]),
            side_effects: v["sideEffects"].as_str().map(str::to_owned),
            timeout: Duration::from_secs(v["timeoutSeconds"].as_u64().unwrap_or(10).clamp(1, 30)),
            reinvoke: v["reinvocationPolicy"] == "IfNeeded",
            review_versions: strings(&v["admissionReviewVersions"]),
            url: cc["url"].as_str().map(str::to_owned),
            match_conditions: v["matchConditions"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    (
                        c["name"].as_str().unwrap_or("").to_owned(),
                        crate::cel::Expr::compile(c["expression"].as_str().unwrap_or("")),
                    )
                })
                .collect(),
            service,
            tls,
        }
    }
}

/// Every webhook of every configuration of one kind, configurations in name order.
pub(crate) type Hooks = Arc<Vec<Arc<Hook>>>;

/// Compile the configurations (keyed by name) into their webhooks.
pub(crate) fn compile(configs: &BTreeMap<String, Value>) -> Hooks {
    let mut hooks = Vec::new();
    for (name, cfg) in configs {
        for h in cfg["webhooks"].as_array().into_iter().flatten() {
            hooks.push(Arc::new(Hook::parse(name, h)));
        }
    }
    Arc::new(hooks)
}

/// The webhooks of one kind of configuration, following the datastore.
#[derive(Clone)]
pub(crate) struct Source {
    rx: watch::Receiver<Option<Hooks>>,
}

impl Source {
    /// Follow the configurations under `prefix` (e.g. `/registry/mutatingwebhookconfigurations/`).
    pub(crate) fn start(store: Arc<dyn Store>, prefix: &'static [&'static str], what: &'static str) -> Self {
        let (tx, rx) = watch::channel(None);
        let mut configs: BTreeMap<String, Value> = BTreeMap::new();
        let mut dirty = false;
        let strip = prefix[0];
        follow::spawn(store, prefix, what, move |change| match change {
            Change::Reset => {
                configs.clear();
                dirty = true;
            }
            Change::Put(key, json) => {
                if let Ok(obj) = serde_json::from_slice(json) {
                    configs.insert(key.strip_prefix(strip).unwrap_or(key).to_owned(), obj);
                    dirty = true;
                }
            }
            Change::Delete(key) => {
                configs.remove(key.strip_prefix(strip).unwrap_or(key));
                dirty = true;
            }
            Change::BatchEnd => {
                if dirty {
                    dirty = false;
                    tx.send_replace(Some(compile(&configs)));
                }
            }
        });
        Self { rx }
    }

    /// The current webhooks; waits (a while) for the first list after start-up, as upstream's
    /// plugins wait for their informers to sync.
    pub(crate) async fn hooks(&self) -> Option<Hooks> {
        if let Some(h) = self.rx.borrow().as_ref() {
            return Some(h.clone());
        }
        let mut rx = self.rx.clone();
        let got = tokio::time::timeout(Duration::from_secs(10), rx.wait_for(Option::is_some)).await;
        match got {
            Ok(Ok(h)) => h.clone(),
            _ => None,
        }
    }
}
