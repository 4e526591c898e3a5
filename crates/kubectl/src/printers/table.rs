//! The server's Tables printed as kubectl prints them: upper-cased headers, priority-0 columns
//! unless `-o wide`, NAMESPACE first with `-A`, `kind.group/name` when several kinds are shown,
//! label columns and LABELS at the end, aligned by Go's tabwriter (minimum width 6, padding 3).

use serde_json::Value;

#[derive(Default, Clone)]
pub struct TableOptions {
    pub wide: bool,
    pub no_headers: bool,
    pub with_namespace: bool,
    /// `deployment.apps`: prefix names with it (several kinds in one `get`).
    pub kind_prefix: Option<String>,
    pub show_labels: bool,
    /// `-L key`: one column per label key.
    pub label_columns: Vec<String>,
}

/// The rows (header first unless `no_headers`) of `table`, a meta.k8s.io Table, as cells.
pub fn rows(table: &Value, opts: &TableOptions, with_header: bool) -> Vec<Vec<String>> {
    let empty = Vec::new();
    let columns = table["columnDefinitions"].as_array().unwrap_or(&empty);
    let shown: Vec<usize> = columns
        .iter()
        .enumerate()
        .filter(|(_, c)| opts.wide || c["priority"].as_i64().unwrap_or(0) == 0)
        .map(|(i, _)| i)
        .collect();
    let mut out = Vec::new();
    if with_header && !opts.no_headers {
        let mut header = Vec::new();
        if opts.with_namespace {
            header.push("NAMESPACE".to_owned());
        }
        for &i in &shown {
            header.push(columns[i]["name"].as_str().unwrap_or("").to_uppercase());
        }
        header.extend(opts.label_columns.iter().map(|l| label_header(l)));
        if opts.show_labels {
            header.push("LABELS".to_owned());
        }
        out.push(header);
    }
    for row in table["rows"].as_array().unwrap_or(&empty) {
        let cells = row["cells"].as_array().unwrap_or(&empty);
        let meta = &row["object"]["metadata"];
        let mut line = Vec::new();
        if opts.with_namespace {
            line.push(meta["namespace"].as_str().unwrap_or("").to_owned());
        }
        for (n, &i) in shown.iter().enumerate() {
            let mut cell = cells.get(i).map(cell_text).unwrap_or_default();
            if n == 0 && i == 0 {
                if let Some(kind) = &opts.kind_prefix {
                    cell = format!("{kind}/{cell}");
                }
            }
            line.push(cell);
        }
        for key in &opts.label_columns {
            line.push(meta["labels"][key].as_str().unwrap_or("").to_owned());
        }
        if opts.show_labels {
            line.push(format_labels(&meta["labels"]));
        }
        out.push(line);
    }
    out
}

/// `-L app.kubernetes.io/name` heads its column NAME (the last path segment, upper-cased).
fn label_header(key: &str) -> String {
    key.rsplit('/').next().unwrap_or(key).to_uppercase()
}

/// `k=v,k2=v2` in key order, or `<none>`.
pub fn format_labels(labels: &Value) -> String {
    match labels.as_object() {
        Some(m) if !m.is_empty() => {
            let mut pairs: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect();
            pairs.sort();
            pairs.join(",")
        }
        _ => "<none>".to_owned(),
    }
}

/// A cell as kubectl writes it: strings cut at the first line break (with "..."), other
/// values as Go's `%v` prints them, null as nothing.
fn cell_text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => match s.find(['\n', '\r', '\u{c}']) {
            Some(i) => format!("{}...", &s[..i]),
            None => s.clone(),
        },
        Value::Number(n) => {
            if n.is_f64() {
                let f = n.as_f64().unwrap_or(0.0);
                super::yaml::go_format_g(f)
            } else {
                n.to_string()
            }
        }
        Value::Bool(b) => b.to_string(),
        other => other.to_string(),
    }
}

/// Go's text/tabwriter as kubectl configures it: every cell but a line's last is padded to
/// its column's width (the widest cell plus 3, at least 6); the last cell is written as is.
/// Several tables aligned separately are separate calls.
pub fn tabwrite(lines: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = Vec::new();
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
    let mut out = String::new();
    for line in lines {
        for (i, cell) in line.iter().enumerate() {
            out.push_str(cell);
            if i + 1 < line.len() {
                for _ in cell.chars().count()..widths[i] {
                    out.push(' ');
                }
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn table() -> Value {
        json!({"kind": "Table", "columnDefinitions": [
            {"name": "Name", "type": "string", "priority": 0},
            {"name": "Data", "type": "integer", "priority": 0},
            {"name": "Age", "type": "string", "priority": 0},
            {"name": "Extra", "type": "string", "priority": 1}],
          "rows": [
            {"cells": ["kube-root-ca.crt", 1, "40s", "x"], "object": {"metadata": {"namespace": "default"}}},
            {"cells": ["long", 10, "30s", "multi\nline"], "object": {"metadata": {"namespace": "default", "labels": {"b": "2", "a": "1"}}}}]})
    }

    #[test]
    fn lays_out_as_kubectl() {
        // kubectl 1.33's `get cm --show-labels -L app` of the same Table.
        let opts = TableOptions {
            show_labels: true,
            label_columns: vec!["app".into()],
            ..Default::default()
        };
        assert_eq!(
            tabwrite(&rows(&table(), &opts, true)),
            "NAME               DATA   AGE   APP   LABELS\nkube-root-ca.crt   1      40s         <none>\nlong               10     30s         a=1,b=2\n"
        );
        let opts = TableOptions {
            wide: true,
            with_namespace: true,
            kind_prefix: Some("configmap".into()),
            ..Default::default()
        };
        assert_eq!(
            tabwrite(&rows(&table(), &opts, true)),
            "NAMESPACE   NAME                         DATA   AGE   EXTRA\ndefault     configmap/kube-root-ca.crt   1      40s   x\ndefault     configmap/long               10     30s   multi...\n"
        );
    }
}
