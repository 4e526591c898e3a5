//! kubeconfig as kubectl loads it: `--kubeconfig`, else the `KUBECONFIG` list merged in order
//! (missing files skipped, the first to set a value or a named entry wins), else
//! `~/.kube/config`, else — on a machine running `r8s server` — r8s's own admin kubeconfig,
//! as k3s does. Then `--context`, `--cluster`, `--user`, `--server`, `--token`, … on top.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::error::{msg, Error, Result};

/// The connection flags every command takes (kubectl's genericclioptions.ConfigFlags).
#[derive(Debug, Default, Clone, clap::Args)]
pub struct Flags {
    /// Path to the kubeconfig file to use for CLI requests.
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// The name of the kubeconfig context to use.
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// The name of the kubeconfig cluster to use.
    #[arg(long, global = true)]
    pub cluster: Option<String>,
    /// The name of the kubeconfig user to use.
    #[arg(long, global = true)]
    pub user: Option<String>,
    /// If present, the namespace scope for this CLI request.
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// The address and port of the Kubernetes API server.
    #[arg(short = 's', long, global = true)]
    pub server: Option<String>,
    /// Bearer token for authentication to the API server.
    #[arg(long, global = true)]
    pub token: Option<String>,
    /// If true, the server's certificate will not be checked for validity.
    #[arg(long, global = true)]
    pub insecure_skip_tls_verify: bool,
    /// Path to a cert file for the certificate authority.
    #[arg(long, global = true)]
    pub certificate_authority: Option<PathBuf>,
    /// Username to impersonate for the operation.
    #[arg(long = "as", global = true)]
    pub as_user: Option<String>,
    /// Group to impersonate for the operation, this flag can be repeated.
    #[arg(long = "as-group", global = true)]
    pub as_group: Vec<String>,
    /// Default cache directory.
    #[arg(long, global = true)]
    pub cache_dir: Option<PathBuf>,
    /// Number for the log level verbosity.
    #[arg(short = 'v', long = "v", global = true, default_value_t = 0)]
    pub verbosity: u32,
    /// The length of time to wait before giving up on a single server request.
    #[arg(long, global = true)]
    pub request_timeout: Option<String>,
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME").map(PathBuf::from)
}

/// The kubeconfig files in precedence order, as kubectl finds them.
pub fn files(flags: &Flags) -> Result<Vec<PathBuf>> {
    if let Some(p) = &flags.kubeconfig {
        if !p.exists() {
            return Err(msg(format!("stat {}: no such file or directory", p.display())));
        }
        return Ok(vec![p.clone()]);
    }
    if let Some(list) = std::env::var_os("KUBECONFIG") {
        let paths: Vec<PathBuf> = std::env::split_paths(&list)
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
        if !paths.is_empty() {
            return Ok(paths.into_iter().filter(|p| p.exists()).collect());
        }
    }
    if let Some(default) = home().map(|h| h.join(".kube").join("config")) {
        if default.exists() {
            return Ok(vec![default]);
        }
    }
    // k3s's convenience: on the server's machine its admin kubeconfig serves.
    let r8s = if is_root() {
        PathBuf::from("/var/lib/r8s/kubeconfig.yaml")
    } else {
        home().unwrap_or_default().join(".r8s").join("kubeconfig.yaml")
    };
    Ok(if r8s.exists() { vec![r8s] } else { Vec::new() })
}

fn is_root() -> bool {
    // /proc/self is owned by the effective user.
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}

/// The merged kubeconfig of `files` as JSON (kubectl's merge rules).
pub fn load(files: &[PathBuf]) -> Result<Value> {
    let mut merged = Value::Object(Map::new());
    for f in files {
        let text = std::fs::read_to_string(f).map_err(|e| msg(format!("open {}: {e}", f.display())))?;
        let docs: Vec<Value> = if text.trim().is_empty() {
            Vec::new()
        } else {
            serde_saphyr::from_multiple(&text)
                .map_err(|e| msg(format!("error loading config file \"{}\": {e}", f.display())))?
        };
        for mut doc in docs {
            if doc.is_null() {
                continue;
            }
            if !doc.is_object() {
                return Err(msg(format!(
                    "error loading config file \"{}\": not a kubeconfig",
                    f.display()
                )));
            }
            check_shape(&doc)
                .map_err(|e| msg(format!("error loading config file \"{}\": {e}", f.display())))?;
            absolutize(&mut doc, f.parent().unwrap_or(Path::new(".")));
            merge(&mut merged, doc);
        }
    }
    Ok(merged)
}

/// Entry point for the fuzz target `kubeconfig` in `fuzz/` (not an API): a kubeconfig file as
/// every command reads it, loaded (YAML, several documents, merged), filled to its typed form,
/// and resolved into a client for the current context (no request is sent; exec plugins and
/// auth providers are removed first, so no command named by the input runs).
#[doc(hidden)]
pub fn fuzz_kubeconfig(data: &[u8]) {
    use std::sync::OnceLock;
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    let rt = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    });
    // A file of its own per input, removed when it returns (a static directory would outlive
    // the process: statics are never dropped).
    let mut file = tempfile::NamedTempFile::new().expect("a temporary file");
    std::io::Write::write_all(&mut file, data).expect("writing the kubeconfig");
    let Ok(mut config) = load(&[file.path().to_path_buf()]) else {
        return;
    };
    typed_form(&mut config);
    let flags = Flags::default();
    let _ = current_user(&flags, &config);
    for user in config["users"].as_array_mut().into_iter().flatten() {
        if let Some(u) = user.get_mut("user").and_then(Value::as_object_mut) {
            u.remove("exec");
            u.remove("auth-provider");
        }
    }
    let _ = rt.block_on(connect(&flags, &config));
}

/// The shape clientcmd's v1 `Config` decodes: its named lists are lists of objects whose
/// bodies are objects (found by the kubeconfig fuzzer: a string where a cluster was made
/// every command panic). The error is Go's decoding error.
fn check_shape(doc: &Value) -> std::result::Result<(), String> {
    let wrong = |got: &Value, field: &str, ty: &str| {
        format!(
            "json: cannot unmarshal {} into Go struct field {field} of type {ty}",
            r8s_api::typed::go_json_type(got)
        )
    };
    for (list, item, inner, body) in [
        ("clusters", "NamedCluster", "cluster", "v1.Cluster"),
        ("users", "NamedAuthInfo", "user", "v1.AuthInfo"),
        ("contexts", "NamedContext", "context", "v1.Context"),
        (
            "extensions",
            "NamedExtension",
            "extension",
            "runtime.RawExtension",
        ),
    ] {
        let entries = match &doc[list] {
            Value::Null => continue,
            Value::Array(entries) => entries,
            other => return Err(wrong(other, &format!("Config.{list}"), &format!("[]v1.{item}"))),
        };
        for e in entries {
            if !e.is_object() {
                return Err(wrong(e, &format!("Config.{list}"), &format!("v1.{item}")));
            }
            if !matches!(e["name"], Value::Null | Value::String(_)) {
                return Err(wrong(&e["name"], &format!("{item}.{list}.name"), "string"));
            }
            if !matches!(e[inner], Value::Null | Value::Object(_)) && inner != "extension" {
                return Err(wrong(&e[inner], &format!("{item}.{list}.{inner}"), body));
            }
        }
    }
    for (key, ty) in [
        ("current-context", "string"),
        ("kind", "string"),
        ("apiVersion", "string"),
    ] {
        if !matches!(doc[key], Value::Null | Value::String(_)) {
            return Err(wrong(&doc[key], &format!("Config.{key}"), ty));
        }
    }
    if !matches!(doc["preferences"], Value::Null | Value::Object(_)) {
        return Err(wrong(&doc["preferences"], "Config.preferences", "v1.Preferences"));
    }
    Ok(())
}

/// Relative file references are relative to the kubeconfig that names them.
fn absolutize(doc: &mut Value, dir: &Path) {
    let fix = |v: &mut Value| {
        if let Some(s) = v.as_str() {
            if !s.is_empty() && !Path::new(s).is_absolute() {
                *v = Value::String(dir.join(s).to_string_lossy().into_owned());
            }
        }
    };
    if let Some(clusters) = doc["clusters"].as_array_mut() {
        for c in clusters {
            if let Some(ca) = c["cluster"].get_mut("certificate-authority") {
                fix(ca);
            }
        }
    }
    if let Some(users) = doc["users"].as_array_mut() {
        for u in users {
            for field in ["client-certificate", "client-key", "tokenFile"] {
                if let Some(v) = u["user"].get_mut(field) {
                    fix(v);
                }
            }
        }
    }
}

/// kubectl's merge: the first file to set a value or a named entry wins, whole.
pub fn merge(base: &mut Value, next: Value) {
    let Value::Object(next) = next else { return };
    let Value::Object(base) = base else { return };
    for (k, v) in next {
        match k.as_str() {
            "clusters" | "users" | "contexts" | "extensions" => {
                let list = base.entry(k).or_insert_with(|| Value::Array(Vec::new()));
                if list.is_null() {
                    *list = Value::Array(Vec::new());
                }
                if let (Some(list), Value::Array(items)) = (list.as_array_mut(), v) {
                    for item in items {
                        let name = item["name"].as_str().unwrap_or("").to_owned();
                        if !list.iter().any(|e| e["name"] == name.as_str()) {
                            list.push(item);
                        }
                    }
                }
            }
            _ => {
                let slot = base.entry(k).or_insert(Value::Null);
                if slot.is_null() || slot == "" {
                    *slot = v;
                }
            }
        }
    }
}

/// The fields clientcmd's v1 types always write (no `omitempty`): a context's cluster and
/// user, a cluster's server.
pub fn typed_form(doc: &mut Value) {
    let fill = |list: &mut Value, inner: &str, keys: &[&str]| {
        for e in list.as_array_mut().into_iter().flatten() {
            if !e[inner].is_object() {
                e[inner] = Value::Object(Map::new());
            }
            for k in keys {
                if e[inner].get(*k).is_none() {
                    e[inner][*k] = Value::String(String::new());
                }
            }
        }
    };
    fill(&mut doc["contexts"], "context", &["cluster", "user"]);
    fill(&mut doc["clusters"], "cluster", &["server"]);
}

fn named<'a>(config: &'a Value, list: &str, name: &str) -> Option<&'a Value> {
    config[list].as_array()?.iter().find(|e| e["name"] == name)
}

/// What a command talks to: the client, its default namespace and the server's address.
pub struct Connection {
    pub rest: crate::rest::Rest,
    pub namespace: String,
    /// The server's URL (the discovery cache is kept per server).
    pub server: String,
}

/// The context in use (`--context`, else the current one): its name and body, if any.
fn context<'a>(flags: &Flags, config: &'a Value) -> (String, Option<&'a Value>) {
    let name = flags
        .context
        .clone()
        .or_else(|| config["current-context"].as_str().map(str::to_owned))
        .unwrap_or_default();
    let body = named(config, "contexts", &name).map(|c| &c["context"]);
    (name, body)
}

/// The user the command runs as: `--user`, else the current context's.
pub fn current_user(flags: &Flags, config: &Value) -> String {
    let (_, context) = context(flags, config);
    flags
        .user
        .clone()
        .or_else(|| context.and_then(|c| c["user"].as_str().map(str::to_owned)))
        .unwrap_or_default()
}

/// The client for `flags` over the merged kubeconfig, as kubectl resolves it.
pub async fn connect(flags: &Flags, config: &Value) -> Result<Connection> {
    let (context_name, context) = context(flags, config);
    if flags.context.is_some() && context.is_none() {
        return Err(Error::Raw(format!(
            "Error in configuration: context was not found for specified context: {context_name}"
        )));
    }
    let cluster_name = flags
        .cluster
        .clone()
        .or_else(|| context.and_then(|c| c["cluster"].as_str().map(str::to_owned)))
        .unwrap_or_default();
    let user_name = current_user(flags, config);
    let mut cluster = named(config, "clusters", &cluster_name)
        .map(|c| c["cluster"].clone())
        .unwrap_or(Value::Object(Map::new()));
    if flags.cluster.is_some() && named(config, "clusters", &cluster_name).is_none() {
        return Err(msg(format!("cluster \"{cluster_name}\" does not exist")));
    }
    let mut user = named(config, "users", &user_name)
        .map(|u| u["user"].clone())
        .unwrap_or(Value::Object(Map::new()));
    if !cluster.is_object() {
        cluster = Value::Object(Map::new());
    }
    if !user.is_object() {
        user = Value::Object(Map::new());
    }
    if let Some(s) = &flags.server {
        cluster["server"] = Value::String(s.clone());
    }
    if flags.insecure_skip_tls_verify {
        cluster["insecure-skip-tls-verify"] = Value::Bool(true);
        if let Some(m) = cluster.as_object_mut() {
            m.remove("certificate-authority-data");
            m.remove("certificate-authority");
        }
    }
    if let Some(ca) = &flags.certificate_authority {
        cluster["certificate-authority"] = Value::String(ca.to_string_lossy().into_owned());
        if let Some(m) = cluster.as_object_mut() {
            m.remove("certificate-authority-data");
        }
    }
    if let Some(t) = &flags.token {
        user["token"] = Value::String(t.clone());
    }
    if let Some(a) = &flags.as_user {
        user["as"] = Value::String(a.clone());
    }
    if !flags.as_group.is_empty() {
        user["as-groups"] = serde_json::json!(flags.as_group);
    }
    let server = match cluster["server"].as_str() {
        Some(s) if !s.is_empty() => s.to_owned(),
        // kubectl's default when nothing names a server.
        _ => {
            return Err(Error::Raw(
                "The connection to the server localhost:8080 was refused - did you specify the right host or port?"
                    .into(),
            ))
        }
    };
    let namespace = flags
        .namespace
        .clone()
        .or_else(|| context.and_then(|c| c["namespace"].as_str().map(str::to_owned)))
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".to_owned());
    let single = serde_json::json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    });
    let kubeconfig: kube::config::Kubeconfig =
        serde_json::from_value(single).map_err(|e| msg(format!("invalid configuration: {e}")))?;
    let mut cfg = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| msg(format!("invalid configuration: {e}")))?;
    if let Some(t) = &flags.request_timeout {
        if let Some(d) = parse_timeout(t) {
            cfg.read_timeout = Some(d);
            cfg.connect_timeout = Some(d);
        }
    }
    // Proxies as Go's client has them: the cluster's proxy-url for everything, else the
    // environment's (HTTPS_PROXY/HTTP_PROXY by the server's scheme, NO_PROXY, never for
    // loopback). kube reads the environment its own way; this replaces its choice.
    cfg.proxy_url = match cluster["proxy-url"].as_str().filter(|p| !p.is_empty()) {
        Some(p) => Some(
            p.parse()
                .map_err(|e| msg(format!("invalid configuration: proxy-url: {e}")))?,
        ),
        None => env_proxy(&server, |k| std::env::var(k).ok())
            .map(|p| p.parse())
            .transpose()
            .map_err(|e| msg(format!("invalid proxy address: {e}")))?,
    };
    let host = server
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let client = kube::Client::try_from(cfg).map_err(|e| msg(format!("invalid configuration: {e}")))?;
    Ok(Connection {
        rest: crate::rest::Rest::new(client, host),
        namespace,
        server,
    })
}

/// The proxy Go's `http.ProxyFromEnvironment` picks for `server`, read through `env`.
fn env_proxy(server: &str, env: impl Fn(&str) -> Option<String>) -> Option<String> {
    let get = |upper: &str| {
        env(upper)
            .or_else(|| env(&upper.to_lowercase()))
            .filter(|v| !v.is_empty())
    };
    let (scheme, rest) = server.split_once("://").unwrap_or(("https", server));
    let proxy = if scheme == "http" {
        get("HTTP_PROXY")
    } else {
        get("HTTPS_PROXY")
    }?;
    let authority = rest.split('/').next().unwrap_or_default();
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => (h, p),
        _ => (authority, ""),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']').to_lowercase();
    let port = if port.is_empty() {
        if scheme == "http" {
            "80"
        } else {
            "443"
        }
    } else {
        port
    };
    if host == "localhost" {
        return None;
    }
    let ip = host.parse::<std::net::IpAddr>().ok();
    if ip.is_some_and(|ip| ip.is_loopback()) {
        return None;
    }
    if let Some(no_proxy) = get("NO_PROXY") {
        for entry in no_proxy.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            if entry == "*" {
                return None;
            }
            if let Some((net, bits)) = entry.split_once('/') {
                if let (Some(ip), Ok(net), Ok(bits)) =
                    (ip, net.parse::<std::net::IpAddr>(), bits.parse::<u32>())
                {
                    if in_cidr(ip, net, bits) {
                        return None;
                    }
                }
                continue;
            }
            if let Ok(e) = entry.parse::<std::net::IpAddr>() {
                if ip == Some(e) {
                    return None;
                }
                continue;
            }
            let (name, want_port) = match entry.rsplit_once(':') {
                Some((n, p)) => (n, Some(p)),
                None => (entry, None),
            };
            if want_port.is_some_and(|p| p != port) {
                continue;
            }
            let name = name.to_lowercase();
            let bare = name.trim_start_matches('*').trim_start_matches('.');
            if host == bare || host.ends_with(&format!(".{bare}")) {
                return None;
            }
        }
    }
    Some(if proxy.contains("://") {
        proxy
    } else {
        format!("http://{proxy}")
    })
}

fn in_cidr(ip: std::net::IpAddr, net: std::net::IpAddr, bits: u32) -> bool {
    let (a, b, len): (u128, u128, u32) = match (ip, net) {
        (std::net::IpAddr::V4(a), std::net::IpAddr::V4(b)) => (u32::from(a).into(), u32::from(b).into(), 32),
        (std::net::IpAddr::V6(a), std::net::IpAddr::V6(b)) => (a.into(), b.into(), 128),
        _ => return false,
    };
    if bits > len {
        return false;
    }
    let shift = len - bits;
    shift >= len || (a >> shift) == (b >> shift)
}

/// `--request-timeout`: "0" (none), a bare number of seconds, or a duration like "5s", "1m".
fn parse_timeout(s: &str) -> Option<std::time::Duration> {
    if s == "0" {
        return None;
    }
    if let Ok(n) = s.parse::<u64>() {
        return Some(std::time::Duration::from_secs(n));
    }
    let (num, unit) = s.split_at(s.find(|c: char| c.is_alphabetic())?);
    let n: f64 = num.parse().ok()?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return None,
    };
    Some(std::time::Duration::from_secs_f64(secs))
}

/// kubectl's cache directory: `--cache-dir`, `$KUBECACHEDIR`, `~/.kube/cache`.
pub fn cache_dir(flags: &Flags) -> PathBuf {
    flags
        .cache_dir
        .clone()
        .or_else(|| std::env::var_os("KUBECACHEDIR").map(PathBuf::from))
        .unwrap_or_else(|| home().unwrap_or_default().join(".kube").join("cache"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Found by the kubeconfig fuzzer: a kubeconfig of the wrong shape is Go's decoding error,
    /// never a panic.
    #[test]
    fn a_kubeconfig_of_the_wrong_shape_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config");
        for (text, words) in [
            ("clusters:\n- c1\n", "cannot unmarshal string into Go struct field Config.clusters of type v1.NamedCluster"),
            ("clusters:\n- name: c\n  cluster: x\n", "cannot unmarshal string into Go struct field NamedCluster.clusters.cluster of type v1.Cluster"),
            ("users: 3\n", "cannot unmarshal number into Go struct field Config.users of type []v1.NamedAuthInfo"),
            ("contexts:\n- name: [a]\n", "cannot unmarshal array into Go struct field NamedContext.contexts.name of type string"),
            ("current-context: {a: b}\n", "cannot unmarshal object into Go struct field Config.current-context of type string"),
        ] {
            std::fs::write(&file, text).unwrap();
            let err = load(std::slice::from_ref(&file)).unwrap_err().to_string();
            assert!(err.contains(words), "{text:?}: {err}");
            assert!(err.contains("error loading config file \"/"), "{err}");
        }
        std::fs::write(
            &file,
            "clusters:\n- name: c\n  cluster: {server: https://a}\ncurrent-context: x\n",
        )
        .unwrap();
        assert_eq!(
            load(&[file]).unwrap()["clusters"][0]["cluster"]["server"],
            "https://a"
        );
    }

    /// The kubeconfig fuzz corpus (and every input it once crashed on) goes through again.
    #[test]
    fn the_kubeconfig_corpus_replays_without_a_panic() {
        assert!(r8s_api::fuzzing::replay("kubeconfig", fuzz_kubeconfig) > 0);
    }

    #[test]
    fn proxies_come_from_the_environment_as_go_reads_it() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        let p = env(&[
            ("HTTPS_PROXY", "proxy:3128"),
            (
                "NO_PROXY",
                "internal.example,.corp,10.0.0.0/8,192.168.1.5,*.svc:8443",
            ),
        ]);
        assert_eq!(
            env_proxy("https://api.example.com:6443", p).as_deref(),
            Some("http://proxy:3128")
        );
        // Never for loopback, nor what NO_PROXY names (domains with subdomains, CIDRs, IPs, ports).
        for server in [
            "https://127.0.0.1:6443",
            "https://localhost:6443",
            "https://[::1]:6443",
            "https://internal.example",
            "https://api.internal.example",
            "https://a.corp:6443",
            "https://10.1.2.3:6443",
            "https://192.168.1.5",
            "https://k.svc:8443",
        ] {
            assert_eq!(env_proxy(server, p), None, "{server}");
        }
        assert_eq!(
            env_proxy("https://k.svc:6443", p).as_deref(),
            Some("http://proxy:3128")
        );
        // The scheme picks the variable; lower case is read too.
        let lower = env(&[("http_proxy", "socks5://s:1080")]);
        assert_eq!(
            env_proxy("http://api:8080", lower).as_deref(),
            Some("socks5://s:1080")
        );
        assert_eq!(env_proxy("https://api:6443", lower), None);
        assert_eq!(
            env_proxy("https://api", env(&[("HTTPS_PROXY", "p:1"), ("NO_PROXY", "*")])),
            None
        );
    }

    #[test]
    fn the_first_to_set_a_value_wins() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        std::fs::write(
            &a,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: one\n  cluster:\n    server: https://a:1\n    certificate-authority: ca.crt\nusers:\n- name: me\n  user:\n    token: first\n",
        )
        .unwrap();
        std::fs::write(
            &b,
            "apiVersion: v1\ncurrent-context: ctx\ncontexts:\n- name: ctx\n  context:\n    cluster: one\n    user: me\n    namespace: team\nclusters:\n- name: one\n  cluster:\n    server: https://b:2\n- name: two\n  cluster:\n    server: https://b:3\nusers:\n- name: me\n  user:\n    token: second\n    username: extra\n",
        )
        .unwrap();
        let merged = load(&[a.clone(), b.clone()]).unwrap();
        assert_eq!(merged["current-context"], "ctx");
        let clusters = merged["clusters"].as_array().unwrap();
        assert_eq!(clusters.len(), 2);
        assert_eq!(clusters[0]["cluster"]["server"], "https://a:1");
        assert_eq!(
            clusters[0]["cluster"]["certificate-authority"],
            json!(dir.path().join("ca.crt").to_string_lossy())
        );
        // A named entry is taken whole from the first file: no field of the second's.
        assert_eq!(merged["users"][0]["user"], json!({"token": "first"}));
        // The other order.
        let merged = load(&[b, a]).unwrap();
        assert_eq!(merged["clusters"][0]["cluster"]["server"], "https://b:2");
        assert_eq!(merged["users"][0]["user"]["token"], "second");
    }

    #[test]
    fn timeouts_parse() {
        assert_eq!(parse_timeout("5"), Some(std::time::Duration::from_secs(5)));
        assert_eq!(parse_timeout("1m"), Some(std::time::Duration::from_secs(60)));
        assert_eq!(parse_timeout("0"), None);
    }
}
