//! The `config` commands that change a kubeconfig file: `set-context`, `set-cluster`,
//! `set-credentials`, `unset`, `delete-context|cluster|user`, `rename-context`, and the listings
//! `get-clusters`, `get-users`. The file written is the one kubectl writes: `--kubeconfig`, else
//! the first of `KUBECONFIG`, else `~/.kube/config` (created when missing); it is written in
//! kubectl's full form (every top-level field, `null` for empty lists).

use std::path::PathBuf;

use serde_json::{json, Map, Value};

use crate::config::Flags;
use crate::error::{msg, Result};
use crate::out;
use crate::printers::yaml;

#[derive(clap::Subcommand)]
pub enum EditCommand {
    /// Set a context entry in kubeconfig.
    /// (`--cluster`, `--user` and `--namespace` are the global flags, as in kubectl.)
    SetContext {
        name: Option<String>,
        #[arg(long = "current")]
        current: bool,
    },
    /// Set a cluster entry in kubeconfig.
    /// (`--server`, `--certificate-authority` and `--insecure-skip-tls-verify` are the global
    /// flags.)
    SetCluster {
        name: String,
        #[arg(long)]
        tls_server_name: Option<String>,
    },
    /// Set a user entry in kubeconfig.
    /// (`--token` is the global flag.)
    SetCredentials {
        name: String,
        #[arg(long)]
        username: Option<String>,
        #[arg(long)]
        password: Option<String>,
        #[arg(long)]
        client_certificate: Option<String>,
        #[arg(long)]
        client_key: Option<String>,
    },
    /// Unset an individual value in a kubeconfig file.
    Unset { property: String },
    /// Delete the specified context from the kubeconfig.
    DeleteContext { name: String },
    /// Delete the specified cluster from the kubeconfig.
    DeleteCluster { name: String },
    /// Delete the specified user from the kubeconfig.
    DeleteUser { name: String },
    /// Rename a context from the kubeconfig file.
    RenameContext { old: String, new: String },
    /// Display clusters defined in the kubeconfig.
    GetClusters,
    /// Display users defined in the kubeconfig.
    GetUsers,
}

/// The file kubectl writes to.
fn destination(flags: &Flags) -> PathBuf {
    if let Some(p) = &flags.kubeconfig {
        return p.clone();
    }
    if let Some(list) = std::env::var_os("KUBECONFIG") {
        if let Some(first) = std::env::split_paths(&list).find(|p| !p.as_os_str().is_empty()) {
            return first;
        }
    }
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default()
        .join(".kube")
        .join("config")
}

pub(crate) fn read(path: &PathBuf) -> Result<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut doc: Value = if text.trim().is_empty() {
        json!({})
    } else {
        serde_saphyr::from_str(&text)
            .map_err(|e| msg(format!("error loading config file \"{}\": {e}", path.display())))?
    };
    if !doc.is_object() {
        doc = json!({});
    }
    Ok(doc)
}

/// kubectl's full form of a kubeconfig.
pub(crate) fn write(path: &PathBuf, doc: &mut Value) -> Result<()> {
    crate::config::typed_form(doc);
    let m = doc.as_object_mut().expect("an object");
    m.entry("apiVersion").or_insert(json!("v1"));
    m.entry("kind").or_insert(json!("Config"));
    m.entry("current-context").or_insert(json!(""));
    m.entry("preferences").or_insert(json!({}));
    for k in ["clusters", "contexts", "users"] {
        let v = m.entry(k).or_insert(Value::Null);
        if v.as_array().is_some_and(|a| a.is_empty()) {
            *v = Value::Null;
        }
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| msg(e.to_string()))?;
    }
    std::fs::write(path, yaml::to_string(doc)).map_err(|e| msg(e.to_string()))
}

/// The entry `name` of list `list` (`clusters`, `contexts`, `users`), created empty when
/// missing; whether it was new.
fn entry<'a>(doc: &'a mut Value, list: &str, inner: &str, name: &str) -> (&'a mut Map<String, Value>, bool) {
    if !doc[list].is_array() {
        doc[list] = json!([]);
    }
    let items = doc[list].as_array_mut().expect("an array");
    let pos = items.iter().position(|e| e["name"] == name);
    let created = pos.is_none();
    let idx = match pos {
        Some(i) => i,
        None => {
            items.push(json!({"name": name, inner: {}}));
            items.len() - 1
        }
    };
    if !items[idx][inner].is_object() {
        items[idx][inner] = json!({});
    }
    (items[idx][inner].as_object_mut().expect("an object"), created)
}

pub fn edit(flags: &Flags, c: EditCommand) -> Result<i32> {
    let path = destination(flags);
    let mut doc = read(&path)?;
    match c {
        EditCommand::SetContext { name, current } => {
            let (cluster, user, namespace) =
                (flags.cluster.clone(), flags.user.clone(), flags.namespace.clone());
            let name = match (name, current) {
                (Some(n), _) => n,
                (None, true) => doc["current-context"]
                    .as_str()
                    .filter(|c| !c.is_empty())
                    .map(str::to_owned)
                    .ok_or_else(|| msg("no current context is set"))?,
                (None, false) => return Err(msg("you must specify a non-empty context name or --current")),
            };
            let (ctx, created) = entry(&mut doc, "contexts", "context", &name);
            for (k, v) in [("cluster", cluster), ("user", user), ("namespace", namespace)] {
                if let Some(v) = v {
                    ctx.insert(k.into(), json!(v));
                }
            }
            write(&path, &mut doc)?;
            out(&format!(
                "Context \"{name}\" {}.\n",
                if created { "created" } else { "modified" }
            ));
        }
        EditCommand::SetCluster {
            name,
            tls_server_name,
        } => {
            let server = flags.server.clone();
            let certificate_authority = flags
                .certificate_authority
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned());
            let insecure_skip_tls_verify = flags.insecure_skip_tls_verify.then_some(true);
            let (cl, _) = entry(&mut doc, "clusters", "cluster", &name);
            if let Some(s) = server {
                cl.insert("server".into(), json!(s));
            }
            if let Some(ca) = certificate_authority {
                cl.insert("certificate-authority".into(), json!(ca));
                cl.remove("certificate-authority-data");
            }
            if let Some(i) = insecure_skip_tls_verify {
                cl.insert("insecure-skip-tls-verify".into(), json!(i));
            }
            if let Some(n) = tls_server_name {
                cl.insert("tls-server-name".into(), json!(n));
            }
            write(&path, &mut doc)?;
            out(&format!("Cluster \"{name}\" set.\n"));
        }
        EditCommand::SetCredentials {
            name,
            username,
            password,
            client_certificate,
            client_key,
        } => {
            let token = flags.token.clone();
            let (u, _) = entry(&mut doc, "users", "user", &name);
            for (k, v) in [
                ("token", token),
                ("username", username),
                ("password", password),
                ("client-certificate", client_certificate),
                ("client-key", client_key),
            ] {
                if let Some(v) = v {
                    u.insert(k.into(), json!(v));
                }
            }
            write(&path, &mut doc)?;
            out(&format!("User \"{name}\" set.\n"));
        }
        EditCommand::Unset { property } => {
            let parts: Vec<&str> = property.split('.').collect();
            let removed = match parts.as_slice() {
                [top] => doc.as_object_mut().and_then(|m| m.remove(*top)).is_some(),
                [list, name, rest @ ..] if matches!(*list, "clusters" | "contexts" | "users") => {
                    let items = doc[*list].as_array_mut();
                    match items {
                        Some(items) if rest.is_empty() => {
                            let before = items.len();
                            items.retain(|e| e["name"] != *name);
                            items.len() != before
                        }
                        Some(items) => {
                            let inner = &list[..list.len() - 1];
                            match items.iter_mut().find(|e| e["name"] == *name) {
                                Some(e) => e[inner].as_object_mut().and_then(|m| m.remove(rest[0])).is_some(),
                                None => false,
                            }
                        }
                        None => false,
                    }
                }
                _ => false,
            };
            if !removed {
                return Err(msg(format!("current map key `{property}` is invalid")));
            }
            write(&path, &mut doc)?;
            out(&format!("Property \"{property}\" unset.\n"));
        }
        EditCommand::DeleteContext { name } => delete(&path, &mut doc, "contexts", "context", &name)?,
        EditCommand::DeleteCluster { name } => delete(&path, &mut doc, "clusters", "cluster", &name)?,
        EditCommand::DeleteUser { name } => delete(&path, &mut doc, "users", "user", &name)?,
        EditCommand::RenameContext { old, new } => {
            let items = doc["contexts"].as_array_mut().ok_or_else(|| {
                msg(format!(
                    "cannot rename the context \"{old}\", it's not in {}",
                    path.display()
                ))
            })?;
            if items.iter().any(|e| e["name"] == new.as_str()) {
                return Err(msg(format!(
                    "cannot rename the context \"{old}\", the context \"{new}\" already exists in {}",
                    path.display()
                )));
            }
            let Some(e) = items.iter_mut().find(|e| e["name"] == old.as_str()) else {
                return Err(msg(format!(
                    "cannot rename the context \"{old}\", it's not in {}",
                    path.display()
                )));
            };
            e["name"] = json!(new);
            if doc["current-context"] == old.as_str() {
                doc["current-context"] = json!(new);
            }
            write(&path, &mut doc)?;
            out(&format!("Context \"{old}\" renamed to \"{new}\".\n"));
        }
        EditCommand::GetClusters | EditCommand::GetUsers => {
            let files = crate::config::files(flags)?;
            let merged = crate::config::load(&files)?;
            let (list, title) = if matches!(c, EditCommand::GetClusters) {
                ("clusters", "NAME")
            } else {
                ("users", "NAME")
            };
            out(&format!("{title}\n"));
            let mut names: Vec<&str> = merged[list]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| e["name"].as_str())
                .collect();
            names.sort();
            for n in names {
                out(&format!("{n}\n"));
            }
        }
    }
    Ok(0)
}

fn delete(path: &PathBuf, doc: &mut Value, list: &str, what: &str, name: &str) -> Result<()> {
    let found = doc[list].as_array_mut().map(|items| {
        let before = items.len();
        items.retain(|e| e["name"] != name);
        items.len() != before
    });
    if found != Some(true) {
        return Err(msg(format!(
            "cannot delete {what} {name}, not in {}",
            path.display()
        )));
    }
    if what == "context" && doc["current-context"] == name {
        eprintln!("warning: this removed your active context, use \"kubectl config use-context\" to select a different one");
    }
    write(path, doc)?;
    out(&format!("deleted {what} {name} from {}\n", path.display()));
    Ok(())
}
