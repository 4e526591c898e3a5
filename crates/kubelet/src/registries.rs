//! The node's registry settings: mirrors and credentials from a `registries.yaml` in k3s's
//! format (`--private-registry`, default `/etc/r8s/registries.yaml`):
//!
//! ```yaml
//! mirrors:
//!   docker.io:
//!     endpoint: ["http://127.0.0.1:5000"]
//! configs:
//!   "127.0.0.1:5000":
//!     auth: {username: alice, password: s3cret}
//!     tls: {ca_file: /ca.pem, cert_file: /c.pem, key_file: /k.pem, insecure_skip_verify: false}
//! ```
//!
//! Mirrors and TLS become containerd registry host files (`certs.d/<registry>/hosts.toml`,
//! containerd's own format); credentials are the node's keyring, tried after the pod's
//! imagePullSecrets as upstream's node-level credential providers are.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine;
use serde::Deserialize;

use crate::credentials::{image_location, Credential, Keyring};

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Registries {
    #[serde(default)]
    pub mirrors: BTreeMap<String, Mirror>,
    #[serde(default)]
    pub configs: BTreeMap<String, RegistryConfig>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mirror {
    #[serde(default)]
    pub endpoint: Vec<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    pub auth: Option<Auth>,
    pub tls: Option<Tls>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Auth {
    #[serde(default)]
    pub username: String,
    #[serde(default)]
    pub password: String,
    /// base64 of `username:password`.
    #[serde(default)]
    pub auth: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tls {
    pub ca_file: Option<String>,
    pub cert_file: Option<String>,
    pub key_file: Option<String>,
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

/// `host[:port]` of an endpoint URL or registry name.
fn authority(s: &str) -> &str {
    let s = s.trim_start_matches("https://").trim_start_matches("http://");
    s.split('/').next().unwrap_or(s)
}

fn toml_string(s: &str) -> String {
    // TOML basic strings escape as JSON strings do for what can appear in paths and URLs.
    serde_json::to_string(s).unwrap_or_default()
}

impl Registries {
    /// Read `path`; a file that is not there is no settings.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        let r: Registries = serde_saphyr::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        for (name, m) in &r.mirrors {
            for ep in &m.endpoint {
                if !(ep.starts_with("http://") || ep.starts_with("https://")) {
                    return Err(format!(
                        "{}: mirror {name:?}: endpoint {ep:?} must start with http:// or https://",
                        path.display()
                    ));
                }
            }
        }
        for (name, c) in &r.configs {
            if let Some(a) = &c.auth {
                if !a.auth.is_empty() {
                    Self::decode_auth(&a.auth)
                        .map_err(|e| format!("{}: config {name:?}: auth: {e}", path.display()))?;
                }
            }
        }
        Ok(r)
    }

    fn decode_auth(auth: &str) -> Result<(String, String), String> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(auth)
            .map_err(|e| e.to_string())?;
        let s = String::from_utf8_lossy(&bytes).to_string();
        let (u, p) = s.split_once(':').ok_or("not base64 of user:password")?;
        Ok((u.to_string(), p.to_string()))
    }

    /// containerd's host files: `(directory name under certs.d, hosts.toml)` for every
    /// registry that has mirrors or settings of its own.
    pub fn hosts_files(&self) -> Vec<(String, String)> {
        let mut names: Vec<&String> = self.mirrors.keys().collect();
        for k in self.configs.keys() {
            if !names.contains(&k) {
                names.push(k);
            }
        }
        let mut files = Vec::new();
        for name in names {
            let dir = if name == "*" {
                "_default".to_string()
            } else {
                authority(name).to_string()
            };
            let (host, _, _) = image_location(&format!("{}/x", authority(name)));
            let server = if name == "*" {
                None
            } else if dir == "docker.io" || host == "index.docker.io" {
                Some("https://registry-1.docker.io".to_string())
            } else if crate::containerd::is_loopback_host(&host) {
                Some(format!("http://{dir}"))
            } else {
                Some(format!("https://{dir}"))
            };
            let mut text = String::from("# Written by r8s from its registries.yaml.\n");
            if let Some(server) = &server {
                text += &format!("server = {}\n", toml_string(server));
                if let Some(tls) = self.configs.get(name).and_then(|c| c.tls.as_ref()) {
                    text += &tls_lines(tls, "");
                }
            }
            for ep in self
                .mirrors
                .get(name)
                .map(|m| m.endpoint.as_slice())
                .unwrap_or(&[])
            {
                text += &format!(
                    "\n[host.{}]\n  capabilities = [\"pull\", \"resolve\"]\n",
                    toml_string(ep)
                );
                if let Some(tls) = self.configs.get(authority(ep)).and_then(|c| c.tls.as_ref()) {
                    text += &tls_lines(tls, "  ");
                }
            }
            files.push((dir, text));
        }
        files
    }

    /// Write the host files into containerd's `certs.d`.
    pub fn write_hosts(&self, certs_d: &Path) -> std::io::Result<()> {
        for (dir, text) in self.hosts_files() {
            let d = certs_d.join(dir);
            std::fs::create_dir_all(&d)?;
            std::fs::write(d.join("hosts.toml"), text)?;
        }
        Ok(())
    }

    /// The node's credentials that apply to `image`: for its registry, then for each of that
    /// registry's mirrors (containerd gives a pull's credentials to every host it tries).
    pub fn credentials(&self, image: &str) -> Vec<Credential> {
        let mut keyring = Keyring::default();
        for (name, c) in &self.configs {
            let Some(a) = &c.auth else { continue };
            let (username, password) = if a.auth.is_empty() {
                (a.username.clone(), a.password.clone())
            } else {
                match Self::decode_auth(&a.auth) {
                    Ok(up) => up,
                    Err(_) => continue,
                }
            };
            keyring.add(authority(name), Credential { username, password });
        }
        let (host, port, path) = image_location(image);
        let registry = if port.is_empty() {
            host.clone()
        } else {
            format!("{host}:{port}")
        };
        let mut found = keyring.lookup(image);
        let mirrors = self
            .mirrors
            .iter()
            .filter(|(name, _)| {
                let (h, p, _) = image_location(&format!("{}/x", authority(name)));
                *name == "*" || (h == host && p == port) || authority(name) == registry
            })
            .flat_map(|(_, m)| m.endpoint.iter());
        for ep in mirrors {
            for c in keyring.lookup(&format!("{}/{path}", authority(ep))) {
                if !found.contains(&c) {
                    found.push(c);
                }
            }
        }
        found
    }
}

fn tls_lines(tls: &Tls, indent: &str) -> String {
    let mut s = String::new();
    if let Some(ca) = &tls.ca_file {
        s += &format!("{indent}ca = {}\n", toml_string(ca));
    }
    if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
        s += &format!(
            "{indent}client = [[{}, {}]]\n",
            toml_string(cert),
            toml_string(key)
        );
    }
    if tls.insecure_skip_verify {
        s += &format!("{indent}skip_verify = true\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
mirrors:
  docker.io:
    endpoint:
      - "http://127.0.0.1:5000"
  registry.example.com:
    endpoint: ["https://mirror.example.com:8443"]
configs:
  "127.0.0.1:5000":
    auth:
      username: alice
      password: s3cret
  "mirror.example.com:8443":
    auth:
      auth: Ym9iOmh1bnRlcjI=
    tls:
      ca_file: /etc/ssl/mirror-ca.pem
      insecure_skip_verify: true
"#;

    fn parse(text: &str) -> Result<Registries, String> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("registries.yaml");
        std::fs::write(&p, text).unwrap();
        Registries::load(&p)
    }

    #[test]
    fn a_missing_file_is_no_settings_and_bad_files_are_refused() {
        let r = Registries::load(Path::new("/nonexistent/registries.yaml")).unwrap();
        assert!(r.mirrors.is_empty() && r.configs.is_empty());
        let e = parse("mirrors:\n  docker.io:\n    endpoint: [\"127.0.0.1:5000\"]\n").unwrap_err();
        assert!(e.contains("must start with http:// or https://"), "{e}");
        let e = parse("mirrorz: {}\n").unwrap_err();
        assert!(e.contains("mirrorz"), "{e}");
        let e = parse("configs:\n  r:\n    auth: {auth: \"!!\"}\n").unwrap_err();
        assert!(e.contains("config \"r\": auth"), "{e}");
    }

    #[test]
    fn mirrors_and_tls_become_containerd_host_files() {
        let r = parse(FILE).unwrap();
        let files: BTreeMap<String, String> = r.hosts_files().into_iter().collect();
        let hub = &files["docker.io"];
        assert!(hub.contains("server = \"https://registry-1.docker.io\""), "{hub}");
        assert!(
            hub.contains("[host.\"http://127.0.0.1:5000\"]\n  capabilities = [\"pull\", \"resolve\"]"),
            "{hub}"
        );
        let ex = &files["registry.example.com"];
        assert!(ex.contains("server = \"https://registry.example.com\""), "{ex}");
        assert!(ex.contains("[host.\"https://mirror.example.com:8443\"]"), "{ex}");
        assert!(
            ex.contains("  ca = \"/etc/ssl/mirror-ca.pem\"\n  skip_verify = true"),
            "{ex}"
        );
        // A config alone (a loopback registry) gets its own file, over plain HTTP.
        assert!(files["127.0.0.1:5000"].contains("server = \"http://127.0.0.1:5000\""));
    }

    #[test]
    fn credentials_cover_the_registry_and_its_mirrors() {
        let r = parse(FILE).unwrap();
        let alice = Credential {
            username: "alice".into(),
            password: "s3cret".into(),
        };
        let bob = Credential {
            username: "bob".into(),
            password: "hunter2".into(),
        };
        // busybox is docker.io's, mirrored at 127.0.0.1:5000 where alice's login applies.
        assert_eq!(r.credentials("busybox"), vec![alice.clone()]);
        assert_eq!(r.credentials("127.0.0.1:5000/private/x:v1"), vec![alice]);
        assert_eq!(r.credentials("registry.example.com/team/app:1"), vec![bob]);
        assert!(r.credentials("quay.io/other/thing").is_empty());
    }
}
