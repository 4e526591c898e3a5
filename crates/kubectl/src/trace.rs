//! `r8s trace KIND/NAME`: the journey of one object as the running system recorded it (the
//! API server's `/trace/<object path>`, see `r8s_trace`), told as a timeline in the terminal.

use std::collections::HashSet;
use std::ffi::OsString;
use std::io::Write;

use clap::Parser;
use r8s_trace::story::{render, Timeline};
use r8s_trace::Stage;

use crate::config;
use crate::error::{msg, Result};

/// Show the journey of an object: every stage that acted on it or on what it led to (a
/// Deployment's ReplicaSets and Pods), with its timing and its decision.
#[derive(Parser)]
#[command(name = "r8s trace")]
struct TraceCli {
    /// The object, as KIND/NAME (`deployment/nginx`, `rs/nginx-5d8f6`, `pod/web-0`).
    object: String,
    /// Print stages as they are recorded, until interrupted.
    #[arg(short = 'f', long)]
    follow: bool,
    /// Output format: `json` (the stages as the server gives them); the timeline if absent.
    #[arg(short = 'o', long)]
    output: Option<String>,
    #[command(flatten)]
    flags: config::Flags,
}

/// Run `r8s trace` with `args` (the first is the program name); the process's exit code.
pub fn main(args: Vec<OsString>) -> i32 {
    let cli = match TraceCli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 1 } else { 0 };
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

/// A stage's identity across answers (for `--follow`).
fn key(s: &Stage) -> (String, String, u64, u8) {
    (
        s.component.to_string(),
        s.stage.to_string(),
        s.start_unix_nanos,
        s.depth,
    )
}

async fn run(cli: TraceCli) -> Result<()> {
    let json = match cli.output.as_deref() {
        None => false,
        Some("json") => true,
        Some(other) => {
            return Err(msg(format!(
            "unable to match a printer suitable for the output format \"{other}\", allowed formats are: json"
        )))
        }
    };
    let (kind, name) = cli
        .object
        .split_once('/')
        .filter(|(k, n)| !k.is_empty() && !n.is_empty() && !n.contains('/'))
        .ok_or_else(|| {
            msg(format!(
                "the object must be given as KIND/NAME, not \"{}\"",
                cli.object
            ))
        })?;
    let session = crate::Session::open(&cli.flags).await?;
    let resource = session.resource(kind).await?;
    let namespace = cli
        .flags
        .namespace
        .clone()
        .unwrap_or_else(|| session.conn.namespace.clone());
    let path = format!("/trace{}/{name}", resource.collection_path(Some(&namespace)));
    let mut seen: HashSet<(String, String, u64, u8)> = HashSet::new();
    let mut timeline: Option<Timeline> = None;
    let mut out = std::io::stdout();
    loop {
        let answer = session.conn.rest.get(&path).await?;
        let stages: Vec<Stage> = serde_json::from_value(answer["stages"].clone())
            .map_err(|e| msg(format!("unable to decode the server's trace: {e}")))?;
        if !cli.follow {
            if json {
                let text = serde_json::to_string_pretty(&answer).map_err(|e| msg(e.to_string()))?;
                let _ = writeln!(out, "{text}");
            } else {
                let object = &answer["object"];
                let _ = writeln!(
                    out,
                    "{} {} (uid {})",
                    object["kind"].as_str().unwrap_or(&resource.kind),
                    match object["namespace"].as_str() {
                        Some(ns) => format!("{ns}/{name}"),
                        None => name.to_owned(),
                    },
                    object["uid"].as_str().unwrap_or(""),
                );
                if stages.is_empty() {
                    let _ = writeln!(out, "no stages recorded (the trace ring may have moved on)");
                } else {
                    let _ = write!(out, "{}", render(&stages));
                }
            }
            return Ok(());
        }
        // Following: the stages not printed yet, as they come (whole groups at a time).
        let fresh: Vec<Stage> = stages.iter().filter(|s| seen.insert(key(s))).cloned().collect();
        if json {
            for s in &fresh {
                let text = serde_json::to_string(s).map_err(|e| msg(e.to_string()))?;
                let _ = writeln!(out, "{text}");
            }
        } else if let Some(first) = fresh.first() {
            let t = timeline.get_or_insert_with(|| {
                let _ = writeln!(out, "{}", Timeline::header());
                Timeline {
                    origin: stages
                        .iter()
                        .map(|s| s.start_unix_nanos)
                        .min()
                        .unwrap_or(first.start_unix_nanos),
                }
            });
            for line in t.lines(&fresh) {
                let _ = writeln!(out, "{line}");
            }
        }
        let _ = out.flush();
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}
