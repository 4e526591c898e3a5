//! Pod and container securityContext end to end: `r8s server` with its agent (containerd 1.6,
//! runc, CNI) and the real kubectl. busybox containers print what the kernel says of them
//! (`id`, `/proc/self/status`, writes that fail) and sleep; their output is read from the
//! kubelet's log files on the host, since there is no `kubectl logs` yet. One server runs
//! every pod; everything it made is removed when the test ends, also when it fails.

use crate::support;

use std::path::Path;
use std::time::Duration;

use support::cluster::*;

/// The container's report, once it has written its last line (`DONE`).
fn report(data: &Path, name: &str, uid: &str, container: &str) -> String {
    wait_for(60, &format!("{name}/{container}'s report"), || {
        let log = log_of(data, name, uid, container);
        log.contains("DONE").then_some(log)
    })
}

/// The rest of the line of `log` that starts with `prefix`.
fn line<'a>(log: &'a str, prefix: &str) -> &'a str {
    log.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no {prefix:?} line in:\n{log}"))
}

fn mounts_under(dir: &Path) -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let d = dir.to_string_lossy().to_string();
    info.lines()
        .filter(|l| l.split(' ').nth(4).is_some_and(|p| p.starts_with(&d)))
        .map(String::from)
        .collect()
}

/// What each container prints: its ids, capabilities, no_new_privs and seccomp mode, whether
/// it can write its root filesystem, make a directory, and read a masked /proc file.
const REPORT: &str = r#"echo "ID $(id)"; grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; if touch /written 2>/dev/null; then echo 'ROOTFS writable'; else echo 'ROOTFS read-only'; fi; if mkdir /tmp/made 2>/dev/null; then echo 'MKDIR ok'; else echo 'MKDIR denied'; fi; echo "TIMER_LIST $(wc -c < /proc/timer_list)"; if { echo 1 > /proc/sys/kernel/ns_last_pid; } 2>/dev/null; then echo 'PROCSYS writable'; else echo 'PROCSYS read-only'; fi; echo DONE; sleep 3600"#;

fn container(name: &str, sc: &str) -> String {
    format!(
        "  - name: {name}\n    image: busybox\n    command: [sh, -c, {}]\n    securityContext: {sc}\n",
        serde_json::to_string(REPORT).unwrap()
    )
}

fn pod(name: &str, extra_meta: &str, pod_sc: &str, containers: &[(&str, &str)]) -> String {
    let mut y = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n{extra_meta}spec:\n  securityContext: {pod_sc}\n  containers:\n"
    );
    for (n, sc) in containers {
        y.push_str(&container(n, sc));
    }
    y
}

/// A seccomp profile that lets everything through but mkdir.
const DENY_MKDIR: &str = r#"{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO"}]}"#;

/// containerd's default capability set (the Docker one) as CapEff.
const DEFAULT_CAPS: &str = "00000000a80425fb";
/// CAP_NET_ADMIN alone (bit 12); with CAP_SYS_TIME (bit 25).
const NET_ADMIN_ONLY: &str = "0000000000001000";
const NET_ADMIN_AND_SYS_TIME: &str = "0000000002001000";

#[test]
fn security_contexts_reach_the_containers_and_the_kubelet_enforces_them() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = start_prepared("sec-node", "10.193.0.0/16", "r8ss", &[], |data| {
        let dir = data.join("agent/seccomp/profiles");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("deny-mkdir.json"), DENY_MKDIR).unwrap();
    });
    let (s, data) = (&mut c.s, c.data.clone());

    let ids = pod(
        "ids",
        "",
        "{runAsUser: 1000, runAsGroup: 3000, fsGroup: 2000, supplementalGroups: [4000]}",
        &[
            ("pod-level", "{}"),
            ("override", "{runAsUser: 1001, runAsGroup: 1002}"),
        ],
    );
    let locked = pod(
        "locked",
        "  annotations:\n    container.apparmor.security.beta.kubernetes.io/plain: unconfined\n",
        "{}",
        &[
            ("plain", "{}"),
            ("rootfs", "{readOnlyRootFilesystem: true}"),
            ("caps", "{capabilities: {drop: [ALL], add: [NET_ADMIN]}}"),
            // Written with the prefix: still the capability, not `CAP_CAP_SYS_TIME`.
            (
                "prefixed",
                "{capabilities: {drop: [ALL], add: [CAP_SYS_TIME, net_admin]}}",
            ),
            ("nnp", "{allowPrivilegeEscalation: false}"),
            ("seccomp", "{seccompProfile: {type: RuntimeDefault}}"),
            (
                "localhost",
                "{seccompProfile: {type: Localhost, localhostProfile: profiles/deny-mkdir.json}}",
            ),
        ],
    );
    let privileged = pod("priv", "", "{}", &[("app", "{privileged: true}")]);
    let nonroot = pod(
        "nonroot",
        "",
        "{runAsNonRoot: true}",
        &[
            ("image-root", "{}"),
            ("uid-zero", "{runAsUser: 0}"),
            ("uid-1000", "{runAsUser: 1000}"),
        ],
    );
    let aa_field = pod(
        "aa-field",
        "",
        "{appArmorProfile: {type: RuntimeDefault}}",
        &[("app", "{}")],
    );
    let aa_annotation = pod(
        "aa-annotation",
        "  annotations:\n    container.apparmor.security.beta.kubernetes.io/app: localhost/k8s-deny-write\n",
        "{}",
        &[("app", "{}")],
    );
    for p in [&ids, &locked, &privileged, &nonroot, &aa_field, &aa_annotation] {
        s.ok_stdin(V, &["create", "-f", "-"], p);
    }

    // runAsUser / runAsGroup, the pod's or the container's; fsGroup and supplementalGroups.
    wait_for(90, "ids Running", || {
        (pod_json(s, "ids")?["status"]["phase"] == "Running").then_some(())
    });
    let uid = uid_of(s, "ids");
    let id = line(&report(&data, "ids", &uid, "pod-level"), "ID ").to_string();
    assert!(id.starts_with("uid=1000 gid=3000 groups="), "{id}");
    let groups: Vec<&str> = id.rsplit('=').next().unwrap().split(',').collect();
    assert!(groups.contains(&"2000") && groups.contains(&"4000"), "{id}");
    let id = line(&report(&data, "ids", &uid, "override"), "ID ").to_string();
    assert!(id.starts_with("uid=1001 gid=1002 groups="), "{id}");
    // fsGroup owns the pod's volumes: the service-account token is the group's to read.
    {
        use std::os::unix::fs::MetadataExt;
        let projected = data
            .join("agent/pods")
            .join(&uid)
            .join("volumes/kubernetes.io~projected");
        let vol = std::fs::read_dir(&projected)
            .unwrap()
            .flatten()
            .next()
            .unwrap()
            .path();
        let token = std::fs::metadata(vol.join("token")).unwrap();
        assert_eq!(token.gid(), 2000);
        assert_eq!(token.mode() & 0o040, 0o040, "group-readable: {:o}", token.mode());
        let root = std::fs::metadata(&vol).unwrap();
        assert_eq!((root.gid(), root.mode() & 0o2000), (2000, 0o2000));
    }

    // Root filesystem, capabilities, no_new_privs, seccomp, masked and read-only /proc.
    wait_for(90, "locked Running", || {
        (pod_json(s, "locked")?["status"]["phase"] == "Running").then_some(())
    });
    let uid = uid_of(s, "locked");
    let plain = report(&data, "locked", &uid, "plain");
    assert!(line(&plain, "ID ").starts_with("uid=0"), "{plain}");
    assert_eq!(line(&plain, "CapEff:"), DEFAULT_CAPS, "{plain}");
    assert_eq!(line(&plain, "NoNewPrivs:"), "0", "{plain}");
    assert_eq!(
        line(&plain, "Seccomp:"),
        "0",
        "unconfined by default, as upstream: {plain}"
    );
    assert_eq!(line(&plain, "ROOTFS"), "writable", "{plain}");
    assert_eq!(line(&plain, "MKDIR"), "ok", "{plain}");
    assert_eq!(line(&plain, "TIMER_LIST"), "0", "masked: {plain}");
    assert_eq!(line(&plain, "PROCSYS"), "read-only", "{plain}");

    let rootfs = report(&data, "locked", &uid, "rootfs");
    assert_eq!(line(&rootfs, "ROOTFS"), "read-only", "{rootfs}");
    assert_eq!(line(&rootfs, "MKDIR"), "denied", "{rootfs}");

    let caps = report(&data, "locked", &uid, "caps");
    assert_eq!(line(&caps, "CapEff:"), NET_ADMIN_ONLY, "{caps}");
    assert_eq!(line(&caps, "CapBnd:"), NET_ADMIN_ONLY, "{caps}");

    let prefixed = report(&data, "locked", &uid, "prefixed");
    assert_eq!(line(&prefixed, "CapEff:"), NET_ADMIN_AND_SYS_TIME, "{prefixed}");

    let nnp = report(&data, "locked", &uid, "nnp");
    assert_eq!(line(&nnp, "NoNewPrivs:"), "1", "{nnp}");
    assert_eq!(line(&nnp, "CapEff:"), DEFAULT_CAPS, "{nnp}");

    let seccomp = report(&data, "locked", &uid, "seccomp");
    assert_eq!(line(&seccomp, "Seccomp:"), "2", "{seccomp}");
    assert_eq!(line(&seccomp, "MKDIR"), "ok", "{seccomp}");

    let localhost = report(&data, "locked", &uid, "localhost");
    assert_eq!(line(&localhost, "Seccomp:"), "2", "{localhost}");
    assert_eq!(
        line(&localhost, "MKDIR"),
        "denied",
        "the profile under <agent>/seccomp: {localhost}"
    );
    assert_eq!(line(&localhost, "ROOTFS"), "writable", "{localhost}");

    // Privileged: every capability the runtime has, nothing masked, /proc/sys writable.
    wait_for(90, "priv Running", || {
        (pod_json(s, "priv")?["status"]["phase"] == "Running").then_some(())
    });
    let uid = uid_of(s, "priv");
    let privileged = report(&data, "priv", &uid, "app");
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    assert_eq!(
        line(&privileged, "CapEff:"),
        line(&status, "CapBnd:"),
        "{privileged}"
    );
    assert_ne!(line(&privileged, "TIMER_LIST"), "0", "{privileged}");
    assert_eq!(line(&privileged, "PROCSYS"), "writable", "{privileged}");

    // runAsNonRoot: the image's root user and runAsUser 0 are refused before the container is
    // made, with upstream's messages and Failed events; a non-root runAsUser runs.
    let uid = uid_of(s, "nonroot");
    let waiting = |container: &str| -> Option<(String, String)> {
        let p = pod_json(s, "nonroot")?;
        let st = p["status"]["containerStatuses"]
            .as_array()?
            .iter()
            .find(|c| c["name"] == container)?
            .clone();
        let w = &st["state"]["waiting"];
        Some((
            w["reason"].as_str()?.to_string(),
            w["message"].as_str().unwrap_or("").to_string(),
        ))
    };
    let image_root = format!(
        "container has runAsNonRoot and image will run as root (pod: \"nonroot_default({uid})\", container: image-root)"
    );
    let uid_zero = format!(
        "container's runAsUser breaks non-root policy (pod: \"nonroot_default({uid})\", container: uid-zero)"
    );
    for (container, message) in [("image-root", &image_root), ("uid-zero", &uid_zero)] {
        let got = wait_for(60, &format!("{container}'s CreateContainerConfigError"), || {
            waiting(container).filter(|(r, _)| r == "CreateContainerConfigError")
        });
        assert_eq!(got.1, *message);
    }
    wait_for(60, "the Failed events", || {
        let events = events_of(s, "nonroot");
        let has = |m: &str| {
            events
                .iter()
                .any(|(r, e)| r == "Failed" && e == &format!("Error: {m}"))
        };
        (has(&image_root) && has(&uid_zero)).then_some(())
    });
    let runs = report(&data, "nonroot", &uid, "uid-1000");
    assert!(line(&runs, "ID ").starts_with("uid=1000 gid=0"), "{runs}");
    assert_eq!(pod_json(s, "nonroot").unwrap()["status"]["phase"], "Pending");
    // Retried every sync, still refused.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        waiting("image-root").unwrap(),
        ("CreateContainerConfigError".to_string(), image_root.clone())
    );

    // AppArmor: this host cannot confine, so pods that ask are rejected by the kubelet.
    if r8s_kubelet::security::apparmor_enabled() {
        eprintln!("this host enforces AppArmor: the rejection is not exercised");
    } else {
        for name in ["aa-field", "aa-annotation"] {
            let p = wait_for(60, &format!("{name} Failed"), || {
                pod_json(s, name).filter(|p| p["status"]["phase"] == "Failed")
            });
            assert_eq!(p["status"]["reason"], "AppArmor", "{p}");
            assert_eq!(
                p["status"]["message"],
                "Pod was rejected: Cannot enforce AppArmor: AppArmor is not enabled on the host",
                "{p}"
            );
            assert!(
                events_of(s, name).iter().any(|(r, m)| r == "AppArmor"
                    && m == "Cannot enforce AppArmor: AppArmor is not enabled on the host"),
                "{:?}",
                events_of(s, name)
            );
            let uid = uid_of(s, name);
            assert!(
                !data
                    .join("agent/pods-logs")
                    .join(format!("default_{name}_{uid}"))
                    .exists(),
                "no sandbox was made for {name}"
            );
        }
    }

    s.ok(
        V,
        &[
            "delete",
            "pod",
            "ids",
            "locked",
            "priv",
            "nonroot",
            "aa-field",
            "aa-annotation",
            "--timeout=90s",
        ],
    );
    let pods_dir = data.join("agent/pods");
    wait_for(30, "every pod directory removed", || {
        std::fs::read_dir(&pods_dir)
            .map(|rd| rd.count() == 0)
            .unwrap_or(true)
            .then_some(())
    });
    s.kill();
    assert!(mounts_under(&data).is_empty(), "{:?}", mounts_under(&data));
    wait_for(30, "containerd and its shims gone", || {
        processes_under(&data).is_empty().then_some(())
    });
}
