//! `kubectl run` and `kubectl expose`: kubectl's Pod and Service generators, field for field
//! (`run=NAME` labels, `dnsPolicy: ClusterFirst`, `status: {loadBalancer: {}}`, ports found
//! on the exposed object), created with the `kubectl-run` and `kubectl-expose` managers.

use serde_json::{json, Map, Value};

use crate::create::{post, resource_of, target_namespace, Common, DryRun};
use crate::error::{msg, Error, Result};
use crate::{out, Output, Session};

#[derive(clap::Args)]
pub struct RunArgs {
    name: String,
    /// Arguments (or, with --command, the command) for the container.
    #[arg(last = true)]
    args: Vec<String>,
    /// The image for the container to run.
    #[arg(long, required = true)]
    image: String,
    /// The port that this container exposes.
    #[arg(long)]
    port: Option<String>,
    /// If true, create a ClusterIP service associated with the pod. Requires `--port`.
    #[arg(long)]
    expose: bool,
    /// The restart policy for this Pod. Legal values [Always, OnFailure, Never].
    #[arg(long, default_value = "Always")]
    restart: String,
    /// Environment variables to set in the container.
    #[arg(long)]
    env: Vec<String>,
    /// Comma separated labels to apply to the pod. Will override previous values.
    #[arg(short = 'l', long)]
    labels: Option<String>,
    /// If true and extra arguments are present, use them as the 'command' field in the container.
    #[arg(long)]
    command: bool,
    /// The image pull policy for the container.
    #[arg(long)]
    image_pull_policy: Option<String>,
    /// An inline JSON override for the generated object.
    #[arg(long)]
    overrides: Option<String>,
    /// Keep stdin open on the container in the pod, and attach to it.
    #[arg(short = 'i', long)]
    stdin: bool,
    /// Allocate a TTY for the container in the pod.
    #[arg(short = 't', long)]
    tty: bool,
    /// If true, wait for the Pod to start running, and then attach to it as if 'kubectl attach ...' were called.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    attach: Option<bool>,
    /// If true, delete the pod after it exits. Only valid when attaching to the container.
    #[arg(long)]
    rm: bool,
    /// If true, suppress prompt messages.
    #[arg(short = 'q', long)]
    quiet: bool,
    /// The length of time (like 5s, 2m, or 3h, higher than zero) to wait until at least one pod is running.
    #[arg(long, default_value = "1m0s")]
    pod_running_timeout: String,
    #[command(flatten)]
    common: Common,
}

fn key_values(s: &str, what: &str) -> Result<Map<String, Value>> {
    let mut m = Map::new();
    for kv in s.split(',').filter(|x| !x.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| msg(format!("invalid {what} spec: {kv}")))?;
        m.insert(k.to_owned(), json!(v));
    }
    Ok(m)
}

pub async fn run(session: &Session, a: RunArgs) -> Result<i32> {
    // kubectl's checks, in its order and words.
    let attach = a.attach.unwrap_or(a.stdin);
    let usage = |m: &str| Error::Raw(format!("error: {m}\nSee 'kubectl run -h' for help and examples"));
    if a.stdin && a.common.dry_run()? != DryRun::None {
        return Err(usage(
            "--dry-run=[server|client] can't be used with attached containers options (--attach, --stdin, or --tty)",
        ));
    }
    if a.tty && !a.stdin {
        return Err(usage("-i/--stdin is required for containers with -t/--tty=true"));
    }
    if a.rm && !attach {
        return Err(usage("--rm should only be used for attached containers"));
    }
    if !matches!(a.restart.as_str(), "Always" | "OnFailure" | "Never") {
        return Err(msg(format!("invalid restart policy: {}", a.restart)));
    }
    if a.expose && a.port.is_none() {
        return Err(msg("--port must be set when exposing a service"));
    }
    let dry = a.common.dry_run()?;
    let output = Output::parse(a.common.output.as_deref())?;
    let labels = match &a.labels {
        Some(l) => key_values(l, "label")?,
        None => {
            let mut m = Map::new();
            m.insert("run".into(), json!(a.name));
            m
        }
    };
    let mut container = json!({"name": a.name, "image": a.image, "resources": {}});
    if !a.args.is_empty() {
        container[if a.command { "command" } else { "args" }] = json!(a.args);
    }
    if !a.env.is_empty() {
        let env: Vec<Value> = a
            .env
            .iter()
            .map(|e| {
                let (k, v) = e.split_once('=').unwrap_or((e, ""));
                json!({"name": k, "value": v})
            })
            .collect();
        container["env"] = json!(env);
    }
    if let Some(p) = &a.image_pull_policy {
        container["imagePullPolicy"] = json!(p);
    }
    if a.stdin {
        container["stdin"] = json!(true);
        if attach {
            container["stdinOnce"] = json!(true);
        }
    }
    if a.tty {
        container["tty"] = json!(true);
    }
    let port: Option<i64> = match &a.port {
        Some(p) => Some(p.parse().map_err(|_| msg(format!("invalid port: {p}")))?),
        None => None,
    };
    if let Some(p) = port {
        container["ports"] = json!([{"containerPort": p}]);
    }
    let mut metadata = json!({"name": a.name, "creationTimestamp": null, "labels": labels});
    if let Some(ns) = &session.flags.namespace {
        metadata["namespace"] = json!(ns);
    }
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": metadata,
        "spec": {"containers": [container], "restartPolicy": a.restart, "dnsPolicy": "ClusterFirst"},
        "status": {}
    });
    if let Some(o) = &a.overrides {
        let patch: Value = serde_json::from_str(o).map_err(|e| msg(format!("invalid --overrides: {e}")))?;
        merge_patch(&mut pod, &patch);
    }
    if a.expose {
        let p = port.unwrap_or_default();
        // The Service carries only the labels `--labels` names; its selector is the pod's.
        let mut service = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": a.name, "creationTimestamp": null},
            "spec": {"ports": [{"port": p, "protocol": "TCP", "targetPort": p}], "selector": labels},
            "status": {"loadBalancer": {}}
        });
        if a.labels.is_some() {
            service["metadata"]["labels"] = json!(labels);
        }
        send(session, service, dry, &output, "kubectl-run", "created").await?;
        if output == Output::Yaml {
            // kubectl 1.33 separates the two documents so.
            out("---\n---\n");
        }
    }
    if !attach {
        send(session, pod, dry, &output, "kubectl-run", "created").await?;
        return Ok(0);
    }
    // Attached: created without a word, joined once it runs, its exit code returned, and with
    // --rm deleted (with the Service) at the end, as kubectl does.
    let r = resource_of(session, &pod).await?;
    let ns = target_namespace(session, &r, &mut pod)?;
    let created = post(session, &r, ns.as_deref(), pod, "kubectl-run", dry).await?;
    let result = attached(session, &a, &created).await;
    if a.rm {
        let ns = &session.conn.namespace;
        let mut gone = vec![("pods", "pod")];
        if a.expose {
            gone.insert(0, ("services", "service"));
        }
        for (plural, kind) in gone {
            let uri = format!("/api/v1/namespaces/{ns}/{plural}/{}", a.name);
            match session
                .conn
                .rest
                .json(http::Method::DELETE, &uri, crate::rest::JSON, None)
                .await
            {
                Ok(_) => out(&format!("{kind} \"{}\" deleted\n", a.name)),
                Err(e) => eprintln!("{e}"),
            }
        }
    }
    result
}

/// The attached part of `kubectl run`: wait for the pod to run, attach (or show the log of a
/// pod already done), then for restart policies that end, wait for the end and answer with
/// the container's exit code.
async fn attached(session: &Session, a: &RunArgs, created: &Value) -> Result<i32> {
    let timeout = crate::modify::parse_duration(&a.pod_running_timeout)?
        .filter(|d| !d.is_zero())
        .ok_or_else(|| msg("--pod-running-timeout must be higher than zero"))?;
    let ns = session.conn.namespace.clone();
    let name = created["metadata"]["name"].as_str().unwrap_or(&a.name).to_owned();
    let uri = format!("/api/v1/namespaces/{ns}/pods/{name}");
    let running_or_done = |p: &Value| {
        let ready = p["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
        matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
            || (p["status"]["phase"] == "Running" && ready)
    };
    let pod = wait_pod(session, &uri, timeout, running_or_done).await?;
    let container = created["spec"]["containers"][0]["name"]
        .as_str()
        .unwrap_or(&a.name)
        .to_owned();
    let code = crate::exec::attach_new_pod(session, &pod, &container, a.stdin, a.tty, a.quiet).await?;
    let ends = a.restart == "Never" || a.restart == "OnFailure";
    if !ends {
        return Ok(code);
    }
    let done = |p: &Value| match a.restart.as_str() {
        "OnFailure" => p["status"]["phase"] == "Succeeded",
        _ => matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")),
    };
    let pod = wait_pod(session, &uri, timeout, done).await?;
    match pod["status"]["phase"].as_str().unwrap_or("") {
        "Succeeded" => Ok(0),
        "Failed" => {
            let terminated = &pod["status"]["containerStatuses"][0]["state"]["terminated"];
            let rc = terminated["exitCode"].as_i64().unwrap_or(0);
            if rc == 0 {
                return Err(msg(format!("pod {ns}/{name} failed with unknown exit code")));
            }
            let mut text = format!(
                "pod {ns}/{name} terminated ({})\n{}",
                terminated["reason"].as_str().unwrap_or(""),
                terminated["message"].as_str().unwrap_or("")
            );
            if !text.ends_with('\n') {
                text.push('\n');
            }
            eprint!("{text}");
            Ok(rc as i32)
        }
        phase => Err(msg(format!("pod {ns}/{name} left in phase {phase}"))),
    }
}

/// Poll the pod until `ready` holds (kubectl watches; a poll every 200 ms shows the same).
async fn wait_pod(
    session: &Session,
    uri: &str,
    timeout: std::time::Duration,
    ready: impl Fn(&Value) -> bool,
) -> Result<Value> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let pod = session.conn.rest.get(uri).await?;
        if ready(&pod) {
            return Ok(pod);
        }
        if std::time::Instant::now() >= deadline {
            return Err(msg("timed out waiting for the condition"));
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// RFC 7386 merge of `patch` into `target` (`--overrides`).
fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = json!({});
            }
            for (k, v) in p {
                if v.is_null() {
                    if let Some(t) = target.as_object_mut() {
                        t.remove(k);
                    }
                } else {
                    merge_patch(&mut target[k], v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

async fn send(
    session: &Session,
    mut obj: Value,
    dry: DryRun,
    output: &Output,
    manager: &str,
    verb: &str,
) -> Result<Value> {
    let r = resource_of(session, &obj).await?;
    let ns = target_namespace(session, &r, &mut obj)?;
    let result = post(session, &r, ns.as_deref(), obj, manager, dry).await?;
    crate::create::print_typed_result(&r, &result, output, verb, dry)?;
    Ok(result)
}

#[derive(clap::Args)]
pub struct ExposeArgs {
    /// TYPE NAME or TYPE/NAME of the object to expose.
    args: Vec<String>,
    /// The port that the service should serve on.
    #[arg(long)]
    port: Option<String>,
    /// Name or number for the port on the container that the service should direct traffic to.
    #[arg(long)]
    target_port: Option<String>,
    /// The network protocol for the service to be created.
    #[arg(long)]
    protocol: Option<String>,
    /// Type for this service: ClusterIP, NodePort, LoadBalancer, or ExternalName.
    #[arg(long = "type")]
    service_type: Option<String>,
    /// The name for the newly created object.
    #[arg(long)]
    name: Option<String>,
    /// A label selector to use for this service.
    #[arg(long)]
    selector: Option<String>,
    /// Labels to apply to the service created by this call.
    #[arg(short = 'l', long)]
    labels: Option<String>,
    /// Additional external IP address (not managed by Kubernetes) to accept for the service.
    #[arg(long)]
    external_ip: Option<String>,
    /// ClusterIP to be assigned to the service. Leave empty to auto-allocate, or set to 'None' to create a headless service.
    #[arg(long)]
    cluster_ip: Option<String>,
    #[command(flatten)]
    common: Common,
}

pub async fn expose(session: &Session, a: ExposeArgs) -> Result<i32> {
    let dry = a.common.dry_run()?;
    let output = Output::parse(a.common.output.as_deref())?;
    let reqs = crate::get::requests(session, &a.args).await?;
    let Some(req) = reqs.first() else {
        return Err(msg(
            "You must provide one or more resources by argument or filename.",
        ));
    };
    let Some(name) = req.names.first() else {
        return Err(msg("resource(s) were provided, but no name was specified"));
    };
    let r = &req.resource;
    let ns = r.namespaced.then(|| session.conn.namespace.clone());
    let obj = session
        .conn
        .rest
        .get(&format!("{}/{name}", r.collection_path(ns.as_deref())))
        .await?;
    let kind = r.kind.as_str();
    let selector: Map<String, Value> = match &a.selector {
        Some(s) => key_values(s, "selector")?,
        None => match kind {
            "Pod" => obj["metadata"]["labels"].as_object().cloned().unwrap_or_default(),
            "Service" | "ReplicationController" => {
                obj["spec"]["selector"].as_object().cloned().unwrap_or_default()
            }
            "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet" => {
                if obj["spec"]["selector"]["matchExpressions"]
                    .as_array()
                    .is_some_and(|e| !e.is_empty())
                {
                    return Err(msg(format!(
                        "couldn't retrieve selectors via --selector flag or introspection: {kind} has matchExpressions, which cannot be a Service's selector"
                    )));
                }
                obj["spec"]["selector"]["matchLabels"]
                    .as_object()
                    .cloned()
                    .unwrap_or_default()
            }
            _ => return Err(msg(format!("cannot expose a {kind}"))),
        },
    };
    let protocol = a.protocol.clone().unwrap_or_else(|| "TCP".into());
    let ports: Vec<Value> = match &a.port {
        Some(p) => {
            let port: i64 = p.parse().map_err(|_| msg(format!("invalid port: {p}")))?;
            let target = match &a.target_port {
                Some(t) => t.parse::<i64>().map(|n| json!(n)).unwrap_or_else(|_| json!(t)),
                None => json!(port),
            };
            vec![json!({"port": port, "protocol": protocol, "targetPort": target})]
        }
        None => {
            let found = object_ports(&obj, kind);
            if found.is_empty() {
                return Err(msg("couldn't find port via --port flag or introspection"));
            }
            let many = found.len() > 1;
            found
                .into_iter()
                .enumerate()
                .map(|(i, (port, proto))| {
                    let mut p = json!({"port": port, "protocol": proto, "targetPort": port});
                    if let Some(t) = &a.target_port {
                        p["targetPort"] = t.parse::<i64>().map(|n| json!(n)).unwrap_or_else(|_| json!(t));
                    }
                    if many {
                        p["name"] = json!(format!("port-{}", i + 1));
                    }
                    p
                })
                .collect()
        }
    };
    let service_name = a.name.clone().unwrap_or_else(|| name.clone());
    let labels = match &a.labels {
        Some(l) => Value::Object(key_values(l, "label")?),
        None => obj["metadata"]["labels"].clone(),
    };
    let mut metadata = json!({"name": service_name, "creationTimestamp": null});
    if labels.as_object().is_some_and(|m| !m.is_empty()) {
        metadata["labels"] = labels;
    }
    let mut spec = json!({"ports": ports, "selector": selector});
    if let Some(t) = &a.service_type {
        spec["type"] = json!(t);
    }
    if let Some(ip) = &a.external_ip {
        spec["externalIPs"] = json!([ip]);
    }
    if let Some(ip) = &a.cluster_ip {
        spec["clusterIP"] = json!(ip);
    }
    let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": spec, "status": {"loadBalancer": {}}});
    send(session, service, dry, &output, "kubectl-expose", "exposed").await?;
    Ok(0)
}

/// The ports an object's pods declare (a Service's own ports), with their protocols.
fn object_ports(obj: &Value, kind: &str) -> Vec<(i64, String)> {
    if kind == "Service" {
        return obj["spec"]["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| {
                Some((
                    p["port"].as_i64()?,
                    p["protocol"].as_str().unwrap_or("TCP").to_owned(),
                ))
            })
            .collect();
    }
    let spec = if kind == "Pod" {
        &obj["spec"]
    } else {
        &obj["spec"]["template"]["spec"]
    };
    spec["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["ports"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| {
            Some((
                p["containerPort"].as_i64()?,
                p["protocol"].as_str().unwrap_or("TCP").to_owned(),
            ))
        })
        .collect()
}
