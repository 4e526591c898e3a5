//! `metrics.k8s.io/v1beta1` (NodeMetrics, PodMetrics), served in-process from what
//! `crate::resource_metrics` scraped, with metrics-server's shapes: objects named as the node
//! or pod, carrying its labels, selected by its labels and fields, usage as quantities (CPU in
//! nanocores, memory in bytes, in their canonical forms), `timestamp` and `window`.

use crate::registry::Resource;
use http::{HeaderMap, Method, Response, StatusCode};
use serde_json::{json, Value};

use crate::context::Ctx;
use crate::http::{json_response, wants_table, Body};
use crate::registry::{self, table, Filter, Query};
use crate::resource_metrics::Usage;
use crate::status::ApiError;

/// A CPU rate in nanocores as a canonical quantity: `250m`, `1500m`, `2`, `123456n`.
pub(crate) fn cpu_quantity(nano_cores: u64) -> String {
    const SUFFIXES: [&str; 4] = ["n", "u", "m", ""];
    let (mut v, mut i) = (nano_cores, 0);
    while i < 3 && v != 0 && v % 1000 == 0 {
        v /= 1000;
        i += 1;
    }
    if v == 0 {
        return "0".to_owned();
    }
    format!("{v}{}", SUFFIXES[i])
}

/// Bytes as a canonical binary quantity: `4Ki`, `12Mi`, or the plain number.
pub(crate) fn memory_quantity(bytes: u64) -> String {
    const SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    let (mut v, mut i) = (bytes, 0);
    while i < 6 && v != 0 && v % 1024 == 0 {
        v /= 1024;
        i += 1;
    }
    format!("{v}{}", SUFFIXES[i])
}

/// A window as Go's `time.Duration.String` writes it: `15.012s`, `1m0.5s`.
pub(crate) fn go_duration(ms: i64) -> String {
    r8s_api::duration::format_nanos(ms.saturating_mul(1_000_000))
}

/// An RFC 3339 time (seconds) from milliseconds since the epoch.
fn rfc3339(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(ms.div_euclid(1000))
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".to_owned())
}

fn usage_of(u: &Usage) -> Value {
    json!({"cpu": cpu_quantity(u.nano_cores), "memory": memory_quantity(u.memory)})
}

fn metadata(obj: &Value) -> Value {
    let mut m = json!({
        "name": obj["metadata"]["name"],
        "creationTimestamp": registry::meta::now_rfc3339(),
    });
    if obj["metadata"]["namespace"].is_string() {
        m["namespace"] = obj["metadata"]["namespace"].clone();
    }
    if obj["metadata"]["labels"].is_object() {
        m["labels"] = obj["metadata"]["labels"].clone();
    }
    m
}

/// The NodeMetrics of `node`, if its kubelet has been scraped twice.
fn node_metrics(ctx: &Ctx, node: &Value) -> Option<Value> {
    let u = ctx
        .shared
        .resource_metrics
        .node(node["metadata"]["name"].as_str()?)?;
    Some(json!({
        "kind": "NodeMetrics",
        "apiVersion": "metrics.k8s.io/v1beta1",
        "metadata": metadata(node),
        "timestamp": rfc3339(u.timestamp_ms),
        "window": go_duration(u.window_ms),
        "usage": usage_of(&u),
    }))
}

/// The PodMetrics of `pod`, if all its containers have been scraped twice.
fn pod_metrics(ctx: &Ctx, pod: &Value) -> Option<Value> {
    let containers = ctx.shared.resource_metrics.pod(
        pod["metadata"]["namespace"].as_str()?,
        pod["metadata"]["name"].as_str()?,
    )?;
    // The time and window of the container read longest ago, as metrics-server gives them.
    let oldest = containers.iter().min_by_key(|(_, u)| u.timestamp_ms)?.1;
    Some(json!({
        "kind": "PodMetrics",
        "apiVersion": "metrics.k8s.io/v1beta1",
        "metadata": metadata(pod),
        "timestamp": rfc3339(oldest.timestamp_ms),
        "window": go_duration(oldest.window_ms),
        "containers": containers
            .iter()
            .map(|(name, u)| json!({"name": name, "usage": usage_of(u)}))
            .collect::<Vec<_>>(),
    }))
}

/// A NotFound of `resource` (`nodemetrics`, `podmetrics`, `node`, `pods`) named `name`, as
/// metrics-server words it.
fn not_found(resource: &str, group: &str, name: &str) -> ApiError {
    let what = if group.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}.{group}")
    };
    ApiError::new(404, "NotFound", format!("{what} \"{name}\" not found"))
        .with_details(json!({"name": name, "group": group, "kind": resource}))
}

fn running(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
}

/// GET or list NodeMetrics (`def.plural` "nodes") or PodMetrics ("pods").
#[allow(clippy::too_many_arguments)]
pub(crate) async fn serve(
    ctx: &Ctx,
    def: &Resource,
    method: &Method,
    verb: &str,
    ns: &str,
    name: &str,
    headers: &HeaderMap,
    query: &Query,
) -> Result<Response<Body>, ApiError> {
    let nodes = def.plural == "nodes";
    let source =
        crate::registry::catalogue::builtin("", "v1", def.plural).expect("nodes and pods are served");
    let of = |obj: &Value| {
        if nodes {
            node_metrics(ctx, obj)
        } else if running(obj) {
            pod_metrics(ctx, obj)
        } else {
            None
        }
    };
    let shared = ctx.shared.clone();
    let body = match verb {
        "get" => {
            // metrics-server's words: the lister's for a node or pod it does not know, its
            // own (the pod named with its namespace) for one without metrics.
            let gone = || {
                if nodes {
                    not_found("node", "", name)
                } else {
                    not_found("pods", "", name)
                }
            };
            let obj = match registry::read(ctx, source, ns, name).await {
                Ok(o) => o,
                Err(e) if e.code == 404 => return Err(gone()),
                Err(e) => return Err(e),
            };
            if !nodes && !running(&obj) {
                return Err(gone());
            }
            shared.resource_metrics.touch(&shared).await;
            let m = of(&obj).ok_or_else(|| {
                if nodes {
                    not_found("nodemetrics", "metrics.k8s.io", name)
                } else {
                    not_found("podmetrics", "metrics.k8s.io", &format!("{ns}/{name}"))
                }
            })?;
            if wants_table(headers) {
                table::render(def, &[m], None, query)
            } else {
                m
            }
        }
        "list" => {
            // Selected by the metrics objects' own fields (name and namespace only) and their
            // node's or pod's labels, which they carry.
            let filter = Filter::from_query(def, query)?;
            // Nodes and pods now, whatever resourceVersion the client gave: metrics have none.
            let page = registry::list(ctx, source, ns, &Query::parse(None), &Filter::default()).await?;
            shared.resource_metrics.touch(&shared).await;
            let items: Vec<Value> = page
                .items
                .iter()
                .filter_map(of)
                .filter(|m| filter.matches(def, m))
                .collect();
            let meta = json!({});
            if wants_table(headers) {
                table::render(def, &items, Some(meta), query)
            } else {
                json!({
                    "kind": registry::list_kind(def),
                    "apiVersion": def.api_version(),
                    "metadata": meta,
                    "items": items,
                })
            }
        }
        _ => {
            return Err(ApiError::method_not_allowed(
                method.as_str(),
                &def.group_resource(),
            ))
        }
    };
    Ok(json_response(StatusCode::OK, &body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_in_their_canonical_forms() {
        assert_eq!(cpu_quantity(0), "0");
        assert_eq!(cpu_quantity(123_456), "123456n");
        assert_eq!(cpu_quantity(250_000_000), "250m");
        assert_eq!(cpu_quantity(2_000_000_000), "2");
        assert_eq!(cpu_quantity(1_500_000), "1500u");
        assert_eq!(memory_quantity(4096), "4Ki");
        assert_eq!(memory_quantity(12 << 20), "12Mi");
        assert_eq!(memory_quantity(1500), "1500");
        assert_eq!(memory_quantity(0), "0");
    }

    #[test]
    fn windows_as_go_durations() {
        assert_eq!(go_duration(15_012), "15.012s");
        assert_eq!(go_duration(1000), "1s");
        assert_eq!(go_duration(60_500), "1m0.5s");
        assert_eq!(go_duration(3_600_000), "1h0m0s");
        assert_eq!(go_duration(250), "250ms");
    }
}
