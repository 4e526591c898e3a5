//! Pod state as controllers read it (upstream `k8s.io/kubectl/pkg/util/podutils` and
//! `pkg/api/v1/pod`): whether a pod is active, ready, available, terminal.

use k8s_openapi::api::core::v1::Pod;

fn phase(p: &Pod) -> Option<&str> {
    p.status.as_ref().and_then(|s| s.phase.as_deref())
}

/// Succeeded or Failed: the pod's containers will not run again.
pub fn is_terminal(p: &Pod) -> bool {
    matches!(phase(p), Some("Succeeded") | Some("Failed"))
}

/// Not terminal and not being deleted (upstream controller's `IsPodActive`).
pub fn is_active(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none() && !is_terminal(p)
}

/// The pod's Ready condition: (is true, last transition time).
pub fn ready_condition(p: &Pod) -> (bool, Option<jiff::Timestamp>) {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .map(|c| (c.status == "True", c.last_transition_time.as_ref().map(|t| t.0)))
        .unwrap_or((false, None))
}

/// Whether the pod's Ready condition is true (upstream `IsPodReady`).
pub fn is_ready(p: &Pod) -> bool {
    ready_condition(p).0
}

/// Ready for at least `min_ready` seconds at `now` (upstream `IsPodAvailable`).
pub fn is_available(p: &Pod, min_ready: i32, now: jiff::Timestamp) -> bool {
    let (ready, since) = ready_condition(p);
    if !ready {
        return false;
    }
    if min_ready <= 0 {
        return true;
    }
    match since {
        Some(t) => t
            .checked_add(jiff::SignedDuration::from_secs(min_ready as i64))
            .is_ok_and(|t| t <= now),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn active_ready_available() {
        let since = "2026-01-01T00:00:00Z";
        let p = pod(json!({"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": since}]}}));
        assert!(is_active(&p) && is_ready(&p) && !is_terminal(&p));
        let t0: jiff::Timestamp = since.parse().unwrap();
        assert!(is_available(&p, 0, t0));
        assert!(!is_available(&p, 10, t0 + jiff::SignedDuration::from_secs(9)));
        assert!(is_available(&p, 10, t0 + jiff::SignedDuration::from_secs(10)));
        let done = pod(json!({"status": {"phase": "Succeeded"}}));
        assert!(!is_active(&done) && is_terminal(&done) && !is_ready(&done));
        let deleting = pod(json!({"metadata": {"deletionTimestamp": since}, "status": {"phase": "Running"}}));
        assert!(!is_active(&deleting));
    }
}
