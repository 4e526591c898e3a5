//! Events as upstream's controllers emit them (ScalingReplicaSet, SuccessfulCreate, …), published
//! through kube-rs's `Recorder` (events.k8s.io/v1, with series for repeats) off the sync path:
//! a failed event never fails a sync, as upstream's broadcaster drops what it cannot send.
//!
//! kube-rs's recorder counts an event as a repeat of an earlier one with the same object, type
//! and reason whatever its message; upstream's correlator repeats only identical events (the
//! message included), so "New size: 3" and then "New size: 1" are two events. Repeats are
//! therefore counted per message: one recorder (with its series cache) per message text.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};

#[derive(Clone)]
pub struct Events {
    /// A recorder per message text (bounded: forgotten all at once past [`MAX_MESSAGES`]).
    recorders: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<Recorder>>>>,
    client: Client,
    reporter: Reporter,
}

/// Message texts whose repeats are counted at once (upstream's correlator keeps 4096 events).
const MAX_MESSAGES: usize = 1024;

impl Events {
    pub fn new(client: Client, component: &str) -> Self {
        let reporter = Reporter {
            controller: component.to_string(),
            instance: std::env::var("HOSTNAME").ok(),
        };
        Self {
            recorders: Default::default(),
            client,
            reporter,
        }
    }

    pub fn normal<K: Resource<DynamicType = ()>>(&self, obj: &K, reason: &str, note: String) {
        self.emit(obj.object_ref(&()), EventType::Normal, reason, note)
    }

    pub fn warning<K: Resource<DynamicType = ()>>(&self, obj: &K, reason: &str, note: String) {
        self.emit(obj.object_ref(&()), EventType::Warning, reason, note)
    }

    /// An event that never repeats (one per object, such as a pod's Scheduled): published
    /// without the series cache, whose upkeep costs every publish a pass over all cached events.
    pub fn emit_once(&self, reference: ObjectReference, type_: EventType, reason: &str, note: String) {
        let recorder = std::sync::Arc::new(Recorder::new(self.client.clone(), self.reporter.clone()));
        Self::publish(recorder, reference, type_, reason, note)
    }

    pub fn emit(&self, reference: ObjectReference, type_: EventType, reason: &str, note: String) {
        let recorder = {
            let mut all = self.recorders.lock().unwrap_or_else(|e| e.into_inner());
            if all.len() >= MAX_MESSAGES && !all.contains_key(&note) {
                all.clear();
            }
            all.entry(note.clone())
                .or_insert_with(|| {
                    std::sync::Arc::new(Recorder::new(self.client.clone(), self.reporter.clone()))
                })
                .clone()
        };
        Self::publish(recorder, reference, type_, reason, note)
    }

    fn publish(
        recorder: std::sync::Arc<Recorder>,
        reference: ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let ev = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note),
            action: reason.to_string(),
            secondary: None,
        };
        tokio::spawn(async move {
            if let Err(e) = recorder.publish(&ev, &reference).await {
                tracing::debug!(error = %e, reason = %ev.reason, "event not recorded");
            }
        });
    }
}
