//! `kubectl delete`: by type and names, `TYPE/NAME`, `-f`, `-l` or `--all`, with the cascade
//! policy and grace period as DeleteOptions, and — as kubectl does by default — waiting until
//! the objects are gone.

use std::time::{Duration, Instant};

use http::Method;
use serde_json::json;

use crate::discovery::Resource;
use crate::error::{msg, Error, Result};
use crate::rest::JSON;
use crate::{manifest, out, Session};

#[derive(clap::Args)]
pub struct DeleteArgs {
    args: Vec<String>,
    /// containing the resource to delete.
    #[arg(short = 'f', long = "filename")]
    filename: Vec<String>,
    #[arg(short = 'R', long)]
    recursive: bool,
    /// Selector (label query) to filter on.
    #[arg(short = 'l', long)]
    selector: Option<String>,
    /// Delete all resources, in the namespace of the specified resource types.
    #[arg(long)]
    all: bool,
    /// If present, the namespace scope for this CLI request.
    #[arg(short = 'A', long)]
    all_namespaces: bool,
    /// Must be "background", "orphan", or "foreground".
    #[arg(long, num_args = 0..=1, default_missing_value = "background", default_value = "background")]
    cascade: String,
    /// Period of time in seconds given to the resource to terminate gracefully.
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    grace_period: i64,
    /// If true, immediately remove resources from API and bypass graceful deletion.
    #[arg(long)]
    force: bool,
    /// If true, resources are signaled for immediate shutdown (same as --grace-period=1).
    #[arg(long)]
    now: bool,
    /// Treat "resource not found" as a successful delete.
    #[arg(long)]
    ignore_not_found: bool,
    /// If true, wait for resources to be gone before returning.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "true")]
    wait: String,
    /// Output mode. Use "-o name" for shorter output (resource/name).
    #[arg(short = 'o', long)]
    output: Option<String>,
}

pub async fn run(session: &Session, a: DeleteArgs) -> Result<i32> {
    let propagation = match a.cascade.as_str() {
        "background" | "true" => "Background",
        "foreground" => "Foreground",
        "orphan" | "false" => "Orphan",
        other => {
            return Err(msg(format!(
                "invalid cascade value ({other}). Must be \"background\", \"foreground\", or \"orphan\""
            )))
        }
    };
    let mut grace = a.grace_period;
    if a.now {
        grace = 1;
    }
    if a.force && grace < 0 {
        grace = 0;
    }
    if a.force {
        eprintln!("Warning: Immediate deletion does not wait for confirmation that the running resource has been terminated. The resource may continue to run on the cluster indefinitely.");
    }
    let mut options = json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation});
    if grace >= 0 {
        options["gracePeriodSeconds"] = json!(grace);
    }
    // (resource, namespace, name)
    let mut targets: Vec<(Resource, Option<String>, String)> = Vec::new();
    if !a.filename.is_empty() {
        for m in manifest::read(&a.filename, a.recursive)? {
            let mut obj = m.object;
            let r = crate::create::resource_of(session, &obj).await?;
            let ns = crate::create::target_namespace(session, &r, &mut obj)?;
            let name = obj["metadata"]["name"].as_str().unwrap_or("").to_owned();
            targets.push((r, ns, name));
        }
    } else {
        if a.args.is_empty() {
            return Err(msg("You must provide one or more resources by argument or filename.\nExample resource specifications include:\n   '-f rsrc.yaml'\n   '--filename=rsrc.json'\n   '<resource> <name>'\n   '<resource>'"));
        }
        let by_name = a.args.len() > 1 || a.args[0].contains('/');
        if !by_name && !a.all && a.selector.is_none() {
            return Err(msg("resource(s) were provided, but no name was specified"));
        }
        if by_name
            && (a.all || a.selector.is_some())
            && a.args.iter().any(|x| !x.contains('/'))
            && a.args.len() > 1
        {
            return Err(msg("name cannot be provided when a selector is specified"));
        }
        for req in crate::get::requests(session, &a.args).await? {
            let r = req.resource;
            let ns = (r.namespaced && !a.all_namespaces).then(|| session.conn.namespace.clone());
            if req.names.is_empty() {
                let mut uri = format!("{}?limit=500", r.collection_path(ns.as_deref()));
                if let Some(l) = &a.selector {
                    uri.push_str(&format!("&labelSelector={}", crate::get::encode(l)));
                }
                let list = session.conn.rest.get(&uri).await?;
                for item in list["items"].as_array().into_iter().flatten() {
                    let name = item["metadata"]["name"].as_str().unwrap_or("").to_owned();
                    let ns = item["metadata"]["namespace"].as_str().map(str::to_owned);
                    targets.push((r.clone(), ns, name));
                }
            } else {
                for n in req.names {
                    targets.push((r.clone(), ns.clone(), n));
                }
            }
        }
        if targets.is_empty() && !a.ignore_not_found {
            // kubectl's delete says it on standard output, without the namespace.
            out("No resources found\n");
            return Ok(0);
        }
    }
    let body = serde_json::to_vec(&options).map_err(|e| msg(e.to_string()))?;
    let mut failed = false;
    let mut deleted: Vec<(Resource, Option<String>, String, String)> = Vec::new();
    for (r, ns, name) in targets {
        let path = format!("{}/{name}", r.collection_path(ns.as_deref()));
        match session
            .conn
            .rest
            .json(Method::DELETE, &path, JSON, Some((JSON, body.clone())))
            .await
        {
            Ok(v) => {
                if a.output.as_deref() == Some("name") {
                    out(&format!("{}/{name}\n", r.kind_prefix()));
                } else {
                    let verb = if a.force && grace == 0 {
                        "force deleted"
                    } else {
                        "deleted"
                    };
                    out(&format!("{} \"{name}\" {verb}\n", r.kind_prefix()));
                }
                let uid = v["metadata"]["uid"].as_str().unwrap_or("").to_owned();
                deleted.push((r, ns, name, uid));
            }
            Err(Error::Api(e)) if e.is_not_found() && a.ignore_not_found => {}
            Err(e @ Error::Api(_)) => {
                eprintln!("{e}");
                failed = true;
            }
            Err(e) => return Err(e),
        }
    }
    if a.wait == "true" && !a.force {
        wait_gone(session, &deleted).await?;
    }
    Ok(i32::from(failed))
}

/// Wait until each deleted object (the same uid) is gone, as `kubectl delete --wait`.
async fn wait_gone(session: &Session, deleted: &[(Resource, Option<String>, String, String)]) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(7 * 24 * 3600);
    for (r, ns, name, uid) in deleted {
        let path = format!("{}/{name}", r.collection_path(ns.as_deref()));
        let mut delay = Duration::from_millis(50);
        loop {
            match session.conn.rest.get(&path).await {
                Ok(v) if v["metadata"]["uid"].as_str() == Some(uid.as_str()) => {}
                Ok(_) => break,
                Err(Error::Api(e)) if e.is_not_found() => break,
                Err(e) => return Err(e),
            }
            if Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(1));
        }
    }
    Ok(())
}
