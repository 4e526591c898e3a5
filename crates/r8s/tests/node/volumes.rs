//! The kubelet's volumes and env references, end to end: `r8s server` with its agent
//! (containerd, CRI, CNI) and the real kubectl. Containers are busybox; what they see is read
//! from their log files (they `cat` what is mounted) and from the volume directories on the
//! host, since there is no exec yet.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::cluster::*;

fn mounts_under(dir: &Path) -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let d = dir.to_string_lossy().to_string();
    info.lines()
        .filter(|l| l.split(' ').nth(4).is_some_and(|p| p.starts_with(&d)))
        .map(String::from)
        .collect()
}

const VOLS_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: vols
  labels: {app: vols, tier: test}
spec:
  containers:
  - name: main
    image: busybox
    resources: {limits: {memory: 64Mi}}
    command:
    - sh
    - -c
    - |
      echo "ENV greeting=$GREETING password=$PASSWORD cfgcolor=$CFG_color mem=$MEM_MI optional=${MAYBE:-unset}"
      echo "CFG $(cat /etc/cfg/greeting) $(cat /etc/cfg/colors/main)"
      echo "SEC $(cat /etc/sec/password)"
      echo "LABELS $(cat /etc/info/labels | tr '\n' ' ')"
      echo "NAME $(cat /etc/info/name) MEM $(cat /etc/info/mem)"
      echo "NS $(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace)"
      echo "TOKEN $(cat /var/run/secrets/kubernetes.io/serviceaccount/token)"
      echo "SUB $(ls /sub)"
      if touch /etc/cfg/new 2>/dev/null; then echo "CFGMODE rw"; else echo "CFGMODE ro"; fi
      while true; do echo "LIVE $(cat /etc/cfg/greeting) $(cat /shared/from-writer 2>/dev/null)"; sleep 1; done
    env:
    - {name: GREETING, valueFrom: {configMapKeyRef: {name: cfg, key: greeting}}}
    - {name: PASSWORD, valueFrom: {secretKeyRef: {name: sec, key: password}}}
    - {name: MAYBE, valueFrom: {secretKeyRef: {name: sec, key: nope, optional: true}}}
    - {name: MEM_MI, valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1Mi}}}
    envFrom:
    - {configMapRef: {name: cfg}, prefix: CFG_}
    volumeMounts:
    - {name: cfg, mountPath: /etc/cfg}
    - {name: sec, mountPath: /etc/sec}
    - {name: info, mountPath: /etc/info}
    - {name: shared, mountPath: /shared}
    - {name: shared, mountPath: /sub, subPath: made/here}
  - name: writer
    image: busybox
    command: [sh, -c, 'echo written-by-writer > /shared/from-writer; touch /shared/made/here/by-writer; sleep 3600']
    volumeMounts: [{name: shared, mountPath: /shared}]
  volumes:
  - name: cfg
    configMap:
      name: cfg
      items: [{key: greeting, path: greeting}, {key: color, path: colors/main, mode: 384}]
  - {name: sec, secret: {secretName: sec, defaultMode: 256}}
  - name: info
    downwardAPI:
      items:
      - {path: labels, fieldRef: {fieldPath: metadata.labels}}
      - {path: name, fieldRef: {fieldPath: metadata.name}}
      - {path: mem, resourceFieldRef: {containerName: main, resource: limits.memory, divisor: 1Mi}}
  - {name: shared, emptyDir: {}}
"#;

/// configMap, secret and downwardAPI files, env from configMaps, secrets and resources, an
/// emptyDir shared by two containers, a configMap update reaching the running pod, the
/// service-account token authenticating as the pod's ServiceAccount; and nothing of the pod
/// left on the host once it is deleted.
#[test]
fn volumes_and_env_references_reach_the_containers_and_updates_propagate() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = start("vol-node", "10.195.0.0/16", "r8sv");
    let (s, data) = (&mut c.s, c.data.clone());
    s.ok(
        V,
        &[
            "create",
            "configmap",
            "cfg",
            "--from-literal=greeting=hello",
            "--from-literal=color=blue",
        ],
    );
    s.ok(
        V,
        &[
            "create",
            "secret",
            "generic",
            "sec",
            "--from-literal=password=s3cret",
        ],
    );
    s.ok_stdin(V, &["create", "-f", "-"], VOLS_POD);
    wait_for(90, "vols Running", || {
        (pod_json(s, "vols")?["status"]["phase"] == "Running").then_some(())
    });
    let uid = uid_of(s, "vols");
    let log = wait_for(60, "the main container's report", || {
        let log = log_of(&data, "vols", &uid, "main");
        log.contains("LIVE hello written-by-writer").then_some(log)
    });
    assert_eq!(
        line(&log, "ENV ").unwrap(),
        "greeting=hello password=s3cret cfgcolor=blue mem=64 optional=unset",
        "{log}"
    );
    assert_eq!(line(&log, "CFG ").unwrap(), "hello blue", "{log}");
    assert_eq!(line(&log, "SEC ").unwrap(), "s3cret", "{log}");
    assert_eq!(
        line(&log, "LABELS ").unwrap().trim(),
        "app=\"vols\" tier=\"test\"",
        "{log}"
    );
    assert_eq!(line(&log, "NAME ").unwrap(), "vols MEM 64", "{log}");
    assert_eq!(line(&log, "NS ").unwrap(), "default", "{log}");
    assert_eq!(line(&log, "CFGMODE ").unwrap(), "ro", "{log}");
    // The subPath was made inside the emptyDir, and the other container sees what lands there.
    let writer_file = data
        .join("agent/pods")
        .join(&uid)
        .join("volumes/kubernetes.io~empty-dir/shared/made/here/by-writer");
    wait_for(30, "the writer's file in the subPath", || {
        writer_file.exists().then_some(())
    });

    // On the host: upstream's layout, the AtomicWriter's ..data link, modes, tmpfs for secrets.
    let vols = data.join("agent/pods").join(&uid).join("volumes");
    let cfg_dir = vols.join("kubernetes.io~configmap/cfg");
    let data_link = std::fs::read_link(cfg_dir.join("..data")).unwrap();
    assert!(data_link.to_string_lossy().starts_with("..20"), "{data_link:?}");
    assert_eq!(
        std::fs::read_link(cfg_dir.join("greeting")).unwrap(),
        Path::new("..data/greeting")
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(cfg_dir.join("colors/main")), 0o600);
    assert_eq!(mode(cfg_dir.join("greeting")), 0o644);
    let sec_dir = vols.join("kubernetes.io~secret/sec");
    assert_eq!(mode(sec_dir.join("password")), 0o400);
    assert_eq!(mounts_under(&sec_dir).len(), 1, "the secret volume is a tmpfs");
    assert!(mounts_under(&sec_dir)[0].contains(" tmpfs "));
    assert_eq!(
        std::fs::read_to_string(vols.join("kubernetes.io~downward-api/info/name")).unwrap(),
        "vols"
    );

    // The service-account token, as the container read it, authenticates as the pod's
    // ServiceAccount; the CA next to it verifies the server.
    let token = line(&log, "TOKEN ").unwrap().trim().to_string();
    assert!(token.split('.').count() == 3, "{token}");
    let projected = std::fs::read_dir(vols.join("kubernetes.io~projected"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("kube-api-access-")
        })
        .expect("the kube-api-access volume");
    assert_eq!(std::fs::read_to_string(projected.join("token")).unwrap(), token);
    let empty = data.join("empty-kubeconfig");
    std::fs::write(&empty, "").unwrap();
    let whoami = Command::new(support::kubectl_binary(V))
        .arg("--kubeconfig")
        .arg(&empty)
        .arg("--server")
        .arg(format!("https://127.0.0.1:{}", s.port))
        .arg("--certificate-authority")
        .arg(projected.join("ca.crt"))
        .arg("--token")
        .arg(&token)
        .args(["auth", "whoami", "-o", "json"])
        .env("KUBECACHEDIR", data.join("kubecache-token"))
        .output()
        .unwrap();
    assert!(
        whoami.status.success(),
        "{}",
        String::from_utf8_lossy(&whoami.stderr)
    );
    let review: Value = serde_json::from_slice(&whoami.stdout).unwrap();
    assert_eq!(
        review["status"]["userInfo"]["username"], "system:serviceaccount:default:default",
        "{review}"
    );

    // A configMap update reaches the running container's mounted file.
    s.ok(
        V,
        &[
            "patch",
            "configmap",
            "cfg",
            "-p",
            r#"{"data":{"greeting":"bonjour"}}"#,
        ],
    );
    // Within the kubelet's resync (1 min, upstream's sync frequency) and the object TTL.
    wait_for(100, "the update inside the container", || {
        log_of(&data, "vols", &uid, "main")
            .contains("LIVE bonjour written-by-writer")
            .then_some(())
    });
    assert_ne!(
        std::fs::read_link(cfg_dir.join("..data")).unwrap(),
        data_link,
        "a new version"
    );

    // Deleting the pod removes everything of it on the host, tmpfs mounts included.
    s.ok(V, &["delete", "pod", "vols", "--timeout=60s"]);
    let pod_dir = data.join("agent/pods").join(&uid);
    wait_for(30, "the pod directory removed", || {
        (!pod_dir.exists()).then_some(())
    });
    assert!(mounts_under(&pod_dir).is_empty(), "{:?}", mounts_under(&pod_dir));
    s.kill();
    assert!(mounts_under(&data).is_empty(), "{:?}", mounts_under(&data));
}

/// Volumes that cannot be made keep the pod's containers from starting (FailedMount, as
/// upstream) until they can; a missing env key is a CreateContainerConfigError; a memory
/// emptyDir is a tmpfs of its size limit; nothing is left on the host afterwards.
#[test]
fn missing_sources_keep_containers_waiting_until_they_exist() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = start("vol-waits", "10.194.0.0/16", "r8sw");
    let (s, data) = (&mut c.s, c.data.clone());
    let nocm = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: nocm\nspec:\n  containers:\n  - {name: app, image: busybox, command: [sh, -c, 'echo \"got $(cat /cfg/k)\"; sleep 3600'], volumeMounts: [{name: cfg, mountPath: /cfg}]}\n  volumes:\n  - {name: cfg, configMap: {name: later}}\n";
    let badenv = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: badenv\nspec:\n  containers:\n  - name: app\n    image: busybox\n    command: [sleep, '3600']\n    env: [{name: X, valueFrom: {configMapKeyRef: {name: present, key: nokey}}}]\n";
    let badhost = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: badhost\nspec:\n  containers:\n  - {name: app, image: busybox, command: [sleep, '3600'], volumeMounts: [{name: h, mountPath: /h}]}\n  volumes:\n  - {name: h, hostPath: {path: /nonexistent-r8s-volume-test, type: Directory}}\n";
    let mem = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: mem\nspec:\n  containers:\n  - {name: app, image: busybox, command: [sh, -c, 'echo data > /scratch/f; sleep 3600'], volumeMounts: [{name: scratch, mountPath: /scratch}]}\n  volumes:\n  - {name: scratch, emptyDir: {medium: Memory, sizeLimit: 16Mi}}\n";
    s.ok(V, &["create", "configmap", "present", "--from-literal=other=1"]);
    for p in [nocm, badenv, badhost, mem] {
        s.ok_stdin(V, &["create", "-f", "-"], p);
    }
    let waiting = |name: &str| -> Option<(String, String)> {
        let p = pod_json(s, name)?;
        let w = &p["status"]["containerStatuses"][0]["state"]["waiting"];
        Some((
            w["reason"].as_str()?.to_string(),
            w["message"].as_str().unwrap_or("").to_string(),
        ))
    };
    wait_for(60, "nocm's FailedMount event", || {
        events_of(s, "nocm")
            .iter()
            .any(|(r, m)| {
                r == "FailedMount"
                    && m == "MountVolume.SetUp failed for volume \"cfg\" : configmap \"later\" not found"
            })
            .then_some(())
    });
    assert_eq!(
        waiting("nocm").unwrap().0,
        "ContainerCreating",
        "{:?}",
        pod_json(s, "nocm")
    );
    assert_eq!(pod_json(s, "nocm").unwrap()["status"]["phase"], "Pending");
    let (reason, message) = wait_for(60, "badenv's CreateContainerConfigError", || {
        waiting("badenv").filter(|(r, _)| r == "CreateContainerConfigError")
    });
    assert_eq!(
        (reason.as_str(), message.as_str()),
        (
            "CreateContainerConfigError",
            "couldn't find key nokey in ConfigMap default/present"
        )
    );
    wait_for(60, "badhost's FailedMount event", || {
        events_of(s, "badhost")
            .iter()
            .any(|(r, m)| {
                r == "FailedMount"
                    && m == "MountVolume.SetUp failed for volume \"h\" : hostPath type check failed: /nonexistent-r8s-volume-test is not a directory"
            })
            .then_some(())
    });
    assert_eq!(waiting("badhost").unwrap().0, "ContainerCreating");

    // The memory emptyDir: a tmpfs of 16 MiB.
    wait_for(90, "mem Running", || {
        (pod_json(s, "mem")?["status"]["phase"] == "Running").then_some(())
    });
    let mem_uid = uid_of(s, "mem");
    let scratch = data
        .join("agent/pods")
        .join(&mem_uid)
        .join("volumes/kubernetes.io~empty-dir/scratch");
    let m = mounts_under(&scratch);
    assert!(
        m.len() == 1 && m[0].contains(" tmpfs ") && m[0].contains("size=16384k"),
        "{m:?}"
    );
    wait_for(30, "the container's write", || {
        (std::fs::read_to_string(scratch.join("f")).ok()? == "data\n").then_some(())
    });

    // Once the configMap exists, the waiting pod starts and reads it.
    s.ok(V, &["create", "configmap", "later", "--from-literal=k=arrived"]);
    wait_for(90, "nocm Running", || {
        (pod_json(s, "nocm")?["status"]["phase"] == "Running").then_some(())
    });
    let nocm_uid = uid_of(s, "nocm");
    wait_for(30, "nocm's output", || {
        log_of(&data, "nocm", &nocm_uid, "app")
            .contains("got arrived")
            .then_some(())
    });

    s.ok(
        V,
        &[
            "delete",
            "pod",
            "nocm",
            "badenv",
            "badhost",
            "mem",
            "--timeout=60s",
        ],
    );
    let pods_dir = data.join("agent/pods");
    wait_for(30, "every pod directory removed", || {
        std::fs::read_dir(&pods_dir)
            .map(|rd| rd.count() == 0)
            .unwrap_or(true)
            .then_some(())
    });
    assert!(
        mounts_under(&pods_dir).is_empty(),
        "{:?}",
        mounts_under(&pods_dir)
    );
    s.kill();
    assert!(mounts_under(&data).is_empty(), "{:?}", mounts_under(&data));
}

/// A pod of `name` that runs `script` with the claim `claim` mounted at /data.
fn claim_pod(name: &str, claim: &str, script: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: busybox\n    command: [sh, -c, '{script}']\n    volumeMounts: [{{name: data, mountPath: /data}}]\n  volumes:\n  - name: data\n    persistentVolumeClaim: {{claimName: {claim}}}\n"
    )
}

/// Issue 39's first journey: a claim on the default class (r8s's local provisioner) binds when
/// its pod is scheduled, on that pod's node; the pod writes a file, and writing past the
/// claim's size fails with "No space left on device"; a new pod reads the file back; the
/// claim's deletion removes the volume, its file system and its directory.
#[test]
fn a_claim_on_the_default_class_is_provisioned_on_its_pods_node_and_keeps_its_data() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let c = start("claim-node", "10.216.0.0/16", "r8sst");
    let s = &c.s;
    let classes = s.ok(V, &["get", "storageclass"]);
    assert!(
        classes.contains("local-path (default)")
            && classes.contains("r8s.io/local-path")
            && classes.contains("WaitForFirstConsumer"),
        "{classes}"
    );
    s.ok_stdin(
        V,
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data}\nspec:\n  accessModes: [ReadWriteOnce]\n  resources: {requests: {storage: 64Mi}}\n",
    );
    // The default class is filled in; nothing is provisioned before a pod uses the claim.
    assert_eq!(
        s.ok(
            V,
            &["get", "pvc", "data", "-o", "jsonpath={.spec.storageClassName}"]
        ),
        "local-path"
    );
    wait_for(20, "the claim to wait for its consumer", || {
        let events = s.ok(
            V,
            &[
                "get",
                "events",
                "--field-selector",
                "involvedObject.name=data",
                "-o",
                "jsonpath={.items[*].reason}",
            ],
        );
        events.contains("WaitForFirstConsumer").then_some(())
    });
    assert_eq!(
        s.ok(V, &["get", "pvc", "data", "-o", "jsonpath={.status.phase}"]),
        "Pending"
    );

    s.ok_stdin(
        V,
        &["apply", "-f", "-"],
        &claim_pod(
            "writer",
            "data",
            "echo kept-across-pods > /data/file; dd if=/dev/zero of=/data/big bs=1M count=100 2> /data/dd.log; rm -f /data/big; sleep 3600",
        ),
    );
    wait_for(90, "the writer to run", || {
        (s.ok(V, &["get", "pod", "writer", "-o", "jsonpath={.status.phase}"]) == "Running").then_some(())
    });
    let pv = s.ok(
        V,
        &[
            "get",
            "pvc",
            "data",
            "-o",
            "jsonpath={.status.phase} {.spec.volumeName}",
        ],
    );
    let pv = pv
        .strip_prefix("Bound ")
        .unwrap_or_else(|| panic!("claim not bound: {pv}"))
        .to_owned();
    let volume = json(s, &["get", "pv", &pv]);
    assert_eq!(
        volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"],
        serde_json::json!(["claim-node"])
    );
    assert_eq!(volume["spec"]["persistentVolumeReclaimPolicy"], "Delete");
    let dir = PathBuf::from(volume["spec"]["hostPath"]["path"].as_str().unwrap());
    assert!(
        dir.starts_with(c.data.join("agent").join("storage")),
        "{}",
        dir.display()
    );
    wait_for(30, "the file on the node", || {
        (std::fs::read_to_string(dir.join("file")).ok()? == "kept-across-pods\n").then_some(())
    });
    // The claim's 64Mi is a file system of that size.
    let log = wait_for(60, "the writer to fill its volume", || {
        let log = std::fs::read_to_string(dir.join("dd.log")).ok()?;
        log.contains("records out").then_some(log)
    });
    assert!(log.contains("No space left on device"), "{log}");
    let image = PathBuf::from(format!("{}.img", dir.display()));
    assert!(image.is_file(), "{}", image.display());
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        mounts
            .lines()
            .any(|l| l.split(' ').nth(4) == Some(dir.to_str().unwrap()) && l.contains(" ext4 ")),
        "{} is not an ext4 mount",
        dir.display()
    );

    // The claim grows (the class allows expansion): the volume, then its file system online.
    let patch = |size: &str| {
        s.kubectl(
            V,
            &[
                "patch",
                "pvc",
                "data",
                "-p",
                &format!("{{\"spec\":{{\"resources\":{{\"requests\":{{\"storage\":\"{size}\"}}}}}}}}"),
            ],
        )
    };
    let shrink = patch("32Mi");
    assert!(
        String::from_utf8_lossy(&shrink.stderr).contains("field can not be less than status.capacity"),
        "{}",
        String::from_utf8_lossy(&shrink.stderr)
    );
    assert!(patch("128Mi").status.success());
    wait_for(30, "the claim's capacity to grow", || {
        (s.ok(
            V,
            &["get", "pvc", "data", "-o", "jsonpath={.status.capacity.storage}"],
        ) == "128Mi")
            .then_some(())
    });
    // Another pod reads what the first wrote, on the grown file system (grown online where the
    // kernel allows it, else when the volume is mounted again for this pod).
    s.ok(V, &["delete", "pod", "writer", "--wait=true"]);
    // No pod uses the volume now: its file system is unmounted.
    let mounted = |d: &PathBuf| {
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .any(|l| l.split(' ').nth(4) == Some(d.to_str().unwrap()))
    };
    wait_for(30, "the unused volume to be unmounted", || {
        (!mounted(&dir)).then_some(())
    });
    s.ok_stdin(
        V,
        &["apply", "-f", "-"],
        &claim_pod("reader", "data", "cat /data/file; sleep 3600"),
    );
    wait_for(90, "the reader to print the file", || {
        let out = s.kubectl(V, &["logs", "reader"]);
        (String::from_utf8_lossy(&out.stdout).trim() == "kept-across-pods").then_some(())
    });
    let fs_kb = || -> Option<u64> {
        let out = Command::new("df")
            .args(["-k", "--output=size"])
            .arg(&dir)
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .nth(1)?
            .trim()
            .parse()
            .ok()
    };
    wait_for(60, "the file system to grow", || {
        fs_kb().filter(|kb| *kb > 100 * 1024).map(|_| ())
    });
    // The node reports the volume in use, attached as the loop device it is mounted from, and
    // that device reads its image with direct I/O (no second page cache).
    let unique = format!("r8s.io/local-path/{pv}");
    let attached = wait_for(30, "the node to report the volume in use", || {
        let node = json(s, &["get", "node", "claim-node"]);
        let in_use = node["status"]["volumesInUse"].as_array()?.clone();
        (in_use == [serde_json::json!(unique)]).then(|| node["status"]["volumesAttached"].clone())
    });
    assert_eq!(attached[0]["name"], unique.as_str(), "{attached}");
    let device = attached[0]["devicePath"].as_str().unwrap().to_owned();
    assert!(device.starts_with("/dev/loop"), "{attached}");
    let loop_info = Command::new("losetup")
        .args(["--noheadings", "-O", "BACK-FILE,DIO", &device])
        .output()
        .unwrap();
    let loop_info = String::from_utf8_lossy(&loop_info.stdout);
    assert!(
        loop_info.contains(image.to_str().unwrap()) && loop_info.trim_end().ends_with('1'),
        "{device}: {loop_info}"
    );

    // The claim's deletion takes its volume and the directory with it.
    s.ok(V, &["delete", "pod", "reader", "--wait=true"]);
    wait_for(30, "the node to report no volume in use", || {
        let node = json(s, &["get", "node", "claim-node"]);
        (node["status"]["volumesInUse"].is_null() && node["status"]["volumesAttached"].is_null())
            .then_some(())
    });
    s.ok(V, &["delete", "pvc", "data"]);
    wait_for(30, "the volume to go", || {
        (!s.kubectl(V, &["get", "pv", &pv]).status.success()).then_some(())
    });
    wait_for(60, "the directory and its image to go", || {
        (!dir.exists() && !image.exists()).then_some(())
    });
}

/// A generic ephemeral volume: the claim its controller makes (`<pod>-<volume>`, owned by the
/// pod) is provisioned on the pod's node and goes with the pod, and its volume's data with it.
#[test]
fn an_ephemeral_volume_is_a_claim_that_lives_and_dies_with_its_pod() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let c = start("ephemeral-node", "10.217.0.0/16", "r8sep");
    let s = &c.s;
    s.ok_stdin(
        V,
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata: {name: scratch}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: busybox\n    command: [sh, -c, 'echo in-ephemeral > /scratch/file; sleep 3600']\n    volumeMounts: [{name: work, mountPath: /scratch}]\n  volumes:\n  - name: work\n    ephemeral:\n      volumeClaimTemplate:\n        metadata: {labels: {kind: scratch}}\n        spec:\n          accessModes: [ReadWriteOnce]\n          resources: {requests: {storage: 32Mi}}\n",
    );
    wait_for(90, "the pod to run", || {
        (s.ok(V, &["get", "pod", "scratch", "-o", "jsonpath={.status.phase}"]) == "Running").then_some(())
    });
    let claim = json(s, &["get", "pvc", "scratch-work"]);
    assert_eq!(claim["metadata"]["ownerReferences"][0]["kind"], "Pod");
    assert_eq!(claim["metadata"]["ownerReferences"][0]["name"], "scratch");
    assert_eq!(claim["metadata"]["labels"]["kind"], "scratch");
    assert_eq!(claim["spec"]["storageClassName"], "local-path");
    assert_eq!(claim["status"]["phase"], "Bound");
    let pv = claim["spec"]["volumeName"].as_str().unwrap().to_owned();
    let dir = PathBuf::from(
        json(s, &["get", "pv", &pv])["spec"]["hostPath"]["path"]
            .as_str()
            .unwrap(),
    );
    wait_for(30, "the file in the volume", || {
        (std::fs::read_to_string(dir.join("file")).ok()? == "in-ephemeral\n").then_some(())
    });
    // The pod goes: its claim (garbage-collected), the volume and the data follow.
    s.ok(V, &["delete", "pod", "scratch", "--wait=true"]);
    wait_for(60, "the claim to go", || {
        (!s.kubectl(V, &["get", "pvc", "scratch-work"]).status.success()).then_some(())
    });
    wait_for(60, "the volume to go", || {
        (!s.kubectl(V, &["get", "pv", &pv]).status.success()).then_some(())
    });
    wait_for(60, "the data to go", || (!dir.exists()).then_some(()));
}

/// A static volume: a hostPath PersistentVolume (Retain) that a claim picks by its selector.
/// A pod reads what the directory held and writes through the whole volume and a subPath;
/// another mounts the claim read-only and cannot write; the claim in use is held
/// (pvc-protection) until its pods go; then the volume is Released and the data stays.
#[test]
fn a_static_volume_is_chosen_by_selector_and_retains_its_data() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let c = start("static-vol-node", "10.219.0.0/16", "r8ssv");
    let s = &c.s;
    let dir = c.data.join("static-volume");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("seed"), "from-the-admin\n").unwrap();
    let pv = |name: &str, tier: &str, path: &Path| {
        format!(
            "apiVersion: v1\nkind: PersistentVolume\nmetadata: {{name: {name}, labels: {{tier: {tier}}}}}\nspec:\n  capacity: {{storage: 1Gi}}\n  accessModes: [ReadWriteOnce]\n  persistentVolumeReclaimPolicy: Retain\n  storageClassName: \"\"\n  hostPath: {{path: {}, type: Directory}}\n---\n",
            path.display()
        )
    };
    s.ok_stdin(
        V,
        &["apply", "-f", "-"],
        &[
            pv("static-web", "web", &c.data.join("never-used")),
            pv("static-db", "db", &dir),
        ]
        .concat(),
    );
    s.ok_stdin(
        V,
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: db}\nspec:\n  accessModes: [ReadWriteOnce]\n  storageClassName: \"\"\n  selector: {matchLabels: {tier: db}}\n  resources: {requests: {storage: 100Mi}}\n",
    );
    wait_for(30, "the claim bound to the db volume", || {
        let out = s.ok(
            V,
            &[
                "get",
                "pvc",
                "db",
                "-o",
                "jsonpath={.status.phase} {.spec.volumeName}",
            ],
        );
        (out == "Bound static-db").then_some(())
    });
    s.ok_stdin(
        V,
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata: {name: writer}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: busybox\n    command: [sh, -c, 'cat /data/seed > /sub/copied; echo written > /data/out; sleep 3600']\n    volumeMounts:\n    - {name: data, mountPath: /data}\n    - {name: data, mountPath: /sub, subPath: nested/dir}\n  volumes:\n  - name: data\n    persistentVolumeClaim: {claimName: db}\n",
    );
    wait_for(90, "the writer's files on the node", || {
        let copied = std::fs::read_to_string(dir.join("nested/dir/copied")).ok()?;
        let out = std::fs::read_to_string(dir.join("out")).ok()?;
        (copied == "from-the-admin\n" && out == "written\n").then_some(())
    });
    // Read-only where the pod asks: the claim's data is there, and writing fails.
    s.ok_stdin(
        V,
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata: {name: reader}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: busybox\n    command: [sh, -c, 'touch /data/new 2>&1; cat /data/out; sleep 3600']\n    volumeMounts: [{name: data, mountPath: /data}]\n  volumes:\n  - name: data\n    persistentVolumeClaim: {claimName: db, readOnly: true}\n",
    );
    let logs = wait_for(90, "the reader's output", || {
        let out = s.kubectl(V, &["logs", "reader"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.contains("written").then_some(text)
    });
    assert!(logs.contains("Read-only file system"), "{logs}");
    assert!(!dir.join("new").exists());

    // In use: the claim's deletion waits for its pods.
    s.ok(V, &["delete", "pvc", "db", "--wait=false"]);
    std::thread::sleep(Duration::from_secs(2));
    let held = json(s, &["get", "pvc", "db"]);
    assert!(held["metadata"]["deletionTimestamp"].is_string(), "{held}");
    assert_eq!(
        held["metadata"]["finalizers"],
        serde_json::json!(["kubernetes.io/pvc-protection"])
    );
    s.ok(V, &["delete", "pod", "writer", "reader", "--wait=true"]);
    wait_for(30, "the claim to go", || {
        (!s.kubectl(V, &["get", "pvc", "db"]).status.success()).then_some(())
    });
    // Retain: the volume is Released, not bound again, and the data stays.
    wait_for(30, "the volume Released", || {
        (s.ok(V, &["get", "pv", "static-db", "-o", "jsonpath={.status.phase}"]) == "Released").then_some(())
    });
    assert_eq!(std::fs::read_to_string(dir.join("out")).unwrap(), "written\n");
    assert_eq!(
        std::fs::read_to_string(dir.join("nested/dir/copied")).unwrap(),
        "from-the-admin\n"
    );

    // A pod put on this node (no scheduler) with a volume of another node cannot start, and
    // says why.
    let elsewhere = c.data.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    s.ok_stdin(
        V,
        &["apply", "-f", "-"],
        &format!(
            "apiVersion: v1\nkind: PersistentVolume\nmetadata: {{name: static-elsewhere}}\nspec:\n  capacity: {{storage: 1Gi}}\n  accessModes: [ReadWriteOnce]\n  storageClassName: \"\"\n  claimRef: {{namespace: default, name: far}}\n  hostPath: {{path: {}}}\n  nodeAffinity:\n    required:\n      nodeSelectorTerms:\n      - matchExpressions: [{{key: kubernetes.io/hostname, operator: In, values: [another-node]}}]\n---\napiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: far}}\nspec:\n  accessModes: [ReadWriteOnce]\n  storageClassName: \"\"\n  volumeName: static-elsewhere\n  resources: {{requests: {{storage: 1Gi}}}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {{name: misplaced}}\nspec:\n  nodeName: static-vol-node\n  terminationGracePeriodSeconds: 1\n  containers:\n  - {{name: main, image: busybox, command: [sleep, \"3600\"], volumeMounts: [{{name: data, mountPath: /data}}]}}\n  volumes:\n  - name: data\n    persistentVolumeClaim: {{claimName: far}}\n",
            elsewhere.display()
        ),
    );
    let message = wait_for(60, "the FailedMount event", || {
        let events = json(
            s,
            &[
                "get",
                "events",
                "--field-selector",
                "involvedObject.name=misplaced",
            ],
        );
        events["items"]
            .as_array()?
            .iter()
            .filter(|e| e["reason"] == "FailedMount")
            .map(|e| e["message"].as_str().unwrap_or("").to_owned())
            // (Before its claim is bound, the pod waits for that first.)
            .find(|m| m.contains("volume node affinity conflict"))
    });
    assert!(message.contains("static-elsewhere"), "{message}");
    assert_eq!(
        s.ok(V, &["get", "pod", "misplaced", "-o", "jsonpath={.status.phase}"]),
        "Pending"
    );
    s.ok(V, &["delete", "pod", "misplaced", "--grace-period=0", "--force"]);
}

/// A StatefulSet's volumeClaimTemplates on the default class: each replica gets its own claim
/// and volume, and a replica's pod deleted and made again finds its data.
#[test]
fn statefulset_replicas_keep_their_own_volumes_across_pod_deletion() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let c = start("sts-vol-node", "10.218.0.0/16", "r8sss");
    let s = &c.s;
    s.ok_stdin(
        V,
        &["apply", "-f", "-"],
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: db}\nspec:\n  replicas: 2\n  serviceName: db\n  selector: {matchLabels: {app: db}}\n  template:\n    metadata: {labels: {app: db}}\n    spec:\n      terminationGracePeriodSeconds: 1\n      containers:\n      - name: main\n        image: busybox\n        command: [sh, -c, '[ -f /data/born ] || hostname > /data/born; echo $(hostname) >> /data/starts; sleep 3600']\n        volumeMounts: [{name: data, mountPath: /data}]\n  volumeClaimTemplates:\n  - metadata: {name: data}\n    spec:\n      accessModes: [ReadWriteOnce]\n      resources: {requests: {storage: 32Mi}}\n",
    );
    let dir_of = |claim: &str| -> PathBuf {
        let pv = wait_for(90, "the claim to be bound", || {
            let out = s.kubectl(
                V,
                &[
                    "get",
                    "pvc",
                    claim,
                    "-o",
                    "jsonpath={.status.phase} {.spec.volumeName}",
                ],
            );
            String::from_utf8_lossy(&out.stdout)
                .strip_prefix("Bound ")
                .map(str::to_owned)
        });
        PathBuf::from(
            json(s, &["get", "pv", &pv])["spec"]["hostPath"]["path"]
                .as_str()
                .unwrap(),
        )
    };
    let (d0, d1) = (dir_of("data-db-0"), dir_of("data-db-1"));
    assert_ne!(d0, d1);
    for (d, name) in [(&d0, "db-0"), (&d1, "db-1")] {
        wait_for(60, "the replica to write its volume", || {
            (std::fs::read_to_string(d.join("born")).ok()?.trim() == name).then_some(())
        });
    }
    // db-0 goes and comes back: the same volume, its first start remembered.
    let uid = uid_of(s, "db-0");
    s.ok(V, &["delete", "pod", "db-0", "--wait=true"]);
    wait_for(90, "db-0 to start again", || {
        let starts = std::fs::read_to_string(d0.join("starts")).ok()?;
        (starts.lines().count() == 2 && uid_of(s, "db-0") != uid).then_some(())
    });
    assert_eq!(std::fs::read_to_string(d0.join("born")).unwrap().trim(), "db-0");
    assert_eq!(
        std::fs::read_to_string(d1.join("starts"))
            .unwrap()
            .lines()
            .count(),
        1
    );
    s.ok(V, &["delete", "statefulset", "db", "--wait=true"]);
}
