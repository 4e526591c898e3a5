//! `--cluster-init`: the datastore is a real etcd cluster with a member beside each server, as
//! k3s embeds etcd. r8s runs the distribution's `etcd` (what `scripts/setup.sh` installs) as a
//! child process and keeps it running: mutual TLS on its client and peer ports from the etcd CA
//! every server shares (`Pki::etcd`), the first server's member starts a new cluster, a joining
//! server's member is added through etcd's cluster API (MemberAdd on the first server's member)
//! and starts into the existing cluster, and a member that exits is started again (the server
//! never exits for it). No consensus of r8s's own: three servers survive the loss of one
//! because etcd does.
//!
//! The member dies with its server (PR_SET_PDEATHSIG), as k3s's in-process etcd does: a power
//! cut of the server is one of its member too.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use r8s_store::etcd::{EtcdOptions, EtcdTls};

/// Where a member listens.
#[derive(Clone, Debug)]
pub struct MemberConfig {
    /// The member's name (the server's node name).
    pub name: String,
    /// This server's address, for its peers and for other servers' clients.
    pub ip: IpAddr,
    pub client_port: u16,
    pub peer_port: u16,
    /// The member's data directory.
    pub data_dir: PathBuf,
    /// Where its log goes.
    pub log: PathBuf,
    /// The etcd certificates' directory (`etcd-ca.crt`, `etcd-server.{crt,key}`).
    pub tls_dir: PathBuf,
}

fn host(ip: IpAddr) -> String {
    match ip {
        IpAddr::V6(v6) => format!("[{v6}]"),
        v4 => v4.to_string(),
    }
}

impl MemberConfig {
    pub fn peer_url(&self) -> String {
        format!("https://{}:{}", host(self.ip), self.peer_port)
    }

    pub fn client_url(&self) -> String {
        format!("https://{}:{}", host(self.ip), self.client_port)
    }

    /// The URL this server's own clients use: loopback (its own address when that is a
    /// loopback one, as for several servers on one machine).
    fn local_client_url(&self) -> String {
        if self.ip.is_loopback() {
            return self.client_url();
        }
        let loopback = if self.ip.is_ipv6() { "[::1]" } else { "127.0.0.1" };
        format!("https://{loopback}:{}", self.client_port)
    }

    /// Where [`MemberConfig::record`] keeps what `r8s etcd-snapshot` needs to find the member.
    pub fn record_path(server_dir: &Path) -> PathBuf {
        server_dir.join("db").join("etcd-member.json")
    }

    /// Write down the member's name and addresses beside its data, for `r8s etcd-snapshot`
    /// (which runs without the server's flags).
    fn record(&self) -> anyhow::Result<()> {
        let server_dir = self
            .data_dir
            .parent()
            .and_then(Path::parent)
            .context("the member's data directory is not under a server's")?;
        let record = serde_json::json!({
            "name": self.name,
            "peerURL": self.peer_url(),
            "clientURL": self.local_client_url(),
        });
        std::fs::write(Self::record_path(server_dir), format!("{record:#}\n"))?;
        Ok(())
    }

    fn started_before(&self) -> bool {
        self.data_dir.join("member").exists()
    }

    fn args(&self, initial: Option<(&str, &str)>) -> Vec<String> {
        let tls = |f: &str| self.tls_dir.join(f).display().to_string();
        let mut listen = vec![self.local_client_url()];
        if self.client_url() != self.local_client_url() {
            listen.push(self.client_url());
        }
        let mut args = vec![
            format!("--name={}", self.name),
            format!("--data-dir={}", self.data_dir.display()),
            format!("--listen-client-urls={}", listen.join(",")),
            format!("--advertise-client-urls={}", self.client_url()),
            format!("--listen-peer-urls={}", self.peer_url()),
            format!("--initial-advertise-peer-urls={}", self.peer_url()),
            "--client-cert-auth".into(),
            format!("--trusted-ca-file={}", tls("etcd-ca.crt")),
            format!("--cert-file={}", tls("etcd-server.crt")),
            format!("--key-file={}", tls("etcd-server.key")),
            "--peer-client-cert-auth".into(),
            format!("--peer-trusted-ca-file={}", tls("etcd-ca.crt")),
            format!("--peer-cert-file={}", tls("etcd-server.crt")),
            format!("--peer-key-file={}", tls("etcd-server.key")),
            // k3s's choice: fewer entries between snapshots keep the member's memory small.
            "--snapshot-count=10000".into(),
            "--logger=zap".into(),
            "--log-outputs=stderr".into(),
        ];
        // Only a member's first start says which cluster it is in; after that its data does.
        if let Some((cluster, state)) = initial {
            args.push(format!("--initial-cluster={cluster}"));
            args.push(format!("--initial-cluster-state={state}"));
            args.push("--initial-cluster-token=r8s".into());
        }
        args
    }
}

/// The client options for this server's own member (over loopback, with the API server's
/// etcd client certificate).
pub fn local_options(cfg: &MemberConfig, tls: EtcdTls) -> EtcdOptions {
    let mut opts = EtcdOptions::from_endpoint_list(&cfg.local_client_url());
    opts.tls = Some(tls);
    opts
}

/// A running member, started again whenever it exits, until the server stops.
pub struct Member {
    child: Arc<Mutex<Option<tokio::process::Child>>>,
    stopping: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

fn spawn(cfg: &MemberConfig, args: &[String]) -> anyhow::Result<tokio::process::Child> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&cfg.log)
        .with_context(|| format!("opening {}", cfg.log.display()))?;
    let mut cmd = tokio::process::Command::new(r8s_store::etcd_process::etcd_binary());
    cmd.args(args)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn().with_context(|| {
        format!(
            "running {} (install Debian's etcd-server: scripts/setup.sh)",
            r8s_store::etcd_process::etcd_binary()
        )
    })
}

impl Member {
    /// Start the member: the first of a new cluster (`join` None), or one added to the cluster
    /// whose member answers at `join` (a client URL), or, when it has run before, on its data.
    pub async fn start(cfg: MemberConfig, tls: EtcdTls, join: Option<String>) -> anyhow::Result<Self> {
        std::fs::create_dir_all(&cfg.data_dir)?;
        cfg.record()?;
        let initial = if cfg.started_before() {
            None
        } else if let Some(url) = join {
            let mut opts = EtcdOptions::from_endpoint_list(&url);
            opts.tls = Some(tls.clone());
            Some((add_to(&opts, &cfg).await?, "existing"))
        } else {
            Some((format!("{}={}", cfg.name, cfg.peer_url()), "new"))
        };
        let first_args = cfg.args(initial.as_ref().map(|(c, s)| (c.as_str(), *s)));
        let later_args = cfg.args(None);
        let child = Arc::new(Mutex::new(Some(spawn(&cfg, &first_args)?)));
        let stopping = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(supervise(
            cfg.clone(),
            later_args,
            child.clone(),
            stopping.clone(),
        ));
        let member = Member {
            child,
            stopping,
            task,
        };
        member.wait_ready(&cfg, &tls).await?;
        Ok(member)
    }

    /// Until the member answers reads (a joining member first catches up with the leader).
    async fn wait_ready(&self, cfg: &MemberConfig, tls: &EtcdTls) -> anyhow::Result<()> {
        let opts = local_options(cfg, tls.clone());
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            let last = match r8s_store::etcd::EtcdStore::connect(opts.clone()).await {
                Ok(store) => match r8s_store::Store::current_revision(&store).await {
                    Ok(_) => return Ok(()),
                    Err(e) => e.to_string(),
                },
                Err(e) => e.to_string(),
            };
            if tokio::time::Instant::now() > deadline {
                let log = std::fs::read_to_string(&cfg.log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(20).collect();
                anyhow::bail!(
                    "the etcd member did not become ready within 120 s: {last}\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Stop the member (SIGTERM, then SIGKILL after 10 s): a leader hands its leadership to
    /// another member first, so the cluster does not wait out an election timeout.
    pub async fn stop(self) {
        // The supervisor holds the child while it waits on it and gives it back once it sees
        // the cancellation: only then is there a child to stop.
        self.stopping.cancel();
        let _ = self.task.await;
        let child = self.child.lock().unwrap().take();
        if let Some(mut child) = child {
            if let Some(pid) = child.id() {
                unsafe {
                    libc::kill(pid as i32, libc::SIGTERM);
                }
            }
            if tokio::time::timeout(Duration::from_secs(10), child.wait())
                .await
                .is_err()
            {
                let _ = child.kill().await;
            }
        }
    }
}

/// [`add_once`], again while the cluster refuses: etcd takes a member only while every
/// member has been connected for a few seconds ("unhealthy cluster" just after another
/// server joined).
async fn add_to(opts: &EtcdOptions, cfg: &MemberConfig) -> anyhow::Result<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match add_once(opts, cfg).await {
            Ok(cluster) => return Ok(cluster),
            Err(e) if tokio::time::Instant::now() < deadline => {
                tracing::info!(error = %format!("{e:#}"), "the etcd cluster cannot take this member yet; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Add this member to the cluster at `opts` (unless a former attempt already did): the
/// `--initial-cluster` it starts with.
async fn add_once(opts: &EtcdOptions, cfg: &MemberConfig) -> anyhow::Result<String> {
    let peer = cfg.peer_url();
    let list = r8s_store::etcd::member_list(opts)
        .await
        .context("listing the cluster's etcd members")?;
    let earlier = list.iter().find(|m| m.peer_urls.contains(&peer));
    let members = match earlier {
        // Added by an attempt that never started it: start it now.
        Some(m) if m.name.is_empty() => list,
        // A member of this address that ran before, whose data is gone: it goes, and this
        // one is added in its place.
        Some(m) => {
            r8s_store::etcd::member_remove(opts, m.id)
                .await
                .context("removing this address's former etcd member")?;
            r8s_store::etcd::member_add(opts, &peer)
                .await
                .context("adding this server's etcd member to the cluster")?
        }
        None => r8s_store::etcd::member_add(opts, &peer)
            .await
            .context("adding this server's etcd member to the cluster")?,
    };
    Ok(members
        .iter()
        .map(|m| {
            let name = if m.peer_urls.contains(&peer) {
                cfg.name.as_str()
            } else {
                m.name.as_str()
            };
            m.peer_urls
                .iter()
                .map(|u| format!("{name}={u}"))
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect::<Vec<_>>()
        .join(","))
}

/// Wait on the member; when it exits (not stopped), start it again after a back-off (1 s
/// doubling to 30 s, reset after a minute up).
async fn supervise(
    cfg: MemberConfig,
    args: Vec<String>,
    child: Arc<Mutex<Option<tokio::process::Child>>>,
    stopping: tokio_util::sync::CancellationToken,
) {
    let mut backoff = Duration::from_secs(1);
    loop {
        let Some(mut running) = child.lock().unwrap().take() else {
            return;
        };
        let started = tokio::time::Instant::now();
        let pid = running.id();
        let status = tokio::select! {
            s = running.wait() => s,
            _ = stopping.cancelled() => {
                *child.lock().unwrap() = Some(running);
                return;
            }
        };
        if started.elapsed() > Duration::from_secs(60) {
            backoff = Duration::from_secs(1);
        }
        tracing::warn!(?pid, ?status, retry_in = ?backoff, "the etcd member exited; starting it again");
        loop {
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = stopping.cancelled() => return,
            }
            backoff = (backoff * 2).min(Duration::from_secs(30));
            match spawn(&cfg, &args) {
                Ok(c) => {
                    *child.lock().unwrap() = Some(c);
                    break;
                }
                Err(e) => tracing::error!(error = %e, retry_in = ?backoff, "cannot start the etcd member"),
            }
        }
    }
}

/// A member's name: the server's node name and a short hash of its peer address (k3s adds a
/// random suffix): unique in the cluster even for servers of one host name, and the same at
/// every start of the server.
pub fn member_name(node: &str, ip: IpAddr, peer_port: u16) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, format!("{ip}:{peer_port}").as_bytes());
    let hex: String = digest.as_ref()[..4].iter().map(|b| format!("{b:02x}")).collect();
    format!("{node}-{hex}")
}

/// The etcd client certificate of this server, as the store takes it.
pub fn tls_of(pki: &r8s_apiserver::pki::EtcdPki) -> EtcdTls {
    EtcdTls {
        ca_pem: pki.ca_pem.clone(),
        cert_pem: pki.client_cert_pem.clone(),
        key_pem: pki.client_key_pem.clone(),
    }
}

/// The member's data directory under the server's.
pub fn data_dir(server_dir: &Path) -> PathBuf {
    server_dir.join("db").join("etcd")
}

/// What a server wrote down about its member ([`MemberConfig::record`]).
#[derive(Debug, serde::Deserialize)]
pub struct Recorded {
    pub name: String,
    #[serde(rename = "peerURL")]
    pub peer_url: String,
    #[serde(rename = "clientURL")]
    pub client_url: String,
}

impl Recorded {
    /// The record of the member of the server whose directory is `server_dir`, if it runs one.
    pub fn read(server_dir: &Path) -> anyhow::Result<Option<Self>> {
        let path = MemberConfig::record_path(server_dir);
        match std::fs::read(&path) {
            Ok(b) => Ok(Some(
                serde_json::from_slice(&b).with_context(|| format!("reading {}", path.display()))?,
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_first_start_names_the_cluster() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = MemberConfig {
            name: "s1".into(),
            ip: "192.0.2.1".parse().unwrap(),
            client_port: 2379,
            peer_port: 2380,
            data_dir: dir.path().join("etcd"),
            log: dir.path().join("etcd.log"),
            tls_dir: dir.path().into(),
        };
        let first = cfg.args(Some(("s1=https://192.0.2.1:2380", "new")));
        assert!(first.contains(&"--initial-cluster=s1=https://192.0.2.1:2380".to_string()));
        assert!(
            first.contains(&"--listen-client-urls=https://127.0.0.1:2379,https://192.0.2.1:2379".to_string())
        );
        assert!(
            first.contains(&"--client-cert-auth".to_string())
                && first.contains(&"--peer-client-cert-auth".to_string())
        );
        assert!(!cfg.started_before());
        std::fs::create_dir_all(cfg.data_dir.join("member")).unwrap();
        assert!(cfg.started_before());
        assert!(!cfg.args(None).iter().any(|a| a.starts_with("--initial-cluster")));
    }
}
