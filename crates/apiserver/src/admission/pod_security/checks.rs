//! The Pod Security Standards' checks, as upstream's `k8s.io/pod-security-admission/policy`
//! (Kubernetes 1.33): each check looks at a pod (or pod template) and says what it violates
//! in upstream's words; [`evaluate`] runs those of a level and version in upstream's order.

use std::collections::{BTreeSet, HashSet};

use serde_json::Value;

use super::{Level, LevelVersion};

/// One failed check (upstream's `CheckResult` with `Allowed: false`): a short reason, always
/// shown, and a detail naming what is wrong, shown for a single object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub reason: String,
    pub detail: String,
}

impl Violation {
    fn new(reason: impl Into<String>, detail: impl Into<String>) -> Option<Violation> {
        Some(Violation {
            reason: reason.into(),
            detail: detail.into(),
        })
    }
}

/// The pod (or pod template) being checked: its metadata and spec.
#[derive(Clone, Copy)]
pub struct PodView<'a> {
    pub metadata: &'a Value,
    pub spec: &'a Value,
}

impl<'a> PodView<'a> {
    pub fn of(pod: &'a Value) -> Self {
        PodView {
            metadata: &pod["metadata"],
            spec: &pod["spec"],
        }
    }

    /// Init containers, containers and ephemeral containers, in that order (upstream's
    /// `visitContainers`).
    fn containers(&self) -> impl Iterator<Item = &'a Value> + 'a {
        let spec = self.spec;
        ["initContainers", "containers", "ephemeralContainers"]
            .into_iter()
            .flat_map(move |k| spec[k].as_array().into_iter().flatten())
    }

    fn pod_security_context(&self) -> &'a Value {
        &self.spec["securityContext"]
    }

    fn is_windows(&self) -> bool {
        self.spec["os"]["name"] == "windows"
    }

    fn annotation(&self, key: &str) -> Option<&'a str> {
        self.metadata["annotations"][key].as_str()
    }
}

fn container_name(c: &Value) -> &str {
    c["name"].as_str().unwrap_or("")
}

fn pluralize<'s>(singular: &'s str, plural: &'s str, n: usize) -> &'s str {
    if n == 1 {
        singular
    } else {
        plural
    }
}

/// `"a", "b"`.
fn join_quote<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> String {
    items
        .into_iter()
        .map(|s| format!("\"{}\"", s.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `container "a"` or `containers "a", "b"`.
fn containers_phrase(names: &[&str]) -> String {
    format!(
        "{} {}",
        pluralize("container", "containers", names.len()),
        join_quote(names)
    )
}

/// Go's `%q` for the strings checks quote.
fn go_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn strings(v: &Value) -> impl Iterator<Item = &str> {
    v.as_array().into_iter().flatten().filter_map(Value::as_str)
}

type CheckFn = fn(&PodView<'_>, u64) -> Option<Violation>;

/// One of upstream's checks.
struct Check {
    id: &'static str,
    level: Level,
    /// The first policy version (1.X) the check applies to.
    since: u64,
    /// Baseline checks this (restricted) check replaces in the restricted level.
    overrides: &'static [&'static str],
    check: CheckFn,
}

/// Baseline checks, then restricted ones, each sorted by ID: the order of upstream's messages.
static CHECKS: &[Check] = &[
    Check {
        id: "appArmorProfile",
        level: Level::Baseline,
        since: 0,
        overrides: &[],
        check: app_armor_profile,
    },
    Check {
        id: "capabilities_baseline",
        level: Level::Baseline,
        since: 0,
        overrides: &[],
        check: capabilities_baseline,
    },
    Check {
        id: "hostNamespaces",
        level: Level::Baseline,
        since: 0,
        overrides: &[],
        check: host_namespaces,
    },
    Check {
        id: "hostPathVolumes",
        level: Level::Baseline,
        since: 0,
        overrides: &[],
        check: host_path_volumes,
    },
    Check {
        id: "hostPorts",
        level: Level::Baseline,
        since: 0,
        overrides: &[],
        check: host_ports,
    },
    Check {
        id: "privileged",
        level: Level::Baseline,
        since: 0,
        overrides: &[],
        check: privileged,
    },
    Check {
        id: "procMount",
        level: Level::Baseline,
        since: 0,
        overrides: &[],
        check: proc_mount,
    },
    Check {
        id: "seLinuxOptions",
        level: Level::Baseline,
        since: 0,
        overrides: &[],
        check: se_linux_options,
    },
    Check {
        id: "seccompProfile_baseline",
        level: Level::Baseline,
        since: 0,
        overrides: &[],
        check: seccomp_profile_baseline,
    },
    Check {
        id: "sysctls",
        level: Level::Baseline,
        since: 0,
        overrides: &[],
        check: sysctls,
    },
    Check {
        id: "windowsHostProcess",
        level: Level::Baseline,
        since: 0,
        overrides: &[],
        check: windows_host_process,
    },
    Check {
        id: "allowPrivilegeEscalation",
        level: Level::Restricted,
        since: 8,
        overrides: &[],
        check: allow_privilege_escalation,
    },
    Check {
        id: "capabilities_restricted",
        level: Level::Restricted,
        since: 22,
        overrides: &["capabilities_baseline"],
        check: capabilities_restricted,
    },
    Check {
        id: "restrictedVolumes",
        level: Level::Restricted,
        since: 0,
        overrides: &["hostPathVolumes"],
        check: restricted_volumes,
    },
    Check {
        id: "runAsNonRoot",
        level: Level::Restricted,
        since: 0,
        overrides: &[],
        check: run_as_non_root,
    },
    Check {
        id: "runAsUser",
        level: Level::Restricted,
        since: 23,
        overrides: &[],
        check: run_as_user,
    },
    Check {
        id: "seccompProfile_restricted",
        level: Level::Restricted,
        since: 19,
        overrides: &["seccompProfile_baseline"],
        check: seccomp_profile_restricted,
    },
];

/// Check a pod against a level and version: the violations, in upstream's order.
pub fn evaluate(lv: LevelVersion, pod: &PodView<'_>) -> Vec<Violation> {
    if lv.level == Level::Privileged {
        return Vec::new();
    }
    let v = lv.version.minor();
    let applies = |c: &&Check| c.since <= v && c.level <= lv.level;
    let overridden: HashSet<&str> = CHECKS
        .iter()
        .filter(applies)
        .flat_map(|c| c.overrides.iter().copied())
        .collect();
    CHECKS
        .iter()
        .filter(applies)
        .filter(|c| !overridden.contains(c.id))
        .filter_map(|c| (c.check)(pod, v))
        .collect()
}

/// `reason (detail), reason (detail)` (upstream's `ForbiddenDetail`).
pub fn describe(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| {
            if v.detail.is_empty() {
                v.reason.clone()
            } else {
                format!("{} ({})", v.reason, v.detail)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `reason, reason` (upstream's `ForbiddenReason`).
pub fn reasons(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| v.reason.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

// Baseline ---------------------------------------------------------------------------------

const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

/// AppArmor profiles may be RuntimeDefault or Localhost, never Unconfined, in the fields and in
/// the deprecated per-container annotations.
fn app_armor_profile(pod: &PodView<'_>, _v: u64) -> Option<Violation> {
    let allowed_type = |t: &str| matches!(t, "RuntimeDefault" | "Localhost");
    let mut setters = Vec::new();
    let mut bad_values = BTreeSet::new();
    let profile = &pod.pod_security_context()["appArmorProfile"];
    if !profile.is_null() {
        let t = profile["type"].as_str().unwrap_or("");
        if !allowed_type(t) {
            setters.push("pod".to_owned());
            bad_values.insert(t.to_owned());
        }
    }
    let mut bad_containers = Vec::new();
    for c in pod.containers() {
        let profile = &c["securityContext"]["appArmorProfile"];
        if !profile.is_null() {
            let t = profile["type"].as_str().unwrap_or("");
            if !allowed_type(t) {
                bad_containers.push(container_name(c));
                bad_values.insert(t.to_owned());
            }
        }
    }
    if !bad_containers.is_empty() {
        setters.push(containers_phrase(&bad_containers));
    }
    let mut bad_annotations: Vec<String> = pod.metadata["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with(APPARMOR_ANNOTATION_PREFIX))
        .filter_map(|(k, v)| {
            let v = v.as_str().unwrap_or("");
            let allowed = v.is_empty() || v == "runtime/default" || v.starts_with("localhost/");
            (!allowed).then(|| format!("{k}={}", go_quote(v)))
        })
        .collect();
    let mut bad_values: Vec<String> = bad_values.into_iter().collect();
    if !bad_annotations.is_empty() {
        bad_annotations.sort();
        setters.push(pluralize("annotation", "annotations", bad_annotations.len()).to_owned());
        bad_values.extend(bad_annotations);
    }
    if setters.is_empty() {
        return None;
    }
    Violation::new(
        pluralize(
            "forbidden AppArmor profile",
            "forbidden AppArmor profiles",
            bad_values.len(),
        ),
        format!(
            "{} must not set AppArmor profile type to {}",
            setters.join(" and "),
            join_quote(&bad_values)
        ),
    )
}

/// The capabilities a container runtime grants by default.
const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// Capabilities may only be added from the default set.
fn capabilities_baseline(pod: &PodView<'_>, _v: u64) -> Option<Violation> {
    let mut bad_containers = Vec::new();
    let mut non_default = BTreeSet::new();
    for c in pod.containers() {
        let mut valid = true;
        for cap in strings(&c["securityContext"]["capabilities"]["add"]) {
            if !BASELINE_CAPABILITIES.contains(&cap) {
                valid = false;
                non_default.insert(cap);
            }
        }
        if !valid {
            bad_containers.push(container_name(c));
        }
    }
    if bad_containers.is_empty() {
        return None;
    }
    Violation::new(
        "non-default capabilities",
        format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&bad_containers),
            join_quote(&non_default)
        ),
    )
}

/// No host network, PID or IPC namespace.
fn host_namespaces(pod: &PodView<'_>, _v: u64) -> Option<Violation> {
    let used: Vec<String> = ["hostNetwork", "hostPID", "hostIPC"]
        .into_iter()
        .filter(|k| pod.spec[*k] == true)
        .map(|k| format!("{k}=true"))
        .collect();
    if used.is_empty() {
        return None;
    }
    Violation::new("host namespaces", used.join(", "))
}

fn volumes<'a>(pod: &PodView<'a>) -> impl Iterator<Item = &'a Value> {
    pod.spec["volumes"].as_array().into_iter().flatten()
}

/// No hostPath volumes.
fn host_path_volumes(pod: &PodView<'_>, _v: u64) -> Option<Violation> {
    let names: Vec<&str> = volumes(pod)
        .filter(|v| !v["hostPath"].is_null())
        .map(|v| v["name"].as_str().unwrap_or(""))
        .collect();
    if names.is_empty() {
        return None;
    }
    Violation::new(
        "hostPath volumes",
        format!(
            "{} {}",
            pluralize("volume", "volumes", names.len()),
            join_quote(&names)
        ),
    )
}

/// No host ports.
fn host_ports(pod: &PodView<'_>, _v: u64) -> Option<Violation> {
    let mut bad_containers = Vec::new();
    // Sorted as strings, as upstream's set of strings.
    let mut ports = BTreeSet::new();
    for c in pod.containers() {
        let mut valid = true;
        for p in c["ports"].as_array().into_iter().flatten() {
            let host_port = p["hostPort"].as_i64().unwrap_or(0);
            if host_port != 0 {
                valid = false;
                ports.insert(host_port.to_string());
            }
        }
        if !valid {
            bad_containers.push(container_name(c));
        }
    }
    if bad_containers.is_empty() {
        return None;
    }
    Violation::new(
        "hostPort",
        format!(
            "{} {} {} {}",
            containers_phrase(&bad_containers),
            pluralize("uses", "use", bad_containers.len()),
            pluralize("hostPort", "hostPorts", ports.len()),
            ports.into_iter().collect::<Vec<_>>().join(", ")
        ),
    )
}

/// No privileged containers.
fn privileged(pod: &PodView<'_>, _v: u64) -> Option<Violation> {
    let bad: Vec<&str> = pod
        .containers()
        .filter(|c| c["securityContext"]["privileged"] == true)
        .map(container_name)
        .collect();
    if bad.is_empty() {
        return None;
    }
    Violation::new(
        "privileged",
        format!(
            "{} must not set securityContext.privileged=true",
            containers_phrase(&bad)
        ),
    )
}

/// The default /proc mask only. (Upstream relaxes this for pods in user namespaces only behind
/// its alpha UserNamespacesPodSecurityStandards gate, off by default; r8s does not.)
fn proc_mount(pod: &PodView<'_>, _v: u64) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut types = BTreeSet::new();
    for c in pod.containers() {
        if let Some(t) = c["securityContext"]["procMount"].as_str() {
            if t != "Default" {
                bad.push(container_name(c));
                types.insert(t);
            }
        }
    }
    if bad.is_empty() {
        return None;
    }
    Violation::new(
        "procMount",
        format!(
            "{} must not set securityContext.procMount to {}",
            containers_phrase(&bad),
            join_quote(&types)
        ),
    )
}

/// SELinux: only the container types, no user or role.
fn se_linux_options(pod: &PodView<'_>, v: u64) -> Option<Violation> {
    let allowed_type = |t: &str| {
        matches!(t, "" | "container_t" | "container_init_t" | "container_kvm_t")
            || (v >= 31 && t == "container_engine_t")
    };
    let mut bad_types = BTreeSet::new();
    let (mut set_user, mut set_role) = (false, false);
    let mut valid = |opts: &Value| {
        let mut ok = true;
        let t = opts["type"].as_str().unwrap_or("");
        if !allowed_type(t) {
            ok = false;
            bad_types.insert(t.to_owned());
        }
        if !opts["user"].as_str().unwrap_or("").is_empty() {
            ok = false;
            set_user = true;
        }
        if !opts["role"].as_str().unwrap_or("").is_empty() {
            ok = false;
            set_role = true;
        }
        ok
    };
    let mut setters = Vec::new();
    let opts = &pod.pod_security_context()["seLinuxOptions"];
    if !opts.is_null() && !valid(opts) {
        setters.push("pod".to_owned());
    }
    let mut bad_containers = Vec::new();
    for c in pod.containers() {
        let opts = &c["securityContext"]["seLinuxOptions"];
        if !opts.is_null() && !valid(opts) {
            bad_containers.push(container_name(c));
        }
    }
    if !bad_containers.is_empty() {
        setters.push(containers_phrase(&bad_containers));
    }
    if setters.is_empty() {
        return None;
    }
    let mut data = Vec::new();
    if !bad_types.is_empty() {
        data.push(format!(
            "{} {}",
            pluralize("type", "types", bad_types.len()),
            join_quote(&bad_types)
        ));
    }
    if set_user {
        data.push("user may not be set".to_owned());
    }
    if set_role {
        data.push("role may not be set".to_owned());
    }
    Violation::new(
        "seLinuxOptions",
        format!(
            "{} set forbidden securityContext.seLinuxOptions: {}",
            setters.join(" and "),
            data.join("; ")
        ),
    )
}

fn valid_seccomp_type(t: &str) -> bool {
    matches!(t, "RuntimeDefault" | "Localhost")
}

const SECCOMP_POD_ANNOTATION: &str = "seccomp.security.alpha.kubernetes.io/pod";
const SECCOMP_CONTAINER_ANNOTATION_PREFIX: &str = "container.seccomp.security.alpha.kubernetes.io/";

/// Seccomp, if set, is RuntimeDefault or Localhost (before 1.19: the alpha annotations are
/// runtime/default, docker/default or localhost/*).
fn seccomp_profile_baseline(pod: &PodView<'_>, v: u64) -> Option<Violation> {
    if v < 19 {
        let valid = |s: &str| s == "runtime/default" || s == "docker/default" || s.starts_with("localhost/");
        let mut forbidden = BTreeSet::new();
        if let Some(val) = pod.annotation(SECCOMP_POD_ANNOTATION) {
            if !valid(val) {
                forbidden.insert(format!("{SECCOMP_POD_ANNOTATION}={}", go_quote(val)));
            }
        }
        for c in pod.containers() {
            let key = format!("{SECCOMP_CONTAINER_ANNOTATION_PREFIX}{}", container_name(c));
            if let Some(val) = pod.annotation(&key) {
                if !valid(val) {
                    forbidden.insert(format!("{key}={}", go_quote(val)));
                }
            }
        }
        if forbidden.is_empty() {
            return None;
        }
        return Violation::new(
            "seccompProfile",
            format!(
                "forbidden {} {}",
                pluralize("annotation", "annotations", forbidden.len()),
                forbidden.into_iter().collect::<Vec<_>>().join(", ")
            ),
        );
    }
    let mut setters = Vec::new();
    let mut bad_values = BTreeSet::new();
    let profile = &pod.pod_security_context()["seccompProfile"];
    if !profile.is_null() {
        let t = profile["type"].as_str().unwrap_or("");
        if !valid_seccomp_type(t) {
            setters.push("pod".to_owned());
            bad_values.insert(t);
        }
    }
    let mut bad_containers = Vec::new();
    for c in pod.containers() {
        let profile = &c["securityContext"]["seccompProfile"];
        if !profile.is_null() {
            let t = profile["type"].as_str().unwrap_or("");
            if !valid_seccomp_type(t) {
                bad_containers.push(container_name(c));
                bad_values.insert(t);
            }
        }
    }
    if !bad_containers.is_empty() {
        setters.push(containers_phrase(&bad_containers));
    }
    if setters.is_empty() {
        return None;
    }
    Violation::new(
        "seccompProfile",
        format!(
            "{} must not set securityContext.seccompProfile.type to {}",
            setters.join(" and "),
            join_quote(&bad_values)
        ),
    )
}

/// Only the namespaced, isolated ("safe") sysctls, as the list stood in each version.
fn sysctls(pod: &PodView<'_>, v: u64) -> Option<Violation> {
    let allowed = |name: &str| {
        matches!(
            name,
            "kernel.shm_rmid_forced"
                | "net.ipv4.ip_local_port_range"
                | "net.ipv4.tcp_syncookies"
                | "net.ipv4.ping_group_range"
                | "net.ipv4.ip_unprivileged_port_start"
        ) || (v >= 27 && name == "net.ipv4.ip_local_reserved_ports")
            || (v >= 29
                && matches!(
                    name,
                    "net.ipv4.tcp_keepalive_time"
                        | "net.ipv4.tcp_fin_timeout"
                        | "net.ipv4.tcp_keepalive_intvl"
                        | "net.ipv4.tcp_keepalive_probes"
                ))
            || (v >= 32 && matches!(name, "net.ipv4.tcp_rmem" | "net.ipv4.tcp_wmem"))
    };
    let forbidden: Vec<&str> = pod.pod_security_context()["sysctls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| s["name"].as_str().unwrap_or(""))
        .filter(|n| !allowed(n))
        .collect();
    if forbidden.is_empty() {
        return None;
    }
    Violation::new("forbidden sysctls", forbidden.join(", "))
}

/// No Windows HostProcess containers.
fn windows_host_process(pod: &PodView<'_>, _v: u64) -> Option<Violation> {
    let host_process = |sc: &Value| sc["windowsOptions"]["hostProcess"] == true;
    let bad: Vec<&str> = pod
        .containers()
        .filter(|c| host_process(&c["securityContext"]))
        .map(container_name)
        .collect();
    let mut setters = Vec::new();
    if host_process(pod.pod_security_context()) {
        setters.push("pod".to_owned());
    }
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    if setters.is_empty() {
        return None;
    }
    Violation::new(
        "hostProcess",
        format!(
            "{} must not set securityContext.windowsOptions.hostProcess=true",
            setters.join(" and ")
        ),
    )
}

// Restricted -------------------------------------------------------------------------------

/// Windows pods are exempt from the Linux-only restricted checks from 1.25 (the API refuses
/// those fields on them).
fn windows_exempt(pod: &PodView<'_>, v: u64) -> bool {
    v >= 25 && pod.is_windows()
}

/// allowPrivilegeEscalation must be false.
fn allow_privilege_escalation(pod: &PodView<'_>, v: u64) -> Option<Violation> {
    if windows_exempt(pod, v) {
        return None;
    }
    let bad: Vec<&str> = pod
        .containers()
        .filter(|c| c["securityContext"]["allowPrivilegeEscalation"] != false)
        .map(container_name)
        .collect();
    if bad.is_empty() {
        return None;
    }
    Violation::new(
        "allowPrivilegeEscalation != false",
        format!(
            "{} must set securityContext.allowPrivilegeEscalation=false",
            containers_phrase(&bad)
        ),
    )
}

/// Containers drop ALL capabilities and add back NET_BIND_SERVICE at most.
fn capabilities_restricted(pod: &PodView<'_>, v: u64) -> Option<Violation> {
    if windows_exempt(pod, v) {
        return None;
    }
    let mut missing_drop_all = Vec::new();
    let mut adding_forbidden = Vec::new();
    let mut forbidden = BTreeSet::new();
    for c in pod.containers() {
        let caps = &c["securityContext"]["capabilities"];
        if caps.is_null() {
            missing_drop_all.push(container_name(c));
            continue;
        }
        if !strings(&caps["drop"]).any(|d| d == "ALL") {
            missing_drop_all.push(container_name(c));
        }
        let mut added_forbidden = false;
        for cap in strings(&caps["add"]) {
            if cap != "NET_BIND_SERVICE" {
                added_forbidden = true;
                forbidden.insert(cap);
            }
        }
        if added_forbidden {
            adding_forbidden.push(container_name(c));
        }
    }
    let mut details = Vec::new();
    if !missing_drop_all.is_empty() {
        details.push(format!(
            "{} must set securityContext.capabilities.drop=[\"ALL\"]",
            containers_phrase(&missing_drop_all)
        ));
    }
    if !adding_forbidden.is_empty() {
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&adding_forbidden),
            join_quote(&forbidden)
        ));
    }
    if details.is_empty() {
        return None;
    }
    Violation::new("unrestricted capabilities", details.join("; "))
}

/// Volume sources the restricted level allows.
const ALLOWED_VOLUME_SOURCES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "image",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// Volume sources the restricted level names when refusing them (anything else is "unknown").
const RESTRICTED_VOLUME_SOURCES: &[&str] = &[
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "nfs",
    "iscsi",
    "glusterfs",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "fc",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "storageos",
];

/// Only the allow-listed volume types.
fn restricted_volumes(pod: &PodView<'_>, _v: u64) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut bad_types = BTreeSet::new();
    for vol in volumes(pod) {
        let has = |k: &&str| !vol[*k].is_null();
        if ALLOWED_VOLUME_SOURCES.iter().any(has) {
            continue;
        }
        bad.push(vol["name"].as_str().unwrap_or(""));
        bad_types.insert(
            RESTRICTED_VOLUME_SOURCES
                .iter()
                .copied()
                .find(|k| has(k))
                .unwrap_or("unknown"),
        );
    }
    if bad.is_empty() {
        return None;
    }
    Violation::new(
        "restricted volume types",
        format!(
            "{} {} {} {} {}",
            pluralize("volume", "volumes", bad.len()),
            join_quote(&bad),
            pluralize("uses", "use", bad.len()),
            pluralize(
                "restricted volume type",
                "restricted volume types",
                bad_types.len()
            ),
            join_quote(&bad_types)
        ),
    )
}

/// runAsNonRoot=true, on the pod or on every container. (Upstream's relaxation for pods in user
/// namespaces sits behind an alpha gate, off by default; r8s does not relax it.)
fn run_as_non_root(pod: &PodView<'_>, _v: u64) -> Option<Violation> {
    let mut setters = Vec::new();
    let mut pod_non_root = false;
    match pod.pod_security_context()["runAsNonRoot"].as_bool() {
        Some(false) => setters.push("pod".to_owned()),
        Some(true) => pod_non_root = true,
        None => {}
    }
    let mut explicitly_bad = Vec::new();
    let mut implicitly_bad = Vec::new();
    for c in pod.containers() {
        match c["securityContext"]["runAsNonRoot"].as_bool() {
            Some(false) => explicitly_bad.push(container_name(c)),
            Some(true) => {}
            None if !pod_non_root => implicitly_bad.push(container_name(c)),
            None => {}
        }
    }
    if !explicitly_bad.is_empty() {
        setters.push(containers_phrase(&explicitly_bad));
    }
    if !setters.is_empty() {
        return Violation::new(
            "runAsNonRoot != true",
            format!(
                "{} must not set securityContext.runAsNonRoot=false",
                setters.join(" and ")
            ),
        );
    }
    if !implicitly_bad.is_empty() {
        return Violation::new(
            "runAsNonRoot != true",
            format!(
                "pod or {} must set securityContext.runAsNonRoot=true",
                containers_phrase(&implicitly_bad)
            ),
        );
    }
    None
}

/// No runAsUser=0.
fn run_as_user(pod: &PodView<'_>, _v: u64) -> Option<Violation> {
    let root = |sc: &Value| sc["runAsUser"].as_i64() == Some(0);
    let mut setters = Vec::new();
    if root(pod.pod_security_context()) {
        setters.push("pod".to_owned());
    }
    let bad: Vec<&str> = pod
        .containers()
        .filter(|c| root(&c["securityContext"]))
        .map(container_name)
        .collect();
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    if setters.is_empty() {
        return None;
    }
    Violation::new(
        "runAsUser=0",
        format!("{} must not set runAsUser=0", setters.join(" and ")),
    )
}

/// Seccomp must be RuntimeDefault or Localhost, on the pod or on every container.
fn seccomp_profile_restricted(pod: &PodView<'_>, v: u64) -> Option<Violation> {
    if windows_exempt(pod, v) {
        return None;
    }
    let mut setters = Vec::new();
    let mut bad_values = BTreeSet::new();
    let mut pod_set = false;
    let profile = &pod.pod_security_context()["seccompProfile"];
    if !profile.is_null() {
        let t = profile["type"].as_str().unwrap_or("");
        if valid_seccomp_type(t) {
            pod_set = true;
        } else {
            setters.push("pod".to_owned());
            bad_values.insert(t);
        }
    }
    let mut explicitly_bad = Vec::new();
    let mut implicitly_bad = Vec::new();
    for c in pod.containers() {
        let profile = &c["securityContext"]["seccompProfile"];
        if !profile.is_null() {
            let t = profile["type"].as_str().unwrap_or("");
            if !valid_seccomp_type(t) {
                explicitly_bad.push(container_name(c));
                bad_values.insert(t);
            }
        } else if !pod_set {
            implicitly_bad.push(container_name(c));
        }
    }
    if !explicitly_bad.is_empty() {
        setters.push(containers_phrase(&explicitly_bad));
    }
    if !setters.is_empty() {
        return Violation::new(
            "seccompProfile",
            format!(
                "{} must not set securityContext.seccompProfile.type to {}",
                setters.join(" and "),
                join_quote(&bad_values)
            ),
        );
    }
    if !implicitly_bad.is_empty() {
        return Violation::new(
            "seccompProfile",
            format!(
                "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
                containers_phrase(&implicitly_bad)
            ),
        );
    }
    None
}

#[cfg(test)]
pub(super) mod tests {
    use serde_json::json;

    use super::super::Version;
    use super::*;

    fn lv(s: &str) -> LevelVersion {
        let (level, version) = s.split_once(':').unwrap();
        LevelVersion {
            level: Level::parse(level).unwrap(),
            version: Version::parse(version).unwrap(),
        }
    }

    /// The message for `pod` at `level:version` ("" when it passes).
    fn check(level_version: &str, pod: &Value) -> String {
        describe(&evaluate(lv(level_version), &PodView::of(pod)))
    }

    fn one(f: CheckFn, pod: &Value) -> Option<(String, String)> {
        f(&PodView::of(pod), u64::MAX).map(|v| (v.reason, v.detail))
    }

    fn with(reason: &str, detail: &str) -> Option<(String, String)> {
        Some((reason.to_owned(), detail.to_owned()))
    }

    /// A pod of containers named `names`, each with `container_sc` as its securityContext.
    fn pod_of(names: &[&str], container_sc: Value) -> Value {
        let containers: Vec<Value> = names
            .iter()
            .map(|n| json!({"name": n, "image": "nginx", "securityContext": container_sc}))
            .collect();
        json!({"metadata": {"name": "p"}, "spec": {"containers": containers}})
    }

    /// A pod that passes the restricted level.
    pub(in crate::admission::pod_security) fn restricted_pod() -> Value {
        json!({
            "metadata": {"name": "p"},
            "spec": {
                "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{
                    "name": "c", "image": "nginx",
                    "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}
                }]
            }
        })
    }

    #[test]
    fn check_order_is_upstreams() {
        let (baseline, restricted): (Vec<&Check>, Vec<&Check>) =
            CHECKS.iter().partition(|c| c.level == Level::Baseline);
        assert_eq!(baseline.len() + restricted.len(), CHECKS.len());
        assert!(CHECKS
            .iter()
            .take(baseline.len())
            .all(|c| c.level == Level::Baseline));
        for level in [baseline, restricted] {
            let ids: Vec<&str> = level.iter().map(|c| c.id).collect();
            let mut sorted = ids.clone();
            sorted.sort();
            assert_eq!(ids, sorted);
        }
    }

    #[test]
    fn default_pod_violates_restricted_only() {
        let pod =
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
        assert_eq!(check("privileged:latest", &pod), "");
        assert_eq!(check("baseline:latest", &pod), "");
        assert_eq!(
            check("restricted:latest", &pod),
            "allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false), \
             unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"]), \
             runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true), \
             seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
        );
        assert_eq!(check("restricted:latest", &restricted_pod()), "");
        assert_eq!(reasons(&evaluate(lv("restricted:latest"), &PodView::of(&pod))),
            "allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile");
    }

    #[test]
    fn several_containers_are_named_in_the_plural() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {
            "initContainers": [{"name": "init", "image": "busybox"}],
            "containers": [{"name": "a", "image": "nginx", "securityContext": {"privileged": true}},
                           {"name": "b", "image": "nginx", "securityContext": {"privileged": true}}]
        }});
        assert_eq!(
            check("baseline:latest", &pod),
            "privileged (containers \"a\", \"b\" must not set securityContext.privileged=true)"
        );
        assert_eq!(
            check("restricted:latest", &pod),
            "privileged (containers \"a\", \"b\" must not set securityContext.privileged=true), \
             allowPrivilegeEscalation != false (containers \"init\", \"a\", \"b\" must set securityContext.allowPrivilegeEscalation=false), \
             unrestricted capabilities (containers \"init\", \"a\", \"b\" must set securityContext.capabilities.drop=[\"ALL\"]), \
             runAsNonRoot != true (pod or containers \"init\", \"a\", \"b\" must set securityContext.runAsNonRoot=true), \
             seccompProfile (pod or containers \"init\", \"a\", \"b\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
        );
    }

    #[test]
    fn privileged_and_host_process() {
        assert_eq!(
            one(privileged, &pod_of(&["c"], json!({"privileged": false}))),
            None
        );
        assert_eq!(
            one(privileged, &pod_of(&["c"], json!({"privileged": true}))),
            with(
                "privileged",
                "container \"c\" must not set securityContext.privileged=true"
            )
        );
        assert_eq!(
            one(
                windows_host_process,
                &pod_of(&["c"], json!({"windowsOptions": {"hostProcess": false}}))
            ),
            None
        );
        let mut pod = pod_of(&["a", "b"], json!({"windowsOptions": {"hostProcess": true}}));
        pod["spec"]["securityContext"] = json!({"windowsOptions": {"hostProcess": true}});
        assert_eq!(
            one(windows_host_process, &pod),
            with("hostProcess", "pod and containers \"a\", \"b\" must not set securityContext.windowsOptions.hostProcess=true")
        );
    }

    #[test]
    fn host_namespaces_paths_and_ports() {
        let mut pod = pod_of(&["c"], json!({}));
        assert_eq!(one(host_namespaces, &pod), None);
        pod["spec"]["hostNetwork"] = json!(true);
        pod["spec"]["hostIPC"] = json!(true);
        pod["spec"]["hostPID"] = json!(false);
        assert_eq!(
            one(host_namespaces, &pod),
            with("host namespaces", "hostNetwork=true, hostIPC=true")
        );

        pod["spec"]["volumes"] = json!([{"name": "e", "emptyDir": {}}]);
        assert_eq!(one(host_path_volumes, &pod), None);
        pod["spec"]["volumes"] =
            json!([{"name": "e", "emptyDir": {}}, {"name": "h", "hostPath": {"path": "/"}}]);
        assert_eq!(
            one(host_path_volumes, &pod),
            with("hostPath volumes", "volume \"h\"")
        );

        pod["spec"]["containers"] = json!([
            {"name": "a", "ports": [{"containerPort": 80}]},
            {"name": "b", "ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 443, "hostPort": 443}]},
            {"name": "c", "ports": [{"containerPort": 80, "hostPort": 0}]},
        ]);
        assert_eq!(
            one(host_ports, &pod),
            with("hostPort", "container \"b\" uses hostPorts 443, 8080")
        );
        pod["spec"]["containers"][0]["ports"][0]["hostPort"] = json!(10);
        assert_eq!(
            one(host_ports, &pod),
            with("hostPort", "containers \"a\", \"b\" use hostPorts 10, 443, 8080")
        );
    }

    #[test]
    fn baseline_capabilities() {
        assert_eq!(
            one(
                capabilities_baseline,
                &pod_of(
                    &["c"],
                    json!({"capabilities": {"add": ["CHOWN", "NET_BIND_SERVICE"]}})
                )
            ),
            None
        );
        let mut pod = pod_of(
            &["a", "b"],
            json!({"capabilities": {"add": ["SYS_ADMIN", "NET_RAW", "CHOWN"]}}),
        );
        pod["spec"]["containers"][1]["securityContext"]["capabilities"]["add"] = json!(["NET_ADMIN"]);
        assert_eq!(
            one(capabilities_baseline, &pod),
            with(
                "non-default capabilities",
                "containers \"a\", \"b\" must not include \"NET_ADMIN\", \"NET_RAW\", \"SYS_ADMIN\" in securityContext.capabilities.add"
            )
        );
        // The restricted level replaces this check with its own.
        assert_eq!(
            check("restricted:latest", &{
                let mut p = restricted_pod();
                p["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] = json!(["SYS_ADMIN"]);
                p
            }),
            "unrestricted capabilities (container \"c\" must not include \"SYS_ADMIN\" in securityContext.capabilities.add)"
        );
    }

    #[test]
    fn app_armor() {
        let mut pod = pod_of(
            &["a", "b"],
            json!({"appArmorProfile": {"type": "RuntimeDefault"}}),
        );
        pod["spec"]["securityContext"] =
            json!({"appArmorProfile": {"type": "Localhost", "localhostProfile": "x"}});
        pod["metadata"]["annotations"] = json!({
            "container.apparmor.security.beta.kubernetes.io/a": "runtime/default",
            "container.apparmor.security.beta.kubernetes.io/b": "localhost/foo",
            "container.apparmor.security.beta.kubernetes.io/c": "",
        });
        assert_eq!(one(app_armor_profile, &pod), None);
        pod["spec"]["securityContext"]["appArmorProfile"]["type"] = json!("Unconfined");
        assert_eq!(
            one(app_armor_profile, &pod),
            with(
                "forbidden AppArmor profile",
                "pod must not set AppArmor profile type to \"Unconfined\""
            )
        );
        pod["spec"]["containers"][1]["securityContext"]["appArmorProfile"]["type"] = json!("Unconfined");
        pod["metadata"]["annotations"]["container.apparmor.security.beta.kubernetes.io/f"] = json!("unknown");
        pod["metadata"]["annotations"]["container.apparmor.security.beta.kubernetes.io/e"] =
            json!("unconfined");
        assert_eq!(
            one(app_armor_profile, &pod),
            with(
                "forbidden AppArmor profiles",
                "pod and container \"b\" and annotations must not set AppArmor profile type to \"Unconfined\", \
                 \"container.apparmor.security.beta.kubernetes.io/e=\"unconfined\"\", \
                 \"container.apparmor.security.beta.kubernetes.io/f=\"unknown\"\""
            )
        );
    }

    #[test]
    fn selinux_options() {
        let mut pod = pod_of(
            &["e", "f"],
            json!({"seLinuxOptions": {"type": "container_t", "level": "s0:c1"}}),
        );
        assert_eq!(one(se_linux_options, &pod), None);
        pod["spec"]["securityContext"] = json!({"seLinuxOptions": {"type": "foo", "user": "u", "role": "r"}});
        pod["spec"]["containers"][0]["securityContext"]["seLinuxOptions"]["type"] = json!("bar");
        pod["spec"]["containers"][1]["securityContext"]["seLinuxOptions"]["type"] = json!("bar");
        assert_eq!(
            one(se_linux_options, &pod),
            with(
                "seLinuxOptions",
                "pod and containers \"e\", \"f\" set forbidden securityContext.seLinuxOptions: types \"bar\", \"foo\"; user may not be set; role may not be set"
            )
        );
        // container_engine_t is allowed from 1.31.
        let pod = pod_of(&["c"], json!({"seLinuxOptions": {"type": "container_engine_t"}}));
        assert_eq!(check("baseline:latest", &pod), "");
        assert_eq!(
            check("baseline:v1.30", &pod),
            "seLinuxOptions (container \"c\" set forbidden securityContext.seLinuxOptions: type \"container_engine_t\")"
        );
    }

    #[test]
    fn proc_mount_and_sysctls() {
        assert_eq!(
            one(proc_mount, &pod_of(&["c"], json!({"procMount": "Default"}))),
            None
        );
        assert_eq!(
            one(proc_mount, &pod_of(&["a", "b"], json!({"procMount": "Unmasked"}))),
            with(
                "procMount",
                "containers \"a\", \"b\" must not set securityContext.procMount to \"Unmasked\""
            )
        );
        let mut pod = pod_of(&["c"], json!({}));
        pod["spec"]["securityContext"] = json!({"sysctls": [
            {"name": "net.ipv4.tcp_syncookies", "value": "1"},
            {"name": "kernel.msgmax", "value": "1"},
            {"name": "net.ipv4.tcp_rmem", "value": "4096 87380 6291456"},
            {"name": "vm.swappiness", "value": "1"},
        ]});
        assert_eq!(
            check("baseline:latest", &pod),
            "forbidden sysctls (kernel.msgmax, vm.swappiness)"
        );
        // tcp_rmem is safe from 1.32 on.
        assert_eq!(
            check("baseline:v1.31", &pod),
            "forbidden sysctls (kernel.msgmax, net.ipv4.tcp_rmem, vm.swappiness)"
        );
    }

    #[test]
    fn baseline_seccomp() {
        let mut pod = pod_of(&["a", "b"], json!({"seccompProfile": {"type": "Unconfined"}}));
        pod["spec"]["securityContext"] = json!({"seccompProfile": {"type": "RuntimeDefault"}});
        assert_eq!(
            check("baseline:latest", &pod),
            "seccompProfile (containers \"a\", \"b\" must not set securityContext.seccompProfile.type to \"Unconfined\")"
        );
        pod["spec"]["securityContext"]["seccompProfile"]["type"] = json!("Unconfined");
        pod["spec"]["containers"][1]["securityContext"]["seccompProfile"]["type"] = json!("Localhost");
        assert_eq!(
            check("baseline:latest", &pod),
            "seccompProfile (pod and container \"a\" must not set securityContext.seccompProfile.type to \"Unconfined\")"
        );
        // Before 1.19 the alpha annotations were checked instead.
        let mut pod = pod_of(&["c"], json!({}));
        pod["metadata"]["annotations"] = json!({
            "seccomp.security.alpha.kubernetes.io/pod": "unconfined",
            "container.seccomp.security.alpha.kubernetes.io/c": "runtime/default",
        });
        assert_eq!(check("baseline:latest", &pod), "");
        assert_eq!(
            check("baseline:v1.18", &pod),
            "seccompProfile (forbidden annotation seccomp.security.alpha.kubernetes.io/pod=\"unconfined\")"
        );
    }

    #[test]
    fn restricted_privilege_escalation_and_capabilities() {
        let ok = json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}});
        assert_eq!(one(allow_privilege_escalation, &pod_of(&["c"], ok.clone())), None);
        assert_eq!(one(capabilities_restricted, &pod_of(&["c"], ok)), None);
        assert_eq!(
            one(
                allow_privilege_escalation,
                &pod_of(&["a", "b"], json!({"allowPrivilegeEscalation": true}))
            ),
            with(
                "allowPrivilegeEscalation != false",
                "containers \"a\", \"b\" must set securityContext.allowPrivilegeEscalation=false"
            )
        );
        let mut pod = pod_of(
            &["a", "b", "c"],
            json!({"capabilities": {"drop": ["NET_RAW"], "add": ["SYS_ADMIN"]}}),
        );
        pod["spec"]["containers"][1]["securityContext"] = json!({});
        pod["spec"]["containers"][2]["securityContext"]["capabilities"]["drop"] = json!(["ALL"]);
        assert_eq!(
            one(capabilities_restricted, &pod),
            with(
                "unrestricted capabilities",
                "containers \"a\", \"b\" must set securityContext.capabilities.drop=[\"ALL\"]; \
                 containers \"a\", \"c\" must not include \"SYS_ADMIN\" in securityContext.capabilities.add"
            )
        );
    }

    #[test]
    fn restricted_run_as() {
        let mut pod = pod_of(&["a", "b"], json!({"runAsNonRoot": true}));
        assert_eq!(one(run_as_non_root, &pod), None);
        pod["spec"]["containers"][1]["securityContext"] = json!({});
        assert_eq!(
            one(run_as_non_root, &pod),
            with(
                "runAsNonRoot != true",
                "pod or container \"b\" must set securityContext.runAsNonRoot=true"
            )
        );
        pod["spec"]["securityContext"] = json!({"runAsNonRoot": true});
        assert_eq!(one(run_as_non_root, &pod), None);
        pod["spec"]["containers"][0]["securityContext"]["runAsNonRoot"] = json!(false);
        assert_eq!(
            one(run_as_non_root, &pod),
            with(
                "runAsNonRoot != true",
                "container \"a\" must not set securityContext.runAsNonRoot=false"
            )
        );
        pod["spec"]["securityContext"]["runAsNonRoot"] = json!(false);
        assert_eq!(
            one(run_as_non_root, &pod),
            with(
                "runAsNonRoot != true",
                "pod and container \"a\" must not set securityContext.runAsNonRoot=false"
            )
        );

        let mut pod = pod_of(&["a", "b"], json!({"runAsUser": 1000}));
        assert_eq!(one(run_as_user, &pod), None);
        pod["spec"]["securityContext"] = json!({"runAsUser": 0});
        pod["spec"]["containers"][1]["securityContext"]["runAsUser"] = json!(0);
        assert_eq!(
            one(run_as_user, &pod),
            with("runAsUser=0", "pod and container \"b\" must not set runAsUser=0")
        );
        // runAsUser is checked from 1.23.
        let mut pod = restricted_pod();
        pod["spec"]["securityContext"]["runAsUser"] = json!(0);
        assert_eq!(
            check("restricted:v1.23", &pod),
            "runAsUser=0 (pod must not set runAsUser=0)"
        );
        assert_eq!(check("restricted:v1.22", &pod), "");
    }

    #[test]
    fn restricted_seccomp() {
        let mut pod = pod_of(
            &["a", "b"],
            json!({"seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}}),
        );
        assert_eq!(one(seccomp_profile_restricted, &pod), None);
        pod["spec"]["containers"][1]["securityContext"] = json!({});
        assert_eq!(
            one(seccomp_profile_restricted, &pod),
            with(
                "seccompProfile",
                "pod or container \"b\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\""
            )
        );
        pod["spec"]["securityContext"] = json!({"seccompProfile": {"type": "RuntimeDefault"}});
        assert_eq!(one(seccomp_profile_restricted, &pod), None);
        pod["spec"]["containers"][0]["securityContext"]["seccompProfile"]["type"] = json!("Unconfined");
        assert_eq!(
            one(seccomp_profile_restricted, &pod),
            with(
                "seccompProfile",
                "container \"a\" must not set securityContext.seccompProfile.type to \"Unconfined\""
            )
        );
    }

    #[test]
    fn restricted_volumes_allow_list() {
        let mut pod = restricted_pod();
        pod["spec"]["volumes"] = json!([
            {"name": "a", "configMap": {"name": "x"}}, {"name": "b", "secret": {"secretName": "x"}},
            {"name": "c", "emptyDir": {}}, {"name": "d", "projected": {"sources": []}},
            {"name": "e", "persistentVolumeClaim": {"claimName": "x"}}, {"name": "f", "downwardAPI": {}},
            {"name": "g", "csi": {"driver": "x"}}, {"name": "h", "ephemeral": {}}, {"name": "i", "image": {}},
        ]);
        assert_eq!(check("restricted:latest", &pod), "");
        pod["spec"]["volumes"] = json!([
            {"name": "c", "emptyDir": {}},
            {"name": "h", "hostPath": {"path": "/"}},
            {"name": "n", "nfs": {"server": "x", "path": "/"}},
            {"name": "u"},
        ]);
        // hostPathVolumes is replaced by restrictedVolumes in the restricted level.
        assert_eq!(
            check("restricted:latest", &pod),
            "restricted volume types (volumes \"h\", \"n\", \"u\" use restricted volume types \"hostPath\", \"nfs\", \"unknown\")"
        );
        assert_eq!(check("baseline:latest", &pod), "hostPath volumes (volume \"h\")");
    }

    #[test]
    fn windows_pods_are_exempt_from_linux_only_checks_from_1_25() {
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {
            "os": {"name": "windows"},
            "securityContext": {"runAsNonRoot": true},
            "containers": [{"name": "c", "image": "w"}]
        }});
        assert_eq!(check("restricted:latest", &pod), "");
        assert_eq!(
            check("restricted:v1.24", &pod),
            "allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false), \
             unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"]), \
             seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
        );
        // Before 1.22 the restricted level still used the baseline capability check.
        pod["spec"]["containers"][0]["securityContext"] = json!({"capabilities": {"add": ["SYS_ADMIN"]}});
        assert!(check("restricted:v1.21", &pod)
            .starts_with("non-default capabilities (container \"c\" must not include \"SYS_ADMIN\" in securityContext.capabilities.add)"));
    }
}
