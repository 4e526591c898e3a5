//! `r8s`: Kubernetes in one binary. This file only parses arguments and composes the crates.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use r8s_store::embedded::{EmbeddedOptions, EmbeddedStore};
use r8s_store::etcd::{EtcdOptions, EtcdStore};
use r8s_store::{CompactionPolicy, Store};

#[derive(Parser)]
#[command(
    name = "r8s",
    version,
    about = "Kubernetes, written in Rust, shipped as one binary"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the control plane of a cluster.
    Server(ServerArgs),
}

#[derive(Args)]
struct ServerArgs {
    /// Where r8s keeps its state (default /var/lib/r8s as root, else ~/.r8s).
    #[arg(long, short = 'd', env = "R8S_DATA_DIR")]
    data_dir: Option<PathBuf>,

    /// Store everything in an etcd cluster instead of the embedded datastore: comma-separated
    /// client URLs, e.g. http://127.0.0.1:2379,http://127.0.0.1:22379.
    #[arg(long, env = "R8S_DATASTORE_ENDPOINT")]
    datastore_endpoint: Option<String>,

    /// How often the datastore's old revisions are compacted (0 turns it off).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    datastore_compaction_interval: Duration,

    /// How many of the latest revisions each compaction keeps.
    #[arg(long, default_value_t = 1000)]
    datastore_compaction_retain: i64,

    /// HTTPS port of the API server.
    #[arg(long, default_value_t = 6443)]
    https_listen_port: u16,

    /// Address the API server listens on (0.0.0.0 for every interface; the default keeps it
    /// to this machine).
    #[arg(long, default_value = "127.0.0.1")]
    bind_address: std::net::IpAddr,

    /// Extra host name or IP for the serving certificate (repeatable).
    #[arg(long = "tls-san")]
    tls_san: Vec<String>,

    /// Where to write the admin kubeconfig (default <data-dir>/kubeconfig.yaml), mode 0600.
    #[arg(long, env = "R8S_KUBECONFIG_OUTPUT")]
    write_kubeconfig: Option<PathBuf>,

    /// CA bundle that signs client certificates (default: the cluster CA r8s made).
    #[arg(long)]
    client_ca_file: Option<PathBuf>,

    /// Static bearer tokens, Kubernetes CSV format: token,user,uid,"group1,group2".
    #[arg(long)]
    token_auth_file: Option<PathBuf>,

    /// The range Service cluster IPs are allocated from (k3s's default).
    #[arg(long, default_value = "10.43.0.0/16", value_parser = r8s_apiserver::ServiceCidr::parse)]
    service_cidr: r8s_apiserver::ServiceCidr,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: expected a number followed by s, m or h"))?;
    match unit {
        "" | "s" => Ok(Duration::from_secs(n)),
        "ms" => Ok(Duration::from_millis(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        "h" => Ok(Duration::from_secs(n * 3600)),
        _ => Err(format!(
            "invalid duration {s:?}: unknown unit {unit:?} (use ms, s, m or h)"
        )),
    }
}

fn default_data_dir() -> PathBuf {
    // /proc/self belongs to the process's effective user.
    let is_root = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false);
    if is_root {
        PathBuf::from("/var/lib/r8s")
    } else {
        std::env::var_os("HOME")
            .map(|h| PathBuf::from(h).join(".r8s"))
            .unwrap_or_else(|| PathBuf::from(".r8s"))
    }
}

async fn open_store(args: &ServerArgs, data_dir: &std::path::Path) -> anyhow::Result<Arc<dyn Store>> {
    if let Some(endpoints) = &args.datastore_endpoint {
        let store = EtcdStore::connect(EtcdOptions::from_endpoint_list(endpoints))
            .await
            .context("connecting to the etcd datastore")?;
        let revision = store.current_revision().await.context("reading from etcd")?;
        tracing::info!(%endpoints, revision, "using etcd datastore");
        return Ok(Arc::new(store));
    }
    let mut opts = EmbeddedOptions::new(data_dir.join("server").join("db"));
    opts.compaction = CompactionPolicy {
        interval: (!args.datastore_compaction_interval.is_zero())
            .then_some(args.datastore_compaction_interval),
        retain_revisions: args.datastore_compaction_retain,
    };
    let store = tokio::task::spawn_blocking(move || EmbeddedStore::open(opts)).await??;
    Ok(Arc::new(store))
}

fn host_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
}

async fn server(args: ServerArgs) -> anyhow::Result<()> {
    let data_dir = args.data_dir.clone().unwrap_or_else(default_data_dir);
    let store = open_store(&args, &data_dir).await?;
    tracing::info!(
        backend = store.backend(),
        revision = store.current_revision().await?,
        data_dir = %data_dir.display(),
        "datastore ready"
    );

    // PKI: made at first start, reused after.
    let mut sans: Vec<String> = [
        "localhost",
        "127.0.0.1",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    sans.extend(host_name());
    if !args.bind_address.is_unspecified() && !args.bind_address.is_loopback() {
        sans.push(args.bind_address.to_string());
    }
    sans.extend(args.tls_san.iter().cloned());
    let tls_dir = data_dir.join("server").join("tls");
    let pki = {
        let sans = sans.clone();
        tokio::task::spawn_blocking(move || r8s_apiserver::pki::Pki::ensure(&tls_dir, &sans)).await??
    };
    let client_ca_pem = match &args.client_ca_file {
        Some(path) => std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?,
        None => pki.ca_cert_pem.clone(),
    };

    let mut authenticators = r8s_apiserver::authn::AuthenticatorChain::default();
    authenticators.push(r8s_apiserver::authn::X509Authenticator);
    if let Some(path) = &args.token_auth_file {
        authenticators
            .push(r8s_apiserver::authn::TokenFileAuthenticator::from_file(path).map_err(anyhow::Error::msg)?);
    }
    let mut authorizers = r8s_apiserver::authz::AuthorizerChain::default();
    authorizers.push(r8s_apiserver::authz::PrivilegedGroups::masters());

    let api = r8s_apiserver::ApiServer::start(r8s_apiserver::ApiServerConfig {
        serving: r8s_apiserver::ServingConfig {
            bind_address: args.bind_address,
            port: args.https_listen_port,
            cert_pem: pki.serving_cert_pem.clone(),
            key_pem: pki.serving_key_pem.clone(),
            client_ca_pem,
        },
        store: store.clone(),
        authenticators,
        authorizers,
        admission: Default::default(),
        service_cidr: args.service_cidr,
    })
    .await
    .with_context(|| format!("serving on {}:{}", args.bind_address, args.https_listen_port))?;

    let host = if args.bind_address.is_unspecified() {
        "127.0.0.1".to_owned()
    } else {
        match args.bind_address {
            std::net::IpAddr::V6(v6) => format!("[{v6}]"),
            v4 => v4.to_string(),
        }
    };
    let kubeconfig_path = args
        .write_kubeconfig
        .clone()
        .unwrap_or_else(|| data_dir.join("kubeconfig.yaml"));
    let kubeconfig = pki.admin_kubeconfig(&format!("https://{host}:{}", api.local_addr.port()));
    r8s_apiserver::pki::write_private(&kubeconfig_path, &kubeconfig)?;
    println!("r8s server: API server listening on https://{}", api.local_addr);
    println!("r8s server: wrote kubeconfig {}", kubeconfig_path.display());
    println!(
        "r8s server: try: kubectl --kubeconfig {} get nodes",
        kubeconfig_path.display()
    );
    // SIGINT (Ctrl-C) or SIGTERM (what init systems and `kill` send) stop the server.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    api.stop();
    tracing::info!("shutting down");
    Ok(())
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("R8S_LOG").unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        match cli.command {
            Command::Server(args) => server(args).await,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_like_kubernetes_flags() {
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("30").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert!(parse_duration("5x").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("m").is_err());
    }
}
