//! `kubectl get`: resources by type and name (`TYPE NAME…`, `TYPE/NAME…`, `TYPE1,TYPE2`,
//! `all`), listed in chunks, printed from the server's Tables or as YAML, JSON or names.

use http::Method;
use serde_json::{json, Value};

use crate::discovery::Resource;
use crate::error::{msg, ApiError, Error, Result};
use crate::printers::{self, table};
use crate::rest::{JSON, TABLE};
use crate::{out, Output, Session};

#[derive(clap::Args)]
pub struct GetArgs {
    /// TYPE[.VERSION][.GROUP] [NAME ...] or TYPE[.VERSION][.GROUP]/NAME ...
    args: Vec<String>,
    /// Output format: json, yaml, name, wide.
    #[arg(short = 'o', long)]
    output: Option<String>,
    /// Selector (label query) to filter on.
    #[arg(short = 'l', long)]
    selector: Option<String>,
    /// Selector (field query) to filter on.
    #[arg(long)]
    field_selector: Option<String>,
    /// List the requested object(s) across all namespaces.
    #[arg(short = 'A', long)]
    all_namespaces: bool,
    /// When printing, show all labels as the last column.
    #[arg(long)]
    show_labels: bool,
    /// If present, list the resource type for the requested object(s).
    #[arg(long)]
    show_kind: bool,
    /// Accepts a comma separated list of labels that are going to be presented as columns.
    #[arg(short = 'L', long = "label-columns", value_delimiter = ',')]
    label_columns: Vec<String>,
    /// When using the default or custom-column output format, don't print headers.
    #[arg(long)]
    no_headers: bool,
    /// If the requested object does not exist the command will return exit code 0.
    #[arg(long)]
    ignore_not_found: bool,
    /// Return large lists in chunks rather than all at once.
    #[arg(long, default_value_t = 500)]
    chunk_size: u32,
    /// If true, keep the managedFields when printing objects in JSON or YAML format.
    #[arg(long)]
    show_managed_fields: bool,
    /// After listing/getting the requested object, watch for changes.
    #[arg(short = 'w', long)]
    watch: bool,
    /// Watch for changes to the requested object(s), without listing/getting first.
    #[arg(long)]
    watch_only: bool,
    /// Raw URI to request from the server.
    #[arg(long)]
    raw: Option<String>,
}

/// What one argument asks for: a resource and its names (none: list).
pub(crate) struct Request {
    pub resource: Resource,
    pub names: Vec<String>,
}

/// kubectl's resource arguments: `TYPE[,TYPE…] [NAME…]` or `TYPE/NAME…`.
pub(crate) async fn requests(session: &Session, args: &[String]) -> Result<Vec<Request>> {
    let mut out: Vec<Request> = Vec::new();
    if args.iter().any(|a| a.contains('/')) {
        if !args.iter().all(|a| a.contains('/')) {
            return Err(msg("there is no need to specify a resource type as a separate argument when passing arguments in resource/name form (e.g. 'kubectl get resource/<resource_name>' instead of 'kubectl get resource resource/<resource_name>'"));
        }
        for a in args {
            let (t, name) = a.split_once('/').unwrap_or((a, ""));
            if name.is_empty() {
                return Err(msg(
                    "arguments in resource/name form must have a single resource and name",
                ));
            }
            let resource = session.resource(t).await?;
            match out.last_mut() {
                Some(last) if last.resource == resource => last.names.push(name.to_owned()),
                _ => out.push(Request {
                    resource,
                    names: vec![name.to_owned()],
                }),
            }
        }
        return Ok(out);
    }
    let Some(types) = args.first() else {
        return Ok(out);
    };
    let names: Vec<String> = args[1..].to_vec();
    for t in types.split(',').filter(|t| !t.is_empty()) {
        if t == "all" || session.discovery().await?.resolve(t).is_none() {
            let d = session.discovery().await?;
            let members = d.category(t);
            if !members.is_empty() {
                for r in members {
                    out.push(Request {
                        resource: r.clone(),
                        names: names.clone(),
                    });
                }
                continue;
            }
        }
        out.push(Request {
            resource: session.resource(t).await?,
            names: names.clone(),
        });
    }
    Ok(out)
}

pub async fn run(session: &Session, a: GetArgs) -> Result<i32> {
    if let Some(raw) = &a.raw {
        let (code, body) = session.conn.rest.send(Method::GET, raw, JSON, None).await?;
        if !(200..300).contains(&code) {
            return Err(Error::Api(ApiError::from_response(code, &body)));
        }
        out(&String::from_utf8_lossy(&body));
        return Ok(0);
    }
    if a.args.is_empty() {
        return Err(Error::Raw("You must specify the type of resource to get. Use \"kubectl api-resources\" for a complete list of supported resources.\n\nerror: Required resource not specified.\nUse \"kubectl explain <resource>\" for a detailed description of that resource (e.g. kubectl explain pods).\nSee 'kubectl get -h' for help and examples".into()));
    }
    let output = Output::parse(a.output.as_deref())?;
    let reqs = requests(session, &a.args).await?;
    let several_types = {
        let mut kinds: Vec<&str> = reqs.iter().map(|r| r.resource.name.as_str()).collect();
        kinds.dedup();
        kinds.len() > 1 || a.args.first().is_some_and(|t| t == "all")
    };
    let ns = session.conn.namespace.clone();
    let namespace =
        |r: &Resource| -> Option<String> { (r.namespaced && !a.all_namespaces).then(|| ns.clone()) };
    let watching = a.watch || a.watch_only;
    if watching && reqs.len() != 1 {
        return Err(msg("you may only specify a single resource type"));
    }
    let mut errors: Vec<Error> = Vec::new();
    let mut printed_any = false;
    let mut items: Vec<Value> = Vec::new();
    let mut single = false;
    for req in &reqs {
        let r = &req.resource;
        let ns = namespace(r);
        match &output {
            Output::Table { wide } => {
                let opts = table::TableOptions {
                    wide: *wide,
                    no_headers: a.no_headers,
                    with_namespace: a.all_namespaces && r.namespaced,
                    kind_prefix: (several_types || a.show_kind).then(|| r.kind_prefix()),
                    show_labels: a.show_labels,
                    label_columns: a.label_columns.clone(),
                };
                let mut lines = Vec::new();
                let mut header = true;
                let mut version = String::new();
                for t in fetch(session, &a, r, ns.as_deref(), &req.names, TABLE, &mut errors).await? {
                    let rows = table::rows(&t, &opts, header);
                    version = t["metadata"]["resourceVersion"].as_str().unwrap_or("").to_owned();
                    if t["rows"].as_array().is_some_and(|rows| !rows.is_empty()) {
                        header = false;
                        lines.extend(rows);
                    }
                }
                if watching {
                    if a.watch_only {
                        lines.clear();
                    }
                    return watch(session, &a, r, ns.as_deref(), &opts, lines, &version).await;
                }
                if !lines.is_empty() {
                    if printed_any {
                        out("\n");
                    }
                    out(&table::tabwrite(&lines));
                    printed_any = true;
                }
            }
            _ => {
                if req.names.len() == 1 && reqs.len() == 1 {
                    single = true;
                }
                for doc in fetch(session, &a, r, ns.as_deref(), &req.names, JSON, &mut errors).await? {
                    if doc["kind"].as_str().is_some_and(|k| k.ends_with("List")) && doc.get("items").is_some()
                    {
                        for mut item in doc["items"].as_array().cloned().unwrap_or_default() {
                            item["apiVersion"] = json!(r.api_version());
                            item["kind"] = json!(r.kind);
                            items.push(item);
                        }
                    } else {
                        items.push(doc);
                    }
                }
            }
        }
    }
    match &output {
        Output::Table { .. } => {}
        Output::Name => {
            for item in &items {
                let (group, _) = split_api_version(item["apiVersion"].as_str().unwrap_or(""));
                out(&format!(
                    "{}\n",
                    printers::name_of(
                        item["kind"].as_str().unwrap_or(""),
                        group,
                        item["metadata"]["name"].as_str().unwrap_or("")
                    )
                ));
            }
            printed_any = !items.is_empty();
        }
        Output::CustomColumns(columns) => {
            let mut lines = Vec::new();
            if !a.no_headers {
                lines.push(columns.iter().map(|(n, _)| n.clone()).collect());
            }
            for item in &items {
                lines.push(
                    columns
                        .iter()
                        .map(|(_, t)| {
                            let v = printers::jsonpath::execute(t, item);
                            if v.is_empty() {
                                "<none>".to_owned()
                            } else {
                                v.replace(' ', ",")
                            }
                        })
                        .collect(),
                );
            }
            if !items.is_empty() {
                out(&table::tabwrite(&lines));
            }
            printed_any = !items.is_empty();
        }
        Output::Yaml | Output::Json | Output::JsonPath(_) => {
            // One object named alone prints as itself; anything else as a List, even an
            // empty one, unless nothing was found and something failed.
            let doc = if single {
                items.pop()
            } else if items.is_empty() && !errors.is_empty() {
                None
            } else {
                Some(
                    json!({"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}}),
                )
            };
            if let Some(mut doc) = doc {
                if !a.show_managed_fields {
                    strip_managed_fields(&mut doc);
                }
                match &output {
                    Output::Yaml => out(&printers::yaml::to_string(&doc)),
                    Output::JsonPath(t) => out(&printers::jsonpath::execute(t, &doc)),
                    _ => out(&printers::json::to_string(&doc)),
                }
            }
            printed_any = true;
        }
    }
    if !printed_any && errors.is_empty() && !a.ignore_not_found {
        let all_cluster = reqs.iter().all(|r| !r.resource.namespaced);
        if a.all_namespaces || all_cluster {
            eprintln!("No resources found");
        } else {
            eprintln!("No resources found in {} namespace.", session.conn.namespace);
        }
    }
    if errors.is_empty() {
        return Ok(0);
    }
    for e in &errors {
        eprintln!("{e}");
    }
    Ok(1)
}

/// kubectl hides `metadata.managedFields` unless `--show-managed-fields`.
pub(crate) fn strip_managed_fields(doc: &mut Value) {
    if let Some(items) = doc.get_mut("items").and_then(Value::as_array_mut) {
        for item in items {
            strip_managed_fields(item);
        }
    }
    if let Some(meta) = doc.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
}

/// `get -w`: the list, then a row for each change, columns as wide as any row so far (Go's
/// tabwriter with RememberWidths, as kubectl's). Ends when the server or `--request-timeout`
/// ends the watch.
async fn watch(
    session: &Session,
    a: &GetArgs,
    r: &Resource,
    ns: Option<&str>,
    opts: &table::TableOptions,
    initial: Vec<Vec<String>>,
    version: &str,
) -> Result<i32> {
    let mut widths: Vec<usize> = Vec::new();
    let print = |lines: &[Vec<String>], widths: &mut Vec<usize>| {
        for line in lines {
            for (i, cell) in line.iter().enumerate().take(line.len().saturating_sub(1)) {
                let w = (cell.chars().count() + 3).max(6);
                if widths.len() <= i {
                    widths.push(w);
                } else if widths[i] < w {
                    widths[i] = w;
                }
            }
        }
        let mut text = String::new();
        for line in lines {
            for (i, cell) in line.iter().enumerate() {
                text.push_str(cell);
                if i + 1 < line.len() {
                    for _ in cell.chars().count()..widths[i] {
                        text.push(' ');
                    }
                }
            }
            text.push('\n');
        }
        out(&text);
    };
    let mut header_due = initial.is_empty();
    print(&initial, &mut widths);
    let mut query = vec![
        "watch=1".to_owned(),
        format!("resourceVersion={version}"),
        "allowWatchBookmarks=true".to_owned(),
    ];
    if let Some(l) = &a.selector {
        query.push(format!("labelSelector={}", encode(l)));
    }
    if let Some(f) = &a.field_selector {
        query.push(format!("fieldSelector={}", encode(f)));
    }
    let uri = format!("{}?{}", r.collection_path(ns), query.join("&"));
    let (code, mut body) = session.conn.rest.stream_accept(Method::GET, &uri, TABLE).await?;
    if !(200..300).contains(&code) {
        use http_body_util::BodyExt;
        let bytes = body
            .collect()
            .await
            .map(|b| b.to_bytes().to_vec())
            .unwrap_or_default();
        return Err(Error::Api(ApiError::from_response(code, &bytes)));
    }
    let mut pending: Vec<u8> = Vec::new();
    loop {
        use http_body_util::BodyExt;
        let Some(Ok(frame)) = body.frame().await else {
            // The watch ended (the server closed it, or the request timed out): done.
            return Ok(0);
        };
        let Some(data) = frame.data_ref() else { continue };
        pending.extend_from_slice(data);
        while let Some(end) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let Ok(event) = serde_json::from_slice::<Value>(&line) else {
                continue;
            };
            match event["type"].as_str() {
                Some("BOOKMARK") => continue,
                Some("ERROR") => {
                    let st = serde_json::to_vec(&event["object"]).unwrap_or_default();
                    return Err(Error::Api(ApiError::from_response(
                        event["object"]["code"].as_u64().unwrap_or(500) as u16,
                        &st,
                    )));
                }
                _ => {}
            }
            if !a.names_match(&event["object"]) {
                continue;
            }
            let rows = table::rows(&event["object"], opts, header_due);
            header_due = false;
            print(&rows, &mut widths);
        }
    }
}

impl GetArgs {
    /// `get -w TYPE NAME` watches the collection but shows only the named objects.
    fn names_match(&self, table: &Value) -> bool {
        let names = &self.args[1.min(self.args.len())..];
        if names.is_empty() || self.args[0].contains('/') {
            return true;
        }
        table["rows"].as_array().into_iter().flatten().any(|r| {
            r["object"]["metadata"]["name"]
                .as_str()
                .is_some_and(|n| names.iter().any(|x| x == n))
        })
    }
}

pub(crate) fn split_api_version(av: &str) -> (&str, &str) {
    match av.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", av),
    }
}

/// The documents for one request: each named object, or the collection in chunks. Errors
/// for names go to `errors` (kubectl reports them after what it could print).
async fn fetch(
    session: &Session,
    a: &GetArgs,
    r: &Resource,
    ns: Option<&str>,
    names: &[String],
    accept: &str,
    errors: &mut Vec<Error>,
) -> Result<Vec<Value>> {
    let path = r.collection_path(ns);
    let mut docs = Vec::new();
    if !names.is_empty() {
        for name in names {
            match session
                .conn
                .rest
                .json(Method::GET, &format!("{path}/{name}"), accept, None)
                .await
            {
                Ok(v) => docs.push(v),
                Err(Error::Api(e)) if e.is_not_found() && a.ignore_not_found => {}
                Err(e @ Error::Api(_)) => errors.push(e),
                Err(e) => return Err(e),
            }
        }
        return Ok(docs);
    }
    let mut cont = String::new();
    loop {
        let mut query = vec![format!("limit={}", a.chunk_size)];
        if let Some(l) = &a.selector {
            query.push(format!("labelSelector={}", encode(l)));
        }
        if let Some(f) = &a.field_selector {
            query.push(format!("fieldSelector={}", encode(f)));
        }
        if !cont.is_empty() {
            query.push(format!("continue={}", encode(&cont)));
        }
        let uri = format!("{path}?{}", query.join("&"));
        let doc = session.conn.rest.json(Method::GET, &uri, accept, None).await?;
        cont = doc["metadata"]["continue"].as_str().unwrap_or("").to_owned();
        docs.push(doc);
        if cont.is_empty() || a.chunk_size == 0 {
            break;
        }
    }
    Ok(docs)
}

/// Percent-encoding of a query value (what Go's url.Values.Encode escapes).
pub(crate) fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}
