//! A real `r8s server` for end-to-end tests, driven by the real kubectl. Everything it makes
//! (the process, its data directory) goes when the test ends, also on failure.
#![allow(dead_code)]

pub mod cluster;
pub mod https;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The kubectl of a given minor version (`kubectl.1.27` … `kubectl.1.33` from the `kubectl`
/// package), or plain `kubectl` for "".
/// The condition of type `type_` in `obj`'s `status.conditions` (Null when it has none).
pub fn condition(obj: &serde_json::Value, type_: &str) -> serde_json::Value {
    obj["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .cloned()
        .unwrap_or_default()
}

pub fn kubectl_binary(version: &str) -> PathBuf {
    let name = if version.is_empty() {
        "kubectl".to_owned()
    } else {
        format!("kubectl.{version}")
    };
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.push(PathBuf::from("/usr/lib/google-cloud-sdk/bin"));
    if let Ok(out) = Command::new("dpkg").args(["-L", "kubectl"]).output() {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if line.ends_with("/kubectl") {
                if let Some(parent) = Path::new(line).parent() {
                    dirs.push(parent.to_owned());
                }
            }
        }
    }
    dirs.into_iter()
        .map(|d| d.join(&name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("{name} not found: install the kubectl package (it ships kubectl.1.27 … kubectl.1.33)")
        })
}

pub struct Server {
    pub dir: tempfile::TempDir,
    pub kubeconfig: PathBuf,
    pub port: u16,
    /// The loopback address it listens on (127.0.0.1 unless started with `start_at`).
    pub bind: String,
    child: Child,
}

impl Server {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// A control plane only (`--disable-agent`): no containers run.
    pub fn start_with(extra: &[&str]) -> Self {
        let mut args = vec!["--disable-agent"];
        args.extend_from_slice(extra);
        Self::start_raw(&args)
    }

    /// Exactly the given arguments (the agent runs unless they disable it).
    pub fn start_raw(extra: &[&str]) -> Self {
        Self::start_in(tempfile::tempdir().unwrap(), extra)
    }

    /// With a data dir prepared by the caller (e.g. images staged for the agent).
    pub fn start_in(dir: tempfile::TempDir, extra: &[&str]) -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Self::start_at(dir, "127.0.0.1", port, extra)
    }

    /// On a loopback address and port of the caller's choice (several servers of one cluster
    /// share a port on different loopback addresses, as on different machines).
    pub fn start_at(dir: tempfile::TempDir, bind: &str, port: u16, extra: &[&str]) -> Self {
        let log = std::fs::File::create(dir.path().join("server.log")).unwrap();
        let child = Self::spawn(dir.path(), bind, port, extra, log);
        let kubeconfig = dir.path().join("kubeconfig.yaml");
        let mut server = Server {
            dir,
            kubeconfig,
            port,
            bind: bind.to_string(),
            child,
        };
        server.wait_up(extra);
        server
    }

    /// Stop (SIGTERM) and start again on the same data directory and port.
    pub fn restart(&mut self, extra: &[&str]) {
        self.kill();
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(self.dir.path().join("server.log"))
            .unwrap();
        self.child = Self::spawn(self.dir.path(), &self.bind, self.port, extra, log);
        self.wait_up(extra);
    }

    fn spawn(dir: &Path, bind: &str, port: u16, extra: &[&str], log: std::fs::File) -> Child {
        Command::new(env!("CARGO_BIN_EXE_r8s"))
            .arg("server")
            .arg("--data-dir")
            .arg(dir)
            .args(["--bind-address", bind, "--https-listen-port", &port.to_string()])
            .args(extra)
            .env("R8S_LOG", "info")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .unwrap()
    }

    fn wait_up(&mut self, extra: &[&str]) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("r8s server exited ({status}):\n{}", self.log());
            }
            if self.kubeconfig.exists()
                && std::net::TcpStream::connect((self.bind.as_str(), self.port)).is_ok()
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "r8s server did not start:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        // Pods are refused until their namespace's `default` ServiceAccount exists (the
        // ServiceAccount admission plugin, as upstream); the controller manager makes it once
        // it runs. Tests start creating pods when it is there, as upstream's e2e framework does.
        if !extra.contains(&"--disable-controller-manager") {
            self.wait_for_default_service_account("default");
        }
    }

    /// Wait until `ns` has its `default` ServiceAccount (made by the serviceaccount controller
    /// just after the namespace).
    pub fn wait_for_default_service_account(&self, ns: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = self.kubectl(
                "1.33",
                &["-n", ns, "get", "serviceaccount", "default", "-o", "name"],
            );
            if out.status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no default ServiceAccount in {ns}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// kubectl of `version` set up for this server, with its own discovery cache.
    pub fn command(&self, version: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new(kubectl_binary(version));
        cmd.arg("--kubeconfig").arg(&self.kubeconfig).args(args).env(
            "KUBECACHEDIR",
            self.dir.path().join(format!("kubecache-{version}")),
        );
        cmd
    }

    /// r8s's own kubectl (`r8s kubectl`) set up for this server, with its own discovery cache.
    pub fn r8s_kubectl(&self, args: &[&str], stdin: Option<&str>) -> Output {
        self.r8s_kubectl_env(args, stdin, &[])
    }

    /// The same with `env` set.
    pub fn r8s_kubectl_env(&self, args: &[&str], stdin: Option<&str>, env: &[(&str, &str)]) -> Output {
        use std::io::Write;
        let mut child = Command::new(env!("CARGO_BIN_EXE_r8s"))
            .arg("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .envs(env.iter().copied())
            .env("KUBECACHEDIR", self.dir.path().join("kubecache-r8s"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        if let Some(text) = stdin {
            input.write_all(text.as_bytes()).unwrap();
        }
        drop(input);
        child.wait_with_output().unwrap()
    }

    /// r8s's own kubectl, which must succeed; its standard output.
    pub fn r8s_ok(&self, args: &[&str]) -> String {
        Self::succeeded("r8s", args, self.r8s_kubectl(args, None), &self.log())
    }

    /// Run kubectl of `version` against this server.
    pub fn kubectl(&self, version: &str, args: &[&str]) -> Output {
        self.command(version, args).stdin(Stdio::null()).output().unwrap()
    }

    /// kubectl with stdin, whatever the outcome.
    pub fn kubectl_stdin(&self, version: &str, args: &[&str], input: &str) -> Output {
        use std::io::Write;
        let mut child = self
            .command(version, args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    }

    /// kubectl with `input` on a standard input kept open until kubectl ends (a session whose
    /// input ends is detached from, as `kubectl attach -i` is on Ctrl-D), at most 90 s; it
    /// must succeed; its standard output.
    pub fn interactive(&self, version: &str, args: &[&str], input: &str) -> String {
        use std::io::{Read, Write};
        let mut child = self
            .command(version, args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut out = String::new();
            let _ = stdout.read_to_string(&mut out);
            out
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(90);
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                break child.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        drop(stdin);
        let out = reader.join().unwrap();
        let mut err = String::new();
        let _ = stderr.read_to_string(&mut err);
        assert!(
            status.success(),
            "kubectl {version} {args:?}: {status}\n{out}\n{err}"
        );
        out
    }

    /// Run kubectl and insist it succeeds; returns stdout.
    pub fn ok(&self, version: &str, args: &[&str]) -> String {
        Self::succeeded(version, args, self.kubectl(version, args), &self.log())
    }

    /// kubectl with stdin that must succeed; returns stdout.
    pub fn ok_stdin(&self, version: &str, args: &[&str], input: &str) -> String {
        Self::succeeded(
            version,
            args,
            self.kubectl_stdin(version, args, input),
            &self.log(),
        )
    }

    fn succeeded(version: &str, args: &[&str], out: Output, log: &str) -> String {
        assert!(
            out.status.success(),
            "kubectl {version} {args:?} failed:\nstdout: {}\nstderr: {}\nserver log:\n{log}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Run kubectl and insist it fails; returns stderr.
    pub fn fails(&self, version: &str, args: &[&str]) -> String {
        let out = self.kubectl(version, args);
        assert!(
            !out.status.success(),
            "kubectl {version} {args:?} should have failed:\nstdout: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stderr).unwrap()
    }

    /// kubectl with stdin that must fail; returns stderr.
    pub fn fails_stdin(&self, version: &str, args: &[&str], input: &str) -> Vec<u8> {
        let out = self.kubectl_stdin(version, args, input);
        assert!(!out.status.success(), "kubectl {args:?} should have failed");
        out.stderr
    }

    /// SIGTERM, then wait up to `within` for the server to exit by itself: whether it did
    /// (else it is still running, for `kill` to end).
    pub fn terminate(&mut self, within: Duration) -> bool {
        if self.child.try_wait().ok().flatten().is_some() {
            return true;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, as a power cut: nothing of it runs on (its children die with it).
    pub fn sigkill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stop the server as an operator would (SIGTERM: the agent, if any, stops its pods and
    /// containerd); SIGKILL only if it does not exit within 30 s.
    pub fn kill(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(30);
            while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}
