//! The commands that change one field of live objects: `label`, `annotate`, `patch`,
//! `scale`, `cordon`/`uncordon`, and `rollout restart|pause|resume|status`. Each sends a patch
//! with kubectl's field manager and reports as kubectl does (`pod/x labeled`, `… patched (no
//! change)`, `… already paused`).

use std::time::{Duration, Instant};

use http::Method;
use serde_json::{json, Map, Value};

use crate::discovery::Resource;
use crate::error::{msg, Error, Result};
use crate::get::{encode, requests};
use crate::rest::JSON;
use crate::{out, Session};

const MERGE: &str = "application/merge-patch+json";
const STRATEGIC: &str = "application/strategic-merge-patch+json";

/// The objects `args` name (`TYPE NAME…` or `TYPE/NAME…`), with their paths.
async fn targets(
    session: &Session,
    args: &[String],
    all: bool,
    selector: Option<&str>,
) -> Result<Vec<(Resource, String, String)>> {
    let mut out = Vec::new();
    for req in requests(session, args).await? {
        let r = req.resource;
        let ns = r.namespaced.then(|| session.conn.namespace.clone());
        let base = r.collection_path(ns.as_deref());
        if req.names.is_empty() {
            if !all && selector.is_none() {
                return Err(msg("resource(s) were provided, but no name was specified"));
            }
            let mut uri = format!("{base}?limit=500");
            if let Some(l) = selector {
                uri.push_str(&format!("&labelSelector={}", encode(l)));
            }
            let list = session.conn.rest.get(&uri).await?;
            for item in list["items"].as_array().into_iter().flatten() {
                let name = item["metadata"]["name"].as_str().unwrap_or("").to_owned();
                out.push((r.clone(), format!("{base}/{name}"), name));
            }
        } else {
            for n in req.names {
                out.push((r.clone(), format!("{base}/{n}"), n));
            }
        }
    }
    Ok(out)
}

async fn patch(
    session: &Session,
    path: &str,
    content_type: &str,
    body: &Value,
    manager: &str,
) -> Result<Value> {
    let uri = format!("{path}?fieldManager={manager}");
    session.conn.rest.patch(&uri, content_type, body).await
}

#[derive(clap::Args)]
pub struct MetaArgs {
    /// TYPE NAME KEY_1=VAL_1 … KEY_N- …
    args: Vec<String>,
    /// If true, allow labels/annotations to be overwritten.
    #[arg(long)]
    overwrite: bool,
    /// Select all resources, in the namespace of the specified resource types.
    #[arg(long)]
    all: bool,
    /// Selector (label query) to filter on.
    #[arg(short = 'l', long)]
    selector: Option<String>,
    /// Output format: name.
    #[arg(short = 'o', long)]
    output: Option<String>,
}

/// `label` (is_label) or `annotate`.
pub async fn metadata(session: &Session, a: MetaArgs, is_label: bool) -> Result<i32> {
    let field = if is_label { "labels" } else { "annotations" };
    let what = if is_label { "label" } else { "annotation" };
    let (changes, resources): (Vec<&String>, Vec<&String>) = a
        .args
        .iter()
        .partition(|x| x.contains('=') || (x.ends_with('-') && !x.contains('/')));
    // A bare `TYPE` ending in '-' is rare; kubectl reads trailing-dash words as removals too.
    let resources: Vec<String> = resources.into_iter().cloned().collect();
    if changes.is_empty() {
        return Err(msg(format!("at least one {what} update is required")));
    }
    let mut set: Vec<(String, String)> = Vec::new();
    let mut remove: Vec<String> = Vec::new();
    for c in &changes {
        if let Some((k, v)) = c.split_once('=') {
            set.push((k.to_owned(), v.to_owned()));
        } else {
            remove.push(c.trim_end_matches('-').to_owned());
        }
    }
    let manager = if is_label {
        "kubectl-label"
    } else {
        "kubectl-annotate"
    };
    let mut failed = false;
    for (r, path, name) in targets(session, &resources, a.all, a.selector.as_deref()).await? {
        let current = match session.conn.rest.get(&path).await {
            Ok(c) => c,
            Err(e @ Error::Api(_)) => {
                eprintln!("{e}");
                failed = true;
                continue;
            }
            Err(e) => return Err(e),
        };
        let before = current["metadata"].get(field).cloned();
        let mut after: Map<String, Value> = before
            .as_ref()
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        for (k, v) in &set {
            if let Some(old) = after.get(k).and_then(Value::as_str) {
                if old != v && !a.overwrite {
                    return Err(msg(format!(
                        "'{k}' already has a value ({old}), and --overwrite is false"
                    )));
                }
            }
            after.insert(k.clone(), json!(v));
        }
        let mut removed = false;
        for k in &remove {
            if after.remove(k).is_none() {
                if is_label {
                    out(&format!("label \"{k}\" not found.\n"));
                }
            } else {
                removed = true;
            }
        }
        let changed = before.as_ref() != Some(&Value::Object(after.clone()));
        if changed {
            let mut patch_body = json!({"metadata": {field: {}}});
            let before_map = before
                .as_ref()
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            for (k, v) in &after {
                if before_map.get(k) != Some(v) {
                    patch_body["metadata"][field][k] = v.clone();
                }
            }
            for k in before_map.keys() {
                if !after.contains_key(k) {
                    patch_body["metadata"][field][k] = Value::Null;
                }
            }
            patch(session, &path, MERGE, &patch_body, manager).await?;
        }
        let verb = match (changed, is_label) {
            (false, true) => "not labeled",
            (false, false) => "not annotated",
            (true, true) if removed && set.is_empty() => "unlabeled",
            (true, true) => "labeled",
            (true, false) => "annotated",
        };
        if a.output.as_deref() == Some("name") {
            out(&format!("{}/{name}\n", r.kind_prefix()));
        } else {
            out(&format!("{}/{name} {verb}\n", r.kind_prefix()));
        }
    }
    Ok(i32::from(failed))
}

#[derive(clap::Args)]
pub struct PatchArgs {
    args: Vec<String>,
    /// The patch to be applied to the resource JSON file.
    #[arg(short = 'p', long)]
    patch: Option<String>,
    /// A file containing a patch to be applied to the resource.
    #[arg(long)]
    patch_file: Option<String>,
    /// The type of patch being provided; one of [json merge strategic].
    #[arg(long = "type", default_value = "strategic")]
    patch_type: String,
    /// If specified, patch will operate on the subresource of the requested object.
    #[arg(long)]
    subresource: Option<String>,
    /// Output format: yaml, json, name.
    #[arg(short = 'o', long)]
    output: Option<String>,
}

pub async fn patch_cmd(session: &Session, a: PatchArgs) -> Result<i32> {
    let body = match (&a.patch, &a.patch_file) {
        (Some(p), _) => p.clone(),
        (None, Some(f)) => std::fs::read_to_string(f).map_err(|e| msg(e.to_string()))?,
        (None, None) => {
            return Err(msg(
                "must specify --patch or --patch-file containing the contents of the patch",
            ))
        }
    };
    let content_type = match a.patch_type.as_str() {
        "json" => "application/json-patch+json",
        "merge" => MERGE,
        "strategic" => STRATEGIC,
        other => {
            return Err(msg(format!(
                "--type must be one of [json merge strategic], not \"{other}\""
            )))
        }
    };
    // kubectl reads YAML or JSON patches alike.
    let value: Value = serde_json::from_str(&body)
        .or_else(|_| serde_saphyr::from_str(&body))
        .map_err(|e| msg(format!("unable to parse \"{body}\": {e}")))?;
    let output = crate::Output::parse(a.output.as_deref())?;
    for (r, path, _) in targets(session, &a.args, false, None).await? {
        let path = match &a.subresource {
            Some(s) => format!("{path}/{s}"),
            None => path,
        };
        let before = session.conn.rest.get(&path).await?;
        let after = patch(session, &path, content_type, &value, "kubectl-patch").await?;
        let verb = if before == after {
            "patched (no change)"
        } else {
            "patched"
        };
        crate::create::print_result(&r, &after, &output, verb, crate::create::DryRun::None)?;
    }
    Ok(0)
}

#[derive(clap::Args)]
pub struct ScaleArgs {
    args: Vec<String>,
    /// The new desired number of replicas. Required.
    #[arg(long, required = true)]
    replicas: i64,
    /// Precondition for current size.
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    current_replicas: i64,
}

pub async fn scale(session: &Session, a: ScaleArgs) -> Result<i32> {
    if a.replicas < 0 {
        return Err(msg(
            "The --replicas=COUNT flag is required, and COUNT must be greater than or equal to 0",
        ));
    }
    for (r, path, name) in targets(session, &a.args, false, None).await? {
        let scale_path = format!("{path}/scale");
        if a.current_replicas >= 0 {
            let current = session.conn.rest.get(&scale_path).await?;
            let now = current["spec"]["replicas"].as_i64().unwrap_or(0);
            if now != a.current_replicas {
                return Err(msg(format!(
                    "Expected replicas to be {}, was {now}",
                    a.current_replicas
                )));
            }
        }
        patch(
            session,
            &scale_path,
            MERGE,
            &json!({"spec": {"replicas": a.replicas}}),
            "kubectl-scale",
        )
        .await?;
        out(&format!("{}/{name} scaled\n", r.kind_prefix()));
    }
    Ok(0)
}

/// `cordon` (true) or `uncordon` (false) nodes.
pub async fn cordon(session: &Session, nodes: Vec<String>, unschedulable: bool) -> Result<i32> {
    let verb = if unschedulable { "cordoned" } else { "uncordoned" };
    let mut args = vec!["nodes".to_owned()];
    args.extend(nodes);
    for (r, path, name) in targets(session, &args, false, None).await? {
        let node = session.conn.rest.get(&path).await?;
        if node["spec"]["unschedulable"].as_bool().unwrap_or(false) == unschedulable {
            out(&format!("{}/{name} already {verb}\n", r.kind_prefix()));
            continue;
        }
        let value = if unschedulable { json!(true) } else { Value::Null };
        patch(
            session,
            &path,
            STRATEGIC,
            &json!({"spec": {"unschedulable": value}}),
            "kubectl-cordon",
        )
        .await?;
        out(&format!("{}/{name} {verb}\n", r.kind_prefix()));
    }
    Ok(0)
}

#[derive(clap::Subcommand)]
pub enum RolloutCommand {
    /// Restart a resource.
    Restart { args: Vec<String> },
    /// Mark the provided resource as paused.
    Pause { args: Vec<String> },
    /// Resume a paused resource.
    Resume { args: Vec<String> },
    /// View rollout history.
    History {
        args: Vec<String>,
        /// See the details, including podTemplate of the revision specified.
        #[arg(long, default_value_t = 0)]
        revision: i64,
    },
    /// Undo a previous rollout.
    Undo {
        args: Vec<String>,
        /// The revision to rollback to. Default to 0 (last revision).
        #[arg(long, default_value_t = 0)]
        to_revision: i64,
    },
    /// Show the status of the rollout.
    Status {
        args: Vec<String>,
        /// Watch the status of the rollout until it's done.
        #[arg(short = 'w', long, default_value = "true", num_args = 0..=1, default_missing_value = "true")]
        watch: String,
        /// The length of time to wait before ending watch, zero means never.
        #[arg(long, default_value = "0s")]
        timeout: String,
    },
}

pub async fn rollout(session: &Session, c: RolloutCommand) -> Result<i32> {
    match c {
        RolloutCommand::Restart { args } => {
            for (r, path, name) in targets(session, &args, false, None).await? {
                check_rollout_kind(&r, "restart")?;
                let obj = session.conn.rest.get(&path).await?;
                if obj["spec"]["paused"].as_bool() == Some(true) {
                    return Err(msg(format!(
                        "can't restart paused {} (run rollout resume first)",
                        r.singular
                    )));
                }
                let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
                let body = json!({"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": now}}}}});
                patch(session, &path, STRATEGIC, &body, "kubectl-rollout").await?;
                out(&format!("{}/{name} restarted\n", r.kind_prefix()));
            }
            Ok(0)
        }
        RolloutCommand::Pause { args } => pause(session, &args, true).await,
        RolloutCommand::Resume { args } => pause(session, &args, false).await,
        RolloutCommand::Status { args, watch, timeout } => {
            status(session, &args, watch != "false", &timeout).await
        }
        RolloutCommand::History { args, revision } => history(session, &args, revision).await,
        RolloutCommand::Undo { args, to_revision } => undo(session, &args, to_revision).await,
    }
}

fn check_rollout_kind(r: &Resource, what: &str) -> Result<()> {
    if r.group == "apps" && matches!(r.name.as_str(), "deployments" | "daemonsets" | "statefulsets") {
        Ok(())
    } else {
        Err(msg(format!(
            "{what}ing is not supported for {}",
            r.group_resource()
        )))
    }
}

async fn pause(session: &Session, args: &[String], paused: bool) -> Result<i32> {
    let verb = if paused { "paused" } else { "resumed" };
    for (r, path, name) in targets(session, args, false, None).await? {
        if r.group != "apps" || r.name != "deployments" {
            return Err(msg(format!(
                "{} is not supported for {}",
                if paused { "pausing" } else { "resuming" },
                r.group_resource()
            )));
        }
        let obj = session.conn.rest.get(&path).await?;
        if obj["spec"]["paused"].as_bool().unwrap_or(false) == paused {
            return Err(msg(format!(
                "{} \"{name}\" is {}",
                r.group_resource(),
                if paused { "already paused" } else { "not paused" }
            )));
        }
        let value = if paused { json!(true) } else { Value::Null };
        patch(
            session,
            &path,
            STRATEGIC,
            &json!({"spec": {"paused": value}}),
            "kubectl-rollout",
        )
        .await?;
        out(&format!("{}/{name} {verb}\n", r.kind_prefix()));
    }
    Ok(0)
}

/// `rollout status`: kubectl's status viewers for Deployments, DaemonSets and StatefulSets,
/// printing each new message until the rollout is done.
async fn status(session: &Session, args: &[String], watch: bool, timeout: &str) -> Result<i32> {
    let limit = parse_duration(timeout)?;
    let start = Instant::now();
    for (r, path, _) in targets(session, args, false, None).await? {
        check_rollout_kind(&r, "status")?;
        let mut last = String::new();
        loop {
            let obj = session.conn.rest.get(&path).await?;
            let (message, done) = status_message(&r, &obj)?;
            if message != last {
                out(&message);
                last = message;
            }
            if done || !watch {
                break;
            }
            if limit.is_some_and(|l| start.elapsed() >= l) {
                return Err(msg("timed out waiting for the condition"));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    Ok(0)
}

fn status_message(r: &Resource, o: &Value) -> Result<(String, bool)> {
    let name = o["metadata"]["name"].as_str().unwrap_or("");
    let generation = o["metadata"]["generation"].as_i64().unwrap_or(0);
    let st = &o["status"];
    let observed = st["observedGeneration"].as_i64().unwrap_or(0);
    let n = |v: &Value| v.as_i64().unwrap_or(0);
    match r.name.as_str() {
        "deployments" => {
            if generation > observed {
                return Ok((
                    "Waiting for deployment spec update to be observed...\n".into(),
                    false,
                ));
            }
            let progressing = st["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == "Progressing"));
            if progressing.is_some_and(|c| c["reason"] == "ProgressDeadlineExceeded") {
                return Err(msg(format!(
                    "deployment \"{name}\" exceeded its progress deadline"
                )));
            }
            let spec = o["spec"]["replicas"].as_i64().unwrap_or(1);
            let (updated, replicas, available) = (
                n(&st["updatedReplicas"]),
                n(&st["replicas"]),
                n(&st["availableReplicas"]),
            );
            Ok(if updated < spec {
                (format!("Waiting for deployment \"{name}\" rollout to finish: {updated} out of {spec} new replicas have been updated...\n"), false)
            } else if replicas > updated {
                (format!("Waiting for deployment \"{name}\" rollout to finish: {} old replicas are pending termination...\n", replicas - updated), false)
            } else if available < updated {
                (format!("Waiting for deployment \"{name}\" rollout to finish: {available} of {updated} updated replicas are available...\n"), false)
            } else {
                (format!("deployment \"{name}\" successfully rolled out\n"), true)
            })
        }
        "daemonsets" => {
            if o["spec"]["updateStrategy"]["type"]
                .as_str()
                .unwrap_or("RollingUpdate")
                != "RollingUpdate"
            {
                return Err(msg(
                    "rollout status is only available for RollingUpdate strategy type",
                ));
            }
            if generation > observed {
                return Ok((
                    "Waiting for daemon set spec update to be observed...\n".into(),
                    false,
                ));
            }
            let (updated, desired, available) = (
                n(&st["updatedNumberScheduled"]),
                n(&st["desiredNumberScheduled"]),
                n(&st["numberAvailable"]),
            );
            Ok(if updated < desired {
                (format!("Waiting for daemon set \"{name}\" rollout to finish: {updated} out of {desired} new pods have been updated...\n"), false)
            } else if available < desired {
                (format!("Waiting for daemon set \"{name}\" rollout to finish: {available} of {desired} updated pods are available...\n"), false)
            } else {
                (format!("daemon set \"{name}\" successfully rolled out\n"), true)
            })
        }
        _ => {
            if o["spec"]["updateStrategy"]["type"]
                .as_str()
                .unwrap_or("RollingUpdate")
                != "RollingUpdate"
            {
                return Err(msg(
                    "rollout status is only available for RollingUpdate strategy type",
                ));
            }
            if observed == 0 || generation > observed {
                return Ok((
                    "Waiting for statefulset spec update to be observed...\n".into(),
                    false,
                ));
            }
            let spec = o["spec"]["replicas"].as_i64().unwrap_or(1);
            let ready = n(&st["readyReplicas"]);
            if ready < spec {
                return Ok((
                    format!("Waiting for {} pods to be ready...\n", spec - ready),
                    false,
                ));
            }
            let partition = o["spec"]["updateStrategy"]["rollingUpdate"]["partition"]
                .as_i64()
                .unwrap_or(0);
            let updated = n(&st["updatedReplicas"]);
            if partition > 0 {
                return Ok(if updated < spec - partition {
                    (format!("Waiting for partitioned roll out to finish: {updated} out of {} new pods have been updated...\n", spec - partition), false)
                } else {
                    (
                        format!("partitioned roll out complete: {updated} new pods have been updated...\n"),
                        true,
                    )
                });
            }
            let (update_rev, current_rev) = (
                st["updateRevision"].as_str().unwrap_or(""),
                st["currentRevision"].as_str().unwrap_or(""),
            );
            Ok(if update_rev != current_rev {
                (format!("waiting for statefulset rolling update to complete {updated} pods at revision {update_rev}...\n"), false)
            } else {
                (
                    format!(
                        "statefulset rolling update complete {} pods at revision {current_rev}...\n",
                        n(&st["currentReplicas"])
                    ),
                    true,
                )
            })
        }
    }
}

/// Go durations as flags take them (`30s`, `5m`, `1h30m`); zero means none.
pub(crate) fn parse_duration(s: &str) -> Result<Option<Duration>> {
    let mut total = 0f64;
    let mut num = String::new();
    let mut chars = s.chars().peekable();
    if s.is_empty() || s == "0" {
        return Ok(None);
    }
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() || c == '.' {
            num.push(c);
            continue;
        }
        let mut unit = c.to_string();
        if c == 'm' && chars.peek() == Some(&'s') {
            unit.push(chars.next().unwrap_or('s'));
        }
        let v: f64 = num
            .parse()
            .map_err(|_| msg(format!("time: invalid duration \"{s}\"")))?;
        total += v * match unit.as_str() {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(msg(format!("time: unknown unit \"{unit}\" in duration \"{s}\""))),
        };
        num.clear();
    }
    if !num.is_empty() {
        return Err(msg(format!("time: missing unit in duration \"{s}\"")));
    }
    Ok((total > 0.0).then(|| Duration::from_secs_f64(total)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("0s").unwrap(), None);
        assert_eq!(parse_duration("1m30s").unwrap(), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("250ms").unwrap(), Some(Duration::from_millis(250)));
        assert!(parse_duration("5").is_err());
    }

    #[test]
    fn deployment_status_as_kubectl_words_it() {
        let r = Resource {
            group: "apps".into(),
            version: "v1".into(),
            name: "deployments".into(),
            singular: "deployment".into(),
            kind: "Deployment".into(),
            namespaced: true,
            verbs: vec![],
            short_names: vec![],
            categories: vec![],
        };
        let d = json!({"metadata": {"name": "web", "generation": 2}, "spec": {"replicas": 3},
            "status": {"observedGeneration": 2, "replicas": 4, "updatedReplicas": 3, "availableReplicas": 2}});
        assert_eq!(
            status_message(&r, &d).unwrap().0,
            "Waiting for deployment \"web\" rollout to finish: 1 old replicas are pending termination...\n"
        );
        let d = json!({"metadata": {"name": "web", "generation": 2}, "spec": {"replicas": 3},
            "status": {"observedGeneration": 2, "replicas": 3, "updatedReplicas": 3, "availableReplicas": 3}});
        assert_eq!(
            status_message(&r, &d).unwrap(),
            ("deployment \"web\" successfully rolled out\n".into(), true)
        );
    }
}

#[derive(clap::Args)]
pub struct WaitArgs {
    args: Vec<String>,
    /// The condition to wait on: [create|delete|condition=condition-name[=condition-value]|jsonpath='{JSONPath expression}'=[JSONPath value]].
    #[arg(long = "for", required = true)]
    for_: String,
    /// The length of time to wait before giving up. Zero means check once and don't wait.
    #[arg(long, default_value = "30s")]
    timeout: String,
    /// Selector (label query) to filter on.
    #[arg(short = 'l', long)]
    selector: Option<String>,
    /// Select all resources in the namespace of the specified resource types.
    #[arg(long)]
    all: bool,
}

enum Want {
    Delete,
    Create,
    Condition(String, String),
    JsonPath(Vec<crate::printers::jsonpath::NodeHandle>, Option<String>),
}

/// `kubectl wait`: until each object is deleted, has the condition (status `True` unless
/// another value is named), or a JSONPath gives the value; `… condition met` for each.
pub async fn wait(session: &Session, a: WaitArgs) -> Result<i32> {
    let want = if a.for_ == "delete" {
        Want::Delete
    } else if a.for_ == "create" {
        Want::Create
    } else if let Some(c) = a.for_.strip_prefix("condition=") {
        let (name, value) = c.split_once('=').unwrap_or((c, "true"));
        Want::Condition(name.to_owned(), value.to_owned())
    } else if let Some(j) = a.for_.strip_prefix("jsonpath=") {
        // `{.status.phase}=Running`: the template ends at its last '}'.
        let (template, value) = match j.rfind('}') {
            Some(i) if j[i + 1..].starts_with('=') => (&j[..=i], Some(j[i + 2..].to_owned())),
            _ => (j, None),
        };
        let nodes = crate::printers::jsonpath::parse(template)
            .map_err(|e| msg(format!("unrecognized JSONPath expression: {template}: {e}")))?;
        Want::JsonPath(nodes, value)
    } else {
        return Err(msg(format!("unrecognized condition: \"{}\"", a.for_)));
    };
    let limit = parse_duration(&a.timeout)?.unwrap_or_default();
    let deadline = Instant::now() + limit;
    let objects = match targets(session, &a.args, a.all, a.selector.as_deref()).await {
        Ok(o) => o,
        Err(e) => return Err(e),
    };
    for (r, path, name) in objects {
        let mut uid: Option<String> = None;
        loop {
            let current = match session.conn.rest.get(&path).await {
                Ok(o) => Some(o),
                Err(Error::Api(e)) if e.is_not_found() => None,
                Err(e) => return Err(e),
            };
            let met = match (&want, &current) {
                (Want::Delete, None) => {
                    if uid.is_none() {
                        // Never there: nothing to wait for, nothing said.
                        break;
                    }
                    true
                }
                (Want::Delete, Some(o)) => {
                    let this = o["metadata"]["uid"].as_str().map(str::to_owned);
                    if uid.is_some() && uid != this {
                        true
                    } else {
                        uid = this;
                        false
                    }
                }
                (Want::Create, found) => found.is_some(),
                (_, None) => {
                    if uid.is_none() && !matches!(want, Want::Create) {
                        return Err(Error::Api(crate::error::ApiError {
                            code: 404,
                            reason: "NotFound".into(),
                            message: format!("{} \"{name}\" not found", r.group_resource()),
                        }));
                    }
                    false
                }
                (Want::Condition(c, v), Some(o)) => o["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|x| {
                        x["type"].as_str().is_some_and(|t| t.eq_ignore_ascii_case(c))
                            && x["status"].as_str().is_some_and(|s| s.eq_ignore_ascii_case(v))
                    }),
                (Want::JsonPath(t, v), Some(o)) => {
                    let got = crate::printers::jsonpath::execute(t, o);
                    match v {
                        Some(v) => &got == v,
                        None => !got.is_empty(),
                    }
                }
            };
            if let Some(o) = &current {
                uid.get_or_insert_with(|| o["metadata"]["uid"].as_str().unwrap_or("").to_owned());
            }
            if met {
                out(&format!("{}/{name} condition met\n", r.kind_prefix()));
                break;
            }
            if Instant::now() >= deadline {
                return Err(msg(format!(
                    "timed out waiting for the condition on {}/{name}",
                    r.name
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(0)
}

#[derive(clap::Subcommand)]
pub enum SetCommand {
    /// Update the image of a pod template.
    Image {
        /// TYPE NAME or TYPE/NAME, then CONTAINER=IMAGE pairs ('*' for all containers).
        args: Vec<String>,
    },
    /// Update environment variables on a pod template.
    Env {
        /// TYPE NAME or TYPE/NAME, then KEY=VALUE to set and KEY- to remove.
        args: Vec<String>,
        /// The names of containers in the selected pod templates to change.
        #[arg(short = 'c', long, default_value = "*")]
        containers: String,
        /// If true, display the environment and any changes in the standard format.
        #[arg(long)]
        list: bool,
    },
    /// Update resource requests/limits on objects with pod templates.
    Resources {
        /// TYPE NAME or TYPE/NAME of the objects.
        args: Vec<String>,
        /// The names of containers in the selected pod templates to change.
        #[arg(short = 'c', long, default_value = "*")]
        containers: String,
        /// The resource requirement limits for this container, e.g. 'cpu=200m,memory=512Mi'.
        #[arg(long)]
        limits: Option<String>,
        /// The resource requirement requests for this container, e.g. 'cpu=100m,memory=256Mi'.
        #[arg(long)]
        requests: Option<String>,
    },
}

/// `set image`: a strategic merge patch naming each changed container; nothing said when
/// nothing changes.
pub async fn set(session: &Session, c: SetCommand) -> Result<i32> {
    let args = match c {
        SetCommand::Image { args } => args,
        SetCommand::Env {
            args,
            containers,
            list,
        } => return set_env(session, &args, &containers, list).await,
        SetCommand::Resources {
            args,
            containers,
            limits,
            requests,
        } => return set_resources(session, &args, &containers, limits, requests).await,
    };
    let (pairs, objects): (Vec<&String>, Vec<&String>) = args.iter().partition(|x| x.contains('='));
    if pairs.is_empty() {
        return Err(msg("at least one image update is required"));
    }
    let objects: Vec<String> = objects.into_iter().cloned().collect();
    for (r, path, name) in targets(session, &objects, false, None).await? {
        let obj = session.conn.rest.get(&path).await?;
        let (spec_path, spec) = template_spec(&r, &obj);
        let mut changes: Map<String, Value> = Map::new();
        for pair in &pairs {
            let (container, image) = pair.split_once('=').unwrap_or((pair, ""));
            let mut found = false;
            for list in ["initContainers", "containers"] {
                for c in spec[list].as_array().into_iter().flatten() {
                    let cname = c["name"].as_str().unwrap_or("");
                    if container == "*" || cname == container {
                        found = true;
                        if c["image"].as_str() != Some(image) {
                            let entry = changes.entry(list.to_owned()).or_insert_with(|| json!([]));
                            if let Some(a) = entry.as_array_mut() {
                                a.push(json!({"name": cname, "image": image}));
                            }
                        }
                    }
                }
            }
            if !found {
                return Err(msg(format!("unable to find container named \"{container}\"")));
            }
        }
        if changes.is_empty() {
            continue;
        }
        patch_containers(session, &path, spec_path, changes).await?;
        out(&format!("{}/{name} image updated\n", r.kind_prefix()));
    }
    Ok(0)
}

#[derive(clap::Args)]
pub struct TaintArgs {
    /// nodes NODE KEY_1=VAL_1:TAINT_EFFECT_1 … KEY_N-
    args: Vec<String>,
    /// If true, allow taints to be overwritten.
    #[arg(long)]
    overwrite: bool,
}

/// `taint nodes NODE key=value:Effect | key:Effect- | key-`.
pub async fn taint(session: &Session, a: TaintArgs) -> Result<i32> {
    // `nodes NODE …` or `node/NODE …`: what follows the objects are the taints.
    let skip = if a.args.first().is_some_and(|x| x.contains('/')) {
        1
    } else {
        2
    };
    let objects: Vec<&String> = a.args.iter().take(skip).collect();
    let changes: Vec<&String> = a.args.iter().skip(skip).collect();
    if changes.is_empty() {
        return Err(msg("at least one taint update is required"));
    }
    let objects: Vec<String> = objects.into_iter().cloned().collect();
    for (r, path, name) in targets(session, &objects, false, None).await? {
        let node = session.conn.rest.get(&path).await?;
        let mut taints: Vec<Value> = node["spec"]["taints"].as_array().cloned().unwrap_or_default();
        let (mut added, mut removed) = (false, false);
        for change in &changes {
            if let Some(spec) = change.strip_suffix('-') {
                let (key, effect) = spec.split_once(':').unwrap_or((spec, ""));
                let before = taints.len();
                taints.retain(|t| !(t["key"] == key && (effect.is_empty() || t["effect"] == effect)));
                if taints.len() == before {
                    return Err(msg(format!("taint \"{spec}\" not found")));
                }
                removed = true;
                continue;
            }
            let (kv, effect) = change
                .rsplit_once(':')
                .ok_or_else(|| msg(format!("invalid taint spec: {change}, unknown taint effect")))?;
            if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
                return Err(msg(format!(
                    "invalid taint effect: {effect}, unsupported taint effect"
                )));
            }
            let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
            if let Some(t) = taints
                .iter_mut()
                .find(|t| t["key"] == key && t["effect"] == effect)
            {
                if !a.overwrite {
                    return Err(msg(format!(
                        "node {name} already has {key} taint(s) with same effect(s) and --overwrite is false"
                    )));
                }
                *t = taint_value(key, value, effect);
            } else {
                taints.push(taint_value(key, value, effect));
            }
            added = true;
        }
        patch(
            session,
            &path,
            STRATEGIC,
            &json!({"spec": {"taints": taints}}),
            "kubectl-taint",
        )
        .await?;
        let verb = match (added, removed) {
            (true, true) => "modified",
            (false, true) => "untainted",
            _ => "tainted",
        };
        out(&format!("{}/{name} {verb}\n", r.kind_prefix()));
    }
    Ok(0)
}

fn taint_value(key: &str, value: &str, effect: &str) -> Value {
    let mut t = json!({"key": key, "effect": effect});
    if !value.is_empty() {
        t["value"] = json!(value);
    }
    t
}

#[derive(clap::Args)]
pub struct DrainArgs {
    node: String,
    /// Continue even if there are pods that do not declare a controller.
    #[arg(long)]
    force: bool,
    /// Ignore DaemonSet-managed pods.
    #[arg(long)]
    ignore_daemonsets: bool,
    /// Continue even if there are pods using emptyDir (local data that will be deleted when the node is drained).
    #[arg(long)]
    delete_emptydir_data: bool,
    /// Period of time in seconds given to each pod to terminate gracefully. If negative, the default value specified in the pod will be used.
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    grace_period: i64,
    /// The length of time to wait before giving up, zero means infinite.
    #[arg(long, default_value = "0s")]
    timeout: String,
    /// Label selector to filter pods on the node.
    #[arg(long)]
    pod_selector: Option<String>,
}

/// `kubectl drain`: cordon, then evict the node's pods through the Eviction subresource
/// (which honours disruption budgets: 429s are retried), waiting until each is gone.
pub async fn drain(session: &Session, a: DrainArgs) -> Result<i32> {
    cordon(session, vec![a.node.clone()], true).await?;
    let mut uri = format!(
        "/api/v1/pods?fieldSelector={}",
        encode(&format!("spec.nodeName={}", a.node))
    );
    if let Some(l) = &a.pod_selector {
        uri.push_str(&format!("&labelSelector={}", encode(l)));
    }
    let pods = session.conn.rest.get(&uri).await?;
    let mut evict: Vec<(String, String)> = Vec::new();
    let (mut unmanaged, mut daemons, mut local) = (Vec::new(), Vec::new(), Vec::new());
    for p in pods["items"].as_array().into_iter().flatten() {
        let ns = p["metadata"]["namespace"].as_str().unwrap_or("").to_owned();
        let name = p["metadata"]["name"].as_str().unwrap_or("").to_owned();
        let id = format!("{ns}/{name}");
        if p["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_string() {
            continue;
        }
        let finished = matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"));
        let controller = p["metadata"]["ownerReferences"]
            .as_array()
            .and_then(|r| r.iter().find(|r| r["controller"] == true).cloned());
        if controller.as_ref().is_some_and(|c| c["kind"] == "DaemonSet") {
            daemons.push(id);
            continue;
        }
        if controller.is_none() && !finished {
            unmanaged.push(id.clone());
        }
        let has_empty_dir = p["spec"]["volumes"]
            .as_array()
            .is_some_and(|v| v.iter().any(|v| !v["emptyDir"].is_null()));
        if has_empty_dir && !finished {
            local.push(id.clone());
        }
        evict.push((ns, name));
    }
    let mut problems = Vec::new();
    if !unmanaged.is_empty() && !a.force {
        problems.push(format!(
            "cannot delete Pods that declare no controller (use --force to override): {}",
            unmanaged.join(", ")
        ));
    }
    if !daemons.is_empty() && !a.ignore_daemonsets {
        problems.push(format!(
            "cannot delete DaemonSet-managed Pods (use --ignore-daemonsets to ignore): {}",
            daemons.join(", ")
        ));
    }
    if !local.is_empty() && !a.delete_emptydir_data {
        problems.push(format!(
            "cannot delete Pods with local storage (use --delete-emptydir-data to override): {}",
            local.join(", ")
        ));
    }
    if !problems.is_empty() {
        return Err(msg(format!(
            "unable to drain node \"{}\" due to error: {}, continuing command...\nThere are pending nodes to be drained:\n {}\n{}",
            a.node,
            problems.join(", "),
            a.node,
            problems.join("\n")
        )));
    }
    if !daemons.is_empty() {
        eprintln!("Warning: ignoring DaemonSet-managed Pods: {}", daemons.join(", "));
    }
    if !unmanaged.is_empty() {
        eprintln!(
            "Warning: deleting Pods that declare no controller: {}",
            unmanaged.join(", ")
        );
    }
    let limit = parse_duration(&a.timeout)?;
    let start = Instant::now();
    let mut uids = Vec::new();
    for (ns, name) in &evict {
        out(&format!("evicting pod {ns}/{name}\n"));
        let mut body = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns}});
        if a.grace_period >= 0 {
            body["deleteOptions"] = json!({"gracePeriodSeconds": a.grace_period});
        }
        let path = format!("/api/v1/namespaces/{ns}/pods/{name}");
        let uid = session
            .conn
            .rest
            .get(&path)
            .await
            .ok()
            .and_then(|p| p["metadata"]["uid"].as_str().map(str::to_owned));
        loop {
            match session
                .conn
                .rest
                .json(
                    Method::POST,
                    &format!("{path}/eviction"),
                    JSON,
                    Some((JSON, serde_json::to_vec(&body).unwrap_or_default())),
                )
                .await
            {
                Ok(_) => break,
                Err(Error::Api(e)) if e.is_not_found() => break,
                Err(Error::Api(e)) if e.code == 429 => {
                    eprintln!(
                        "error when evicting pods/\"{name}\" -n \"{ns}\" (will retry after 5s): {}",
                        e.message
                    );
                    if limit.is_some_and(|l| start.elapsed() >= l) {
                        return Err(msg(format!(
                            "error when evicting pods/\"{name}\" -n \"{ns}\": global timeout reached"
                        )));
                    }
                    tokio::time::sleep(Duration::from_secs(5)).await;
                }
                Err(e) => return Err(e),
            }
        }
        uids.push((path, name.clone(), uid));
    }
    for (path, name, uid) in uids {
        loop {
            match session.conn.rest.get(&path).await {
                Ok(p) if p["metadata"]["uid"].as_str().map(str::to_owned) == uid => {}
                Ok(_) => break,
                Err(Error::Api(e)) if e.is_not_found() => break,
                Err(e) => return Err(e),
            }
            if limit.is_some_and(|l| start.elapsed() >= l) {
                return Err(msg(format!("drain did not complete within {}", a.timeout)));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        out(&format!("pod/{name} evicted\n"));
    }
    out(&format!("node/{} drained\n", a.node));
    Ok(0)
}

/// A Deployment's ReplicaSets by revision (`deployment.kubernetes.io/revision`), oldest first.
/// An object's rollout history, oldest first: (revision, the pod template it had, its
/// change cause) — a Deployment's from its ReplicaSets, a StatefulSet's or DaemonSet's from its
/// ControllerRevisions (whose data is the patch that puts the template back).
async fn revisions(session: &Session, r: &Resource, obj: &Value) -> Result<Vec<(i64, Value, String)>> {
    if r.group != "apps" || !matches!(r.name.as_str(), "deployments" | "statefulsets" | "daemonsets") {
        return Err(msg(format!(
            "no history viewer has been implemented for {:?}",
            r.kind
        )));
    }
    let ns = obj["metadata"]["namespace"].as_str().unwrap_or("");
    let uid = obj["metadata"]["uid"].as_str().unwrap_or("");
    let owned = |o: &Value| {
        o["metadata"]["ownerReferences"]
            .as_array()
            .is_some_and(|o| o.iter().any(|o| o["uid"] == uid && o["controller"] == true))
    };
    let cause = |o: &Value| {
        o["metadata"]["annotations"]["kubernetes.io/change-cause"]
            .as_str()
            .unwrap_or("<none>")
            .to_owned()
    };
    let mut out: Vec<(i64, Value, String)> = if r.name == "deployments" {
        let list = session
            .conn
            .rest
            .get(&format!("/apis/apps/v1/namespaces/{ns}/replicasets"))
            .await?;
        list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|rs| owned(rs))
            .filter_map(|rs| {
                let rev = rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
                    .as_str()?
                    .parse()
                    .ok()?;
                Some((rev, rs["spec"]["template"].clone(), cause(rs)))
            })
            .collect()
    } else {
        let list = session
            .conn
            .rest
            .get(&format!("/apis/apps/v1/namespaces/{ns}/controllerrevisions"))
            .await?;
        list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|cr| owned(cr))
            .filter_map(|cr| {
                let mut template = cr["data"]["spec"]["template"].clone();
                template.as_object_mut()?.remove("$patch");
                Some((cr["revision"].as_i64()?, template, cause(cr)))
            })
            .collect()
    };
    out.sort_by_key(|(rev, _, _)| *rev);
    Ok(out)
}

async fn history(session: &Session, args: &[String], revision: i64) -> Result<i32> {
    for (r, path, name) in targets(session, args, false, None).await? {
        let d = session.conn.rest.get(&path).await?;
        let revs = revisions(session, &r, &d).await?;
        if revision > 0 {
            let Some((_, template, _)) = revs.iter().find(|(n, _, _)| *n == revision) else {
                return Err(msg("unable to find the specified revision"));
            };
            let mut w = crate::describe::Writer::default();
            crate::describe::write_pod_template(&mut w, template);
            out(&format!(
                "{}/{name} with revision #{revision}\n{}\n",
                r.kind_prefix(),
                w.text()
            ));
            continue;
        }
        if revs.is_empty() {
            out(&format!(
                "{}/{name} \nNo rollout history found.\n",
                r.kind_prefix()
            ));
            continue;
        }
        let mut text = String::from("REVISION\tCHANGE-CAUSE\n");
        for (rev, _, cause) in &revs {
            text.push_str(&format!("{rev}\t{cause}\n"));
        }
        out(&format!(
            "{}/{name} \n{}\n",
            r.kind_prefix(),
            crate::printers::table::tabwrite_with(&text, 0, 2)
        ));
    }
    Ok(0)
}

async fn undo(session: &Session, args: &[String], to_revision: i64) -> Result<i32> {
    for (r, path, name) in targets(session, args, false, None).await? {
        let d = session.conn.rest.get(&path).await?;
        let revs = revisions(session, &r, &d).await?;
        let target = if to_revision > 0 {
            revs.iter().find(|(n, _, _)| *n == to_revision).ok_or_else(|| {
                msg(format!(
                    "unable to find specified revision {to_revision} in history"
                ))
            })?
        } else {
            // The revision before the latest.
            if revs.len() < 2 {
                return Err(msg(if r.name == "deployments" {
                    format!("no rollout history found for deployment \"{name}\"")
                } else {
                    "no last revision to roll back to".to_owned()
                }));
            }
            &revs[revs.len() - 2]
        };
        let mut template = target.1.clone();
        if let Some(labels) = template["metadata"]["labels"].as_object_mut() {
            labels.remove("pod-template-hash");
        }
        let mut current = d["spec"]["template"].clone();
        if let Some(labels) = current["metadata"]["labels"].as_object_mut() {
            labels.remove("pod-template-hash");
        }
        if current == template {
            out(&format!(
                "{}/{name} skipped rollback (current template already matches revision {})\n",
                r.kind_prefix(),
                target.0
            ));
            continue;
        }
        let body = json!([{"op": "replace", "path": "/spec/template", "value": template}]);
        patch(
            session,
            &path,
            "application/json-patch+json",
            &body,
            "kubectl-rollout",
        )
        .await?;
        out(&format!("{}/{name} rolled back\n", r.kind_prefix()));
    }
    Ok(0)
}

/// The pod template's path and value in an object (a pod's own spec).
fn template_spec<'a>(r: &Resource, obj: &'a Value) -> (&'static str, &'a Value) {
    match r.name.as_str() {
        "pods" => ("/spec", &obj["spec"]),
        "cronjobs" => (
            "/spec/jobTemplate/spec/template/spec",
            &obj["spec"]["jobTemplate"]["spec"]["template"]["spec"],
        ),
        _ => ("/spec/template/spec", &obj["spec"]["template"]["spec"]),
    }
}

/// `set image`'s and `set resources`' change: the changed containers (by list) as a
/// strategic merge patch at the pod template's path.
async fn patch_containers(
    session: &Session,
    path: &str,
    spec_path: &str,
    changes: Map<String, Value>,
) -> Result<()> {
    let mut body = Value::Object(changes);
    for key in spec_path.trim_start_matches('/').split('/').rev() {
        body = json!({ key: body });
    }
    patch(session, path, STRATEGIC, &body, "kubectl-set").await?;
    Ok(())
}

/// `NAME=QUANTITY,…` of `--limits`/`--requests`.
fn resource_list(flag: &str, spec: Option<&str>) -> Result<Map<String, Value>> {
    let mut m = Map::new();
    for kv in spec.unwrap_or("").split(',').filter(|x| !x.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .filter(|(k, v)| !k.is_empty() && !v.is_empty())
            .ok_or_else(|| msg(format!("invalid argument syntax {kv} for {flag}")))?;
        m.insert(k.to_owned(), json!(v));
    }
    Ok(m)
}

/// `set resources`: the chosen containers' (and init containers') limits and requests set,
/// key by key, in a strategic merge patch naming each changed container; nothing said when
/// nothing changes.
async fn set_resources(
    session: &Session,
    objects: &[String],
    containers: &str,
    limits: Option<String>,
    requests: Option<String>,
) -> Result<i32> {
    let limits = resource_list("--limits", limits.as_deref())?;
    let requests = resource_list("--requests", requests.as_deref())?;
    if limits.is_empty() && requests.is_empty() {
        return Err(msg(
            "you must specify an update to requests or limits (in the form of --requests/--limits)",
        ));
    }
    for (r, path, name) in targets(session, objects, false, None).await? {
        let obj = session.conn.rest.get(&path).await?;
        let (spec_path, spec) = template_spec(&r, &obj);
        let mut changes: Map<String, Value> = Map::new();
        let mut matched = false;
        for list in ["initContainers", "containers"] {
            for c in spec[list].as_array().into_iter().flatten() {
                let cname = c["name"].as_str().unwrap_or("");
                if containers != "*" && containers != cname {
                    continue;
                }
                matched = true;
                let mut resources = Map::new();
                for (kind, wanted) in [("limits", &limits), ("requests", &requests)] {
                    let differs = wanted.iter().any(|(k, v)| c["resources"][kind][k.as_str()] != *v);
                    if differs {
                        resources.insert(kind.to_owned(), Value::Object(wanted.clone()));
                    }
                }
                if !resources.is_empty() {
                    let entry = changes.entry(list.to_owned()).or_insert_with(|| json!([]));
                    if let Some(a) = entry.as_array_mut() {
                        a.push(json!({"name": cname, "resources": resources}));
                    }
                }
            }
        }
        if !matched {
            return Err(msg(format!("unable to find container named {containers}")));
        }
        if changes.is_empty() {
            continue;
        }
        patch_containers(session, &path, spec_path, changes).await?;
        out(&format!(
            "{}/{name} resource requirements updated\n",
            r.kind_prefix()
        ));
    }
    Ok(0)
}

/// `set env`: each chosen container's env set (`K=V`) or cleared (`K-`), sent as a JSON patch
/// of the whole lists; nothing said when nothing changes; `--list` prints the variables.
async fn set_env(session: &Session, args: &[String], containers: &str, list: bool) -> Result<i32> {
    let (changes, objects): (Vec<&String>, Vec<&String>) = args
        .iter()
        .partition(|x| x.contains('=') || (x.ends_with('-') && !x.contains('/')));
    let objects: Vec<String> = objects.into_iter().cloned().collect();
    for (r, path, name) in targets(session, &objects, false, None).await? {
        let obj = session.conn.rest.get(&path).await?;
        let (spec_path, spec) = template_spec(&r, &obj);
        let mut ops = Vec::new();
        let mut matched = false;
        for (i, c) in spec["containers"].as_array().into_iter().flatten().enumerate() {
            let cname = c["name"].as_str().unwrap_or("");
            if containers != "*" && containers != cname {
                continue;
            }
            matched = true;
            if list {
                out(&format!("# {} {name}, container {cname}\n", r.kind));
                for e in c["env"].as_array().into_iter().flatten() {
                    match e["value"].as_str() {
                        Some(v) => out(&format!("{}={v}\n", e["name"].as_str().unwrap_or(""))),
                        None => out(&format!(
                            "# {} from: {}\n",
                            e["name"].as_str().unwrap_or(""),
                            e["valueFrom"]
                        )),
                    }
                }
                continue;
            }
            let before: Vec<Value> = c["env"].as_array().cloned().unwrap_or_default();
            let mut env = before.clone();
            for change in &changes {
                if let Some((k, v)) = change.split_once('=') {
                    match env.iter_mut().find(|e| e["name"] == k) {
                        Some(e) => *e = json!({"name": k, "value": v}),
                        None => env.push(json!({"name": k, "value": v})),
                    }
                } else {
                    let k = change.trim_end_matches('-');
                    env.retain(|e| e["name"] != k);
                }
            }
            if env != before {
                ops.push(
                    json!({"op": "add", "path": format!("{spec_path}/containers/{i}/env"), "value": env}),
                );
            }
        }
        if !matched {
            eprintln!(
                "Warning: {}/{name} does not have any containers matching \"{containers}\"",
                r.kind
            );
        }
        if list || ops.is_empty() {
            continue;
        }
        patch(
            session,
            &path,
            "application/json-patch+json",
            &Value::Array(ops),
            "kubectl-set",
        )
        .await?;
        out(&format!("{}/{name} env updated\n", r.kind_prefix()));
    }
    Ok(0)
}
