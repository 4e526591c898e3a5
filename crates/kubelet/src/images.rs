//! Air-gap images: every image tarball in `<data-dir>/agent/images/` is imported into
//! containerd's `k8s.io` namespace at start, as k3s does. CRI has no import call (only
//! PullImage), and containerd's import lives in its own API, so this runs containerd's `ctr`
//! against the agent's containerd socket.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Error;

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
