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
    /// If non-empty, sort list types using this field specification (a JSONPath expression,
    /// e.g. '{.metadata.name}').
    #[arg(long)]
    sort_by: Option<String>,
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
                let mut tables = fetch(session, &a, r, ns.as_deref(), &req.names, TABLE, &mut errors).await?;
                if let Some(field) = &a.sort_by {
                    // All rows in one table, ordered by the field of their objects.
                    let mut rows: Vec<Value> = tables
                        .iter_mut()
                        .flat_map(|t| t["rows"].as_array_mut().map(std::mem::take).unwrap_or_default())
                        .collect();
                    // (kubectl 1.33 prints no table at all when no row has the field.)
                    if rows.len() > 1 && sort_by_field(&mut rows, field, |row| &row["object"]).is_err() {
                        rows.clear();
                    }
                    if let Some(first) = tables.first_mut() {
                        first["rows"] = Value::Array(rows);
                        tables.truncate(1);
                    }
                }
                for t in tables {
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
    if let (Some(field), false) = (&a.sort_by, matches!(output, Output::Table { .. })) {
        if !single {
            sort_by_field(&mut items, field, |item| item)?;
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
        Output::Yaml | Output::Json | Output::JsonPath(_) | Output::GoTemplate(_) => {
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
                // kubectl leaves managedFields out of YAML and JSON only: templates see them.
                if !a.show_managed_fields && matches!(output, Output::Yaml | Output::Json) {
                    strip_managed_fields(&mut doc);
                }
                match &output {
                    Output::Yaml => out(&printers::yaml::to_string(&doc)),
                    Output::JsonPath(t) => out(&printers::jsonpath::execute(t, &doc)),
                    Output::GoTemplate(t) => match printers::gotemplate::execute(t, &doc) {
                        Ok(text) => out(&text),
                        // kubectl prints its report on stdout, then fails.
                        Err((report, e)) => {
                            out(&report);
                            return Err(msg(e));
                        }
                    },
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

/// `--sort-by`: `items` ordered (stably) by the JSONPath `field` of what `object` picks from
/// each, compared as kubectl 1.33's sorter does: numbers by value, strings as quantities when
/// both are, else byte by byte; an item without the field first. (Later kubectls compare
/// strings in natural order.)
fn sort_by_field(items: &mut [Value], field: &str, object: impl Fn(&Value) -> &Value) -> Result<()> {
    let template = if field.starts_with('{') {
        field.to_owned()
    } else {
        format!("{{{field}}}")
    };
    let mut keys: Vec<Option<Value>> = Vec::with_capacity(items.len());
    for i in items.iter() {
        let found = printers::jsonpath::values(&template, object(i)).map_err(msg)?;
        keys.push(found.into_iter().next());
    }
    if !items.is_empty() && keys.iter().all(Option::is_none) {
        return Err(msg(format!(
            "couldn't find any field with path \"{template}\" in the list of objects"
        )));
    }
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by(|&x, &y| compare_keys(keys[x].as_ref(), keys[y].as_ref()));
    let sorted: Vec<Value> = order.iter().map(|&i| items[i].clone()).collect();
    for (slot, v) in items.iter_mut().zip(sorted) {
        *slot = v;
    }
    Ok(())
}

fn compare_keys(a: Option<&Value>, b: Option<&Value>) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, _) => Ordering::Less,
        (_, None) => Ordering::Greater,
        (Some(Value::Number(x)), Some(Value::Number(y))) => {
            x.as_f64().partial_cmp(&y.as_f64()).unwrap_or(Ordering::Equal)
        }
        (Some(Value::String(x)), Some(Value::String(y))) => match (quantity(x), quantity(y)) {
            (Some(qx), Some(qy)) => qx.partial_cmp(&qy).unwrap_or(Ordering::Equal),
            _ => x.cmp(y),
        },
        (Some(Value::Bool(x)), Some(Value::Bool(y))) => x.cmp(y),
        (Some(x), Some(y)) => x.to_string().cmp(&y.to_string()),
    }
}

/// A resource quantity's value (`100m`, `1Gi`, `2e3`), if the string is one.
fn quantity(s: &str) -> Option<f64> {
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    if number.is_empty() || number == "+" || number == "-" {
        return None;
    }
    let n: f64 = number.parse().ok()?;
    let scale = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        e if e.starts_with(['e', 'E']) => 10f64.powi(e[1..].parse().ok()?),
        _ => return None,
    };
    Some(n * scale)
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
        // Sorting needs every item at once: no chunks, as kubectl.
        let chunk_size = if a.sort_by.is_some() { 0 } else { a.chunk_size };
        let mut query = Vec::new();
        if chunk_size > 0 {
            query.push(format!("limit={chunk_size}"));
        }
        if a.sort_by.is_some() && accept == TABLE {
            // Rows are sorted by their objects' fields.
            query.push("includeObject=Object".to_owned());
        }
        if let Some(l) = &a.selector {
            query.push(format!("labelSelector={}", encode(l)));
        }
        if let Some(f) = &a.field_selector {
            query.push(format!("fieldSelector={}", encode(f)));
        }
        if !cont.is_empty() {
            query.push(format!("continue={}", encode(&cont)));
        }
        let uri = if query.is_empty() {
            path.clone()
        } else {
            format!("{path}?{}", query.join("&"))
        };
        let doc = session.conn.rest.json(Method::GET, &uri, accept, None).await?;
        cont = doc["metadata"]["continue"].as_str().unwrap_or("").to_owned();
        docs.push(doc);
        if cont.is_empty() || chunk_size == 0 {
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

#[cfg(test)]
mod sort_tests {
    use super::*;

    #[test]
    fn sort_keys_compare_as_kubectl_1_33() {
        assert_eq!(quantity("100m"), Some(0.1));
        assert_eq!(quantity("1Ki"), Some(1024.0));
        assert_eq!(quantity("2e3"), Some(2000.0));
        assert_eq!(quantity("s10"), None);
        let mut items = vec![
            json!({"n": "1Ki", "name": "s10"}),
            json!({"n": "100m", "name": "s2"}),
            json!({"name": "s0"}),
            json!({"n": "2", "name": "s1"}),
        ];
        sort_by_field(&mut items, ".n", |i| i).unwrap();
        let names: Vec<&str> = items.iter().map(|i| i["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            ["s0", "s2", "s1", "s10"],
            "missing first, then by quantity"
        );
        sort_by_field(&mut items, "{.name}", |i| i).unwrap();
        let names: Vec<&str> = items.iter().map(|i| i["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["s0", "s1", "s10", "s2"], "byte order, as kubectl 1.33");
        let err = sort_by_field(&mut items, ".nope", |i| i).unwrap_err();
        assert_eq!(
            err.to_string(),
            "error: couldn't find any field with path \"{.nope}\" in the list of objects"
        );
    }
}
