//! `r8s agent --hollow N`: N hollow nodes in one process (kubemark's hollow kubelets). Each
//! joins the cluster with the token as a node of its own (its own CSR, certificate and
//! `system:node:NAME` identity, so the Node authorizer and NodeRestriction judge it as a real
//! node), registers, renews its Lease, and runs the pods bound to it through the real agent
//! code over a runtime in memory: they are Running with addresses from its pod CIDR, and
//! nothing runs on the machine. No Service proxy, DNS, overlay or network policy.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use r8s_kubelet::agent::{Agent, AgentOptions, Hollow};
use r8s_kubelet::bootstrap::JoinToken;
use tokio_util::sync::CancellationToken;

/// How many nodes join at once (each waits for its CSR to be signed).
const JOINING: usize = 16;
/// How many nodes start each second: a ramp, so that registrations and their first reads do not
/// all land at once (kubemark's hollow nodes come up as their pods are scheduled).
const STARTS_PER_SECOND: u64 = 100;

/// What every hollow node shares.
pub struct HollowSet {
    pub server: String,
    pub token: Option<String>,
    /// `<data-dir>/hollow`: a directory per node, with its kubeconfig.
    pub dir: PathBuf,
    /// Node names are `<prefix>-<i>`.
    pub prefix: String,
    pub count: usize,
    pub capacity: Hollow,
    /// The options every node starts from (its name and directory are its own).
    pub base: AgentOptions,
}

/// Join (first start) or reuse each node's credentials, then run the nodes until `stop`.
pub async fn run(set: HollowSet, stop: CancellationToken) -> anyhow::Result<()> {
    let set = Arc::new(set);
    let names: Vec<String> = (0..set.count).map(|i| format!("{}-{i}", set.prefix)).collect();
    // Credentials first, a few nodes at a time.
    let token = match &set.token {
        Some(t) => Some(JoinToken::parse(t)?),
        None => None,
    };
    let token = Arc::new(token);
    let gate = Arc::new(tokio::sync::Semaphore::new(JOINING));
    let mut joins = tokio::task::JoinSet::new();
    for name in &names {
        let (set, token, gate, name) = (set.clone(), token.clone(), gate.clone(), name.clone());
        joins.spawn(async move {
            let _permit = gate.acquire_owned().await?;
            credentials(&set, token.as_ref().as_ref(), &name).await
        });
    }
    while let Some(joined) = joins.join_next().await {
        joined??;
    }
    println!(
        "r8s agent: {} hollow nodes joined {} ({}-0 … {}-{})",
        set.count,
        set.server,
        set.prefix,
        set.prefix,
        set.count.saturating_sub(1)
    );
    // Then the nodes, ramping up.
    let mut nodes = tokio::task::JoinSet::new();
    let mut ramp = tokio::time::interval(Duration::from_micros(1_000_000 / STARTS_PER_SECOND));
    for name in names {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = ramp.tick() => {}
        }
        let dir = set.dir.join(&name);
        let config = crate::config_from_kubeconfig(&dir.join("kubelet.kubeconfig")).await?;
        let mut opts = set.base.clone();
        opts.client_ca = config.root_cert.clone().unwrap_or_default();
        // One HTTP/2 connection per node, as a kubelet's client-go has.
        let client = r8s_client::http2::client(config)?;
        opts.node_name = name.clone();
        opts.dir = dir;
        opts.hollow = Some(set.capacity.clone());
        let stop = stop.clone();
        nodes.spawn(async move {
            if let Err(e) = Agent::run(client, opts, stop).await {
                tracing::error!(node = %name, error = %e, "hollow node stopped");
            }
        });
    }
    stop.cancelled().await;
    let _ = tokio::time::timeout(r8s_kubelet::agent::STOP_LIMIT, async {
        while nodes.join_next().await.is_some() {}
    })
    .await;
    Ok(())
}

/// Node `name`'s kubeconfig: kept from an earlier start, or made now by joining with `token`.
async fn credentials(set: &HollowSet, token: Option<&JoinToken>, name: &str) -> anyhow::Result<()> {
    let dir = set.dir.join(name);
    let kubeconfig = dir.join("kubelet.kubeconfig");
    if kubeconfig.exists() {
        return Ok(());
    }
    let token = token
        .context("joining needs --token or --token-file (the server writes <data-dir>/server/node-token)")?;
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let creds = r8s_kubelet::bootstrap::join(&set.server, token, name, Duration::from_secs(300))
        .await
        .with_context(|| format!("hollow node {name}"))?;
    let kc = r8s_apiserver::pki::kubeconfig(&set.server, &creds.ca_pem, &creds.cert_pem, &creds.key_pem);
    r8s_apiserver::pki::write_private(&kubeconfig, &kc)?;
    Ok(())
}

/// `<data-dir>/hollow`.
pub fn dir(data_dir: &Path) -> PathBuf {
    data_dir.join("hollow")
}
