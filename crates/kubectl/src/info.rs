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
        // `version.Info`'s fields are all printed (none is omitempty); as the server's.
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
        "goVersion": "rustc",
        "compiler": "rustc",
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
            // kubectl's `Version` struct: each `version.Info` in its field order.
            let info = |v: &Value| printers::go_order::arrange_type(v, "version.Info");
            let mut doc = json!({"clientVersion": info(&client)});
            if let Some(s) = server {
                doc["serverVersion"] = info(&s);
            }
            // kubectl marshals this one itself, indented by two spaces.
            out(&if o == "json" {
                printers::json::to_string_typed_indent(&doc, "  ")
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
    #[command(flatten)]
    Edit(crate::kubeconfig_edit::EditCommand),
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
    if let ConfigCommand::Edit(e) = c {
        return crate::kubeconfig_edit::edit(flags, e);
    }
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
        ConfigCommand::Edit(_) => unreachable!("handled above"),
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
            config::typed_form(&mut doc);
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
                Some("json") => out(&printers::json::to_string_typed(&printers::go_order::arrange(
                    &doc,
                ))),
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

/// `cluster-info`: the control plane's address and the cluster services'
/// (`kubernetes.io/cluster-service=true` in kube-system) through the API server's proxy.
pub async fn cluster_info(session: &Session) -> Result<i32> {
    let server = session.conn.server.trim_end_matches('/');
    out(&format!("Kubernetes control plane is running at {server}\n"));
    let list = session
        .conn
        .rest
        .get("/api/v1/namespaces/kube-system/services?labelSelector=kubernetes.io%2Fcluster-service%3Dtrue")
        .await?;
    for svc in list["items"].as_array().into_iter().flatten() {
        let name = svc["metadata"]["name"].as_str().unwrap_or("");
        let shown = svc["metadata"]["labels"]["kubernetes.io/name"]
            .as_str()
            .unwrap_or(name);
        for ingress in svc["status"]["loadBalancer"]["ingress"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if let Some(ip) = ingress["ip"].as_str().or(ingress["hostname"].as_str()) {
                out(&format!("{shown} is running at http://{ip}\n"));
            }
        }
        for port in svc["spec"]["ports"].as_array().into_iter().flatten() {
            let p = port["name"]
                .as_str()
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
                .unwrap_or_else(|| port["port"].to_string());
            let scheme = if p == "https" { "https:" } else { "" };
            out(&format!(
                "{shown} is running at {server}/api/v1/namespaces/kube-system/services/{scheme}{name}:{p}/proxy\n"
            ));
        }
    }
    out("\nTo further debug and diagnose cluster problems, use 'kubectl cluster-info dump'.\n");
    Ok(0)
}

#[derive(clap::Subcommand)]
pub enum AuthCommand {
    /// Check whether an action is allowed.
    CanI {
        /// VERB [TYPE | TYPE/NAME | NONRESOURCEURL]
        args: Vec<String>,
        /// If true, check the specified action in all namespaces.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
        /// SubResource such as pod/log or deployment/scale.
        #[arg(long)]
        subresource: Option<String>,
        /// If true, suppress output and just return the exit code.
        #[arg(short = 'q', long)]
        quiet: bool,
        /// If true, prints all allowed actions.
        #[arg(long)]
        list: bool,
        /// If true, prints allowed actions without headers.
        #[arg(long)]
        no_headers: bool,
    },
    /// Experimental: Check self subject attributes.
    Whoami {
        #[arg(short = 'o', long)]
        output: Option<String>,
    },
}

pub async fn auth(session: &Session, c: AuthCommand) -> Result<i32> {
    match c {
        AuthCommand::Whoami { output } => {
            let review = session
                .conn
                .rest
                .json(
                    http::Method::POST,
                    "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                    crate::rest::JSON,
                    Some((
                        crate::rest::JSON,
                        br#"{"kind":"SelfSubjectReview","apiVersion":"authentication.k8s.io/v1","metadata":{"creationTimestamp":null},"status":{"userInfo":{}}}"#.to_vec(),
                    )),
                )
                .await?;
            match output.as_deref() {
                Some("json") => out(&printers::json::to_string_typed(&printers::go_order::arrange(
                    &review,
                ))),
                Some("yaml") => out(&printers::yaml::to_string(&review)),
                _ => {
                    let u = &review["status"]["userInfo"];
                    let mut lines = vec![vec!["ATTRIBUTE".to_owned(), "VALUE".to_owned()]];
                    if let Some(name) = u["username"].as_str() {
                        lines.push(vec!["Username".into(), name.into()]);
                    }
                    if let Some(uid) = u["uid"].as_str().filter(|s| !s.is_empty()) {
                        lines.push(vec!["UID".into(), uid.into()]);
                    }
                    if let Some(groups) = u["groups"].as_array() {
                        let g: Vec<&str> = groups.iter().filter_map(Value::as_str).collect();
                        lines.push(vec!["Groups".into(), format!("[{}]", g.join(" "))]);
                    }
                    if let Some(extra) = u["extra"].as_object() {
                        let mut keys: Vec<&String> = extra.keys().collect();
                        keys.sort();
                        for k in keys {
                            let v: Vec<&str> = extra[k.as_str()]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .filter_map(Value::as_str)
                                .collect();
                            lines.push(vec![format!("Extra: {k}"), format!("[{}]", v.join(" "))]);
                        }
                    }
                    out(&table::tabwrite(&lines));
                }
            }
            Ok(0)
        }
        AuthCommand::CanI {
            args,
            all_namespaces,
            subresource,
            quiet,
            list,
            no_headers,
        } => {
            if list {
                return access_list(session, no_headers).await;
            }
            let (Some(verb), Some(target)) = (args.first(), args.get(1)) else {
                return Err(msg("you must specify two arguments: verb resource or verb resource/resourceName.\nSee 'kubectl auth can-i -h' for help and examples"));
            };
            let spec = if target.starts_with('/') {
                json!({"nonResourceAttributes": {"path": target, "verb": verb}})
            } else {
                let (kind, name) = match target.split_once('/') {
                    Some((k, n)) => (k, n),
                    None => (target.as_str(), ""),
                };
                let (group, resource) = match session.resource(kind).await {
                    Ok(r) => (r.group, r.name),
                    Err(_) => {
                        if !quiet {
                            eprintln!("Warning: the server doesn't have a resource type '{kind}'\n");
                        }
                        match kind.split_once('.') {
                            Some((r, g)) => (g.to_owned(), r.to_owned()),
                            None => (String::new(), kind.to_owned()),
                        }
                    }
                };
                let mut attrs = json!({"verb": verb, "group": group, "resource": resource});
                if !all_namespaces {
                    attrs["namespace"] = json!(session.conn.namespace);
                }
                if !name.is_empty() {
                    attrs["name"] = json!(name);
                }
                if let Some(s) = &subresource {
                    attrs["subresource"] = json!(s);
                }
                json!({"resourceAttributes": attrs})
            };
            let body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": spec});
            let review = post_review(
                session,
                "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                &body,
            )
            .await?;
            let allowed = review["status"]["allowed"].as_bool().unwrap_or(false);
            if !quiet {
                let reason = review["status"]["reason"].as_str().filter(|r| !r.is_empty());
                match (allowed, reason) {
                    (true, _) => out("yes\n"),
                    (false, Some(r)) if review["status"]["denied"] == true => out(&format!("no - {r}\n")),
                    (false, _) => out("no\n"),
                }
            }
            Ok(if allowed { 0 } else { 1 })
        }
    }
}

/// A review created (asked) and its answer.
async fn post_review(session: &Session, path: &str, body: &Value) -> Result<Value> {
    session
        .conn
        .rest
        .json(
            http::Method::POST,
            path,
            crate::rest::JSON,
            Some((crate::rest::JSON, serde_json::to_vec(body).unwrap_or_default())),
        )
        .await
}

/// One broken-down rule of `auth can-i --list` (kubectl's `rbacv1.PolicyRule` after
/// `BreakdownRule`: one group, resource and name, or one non-resource URL).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rule {
    verbs: Vec<String>,
    groups: Vec<String>,
    resources: Vec<String>,
    names: Vec<String>,
    urls: Vec<String>,
}

impl Rule {
    /// The rule as `can-i --list` and `describe role` print it: kubectl's
    /// CombineResourceGroup (`resource.group/subresource`), then Go's `%v` of the lists.
    pub(crate) fn row(&self) -> Vec<String> {
        let list = |v: &[String]| format!("[{}]", v.join(" "));
        let resource = match self.resources.first() {
            None => String::new(),
            Some(res) => {
                let (base, sub) = match res.split_once('/') {
                    Some((b, s)) => (b, Some(s)),
                    None => (res.as_str(), None),
                };
                let mut s = base.to_string();
                if let Some(g) = self.groups.first().filter(|g| !g.is_empty()) {
                    s = format!("{s}.{g}");
                }
                if let Some(sub) = sub {
                    s = format!("{s}/{sub}");
                }
                s
            }
        };
        vec![resource, list(&self.urls), list(&self.names), list(&self.verbs)]
    }

    /// Go's generated `PolicyRule.String()`, which kubectl sorts the list by.
    fn go_string(&self) -> String {
        let l = |v: &[String]| format!("[{}]", v.join(" "));
        format!(
            "&PolicyRule{{Verbs:{},APIGroups:{},Resources:{},ResourceNames:{},NonResourceURLs:{},}}",
            l(&self.verbs),
            l(&self.groups),
            l(&self.resources),
            l(&self.names),
            l(&self.urls)
        )
    }
}

/// kubectl's rule list from a SelfSubjectRulesReview status: each rule broken down to one
/// verb, group, resource and name (`BreakdownRule`), those naming the same resource merged
/// with their verbs in order (`CompactRules`), sorted by their Go string.
pub(crate) fn compact_rules(status: &Value) -> Vec<Rule> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()
    };
    let mut compacted: Vec<Rule> = Vec::new();
    let mut simple: Vec<Rule> = Vec::new();
    for r in status["resourceRules"].as_array().into_iter().flatten() {
        let names = strings(&r["resourceNames"]);
        let names: Vec<Option<String>> = if names.is_empty() {
            vec![None]
        } else {
            names.into_iter().map(Some).collect()
        };
        for g in strings(&r["apiGroups"]) {
            for res in strings(&r["resources"]) {
                for verb in strings(&r["verbs"]) {
                    for name in &names {
                        let key = |x: &Rule| {
                            x.groups[0] == g && x.resources[0] == res && x.names.first() == name.as_ref()
                        };
                        match simple.iter_mut().find(|x| key(x)) {
                            Some(existing) => {
                                if !existing.verbs.contains(&verb) {
                                    existing.verbs.push(verb.clone());
                                }
                            }
                            None => simple.push(Rule {
                                verbs: vec![verb.clone()],
                                groups: vec![g.clone()],
                                resources: vec![res.clone()],
                                names: name.iter().cloned().collect(),
                                urls: vec![],
                            }),
                        }
                    }
                }
            }
        }
    }
    for r in status["nonResourceRules"].as_array().into_iter().flatten() {
        for url in strings(&r["nonResourceURLs"]) {
            for verb in strings(&r["verbs"]) {
                compacted.push(Rule {
                    verbs: vec![verb],
                    groups: vec![],
                    resources: vec![],
                    names: vec![],
                    urls: vec![url.clone()],
                });
            }
        }
    }
    compacted.extend(simple);
    compacted.sort_by_cached_key(Rule::go_string);
    compacted
}

/// `auth can-i --list`: a SelfSubjectRulesReview of the namespace, as kubectl prints it.
async fn access_list(session: &Session, no_headers: bool) -> Result<i32> {
    let body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
                      "spec": {"namespace": session.conn.namespace}});
    let review = post_review(
        session,
        "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
        &body,
    )
    .await?;
    let status = &review["status"];
    if status["incomplete"] == true {
        eprintln!(
            "Warning: the list may be incomplete: {}",
            status["evaluationError"].as_str().unwrap_or_default()
        );
    }
    let mut lines = Vec::new();
    if !no_headers {
        lines.push(
            ["Resources", "Non-Resource URLs", "Resource Names", "Verbs"]
                .map(str::to_owned)
                .to_vec(),
        );
    }
    for r in compact_rules(status) {
        lines.push(r.row());
    }
    out(&table::tabwrite(&lines));
    Ok(0)
}

#[cfg(test)]
mod can_i_tests {
    use super::*;

    #[test]
    fn rules_break_down_compact_and_sort_as_kubectl() {
        let status = json!({
            "resourceRules": [
                {"verbs": ["get", "list"], "apiGroups": ["", "apps"], "resources": ["pods"]},
                {"verbs": ["watch", "get"], "apiGroups": [""], "resources": ["pods"]},
                {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]},
                {"verbs": ["update"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a", "b"]},
            ],
            "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/api", "/api/*"]}],
        });
        let rules: Vec<String> = compact_rules(&status).iter().map(Rule::go_string).collect();
        assert_eq!(
            rules,
            [
                "&PolicyRule{Verbs:[*],APIGroups:[*],Resources:[*],ResourceNames:[],NonResourceURLs:[],}",
                "&PolicyRule{Verbs:[get list watch],APIGroups:[],Resources:[pods],ResourceNames:[],NonResourceURLs:[],}",
                "&PolicyRule{Verbs:[get list],APIGroups:[apps],Resources:[pods],ResourceNames:[],NonResourceURLs:[],}",
                "&PolicyRule{Verbs:[get],APIGroups:[],Resources:[],ResourceNames:[],NonResourceURLs:[/api/*],}",
                "&PolicyRule{Verbs:[get],APIGroups:[],Resources:[],ResourceNames:[],NonResourceURLs:[/api],}",
                "&PolicyRule{Verbs:[update],APIGroups:[],Resources:[configmaps],ResourceNames:[a],NonResourceURLs:[],}",
                "&PolicyRule{Verbs:[update],APIGroups:[],Resources:[configmaps],ResourceNames:[b],NonResourceURLs:[],}",
            ]
        );
    }
}
