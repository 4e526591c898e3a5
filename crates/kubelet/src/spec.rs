//! From a Pod to CRI requests (upstream `kuberuntime_sandbox.go` and `kuberuntime_container.go`):
//! the sandbox's metadata, hostname, log directory, DNS, host ports, namespaces and labels; each
//! container's image, command, arguments, environment, log path and labels. The labels are
//! upstream's, so the kubelet can find its pods again in the runtime after a restart.

use std::collections::{BTreeMap, HashMap};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod};

pub const POD_NAME: &str = "io.kubernetes.pod.name";
pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub const POD_UID: &str = "io.kubernetes.pod.uid";
pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";
pub const RESTART_COUNT: &str = "io.kubernetes.container.restartCount";
pub const TERMINATION_GRACE: &str = "io.kubernetes.pod.terminationGracePeriod";

/// What the node knows that the pod spec does not.
#[derive(Clone, Debug, Default)]
pub struct NodeContext {
    pub node_name: String,
    pub host_ip: String,
    /// The cluster DNS service address and domain (`--cluster-dns`, `--cluster-domain`).
    pub cluster_dns: Vec<String>,
    pub cluster_domain: String,
    /// The host's own resolver configuration (servers, search domains), for dnsPolicy Default.
    pub host_dns: cri::DnsConfig,
    /// Where pod logs go: `<log_root>/<namespace>_<name>_<uid>/`.
    pub log_root: String,
    pub cgroup_parent: String,
}

fn meta(pod: &Pod) -> (String, String, String) {
    (
        pod.metadata.name.clone().unwrap_or_default(),
        pod.metadata.namespace.clone().unwrap_or_default(),
        pod.metadata.uid.clone().unwrap_or_default(),
    )
}

/// `/var/log/pods/<namespace>_<name>_<uid>`.
pub fn log_directory(pod: &Pod, node: &NodeContext) -> String {
    let (name, ns, uid) = meta(pod);
    format!("{}/{ns}_{name}_{uid}", node.log_root.trim_end_matches('/'))
}

/// The pod's resolver configuration for its dnsPolicy (upstream `GetPodDNS`).
pub fn dns_config(pod: &Pod, node: &NodeContext) -> cri::DnsConfig {
    let spec = pod.spec.clone().unwrap_or_default();
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let host_network = spec.host_network.unwrap_or(false);
    let policy = spec.dns_policy.as_deref().unwrap_or("ClusterFirst");
    let cluster = || {
        let d = &node.cluster_domain;
        cri::DnsConfig {
            servers: node.cluster_dns.clone(),
            searches: vec![format!("{ns}.svc.{d}"), format!("svc.{d}"), d.clone()],
            options: vec!["ndots:5".into()],
        }
    };
    let mut cfg = match policy {
        "None" => cri::DnsConfig::default(),
        "Default" => node.host_dns.clone(),
        "ClusterFirstWithHostNet" => cluster(),
        // ClusterFirst: a host-network pod uses the host's resolver, as upstream.
        _ if host_network || node.cluster_dns.is_empty() => node.host_dns.clone(),
        _ => cluster(),
    };
    if let Some(extra) = &spec.dns_config {
        cfg.servers.extend(extra.nameservers.clone().unwrap_or_default());
        cfg.searches.extend(extra.searches.clone().unwrap_or_default());
        for o in extra.options.clone().unwrap_or_default() {
            let Some(name) = o.name else { continue };
            cfg.options.retain(|x| x.split(':').next() != Some(name.as_str()));
            cfg.options.push(match o.value {
                Some(v) => format!("{name}:{v}"),
                None => name,
            });
        }
    }
    cfg
}

fn protocol(p: Option<&str>) -> i32 {
    match p {
        Some("UDP") => cri::Protocol::Udp as i32,
        Some("SCTP") => cri::Protocol::Sctp as i32,
        _ => cri::Protocol::Tcp as i32,
    }
}

/// The sandbox of `pod` (upstream `generatePodSandboxConfig`).
pub fn sandbox_config(pod: &Pod, attempt: u32, node: &NodeContext) -> cri::PodSandboxConfig {
    let (name, ns, uid) = meta(pod);
    let spec = pod.spec.clone().unwrap_or_default();
    let mut labels: HashMap<String, String> = pod
        .metadata
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    labels.insert(POD_NAME.into(), name.clone());
    labels.insert(POD_NAMESPACE.into(), ns.clone());
    labels.insert(POD_UID.into(), uid.clone());
    let annotations: HashMap<String, String> = pod
        .metadata
        .annotations
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    let hostname = if spec.host_network.unwrap_or(false) {
        String::new()
    } else {
        let h = spec.hostname.clone().unwrap_or_else(|| name.clone());
        h.chars()
            .take(63)
            .collect::<String>()
            .trim_end_matches(['-', '.'])
            .to_string()
    };
    let port_mappings = spec
        .containers
        .iter()
        .flat_map(|c| c.ports.clone().unwrap_or_default())
        .filter(|p| p.host_port.unwrap_or(0) > 0)
        .map(|p| cri::PortMapping {
            protocol: protocol(p.protocol.as_deref()),
            container_port: p.container_port,
            host_port: p.host_port.unwrap_or(0),
            host_ip: p.host_ip.clone().unwrap_or_default(),
        })
        .collect();
    let mode = |host: Option<bool>, pod_wide: bool| {
        if host.unwrap_or(false) {
            cri::NamespaceMode::Node as i32
        } else if pod_wide {
            cri::NamespaceMode::Pod as i32
        } else {
            cri::NamespaceMode::Container as i32
        }
    };
    let sc = spec.security_context.clone().unwrap_or_default();
    let privileged = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .any(|c| {
            c.security_context
                .as_ref()
                .and_then(|s| s.privileged)
                .unwrap_or(false)
        });
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name,
            uid,
            namespace: ns,
            attempt,
        }),
        hostname,
        log_directory: log_directory(pod, node),
        dns_config: Some(dns_config(pod, node)),
        port_mappings,
        labels,
        annotations,
        linux: Some(cri::LinuxPodSandboxConfig {
            cgroup_parent: node.cgroup_parent.clone(),
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(cri::NamespaceOption {
                    network: mode(spec.host_network, true),
                    pid: mode(spec.host_pid, spec.share_process_namespace.unwrap_or(false)),
                    ipc: mode(spec.host_ipc, true),
                    ..Default::default()
                }),
                run_as_user: sc.run_as_user.map(|v| cri::Int64Value { value: v }),
                run_as_group: sc.run_as_group.map(|v| cri::Int64Value { value: v }),
                supplemental_groups: sc.supplemental_groups.clone().unwrap_or_default(),
                privileged,
                ..Default::default()
            }),
            sysctls: sc
                .sysctls
                .clone()
                .unwrap_or_default()
                .into_iter()
                .map(|s| (s.name, s.value))
                .collect(),
            ..Default::default()
        }),
        windows: None,
    }
}

/// The value of a downward-API field reference (`valueFrom.fieldRef`).
fn field_value(pod: &Pod, path: &str, node: &NodeContext) -> Option<String> {
    let m = &pod.metadata;
    let status = pod.status.as_ref();
    Some(match path {
        "metadata.name" => m.name.clone()?,
        "metadata.namespace" => m.namespace.clone()?,
        "metadata.uid" => m.uid.clone()?,
        "spec.nodeName" => node.node_name.clone(),
        "spec.serviceAccountName" => pod
            .spec
            .as_ref()?
            .service_account_name
            .clone()
            .unwrap_or_default(),
        "status.hostIP" => node.host_ip.clone(),
        "status.podIP" => status?.pod_ip.clone().unwrap_or_default(),
        p if p.starts_with("metadata.labels['") => {
            let key = p.trim_start_matches("metadata.labels['").trim_end_matches("']");
            m.labels.as_ref()?.get(key)?.clone()
        }
        p if p.starts_with("metadata.annotations['") => {
            let key = p
                .trim_start_matches("metadata.annotations['")
                .trim_end_matches("']");
            m.annotations.as_ref()?.get(key)?.clone()
        }
        _ => return None,
    })
}

/// `$(VAR)` references expanded from the variables defined so far (`$$` escapes), as upstream.
pub fn expand(s: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(body) = after.strip_prefix('(') {
            match body.find(')') {
                Some(end) => {
                    let name = &body[..end];
                    match vars.get(name) {
                        Some(v) => out.push_str(v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &body[end + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = body;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// One container of the pod (upstream `generateContainerConfig`), for its `restart_count`-th
/// start.
pub fn container_config(
    pod: &Pod,
    c: &Container,
    restart_count: u32,
    node: &NodeContext,
) -> cri::ContainerConfig {
    let (name, ns, uid) = meta(pod);
    let mut vars = BTreeMap::new();
    let mut envs = Vec::new();
    for e in c.env.iter().flatten() {
        let value = match (&e.value, &e.value_from) {
            (Some(v), _) => expand(v, &vars),
            (None, Some(from)) => from
                .field_ref
                .as_ref()
                .and_then(|f| field_value(pod, &f.field_path, node))
                .unwrap_or_default(),
            _ => String::new(),
        };
        vars.insert(e.name.clone(), value.clone());
        envs.push(cri::KeyValue {
            key: e.name.clone(),
            value,
        });
    }
    let labels = HashMap::from([
        (CONTAINER_NAME.to_string(), c.name.clone()),
        (POD_NAME.to_string(), name),
        (POD_NAMESPACE.to_string(), ns),
        (POD_UID.to_string(), uid),
    ]);
    let grace = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(30);
    let annotations = HashMap::from([
        (RESTART_COUNT.to_string(), restart_count.to_string()),
        (TERMINATION_GRACE.to_string(), grace.to_string()),
    ]);
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: c.name.clone(),
            attempt: restart_count,
        }),
        image: Some(cri::ImageSpec {
            image: c.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        command: c.command.iter().flatten().map(|s| expand(s, &vars)).collect(),
        args: c.args.iter().flatten().map(|s| expand(s, &vars)).collect(),
        working_dir: c.working_dir.clone().unwrap_or_default(),
        envs,
        labels,
        annotations,
        // Relative to the sandbox's log directory.
        log_path: format!("{}/{restart_count}.log", c.name),
        stdin: c.stdin.unwrap_or(false),
        stdin_once: c.stdin_once.unwrap_or(false),
        tty: c.tty.unwrap_or(false),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web-1", "namespace": "shop", "uid": "u-1", "labels": {"app": "web"}},
            "spec": spec,
            "status": {"podIP": "10.42.0.7"}
        }))
        .unwrap()
    }

    fn node() -> NodeContext {
        NodeContext {
            node_name: "n1".into(),
            host_ip: "192.0.2.10".into(),
            cluster_dns: vec!["10.43.0.10".into()],
            cluster_domain: "cluster.local".into(),
            host_dns: cri::DnsConfig {
                servers: vec!["192.0.2.1".into()],
                searches: vec![],
                options: vec![],
            },
            log_root: "/var/log/pods".into(),
            cgroup_parent: "/r8s/besteffort".into(),
        }
    }

    #[test]
    fn sandbox_carries_identity_dns_ports_and_namespaces() {
        let p = pod(json!({"containers": [{"name": "c", "image": "nginx",
            "ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 53, "protocol": "UDP"}]}]}));
        let s = sandbox_config(&p, 0, &node());
        let m = s.metadata.unwrap();
        assert_eq!(
            (m.name.as_str(), m.namespace.as_str(), m.uid.as_str()),
            ("web-1", "shop", "u-1")
        );
        assert_eq!(s.hostname, "web-1");
        assert_eq!(s.log_directory, "/var/log/pods/shop_web-1_u-1");
        assert_eq!(s.labels[POD_NAME], "web-1");
        assert_eq!(s.labels["app"], "web");
        assert_eq!(s.port_mappings.len(), 1);
        assert_eq!(
            (s.port_mappings[0].container_port, s.port_mappings[0].host_port),
            (80, 8080)
        );
        let dns = s.dns_config.unwrap();
        assert_eq!(dns.servers, ["10.43.0.10"]);
        assert_eq!(
            dns.searches,
            ["shop.svc.cluster.local", "svc.cluster.local", "cluster.local"]
        );
        assert_eq!(dns.options, ["ndots:5"]);
        let ns = s
            .linux
            .unwrap()
            .security_context
            .unwrap()
            .namespace_options
            .unwrap();
        assert_eq!(ns.network, cri::NamespaceMode::Pod as i32);
        assert_eq!(ns.pid, cri::NamespaceMode::Container as i32);
    }

    #[test]
    fn host_network_pods_use_the_host_resolver() {
        let p = pod(json!({"hostNetwork": true, "containers": [{"name": "c"}]}));
        let s = sandbox_config(&p, 0, &node());
        assert_eq!(s.dns_config.unwrap().servers, ["192.0.2.1"]);
        assert_eq!(s.hostname, "");
        let ns = s
            .linux
            .unwrap()
            .security_context
            .unwrap()
            .namespace_options
            .unwrap();
        assert_eq!(ns.network, cri::NamespaceMode::Node as i32);
    }

    #[test]
    fn container_env_expands_and_reads_the_downward_api() {
        let p = pod(json!({"containers": [{"name": "app", "image": "busybox",
        "command": ["sh", "-c"], "args": ["echo $(GREETING) from $(POD_NAME) $$HOME"],
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "GREETING", "value": "hello $(APP)"}
        ]}]}));
        let c = p.spec.as_ref().unwrap().containers[0].clone();
        let cfg = container_config(&p, &c, 2, &node());
        let env: HashMap<_, _> = cfg
            .envs
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()))
            .collect();
        assert_eq!(env["POD_NAME"], "web-1");
        assert_eq!(env["POD_IP"], "10.42.0.7");
        assert_eq!(env["NODE"], "n1");
        assert_eq!(env["GREETING"], "hello web");
        assert_eq!(cfg.args, ["echo hello web from web-1 $HOME"]);
        assert_eq!(cfg.log_path, "app/2.log");
        assert_eq!(cfg.metadata.unwrap().attempt, 2);
        assert_eq!(cfg.labels[CONTAINER_NAME], "app");
        assert_eq!(cfg.annotations[RESTART_COUNT], "2");
    }

    #[test]
    fn expansion_leaves_unknown_references() {
        let vars = BTreeMap::from([("A".to_string(), "1".to_string())]);
        assert_eq!(expand("$(A)-$(B)-$$(A)-$", &vars), "1-$(B)-$(A)-$");
    }
}
