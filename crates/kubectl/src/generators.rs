//! The rest of `kubectl create`'s generators — job, cronjob, service (clusterip, nodeport,
//! loadbalancer, externalname), role, clusterrole, rolebinding, clusterrolebinding, quota,
//! priorityclass, poddisruptionbudget — building the objects field for field as kubectl's do,
//! and `create token` (a TokenRequest).

use http::Method;
use serde_json::{json, Map, Value};

use crate::error::{msg, Result};
use crate::rest::JSON;
use crate::{out, Session};

#[derive(clap::Args)]
pub struct JobArgs {
    pub name: String,
    /// Command (after --) for the container.
    #[arg(last = true)]
    command: Vec<String>,
    /// Image name to run.
    #[arg(long)]
    image: Option<String>,
    /// The name of the resource to create a Job from (only cronjob is supported).
    #[arg(long)]
    from: Option<String>,
}

#[derive(clap::Args)]
pub struct CronJobArgs {
    pub name: String,
    #[arg(last = true)]
    command: Vec<String>,
    /// Image name to run.
    #[arg(long, required = true)]
    image: String,
    /// A schedule in the Cron format the job should be run with.
    #[arg(long, required = true)]
    schedule: String,
    /// job's restart policy. supported values: OnFailure, Never
    #[arg(long)]
    restart: Option<String>,
}

fn pod_spec(name: &str, image: &str, command: &[String], restart: &str) -> Value {
    let mut c = json!({"name": name, "image": image, "resources": {}});
    if !command.is_empty() {
        c["command"] = json!(command);
    }
    json!({"containers": [c], "restartPolicy": restart})
}

pub fn job(meta: Value, a: &JobArgs) -> Value {
    let image = a.image.clone().unwrap_or_default();
    json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
        "spec": {"template": {"metadata": {"creationTimestamp": null},
            "spec": pod_spec(&a.name, &image, &a.command, "Never")}},
        "status": {}
    })
}

pub fn cronjob(meta: Value, a: &CronJobArgs) -> Value {
    let restart = a.restart.clone().unwrap_or_else(|| "OnFailure".into());
    json!({
        "apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta,
        "spec": {
            "schedule": a.schedule,
            "jobTemplate": {
                "metadata": {"name": a.name, "creationTimestamp": null},
                "spec": {"template": {"metadata": {"creationTimestamp": null},
                    "spec": pod_spec(&a.name, &a.image, &a.command, &restart)}}
            }
        },
        "status": {}
    })
}

#[derive(clap::Subcommand)]
pub enum ServiceKind {
    /// Create a ClusterIP service.
    Clusterip(ServiceArgs),
    /// Create a NodePort service.
    Nodeport(ServiceArgs),
    /// Create a LoadBalancer service.
    Loadbalancer(ServiceArgs),
    /// Create an ExternalName service.
    Externalname(ServiceArgs),
}

#[derive(clap::Args)]
pub struct ServiceArgs {
    name: String,
    /// Port pairs can be specified as '<port>:<targetPort>'.
    #[arg(long, value_delimiter = ',')]
    tcp: Vec<String>,
    /// Assign your own ClusterIP or set to 'None' for a 'headless' service (no loadbalancing).
    #[arg(long)]
    clusterip: Option<String>,
    /// Port used to expose the service on each node in a cluster.
    #[arg(long)]
    node_port: Option<i64>,
    /// External name of service.
    #[arg(long)]
    external_name: Option<String>,
}

pub fn service(kind: &ServiceKind, meta: impl Fn(&str) -> Value) -> Result<Value> {
    let (a, type_) = match kind {
        ServiceKind::Clusterip(a) => (a, "ClusterIP"),
        ServiceKind::Nodeport(a) => (a, "NodePort"),
        ServiceKind::Loadbalancer(a) => (a, "LoadBalancer"),
        ServiceKind::Externalname(a) => (a, "ExternalName"),
    };
    if type_ == "ExternalName" && a.external_name.is_none() {
        return Err(msg("external name must be specified"));
    }
    if type_ != "ExternalName" && a.tcp.is_empty() && a.clusterip.as_deref() != Some("None") {
        return Err(msg("at least one tcp port specifier must be provided"));
    }
    let mut ports = Vec::new();
    for spec in &a.tcp {
        let (port, target) = spec.split_once(':').unwrap_or((spec, spec));
        let p: i64 = port.parse().map_err(|_| msg(format!("invalid port: {port}")))?;
        let t = target
            .parse::<i64>()
            .map(|n| json!(n))
            .unwrap_or_else(|_| json!(target));
        let name = if port == target {
            port.to_owned()
        } else {
            format!("{port}-{target}")
        };
        let mut entry = json!({"name": name, "protocol": "TCP", "port": p, "targetPort": t});
        if let Some(np) = a.node_port.filter(|_| type_ == "NodePort") {
            entry["nodePort"] = json!(np);
        }
        ports.push(entry);
    }
    let mut m = meta(&a.name);
    m["labels"] = json!({"app": a.name});
    let mut spec = json!({"selector": {"app": a.name}, "type": type_});
    if !ports.is_empty() {
        spec["ports"] = json!(ports);
    }
    if let Some(ip) = &a.clusterip {
        spec["clusterIP"] = json!(ip);
    }
    if let Some(n) = &a.external_name {
        spec["externalName"] = json!(n);
    }
    Ok(
        json!({"apiVersion": "v1", "kind": "Service", "metadata": m, "spec": spec, "status": {"loadBalancer": {}}}),
    )
}

#[derive(clap::Args)]
pub struct RoleArgs {
    pub name: String,
    /// Verb that applies to the resources contained in the rule.
    #[arg(long, value_delimiter = ',')]
    verb: Vec<String>,
    /// Resource that the rule applies to.
    #[arg(long, value_delimiter = ',')]
    resource: Vec<String>,
    /// Resource in the white list that the rule applies to, repeat this flag for multiple items.
    #[arg(long, value_delimiter = ',')]
    resource_name: Vec<String>,
    /// A partial url that user should have access to (ClusterRole only).
    #[arg(long, value_delimiter = ',')]
    non_resource_url: Vec<String>,
}

pub async fn role(session: &Session, meta: Value, a: &RoleArgs, kind: &str) -> Result<Value> {
    if a.verb.is_empty() {
        return Err(msg("at least one verb must be specified"));
    }
    if a.resource.is_empty() && a.non_resource_url.is_empty() {
        return Err(msg("at least one resource must be specified"));
    }
    // Resources grouped by API group, groups in order.
    let mut groups: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for r in &a.resource {
        let (base, sub) = match r.split_once('/') {
            Some((b, s)) => (b, Some(s)),
            None => (r.as_str(), None),
        };
        let (group, name) = if base == "*" {
            (String::new(), "*".to_owned())
        } else {
            // kubectl prints this one without its "error: " prefix.
            let res = session.resource(base).await.map_err(|_| {
                crate::error::Error::Raw(format!("the server doesn't have a resource type \"{base}\""))
            })?;
            (res.group, res.name)
        };
        let full = match sub {
            Some(s) => format!("{name}/{s}"),
            None => name,
        };
        groups.entry(group).or_default().push(full);
    }
    let mut rules = Vec::new();
    for (group, resources) in groups {
        let mut rule = json!({"verbs": a.verb, "apiGroups": [group], "resources": resources});
        if !a.resource_name.is_empty() {
            rule["resourceNames"] = json!(a.resource_name);
        }
        rules.push(rule);
    }
    if !a.non_resource_url.is_empty() {
        rules.push(json!({"verbs": a.verb, "nonResourceURLs": a.non_resource_url}));
    }
    Ok(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta, "rules": rules}))
}

#[derive(clap::Args)]
pub struct BindingArgs {
    pub name: String,
    /// Role this RoleBinding should reference.
    #[arg(long)]
    role: Option<String>,
    /// ClusterRole this binding should reference.
    #[arg(long)]
    clusterrole: Option<String>,
    /// Usernames to bind to the role (`--user`: kubectl's flag here shadows the global one;
    /// the command line is rewritten before parsing, see `lib::binding_subject_flags`).
    #[arg(
        id = "subject_user",
        long = "subject-user",
        value_name = "USER",
        value_delimiter = ','
    )]
    user: Vec<String>,
    /// Groups to bind to the role.
    #[arg(long, value_delimiter = ',')]
    group: Vec<String>,
    /// Service accounts to bind to the role, in the format <namespace>:<name>.
    #[arg(long, value_delimiter = ',')]
    serviceaccount: Vec<String>,
}

pub fn binding(meta: Value, a: &BindingArgs, kind: &str) -> Result<Value> {
    let role_ref = match (&a.role, &a.clusterrole) {
        (Some(r), None) if kind == "RoleBinding" => {
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": r})
        }
        (None, Some(r)) => json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": r}),
        (Some(_), Some(_)) => return Err(msg("exactly one of clusterrole or role must be specified")),
        _ if kind == "RoleBinding" => {
            return Err(msg("exactly one of clusterrole or role must be specified"))
        }
        _ => return Err(msg("clusterrole must be specified")),
    };
    let mut subjects = Vec::new();
    for u in &a.user {
        subjects.push(json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": u}));
    }
    for g in &a.group {
        subjects.push(json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g}));
    }
    for sa in &a.serviceaccount {
        let Some((ns, name)) = sa.split_once(':') else {
            return Err(msg("serviceaccount must be <namespace>:<name>"));
        };
        subjects.push(json!({"kind": "ServiceAccount", "namespace": ns, "name": name}));
    }
    let mut b = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta, "roleRef": role_ref});
    if !subjects.is_empty() {
        b["subjects"] = json!(subjects);
    }
    Ok(b)
}

#[derive(clap::Args)]
pub struct QuotaArgs {
    pub name: String,
    /// A comma-delimited set of resource=quantity pairs that define a hard limit.
    #[arg(long)]
    hard: Option<String>,
    /// A comma-delimited set of quota scopes that must all match each object tracked by the quota.
    #[arg(long)]
    scopes: Option<String>,
}

pub fn quota(meta: Value, a: &QuotaArgs) -> Result<Value> {
    let mut hard = Map::new();
    for kv in a
        .hard
        .as_deref()
        .unwrap_or("")
        .split(',')
        .filter(|x| !x.is_empty())
    {
        let (k, v) = kv.split_once('=').ok_or_else(|| {
            msg(format!(
                "invalid argument syntax {kv}, expected <resource>=<value>"
            ))
        })?;
        hard.insert(k.to_owned(), json!(v));
    }
    let mut spec = json!({});
    if !hard.is_empty() {
        spec["hard"] = Value::Object(hard);
    }
    if let Some(s) = &a.scopes {
        spec["scopes"] = json!(s.split(',').collect::<Vec<_>>());
    }
    Ok(json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": meta, "spec": spec, "status": {}}))
}

#[derive(clap::Args)]
pub struct PriorityClassArgs {
    pub name: String,
    /// the value of this priority class.
    #[arg(long, default_value_t = 0)]
    value: i64,
    /// description is an arbitrary string that usually provides guidelines on when this priority class should be used.
    #[arg(long)]
    description: Option<String>,
    /// global-default specifies whether this PriorityClass should be considered as the default priority.
    #[arg(long)]
    global_default: bool,
    /// preemption-policy is the policy for preempting pods with lower priority.
    #[arg(long, default_value = "PreemptLowerPriority")]
    preemption_policy: String,
}

pub fn priority_class(meta: Value, a: &PriorityClassArgs) -> Value {
    let mut pc = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": meta,
        "value": a.value, "preemptionPolicy": a.preemption_policy});
    if let Some(d) = &a.description {
        pc["description"] = json!(d);
    }
    if a.global_default {
        pc["globalDefault"] = json!(true);
    }
    pc
}

#[derive(clap::Args)]
pub struct PdbArgs {
    pub name: String,
    /// A label selector to use for this budget.
    #[arg(long)]
    selector: Option<String>,
    /// The minimum number or percentage of available pods this budget requires.
    #[arg(long)]
    min_available: Option<String>,
    /// The maximum number or percentage of unavailable pods this budget requires.
    #[arg(long)]
    max_unavailable: Option<String>,
}

pub fn pdb(meta: Value, a: &PdbArgs) -> Result<Value> {
    let Some(sel) = &a.selector else {
        return Err(msg("a selector must be specified"));
    };
    let mut labels = Map::new();
    for kv in sel.split(',').filter(|x| !x.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| msg(format!("unable to parse selector {sel}")))?;
        labels.insert(k.to_owned(), json!(v));
    }
    let amount = |s: &str| s.parse::<i64>().map(|n| json!(n)).unwrap_or_else(|_| json!(s));
    let mut spec = json!({"selector": {"matchLabels": labels}});
    match (&a.min_available, &a.max_unavailable) {
        (Some(m), None) => spec["minAvailable"] = amount(m),
        (None, Some(m)) => spec["maxUnavailable"] = amount(m),
        _ => return Err(msg("one of min-available or max-unavailable must be specified")),
    }
    Ok(
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta, "spec": spec,
        "status": {"currentHealthy": 0, "desiredHealthy": 0, "disruptionsAllowed": 0, "expectedPods": 0}}),
    )
}

#[derive(clap::Args)]
pub struct TokenArgs {
    /// The service account.
    name: String,
    /// Audience of the requested token.
    #[arg(long)]
    audience: Vec<String>,
    /// Requested lifetime of the issued token.
    #[arg(long)]
    duration: Option<String>,
    /// Kind of an object to bind the token to (Pod, Secret, Node).
    #[arg(long)]
    bound_object_kind: Option<String>,
    /// Name of an object to bind the token to.
    #[arg(long)]
    bound_object_name: Option<String>,
}

pub async fn token(session: &Session, a: &TokenArgs) -> Result<i32> {
    let mut spec = json!({"audiences": a.audience});
    if let Some(d) = &a.duration {
        let secs = crate::modify::parse_duration(d)?
            .map(|d| d.as_secs())
            .unwrap_or(0);
        spec["expirationSeconds"] = json!(secs);
    }
    if let (Some(kind), Some(name)) = (&a.bound_object_kind, &a.bound_object_name) {
        let api_version = if kind == "Node" || kind == "Pod" || kind == "Secret" {
            "v1"
        } else {
            ""
        };
        spec["boundObjectRef"] = json!({"kind": kind, "apiVersion": api_version, "name": name});
    }
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec});
    let uri = format!(
        "/api/v1/namespaces/{}/serviceaccounts/{}/token",
        session.conn.namespace, a.name
    );
    let v = session
        .conn
        .rest
        .json(
            Method::POST,
            &uri,
            JSON,
            Some((JSON, serde_json::to_vec(&body).unwrap_or_default())),
        )
        .await?;
    out(&format!("{}\n", v["status"]["token"].as_str().unwrap_or("")));
    Ok(0)
}

#[derive(clap::Args)]
pub struct AutoscaleArgs {
    /// TYPE NAME or TYPE/NAME of the object to autoscale.
    args: Vec<String>,
    /// The lower limit for the number of pods that can be set by the autoscaler.
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    min: i64,
    /// The upper limit for the number of pods that can be set by the autoscaler. Required.
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    max: i64,
    /// The target average CPU utilization (represented as a percent of requested CPU) over all the pods.
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    cpu_percent: i64,
    /// The name for the newly created object.
    #[arg(long)]
    name: Option<String>,
    #[command(flatten)]
    common: crate::create::Common,
}

/// `kubectl autoscale`: an autoscaling/v2 HorizontalPodAutoscaler for a scalable object.
pub async fn autoscale(session: &Session, a: AutoscaleArgs) -> Result<i32> {
    if a.max < 1 {
        return Err(msg("--max=MAXPODS is required and must be at least 1, max: -1"));
    }
    if a.min > a.max {
        return Err(msg(format!(
            "--max=MAXPODS must be larger or equal to --min=MINPODS, max: {}, min: {}",
            a.max, a.min
        )));
    }
    let dry = a.common.dry_run()?;
    let output = crate::Output::parse(a.common.output.as_deref())?;
    let reqs = crate::get::requests(session, &a.args).await?;
    let (Some(req), true) = (reqs.first(), reqs.len() == 1) else {
        return Err(msg("you must specify exactly one resource to autoscale"));
    };
    let Some(target) = req.names.first() else {
        return Err(msg("resource(s) were provided, but no name was specified"));
    };
    let r = &req.resource;
    let ns = r.namespaced.then(|| session.conn.namespace.clone());
    // The object must exist and be scalable.
    session
        .conn
        .rest
        .get(&format!("{}/{target}/scale", r.collection_path(ns.as_deref())))
        .await?;
    let name = a.name.clone().unwrap_or_else(|| target.clone());
    let mut meta = json!({"name": name, "creationTimestamp": null});
    if let Some(n) = &session.flags.namespace {
        meta["namespace"] = json!(n);
    }
    let mut spec = json!({
        "scaleTargetRef": {"apiVersion": r.api_version(), "kind": r.kind, "name": target},
        "maxReplicas": a.max,
    });
    if a.min >= 0 {
        spec["minReplicas"] = json!(a.min);
    }
    if a.cpu_percent >= 0 {
        spec["metrics"] = json!([{"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": a.cpu_percent}}}]);
    }
    let hpa = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": meta,
        "spec": spec, "status": {"currentMetrics": null, "desiredReplicas": 0}});
    let hr = session
        .resource_for_kind("autoscaling/v2", "HorizontalPodAutoscaler")
        .await?;
    let ns = session.conn.namespace.clone();
    let result = crate::create::post(session, &hr, Some(&ns), hpa, "kubectl-autoscale", dry).await?;
    crate::create::print_typed_result(&hr, &result, &output, "autoscaled", dry)?;
    Ok(0)
}

#[derive(clap::Args)]
pub struct IngressArgs {
    pub name: String,
    /// Ingress Class to be used
    #[arg(long)]
    class: Option<String>,
    /// Rule in format host/path=service:port[,tls=secretname]. Paths containing the leading
    /// character '*' are considered pathType=Prefix. tls argument is optional.
    #[arg(long)]
    rule: Vec<String>,
    /// Default service for backend, in format of svcname:port
    #[arg(long)]
    default_backend: Option<String>,
    /// Annotation to insert in the ingress object, in the format annotation=value
    #[arg(long)]
    annotation: Vec<String>,
}

/// `[\w-]+` (Go's `\w`: ASCII letters, digits, underscore).
fn word(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// kubectl's rule format, `host/path=svcname:svcport[,tls[=secret]]` (its regular
/// expression, matched by hand: the path may hold `=`, so every split is tried).
fn valid_rule(rule: &str) -> bool {
    let Some(slash) = rule.find('/') else {
        return false;
    };
    let host = &rule[..slash];
    if !host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"_*-.".contains(&b))
    {
        return false;
    }
    rule.match_indices('=').filter(|(i, _)| *i > slash).any(|(i, _)| {
        let rest = &rule[i + 1..];
        let (backend, tls) = match rest.split_once(",tls") {
            Some((b, t)) => (b, Some(t)),
            None => (rest, None),
        };
        let backend_ok = backend
            .split_once(':')
            .is_some_and(|(svc, port)| word(svc) && word(port));
        let tls_ok = match tls {
            None => true,
            Some(t) => {
                let t = t.strip_prefix('=').unwrap_or(t);
                t.is_empty() || word(t)
            }
        };
        backend_ok && tls_ok
    })
}

/// A service backend from `name:port` (a number or a port name).
fn ingress_backend(service: &str) -> Value {
    let (name, port) = service.split_once(':').unwrap_or((service, ""));
    let port = match port.parse::<i32>() {
        Ok(n) => json!({"number": n}),
        Err(_) => json!({"name": port}),
    };
    json!({"service": {"name": name, "port": port}})
}

/// `kubectl create ingress` (upstream's `CreateIngressOptions`): one rule per host, paths
/// `Exact` unless they end in `*` (`Prefix`), TLS entries per secret with each host once.
pub fn ingress(mut meta: Value, a: &IngressArgs) -> Result<Value> {
    if a.default_backend.is_none() && a.rule.is_empty() {
        return Err(msg("not enough information provided: every ingress has to either specify a default-backend (which catches all traffic) or a list of rules (which catch specific paths)"));
    }
    for rule in &a.rule {
        if !valid_rule(rule) {
            return Err(msg(format!(
                "rule {rule} is invalid and should be in format host/path=svcname:svcport[,tls[=secret]]"
            )));
        }
    }
    let mut annotations = Map::new();
    for an in &a.annotation {
        let Some((k, v)) = an.split_once('=') else {
            return Err(msg(format!(
                "annotation {an} is invalid and should be in format key=[value]"
            )));
        };
        annotations.insert(k.to_owned(), json!(v));
    }
    if let Some(b) = &a.default_backend {
        if b.split(':').count() != 2 {
            return Err(msg("default-backend should be in format servicename:serviceport"));
        }
    }
    let mut spec = Map::new();
    if let Some(class) = a.class.as_deref().filter(|c| !c.is_empty()) {
        spec.insert("ingressClassName".into(), json!(class));
    }
    if let Some(b) = &a.default_backend {
        spec.insert("defaultBackend".into(), ingress_backend(b));
    }
    // TLS: "tls" anywhere in a rule (as kubectl splits it), each host once, hosts of one
    // secret together.
    let mut tls: Vec<Value> = Vec::new();
    let mut seen_hosts: Vec<String> = Vec::new();
    for rule in &a.rule {
        let parts: Vec<&str> = rule.split("tls").collect();
        if parts.len() != 2 {
            continue;
        }
        let host = rule.split('/').next().unwrap_or_default().to_string();
        let secret = parts[1].split('=').nth(1).unwrap_or_default().to_string();
        if seen_hosts.contains(&host) {
            continue;
        }
        if let Some(existing) = tls
            .iter_mut()
            .find(|t| t["secretName"].as_str().unwrap_or_default() == secret)
        {
            match existing["hosts"].as_array_mut() {
                Some(hosts) => hosts.push(json!(host)),
                None => existing["hosts"] = json!([host]),
            }
            seen_hosts.push(host);
            continue;
        }
        let mut entry = Map::new();
        if !host.is_empty() {
            entry.insert("hosts".into(), json!([host]));
        }
        if !secret.is_empty() {
            entry.insert("secretName".into(), json!(secret));
        }
        if !entry.is_empty() {
            tls.push(Value::Object(entry));
        }
        seen_hosts.push(host);
    }
    if !tls.is_empty() {
        spec.insert("tls".into(), Value::Array(tls));
    }
    let mut rules: Vec<Value> = Vec::new();
    for rule in &a.rule {
        let without_tls = rule.split(",tls").next().unwrap_or_default();
        let (host, rest) = without_tls.split_once('/').unwrap_or((without_tls, ""));
        let mut pieces = rest.split('=');
        let mut path = format!("/{}", pieces.next().unwrap_or_default());
        let service = pieces.next().unwrap_or_default();
        let mut path_type = "Exact";
        if path.ends_with('*') {
            path_type = "Prefix";
            path.pop();
        }
        let entry = json!({"path": path, "pathType": path_type, "backend": ingress_backend(service)});
        match rules
            .iter_mut()
            .find(|r| r["host"].as_str().unwrap_or_default() == host)
        {
            Some(r) => {
                if let Some(paths) = r["http"]["paths"].as_array_mut() {
                    paths.push(entry);
                }
            }
            None => {
                let mut r = json!({"http": {"paths": [entry]}});
                if !host.is_empty() {
                    r["host"] = json!(host);
                }
                rules.push(r);
            }
        }
    }
    if !rules.is_empty() {
        spec.insert("rules".into(), Value::Array(rules));
    }
    if !annotations.is_empty() {
        meta["annotations"] = Value::Object(annotations);
    }
    Ok(
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta,
              "spec": spec, "status": {"loadBalancer": {}}}),
    )
}

#[cfg(test)]
mod ingress_tests {
    use super::*;

    #[test]
    fn rules_are_checked_as_kubectl_checks_them() {
        for ok in [
            "foo.com/bar=svc:8080",
            "/path=svc:http",
            "*.a.io/x*=s:80,tls",
            "h/p=s:80,tls=my-cert",
            "h/a=b=s:80",
        ] {
            assert!(valid_rule(ok), "{ok}");
        }
        for bad in [
            "foo.com=svc:80",
            "h/p=svc",
            "h/p=svc:80,tls=a.b",
            "ho st/p=s:80",
            "h/p=s:80:90",
        ] {
            assert!(!valid_rule(bad), "{bad}");
        }
    }
}
