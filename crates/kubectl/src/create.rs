//! `kubectl create`: objects from `-f`, or built by kubectl's generators (`create namespace`,
//! `configmap`, `secret generic`, `serviceaccount`, `deployment`), sent with kubectl's field
//! manager and strict field validation; `--dry-run=client|server`, `-o`.

use http::Method;
use serde_json::{json, Map, Value};

use crate::discovery::Resource;
use crate::error::{msg, Error, Result};
use crate::printers;
use crate::rest::JSON;
use crate::{manifest, out, Output, Session};

#[derive(clap::Args)]
pub struct CreateArgs {
    /// Filename, directory, or URL to files to use to create the resource.
    #[arg(short = 'f', long = "filename", global = true)]
    filename: Vec<String>,
    /// Process the directory used in -f, --filename recursively.
    #[arg(short = 'R', long, global = true)]
    recursive: bool,
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    generator: Option<Generator>,
}

#[derive(clap::Args, Clone)]
pub(crate) struct Common {
    /// Output format: json, yaml, name.
    #[arg(short = 'o', long, global = true)]
    pub output: Option<String>,
    /// Must be "none", "server", or "client".
    #[arg(long, global = true, num_args = 0..=1, default_missing_value = "client")]
    pub dry_run: Option<String>,
    /// Name of the manager used to track field ownership.
    #[arg(long, global = true)]
    pub field_manager: Option<String>,
    /// Must be one of: strict (or true), warn, ignore (or false). Unknown or duplicate fields
    /// are refused, warned of, or dropped by the server (its field validation).
    #[arg(long, global = true, num_args = 0..=1, default_missing_value = "strict")]
    pub validate: Option<String>,
}

/// The field validation writes ask the server for (`--validate`), set once per run.
static FIELD_VALIDATION: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

fn field_validation() -> &'static str {
    FIELD_VALIDATION.get().copied().unwrap_or("Strict")
}

#[derive(clap::Subcommand)]
enum Generator {
    /// Create a namespace with the specified name.
    #[command(alias = "ns")]
    Namespace { name: String },
    /// Create a config map from a local file, directory or literal value.
    #[command(alias = "cm")]
    Configmap {
        name: String,
        #[arg(long)]
        from_literal: Vec<String>,
        #[arg(long)]
        from_file: Vec<String>,
    },
    /// Create a service account with the specified name.
    #[command(alias = "sa")]
    Serviceaccount { name: String },
    /// Create a secret using a specified subcommand.
    #[command(subcommand)]
    Secret(SecretKind),
    /// Create a deployment with the specified name.
    #[command(alias = "deploy")]
    Deployment {
        name: String,
        /// Image names to run. A deployment can have multiple images set for multi-container pod.
        #[arg(long, required = true)]
        image: Vec<String>,
        /// Number of replicas to create. Default is 1.
        #[arg(short = 'r', long, default_value_t = 1)]
        replicas: i32,
        /// The containerPort that this deployment exposes.
        #[arg(long, default_value_t = -1)]
        port: i32,
    },
    /// Create a job with the specified name.
    Job(crate::generators::JobArgs),
    /// Create a cron job with the specified name.
    #[command(alias = "cj")]
    Cronjob(crate::generators::CronJobArgs),
    /// Create a service using a specified subcommand.
    #[command(subcommand, alias = "svc")]
    Service(crate::generators::ServiceKind),
    /// Create a role with single rule.
    Role(crate::generators::RoleArgs),
    /// Create a cluster role.
    Clusterrole(crate::generators::RoleArgs),
    /// Create a role binding for a particular role or cluster role.
    Rolebinding(crate::generators::BindingArgs),
    /// Create a cluster role binding for a particular cluster role.
    Clusterrolebinding(crate::generators::BindingArgs),
    /// Create a quota with the specified name.
    #[command(alias = "resourcequota")]
    Quota(crate::generators::QuotaArgs),
    /// Create a priority class with the specified name.
    #[command(alias = "pc")]
    Priorityclass(crate::generators::PriorityClassArgs),
    /// Create a pod disruption budget with the specified name.
    #[command(alias = "pdb")]
    Poddisruptionbudget(crate::generators::PdbArgs),
    /// Request a service account token.
    Token(crate::generators::TokenArgs),
    /// Create an ingress with the specified name.
    #[command(alias = "ing")]
    Ingress(crate::generators::IngressArgs),
}

#[derive(clap::Subcommand)]
enum SecretKind {
    /// Create a secret from a local file, directory, or literal value.
    Generic {
        name: String,
        #[arg(long)]
        from_literal: Vec<String>,
        #[arg(long)]
        from_file: Vec<String>,
        #[arg(long = "type")]
        secret_type: Option<String>,
    },
    /// Create a TLS secret.
    Tls {
        name: String,
        /// Path to PEM encoded public key certificate.
        #[arg(long)]
        cert: Option<String>,
        /// Path to private key associated with given certificate.
        #[arg(long)]
        key: Option<String>,
    },
    /// Create a secret for use with a Docker registry.
    DockerRegistry {
        name: String,
        /// Username for Docker registry authentication.
        #[arg(long)]
        docker_username: Option<String>,
        /// Password for Docker registry authentication.
        #[arg(long)]
        docker_password: Option<String>,
        /// Email for Docker registry.
        #[arg(long)]
        docker_email: Option<String>,
        /// Server location for Docker registry.
        #[arg(long, default_value = "https://index.docker.io/v1/")]
        docker_server: String,
        /// Key files (a .dockercfg or .docker/config.json), as `--from-file` of a generic secret.
        #[arg(long, value_delimiter = ',')]
        from_file: Vec<String>,
    },
}

/// kubectl's readFile error.
fn read_file(path: &str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        let why = match e.kind() {
            std::io::ErrorKind::NotFound => "no such file or directory".to_owned(),
            std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
            _ => e.to_string(),
        };
        msg(format!("Cannot read file {path}, open {path}: {why}"))
    })
}

/// The PEM block labels in `pem`.
fn pem_labels(pem: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(pem)
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("-----BEGIN ")?
                .strip_suffix("-----")
                .map(String::from)
        })
        .collect()
}

/// What Go's `tls.X509KeyPair` checks of the PEM framing, in its words: a certificate in the
/// certificate input, a private key in the key input. (Whether the key belongs to the
/// certificate is left to the server's users of it.)
fn check_key_pair(cert: &[u8], key: &[u8]) -> Result<()> {
    let certs = pem_labels(cert);
    if !certs.iter().any(|l| l == "CERTIFICATE") {
        return Err(msg(if certs.iter().any(|l| l.ends_with("PRIVATE KEY")) {
            "tls: failed to find certificate PEM data in certificate input, but did find a private key; PEM inputs may have been switched"
        } else {
            "tls: failed to find any PEM data in certificate input"
        }));
    }
    let keys = pem_labels(key);
    if !keys
        .iter()
        .any(|l| l == "PRIVATE KEY" || l.ends_with(" PRIVATE KEY"))
    {
        return Err(msg(if keys.iter().any(|l| l == "CERTIFICATE") {
            "tls: found a certificate rather than a key in the PEM for the private key"
        } else {
            "tls: failed to find any PEM data in key input"
        }));
    }
    Ok(())
}

/// A registry's `.dockerconfigjson` as kubectl marshals its `DockerConfigJSON`: the entry's
/// fields in Go's order, empty ones left out, Go's string escapes.
fn docker_config_json(server: &str, user: &str, password: &str, email: &str) -> String {
    let q = |s: &str| {
        let mut out = String::new();
        printers::json::string(&mut out, s);
        out
    };
    let mut entry = Vec::new();
    for (k, v) in [("username", user), ("password", password), ("email", email)] {
        if !v.is_empty() {
            entry.push(format!("\"{k}\":{}", q(v)));
        }
    }
    entry.push(format!(
        "\"auth\":{}",
        q(&base64(format!("{user}:{password}").as_bytes()))
    ));
    format!("{{\"auths\":{{{}:{{{}}}}}}}", q(server), entry.join(","))
}

#[derive(Clone, Copy, PartialEq)]
pub(crate) enum DryRun {
    None,
    Client,
    Server,
}

impl Common {
    /// The dry-run mode; also takes `--validate` in (every writing command asks for its
    /// dry-run mode before it writes).
    pub fn dry_run(&self) -> Result<DryRun> {
        let validation = match self.validate.as_deref() {
            None | Some("strict") | Some("true") => "Strict",
            Some("warn") => "Warn",
            Some("ignore") | Some("false") => "Ignore",
            Some(other) => {
                return Err(msg(format!(
                    "invalid - validate option {other:?}; must be one of: strict (or true), warn, ignore (or false)"
                )))
            }
        };
        let _ = FIELD_VALIDATION.set(validation);
        match self.dry_run.as_deref() {
            None | Some("none") => Ok(DryRun::None),
            Some("client") => Ok(DryRun::Client),
            Some("server") => Ok(DryRun::Server),
            Some(other) => Err(msg(format!(
                "Invalid dry-run value ({other}). Must be \"none\", \"server\", or \"client\"."
            ))),
        }
    }
}

pub async fn run(session: &Session, a: CreateArgs) -> Result<i32> {
    let dry = a.common.dry_run()?;
    let output = Output::parse(a.common.output.as_deref())?;
    let objects: Vec<(Value, Option<String>)> = match &a.generator {
        Some(Generator::Token(t)) => return crate::generators::token(session, t).await,
        Some(g) => vec![(generate(session, g).await?, None)],
        None if !a.filename.is_empty() => manifest::read(&a.filename, a.recursive)?
            .into_iter()
            .map(|m| (m.object, Some(m.source)))
            .collect(),
        None => {
            return Err(msg(
                "must specify one of -f and -k\n\nerror: You must provide one or more resources by argument or filename.\nExample resource specifications include:\n   '-f rsrc.yaml'\n   '--filename=rsrc.json'\n   '<resource> <name>'\n   '<resource>'",
            ))
        }
    };
    let manager = a.common.field_manager.as_deref().unwrap_or("kubectl-create");
    let mut failed = false;
    for (obj, source) in objects {
        match create_one(session, obj, dry, manager).await {
            // A generator's object is a typed Go value in kubectl; a file's is unstructured.
            Ok((resource, created)) if a.generator.is_some() => {
                print_typed_result(&resource, &created, &output, "created", dry)?
            }
            Ok((resource, created)) => print_result(&resource, &created, &output, "created", dry)?,
            Err(Error::Api(e)) => {
                match (&source, &a.generator) {
                    (Some(file), _) => eprintln!("{}", e.when("creating", file).display()),
                    // kubectl's job and cronjob generators wrap the server's message.
                    (None, Some(Generator::Job(_))) => {
                        eprintln!("error: failed to create job: {}", e.message)
                    }
                    (None, Some(Generator::Cronjob(_))) => {
                        eprintln!("error: failed to create cronjob: {}", e.message)
                    }
                    (None, _) => eprintln!("{}", e.display()),
                }
                failed = true;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(i32::from(failed))
}

/// `configmap/x created`, or the object as `-o` asks.
/// What `-o` prints for a written object (`resource/name verb` by default); a Go template
/// that fails is kubectl's report and an error.
pub(crate) fn print_result(
    r: &Resource,
    obj: &Value,
    output: &Output,
    verb: &str,
    dry: DryRun,
) -> Result<()> {
    print_object(r, obj, output, verb, dry, false)
}

/// The same for an object kubectl holds as a typed Go value (a generator's): `-o json` in
/// Go's field order.
pub(crate) fn print_typed_result(
    r: &Resource,
    obj: &Value,
    output: &Output,
    verb: &str,
    dry: DryRun,
) -> Result<()> {
    print_object(r, obj, output, verb, dry, true)
}

fn print_object(
    r: &Resource,
    obj: &Value,
    output: &Output,
    verb: &str,
    dry: DryRun,
    typed: bool,
) -> Result<()> {
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    let suffix = match dry {
        DryRun::None => "",
        DryRun::Client => " (dry run)",
        DryRun::Server => " (server dry run)",
    };
    let mut obj = obj.clone();
    crate::get::strip_managed_fields(&mut obj);
    match output {
        Output::Yaml => out(&printers::yaml::to_string(&obj)),
        Output::Json if typed => out(&printers::json::to_string_typed(&printers::go_order::arrange(
            &obj,
        ))),
        Output::Json => out(&printers::json::to_string(&obj)),
        Output::Name => out(&format!("{}/{name}\n", r.kind_prefix())),
        Output::JsonPath(t) => out(&printers::jsonpath::execute(t, &obj)),
        Output::GoTemplate(t) => match printers::gotemplate::execute(t, &obj) {
            Ok(text) => out(&text),
            Err((report, e)) => {
                out(&report);
                return Err(msg(e));
            }
        },
        Output::CustomColumns(_) => out(&format!("{}/{name} {verb}{suffix}\n", r.kind_prefix())),
        Output::Table { .. } => out(&format!("{}/{name} {verb}{suffix}\n", r.kind_prefix())),
    }
    Ok(())
}

/// The namespace an object goes to: its own, else the session's; `-n` naming another is an
/// error, as kubectl has it.
pub(crate) fn target_namespace(session: &Session, r: &Resource, obj: &mut Value) -> Result<Option<String>> {
    if !r.namespaced {
        return Ok(None);
    }
    let own = obj["metadata"]["namespace"].as_str().map(str::to_owned);
    match (own, &session.flags.namespace) {
        (Some(own), Some(flag)) if !own.is_empty() && &own != flag => Err(msg(format!(
            "the namespace from the provided object \"{own}\" does not match the namespace \"{flag}\". You must pass '--namespace={own}' to perform this operation."
        ))),
        (Some(own), _) if !own.is_empty() => Ok(Some(own)),
        _ => Ok(Some(session.conn.namespace.clone())),
    }
}

async fn create_one(
    session: &Session,
    mut obj: Value,
    dry: DryRun,
    manager: &str,
) -> Result<(Resource, Value)> {
    let r = resource_of(session, &obj).await?;
    let ns = target_namespace(session, &r, &mut obj)?;
    let created = post(session, &r, ns.as_deref(), obj, manager, dry).await?;
    Ok((r, created))
}

/// The resource a manifest names by its apiVersion and kind.
pub(crate) async fn resource_of(session: &Session, obj: &Value) -> Result<Resource> {
    session
        .resource_for_kind(
            obj["apiVersion"].as_str().unwrap_or(""),
            obj["kind"].as_str().unwrap_or(""),
        )
        .await
}

/// What every kubectl write carries: its field manager, strict field validation, and
/// `dryRun=All` for a server dry run.
pub(crate) fn write_query(manager: &str, dry: DryRun) -> String {
    let mut q = format!(
        "fieldManager={}&fieldValidation={}",
        crate::get::encode(manager),
        field_validation()
    );
    if dry == DryRun::Server {
        q.push_str("&dryRun=All");
    }
    q
}

/// `obj` created in its collection; with a client dry run, `obj` as it is.
pub(crate) async fn post(
    session: &Session,
    r: &Resource,
    ns: Option<&str>,
    obj: Value,
    manager: &str,
    dry: DryRun,
) -> Result<Value> {
    if dry == DryRun::Client {
        return Ok(obj);
    }
    let uri = format!("{}?{}", r.collection_path(ns), write_query(manager, dry));
    let body = serde_json::to_vec(&obj).map_err(|e| msg(e.to_string()))?;
    session
        .conn
        .rest
        .json(Method::POST, &uri, JSON, Some((JSON, body)))
        .await
}

/// kubectl's generated objects, field for field (creationTimestamp null, empty status).
async fn generate(session: &Session, g: &Generator) -> Result<Value> {
    let meta = |name: &str, namespaced: bool| -> Value {
        let mut m = json!({"name": name, "creationTimestamp": null});
        if namespaced {
            if let Some(ns) = &session.flags.namespace {
                m["namespace"] = json!(ns);
            }
        }
        m
    };
    Ok(match g {
        Generator::Namespace { name } => json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": meta(name, false),
            "spec": {}, "status": {}
        }),
        Generator::Serviceaccount { name } => json!({
            "apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(name, true)
        }),
        Generator::Configmap {
            name,
            from_literal,
            from_file,
        } => {
            let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(name, true)});
            let data = key_values(from_literal, from_file)?;
            let (text, binary): (Map<String, Value>, Map<String, Value>) = {
                let mut t = Map::new();
                let mut b = Map::new();
                for (k, v) in data {
                    match String::from_utf8(v) {
                        Ok(s) => {
                            t.insert(k, json!(s));
                        }
                        Err(e) => {
                            b.insert(k, json!(base64(e.as_bytes())));
                        }
                    }
                }
                (t, b)
            };
            if !text.is_empty() {
                cm["data"] = Value::Object(text);
            }
            if !binary.is_empty() {
                cm["binaryData"] = Value::Object(binary);
            }
            cm
        }
        Generator::Secret(SecretKind::Generic {
            name,
            from_literal,
            from_file,
            secret_type,
        }) => {
            let mut s = json!({"apiVersion": "v1", "kind": "Secret", "metadata": meta(name, true)});
            let data: Map<String, Value> = key_values(from_literal, from_file)?
                .into_iter()
                .map(|(k, v)| (k, json!(base64(&v))))
                .collect();
            if !data.is_empty() {
                s["data"] = Value::Object(data);
            }
            if let Some(t) = secret_type {
                s["type"] = json!(t);
            }
            s
        }
        Generator::Secret(SecretKind::Tls { name, cert, key }) => {
            let (Some(cert), Some(key)) = (
                cert.as_deref().filter(|c| !c.is_empty()),
                key.as_deref().filter(|k| !k.is_empty()),
            ) else {
                return Err(msg("key and cert must be specified"));
            };
            let (cert, key) = (read_file(cert)?, read_file(key)?);
            check_key_pair(&cert, &key)?;
            json!({
                "apiVersion": "v1", "kind": "Secret", "metadata": meta(name, true),
                "data": {"tls.crt": base64(&cert), "tls.key": base64(&key)},
                "type": "kubernetes.io/tls"
            })
        }
        Generator::Secret(SecretKind::DockerRegistry {
            name,
            docker_username,
            docker_password,
            docker_email,
            docker_server,
            from_file,
        }) => {
            let user = docker_username.as_deref().unwrap_or("");
            let password = docker_password.as_deref().unwrap_or("");
            if from_file.is_empty() && (user.is_empty() || password.is_empty() || docker_server.is_empty()) {
                return Err(msg(
                    "either --from-file or the combination of --docker-username, --docker-password and --docker-server is required",
                ));
            }
            let data: Map<String, Value> = if from_file.is_empty() {
                let config = docker_config_json(
                    docker_server,
                    user,
                    password,
                    docker_email.as_deref().unwrap_or(""),
                );
                [(".dockerconfigjson".to_owned(), json!(base64(config.as_bytes())))]
                    .into_iter()
                    .collect()
            } else {
                key_values(&[], from_file)?
                    .into_iter()
                    .map(|(k, v)| (k, json!(base64(&v))))
                    .collect()
            };
            json!({
                "apiVersion": "v1", "kind": "Secret", "metadata": meta(name, true),
                "data": data, "type": "kubernetes.io/dockerconfigjson"
            })
        }
        Generator::Deployment {
            name,
            image,
            replicas,
            port,
        } => {
            let labels = json!({"app": name});
            let containers: Vec<Value> = image
                .iter()
                .map(|i| {
                    let mut c = json!({"name": container_name(i), "image": i, "resources": {}});
                    if *port >= 0 {
                        c["ports"] = json!([{"containerPort": port}]);
                    }
                    c
                })
                .collect();
            let mut m = meta(name, true);
            m["labels"] = labels.clone();
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": m,
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"creationTimestamp": null, "labels": labels},
                        "spec": {"containers": containers}
                    },
                    "strategy": {}
                },
                "status": {}
            })
        }
        Generator::Job(a) => crate::generators::job(meta(&a.name, true), a),
        Generator::Cronjob(a) => crate::generators::cronjob(meta(&a.name, true), a),
        Generator::Service(k) => crate::generators::service(k, |n| meta(n, true))?,
        Generator::Role(a) => crate::generators::role(session, meta(&a.name, true), a, "Role").await?,
        Generator::Clusterrole(a) => {
            crate::generators::role(session, meta(&a.name, false), a, "ClusterRole").await?
        }
        Generator::Rolebinding(a) => crate::generators::binding(meta(&a.name, true), a, "RoleBinding")?,
        Generator::Clusterrolebinding(a) => {
            crate::generators::binding(meta(&a.name, false), a, "ClusterRoleBinding")?
        }
        Generator::Quota(a) => crate::generators::quota(meta(&a.name, true), a)?,
        Generator::Priorityclass(a) => crate::generators::priority_class(meta(&a.name, false), a),
        Generator::Poddisruptionbudget(a) => crate::generators::pdb(meta(&a.name, true), a)?,
        Generator::Ingress(a) => crate::generators::ingress(meta(&a.name, true), a)?,
        Generator::Token(_) => unreachable!("requested before generating"),
    })
}

/// kubectl names a container after its image: the last path segment, without tag or digest.
fn container_name(image: &str) -> String {
    let base = image.rsplit('/').next().unwrap_or(image);
    let base = base.split('@').next().unwrap_or(base);
    let base = base.split(':').next().unwrap_or(base);
    base.to_owned()
}

/// `--from-literal=k=v` and `--from-file=[key=]path` (a directory's regular files).
fn key_values(literals: &[String], files: &[String]) -> Result<Vec<(String, Vec<u8>)>> {
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    let mut add = |k: String, v: Vec<u8>| -> Result<()> {
        if out.iter().any(|(e, _)| e == &k) {
            return Err(msg(format!(
                "cannot add key {k}, another key by that name already exists in Data for ConfigMap \"\""
            )));
        }
        out.push((k, v));
        Ok(())
    };
    for l in literals {
        let Some((k, v)) = l.split_once('=') else {
            return Err(msg(format!("invalid literal source {l}, expected key=value")));
        };
        add(k.to_owned(), v.as_bytes().to_vec())?;
    }
    for f in files {
        let (key, path) = match f.split_once('=') {
            Some((k, p)) => (Some(k.to_owned()), p.to_owned()),
            None => (None, f.clone()),
        };
        let p = std::path::Path::new(&path);
        if p.is_dir() {
            let mut entries: Vec<_> = std::fs::read_dir(p)
                .map_err(|e| msg(e.to_string()))?
                .filter_map(|e| e.ok())
                .filter(|e| e.path().is_file())
                .collect();
            entries.sort_by_key(|e| e.file_name());
            for e in entries {
                let data = std::fs::read(e.path()).map_err(|e| msg(e.to_string()))?;
                add(e.file_name().to_string_lossy().into_owned(), data)?;
            }
        } else {
            let data = std::fs::read(p)
                .map_err(|_| msg(format!("error reading {path}: no such file or directory")))?;
            let k = key.unwrap_or_else(|| {
                p.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            });
            add(k, data)?;
        }
    }
    Ok(out)
}

pub(crate) fn base64(data: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_names_and_base64() {
        assert_eq!(container_name("docker.io/library/nginx:1.25"), "nginx");
        assert_eq!(container_name("registry:5000/team/app@sha256:abc"), "app");
        assert_eq!(base64(b"value"), "dmFsdWU=");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"abc"), "YWJj");
    }
}
