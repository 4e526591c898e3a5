//! `kubectl explain RESOURCE[.FIELD…]`: the documentation of a kind or one of its fields, read
//! from the server's OpenAPI v3 document of the resource's group-version, printed as kubectl
//! 1.33's `plaintext` template (`explain/v2/templates/plaintext.tmpl`) lays it out: the same
//! walk through `$ref`, `allOf`, `items` and `additionalProperties`, the same type hints
//! (`<[]Container>`, `<map[string]string>`), enums, `-required-` marks, and text wrapped by
//! the word-wrap algorithm kubectl uses (go-wordwrap).
//!
//! kubectl renders a Go template; there is no crate for Go templates with sprig-like
//! functions, and the template only walks JSON, so the walk is written out here, one function
//! per template (`output`, `fieldList`, `fieldDetail`, `description`, `typeGuess`,
//! `extractEnum`).
//!
//! Documents are cached on disk by their hash-bearing URL (the server's `/openapi/v3` index
//! names each document with a content hash, so a cached one never goes stale).

use std::collections::HashSet;
use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::error::{msg, Error, Result};
use crate::{out, Session};

#[derive(clap::Args)]
pub struct ExplainArgs {
    /// The resource, with an optional field path (`pods.spec.containers`).
    resource: Option<String>,
    /// Use the given api-version (group/version) of the resource.
    #[arg(long)]
    api_version: Option<String>,
    /// Print the fields of fields (currently only 1 level deep).
    #[arg(long)]
    recursive: bool,
    /// Format in which to render the schema. Valid values are: (plaintext).
    #[arg(long = "output", default_value = "plaintext")]
    output: String,
}

pub async fn run(session: &Session, a: ExplainArgs) -> Result<i32> {
    if a.output != "plaintext" {
        return Err(msg(format!(
            "unsupported output format: {}. Valid values are: plaintext",
            a.output
        )));
    }
    let Some(arg) = a.resource.filter(|r| !r.is_empty()) else {
        return Err(msg(
            "You must specify the type of resource to explain. Use \"kubectl api-resources\" for a complete list of supported resources.",
        ));
    };
    // The longest prefix that names a resource (`deployments.apps.spec`: `deployments.apps`),
    // the rest a field path (upstream's SplitAndParseResourceRequestWithMatchingPrefix).
    let parts: Vec<&str> = arg.split('.').collect();
    let d = session.discovery().await?;
    let mut found = None;
    for i in (1..=parts.len()).rev() {
        if let Some(r) = d.resolve_group_resource(&parts[..i].join(".")) {
            found = Some((
                r.clone(),
                parts[i..].iter().map(|p| p.to_string()).collect::<Vec<_>>(),
            ));
            break;
        }
    }
    let (mut resource, path) = match found {
        Some(f) => f,
        // A cached discovery may be stale: the session's lookup refreshes it.
        None => match session.resource(parts[0]).await {
            Ok(r) => (r, parts[1..].iter().map(|p| p.to_string()).collect()),
            Err(_) => {
                return Err(Error::Raw(format!(
                    "the server doesn't have a resource type \"{}\"",
                    parts[0]
                )))
            }
        },
    };
    if let Some(gv) = &a.api_version {
        // The given group-version replaces the preferred one; its kind is what that version
        // serves under the same resource name.
        let (group, version) = gv.split_once('/').unwrap_or(("", gv.as_str()));
        let gvr = format!("{group}/{version}, Resource={}", resource.name);
        let served = d
            .resources
            .iter()
            .find(|r| r.group == group && r.version == version && r.name == resource.name)
            .cloned();
        resource = match served {
            Some(r) => r,
            None if d
                .groups
                .iter()
                .any(|g| g.name == group && g.versions.iter().any(|v| v == version)) =>
            {
                return Err(msg(format!("GVR ({gvr}) not found in OpenAPI schema")))
            }
            None => return Err(msg(format!("couldn't find resource for \"{gvr}\""))),
        };
    }
    let doc = document(session, &resource.group, &resource.version).await?;
    let gvk =
        serde_json::json!({"group": resource.group, "kind": resource.kind, "version": resource.version});
    let mut header = String::new();
    if !resource.group.is_empty() {
        header += &format!("GROUP:      {}\n", resource.group);
    }
    header += &format!(
        "KIND:       {}\nVERSION:    {}\n\n",
        resource.kind, resource.version
    );
    let schema = doc["components"]["schemas"].as_object().and_then(|schemas| {
        let mut names: Vec<&String> = schemas.keys().collect();
        names.sort();
        names.into_iter().map(|n| &schemas[n]).find(|s| {
            s["x-kubernetes-group-version-kind"]
                .as_array()
                .is_some_and(|l| l.contains(&gvk))
        })
    });
    let Some(schema) = schema else {
        out(&header);
        return Err(Error::Message(format!(
            "GVK map[group:{} kind:{} version:{}] not found in OpenAPI schema",
            resource.group, resource.kind, resource.version
        )));
    };
    let explain = Explain {
        doc: &doc,
        recursive: a.recursive,
    };
    let text = explain.output(schema, &HashSet::new(), &path);
    if text.is_empty() {
        out(&header);
        return Err(msg(format!(
            "field \"{}\" does not exist",
            path.last().cloned().unwrap_or_default()
        )));
    }
    out(&format!("{header}{text}\n"));
    Ok(0)
}

/// The OpenAPI v3 document of `group/version`: the index names it with its hash; a cached
/// copy under that name is used as it is.
async fn document(session: &Session, group: &str, version: &str) -> Result<Value> {
    let key = if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    };
    let index = session.conn.rest.get("/openapi/v3").await?;
    let Some(url) = index["paths"][&key]["serverRelativeURL"].as_str() else {
        return Err(msg(format!(
            "couldn't find resource for \"{}\"",
            if group.is_empty() {
                version.to_string()
            } else {
                format!("{group}/{version}")
            }
        )));
    };
    let cached = cache_path(session, url);
    if let Some(doc) = cached
        .as_ref()
        .and_then(|p| std::fs::read(p).ok())
        .and_then(|b| serde_json::from_slice(&b).ok())
    {
        return Ok(doc);
    }
    let doc = session.conn.rest.get(url).await?;
    if let Some(p) = cached {
        // A failed write only costs the next run a download.
        if let Some(dir) = p.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let tmp = p.with_extension("tmp");
        if std::fs::write(&tmp, doc.to_string()).is_ok() {
            let _ = std::fs::rename(&tmp, &p);
        }
    }
    Ok(doc)
}

/// Where a hash-named document is kept: `<discovery cache>/openapi/v3/<path>_<hash>.json`.
/// Without a hash in its URL a document is not cached.
fn cache_path(session: &Session, url: &str) -> Option<PathBuf> {
    let (path, query) = url.split_once('?')?;
    let hash = query.split('&').find_map(|kv| kv.strip_prefix("hash="))?;
    if hash.is_empty() || !hash.chars().all(|c| c.is_ascii_alphanumeric()) {
        return None;
    }
    let path = path.trim_start_matches('/').replace('/', "_");
    Some(
        session
            .cache_dir()
            .join("openapi")
            .join(format!("{path}_{hash}.json")),
    )
}

struct Explain<'a> {
    doc: &'a Value,
    recursive: bool,
}

/// Go templates' truthiness of a JSON value: false, 0, "", null, and empty lists and maps are
/// false.
pub(crate) fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// A map-valued `additionalProperties` (not `true`/`false`).
fn additional(s: &Value) -> Option<&Value> {
    s.get("additionalProperties")
        .filter(|v| v.is_object() && truthy(v))
}

fn items(s: &Value) -> Option<&Value> {
    s.get("items").filter(|v| truthy(v))
}

fn all_of(s: &Value) -> &[Value] {
    s["allOf"].as_array().map(Vec::as_slice).unwrap_or_default()
}

fn properties(s: &Value) -> Option<&Map<String, Value>> {
    s["properties"].as_object().filter(|p| !p.is_empty())
}

fn indent(amount: usize, s: &str) -> String {
    let pad = " ".repeat(amount);
    format!("{pad}{}", s.replace('\n', &format!("\n{pad}")))
}

impl<'a> Explain<'a> {
    /// `resolveRef`: a `#/components/schemas/…` reference in the document; None for anything
    /// else, as kubectl treats what it cannot follow.
    fn resolve(&self, r: &Value) -> Option<&'a Value> {
        let r = r.as_str()?;
        let fragment = r.strip_prefix('#')?;
        let mut cur = self.doc;
        for k in fragment.split('/').filter(|k| !k.is_empty()) {
            cur = cur.get(k).filter(|v| v.is_object())?;
        }
        Some(cur)
    }

    /// The schema itself, or what its `$ref` names.
    fn resolved<'s>(&self, s: &'s Value) -> &'s Value
    where
        'a: 's,
    {
        self.resolve(&s["$ref"]).filter(|v| truthy(v)).unwrap_or(s)
    }

    /// The template's `output`: follow `path`; at its end, the description and fields.
    fn output(&self, schema: &Value, history: &HashSet<String>, path: &[String]) -> String {
        let reference = schema["$ref"].as_str().unwrap_or_default().to_string();
        let mut next = history.clone();
        next.insert(reference.clone());
        let resolved = self.resolved(schema);
        let Some(first) = path.first() else {
            let mut s = String::from("DESCRIPTION:\n");
            let description = self.description(resolved);
            let description = if description.is_empty() {
                "<empty>".to_string()
            } else {
                description
            };
            s += &indent(4, &wrap(76, &description));
            s += "\n";
            let docs = external_docs(resolved, None);
            if !docs.is_empty() {
                s += "\n";
                s += &docs;
            }
            let fields = self.field_list(resolved, 1, &HashSet::new());
            if !fields.is_empty() {
                s += "FIELDS:\n";
                s += &fields;
            }
            return s;
        };
        if !reference.is_empty() && history.contains(&reference) {
            return String::new();
        }
        if let Some(sub) = properties(resolved).and_then(|p| p.get(first)) {
            let mut s = String::new();
            if path.len() == 1 {
                s += &format!("FIELD: {first} <{}>\n", self.type_guess(sub));
                s += &extract_enum(sub, true, -1, 0);
                s += "\n\n";
            }
            s += &self.output(sub, &HashSet::new(), &path[1..]);
            return s;
        }
        if let Some(i) = items(resolved) {
            return self.output(i, &next, path);
        }
        if let Some(m) = additional(resolved) {
            return self.output(m, &next, path);
        }
        for sub in all_of(resolved) {
            let s = self.output(sub, &next, path);
            if !s.is_empty() {
                return s;
            }
        }
        String::new()
    }

    /// The template's `fieldList`: every property, sorted, then those of `allOf`, `items` and
    /// a map's values; with `--recursive`, each field's own fields one level deeper.
    fn field_list(&self, schema: &Value, level: usize, history: &HashSet<String>) -> String {
        let reference = schema["$ref"].as_str().unwrap_or_default().to_string();
        if !reference.is_empty() && history.contains(&reference) {
            return String::new();
        }
        let mut next = history.clone();
        next.insert(reference);
        let resolved = self.resolved(schema);
        let mut s = String::new();
        if let Some(props) = properties(resolved) {
            let mut names: Vec<&String> = props.keys().collect();
            names.sort();
            for name in names {
                s += &self.field_detail(name, resolved, level);
                if self.recursive {
                    s += &self.field_list(&props[name], level + 1, &next);
                }
            }
        }
        for sub in all_of(resolved) {
            s += &self.field_list(sub, level, &next);
        }
        if let Some(i) = items(resolved) {
            s += &self.field_list(i, level, &next);
        }
        if let Some(m) = additional(resolved) {
            s += &self.field_list(m, level, &next);
        }
        s
    }

    /// The template's `fieldDetail`: `name<TAB><type> -required-`, enums, and (unless
    /// recursive) the wrapped description.
    fn field_detail(&self, name: &str, container: &Value, level: usize) -> String {
        let pad = level * 2;
        let field = &container["properties"][name];
        let mut s = format!("{}\t<{}>", indent(pad, name), self.type_guess(field));
        if container["required"]
            .as_array()
            .is_some_and(|r| r.iter().any(|n| n == name))
        {
            s += " -required-";
        }
        s += &extract_enum(field, false, 4, pad);
        s += "\n";
        if !self.recursive {
            let description = field["description"]
                .as_str()
                .filter(|d| !d.is_empty())
                .unwrap_or("<no description>");
            s += &indent(pad + 2, &wrap(78usize.saturating_sub(pad), description));
            s += "\n";
            s += &external_docs(field, Some(pad));
            s += "\n";
        }
        s
    }

    /// The template's `description`: the schema's own and those of what it is made of.
    fn description(&self, schema: &Value) -> String {
        let s = self.resolved(schema);
        let mut out = String::new();
        if let Some(d) = s["description"].as_str().filter(|d| !d.is_empty()) {
            out += d;
            out += "\n";
        }
        for sub in all_of(s) {
            out += &self.description(sub);
        }
        if let Some(i) = items(s) {
            out += &self.description(i);
        }
        if let Some(m) = additional(s) {
            out += &self.description(m);
        }
        out
    }

    /// The template's `typeGuess`: `[]T`, `map[string]T`, the referenced kind's short name,
    /// or the JSON type (`Object` for objects).
    fn type_guess(&self, s: &Value) -> String {
        if let Some(i) = items(s) {
            return format!("[]{}", self.type_guess(i));
        }
        if let Some(m) = additional(s) {
            return format!("map[string]{}", self.type_guess(m));
        }
        let all = all_of(s);
        if all.len() == 1 && properties(s).is_none() {
            return self.type_guess(&all[0]);
        }
        if let Some(r) = s["$ref"].as_str().filter(|r| !r.is_empty()) {
            let target = self.resolve(&s["$ref"]).filter(|v| truthy(v));
            let ty = target.and_then(|t| t["type"].as_str()).filter(|t| !t.is_empty());
            return match ty {
                None | Some("object") => {
                    let name = r.rsplit('/').next().unwrap_or_default();
                    let short = name.rsplit('.').next().unwrap_or_default();
                    if short.is_empty() {
                        "Object".into()
                    } else {
                        short.into()
                    }
                }
                Some(t) => t.into(),
            };
        }
        match s["type"].as_str() {
            Some("object") | None | Some("") => "Object".into(),
            Some(t) => t.into(),
        }
    }
}

/// External docs: the template's `externalDocs` under DESCRIPTION (`field: None`), or the
/// block `fieldDetail` prints under a field indented by `field` (with a blank line first).
fn external_docs(s: &Value, field: Option<usize>) -> String {
    let docs = &s["externalDocs"];
    if !truthy(docs) {
        return String::new();
    }
    let (mut out, head, body, width) = match field {
        None => (String::new(), 0, 4, 76),
        Some(pad) => ("\n".to_string(), pad + 2, pad + 4, 76usize.saturating_sub(pad)),
    };
    out += &indent(head, "EXTERNAL DOCS:");
    out += "\n";
    if let Some(d) = docs["description"].as_str().filter(|d| !d.is_empty()) {
        out += &indent(body, &wrap(width, d));
        out += "\n";
    }
    if let Some(u) = docs["url"].as_str().filter(|u| !u.is_empty()) {
        out += &indent(body, &format!("URL: {u}"));
        out += "\n";
    }
    out
}

/// The template's `extractEnum`: `ENUM:` with one value per line in a field's long view;
/// `enum: a, b, c, d, ....` under a field in a list (at most `limit` values; -1: all).
fn extract_enum(s: &Value, long: bool, limit: i64, pad: usize) -> String {
    let Some(values) = s["enum"].as_array().filter(|e| !e.is_empty()) else {
        return String::new();
    };
    let mut out = if long {
        "ENUM:".to_string()
    } else {
        format!("\n{}enum: ", " ".repeat(pad))
    };
    for (i, v) in values.iter().enumerate() {
        if limit > -1 && i as i64 >= limit {
            out += ", ....";
            break;
        }
        if i > 0 && !long {
            out += ", ";
        } else if long {
            out += "\n    ";
        }
        out += &match v {
            Value::String(s) if s.is_empty() => "\"\"".to_string(),
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
    }
    out
}

/// Word wrap as kubectl's (`term.NewWordWrapWriter`, which is go-wordwrap's `WrapString`):
/// lines break at whitespace before they pass `limit` characters; a word longer than the
/// limit stays whole on its own line; newlines in the text are kept.
pub(crate) fn wrap(limit: usize, s: &str) -> String {
    let mut buf = String::with_capacity(s.len());
    let mut current = 0usize;
    let (mut word, mut space) = (String::new(), String::new());
    let (mut word_len, mut space_len) = (0usize, 0usize);
    for c in s.chars() {
        if c == '\n' {
            if word.is_empty() {
                // Trailing spaces that would pass the limit are dropped.
                if current + space_len <= limit {
                    buf += &space;
                }
            } else {
                buf += &space;
                buf += &word;
            }
            space.clear();
            space_len = 0;
            word.clear();
            word_len = 0;
            buf.push('\n');
            current = 0;
        } else if c.is_whitespace() && c != '\u{a0}' {
            if space.is_empty() || !word.is_empty() {
                current += space_len + word_len;
                buf += &space;
                buf += &word;
                space.clear();
                space_len = 0;
                word.clear();
                word_len = 0;
            }
            space.push(c);
            space_len += 1;
        } else {
            word.push(c);
            word_len += 1;
            if current + space_len + word_len > limit && word_len < limit {
                buf.push('\n');
                current = 0;
                space.clear();
                space_len = 0;
            }
        }
    }
    if word.is_empty() {
        if current + space_len <= limit {
            buf += &space;
        }
    } else {
        buf += &space;
        buf += &word;
    }
    buf
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wraps_as_go_wordwrap() {
        assert_eq!(wrap(10, "aaa bbb ccc ddd"), "aaa bbb\nccc ddd");
        // A word longer than the line stays whole.
        assert_eq!(
            wrap(10, "see https://example.com/long/path ok"),
            "see\nhttps://example.com/long/path\nok"
        );
        // Newlines are kept; a line starts counting again after one.
        assert_eq!(wrap(10, "one.\ntwo three four"), "one.\ntwo three\nfour");
        assert_eq!(wrap(10, "short\n"), "short\n");
    }

    #[test]
    fn types_are_guessed_as_kubectl_guesses_them() {
        let doc = json!({"components": {"schemas": {
            "io.k8s.api.core.v1.Container": {"type": "object", "properties": {"name": {"type": "string"}}},
            "io.k8s.apimachinery.pkg.api.resource.Quantity": {"type": "string"},
            "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"format": "int-or-string"},
        }}});
        let e = Explain {
            doc: &doc,
            recursive: false,
        };
        let r = |name: &str| json!({"$ref": format!("#/components/schemas/{name}")});
        assert_eq!(
            e.type_guess(&json!({"type": "array", "items": {"allOf": [r("io.k8s.api.core.v1.Container")]}})),
            "[]Container"
        );
        assert_eq!(
            e.type_guess(&json!({"type": "object", "additionalProperties": {"type": "string"}})),
            "map[string]string"
        );
        assert_eq!(
            e.type_guess(&json!({"allOf": [r("io.k8s.apimachinery.pkg.api.resource.Quantity")]})),
            "string"
        );
        assert_eq!(
            e.type_guess(&r("io.k8s.apimachinery.pkg.util.intstr.IntOrString")),
            "IntOrString"
        );
        assert_eq!(e.type_guess(&json!({"type": "object"})), "Object");
        assert_eq!(e.type_guess(&json!({"type": "integer"})), "integer");
    }

    #[test]
    fn fields_print_with_enums_and_required_marks() {
        let doc = json!({});
        let e = Explain {
            doc: &doc,
            recursive: false,
        };
        let container = json!({"required": ["type"], "properties": {
            "type": {"type": "string", "enum": ["", "A", "B", "C", "D"], "description": "The type."},
        }});
        assert_eq!(
            e.field_detail("type", &container, 1),
            "  type\t<string> -required-\n  enum: \"\", A, B, C, ....\n    The type.\n\n"
        );
        assert_eq!(
            extract_enum(&container["properties"]["type"], true, -1, 0),
            "ENUM:\n    \"\"\n    A\n    B\n    C\n    D"
        );
    }
}
