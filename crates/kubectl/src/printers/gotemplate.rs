//! `-o go-template=…` (also `template=`, `go-template-file=`, `templatefile=`): Go's
//! text/template run over the object as kubectl's GoTemplatePrinter runs it — on the object
//! as JSON decoded into Go's `map[string]interface{}` (so numbers are float64 and print as Go
//! prints them: `3`, `1e+06`), with a missing key `<no value>`, and kubectl's two extra
//! functions `exists` and `base64decode`.
//!
//! Written by hand: the one Rust crate for Go templates (`gtmpl`) differs from Go where
//! kubectl users see it (a `range` over a missing field fails where Go prints nothing, no
//! `%q`, maps printed in Rust's debug form); this is the subset kubectl's templates use —
//! actions with trim markers, pipelines, variables, `if`/`else if`/`range`/`with`/`else`,
//! comparisons and `and`/`or`/`not`, `index`, `len`, `print`/`printf`/`println` — with Go's
//! value printing and its error words for the common mistakes.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde_json::Value;

/// A value in the template: Go's "no value" (a missing key), or JSON as Go decodes it.
#[derive(Clone, Debug, PartialEq)]
enum V {
    NoValue,
    Json(Value),
    /// A number literal written without a point or exponent (Go's untyped int constant).
    Int(i64),
}

impl V {
    fn json(&self) -> Option<&Value> {
        match self {
            V::Json(v) => Some(v),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
enum Arg {
    Dot,
    /// `.a.b` after an expression (`$x.a`, `(pipe).a`) or from dot, with the column Go's
    /// parse tree gives the node (a chain's second part: a quirk of its parser).
    Field(Box<Arg>, Vec<String>, usize),
    Var(String),
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Nil,
    Func(String),
    Pipe(Box<Pipeline>),
}

#[derive(Debug, Clone)]
struct Command {
    args: Vec<Arg>,
    /// The column of the command, for error positions.
    pos: (usize, usize),
    text: String,
}

#[derive(Debug, Clone)]
struct Pipeline {
    decl: Vec<String>,
    assign: bool,
    cmds: Vec<Command>,
}

#[derive(Debug, Clone)]
enum Node {
    Text(String),
    Action(Pipeline),
    If(Pipeline, Vec<Node>, Vec<Node>),
    Range(Pipeline, Vec<Node>, Vec<Node>),
    With(Pipeline, Vec<Node>, Vec<Node>),
}

/// A parsed template.
pub struct Template {
    nodes: Vec<Node>,
}

// ---- lexing ----

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Field(String),
    Dot,
    Var(String),
    Ident(String),
    Str(String),
    Num(String),
    Pipe,
    LParen,
    RParen,
    Declare,
    Assign,
    Comma,
}

fn parse_err(line: usize, msg: impl std::fmt::Display) -> String {
    format!("template: output:{line}: {msg}")
}

/// Split the text of one action into tokens, with each token's byte offset in it.
fn lex_action(s: &str, line: usize) -> Result<(Vec<Tok>, Vec<usize>), String> {
    let b: Vec<char> = s.chars().collect();
    let mut i = 0;
    let mut out = Vec::new();
    let mut offsets = Vec::new();
    while i < b.len() {
        let tok_start = i;
        let c = b[i];
        match c {
            ' ' | '\t' | '\n' | '\r' => i += 1,
            '|' | '(' | ')' | ',' | '=' => {
                out.push(match c {
                    '|' => Tok::Pipe,
                    '(' => Tok::LParen,
                    ')' => Tok::RParen,
                    ',' => Tok::Comma,
                    _ => Tok::Assign,
                });
                i += 1
            }
            ':' if b.get(i + 1) == Some(&'=') => {
                out.push(Tok::Declare);
                i += 2
            }
            '"' => {
                let mut v = String::new();
                i += 1;
                loop {
                    match b.get(i) {
                        None | Some('\n') => return Err(parse_err(line, "unterminated quoted string")),
                        Some('"') => break,
                        Some('\\') => {
                            i += 1;
                            match b.get(i) {
                                Some('n') => v.push('\n'),
                                Some('t') => v.push('\t'),
                                Some('r') => v.push('\r'),
                                Some('\\') => v.push('\\'),
                                Some('"') => v.push('"'),
                                Some(o) => return Err(parse_err(line, format!("invalid syntax: \\{o}"))),
                                None => return Err(parse_err(line, "unterminated quoted string")),
                            }
                        }
                        Some(ch) => v.push(*ch),
                    }
                    i += 1;
                }
                i += 1;
                out.push(Tok::Str(v));
            }
            '`' => {
                let start = i + 1;
                let end = b[start..].iter().position(|c| *c == '`').map(|p| start + p);
                let Some(end) = end else {
                    return Err(parse_err(line, "unterminated raw quoted string"));
                };
                out.push(Tok::Str(b[start..end].iter().collect()));
                i = end + 1;
            }
            '.' | '$' => {
                // A whole chain: `.a.b.c`, `$x.a.b`.
                let start = i;
                i += 1;
                let ident = |c: Option<&char>| c.is_some_and(|c| c.is_alphanumeric() || *c == '_');
                while i < b.len() && (ident(b.get(i)) || (b[i] == '.' && ident(b.get(i + 1)))) {
                    i += 1;
                }
                let word: String = b[start..i].iter().collect();
                if c == '$' {
                    out.push(Tok::Var(word));
                } else if word == "." {
                    // A number like .5 is not supported; a bare dot is dot.
                    out.push(Tok::Dot);
                } else {
                    out.push(Tok::Field(word[1..].to_string()));
                }
            }
            c if c.is_ascii_digit()
                || ((c == '-' || c == '+') && b.get(i + 1).is_some_and(|d| d.is_ascii_digit())) =>
            {
                let start = i;
                i += 1;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == '.' || b[i] == '_') {
                    i += 1;
                }
                out.push(Tok::Num(b[start..i].iter().collect()));
            }
            c if c.is_alphabetic() || c == '_' => {
                let start = i;
                while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_') {
                    i += 1;
                }
                out.push(Tok::Ident(b[start..i].iter().collect()));
            }
            other => return Err(parse_err(line, format!("unexpected {other:?} in command"))),
        }
        if out.len() > offsets.len() {
            offsets.push(b[..tok_start].iter().map(|c| c.len_utf8()).sum());
        }
    }
    Ok((out, offsets))
}

// ---- parsing ----

const FUNCS: &[&str] = &[
    "and",
    "or",
    "not",
    "len",
    "index",
    "print",
    "printf",
    "println",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "exists",
    "base64decode",
    "html",
    "js",
    "urlquery",
    "slice",
    "call",
];

struct Parser<'a> {
    toks: &'a [Tok],
    offsets: &'a [usize],
    i: usize,
    line: usize,
    /// The column of the action's body in its line.
    col: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.i)
    }

    fn pipeline(&mut self) -> Result<Pipeline, String> {
        let mut decl = Vec::new();
        let mut assign = false;
        // `$x :=` / `$i, $v :=` / `$x =`
        let save = self.i;
        let mut vars = Vec::new();
        while let Some(Tok::Var(v)) = self.peek() {
            vars.push(v.clone());
            self.i += 1;
            match self.peek() {
                Some(Tok::Comma) => self.i += 1,
                _ => break,
            }
        }
        match self.peek() {
            Some(Tok::Declare) if !vars.is_empty() => {
                self.i += 1;
                decl = vars;
            }
            Some(Tok::Assign) if !vars.is_empty() => {
                self.i += 1;
                decl = vars;
                assign = true;
            }
            _ => self.i = save,
        }
        let mut cmds = Vec::new();
        loop {
            let mut args = Vec::new();
            let first = self.offsets.get(self.i).copied().unwrap_or(0);
            while let Some(t) = self.peek() {
                if matches!(t, Tok::Pipe | Tok::RParen) {
                    break;
                }
                args.push(self.operand()?);
            }
            if args.is_empty() {
                return Err(parse_err(self.line, "missing value for command"));
            }
            let text = args.iter().map(arg_text).collect::<Vec<_>>().join(" ");
            cmds.push(Command {
                args,
                pos: (self.line, self.col + first),
                text,
            });
            match self.peek() {
                Some(Tok::Pipe) => self.i += 1,
                _ => break,
            }
        }
        Ok(Pipeline { decl, assign, cmds })
    }

    fn operand(&mut self) -> Result<Arg, String> {
        let t = self.toks[self.i].clone();
        let at = self.col + self.offsets.get(self.i).copied().unwrap_or(0);
        self.i += 1;
        let segments = |f: &str| -> Vec<String> { f.split('.').map(str::to_owned).collect() };
        let base = match t {
            Tok::Dot => Arg::Dot,
            Tok::Field(f) => {
                let first = f.split('.').next().unwrap_or_default().len();
                let pos = if f.contains('.') { at + 1 + first } else { at };
                Arg::Field(Box::new(Arg::Dot), segments(&f), pos)
            }
            Tok::Var(v) => Arg::Var(v),
            Tok::Str(s) => Arg::Str(s),
            Tok::Num(n) => {
                if let Ok(i) = n.parse::<i64>() {
                    Arg::Int(i)
                } else if let Ok(f) = n.parse::<f64>() {
                    Arg::Float(f)
                } else {
                    return Err(parse_err(self.line, format!("bad number syntax: {n:?}")));
                }
            }
            Tok::Ident(id) => match id.as_str() {
                "true" => Arg::Bool(true),
                "false" => Arg::Bool(false),
                "nil" => Arg::Nil,
                f if FUNCS.contains(&f) => Arg::Func(id),
                _ => return Err(parse_err(self.line, format!("function {id:?} not defined"))),
            },
            Tok::LParen => {
                let p = self.pipeline()?;
                if self.peek() != Some(&Tok::RParen) {
                    return Err(parse_err(self.line, "unclosed left paren"));
                }
                self.i += 1;
                Arg::Pipe(Box::new(p))
            }
            other => return Err(parse_err(self.line, format!("unexpected {other:?} in operand"))),
        };
        // Field chains after a variable or parenthesis: `$x.a.b`, `(…).a`.
        if let Some(Tok::Field(f)) = self.peek() {
            if matches!(base, Arg::Var(_) | Arg::Pipe(_)) {
                let f = f.clone();
                let pos = self.col + self.offsets.get(self.i).copied().unwrap_or(0);
                self.i += 1;
                return Ok(Arg::Field(Box::new(base), segments(&f), pos));
            }
        }
        if let Arg::Var(v) = &base {
            if let Some((name, fields)) = v.split_once('.') {
                let pos = at + name.len();
                return Ok(Arg::Field(Box::new(Arg::Var(name.into())), segments(fields), pos));
            }
        }
        Ok(base)
    }
}

/// A node as Go's parse tree prints it (what its errors show in `at <…>`).
fn arg_text(a: &Arg) -> String {
    match a {
        Arg::Dot => ".".into(),
        Arg::Field(base, fields, _) => {
            let base = match &**base {
                Arg::Dot => String::new(),
                other => arg_text(other),
            };
            format!("{base}.{}", fields.join("."))
        }
        Arg::Var(v) => v.clone(),
        Arg::Str(s) => serde_json::to_string(s).unwrap_or_default(),
        Arg::Int(i) => i.to_string(),
        Arg::Float(f) => f.to_string(),
        Arg::Bool(b) => b.to_string(),
        Arg::Nil => "nil".into(),
        Arg::Func(f) => f.clone(),
        Arg::Pipe(p) => {
            let cmds: Vec<&str> = p.cmds.iter().map(|c| c.text.as_str()).collect();
            format!("({})", cmds.join(" | "))
        }
    }
}

/// One `{{ … }}` action or a run of text.
enum Piece {
    Text(String),
    Action(String, usize, usize),
}

fn split(src: &str) -> Result<Vec<Piece>, String> {
    let mut out = Vec::new();
    let mut rest = src;
    let mut line = 1;
    let mut pending_trim = false;
    while let Some(start) = rest.find("{{") {
        let mut text = rest[..start].to_string();
        if pending_trim {
            text = text.trim_start().to_string();
        }
        let after = &rest[start + 2..];
        let trim_left = after.starts_with("- ") || after.starts_with("-\t") || after.starts_with("-\n");
        if trim_left {
            text = text.trim_end().to_string();
        }
        let col = src.len() - rest.len() + start;
        let line_start = src[..col].rfind('\n').map(|i| i + 1).unwrap_or(0);
        line += rest[..start].matches('\n').count();
        if !text.is_empty() {
            out.push(Piece::Text(text));
        }
        let body_start = if trim_left { 2 } else { 0 };
        let Some(end) = after.find("}}") else {
            return Err(parse_err(line, "unclosed action"));
        };
        let mut body = &after[body_start..end];
        pending_trim = false;
        if body.ends_with(" -") || body.ends_with("\t-") || body.ends_with("\n-") {
            body = &body[..body.len() - 1];
            pending_trim = true;
        }
        // Comments.
        let trimmed = body.trim();
        if !(trimmed.starts_with("/*") && trimmed.ends_with("*/")) {
            // Positions are counted from the body's start within its line.
            out.push(Piece::Action(
                body.to_string(),
                line,
                col - line_start + 2 + body_start,
            ));
        }
        line += after[..end].matches('\n').count();
        rest = &after[end + 2..];
    }
    let mut text = rest.to_string();
    if pending_trim {
        text = text.trim_start().to_string();
    }
    if !text.is_empty() {
        out.push(Piece::Text(text));
    }
    Ok(out)
}

/// Parse nodes until `{{end}}`/`{{else}}` (returned) or the end.
fn parse_nodes(pieces: &[Piece], i: &mut usize, depth: usize) -> Result<(Vec<Node>, Option<String>), String> {
    let mut nodes = Vec::new();
    while *i < pieces.len() {
        match &pieces[*i] {
            Piece::Text(t) => {
                nodes.push(Node::Text(t.clone()));
                *i += 1;
            }
            Piece::Action(body, line, col) => {
                let (line, col) = (*line, *col);
                *i += 1;
                let (toks, offsets) = lex_action(body, line)?;
                let keyword = match toks.first() {
                    Some(Tok::Ident(k))
                        if [
                            "if", "range", "with", "else", "end", "define", "template", "block",
                        ]
                        .contains(&k.as_str()) =>
                    {
                        Some(k.clone())
                    }
                    _ => None,
                };
                match keyword.as_deref() {
                    Some("end") => {
                        if depth == 0 {
                            return Err(parse_err(line, "unexpected {{end}}"));
                        }
                        return Ok((nodes, Some("end".into())));
                    }
                    Some("else") => {
                        if depth == 0 {
                            return Err(parse_err(line, "unexpected {{else}}"));
                        }
                        // `else if …` chains: hand the rest back to the caller.
                        let rest: Vec<String> = body
                            .trim()
                            .splitn(2, char::is_whitespace)
                            .map(str::to_owned)
                            .collect();
                        return Ok((
                            nodes,
                            Some(format!("else {}", rest.get(1).cloned().unwrap_or_default())),
                        ));
                    }
                    Some(k @ ("if" | "range" | "with")) => {
                        let node = parse_control(k, &toks[1..], &offsets[1..], pieces, i, depth, line, col)?;
                        nodes.push(node);
                    }
                    Some(other) => {
                        return Err(parse_err(
                            line,
                            format!("{other:?} is not supported by r8s kubectl"),
                        ))
                    }
                    None => {
                        let mut p = Parser {
                            toks: &toks,
                            offsets: &offsets,
                            i: 0,
                            line,
                            col,
                        };
                        if toks.is_empty() {
                            return Err(parse_err(line, "missing value for command"));
                        }
                        let pipe = p.pipeline()?;
                        if p.i != toks.len() {
                            return Err(parse_err(line, format!("unexpected {:?} in command", toks[p.i])));
                        }
                        nodes.push(Node::Action(pipe));
                    }
                }
            }
        }
    }
    if depth > 0 {
        return Err(parse_err(1, "unexpected EOF"));
    }
    Ok((nodes, None))
}

#[allow(clippy::too_many_arguments)]
fn parse_control(
    kind: &str,
    toks: &[Tok],
    offsets: &[usize],
    pieces: &[Piece],
    i: &mut usize,
    depth: usize,
    line: usize,
    col: usize,
) -> Result<Node, String> {
    let mut p = Parser {
        toks,
        offsets,
        i: 0,
        line,
        col,
    };
    if toks.is_empty() {
        return Err(parse_err(line, format!("missing value for {kind}")));
    }
    let pipe = p.pipeline()?;
    let (then, ended) = parse_nodes(pieces, i, depth + 1)?;
    let otherwise = match ended.as_deref() {
        Some("end") => Vec::new(),
        Some(e) if e.starts_with("else") => {
            let rest = e["else".len()..].trim().to_string();
            if rest.is_empty() {
                let (els, ended) = parse_nodes(pieces, i, depth + 1)?;
                if ended.as_deref() != Some("end") {
                    return Err(parse_err(line, "expected end; found else"));
                }
                els
            } else {
                // `else if X` / `else with X`: a nested control sharing this one's end.
                let (toks, offsets) = lex_action(&rest, line)?;
                match toks.first() {
                    Some(Tok::Ident(k)) if k == "if" || k == "with" => {
                        vec![parse_control(
                            k,
                            &toks[1..],
                            &offsets[1..],
                            pieces,
                            i,
                            depth,
                            line,
                            col,
                        )?]
                    }
                    _ => return Err(parse_err(line, format!("unexpected {rest:?} in else"))),
                }
            }
        }
        _ => return Err(parse_err(line, "unexpected EOF")),
    };
    Ok(match kind {
        "if" => Node::If(pipe, then, otherwise),
        "range" => Node::Range(pipe, then, otherwise),
        _ => Node::With(pipe, then, otherwise),
    })
}

impl Template {
    pub fn parse(src: &str) -> Result<Template, String> {
        let pieces = split(src)?;
        let mut i = 0;
        let (nodes, _) = parse_nodes(&pieces, &mut i, 0)?;
        Ok(Template { nodes })
    }

    /// Run over `data`; Go's error text (`template: output:L:C: executing …`) on failure.
    pub fn execute(&self, data: &Value) -> Result<String, String> {
        let mut st = State {
            vars: vec![("$".to_string(), V::Json(data.clone()))],
            out: String::new(),
        };
        st.walk(&self.nodes, &V::Json(data.clone()))?;
        Ok(st.out)
    }
}

// ---- printing as Go's fmt ----

/// A float64 as Go's `%v` prints it (strconv 'g' with the shortest digits).
fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf".into() } else { "-Inf".into() };
    }
    if f == 0.0 {
        return if f.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    // Shortest digits and the decimal exponent, from Rust's shortest round-trip form.
    let e = format!("{:e}", f);
    let (mant, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let neg = mant.starts_with('-');
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    let nd = digits.len() as i32;
    let dp = exp + 1;
    let mut eprec = 6;
    if eprec > nd && nd >= dp {
        eprec = nd;
    }
    let sign = if neg { "-" } else { "" };
    if exp < -4 || exp >= eprec {
        let m = if digits.len() > 1 {
            format!("{}.{}", &digits[..1], &digits[1..])
        } else {
            digits.clone()
        };
        let es = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{m}e{es}{:02}", exp.abs());
    }
    if dp <= 0 {
        format!("{sign}0.{}{}", "0".repeat((-dp) as usize), digits)
    } else if dp >= nd {
        format!("{sign}{}{}", digits, "0".repeat((dp - nd) as usize))
    } else {
        format!("{sign}{}.{}", &digits[..dp as usize], &digits[dp as usize..])
    }
}

/// A JSON value as Go's `%v` prints the interface{} it decodes into.
fn go_v(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_float(n.as_f64().unwrap_or(0.0)),
        Value::String(s) => s.clone(),
        Value::Array(a) => format!("[{}]", a.iter().map(go_v).collect::<Vec<_>>().join(" ")),
        Value::Object(o) => {
            let sorted: BTreeMap<&String, &Value> = o.iter().collect();
            let parts: Vec<String> = sorted.iter().map(|(k, v)| format!("{k}:{}", go_v(v))).collect();
            format!("map[{}]", parts.join(" "))
        }
    }
}

fn print_v(v: &V) -> String {
    match v {
        V::NoValue | V::Json(Value::Null) => "<no value>".into(),
        V::Json(j) => go_v(j),
        V::Int(i) => i.to_string(),
    }
}

/// A value as Go's `fmt.Sprint` prints it (a missing value is a nil interface: `<nil>`).
fn sprint(v: &V) -> String {
    match v {
        V::NoValue => "<nil>".into(),
        V::Json(j) => go_v(j),
        V::Int(i) => i.to_string(),
    }
}

fn go_type(v: &V) -> &'static str {
    match v {
        V::NoValue | V::Json(Value::Null) => "nil",
        V::Int(_) => "int",
        V::Json(Value::Bool(_)) => "bool",
        V::Json(Value::Number(_)) => "float64",
        V::Json(Value::String(_)) => "string",
        V::Json(Value::Array(_)) => "[]interface {}",
        V::Json(Value::Object(_)) => "map[string]interface {}",
    }
}

fn truthy(v: &V) -> bool {
    match v {
        V::NoValue => false,
        V::Int(i) => *i != 0,
        V::Json(j) => crate::explain::truthy(j),
    }
}

/// Go's fmt verbs for `printf`: %v %s %d %q %t %f %g %e %x %%, with width and precision.
fn go_printf(format: &str, args: &[V]) -> String {
    let mut out = String::new();
    let mut chars = format.chars().peekable();
    let mut n = 0;
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut spec = String::new();
        while let Some(&d) = chars.peek() {
            if d.is_ascii_digit() || "+- #0.".contains(d) {
                spec.push(d);
                chars.next();
            } else {
                break;
            }
        }
        let Some(verb) = chars.next() else {
            out.push_str("%!(NOVERB)");
            break;
        };
        if verb == '%' {
            out.push('%');
            continue;
        }
        let Some(arg) = args.get(n) else {
            out.push_str(&format!("%!{verb}(MISSING)"));
            continue;
        };
        n += 1;
        let (width, prec) = {
            let s = spec.trim_start_matches(['+', '-', ' ', '#', '0']);
            let (w, p) = s.split_once('.').map(|(w, p)| (w, Some(p))).unwrap_or((s, None));
            (
                w.parse::<usize>().ok(),
                p.map(|p| p.parse::<usize>().unwrap_or(0)),
            )
        };
        let left = spec.starts_with('-');
        let text = match (verb, arg) {
            ('v', a) | ('s', a @ V::Json(Value::String(_))) => sprint(a),
            ('d', V::Int(i)) => i.to_string(),
            ('q', V::Json(Value::String(s))) => serde_json::to_string(s).unwrap_or_default(),
            ('t', V::Json(Value::Bool(b))) => b.to_string(),
            ('f' | 'g' | 'e', V::Json(Value::Number(num))) => {
                let f = num.as_f64().unwrap_or(0.0);
                match verb {
                    'f' => format!("{:.*}", prec.unwrap_or(6), f),
                    'e' => {
                        let s = format!("{:.*e}", prec.unwrap_or(6), f);
                        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
                        let e: i32 = e.parse().unwrap_or(0);
                        format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
                    }
                    _ => go_float(f),
                }
            }
            ('x', V::Int(i)) => format!("{i:x}"),
            ('x', V::Json(Value::String(s))) => s.bytes().map(|b| format!("{b:02x}")).collect(),
            (verb, V::NoValue | V::Json(Value::Null)) => format!("%!{verb}(<nil>)"),
            (verb, a) => format!("%!{verb}({}={})", go_type(a), print_v(a)),
        };
        let text = match width {
            Some(w) if text.chars().count() < w => {
                let pad = " ".repeat(w - text.chars().count());
                if left {
                    format!("{text}{pad}")
                } else {
                    format!("{pad}{text}")
                }
            }
            _ => text,
        };
        out.push_str(&text);
    }
    if n < args.len() {
        let extra: Vec<String> = args[n..]
            .iter()
            .map(|a| format!("{}={}", go_type(a), print_v(a)))
            .collect();
        out.push_str(&format!("%!(EXTRA {})", extra.join(", ")));
    }
    out
}

// ---- execution ----

struct State {
    vars: Vec<(String, V)>,
    out: String,
}

fn exec_err(cmd: &Command, msg: impl std::fmt::Display) -> String {
    format!(
        "template: output:{}:{}: executing \"output\" at <{}>: {msg}",
        cmd.pos.0, cmd.pos.1, cmd.text
    )
}

/// A function's string parameter, checked as Go's template checks arguments.
fn string_arg<'v>(cmd: &Command, v: &'v V) -> Result<&'v String, String> {
    match v {
        V::Json(Value::String(s)) => Ok(s),
        V::NoValue | V::Json(Value::Null) => Err(exec_err(cmd, "invalid value; expected string")),
        other => Err(exec_err(
            cmd,
            format!("wrong type for value; expected string; got {}", go_type(other)),
        )),
    }
}

/// Go's `eq`-family comparison of two basic values.
fn compare(a: &V, b: &V) -> Result<Option<std::cmp::Ordering>, &'static str> {
    use std::cmp::Ordering;
    match (a, b) {
        (V::Int(x), V::Int(y)) => Ok(Some(x.cmp(y))),
        (V::Json(Value::Number(x)), V::Json(Value::Number(y))) => Ok(x.as_f64().partial_cmp(&y.as_f64())),
        (V::Json(Value::String(x)), V::Json(Value::String(y))) => Ok(Some(x.cmp(y))),
        (V::Json(Value::Bool(x)), V::Json(Value::Bool(y))) => {
            Ok(if x == y { Some(Ordering::Equal) } else { None })
        }
        (V::NoValue | V::Json(Value::Null), V::NoValue | V::Json(Value::Null)) => Ok(Some(Ordering::Equal)),
        (V::NoValue, _) | (_, V::NoValue) => Err("invalid type for comparison"),
        _ => Err("incompatible types for comparison"),
    }
}

impl State {
    fn var(&self, name: &str) -> Option<V> {
        self.vars
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }

    /// Follow `.a.b` from `v`; an error names the field node (`node`) at its column `pos`.
    fn field(&self, cmd: &Command, mut v: V, fields: &[String], pos: usize, node: &Arg) -> Result<V, String> {
        for f in fields {
            v = match v {
                V::NoValue | V::Json(Value::Null) => V::NoValue,
                V::Json(Value::Object(o)) => o.get(f).cloned().map(V::Json).unwrap_or(V::NoValue),
                // Inside the object every value is an interface{}: Go names that type.
                V::Json(_) => {
                    return Err(format!(
                        "template: output:{}:{pos}: executing \"output\" at <{}>: can't evaluate field {f} in type interface {{}}",
                        cmd.pos.0,
                        arg_text(node)
                    ))
                }
                other => {
                    return Err(exec_err(
                        cmd,
                        format!("can't evaluate field {f} in type {}", go_type(&other)),
                    ))
                }
            };
        }
        Ok(v)
    }

    fn arg(&mut self, cmd: &Command, a: &Arg, dot: &V) -> Result<V, String> {
        Ok(match a {
            Arg::Dot => dot.clone(),
            Arg::Field(base, fields, pos) => {
                let b = self.arg(cmd, base, dot)?;
                self.field(cmd, b, fields, *pos, a)?
            }
            Arg::Var(name) => self
                .var(name)
                .ok_or_else(|| exec_err(cmd, format!("undefined variable: {name}")))?,
            Arg::Str(s) => V::Json(Value::String(s.clone())),
            Arg::Int(i) => V::Int(*i),
            Arg::Float(f) => V::Json(serde_json::json!(f)),
            Arg::Bool(b) => V::Json(Value::Bool(*b)),
            Arg::Nil => V::Json(Value::Null),
            Arg::Func(f) => self.call(cmd, f, &[], dot, None)?,
            Arg::Pipe(p) => self.pipeline(p, dot)?,
        })
    }

    fn call(&mut self, cmd: &Command, f: &str, args: &[Arg], dot: &V, piped: Option<V>) -> Result<V, String> {
        let mut vals = Vec::new();
        for a in args {
            vals.push(self.arg(cmd, a, dot)?);
        }
        if let Some(p) = piped {
            vals.push(p);
        }
        let err = |m: String| exec_err(cmd, format!("error calling {f}: {m}"));
        let want = |n: usize| -> Result<(), String> {
            if vals.len() != n {
                return Err(exec_err(
                    cmd,
                    format!("wrong number of args for {f}: want {n} got {}", vals.len()),
                ));
            }
            Ok(())
        };
        Ok(match f {
            "and" => {
                if vals.is_empty() {
                    return Err(exec_err(
                        cmd,
                        "wrong number of args for and: want at least 1 got 0",
                    ));
                }
                vals.iter()
                    .find(|v| !truthy(v))
                    .unwrap_or(vals.last().unwrap())
                    .clone()
            }
            "or" => {
                if vals.is_empty() {
                    return Err(exec_err(
                        cmd,
                        "wrong number of args for or: want at least 1 got 0",
                    ));
                }
                vals.iter()
                    .find(|v| truthy(v))
                    .unwrap_or(vals.last().unwrap())
                    .clone()
            }
            "not" => {
                want(1)?;
                V::Json(Value::Bool(!truthy(&vals[0])))
            }
            "len" => {
                want(1)?;
                match &vals[0] {
                    V::Json(Value::String(s)) => V::Int(s.len() as i64),
                    V::Json(Value::Array(a)) => V::Int(a.len() as i64),
                    V::Json(Value::Object(o)) => V::Int(o.len() as i64),
                    V::NoValue | V::Json(Value::Null) => {
                        return Err(err("reflect: call of reflect.Value.Type on zero Value".into()))
                    }
                    other => return Err(err(format!("len of type {}", go_type(other)))),
                }
            }
            "index" => {
                if vals.is_empty() {
                    return Err(exec_err(
                        cmd,
                        "wrong number of args for index: want at least 1 got 0",
                    ));
                }
                let mut cur = vals[0].clone();
                for k in &vals[1..] {
                    cur = match (&cur, k) {
                        (V::NoValue | V::Json(Value::Null), _) => {
                            return Err(err("index of untyped nil".into()))
                        }
                        (V::Json(Value::Object(o)), V::Json(Value::String(key))) => {
                            o.get(key).cloned().map(V::Json).unwrap_or(V::NoValue)
                        }
                        (V::Json(Value::Array(a)), V::Int(i)) => match a.get(*i as usize).filter(|_| *i >= 0)
                        {
                            Some(v) => V::Json(v.clone()),
                            None => return Err(err(format!("index out of range: {i}"))),
                        },
                        (V::Json(Value::Object(_)), other) => {
                            return Err(err(format!(
                                "value has type {}; should be string",
                                go_type(other)
                            )))
                        }
                        (V::Json(Value::Array(_)), other) => {
                            return Err(err(format!(
                                "cannot index slice/array with type {}",
                                go_type(other)
                            )))
                        }
                        (other, _) => {
                            return Err(err(format!("can't index item of type {}", go_type(other))))
                        }
                    };
                }
                cur
            }
            "print" | "println" => {
                // Go's Sprint: spaces between operands when neither is a string.
                let mut s = String::new();
                for (i, v) in vals.iter().enumerate() {
                    let is_str = |v: &V| matches!(v, V::Json(Value::String(_)));
                    if i > 0 && (f == "println" || (!is_str(v) && !is_str(&vals[i - 1]))) {
                        s.push(' ');
                    }
                    s.push_str(&sprint(v));
                }
                if f == "println" {
                    s.push('\n');
                }
                V::Json(Value::String(s))
            }
            "printf" => {
                let Some(first) = vals.first() else {
                    return Err(exec_err(
                        cmd,
                        "wrong number of args for printf: want at least 1 got 0",
                    ));
                };
                let format = string_arg(cmd, first)?;
                V::Json(Value::String(go_printf(format, &vals[1..])))
            }
            "eq" | "ne" | "lt" | "le" | "gt" | "ge" => {
                if vals.len() < 2 {
                    return Err(exec_err(
                        cmd,
                        format!("wrong number of args for {f}: want 2 got {}", vals.len()),
                    ));
                }
                let ord = |a: &V, b: &V| compare(a, b).map_err(|m| err(m.into()));
                let result = match f {
                    "eq" => {
                        let mut any = false;
                        for b in &vals[1..] {
                            if ord(&vals[0], b)? == Some(std::cmp::Ordering::Equal) {
                                any = true;
                            }
                        }
                        any
                    }
                    "ne" => ord(&vals[0], &vals[1])? != Some(std::cmp::Ordering::Equal),
                    _ => {
                        let o = ord(&vals[0], &vals[1])?
                            .ok_or_else(|| err("invalid type for comparison".into()))?;
                        match f {
                            "lt" => o.is_lt(),
                            "le" => o.is_le(),
                            "gt" => o.is_gt(),
                            _ => o.is_ge(),
                        }
                    }
                };
                V::Json(Value::Bool(result))
            }
            "exists" => {
                let Some((first, keys)) = vals.split_first() else {
                    return Err(exec_err(
                        cmd,
                        "wrong number of args for exists: want at least 1 got 0",
                    ));
                };
                let mut cur = first.clone();
                let mut found = true;
                for k in keys {
                    let key = print_v(k);
                    cur = match &cur {
                        V::Json(Value::Object(o)) => match o.get(&key) {
                            Some(v) => V::Json(v.clone()),
                            None => {
                                found = false;
                                break;
                            }
                        },
                        V::Json(Value::Array(a)) => match key.parse::<usize>().ok().and_then(|i| a.get(i)) {
                            Some(v) => V::Json(v.clone()),
                            None => {
                                found = false;
                                break;
                            }
                        },
                        _ => {
                            found = false;
                            break;
                        }
                    };
                }
                V::Json(Value::Bool(found))
            }
            "base64decode" => {
                want(1)?;
                let s = string_arg(cmd, &vals[0])?;
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(s)
                    .map_err(|e| err(format!("base64 decode failed: {e}")))?;
                V::Json(Value::String(String::from_utf8_lossy(&bytes).into_owned()))
            }
            other => {
                return Err(exec_err(
                    cmd,
                    format!("{other:?} is not supported by r8s kubectl"),
                ))
            }
        })
    }

    fn command(&mut self, cmd: &Command, dot: &V, piped: Option<V>) -> Result<V, String> {
        match &cmd.args[0] {
            Arg::Func(f) => {
                let f = f.clone();
                self.call(cmd, &f, &cmd.args[1..], dot, piped)
            }
            first => {
                if cmd.args.len() > 1 || piped.is_some() {
                    return Err(exec_err(
                        cmd,
                        format!("can't give argument to non-function {}", cmd.text),
                    ));
                }
                self.arg(cmd, first, dot)
            }
        }
    }

    fn pipeline(&mut self, p: &Pipeline, dot: &V) -> Result<V, String> {
        let mut value: Option<V> = None;
        for cmd in &p.cmds {
            value = Some(self.command(cmd, dot, value.take())?);
        }
        let value = value.unwrap_or(V::NoValue);
        for name in &p.decl {
            if p.assign {
                if let Some(slot) = self.vars.iter_mut().rev().find(|(n, _)| n == name) {
                    slot.1 = value.clone();
                }
            } else {
                self.vars.push((name.clone(), value.clone()));
            }
        }
        Ok(value)
    }

    fn walk(&mut self, nodes: &[Node], dot: &V) -> Result<(), String> {
        for n in nodes {
            match n {
                Node::Text(t) => self.out.push_str(t),
                Node::Action(p) => {
                    let v = self.pipeline(p, dot)?;
                    if p.decl.is_empty() {
                        self.out.push_str(&print_v(&v));
                    }
                }
                Node::If(p, then, els) | Node::With(p, then, els) => {
                    let mark = self.vars.len();
                    let v = self.pipeline(p, dot)?;
                    if truthy(&v) {
                        let d = if matches!(n, Node::With(..)) {
                            v
                        } else {
                            dot.clone()
                        };
                        self.walk(then, &d)?;
                    } else {
                        self.walk(els, dot)?;
                    }
                    self.vars.truncate(mark);
                }
                Node::Range(p, body, els) => {
                    let mark = self.vars.len();
                    // The range's own variables are bound per element, not to the value.
                    let decl = p.decl.clone();
                    let bare = Pipeline {
                        decl: Vec::new(),
                        assign: false,
                        cmds: p.cmds.clone(),
                    };
                    let v = self.pipeline(&bare, dot)?;
                    let items: Vec<(V, V)> = match v.json() {
                        Some(Value::Array(a)) => a
                            .iter()
                            .enumerate()
                            .map(|(i, x)| (V::Int(i as i64), V::Json(x.clone())))
                            .collect(),
                        Some(Value::Object(o)) => {
                            let sorted: BTreeMap<&String, &Value> = o.iter().collect();
                            sorted
                                .into_iter()
                                .map(|(k, x)| (V::Json(Value::String(k.clone())), V::Json(x.clone())))
                                .collect()
                        }
                        None | Some(Value::Null) => Vec::new(),
                        Some(other) => {
                            let cmd = &p.cmds[0];
                            return Err(exec_err(cmd, format!("range can't iterate over {}", go_v(other))));
                        }
                    };
                    if items.is_empty() {
                        self.walk(els, dot)?;
                    }
                    for (k, x) in items {
                        let inner = self.vars.len();
                        match decl.as_slice() {
                            [v] => self.vars.push((v.clone(), x.clone())),
                            [kv, v] => {
                                self.vars.push((kv.clone(), k));
                                self.vars.push((v.clone(), x.clone()));
                            }
                            _ => {}
                        }
                        self.walk(body, &x)?;
                        self.vars.truncate(inner);
                    }
                    self.vars.truncate(mark);
                }
            }
        }
        Ok(())
    }
}

/// Check a template as `-o` is parsed: kubectl's words for one that does not parse.
pub fn check(text: &str) -> Result<(), String> {
    Template::parse(text)
        .map(|_| ())
        .map_err(|e| format!("error parsing template {text}, {e}"))
}

/// The template run over `obj`: the output, or kubectl's report of the failure (printed to
/// stdout, as kubectl does) and its error.
pub fn execute(text: &str, obj: &Value) -> Result<String, (String, String)> {
    let t =
        Template::parse(text).map_err(|e| (String::new(), format!("error parsing template {text}, {e}")))?;
    t.execute(obj).map_err(|e| {
        let report = format!(
            "Error executing template: {e}. Printing more information for debugging the template:\n\ttemplate was:\n\t\t{text}\n\traw data was:\n\t\t{}\n\tobject given to template engine was:\n\t\t{}\n\n",
            crate::printers::json::compact(obj),
            go_v(obj)
        );
        (report, format!("error executing template {text:?}: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(t: &str, v: &Value) -> String {
        execute(t, v).map_err(|e| e.1).unwrap()
    }

    #[test]
    fn numbers_print_as_go_float64() {
        for (f, s) in [
            (3.0, "3"),
            (1.5, "1.5"),
            (1e6, "1e+06"),
            (123456.0, "123456"),
            (1234567.0, "1.234567e+06"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.0, "-2"),
        ] {
            assert_eq!(go_float(f), s, "{f}");
        }
    }

    #[test]
    fn templates_run_as_kubectl_runs_them() {
        let list = json!({"kind": "List", "items": [
            {"metadata": {"name": "a", "labels": {"app": "x", "b": "y"}}, "spec": {"replicas": 3}},
            {"metadata": {"name": "b"}, "data": {"password": "czNjcmV0"}},
        ]});
        assert_eq!(
            run(r#"{{range .items}}{{.metadata.name}}{{"\n"}}{{end}}"#, &list),
            "a\nb\n"
        );
        assert_eq!(run("{{(index .items 0).spec.replicas}}", &list), "3");
        assert_eq!(
            run("{{(index .items 1).data.password | base64decode}}", &list),
            "s3cret"
        );
        assert_eq!(run("{{(index .items 1).metadata.labels}}", &list), "<no value>");
        assert_eq!(
            run("{{(index .items 0).metadata.labels}}", &list),
            "map[app:x b:y]"
        );
        assert_eq!(run("{{range .nothing}}x{{else}}none{{end}}", &list), "none");
        assert_eq!(
            run(
                r#"{{range $i, $p := .items}}{{$i}}={{$p.metadata.name}},{{end}}"#,
                &list
            ),
            "0=a,1=b,"
        );
        assert_eq!(
            run(
                r#"{{range .items}}{{if exists . "metadata" "labels" "app"}}{{.metadata.name}}{{end}}{{end}}"#,
                &list
            ),
            "a"
        );
        assert_eq!(
            run(r#"{{printf "%s-%q-%d-%v" "a" "b" 3 .kind}}"#, &list),
            "a-\"b\"-3-List"
        );
        assert_eq!(
            run(r#"{{printf "%d" (index .items 0).spec.replicas}}"#, &list),
            "%!d(float64=3)"
        );
        assert_eq!(run("{{len .items}} {{- \" \" -}} {{ .kind }}", &list), "2 List");
        assert_eq!(
            run(
                r#"{{with .kind}}{{.}}{{end}}{{if eq .kind "List" "x"}}!{{else if .kind}}?{{end}}"#,
                &list
            ),
            "List!"
        );
        let e = execute("{{len .nothing}}", &list).unwrap_err();
        assert!(e.0.starts_with("Error executing template: template: output:1:2: executing \"output\" at <len .nothing>: error calling len: reflect: call of reflect.Value.Type on zero Value. Printing more information"), "{}", e.0);
        assert!(check("{{.metadata.name")
            .unwrap_err()
            .ends_with("template: output:1: unclosed action"));
        assert!(check("{{nope .x}}")
            .unwrap_err()
            .ends_with("function \"nope\" not defined"));
    }
}
