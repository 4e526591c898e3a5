//! The journey exported over OTLP (`--tracing-endpoint`): every group the journey recorder
//! keeps (see `r8s_trace`) also goes, in batches, to an OpenTelemetry collector's gRPC
//! TraceService, as spans.
//!
//! How stages become spans:
//! - trace ID: the object's uid (a UUID is 16 bytes, as a trace ID): every stage about one
//!   object is one trace, across components and nodes;
//! - span ID: a hash of the stage; parent: the stage it is nested in (authn in its request);
//! - a link to the trace of the object that led to it (`owner`: a Pod's ReplicaSet, a
//!   ReplicaSet's Deployment), to that trace's conventional root span ID (the first 8 bytes of
//!   the owner's uid);
//! - attributes `r8s.component`, `r8s.uid`, `r8s.owner` and `r8s.<field>` for every field;
//!   status Error with the `error` field's text;
//! - one resource per component, `service.name` = `r8s-<component>`.
//!
//! The queue between the recorder and the exporter is bounded: when the collector is slow or
//! away, groups are dropped (and counted in the log), never held without bound.

use std::hash::{Hash, Hasher};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{span, status, ResourceSpans, ScopeSpans, Span, Status};
use r8s_trace::Stage;

/// Groups waiting for the exporter at most.
const QUEUE: usize = 4096;
/// Groups per export request at most.
const BATCH: usize = 512;
/// How long a batch waits to fill.
const LINGER: Duration = Duration::from_secs(1);

/// Start exporting the process's journal to `endpoint` (`http://host:4317`). Call within the
/// runtime.
pub fn start(endpoint: String) {
    let (tx, rx) = tokio::sync::mpsc::channel::<Vec<Stage>>(QUEUE);
    let dropped = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = dropped.clone();
    r8s_trace::journal().export_to(move |group| {
        if tx.try_send(group.to_vec()).is_err() {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    tokio::spawn(run(endpoint, rx, dropped));
}

async fn run(
    endpoint: String,
    mut rx: tokio::sync::mpsc::Receiver<Vec<Stage>>,
    dropped: std::sync::Arc<std::sync::atomic::AtomicU64>,
) {
    tracing::info!(%endpoint, "exporting the journey (r8s trace) over OTLP");
    let mut client: Option<TraceServiceClient<tonic::transport::Channel>> = None;
    loop {
        let Some(first) = rx.recv().await else { return };
        let mut batch = vec![first];
        let linger = tokio::time::sleep(LINGER);
        tokio::pin!(linger);
        while batch.len() < BATCH {
            tokio::select! {
                group = rx.recv() => match group {
                    Some(g) => batch.push(g),
                    None => break,
                },
                _ = &mut linger => break,
            }
        }
        if client.is_none() {
            match TraceServiceClient::connect(endpoint.clone()).await {
                Ok(c) => client = Some(c),
                Err(e) => {
                    tracing::warn!(%endpoint, error = %e, groups = batch.len(), "OTLP: cannot reach the collector; batch dropped")
                }
            }
        }
        if let Some(c) = client.as_mut() {
            if let Err(e) = c.export(request(&batch)).await {
                tracing::warn!(%endpoint, error = %e, groups = batch.len(), "OTLP: export failed; batch dropped");
                client = None;
            }
        }
        let lost = dropped.swap(0, std::sync::atomic::Ordering::Relaxed);
        if lost > 0 {
            tracing::warn!(groups = lost, "OTLP: the export queue was full; groups dropped");
        }
    }
}

fn text(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_owned())),
        }),
        ..Default::default()
    }
}

/// A uid as a trace ID: the UUID's 16 bytes, or a hash of any other text.
fn trace_id(uid: &str) -> Vec<u8> {
    let hex: String = uid.chars().filter(|c| *c != '-').collect();
    if hex.len() == 32 {
        let bytes: Option<Vec<u8>> = (0..16)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok())
            .collect();
        if let Some(b) = bytes {
            return b;
        }
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    uid.hash(&mut h);
    let a = h.finish();
    "r8s".hash(&mut h);
    let b = h.finish();
    [a.to_be_bytes(), b.to_be_bytes()].concat()
}

fn span_id(s: &Stage, index: usize) -> Vec<u8> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (&s.component, &s.stage, &s.uid, s.start_unix_nanos, index).hash(&mut h);
    h.finish().to_be_bytes().to_vec()
}

/// The export request of some groups.
pub fn request(groups: &[Vec<Stage>]) -> ExportTraceServiceRequest {
    let mut by_component: std::collections::BTreeMap<String, Vec<Span>> = Default::default();
    for group in groups {
        // The span IDs of the stages this one may be nested in, by depth.
        let mut parents: Vec<Vec<u8>> = Vec::new();
        for (i, s) in group.iter().enumerate() {
            let id = span_id(s, i);
            parents.truncate(s.depth as usize);
            let parent = parents.last().cloned().unwrap_or_default();
            parents.push(id.clone());
            let mut attributes = vec![text("r8s.component", &s.component), text("r8s.uid", &s.uid)];
            if let Some(o) = &s.owner {
                attributes.push(text("r8s.owner", o));
            }
            for (k, v) in &s.fields {
                attributes.push(text(&format!("r8s.{k}"), v));
            }
            let links = s
                .owner
                .iter()
                .map(|o| {
                    let trace = trace_id(o);
                    span::Link {
                        span_id: trace[..8].to_vec(),
                        trace_id: trace,
                        attributes: vec![text("r8s.link", "owner")],
                        ..Default::default()
                    }
                })
                .collect();
            let status = s.field("error").map(|e| Status {
                message: e.to_owned(),
                code: status::StatusCode::Error as i32,
            });
            let kind = if s.depth == 0 && s.stage == "request" {
                span::SpanKind::Server
            } else {
                span::SpanKind::Internal
            };
            by_component
                .entry(group[0].component.to_string())
                .or_default()
                .push(Span {
                    trace_id: trace_id(&s.uid),
                    span_id: id,
                    parent_span_id: parent,
                    name: s.stage.to_string(),
                    kind: kind as i32,
                    start_time_unix_nano: s.start_unix_nanos,
                    end_time_unix_nano: s.end_unix_nanos(),
                    attributes,
                    links,
                    status,
                    ..Default::default()
                });
        }
    }
    ExportTraceServiceRequest {
        resource_spans: by_component
            .into_iter()
            .map(|(component, spans)| ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![text("service.name", &format!("r8s-{component}"))],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "r8s".into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                        ..Default::default()
                    }),
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(name: &'static str, uid: &str, depth: u8, start: u64) -> Stage {
        Stage {
            component: "apiserver".into(),
            stage: name.into(),
            uid: uid.into(),
            owner: None,
            start_unix_nanos: start,
            duration_nanos: 10,
            depth,
            fields: Default::default(),
        }
    }

    #[test]
    fn stages_become_spans_of_their_objects_trace_nested_and_linked_to_their_owner() {
        let uid = "0f8fad5b-d9cb-469f-a165-70867728950e";
        let owner = "7c9e6679-7425-40de-944b-e07fc1f90ae7";
        let mut request = stage("request", uid, 0, 100);
        request.owner = Some(owner.into());
        let mut admission = stage("admission", uid, 1, 110);
        admission.fields.insert("error".into(), "refused".into());
        let r = super::request(&[vec![request, stage("authn", uid, 1, 105), admission]]);
        assert_eq!(r.resource_spans.len(), 1);
        let rs = &r.resource_spans[0];
        assert_eq!(
            rs.resource.as_ref().unwrap().attributes[0],
            text("service.name", "r8s-apiserver")
        );
        let spans = &rs.scope_spans[0].spans;
        assert_eq!(spans.len(), 3);
        let expected_trace: Vec<u8> = vec![
            0x0f, 0x8f, 0xad, 0x5b, 0xd9, 0xcb, 0x46, 0x9f, 0xa1, 0x65, 0x70, 0x86, 0x77, 0x28, 0x95, 0x0e,
        ];
        assert!(spans.iter().all(|s| s.trace_id == expected_trace));
        assert!(spans[0].parent_span_id.is_empty());
        assert_eq!(spans[1].parent_span_id, spans[0].span_id);
        assert_eq!(spans[2].parent_span_id, spans[0].span_id);
        assert_ne!(spans[1].span_id, spans[2].span_id);
        assert_eq!(spans[0].kind, span::SpanKind::Server as i32);
        assert_eq!(spans[0].links[0].trace_id, trace_id(owner));
        assert_eq!(spans[0].end_time_unix_nano, 110);
        assert_eq!(
            spans[2].status.as_ref().unwrap().code,
            status::StatusCode::Error as i32
        );
        assert!(spans[2].attributes.contains(&text("r8s.error", "refused")));
    }
}
