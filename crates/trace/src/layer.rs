//! The `tracing` layer that turns closed journey spans into [`Stage`]s.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, Filter, Layer};
use tracing_subscriber::registry::LookupSpan;

use crate::{Journal, Stage, TARGET_PREFIX};

/// Keeps every closed journey span (target `journey::…`) in a [`Journal`]. A span's stage is
/// held by its nearest journey ancestor until that one closes, so a group (a request with its
/// authentication, authorization, admission and store write) is kept whole, with the
/// outermost span's `uid` for the stages that name none.
pub struct JourneyLayer {
    journal: Arc<Journal>,
}

impl JourneyLayer {
    pub fn new(journal: Arc<Journal>) -> Self {
        Self { journal }
    }

    /// The per-layer filter that lets only journey spans reach this layer:
    /// `JourneyLayer::new(j).with_filter(JourneyLayer::filter())`. It is decided by target once
    /// per callsite, so every other span and event stays disabled at no cost (a filter
    /// function would be asked at each of them — h2's trace events on every frame).
    pub fn filter<S: Subscriber + for<'a> LookupSpan<'a>>() -> impl Filter<S> {
        tracing_subscriber::filter::Targets::new().with_target("journey", tracing::Level::TRACE)
    }
}

/// A journey span still open.
struct Open {
    component: &'static str,
    stage: &'static str,
    start_unix_nanos: u64,
    began: Instant,
    /// Whether the span declares `decision` (an outermost one that never records it is a sync
    /// that decided nothing).
    declares_decision: bool,
    uid: Option<String>,
    owner: Option<String>,
    fields: BTreeMap<Cow<'static, str>, String>,
    /// The stages of its closed descendants, deepest last.
    finished: Vec<Stage>,
}

struct Fields<'a>(&'a mut Open);

impl Fields<'_> {
    fn put(&mut self, field: &Field, value: String) {
        match field.name() {
            "uid" => self.0.uid = Some(value).filter(|v| !v.is_empty()),
            "owner" => self.0.owner = Some(value).filter(|v| !v.is_empty()),
            // A stage that decides several things says each: the texts are joined.
            "decision" => match self.0.fields.get_mut("decision") {
                Some(d) => {
                    d.push_str("; ");
                    d.push_str(&value);
                }
                None => {
                    self.0.fields.insert(Cow::Borrowed("decision"), value);
                }
            },
            name => {
                self.0.fields.insert(Cow::Borrowed(name), value);
            }
        }
    }
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.to_owned());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.to_string());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.to_string());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.to_string());
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, value.to_string());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.put(field, format!("{value:?}"));
    }
}

impl<S> Layer<S> for JourneyLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let meta = attrs.metadata();
        let Some(component) = meta.target().strip_prefix(TARGET_PREFIX) else {
            return;
        };
        let mut open = Open {
            component,
            stage: meta.name(),
            start_unix_nanos: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
            began: Instant::now(),
            declares_decision: meta.fields().field("decision").is_some(),
            uid: None,
            owner: None,
            fields: BTreeMap::new(),
            finished: Vec::new(),
        };
        attrs.record(&mut Fields(&mut open));
        span.extensions_mut().insert(open);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut ext = span.extensions_mut();
        if let Some(open) = ext.get_mut::<Open>() {
            values.record(&mut Fields(open));
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(open) = span.extensions_mut().remove::<Open>() else {
            return;
        };
        let duration_nanos = open.began.elapsed().as_nanos() as u64;
        let mut stages = Vec::with_capacity(1 + open.finished.len());
        // Kept unless it declares a decision and neither decided nor failed anywhere.
        let decided = !open.declares_decision
            || open.fields.contains_key("decision")
            || open.fields.contains_key("error")
            || open.finished.iter().any(|s| s.fields.contains_key("error"));
        stages.push(Stage {
            component: Cow::Borrowed(open.component),
            stage: Cow::Borrowed(open.stage),
            uid: open.uid.unwrap_or_default(),
            owner: open.owner,
            start_unix_nanos: open.start_unix_nanos,
            duration_nanos,
            depth: 0,
            fields: open.fields,
        });
        for mut s in open.finished {
            s.depth = s.depth.saturating_add(1);
            stages.push(s);
        }
        // Held by the nearest journey ancestor until it closes.
        for ancestor in span.scope().skip(1) {
            let mut ext = ancestor.extensions_mut();
            if let Some(parent) = ext.get_mut::<Open>() {
                parent.finished.extend(stages);
                return;
            }
        }
        // The outermost span: the group is kept if it is about an object and decided something.
        let uid = stages[0].uid.clone();
        if uid.is_empty() || !decided {
            return;
        }
        for s in &mut stages[1..] {
            if s.uid.is_empty() {
                s.uid.clone_from(&uid);
            }
        }
        // Causal order within the group: a parent before its children, children by start.
        stages[1..].sort_by_key(|s| s.start_unix_nanos);
        self.journal.keep(stages);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Instrument;
    use tracing_subscriber::layer::SubscriberExt;

    fn recording(journal: &Arc<Journal>) -> impl Subscriber + Send + Sync {
        tracing_subscriber::registry()
            .with(JourneyLayer::new(journal.clone()).with_filter(JourneyLayer::filter()))
    }

    #[test]
    fn a_group_is_kept_whole_with_its_outermost_uid() {
        let journal = Arc::new(Journal::new(100));
        tracing::subscriber::with_default(recording(&journal), || {
            let request = tracing::info_span!(target: "journey::apiserver", "request", verb = "create", uid = tracing::field::Empty);
            {
                let _in = request.enter();
                tracing::info_span!(target: "journey::apiserver", "authn", authenticator = "x509")
                    .in_scope(|| {});
                // Not a journey span: neither kept nor a break in the chain.
                tracing::info_span!("plumbing").in_scope(|| {
                    tracing::info_span!(target: "journey::apiserver", "store.create", revision = 7)
                        .in_scope(|| {});
                });
            }
            request.record("uid", "u-1");
            drop(request);
            // About no object: dropped.
            tracing::info_span!(target: "journey::apiserver", "request", verb = "list").in_scope(|| {});
        });
        let story = journal.story("u-1");
        let names: Vec<(&str, u8)> = story.iter().map(|s| (s.stage.as_ref(), s.depth)).collect();
        assert_eq!(names, [("request", 0), ("authn", 1), ("store.create", 1)]);
        assert!(story.iter().all(|s| s.uid == "u-1" && s.component == "apiserver"));
        assert_eq!(story[1].field("authenticator"), Some("x509"));
        assert_eq!(story[2].field("revision"), Some("7"));
        assert_eq!(story[0].field("verb"), Some("create"));
        assert_eq!(journal.sizes().values().sum::<usize>(), 3);
    }

    #[test]
    fn a_sync_that_decides_nothing_is_not_kept_and_decisions_add_up() {
        let journal = Arc::new(Journal::new(100));
        tracing::subscriber::with_default(recording(&journal), || {
            let quiet = tracing::info_span!(target: "journey::controller-manager", "deployment.sync", uid = "d", decision = tracing::field::Empty);
            drop(quiet);
            let acted = tracing::info_span!(target: "journey::controller-manager", "deployment.sync", uid = "d", decision = tracing::field::Empty);
            acted.record("decision", "created ReplicaSet web-1");
            acted.record("decision", "scaled it to 3");
            drop(acted);
            let failed = tracing::info_span!(target: "journey::controller-manager", "deployment.sync", uid = "d", decision = tracing::field::Empty, error = tracing::field::Empty);
            failed.record("error", "conflict");
            drop(failed);
        });
        let story = journal.story("d");
        assert_eq!(story.len(), 2);
        assert_eq!(
            story[0].field("decision"),
            Some("created ReplicaSet web-1; scaled it to 3")
        );
        assert_eq!(story[1].field("error"), Some("conflict"));
        assert_eq!(story[0].component, "controller-manager");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn spans_of_futures_moving_between_threads_nest() {
        let journal = Arc::new(Journal::new(100));
        let _default = tracing::subscriber::set_default(recording(&journal));
        let dispatch = tracing::dispatcher::get_default(|d| d.clone());
        let work = async {
            let inner = async {
                tokio::task::yield_now().await;
            }
            .instrument(tracing::info_span!(target: "journey::kubelet", "cri.run_pod_sandbox"));
            inner.await;
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        .instrument(tracing::info_span!(target: "journey::kubelet", "kubelet.sync_pod", uid = "p"));
        tokio::spawn(tracing::instrument::WithSubscriber::with_subscriber(
            work, dispatch,
        ))
        .await
        .unwrap();
        let story = journal.story("p");
        let names: Vec<(&str, u8)> = story.iter().map(|s| (s.stage.as_ref(), s.depth)).collect();
        assert_eq!(names, [("kubelet.sync_pod", 0), ("cri.run_pod_sandbox", 1)]);
        assert!(story[0].duration_nanos >= 20_000_000, "{story:?}");
    }
}
