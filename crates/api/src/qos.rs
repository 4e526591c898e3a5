//! A pod's quality-of-service class (upstream `component-helpers`' `ComputePodQOS` and
//! `GetPodQOS`): BestEffort when no container asks for or limits cpu or memory; Guaranteed when
//! every container limits both and the summed requests equal the summed limits; Burstable
//! otherwise. The API server records it in `status.qosClass`; the kubelet places pod cgroups
//! and OOM scores by it.

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::quantity::{parse_milli, parse_value};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl QosClass {
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }
}

/// Both init and app containers (a pod's class looks at all of them).
pub fn all_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten().chain(s.containers.iter()))
}

/// A container's request or limit of `name` (cpu in millicores, anything else in units); `None`
/// when absent or zero.
pub fn amount(c: &Container, limits: bool, name: &str) -> Option<i64> {
    let r = c.resources.as_ref()?;
    let map = if limits {
        r.limits.as_ref()
    } else {
        r.requests.as_ref()
    }?;
    let q = &map.get(name)?.0;
    let v = if name == "cpu" {
        parse_milli(q).ok()?
    } else {
        parse_value(q).ok()?
    };
    (v != 0).then(|| v.clamp(0, i64::MAX as i128) as i64)
}

/// The class the API server recorded, or else computed.
pub fn pod_qos(pod: &Pod) -> QosClass {
    match pod.status.as_ref().and_then(|s| s.qos_class.as_deref()) {
        Some("Guaranteed") => return QosClass::Guaranteed,
        Some("Burstable") => return QosClass::Burstable,
        Some("BestEffort") => return QosClass::BestEffort,
        _ => {}
    }
    compute_qos(pod)
}

/// The class from the containers' requests and limits (upstream `ComputePodQOS`).
pub fn compute_qos(pod: &Pod) -> QosClass {
    let mut any = false;
    let mut guaranteed = true;
    let (mut req, mut lim) = ([0i64; 2], [0i64; 2]);
    for c in all_containers(pod) {
        for (i, name) in ["cpu", "memory"].into_iter().enumerate() {
            let r = amount(c, false, name);
            let l = amount(c, true, name);
            any |= r.is_some() || l.is_some();
            req[i] += r.unwrap_or(0);
            match l {
                Some(l) => lim[i] += l,
                None => guaranteed = false,
            }
        }
    }
    if !any {
        QosClass::BestEffort
    } else if guaranteed && req == lim {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    }
}
