//! `kubectl top pods|nodes`: usage from `metrics.k8s.io` (served by r8s in-process), CPU in
//! millicores and memory in MiB as kubectl rounds them, nodes also as a share of their
//! allocatable resources.

use serde_json::Value;

use crate::error::{msg, Result};
use crate::get::encode;
use crate::printers::table::tabwrite_with;
use crate::{out, Session};

#[derive(clap::Subcommand)]
pub enum TopCommand {
    /// Display resource (CPU/memory) usage of pods.
    #[command(alias = "pods", alias = "po")]
    Pod(TopArgs),
    /// Display resource (CPU/memory) usage of nodes.
    #[command(alias = "nodes", alias = "no")]
    Node(TopArgs),
}

#[derive(clap::Args)]
pub struct TopArgs {
    name: Option<String>,
    /// Selector (label query) to filter on.
    #[arg(short = 'l', long)]
    selector: Option<String>,
    /// If present, list the requested object(s) across all namespaces.
    #[arg(short = 'A', long)]
    all_namespaces: bool,
    /// If present, print output without headers.
    #[arg(long)]
    no_headers: bool,
    /// If non-empty, sort the list using specified field. The field can be either 'cpu' or 'memory'.
    #[arg(long)]
    sort_by: Option<String>,
}

/// A Kubernetes quantity as a number (`250m`, `1500u`, `123456Ki`, `1e3`, `2`).
pub(crate) fn quantity(s: &str) -> f64 {
    const SUFFIXES: &[(&str, f64)] = &[
        ("Ki", 1024.0),
        ("Mi", 1048576.0),
        ("Gi", 1073741824.0),
        ("Ti", 1099511627776.0),
        ("Pi", 1125899906842624.0),
        ("Ei", 1152921504606846976.0),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
    ];
    for (suffix, factor) in SUFFIXES {
        if let Some(n) = s.strip_suffix(suffix) {
            return n.parse::<f64>().unwrap_or(0.0) * factor;
        }
    }
    s.parse().unwrap_or(0.0)
}

/// resource.Quantity's MilliValue and Value round up.
fn milli(v: &Value) -> i64 {
    (quantity(v.as_str().unwrap_or("0")) * 1000.0 - 1e-6).ceil() as i64
}

fn bytes(v: &Value) -> i64 {
    (quantity(v.as_str().unwrap_or("0")) - 1e-6).ceil() as i64
}

pub async fn top(session: &Session, c: TopCommand) -> Result<i32> {
    let (a, nodes) = match &c {
        TopCommand::Pod(a) => (a, false),
        TopCommand::Node(a) => (a, true),
    };
    let mut path = if nodes {
        "/apis/metrics.k8s.io/v1beta1/nodes".to_owned()
    } else if a.all_namespaces {
        "/apis/metrics.k8s.io/v1beta1/pods".to_owned()
    } else {
        format!(
            "/apis/metrics.k8s.io/v1beta1/namespaces/{}/pods",
            session.conn.namespace
        )
    };
    let items: Vec<Value> = match &a.name {
        Some(name) => {
            path.push_str(&format!("/{name}"));
            vec![session.conn.rest.get(&path).await?]
        }
        None => {
            if let Some(l) = &a.selector {
                path.push_str(&format!("?labelSelector={}", encode(l)));
            }
            session.conn.rest.get(&path).await?["items"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        }
    };
    if items.is_empty() {
        return Err(msg("metrics not available yet"));
    }
    // (namespace, name, cpu millicores, memory bytes)
    let mut rows: Vec<(String, String, i64, i64)> = items
        .iter()
        .map(|m| {
            let (cpu, mem) = if nodes {
                (milli(&m["usage"]["cpu"]), bytes(&m["usage"]["memory"]))
            } else {
                m["containers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .fold((0, 0), |(c, b), x| {
                        (c + milli(&x["usage"]["cpu"]), b + bytes(&x["usage"]["memory"]))
                    })
            };
            (
                m["metadata"]["namespace"].as_str().unwrap_or("").to_owned(),
                m["metadata"]["name"].as_str().unwrap_or("").to_owned(),
                cpu,
                mem,
            )
        })
        .collect();
    match a.sort_by.as_deref() {
        Some("cpu") => rows.sort_by_key(|r| std::cmp::Reverse(r.2)),
        Some("memory") => rows.sort_by_key(|r| std::cmp::Reverse(r.3)),
        _ => rows.sort_by(|x, y| (&x.0, &x.1).cmp(&(&y.0, &y.1))),
    }
    let mut text = String::new();
    if nodes {
        let list = session.conn.rest.get("/api/v1/nodes").await?;
        let allocatable = |name: &str| -> (i64, i64) {
            list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|n| n["metadata"]["name"] == name)
                .map(|n| {
                    (
                        milli(&n["status"]["allocatable"]["cpu"]),
                        bytes(&n["status"]["allocatable"]["memory"]),
                    )
                })
                .unwrap_or((0, 0))
        };
        if !a.no_headers {
            text.push_str("NAME\tCPU(cores)\tCPU(%)\tMEMORY(bytes)\tMEMORY(%)\t\n");
        }
        for (_, name, cpu, mem) in &rows {
            let (acpu, amem) = allocatable(name);
            let pct = |u: i64, t: i64| {
                if t > 0 {
                    format!("{}%", u * 100 / t)
                } else {
                    "<unknown>".into()
                }
            };
            text.push_str(&format!(
                "{name}\t{cpu}m\t{}\t{}Mi\t{}\t\n",
                pct(*cpu, acpu),
                mem / (1024 * 1024),
                pct(*mem, amem)
            ));
        }
    } else {
        if !a.no_headers {
            if a.all_namespaces {
                text.push_str("NAMESPACE\t");
            }
            text.push_str("NAME\tCPU(cores)\tMEMORY(bytes)\t\n");
        }
        for (ns, name, cpu, mem) in &rows {
            if a.all_namespaces {
                text.push_str(&format!("{ns}\t"));
            }
            text.push_str(&format!("{name}\t{cpu}m\t{}Mi\t\n", mem / (1024 * 1024)));
        }
    }
    out(&tabwrite_with(&text, 6, 3));
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_round_as_kubectl() {
        assert_eq!(milli(&Value::from("123456789n")), 124);
        assert_eq!(milli(&Value::from("250m")), 250);
        assert_eq!(milli(&Value::from("2")), 2000);
        assert_eq!(bytes(&Value::from("12Mi")), 12 * 1024 * 1024);
        assert_eq!(bytes(&Value::from("1500Ki")), 1_536_000);
    }
}
