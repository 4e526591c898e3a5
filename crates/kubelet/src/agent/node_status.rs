//! The node's registration, status and Lease (upstream `kubelet_node_status.go` and the node
//! lease controller): capacity from the machine, the conditions, the daemon endpoint.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_cri::v1 as cri;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    ContainerImage, DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeStatus,
    NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::api::{Api, GetParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{now, Agent};
use crate::Error;

fn read_value(path: &str, key: &str) -> Option<u64> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .find(|l| l.starts_with(key))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The machine's cpus and memory (KiB): the node's capacity and allocatable.
pub(super) fn machine_size() -> (usize, u64) {
    let cpus = std::fs::read_to_string("/proc/cpuinfo")
        .map(|t| t.lines().filter(|l| l.starts_with("processor")).count())
        .unwrap_or(1)
        .max(1);
    (cpus, read_value("/proc/meminfo", "MemTotal:").unwrap_or(0))
}

/// The size of the filesystem holding `dir` in bytes (the node's ephemeral-storage, as
/// upstream's kubelet reports its root filesystem).
fn filesystem_size(dir: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a valid C string and `st` a writable statvfs for the call to fill.
    let rc = unsafe { libc::statvfs(path.as_ptr(), &mut st) };
    (rc == 0).then(|| st.f_blocks as u64 * st.f_frsize as u64)
}

fn os_image() -> String {
    std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("PRETTY_NAME="))
                .map(|l| l.trim_start_matches("PRETTY_NAME=").trim_matches('"').to_string())
        })
        .unwrap_or_else(|| "Linux".into())
}

/// `status.volumesInUse` and `status.volumesAttached` of the node's mounted volumes (unique
/// name, device): what the kubelet attached itself (r8s has no attach/detach controller, as
/// upstream's kubelet with `--enable-controller-attach-detach=false`). Null when there are
/// none, so that the merge patch removes the lists (upstream omits them when empty).
fn volume_lists(volumes: &[(String, String)]) -> (serde_json::Value, serde_json::Value) {
    if volumes.is_empty() {
        return (serde_json::Value::Null, serde_json::Value::Null);
    }
    let in_use: Vec<&str> = volumes.iter().map(|(n, _)| n.as_str()).collect();
    let attached: Vec<serde_json::Value> = volumes
        .iter()
        .filter(|(_, device)| !device.is_empty())
        .map(|(name, device)| json!({"name": name, "devicePath": device}))
        .collect();
    let attached = if attached.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::Value::Array(attached)
    };
    (json!(in_use), attached)
}

/// Upstream's `nodeStatusMaxImages` and `MaxNamesPerImageInNodeStatus`.
const MAX_IMAGES: usize = 50;
const MAX_NAMES_PER_IMAGE: usize = 5;

/// `status.images` from the runtime's list: the largest first (upstream's order), at most
/// [`MAX_IMAGES`], each named by its digests then its tags, at most [`MAX_NAMES_PER_IMAGE`];
/// images with no name at all (a layer left by a removed tag) are not listed.
fn node_status_images(mut listed: Vec<cri::Image>) -> Vec<ContainerImage> {
    listed.sort_by_key(|i| std::cmp::Reverse(i.size));
    listed
        .into_iter()
        .filter_map(|img| {
            let names: Vec<String> = img
                .repo_digests
                .into_iter()
                .chain(img.repo_tags)
                .take(MAX_NAMES_PER_IMAGE)
                .collect();
            (!names.is_empty()).then_some(ContainerImage {
                names: Some(names),
                size_bytes: Some(img.size as i64),
            })
        })
        .take(MAX_IMAGES)
        .collect()
}

fn condition(type_: &str, status: &str, reason: &str, message: &str) -> NodeCondition {
    NodeCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(now()),
        last_transition_time: Some(now()),
    }
}

/// A condition's `lastTransitionTime` says when its status last changed: each of `new` whose
/// status is that of the same type in `current` (the Node as the API server has it) keeps
/// that one's (upstream's setters compare with the Node they read, so a kubelet restart or a
/// routine report leaves it alone).
fn keep_transition_times(new: &mut [NodeCondition], current: &[NodeCondition]) {
    for c in new {
        if let Some(was) = current
            .iter()
            .find(|o| o.type_ == c.type_ && o.status == c.status)
        {
            if was.last_transition_time.is_some() {
                c.last_transition_time = was.last_transition_time.clone();
            }
        }
    }
}

impl Agent {
    pub(super) fn node_api(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    pub(super) fn node_status(&self, network_ready: bool) -> NodeStatus {
        // A hollow node reports the capacity it was given.
        let (cpus, mem_kib, pods) = match &self.opts.hollow {
            Some(h) => (h.cpus as usize, h.memory_bytes / 1024, h.pods),
            None => {
                let (cpus, mem_kib) = machine_size();
                (cpus, mem_kib, 110)
            }
        };
        let capacity: BTreeMap<String, Quantity> = [
            ("cpu".to_string(), Quantity(cpus.to_string())),
            ("memory".to_string(), Quantity(format!("{mem_kib}Ki"))),
            ("pods".to_string(), Quantity(pods.to_string())),
        ]
        .into();
        let mut capacity = capacity;
        if let Some(bytes) = filesystem_size(&self.opts.dir).filter(|b| *b > 0) {
            capacity.insert(
                "ephemeral-storage".into(),
                Quantity(format!("{}Ki", bytes / 1024)),
            );
        }
        let ready = if network_ready {
            condition("Ready", "True", "KubeletReady", "kubelet is posting ready status")
        } else {
            condition(
                "Ready",
                "False",
                "KubeletNotReady",
                "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized",
            )
        };
        NodeStatus {
            capacity: Some(capacity.clone()),
            allocatable: Some(capacity),
            addresses: Some(
                [
                    Some(NodeAddress {
                        type_: "InternalIP".into(),
                        address: self.opts.node_ip.clone(),
                    }),
                    self.opts.secondary_node_ip.clone().map(|address| NodeAddress {
                        type_: "InternalIP".into(),
                        address,
                    }),
                    self.opts.node_external_ip.clone().map(|address| NodeAddress {
                        type_: "ExternalIP".into(),
                        address,
                    }),
                    Some(NodeAddress {
                        type_: "Hostname".into(),
                        address: self.opts.node_name.clone(),
                    }),
                ]
                .into_iter()
                .flatten()
                .collect(),
            ),
            conditions: Some(vec![
                condition(
                    "MemoryPressure",
                    "False",
                    "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available",
                ),
                condition(
                    "DiskPressure",
                    "False",
                    "KubeletHasNoDiskPressure",
                    "kubelet has no disk pressure",
                ),
                condition(
                    "PIDPressure",
                    "False",
                    "KubeletHasSufficientPID",
                    "kubelet has sufficient PID available",
                ),
                ready,
            ]),
            daemon_endpoints: Some(NodeDaemonEndpoints {
                kubelet_endpoint: Some(DaemonEndpoint {
                    port: self.kubelet_port as i32,
                }),
            }),
            node_info: Some(NodeSystemInfo {
                architecture: "amd64".into(),
                boot_id: std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                    .unwrap_or_default()
                    .trim()
                    .into(),
                container_runtime_version: self.runtime_version.clone(),
                kernel_version: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                    .unwrap_or_default()
                    .trim()
                    .into(),
                kube_proxy_version: String::new(),
                kubelet_version: "v1.33.0".into(),
                machine_id: std::fs::read_to_string("/etc/machine-id")
                    .unwrap_or_default()
                    .trim()
                    .into(),
                operating_system: "linux".into(),
                os_image: os_image(),
                system_uuid: String::new(),
                swap: None,
            }),
            ..Default::default()
        }
    }

    /// Create the Node, or take over the existing one.
    pub(super) async fn register(&self) -> Result<(), Error> {
        let name = &self.opts.node_name;
        let node = Node {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(
                    [
                        ("kubernetes.io/hostname".to_string(), name.clone()),
                        ("kubernetes.io/os".to_string(), "linux".to_string()),
                        ("kubernetes.io/arch".to_string(), "amd64".to_string()),
                        ("beta.kubernetes.io/os".to_string(), "linux".to_string()),
                        ("beta.kubernetes.io/arch".to_string(), "amd64".to_string()),
                    ]
                    .into(),
                ),
                ..Default::default()
            },
            spec: None,
            status: Some(self.node_status(false)),
        };
        match self.node_api().create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(Error::Other(format!("registering node {name}: {e}"))),
        }
        // Where this node keeps the volumes r8s's local provisioner makes for it.
        let dir = std::path::absolute(self.opts.dir.join("storage"))
            .unwrap_or_else(|_| self.opts.dir.join("storage"));
        let patch = serde_json::json!({"metadata": {"annotations": {
            r8s_api::local_path::DIR_ANNOTATION: dir.to_string_lossy(),
        }}});
        self.node_api()
            .patch(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
            .map_err(|e| Error::Other(format!("annotating node {name}: {e}")))?;
        Ok(())
    }

    /// The images the runtime holds, as upstream's kubelet lists them in `status.images`: the
    /// largest first, at most 50, each named by its digests and then its tags (at most 5
    /// names). Schedulers (ImageLocality) and tools read it to know what a node has.
    async fn node_images(&self) -> Option<Vec<ContainerImage>> {
        let listed = self
            .runtime
            .list_images()
            .await
            .map_err(|e| tracing::debug!(error = %e, "agent: listing images for the node status"))
            .ok()?;
        Some(node_status_images(listed))
    }

    pub(super) async fn update_node_status(&self, network_ready: bool) -> Result<(), Error> {
        self.update_node_status_with(network_ready, &self.volumes.local_volumes_in_use())
            .await
    }

    /// The status with `volumes` (from [`VolumeManager::local_volumes_in_use`]) as the volumes
    /// in use and attached.
    ///
    /// [`VolumeManager::local_volumes_in_use`]: crate::volumes::VolumeManager::local_volumes_in_use
    async fn update_node_status_with(
        &self,
        network_ready: bool,
        volumes: &[(String, String)],
    ) -> Result<(), Error> {
        let mut status = self.node_status(network_ready);
        // The Node as the server has it (its cache will do), for the conditions' transition
        // times; without it (a read that failed), this report's are taken.
        let current = self
            .node_api()
            .get_with(&self.opts.node_name, &GetParams::any())
            .await
            .map_err(|e| tracing::debug!(error = %e, "agent: reading the Node for its status"))
            .ok()
            .and_then(|n| n.status?.conditions);
        if let (Some(new), Some(current)) = (status.conditions.as_mut(), current) {
            keep_transition_times(new, &current);
        }
        status.images = self.node_images().await;
        let mut patch = json!({ "status": status });
        let (in_use, attached) = volume_lists(volumes);
        patch["status"]["volumesInUse"] = in_use;
        patch["status"]["volumesAttached"] = attached;
        self.node_api()
            .patch_status(
                &self.opts.node_name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(|e| Error::Other(format!("node status: {e}")))?;
        Ok(())
    }

    /// The node's podCIDRs (one per family, primary first) once node IPAM has given them.
    pub(super) async fn wait_pod_cidrs(&self, stop: &CancellationToken) -> Option<Vec<String>> {
        for _ in 0..300 {
            if let Ok(n) = self.node_api().get(&self.opts.node_name).await {
                let spec = n.spec.unwrap_or_default();
                match (spec.pod_cidrs.filter(|c| !c.is_empty()), spec.pod_cidr) {
                    (Some(cidrs), _) => return Some(cidrs),
                    (None, Some(c)) => return Some(vec![c]),
                    (None, None) => {}
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return None,
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
        None
    }

    /// Renew `kube-node-lease/<node>` every 10 s (40 s duration), owned by the Node; a
    /// renewal that fails is tried again sooner, after 200 ms doubling to 7 s (upstream's
    /// lease controller).
    pub(super) async fn lease_loop(self: Arc<Self>, stop: CancellationToken) {
        let api: Api<Lease> = Api::namespaced(self.client.clone(), "kube-node-lease");
        let name = self.opts.node_name.clone();
        let mut last_report = tokio::time::Instant::now();
        let mut failures = 0u32;
        let mut reported_volumes = self.volumes.local_volumes_in_use();
        // The Lease as the last renewal left it: the next renewal updates it without reading
        // it first (upstream's lease controller keeps `latestLease`); after a failure it is
        // read again.
        let mut latest: Option<Lease> = None;
        loop {
            let spec = LeaseSpec {
                holder_identity: Some(name.clone()),
                lease_duration_seconds: Some(40),
                renew_time: Some(MicroTime(jiff::Timestamp::now())),
                ..Default::default()
            };
            let current = match latest.take() {
                Some(lease) => Ok(Some(lease)),
                None => api.get_opt(&name).await,
            };
            let result = match current {
                Ok(Some(mut lease)) => {
                    lease.spec = Some(spec);
                    api.replace(&name, &PostParams::default(), &lease).await
                }
                Ok(None) => {
                    let owner = self.node_api().get(&name).await.ok().map(|n| OwnerReference {
                        api_version: "v1".into(),
                        kind: "Node".into(),
                        name: name.clone(),
                        uid: n.uid().unwrap_or_default(),
                        ..Default::default()
                    });
                    let lease = Lease {
                        metadata: ObjectMeta {
                            name: Some(name.clone()),
                            namespace: Some("kube-node-lease".into()),
                            owner_references: owner.map(|o| vec![o]),
                            ..Default::default()
                        },
                        spec: Some(spec),
                    };
                    api.create(&PostParams::default(), &lease).await
                }
                Err(e) => Err(e),
            };
            let result = result.map(|lease| latest = Some(lease));
            match result {
                Ok(()) => failures = 0,
                Err(e) => {
                    failures += 1;
                    tracing::debug!(error = %e, failures, "agent: lease renewal failed");
                }
            }
            // Status heartbeat every minute (upstream: on change and at least every 5 minutes),
            // at once when the volumes in use changed, and at once when the API server's Node
            // is not Ready: the node lifecycle controller marked it Unknown while its Lease
            // went unrenewed (a partition, a server away), and only the kubelet's report makes
            // it Ready again (upstream's tryUpdateNodeStatus compares with the Node it reads).
            if failures == 0 {
                let volumes = self.volumes.local_volumes_in_use();
                let marked = || async {
                    let node = self.node_api().get_with(&name, &GetParams::any()).await.ok()?;
                    // The TTL controller's word on how long configMaps and secrets serve.
                    self.volumes.set_object_ttl(
                        node.metadata
                            .annotations
                            .as_ref()
                            .and_then(|a| a.get(crate::volumes::TTL_ANNOTATION))
                            .map(String::as_str),
                    );
                    let conditions = node.status?.conditions?;
                    let ready = conditions.iter().find(|c| c.type_ == "Ready")?;
                    Some(ready.status != "True")
                };
                let due = last_report.elapsed() >= Duration::from_secs(60) || volumes != reported_volumes;
                if (due || marked().await == Some(true))
                    && self.update_node_status_with(true, &volumes).await.is_ok()
                {
                    reported_volumes = volumes;
                    last_report = tokio::time::Instant::now();
                }
            }
            let wait = match failures {
                0 => Duration::from_secs(10),
                n => (Duration::from_millis(200) * 2u32.pow(n.min(6) - 1)).min(Duration::from_secs(7)),
            };
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(tags: &[&str], digests: &[&str], size: u64) -> cri::Image {
        cri::Image {
            repo_tags: tags.iter().map(|s| s.to_string()).collect(),
            repo_digests: digests.iter().map(|s| s.to_string()).collect(),
            size,
            ..Default::default()
        }
    }

    #[test]
    fn a_condition_keeps_its_transition_time_until_its_status_changes() {
        let at = |s: &str| {
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                s.parse().unwrap(),
            ))
        };
        let current = vec![
            NodeCondition {
                last_transition_time: at("2026-01-01T00:00:00Z"),
                ..condition("Ready", "True", "KubeletReady", "")
            },
            NodeCondition {
                last_transition_time: at("2026-01-02T00:00:00Z"),
                ..condition("MemoryPressure", "True", "KubeletHasInsufficientMemory", "")
            },
        ];
        let mut new = vec![
            condition("Ready", "True", "KubeletReady", ""),
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory", ""),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", ""),
        ];
        let fresh = new[1].last_transition_time.clone();
        let beat = new[0].last_heartbeat_time.clone();
        keep_transition_times(&mut new, &current);
        assert_eq!(new[0].last_transition_time, at("2026-01-01T00:00:00Z"));
        assert_eq!(new[1].last_transition_time, fresh);
        assert!(new[2].last_transition_time.is_some());
        // The heartbeat is this report's in any case.
        assert_eq!(new[0].last_heartbeat_time, beat);
    }

    #[test]
    fn mounted_volumes_are_in_use_and_loop_devices_attached() {
        let (in_use, attached) = volume_lists(&[]);
        assert!(in_use.is_null() && attached.is_null());
        let (in_use, attached) = volume_lists(&[
            ("r8s.io/local-path/pvc-a".into(), "/dev/loop3".into()),
            ("r8s.io/local-path/pvc-b".into(), String::new()),
        ]);
        assert_eq!(
            in_use,
            json!(["r8s.io/local-path/pvc-a", "r8s.io/local-path/pvc-b"])
        );
        assert_eq!(
            attached,
            json!([{"name": "r8s.io/local-path/pvc-a", "devicePath": "/dev/loop3"}])
        );
        let (_, attached) = volume_lists(&[("r8s.io/local-path/pvc-b".into(), String::new())]);
        assert!(attached.is_null());
    }

    #[test]
    fn status_images_are_the_largest_first_digests_then_tags() {
        let listed = vec![
            image(
                &["docker.io/library/busybox:latest"],
                &["docker.io/library/busybox@sha256:aa"],
                10,
            ),
            image(&[], &[], 99),
            image(
                &["registry.k8s.io/e2e-test-images/agnhost:2.53"],
                &["registry.k8s.io/e2e-test-images/agnhost@sha256:bb"],
                500,
            ),
        ];
        let got = node_status_images(listed);
        assert_eq!(got.len(), 2, "the nameless image is left out: {got:?}");
        assert_eq!(
            got[0].names.as_deref().unwrap(),
            [
                "registry.k8s.io/e2e-test-images/agnhost@sha256:bb",
                "registry.k8s.io/e2e-test-images/agnhost:2.53"
            ]
        );
        assert_eq!(got[0].size_bytes, Some(500));
        assert_eq!(got[1].size_bytes, Some(10));
    }

    #[test]
    fn status_images_are_capped_in_number_and_names() {
        let tags: Vec<String> = (0..8).map(|i| format!("x:{i}")).collect();
        let tags: Vec<&str> = tags.iter().map(|s| s.as_str()).collect();
        let listed = (0..60).map(|i| image(&tags, &[], i)).collect();
        let got = node_status_images(listed);
        assert_eq!(got.len(), MAX_IMAGES);
        assert_eq!(got[0].size_bytes, Some(59));
        assert!(got
            .iter()
            .all(|i| i.names.as_ref().unwrap().len() == MAX_NAMES_PER_IMAGE));
    }
}
