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

/// A table's rows through Go's tabwriter as kubectl configures it for tables: minimum
/// width 6, padding 3.
pub fn tabwrite(lines: &[Vec<String>]) -> String {
    let mut text = String::new();
    for line in lines {
        text.push_str(&line.join("\t"));
        text.push('\n');
    }
    tabwrite_with(&text, 6, 3)
}

/// Go's text/tabwriter (left-aligned, space padding, no flags), which kubectl's tables
/// (minimum width 6, padding 3) and `describe` (0, 2) are laid out with. A line's cells are
/// its tab-terminated pieces; the text after its last tab is not a cell. A column block is a
/// run of consecutive lines that all have a cell in that column: its cells are padded to the
/// widest cell of the block plus the padding (at least the minimum width), so a line with
/// fewer cells ends the alignment of the columns it lacks, as Go's does.
pub fn tabwrite_with(text: &str, minwidth: usize, padding: usize) -> String {
    let lines: Vec<Vec<&str>> = text
        .split_terminator('\n')
        .map(|l| l.split('\t').collect())
        .collect();
    let mut out = String::new();
    let mut widths = Vec::new();
    format(&lines, 0, lines.len(), &mut widths, minwidth, padding, &mut out);
    out
}

fn format(
    lines: &[Vec<&str>],
    mut line0: usize,
    line1: usize,
    widths: &mut Vec<usize>,
    minwidth: usize,
    padding: usize,
    out: &mut String,
) {
    let column = widths.len();
    let mut this = line0;
    while this < line1 {
        if column + 1 >= lines[this].len() {
            this += 1;
            continue;
        }
        // A cell in this column: print the lines before the block, then the block.
        write_lines(lines, line0, this, widths, out);
        line0 = this;
        let mut width = minwidth;
        while this < line1 && column + 1 < lines[this].len() {
            width = width.max(lines[this][column].chars().count() + padding);
            this += 1;
        }
        widths.push(width);
        format(lines, line0, this, widths, minwidth, padding, out);
        widths.pop();
        line0 = this;
    }
    write_lines(lines, line0, line1, widths, out);
}

fn write_lines(lines: &[Vec<&str>], from: usize, to: usize, widths: &[usize], out: &mut String) {
    for line in &lines[from..to] {
        for (j, cell) in line.iter().enumerate() {
            out.push_str(cell);
            if j < widths.len() && j + 1 < line.len() {
                for _ in cell.chars().count()..widths[j] {
                    out.push(' ');
                }
            }
        }
        out.push('\n');
    }
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
    fn column_blocks_end_where_lines_have_fewer_cells() {
        // As Go's tabwriter: the second column aligns within lines 1-2 only.
        assert_eq!(
            tabwrite_with("a\tb\tc\nlonger\tb\tc\nx\ty\nshort\tlonger-cell\tz\n", 0, 2),
            "a       b  c\nlonger  b  c\nx       y\nshort   longer-cell  z\n"
        );
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
