//! A container's security in CRI terms, and the kubelet's security admission (upstream
//! `pkg/securitycontext`, `pkg/kubelet/kuberuntime/security_context.go` and `helpers.go`,
//! `pkg/security/apparmor`, the AppArmor admit handler of `pkg/kubelet/lifecycle`).
//!
//! The effective context is the pod's `securityContext` overridden field by field by the
//! container's; it becomes the `LinuxContainerSecurityContext` of CreateContainer: user, group
//! and supplemental groups (fsGroup first), capabilities, privileged, read-only root, no new
//! privileges, the masked and read-only /proc paths, seccomp, AppArmor, SELinux and the pod's
//! namespaces. `runAsNonRoot` is checked against the image's user before the container is made.

use std::path::Path;

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{AppArmorProfile, Container, Pod, SeccompProfile, SecurityContext};

/// The legacy per-container AppArmor annotation (`<prefix><container name>`).
pub const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";
const APPARMOR_RUNTIME_DEFAULT: &str = "runtime/default";
const APPARMOR_UNCONFINED: &str = "unconfined";
const APPARMOR_LOCALHOST_PREFIX: &str = "localhost/";

/// Paths the runtime hides (procMount Default), as upstream's `defaultMaskedPaths`.
pub const DEFAULT_MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// Paths the runtime mounts read-only (procMount Default), as upstream's `defaultReadonlyPaths`.
pub const DEFAULT_READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// The user an image runs as, from CRI ImageStatus (upstream `getImageUser`): a numeric uid,
/// or a user name that is not one; an image that says neither runs as root.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageUser {
    pub uid: Option<i64>,
    pub username: String,
}

impl ImageUser {
    pub fn of(image: Option<&cri::Image>) -> Self {
        match image {
            Some(i) if i.uid.is_some() => ImageUser {
                uid: i.uid.as_ref().map(|u| u.value),
                username: String::new(),
            },
            Some(i) if !i.username.is_empty() => ImageUser {
                uid: None,
                username: i.username.clone(),
            },
            _ => ImageUser {
                uid: Some(0),
                username: String::new(),
            },
        }
    }
}

/// The container's security context with the pod's filled in where the container says nothing
/// (upstream `DetermineEffectiveSecurityContext`): SELinux options, user, group and
/// runAsNonRoot come from the pod; the rest only from the container.
pub fn effective(pod: &Pod, c: &Container) -> SecurityContext {
    let mut sc = SecurityContext::default();
    if let Some(p) = pod.spec.as_ref().and_then(|s| s.security_context.as_ref()) {
        sc.se_linux_options = p.se_linux_options.clone();
        sc.windows_options = p.windows_options.clone();
        sc.run_as_user = p.run_as_user;
        sc.run_as_group = p.run_as_group;
        sc.run_as_non_root = p.run_as_non_root;
    }
    let Some(own) = &c.security_context else {
        return sc;
    };
    macro_rules! over {
        ($($f:ident),*) => { $( if own.$f.is_some() { sc.$f = own.$f.clone(); } )* };
    }
    over!(
        se_linux_options,
        windows_options,
        capabilities,
        privileged,
        run_as_user,
        run_as_group,
        run_as_non_root,
        read_only_root_filesystem,
        allow_privilege_escalation,
        proc_mount
    );
    sc
}

/// Whether the container gets `no_new_privs` (upstream `AddNoNewPrivileges`): only when
/// allowPrivilegeEscalation is explicitly false. A privileged container never does (API
/// validation forbids the combination; a privileged container may escalate by definition).
pub fn no_new_privs(sc: &SecurityContext) -> bool {
    sc.allow_privilege_escalation == Some(false) && sc.privileged != Some(true)
}

/// `pod_name_namespace(uid)`, upstream's `format.Pod`.
fn pod_desc(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.uid.as_deref().unwrap_or_default()
    )
}

/// runAsNonRoot against the user the container would run as (upstream `verifyRunAsNonRoot`);
/// the error is the container's CreateContainerConfigError message.
pub fn verify_run_as_non_root(pod: &Pod, c: &Container, image: &ImageUser) -> Result<(), String> {
    let sc = effective(pod, c);
    if sc.run_as_non_root != Some(true) {
        return Ok(());
    }
    let who = format!("(pod: \"{}\", container: {})", pod_desc(pod), c.name);
    if let Some(uid) = sc.run_as_user {
        if uid == 0 {
            return Err(format!("container's runAsUser breaks non-root policy {who}"));
        }
        return Ok(());
    }
    match image.uid {
        None if !image.username.is_empty() => Err(format!(
            "container has runAsNonRoot and image has non-numeric user ({}), cannot verify user is non-root {who}",
            image.username
        )),
        Some(0) => Err(format!("container has runAsNonRoot and image will run as root {who}")),
        Some(uid) if !(0..=i32::MAX as i64).contains(&uid) => Err(format!(
            "container has runAsNonRoot and image has an invalid user id ({uid}). (Must be 1-({})): must be between 0 and {}, inclusive {who}",
            i32::MAX,
            i32::MAX
        )),
        _ => Ok(()),
    }
}

/// The pod's namespaces (upstream `NamespacesForPod`): the node's when hostNetwork/hostPID/
/// hostIPC, the network and IPC of the pod otherwise, the PID namespace the pod's when
/// shareProcessNamespace and the container's own otherwise.
pub fn namespace_options(pod: &Pod) -> cri::NamespaceOption {
    let spec = pod.spec.clone().unwrap_or_default();
    let mode = |host: Option<bool>, pod_wide: bool| {
        if host.unwrap_or(false) {
            cri::NamespaceMode::Node as i32
        } else if pod_wide {
            cri::NamespaceMode::Pod as i32
        } else {
            cri::NamespaceMode::Container as i32
        }
    };
    cri::NamespaceOption {
        network: mode(spec.host_network, true),
        pid: mode(spec.host_pid, spec.share_process_namespace.unwrap_or(false)),
        ipc: mode(spec.host_ipc, true),
        ..Default::default()
    }
}

/// A seccomp profile field in CRI terms (upstream `fieldSeccompProfile`): Localhost profiles
/// are files under the kubelet's seccomp directory.
fn seccomp_of(p: &SeccompProfile, root: &Path) -> Result<cri::SecurityProfile, String> {
    Ok(match p.type_.as_str() {
        "RuntimeDefault" => cri::SecurityProfile {
            profile_type: cri::security_profile::ProfileType::RuntimeDefault as i32,
            localhost_ref: String::new(),
        },
        "Localhost" => match p.localhost_profile.as_deref().filter(|s| !s.is_empty()) {
            Some(name) => cri::SecurityProfile {
                profile_type: cri::security_profile::ProfileType::Localhost as i32,
                localhost_ref: root.join(name).display().to_string(),
            },
            None => return Err("localhostProfile must be set if seccompProfile type is Localhost.".into()),
        },
        _ => unconfined(),
    })
}

fn unconfined() -> cri::SecurityProfile {
    cri::SecurityProfile {
        profile_type: cri::security_profile::ProfileType::Unconfined as i32,
        localhost_ref: String::new(),
    }
}

/// The container's seccomp profile (upstream `getSeccompProfile`, without seccompDefault): the
/// container's field, else the pod's, else Unconfined.
pub fn seccomp_profile(pod: &Pod, c: &Container, root: &Path) -> Result<cri::SecurityProfile, String> {
    let own = c
        .security_context
        .as_ref()
        .and_then(|s| s.seccomp_profile.as_ref());
    let pods = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.seccomp_profile.as_ref());
    match own.or(pods) {
        Some(p) => seccomp_of(p, root),
        None => Ok(unconfined()),
    }
}

/// The legacy annotation of container `name`, as a profile (an invalid value is none).
fn apparmor_annotation(pod: &Pod, name: &str) -> Option<AppArmorProfile> {
    let v = pod
        .metadata
        .annotations
        .as_ref()?
        .get(&format!("{APPARMOR_ANNOTATION_PREFIX}{name}"))?;
    let (type_, localhost_profile) = match v.as_str() {
        APPARMOR_RUNTIME_DEFAULT => ("RuntimeDefault", None),
        APPARMOR_UNCONFINED => ("Unconfined", None),
        v => (
            "Localhost",
            Some(v.strip_prefix(APPARMOR_LOCALHOST_PREFIX)?.to_string()),
        ),
    };
    Some(AppArmorProfile {
        type_: type_.into(),
        localhost_profile,
    })
}

/// The container's AppArmor profile (upstream `apparmor.GetProfile`): its own field, else the
/// legacy annotation, else the pod's field.
pub fn apparmor_of(pod: &Pod, c: &Container) -> Option<AppArmorProfile> {
    c.security_context
        .as_ref()
        .and_then(|s| s.app_armor_profile.clone())
        .or_else(|| apparmor_annotation(pod, &c.name))
        .or_else(|| {
            pod.spec
                .as_ref()?
                .security_context
                .as_ref()?
                .app_armor_profile
                .clone()
        })
}

/// The profile as CRI's field and its deprecated string form (upstream `getAppArmorProfile`).
pub fn apparmor_profile(pod: &Pod, c: &Container) -> Result<(Option<cri::SecurityProfile>, String), String> {
    use cri::security_profile::ProfileType;
    let Some(p) = apparmor_of(pod, c) else {
        return Ok((None, String::new()));
    };
    let (t, localhost_ref, legacy) = match p.type_.as_str() {
        "RuntimeDefault" => (
            ProfileType::RuntimeDefault,
            String::new(),
            APPARMOR_RUNTIME_DEFAULT.to_string(),
        ),
        "Unconfined" => (
            ProfileType::Unconfined,
            String::new(),
            APPARMOR_UNCONFINED.to_string(),
        ),
        "Localhost" => {
            let name = p
                .localhost_profile
                .ok_or_else(|| "missing localhost apparmor profile name".to_string())?;
            (
                ProfileType::Localhost,
                name.clone(),
                format!("{APPARMOR_LOCALHOST_PREFIX}{name}"),
            )
        }
        other => return Err(format!("unknown apparmor profile type: \"{other}\"")),
    };
    Ok((
        Some(cri::SecurityProfile {
            profile_type: t as i32,
            localhost_ref,
        }),
        legacy,
    ))
}

/// CRI capability names: as the API writes them, without the `CAP_` prefix (containerd adds it
/// and would make `CAP_CAP_…` of a name that has it); `ALL` stays `ALL`.
fn capability_names(names: Option<&Vec<String>>) -> Vec<String> {
    names
        .into_iter()
        .flatten()
        .map(|n| {
            let upper = n.to_ascii_uppercase();
            upper.strip_prefix("CAP_").map(str::to_string).unwrap_or(upper)
        })
        .collect()
}

/// The container's `LinuxContainerSecurityContext` (upstream `determineEffectiveSecurityContext`):
/// `image` fills in the user when neither pod nor container names one, `namespaces` are the
/// sandbox's, `seccomp_root` is where Localhost seccomp profiles live. AppArmor goes in both the
/// field and the deprecated string, as upstream: runtimes older than CRI 1.30's field (containerd
/// 1.6) read only the string.
#[allow(deprecated)]
pub fn container_security_context(
    pod: &Pod,
    c: &Container,
    image: &ImageUser,
    namespaces: cri::NamespaceOption,
    seccomp_root: &Path,
) -> Result<cri::LinuxContainerSecurityContext, String> {
    let sc = effective(pod, c);
    let privileged = sc.privileged.unwrap_or(false);
    let (apparmor, apparmor_profile) = apparmor_profile(pod, c)?;
    let mut out = cri::LinuxContainerSecurityContext {
        capabilities: sc.capabilities.as_ref().map(|caps| cri::Capability {
            add_capabilities: capability_names(caps.add.as_ref()),
            drop_capabilities: capability_names(caps.drop.as_ref()),
            add_ambient_capabilities: Vec::new(),
        }),
        privileged,
        namespace_options: Some(namespaces),
        selinux_options: sc.se_linux_options.as_ref().map(|o| cri::SeLinuxOption {
            user: o.user.clone().unwrap_or_default(),
            role: o.role.clone().unwrap_or_default(),
            r#type: o.type_.clone().unwrap_or_default(),
            level: o.level.clone().unwrap_or_default(),
        }),
        run_as_user: sc.run_as_user.map(|value| cri::Int64Value { value }),
        run_as_group: sc.run_as_group.map(|value| cri::Int64Value { value }),
        readonly_rootfs: sc.read_only_root_filesystem.unwrap_or(false),
        no_new_privs: no_new_privs(&sc),
        seccomp: Some(seccomp_profile(pod, c, seccomp_root)?),
        apparmor,
        apparmor_profile,
        ..Default::default()
    };
    if out.run_as_user.is_none() {
        out.run_as_user = image.uid.map(|value| cri::Int64Value { value });
        out.run_as_username = image.username.clone();
    }
    if let Some(p) = pod.spec.as_ref().and_then(|s| s.security_context.as_ref()) {
        out.supplemental_groups.extend(p.fs_group);
        out.supplemental_groups
            .extend(p.supplemental_groups.iter().flatten());
        out.supplemental_groups_policy = match p.supplemental_groups_policy.as_deref() {
            None | Some("Merge") => cri::SupplementalGroupsPolicy::Merge as i32,
            Some("Strict") => cri::SupplementalGroupsPolicy::Strict as i32,
            Some(other) => return Err(format!("unsupported supplementalGroupsPolicy: {other}")),
        };
    }
    // procMount Unmasked hides and protects nothing; a privileged container neither (the
    // runtime would clear them anyway).
    if sc.proc_mount.as_deref() != Some("Unmasked") && !privileged {
        out.masked_paths = DEFAULT_MASKED_PATHS.iter().map(|s| s.to_string()).collect();
        out.readonly_paths = DEFAULT_READONLY_PATHS.iter().map(|s| s.to_string()).collect();
    }
    Ok(out)
}

/// Whether the host enforces AppArmor (runc's `apparmor.IsEnabled`, which upstream uses): the
/// module is loaded and enabled.
pub fn apparmor_enabled() -> bool {
    std::path::Path::new("/sys/kernel/security/apparmor").exists()
        && std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
            .is_ok_and(|v| v.starts_with('Y'))
}

/// Whether the pod asks for AppArmor confinement (upstream `isRequired`): a profile other than
/// unconfined in a field of the pod or of a container, or in a legacy annotation.
fn apparmor_required(pod: &Pod) -> bool {
    let confining = |p: Option<&AppArmorProfile>| p.is_some_and(|p| p.type_ != "Unconfined");
    let spec = pod.spec.clone().unwrap_or_default();
    if confining(
        spec.security_context
            .as_ref()
            .and_then(|s| s.app_armor_profile.as_ref()),
    ) {
        return true;
    }
    let own = |sc: Option<&SecurityContext>| confining(sc.and_then(|s| s.app_armor_profile.as_ref()));
    let in_containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .any(|c| own(c.security_context.as_ref()));
    let in_ephemeral = spec
        .ephemeral_containers
        .iter()
        .flatten()
        .any(|c| own(c.security_context.as_ref()));
    if in_containers || in_ephemeral {
        return true;
    }
    pod.metadata
        .annotations
        .iter()
        .flatten()
        .any(|(k, v)| k.starts_with(APPARMOR_ANNOTATION_PREFIX) && v != APPARMOR_UNCONFINED)
}

/// The AppArmor admit handler's decision (upstream `appArmorAdmitHandler` with its validator),
/// for a host that does or does not enforce AppArmor.
pub fn admit_apparmor(pod: &Pod, host_enabled: bool) -> Result<(), (String, String)> {
    let reject = |why: String| Err(("AppArmor".to_string(), format!("Cannot enforce AppArmor: {why}")));
    if !apparmor_required(pod) {
        return Ok(());
    }
    if !host_enabled {
        return reject("AppArmor is not enabled on the host".into());
    }
    let spec = pod.spec.clone().unwrap_or_default();
    for c in spec.init_containers.iter().flatten().chain(&spec.containers) {
        if let Some(p) = apparmor_of(pod, c) {
            if p.type_ == "Localhost" && p.localhost_profile.as_deref().is_none_or(|n| n.trim().is_empty()) {
                return reject(format!("invalid empty AppArmor profile name: {p:?}"));
            }
        }
    }
    Ok(())
}

/// The kubelet's security admission of a pod it has not started: `Err((reason, message))`
/// rejects it (the caller fails the pod with "Pod was rejected: <message>").
pub fn admit_security(pod: &Pod) -> Result<(), (String, String)> {
    // The host is looked at once, as upstream's validator does at the kubelet's start.
    static APPARMOR: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    admit_apparmor(pod, *APPARMOR.get_or_init(apparmor_enabled))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        pod_with(json!({}), spec)
    }

    fn pod_with(annotations: serde_json::Value, spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "u-1", "annotations": annotations},
            "spec": spec,
        }))
        .unwrap()
    }

    fn first(p: &Pod) -> Container {
        p.spec.as_ref().unwrap().containers[0].clone()
    }

    fn ctx(p: &Pod, image: &ImageUser) -> cri::LinuxContainerSecurityContext {
        container_security_context(
            p,
            &first(p),
            image,
            namespace_options(p),
            Path::new("/var/lib/r8s/seccomp"),
        )
        .unwrap()
    }

    #[test]
    fn the_container_overrides_the_pod_field_by_field() {
        let p = pod(json!({
            "securityContext": {"runAsUser": 1000, "runAsGroup": 3000, "runAsNonRoot": true,
                "fsGroup": 2000, "supplementalGroups": [4000, 5000],
                "seLinuxOptions": {"level": "s0:c1"}},
            "containers": [{"name": "c", "securityContext": {"runAsUser": 1001,
                "seLinuxOptions": {"type": "spc_t"}, "readOnlyRootFilesystem": true}}]
        }));
        let sc = effective(&p, &first(&p));
        assert_eq!(sc.run_as_user, Some(1001));
        assert_eq!(sc.run_as_group, Some(3000));
        assert_eq!(sc.run_as_non_root, Some(true));
        assert_eq!(
            sc.se_linux_options.as_ref().unwrap().type_.as_deref(),
            Some("spc_t")
        );
        assert_eq!(
            sc.se_linux_options.as_ref().unwrap().level,
            None,
            "replaced whole"
        );
        let out = ctx(&p, &ImageUser::of(None));
        assert_eq!(out.run_as_user.map(|v| v.value), Some(1001));
        assert_eq!(out.run_as_group.map(|v| v.value), Some(3000));
        assert_eq!(out.run_as_username, "");
        assert_eq!(out.supplemental_groups, [2000, 4000, 5000], "fsGroup first");
        assert_eq!(
            out.supplemental_groups_policy,
            cri::SupplementalGroupsPolicy::Merge as i32
        );
        assert!(out.readonly_rootfs);
        assert_eq!(out.selinux_options.unwrap().r#type, "spc_t");
    }

    #[test]
    fn supplemental_groups_policy() {
        let policy = |v: &str| {
            let p = pod(
                json!({"securityContext": {"supplementalGroupsPolicy": v}, "containers": [{"name": "c"}]}),
            );
            container_security_context(
                &p,
                &first(&p),
                &ImageUser::default(),
                namespace_options(&p),
                Path::new("/"),
            )
            .map(|sc| sc.supplemental_groups_policy)
        };
        assert_eq!(policy("Strict"), Ok(cri::SupplementalGroupsPolicy::Strict as i32));
        assert_eq!(policy("Merge"), Ok(cri::SupplementalGroupsPolicy::Merge as i32));
        assert_eq!(
            policy("Loose"),
            Err("unsupported supplementalGroupsPolicy: Loose".to_string())
        );
    }

    #[test]
    fn the_image_user_fills_in_when_nobody_names_one() {
        let p = pod(json!({"containers": [{"name": "c"}]}));
        let numeric = cri::Image {
            uid: Some(cri::Int64Value { value: 101 }),
            ..Default::default()
        };
        assert_eq!(
            ctx(&p, &ImageUser::of(Some(&numeric))).run_as_user.unwrap().value,
            101
        );
        let named = cri::Image {
            username: "nginx".into(),
            ..Default::default()
        };
        let out = ctx(&p, &ImageUser::of(Some(&named)));
        assert_eq!((out.run_as_user, out.run_as_username.as_str()), (None, "nginx"));
        // An image that says nothing runs as root, said explicitly as upstream.
        assert_eq!(
            ctx(&p, &ImageUser::of(Some(&cri::Image::default())))
                .run_as_user
                .unwrap()
                .value,
            0
        );
        let p = pod(json!({"securityContext": {"runAsUser": 7}, "containers": [{"name": "c"}]}));
        let out = ctx(&p, &ImageUser::of(Some(&named)));
        assert_eq!(
            (out.run_as_user.unwrap().value, out.run_as_username.as_str()),
            (7, "")
        );
    }

    #[test]
    fn no_new_privs_only_when_escalation_is_explicitly_refused() {
        let nnp = |c: serde_json::Value| {
            let p = pod(json!({"containers": [c]}));
            ctx(&p, &ImageUser::default()).no_new_privs
        };
        assert!(!nnp(json!({"name": "c"})));
        assert!(!nnp(json!({"name": "c", "securityContext": {}})));
        assert!(!nnp(
            json!({"name": "c", "securityContext": {"allowPrivilegeEscalation": true}})
        ));
        assert!(nnp(
            json!({"name": "c", "securityContext": {"allowPrivilegeEscalation": false}})
        ));
        assert!(!nnp(
            json!({"name": "c", "securityContext": {"allowPrivilegeEscalation": false, "privileged": true}})
        ));
    }

    #[test]
    fn masked_and_readonly_paths_follow_proc_mount_and_privilege() {
        let paths = |c: serde_json::Value| {
            let p = pod(json!({"containers": [c]}));
            let out = ctx(&p, &ImageUser::default());
            (out.masked_paths, out.readonly_paths)
        };
        let (masked, ro) = paths(json!({"name": "c"}));
        assert_eq!(masked.len(), 11);
        assert!(masked.contains(&"/proc/kcore".to_string()));
        assert!(masked.contains(&"/sys/devices/virtual/powercap".to_string()));
        assert_eq!(
            ro,
            [
                "/proc/bus",
                "/proc/fs",
                "/proc/irq",
                "/proc/sys",
                "/proc/sysrq-trigger"
            ]
        );
        assert_eq!(
            paths(json!({"name": "c", "securityContext": {"procMount": "Default"}}))
                .0
                .len(),
            11
        );
        let (masked, ro) = paths(json!({"name": "c", "securityContext": {"procMount": "Unmasked"}}));
        assert!(masked.is_empty() && ro.is_empty());
        let (masked, ro) = paths(json!({"name": "c", "securityContext": {"privileged": true}}));
        assert!(masked.is_empty() && ro.is_empty());
    }

    #[test]
    fn capabilities_are_passed_without_the_cap_prefix() {
        let p = pod(
            json!({"containers": [{"name": "c", "securityContext": {"capabilities":
            {"add": ["NET_ADMIN", "CAP_SYS_TIME", "cap_chown"], "drop": ["ALL"]}}}]}),
        );
        let caps = ctx(&p, &ImageUser::default()).capabilities.unwrap();
        assert_eq!(caps.add_capabilities, ["NET_ADMIN", "SYS_TIME", "CHOWN"]);
        assert_eq!(caps.drop_capabilities, ["ALL"]);
        let p = pod(json!({"containers": [{"name": "c"}]}));
        assert!(ctx(&p, &ImageUser::default()).capabilities.is_none());
    }

    #[test]
    fn seccomp_profiles_map_as_upstream() {
        use cri::security_profile::ProfileType;
        let root = Path::new("/var/lib/r8s/seccomp");
        let of = |spec: serde_json::Value| {
            let p = pod(spec);
            seccomp_profile(&p, &first(&p), root)
        };
        let t = |r: Result<cri::SecurityProfile, String>| {
            let r = r.unwrap();
            (ProfileType::try_from(r.profile_type).unwrap(), r.localhost_ref)
        };
        assert_eq!(
            t(of(json!({"containers": [{"name": "c"}]}))),
            (ProfileType::Unconfined, String::new())
        );
        assert_eq!(
            t(of(
                json!({"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{"name": "c"}]})
            )),
            (ProfileType::RuntimeDefault, String::new())
        );
        assert_eq!(
            t(of(
                json!({"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{"name": "c", "securityContext": {"seccompProfile": {"type": "Unconfined"}}}]})
            )),
            (ProfileType::Unconfined, String::new()),
            "the container's wins"
        );
        assert_eq!(
            t(of(json!({"containers": [{"name": "c", "securityContext":
                {"seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/audit.json"}}}]}))),
            (
                ProfileType::Localhost,
                "/var/lib/r8s/seccomp/profiles/audit.json".into()
            )
        );
        assert_eq!(
            of(json!({"containers": [{"name": "c", "securityContext": {"seccompProfile": {"type": "Localhost"}}}]}))
                .unwrap_err(),
            "localhostProfile must be set if seccompProfile type is Localhost."
        );
    }

    #[test]
    fn apparmor_from_fields_and_the_legacy_annotation() {
        use cri::security_profile::ProfileType;
        let of = |annotations: serde_json::Value, spec: serde_json::Value| {
            let p = pod_with(annotations, spec);
            let (field, legacy) = apparmor_profile(&p, &first(&p)).unwrap();
            (
                field.map(|f| (ProfileType::try_from(f.profile_type).unwrap(), f.localhost_ref)),
                legacy,
            )
        };
        assert_eq!(
            of(json!({}), json!({"containers": [{"name": "c"}]})),
            (None, String::new())
        );
        assert_eq!(
            of(
                json!({}),
                json!({"securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}},
                "containers": [{"name": "c"}]})
            ),
            (
                Some((ProfileType::RuntimeDefault, String::new())),
                "runtime/default".into()
            )
        );
        assert_eq!(
            of(
                json!({"container.apparmor.security.beta.kubernetes.io/c": "localhost/k8s-deny"}),
                json!({"securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}},
                "containers": [{"name": "c"}]})
            ),
            (
                Some((ProfileType::Localhost, "k8s-deny".into())),
                "localhost/k8s-deny".into()
            ),
            "the annotation before the pod's field"
        );
        assert_eq!(
            of(
                json!({"container.apparmor.security.beta.kubernetes.io/c": "localhost/k8s-deny"}),
                json!({"containers": [{"name": "c", "securityContext": {"appArmorProfile": {"type": "Unconfined"}}}]})
            ),
            (
                Some((ProfileType::Unconfined, String::new())),
                "unconfined".into()
            ),
            "the container's field before the annotation"
        );
        assert_eq!(
            of(
                json!({"container.apparmor.security.beta.kubernetes.io/c": "bogus"}),
                json!({"containers": [{"name": "c"}]})
            ),
            (None, String::new())
        );
    }

    #[test]
    fn run_as_non_root_is_checked_as_upstream() {
        let check = |spec: serde_json::Value, image: ImageUser| {
            let p = pod(spec);
            verify_run_as_non_root(&p, &first(&p), &image)
        };
        let root = ImageUser::of(None);
        let user = |uid: i64| ImageUser {
            uid: Some(uid),
            username: String::new(),
        };
        let c = json!([{"name": "app"}]);
        // Not asked: anything goes.
        assert!(check(json!({"containers": c}), root.clone()).is_ok());
        assert!(check(
            json!({"securityContext": {"runAsNonRoot": false}, "containers": c}),
            root.clone()
        )
        .is_ok());
        let asked = json!({"runAsNonRoot": true});
        assert_eq!(
            check(json!({"securityContext": asked, "containers": c}), root.clone()).unwrap_err(),
            "container has runAsNonRoot and image will run as root (pod: \"web_shop(u-1)\", container: app)"
        );
        assert!(check(json!({"securityContext": asked, "containers": c}), user(1000)).is_ok());
        assert_eq!(
            check(
                json!({"securityContext": asked, "containers": c}),
                ImageUser {
                    uid: None,
                    username: "nginx".into()
                }
            )
            .unwrap_err(),
            "container has runAsNonRoot and image has non-numeric user (nginx), cannot verify user is non-root (pod: \"web_shop(u-1)\", container: app)"
        );
        // runAsUser decides when set, whatever the image.
        assert_eq!(
            check(
                json!({"securityContext": {"runAsNonRoot": true, "runAsUser": 0}, "containers": c}),
                user(1000)
            )
            .unwrap_err(),
            "container's runAsUser breaks non-root policy (pod: \"web_shop(u-1)\", container: app)"
        );
        assert!(check(
            json!({"containers": [{"name": "app", "securityContext": {"runAsNonRoot": true, "runAsUser": 5}}]}),
            root.clone()
        )
        .is_ok());
        // The container's runAsNonRoot false turns the pod's off.
        assert!(check(
            json!({"securityContext": asked, "containers": [{"name": "app", "securityContext": {"runAsNonRoot": false}}]}),
            root.clone()
        )
        .is_ok());
        assert!(
            check(json!({"securityContext": asked, "containers": c}), user(1 << 40))
                .unwrap_err()
                .starts_with("container has runAsNonRoot and image has an invalid user id (1099511627776)")
        );
    }

    #[test]
    fn container_config_carries_the_context_and_refuses_root() {
        use crate::spec::{container_config, ContainerInputs, NodeContext};
        let node = NodeContext {
            seccomp_root: "/var/lib/r8s/agent/seccomp".into(),
            ..Default::default()
        };
        let p = pod(json!({"containers": [{"name": "app", "securityContext": {
            "runAsNonRoot": true, "runAsUser": 1000, "readOnlyRootFilesystem": true,
            "seccompProfile": {"type": "Localhost", "localhostProfile": "audit.json"}}}]}));
        let (cfg, _) = container_config(&p, &first(&p), 0, &node, &ContainerInputs::default()).unwrap();
        let sc = cfg.linux.unwrap().security_context.unwrap();
        assert_eq!(sc.run_as_user.unwrap().value, 1000);
        assert!(sc.readonly_rootfs);
        assert_eq!(
            sc.seccomp.unwrap().localhost_ref,
            "/var/lib/r8s/agent/seccomp/audit.json"
        );
        let p = pod(json!({"securityContext": {"runAsNonRoot": true}, "containers": [{"name": "app"}]}));
        let inputs = ContainerInputs {
            image_user: ImageUser::of(None),
            ..Default::default()
        };
        assert_eq!(
            container_config(&p, &first(&p), 0, &node, &inputs).unwrap_err(),
            "container has runAsNonRoot and image will run as root (pod: \"web_shop(u-1)\", container: app)"
        );
    }

    #[test]
    fn namespaces_follow_the_pod() {
        let p =
            pod(json!({"hostNetwork": true, "shareProcessNamespace": true, "containers": [{"name": "c"}]}));
        let ns = ctx(&p, &ImageUser::default()).namespace_options.unwrap();
        assert_eq!(ns.network, cri::NamespaceMode::Node as i32);
        assert_eq!(ns.pid, cri::NamespaceMode::Pod as i32);
        assert_eq!(ns.ipc, cri::NamespaceMode::Pod as i32);
        let p = pod(json!({"hostPID": true, "containers": [{"name": "c"}]}));
        let ns = namespace_options(&p);
        assert_eq!(ns.pid, cri::NamespaceMode::Node as i32);
        assert_eq!(ns.network, cri::NamespaceMode::Pod as i32);
        let p = pod(json!({"containers": [{"name": "c"}]}));
        assert_eq!(namespace_options(&p).pid, cri::NamespaceMode::Container as i32);
    }

    #[test]
    fn apparmor_admission_as_upstream() {
        let no_host = |annotations: serde_json::Value, spec: serde_json::Value| {
            admit_apparmor(&pod_with(annotations, spec), false)
        };
        let c = json!([{"name": "c"}]);
        assert!(no_host(json!({}), json!({"containers": c})).is_ok());
        let rejected = Err((
            "AppArmor".to_string(),
            "Cannot enforce AppArmor: AppArmor is not enabled on the host".to_string(),
        ));
        assert_eq!(
            no_host(
                json!({}),
                json!({"securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}}, "containers": c})
            ),
            rejected
        );
        assert_eq!(
            no_host(
                json!({}),
                json!({"initContainers": [{"name": "i", "securityContext":
                    {"appArmorProfile": {"type": "Localhost", "localhostProfile": "p"}}}], "containers": c})
            ),
            rejected
        );
        assert_eq!(
            no_host(
                json!({"container.apparmor.security.beta.kubernetes.io/c": "localhost/p"}),
                json!({"containers": c})
            ),
            rejected
        );
        // Unconfined asks for nothing the host must do.
        assert!(no_host(
            json!({"container.apparmor.security.beta.kubernetes.io/c": "unconfined"}),
            json!({"containers": c})
        )
        .is_ok());
        assert!(no_host(
            json!({}),
            json!({"securityContext": {"appArmorProfile": {"type": "Unconfined"}}, "containers": c})
        )
        .is_ok());
        // On a host with AppArmor, a Localhost profile needs a name.
        let p = pod(
            json!({"containers": [{"name": "c", "securityContext": {"appArmorProfile": {"type": "Localhost"}}}]}),
        );
        let (reason, message) = admit_apparmor(&p, true).unwrap_err();
        assert_eq!(reason, "AppArmor");
        assert!(
            message.starts_with("Cannot enforce AppArmor: invalid empty AppArmor profile name"),
            "{message}"
        );
        let p =
            pod(json!({"securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}}, "containers": c}));
        assert!(admit_apparmor(&p, true).is_ok());
    }
}
