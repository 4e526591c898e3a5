//! What every r8s component needs to talk to the API server (the role of client-go's
//! `tools/cache`, `util/workqueue`, `tools/leaderelection` and `tools/record`): shared informers
//! and their factory (`informer`), a rate-limited work queue and the controller runner built on
//! it (`queue`), leader election on a Lease (`leader`), the event recorder (`events`),
//! expectations (`expectations`) and one discovery cache (`discovery`).
//!
//! The controller manager, the scheduler and the kubelet all build on this crate; none of them
//! depends on another.

pub mod discovery;
pub mod events;
pub mod expectations;
pub mod http2;
pub mod informer;
pub mod lb;
pub mod leader;
pub mod queue;

pub use tokio_util::sync::CancellationToken as StopToken;

/// Host name plus a random suffix, as upstream's `hostname_<uuid>`: the identity a component
/// campaigns for leadership with.
pub fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "r8s".into());
    let suffix = std::fs::read_to_string("/proc/sys/kernel/random/uuid")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| std::process::id().to_string());
    format!("{host}_{suffix}")
}

/// Whether a kube error is the API's 404.
pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Whether a kube error is the API's 409 (a conflict or an object that already exists).
pub fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}
