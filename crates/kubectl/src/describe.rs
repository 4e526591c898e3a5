//! `kubectl describe`: kubectl's describers for pods, deployments, replica sets, services,
//! namespaces, config maps, secrets and service accounts, laid out as kubectl lays them out
//! (labelled lines indented two spaces a level, then Go's tabwriter with padding 2), with the
//! object's events. Several objects are separated by two blank lines.

use http::Method;
use serde_json::Value;

use crate::discovery::Resource;
use crate::error::{msg, Error, Result};
use crate::get::{encode, requests};
use crate::printers::table::tabwrite_with;
use crate::{out, Session};

#[derive(clap::Args)]
pub struct DescribeArgs {
    /// TYPE [NAME_PREFIX] or TYPE/NAME.
    args: Vec<String>,
    /// Selector (label query) to filter on.
    #[arg(short = 'l', long)]
    selector: Option<String>,
    /// If present, list the requested object(s) across all namespaces.
    #[arg(short = 'A', long)]
    all_namespaces: bool,
    /// If true, display events related to the described object.
    #[arg(long, default_value = "true", num_args = 0..=1, default_missing_value = "true")]
    show_events: String,
}

/// kubectl's PrefixWriter: `level` steps of two spaces before each write.
#[derive(Default)]
pub(crate) struct W(String);

pub(crate) type Writer = W;

impl W {
    /// What was written, tabs and all (before any tabwriter).
    pub(crate) fn text(&self) -> &str {
        &self.0
    }
}

/// A pod template as `describe` writes it (`rollout history --revision` prints it raw).
pub(crate) fn write_pod_template(w: &mut W, t: &Value) {
    pod_template(w, t)
}

impl W {
    fn w(&mut self, level: usize, s: &str) {
        for _ in 0..level {
            self.0.push_str("  ");
        }
        self.0.push_str(s);
    }
}

pub async fn run(session: &Session, a: DescribeArgs) -> Result<i32> {
    if a.args.is_empty() {
        return Err(msg("You must specify the type of resource to describe. Use \"kubectl api-resources\" for a complete list of supported resources."));
    }
    let mut objects: Vec<(Resource, Value)> = Vec::new();
    let mut errors = Vec::new();
    for req in requests(session, &a.args).await? {
        let r = req.resource;
        let ns = (r.namespaced && !a.all_namespaces).then(|| session.conn.namespace.clone());
        let base = r.collection_path(ns.as_deref());
        let mut uri = format!("{base}?limit=500");
        if let Some(l) = &a.selector {
            uri.push_str(&format!("&labelSelector={}", encode(l)));
        }
        if req.names.is_empty() {
            let list = session.conn.rest.get(&uri).await?;
            for item in list["items"].as_array().cloned().unwrap_or_default() {
                objects.push((r.clone(), item));
            }
            continue;
        }
        for name in &req.names {
            match session.conn.rest.get(&format!("{base}/{name}")).await {
                Ok(o) => objects.push((r.clone(), o)),
                Err(Error::Api(e)) if e.is_not_found() => {
                    // kubectl describes every object whose name starts with the argument.
                    let list = session.conn.rest.get(&uri).await?;
                    let matching: Vec<Value> = list["items"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|o| {
                            o["metadata"]["name"]
                                .as_str()
                                .is_some_and(|n| n.starts_with(name.as_str()))
                        })
                        .cloned()
                        .collect();
                    if matching.is_empty() {
                        errors.push(Error::Api(e));
                    }
                    objects.extend(matching.into_iter().map(|o| (r.clone(), o)));
                }
                Err(e) => return Err(e),
            }
        }
    }
    let events = a.show_events != "false";
    let mut first = true;
    for (r, o) in &objects {
        let text = describe(session, r, o, events).await?;
        if !first {
            out("\n\n");
        }
        first = false;
        out(&text);
    }
    if objects.is_empty() && errors.is_empty() {
        let ns = &session.conn.namespace;
        if a.all_namespaces {
            eprintln!("No resources found");
        } else {
            eprintln!("No resources found in {ns} namespace.");
        }
    }
    for e in &errors {
        eprintln!("{e}");
    }
    Ok(i32::from(!errors.is_empty()))
}

async fn describe(session: &Session, r: &Resource, o: &Value, events: bool) -> Result<String> {
    let mut w = W(String::new());
    let meta = &o["metadata"];
    let name = s(&meta["name"]);
    let ns = s(&meta["namespace"]);
    match (r.group.as_str(), r.name.as_str()) {
        ("", "pods") => pod(&mut w, o),
        ("apps", "deployments") => deployment(session, &mut w, o).await?,
        ("apps", "replicasets") => replicaset(session, &mut w, o).await?,
        ("", "services") => service(session, &mut w, o).await?,
        ("batch", "jobs") => job(&mut w, o),
        ("batch", "cronjobs") => cronjob(&mut w, o),
        ("policy", "poddisruptionbudgets") => disruption_budget(&mut w, o),
        ("rbac.authorization.k8s.io", "roles" | "clusterroles") => {
            role(&mut w, o);
            return Ok(tabwrite_with(&w.0, 0, 2));
        }
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => {
            role_binding(&mut w, o);
            return Ok(tabwrite_with(&w.0, 0, 2));
        }
        ("", "nodes") => node(session, &mut w, o).await?,
        ("", "persistentvolumeclaims") => claim(session, &mut w, o).await?,
        ("", "endpoints") => endpoints_object(&mut w, o),
        ("networking.k8s.io", "ingresses") => ingress(session, &mut w, o).await?,
        ("apps", "statefulsets") => statefulset(session, &mut w, o).await?,
        ("apps", "daemonsets") => daemonset(session, &mut w, o).await?,
        ("", "namespaces") => {
            w.w(0, &format!("Name:\t{name}\n"));
            labels(&mut w, "Labels", &meta["labels"]);
            annotations(&mut w, "Annotations", &meta["annotations"]);
            w.w(0, &format!("Status:\t{}\n", s(&o["status"]["phase"])));
            w.w(0, "\nNo resource quota.\n");
            w.w(0, "\nNo LimitRange resource.\n");
            return Ok(tabwrite_with(&w.0, 0, 2));
        }
        ("", "configmaps") => {
            header(&mut w, o);
            w.w(0, "\nData\n====\n");
            for (k, v) in sorted(&o["data"]) {
                w.w(0, &format!("{k}:\n----\n"));
                w.w(0, &format!("{}\n", v.as_str().unwrap_or("")));
                w.w(0, "\n");
            }
            w.w(0, "\nBinaryData\n====\n");
            for (k, v) in sorted(&o["binaryData"]) {
                let len = v
                    .as_str()
                    .map(|b| b.len() / 4 * 3 - b.matches('=').count())
                    .unwrap_or(0);
                w.w(0, &format!("{k}: {len} bytes\n"));
            }
            w.w(0, "\n");
        }
        ("", "secrets") => {
            header(&mut w, o);
            w.w(0, &format!("\nType:\t{}\n", s(&o["type"])));
            w.w(0, "\nData\n====\n");
            for (k, v) in sorted(&o["data"]) {
                let b = v.as_str().unwrap_or("");
                let len = (b.len() / 4 * 3).saturating_sub(b.chars().rev().take_while(|&c| c == '=').count());
                w.w(0, &format!("{k}:\t{len} bytes\n"));
            }
            return Ok(tabwrite_with(&w.0, 0, 2));
        }
        ("", "serviceaccounts") => {
            header(&mut w, o);
            let names = |k: &str| -> String {
                let v: Vec<String> = o[k]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|x| x["name"].as_str().map(str::to_owned))
                    .collect();
                if v.is_empty() {
                    "<none>".into()
                } else {
                    v.join("\n\t")
                }
            };
            w.w(
                0,
                &format!("Image pull secrets:\t{}\n", names("imagePullSecrets")),
            );
            w.w(0, &format!("Mountable secrets:\t{}\n", names("secrets")));
            w.w(0, "Tokens:\t<none>\n");
        }
        // Everything else as kubectl's generic describer lays out what it has no describer
        // for (custom resources, leases, controller revisions, webhook configurations …).
        // (kubectl has its own layouts for a few more — HPAs, volumes and storage classes,
        // network policies, quotas; r8s shows those generically.)
        _ => {
            w.w(0, &format!("Name:\t{name}\n"));
            w.w(0, &format!("Namespace:\t{ns}\n"));
            labels(&mut w, "Labels", &meta["labels"]);
            annotations(&mut w, "Annotations", &meta["annotations"]);
            if let Some(content) = o.as_object() {
                unstructured(
                    &mut w,
                    0,
                    content,
                    "",
                    &[
                        ".metadata.managedFields",
                        ".metadata.name",
                        ".metadata.namespace",
                        ".metadata.labels",
                        ".metadata.annotations",
                    ],
                );
            }
        }
    }
    if events {
        describe_events(session, &mut w, o, &ns).await?;
    }
    Ok(tabwrite_with(&w.0, 0, 2))
}

/// kubectl's printUnstructuredContent: fields sorted, with smart labels; maps nested a level
/// deeper, list items (maps or values) a level deeper with no marker between them.
fn unstructured(
    w: &mut W,
    level: usize,
    content: &serde_json::Map<String, Value>,
    prefix: &str,
    skip: &[&str],
) {
    let mut fields: Vec<&String> = content.keys().collect();
    fields.sort();
    for field in fields {
        let path = format!("{prefix}.{field}");
        if skip.contains(&path.as_str()) {
            continue;
        }
        match &content[field] {
            Value::Object(m) => {
                w.w(level, &format!("{}:\n", smart_label(field)));
                unstructured(w, level + 1, m, &path, skip);
            }
            Value::Array(items) => {
                w.w(level, &format!("{}:\n", smart_label(field)));
                for item in items {
                    match item {
                        Value::Object(m) => unstructured(w, level + 1, m, &path, skip),
                        other => w.w(level + 1, &format!("{}\n", go_value(other))),
                    }
                }
            }
            other => w.w(level, &format!("{}:\t{}\n", smart_label(field), go_value(other))),
        }
    }
}

/// A JSON value as Go's `%v` prints what the unstructured decoder made of it.
fn go_value(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::String(s) => s.clone(),
        Value::Number(n) if n.is_f64() => crate::printers::yaml::go_format_g(n.as_f64().unwrap_or(0.0)),
        other => other.to_string(),
    }
}

/// kubectl's smartLabelFor: a camelCase field as capitalised words (`creationTimestamp` →
/// `Creation Timestamp`, common acronyms upper-cased: `apiVersion` → `API Version`); a field
/// with anything but letters and '-' as it is. Split as fatih/camelcase splits.
fn smart_label(field: &str) -> String {
    if field.chars().any(|c| !c.is_alphabetic() && c != '-') {
        return field.to_owned();
    }
    #[derive(PartialEq, Clone, Copy)]
    enum Class {
        Lower,
        Upper,
        Digit,
        Other,
    }
    let class = |c: char| {
        if c.is_lowercase() {
            Class::Lower
        } else if c.is_uppercase() {
            Class::Upper
        } else if c.is_ascii_digit() {
            Class::Digit
        } else {
            Class::Other
        }
    };
    let mut runs: Vec<(Class, Vec<char>)> = Vec::new();
    for c in field.chars() {
        match runs.last_mut() {
            Some((k, run)) if *k == class(c) => run.push(c),
            _ => runs.push((class(c), vec![c])),
        }
    }
    // An upper-case run followed by a lower-case one gives its last letter to it ("HTMLParser").
    for i in 0..runs.len().saturating_sub(1) {
        if runs[i].0 == Class::Upper && runs[i + 1].0 == Class::Lower {
            if let Some(last) = runs[i].1.pop() {
                runs[i + 1].1.insert(0, last);
            }
        }
    }
    const ACRONYMS: [&str; 5] = ["API", "URL", "UID", "OSB", "GUID"];
    runs.iter()
        .map(|(_, r)| r.iter().collect::<String>())
        .filter(|p| !p.is_empty() && p != "_")
        .map(|p| {
            let upper = p.to_uppercase();
            if ACRONYMS.contains(&upper.as_str()) {
                upper
            } else {
                let mut chars = p.chars();
                match chars.next() {
                    Some(f) => f.to_uppercase().chain(chars).collect(),
                    None => p,
                }
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn s(v: &Value) -> String {
    match v {
        Value::String(x) => x.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn sorted(v: &Value) -> Vec<(String, Value)> {
    let mut pairs: Vec<(String, Value)> = v
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    pairs
}

/// Name, Namespace, Labels, Annotations.
fn header(w: &mut W, o: &Value) {
    w.w(0, &format!("Name:\t{}\n", s(&o["metadata"]["name"])));
    w.w(0, &format!("Namespace:\t{}\n", s(&o["metadata"]["namespace"])));
    labels(w, "Labels", &o["metadata"]["labels"]);
    annotations(w, "Annotations", &o["metadata"]["annotations"]);
}

/// kubectl's printLabelsMultiline: one `k=v` a line, sorted, `<none>` when empty.
fn labels(w: &mut W, title: &str, labels: &Value) {
    labels_indented(w, "", title, labels)
}

/// printLabelsMultilineWithIndent: the same under `indent`.
fn labels_indented(w: &mut W, indent: &str, title: &str, labels: &Value) {
    w.w(0, &format!("{indent}{title}:\t"));
    let pairs = sorted(labels);
    if pairs.is_empty() {
        w.w(0, "<none>\n");
        return;
    }
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            w.w(0, &format!("{indent}\t"));
        }
        w.w(0, &format!("{k}={}\n", s(v)));
    }
}

/// kubectl's printAnnotationsMultiline (the last-applied configuration left out; long or
/// multi-line values on lines of their own).
fn annotations(w: &mut W, title: &str, annotations: &Value) {
    w.w(0, &format!("{title}:\t"));
    let pairs: Vec<(String, Value)> = sorted(annotations)
        .into_iter()
        .filter(|(k, _)| k != "kubectl.kubernetes.io/last-applied-configuration")
        .collect();
    if pairs.is_empty() {
        w.w(0, "<none>\n");
        return;
    }
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            w.w(0, "\t");
        }
        let value = s(v);
        let value = value.strip_suffix('\n').unwrap_or(&value);
        if value.len() + k.len() + 2 > 140 || value.contains('\n') {
            w.w(0, &format!("{k}:\n"));
            for line in value.split('\n') {
                let line = if line.len() > 138 {
                    format!("{}...", &line[..line.floor_char_boundary(135)])
                } else {
                    line.to_owned()
                };
                w.w(0, &format!("\t  {line}\n"));
            }
        } else {
            w.w(0, &format!("{k}: {value}\n"));
        }
    }
}

fn tolerations(w: &mut W, indent: &str, title: &str, tolerations: &Value) {
    w.w(0, &format!("{indent}{title}:\t"));
    let mut list: Vec<Value> = tolerations.as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        w.w(0, "<none>\n");
        return;
    }
    list.sort_by(|a, b| s(&a["key"]).cmp(&s(&b["key"])));
    for (i, t) in list.iter().enumerate() {
        if i > 0 {
            w.w(0, &format!("{indent}\t"));
        }
        let (key, value, effect) = (s(&t["key"]), s(&t["value"]), s(&t["effect"]));
        let mut line = key.clone();
        if !value.is_empty() {
            line.push_str(&format!("={value}"));
        }
        if !effect.is_empty() {
            line.push_str(&format!(":{effect}"));
        }
        if t["operator"] == "Exists" && value.is_empty() {
            line.push_str(if !key.is_empty() || !effect.is_empty() {
                " op=Exists"
            } else {
                "op=Exists"
            });
        }
        if let Some(secs) = t["tolerationSeconds"].as_i64() {
            line.push_str(&format!(" for {secs}s"));
        }
        w.w(0, &format!("{line}\n"));
    }
}

/// RFC 1123 with a numeric zone, in local time, as Go's `time.RFC1123Z`.
fn date(v: &Value) -> String {
    let Some(t) = v.as_str().and_then(|t| t.parse::<jiff::Timestamp>().ok()) else {
        return String::new();
    };
    t.to_zoned(jiff::tz::TimeZone::system())
        .strftime("%a, %d %b %Y %H:%M:%S %z")
        .to_string()
}

/// apimachinery's HumanDuration.
pub(crate) fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    if secs < 0 {
        return "0s".into();
    }
    if secs < 120 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        let s = secs % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = secs / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

fn since(v: &Value) -> String {
    match v.as_str().and_then(|t| t.parse::<jiff::Timestamp>().ok()) {
        Some(t) => human_duration(jiff::Timestamp::now().as_second() - t.as_second()),
        None => "<unknown>".into(),
    }
}

fn pod(w: &mut W, o: &Value) {
    let (meta, spec, st) = (&o["metadata"], &o["spec"], &o["status"]);
    w.w(0, &format!("Name:\t{}\n", s(&meta["name"])));
    w.w(0, &format!("Namespace:\t{}\n", s(&meta["namespace"])));
    if let Some(p) = spec["priority"].as_i64() {
        w.w(0, &format!("Priority:\t{p}\n"));
    }
    if let Some(p) = spec["priorityClassName"].as_str().filter(|p| !p.is_empty()) {
        w.w(0, &format!("Priority Class Name:\t{p}\n"));
    }
    if let Some(p) = spec["runtimeClassName"].as_str().filter(|p| !p.is_empty()) {
        w.w(0, &format!("Runtime Class Name:\t{p}\n"));
    }
    if let Some(sa) = spec["serviceAccountName"].as_str().filter(|p| !p.is_empty()) {
        w.w(0, &format!("Service Account:\t{sa}\n"));
    }
    match spec["nodeName"].as_str().filter(|n| !n.is_empty()) {
        Some(n) => w.w(0, &format!("Node:\t{n}/{}\n", s(&st["hostIP"]))),
        None => w.w(0, "Node:\t<none>\n"),
    }
    if !st["startTime"].is_null() {
        w.w(0, &format!("Start Time:\t{}\n", date(&st["startTime"])));
    }
    labels(w, "Labels", &meta["labels"]);
    annotations(w, "Annotations", &meta["annotations"]);
    if !meta["deletionTimestamp"].is_null() {
        w.w(
            0,
            &format!(
                "Status:\tTerminating (lasts {})\n",
                since(&meta["deletionTimestamp"])
            ),
        );
        w.w(
            0,
            &format!(
                "Termination Grace Period:\t{}s\n",
                meta["deletionGracePeriodSeconds"].as_i64().unwrap_or(0)
            ),
        );
    } else {
        w.w(0, &format!("Status:\t{}\n", s(&st["phase"])));
    }
    if let Some(r) = st["reason"].as_str().filter(|r| !r.is_empty()) {
        w.w(0, &format!("Reason:\t{r}\n"));
    }
    if let Some(m) = st["message"].as_str().filter(|r| !r.is_empty()) {
        w.w(0, &format!("Message:\t{m}\n"));
    }
    w.w(0, &format!("IP:\t{}\n", s(&st["podIP"])));
    match st["podIPs"].as_array().filter(|a| !a.is_empty()) {
        Some(ips) => {
            w.w(0, "IPs:\n");
            for ip in ips {
                w.w(1, &format!("IP:\t{}\n", s(&ip["ip"])));
            }
        }
        None => w.w(0, "IPs:\t<none>\n"),
    }
    if let Some(c) = controller(meta) {
        w.w(0, &format!("Controlled By:\t{c}\n"));
    }
    if let Some(n) = st["nominatedNodeName"].as_str().filter(|n| !n.is_empty()) {
        w.w(0, &format!("NominatedNodeName:\t{n}\n"));
    }
    if spec["initContainers"].as_array().is_some_and(|a| !a.is_empty()) {
        containers(
            w,
            "Init Containers",
            &spec["initContainers"],
            Some(&st["initContainerStatuses"]),
            "",
        );
    }
    containers(
        w,
        "Containers",
        &spec["containers"],
        Some(&st["containerStatuses"]),
        "",
    );
    if let Some(conds) = st["conditions"].as_array().filter(|c| !c.is_empty()) {
        w.w(0, "Conditions:\n  Type\tStatus\n");
        for c in conds {
            w.w(1, &format!("{} \t{} \n", s(&c["type"]), s(&c["status"])));
        }
    }
    volumes(w, &spec["volumes"], "");
    let qos = st["qosClass"]
        .as_str()
        .filter(|q| !q.is_empty())
        .unwrap_or("BestEffort");
    w.w(0, &format!("QoS Class:\t{qos}\n"));
    labels(w, "Node-Selectors", &spec["nodeSelector"]);
    tolerations(w, "", "Tolerations", &spec["tolerations"]);
}

fn controller(meta: &Value) -> Option<String> {
    meta["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true)
        .map(|r| format!("{}/{}", s(&r["kind"]), s(&r["name"])))
}

fn ports(c: &Value, key: &str) -> String {
    let list: Vec<String> = c["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            format!(
                "{}/{}",
                p[key].as_i64().unwrap_or(0),
                p["protocol"].as_str().unwrap_or("TCP")
            )
        })
        .collect();
    list.join(", ")
}

fn containers(w: &mut W, label: &str, list: &Value, statuses: Option<&Value>, space: &str) {
    w.w(0, &format!("{space}{label}:\n"));
    let name_indent = if space.is_empty() { "" } else { " " };
    for c in list.as_array().into_iter().flatten() {
        let name = s(&c["name"]);
        let status = statuses
            .and_then(|st| st.as_array())
            .and_then(|st| st.iter().find(|x| x["name"] == name.as_str()));
        w.w(1, &format!("{name_indent}{name}:\n"));
        if let Some(st) = status {
            w.w(2, &format!("Container ID:\t{}\n", s(&st["containerID"])));
        }
        w.w(2, &format!("Image:\t{}\n", s(&c["image"])));
        if let Some(st) = status {
            w.w(2, &format!("Image ID:\t{}\n", s(&st["imageID"])));
        }
        let p = ports(c, "containerPort");
        if p.contains(',') {
            w.w(2, &format!("Ports:\t{p}\n"));
        } else {
            w.w(
                2,
                &format!("Port:\t{}\n", if p.is_empty() { "<none>" } else { &p }),
            );
        }
        let hp = ports(c, "hostPort");
        if hp.contains(',') {
            w.w(2, &format!("Host Ports:\t{hp}\n"));
        } else {
            w.w(
                2,
                &format!("Host Port:\t{}\n", if hp.is_empty() { "<none>" } else { &hp }),
            );
        }
        if let Some(rp) = c["restartPolicy"].as_str() {
            w.w(2, &format!("Restart Policy:\t{rp}\n"));
        }
        for (title, key) in [("Command", "command"), ("Args", "args")] {
            if let Some(items) = c[key].as_array().filter(|a| !a.is_empty()) {
                w.w(2, &format!("{title}:\n"));
                for item in items {
                    for line in s(item).split('\n') {
                        w.w(3, &format!("{line}\n"));
                    }
                }
            }
        }
        if let Some(st) = status {
            state(w, "State", &st["state"]);
            if !st["lastState"]["terminated"].is_null() {
                state(w, "Last State", &st["lastState"]);
            }
            w.w(
                2,
                &format!("Ready:\t{}\n", if st["ready"] == true { "True" } else { "False" }),
            );
            w.w(
                2,
                &format!("Restart Count:\t{}\n", st["restartCount"].as_i64().unwrap_or(0)),
            );
        }
        for (title, key) in [("Limits", "limits"), ("Requests", "requests")] {
            let pairs = sorted(&c["resources"][key]);
            if !pairs.is_empty() {
                w.w(2, &format!("{title}:\n"));
                for (k, v) in pairs {
                    w.w(3, &format!("{k}:\t{}\n", s(&v)));
                }
            }
        }
        for (title, key) in [
            ("Liveness", "livenessProbe"),
            ("Readiness", "readinessProbe"),
            ("Startup", "startupProbe"),
        ] {
            if !c[key].is_null() {
                w.w(2, &format!("{title}:\t{}\n", probe(&c[key])));
            }
        }
        if let Some(from) = c["envFrom"].as_array().filter(|a| !a.is_empty()) {
            w.w(2, "Environment Variables from:\n");
            for f in from {
                let (kind, name, optional) = if !f["configMapRef"].is_null() {
                    (
                        "ConfigMap",
                        s(&f["configMapRef"]["name"]),
                        f["configMapRef"]["optional"] == true,
                    )
                } else {
                    (
                        "Secret",
                        s(&f["secretRef"]["name"]),
                        f["secretRef"]["optional"] == true,
                    )
                };
                let prefix = s(&f["prefix"]);
                if prefix.is_empty() {
                    w.w(3, &format!("{name}\t{kind}\tOptional: {optional}\n"));
                } else {
                    w.w(
                        3,
                        &format!("{name}\t{kind} with prefix '{prefix}'\tOptional: {optional}\n"),
                    );
                }
            }
        }
        match c["env"].as_array().filter(|a| !a.is_empty()) {
            None => w.w(2, "Environment:\t<none>\n"),
            Some(env) => {
                w.w(2, "Environment:\n");
                for e in env {
                    let name = s(&e["name"]);
                    let vf = &e["valueFrom"];
                    if vf.is_null() {
                        let v = s(&e["value"]);
                        let mut lines = v.split('\n');
                        w.w(3, &format!("{name}:\t{}\n", lines.next().unwrap_or("")));
                        for l in lines {
                            w.w(3, &format!("\t{l}\n"));
                        }
                    } else if !vf["fieldRef"].is_null() {
                        w.w(
                            3,
                            &format!(
                                "{name}:\t ({}:{})\n",
                                s(&vf["fieldRef"]["apiVersion"]),
                                s(&vf["fieldRef"]["fieldPath"])
                            ),
                        );
                    } else if !vf["resourceFieldRef"].is_null() {
                        w.w(
                            3,
                            &format!(
                                "{name}:\t{} ({})\n",
                                s(&vf["resourceFieldRef"]["containerName"]),
                                s(&vf["resourceFieldRef"]["resource"])
                            ),
                        );
                    } else if !vf["secretKeyRef"].is_null() {
                        w.w(
                            3,
                            &format!(
                                "{name}:\t<set to the key '{}' in secret '{}'>\tOptional: {}\n",
                                s(&vf["secretKeyRef"]["key"]),
                                s(&vf["secretKeyRef"]["name"]),
                                vf["secretKeyRef"]["optional"] == true
                            ),
                        );
                    } else if !vf["configMapKeyRef"].is_null() {
                        w.w(
                            3,
                            &format!(
                                "{name}:\t<set to the key '{}' of config map '{}'>\tOptional: {}\n",
                                s(&vf["configMapKeyRef"]["key"]),
                                s(&vf["configMapKeyRef"]["name"]),
                                vf["configMapKeyRef"]["optional"] == true
                            ),
                        );
                    }
                }
            }
        }
        match c["volumeMounts"].as_array().filter(|a| !a.is_empty()) {
            None => w.w(2, "Mounts:\t<none>\n"),
            Some(mounts) => {
                w.w(2, "Mounts:\n");
                let mut mounts = mounts.clone();
                mounts.sort_by(|a, b| s(&a["mountPath"]).cmp(&s(&b["mountPath"])));
                for m in mounts {
                    let mut flags = vec![if m["readOnly"] == true { "ro" } else { "rw" }.to_owned()];
                    if let Some(sp) = m["subPath"].as_str().filter(|x| !x.is_empty()) {
                        flags.push(format!("path=\"{sp}\""));
                    }
                    w.w(
                        3,
                        &format!(
                            "{} from {} ({})\n",
                            s(&m["mountPath"]),
                            s(&m["name"]),
                            flags.join(",")
                        ),
                    );
                }
            }
        }
    }
}

fn state(w: &mut W, title: &str, st: &Value) {
    if !st["running"].is_null() {
        w.w(2, &format!("{title}:\tRunning\n"));
        w.w(3, &format!("Started:\t{}\n", date(&st["running"]["startedAt"])));
    } else if !st["terminated"].is_null() {
        let t = &st["terminated"];
        w.w(2, &format!("{title}:\tTerminated\n"));
        if let Some(r) = t["reason"].as_str().filter(|r| !r.is_empty()) {
            w.w(3, &format!("Reason:\t{r}\n"));
        }
        if let Some(m) = t["message"].as_str().filter(|r| !r.is_empty()) {
            w.w(3, &format!("Message:\t{m}\n"));
        }
        w.w(
            3,
            &format!("Exit Code:\t{}\n", t["exitCode"].as_i64().unwrap_or(0)),
        );
        if let Some(sig) = t["signal"].as_i64().filter(|s| *s > 0) {
            w.w(3, &format!("Signal:\t{sig}\n"));
        }
        w.w(3, &format!("Started:\t{}\n", date(&t["startedAt"])));
        w.w(3, &format!("Finished:\t{}\n", date(&t["finishedAt"])));
    } else {
        w.w(2, &format!("{title}:\tWaiting\n"));
        if let Some(r) = st["waiting"]["reason"].as_str().filter(|r| !r.is_empty()) {
            w.w(3, &format!("Reason:\t{r}\n"));
        }
    }
}

/// kubectl's probe summary: `http-get http://:80/ delay=0s timeout=1s period=10s #success=1 #failure=3`.
fn probe(p: &Value) -> String {
    let n = |k: &str, d: i64| p[k].as_i64().unwrap_or(d);
    let attrs = format!(
        "delay={}s timeout={}s period={}s #success={} #failure={}",
        n("initialDelaySeconds", 0),
        n("timeoutSeconds", 1),
        n("periodSeconds", 10),
        n("successThreshold", 1),
        n("failureThreshold", 3)
    );
    let port = |v: &Value| s(v);
    if !p["exec"].is_null() {
        let cmd: Vec<String> = p["exec"]["command"]
            .as_array()
            .into_iter()
            .flatten()
            .map(s)
            .collect();
        format!("exec [{}] {attrs}", cmd.join(" "))
    } else if !p["httpGet"].is_null() {
        let h = &p["httpGet"];
        let scheme = h["scheme"].as_str().unwrap_or("HTTP").to_lowercase();
        format!(
            "http-get {scheme}://{}:{}{} {attrs}",
            s(&h["host"]),
            port(&h["port"]),
            s(&h["path"])
        )
    } else if !p["tcpSocket"].is_null() {
        format!(
            "tcp-socket {}:{} {attrs}",
            s(&p["tcpSocket"]["host"]),
            port(&p["tcpSocket"]["port"])
        )
    } else if !p["grpc"].is_null() {
        format!(
            "grpc <pod>:{} {} {attrs}",
            port(&p["grpc"]["port"]),
            s(&p["grpc"]["service"])
        )
    } else {
        format!("unknown {attrs}")
    }
}

fn volumes(w: &mut W, list: &Value, space: &str) {
    let Some(vols) = list.as_array().filter(|a| !a.is_empty()) else {
        w.w(0, &format!("{space}Volumes:\t<none>\n"));
        return;
    };
    w.w(0, &format!("{space}Volumes:\n"));
    let name_indent = if space.is_empty() { "" } else { " " };
    for v in vols {
        w.w(1, &format!("{name_indent}{}:\n", s(&v["name"])));
        if !v["hostPath"].is_null() {
            w.w(
                2,
                &format!(
                    "Type:\tHostPath (bare host directory volume)\n    Path:\t{}\n    HostPathType:\t{}\n",
                    s(&v["hostPath"]["path"]),
                    s(&v["hostPath"]["type"])
                ),
            );
        } else if !v["emptyDir"].is_null() {
            let limit = v["emptyDir"]["sizeLimit"].as_str().unwrap_or("<unset>");
            w.w(2, &format!("Type:\tEmptyDir (a temporary directory that shares a pod's lifetime)\n    Medium:\t{}\n    SizeLimit:\t{limit}\n", s(&v["emptyDir"]["medium"])));
        } else if !v["secret"].is_null() {
            w.w(2, &format!("Type:\tSecret (a volume populated by a Secret)\n    SecretName:\t{}\n    Optional:\t{}\n", s(&v["secret"]["secretName"]), v["secret"]["optional"] == true));
        } else if !v["configMap"].is_null() {
            w.w(2, &format!("Type:\tConfigMap (a volume populated by a ConfigMap)\n    Name:\t{}\n    Optional:\t{}\n", s(&v["configMap"]["name"]), v["configMap"]["optional"] == true));
        } else if !v["persistentVolumeClaim"].is_null() {
            w.w(2, &format!("Type:\tPersistentVolumeClaim (a reference to a PersistentVolumeClaim in the same namespace)\n    ClaimName:\t{}\n    ReadOnly:\t{}\n", s(&v["persistentVolumeClaim"]["claimName"]), v["persistentVolumeClaim"]["readOnly"] == true));
        } else if !v["downwardAPI"].is_null() {
            w.w(
                2,
                "Type:\tDownwardAPI (a volume populated by information about the pod)\n    Items:\n",
            );
            for item in v["downwardAPI"]["items"].as_array().into_iter().flatten() {
                if !item["fieldRef"].is_null() {
                    w.w(
                        3,
                        &format!("{} -> {}\n", s(&item["fieldRef"]["fieldPath"]), s(&item["path"])),
                    );
                }
                if !item["resourceFieldRef"].is_null() {
                    w.w(
                        3,
                        &format!(
                            "{} -> {}\n",
                            s(&item["resourceFieldRef"]["resource"]),
                            s(&item["path"])
                        ),
                    );
                }
            }
        } else if !v["projected"].is_null() {
            w.w(
                2,
                "Type:\tProjected (a volume that contains injected data from multiple sources)\n",
            );
            for src in v["projected"]["sources"].as_array().into_iter().flatten() {
                if !src["secret"].is_null() {
                    w.w(2, &format!("SecretName:\t{}\n", s(&src["secret"]["name"])));
                    w.w(2, &format!("Optional:\t{}\n", src["secret"]["optional"] == true));
                } else if !src["downwardAPI"].is_null() {
                    w.w(2, "DownwardAPI:\ttrue\n");
                } else if !src["configMap"].is_null() {
                    w.w(2, &format!("ConfigMapName:\t{}\n", s(&src["configMap"]["name"])));
                    w.w(
                        2,
                        &format!("Optional:\t{}\n", src["configMap"]["optional"] == true),
                    );
                } else if !src["serviceAccountToken"].is_null() {
                    w.w(
                        2,
                        &format!(
                            "TokenExpirationSeconds:\t{}\n",
                            src["serviceAccountToken"]["expirationSeconds"]
                                .as_i64()
                                .unwrap_or(3600)
                        ),
                    );
                }
            }
        } else {
            w.w(2, "<unknown>\n");
        }
    }
}

fn pod_template(w: &mut W, t: &Value) {
    w.w(0, "Pod Template:\n");
    labels(w, "  Labels", &t["metadata"]["labels"]);
    if t["metadata"]["annotations"]
        .as_object()
        .is_some_and(|m| !m.is_empty())
    {
        annotations(w, "  Annotations", &t["metadata"]["annotations"]);
    }
    let spec = &t["spec"];
    if let Some(sa) = spec["serviceAccountName"].as_str().filter(|x| !x.is_empty()) {
        w.w(1, &format!("Service Account:\t{sa}\n"));
    }
    if spec["initContainers"].as_array().is_some_and(|a| !a.is_empty()) {
        containers(w, "Init Containers", &spec["initContainers"], None, "  ");
    }
    containers(w, "Containers", &spec["containers"], None, "  ");
    volumes(w, &spec["volumes"], "  ");
    if let Some(p) = spec["priorityClassName"].as_str().filter(|x| !x.is_empty()) {
        w.w(1, &format!("Priority Class Name:\t{p}\n"));
    }
    labels(w, "  Node-Selectors", &spec["nodeSelector"]);
    tolerations(w, "  ", "Tolerations", &spec["tolerations"]);
}

fn selector(sel: &Value) -> String {
    let mut parts: Vec<String> = sorted(&sel["matchLabels"])
        .into_iter()
        .map(|(k, v)| format!("{k}={}", s(&v)))
        .collect();
    for e in sel["matchExpressions"].as_array().into_iter().flatten() {
        let values: Vec<String> = e["values"].as_array().into_iter().flatten().map(s).collect();
        let key = s(&e["key"]);
        parts.push(match e["operator"].as_str().unwrap_or("") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key,
            "DoesNotExist" => format!("!{key}"),
            other => format!("{key} {other}"),
        });
    }
    if parts.is_empty() {
        "<none>".into()
    } else {
        parts.join(",")
    }
}

/// The replica sets a Deployment controls.
async fn owned(session: &Session, o: &Value, resource: &str) -> Result<Vec<Value>> {
    let ns = s(&o["metadata"]["namespace"]);
    let uid = s(&o["metadata"]["uid"]);
    let list = session
        .conn
        .rest
        .get(&format!("/apis/apps/v1/namespaces/{ns}/{resource}"))
        .await?;
    Ok(list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|rs| {
            rs["metadata"]["ownerReferences"].as_array().is_some_and(|refs| {
                refs.iter()
                    .any(|r| r["uid"] == uid.as_str() && r["controller"] == true)
            })
        })
        .cloned()
        .collect())
}

async fn deployment(session: &Session, w: &mut W, o: &Value) -> Result<()> {
    let (meta, spec, st) = (&o["metadata"], &o["spec"], &o["status"]);
    w.w(0, &format!("Name:\t{}\n", s(&meta["name"])));
    w.w(0, &format!("Namespace:\t{}\n", s(&meta["namespace"])));
    w.w(
        0,
        &format!("CreationTimestamp:\t{}\n", date(&meta["creationTimestamp"])),
    );
    labels(w, "Labels", &meta["labels"]);
    annotations(w, "Annotations", &meta["annotations"]);
    w.w(0, &format!("Selector:\t{}\n", selector(&spec["selector"])));
    let n = |v: &Value| v.as_i64().unwrap_or(0);
    w.w(
        0,
        &format!(
            "Replicas:\t{} desired | {} updated | {} total | {} available | {} unavailable\n",
            spec["replicas"].as_i64().unwrap_or(1),
            n(&st["updatedReplicas"]),
            n(&st["replicas"]),
            n(&st["availableReplicas"]),
            n(&st["unavailableReplicas"])
        ),
    );
    let strategy = s(&spec["strategy"]["type"]);
    w.w(0, &format!("StrategyType:\t{strategy}\n"));
    w.w(
        0,
        &format!(
            "MinReadySeconds:\t{}\n",
            spec["minReadySeconds"].as_i64().unwrap_or(0)
        ),
    );
    let ru = &spec["strategy"]["rollingUpdate"];
    if !ru.is_null() {
        w.w(
            0,
            &format!(
                "RollingUpdateStrategy:\t{} max unavailable, {} max surge\n",
                s(&ru["maxUnavailable"]),
                s(&ru["maxSurge"])
            ),
        );
    }
    pod_template(w, &spec["template"]);
    if let Some(conds) = st["conditions"].as_array().filter(|c| !c.is_empty()) {
        w.w(0, "Conditions:\n  Type\tStatus\tReason\n");
        w.w(1, "----\t------\t------\n");
        for c in conds {
            w.w(
                1,
                &format!("{} \t{}\t{}\n", s(&c["type"]), s(&c["status"]), s(&c["reason"])),
            );
        }
    }
    let revision = s(&meta["annotations"]["deployment.kubernetes.io/revision"]);
    let mut sets = owned(session, o, "replicasets").await?;
    sets.sort_by(|a, b| s(&a["metadata"]["creationTimestamp"]).cmp(&s(&b["metadata"]["creationTimestamp"])));
    let describe_sets = |list: Vec<&Value>| -> String {
        let items: Vec<String> = list
            .iter()
            .map(|rs| {
                format!(
                    "{} ({}/{} replicas created)",
                    s(&rs["metadata"]["name"]),
                    rs["status"]["replicas"].as_i64().unwrap_or(0),
                    rs["spec"]["replicas"].as_i64().unwrap_or(1)
                )
            })
            .collect();
        if items.is_empty() {
            "<none>".into()
        } else {
            items.join(", ")
        }
    };
    let is_new =
        |rs: &Value| s(&rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]) == revision;
    let old: Vec<&Value> = sets
        .iter()
        .filter(|rs| !is_new(rs) && rs["spec"]["replicas"].as_i64().unwrap_or(1) != 0)
        .collect();
    let new: Vec<&Value> = sets.iter().filter(|rs| is_new(rs)).collect();
    if !sets.is_empty() {
        w.w(0, &format!("OldReplicaSets:\t{}\n", describe_sets(old)));
        w.w(0, &format!("NewReplicaSet:\t{}\n", describe_sets(new)));
    }
    Ok(())
}

async fn replicaset(session: &Session, w: &mut W, o: &Value) -> Result<()> {
    let (meta, spec, st) = (&o["metadata"], &o["spec"], &o["status"]);
    w.w(0, &format!("Name:\t{}\n", s(&meta["name"])));
    w.w(0, &format!("Namespace:\t{}\n", s(&meta["namespace"])));
    w.w(0, &format!("Selector:\t{}\n", selector(&spec["selector"])));
    labels(w, "Labels", &meta["labels"]);
    annotations(w, "Annotations", &meta["annotations"]);
    if let Some(c) = controller(meta) {
        w.w(0, &format!("Controlled By:\t{c}\n"));
    }
    w.w(
        0,
        &format!(
            "Replicas:\t{} current / {} desired\n",
            st["replicas"].as_i64().unwrap_or(0),
            spec["replicas"].as_i64().unwrap_or(1)
        ),
    );
    let (running, waiting, succeeded, failed) = pod_statuses(session, o).await?;
    w.w(
        0,
        &format!(
            "Pods Status:\t{running} Running / {waiting} Waiting / {succeeded} Succeeded / {failed} Failed\n"
        ),
    );
    pod_template(w, &spec["template"]);
    if let Some(conds) = st["conditions"].as_array().filter(|c| !c.is_empty()) {
        w.w(0, "Conditions:\n  Type\tStatus\tReason\n");
        w.w(1, "----\t------\t------\n");
        for c in conds {
            w.w(
                1,
                &format!("{} \t{}\t{}\n", s(&c["type"]), s(&c["status"]), s(&c["reason"])),
            );
        }
    }
    Ok(())
}

/// Pods by phase among those `o` controls (kubectl's getPodStatusForController): listed by
/// its selector, kept when their controller is `o`.
async fn pod_statuses(session: &Session, o: &Value) -> Result<(i64, i64, i64, i64)> {
    let ns = s(&o["metadata"]["namespace"]);
    let uid = s(&o["metadata"]["uid"]);
    let pods = session
        .conn
        .rest
        .get(&format!(
            "/api/v1/namespaces/{ns}/pods?labelSelector={}",
            encode(&selector(&o["spec"]["selector"]))
        ))
        .await?;
    let (mut running, mut waiting, mut succeeded, mut failed) = (0, 0, 0, 0);
    for p in pods["items"].as_array().into_iter().flatten() {
        let controlled = p["metadata"]["ownerReferences"].as_array().is_some_and(|r| {
            r.iter()
                .any(|r| r["uid"] == uid.as_str() && r["controller"] == true)
        });
        if !controlled {
            continue;
        }
        match p["status"]["phase"].as_str().unwrap_or("") {
            "Running" => running += 1,
            "Pending" => waiting += 1,
            "Succeeded" => succeeded += 1,
            "Failed" => failed += 1,
            _ => {}
        }
    }
    Ok((running, waiting, succeeded, failed))
}

/// kubectl's describeJob.
fn job(w: &mut W, o: &Value) {
    let (meta, spec, st) = (&o["metadata"], &o["spec"], &o["status"]);
    w.w(0, &format!("Name:\t{}\n", s(&meta["name"])));
    w.w(0, &format!("Namespace:\t{}\n", s(&meta["namespace"])));
    w.w(0, &format!("Selector:\t{}\n", selector(&spec["selector"])));
    labels(w, "Labels", &meta["labels"]);
    annotations(w, "Annotations", &meta["annotations"]);
    if let Some(c) = controller(meta) {
        w.w(0, &format!("Controlled By:\t{c}\n"));
    }
    if !spec["parallelism"].is_null() {
        w.w(0, &format!("Parallelism:\t{}\n", s(&spec["parallelism"])));
    }
    match &spec["completions"] {
        Value::Null => w.w(0, "Completions:\t<unset>\n"),
        n => w.w(0, &format!("Completions:\t{}\n", s(n))),
    }
    for (key, title) in [
        ("completionMode", "Completion Mode"),
        ("suspend", "Suspend"),
        ("backoffLimit", "Backoff Limit"),
        ("ttlSecondsAfterFinished", "TTL Seconds After Finished"),
    ] {
        if !spec[key].is_null() {
            w.w(0, &format!("{title}:\t{}\n", s(&spec[key])));
        }
    }
    if !st["startTime"].is_null() {
        w.w(0, &format!("Start Time:\t{}\n", date(&st["startTime"])));
    }
    if !st["completionTime"].is_null() {
        w.w(0, &format!("Completed At:\t{}\n", date(&st["completionTime"])));
    }
    let at = |k: &str| st[k].as_str().and_then(|t| t.parse::<jiff::Timestamp>().ok());
    if let (Some(start), Some(end)) = (at("startTime"), at("completionTime")) {
        w.w(
            0,
            &format!("Duration:\t{}\n", human_duration((end - start).get_seconds())),
        );
    }
    if !spec["activeDeadlineSeconds"].is_null() {
        w.w(
            0,
            &format!(
                "Active Deadline Seconds:\t{}s\n",
                s(&spec["activeDeadlineSeconds"])
            ),
        );
    }
    let n = |k: &str| st[k].as_i64().unwrap_or(0);
    match st["ready"].as_i64() {
        None => w.w(
            0,
            &format!(
                "Pods Statuses:\t{} Active / {} Succeeded / {} Failed\n",
                n("active"),
                n("succeeded"),
                n("failed")
            ),
        ),
        Some(ready) => w.w(
            0,
            &format!(
                "Pods Statuses:\t{} Active ({ready} Ready) / {} Succeeded / {} Failed\n",
                n("active"),
                n("succeeded"),
                n("failed")
            ),
        ),
    }
    if spec["completionMode"] == "Indexed" {
        let indexes = s(&st["completedIndexes"]);
        // At most about 50 characters, cut after a comma.
        let shown = if indexes.is_empty() {
            "<none>".to_string()
        } else {
            match indexes[50.min(indexes.len())..].find(',') {
                Some(i) if indexes.len() > 50 => format!("{}...", &indexes[..50 + i + 1]),
                _ => indexes,
            }
        };
        w.w(0, &format!("Completed Indexes:\t{shown}\n"));
    }
    pod_template(w, &spec["template"]);
}

/// kubectl's describeStatefulSet.
async fn statefulset(session: &Session, w: &mut W, o: &Value) -> Result<()> {
    let (meta, spec, st) = (&o["metadata"], &o["spec"], &o["status"]);
    w.w(0, &format!("Name:\t{}\n", s(&meta["name"])));
    w.w(0, &format!("Namespace:\t{}\n", s(&meta["namespace"])));
    w.w(
        0,
        &format!("CreationTimestamp:\t{}\n", date(&meta["creationTimestamp"])),
    );
    w.w(0, &format!("Selector:\t{}\n", selector(&spec["selector"])));
    labels(w, "Labels", &meta["labels"]);
    annotations(w, "Annotations", &meta["annotations"]);
    // (kubectl 1.34 adds the service name and the pod management and claim retention
    // policies; 1.33, which r8s follows, prints none of them.)
    w.w(
        0,
        &format!(
            "Replicas:\t{} desired | {} total\n",
            spec["replicas"].as_i64().unwrap_or(1),
            st["replicas"].as_i64().unwrap_or(0)
        ),
    );
    let us = &spec["updateStrategy"];
    w.w(0, &format!("Update Strategy:\t{}\n", s(&us["type"])));
    if !us["rollingUpdate"]["partition"].is_null() {
        w.w(
            1,
            &format!("Partition:\t{}\n", s(&us["rollingUpdate"]["partition"])),
        );
        if !us["rollingUpdate"]["maxUnavailable"].is_null() {
            w.w(
                1,
                &format!("MaxUnavailable:\t{}\n", s(&us["rollingUpdate"]["maxUnavailable"])),
            );
        }
    }
    let (running, waiting, succeeded, failed) = pod_statuses(session, o).await?;
    w.w(
        0,
        &format!(
            "Pods Status:\t{running} Running / {waiting} Waiting / {succeeded} Succeeded / {failed} Failed\n"
        ),
    );
    pod_template(w, &spec["template"]);
    let templates = spec["volumeClaimTemplates"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if templates.is_empty() {
        w.w(0, "Volume Claims:\t<none>\n");
    } else {
        w.w(0, "Volume Claims:\n");
        for pvc in templates {
            w.w(1, &format!("Name:\t{}\n", s(&pvc["metadata"]["name"])));
            w.w(1, &format!("StorageClass:\t{}\n", claim_class(pvc)));
            labels_indented(w, "  ", "Labels", &pvc["metadata"]["labels"]);
            labels_indented(w, "  ", "Annotations", &pvc["metadata"]["annotations"]);
            match pvc["spec"]["resources"]["requests"]["storage"].as_str() {
                Some(c) => w.w(1, &format!("Capacity:\t{c}\n")),
                None => w.w(1, "Capacity:\t<default>\n"),
            }
            w.w(
                1,
                &format!("Access Modes:\t{}\n", go_list(&pvc["spec"]["accessModes"])),
            );
        }
    }
    Ok(())
}

/// A claim's storage class: the field, else the beta annotation (upstream's
/// GetPersistentVolumeClaimClass).
fn claim_class(pvc: &Value) -> String {
    pvc["metadata"]["annotations"]["volume.beta.kubernetes.io/storage-class"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| s(&pvc["spec"]["storageClassName"]))
}

/// A string list as Go's `%v` prints it: `[a b]`.
fn go_list(v: &Value) -> String {
    let items: Vec<String> = v.as_array().into_iter().flatten().map(s).collect();
    format!("[{}]", items.join(" "))
}

/// kubectl's describeCronJob (its job template as describeJobTemplate prints it).
fn cronjob(w: &mut W, o: &Value) {
    let (spec, st) = (&o["spec"], &o["status"]);
    header(w, o);
    w.w(0, &format!("Schedule:\t{}\n", s(&spec["schedule"])));
    w.w(
        0,
        &format!("Concurrency Policy:\t{}\n", s(&spec["concurrencyPolicy"])),
    );
    let suspend = match spec["suspend"].as_bool() {
        Some(true) => "True",
        Some(false) => "False",
        None => "<unset>",
    };
    w.w(0, &format!("Suspend:\t{suspend}\n"));
    let or_unset = |v: &Value, unit: &str| {
        if v.is_null() {
            "<unset>".to_string()
        } else {
            format!("{}{unit}", s(v))
        }
    };
    w.w(
        0,
        &format!(
            "Successful Job History Limit:\t{}\n",
            or_unset(&spec["successfulJobsHistoryLimit"], "")
        ),
    );
    w.w(
        0,
        &format!(
            "Failed Job History Limit:\t{}\n",
            or_unset(&spec["failedJobsHistoryLimit"], "")
        ),
    );
    w.w(
        0,
        &format!(
            "Starting Deadline Seconds:\t{}\n",
            or_unset(&spec["startingDeadlineSeconds"], "s")
        ),
    );
    let job = &spec["jobTemplate"]["spec"];
    if job["selector"].is_null() {
        w.w(0, "Selector:\t<unset>\n");
    } else {
        w.w(0, &format!("Selector:\t{}\n", selector(&job["selector"])));
    }
    w.w(
        0,
        &format!("Parallelism:\t{}\n", or_unset(&job["parallelism"], "")),
    );
    w.w(
        0,
        &format!("Completions:\t{}\n", or_unset(&job["completions"], "")),
    );
    if !job["activeDeadlineSeconds"].is_null() {
        w.w(
            0,
            &format!(
                "Active Deadline Seconds:\t{}s\n",
                s(&job["activeDeadlineSeconds"])
            ),
        );
    }
    pod_template(w, &job["template"]);
    if st["lastScheduleTime"].is_null() {
        w.w(0, "Last Schedule Time:\t<unset>\n");
    } else {
        w.w(
            0,
            &format!("Last Schedule Time:\t{}\n", date(&st["lastScheduleTime"])),
        );
    }
    let active: Vec<String> = st["active"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|j| s(&j["name"]))
        .collect();
    let active = if active.is_empty() {
        "<none>".to_string()
    } else {
        active.join(", ")
    };
    w.w(0, &format!("Active Jobs:\t{active}\n"));
}

/// kubectl's describePodDisruptionBudgetV1.
fn disruption_budget(w: &mut W, o: &Value) {
    let (meta, spec, st) = (&o["metadata"], &o["spec"], &o["status"]);
    w.w(0, &format!("Name:\t{}\n", s(&meta["name"])));
    w.w(0, &format!("Namespace:\t{}\n", s(&meta["namespace"])));
    if !spec["minAvailable"].is_null() {
        w.w(0, &format!("Min available:\t{}\n", s(&spec["minAvailable"])));
    } else if !spec["maxUnavailable"].is_null() {
        w.w(0, &format!("Max unavailable:\t{}\n", s(&spec["maxUnavailable"])));
    }
    if spec["selector"].is_null() {
        w.w(0, "Selector:\t<unset>\n");
    } else {
        let sel = selector(&spec["selector"]);
        w.w(
            0,
            &format!(
                "Selector:\t{}\n",
                if sel.is_empty() { "<none>".into() } else { sel }
            ),
        );
    }
    w.w(0, "Status:\n");
    let n = |k: &str| st[k].as_i64().unwrap_or(0);
    w.w(2, &format!("Allowed disruptions:\t{}\n", n("disruptionsAllowed")));
    w.w(2, &format!("Current:\t{}\n", n("currentHealthy")));
    w.w(2, &format!("Desired:\t{}\n", n("desiredHealthy")));
    w.w(2, &format!("Total:\t{}\n", n("expectedPods")));
}

/// kubectl's Role and ClusterRole describers: the rules broken down and compacted as
/// `auth can-i --list` shows them.
fn role(w: &mut W, o: &Value) {
    let meta = &o["metadata"];
    w.w(0, &format!("Name:\t{}\n", s(&meta["name"])));
    labels(w, "Labels", &meta["labels"]);
    annotations(w, "Annotations", &meta["annotations"]);
    let rules: Vec<&Value> = o["rules"].as_array().into_iter().flatten().collect();
    let status = serde_json::json!({
        "resourceRules": rules.iter().filter(|r| r["resources"].as_array().is_some_and(|a| !a.is_empty())).collect::<Vec<_>>(),
        "nonResourceRules": rules.iter().filter(|r| r["nonResourceURLs"].as_array().is_some_and(|a| !a.is_empty())).collect::<Vec<_>>(),
    });
    w.w(0, "PolicyRule:\n");
    w.w(1, "Resources\tNon-Resource URLs\tResource Names\tVerbs\n");
    w.w(1, "---------\t-----------------\t--------------\t-----\n");
    for r in crate::info::compact_rules(&status) {
        w.w(1, &format!("{}\n", r.row().join("\t")));
    }
}

/// kubectl's RoleBinding and ClusterRoleBinding describers.
fn role_binding(w: &mut W, o: &Value) {
    let meta = &o["metadata"];
    w.w(0, &format!("Name:\t{}\n", s(&meta["name"])));
    labels(w, "Labels", &meta["labels"]);
    annotations(w, "Annotations", &meta["annotations"]);
    w.w(0, "Role:\n");
    w.w(1, &format!("Kind:\t{}\n", s(&o["roleRef"]["kind"])));
    w.w(1, &format!("Name:\t{}\n", s(&o["roleRef"]["name"])));
    w.w(0, "Subjects:\n");
    w.w(1, "Kind\tName\tNamespace\n");
    w.w(1, "----\t----\t---------\n");
    for sub in o["subjects"].as_array().into_iter().flatten() {
        w.w(
            1,
            &format!(
                "{}\t{}\t{}\n",
                s(&sub["kind"]),
                s(&sub["name"]),
                s(&sub["namespace"])
            ),
        );
    }
}

/// kubectl's describeDaemonSet.
async fn daemonset(session: &Session, w: &mut W, o: &Value) -> Result<()> {
    let (meta, spec, st) = (&o["metadata"], &o["spec"], &o["status"]);
    w.w(0, &format!("Name:\t{}\n", s(&meta["name"])));
    w.w(0, &format!("Namespace:\t{}\n", s(&meta["namespace"])));
    w.w(0, &format!("Selector:\t{}\n", selector(&spec["selector"])));
    let node_selector: Vec<String> = sorted(&spec["template"]["spec"]["nodeSelector"])
        .into_iter()
        .map(|(k, v)| format!("{k}={}", s(&v)))
        .collect();
    let node_selector = if node_selector.is_empty() {
        "<none>".to_string()
    } else {
        node_selector.join(",")
    };
    w.w(0, &format!("Node-Selector:\t{node_selector}\n"));
    labels(w, "Labels", &meta["labels"]);
    annotations(w, "Annotations", &meta["annotations"]);
    let n = |k: &str| st[k].as_i64().unwrap_or(0);
    w.w(
        0,
        &format!(
            "Desired Number of Nodes Scheduled: {}\n",
            n("desiredNumberScheduled")
        ),
    );
    w.w(
        0,
        &format!(
            "Current Number of Nodes Scheduled: {}\n",
            n("currentNumberScheduled")
        ),
    );
    w.w(
        0,
        &format!(
            "Number of Nodes Scheduled with Up-to-date Pods: {}\n",
            n("updatedNumberScheduled")
        ),
    );
    w.w(
        0,
        &format!(
            "Number of Nodes Scheduled with Available Pods: {}\n",
            n("numberAvailable")
        ),
    );
    w.w(
        0,
        &format!("Number of Nodes Misscheduled: {}\n", n("numberMisscheduled")),
    );
    let (running, waiting, succeeded, failed) = pod_statuses(session, o).await?;
    w.w(
        0,
        &format!(
            "Pods Status:\t{running} Running / {waiting} Waiting / {succeeded} Succeeded / {failed} Failed\n"
        ),
    );
    pod_template(w, &spec["template"]);
    Ok(())
}

/// Access modes as kubectl abbreviates them (GetAccessModesAsString).
fn access_modes(v: &Value) -> String {
    let modes: Vec<&str> = v
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(m, _)| modes.contains(m))
    .map(|(_, short)| *short)
    .collect::<Vec<_>>()
    .join(",")
}

/// kubectl's describePersistentVolumeClaim: the claim, the pods using it (by volume or as
/// its owner), its conditions.
async fn claim(session: &Session, w: &mut W, o: &Value) -> Result<()> {
    let (meta, spec, st) = (&o["metadata"], &o["spec"], &o["status"]);
    w.w(0, &format!("Name:\t{}\n", s(&meta["name"])));
    w.w(0, &format!("Namespace:\t{}\n", s(&meta["namespace"])));
    w.w(0, &format!("StorageClass:\t{}\n", claim_class(o)));
    if meta["deletionTimestamp"].is_null() {
        w.w(0, &format!("Status:\t{}\n", s(&st["phase"])));
    } else {
        w.w(
            0,
            &format!(
                "Status:\tTerminating (lasts {})\n",
                since(&meta["deletionTimestamp"])
            ),
        );
    }
    w.w(0, &format!("Volume:\t{}\n", s(&spec["volumeName"])));
    labels(w, "Labels", &meta["labels"]);
    annotations(w, "Annotations", &meta["annotations"]);
    w.w(0, &format!("Finalizers:\t{}\n", go_list(&meta["finalizers"])));
    let bound = !s(&spec["volumeName"]).is_empty();
    let (capacity, modes) = if bound {
        (s(&st["capacity"]["storage"]), access_modes(&st["accessModes"]))
    } else {
        (String::new(), String::new())
    };
    w.w(0, &format!("Capacity:\t{capacity}\n"));
    w.w(0, &format!("Access Modes:\t{modes}\n"));
    if !spec["volumeMode"].is_null() {
        w.w(0, &format!("VolumeMode:\t{}\n", s(&spec["volumeMode"])));
    }
    let source = &spec["dataSource"];
    if !source.is_null() {
        w.w(0, "DataSource:\n");
        if !source["apiGroup"].is_null() {
            w.w(1, &format!("APIGroup:\t{}\n", s(&source["apiGroup"])));
        }
        w.w(1, &format!("Kind:\t{}\n", s(&source["kind"])));
        w.w(1, &format!("Name:\t{}\n", s(&source["name"])));
    }
    let ns = s(&meta["namespace"]);
    let name = s(&meta["name"]);
    let pods = session
        .conn
        .rest
        .get(&format!("/api/v1/namespaces/{ns}/pods"))
        .await?;
    let pods = pods["items"].as_array().cloned().unwrap_or_default();
    let mut users: Vec<String> = Vec::new();
    for p in &pods {
        for v in p["spec"]["volumes"].as_array().into_iter().flatten() {
            if v["persistentVolumeClaim"]["claimName"] == name.as_str() {
                users.push(s(&p["metadata"]["name"]));
            }
        }
    }
    for r in meta["ownerReferences"].as_array().into_iter().flatten() {
        if r["kind"] != "Pod" {
            continue;
        }
        if let Some(p) = pods.iter().find(|p| p["metadata"]["uid"] == r["uid"]) {
            let n = s(&p["metadata"]["name"]);
            if !users.contains(&n) {
                users.push(n);
            }
        }
    }
    users.sort();
    w.w(0, "Used By:\t");
    if users.is_empty() {
        w.w(0, "<none>\n");
    } else {
        w.w(0, &format!("{}\n", users.join("\n\t")));
    }
    if let Some(conds) = st["conditions"].as_array().filter(|c| !c.is_empty()) {
        timed_conditions(w, conds, "LastProbeTime", "lastProbeTime");
    }
    Ok(())
}

/// A conditions table with times (claims' LastProbeTime, nodes' LastHeartbeatTime), as
/// kubectl lays both out.
fn timed_conditions(w: &mut W, conds: &[Value], title: &str, key: &str) {
    w.w(0, "Conditions:\n");
    w.w(
        1,
        &format!("Type\tStatus\t{title}\tLastTransitionTime\tReason\tMessage\n"),
    );
    w.w(
        1,
        "----\t------\t-----------------\t------------------\t------\t-------\n",
    );
    for c in conds {
        w.w(
            1,
            &format!(
                "{} \t{} \t{} \t{} \t{} \t{}\n",
                s(&c["type"]),
                s(&c["status"]),
                go_time(&c[key]),
                go_time(&c["lastTransitionTime"]),
                s(&c["reason"]),
                s(&c["message"])
            ),
        );
    }
}

/// A time as Go formats a zero or set metav1.Time with RFC1123Z.
fn go_time(v: &Value) -> String {
    if v.is_null() {
        "Mon, 01 Jan 0001 00:00:00 +0000".into()
    } else {
        date(v)
    }
}

/// kubectl's describeEndpoints.
fn endpoints_object(w: &mut W, o: &Value) {
    header(w, o);
    w.w(0, "Subsets:\n");
    for subset in o["subsets"].as_array().into_iter().flatten() {
        let ips = |key: &str| {
            let list: Vec<String> = subset[key]
                .as_array()
                .into_iter()
                .flatten()
                .map(|a| s(&a["ip"]))
                .collect();
            if list.is_empty() {
                "<none>".to_string()
            } else {
                list.join(",")
            }
        };
        w.w(1, &format!("Addresses:\t{}\n", ips("addresses")));
        w.w(1, &format!("NotReadyAddresses:\t{}\n", ips("notReadyAddresses")));
        if let Some(ports) = subset["ports"].as_array().filter(|p| !p.is_empty()) {
            w.w(1, "Ports:\n");
            w.w(2, "Name\tPort\tProtocol\n");
            w.w(2, "----\t----\t--------\n");
            for p in ports {
                let name = p["name"].as_str().filter(|n| !n.is_empty()).unwrap_or("<unset>");
                w.w(2, &format!("{name}\t{}\t{}\n", s(&p["port"]), s(&p["protocol"])));
            }
        }
        w.w(0, "\n");
    }
}

/// kubectl's describeIngressV1: rules with each backend's endpoints.
async fn ingress(session: &Session, w: &mut W, o: &Value) -> Result<()> {
    let (meta, spec) = (&o["metadata"], &o["spec"]);
    let ns = s(&meta["namespace"]);
    w.w(0, &format!("Name:\t{}\n", s(&meta["name"])));
    labels(w, "Labels", &meta["labels"]);
    w.w(0, &format!("Namespace:\t{ns}\n"));
    let addresses: Vec<String> = o["status"]["loadBalancer"]["ingress"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| {
            let ip = s(&i["ip"]);
            if ip.is_empty() {
                s(&i["hostname"])
            } else {
                ip
            }
        })
        .filter(|a| !a.is_empty())
        .collect::<std::collections::BTreeSet<String>>()
        .into_iter()
        .collect();
    w.w(0, &format!("Address:\t{}\n", addresses.join(",")));
    let class = spec["ingressClassName"].as_str().unwrap_or("<none>");
    w.w(0, &format!("Ingress Class:\t{class}\n"));
    let default = match &spec["defaultBackend"] {
        Value::Null => "<default>".to_string(),
        b => ingress_backend(session, &ns, b).await?,
    };
    w.w(0, &format!("Default backend:\t{default}\n"));
    if let Some(tls) = spec["tls"].as_array().filter(|t| !t.is_empty()) {
        w.w(0, "TLS:\n");
        for t in tls {
            let hosts: Vec<String> = t["hosts"].as_array().into_iter().flatten().map(s).collect();
            match t["secretName"].as_str().filter(|n| !n.is_empty()) {
                None => w.w(1, &format!("SNI routes {}\n", hosts.join(","))),
                Some(secret) => w.w(1, &format!("{secret} terminates {}\n", hosts.join(","))),
            }
        }
    }
    w.w(0, "Rules:\n  Host\tPath\tBackends\n");
    w.w(1, "----\t----\t--------\n");
    let mut count = 0;
    for rule in spec["rules"].as_array().into_iter().flatten() {
        if rule["http"].is_null() {
            continue;
        }
        count += 1;
        let host = rule["host"].as_str().filter(|h| !h.is_empty()).unwrap_or("*");
        w.w(1, &format!("{host}\t\n"));
        for path in rule["http"]["paths"].as_array().into_iter().flatten() {
            let backend = ingress_backend(session, &ns, &path["backend"]).await?;
            w.w(2, &format!("\t{} \t{backend}\n", s(&path["path"])));
        }
    }
    if count == 0 {
        w.w(1, &format!("*\t*\t{default}\n"));
    }
    annotations(w, "Annotations", &meta["annotations"]);
    Ok(())
}

/// An ingress backend with its endpoints (kubectl's describeBackendV1).
async fn ingress_backend(session: &Session, ns: &str, b: &Value) -> Result<String> {
    if !b["service"].is_null() {
        let svc = &b["service"];
        let name = s(&svc["name"]);
        let number = svc["port"]["number"].as_i64().unwrap_or(0);
        let port_name = s(&svc["port"]["name"]);
        let shown = if number != 0 {
            format!("{name}:{number}")
        } else {
            format!("{name}:{port_name}")
        };
        let slices = session
            .conn
            .rest
            .get(&format!(
                "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices?labelSelector={}",
                encode(&format!("kubernetes.io/service-name={name}"))
            ))
            .await;
        let slices = match slices {
            Ok(l) => l["items"].as_array().cloned().unwrap_or_default(),
            Err(Error::Api(e)) => return Ok(format!("{shown} (<error: {}>)", e.message)),
            Err(e) => return Err(e),
        };
        let service = match session
            .conn
            .rest
            .get(&format!("/api/v1/namespaces/{ns}/services/{name}"))
            .await
        {
            Ok(v) => v,
            Err(Error::Api(e)) => return Ok(format!("{shown} (<error: {}>)", e.message)),
            Err(e) => return Err(e),
        };
        let mut sp_name = String::new();
        for sp in service["spec"]["ports"].as_array().into_iter().flatten() {
            if (number != 0 && sp["port"].as_i64() == Some(number))
                || (!port_name.is_empty() && sp["name"] == port_name.as_str())
            {
                sp_name = s(&sp["name"]);
            }
        }
        return Ok(format!("{shown} ({})", endpoints(&slices, &sp_name)));
    }
    let r = &b["resource"];
    if !r.is_null() {
        let group = r["apiGroup"].as_str().unwrap_or("<none>");
        return Ok(format!(
            "APIGroup: {group}, Kind: {}, Name: {}",
            s(&r["kind"]),
            s(&r["name"])
        ));
    }
    Ok(String::new())
}

/// A sum of quantities as Go's `Quantity.String()` prints it: in the format of the first
/// addend (binary `Ki…Ei` when it had such a suffix), the largest exact suffix.
#[derive(Clone, Copy, Default)]
struct Sum {
    milli: i128,
    binary: Option<bool>,
}

impl Sum {
    fn add(&mut self, q: &str) {
        let Ok(m) = r8s_api::quantity::parse_milli(q) else {
            return;
        };
        self.milli += m;
        self.binary.get_or_insert(q.ends_with('i'));
    }

    /// Another sum added in (the format stays the first addend's).
    fn merge(&mut self, other: Sum) {
        self.milli += other.milli;
        if self.binary.is_none() {
            self.binary = other.binary;
        }
    }

    fn max(&mut self, other: Sum) {
        if other.milli > self.milli {
            *self = other;
        }
    }

    fn text(&self) -> String {
        let m = self.milli;
        if m == 0 {
            return "0".into();
        }
        if self.binary == Some(true) && m % 1000 == 0 && (m / 1000).abs() >= 1024 {
            let mut v = m / 1000;
            let mut i = 0;
            while i < 6 && v % 1024 == 0 {
                v /= 1024;
                i += 1;
            }
            return format!("{v}{}", ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][i]);
        }
        if m % 1000 != 0 {
            return format!("{m}m");
        }
        let mut v = m / 1000;
        let mut i = 0;
        while i < 6 && v % 1000 == 0 {
            v /= 1000;
            i += 1;
        }
        format!("{v}{}", ["", "k", "M", "G", "T", "P", "E"][i])
    }
}

/// A pod's requests or limits by resource (upstream's PodRequests/PodLimits without
/// pod-level resources): its containers summed, then each init container's taken when
/// larger (sidecars, which keep running, add to what follows), overhead added (to limits only
/// where a limit is set).
fn pod_resources(pod: &Value, key: &str) -> std::collections::BTreeMap<String, Sum> {
    use std::collections::BTreeMap;
    let spec = &pod["spec"];
    let list = |c: &Value| -> Vec<(String, String)> {
        c["resources"][key]
            .as_object()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), s(v))).collect())
            .unwrap_or_default()
    };
    let mut total: BTreeMap<String, Sum> = BTreeMap::new();
    for c in spec["containers"].as_array().into_iter().flatten() {
        for (k, v) in list(c) {
            total.entry(k).or_default().add(&v);
        }
    }
    let mut sidecars: BTreeMap<String, Sum> = BTreeMap::new();
    let mut init_max: BTreeMap<String, Sum> = BTreeMap::new();
    for c in spec["initContainers"].as_array().into_iter().flatten() {
        let mut this: BTreeMap<String, Sum> = sidecars.clone();
        for (k, v) in list(c) {
            this.entry(k).or_default().add(&v);
        }
        if c["restartPolicy"] == "Always" {
            for (k, v) in list(c) {
                sidecars.entry(k).or_default().add(&v);
            }
        }
        for (k, v) in this {
            init_max.entry(k).or_default().max(v);
        }
    }
    for (k, v) in &sidecars {
        total.entry(k.clone()).or_default().merge(*v);
    }
    for (k, v) in init_max {
        total.entry(k).or_default().max(v);
    }
    for (k, v) in spec["overhead"].as_object().into_iter().flatten() {
        if key == "requests" || total.contains_key(k) {
            total.entry(k.clone()).or_default().add(&s(v));
        }
    }
    total
}

/// kubectl 1.33's describeNode.
async fn node(session: &Session, w: &mut W, o: &Value) -> Result<()> {
    let (meta, spec, st) = (&o["metadata"], &o["spec"], &o["status"]);
    let name = s(&meta["name"]);
    w.w(0, &format!("Name:\t{name}\n"));
    let mut roles: Vec<String> = Vec::new();
    for (k, v) in sorted(&meta["labels"]) {
        if let Some(role) = k
            .strip_prefix("node-role.kubernetes.io/")
            .filter(|r| !r.is_empty())
        {
            roles.push(role.to_string());
        } else if k == "kubernetes.io/role" && !s(&v).is_empty() {
            roles.push(s(&v));
        }
    }
    roles.sort();
    roles.dedup();
    let roles = if roles.is_empty() {
        "<none>".to_string()
    } else {
        roles.join(",")
    };
    w.w(0, &format!("Roles:\t{roles}\n"));
    labels(w, "Labels", &meta["labels"]);
    annotations(w, "Annotations", &meta["annotations"]);
    w.w(
        0,
        &format!("CreationTimestamp:\t{}\n", date(&meta["creationTimestamp"])),
    );
    let mut taints: Vec<Value> = spec["taints"].as_array().cloned().unwrap_or_default();
    taints.sort_by_key(|t| format!("{},{}", s(&t["effect"]), s(&t["key"])));
    w.w(0, "Taints:\t");
    if taints.is_empty() {
        w.w(0, "<none>\n");
    }
    for (i, t) in taints.iter().enumerate() {
        if i > 0 {
            w.w(0, "\t");
        }
        let mut text = s(&t["key"]);
        if !s(&t["value"]).is_empty() {
            text = format!("{text}={}", s(&t["value"]));
        }
        if !s(&t["effect"]).is_empty() {
            text = format!("{text}:{}", s(&t["effect"]));
        }
        w.w(0, &format!("{text}\n"));
    }
    w.w(
        0,
        &format!(
            "Unschedulable:\t{}\n",
            spec["unschedulable"].as_bool().unwrap_or(false)
        ),
    );
    match session
        .conn
        .rest
        .get(&format!(
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"
        ))
        .await
    {
        Ok(lease) => {
            let or_unset = |v: &Value| {
                if v.is_null() {
                    "<unset>".to_string()
                } else {
                    date(v)
                }
            };
            w.w(0, "Lease:\n");
            let holder = lease["spec"]["holderIdentity"].as_str().unwrap_or("<unset>");
            w.w(1, &format!("HolderIdentity:\t{holder}\n"));
            w.w(
                1,
                &format!("AcquireTime:\t{}\n", or_unset(&lease["spec"]["acquireTime"])),
            );
            w.w(
                1,
                &format!("RenewTime:\t{}\n", or_unset(&lease["spec"]["renewTime"])),
            );
        }
        Err(Error::Api(e)) => w.w(0, &format!("Lease:\tFailed to get lease: {}\n", e.message)),
        Err(e) => return Err(e),
    }
    if let Some(conds) = st["conditions"].as_array().filter(|c| !c.is_empty()) {
        timed_conditions(w, conds, "LastHeartbeatTime", "lastHeartbeatTime");
    }
    w.w(0, "Addresses:\n");
    for a in st["addresses"].as_array().into_iter().flatten() {
        w.w(1, &format!("{}:\t{}\n", s(&a["type"]), s(&a["address"])));
    }
    for (title, key) in [("Capacity", "capacity"), ("Allocatable", "allocatable")] {
        let list = sorted(&st[key]);
        if !list.is_empty() {
            w.w(0, &format!("{title}:\n"));
            for (k, v) in list {
                w.w(0, &format!("  {k}:\t{}\n", s(&v)));
            }
        }
    }
    let info = &st["nodeInfo"];
    w.w(0, "System Info:\n");
    for (title, key) in [
        ("Machine ID", "machineID"),
        ("System UUID", "systemUUID"),
        ("Boot ID", "bootID"),
        ("Kernel Version", "kernelVersion"),
        ("OS Image", "osImage"),
        ("Operating System", "operatingSystem"),
        ("Architecture", "architecture"),
        ("Container Runtime Version", "containerRuntimeVersion"),
        ("Kubelet Version", "kubeletVersion"),
        ("Kube-Proxy Version", "kubeProxyVersion"),
    ] {
        w.w(0, &format!("  {title}:\t{}\n", s(&info[key])));
    }
    if let Some(cidr) = spec["podCIDR"].as_str().filter(|c| !c.is_empty()) {
        w.w(0, &format!("PodCIDR:\t{cidr}\n"));
    }
    if let Some(cidrs) = spec["podCIDRs"].as_array().filter(|c| !c.is_empty()) {
        let list: Vec<String> = cidrs.iter().map(s).collect();
        w.w(0, &format!("PodCIDRs:\t{}\n", list.join(",")));
    }
    if let Some(id) = spec["providerID"].as_str().filter(|c| !c.is_empty()) {
        w.w(0, &format!("ProviderID:\t{id}\n"));
    }
    let selector = format!("spec.nodeName={name},status.phase!=Succeeded,status.phase!=Failed");
    match session
        .conn
        .rest
        .get(&format!("/api/v1/pods?fieldSelector={}", encode(&selector)))
        .await
    {
        Ok(pods) => node_resources(
            w,
            o,
            pods["items"].as_array().map(Vec::as_slice).unwrap_or_default(),
        ),
        Err(Error::Api(e)) if e.code == 403 => w.w(0, "Pods:\tnot authorized\n"),
        Err(e) => return Err(e),
    }
    Ok(())
}

/// kubectl's describeNodeResource: each pod's requests and limits as shares of the node's
/// allocatable resources, then their totals.
fn node_resources(w: &mut W, node: &Value, pods: &[Value]) {
    let st = &node["status"];
    let allocatable = if st["allocatable"].as_object().is_some_and(|a| !a.is_empty()) {
        &st["allocatable"]
    } else {
        &st["capacity"]
    };
    let alloc = |k: &str| r8s_api::quantity::parse_milli(&s(&allocatable[k])).unwrap_or(0);
    // kubectl divides milli-values for cpu and whole values (rounded up) for the rest.
    let share = |k: &str, q: &Sum| -> i64 {
        let (num, den) = if k == "cpu" {
            (q.milli, alloc(k))
        } else {
            (
                (q.milli + 999).div_euclid(1000),
                (alloc(k) + 999).div_euclid(1000),
            )
        };
        if den == 0 {
            return 0;
        }
        (num as f64 / den as f64 * 100.0) as i64
    };
    w.w(0, &format!("Non-terminated Pods:\t({} in total)\n", pods.len()));
    w.w(
        1,
        "Namespace\tName\t\tCPU Requests\tCPU Limits\tMemory Requests\tMemory Limits\tAge\n",
    );
    w.w(
        1,
        "---------\t----\t\t------------\t----------\t---------------\t-------------\t---\n",
    );
    let mut reqs: std::collections::BTreeMap<String, Sum> = Default::default();
    let mut limits: std::collections::BTreeMap<String, Sum> = Default::default();
    for p in pods {
        let r = pod_resources(p, "requests");
        let l = pod_resources(p, "limits");
        let get =
            |m: &std::collections::BTreeMap<String, Sum>, k: &str| m.get(k).copied().unwrap_or_default();
        let (cr, cl, mr, ml) = (
            get(&r, "cpu"),
            get(&l, "cpu"),
            get(&r, "memory"),
            get(&l, "memory"),
        );
        w.w(
            1,
            &format!(
                "{}\t{}\t\t{} ({}%)\t{} ({}%)\t{} ({}%)\t{} ({}%)\t{}\n",
                s(&p["metadata"]["namespace"]),
                s(&p["metadata"]["name"]),
                cr.text(),
                share("cpu", &cr),
                cl.text(),
                share("cpu", &cl),
                mr.text(),
                share("memory", &mr),
                ml.text(),
                share("memory", &ml),
                since(&p["metadata"]["creationTimestamp"])
            ),
        );
        for (k, v) in r {
            reqs.entry(k).or_default().merge(v);
        }
        for (k, v) in l {
            limits.entry(k).or_default().merge(v);
        }
    }
    w.w(
        0,
        "Allocated resources:\n  (Total limits may be over 100 percent, i.e., overcommitted.)\n",
    );
    w.w(1, "Resource\tRequests\tLimits\n");
    w.w(1, "--------\t--------\t------\n");
    let get = |m: &std::collections::BTreeMap<String, Sum>, k: &str| m.get(k).copied().unwrap_or_default();
    let names: Vec<String> = allocatable
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    let mut huge: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| n.starts_with("hugepages-"))
        .collect();
    huge.sort();
    // The standard three, then each huge page size, with their shares of what is allocatable.
    for k in ["cpu", "memory", "ephemeral-storage"].into_iter().chain(huge) {
        let (r, l) = (get(&reqs, k), get(&limits, k));
        w.w(
            1,
            &format!(
                "{k}\t{} ({}%)\t{} ({}%)\n",
                r.text(),
                share(k, &r),
                l.text(),
                share(k, &l)
            ),
        );
    }
    // Extended resources: anything not standard (a domain-prefixed name outside kubernetes.io).
    let mut ext: Vec<&String> = names
        .iter()
        .filter(|n| {
            !n.starts_with("hugepages-")
                && !["cpu", "memory", "ephemeral-storage", "storage", "pods"].contains(&n.as_str())
                && !n.starts_with("requests.")
                && !n.starts_with("limits.")
        })
        .collect();
    ext.sort();
    for k in ext {
        w.w(
            1,
            &format!("{k}\t{}\t{}\n", get(&reqs, k).text(), get(&limits, k).text()),
        );
    }
}

async fn service(session: &Session, w: &mut W, o: &Value) -> Result<()> {
    let (meta, spec) = (&o["metadata"], &o["spec"]);
    header(w, o);
    let sel: Vec<String> = sorted(&spec["selector"])
        .into_iter()
        .map(|(k, v)| format!("{k}={}", s(&v)))
        .collect();
    w.w(
        0,
        &format!(
            "Selector:\t{}\n",
            if sel.is_empty() {
                "<none>".into()
            } else {
                sel.join(",")
            }
        ),
    );
    w.w(0, &format!("Type:\t{}\n", s(&spec["type"])));
    if let Some(p) = spec["ipFamilyPolicy"].as_str() {
        w.w(0, &format!("IP Family Policy:\t{p}\n"));
    }
    if let Some(f) = spec["ipFamilies"].as_array().filter(|a| !a.is_empty()) {
        let f: Vec<String> = f.iter().map(s).collect();
        w.w(0, &format!("IP Families:\t{}\n", f.join(",")));
    }
    if spec["type"] != "ExternalName" {
        w.w(0, &format!("IP:\t{}\n", s(&spec["clusterIP"])));
        if let Some(ips) = spec["clusterIPs"].as_array().filter(|a| !a.is_empty()) {
            let ips: Vec<String> = ips.iter().map(s).collect();
            w.w(0, &format!("IPs:\t{}\n", ips.join(",")));
        }
    } else {
        w.w(0, &format!("External Name:\t{}\n", s(&spec["externalName"])));
    }
    if let Some(ips) = spec["externalIPs"].as_array().filter(|a| !a.is_empty()) {
        let ips: Vec<String> = ips.iter().map(s).collect();
        w.w(0, &format!("External IPs:\t{}\n", ips.join(",")));
    }
    if let Some(ing) = o["status"]["loadBalancer"]["ingress"]
        .as_array()
        .filter(|a| !a.is_empty())
    {
        let list: Vec<String> = ing
            .iter()
            .map(|i| {
                i["ip"]
                    .as_str()
                    .or(i["hostname"].as_str())
                    .unwrap_or("")
                    .to_owned()
            })
            .collect();
        w.w(0, &format!("LoadBalancer Ingress:\t{}\n", list.join(", ")));
    }
    let ns = s(&meta["namespace"]);
    let slices = session
        .conn
        .rest
        .get(&format!(
            "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices?labelSelector={}",
            encode(&format!("kubernetes.io/service-name={}", s(&meta["name"])))
        ))
        .await
        .map(|l| l["items"].as_array().cloned().unwrap_or_default())
        .unwrap_or_default();
    for p in spec["ports"].as_array().into_iter().flatten() {
        let name = p["name"].as_str().filter(|n| !n.is_empty()).unwrap_or("<unset>");
        let proto = p["protocol"].as_str().unwrap_or("TCP");
        w.w(
            0,
            &format!("Port:\t{name}\t{}/{proto}\n", p["port"].as_i64().unwrap_or(0)),
        );
        w.w(0, &format!("TargetPort:\t{}/{proto}\n", s(&p["targetPort"])));
        if let Some(np) = p["nodePort"].as_i64().filter(|n| *n != 0) {
            w.w(0, &format!("NodePort:\t{name}\t{np}/{proto}\n"));
        }
        w.w(
            0,
            &format!(
                "Endpoints:\t{}\n",
                endpoints(&slices, p["name"].as_str().unwrap_or(""))
            ),
        );
    }
    w.w(
        0,
        &format!("Session Affinity:\t{}\n", s(&spec["sessionAffinity"])),
    );
    if let Some(p) = spec["externalTrafficPolicy"].as_str().filter(|x| !x.is_empty()) {
        w.w(0, &format!("External Traffic Policy:\t{p}\n"));
    }
    if let Some(p) = spec["internalTrafficPolicy"].as_str() {
        w.w(0, &format!("Internal Traffic Policy:\t{p}\n"));
    }
    if let Some(p) = spec["healthCheckNodePort"].as_i64().filter(|p| *p != 0) {
        w.w(0, &format!("HealthCheck NodePort:\t{p}\n"));
    }
    Ok(())
}

/// kubectl's formatEndpointSlices: `ip:port` of the port's endpoints, three at most.
fn endpoints(slices: &[Value], port_name: &str) -> String {
    if slices.is_empty() {
        return "<none>".into();
    }
    let mut list = Vec::new();
    let mut count = 0;
    for slice in slices {
        let eps = slice["endpoints"].as_array().cloned().unwrap_or_default();
        let ports = slice["ports"].as_array().cloned().unwrap_or_default();
        if ports.is_empty() {
            for ep in &eps {
                if list.len() < 3 {
                    list.push(s(&ep["addresses"][0]));
                }
                count += 1;
            }
            continue;
        }
        for port in ports
            .iter()
            .filter(|p| p["name"].as_str().unwrap_or("") == port_name)
        {
            for ep in &eps {
                if list.len() < 3 {
                    list.push(format!(
                        "{}:{}",
                        s(&ep["addresses"][0]),
                        port["port"].as_i64().unwrap_or(0)
                    ));
                }
                count += 1;
            }
        }
    }
    let shown = list.join(",");
    if count > 3 {
        format!("{shown} + {} more...", count - 3)
    } else {
        shown
    }
}

/// The object's events, oldest first, as kubectl's DescribeEvents prints them.
async fn describe_events(session: &Session, w: &mut W, o: &Value, ns: &str) -> Result<()> {
    let meta = &o["metadata"];
    // A node's events: the kubelet's name the node by its name where a uid belongs, so
    // kubectl asks twice and shows both.
    let mut uids = vec![s(&meta["uid"])];
    if o["kind"] == "Node" {
        uids.push(s(&meta["name"]));
    }
    let mut events: Vec<Value> = Vec::new();
    for uid in uids {
        let mut fields = vec![
            format!("involvedObject.name={}", s(&meta["name"])),
            format!("involvedObject.kind={}", s(&o["kind"])),
            format!("involvedObject.uid={uid}"),
        ];
        if !ns.is_empty() {
            fields.push(format!("involvedObject.namespace={ns}"));
        }
        let path = if ns.is_empty() {
            "/api/v1/events".to_owned()
        } else {
            format!("/api/v1/namespaces/{ns}/events")
        };
        let list = session
            .conn
            .rest
            .json(
                Method::GET,
                &format!("{path}?fieldSelector={}", encode(&fields.join(","))),
                crate::rest::JSON,
                None,
            )
            .await?;
        events.extend(list["items"].as_array().cloned().unwrap_or_default());
    }
    if events.is_empty() {
        w.w(0, "Events:\t<none>\n");
        return Ok(());
    }
    let when = |e: &Value| -> String {
        let t = s(&e["lastTimestamp"]);
        if t.is_empty() {
            s(&e["eventTime"])
        } else {
            t
        }
    };
    events.sort_by_key(|e| when(e));
    w.w(0, "Events:\n  Type\tReason\tAge\tFrom\tMessage\n");
    w.w(1, "----\t------\t----\t----\t-------\n");
    for e in &events {
        let interval = interval(e);
        let source = e["source"]["component"]
            .as_str()
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
            .unwrap_or_else(|| s(&e["reportingComponent"]));
        w.w(
            1,
            &format!(
                "{}\t{}\t{interval}\t{source}\t{}\n",
                s(&e["type"]),
                s(&e["reason"]),
                s(&e["message"]).trim()
            ),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_print_as_go_quantities() {
        let sum = |qs: &[&str]| {
            let mut s = Sum::default();
            for q in qs {
                s.add(q);
            }
            s.text()
        };
        assert_eq!(sum(&[]), "0");
        assert_eq!(sum(&["250m", "100m"]), "350m");
        assert_eq!(sum(&["1", "1"]), "2");
        assert_eq!(sum(&["500m", "500m"]), "1");
        assert_eq!(sum(&["1Gi", "512Mi"]), "1536Mi");
        assert_eq!(sum(&["1Gi", "1Gi"]), "2Gi");
        assert_eq!(sum(&["128Mi", "100M"]), "234217728");
        assert_eq!(sum(&["100M", "128Mi"]), "234217728");
        assert_eq!(sum(&["1000", "1000"]), "2k");
        assert_eq!(sum(&["512"]), "512");
    }

    #[test]
    fn durations_as_apimachinery_words_them() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(119), "119s");
        assert_eq!(human_duration(150), "2m30s");
        assert_eq!(human_duration(600), "10m");
        assert_eq!(human_duration(3 * 3600 + 60), "3h1m");
        assert_eq!(human_duration(30 * 3600), "30h");
        assert_eq!(human_duration(3 * 86400 + 3600), "3d1h");
        assert_eq!(human_duration(400 * 86400), "400d");
    }

    #[test]
    fn pods_lay_out_as_kubectl() {
        let pod_json = serde_json::json!({
            "metadata": {"name": "p-k", "namespace": "default", "labels": {"run": "p-k"}},
            "spec": {"priority": 0, "serviceAccountName": "default",
                "containers": [{"name": "p-k", "image": "nginx", "ports": [{"containerPort": 80, "protocol": "TCP"}],
                    "volumeMounts": [{"name": "kube-api-access-jvccg", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}]}],
                "volumes": [{"name": "kube-api-access-jvccg", "projected": {"sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt"}},
                    {"downwardAPI": {}}]}}],
                "tolerations": [
                    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]},
            "status": {"phase": "Pending", "qosClass": "BestEffort",
                "conditions": [{"type": "PodScheduled", "status": "False"}]}
        });
        let mut w = W(String::new());
        pod(&mut w, &pod_json);
        // kubectl 1.33's `describe pod` of the same pod, up to its events.
        let kubectl = "Name:             p-k\nNamespace:        default\nPriority:         0\nService Account:  default\nNode:             <none>\nLabels:           run=p-k\nAnnotations:      <none>\nStatus:           Pending\nIP:               \nIPs:              <none>\nContainers:\n  p-k:\n    Image:        nginx\n    Port:         80/TCP\n    Host Port:    0/TCP\n    Environment:  <none>\n    Mounts:\n      /var/run/secrets/kubernetes.io/serviceaccount from kube-api-access-jvccg (ro)\nConditions:\n  Type           Status\n  PodScheduled   False \nVolumes:\n  kube-api-access-jvccg:\n    Type:                    Projected (a volume that contains injected data from multiple sources)\n    TokenExpirationSeconds:  3607\n    ConfigMapName:           kube-root-ca.crt\n    Optional:                false\n    DownwardAPI:             true\nQoS Class:                   BestEffort\nNode-Selectors:              <none>\nTolerations:                 node.kubernetes.io/not-ready:NoExecute op=Exists for 300s\n                             node.kubernetes.io/unreachable:NoExecute op=Exists for 300s\n";
        assert_eq!(tabwrite_with(&w.0, 0, 2), kubectl);
    }
}

#[derive(clap::Args)]
pub struct EventsArgs {
    /// Filter events to only those pertaining to the specified resource.
    #[arg(long = "for")]
    for_: Option<String>,
    /// If present, list the requested object(s) across all namespaces.
    #[arg(short = 'A', long)]
    all_namespaces: bool,
    /// Output only events of given types.
    #[arg(long, value_delimiter = ',')]
    types: Vec<String>,
    /// When using the default output format, don't print headers.
    #[arg(long)]
    no_headers: bool,
}

/// The event's interval as kubectl's `events` and `describe` word it.
fn interval(e: &Value) -> String {
    let first = if e["eventTime"].is_null() {
        since(&e["firstTimestamp"])
    } else {
        since(&e["eventTime"])
    };
    let count = e["count"].as_i64().unwrap_or(0);
    if !e["series"].is_null() {
        format!(
            "{} (x{} over {first})",
            since(&e["series"]["lastObservedTime"]),
            e["series"]["count"].as_i64().unwrap_or(1)
        )
    } else if count > 1 {
        format!("{} (x{count} over {first})", since(&e["lastTimestamp"]))
    } else {
        first
    }
}

/// `kubectl events`: the namespace's events, oldest first.
pub async fn events(session: &Session, a: EventsArgs) -> Result<i32> {
    let ns = &session.conn.namespace;
    let mut fields = Vec::new();
    if let Some(target) = &a.for_ {
        let (kind, name) = target
            .split_once('/')
            .ok_or_else(|| msg(format!("--for must be in resource/name form, not {target}")))?;
        let r = session.resource(kind).await?;
        fields.push(format!("involvedObject.kind={}", r.kind));
        fields.push(format!("involvedObject.apiVersion={}", r.api_version()));
        fields.push(format!("involvedObject.name={name}"));
    }
    let mut path = if a.all_namespaces {
        "/api/v1/events?limit=500".to_owned()
    } else {
        format!("/api/v1/namespaces/{ns}/events?limit=500")
    };
    if !fields.is_empty() {
        path.push_str(&format!("&fieldSelector={}", encode(&fields.join(","))));
    }
    let list = session.conn.rest.get(&path).await?;
    let mut items: Vec<Value> = list["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| a.types.is_empty() || a.types.iter().any(|t| e["type"] == t.as_str()))
        .collect();
    if items.is_empty() {
        if a.all_namespaces {
            eprintln!("No events found.");
        } else {
            eprintln!("No events found in {ns} namespace.");
        }
        return Ok(0);
    }
    let when = |e: &Value| -> String {
        if !e["series"].is_null() {
            s(&e["series"]["lastObservedTime"])
        } else if !e["lastTimestamp"].is_null() {
            s(&e["lastTimestamp"])
        } else {
            s(&e["eventTime"])
        }
    };
    items.sort_by_key(|e| when(e));
    let mut text = String::new();
    if !a.no_headers {
        if a.all_namespaces {
            text.push_str("NAMESPACE\t");
        }
        text.push_str("LAST SEEN\tTYPE\tREASON\tOBJECT\tMESSAGE\n");
    }
    for e in &items {
        if a.all_namespaces {
            text.push_str(&format!("{}\t", s(&e["metadata"]["namespace"])));
        }
        text.push_str(&format!(
            "{}\t{}\t{}\t{}/{}\t{}\n",
            interval(e),
            s(&e["type"]),
            s(&e["reason"]),
            s(&e["involvedObject"]["kind"]),
            s(&e["involvedObject"]["name"]),
            s(&e["message"]).trim()
        ));
    }
    out(&tabwrite_with(&text, 6, 3));
    Ok(0)
}

#[cfg(test)]
mod generic_tests {
    use super::*;

    #[test]
    fn smart_labels_split_as_kubectl() {
        assert_eq!(smart_label("creationTimestamp"), "Creation Timestamp");
        assert_eq!(smart_label("apiVersion"), "API Version");
        assert_eq!(smart_label("uid"), "UID");
        assert_eq!(smart_label("podIP"), "Pod IP");
        assert_eq!(smart_label("HTMLParser"), "HTML Parser");
        assert_eq!(smart_label("$patch"), "$patch");
        assert_eq!(smart_label("k8s.io/x"), "k8s.io/x");
        assert_eq!(smart_label("leaseDurationSeconds"), "Lease Duration Seconds");
    }
}
