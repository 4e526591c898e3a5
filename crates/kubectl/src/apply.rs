//! `kubectl apply -f`: client-side apply, keeping the applied configuration in the
//! `kubectl.kubernetes.io/last-applied-configuration` annotation and patching the live object
//! with the three-way difference (what the new configuration changes, and what the last one
//! set that the new one drops); `--server-side` sends the object as an apply patch.
//!
//! kubectl's client-side patch is a strategic merge patch that merges lists such as
//! `containers` by key; this one is a JSON merge patch, which replaces a changed list whole.
//! The result differs only where someone else added items to a list the configuration
//! also sets.

use http::Method;
use serde_json::{json, Map, Value};

use crate::create::{post, print_result, resource_of, target_namespace, write_query, Common, DryRun};
use crate::error::{msg, Error, Result};
use crate::printers;
use crate::rest::JSON;
use crate::{manifest, out, Output, Session};

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

#[derive(clap::Args)]
pub struct ApplyArgs {
    /// The files that contain the configurations to apply.
    #[arg(short = 'f', long = "filename", required = true)]
    filename: Vec<String>,
    /// Process the directory used in -f, --filename recursively.
    #[arg(short = 'R', long)]
    recursive: bool,
    /// If true, apply runs in the server instead of the client.
    #[arg(long)]
    server_side: bool,
    /// If true, server-side apply will force the changes against conflicts.
    #[arg(long)]
    force_conflicts: bool,
    /// Automatically delete resource objects that do not appear in the configs and are
    /// created by either apply or create --save-config. Should be used with either -l or --all.
    #[arg(long)]
    prune: bool,
    /// Overwrite the default allowlist with <group/version/kind> for --prune.
    #[arg(long = "prune-allowlist", alias = "prune-whitelist")]
    prune_allowlist: Vec<String>,
    /// Selector (label query) to filter on.
    #[arg(short = 'l', long)]
    selector: Option<String>,
    /// Select all resources in the namespace of the specified resource types.
    #[arg(long)]
    all: bool,
    #[command(flatten)]
    common: Common,
}

/// What `--prune` looks at when no allowlist is given (kubectl 1.33's default list): kind,
/// group, version, namespaced.
const PRUNE_DEFAULTS: &[(&str, &str, &str, bool)] = &[
    ("", "v1", "ConfigMap", true),
    ("", "v1", "Endpoints", true),
    ("", "v1", "Namespace", false),
    ("", "v1", "PersistentVolumeClaim", true),
    ("", "v1", "PersistentVolume", false),
    ("", "v1", "Pod", true),
    ("", "v1", "ReplicationController", true),
    ("", "v1", "Secret", true),
    ("", "v1", "Service", true),
    ("batch", "v1", "Job", true),
    ("batch", "v1", "CronJob", true),
    ("networking.k8s.io", "v1", "Ingress", true),
    ("apps", "v1", "DaemonSet", true),
    ("apps", "v1", "Deployment", true),
    ("apps", "v1", "ReplicaSet", true),
    ("apps", "v1", "StatefulSet", true),
];

pub async fn run(session: &Session, a: ApplyArgs) -> Result<i32> {
    let dry = a.common.dry_run()?;
    let output = Output::parse(a.common.output.as_deref())?;
    let selector = match &a.selector {
        Some(s) => Some(r8s_api::selector::parse_label_selector(s).map_err(msg)?),
        None => None,
    };
    if a.prune && a.selector.is_none() && !a.all {
        return Err(msg("all resources selected for prune without explicitly passing --all. To prune all resources, pass the --all flag. If you did not mean to prune all resources, specify a label selector"));
    }
    // An allowlist is checked before anything is applied.
    let mut allowlist = Vec::new();
    for gvk in &a.prune_allowlist {
        let parts: Vec<&str> = gvk.split('/').collect();
        let [group, version, kind] = parts[..] else {
            return Err(msg(format!(
                "invalid GroupVersionKind format: {gvk}, please follow <group/version/kind>"
            )));
        };
        let group = if group == "core" { "" } else { group };
        let api_version = if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        };
        let r = session
            .resource_for_kind(&api_version, kind)
            .await
            .map_err(|_| msg(format!("no matches for kind {kind:?} in version {api_version:?}")))?;
        allowlist.push(r);
    }
    let mut failed = false;
    let mut visited_uids = std::collections::HashSet::new();
    let mut visited_namespaces = std::collections::BTreeSet::new();
    for m in manifest::read(&a.filename, a.recursive)? {
        let source = m.source;
        if let Some(sel) = &selector {
            let labels: std::collections::BTreeMap<String, String> =
                serde_json::from_value(m.object["metadata"]["labels"].clone()).unwrap_or_default();
            if !sel.matches(&labels) {
                continue;
            }
        }
        let result = if a.server_side {
            server_side(session, m.object, &a, dry).await
        } else {
            client_side(session, m.object, &a, dry, &source).await
        };
        match result {
            Ok((r, obj, verb)) => {
                if let Some(uid) = obj["metadata"]["uid"].as_str() {
                    visited_uids.insert(uid.to_string());
                }
                if r.namespaced {
                    if let Some(ns) = obj["metadata"]["namespace"].as_str() {
                        visited_namespaces.insert(ns.to_string());
                    }
                }
                print_result(&r, &obj, &output, verb, dry)?
            }
            Err(Error::Api(e)) => {
                // A create says so already ("error when creating"); other writes are applies.
                let e = if e.message.starts_with("error when ") {
                    e
                } else {
                    e.when("applying", &source)
                };
                eprintln!("{}", e.display());
                failed = true;
            }
            Err(e) => return Err(e),
        }
    }
    if a.prune && !failed {
        if a.prune_allowlist.is_empty() {
            allowlist = default_prune_list(session).await?;
        }
        let pruner = Pruner {
            session,
            selector: a.selector.as_deref(),
            visited_uids: &visited_uids,
            dry,
            output: &output,
        };
        for ns in &visited_namespaces {
            for r in allowlist.iter().filter(|r| r.namespaced) {
                pruner.prune(r, Some(ns)).await?;
            }
        }
        for r in allowlist.iter().filter(|r| !r.namespaced) {
            pruner.prune(r, None).await?;
        }
    }
    Ok(i32::from(failed))
}

/// kubectl's default prune list, each kind mapped through discovery (upstream's
/// `GetRESTMappings`, with its warning that cluster-scoped kinds will one day need naming).
async fn default_prune_list(session: &Session) -> Result<Vec<crate::discovery::Resource>> {
    // klog's warning line, as kubectl prints it (the namespace is always known to it).
    let now = jiff::Zoned::now();
    eprintln!(
        "W{} {:>7} prune.go:71] Deprecated: kubectl apply will no longer prune non-namespaced resources by default when used with the --namespace flag in a future release. To preserve the current behaviour, list the resources you want to target explicitly in the --prune-allowlist flag.",
        now.strftime("%m%d %H:%M:%S%.6f"),
        std::process::id()
    );
    let mut list = Vec::new();
    for (group, version, kind, namespaced) in PRUNE_DEFAULTS {
        let api_version = if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        };
        let r = session.resource_for_kind(&api_version, kind).await.map_err(|_| {
            msg(format!(
                "error retrieving RESTMappings to prune: invalid resource {group}/{version}, Kind={kind}, Namespaced={namespaced}: no matches for kind {kind:?} in version {api_version:?}"
            ))
        })?;
        list.push(r);
    }
    Ok(list)
}

/// `--prune`: objects of a kind, matching the selector, made by apply (they carry its
/// annotation) and not among those just applied, are deleted (upstream's `pruner`).
struct Pruner<'a> {
    session: &'a Session,
    selector: Option<&'a str>,
    visited_uids: &'a std::collections::HashSet<String>,
    dry: DryRun,
    output: &'a Output,
}

impl Pruner<'_> {
    async fn prune(&self, r: &crate::discovery::Resource, ns: Option<&str>) -> Result<()> {
        let mut path = r.collection_path(ns);
        if let Some(sel) = self.selector {
            path = format!("{path}?labelSelector={}", crate::get::encode(sel));
        }
        let list = self.session.conn.rest.get(&path).await?;
        for obj in list["items"].as_array().into_iter().flatten() {
            if obj["metadata"]["annotations"][LAST_APPLIED].is_null() {
                continue;
            }
            if obj["metadata"]["uid"]
                .as_str()
                .is_some_and(|u| self.visited_uids.contains(u))
            {
                continue;
            }
            let name = obj["metadata"]["name"].as_str().unwrap_or_default();
            if self.dry != DryRun::Client {
                let mut uri = format!("{}/{name}", r.collection_path(ns));
                if self.dry == DryRun::Server {
                    uri.push_str("?dryRun=All");
                }
                let body =
                    json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"});
                self.session
                    .conn
                    .rest
                    .json(
                        http::Method::DELETE,
                        &uri,
                        crate::rest::JSON,
                        Some((crate::rest::JSON, serde_json::to_vec(&body).unwrap_or_default())),
                    )
                    .await?;
            }
            print_result(r, obj, self.output, "pruned", self.dry)?;
        }
        Ok(())
    }
}

type Applied = (crate::discovery::Resource, Value, &'static str);

async fn client_side(
    session: &Session,
    mut obj: Value,
    a: &ApplyArgs,
    dry: DryRun,
    source: &str,
) -> Result<Applied> {
    let r = resource_of(session, &obj).await?;
    let ns = target_namespace(session, &r, &mut obj)?;
    if let Some(ns) = &ns {
        obj["metadata"]["namespace"] = json!(ns);
    }
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_owned();
    if name.is_empty() {
        return Err(msg(
            "error when retrieving current configuration: resource name may not be empty",
        ));
    }
    let modified = with_annotation(&obj);
    let manager = a
        .common
        .field_manager
        .as_deref()
        .unwrap_or("kubectl-client-side-apply");
    let path = format!("{}/{name}", r.collection_path(ns.as_deref()));
    let current = match session.conn.rest.get(&path).await {
        Ok(c) => c,
        Err(Error::Api(e)) if e.is_not_found() => {
            let created = match post(session, &r, ns.as_deref(), modified, manager, dry).await {
                Ok(c) => c,
                Err(Error::Api(e)) => return Err(Error::Api(e.when("creating", source))),
                Err(e) => return Err(e),
            };
            return Ok((r, created, "created"));
        }
        Err(e) => return Err(e),
    };
    // A client-side dry run of an existing object neither warns nor compares: kubectl says
    // "configured" whatever would change.
    if dry == DryRun::Client {
        return Ok((r, current, "configured"));
    }
    if current["metadata"]["annotations"][LAST_APPLIED].is_null() {
        eprintln!(
            "Warning: resource {}/{name} is missing the {LAST_APPLIED} annotation which is required by kubectl apply. kubectl apply should only be used on resources created declaratively by either kubectl create --save-config or kubectl apply. The missing annotation will be patched automatically.",
            r.name
        );
    }
    let original: Value = current["metadata"]["annotations"][LAST_APPLIED]
        .as_str()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or(Value::Object(Map::new()));
    let patch = three_way(&original, &modified, &current);
    if patch.is_empty() {
        return Ok((r, current, "unchanged"));
    }
    let uri = format!("{path}?{}", write_query(manager, dry));
    let patched = session
        .conn
        .rest
        .patch(&uri, "application/merge-patch+json", &Value::Object(patch))
        .await?;
    Ok((r, patched, "configured"))
}

async fn server_side(session: &Session, mut obj: Value, a: &ApplyArgs, dry: DryRun) -> Result<Applied> {
    let r = resource_of(session, &obj).await?;
    let ns = target_namespace(session, &r, &mut obj)?;
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_owned();
    let manager = a.common.field_manager.as_deref().unwrap_or("kubectl");
    let mut uri = format!(
        "{}/{name}?{}",
        r.collection_path(ns.as_deref()),
        write_query(manager, dry)
    );
    if a.force_conflicts {
        uri.push_str("&force=true");
    }
    let applied = session
        .conn
        .rest
        .patch(&uri, "application/apply-patch+yaml", &obj)
        .await?;
    Ok((r, applied, "serverside-applied"))
}

/// The configuration with itself (minus any older copy) in the last-applied annotation, as
/// kubectl writes it: Go's compact JSON with a trailing newline.
fn with_annotation(obj: &Value) -> Value {
    let mut bare = obj.clone();
    if let Some(ann) = bare["metadata"]
        .get_mut("annotations")
        .and_then(Value::as_object_mut)
    {
        ann.remove(LAST_APPLIED);
    } else {
        bare["metadata"]["annotations"] = json!({});
    }
    let text = printers::json::compact(&bare) + "\n";
    let mut out = bare;
    out["metadata"]["annotations"][LAST_APPLIED] = json!(text);
    out
}

/// The merge patch that takes `current` to `modified`, deleting what `original` (the last
/// applied configuration) set and `modified` no longer does.
fn three_way(original: &Value, modified: &Value, current: &Value) -> Map<String, Value> {
    let mut patch = Map::new();
    let empty = Map::new();
    let m = modified.as_object().unwrap_or(&empty);
    let o = original.as_object().unwrap_or(&empty);
    let c = current.as_object().unwrap_or(&empty);
    for (k, mv) in m {
        match (mv, c.get(k)) {
            (Value::Object(_), Some(cv @ Value::Object(_))) => {
                let sub = three_way(o.get(k).unwrap_or(&Value::Null), mv, cv);
                if !sub.is_empty() {
                    patch.insert(k.clone(), Value::Object(sub));
                }
            }
            // A list the configuration left as it was, and the live object still holds
            // (with what the server defaulted in its items), is no change.
            (Value::Array(_), Some(cv)) if subset(mv, cv) && o.get(k).is_none_or(|ov| ov == mv) => {}
            (mv, cv) if cv != Some(mv) => {
                patch.insert(k.clone(), mv.clone());
            }
            _ => {}
        }
    }
    for k in o.keys() {
        if !m.contains_key(k) && c.contains_key(k) {
            patch.insert(k.clone(), Value::Null);
        }
    }
    patch
}

/// Whether everything `m` sets is in `c` (which may hold more: defaults, others' fields).
fn subset(m: &Value, c: &Value) -> bool {
    match (m, c) {
        (Value::Object(m), Value::Object(c)) => {
            m.iter().all(|(k, v)| c.get(k).is_some_and(|cv| subset(v, cv)))
        }
        (Value::Array(m), Value::Array(c)) => {
            m.len() == c.len() && m.iter().zip(c).all(|(a, b)| subset(a, b))
        }
        (m, c) => m == c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_way_changes_and_deletes_only_what_the_configuration_owns() {
        let original = json!({"data": {"a": "1", "b": "2"}, "metadata": {"labels": {"x": "1"}}});
        let modified = json!({"data": {"a": "1", "c": "3"}, "metadata": {"labels": {"x": "1"}}});
        let current = json!({"data": {"a": "1", "b": "2", "other": "kept"},
            "metadata": {"labels": {"x": "1", "added-by-someone": "y"}, "uid": "u"}});
        assert_eq!(
            Value::Object(three_way(&original, &modified, &current)),
            json!({"data": {"b": null, "c": "3"}})
        );
        assert!(three_way(&modified, &modified, &current_with(&modified)).is_empty());
        // Lists: defaults in the live items are no change; a changed list goes whole.
        let config = json!({"spec": {"containers": [{"name": "c", "image": "nginx"}]}});
        let live =
            json!({"spec": {"containers": [{"name": "c", "image": "nginx", "imagePullPolicy": "Always"}]}});
        assert!(three_way(&config, &config, &live).is_empty());
        let newer = json!({"spec": {"containers": [{"name": "c", "image": "nginx:2"}]}});
        assert_eq!(Value::Object(three_way(&config, &newer, &live)), newer);
    }

    #[test]
    fn edits_become_merge_patches() {
        let a = json!({"data": {"k": "v", "gone": "x"}, "metadata": {"name": "n", "labels": {"a": "1"}}});
        let b = json!({"data": {"k": "w"}, "metadata": {"name": "n", "labels": {"a": "1"}}});
        assert_eq!(two_way(&a, &b), json!({"data": {"k": "w", "gone": null}}));
    }

    fn current_with(v: &Value) -> Value {
        let mut c = v.clone();
        c["status"] = json!({"phase": "Running"});
        c
    }

    #[test]
    fn the_annotation_holds_the_configuration_as_go_marshals_it() {
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "default"}, "data": {"k": "v"}});
        let out = with_annotation(&obj);
        assert_eq!(
            out["metadata"]["annotations"][LAST_APPLIED],
            "{\"apiVersion\":\"v1\",\"data\":{\"k\":\"v\"},\"kind\":\"ConfigMap\",\"metadata\":{\"annotations\":{},\"name\":\"x\",\"namespace\":\"default\"}}\n"
        );
    }
}

#[derive(clap::Args)]
pub struct ReplaceArgs {
    /// The files that contain the configurations to replace.
    #[arg(short = 'f', long = "filename", required = true)]
    filename: Vec<String>,
    /// Process the directory used in -f, --filename recursively.
    #[arg(short = 'R', long)]
    recursive: bool,
    #[command(flatten)]
    common: Common,
}

/// `kubectl replace -f`: each object PUT as it is in the file.
pub async fn replace(session: &Session, a: ReplaceArgs) -> Result<i32> {
    let dry = a.common.dry_run()?;
    let output = Output::parse(a.common.output.as_deref())?;
    let manager = a.common.field_manager.as_deref().unwrap_or("kubectl-replace");
    let mut failed = false;
    for m in manifest::read(&a.filename, a.recursive)? {
        let mut obj = m.object;
        let r = resource_of(session, &obj).await?;
        let ns = target_namespace(session, &r, &mut obj)?;
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_owned();
        if dry == DryRun::Client {
            print_result(&r, &obj, &output, "replaced", dry)?;
            continue;
        }
        let uri = format!(
            "{}/{name}?{}",
            r.collection_path(ns.as_deref()),
            write_query(manager, dry)
        );
        let body = serde_json::to_vec(&obj).map_err(|e| msg(e.to_string()))?;
        match session
            .conn
            .rest
            .json(Method::PUT, &uri, JSON, Some((JSON, body)))
            .await
        {
            Ok(v) => print_result(&r, &v, &output, "replaced", dry)?,
            Err(Error::Api(e)) => {
                eprintln!("{}", e.when("replacing", &m.source).display());
                failed = true;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(i32::from(failed))
}

#[derive(clap::Args)]
pub struct EditArgs {
    /// TYPE NAME or TYPE/NAME.
    args: Vec<String>,
    /// Output format: yaml (default) or json, for the file edited.
    #[arg(short = 'o', long)]
    output: Option<String>,
}

const EDIT_HEADER: &str = "# Please edit the object below. Lines beginning with a '#' will be ignored,\n# and an empty file will abort the edit. If an error occurs while saving this file will be\n# reopened with the relevant failures.\n#\n";

/// `kubectl edit`: the object in `$KUBE_EDITOR`, `$EDITOR` or vi; what changed goes back as a
/// merge patch.
pub async fn edit(session: &Session, a: EditArgs) -> Result<i32> {
    let reqs = crate::get::requests(session, &a.args).await?;
    let editor = std::env::var("KUBE_EDITOR")
        .or_else(|_| std::env::var("EDITOR"))
        .unwrap_or_else(|_| "vi".into());
    let json_out = a.output.as_deref() == Some("json");
    for req in reqs {
        let r = req.resource;
        let ns = r.namespaced.then(|| session.conn.namespace.clone());
        for name in &req.names {
            let path = format!("{}/{name}", r.collection_path(ns.as_deref()));
            let mut original = session.conn.rest.get(&path).await?;
            crate::get::strip_managed_fields(&mut original);
            let text = if json_out {
                printers::json::to_string(&original)
            } else {
                printers::yaml::to_string(&original)
            };
            let file = std::env::temp_dir().join(format!(
                "kubectl-edit-{}-{name}.{}",
                std::process::id(),
                if json_out { "json" } else { "yaml" }
            ));
            std::fs::write(&file, format!("{EDIT_HEADER}{text}")).map_err(|e| msg(e.to_string()))?;
            // As kubectl: the editor string through a shell, with the file appended.
            let status = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("{editor} \"{}\"", file.display()))
                .status();
            let edited = std::fs::read_to_string(&file).unwrap_or_default();
            let _ = std::fs::remove_file(&file);
            match status {
                Ok(s) if s.success() => {}
                _ => return Err(msg(format!("there was a problem with the editor \"{editor}\""))),
            }
            let body: String = edited
                .lines()
                .filter(|l| !l.trim_start().starts_with('#'))
                .collect::<Vec<_>>()
                .join("\n");
            if body.trim().is_empty() {
                eprintln!("Edit cancelled, saved file was empty.");
                continue;
            }
            let changed: Value = serde_json::from_str(&body)
                .or_else(|_| serde_saphyr::from_str(&body))
                .map_err(|e| msg(format!("error parsing edited object: {e}")))?;
            if changed == original {
                eprintln!("Edit cancelled, no changes made.");
                continue;
            }
            let patch = two_way(&original, &changed);
            let uri = format!(
                "{path}?{}",
                crate::create::write_query("kubectl-edit", DryRun::None)
            );
            session
                .conn
                .rest
                .patch(&uri, "application/merge-patch+json", &patch)
                .await?;
            out(&format!("{}/{name} edited\n", r.kind_prefix()));
        }
    }
    Ok(0)
}

/// The merge patch from `a` to `b`.
fn two_way(a: &Value, b: &Value) -> Value {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut patch = Map::new();
            for (k, v) in y {
                match x.get(k) {
                    Some(old) if old == v => {}
                    Some(old @ Value::Object(_)) if v.is_object() => {
                        patch.insert(k.clone(), two_way(old, v));
                    }
                    _ => {
                        patch.insert(k.clone(), v.clone());
                    }
                }
            }
            for k in x.keys() {
                if !y.contains_key(k) {
                    patch.insert(k.clone(), Value::Null);
                }
            }
            Value::Object(patch)
        }
        (_, b) => b.clone(),
    }
}

#[derive(clap::Args)]
pub struct DiffArgs {
    /// Filename, directory, or URL to files contains the configuration to diff.
    #[arg(short = 'f', long = "filename", required = true)]
    filename: Vec<String>,
    /// Process the directory used in -f, --filename recursively.
    #[arg(short = 'R', long)]
    recursive: bool,
    /// If true, apply runs in the server instead of the client.
    #[arg(long)]
    server_side: bool,
    /// If true, server-side apply will force the changes against conflicts.
    #[arg(long)]
    force_conflicts: bool,
    /// Name of the manager used to track field ownership.
    #[arg(long)]
    field_manager: Option<String>,
}

/// `kubectl diff -f`: each object as it is live and as applying it would leave it (a server
/// dry run of the same apply), written to two directories kubectl names and compared by
/// `$KUBECTL_EXTERNAL_DIFF` or `diff -u -N`; its exit code is ours (1: differences).
pub async fn diff(session: &Session, a: DiffArgs) -> Result<i32> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let live_dir = std::env::temp_dir().join(format!("LIVE-{}{stamp}", std::process::id()));
    let merged_dir = std::env::temp_dir().join(format!("MERGED-{}{stamp}", std::process::id()));
    let result = diff_into(session, &a, &live_dir, &merged_dir).await;
    let code = match result {
        Ok(()) => {
            let program = std::env::var("KUBECTL_EXTERNAL_DIFF").unwrap_or_else(|_| "diff -u -N".into());
            let mut words = program.split_whitespace();
            let status = std::process::Command::new(words.next().unwrap_or("diff"))
                .args(words)
                .arg(&live_dir)
                .arg(&merged_dir)
                .status();
            match status.map(|s| s.code()) {
                Ok(Some(c)) if c <= 1 => Ok(c),
                Ok(Some(c)) => Err(msg(format!("exit status {c}"))),
                Ok(None) => Err(msg("diff was killed")),
                Err(e) => Err(msg(format!("failed to run \"{program}\": {e}"))),
            }
        }
        Err(e) => Err(e),
    };
    let _ = std::fs::remove_dir_all(&live_dir);
    let _ = std::fs::remove_dir_all(&merged_dir);
    code
}

async fn diff_into(
    session: &Session,
    a: &DiffArgs,
    live_dir: &std::path::Path,
    merged_dir: &std::path::Path,
) -> Result<()> {
    std::fs::create_dir_all(live_dir).map_err(|e| msg(e.to_string()))?;
    std::fs::create_dir_all(merged_dir).map_err(|e| msg(e.to_string()))?;
    let dry = DryRun::Server;
    for m in manifest::read(&a.filename, a.recursive)? {
        let mut obj = m.object;
        let r = resource_of(session, &obj).await?;
        let ns = target_namespace(session, &r, &mut obj)?;
        if let Some(ns) = &ns {
            obj["metadata"]["namespace"] = json!(ns);
        }
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_owned();
        let path = format!("{}/{name}", r.collection_path(ns.as_deref()));
        let live = match session.conn.rest.get(&path).await {
            Ok(v) => Some(v),
            Err(Error::Api(e)) if e.is_not_found() => None,
            Err(e) => return Err(e),
        };
        let merged = if a.server_side {
            let manager = a.field_manager.as_deref().unwrap_or("kubectl");
            let mut uri = format!("{path}?{}", write_query(manager, dry));
            if a.force_conflicts {
                uri.push_str("&force=true");
            }
            session
                .conn
                .rest
                .patch(&uri, "application/apply-patch+yaml", &obj)
                .await?
        } else {
            let manager = a.field_manager.as_deref().unwrap_or("kubectl-client-side-apply");
            // As kubectl's diff: the configuration without the last-applied annotation (kept
            // as an empty map for the patch, absent for a create).
            let mut modified = with_annotation(&obj);
            if let Some(ann) = modified["metadata"]["annotations"].as_object_mut() {
                ann.remove(LAST_APPLIED);
            }
            match &live {
                None => post(session, &r, ns.as_deref(), obj.clone(), manager, dry).await?,
                Some(current) => {
                    let original: Value = current["metadata"]["annotations"][LAST_APPLIED]
                        .as_str()
                        .and_then(|s| serde_json::from_str(s).ok())
                        .unwrap_or(Value::Object(Map::new()));
                    let patch = three_way(&original, &modified, current);
                    if patch.is_empty() {
                        current.clone()
                    } else {
                        let uri = format!("{path}?{}", write_query(manager, dry));
                        let body = Value::Object(patch);
                        session
                            .conn
                            .rest
                            .patch(&uri, "application/merge-patch+json", &body)
                            .await?
                    }
                }
            }
        };
        // kubectl's file name: group.version.Kind.namespace.name.
        let file = format!(
            "{}.{}.{}.{name}",
            r.api_version().replace('/', "."),
            r.kind,
            ns.as_deref().unwrap_or("")
        );
        let write = |dir: &std::path::Path, v: &Value| -> Result<()> {
            let mut v = v.clone();
            crate::get::strip_managed_fields(&mut v);
            std::fs::write(dir.join(&file), printers::yaml::to_string(&v)).map_err(|e| msg(e.to_string()))
        };
        if let Some(live) = &live {
            write(live_dir, live)?;
        }
        write(merged_dir, &merged)?;
    }
    Ok(())
}
