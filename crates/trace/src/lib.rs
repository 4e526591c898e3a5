//! The journey recorder behind `r8s trace`.
//!
//! Every component marks the stages of `what-happens-when` with ordinary `tracing` spans
//! whose target is `journey::<component>` (`journey::apiserver`, `journey::scheduler`, …) and
//! whose name is the stage (`authn`, `admission`, `store.create`, `deployment.sync`,
//! `schedule`, `kubelet.sync_pod`, `cri.run_pod_sandbox`, `cni.add`, …). A few field names
//! carry the story:
//!
//! - `uid`: the object the stage acts on. A span without one takes its journey ancestor's
//!   (an admission plugin's span inside a create takes the created object's, recorded on the
//!   request's span once it is known). A group whose outermost span has no `uid` is dropped:
//!   it was a request about no one object (a list, a read).
//! - `owner`: the object whose work led to this one (the controller in a created Pod's
//!   ownerReferences, the Deployment a ReplicaSet sync serves). It is what joins the stages of
//!   different objects into one story.
//! - `decision`: what the stage decided, in one line. An outermost span that declares
//!   `decision` and ends without recording it decided nothing (a controller's sync with
//!   nothing to do) and is not kept, unless it failed. Recorded more than once, the texts
//!   are joined with `; `.
//! - `error`: why the stage failed.
//!
//! Any other field is kept as an attribute. [`JourneyLayer`] turns closed spans into
//! [`Stage`]s and keeps them in the process's [`Journal`]: a bounded ring per component.
//! [`story::join`] gathers, from any set of stages (this process's and other nodes'), those
//! of one object and of every object it led to; [`story::render`] tells them as a timeline.

mod journal;
mod layer;
pub mod page;
pub mod story;

pub use journal::{journal, Journal, DEFAULT_CAPACITY};
pub use layer::JourneyLayer;

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The target prefix of journey spans: `journey::<component>`.
pub const TARGET_PREFIX: &str = "journey::";

/// One finished stage: a closed journey span.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stage {
    /// The component that did it (`apiserver`, `controller-manager`, `scheduler`, `kubelet`).
    pub component: Cow<'static, str>,
    /// The stage's name (the span's name).
    pub stage: Cow<'static, str>,
    /// The object it acted on.
    pub uid: String,
    /// The object whose work led to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// When it began, in nanoseconds since the Unix epoch.
    pub start_unix_nanos: u64,
    pub duration_nanos: u64,
    /// How deep it is in its group: 0 for the outermost span, 1 for its children, …
    #[serde(default)]
    pub depth: u8,
    /// Every other field of the span (`decision`, `error`, `revision`, `node`, …).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fields: BTreeMap<Cow<'static, str>, String>,
}

impl Stage {
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }

    pub fn end_unix_nanos(&self) -> u64 {
        self.start_unix_nanos + self.duration_nanos
    }
}

/// Keep one stage that is not a span (a component that learns of its work after the fact: the
/// proxy's sync, the DNS zone's update) in the process's journal.
pub fn keep_stage(
    component: &'static str,
    stage: &'static str,
    uid: &str,
    started: std::time::SystemTime,
    took: std::time::Duration,
    fields: Vec<(&'static str, String)>,
) {
    if uid.is_empty() {
        return;
    }
    let start_unix_nanos = started
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    journal().keep(vec![Stage {
        component: Cow::Borrowed(component),
        stage: Cow::Borrowed(stage),
        uid: uid.to_owned(),
        owner: None,
        start_unix_nanos,
        duration_nanos: took.as_nanos() as u64,
        depth: 0,
        fields: fields.into_iter().map(|(k, v)| (Cow::Borrowed(k), v)).collect(),
    }]);
}
