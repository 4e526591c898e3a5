//! A network namespace a test owns (root only): created with `ip netns add`, deleted when
//! dropped (also when the test fails), so nothing a test programs touches the host's tables.

#![allow(dead_code)]

use std::os::fd::AsRawFd;
use std::process::Command;

pub struct Netns {
    pub name: String,
}

impl Netns {
    /// A fresh namespace, or None (with a note) where this process is not root.
    pub fn new(tag: &str) -> Option<Self> {
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: network namespaces need root");
            return None;
        }
        let name = format!("r8s-t-{tag}-{}", std::process::id());
        let _ = Command::new("ip")
            .args(["netns", "del", &name])
            .stderr(std::process::Stdio::null())
            .status();
        let ok = Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .expect("ip")
            .success();
        assert!(ok, "ip netns add {name}");
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"]);
        Some(ns)
    }

    /// Run `f` on a thread inside the namespace (sockets it opens stay in it).
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/run/netns/{}", self.name);
        std::thread::scope(|s| {
            s.spawn(|| {
                let file = std::fs::File::open(&path).expect("netns file");
                let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
                f()
            })
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))
        })
    }

    /// A command inside the namespace; its stdout (panics if it fails).
    pub fn exec(&self, args: &[&str]) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args)
            .output()
            .expect("ip netns exec");
        assert!(
            out.status.success(),
            "{args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn ip(&self, args: &[&str]) -> String {
        let mut all = vec!["ip"];
        all.extend_from_slice(args);
        self.exec(&all)
    }

    pub fn nft(&self, args: &[&str]) -> String {
        let mut all = vec!["nft"];
        all.extend_from_slice(args);
        self.exec(&all)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

impl Netns {
    /// What an operator runs on the node: Debian's own `nft` must list (in text and JSON)
    /// every rule in the namespace, r8s's included; the text listing is returned. A rule or
    /// set `nft` cannot decode aborts it (it then shows no rule at all, anyone's).
    pub fn lists_with_nft(&self) -> String {
        let text = self.nft(&["list", "ruleset"]);
        let json = self.nft(&["-j", "list", "ruleset"]);
        let parsed: serde_json::Value =
            serde_json::from_str(&json).unwrap_or_else(|e| panic!("nft -j: {e}:\n{json}"));
        assert!(parsed["nftables"].is_array(), "nft -j: {json}");
        text
    }
}
