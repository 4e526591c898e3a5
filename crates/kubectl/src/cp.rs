//! `kubectl cp`: files to and from a container through `tar` run in it over exec, as kubectl
//! does — `tar cf - SRC` read back and unpacked here; a tar made here (the `tar` crate) sent to
//! `tar -xmf - -C DIR`, which reads to the end of its input: the exec's close signal
//! (WebSocket v5) or half-close (SPDY) ends it.

use std::path::{Component, Path, PathBuf};

use crate::error::{msg, Error, Result};
use crate::Session;

#[derive(clap::Args)]
pub struct CpArgs {
    /// SRC: a local path or [NAMESPACE/]POD:PATH.
    src: String,
    /// DEST: a local path or [NAMESPACE/]POD:PATH.
    dest: String,
    /// Container name. If omitted, use the kubectl.kubernetes.io/default-container annotation.
    #[arg(short = 'c', long)]
    container: Option<String>,
    /// The copied file/directory's ownership and permissions will not be preserved in the container.
    #[arg(long)]
    no_preserve: bool,
}

/// One side of the copy: a pod's path (with its namespace) or a local one.
struct Spec {
    pod: Option<(String, String)>,
    path: String,
}

fn spec(arg: &str, default_ns: &str) -> Result<Spec> {
    let Some((pod, path)) = arg.split_once(':') else {
        return Ok(Spec {
            pod: None,
            path: arg.to_owned(),
        });
    };
    if pod.is_empty() {
        return Err(msg(
            "filespec must match the canonical format: [[namespace/]pod:]file/path",
        ));
    }
    let (ns, pod) = match pod.split_once('/') {
        Some((ns, pod)) => (ns.to_owned(), pod.to_owned()),
        None => (default_ns.to_owned(), pod.to_owned()),
    };
    if path.is_empty() {
        return Err(msg("remote path cannot be empty"));
    }
    Ok(Spec {
        pod: Some((ns, pod)),
        path: path.to_owned(),
    })
}

pub async fn run(session: &Session, a: CpArgs) -> Result<i32> {
    let ns = session.conn.namespace.clone();
    let (src, dest) = (spec(&a.src, &ns)?, spec(&a.dest, &ns)?);
    match (&src.pod, &dest.pod) {
        (Some(_), Some(_)) => Err(msg("one of src or dest must be a local file specification")),
        (None, None) => Err(msg("one of src or dest must be a remote file specification")),
        (Some((ns, pod)), None) => from_pod(session, ns, pod, &a, &src.path, Path::new(&dest.path)).await,
        (None, Some((ns, pod))) => to_pod(session, ns, pod, &a, Path::new(&src.path), &dest.path).await,
    }
}

/// A remote path with its slashes and `.`/`..` shortcuts out, as kubectl strips them for the
/// prefix of the archive's member names.
fn clean_remote(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for p in path.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

async fn from_pod(session: &Session, ns: &str, pod: &str, a: &CpArgs, src: &str, dest: &Path) -> Result<i32> {
    let container = crate::exec::pod_container(session, ns, pod, a.container.as_deref()).await?;
    let (archive, code) =
        crate::exec::run_in(session, ns, pod, &container, &["tar", "cf", "-", src], None).await?;
    if code != 0 && archive.is_empty() {
        return Err(Error::Raw(format!("command terminated with exit code {code}")));
    }
    let prefix = clean_remote(src);
    let mut tar = tar::Archive::new(std::io::Cursor::new(archive));
    let entries = tar.entries().map_err(|e| msg(e.to_string()))?;
    let mut warned_symlink = false;
    for entry in entries {
        let mut entry = entry.map_err(|e| msg(e.to_string()))?;
        let name = String::from_utf8_lossy(&entry.header().path_bytes()).into_owned();
        let name = name.trim_end_matches('/').to_owned();
        if !name.starts_with(&prefix) {
            return Err(msg("tar contents corrupted"));
        }
        let rest = clean_remote(&name[prefix.len()..]);
        let target = if rest.is_empty() {
            dest.to_path_buf()
        } else {
            dest.join(&rest)
        };
        if !inside(dest, &target) {
            eprintln!(
                "warning: file {:?} is outside target destination, skipping",
                target.display().to_string()
            );
            continue;
        }
        let kind = entry.header().entry_type();
        if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| msg(e.to_string()))?;
        }
        if kind.is_dir() {
            std::fs::create_dir_all(&target).map_err(|e| msg(e.to_string()))?;
            continue;
        }
        if kind.is_symlink() {
            let link = entry
                .link_name()
                .ok()
                .flatten()
                .map(|l| l.display().to_string())
                .unwrap_or_default();
            if !warned_symlink {
                eprintln!(
                    "warning: skipping symlink: {:?} -> {link:?} (consider using \"kubectl exec -n {ns:?} {pod:?} -- tar cf - {src:?} | tar xf -\")",
                    target.display().to_string()
                );
                warned_symlink = true;
            } else {
                eprintln!(
                    "warning: skipping symlink: {:?} -> {link:?}",
                    target.display().to_string()
                );
            }
            continue;
        }
        let mut file = std::fs::File::create(&target).map_err(|e| msg(e.to_string()))?;
        std::io::copy(&mut entry, &mut file).map_err(|e| msg(e.to_string()))?;
    }
    Ok(0)
}

/// Whether `path` stays under `base` (no `..` climbing out).
fn inside(base: &Path, path: &Path) -> bool {
    let Ok(rest) = path.strip_prefix(base) else {
        return path == base;
    };
    !rest.components().any(|c| matches!(c, Component::ParentDir))
}

async fn to_pod(session: &Session, ns: &str, pod: &str, a: &CpArgs, src: &Path, dest: &str) -> Result<i32> {
    if std::fs::metadata(src).is_err() {
        return Err(msg(format!(
            "{} doesn't exist in local filesystem",
            src.display()
        )));
    }
    let container = crate::exec::pod_container(session, ns, pod, a.container.as_deref()).await?;
    // Into a directory that exists there: under the source's name.
    let (_, is_dir) = crate::exec::run_in(session, ns, pod, &container, &["test", "-d", dest], None).await?;
    let mut dest_file = PathBuf::from(dest);
    if is_dir == 0 {
        dest_file = dest_file.join(src.file_name().unwrap_or_default());
    }
    let base = dest_file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dir = dest_file
        .parent()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    let built = if std::fs::metadata(src).map(|m| m.is_dir()).unwrap_or(false) {
        builder.append_dir_all(&base, src)
    } else {
        builder.append_path_with_name(src, &base)
    };
    built.map_err(|e| msg(e.to_string()))?;
    let mut archive = builder.into_inner().map_err(|e| msg(e.to_string()))?;
    // Whole records of 10240 bytes, as tar writes them.
    let record = 10240;
    let padded = archive.len().div_ceil(record) * record;
    archive.resize(padded, 0);
    let mut command = vec!["tar"];
    if a.no_preserve {
        command.extend(["--no-same-permissions", "--no-same-owner"]);
    }
    command.extend(["-xmf", "-"]);
    if !dir.is_empty() {
        command.extend(["-C", &dir]);
    }
    let input: crate::exec::Input = Box::pin(std::io::Cursor::new(archive));
    let (out, code) = crate::exec::run_in(session, ns, pod, &container, &command, Some(input)).await?;
    if !out.is_empty() {
        crate::out(&String::from_utf8_lossy(&out));
    }
    if code != 0 {
        return Err(Error::Raw(format!("command terminated with exit code {code}")));
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_specs_and_remote_paths() {
        let s = spec("web-0:/tmp/x", "default").unwrap();
        assert_eq!(s.pod, Some(("default".into(), "web-0".into())));
        assert_eq!(s.path, "/tmp/x");
        let s = spec("team/web-0:www", "default").unwrap();
        assert_eq!(s.pod, Some(("team".into(), "web-0".into())));
        assert!(spec("./local", "default").unwrap().pod.is_none());
        assert!(spec("web-0:", "default").is_err());
        assert_eq!(clean_remote("/www/./a/../b/"), "www/b");
        assert!(inside(Path::new("out"), Path::new("out/a/b")));
        assert!(inside(Path::new("out"), Path::new("out")));
        assert!(!inside(Path::new("out"), Path::new("out/../etc")));
    }
}
