//! Quality of service: a pod's class (upstream `GetPodQOS`), where its cgroup goes, what the pod
//! cgroup is limited to (upstream `ResourceConfigForPod`) and each container's CRI resources
//! (upstream `generateLinuxContainerResources` with `GetContainerOOMScoreAdjust`).

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod};

use r8s_api::qos::{all_containers, amount};
pub use r8s_api::qos::{compute_qos, pod_qos, QosClass};

/// The cgroup v1 cpu.shares floor and the shares of one cpu (upstream `MinShares`, `SharesPerCPU`).
pub const MIN_SHARES: i64 = 2;
pub const MAX_SHARES: i64 = 262_144;
const SHARES_PER_CPU: i64 = 1024;
/// The CFS period (100 ms) and the smallest quota (1 ms).
pub const QUOTA_PERIOD: i64 = 100_000;
const MIN_QUOTA: i64 = 1_000;

const GUARANTEED_OOM_SCORE_ADJ: i64 = -997;
const BEST_EFFORT_OOM_SCORE_ADJ: i64 = 1000;

/// The pod's cgroup, relative to the hierarchies' roots: Guaranteed pods directly under the
/// pods' root, the others under `burstable` or `besteffort` (upstream's cgroupfs names).
pub fn pod_cgroup(root: &str, qos: QosClass, uid: &str) -> String {
    let root = root.trim_end_matches('/');
    match qos {
        QosClass::Guaranteed => format!("{root}/pod{uid}"),
        QosClass::Burstable => format!("{root}/burstable/pod{uid}"),
        QosClass::BestEffort => format!("{root}/besteffort/pod{uid}"),
    }
}

/// cpu.shares for a number of millicores (upstream `MilliCPUToShares`).
pub fn milli_cpu_to_shares(milli: i64) -> i64 {
    if milli == 0 {
        return MIN_SHARES;
    }
    (milli * SHARES_PER_CPU / 1000).clamp(MIN_SHARES, MAX_SHARES)
}

/// The CFS quota for a limit in millicores over `QUOTA_PERIOD`; 0 (no quota) for no limit.
pub fn milli_cpu_to_quota(milli: i64) -> i64 {
    if milli == 0 {
        return 0;
    }
    (milli * QUOTA_PERIOD / 1000).max(MIN_QUOTA)
}

/// What a pod cgroup is limited to; None leaves the kernel's default (unlimited).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodResources {
    pub cpu_shares: i64,
    pub cpu_quota: Option<i64>,
    pub memory_limit: Option<i64>,
}

/// The pod's cpu (millicores) or memory (bytes) requests or limits, as every component counts
/// them (upstream `PodRequests`/`PodLimits`: containers and sidecars, the largest init step,
/// overhead).
fn pod_total(pod: &Pod, limits: bool, name: &str) -> i64 {
    let Some(spec) = &pod.spec else { return 0 };
    let list = if limits {
        r8s_api::resources::pod_limits(spec)
    } else {
        r8s_api::resources::pod_requests(spec)
    };
    let r = r8s_api::resources::Resources::from_list(&list);
    if name == "cpu" {
        r.milli_cpu
    } else {
        r.memory
    }
}

/// The pod cgroup's limits (upstream `ResourceConfigForPod` with CPU limits enforced).
pub fn pod_resources(pod: &Pod) -> PodResources {
    let qos = pod_qos(pod);
    if qos == QosClass::BestEffort {
        return PodResources {
            cpu_shares: MIN_SHARES,
            ..Default::default()
        };
    }
    let every = |name: &str| all_containers(pod).all(|c| amount(c, true, name).is_some());
    let shares = milli_cpu_to_shares(pod_total(pod, false, "cpu"));
    let quota = milli_cpu_to_quota(pod_total(pod, true, "cpu"));
    let memory = pod_total(pod, true, "memory");
    let guaranteed = qos == QosClass::Guaranteed;
    PodResources {
        cpu_shares: shares,
        cpu_quota: (guaranteed || every("cpu")).then_some(quota).filter(|q| *q > 0),
        memory_limit: (guaranteed || every("memory"))
            .then_some(memory)
            .filter(|m| *m > 0),
    }
}

/// How much more likely the kernel's OOM killer is to pick this container's processes
/// (upstream `GetContainerOOMScoreAdjust`): Guaranteed least, BestEffort most, Burstable by
/// the share of the node's memory it requests.
pub fn oom_score_adj(pod: &Pod, c: &Container, memory_capacity: i64) -> i64 {
    match pod_qos(pod) {
        QosClass::Guaranteed => GUARANTEED_OOM_SCORE_ADJ,
        QosClass::BestEffort => BEST_EFFORT_OOM_SCORE_ADJ,
        QosClass::Burstable => {
            let request = amount(c, false, "memory").unwrap_or(0) as i128;
            let cap = memory_capacity.max(1) as i128;
            let adj = (1000 - 1000 * request / cap) as i64;
            if adj < 1000 + GUARANTEED_OOM_SCORE_ADJ {
                1000 + GUARANTEED_OOM_SCORE_ADJ
            } else if adj == BEST_EFFORT_OOM_SCORE_ADJ {
                adj - 1
            } else {
                adj
            }
        }
    }
}

/// A container's CRI resources: cpu shares from its request (its limit when it only has one),
/// the CFS quota from its cpu limit, its memory limit and OOM score adjustment.
pub fn container_resources(pod: &Pod, c: &Container, memory_capacity: i64) -> cri::LinuxContainerResources {
    let cpu_request = amount(c, false, "cpu");
    let cpu_limit = amount(c, true, "cpu").unwrap_or(0);
    let shares = milli_cpu_to_shares(cpu_request.unwrap_or(cpu_limit));
    let quota = milli_cpu_to_quota(cpu_limit);
    cri::LinuxContainerResources {
        cpu_shares: shares,
        cpu_quota: quota,
        cpu_period: if quota > 0 { QUOTA_PERIOD } else { 0 },
        memory_limit_in_bytes: amount(c, true, "memory").unwrap_or(0),
        oom_score_adj: oom_score_adj(pod, c, memory_capacity),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(containers: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "uid": "u1"},
            "spec": {"containers": containers}
        }))
        .unwrap()
    }

    fn res(requests: serde_json::Value, limits: serde_json::Value) -> serde_json::Value {
        json!({"name": "c", "resources": {"requests": requests, "limits": limits}})
    }

    #[test]
    fn classes_as_upstream() {
        assert_eq!(compute_qos(&pod(json!([{"name": "a"}]))), QosClass::BestEffort);
        let g = res(
            json!({"cpu": "100m", "memory": "64Mi"}),
            json!({"cpu": "0.1", "memory": "64Mi"}),
        );
        assert_eq!(compute_qos(&pod(json!([g]))), QosClass::Guaranteed);
        // Limits without requests (before the API server defaults requests to them): Burstable.
        let l = json!({"name": "c", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}});
        assert_eq!(compute_qos(&pod(json!([l.clone()]))), QosClass::Burstable);
        let b = res(json!({"cpu": "100m"}), json!({}));
        assert_eq!(compute_qos(&pod(json!([b.clone()]))), QosClass::Burstable);
        // One container without limits makes the pod Burstable.
        let g2 = res(
            json!({"cpu": "1", "memory": "1Gi"}),
            json!({"cpu": "1", "memory": "1Gi"}),
        );
        assert_eq!(
            compute_qos(&pod(json!([g2.clone(), {"name": "x"}]))),
            QosClass::Burstable
        );
        // Zero quantities are ignored; other resources do not count.
        let z = res(json!({"cpu": "0", "ephemeral-storage": "1Gi"}), json!({}));
        assert_eq!(compute_qos(&pod(json!([z]))), QosClass::BestEffort);
        // The recorded class wins.
        let mut p = pod(json!([{"name": "a"}]));
        p.status = Some(serde_json::from_value(json!({"qosClass": "Burstable"})).unwrap());
        assert_eq!(pod_qos(&p), QosClass::Burstable);
    }

    #[test]
    fn cgroup_paths_per_class() {
        assert_eq!(pod_cgroup("/r/pods/", QosClass::Guaranteed, "u"), "/r/pods/podu");
        assert_eq!(
            pod_cgroup("/r/pods", QosClass::Burstable, "u"),
            "/r/pods/burstable/podu"
        );
        assert_eq!(
            pod_cgroup("/r/pods", QosClass::BestEffort, "u"),
            "/r/pods/besteffort/podu"
        );
    }

    #[test]
    fn shares_and_quota_conversions() {
        assert_eq!(milli_cpu_to_shares(0), 2);
        assert_eq!(milli_cpu_to_shares(1), 2);
        assert_eq!(milli_cpu_to_shares(250), 256);
        assert_eq!(milli_cpu_to_shares(1000), 1024);
        assert_eq!(milli_cpu_to_shares(1_000_000), MAX_SHARES);
        assert_eq!(milli_cpu_to_quota(0), 0);
        assert_eq!(milli_cpu_to_quota(5), 1000);
        assert_eq!(milli_cpu_to_quota(250), 25_000);
        assert_eq!(milli_cpu_to_quota(1500), 150_000);
    }

    #[test]
    fn pod_cgroup_limits() {
        let be = pod(json!([{"name": "a"}]));
        assert_eq!(
            pod_resources(&be),
            PodResources {
                cpu_shares: 2,
                cpu_quota: None,
                memory_limit: None
            }
        );
        let g = res(
            json!({"cpu": "500m", "memory": "64Mi"}),
            json!({"cpu": "500m", "memory": "64Mi"}),
        );
        let g2 = json!({"name": "d", "resources": {"requests": {"cpu": "250m", "memory": "32Mi"}, "limits": {"cpu": "250m", "memory": "32Mi"}}});
        assert_eq!(
            pod_resources(&pod(json!([g, g2]))),
            PodResources {
                cpu_shares: 768,
                cpu_quota: Some(75_000),
                memory_limit: Some(96 << 20)
            }
        );
        // Burstable: a memory limit on every container, but not a cpu limit on every one.
        let b1 = res(json!({"cpu": "100m"}), json!({"memory": "10Mi", "cpu": "1"}));
        let b2 = json!({"name": "d", "resources": {"limits": {"memory": "20Mi"}}});
        assert_eq!(
            pod_resources(&pod(json!([b1, b2]))),
            PodResources {
                cpu_shares: 102,
                cpu_quota: None,
                memory_limit: Some(30 << 20)
            }
        );
        // The largest init container counts when it is more than the app containers' sum.
        let mut p = pod(json!([res(json!({"cpu": "100m"}), json!({"cpu": "100m"}))]));
        p.spec.as_mut().unwrap().init_containers = Some(vec![serde_json::from_value(res(
            json!({"cpu": "2"}),
            json!({"cpu": "2"}),
        ))
        .unwrap()]);
        let r = pod_resources(&p);
        assert_eq!((r.cpu_shares, r.cpu_quota), (2048, Some(200_000)));
    }

    #[test]
    fn container_resources_and_oom_scores() {
        let gib = 1i64 << 30;
        let g = pod(json!([res(
            json!({"cpu": "250m", "memory": "64Mi"}),
            json!({"cpu": "250m", "memory": "64Mi"})
        )]));
        let c = &g.spec.as_ref().unwrap().containers[0];
        let r = container_resources(&g, c, 4 * gib);
        assert_eq!(
            (
                r.cpu_shares,
                r.cpu_quota,
                r.cpu_period,
                r.memory_limit_in_bytes,
                r.oom_score_adj
            ),
            (256, 25_000, 100_000, 64 << 20, -997)
        );
        // A limit alone sets the shares too.
        let l = pod(json!([res(json!({}), json!({"cpu": "2"}))]));
        let r = container_resources(&l, &l.spec.as_ref().unwrap().containers[0], 4 * gib);
        assert_eq!(
            (r.cpu_shares, r.cpu_quota, r.memory_limit_in_bytes),
            (2048, 200_000, 0)
        );
        let be = pod(json!([{"name": "a"}]));
        let r = container_resources(&be, &be.spec.as_ref().unwrap().containers[0], 4 * gib);
        assert_eq!(
            (r.cpu_shares, r.cpu_quota, r.cpu_period, r.oom_score_adj),
            (2, 0, 0, 1000)
        );
        // Burstable: 1000 - 1000 × request / capacity, kept within 3 and 999.
        let b = |mem: &str| pod(json!([res(json!({"memory": mem}), json!({}))]));
        let adj = |p: &Pod| oom_score_adj(p, &p.spec.as_ref().unwrap().containers[0], 4 * gib);
        assert_eq!(adj(&b("1Gi")), 750);
        assert_eq!(adj(&b("4Gi")), 3);
        assert_eq!(adj(&b("1")), 999);
        let cpu_only = pod(json!([res(json!({"cpu": "1"}), json!({}))]));
        assert_eq!(adj(&cpu_only), 999);
    }
}
