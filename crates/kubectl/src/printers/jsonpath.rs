//! `-o jsonpath=TEMPLATE`: Kubernetes' JSONPath templates (client-go's util/jsonpath), which
//! are not RFC 9535 JSONPath: text with `{…}` actions — paths (`.items[*].metadata.name`,
//! `..name`, `['a.b']`, `[0]`, `[-1]`, `[1:3]`, `[?(@.type=="Ready")]`), string literals
//! (`{"\n"}`) and `{range …}…{end}` loops. Several results of one action print separated by
//! spaces; objects and lists as compact JSON; missing keys print nothing, as `kubectl get`
//! allows them. No crate implements this dialect, so it is written here.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Text(String),
    Path(Vec<Step>),
    Range(Vec<Step>, Vec<Node>),
}

#[derive(Debug, Clone, PartialEq)]
enum Step {
    /// `$` or `@`: back to the current root.
    Root,
    Field(String),
    /// `.*` or `[*]`.
    Wildcard,
    /// `..name`.
    Recursive(String),
    Index(i64),
    Slice(Option<i64>, Option<i64>, Option<i64>),
    Filter(Box<Filter>),
}

#[derive(Debug, Clone, PartialEq)]
struct Filter {
    left: Operand,
    op: Option<(String, Operand)>,
}

#[derive(Debug, Clone, PartialEq)]
enum Operand {
    Path(Vec<Step>),
    Literal(Value),
}

/// Parse `template`; kubectl's message on a syntax error.
pub fn parse(template: &str) -> Result<Vec<NodeHandle>, String> {
    let mut nodes = Vec::new();
    let mut stack: Vec<(Vec<Step>, Vec<Node>)> = Vec::new();
    let mut rest = template;
    let push =
        |stack: &mut Vec<(Vec<Step>, Vec<Node>)>, nodes: &mut Vec<Node>, n: Node| match stack.last_mut() {
            Some((_, body)) => body.push(n),
            None => nodes.push(n),
        };
    while !rest.is_empty() {
        let Some(open) = rest.find('{') else {
            push(&mut stack, &mut nodes, Node::Text(rest.to_owned()));
            break;
        };
        if open > 0 {
            push(&mut stack, &mut nodes, Node::Text(rest[..open].to_owned()));
        }
        let after = &rest[open + 1..];
        let close = find_close(after).ok_or_else(|| "unclosed action".to_owned())?;
        let action = after[..close].trim();
        rest = &after[close + 1..];
        if action == "end" {
            let (steps, body) = stack
                .pop()
                .ok_or_else(|| "not in range, nothing to end".to_owned())?;
            push(&mut stack, &mut nodes, Node::Range(steps, body));
        } else if let Some(expr) = action
            .strip_prefix("range")
            .filter(|e| e.starts_with([' ', '.', '$', '@', '[']))
        {
            stack.push((parse_path(expr.trim())?, Vec::new()));
        } else if action.starts_with('"') || action.starts_with('\'') {
            push(&mut stack, &mut nodes, Node::Text(unquote(action)?));
        } else {
            push(&mut stack, &mut nodes, Node::Path(parse_path(action)?));
        }
    }
    if !stack.is_empty() {
        return Err("unclosed range".into());
    }
    Ok(nodes.into_iter().map(NodeHandle).collect())
}

/// A parsed piece of a template.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeHandle(Node);

/// The template's output for `data`.
pub fn execute(template: &[NodeHandle], data: &Value) -> String {
    let mut out = String::new();
    for n in template {
        run(&n.0, data, &mut out);
    }
    out
}

/// The values the template's first path finds in `data` (for `--sort-by`); an error for a
/// template that does not parse.
pub fn values(template: &str, data: &Value) -> Result<Vec<Value>, String> {
    let nodes = parse(template)?;
    Ok(nodes
        .iter()
        .find_map(|n| match &n.0 {
            Node::Path(steps) => Some(eval(steps, data)),
            _ => None,
        })
        .unwrap_or_default())
}

fn run(node: &Node, data: &Value, out: &mut String) {
    match node {
        Node::Text(t) => out.push_str(t),
        Node::Path(steps) => {
            let values = eval(steps, data);
            let texts: Vec<String> = values.iter().map(text).collect();
            out.push_str(&texts.join(" "));
        }
        Node::Range(steps, body) => {
            let values = eval(steps, data);
            // A range over one list iterates its items.
            let items: Vec<Value> = match values.as_slice() {
                [Value::Array(a)] => a.clone(),
                _ => values,
            };
            for item in &items {
                for n in body {
                    run(n, item, out);
                }
            }
        }
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => {
            if n.is_f64() {
                super::yaml::go_format_g(n.as_f64().unwrap_or(0.0))
            } else {
                n.to_string()
            }
        }
        other => super::json::compact(other),
    }
}

fn eval(steps: &[Step], root: &Value) -> Vec<Value> {
    let mut cur = vec![root.clone()];
    for step in steps {
        let mut next = Vec::new();
        for v in &cur {
            match step {
                Step::Root => next.push(root.clone()),
                Step::Field(name) => {
                    if let Some(x) = v.get(name) {
                        next.push(x.clone());
                    }
                }
                Step::Wildcard => match v {
                    Value::Array(a) => next.extend(a.iter().cloned()),
                    Value::Object(m) => {
                        let mut keys: Vec<&String> = m.keys().collect();
                        keys.sort();
                        next.extend(keys.into_iter().map(|k| m[k.as_str()].clone()));
                    }
                    _ => {}
                },
                Step::Recursive(name) => descend(v, name, &mut next),
                Step::Index(i) => {
                    if let Value::Array(a) = v {
                        let idx = if *i < 0 { a.len() as i64 + i } else { *i };
                        if idx >= 0 && (idx as usize) < a.len() {
                            next.push(a[idx as usize].clone());
                        }
                    }
                }
                Step::Slice(start, end, step) => {
                    if let Value::Array(a) = v {
                        let len = a.len() as i64;
                        let norm = |x: i64| if x < 0 { (len + x).max(0) } else { x.min(len) };
                        let s = start.map(norm).unwrap_or(0);
                        let e = end.map(norm).unwrap_or(len);
                        let st = step.unwrap_or(1).max(1) as usize;
                        let mut i = s;
                        while i < e {
                            next.push(a[i as usize].clone());
                            i += st as i64;
                        }
                    }
                }
                Step::Filter(f) => {
                    let items: Vec<&Value> = match v {
                        Value::Array(a) => a.iter().collect(),
                        other => vec![other],
                    };
                    for item in items {
                        if matches(f, item) {
                            next.push(item.clone());
                        }
                    }
                }
            }
        }
        cur = next;
    }
    cur
}

fn descend(v: &Value, name: &str, out: &mut Vec<Value>) {
    match v {
        Value::Object(m) => {
            if let Some(x) = m.get(name) {
                out.push(x.clone());
            }
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            for k in keys {
                descend(&m[k.as_str()], name, out);
            }
        }
        Value::Array(a) => {
            for x in a {
                descend(x, name, out);
            }
        }
        _ => {}
    }
}

fn operand(o: &Operand, item: &Value) -> Option<Value> {
    match o {
        Operand::Literal(v) => Some(v.clone()),
        Operand::Path(steps) => eval(steps, item).into_iter().next(),
    }
}

fn matches(f: &Filter, item: &Value) -> bool {
    let Some(left) = operand(&f.left, item) else {
        return false;
    };
    let Some((op, right)) = &f.op else {
        return true;
    };
    let Some(right) = operand(right, item) else {
        return false;
    };
    let ord = match (&left, &right) {
        (Value::Number(a), Value::Number(b)) => a.as_f64().partial_cmp(&b.as_f64()),
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        _ => None,
    };
    use std::cmp::Ordering::*;
    match op.as_str() {
        "==" => left == right || ord == Some(Equal),
        "!=" => !(left == right || ord == Some(Equal)),
        "<" => ord == Some(Less),
        ">" => ord == Some(Greater),
        "<=" => matches!(ord, Some(Less | Equal)),
        ">=" => matches!(ord, Some(Greater | Equal)),
        _ => false,
    }
}

/// The `}` closing an action, skipping quoted strings.
fn find_close(s: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
            }
            None => match c {
                '"' | '\'' => quote = Some(c),
                '}' => return Some(i),
                _ => {}
            },
        }
    }
    None
}

fn unquote(s: &str) -> Result<String, String> {
    let q = s.chars().next().unwrap_or('"');
    let inner = s
        .strip_prefix(q)
        .and_then(|x| x.strip_suffix(q))
        .ok_or_else(|| format!("unterminated string {s}"))?;
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('r') => out.push('\r'),
                Some(other) => out.push(other),
                None => {}
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

fn parse_path(expr: &str) -> Result<Vec<Step>, String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut steps = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '$' | '@' => {
                steps.push(Step::Root);
                i += 1;
            }
            '.' => {
                if chars.get(i + 1) == Some(&'.') {
                    i += 2;
                    let (name, n) = field_name(&chars[i..]);
                    steps.push(Step::Recursive(name));
                    i += n;
                } else {
                    i += 1;
                    if chars.get(i) == Some(&'*') {
                        steps.push(Step::Wildcard);
                        i += 1;
                    } else {
                        let (name, n) = field_name(&chars[i..]);
                        if !name.is_empty() {
                            steps.push(Step::Field(name));
                        }
                        i += n;
                    }
                }
            }
            '[' => {
                let close =
                    matching_bracket(&chars, i).ok_or_else(|| format!("unterminated array in {expr}"))?;
                let inner: String = chars[i + 1..close].iter().collect();
                steps.push(bracket(inner.trim())?);
                i = close + 1;
            }
            c if c.is_whitespace() => i += 1,
            _ => {
                // A bare field name at the start (`{metadata.name}` is not valid upstream,
                // but `{.metadata.name}` is); treat as a field.
                let (name, n) = field_name(&chars[i..]);
                if n == 0 {
                    return Err(format!("unrecognized character in action: {:?}", chars[i]));
                }
                steps.push(Step::Field(name));
                i += n;
            }
        }
    }
    Ok(steps)
}

/// A field name up to the next `.` or `[` (a `\.` is a dot inside the name).
fn field_name(chars: &[char]) -> (String, usize) {
    let mut name = String::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' if chars.get(i + 1) == Some(&'.') => {
                name.push('.');
                i += 2;
            }
            '.' | '[' => break,
            c if c.is_whitespace() => break,
            c => {
                name.push(c);
                i += 1;
            }
        }
    }
    (name, i)
}

fn matching_bracket(chars: &[char], open: usize) -> Option<usize> {
    let mut depth = 0;
    let mut quote: Option<char> = None;
    for (i, &c) in chars.iter().enumerate().skip(open) {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '\'' | '"' => quote = Some(c),
                '[' => depth += 1,
                ']' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(i);
                    }
                }
                _ => {}
            },
        }
    }
    None
}

fn bracket(inner: &str) -> Result<Step, String> {
    if inner == "*" {
        return Ok(Step::Wildcard);
    }
    if let Some(f) = inner.strip_prefix("?(").and_then(|f| f.strip_suffix(')')) {
        return Ok(Step::Filter(Box::new(filter(f.trim())?)));
    }
    if inner.starts_with('\'') || inner.starts_with('"') {
        return Ok(Step::Field(unquote(inner)?));
    }
    if inner.contains(':') {
        let parts: Vec<&str> = inner.split(':').collect();
        let num = |s: &str| -> Result<Option<i64>, String> {
            let s = s.trim();
            if s.is_empty() {
                Ok(None)
            } else {
                s.parse()
                    .map(Some)
                    .map_err(|_| format!("invalid array index {s}"))
            }
        };
        return Ok(Step::Slice(
            num(parts[0])?,
            num(parts.get(1).copied().unwrap_or(""))?,
            num(parts.get(2).copied().unwrap_or(""))?,
        ));
    }
    inner
        .parse()
        .map(Step::Index)
        .map_err(|_| format!("invalid array index {inner}"))
}

fn filter(f: &str) -> Result<Filter, String> {
    for op in ["==", "!=", "<=", ">=", "<", ">"] {
        if let Some(i) = find_outside_quotes(f, op) {
            return Ok(Filter {
                left: filter_operand(f[..i].trim())?,
                op: Some((op.to_owned(), filter_operand(f[i + op.len()..].trim())?)),
            });
        }
    }
    Ok(Filter {
        left: filter_operand(f)?,
        op: None,
    })
}

fn find_outside_quotes(s: &str, needle: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    for (i, c) in s.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if s[i..].starts_with(needle) => return Some(i),
            None => {}
        }
    }
    None
}

fn filter_operand(s: &str) -> Result<Operand, String> {
    if s.starts_with('@') || s.starts_with('$') || s.starts_with('.') {
        return Ok(Operand::Path(parse_path(s)?));
    }
    if s.starts_with('\'') || s.starts_with('"') {
        return Ok(Operand::Literal(Value::String(unquote(s)?)));
    }
    if let Ok(n) = s.parse::<i64>() {
        return Ok(Operand::Literal(Value::from(n)));
    }
    if let Ok(f) = s.parse::<f64>() {
        return Ok(Operand::Literal(serde_json::json!(f)));
    }
    match s {
        "true" => Ok(Operand::Literal(Value::Bool(true))),
        "false" => Ok(Operand::Literal(Value::Bool(false))),
        _ => Err(format!("unrecognized filter operand {s}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run_t(t: &str, v: &Value) -> String {
        execute(&parse(t).unwrap(), v)
    }

    #[test]
    fn kubectl_templates() {
        let list = json!({"kind": "List", "items": [
            {"metadata": {"name": "a", "labels": {"app.kubernetes.io/name": "x"}},
             "status": {"podIP": "10.42.0.5", "conditions": [{"type": "Ready", "status": "True"}, {"type": "Other", "status": "False"}]}},
            {"metadata": {"name": "b"}, "status": {"podIP": "10.42.0.6", "conditions": [{"type": "Ready", "status": "False"}]}}]});
        assert_eq!(run_t("{.items[0].status.podIP}", &list), "10.42.0.5");
        assert_eq!(run_t("{.items[*].metadata.name}", &list), "a b");
        assert_eq!(run_t("{.items[-1].metadata.name}", &list), "b");
        assert_eq!(
            run_t(
                "{range .items[*]}{.metadata.name}{\"\\t\"}{.status.podIP}{\"\\n\"}{end}",
                &list
            ),
            "a\t10.42.0.5\nb\t10.42.0.6\n"
        );
        assert_eq!(
            run_t(
                "{.items[*].status.conditions[?(@.type==\"Ready\")].status}",
                &list
            ),
            "True False"
        );
        assert_eq!(
            run_t("{.items[0].metadata.labels}", &list),
            "{\"app.kubernetes.io/name\":\"x\"}"
        );
        assert_eq!(
            run_t("{.items[0].metadata.labels.app\\.kubernetes\\.io/name}", &list),
            "x"
        );
        assert_eq!(
            run_t("{.items[0].metadata.labels['app.kubernetes.io/name']}", &list),
            "x"
        );
        assert_eq!(run_t("{..podIP}", &list), "10.42.0.5 10.42.0.6");
        assert_eq!(run_t("names: {.items[0:1].metadata.name}!", &list), "names: a!");
        // Missing keys print nothing.
        assert_eq!(run_t("[{.items[0].nope}]", &list), "[]");
        assert!(parse("{range .items[*]}{.x}").is_err());
        assert_eq!(run_t("{range.items[*]}{.metadata.name};{end}", &list), "a;b;");
    }
}
