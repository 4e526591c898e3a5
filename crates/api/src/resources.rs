//! A pod's resource requests and limits (upstream `component-helpers/resource`'s `PodRequests`
//! and `PodLimits`): the sum of its containers and sidecars (restartable init containers), or the
//! largest init container plus the sidecars started before it if that is more, plus the pod's
//! overhead. Resource quota, the scheduler, the kubelet's admission and its pod cgroups all count
//! a pod with these functions, so they cannot disagree about one.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

use crate::quantity::Quantity;

/// Resource name → quantity, ordered by name.
pub type ResourceList = BTreeMap<String, Quantity>;

/// `a + b`, key by key (upstream `quota.Add`).
pub fn add(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let mut out = a.clone();
    add_into(&mut out, b);
    out
}

fn add_into(list: &mut ResourceList, other: &ResourceList) {
    for (k, v) in other {
        let sum = match list.get(k) {
            Some(q) => q.add(v),
            None => *v,
        };
        list.insert(k.clone(), sum);
    }
}

/// Each of `other`'s quantities where it is larger than `list`'s.
pub fn max_into(list: &mut ResourceList, other: &ResourceList) {
    for (k, v) in other {
        match list.get(k) {
            Some(q) if q >= v => {}
            _ => {
                list.insert(k.clone(), *v);
            }
        }
    }
}

/// The effective total of a pod's containers (upstream `AggregateContainerRequests`/`Limits`):
/// `regular` are the app containers' lists, `init` the init containers' in order with whether
/// each is a sidecar. Sidecars run beside everything after them, so they add to the total and
/// to every later init container; the total is the larger of that and the largest init step.
pub fn effective(
    regular: impl IntoIterator<Item = ResourceList>,
    init: impl IntoIterator<Item = (ResourceList, bool)>,
) -> ResourceList {
    let mut total = ResourceList::new();
    for own in regular {
        add_into(&mut total, &own);
    }
    let mut sidecars = ResourceList::new();
    let mut init_max = ResourceList::new();
    for (own, sidecar) in init {
        if sidecar {
            add_into(&mut total, &own);
            add_into(&mut sidecars, &own);
            max_into(&mut init_max, &sidecars);
        } else {
            max_into(&mut init_max, &add(&own, &sidecars));
        }
    }
    max_into(&mut total, &init_max);
    total
}

/// A typed resource map as a list; values that are not quantities are left out.
pub fn list_of(map: Option<&BTreeMap<String, ApiQuantity>>) -> ResourceList {
    map.into_iter()
        .flatten()
        .filter_map(|(k, q)| Some((k.clone(), Quantity::parse(&q.0).ok()?)))
        .collect()
}

/// An init container that keeps running beside the app containers (`restartPolicy: Always`).
pub fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

fn requests_of(c: &Container) -> ResourceList {
    list_of(c.resources.as_ref().and_then(|r| r.requests.as_ref()))
}

fn limits_of(c: &Container) -> ResourceList {
    list_of(c.resources.as_ref().and_then(|r| r.limits.as_ref()))
}

fn aggregate(spec: &PodSpec, of: impl Fn(&Container) -> ResourceList) -> ResourceList {
    effective(
        spec.containers.iter().map(&of),
        spec.init_containers
            .iter()
            .flatten()
            .map(|c| (of(c), is_sidecar(c))),
    )
}

/// What the pod requests, overhead included (upstream `PodRequests`).
pub fn pod_requests(spec: &PodSpec) -> ResourceList {
    let mut reqs = aggregate(spec, requests_of);
    add_into(&mut reqs, &list_of(spec.overhead.as_ref()));
    reqs
}

/// What the pod requests when every container that leaves cpu or memory unset asks for
/// `defaults` of it (upstream `PodRequests` with `NonMissingContainerRequests`): the scheduler
/// scores with this, so that pods asking for nothing do not all pile onto one node.
pub fn pod_requests_non_missing(spec: &PodSpec, defaults: &ResourceList) -> ResourceList {
    let mut reqs = aggregate(spec, |c| {
        let mut r = requests_of(c);
        for (k, v) in defaults {
            r.entry(k.clone()).or_insert(*v);
        }
        r
    });
    add_into(&mut reqs, &list_of(spec.overhead.as_ref()));
    reqs
}

/// What the pod is limited to, with overhead added to the limits that are set (upstream
/// `PodLimits`).
pub fn pod_limits(spec: &PodSpec) -> ResourceList {
    let mut limits = aggregate(spec, limits_of);
    for (k, v) in list_of(spec.overhead.as_ref()) {
        if let Some(q) = limits.get(&k) {
            let sum = q.add(&v);
            limits.insert(k, sum);
        }
    }
    limits
}

/// The amounts the scheduler and the kubelet compare against a node: cpu in millicores, memory
/// and ephemeral storage in bytes, pods, and the scalar resources (extended resources such as
/// `example.com/foo`, `hugepages-*`) as whole values.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    pub milli_cpu: i64,
    pub memory: i64,
    pub ephemeral: i64,
    pub pods: i64,
    /// Upstream's `ScalarResources`, by name; none at 0.
    pub scalar: BTreeMap<String, i64>,
}

/// A resource the scheduler counts beside cpu, memory, ephemeral storage and pods (upstream's
/// `IsScalarResourceName`): an extended resource (a domain-prefixed name outside
/// `kubernetes.io`, not a quota's `requests.`), huge pages, a prefixed native resource, or
/// attachable volumes.
pub fn is_scalar_resource(name: &str) -> bool {
    let extended = name.contains('/') && !name.contains("kubernetes.io/") && !name.starts_with("requests.");
    extended
        || name.starts_with("hugepages-")
        || name.contains("kubernetes.io/")
        || name.starts_with("attachable-volumes-")
}

fn clamp(v: i128) -> i64 {
    v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

impl Resources {
    /// cpu, memory, ephemeral-storage and pods of a list (absent: 0).
    pub fn from_list(list: &ResourceList) -> Self {
        let get = |name: &str| list.get(name);
        Self {
            milli_cpu: get("cpu").map(|q| clamp(q.milli_value())).unwrap_or(0),
            memory: get("memory").map(|q| clamp(q.value())).unwrap_or(0),
            ephemeral: get("ephemeral-storage").map(|q| clamp(q.value())).unwrap_or(0),
            pods: get("pods").map(|q| clamp(q.value())).unwrap_or(0),
            scalar: list
                .iter()
                .filter(|(name, _)| is_scalar_resource(name))
                .map(|(name, q)| (name.clone(), clamp(q.value())))
                .filter(|(_, v)| *v != 0)
                .collect(),
        }
    }

    /// The scalar resource `name` (0 when absent).
    pub fn scalar(&self, name: &str) -> i64 {
        self.scalar.get(name).copied().unwrap_or(0)
    }

    pub fn add(&mut self, o: &Resources) {
        self.milli_cpu += o.milli_cpu;
        self.memory += o.memory;
        self.ephemeral += o.ephemeral;
        self.pods += o.pods;
        for (name, v) in &o.scalar {
            *self.scalar.entry(name.clone()).or_insert(0) += v;
        }
        self.scalar.retain(|_, v| *v != 0);
    }

    pub fn sub(&mut self, o: &Resources) {
        self.milli_cpu -= o.milli_cpu;
        self.memory -= o.memory;
        self.ephemeral -= o.ephemeral;
        self.pods -= o.pods;
        for (name, v) in &o.scalar {
            *self.scalar.entry(name.clone()).or_insert(0) -= v;
        }
        self.scalar.retain(|_, v| *v != 0);
    }
}

/// A host port a pod holds: (protocol, host IP, port); `0.0.0.0` when no host IP is given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPort {
    pub protocol: String,
    pub ip: String,
    pub port: i32,
}

impl HostPort {
    /// Whether two host ports cannot both be bound: same protocol and port, and the same IP or
    /// either on every address (upstream `HostPortInfo` conflict rules).
    pub fn conflicts(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || self.ip == "0.0.0.0" || other.ip == "0.0.0.0")
    }
}

/// The host ports of the pod's containers (init containers hold none).
pub fn host_ports(spec: &PodSpec) -> Vec<HostPort> {
    spec.containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p.host_port.filter(|p| *p > 0)?;
            Some(HostPort {
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                ip: p
                    .host_ip
                    .clone()
                    .filter(|ip| !ip.is_empty())
                    .unwrap_or_else(|| "0.0.0.0".into()),
                port,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> PodSpec {
        serde_json::from_value(v).unwrap()
    }

    fn res(cpu: &str, mem: &str) -> serde_json::Value {
        json!({"requests": {"cpu": cpu, "memory": mem}, "limits": {"cpu": cpu, "memory": mem}})
    }

    #[test]
    fn containers_sum_init_containers_take_the_maximum() {
        let s = spec(json!({
            "containers": [{"name": "a", "resources": res("100m", "64Mi")}, {"name": "b", "resources": res("200m", "64Mi")}],
            "initContainers": [{"name": "i", "resources": res("500m", "32Mi")}],
            "overhead": {"cpu": "10m"}
        }));
        let r = Resources::from_list(&pod_requests(&s));
        assert_eq!((r.milli_cpu, r.memory), (510, 128 * 1024 * 1024));
        // Overhead only adds to limits that are set.
        let l = pod_limits(&s);
        assert_eq!(l["cpu"].milli_value(), 510);
    }

    #[test]
    fn sidecars_count_beside_everything_after_them() {
        // A sidecar (restartPolicy Always) of 100m, then an init container of 300m, then app
        // containers of 250m: the init step needs 100m + 300m, the run 100m + 250m.
        let s = spec(json!({
            "initContainers": [
                {"name": "side", "restartPolicy": "Always", "resources": res("100m", "10Mi")},
                {"name": "init", "resources": res("300m", "10Mi")}
            ],
            "containers": [{"name": "app", "resources": res("250m", "100Mi")}]
        }));
        let r = Resources::from_list(&pod_requests(&s));
        assert_eq!(r.milli_cpu, 400);
        assert_eq!(r.memory, 110 * 1024 * 1024);
        let l = Resources::from_list(&pod_limits(&s));
        assert_eq!(l.milli_cpu, 400);
    }

    #[test]
    fn non_missing_defaults_fill_unset_requests_only() {
        let s = spec(json!({"containers": [
            {"name": "a"},
            {"name": "b", "resources": {"requests": {"cpu": "0"}}}
        ]}));
        let defaults = ResourceList::from([
            ("cpu".to_string(), Quantity::from_milli(100)),
            ("memory".to_string(), Quantity::from_units(200)),
        ]);
        let r = Resources::from_list(&pod_requests_non_missing(&s, &defaults));
        assert_eq!((r.milli_cpu, r.memory), (100, 400));
    }

    #[test]
    fn host_port_conflicts() {
        let s = spec(json!({"containers": [{"name": "a", "ports": [
            {"containerPort": 80, "hostPort": 8080},
            {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "127.0.0.1"},
            {"containerPort": 9}
        ]}]}));
        let ports = host_ports(&s);
        assert_eq!(ports.len(), 2);
        let any = |proto: &str, ip: &str, port| HostPort {
            protocol: proto.into(),
            ip: ip.into(),
            port,
        };
        assert!(ports[0].conflicts(&any("TCP", "10.0.0.1", 8080)));
        assert!(!ports[0].conflicts(&any("UDP", "0.0.0.0", 8080)));
        assert!(!ports[1].conflicts(&any("UDP", "127.0.0.2", 53)));
        assert!(ports[1].conflicts(&any("UDP", "0.0.0.0", 53)));
    }
}
