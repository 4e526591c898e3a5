//! Private images, end to end: a registry on loopback (Debian's `docker-registry`, htpasswd
//! basic auth) holds the test busybox; pods pull it with a `kubectl create secret
//! docker-registry` secret, fail with a wrong one or none (ErrImagePull, then
//! ImagePullBackOff), and follow their imagePullPolicy (Never, IfNotPresent, Always).

use crate::support;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;
use support::cluster::*;

/// A `docker-registry` on 127.0.0.1 with one user; stopped and its storage removed on drop.
struct Registry {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Registry {
    fn start(user: &str, password: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let hash = Command::new("htpasswd")
            .args(["-Bbn", user, password])
            .output()
            .unwrap();
        assert!(hash.status.success(), "htpasswd (apache2-utils) is needed");
        std::fs::write(dir.path().join("htpasswd"), &hash.stdout).unwrap();
        let config = format!(
            "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {d}/data\nhttp:\n  addr: 127.0.0.1:{port}\nauth:\n  htpasswd:\n    realm: r8s-test\n    path: {d}/htpasswd\n",
            d = dir.path().display()
        );
        std::fs::write(dir.path().join("config.yml"), config).unwrap();
        let log = std::fs::File::create(dir.path().join("registry.log")).unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(dir.path().join("config.yml"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .expect("docker-registry (the docker-registry package) is needed");
        let r = Registry {
            child,
            port,
            _dir: dir,
        };
        wait_for(20, "the registry", || {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok().map(|_| ())
        });
        r
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Push the OCI image-layout tarball `tar` as `repo:tag` (OCI distribution API, with curl).
    fn push(&self, tar: &Path, repo: &str, tag: &str, user: &str, password: &str) {
        let layout = tempfile::tempdir().unwrap();
        let ok = Command::new("tar")
            .arg("-xf")
            .arg(tar)
            .arg("-C")
            .arg(layout.path())
            .status()
            .unwrap();
        assert!(ok.success());
        let script = r#"
set -euo pipefail
layout=$1 base=http://$2/v2/$3 tag=$4 creds=$5 reg=$2
man=$layout/blobs/sha256/$(jq -r '.manifests[0].digest | sub("^sha256:"; "")' "$layout/index.json")
for digest in $(jq -r '.config.digest, .layers[].digest' "$man"); do
  location=$(curl -fsS -u "$creds" -X POST -o /dev/null -D - "$base/blobs/uploads/" | tr -d '\r' | awk 'tolower($1) == "location:" { print $2 }')
  case $location in /*) location=http://$reg$location ;; esac
  case $location in *\?*) sep='&' ;; *) sep='?' ;; esac
  curl -fsS -u "$creds" -o /dev/null -X PUT -H 'Content-Type: application/octet-stream' \
    -T "$layout/blobs/sha256/${digest#sha256:}" "$location${sep}digest=$digest"
done
curl -fsS -u "$creds" -o /dev/null -X PUT -H 'Content-Type: application/vnd.oci.image.manifest.v1+json' -T "$man" "$base/manifests/$tag"
"#;
        let out = Command::new("bash")
            .args(["-c", script, "push"])
            .arg(layout.path())
            .args([&self.host(), repo, tag, &format!("{user}:{password}")])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "push: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn waiting(s: &support::Server, name: &str) -> Option<(String, String)> {
    let p = pod_json(s, name)?;
    let w = &p["status"]["containerStatuses"][0]["state"]["waiting"];
    Some((
        w["reason"].as_str()?.to_string(),
        w["message"].as_str().unwrap_or("").to_string(),
    ))
}

fn pod(name: &str, image: &str, policy: &str, secrets: &[&str]) -> String {
    let secrets: Vec<Value> = secrets.iter().map(|s| serde_json::json!({"name": s})).collect();
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "imagePullSecrets": secrets,
            "containers": [{"name": "c", "image": image, "imagePullPolicy": policy,
                            "command": ["sh", "-c", "echo pulled-ok; sleep 3600"]}]
        }
    })
    .to_string()
}

#[test]
fn private_images_pull_with_the_right_secret_and_policies_hold() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let busybox: PathBuf = root.join("target/test-images/busybox.tar");
    let c = start("pull-node", "10.201.0.0/16", "r8sp");
    let s = &c.s;
    assert!(busybox.exists(), "the test images are staged by start()");
    let reg = Registry::start("alice", "s3cret");
    reg.push(&busybox, "private/busybox", "v1", "alice", "s3cret");
    let image = format!("{}/private/busybox:v1", reg.host());
    for (name, password) in [("regcred", "s3cret"), ("wrongcred", "nope")] {
        s.ok(
            V,
            &[
                "create",
                "secret",
                "docker-registry",
                name,
                &format!("--docker-server={}", reg.host()),
                "--docker-username=alice",
                &format!("--docker-password={password}"),
            ],
        );
    }

    // A wrong password and no secret: ErrImagePull, then ImagePullBackOff.
    s.ok_stdin(
        V,
        &["create", "-f", "-"],
        &pod("wrong", &image, "Always", &["wrongcred"]),
    );
    s.ok_stdin(
        V,
        &["create", "-f", "-"],
        &pod("anonymous", &image, "Always", &[]),
    );
    for name in ["wrong", "anonymous"] {
        let (_, message) = wait_for(60, &format!("{name}: ErrImagePull"), || {
            waiting(s, name).filter(|(r, _)| r == "ErrImagePull")
        });
        assert!(
            message.contains("401 Unauthorized") || message.contains("unauthorized"),
            "{message}"
        );
        let (_, message) = wait_for(60, &format!("{name}: ImagePullBackOff"), || {
            waiting(s, name).filter(|(r, _)| r == "ImagePullBackOff")
        });
        assert_eq!(message, format!("Back-off pulling image \"{image}\""));
        let events = events_of(s, name);
        assert!(
            events
                .iter()
                .any(|(r, m)| r == "Failed" && m.starts_with(&format!("Failed to pull image \"{image}\": "))),
            "{events:?}"
        );
        assert!(
            events
                .iter()
                .any(|(r, m)| r == "Failed" && m == "Error: ErrImagePull"),
            "{events:?}"
        );
    }

    // Never, with the image absent: ErrImageNeverPull.
    s.ok_stdin(V, &["create", "-f", "-"], &pod("never", &image, "Never", &[]));
    let (_, message) = wait_for(60, "never: ErrImageNeverPull", || {
        waiting(s, "never").filter(|(r, _)| r == "ErrImageNeverPull")
    });
    assert_eq!(
        message,
        format!("Container image \"{image}\" is not present with pull policy of Never")
    );

    // The right secret pulls (a missing one beside it is only a warning).
    s.ok_stdin(
        V,
        &["create", "-f", "-"],
        &pod("good", &image, "IfNotPresent", &["nosuch", "regcred"]),
    );
    wait_for(90, "good Running", || {
        (pod_json(s, "good")?["status"]["phase"] == "Running").then_some(())
    });
    let events = events_of(s, "good");
    assert!(
        events
            .iter()
            .any(|(r, m)| r == "Pulling" && m == &format!("Pulling image \"{image}\"")),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|(r, m)| r == "Pulled"
                && m.starts_with(&format!("Successfully pulled image \"{image}\" in "))),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|(r, m)| r == "FailedToRetrieveImagePullSecret" && m.contains("(nosuch)")),
        "{events:?}"
    );
    wait_for(30, "good's output", || {
        s.ok(V, &["logs", "good"]).contains("pulled-ok").then_some(())
    });

    // Present now: IfNotPresent needs no secret, and Never runs it; Always pulls again.
    s.ok_stdin(
        V,
        &["create", "-f", "-"],
        &pod("present", &image, "IfNotPresent", &[]),
    );
    s.ok_stdin(
        V,
        &["create", "-f", "-"],
        &pod("always", &image, "Always", &["regcred"]),
    );
    for name in ["present", "always", "never"] {
        wait_for(90, &format!("{name} Running"), || {
            (pod_json(s, name)?["status"]["phase"] == "Running").then_some(())
        });
    }
    let present = events_of(s, "present");
    assert!(
        present
            .iter()
            .any(|(r, m)| r == "Pulled"
                && m == &format!("Container image \"{image}\" already present on machine")),
        "{present:?}"
    );
    assert!(!present.iter().any(|(r, _)| r == "Pulling"), "{present:?}");
    assert!(events_of(s, "always").iter().any(|(r, _)| r == "Pulling"));
    drop(reg);
}

/// The node's registries.yaml (`--private-registry`, k3s's format): docker.io mirrored by the
/// loopback registry, whose login is the node's. A pod naming a Docker Hub image with no pull
/// secret runs: Docker Hub is out of reach, so the image can only have come from the mirror,
/// which refuses anonymous pulls.
#[test]
fn registries_yaml_mirrors_docker_hub_with_the_nodes_credentials() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let busybox: PathBuf = root.join("target/test-images/busybox.tar");
    let reg = Registry::start("carol", "m1rror");
    let conf = tempfile::tempdir().unwrap();
    let file = conf.path().join("registries.yaml");
    std::fs::write(
        &file,
        format!(
            "mirrors:\n  docker.io:\n    endpoint:\n      - \"http://{h}\"\nconfigs:\n  \"{h}\":\n    auth:\n      username: carol\n      password: m1rror\n",
            h = reg.host()
        ),
    )
    .unwrap();
    let flag = format!("--private-registry={}", file.display());
    let c = start_with("mirror-node", "10.202.0.0/16", "r8sm", &[&flag]);
    let s = &c.s;
    reg.push(&busybox, "library/mirrored-busybox", "v1", "carol", "m1rror");
    let hosts = std::fs::read_to_string(c.data.join("agent/containerd/certs.d/docker.io/hosts.toml"))
        .expect("the agent writes containerd's host file for docker.io");
    assert!(
        hosts.contains(&format!("[host.\"http://{}\"]", reg.host())),
        "{hosts}"
    );

    s.ok_stdin(
        V,
        &["create", "-f", "-"],
        &pod("mirrored", "mirrored-busybox:v1", "IfNotPresent", &[]),
    );
    wait_for(90, "mirrored Running", || {
        (pod_json(s, "mirrored")?["status"]["phase"] == "Running").then_some(())
    });
    let events = events_of(s, "mirrored");
    assert!(
        events
            .iter()
            .any(|(r, m)| r == "Pulled"
                && m.starts_with("Successfully pulled image \"mirrored-busybox:v1\" in ")),
        "{events:?}"
    );
    wait_for(30, "mirrored's output", || {
        s.ok(V, &["logs", "mirrored"]).contains("pulled-ok").then_some(())
    });
    drop(c);
    drop(reg);
}
