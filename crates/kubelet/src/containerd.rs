//! containerd as the agent's child (as k3s runs it): a configuration written under the agent's
//! data dir — root, state and socket there, the CRI plugin with r8s's CNI directories and pause
//! image, cgroupfs (no systemd here) — then `containerd --config` until the agent stops, started
//! again whenever it exits before. On stop it gets SIGTERM (SIGKILL after 10 s) and whatever it
//! left mounted under its root is unmounted.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::Error;

#[derive(Clone, Debug)]
pub struct ContainerdOptions {
    /// Everything containerd keeps goes under here.
    pub dir: PathBuf,
    /// The sandbox (pause) image of every pod.
    pub sandbox_image: String,
    pub cni_bin_dir: PathBuf,
    pub cni_conf_dir: PathBuf,
    /// The containerd binary.
    pub binary: PathBuf,
}

impl ContainerdOptions {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        let dir = dir.into();
        Self {
            cni_conf_dir: dir.join("cni").join("net.d"),
            dir,
            sandbox_image: "docker.io/r8s/pause:0.1".into(),
            cni_bin_dir: "/usr/lib/cni".into(),
            binary: "containerd".into(),
        }
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    /// The configuration file's text (containerd 1.6, config version 2).
    pub fn config(&self) -> String {
        let d = self.dir.display();
        format!(
            r#"# Written by r8s; rewritten at every start.
version = 2
root = "{d}/root"
state = "{d}/state"

[grpc]
  address = "{d}/containerd.sock"

[ttrpc]
  address = "{d}/containerd.sock.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  # Some hosts refuse negative oom_score_adj even to root (e.g. inside a microVM's sandbox):
  # keep every container's at or above containerd's own.
  restrict_oom_score_adj = true

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{d}/state/runc"

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{cni_conf}"

  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{d}/certs.d"
"#,
            sandbox = self.sandbox_image,
            cni_bin = self.cni_bin_dir.display(),
            cni_conf = self.cni_conf_dir.display(),
        )
    }
}

/// A running containerd, stopped on drop, started again whenever it exits on its own.
pub struct Containerd {
    opts: ContainerdOptions,
    child: Arc<Mutex<Option<Child>>>,
    /// Set before a stop: the supervisor then leaves the child alone.
    stopping: Arc<AtomicBool>,
    restarts: Arc<AtomicU32>,
    supervisor: Option<std::thread::JoinHandle<()>>,
}

/// How long containerd must have run for its next exit to be restarted at once; a quicker
/// exit doubles the wait before the next start (up to `MAX_BACKOFF`).
const STABLE: Duration = Duration::from_secs(60);
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How often the supervisor looks at its child.
const CHECK: Duration = Duration::from_millis(200);

impl Containerd {
    /// Write the configuration, start containerd and wait for its socket (at most 20 s). From
    /// then on a thread of its own watches it: a containerd that exits (a crash, an OOM kill,
    /// a SIGKILL by hand) is started again on the same directory, where it takes over the
    /// containers its shims kept running, as the next agent start does. The kubelet's CRI
    /// connection reconnects on its next call. (k3s exits with its containerd and leaves the
    /// restart to systemd; r8s degrades instead of exiting, and PID 1 may be no supervisor.)
    pub fn start(opts: ContainerdOptions) -> Result<Self, Error> {
        for d in [&opts.dir, &opts.cni_conf_dir, &opts.dir.join("certs.d")] {
            std::fs::create_dir_all(d)?;
        }
        let config = opts.dir.join("config.toml");
        // A containerd of an earlier run that did not stop (its agent was killed) holds the
        // state: it goes first. Its containers stay; the new one takes them over.
        stop_stale(&opts.dir.join("containerd.pid"), &config);
        std::fs::File::create(&config)?.write_all(opts.config().as_bytes())?;
        let mut child = spawn(&opts, false)?;
        if let Err(e) = wait_for_socket(&opts, &mut child) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
        let child = Arc::new(Mutex::new(Some(child)));
        let stopping = Arc::new(AtomicBool::new(false));
        let restarts = Arc::new(AtomicU32::new(0));
        let supervisor = std::thread::Builder::new()
            .name("containerd-supervisor".into())
            .spawn({
                let (opts, child, stopping, restarts) =
                    (opts.clone(), child.clone(), stopping.clone(), restarts.clone());
                move || supervise(&opts, &child, &stopping, &restarts)
            })?;
        Ok(Self {
            opts,
            child,
            stopping,
            restarts,
            supervisor: Some(supervisor),
        })
    }

    /// How many times containerd was started again after exiting on its own.
    pub fn restarts(&self) -> u32 {
        self.restarts.load(Ordering::Relaxed)
    }

    pub fn socket(&self) -> PathBuf {
        self.opts.socket()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.lock().unwrap().as_ref().map(|c| c.id())
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.opts.dir.join("containerd.log")).unwrap_or_default()
    }

    /// Stop containerd alone: the containers keep running in their shims, and the next
    /// containerd on this directory takes them over (the agent's `--keep-pods-on-exit`).
    pub fn detach(mut self) {
        self.terminate();
        self.opts.dir = PathBuf::new();
    }

    fn terminate(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        // Taken under the lock: a start the supervisor has under way ends first, and its
        // child is the one stopped here.
        let child = self.child.lock().unwrap().take();
        if let Some(t) = self.supervisor.take() {
            let _ = t.join();
        }
        if let Some(mut child) = child {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_file(c_pid_file(&self.opts));
        }
    }

    /// SIGTERM, then SIGKILL after 10 s; then remove whatever it left running (containers,
    /// their shims) and unmount what is left under its directory.
    pub fn stop(&mut self) {
        self.terminate();
        if self.opts.dir.as_os_str().is_empty() {
            return;
        }
        delete_containers(&self.opts.dir);
        let _ = Command::new("pkill")
            .arg("-KILL")
            .arg("-f")
            .arg(format!("containerd-shim.*{}", self.opts.socket().display()))
            .status();
        unmount_under(&self.opts.dir);
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Start containerd on `opts` with its output in `containerd.log` (appended to when it is
/// started again, so the log of the exit stays) and its pid in `containerd.pid`.
fn spawn(opts: &ContainerdOptions, again: bool) -> Result<Child, Error> {
    let _ = std::fs::remove_file(opts.socket());
    let log = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(again)
        .truncate(!again)
        .open(opts.dir.join("containerd.log"))?;
    let child = Command::new(&opts.binary)
        .arg("--config")
        .arg(opts.dir.join("config.toml"))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .map_err(|e| Error::Other(format!("starting {}: {e}", opts.binary.display())))?;
    std::fs::write(c_pid_file(opts), child.id().to_string())?;
    Ok(child)
}

/// Wait (at most 20 s) until containerd's socket is there, or it exited.
fn wait_for_socket(opts: &ContainerdOptions, child: &mut Child) -> Result<(), Error> {
    let log = || std::fs::read_to_string(opts.dir.join("containerd.log")).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !opts.socket().exists() {
        if let Some(status) = child.try_wait().ok().flatten() {
            return Err(Error::Other(format!(
                "containerd exited ({status}); its log:\n{}",
                log()
            )));
        }
        if Instant::now() > deadline {
            return Err(Error::Other(format!(
                "containerd did not start; its log:\n{}",
                log()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// The supervisor's loop: until `stopping`, a child that exited is started again, at once if
/// it had run for `STABLE`, else after a wait that doubles with each quick exit.
fn supervise(
    opts: &ContainerdOptions,
    child: &Mutex<Option<Child>>,
    stopping: &AtomicBool,
    restarts: &AtomicU32,
) {
    let mut started = Instant::now();
    let mut backoff = FIRST_BACKOFF;
    while !stopping.load(Ordering::SeqCst) {
        std::thread::sleep(CHECK);
        let status = {
            let mut guard = child.lock().unwrap();
            match guard.as_mut() {
                None => return,
                Some(c) => match c.try_wait() {
                    Ok(Some(status)) => status,
                    _ => continue,
                },
            }
        };
        let wait = if started.elapsed() >= STABLE {
            backoff = FIRST_BACKOFF;
            Duration::ZERO
        } else {
            let w = backoff;
            backoff = (backoff * 2).min(MAX_BACKOFF);
            w
        };
        tracing::error!(
            %status,
            restart_in = ?wait,
            "containerd exited; starting it again (the pods run on in their shims)"
        );
        let until = Instant::now() + wait;
        while Instant::now() < until {
            if stopping.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(CHECK.min(until.saturating_duration_since(Instant::now())));
        }
        let mut guard = child.lock().unwrap();
        if stopping.load(Ordering::SeqCst) {
            return;
        }
        started = Instant::now();
        match spawn(opts, true) {
            Ok(mut c) => {
                let pid = c.id();
                let ready = wait_for_socket(opts, &mut c);
                *guard = Some(c);
                restarts.fetch_add(1, Ordering::Relaxed);
                match ready {
                    Ok(()) => tracing::info!(pid, "containerd: started again"),
                    Err(e) => tracing::error!(error = %e, "containerd: started again but not answering"),
                }
            }
            // The exited child stays: the next round waits and tries again.
            Err(e) => tracing::error!(error = %e, "containerd: could not start it again"),
        }
    }
}

/// Containers outlive containerd (their shims hold them): delete those of the containerd
/// whose directory is `dir` with runc, whose state lives under `<dir>/state/runc/<namespace>`.
pub fn delete_containers(dir: &Path) {
    if let Ok(roots) = std::fs::read_dir(dir.join("state").join("runc")) {
        for root in roots.flatten().map(|e| e.path()) {
            let ids = Command::new("runc")
                .arg("--root")
                .arg(&root)
                .args(["list", "-q"])
                .output();
            for id in ids.iter().flat_map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .map(String::from)
                    .collect::<Vec<_>>()
            }) {
                let _ = Command::new("runc")
                    .arg("--root")
                    .arg(&root)
                    .args(["delete", "-f", &id])
                    .status();
            }
        }
    }
}

/// Let containerd pull from the registry at `host_port` over plain HTTP: a `hosts.toml` under
/// its `certs.d` (containerd's registry host configuration). The agent does this for
/// registries on loopback only, which Docker and k3s treat as insecure by default too.
pub fn allow_plain_http(certs_d: &Path, host_port: &str) -> std::io::Result<()> {
    let dir = certs_d.join(host_port);
    let file = dir.join("hosts.toml");
    if file.exists() {
        return Ok(());
    }
    std::fs::create_dir_all(&dir)?;
    std::fs::write(
        &file,
        format!(
            "# Written by r8s: a registry on loopback, over plain HTTP.\nserver = \"http://{host_port}\"\n\n[host.\"http://{host_port}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
        ),
    )
}

/// Whether `host` (without port) is a loopback name or address.
pub fn is_loopback_host(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    h == "localhost" || h.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn c_pid_file(opts: &ContainerdOptions) -> PathBuf {
    opts.dir.join("containerd.pid")
}

/// SIGTERM (then SIGKILL after 10 s) the process named in `pid_file` if it is a containerd
/// running `config`.
fn stop_stale(pid_file: &Path, config: &Path) {
    let Some(pid) = std::fs::read_to_string(pid_file)
        .ok()
        .and_then(|p| p.trim().parse::<u32>().ok())
    else {
        return;
    };
    let ours = |pid: u32| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|c| {
                let c = String::from_utf8_lossy(&c).replace('\0', " ");
                c.contains("containerd") && c.contains(&*config.to_string_lossy())
            })
            .unwrap_or(false)
    };
    if !ours(pid) {
        return;
    }
    tracing::info!(pid, "containerd: stopping the one an earlier run left");
    let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while ours(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    if ours(pid) {
        let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
    }
    let _ = std::fs::remove_file(pid_file);
}

/// Unmount every mount point under `dir`, deepest first (lazily, so a busy one cannot block).
pub fn unmount_under(dir: &Path) {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let prefix = dir.to_string_lossy().to_string();
    let mut points: Vec<String> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| p.replace("\\040", " "))
        .filter(|p| p.starts_with(&prefix))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in points {
        let _ = Command::new("umount").arg("-l").arg(&p).status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_keeps_everything_under_the_data_dir() {
        let opts = ContainerdOptions::new("/var/lib/r8s/agent/containerd");
        let c = opts.config();
        assert!(c.contains(r#"root = "/var/lib/r8s/agent/containerd/root""#));
        assert!(c.contains(r#"address = "/var/lib/r8s/agent/containerd/containerd.sock""#));
        assert!(c.contains(r#"sandbox_image = "docker.io/r8s/pause:0.1""#));
        assert!(c.contains(r#"bin_dir = "/usr/lib/cni""#));
        assert!(c.contains("SystemdCgroup = false"));
        assert!(c.contains("restrict_oom_score_adj = true"));
        assert!(!c.contains("/opt/containerd"));
    }
}
