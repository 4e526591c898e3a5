//! WATCH: a stream of `{"type": ..., "object": ...}` lines. Without a resourceVersion (or with
//! "0") the current objects come first as ADDED events; from a resourceVersion, every later
//! change; from a compacted one, a single ERROR event with 410 Expired. Selectors are applied to
//! both sides of a change, so objects entering or leaving the selection are ADDED or DELETED.

use crate::registry::Resource;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream;
use http::{header, HeaderMap, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use r8s_store::{EventKind, StoreError};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::context::Ctx;
use crate::http::{wants_table, Body};
use crate::registry::{decode, list_objects, meta, prefix, table, Filter, Query};
use crate::status::ApiError;
use crate::watch_cache::{CachedEvent, Subscription};

/// Bytes of events gathered into one write.
const CHUNK: usize = 64 * 1024;

struct Emitter {
    tx: mpsc::Sender<Bytes>,
    table: Option<(&'static Resource, Query)>,
    /// Objects cut down to PartialObjectMetadata (bookmarks too, as upstream).
    partial: bool,
}

impl Emitter {
    /// Wait for `fut`; `None` once the deadline passes or the client has gone.
    async fn until_done<T>(
        &self,
        deadline: Option<tokio::time::Instant>,
        fut: impl std::future::Future<Output = T>,
    ) -> Option<T> {
        let expired = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            v = fut => Some(v),
            _ = self.tx.closed() => None,
            _ = expired => None,
        }
    }

    /// One change from the watch cache as this watcher sees it: the shared line when it sees
    /// the change as everyone does, else its own rendering.
    fn render_cached(&self, filter: &Filter, ev: &CachedEvent) -> Option<Bytes> {
        if filter.is_empty() && self.table.is_none() && !self.partial {
            return Some(ev.line());
        }
        let kind = cached_type(filter, ev)?;
        if self.table.is_none() && !self.partial {
            return Some(Bytes::from(crate::watch_cache::line_around(
                kind,
                &ev.object.json,
            )));
        }
        Some(self.render(kind, ev.object.value()))
    }

    fn render(&self, kind: &str, obj: Value) -> Bytes {
        let obj = match &self.table {
            Some((def, q)) if kind != "BOOKMARK" && kind != "ERROR" => table::render(def, &[obj], None, q),
            _ if self.partial && kind != "ERROR" => crate::http::partial_object(&obj),
            _ => obj,
        };
        crate::watch_cache::encode_line(kind, &obj)
    }

    /// Send what `chunk` holds as one write and empty it; false once the client is gone.
    async fn flush(&self, chunk: &mut Vec<u8>) -> bool {
        self.tx.send(Bytes::from(std::mem::take(chunk))).await.is_ok()
    }

    /// Send one event; false once the client is gone.
    async fn send(&self, kind: &str, obj: Value) -> bool {
        self.tx.send(self.render(kind, obj)).await.is_ok()
    }
}

pub(crate) async fn serve(
    ctx: &Ctx,
    def: &'static Resource,
    ns: &str,
    headers: &HeaderMap,
    query: &Query,
) -> Result<Response<Body>, ApiError> {
    let filter = Filter::from_query(def, query)?;
    let rv = query.get("resourceVersion").map(str::to_owned);
    let send_initial_events = query.flag("sendInitialEvents");
    let initial = rv.is_none() || rv.as_deref() == Some("0") || send_initial_events;
    let bookmarks = query.flag("allowWatchBookmarks");
    // A negative timeout ends the watch at once, as upstream's timer does; 0 or none: none.
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<i64>().ok())
        .filter(|t| *t != 0)
        .map(|t| Duration::from_secs(t.max(0) as u64));
    let start_after: i64 = match (&rv, initial) {
        (Some(rv), false) => rv
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv}")))?,
        _ => 0,
    };

    // The initial state, read before the watch starts so nothing falls between: at "0" (any
    // state) the watch cache's, as upstream's cacher starts such a watch, else the datastore's.
    let cached_initial = if rv.as_deref() == Some("0") {
        match ctx.shared.watch_cache.get(def).await {
            Some(cache) => {
                cache
                    .list(&prefix(def, ns), 0, |o| filter.matches_cached(o))
                    .await
            }
            None => None,
        }
    } else {
        None
    };
    let (initial_items, list_rv) = match cached_initial {
        Some((items, rv)) => (items.iter().map(|o| o.value()).collect(), rv),
        None if initial => {
            let (items, rv, _, _) = list_objects(ctx, def, ns, &Query::parse(None), &filter).await?;
            (items, rv)
        }
        None => (Vec::new(), start_after),
    };
    let store = ctx.shared.store.clone();
    let prefix = prefix(def, ns);
    // Served from the watch cache when its window reaches back far enough (the cache watches the
    // whole resource; a namespace is a filter on it), else straight from the datastore.
    let subscription = match ctx.shared.watch_cache.get(def).await {
        Some(cache) => {
            let trigger = cache.trigger_field().and_then(|f| filter.field_equals(f));
            cache.subscribe(list_rv + 1, trigger)
        }
        None => None,
    };
    tracing::debug!(
        resource = def.plural,
        start = list_rv + 1,
        cached = subscription.is_some(),
        "watch"
    );
    let store_watch = if subscription.is_some() {
        None
    } else {
        Some(store.watch(&prefix, list_rv + 1).await)
    };

    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let emitter = Emitter {
        tx,
        table: wants_table(headers).then(|| (def, Query::parse(ctx.query.as_deref()))),
        partial: crate::http::wants_partial(headers).is_some(),
    };
    let ns = ns.to_owned();
    tokio::spawn(async move {
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
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
        let mut watch = match (store_watch, subscription) {
            (Some(Ok(w)), _) => w,
            (Some(Err(e)), _) => {
                emit_error(&emitter, e, list_rv).await;
                return;
            }
            (None, Some(sub)) => {
                let bookmarks = bookmarks.then_some(list_rv);
                serve_cached(&emitter, def, &filter, &ns, list_rv + 1, sub, deadline, bookmarks).await;
                return;
            }
            (None, None) => return,
        };
        loop {
            let Some(next) = emitter.until_done(deadline, watch.next()).await else {
                return;
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

/// How often a watcher that allows bookmarks gets one (upstream's bookmark frequency), and how
/// long before its timeout it gets a last one.
const BOOKMARK_EVERY: Duration = Duration::from_secs(60);
const BOOKMARK_BEFORE_TIMEOUT: Duration = Duration::from_secs(2);

/// When the next bookmark is due.
fn next_bookmark(deadline: Option<tokio::time::Instant>) -> tokio::time::Instant {
    let regular = tokio::time::Instant::now() + BOOKMARK_EVERY;
    match deadline.and_then(|d| d.checked_sub(BOOKMARK_BEFORE_TIMEOUT)) {
        Some(before_end) if before_end > tokio::time::Instant::now() => regular.min(before_end),
        _ => regular,
    }
}

/// Serve a watch from the watch cache until the client goes, the deadline passes, or the watcher
/// falls too far behind (it then resumes from its last revision). `bookmarks`: the revision the
/// watch starts after, when the client allows bookmarks — it then gets a BOOKMARK with the latest
/// revision every minute and shortly before its timeout, as upstream's watch cache sends them.
#[allow(clippy::too_many_arguments)]
async fn serve_cached(
    emitter: &Emitter,
    def: &Resource,
    filter: &Filter,
    ns: &str,
    start: i64,
    sub: Subscription,
    deadline: Option<tokio::time::Instant>,
    bookmarks: Option<i64>,
) {
    let mut latest = bookmarks.unwrap_or(0);
    let mut bookmark_at = next_bookmark(deadline);
    // The cache holds the whole resource: keep this watch's namespace only.
    let wanted = |ev: &CachedEvent| ev.revision >= start && (ns.is_empty() || ev.namespace == ns);
    // Events that are ready go out together: one write (and one HTTP/2 frame) for many.
    let mut chunk = Vec::new();
    let add = |chunk: &mut Vec<u8>, ev: &CachedEvent| {
        if wanted(ev) {
            if let Some(line) = emitter.render_cached(filter, ev) {
                chunk.extend_from_slice(&line);
            }
        }
    };
    for ev in &sub.backlog {
        latest = latest.max(ev.revision);
        add(&mut chunk, ev);
        if chunk.len() >= CHUNK && !emitter.flush(&mut chunk).await {
            return;
        }
    }
    if !chunk.is_empty() && !emitter.flush(&mut chunk).await {
        return;
    }
    let mut live = sub.live;
    loop {
        let next = emitter
            .until_done(deadline, async {
                if bookmarks.is_none() {
                    return Some(live.recv().await);
                }
                tokio::select! {
                    ev = live.recv() => Some(ev),
                    _ = tokio::time::sleep_until(bookmark_at) => None,
                }
            })
            .await;
        let Some(next) = next else {
            return;
        };
        let Some(next) = next else {
            // A bookmark: where this watch has got to, so a client resuming starts from here.
            // Every change the cache has applied has been sent to this watcher's channel: once
            // the ones queued are out, the watch has got to that revision (a watcher woken
            // only by its trigger value hears of few changes, and without this would resume
            // from far back).
            bookmark_at = next_bookmark(deadline);
            let applied = *sub.applied.borrow();
            loop {
                match live.try_recv() {
                    Ok(ev) => {
                        latest = latest.max(ev.revision);
                        add(&mut chunk, &ev);
                    }
                    Err(tokio::sync::broadcast::error::TryRecvError::Empty) => break,
                    Err(_) => return,
                }
            }
            if !chunk.is_empty() && !emitter.flush(&mut chunk).await {
                return;
            }
            latest = latest.max(applied);
            let bm = json!({
                "kind": def.kind,
                "apiVersion": def.api_version(),
                "metadata": {"resourceVersion": latest.to_string()},
            });
            if !emitter.send("BOOKMARK", bm).await {
                return;
            }
            continue;
        };
        match next {
            Ok(ev) => {
                latest = latest.max(ev.revision);
                add(&mut chunk, &ev);
                while chunk.len() < CHUNK {
                    match live.try_recv() {
                        Ok(more) => {
                            latest = latest.max(more.revision);
                            add(&mut chunk, &more)
                        }
                        Err(_) => break,
                    }
                }
                if !chunk.is_empty() && !emitter.flush(&mut chunk).await {
                    return;
                }
            }
            // Lagged or closed: end the stream; the client watches again from its last revision.
            Err(_) => return,
        }
    }
}

/// How a watcher with selectors sees a cached change, if at all.
fn cached_type(filter: &Filter, ev: &CachedEvent) -> Option<&'static str> {
    match ev.kind {
        EventKind::Put => {
            let now = filter.matches_cached(&ev.object);
            let before = ev.prev.as_ref().map(|p| filter.matches_cached(p));
            match (before, now) {
                (None | Some(false), true) => Some("ADDED"),
                (Some(true), true) => Some("MODIFIED"),
                (Some(true), false) => Some("DELETED"),
                (_, false) => None,
            }
        }
        EventKind::Delete => filter.matches_cached(&ev.object).then_some("DELETED"),
    }
}

/// A store event as the watcher should see it, or nothing if it does not concern it.
fn translate(def: &Resource, filter: &Filter, ev: r8s_store::Event) -> Option<(&'static str, Value)> {
    match ev.kind {
        EventKind::Put => {
            let cur = decode(def, &ev.kv).ok()?;
            let now = filter.matches(def, &cur);
            let before = ev
                .prev
                .as_ref()
                .and_then(|p| decode(def, p).ok())
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
            let mut obj = decode(def, prev).ok()?;
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
