//! Snapshots of a `--cluster-init` server's etcd member, as k3s's `k3s etcd-snapshot` takes
//! them: `r8s etcd-snapshot save|ls|delete|prune|restore`, and the server's scheduled
//! snapshots (`--etcd-snapshot-schedule-cron`, `--etcd-snapshot-retention`).
//!
//! A snapshot is etcd's own (Maintenance.Snapshot: the member's keyspace with its SHA-256 at
//! the end, what `etcdctl snapshot save` writes), named `<name>-<member>-<unix time>` in
//! `<data-dir>/server/db/snapshots`. A restore is etcd's own too (`etcdctl snapshot restore`,
//! from Debian's etcd-client, which `scripts/setup.sh` installs): the snapshot becomes a new
//! one-member cluster in the member's data directory, the old data kept aside, as k3s's
//! `--cluster-reset-restore-path` does.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::Context;
use clap::{Args, Subcommand};
use r8s_store::etcd::{EtcdOptions, EtcdTls};

use crate::cluster_etcd::Recorded;

#[derive(Args)]
pub struct SnapshotArgs {
    #[command(subcommand)]
    action: Action,

    /// The server's data directory (default /var/lib/r8s as root, else ~/.r8s).
    #[arg(long, short = 'd', env = "R8S_DATA_DIR", global = true)]
    data_dir: Option<PathBuf>,

    /// Where snapshots are kept (default <data-dir>/server/db/snapshots).
    #[arg(long = "dir", alias = "etcd-snapshot-dir", global = true)]
    dir: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Action {
    /// Take a snapshot of this server's etcd member now.
    Save {
        /// The snapshot's name; the member's name and the time are added to it.
        #[arg(long, default_value = "on-demand")]
        name: String,
    },
    /// List the snapshots.
    #[command(alias = "list")]
    Ls,
    /// Delete snapshots by name.
    Delete {
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Delete all but the newest snapshots of a name taken by this server.
    Prune {
        #[arg(long, default_value = "on-demand")]
        name: String,
        /// How many to keep.
        #[arg(long, default_value_t = 5)]
        snapshot_retention: usize,
    },
    /// Restore a snapshot into this server's member (the server must be stopped): the member
    /// starts again as a cluster of one with the snapshot's data; the other servers then join
    /// it again.
    Restore {
        /// The snapshot file (a path, or a name in the snapshot directory).
        snapshot: PathBuf,
    },
}

/// Where a server keeps its snapshots unless told otherwise.
pub fn default_dir(server_dir: &Path) -> PathBuf {
    server_dir.join("db").join("snapshots")
}

/// This server's member, as the server recorded it; an error that says why if it runs none.
fn member(server_dir: &Path) -> anyhow::Result<Recorded> {
    Recorded::read(server_dir)?.with_context(|| {
        format!(
            "{} holds no etcd member: snapshots are of servers started with --cluster-init (or joined to one)",
            server_dir.display()
        )
    })
}

/// The client options for this server's member: its client URL, the server's etcd client
/// certificate.
pub fn client_options(server_dir: &Path, client_url: &str) -> anyhow::Result<EtcdOptions> {
    let tls = server_dir.join("tls");
    let read = |f: &str| {
        std::fs::read_to_string(tls.join(f)).with_context(|| format!("reading {}", tls.join(f).display()))
    };
    let mut opts = EtcdOptions::from_endpoint_list(client_url);
    opts.tls = Some(EtcdTls {
        ca_pem: read("etcd-ca.crt")?,
        cert_pem: read("etcd-client.crt")?,
        key_pem: read("etcd-client.key")?,
    });
    Ok(opts)
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// Take a snapshot named `<name>-<member>-<unix time>` in `dir`; its path and size.
pub async fn save(
    opts: &EtcdOptions,
    member: &str,
    dir: &Path,
    name: &str,
) -> anyhow::Result<(PathBuf, u64)> {
    if name.is_empty() || name.contains('/') {
        anyhow::bail!("invalid snapshot name {name:?}: a name is not empty and has no '/'");
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("{name}-{member}-{}", unix_now()));
    let size = r8s_store::etcd::snapshot_to(opts, &path)
        .await
        .with_context(|| format!("saving a snapshot of etcd at {}", opts.endpoints.join(",")))?;
    Ok((path, size))
}

/// One snapshot on disk.
struct Snapshot {
    name: String,
    path: PathBuf,
    size: u64,
    created: SystemTime,
}

/// The snapshots in `dir`, oldest first (a save in progress, `*.part`, is none).
fn list(dir: &Path) -> anyhow::Result<Vec<Snapshot>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    let mut all = Vec::new();
    for entry in entries {
        let entry = entry?;
        let meta = entry.metadata()?;
        let name = entry.file_name().to_string_lossy().to_string();
        if !meta.is_file() || name.ends_with(".part") {
            continue;
        }
        all.push(Snapshot {
            name,
            path: entry.path(),
            size: meta.len(),
            created: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        });
    }
    all.sort_by(|a, b| a.created.cmp(&b.created).then(a.name.cmp(&b.name)));
    Ok(all)
}

/// Delete all but the newest `keep` snapshots named `<name>-<member>-…` in `dir`; the names
/// deleted.
pub fn prune(dir: &Path, name: &str, member: &str, keep: usize) -> anyhow::Result<Vec<String>> {
    let prefix = format!("{name}-{member}-");
    let ours: Vec<Snapshot> = list(dir)?
        .into_iter()
        .filter(|s| {
            s.name
                .strip_prefix(&prefix)
                .is_some_and(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect();
    let mut gone = Vec::new();
    for s in ours.iter().take(ours.len().saturating_sub(keep)) {
        std::fs::remove_file(&s.path).with_context(|| format!("deleting {}", s.path.display()))?;
        gone.push(s.name.clone());
    }
    Ok(gone)
}

/// Whether something answers on the host and port of `url` (the member of a running server).
fn answers(url: &str) -> bool {
    let hostport = url.split("://").nth(1).unwrap_or(url).trim_end_matches('/');
    std::net::ToSocketAddrs::to_socket_addrs(hostport)
        .into_iter()
        .flatten()
        .any(|a| std::net::TcpStream::connect_timeout(&a, Duration::from_secs(1)).is_ok())
}

/// Restore `snapshot` into the member of the server in `server_dir` (stopped): etcd's restore
/// into a new directory beside, the member's old data moved aside, the new one in its place.
/// The directory the old data went to.
fn restore(server_dir: &Path, member: &Recorded, snapshot: &Path) -> anyhow::Result<PathBuf> {
    if answers(&member.client_url) {
        anyhow::bail!(
            "the etcd member answers at {}: stop this server before restoring a snapshot into it",
            member.client_url
        );
    }
    let db = server_dir.join("db");
    let target = crate::cluster_etcd::data_dir(server_dir);
    let staged = db.join("etcd-restoring");
    if staged.exists() {
        std::fs::remove_dir_all(&staged).with_context(|| format!("removing {}", staged.display()))?;
    }
    let out = std::process::Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg("snapshot")
        .arg("restore")
        .arg(snapshot)
        .arg(format!("--data-dir={}", staged.display()))
        .arg(format!("--name={}", member.name))
        .arg(format!("--initial-cluster={}={}", member.name, member.peer_url))
        .arg(format!("--initial-advertise-peer-urls={}", member.peer_url))
        .arg("--initial-cluster-token=r8s")
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => anyhow::bail!(
            "etcdctl not found: a restore is etcd's own (install Debian's etcd-client; scripts/setup.sh does)"
        ),
        Err(e) => return Err(e).context("running etcdctl snapshot restore"),
    };
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&staged);
        anyhow::bail!(
            "etcd could not restore {}: {}",
            snapshot.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let aside = db.join(format!("etcd-old-{}", unix_now()));
    if target.exists() {
        std::fs::rename(&target, &aside)
            .with_context(|| format!("moving {} to {}", target.display(), aside.display()))?;
    }
    std::fs::rename(&staged, &target)
        .with_context(|| format!("moving {} to {}", staged.display(), target.display()))?;
    Ok(aside)
}

/// `r8s etcd-snapshot …`.
pub async fn run(args: SnapshotArgs, default_data_dir: PathBuf) -> anyhow::Result<()> {
    let data_dir = std::path::absolute(args.data_dir.unwrap_or(default_data_dir))?;
    let server_dir = data_dir.join("server");
    let dir = std::path::absolute(args.dir.unwrap_or_else(|| default_dir(&server_dir)))?;
    match args.action {
        Action::Save { name } => {
            let m = member(&server_dir)?;
            let opts = client_options(&server_dir, &m.client_url)?;
            println!("Saving etcd snapshot to {}", dir.display());
            let (path, size) = save(&opts, &m.name, &dir, &name).await?;
            println!(
                "Snapshot {} saved ({size} bytes): {}",
                path.file_name().unwrap_or_default().to_string_lossy(),
                path.display()
            );
        }
        Action::Ls => {
            let all = list(&dir)?;
            let width = all.iter().map(|s| s.name.len()).max().unwrap_or(0).max(4);
            let loc_width = all
                .iter()
                .map(|s| s.path.display().to_string().len() + 7)
                .max()
                .unwrap_or(0)
                .max(8);
            println!(
                "{:width$} {:loc_width$} {:>10} CREATED",
                "NAME", "LOCATION", "SIZE"
            );
            for s in all {
                let created: chrono::DateTime<chrono::Utc> = s.created.into();
                println!(
                    "{:width$} {:loc_width$} {:>10} {}",
                    s.name,
                    format!("file://{}", s.path.display()),
                    s.size,
                    created.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                );
            }
        }
        Action::Delete { names } => {
            for n in names {
                if n.contains('/') || n.ends_with(".part") {
                    anyhow::bail!("invalid snapshot name {n:?}");
                }
                let path = dir.join(&n);
                match std::fs::remove_file(&path) {
                    Ok(()) => println!("Snapshot {n} deleted"),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        anyhow::bail!("snapshot {n} not found in {}", dir.display())
                    }
                    Err(e) => return Err(e).with_context(|| format!("deleting {}", path.display())),
                }
            }
        }
        Action::Prune {
            name,
            snapshot_retention,
        } => {
            let m = member(&server_dir)?;
            for n in prune(&dir, &name, &m.name, snapshot_retention)? {
                println!("Snapshot {n} deleted");
            }
        }
        Action::Restore { snapshot } => {
            let m = member(&server_dir)?;
            let path = if snapshot.exists() || snapshot.components().count() > 1 {
                snapshot
            } else {
                dir.join(&snapshot)
            };
            if !path.is_file() {
                anyhow::bail!("snapshot {} not found", path.display());
            }
            let aside = restore(&server_dir, &m, &path)?;
            println!(
                "Restored {} into etcd member {} (its previous data is in {}).\n\
                 Start this server again: its member is now a cluster of one with the snapshot's data.\n\
                 Then, on each other server: stop it, remove <data-dir>/server/db/etcd, and start it again with --server and --token to join.",
                path.display(),
                m.name,
                aside.display(),
            );
        }
    }
    Ok(())
}

/// The server's scheduled snapshots: one at each time `schedule` names (a cron expression,
/// seconds optional), named `etcd-snapshot`, keeping the newest `retention`. Errors are logged;
/// the next time is tried again.
pub async fn schedule(
    opts: EtcdOptions,
    member: String,
    dir: PathBuf,
    schedule: croner::Cron,
    retention: usize,
) {
    loop {
        let now = chrono::Local::now();
        let Ok(next) = schedule.find_next_occurrence(&now, false) else {
            tracing::warn!("the snapshot schedule names no future time; no more scheduled snapshots");
            return;
        };
        let wait = (next - now).to_std().unwrap_or_default();
        tokio::time::sleep(wait).await;
        match save(&opts, &member, &dir, "etcd-snapshot").await {
            Ok((path, size)) => tracing::info!(path = %path.display(), size, "etcd snapshot saved"),
            Err(e) => tracing::warn!(error = format!("{e:#}"), "scheduled etcd snapshot failed"),
        }
        if let Err(e) = prune(&dir, "etcd-snapshot", &member, retention) {
            tracing::warn!(error = format!("{e:#}"), "pruning etcd snapshots failed");
        }
        // Never twice in one second, whatever the schedule says.
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
}

/// Parse a snapshot schedule (five cron fields, or six with seconds first).
pub fn parse_schedule(expr: &str) -> Result<croner::Cron, String> {
    croner::Cron::new(expr)
        .with_seconds_optional()
        .parse()
        .map_err(|e| format!("invalid cron expression {expr:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prune_keeps_the_newest_of_one_name_and_member() {
        let dir = tempfile::tempdir().unwrap();
        let at = |n: &str, secs: u64| {
            let p = dir.path().join(n);
            std::fs::write(&p, b"x").unwrap();
            let t = SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
            std::fs::File::options()
                .write(true)
                .open(&p)
                .unwrap()
                .set_modified(t)
                .unwrap();
        };
        at("etcd-snapshot-m1-100", 100);
        at("etcd-snapshot-m1-200", 200);
        at("etcd-snapshot-m1-300", 300);
        at("etcd-snapshot-m2-150", 150);
        at("on-demand-m1-50", 50);
        at("etcd-snapshot-m1-400.part", 400);
        let gone = prune(dir.path(), "etcd-snapshot", "m1", 2).unwrap();
        assert_eq!(gone, vec!["etcd-snapshot-m1-100"]);
        let left: Vec<String> = list(dir.path()).unwrap().into_iter().map(|s| s.name).collect();
        assert_eq!(
            left,
            vec![
                "on-demand-m1-50",
                "etcd-snapshot-m2-150",
                "etcd-snapshot-m1-200",
                "etcd-snapshot-m1-300"
            ]
        );
        assert!(prune(dir.path(), "etcd-snapshot", "m1", 5).unwrap().is_empty());
    }

    #[test]
    fn schedules_are_cron_expressions() {
        assert!(parse_schedule("0 */12 * * *").is_ok());
        assert!(parse_schedule("*/5 * * * * *").is_ok());
        let err = parse_schedule("every day").unwrap_err();
        assert!(err.contains("invalid cron expression"), "{err}");
    }
}
