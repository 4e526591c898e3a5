//! WATCH: a stream of `{"type": ..., "object": ...}` lines. Without a resourceVersion (or with
//! "0") the current objects come first as ADDED events; from a resourceVersion, every later
//! change; from a compacted one, a single ERROR event with 410 Expired. Selectors are applied to
//! both sides of a change, so objects entering or leaving the selection are ADDED or DELETED.

use std::time::Duration;

use bytes::Bytes;
use futures_util::stream;
use http::{header, HeaderMap, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use r8s_api::ResourceDef;
use r8s_store::{EventKind, StoreError};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::{decode, list_objects, meta, table, wants_table, Filter, Query};
use crate::handler::{Body, Ctx};
use crate::status::ApiError;

struct Emitter {
    tx: mpsc::Sender<Bytes>,
    table: Option<(&'static ResourceDef, Query)>,
}

impl Emitter {
    /// Send one event; false once the client is gone.
    async fn send(&self, kind: &str, obj: Value) -> bool {
        let obj = match &self.table {
            Some((def, q)) if kind != "BOOKMARK" && kind != "ERROR" => table::render(def, &[obj], None, q),
            _ => obj,
        };
        let mut line = serde_json::to_vec(&json!({"type": kind, "object": obj})).expect("JSON serializes");
        line.push(b'\n');
        self.tx.send(Bytes::from(line)).await.is_ok()
    }
}

pub(crate) async fn serve(
    ctx: &Ctx,
    def: &'static ResourceDef,
    ns: &str,
    headers: &HeaderMap,
    query: &Query,
) -> Result<Response<Body>, ApiError> {
    let filter = Filter::from_query(def, query)?;
    let rv = query.get("resourceVersion").map(str::to_owned);
    let send_initial_events = query.flag("sendInitialEvents");
    let initial = rv.is_none() || rv.as_deref() == Some("0") || send_initial_events;
    let bookmarks = query.flag("allowWatchBookmarks");
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs);
    let start_after: i64 = match (&rv, initial) {
        (Some(rv), false) => rv
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv}")))?,
        _ => 0,
    };

    // The initial state, read before the watch starts so nothing falls between.
    let (initial_items, list_rv) = if initial {
        let (items, rv, _, _) = list_objects(ctx, def, ns, &Query::parse(None), &filter).await?;
        (items, rv)
    } else {
        (Vec::new(), start_after)
    };
    let store = ctx.shared.store.clone();
    let prefix = super::prefix(def, ns);
    let store_watch = store.watch(&prefix, list_rv + 1).await;

    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let emitter = Emitter {
        tx,
        table: wants_table(headers).then(|| (def, Query::parse(ctx.query.as_deref()))),
    };
    tokio::spawn(async move {
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        let mut watch = match store_watch {
            Ok(w) => w,
            Err(e) => {
                emit_error(&emitter, e, list_rv).await;
                return;
            }
        };
        for item in initial_items {
            if !emitter.send("ADDED", item).await {
                return;
            }
        }
        if send_initial_events && bookmarks {
            // The end of the initial state, for clients that asked for it (watch-list).
            let bm = json!({
                "kind": def.kind,
                "apiVersion": def.api_version(),
                "metadata": {"resourceVersion": list_rv.to_string(), "annotations": {"k8s.io/initial-events-end": "true"}},
            });
            if !emitter.send("BOOKMARK", bm).await {
                return;
            }
        }
        loop {
            let next = match deadline {
                Some(d) => match tokio::time::timeout_at(d, watch.next()).await {
                    Ok(n) => n,
                    Err(_) => return,
                },
                None => tokio::select! {
                    n = watch.next() => n,
                    _ = emitter.tx.closed() => return,
                },
            };
            let batch = match next {
                Some(Ok(batch)) => batch,
                Some(Err(e)) => {
                    emit_error(&emitter, e, list_rv).await;
                    return;
                }
                None => return,
            };
            for ev in batch {
                let Some((kind, obj)) = translate(def, &filter, ev) else {
                    continue;
                };
                if !emitter.send(kind, obj).await {
                    return;
                }
            }
        }
    });
    let body = StreamBody::new(stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::convert::Infallible>(Frame::data(b)), rx))
    }));
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .body(BodyExt::boxed(body))
        .expect("valid response"))
}

/// A store event as the watcher should see it, or nothing if it does not concern it.
fn translate(def: &ResourceDef, filter: &Filter, ev: r8s_store::Event) -> Option<(&'static str, Value)> {
    match ev.kind {
        EventKind::Put => {
            let cur = decode(&ev.kv).ok()?;
            let now = filter.matches(def, &cur);
            let before = ev
                .prev
                .as_ref()
                .and_then(|p| decode(p).ok())
                .map(|p| filter.matches(def, &p));
            match (before, now) {
                (None | Some(false), true) => Some(("ADDED", cur)),
                (Some(true), true) => Some(("MODIFIED", cur)),
                (Some(true), false) => Some(("DELETED", cur)),
                (_, false) => None,
            }
        }
        EventKind::Delete => {
            let prev = ev.prev.as_ref()?;
            let mut obj = decode(prev).ok()?;
            if !filter.matches(def, &obj) {
                return None;
            }
            meta::set_resource_version(&mut obj, ev.kv.mod_revision);
            Some(("DELETED", obj))
        }
    }
}

async fn emit_error(emitter: &Emitter, e: StoreError, rv: i64) {
    let err = match e {
        StoreError::Compacted { compacted, .. } => ApiError::new(
            410,
            "Expired",
            match compacted {
                Some(c) => format!("too old resource version: {rv} ({c})"),
                None => format!("too old resource version: {rv}"),
            },
        ),
        StoreError::WatchLagged => return,
        other => ApiError::internal(other.to_string()),
    };
    let _ = emitter.send("ERROR", err.to_status()).await;
}
