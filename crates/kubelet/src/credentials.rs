//! Registry credentials from image pull secrets (upstream `pkg/credentialprovider`): the
//! secrets' `.dockerconfigjson` (`kubernetes.io/dockerconfigjson`) or `.dockercfg`
//! (`kubernetes.io/dockercfg`) entries, looked up for an image as upstream's keyring does —
//! the entry's host (with `*` wildcards per DNS label) and port must match the image's
//! registry, and its path must be a prefix of the image's repository; the most specific
//! entries come first. Docker Hub's many spellings are one registry.

use base64::Engine;
use serde_json::Value;

/// One username and password for a registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credential {
    pub username: String,
    pub password: String,
}

/// An entry of a docker config: where it applies and what it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    host: String,
    port: String,
    path: String,
    credential: Credential,
}

const DOCKER_HUB: &str = "index.docker.io";

/// `host[:port]/path…` of a key or image, with Docker Hub's names made one.
fn split_location(s: &str) -> (String, String, String) {
    let s = s
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .trim_end_matches('/');
    let (authority, path) = match s.split_once('/') {
        Some((a, p)) => (a, p.trim_end_matches('/').to_string()),
        None => (s, String::new()),
    };
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => (h.to_string(), p.to_string()),
        _ => (authority.to_string(), String::new()),
    };
    let host = match host.as_str() {
        "docker.io" | "registry-1.docker.io" | "index.docker.io" => DOCKER_HUB.to_string(),
        _ => host,
    };
    // Docker Hub's own key names the API version, not a repository.
    let path = if host == DOCKER_HUB && (path == "v1" || path == "v2") {
        String::new()
    } else {
        path
    };
    (host, port, path)
}

/// The registry location of an image reference (`busybox` → Docker Hub, `library/busybox`).
pub fn image_location(image: &str) -> (String, String, String) {
    let name = image.split('@').next().unwrap_or(image);
    // Drop the tag (a ':' after the last '/').
    let name = match name.rfind(':') {
        Some(i) if !name[i..].contains('/') => &name[..i],
        _ => name,
    };
    let first = name.split('/').next().unwrap_or("");
    let has_registry =
        name.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let full = if has_registry {
        name.to_string()
    } else if name.contains('/') {
        format!("docker.io/{name}")
    } else {
        format!("docker.io/library/{name}")
    };
    split_location(&full)
}

fn host_matches(pattern: &str, host: &str) -> bool {
    let p: Vec<&str> = pattern.split('.').collect();
    let h: Vec<&str> = host.split('.').collect();
    p.len() == h.len()
        && p.iter().zip(&h).all(|(p, h)| {
            if p.contains('*') {
                glob(p, h)
            } else {
                p.eq_ignore_ascii_case(h)
            }
        })
}

/// `*` matches any run of characters within one label.
fn glob(pattern: &str, s: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == s,
        Some((pre, rest)) => {
            s.starts_with(pre) && (0..=s.len() - pre.len()).any(|i| glob(rest, &s[pre.len() + i..]))
        }
    }
}

/// The registry keyring of a set of pull secrets.
#[derive(Clone, Debug, Default)]
pub struct Keyring {
    entries: Vec<Entry>,
}

impl Keyring {
    /// Add the entries of one secret (its `data`, base64 values as the API serves them).
    pub fn add_secret(&mut self, type_: &str, data: &Value) -> Result<(), String> {
        let (key, nested) = match type_ {
            "kubernetes.io/dockerconfigjson" => (".dockerconfigjson", true),
            "kubernetes.io/dockercfg" => (".dockercfg", false),
            other => return Err(format!("secret type {other:?} holds no registry credentials")),
        };
        let raw = data[key]
            .as_str()
            .ok_or_else(|| format!("the secret has no {key} key"))?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(raw)
            .map_err(|e| format!("{key}: {e}"))?;
        let doc: Value = serde_json::from_slice(&bytes).map_err(|e| format!("{key}: {e}"))?;
        let auths = if nested { &doc["auths"] } else { &doc };
        let Some(auths) = auths.as_object() else {
            return Err(format!("{key}: no registries"));
        };
        for (registry, v) in auths {
            let (mut username, mut password) = (
                v["username"].as_str().unwrap_or("").to_string(),
                v["password"].as_str().unwrap_or("").to_string(),
            );
            if let Some(auth) = v["auth"].as_str().filter(|a| !a.is_empty()) {
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(auth)
                    .map_err(|e| format!("{registry}: auth: {e}"))?;
                let decoded = String::from_utf8_lossy(&decoded).to_string();
                let (u, p) = decoded
                    .split_once(':')
                    .ok_or_else(|| format!("{registry}: auth is not user:password"))?;
                username = u.to_string();
                password = p.to_string();
            }
            self.add(registry, Credential { username, password });
        }
        Ok(())
    }

    /// Add one credential for `registry` (`host[:port][/path]`, `*` wildcards per label).
    pub fn add(&mut self, registry: &str, credential: Credential) {
        let (host, port, path) = split_location(registry);
        self.entries.push(Entry {
            host,
            port,
            path,
            credential,
        });
    }

    /// The credentials that apply to `image`, the most specific first.
    pub fn lookup(&self, image: &str) -> Vec<Credential> {
        let (host, port, path) = image_location(image);
        let mut found: Vec<&Entry> = self
            .entries
            .iter()
            .filter(|e| {
                host_matches(&e.host, &host)
                    && e.port == port
                    && (e.path.is_empty() || path == e.path || path.starts_with(&format!("{}/", e.path)))
            })
            .collect();
        // Longer keys first (upstream sorts its index in reverse order); ties keep secret order.
        found.sort_by_key(|e| std::cmp::Reverse(e.host.len() + e.port.len() + e.path.len()));
        let mut out: Vec<Credential> = Vec::new();
        for e in found {
            if !out.contains(&e.credential) {
                out.push(e.credential.clone());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    fn config_json(v: Value) -> Value {
        json!({".dockerconfigjson": b64(&v.to_string())})
    }

    #[test]
    fn images_name_their_registry() {
        assert_eq!(
            image_location("busybox"),
            (DOCKER_HUB.into(), "".into(), "library/busybox".into())
        );
        assert_eq!(
            image_location("user/app:v1"),
            (DOCKER_HUB.into(), "".into(), "user/app".into())
        );
        assert_eq!(
            image_location("127.0.0.1:5000/private/busybox:v1"),
            ("127.0.0.1".into(), "5000".into(), "private/busybox".into())
        );
        assert_eq!(
            image_location("registry.example.com/team/app@sha256:abcd"),
            ("registry.example.com".into(), "".into(), "team/app".into())
        );
        assert_eq!(
            image_location("localhost/app"),
            ("localhost".into(), "".into(), "app".into())
        );
    }

    #[test]
    fn secrets_parse_in_both_formats() {
        let mut k = Keyring::default();
        k.add_secret(
            "kubernetes.io/dockerconfigjson",
            &config_json(json!({"auths": {"127.0.0.1:5000": {"auth": b64("alice:s3cret")}}})),
        )
        .unwrap();
        let cfg =
            json!({"https://index.docker.io/v1/": {"username": "bob", "password": "pw", "email": "b@x"}});
        k.add_secret(
            "kubernetes.io/dockercfg",
            &json!({".dockercfg": b64(&cfg.to_string())}),
        )
        .unwrap();
        assert_eq!(
            k.lookup("127.0.0.1:5000/private/busybox:v1"),
            [Credential {
                username: "alice".into(),
                password: "s3cret".into()
            }]
        );
        assert_eq!(k.lookup("busybox")[0].username, "bob");
        assert!(
            k.lookup("127.0.0.1:5001/private/busybox").is_empty(),
            "another port"
        );
        assert!(k.lookup("quay.io/x/y").is_empty());
        assert!(k
            .add_secret("Opaque", &json!({}))
            .unwrap_err()
            .contains("holds no registry credentials"));
        assert!(k
            .add_secret(
                "kubernetes.io/dockerconfigjson",
                &json!({".dockerconfigjson": "not base64!"})
            )
            .is_err());
    }

    #[test]
    fn the_most_specific_entries_come_first() {
        let mut k = Keyring::default();
        k.add_secret(
            "kubernetes.io/dockerconfigjson",
            &config_json(json!({"auths": {
                "*.example.com": {"username": "wild", "password": "1"},
                "reg.example.com/team": {"username": "team", "password": "2"},
                "reg.example.com": {"username": "host", "password": "3"},
                "reg.example.com/other": {"username": "other", "password": "4"},
            }})),
        )
        .unwrap();
        let users: Vec<String> = k
            .lookup("reg.example.com/team/app:v1")
            .into_iter()
            .map(|c| c.username)
            .collect();
        assert_eq!(users, ["team", "host", "wild"]);
        // A wildcard covers one label only.
        assert!(k.lookup("a.b.example.com/x").is_empty());
        assert!(host_matches("*.example.com", "reg.example.com"));
        assert!(host_matches("reg*.example.com", "reg1.example.com"));
        assert!(!host_matches("*.example.com", "example.com"));
    }
}
