//! Real etcd processes on loopback, for the conformance tests and the benchmark.
//!
//! Each member gets its own data directory under the system temp dir and free loopback ports;
//! dropping a member (or the cluster) kills the process and removes its directory, also when a
//! test fails.

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The etcd binary: `$R8S_ETCD_BIN`, else `etcd` on the PATH (Debian's `etcd-server`).
pub fn etcd_binary() -> String {
    std::env::var("R8S_ETCD_BIN").unwrap_or_else(|_| "etcd".to_owned())
}

/// One etcd member.
pub struct EtcdMember {
    pub name: String,
    pub client_url: String,
    peer_url: String,
    dir: PathBuf,
    child: Option<Child>,
}

impl EtcdMember {
    /// Kill the member with SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The member's log (stdout and stderr), for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default()
    }
}

impl Drop for EtcdMember {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An etcd cluster of one or more members on 127.0.0.1.
pub struct EtcdCluster {
    pub members: Vec<EtcdMember>,
}

impl EtcdCluster {
    /// Start `size` members and wait until each accepts client connections.
    pub fn start(size: usize) -> std::io::Result<Self> {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let run = SEQ.fetch_add(1, Ordering::SeqCst);
        let token = format!("r8s-{}-{run}", std::process::id());
        let mut members = Vec::with_capacity(size);
        for i in 0..size {
            let name = format!("m{i}");
            let dir = std::env::temp_dir().join(format!("{token}-{name}"));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir)?;
            members.push(EtcdMember {
                client_url: format!("http://127.0.0.1:{}", free_port()?),
                peer_url: format!("http://127.0.0.1:{}", free_port()?),
                name,
                dir,
                child: None,
            });
        }
        let initial: Vec<String> = members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url))
            .collect();
        let initial = initial.join(",");
        for m in &mut members {
            let log = std::fs::File::create(m.dir.join("etcd.log"))?;
            let child = Command::new(etcd_binary())
                .arg("--name")
                .arg(&m.name)
                .arg("--data-dir")
                .arg(m.dir.join("data"))
                .arg("--listen-client-urls")
                .arg(&m.client_url)
                .arg("--advertise-client-urls")
                .arg(&m.client_url)
                .arg("--listen-peer-urls")
                .arg(&m.peer_url)
                .arg("--initial-advertise-peer-urls")
                .arg(&m.peer_url)
                .arg("--initial-cluster")
                .arg(&initial)
                .arg("--initial-cluster-token")
                .arg(&token)
                .arg("--initial-cluster-state")
                .arg("new")
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()
                .map_err(|e| {
                    std::io::Error::new(
                        e.kind(),
                        format!("cannot run {} (install Debian's etcd-server): {e}", etcd_binary()),
                    )
                })?;
            m.child = Some(child);
        }
        let cluster = Self { members };
        for m in &cluster.members {
            wait_for_port(&m.client_url, Duration::from_secs(30)).map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("etcd member {} did not start: {e}\n{}", m.name, m.log()),
                )
            })?;
        }
        Ok(cluster)
    }

    /// The client URLs, comma-separated, as `--datastore-endpoint` takes them.
    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(|m| m.client_url.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn wait_for_port(url: &str, timeout: Duration) -> std::io::Result<()> {
    let addr = url.trim_start_matches("http://");
    let deadline = Instant::now() + timeout;
    loop {
        match TcpStream::connect(addr) {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}
