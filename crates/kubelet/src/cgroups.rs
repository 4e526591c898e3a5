//! Pod cgroups with the cgroupfs driver (upstream `pkg/kubelet/cm`: the QoS and pod container
//! managers), on cgroup v1 and on the v2 unified hierarchy, as hosts differ.
//!
//! The pods' root is the agent's choice: on a host whose own cgroup is nested (here the memory
//! controller puts this process under `/process_api/<id>`), cgroups outside it may not be
//! usable, so pods go under `<own memory cgroup>/<name>`. The same relative path is used in
//! every v1 hierarchy, as runc's cgroupfs driver does. Under the root: Guaranteed pods'
//! cgroups directly, `burstable/` and `besteffort/` for the others, each pod as `pod<uid>`;
//! runc then makes each container's cgroup inside its pod's.
//!
//! Written by hand: the cgroup crates on crates.io either manage processes (cgroups-rs pulls in
//! much more than these few files need) or target only one of the two hierarchies.

use std::path::{Path, PathBuf};

use crate::qos::{self, PodResources, QosClass};

/// This process's cgroup path in the memory hierarchy (v1), or the unified one (v2).
pub fn own_cgroup() -> String {
    let text = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut unified = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (
            parts.next(),
            parts.next().unwrap_or(""),
            parts.next().unwrap_or("/"),
        );
        if controllers.split(',').any(|c| c == "memory") {
            return path.to_string();
        }
        if controllers.is_empty() {
            unified = Some(path.to_string());
        }
    }
    unified.unwrap_or_else(|| "/".into())
}

/// The cgroup parent for pods: `name` under this process's own cgroup.
pub fn pod_parent(name: &str) -> String {
    let own = own_cgroup();
    format!("{}/{name}", own.trim_end_matches('/'))
}

/// Remove `parent` (and what is left under it) from every hierarchy, deepest first.
/// Cgroup directories are removed with rmdir; only empty ones can go.
pub fn remove(parent: &str) {
    let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") else {
        return;
    };
    let mut roots: Vec<PathBuf> = hierarchies
        .flatten()
        .map(|h| h.path().join(parent.trim_start_matches('/')))
        .collect();
    // A v2-only host has the cgroup tree at /sys/fs/cgroup itself.
    roots.push(Path::new("/sys/fs/cgroup").join(parent.trim_start_matches('/')));
    for root in roots {
        if !root.is_dir() {
            continue;
        }
        let mut dirs = vec![root.clone()];
        let mut i = 0;
        while i < dirs.len() {
            if let Ok(rd) = std::fs::read_dir(&dirs[i]) {
                dirs.extend(rd.flatten().filter(|e| e.path().is_dir()).map(|e| e.path()));
            }
            i += 1;
        }
        for d in dirs.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// One mounted v1 hierarchy: its controllers, where it is mounted and which of its cgroups the
/// mount shows as its root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hierarchy {
    pub controllers: Vec<String>,
    pub mount: PathBuf,
    pub root: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Layout {
    /// cgroup v1 (also on hybrid hosts, where the v2 mount beside has no controllers).
    V1(Vec<Hierarchy>),
    /// cgroup v2 only: the unified hierarchy's mount point.
    V2(PathBuf),
}

impl Layout {
    /// From `/proc/self/mountinfo`'s text.
    pub fn parse(mountinfo: &str) -> Option<Self> {
        let mut v1 = Vec::new();
        let mut v2 = None;
        for line in mountinfo.lines() {
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let l: Vec<&str> = left.split(' ').collect();
            let r: Vec<&str> = right.split(' ').collect();
            if l.len() < 5 || r.len() < 3 {
                continue;
            }
            let (root, mount) = (l[3], PathBuf::from(l[4]));
            match r[0] {
                "cgroup" => {
                    let controllers: Vec<String> = r[2]
                        .split(',')
                        .filter(|o| !matches!(*o, "rw" | "ro") && !o.starts_with("name="))
                        .map(String::from)
                        .collect();
                    if !controllers.is_empty() {
                        v1.push(Hierarchy {
                            controllers,
                            mount,
                            root: root.to_string(),
                        });
                    }
                }
                "cgroup2" => v2 = Some(mount),
                _ => {}
            }
        }
        if !v1.is_empty() {
            Some(Layout::V1(v1))
        } else {
            v2.map(Layout::V2)
        }
    }

    pub fn detect() -> Option<Self> {
        Self::parse(&std::fs::read_to_string("/proc/self/mountinfo").ok()?)
    }

    /// Where cgroup `path` (relative to the hierarchy's root) of `controller` is on disk.
    pub(crate) fn dir(&self, controller: &str, path: &str) -> Option<PathBuf> {
        match self {
            Layout::V1(hs) => {
                let h = hs
                    .iter()
                    .find(|h| h.controllers.iter().any(|c| c == controller))?;
                let rel = path
                    .strip_prefix(h.root.trim_end_matches('/'))
                    .unwrap_or(path)
                    .trim_start_matches('/');
                Some(h.mount.join(rel))
            }
            Layout::V2(m) => Some(m.join(path.trim_start_matches('/'))),
        }
    }
}

fn write(dir: &Path, file: &str, value: &str) -> std::io::Result<()> {
    std::fs::write(dir.join(file), value).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("writing {value} to {}: {e}", dir.join(file).display()),
        )
    })
}

/// cpu.weight (v2) for v1 cpu.shares, as runc converts them.
pub fn shares_to_weight(shares: i64) -> i64 {
    if shares == 0 {
        return 0;
    }
    1 + ((shares.clamp(qos::MIN_SHARES, qos::MAX_SHARES) - 2) * 9999) / 262_142
}

/// The pods' cgroups under one root.
#[derive(Clone, Debug)]
pub struct CgroupManager {
    layout: Option<Layout>,
    root: String,
}

impl CgroupManager {
    pub fn new(layout: Option<Layout>, root: &str) -> Self {
        Self {
            layout,
            root: root.to_string(),
        }
    }

    pub fn root(&self) -> &str {
        &self.root
    }

    pub fn layout(&self) -> Option<&Layout> {
        self.layout.as_ref()
    }

    /// Make `path` and apply cpu shares, quota and a memory limit (None: unlimited).
    fn apply(&self, path: &str, shares: i64, quota: Option<i64>, memory: Option<i64>) -> std::io::Result<()> {
        let Some(layout) = &self.layout else {
            return Ok(());
        };
        match layout {
            Layout::V1(_) => {
                if let Some(d) = layout.dir("cpu", path) {
                    std::fs::create_dir_all(&d)?;
                    write(&d, "cpu.shares", &shares.to_string())?;
                    if quota.is_some() {
                        write(&d, "cpu.cfs_period_us", &qos::QUOTA_PERIOD.to_string())?;
                    }
                    write(&d, "cpu.cfs_quota_us", &quota.unwrap_or(-1).to_string())?;
                }
                if let Some(d) = layout.dir("memory", path) {
                    std::fs::create_dir_all(&d)?;
                    write(&d, "memory.limit_in_bytes", &memory.unwrap_or(-1).to_string())?;
                }
            }
            Layout::V2(mount) => {
                let d = layout.dir("", path).unwrap_or_default();
                std::fs::create_dir_all(&d)?;
                // Each ancestor hands the cpu and memory controllers down to its children.
                let mut a = d.parent();
                let mut ancestors = Vec::new();
                while let Some(p) = a {
                    if !p.starts_with(mount) {
                        break;
                    }
                    ancestors.push(p.to_path_buf());
                    a = p.parent();
                }
                for p in ancestors.iter().rev() {
                    let _ = std::fs::write(p.join("cgroup.subtree_control"), "+cpu +memory");
                }
                write(&d, "cpu.weight", &shares_to_weight(shares).to_string())?;
                let max = quota.map_or("max".to_string(), |q| q.to_string());
                write(&d, "cpu.max", &format!("{max} {}", qos::QUOTA_PERIOD))?;
                write(
                    &d,
                    "memory.max",
                    &memory.map_or("max".to_string(), |m| m.to_string()),
                )?;
            }
        }
        Ok(())
    }

    /// The pods' root and the two QoS parents (upstream's QoS container manager): the root
    /// weighted by the node's cpus, BestEffort at the minimum shares, Burstable by the cpu its
    /// pods request.
    pub fn ensure_qos(&self, allocatable_milli_cpu: i64, burstable_milli_cpu: i64) -> std::io::Result<()> {
        self.apply(
            &self.root,
            qos::milli_cpu_to_shares(allocatable_milli_cpu),
            None,
            None,
        )?;
        self.apply(&format!("{}/besteffort", self.root), qos::MIN_SHARES, None, None)?;
        self.apply(
            &format!("{}/burstable", self.root),
            qos::milli_cpu_to_shares(burstable_milli_cpu),
            None,
            None,
        )
    }

    /// Pod `uid`'s cgroup path for its class.
    pub fn pod_path(&self, qos: QosClass, uid: &str) -> String {
        qos::pod_cgroup(&self.root, qos, uid)
    }

    /// Make the pod's cgroup with its limits; returns its path (the sandbox's cgroup parent).
    pub fn ensure_pod(&self, qos: QosClass, uid: &str, r: &PodResources) -> std::io::Result<String> {
        let path = self.pod_path(qos, uid);
        self.apply(&path, r.cpu_shares, r.cpu_quota, r.memory_limit)?;
        Ok(path)
    }

    /// Pod `uid`'s cgroup path (whatever its class) and its usage now, if it has one.
    pub fn pod_usage(&self, uid: &str) -> Option<(String, crate::stats::Usage)> {
        let layout = self.layout.as_ref()?;
        [QosClass::Guaranteed, QosClass::Burstable, QosClass::BestEffort]
            .into_iter()
            .find_map(|q| {
                let path = self.pod_path(q, uid);
                crate::stats::cgroup_usage(layout, &path).map(|u| (path, u))
            })
    }

    /// The usage of cgroup `path` now.
    pub fn usage(&self, path: &str) -> Option<crate::stats::Usage> {
        crate::stats::cgroup_usage(self.layout.as_ref()?, path)
    }

    /// Remove pod `uid`'s cgroup, whatever its class was (only once its containers are gone).
    pub fn remove_pod(&self, uid: &str) {
        for q in [QosClass::Guaranteed, QosClass::Burstable, QosClass::BestEffort] {
            let path = self.pod_path(q, uid);
            match &self.layout {
                Some(Layout::V1(hs)) => {
                    for h in hs {
                        let dir = h
                            .controllers
                            .first()
                            .and_then(|c| self.layout.as_ref().and_then(|l| l.dir(c, &path)));
                        if let Some(d) = dir {
                            remove_tree(&d);
                        }
                    }
                }
                Some(l @ Layout::V2(_)) => {
                    if let Some(d) = l.dir("", &path) {
                        remove_tree(&d);
                    }
                }
                None => {}
            }
        }
    }
}

/// rmdir `dir` and the cgroups under it, deepest first (cgroup files cannot be unlinked; an
/// empty cgroup directory goes with rmdir).
fn remove_tree(dir: &Path) {
    if !dir.is_dir() {
        return;
    }
    let mut dirs = vec![dir.to_path_buf()];
    let mut i = 0;
    while i < dirs.len() {
        if let Ok(rd) = std::fs::read_dir(&dirs[i]) {
            dirs.extend(rd.flatten().filter(|e| e.path().is_dir()).map(|e| e.path()));
        }
        i += 1;
    }
    for d in dirs.iter().rev() {
        let _ = std::fs::remove_dir(d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_is_under_our_own_cgroup() {
        let own = own_cgroup();
        assert!(own.starts_with('/'));
        let p = pod_parent("r8s-pods");
        assert!(
            p.starts_with(own.trim_end_matches('/')) && p.ends_with("/r8s-pods"),
            "{p}"
        );
    }

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 /nested /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn layouts_from_mountinfo() {
        let Some(Layout::V1(hs)) = Layout::parse(HYBRID) else {
            panic!("a hybrid host uses its v1 controllers");
        };
        assert_eq!(hs.len(), 3);
        assert_eq!(hs[0].controllers, ["cpu", "cpuacct"]);
        let l = Layout::V1(hs);
        assert_eq!(
            l.dir("cpuacct", "/a/b"),
            Some(PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/a/b"))
        );
        // A mount showing a nested cgroup as its root: paths are relative to it.
        assert_eq!(
            l.dir("memory", "/nested/x"),
            Some(PathBuf::from("/sys/fs/cgroup/memory/x"))
        );
        assert_eq!(l.dir("hugetlb", "/x"), None);
        let v2 = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(
            Layout::parse(v2),
            Some(Layout::V2(PathBuf::from("/sys/fs/cgroup")))
        );
        assert_eq!(Layout::parse("1 2 3:4 / / rw - ext4 /dev/vda rw\n"), None);
    }

    #[test]
    fn weights_from_shares() {
        assert_eq!(shares_to_weight(2), 1);
        assert_eq!(shares_to_weight(1024), 39);
        assert_eq!(shares_to_weight(262_144), 10_000);
    }

    fn read(p: PathBuf) -> String {
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    #[test]
    fn pod_cgroups_on_v1_files() {
        let tmp = tempfile::tempdir().unwrap();
        let hs = ["cpu", "memory"]
            .map(|c| Hierarchy {
                controllers: vec![c.to_string()],
                mount: tmp.path().join(c),
                root: "/".into(),
            })
            .to_vec();
        let m = CgroupManager::new(Some(Layout::V1(hs)), "/own/pods");
        m.ensure_qos(2000, 300).unwrap();
        assert_eq!(read(tmp.path().join("cpu/own/pods/cpu.shares")), "2048");
        assert_eq!(read(tmp.path().join("cpu/own/pods/besteffort/cpu.shares")), "2");
        assert_eq!(read(tmp.path().join("cpu/own/pods/burstable/cpu.shares")), "307");
        let r = PodResources {
            cpu_shares: 512,
            cpu_quota: Some(50_000),
            memory_limit: Some(64 << 20),
        };
        let p = m.ensure_pod(QosClass::Guaranteed, "u1", &r).unwrap();
        assert_eq!(p, "/own/pods/podu1");
        let cpu = tmp.path().join("cpu/own/pods/podu1");
        assert_eq!(read(cpu.join("cpu.shares")), "512");
        assert_eq!(read(cpu.join("cpu.cfs_quota_us")), "50000");
        assert_eq!(read(cpu.join("cpu.cfs_period_us")), "100000");
        assert_eq!(
            read(tmp.path().join("memory/own/pods/podu1/memory.limit_in_bytes")),
            (64 << 20).to_string()
        );
        let b = m
            .ensure_pod(
                QosClass::BestEffort,
                "u2",
                &PodResources {
                    cpu_shares: 2,
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(b, "/own/pods/besteffort/podu2");
        let mem = tmp.path().join("memory/own/pods/besteffort/podu2");
        assert_eq!(read(mem.join("memory.limit_in_bytes")), "-1");
        assert_eq!(
            read(tmp.path().join("cpu/own/pods/besteffort/podu2/cpu.cfs_quota_us")),
            "-1"
        );
    }

    #[test]
    fn pod_cgroups_on_v2_files() {
        let tmp = tempfile::tempdir().unwrap();
        let m = CgroupManager::new(Some(Layout::V2(tmp.path().to_path_buf())), "/own/pods");
        let r = PodResources {
            cpu_shares: 1024,
            cpu_quota: Some(150_000),
            memory_limit: Some(1 << 30),
        };
        let p = m.ensure_pod(QosClass::Burstable, "u3", &r).unwrap();
        assert_eq!(p, "/own/pods/burstable/podu3");
        let d = tmp.path().join("own/pods/burstable/podu3");
        assert_eq!(read(d.join("cpu.weight")), "39");
        assert_eq!(read(d.join("cpu.max")), "150000 100000");
        assert_eq!(read(d.join("memory.max")), (1u64 << 30).to_string());
        // The controllers are handed down from the mount's root to the pod's parent.
        for a in ["", "own", "own/pods", "own/pods/burstable"] {
            assert_eq!(
                read(tmp.path().join(a).join("cgroup.subtree_control")),
                "+cpu +memory"
            );
        }
        m.ensure_qos(1000, 0).unwrap();
        assert_eq!(read(tmp.path().join("own/pods/besteffort/cpu.max")), "max 100000");
        assert_eq!(read(tmp.path().join("own/pods/besteffort/memory.max")), "max");
    }
}
