//! Where pod cgroups go. On a host whose own cgroup is nested (here the memory controller puts
//! this process under `/process_api/<id>`), cgroups outside it may not be usable, so pods go
//! under a parent inside the agent's own memory cgroup: `<own memory cgroup>/<name>`. The same
//! relative path is used in every v1 hierarchy, as runc's cgroupfs driver does.

use std::path::PathBuf;

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
    for h in hierarchies.flatten() {
        let root: PathBuf = h.path().join(parent.trim_start_matches('/'));
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
}
