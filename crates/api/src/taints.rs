//! Taints and tolerations (upstream `component-helpers/scheduling/corev1` and the
//! `v1helper` toleration functions): whether a toleration tolerates a taint, and which taint of
//! a node a pod does not tolerate. The scheduler's TaintToleration and NodeUnschedulable
//! plugins, the kubelet's admission and the node lifecycle controller's evictions all ask here.

use k8s_openapi::api::core::v1::{Taint, Toleration};

/// Does `t` tolerate `taint` (upstream `Toleration.ToleratesTaint`)? An empty effect matches
/// every effect; `Exists` with an empty key matches every taint; `Equal` (the default) needs
/// key and value to match.
pub fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if t.effect
        .as_deref()
        .is_some_and(|e| !e.is_empty() && e != taint.effect)
    {
        return false;
    }
    match t.operator.as_deref().unwrap_or("Equal") {
        "Exists" => t.key.as_deref().unwrap_or("").is_empty() || t.key.as_deref() == Some(taint.key.as_str()),
        _ => {
            t.key.as_deref() == Some(taint.key.as_str())
                && t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
    }
}

/// Does any of `tolerations` tolerate `taint`?
pub fn tolerated(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| tolerates(t, taint))
}

/// The first of `taints` that `keep` selects and no toleration tolerates (upstream
/// `FindMatchingUntoleratedTaint`).
pub fn find_untolerated<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
    keep: impl Fn(&Taint) -> bool,
) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| keep(t))
        .find(|t| !tolerated(tolerations, t))
}

/// Taints that stop new pods from being scheduled: NoSchedule and NoExecute.
pub fn schedule_blocking(t: &Taint) -> bool {
    t.effect == "NoSchedule" || t.effect == "NoExecute"
}

/// Taints that evict running pods: NoExecute.
pub fn no_execute(t: &Taint) -> bool {
    t.effect == "NoExecute"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(Into::into),
            effect: effect.into(),
            ..Default::default()
        }
    }

    fn tol(key: Option<&str>, op: Option<&str>, value: Option<&str>, effect: Option<&str>) -> Toleration {
        Toleration {
            key: key.map(Into::into),
            operator: op.map(Into::into),
            value: value.map(Into::into),
            effect: effect.map(Into::into),
            ..Default::default()
        }
    }

    #[test]
    fn tolerations_as_upstream() {
        let t = taint("dedicated", Some("gpu"), "NoSchedule");
        assert!(tolerates(&tol(Some("dedicated"), None, Some("gpu"), None), &t));
        assert!(!tolerates(&tol(Some("dedicated"), None, Some("cpu"), None), &t));
        assert!(tolerates(&tol(Some("dedicated"), Some("Exists"), None, None), &t));
        assert!(
            tolerates(&tol(None, Some("Exists"), None, None), &t),
            "empty key with Exists tolerates all"
        );
        assert!(!tolerates(
            &tol(Some("dedicated"), Some("Exists"), None, Some("NoExecute")),
            &t
        ));
        assert!(tolerates(
            &tol(Some("dedicated"), Some("Exists"), None, Some("")),
            &t
        ));
    }

    #[test]
    fn first_untolerated_taint_of_the_selected_effects() {
        let taints = vec![
            taint("a", None, "PreferNoSchedule"),
            taint("b", None, "NoSchedule"),
            taint("c", None, "NoExecute"),
        ];
        let tols = vec![tol(Some("b"), Some("Exists"), None, None)];
        assert_eq!(
            find_untolerated(&taints, &tols, schedule_blocking).map(|t| t.key.as_str()),
            Some("c")
        );
        assert_eq!(
            find_untolerated(&taints, &tols, no_execute).map(|t| t.key.as_str()),
            Some("c")
        );
        let all = vec![tol(None, Some("Exists"), None, None)];
        assert!(find_untolerated(&taints, &all, |_| true).is_none());
    }
}
