//! The commands about the client and the server rather than objects: `version`,
//! `api-resources`, `api-versions`, `config`.

use serde_json::{json, Value};

use crate::config::{self, Flags};
use crate::error::{msg, Result};
use crate::printers::{self, table};
use crate::{out, Session};

/// The Kubernetes minor whose kubectl this one follows.
const CLIENT_VERSION: &str = "v1.33.0";

#[derive(clap::Args)]
pub struct VersionArgs {
    /// If true, shows client version only (no server required).
    #[arg(long)]
    client: bool,
    /// One of 'yaml' or 'json'.
    #[arg(short = 'o', long)]
    output: Option<String>,
}

fn client_info() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": format!("{CLIENT_VERSION}+r8s-{}", env!("CARGO_PKG_VERSION")),
        "gitTreeState": "clean",
        "platform": format!("{}/{}", std::env::consts::OS, go_arch()),
    })
}

fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

pub async fn version(flags: &Flags, a: VersionArgs) -> Result<i32> {
    let client = client_info();
    let server = if a.client {
        None
    } else {
        let session = Session::open(flags).await?;
        Some(session.conn.rest.get("/version").await?)
    };
    match a.output.as_deref() {
        None | Some("") => {
            out(&format!(
                "Client Version: {}\n",
                client["gitVersion"].as_str().unwrap_or("")
            ));
            if let Some(s) = &server {
                out(&format!(
                    "Server Version: {}\n",
                    s["gitVersion"].as_str().unwrap_or("")
                ));
            }
        }
        Some(o @ ("json" | "yaml")) => {
            let mut doc = json!({"clientVersion": client});
            if let Some(s) = server {
                doc["serverVersion"] = s;
            }
            out(&if o == "json" {
                printers::json::to_string(&doc)
            } else {
                printers::yaml::to_string(&doc)
            });
        }
        Some(other) => return Err(msg(format!("--output must be 'yaml' or 'json', not {other:?}"))),
    }
    Ok(0)
}

#[derive(clap::Args)]
pub struct ApiResourcesArgs {
    /// Output format. One of: (wide, name).
    #[arg(short = 'o', long)]
    output: Option<String>,
    /// If false, non-namespaced resources will be returned, otherwise returning namespaced resources by default.
    #[arg(long)]
    namespaced: Option<bool>,
    /// Limit to resources in the specified API group.
    #[arg(long)]
    api_group: Option<String>,
    /// When using the default or custom-column output format, don't print headers.
    #[arg(long)]
    no_headers: bool,
    /// Limit to resources that support the specified verbs.
    #[arg(long, value_delimiter = ',')]
    verbs: Vec<String>,
}

pub async fn api_resources(session: &Session, a: ApiResourcesArgs) -> Result<i32> {
    let d = session.discovery().await?;
    let mut resources: Vec<_> = d
        .preferred()
        .filter(|r| a.namespaced.is_none_or(|n| r.namespaced == n))
        .filter(|r| a.api_group.as_ref().is_none_or(|g| &r.group == g))
        .filter(|r| a.verbs.iter().all(|v| r.verbs.contains(v)))
        .collect();
    // kubectl's order: by group (the core group first), then by name.
    resources.sort_by(|x, y| (&x.group, &x.name).cmp(&(&y.group, &y.name)));
    if a.output.as_deref() == Some("name") {
        for r in resources {
            out(&format!("{}\n", r.group_resource()));
        }
        return Ok(0);
    }
    let wide = a.output.as_deref() == Some("wide");
    let mut lines = Vec::new();
    if !a.no_headers {
        let mut h: Vec<String> = ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"]
            .map(String::from)
            .into();
        if wide {
            h.push("VERBS".into());
            h.push("CATEGORIES".into());
        }
        lines.push(h);
    }
    for r in resources {
        let mut l = vec![
            r.name.clone(),
            r.short_names.join(","),
            r.api_version(),
            r.namespaced.to_string(),
            r.kind.clone(),
        ];
        if wide {
            l.push(format!("[{}]", r.verbs.join(" ")));
            l.push(r.categories.join(","));
        }
        lines.push(l);
    }
    out(&table::tabwrite(&lines));
    Ok(0)
}

pub async fn api_versions(session: &Session) -> Result<i32> {
    let d = session.discovery().await?;
    let mut versions: Vec<String> = d
        .groups
        .iter()
        .flat_map(|g| {
            g.versions.iter().map(move |v| {
                if g.name.is_empty() {
                    v.clone()
                } else {
                    format!("{}/{v}", g.name)
                }
            })
        })
        .collect();
    versions.sort();
    for v in versions {
        out(&format!("{v}\n"));
    }
    Ok(0)
}

#[derive(clap::Subcommand)]
pub enum ConfigCommand {
    /// Display the current-context.
    CurrentContext,
    /// Describe one or many contexts.
    GetContexts {
        names: Vec<String>,
        /// Output format. One of: (name).
        #[arg(short = 'o', long)]
        output: Option<String>,
        #[arg(long)]
        no_headers: bool,
    },
    /// Set the current-context in a kubeconfig file.
    UseContext { name: String },
    /// Display merged kubeconfig settings or a specified kubeconfig file.
    View {
        /// Output format: yaml or json.
        #[arg(short = 'o', long)]
        output: Option<String>,
        /// Remove all information not used by current-context from the output.
        #[arg(long)]
        minify: bool,
        /// Display raw byte data and sensitive data.
        #[arg(long)]
        raw: bool,
    },
}

pub fn config(flags: &Flags, c: ConfigCommand) -> Result<i32> {
    let files = config::files(flags)?;
    let merged = config::load(&files)?;
    match c {
        ConfigCommand::CurrentContext => match merged["current-context"].as_str() {
            Some(c) if !c.is_empty() => out(&format!("{c}\n")),
            _ => return Err(msg("current-context is not set")),
        },
        ConfigCommand::GetContexts {
            names,
            output,
            no_headers,
        } => {
            let current = merged["current-context"].as_str().unwrap_or("");
            let contexts: Vec<&Value> = merged["contexts"]
                .as_array()
                .map(|a| a.iter().collect())
                .unwrap_or_default();
            for n in &names {
                if !contexts.iter().any(|c| c["name"] == n.as_str()) {
                    return Err(msg(format!("context {n} not found")));
                }
            }
            let mut chosen: Vec<&Value> = contexts
                .into_iter()
                .filter(|c| names.is_empty() || names.iter().any(|n| c["name"] == n.as_str()))
                .collect();
            chosen.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
            if output.as_deref() == Some("name") {
                for c in chosen {
                    out(&format!("{}\n", c["name"].as_str().unwrap_or("")));
                }
                return Ok(0);
            }
            let mut lines = Vec::new();
            if !no_headers {
                lines.push(
                    ["CURRENT", "NAME", "CLUSTER", "AUTHINFO", "NAMESPACE"]
                        .map(String::from)
                        .into(),
                );
            }
            for c in chosen {
                let name = c["name"].as_str().unwrap_or("");
                let s = |k: &str| c["context"][k].as_str().unwrap_or("").to_owned();
                lines.push(vec![
                    if name == current {
                        "*".into()
                    } else {
                        String::new()
                    },
                    name.to_owned(),
                    s("cluster"),
                    s("user"),
                    s("namespace"),
                ]);
            }
            out(&table::tabwrite(&lines));
        }
        ConfigCommand::UseContext { name } => {
            if !merged["contexts"]
                .as_array()
                .is_some_and(|a| a.iter().any(|c| c["name"] == name.as_str()))
            {
                return Err(msg(format!("no context exists with the name: \"{name}\"")));
            }
            // kubectl writes current-context to the first file of the chain.
            let Some(file) = files.first() else {
                return Err(msg("no kubeconfig file to write"));
            };
            let text = std::fs::read_to_string(file).map_err(|e| msg(e.to_string()))?;
            let mut doc: Value = serde_saphyr::from_str(&text).map_err(|e| msg(e.to_string()))?;
            doc["current-context"] = json!(name);
            std::fs::write(file, printers::yaml::to_string(&doc)).map_err(|e| msg(e.to_string()))?;
            out(&format!("Switched to context \"{name}\".\n"));
        }
        ConfigCommand::View { output, minify, raw } => {
            let mut doc = merged.clone();
            for k in ["clusters", "contexts", "users"] {
                if doc[k].is_null() {
                    doc[k] = Value::Null;
                }
            }
            if minify {
                let current = doc["current-context"].as_str().unwrap_or("").to_owned();
                let ctx = doc["contexts"]
                    .as_array()
                    .and_then(|a| a.iter().find(|c| c["name"] == current.as_str()).cloned())
                    .ok_or_else(|| msg("current-context must exist in order to minify"))?;
                let keep = |list: &str, name: &Value| -> Value {
                    json!(doc[list]
                        .as_array()
                        .map(|a| a
                            .iter()
                            .filter(|e| &e["name"] == name)
                            .cloned()
                            .collect::<Vec<_>>())
                        .unwrap_or_default())
                };
                let clusters = keep("clusters", &ctx["context"]["cluster"]);
                let users = keep("users", &ctx["context"]["user"]);
                doc["clusters"] = clusters;
                doc["users"] = users;
                doc["contexts"] = json!([ctx]);
            }
            if !raw {
                redact(&mut doc);
            }
            if doc["preferences"].is_null() {
                doc["preferences"] = json!({});
            }
            if doc["kind"].is_null() {
                doc["kind"] = json!("Config");
            }
            if doc["apiVersion"].is_null() {
                doc["apiVersion"] = json!("v1");
            }
            if doc["current-context"].is_null() {
                doc["current-context"] = json!("");
            }
            for k in ["clusters", "contexts", "users"] {
                if doc[k].as_array().is_some_and(|a| a.is_empty()) {
                    doc[k] = Value::Null;
                }
            }
            match output.as_deref() {
                Some("json") => out(&printers::json::to_string(&doc)),
                None | Some("yaml") => out(&printers::yaml::to_string(&doc)),
                Some(o) => {
                    return Err(msg(format!(
                        "unable to match a printer suitable for the output format \"{o}\""
                    )))
                }
            }
        }
    }
    Ok(0)
}

/// `config view` hides data: certificate and key data as DATA+OMITTED, secrets as REDACTED.
fn redact(doc: &mut Value) {
    for c in doc["clusters"].as_array_mut().into_iter().flatten() {
        if c["cluster"].get("certificate-authority-data").is_some() {
            c["cluster"]["certificate-authority-data"] = json!("DATA+OMITTED");
        }
    }
    for u in doc["users"].as_array_mut().into_iter().flatten() {
        for k in ["client-certificate-data", "client-key-data"] {
            if u["user"].get(k).is_some() {
                u["user"][k] = json!("DATA+OMITTED");
            }
        }
        for k in ["token", "password"] {
            if u["user"].get(k).is_some() {
                u["user"][k] = json!("REDACTED");
            }
        }
    }
}
