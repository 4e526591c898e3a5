//! Runs the built `pause` binary: version flag, clean exit on SIGTERM/SIGINT, zombie reaping.

use std::ffi::c_int;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const PAUSE: &str = env!("CARGO_BIN_EXE_pause");
const SIGINT: c_int = 2;
const SIGTERM: c_int = 15;
const SIGCHLD: c_int = 17;

extern "C" {
    fn kill(pid: i32, sig: c_int) -> c_int;
}

/// Kills the process on drop, so a failing test leaves nothing behind.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Running {
    fn pid(&self) -> i32 {
        self.0.id() as i32
    }

    /// Waits until the process catches SIGINT, SIGTERM and SIGCHLD (SigCgt in /proc/PID/status),
    /// so a signal sent afterwards cannot meet the default action.
    fn wait_for_handlers(&self) {
        let want = [SIGINT, SIGTERM, SIGCHLD]
            .iter()
            .fold(0u64, |m, s| m | 1 << (s - 1));
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
            let caught = status
                .lines()
                .find_map(|l| l.strip_prefix("SigCgt:"))
                .map(|hex| u64::from_str_radix(hex.trim(), 16).unwrap())
                .unwrap();
            if caught & want == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "pause never installed its handlers (SigCgt {caught:x})"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn signal(&self, sig: c_int) {
        // SAFETY: plain kill(2) on our own child's pid, which has not been waited for yet.
        assert_eq!(unsafe { kill(self.pid(), sig) }, 0);
    }

    fn wait_timeout(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = self.0.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }
}

fn start() -> Running {
    Running(Command::new(PAUSE).stderr(Stdio::null()).spawn().unwrap())
}

#[test]
fn prints_version() {
    let out = Command::new(PAUSE).arg("-v").output().unwrap();
    assert!(out.status.success());
    let line = String::from_utf8(out.stdout).unwrap();
    assert_eq!(line, format!("pause {} (r8s)\n", env!("CARGO_PKG_VERSION")));
}

#[test]
fn rejects_unknown_arguments() {
    let out = Command::new(PAUSE).arg("--frobnicate").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn keeps_running_until_signalled() {
    let mut p = start();
    p.wait_for_handlers();
    assert_eq!(
        p.wait_timeout(Duration::from_millis(300)),
        None,
        "pause exited on its own"
    );
}

#[test]
fn sigterm_exits_zero() {
    let mut p = start();
    p.wait_for_handlers();
    p.signal(SIGTERM);
    let status = p
        .wait_timeout(Duration::from_secs(1))
        .expect("pause still running 1s after SIGTERM");
    assert_eq!(status.code(), Some(0), "{status:?}");
}

#[test]
fn sigint_exits_zero() {
    let mut p = start();
    p.wait_for_handlers();
    p.signal(SIGINT);
    let status = p
        .wait_timeout(Duration::from_secs(1))
        .expect("pause still running 1s after SIGINT");
    assert_eq!(status.code(), Some(0), "{status:?}");
}

/// The state letter from /proc/PID/stat, or None once the process is gone (reaped).
fn proc_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ...": the state follows the last ')'.
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

#[test]
fn reaps_children_it_inherits() {
    // sh starts `sleep` in the background and then execs pause in its own place: pause inherits
    // a child it never spawned, as PID 1 inherits orphans. If pause does not reap it, it stays a
    // zombie ('Z') as long as pause lives.
    let mut child = Command::new("sh")
        .args(["-c", r#"sleep 0.5 & echo $!; exec "$0""#, PAUSE])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let p = Running(child);
    let sleeper: i32 = line.trim().parse().unwrap();
    p.wait_for_handlers();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match proc_state(sleeper) {
            None => break,
            Some(state) => assert!(
                Instant::now() < deadline,
                "child {sleeper} of pause {} not reaped: state {state}",
                p.pid()
            ),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
