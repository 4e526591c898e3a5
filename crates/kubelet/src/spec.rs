//! From a Pod to CRI requests (upstream `kuberuntime_sandbox.go` and `kuberuntime_container.go`):
//! the sandbox's metadata, hostname, log directory, DNS, host ports, namespaces and labels; each
//! container's image, command, arguments, environment, log path and labels. The labels are
//! upstream's, so the kubelet can find its pods again in the runtime after a restart.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod};

use crate::volumes::{HostVolume, Lookup};

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
    /// The pods' cgroup root; each pod's cgroup is under it by QoS class (`crate::qos`).
    pub cgroup_parent: String,
    /// The node's allocatable cpu (millicores) and memory (bytes): what the downward API
    /// reports as a container's limit when it has none, as upstream.
    pub allocatable_cpu_milli: i128,
    pub allocatable_memory: i128,
    /// Where Localhost seccomp profiles live (upstream `<root-dir>/seccomp`).
    pub seccomp_root: String,
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
    let cgroup_parent = crate::qos::pod_cgroup(&node.cgroup_parent, crate::qos::pod_qos(pod), &uid);
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
            cgroup_parent,
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

/// Go's `%q` of a string (the quoting of downward-API label and annotation files).
fn go_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `key="value"` lines, sorted by key (upstream `formatMap`).
fn format_map(m: Option<&BTreeMap<String, String>>) -> String {
    m.into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The value of a downwardAPI volume file's field reference: the fields of the env's, and
/// whole `metadata.labels` / `metadata.annotations`.
pub fn volume_field_value(pod: &Pod, path: &str) -> Option<String> {
    let m = &pod.metadata;
    match path {
        "metadata.labels" => Some(format_map(m.labels.as_ref())),
        "metadata.annotations" => Some(format_map(m.annotations.as_ref())),
        "metadata.name" | "metadata.namespace" | "metadata.uid" => {
            field_value(pod, path, &NodeContext::default())
        }
        p if p.starts_with("metadata.labels['") || p.starts_with("metadata.annotations['") => {
            Some(field_value(pod, p, &NodeContext::default()).unwrap_or_default())
        }
        _ => None,
    }
}

/// A container's resource for the downward API (`resourceFieldRef`), divided by `divisor` and
/// rounded up (upstream `ExtractContainerResourceValue`); a missing limit is the node's
/// allocatable.
pub fn resource_value(
    resource: &str,
    divisor: Option<&str>,
    c: &Container,
    node: &NodeContext,
) -> Result<String, String> {
    use r8s_api::quantity::Quantity;
    let divisor = divisor.filter(|d| !d.is_empty()).unwrap_or("1");
    let div = Quantity::parse(divisor).map_err(|e| format!("invalid divisor {divisor}: {e}"))?;
    // A zero divisor is an unset one (Go's zero Quantity, which client-go sends as "0").
    let div = if div.is_zero() {
        Quantity::from_units(1)
    } else {
        div
    };
    let get = |which: &str, name: &str| -> Option<Quantity> {
        let r = c.resources.as_ref()?;
        let m = if which == "limits" {
            r.limits.as_ref()
        } else {
            r.requests.as_ref()
        }?;
        Quantity::parse(&m.get(name)?.0).ok()
    };
    let (which, name) = resource
        .split_once('.')
        .ok_or_else(|| format!("unsupported container resource : {resource}"))?;
    let mut q = get(which, name);
    if which == "limits" && q.is_none() {
        q = match name {
            "cpu" => Some(Quantity::from_milli(node.allocatable_cpu_milli)),
            "memory" => Some(Quantity::from_milli(node.allocatable_memory * 1000)),
            _ => None,
        };
    }
    if !matches!(which, "limits" | "requests") || !matches!(name, "cpu" | "memory" | "ephemeral-storage") {
        return Err(format!("unsupported container resource : {resource}"));
    }
    let q = q.unwrap_or_default();
    let ceil_div = |a: i128, b: i128| if b == 0 { 0 } else { (a + b - 1).div_euclid(b) };
    Ok(if name == "cpu" {
        ceil_div(q.milli_value(), div.milli_value())
    } else {
        ceil_div(q.value(), div.value())
    }
    .to_string())
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
        "status.podIPs" => status?
            .pod_ips
            .iter()
            .flatten()
            .map(|p| p.ip.as_str())
            .collect::<Vec<_>>()
            .join(","),
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

/// What a container's configuration needs beyond the pod: its pod's volumes on the host, and
/// the configMaps and secrets (their data, by name) its environment refers to.
#[derive(Clone, Debug, Default)]
pub struct ContainerInputs {
    pub volumes: BTreeMap<String, HostVolume>,
    pub config_maps: BTreeMap<String, Lookup<BTreeMap<String, String>>>,
    pub secrets: BTreeMap<String, Lookup<BTreeMap<String, String>>>,
    /// The user the image runs as (CRI ImageStatus).
    pub image_user: crate::security::ImageUser,
    /// The Services' variables (`{NAME}_SERVICE_HOST` …, [`service_env`]).
    pub service_env: Vec<(String, String)>,
}

/// The Services a pod's containers are told about (upstream `getServiceEnvVarMap`): the
/// `kubernetes` Service of `default` always, and with `enableServiceLinks` (the default)
/// every Service of the pod's namespace; only Services with a cluster IP.
pub fn linked_services<'a>(
    services: impl IntoIterator<Item = &'a k8s_openapi::api::core::v1::Service>,
    ns: &str,
    enable_links: bool,
) -> Vec<&'a k8s_openapi::api::core::v1::Service> {
    let mut by_name: BTreeMap<&str, &k8s_openapi::api::core::v1::Service> = BTreeMap::new();
    for svc in services {
        let ip = svc
            .spec
            .as_ref()
            .and_then(|s| s.cluster_ip.as_deref())
            .unwrap_or("");
        if ip.is_empty() || ip == "None" {
            continue;
        }
        let (Some(name), Some(svc_ns)) = (svc.metadata.name.as_deref(), svc.metadata.namespace.as_deref())
        else {
            continue;
        };
        if svc_ns == "default" && name == "kubernetes" {
            by_name.entry(name).or_insert(svc);
        } else if svc_ns == ns && enable_links {
            by_name.insert(name, svc);
        }
    }
    by_name.into_values().collect()
}

/// The environment variables of `services` (upstream `envvars.FromServices`): the
/// `{NAME}_SERVICE_HOST`/`_SERVICE_PORT[_PORTNAME]` pair and Docker's link variables
/// (`{NAME}_PORT`, `{NAME}_PORT_{port}_{PROTO}[_PROTO|_PORT|_ADDR]`).
pub fn service_env(services: &[&k8s_openapi::api::core::v1::Service]) -> Vec<(String, String)> {
    let var = |s: &str| s.to_uppercase().replace('-', "_");
    let mut out = Vec::new();
    for svc in services {
        let Some(spec) = svc.spec.as_ref() else { continue };
        let ip = spec.cluster_ip.clone().unwrap_or_default();
        let name = var(svc.metadata.name.as_deref().unwrap_or_default());
        let ports = spec.ports.clone().unwrap_or_default();
        out.push((format!("{name}_SERVICE_HOST"), ip.clone()));
        if let Some(first) = ports.first() {
            out.push((format!("{name}_SERVICE_PORT"), first.port.to_string()));
        }
        for p in &ports {
            if let Some(pn) = p.name.as_deref().filter(|n| !n.is_empty()) {
                out.push((format!("{name}_SERVICE_PORT_{}", var(pn)), p.port.to_string()));
            }
        }
        let host_port = |port: i32| match ip.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V6(_)) => format!("[{ip}]:{port}"),
            _ => format!("{ip}:{port}"),
        };
        for (i, p) in ports.iter().enumerate() {
            let proto = p.protocol.clone().unwrap_or_else(|| "TCP".into());
            let lower = proto.to_lowercase();
            let url = format!("{lower}://{}", host_port(p.port));
            if i == 0 {
                out.push((format!("{name}_PORT"), url.clone()));
            }
            let prefix = format!("{name}_PORT_{}_{}", p.port, proto.to_uppercase());
            out.push((prefix.clone(), url));
            out.push((format!("{prefix}_PROTO"), lower));
            out.push((format!("{prefix}_PORT"), p.port.to_string()));
            out.push((format!("{prefix}_ADDR"), ip.clone()));
        }
    }
    out
}

/// The configMaps and secrets the environment of `c` refers to.
pub fn env_sources(c: &Container) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut cms = BTreeSet::new();
    let mut secrets = BTreeSet::new();
    for e in c.env_from.iter().flatten() {
        cms.extend(e.config_map_ref.as_ref().map(|r| r.name.clone()));
        secrets.extend(e.secret_ref.as_ref().map(|r| r.name.clone()));
    }
    for e in c.env.iter().flatten() {
        if let Some(from) = &e.value_from {
            cms.extend(from.config_map_key_ref.as_ref().map(|r| r.name.clone()));
            secrets.extend(from.secret_key_ref.as_ref().map(|r| r.name.clone()));
        }
    }
    (cms, secrets)
}

/// A valid environment variable name (upstream `IsEnvVarName`).
pub fn is_env_var_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || matches!(c, '-' | '.' | '_'))
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
}

/// A container's environment variables, in order, and the warnings made building them.
#[derive(Clone, Debug, Default)]
pub struct Environment {
    pub vars: Vec<(String, String)>,
    pub warnings: Vec<String>,
}

/// The container's environment (upstream `makeEnvironmentVariables`): `envFrom` first, then
/// `env` (which may refer to what came before with `$(VAR)`). Returns the variables in order
/// and warnings (keys skipped as invalid names); an error is the container's
/// CreateContainerConfigError message.
pub fn environment(
    pod: &Pod,
    c: &Container,
    node: &NodeContext,
    inputs: &ContainerInputs,
) -> Result<Environment, String> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let mut env: Vec<(String, String)> = Vec::new();
    let mut warnings = Vec::new();
    let set =
        |env: &mut Vec<(String, String)>, k: String, v: String| match env.iter_mut().find(|(n, _)| *n == k) {
            Some(slot) => slot.1 = v,
            None => env.push((k, v)),
        };
    let missing = || Lookup::Failed("not fetched".to_string());
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let (kind, name, optional, data) = if let Some(r) = &from.config_map_ref {
            let l = inputs.config_maps.get(&r.name).cloned().unwrap_or_else(missing);
            ("configmap", r.name.clone(), r.optional.unwrap_or(false), l)
        } else if let Some(r) = &from.secret_ref {
            let l = inputs.secrets.get(&r.name).cloned().unwrap_or_else(missing);
            ("secret", r.name.clone(), r.optional.unwrap_or(false), l)
        } else {
            continue;
        };
        let Some(data) = data.required(kind, &name, optional)? else {
            continue;
        };
        let mut invalid = Vec::new();
        for (k, v) in data {
            let k = format!("{prefix}{k}");
            if !is_env_var_name(&k) {
                invalid.push(k);
                continue;
            }
            set(&mut env, k, v.clone());
        }
        if !invalid.is_empty() {
            invalid.sort();
            let what = if kind == "configmap" {
                "configMap"
            } else {
                "secret"
            };
            warnings.push(format!(
                "Keys [{}] from the EnvFrom {what} {ns}/{name} were skipped since they are considered invalid environment variable names.",
                invalid.join(", ")
            ));
        }
    }
    for e in c.env.iter().flatten() {
        let value = match (&e.value, &e.value_from) {
            (Some(v), _) if !v.is_empty() => {
                // `$(VAR)` sees the variables so far, then the Services' (upstream's mapping).
                let mut vars: BTreeMap<String, String> = inputs.service_env.iter().cloned().collect();
                vars.extend(env.iter().cloned());
                expand(v, &vars)
            }
            (_, Some(from)) => {
                if let Some(f) = &from.field_ref {
                    field_value(pod, &f.field_path, node).unwrap_or_default()
                } else if let Some(r) = &from.resource_field_ref {
                    let target = match r.container_name.as_deref().filter(|n| !n.is_empty()) {
                        Some(n) if n != c.name => {
                            let spec = pod.spec.clone().unwrap_or_default();
                            spec.containers
                                .iter()
                                .chain(spec.init_containers.iter().flatten())
                                .find(|x| x.name == n)
                                .cloned()
                                .ok_or_else(|| format!("container {n} not found"))?
                        }
                        _ => c.clone(),
                    };
                    resource_value(
                        &r.resource,
                        r.divisor.as_ref().map(|d| d.0.as_str()),
                        &target,
                        node,
                    )?
                } else if let Some(r) = &from.config_map_key_ref {
                    let optional = r.optional.unwrap_or(false);
                    let l = inputs.config_maps.get(&r.name).cloned().unwrap_or_else(missing);
                    let Some(data) = l.required("configmap", &r.name, optional)? else {
                        continue;
                    };
                    match data.get(&r.key) {
                        Some(v) => v.clone(),
                        None if optional => continue,
                        None => {
                            return Err(format!(
                                "couldn't find key {} in ConfigMap {ns}/{}",
                                r.key, r.name
                            ))
                        }
                    }
                } else if let Some(r) = &from.secret_key_ref {
                    let optional = r.optional.unwrap_or(false);
                    let l = inputs.secrets.get(&r.name).cloned().unwrap_or_else(missing);
                    let Some(data) = l.required("secret", &r.name, optional)? else {
                        continue;
                    };
                    match data.get(&r.key) {
                        Some(v) => v.clone(),
                        None if optional => continue,
                        None => return Err(format!("couldn't find key {} in Secret {ns}/{}", r.key, r.name)),
                    }
                } else {
                    String::new()
                }
            }
            _ => String::new(),
        };
        set(&mut env, e.name.clone(), value);
    }
    // The Services' variables, where the pod does not set the name itself.
    for (k, v) in &inputs.service_env {
        if !env.iter().any(|(n, _)| n == k) {
            env.push((k.clone(), v.clone()));
        }
    }
    Ok(Environment { vars: env, warnings })
}

/// The `/etc/hosts` the kubelet writes for a pod (upstream `ensureHostsFile`): on the pod
/// network, localhost and the IPv6 names, then the pod's addresses under its hostname (fully
/// qualified first when it has a subdomain); on the host network the node's own hosts file
/// under a header of its own. hostAliases are added to both.
pub fn hosts_file(
    pod: &Pod,
    pod_ips: &[String],
    hostname: &str,
    node: &NodeContext,
    node_hosts: &str,
) -> String {
    let spec = pod.spec.clone().unwrap_or_default();
    let mut out = String::new();
    if spec.host_network.unwrap_or(false) {
        out.push_str("# Kubernetes-managed hosts file (host network).\n");
        out.push_str(node_hosts);
    } else {
        out.push_str("# Kubernetes-managed hosts file.\n");
        out.push_str("127.0.0.1\tlocalhost\n");
        out.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
        out.push_str("fe00::0\tip6-localnet\n");
        out.push_str("fe00::0\tip6-mcastprefix\n");
        out.push_str("fe00::1\tip6-allnodes\n");
        out.push_str("fe00::2\tip6-allrouters\n");
        let ns = pod.metadata.namespace.as_deref().unwrap_or("");
        let domain = spec
            .subdomain
            .as_deref()
            .filter(|s| !s.is_empty())
            .map(|sub| format!("{sub}.{ns}.svc.{}", node.cluster_domain));
        for ip in pod_ips {
            match &domain {
                Some(d) => out.push_str(&format!("{ip}\t{hostname}.{d}\t{hostname}\n")),
                None => out.push_str(&format!("{ip}\t{hostname}\n")),
            }
        }
    }
    let aliases = spec.host_aliases.unwrap_or_default();
    if !aliases.is_empty() {
        out.push_str("\n# Entries added by HostAliases.\n");
        for a in aliases {
            let names = a.hostnames.unwrap_or_default().join("\t");
            out.push_str(&format!("{}\t{names}\n", a.ip));
        }
    }
    out
}

/// Whether the kubelet mounts its hosts file into container `c`: not when the container
/// mounts something at `/etc/hosts` itself.
pub fn mounts_hosts_file(c: &Container) -> bool {
    !c.volume_mounts
        .iter()
        .flatten()
        .any(|m| m.mount_path.trim_end_matches('/') == "/etc/hosts")
}

/// The container's mounts (upstream `makeMounts`): each volumeMount's volume on the host, with
/// its subPath (made if missing), read-only flag and propagation.
pub fn mounts(
    c: &Container,
    vars: &BTreeMap<String, String>,
    inputs: &ContainerInputs,
) -> Result<Vec<cri::Mount>, String> {
    let mut out = Vec::new();
    for m in c.volume_mounts.iter().flatten() {
        let Some(v) = inputs.volumes.get(&m.name) else {
            return Err(format!(
                "cannot find volume \"{}\" to mount into container \"{}\"",
                m.name, c.name
            ));
        };
        let sub = match (&m.sub_path, &m.sub_path_expr) {
            (Some(s), _) if !s.is_empty() => s.clone(),
            (_, Some(e)) if !e.is_empty() => expand(e, vars),
            _ => String::new(),
        };
        let mut host = v.path.clone();
        if !sub.is_empty() {
            let p = std::path::Path::new(&sub);
            if p.is_absolute() || p.components().any(|c| c == std::path::Component::ParentDir) {
                return Err(format!(
                    "subPath {sub:?} must be a relative path within the volume"
                ));
            }
            host = host.join(p);
            if std::fs::symlink_metadata(&host).is_err() {
                std::fs::create_dir_all(&host).map_err(|e| {
                    format!(
                        "failed to create subPath directory for volumeMount \"{}\" of container \"{}\": {e}",
                        m.name, c.name
                    )
                })?;
            }
        }
        let propagation = match m.mount_propagation.as_deref() {
            Some("HostToContainer") => cri::MountPropagation::PropagationHostToContainer,
            Some("Bidirectional") => cri::MountPropagation::PropagationBidirectional,
            _ => cri::MountPropagation::PropagationPrivate,
        };
        out.push(cri::Mount {
            container_path: m.mount_path.clone(),
            host_path: host.display().to_string(),
            readonly: m.read_only.unwrap_or(false) || v.read_only,
            propagation: propagation as i32,
            ..Default::default()
        });
    }
    Ok(out)
}

/// One container of the pod (upstream `generateContainerConfig`), for its `restart_count`-th
/// start. Besides the configuration, the warnings to record as events; an error is the
/// container's CreateContainerConfigError message.
pub fn container_config(
    pod: &Pod,
    c: &Container,
    restart_count: u32,
    node: &NodeContext,
    inputs: &ContainerInputs,
) -> Result<(cri::ContainerConfig, Vec<String>), String> {
    let (name, ns, uid) = meta(pod);
    crate::security::verify_run_as_non_root(pod, c, &inputs.image_user)?;
    let Environment { vars: env, warnings } = environment(pod, c, node, inputs)?;
    let vars: BTreeMap<String, String> = env.iter().cloned().collect();
    let envs = env
        .into_iter()
        .map(|(key, value)| cri::KeyValue { key, value })
        .collect();
    let mounts = mounts(c, &vars, inputs)?;
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
    let config = cri::ContainerConfig {
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
        mounts,
        labels,
        annotations,
        // Relative to the sandbox's log directory.
        log_path: format!("{}/{restart_count}.log", c.name),
        stdin: c.stdin.unwrap_or(false),
        stdin_once: c.stdin_once.unwrap_or(false),
        tty: c.tty.unwrap_or(false),
        linux: Some(cri::LinuxContainerConfig {
            resources: Some(crate::qos::container_resources(
                pod,
                c,
                node.allocatable_memory as i64,
            )),
            security_context: Some(security_context(pod, c, node, inputs)?),
        }),
        ..Default::default()
    };
    Ok((config, warnings))
}

/// The container's security context (`security`), in the pod's namespaces.
fn security_context(
    pod: &Pod,
    c: &Container,
    node: &NodeContext,
    inputs: &ContainerInputs,
) -> Result<cri::LinuxContainerSecurityContext, String> {
    let namespaces = crate::security::namespace_options(pod);
    let root = std::path::Path::new(&node.seccomp_root);
    crate::security::container_security_context(pod, c, &inputs.image_user, namespaces, root)
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
            cgroup_parent: "/r8s/pods".into(),
            allocatable_cpu_milli: 2000,
            allocatable_memory: 4 << 30,
            seccomp_root: "/var/lib/r8s/agent/seccomp".into(),
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
        // A pod asking for nothing is BestEffort: its cgroup is under that class's parent.
        assert_eq!(
            s.linux.as_ref().unwrap().cgroup_parent,
            "/r8s/pods/besteffort/podu-1"
        );
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
        let (cfg, _) = container_config(&p, &c, 2, &node(), &ContainerInputs::default()).unwrap();
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

    fn inputs() -> ContainerInputs {
        let data = |kv: &[(&str, &str)]| {
            Lookup::Found(
                kv.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            )
        };
        ContainerInputs {
            volumes: BTreeMap::from([
                (
                    "cfg".to_string(),
                    HostVolume {
                        path: "/pods/u-1/volumes/kubernetes.io~configmap/cfg".into(),
                        read_only: true,
                    },
                ),
                (
                    "scratch".to_string(),
                    HostVolume {
                        path: std::env::temp_dir().join(format!("r8s-spec-test-{}", std::process::id())),
                        read_only: false,
                    },
                ),
            ]),
            config_maps: BTreeMap::from([
                (
                    "settings".to_string(),
                    data(&[("mode", "fast"), ("level", "3"), ("bad key", "x")]),
                ),
                ("gone".to_string(), Lookup::NotFound),
            ]),
            secrets: BTreeMap::from([("creds".to_string(), data(&[("password", "s3cret")]))]),
            ..Default::default()
        }
    }

    fn env_of(spec: serde_json::Value) -> Result<(HashMap<String, String>, Vec<String>), String> {
        let p = pod(json!({"containers": [spec]}));
        let c = p.spec.as_ref().unwrap().containers[0].clone();
        let (cfg, warnings) = container_config(&p, &c, 0, &node(), &inputs())?;
        Ok((cfg.envs.into_iter().map(|e| (e.key, e.value)).collect(), warnings))
    }

    #[test]
    fn services_become_environment_variables_as_upstream() {
        let svc = |ns: &str,
                   name: &str,
                   ip: &str,
                   ports: serde_json::Value|
         -> k8s_openapi::api::core::v1::Service {
            serde_json::from_value(serde_json::json!({"metadata": {"namespace": ns, "name": name},
                "spec": {"clusterIP": ip, "ports": ports}}))
            .unwrap()
        };
        let all = [
            svc(
                "default",
                "kubernetes",
                "10.43.0.1",
                serde_json::json!([{"name": "https", "port": 443, "protocol": "TCP"}]),
            ),
            svc(
                "web",
                "my-db",
                "10.43.0.7",
                serde_json::json!([{"name": "pg", "port": 5432}, {"name": "metrics-port", "port": 9187, "protocol": "UDP"}]),
            ),
            svc("web", "headless", "None", serde_json::json!([{"port": 80}])),
            svc(
                "other",
                "elsewhere",
                "10.43.0.9",
                serde_json::json!([{"port": 80}]),
            ),
        ];
        let linked = linked_services(all.iter(), "web", true);
        let names: Vec<&str> = linked
            .iter()
            .map(|s| s.metadata.name.as_deref().unwrap())
            .collect();
        assert_eq!(names, vec!["kubernetes", "my-db"]);
        let env: BTreeMap<String, String> = service_env(&linked).into_iter().collect();
        let want = [
            ("KUBERNETES_SERVICE_HOST", "10.43.0.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
            ("KUBERNETES_SERVICE_PORT_HTTPS", "443"),
            ("KUBERNETES_PORT", "tcp://10.43.0.1:443"),
            ("KUBERNETES_PORT_443_TCP", "tcp://10.43.0.1:443"),
            ("KUBERNETES_PORT_443_TCP_PROTO", "tcp"),
            ("KUBERNETES_PORT_443_TCP_PORT", "443"),
            ("KUBERNETES_PORT_443_TCP_ADDR", "10.43.0.1"),
            ("MY_DB_SERVICE_HOST", "10.43.0.7"),
            ("MY_DB_SERVICE_PORT", "5432"),
            ("MY_DB_SERVICE_PORT_PG", "5432"),
            ("MY_DB_SERVICE_PORT_METRICS_PORT", "9187"),
            ("MY_DB_PORT", "tcp://10.43.0.7:5432"),
            ("MY_DB_PORT_9187_UDP", "udp://10.43.0.7:9187"),
            ("MY_DB_PORT_9187_UDP_ADDR", "10.43.0.7"),
        ];
        for (k, v) in want {
            assert_eq!(env.get(k).map(String::as_str), Some(v), "{k}");
        }
        assert!(!env
            .keys()
            .any(|k| k.starts_with("HEADLESS") || k.starts_with("ELSEWHERE")));
        // enableServiceLinks: false keeps only the kubernetes Service.
        let linked = linked_services(all.iter(), "web", false);
        assert_eq!(linked.len(), 1);
        // In the container: after the pod's own, which win, and visible to $(VAR).
        let pod: Pod = serde_json::from_value(serde_json::json!({"metadata": {"name": "p", "namespace": "web"},
            "spec": {"containers": [{"name": "c", "env": [
                {"name": "MY_DB_SERVICE_PORT", "value": "1"},
                {"name": "URL", "value": "https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"}]}]}}))
        .unwrap();
        let mut inputs = inputs();
        inputs.service_env = service_env(&linked_services(all.iter(), "web", true));
        let c = pod.spec.as_ref().unwrap().containers[0].clone();
        let out = environment(&pod, &c, &NodeContext::default(), &inputs).unwrap();
        let got: BTreeMap<String, String> = out.vars.into_iter().collect();
        assert_eq!(got["MY_DB_SERVICE_PORT"], "1");
        assert_eq!(got["URL"], "https://10.43.0.1:443");
        assert_eq!(got["KUBERNETES_SERVICE_HOST"], "10.43.0.1");
    }

    #[test]
    fn env_from_config_maps_and_secrets() {
        let (env, warnings) = env_of(json!({"name": "app",
            "resources": {"limits": {"memory": "128Mi"}, "requests": {"cpu": "250m"}},
            "envFrom": [
                {"configMapRef": {"name": "settings"}, "prefix": "CFG_"},
                {"configMapRef": {"name": "gone", "optional": true}},
                {"secretRef": {"name": "creds"}}
            ],
            "env": [
                {"name": "LEVEL", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "level"}}},
                {"name": "PASS", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
                {"name": "MAYBE", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "nope", "optional": true}}},
                {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
                {"name": "CPU_REQ", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}}},
                {"name": "CPU_LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
                {"name": "MEM_LIMIT_DEFAULT", "valueFrom": {"resourceFieldRef": {"resource": "requests.memory"}}},
                {"name": "MEM_ZERO_DIVISOR", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "0"}}},
                {"name": "CPU_ZERO_DIVISOR", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "0"}}},
                {"name": "BOTH", "value": "$(CFG_mode)-$(LEVEL)"}
            ]}))
        .unwrap();
        assert_eq!(env["CFG_mode"], "fast");
        assert_eq!(env["CFG_level"], "3");
        assert_eq!(env["password"], "s3cret");
        assert_eq!(env["LEVEL"], "3");
        assert_eq!(env["PASS"], "s3cret");
        assert!(!env.contains_key("MAYBE"));
        assert!(!env.contains_key("CFG_bad key"));
        assert_eq!(env["MEM_MI"], "128");
        assert_eq!(env["CPU_REQ"], "250");
        // No cpu limit: the node's allocatable (2 cores).
        assert_eq!(env["CPU_LIMIT"], "2");
        assert_eq!(env["MEM_LIMIT_DEFAULT"], "0");
        // Go's zero divisor ("0", what client-go sends for an unset one) is 1.
        assert_eq!(env["MEM_ZERO_DIVISOR"], "134217728");
        assert_eq!(env["CPU_ZERO_DIVISOR"], "1");
        assert_eq!(env["BOTH"], "fast-3");
        assert_eq!(
            warnings,
            ["Keys [CFG_bad key] from the EnvFrom configMap shop/settings were skipped since they are considered invalid environment variable names."]
        );
    }

    #[test]
    fn the_managed_hosts_file_names_the_pod() {
        let node = node();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web-0", "namespace": "shop"},
            "spec": {"containers": [], "hostname": "web-0", "subdomain": "web",
                     "hostAliases": [{"ip": "10.1.2.3", "hostnames": ["foo.local", "bar.local"]}]}}))
        .unwrap();
        let hosts = hosts_file(&pod, &["10.42.0.5".into()], "web-0", &node, "ignored");
        assert_eq!(
            hosts,
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\
             fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n\
             10.42.0.5\tweb-0.web.shop.svc.cluster.local\tweb-0\n\
             \n# Entries added by HostAliases.\n10.1.2.3\tfoo.local\tbar.local\n"
        );
        let host_net: Pod = serde_json::from_value(json!({"metadata": {"name": "h", "namespace": "x"},
            "spec": {"containers": [], "hostNetwork": true}}))
        .unwrap();
        assert_eq!(
            hosts_file(
                &host_net,
                &["10.0.0.1".into()],
                "node1",
                &node,
                "127.0.0.1 localhost\n"
            ),
            "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n"
        );
        let own: Container = serde_json::from_value(
            json!({"name": "c", "volumeMounts": [{"name": "h", "mountPath": "/etc/hosts"}]}),
        )
        .unwrap();
        assert!(!mounts_hosts_file(&own));
        let other: Container = serde_json::from_value(
            json!({"name": "c", "volumeMounts": [{"name": "h", "mountPath": "/etc/hosts-original"}]}),
        )
        .unwrap();
        assert!(mounts_hosts_file(&other));
    }

    #[test]
    fn missing_env_sources_are_config_errors() {
        let err = |env: serde_json::Value| env_of(json!({"name": "app", "env": [env]})).unwrap_err();
        assert_eq!(
            err(json!({"name": "X", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "k"}}})),
            "configmap \"gone\" not found"
        );
        assert_eq!(
            err(json!({"name": "X", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "k"}}})),
            "couldn't find key k in ConfigMap shop/settings"
        );
        assert_eq!(
            err(json!({"name": "X", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "k"}}})),
            "couldn't find key k in Secret shop/creds"
        );
        let (env, _) = env_of(json!({"name": "app", "env": [
            {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "k", "optional": true}}}]}))
        .unwrap();
        assert!(!env.contains_key("X"));
        let e = env_of(json!({"name": "app", "envFrom": [{"configMapRef": {"name": "gone"}}]})).unwrap_err();
        assert_eq!(e, "configmap \"gone\" not found");
    }

    #[test]
    fn volume_mounts_become_cri_mounts() {
        let p = pod(json!({"containers": [{"name": "app",
        "env": [{"name": "DIR", "value": "by-env"}],
        "volumeMounts": [
            {"name": "cfg", "mountPath": "/etc/cfg"},
            {"name": "scratch", "mountPath": "/data", "readOnly": true, "mountPropagation": "HostToContainer"},
            {"name": "scratch", "mountPath": "/sub", "subPath": "a/b"},
            {"name": "scratch", "mountPath": "/expr", "subPathExpr": "$(DIR)"}
        ]}]}));
        let c = p.spec.as_ref().unwrap().containers[0].clone();
        let inputs = inputs();
        let scratch = inputs.volumes["scratch"].path.clone();
        let (cfg, _) = container_config(&p, &c, 0, &node(), &inputs).unwrap();
        let m = &cfg.mounts;
        assert_eq!(m.len(), 4);
        assert_eq!(
            (
                m[0].container_path.as_str(),
                m[0].host_path.as_str(),
                m[0].readonly
            ),
            ("/etc/cfg", "/pods/u-1/volumes/kubernetes.io~configmap/cfg", true)
        );
        assert!(m[1].readonly);
        assert_eq!(
            m[1].propagation,
            cri::MountPropagation::PropagationHostToContainer as i32
        );
        assert!(!m[2].readonly);
        assert_eq!(m[2].host_path, scratch.join("a/b").display().to_string());
        assert!(scratch.join("a/b").is_dir(), "the subPath was made");
        assert_eq!(m[3].host_path, scratch.join("by-env").display().to_string());
        let _ = std::fs::remove_dir_all(&scratch);

        let bad = pod(json!({"containers": [{"name": "app",
            "volumeMounts": [{"name": "nope", "mountPath": "/x"}]}]}));
        let c = bad.spec.as_ref().unwrap().containers[0].clone();
        assert_eq!(
            container_config(&bad, &c, 0, &node(), &inputs).unwrap_err(),
            "cannot find volume \"nope\" to mount into container \"app\""
        );
        let escape = pod(json!({"containers": [{"name": "app",
            "volumeMounts": [{"name": "scratch", "mountPath": "/x", "subPath": "../../etc"}]}]}));
        let c = escape.spec.as_ref().unwrap().containers[0].clone();
        assert!(container_config(&escape, &c, 0, &node(), &inputs).is_err());
    }

    #[test]
    fn env_names_are_checked_as_upstream() {
        for ok in ["A", "a_b", "-x", ".y", "X1.2-3"] {
            assert!(is_env_var_name(ok), "{ok}");
        }
        for bad in ["", "1A", "a b", "a=b", "é"] {
            assert!(!is_env_var_name(bad), "{bad}");
        }
    }

    #[test]
    fn resource_values_round_up_by_the_divisor() {
        let c: Container = serde_json::from_value(json!({"name": "c",
            "resources": {"limits": {"cpu": "1500m", "memory": "1Gi"}, "requests": {"cpu": "100m"}}}))
        .unwrap();
        let n = node();
        assert_eq!(resource_value("limits.cpu", None, &c, &n).unwrap(), "2");
        assert_eq!(resource_value("limits.cpu", Some("1m"), &c, &n).unwrap(), "1500");
        assert_eq!(resource_value("requests.cpu", Some("1"), &c, &n).unwrap(), "1");
        assert_eq!(
            resource_value("limits.memory", None, &c, &n).unwrap(),
            (1u64 << 30).to_string()
        );
        assert_eq!(
            resource_value("limits.memory", Some("1Mi"), &c, &n).unwrap(),
            "1024"
        );
        assert_eq!(resource_value("limits.memory", Some("1G"), &c, &n).unwrap(), "2");
        let none: Container = serde_json::from_value(json!({"name": "c"})).unwrap();
        assert_eq!(
            resource_value("limits.memory", Some("1Gi"), &none, &n).unwrap(),
            "4"
        );
        assert_eq!(resource_value("requests.memory", None, &none, &n).unwrap(), "0");
        assert!(resource_value("limits.gpu", None, &c, &n).is_err());
    }
}
