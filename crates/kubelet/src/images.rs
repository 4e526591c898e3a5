//! Air-gap images: every image tarball in `<data-dir>/agent/images/` is imported into
//! containerd's `k8s.io` namespace at start, as k3s does. CRI has no import call (only
//! PullImage), and containerd's import lives in its own API, so this runs containerd's `ctr`
//! against the agent's containerd socket.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Error;

/// The image names a tarball holds: an OCI layout's `io.containerd.image.name` annotations, or
/// a docker archive's `RepoTags`. Read with `tar`, which every host has.
pub fn names_in(file: &Path) -> Vec<String> {
    let member = |name: &str| -> Option<serde_json::Value> {
        let out = Command::new("tar")
            .arg("-xOf")
            .arg(file)
            .arg(name)
            .output()
            .ok()?;
        if !out.status.success() {
            return None;
        }
        serde_json::from_slice(&out.stdout).ok()
    };
    if let Some(index) = member("index.json") {
        return index["manifests"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| {
                m["annotations"]["io.containerd.image.name"]
                    .as_str()
                    .map(String::from)
            })
            .collect();
    }
    member("manifest.json")
        .and_then(|m| m.as_array().cloned())
        .into_iter()
        .flatten()
        .flat_map(|m| m["RepoTags"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t.as_str().map(normalize))
        .collect()
}

/// An image reference as containerd names it: `nginx` → `docker.io/library/nginx:latest`.
pub fn normalize(image: &str) -> String {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    let first = name.split('/').next().unwrap_or("");
    let has_registry =
        name.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let mut full = if has_registry {
        name.to_string()
    } else if name.contains('/') {
        format!("docker.io/{name}")
    } else {
        format!("docker.io/library/{name}")
    };
    let last = full.rsplit('/').next().unwrap_or("");
    if digest.is_none() && !last.contains(':') {
        full.push_str(":latest");
    }
    match digest {
        Some(d) => format!("{full}@{d}"),
        None => full,
    }
}

/// Import each `*.tar` in `dir`; returns the files imported.
pub fn import_dir(socket: &Path, dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "tar"))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    files.sort();
    for f in &files {
        import(socket, f)?;
    }
    Ok(files)
}

/// Import one image tarball (OCI layout or docker archive).
pub fn import(socket: &Path, file: &Path) -> Result<(), Error> {
    let out = Command::new("ctr")
        .arg("--address")
        .arg(socket)
        .args(["--namespace", "k8s.io", "images", "import"])
        .arg(file)
        .output()
        .map_err(|e| Error::Other(format!("running ctr: {e}")))?;
    if !out.status.success() {
        return Err(Error::Other(format!(
            "importing {}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_normalize_as_containerd_names_them() {
        assert_eq!(normalize("nginx"), "docker.io/library/nginx:latest");
        assert_eq!(normalize("nginx:1.25"), "docker.io/library/nginx:1.25");
        assert_eq!(normalize("user/app"), "docker.io/user/app:latest");
        assert_eq!(normalize("127.0.0.1:5000/x/y:v1"), "127.0.0.1:5000/x/y:v1");
        assert_eq!(normalize("localhost/app"), "localhost/app:latest");
        assert_eq!(
            normalize("busybox@sha256:ab"),
            "docker.io/library/busybox@sha256:ab"
        );
    }

    #[test]
    fn tarballs_name_their_images() {
        let dir = tempfile::tempdir().unwrap();
        let layout = dir.path().join("l");
        std::fs::create_dir_all(&layout).unwrap();
        std::fs::write(
            layout.join("index.json"),
            r#"{"manifests": [{"annotations": {"io.containerd.image.name": "docker.io/library/nginx:latest"}}]}"#,
        )
        .unwrap();
        let tar = dir.path().join("i.tar");
        let ok = Command::new("tar")
            .arg("-cf")
            .arg(&tar)
            .arg("-C")
            .arg(&layout)
            .arg("index.json")
            .status()
            .unwrap();
        assert!(ok.success());
        assert_eq!(names_in(&tar), ["docker.io/library/nginx:latest"]);
        let docker = dir.path().join("d");
        std::fs::create_dir_all(&docker).unwrap();
        std::fs::write(
            docker.join("manifest.json"),
            r#"[{"RepoTags": ["busybox:1.36"]}]"#,
        )
        .unwrap();
        let tar2 = dir.path().join("d.tar");
        let ok = Command::new("tar")
            .arg("-cf")
            .arg(&tar2)
            .arg("-C")
            .arg(&docker)
            .arg("manifest.json")
            .status()
            .unwrap();
        assert!(ok.success());
        assert_eq!(names_in(&tar2), ["docker.io/library/busybox:1.36"]);
        assert!(names_in(&dir.path().join("missing.tar")).is_empty());
    }
}
