//! Three real nodes on one machine (`scripts/multi-node.sh`: a server and two joined agents,
//! each in its own network, mount and PID namespace with its own containerd), joined by the
//! VXLAN overlay: pods on different nodes reach each other by IP over TCP and UDP with their
//! own addresses, a Service's cluster IP and DNS name reach every replica from every node, a
//! NodePort answers on every node's address, a pod on a joined node reaches the API through
//! the kubernetes Service; losing a node (SIGKILL of its init) makes it NotReady, its pod is
//! replaced on a survivor and the Service keeps answering from the survivors; a lost node that
//! comes back starts none of its evicted pods again and no StatefulSet replica runs twice;
//! teardown leaves nothing behind. Traffic goes only to the harness's own namespaces and pods.

use std::net::{Ipv4Addr, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support;
use support::cluster::{wait_for, ONE_AGENT, V};

pub(crate) struct Harness {
    pub(crate) dir: PathBuf,
    pub(crate) kubeconfig: String,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/multi-node.sh")
}

impl Harness {
    fn up(n: usize, server_args: &str) -> Harness {
        Self::up_with(n, server_args, "")
    }

    /// With `node_args` for every node (server and agents).
    fn up_with(n: usize, server_args: &str, node_args: &str) -> Harness {
        Self::up_servers(n, 1, server_args, node_args)
    }

    /// `servers` of the `n` nodes are servers of one HA cluster (`--servers`).
    pub(crate) fn up_servers(n: usize, servers: usize, server_args: &str, node_args: &str) -> Harness {
        Self::up_env(n, servers, server_args, node_args, &[])
    }

    /// With `env` for `multi-node.sh up` too.
    fn up_env(n: usize, servers: usize, server_args: &str, node_args: &str, env: &[(&str, &str)]) -> Harness {
        let dir = tempfile::Builder::new()
            .prefix("r8s-mn")
            .tempdir()
            .unwrap()
            .keep();
        // The images the nodes import (the harness builds them if missing).
        let images = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-images");
        let h = Harness {
            kubeconfig: dir.join("kubeconfig.yaml").display().to_string(),
            dir,
        };
        let started = Instant::now();
        let out = Command::new("bash")
            .arg(script())
            .args(["up", &n.to_string()])
            .arg(&h.dir)
            .args(["--servers", &servers.to_string()])
            .env("R8S_BIN", env!("CARGO_BIN_EXE_r8s"))
            .env("R8S_IMAGES", &images)
            .env("R8S_MN_SERVER_ARGS", server_args)
            .env("R8S_MN_ARGS", node_args)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "multi-node.sh up failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("{n} nodes Ready {:?} after `up`", started.elapsed());
        h
    }

    pub(crate) fn kubectl(&self, args: &[&str]) -> Output {
        Command::new(support::kubectl_binary(V))
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .unwrap()
    }

    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub(crate) fn apply(&self, yaml: &str) {
        let mut child = Command::new(support::kubectl_binary(V))
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["apply", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(yaml.as_bytes()).unwrap();
        assert!(child.wait().unwrap().success(), "kubectl apply");
    }

    pub(crate) fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        serde_json::from_str(&self.ok(&all)).unwrap()
    }

    /// The node's address on the harness's underlay.
    pub(crate) fn node_ip(&self, node: &str) -> String {
        let n = self.json(&["get", "node", node]);
        n["status"]["addresses"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["type"] == "InternalIP")
            .unwrap()["address"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// `multi-node.sh kill` or `start` of `node` (or another verb, with `more` arguments).
    pub(crate) fn node_command(&self, verb: &str, node: &str) {
        self.node_command_with(verb, node, &[]);
    }

    pub(crate) fn node_command_with(&self, verb: &str, node: &str, more: &[&str]) {
        let out = Command::new("bash")
            .arg(script())
            .arg(verb)
            .arg(&self.dir)
            .arg(node)
            .args(more)
            .env("R8S_BIN", env!("CARGO_BIN_EXE_r8s"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "multi-node.sh {verb} {node}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The process that is the node's init (PID 1 of its PID namespace).
    fn node_init(&self, i: usize) -> i32 {
        let unshare = std::fs::read_to_string(self.dir.join(format!("node{i}/pid"))).unwrap();
        let out = Command::new("pgrep")
            .args(["-P", unshare.trim()])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .expect("the node's init")
            .parse()
            .unwrap()
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        let out = Command::new("bash")
            .arg(script())
            .arg("down")
            .arg(&self.dir)
            .output();
        if let Ok(o) = out {
            if !o.status.success() {
                eprintln!("multi-node.sh down: {}", String::from_utf8_lossy(&o.stderr));
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const WEB: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: web}
  spec:
    replicas: 3
    selector: {matchLabels: {app: web}}
    template:
      metadata: {labels: {app: web}}
      spec:
        terminationGracePeriodSeconds: 1
        # One replica per node while there are three nodes.
        affinity:
          podAntiAffinity:
            preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 100
              podAffinityTerm:
                topologyKey: kubernetes.io/hostname
                labelSelector: {matchLabels: {app: web}}
        # Replaced quickly when their node is lost.
        tolerations:
        - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
        - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
        containers:
        - name: c
          image: busybox
          command: [sh, -c, "mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www"]
          readinessProbe:
            tcpSocket: {port: 8080}
            periodSeconds: 1
- apiVersion: v1
  kind: Service
  metadata: {name: web}
  spec:
    selector: {app: web}
    ports: [{port: 80, targetPort: 8080}]
- apiVersion: v1
  kind: Service
  metadata: {name: web-np}
  spec:
    type: NodePort
    selector: {app: web}
    ports: [{port: 80, targetPort: 8080, nodePort: 30180}]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: Role
  metadata: {name: pod-reader}
  rules: [{apiGroups: [""], resources: [pods], verbs: [list]}]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: RoleBinding
  metadata: {name: default-reads-pods}
  roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-reader}
  subjects: [{kind: ServiceAccount, name: default, namespace: default}]
"#;

/// A StatefulSet of three replicas spread one per node, each with a claim of the default
/// class (r8s's local provisioner): a replica writes its name in its volume when it is new.
const DB: &str = r#"
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  replicas: 3
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      terminationGracePeriodSeconds: 1
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: db}}}
      containers:
      - name: main
        image: busybox
        command: [sh, -c, '[ -f /data/born ] || hostname > /data/born; sleep 3600']
        volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 32Mi}}
"#;

/// Running db replicas: (name, node).
/// The pods `kubectl get pods ARGS` lists that run and are not being deleted.
fn live_pods(h: &Harness, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["get", "pods"];
    all.extend(args);
    let l = h.json(&all);
    l["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null() && p["status"]["phase"] == "Running")
        .cloned()
        .collect()
}

fn running_db_pods(h: &Harness) -> Vec<(String, String)> {
    let mut pods: Vec<(String, String)> = live_pods(h, &["-l", "app=db"])
        .iter()
        .map(|p| {
            (
                p["metadata"]["name"].as_str().unwrap().to_owned(),
                p["spec"]["nodeName"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    pods.sort();
    pods
}

/// The volume of a db replica's claim and the node that volume is on.
fn db_volume(h: &Harness, pod: &str) -> Option<(String, String)> {
    let out = h.kubectl(&[
        "get",
        "pvc",
        &format!("data-{pod}"),
        "-o",
        "jsonpath={.status.phase} {.spec.volumeName}",
    ]);
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    let pv = out.strip_prefix("Bound ")?.to_owned();
    // The claim can still name a volume that was just deleted (it turns Lost a moment later):
    // that is "no volume yet", not an error.
    let out = h.kubectl(&[
        "get",
        "pv",
        &pv,
        "-o",
        "jsonpath={.spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].values[0]}",
    ]);
    if !out.status.success() {
        return None;
    }
    let node = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    Some((pv, node))
}

/// Ready web pods: (name, node, IP).
fn ready_web_pods(h: &Harness) -> Vec<(String, String, String)> {
    let l = h.json(&["get", "pods", "-l", "app=web"]);
    l["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .filter(|p| {
            p["status"]["conditions"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
        })
        .map(|p| {
            (
                p["metadata"]["name"].as_str().unwrap().to_owned(),
                p["spec"]["nodeName"].as_str().unwrap_or("").to_owned(),
                p["status"]["podIP"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

/// `n` HTTP GETs with busybox's nc from pod `from` to `host:port`: the bodies (a failed one
/// as "FAIL").
fn gets(h: &Harness, from: &str, host: &str, port: u16, n: usize) -> Vec<String> {
    let script = format!(
        "for i in $(seq {n}); do r=$(printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {host} {port} | tail -1); echo \"${{r:-FAIL}}\"; done"
    );
    let out = h.kubectl(&["exec", from, "--", "sh", "-c", &script]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().to_owned())
        .collect()
}

/// The host process serving pod `pod` (busybox httpd, found by the hostname in its root):
/// its network namespace is the pod's.
fn pod_netns(pod: &str) -> std::fs::File {
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if !String::from_utf8_lossy(&cmd).starts_with("httpd\0-f\0-p\08080") {
            continue;
        }
        let host = std::fs::read_to_string(format!("/proc/{pid}/root/etc/hostname")).unwrap_or_default();
        if host.trim() == pod {
            return std::fs::File::open(format!("/proc/{pid}/ns/net")).unwrap();
        }
    }
    panic!("no httpd process of pod {pod}");
}

/// A UDP datagram from pod `from` to pod `to` (by its IP): the source address `to` saw.
fn udp_between(from: &str, to: &str, to_ip: Ipv4Addr) -> Result<Ipv4Addr, String> {
    let (from_ns, to_ns) = (pod_netns(from), pod_netns(to));
    let in_ns = |ns: &std::fs::File| {
        let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
    };
    let server = std::thread::scope(|s| {
        s.spawn(|| {
            in_ns(&to_ns);
            UdpSocket::bind((to_ip, 9999)).unwrap()
        })
        .join()
        .unwrap()
    });
    server.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            in_ns(&from_ns);
            let c = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
            c.send_to(b"ping", (to_ip, 9999)).map(|_| ())
        })
        .join()
        .unwrap()
    })
    .map_err(|e| e.to_string())?;
    let mut buf = [0u8; 8];
    let (_, src) = server.recv_from(&mut buf).map_err(|e| e.to_string())?;
    match src.ip() {
        std::net::IpAddr::V4(a) => Ok(a),
        other => Err(format!("from {other}")),
    }
}

fn curl(url: &str) -> Option<String> {
    let out = Command::new("curl").args(["-s", "-m", "2", url]).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Whether pod `from` opens a TCP connection to `ip:port` (busybox nc, 1 s).
fn reaches(h: &Harness, from: &str, ip: &str, port: u16) -> bool {
    let script = format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 1 {ip} {port} | grep -q .");
    h.kubectl(&["exec", from, "-n", namespace_of(from), "--", "sh", "-c", &script])
        .status
        .success()
}

fn namespace_of(pod: &str) -> &'static str {
    if pod == "prober" {
        "probe"
    } else {
        "default"
    }
}

/// Wait until `from` → `ip:port` is as `want` (policies take effect within moments).
fn wait_reach(h: &Harness, from: &str, ip: &str, port: u16, want: bool, what: &str) {
    wait_for(15, what, || (reaches(h, from, ip, port) == want).then_some(()));
}

/// NetworkPolicy across nodes: default deny, then admission by pod label (same namespace
/// only), by namespace label, by port, by ipBlock for egress; a replacement pod is policed
/// from its first moment.
fn network_policies(h: &Harness, pods: &[(String, String, String)]) {
    h.apply(
        r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Namespace
  metadata: {name: probe, labels: {purpose: probe}}
- apiVersion: v1
  kind: Pod
  metadata: {name: prober, namespace: probe, labels: {role: friend}}
  spec:
    nodeName: node2
    terminationGracePeriodSeconds: 1
    containers:
    - {name: c, image: busybox, command: [sleep, "3600"]}
"#,
    );
    wait_for(60, "the prober Running", || {
        (h.ok(&[
            "get",
            "pod",
            "prober",
            "-n",
            "probe",
            "-o",
            "jsonpath={.status.phase}",
        ]) == "Running")
            .then_some(())
    });
    let by_node = |n: &str| pods.iter().find(|(_, node, _)| node == n).unwrap();
    let (web1, _, ip1) = by_node("node1");
    let (web3, _, ip3) = by_node("node3");
    assert!(
        reaches(h, "prober", ip1, 8080) && reaches(h, web3, ip1, 8080),
        "open before any policy"
    );

    // Default deny for the web pods' ingress: neither another web pod on another node nor
    // the prober gets in; web pods still reach out.
    h.apply(
        r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web-deny}
spec:
  podSelector: {matchLabels: {app: web}}
"#,
    );
    let netpol = h.ok(&["get", "netpol"]);
    assert!(
        netpol.contains("web-deny") && netpol.contains("app=web"),
        "{netpol}"
    );
    wait_reach(h, web3, ip1, 8080, false, "web3 → web1 denied");
    assert!(!reaches(h, "prober", ip1, 8080), "prober → web1 denied");

    // A pod-label rule admits pods of the policy's own namespace only: role=friend in
    // `probe` stays out.
    h.apply(
        r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web-from-friends}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress:
  - from: [{podSelector: {matchLabels: {role: friend}}}]
"#,
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !reaches(h, "prober", ip1, 8080),
        "a pod label alone means the policy's namespace"
    );

    // By namespace label, on the web port only.
    h.apply(
        r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web-from-probes}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress:
  - from: [{namespaceSelector: {matchLabels: {purpose: probe}}}]
    ports: [{port: 8080}]
"#,
    );
    wait_reach(
        h,
        "prober",
        ip1,
        8080,
        true,
        "prober (node2) → web1 (node1) admitted by namespace",
    );
    assert!(reaches(h, "prober", ip3, 8080), "and web3 on node3");
    assert!(!reaches(h, web3, ip1, 8080), "web pods are still not admitted");

    // Egress by ipBlock: the prober may reach web1's address only.
    h.apply(&format!(
        r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {{name: prober-out, namespace: probe}}
spec:
  podSelector: {{}}
  policyTypes: [Egress]
  egress:
  - to: [{{ipBlock: {{cidr: {ip1}/32}}}}]
"#
    ));
    wait_reach(h, "prober", ip3, 8080, false, "prober → web3 cut by egress");
    assert!(
        reaches(h, "prober", ip1, 8080),
        "prober → web1 allowed by egress and ingress"
    );

    // A new web pod is policed before it is Ready: its first check is already a refusal.
    h.ok(&["delete", "pod", web3, "--wait=false"]);
    let fresh = wait_for(90, "a replacement web pod Ready", || {
        ready_web_pods(h)
            .into_iter()
            .find(|(n, _, _)| !pods.iter().any(|(old, _, _)| old == n))
    });
    assert!(
        !reaches(h, web1, &fresh.2, 8080),
        "{} was reachable despite web-deny",
        fresh.0
    );

    h.ok(&["delete", "netpol", "--all"]);
    h.ok(&["delete", "netpol", "--all", "-n", "probe"]);
    wait_reach(h, web1, &fresh.2, 8080, true, "open again without policies");
    h.ok(&["delete", "namespace", "probe", "--wait=false"]);
}

#[test]
fn three_nodes_are_one_network_and_survive_losing_one() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: the multi-node harness needs root");
        return;
    }
    let cni_netns = || -> Vec<String> {
        std::fs::read_dir("/run/netns")
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("cni-"))
                    .collect()
            })
            .unwrap_or_default()
    };
    let cni_before = cni_netns();
    let h = Harness::up(3, "--node-monitor-grace-period 15s");
    let dir = h.dir.clone();
    let bridge = {
        let nodes = h.json(&["get", "nodes"]);
        let items = nodes["items"].as_array().unwrap();
        assert_eq!(items.len(), 3);
        let mut cidrs: Vec<&str> = items
            .iter()
            .map(|n| n["spec"]["podCIDR"].as_str().unwrap())
            .collect();
        cidrs.sort();
        cidrs.dedup();
        assert_eq!(cidrs.len(), 3, "each node its own subnet: {cidrs:?}");
        for n in items {
            let data = n["metadata"]["annotations"]["flannel.alpha.coreos.com/backend-data"]
                .as_str()
                .unwrap_or_default();
            assert!(
                data.contains("\"VtepMAC\""),
                "{} published no VTEP: {n}",
                n["metadata"]["name"]
            );
        }
        // The harness's host-side names, to check they are gone at the end.
        let out = Command::new("ip")
            .args(["-o", "link", "show", "type", "bridge"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split(": ").nth(1).map(|s| s.to_owned()))
            .find(|b| b.starts_with("r8smn"))
            .expect("the underlay bridge")
    };

    h.apply(WEB);
    let pods = wait_for(120, "3 web pods Ready on 3 nodes", || {
        let p = ready_web_pods(&h);
        let mut nodes: Vec<&str> = p.iter().map(|(_, n, _)| n.as_str()).collect();
        nodes.sort();
        nodes.dedup();
        (p.len() == 3 && nodes.len() == 3).then_some(p)
    });

    // `r8s trace`: one story across the nodes — each node's kubelet tells its pod's start,
    // which the API server gathers from the kubelets of the story's pods.
    let out = Command::new(env!("CARGO_BIN_EXE_r8s"))
        .args([
            "trace",
            "--kubeconfig",
            &h.kubeconfig,
            "deployment/web",
            "-o",
            "json",
        ])
        .env("KUBECACHEDIR", dir.join("kubecache-trace"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "r8s trace: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let story: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(story.get("incomplete").is_none(), "{story}");
    let stages = story["stages"].as_array().unwrap();
    let mut started_on: Vec<&str> = stages
        .iter()
        .filter(|s| {
            s["depth"] == 0
                && s["stage"] == "kubelet.sync_pod"
                && s["fields"]["decision"]
                    .as_str()
                    .is_some_and(|d| d.contains("ran the pod's sandbox"))
        })
        .map(|s| s["fields"]["node"].as_str().unwrap())
        .collect();
    started_on.sort();
    started_on.dedup();
    let mut pod_nodes: Vec<&str> = pods.iter().map(|(_, n, _)| n.as_str()).collect();
    pod_nodes.sort();
    assert_eq!(started_on, pod_nodes, "{story:#}");
    assert!(
        stages.iter().any(|s| s["stage"] == "schedule"
            && s["fields"]["decision"]
                .as_str()
                .is_some_and(|d| d.contains("nodes feasible; chose"))),
        "{story:#}"
    );

    // Every pod reaches every other by IP (TCP), and sees the other's own address (UDP: no
    // masquerade between pods). A pod is Ready as soon as its own node's side is up; the
    // paths to the other nodes follow within seconds (each node programs its peers as it
    // sees them, as flannel does), so the first exchange of each pair may wait a little.
    let reach_started = Instant::now();
    for (from, from_node, from_ip) in &pods {
        for (to, to_node, to_ip) in &pods {
            let what = format!("{from} ({from_node}) → {to} ({to_node}) by IP");
            wait_for(15, &what, || {
                (gets(&h, from, to_ip, 8080, 1).as_slice() == std::slice::from_ref(to)).then_some(())
            });
            if from != to {
                let src = udp_between(from, to, to_ip.parse().unwrap());
                assert_eq!(
                    src,
                    Ok(from_ip.parse().unwrap()),
                    "UDP {from} ({from_node}) → {to} ({to_node})"
                );
            }
        }
    }

    eprintln!(
        "every pod reached every other by IP {:?} after the pods were Ready",
        reach_started.elapsed()
    );

    // The Service by cluster IP and by DNS name from every node reaches every replica.
    let cluster_ip = h.ok(&["get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}"]);
    let names: Vec<&str> = pods.iter().map(|(n, _, _)| n.as_str()).collect();
    for (from, node, _) in &pods {
        for host in [cluster_ip.as_str(), "web", "web.default.svc.cluster.local"] {
            let got = gets(&h, from, host, 80, 30);
            assert!(
                !got.iter().any(|g| g == "FAIL"),
                "{from} ({node}) → {host}: {got:?}"
            );
            for n in &names {
                assert!(
                    got.iter().any(|g| g == n),
                    "{from} ({node}) → {host} never reached {n}: {got:?}"
                );
            }
        }
    }

    // The NodePort on every node's address, from the host.
    for node in ["node1", "node2", "node3"] {
        let ip = h.node_ip(node);
        let body = wait_for(10, "the NodePort", || curl(&format!("http://{ip}:30180/")));
        assert!(names.contains(&body.as_str()), "{node}: {body}");
    }

    // A pod on a joined node reaches the API through the kubernetes Service (in-cluster
    // config: the host's static kubectl mounted into busybox) and lists pods with its
    // ServiceAccount's rights.
    h.apply(&format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: client}}
spec:
  nodeName: node2
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: busybox
    command: [sleep, "3600"]
    volumeMounts: [{{name: kubectl, mountPath: /kubectl, readOnly: true}}]
  volumes:
  - name: kubectl
    hostPath: {{path: "{}", type: File}}
"#,
        support::kubectl_binary(V).display()
    ));
    wait_for(60, "the client pod Running", || {
        (h.ok(&["get", "pod", "client", "-o", "jsonpath={.status.phase}"]) == "Running").then_some(())
    });
    let listed = h.ok(&["exec", "client", "--", "/kubectl", "get", "pods", "-o", "name"]);
    for (name, _, _) in &pods {
        assert!(
            listed.contains(&format!("pod/{name}")),
            "in-cluster list from node2: {listed}"
        );
    }
    h.ok(&["delete", "pod", "client", "--wait=false"]);

    network_policies(&h, &pods);

    // Cordon: a pod that may only run on node2 waits while node2 is cordoned, and runs
    // there once it is uncordoned.
    h.ok(&["cordon", "node2"]);
    h.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: on-node2}
spec:
  nodeSelector: {kubernetes.io/hostname: node2}
  terminationGracePeriodSeconds: 1
  containers:
  - {name: c, image: busybox, command: [sleep, "3600"]}
"#,
    );
    let reason = wait_for(30, "on-node2 unschedulable", || {
        let p = h.json(&["get", "pod", "on-node2"]);
        let c = p["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "PodScheduled")?
            .clone();
        (c["status"] == "False").then(|| c["message"].as_str().unwrap_or("").to_owned())
    });
    assert!(reason.contains("unschedulable"), "{reason}");
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        h.json(&["get", "pod", "on-node2"])["spec"]["nodeName"].is_null(),
        "scheduled onto a cordoned node"
    );
    h.ok(&["uncordon", "node2"]);
    wait_for(60, "on-node2 Running on node2", || {
        let p = h.json(&["get", "pod", "on-node2"]);
        (p["status"]["phase"] == "Running" && p["spec"]["nodeName"] == "node2").then_some(())
    });
    h.ok(&["delete", "pod", "on-node2", "--wait=false"]);

    // Storage on three nodes (issue 39): each replica's claim is provisioned on its pod's
    // node, and each replica finds its own data.
    h.apply(DB);
    let db = wait_for(240, "3 db replicas Running, one per node", || {
        let p = running_db_pods(&h);
        let mut nodes: Vec<&str> = p.iter().map(|(_, n)| n.as_str()).collect();
        nodes.sort();
        nodes.dedup();
        (p.len() == 3 && nodes.len() == 3).then_some(p)
    });
    let mut db_volumes = std::collections::HashMap::new();
    for (pod, node) in &db {
        let (pv, on) = db_volume(&h, pod).unwrap_or_else(|| panic!("{pod}'s claim is not bound"));
        assert_eq!(&on, node, "{pod}'s volume {pv}");
        let born = wait_for(30, "the replica's name in its volume", || {
            let out = h.kubectl(&["exec", pod, "--", "cat", "/data/born"]);
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        });
        assert_eq!(&born, pod);
        db_volumes.insert(pod.clone(), pv);
    }
    let (db_on_node3, _) = db.iter().find(|(_, n)| n == "node3").unwrap().clone();

    // Losing node3: SIGKILL of its init kills the whole node.
    let victim = ready_web_pods(&h)
        .into_iter()
        .find(|(_, n, _)| n == "node3")
        .expect("a web pod on node3")
        .0;
    let lost = Instant::now();
    let rc = unsafe { libc::kill(h.node_init(3), libc::SIGKILL) };
    assert_eq!(rc, 0);
    wait_for(60, "node3 NotReady", || {
        let n = h.json(&["get", "node", "node3"]);
        n["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] != "True")
            .then_some(())
    });
    let not_ready = lost.elapsed();
    let survivors = wait_for(120, "a replacement web pod Ready on a survivor", || {
        let p = ready_web_pods(&h);
        (p.len() == 3 && p.iter().all(|(name, node, _)| node != "node3" && *name != victim)).then_some(p)
    });
    eprintln!(
        "node3 lost: NotReady after {not_ready:?}, its pod replaced and Ready after {:?}",
        lost.elapsed()
    );
    // Service traffic from every surviving node goes to the survivors only, without failures.
    let alive: Vec<&str> = survivors.iter().map(|(n, _, _)| n.as_str()).collect();
    for (from, node, _) in &survivors {
        let got = gets(&h, from, "web", 80, 15);
        assert!(
            got.iter().all(|g| alive.contains(&g.as_str())),
            "{from} ({node}) after node3's loss: {got:?}"
        );
    }

    // node3 deleted for good: the survivors drop its route, forwarding and ARP entries
    // within a second (issue 21: "Node added, removed or readdressed").
    let gone = h.json(&["get", "node", "node3"]);
    let cidr = gone["spec"]["podCIDR"].as_str().unwrap().to_owned();
    let node3_ip = h.node_ip("node3");
    let mn_tag = bridge.trim_start_matches("r8smn").to_owned();
    let knows_node3 = |i: usize| {
        let ns = format!("r8smn-{mn_tag}-{i}");
        let run = |args: &[&str]| {
            let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let route = run(&["ip", "-n", &ns, "route", "show", &cidr]);
        let fdb = run(&["bridge", "-n", &ns, "fdb", "show", "dev", "r8s.1"]);
        !route.trim().is_empty() || fdb.contains(&format!("dst {node3_ip} "))
    };
    assert!(
        knows_node3(1) && knows_node3(2),
        "node3's entries before its deletion"
    );
    let deleted = Instant::now();
    h.ok(&["delete", "node", "node3", "--wait=false"]);
    wait_for(10, "node3's route and forwarding entries gone", || {
        (!knows_node3(1) && !knows_node3(2)).then_some(())
    });
    let took = deleted.elapsed();
    eprintln!("node3 deleted: its entries gone from the survivors after {took:?} (kubectl included)");
    assert!(
        took < Duration::from_secs(2),
        "entries followed the deletion only after {took:?}"
    );

    // node3's db replica: its pod is collected (its node is gone), its claim and local volume
    // are given up, and the replica is made again on a survivor with a new volume there.
    let old_pv = db_volumes[&db_on_node3].clone();
    let (node, pv) = wait_for(300, "node3's db replica Running again on a survivor", || {
        let (_, node) = running_db_pods(&h).into_iter().find(|(p, _)| *p == db_on_node3)?;
        let (pv, on) = db_volume(&h, &db_on_node3)?;
        (node != "node3" && pv != old_pv && on == node).then_some((node, pv))
    });
    eprintln!(
        "node3 deleted: {db_on_node3} runs again on {node} with volume {pv} after {:?}",
        deleted.elapsed()
    );
    assert!(
        !h.kubectl(&["get", "pv", &old_pv]).status.success(),
        "{old_pv} stayed"
    );
    let born = wait_for(30, "the new volume's first write", || {
        let out = h.kubectl(&["exec", &db_on_node3, "--", "cat", "/data/born"]);
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    });
    assert_eq!(born, db_on_node3);
    // The survivors' replicas kept their volumes.
    for (pod, pv) in &db_volumes {
        if *pod != db_on_node3 {
            assert_eq!(db_volume(&h, pod).map(|(v, _)| v).as_ref(), Some(pv), "{pod}");
        }
    }

    // Teardown leaves nothing: namespaces, links, processes, cgroups, mounts, loop devices,
    // the directory.
    drop(h);
    let loops = Command::new("losetup").arg("-a").output().unwrap();
    let loops = String::from_utf8_lossy(&loops.stdout);
    assert!(
        !loops.contains(&dir.display().to_string()),
        "loop devices left: {loops}"
    );
    let netns = std::fs::read_dir("/run/netns")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("r8smn-"))
                .count()
        })
        .unwrap_or(0);
    assert_eq!(netns, 0, "network namespaces left");
    // The pods' namespaces too (node3 was killed with its pods' files in /run/netns); a new
    // one that is still mounted here belongs to a host-level containerd of another test.
    let mounts_now = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let left: Vec<String> = cni_netns()
        .into_iter()
        .filter(|n| !cni_before.contains(n) && !mounts_now.contains(&format!("/run/netns/{n} ")))
        .collect();
    assert!(left.is_empty(), "pod network namespaces left: {left:?}");
    let links = String::from_utf8_lossy(&Command::new("ip").args(["-o", "link"]).output().unwrap().stdout)
        .into_owned();
    assert!(!links.contains(&bridge), "links left: {links}");
    let d = dir.display().to_string();
    assert!(
        support::cluster::processes_under(&dir).is_empty(),
        "processes left under {d}"
    );
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(&d), "mounts left under {d}");
    assert!(!dir.exists(), "{d} left");
    let tag = bridge.trim_start_matches("r8smn");
    let cgroups = Command::new("find")
        .args([
            "/sys/fs/cgroup",
            "-maxdepth",
            "5",
            "-name",
            &format!("r8s-mn-{tag}-*"),
        ])
        .output()
        .unwrap();
    assert!(
        cgroups.stdout.is_empty(),
        "cgroups left: {}",
        String::from_utf8_lossy(&cgroups.stdout)
    );
}

/// Two dual-stack nodes (`--cluster-cidr` and `--service-cidr` with an IPv6 range each, on
/// every node): each node's IPv6 pod subnet is routed through the VXLAN tunnel over the IPv4
/// underlay, so a pod reaches a pod of the other node by its IPv6 address, keeping its own,
/// and through a RequireDualStack Service's IPv6 cluster IP.
#[test]
fn dual_stack_pods_reach_each_other_across_nodes() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: the multi-node harness needs root");
        return;
    }
    let h = Harness::up_with(
        2,
        "",
        "--cluster-cidr 10.42.0.0/16,fd42::/56 --service-cidr 10.43.0.0/16,fd43::/112",
    );
    let nodes = h.json(&["get", "nodes"]);
    for n in nodes["items"].as_array().unwrap() {
        let cidrs = n["spec"]["podCIDRs"].to_string();
        assert!(cidrs.contains("fd42:"), "{cidrs}");
    }
    h.apply(
        r#"
apiVersion: v1
kind: List
items:
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: web}
  spec:
    replicas: 2
    selector: {matchLabels: {app: web}}
    template:
      metadata: {labels: {app: web}}
      spec:
        terminationGracePeriodSeconds: 1
        affinity:
          podAntiAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
            - topologyKey: kubernetes.io/hostname
              labelSelector: {matchLabels: {app: web}}
        containers:
        - name: c
          image: busybox
          command: [sh, -c, "mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www"]
          readinessProbe:
            tcpSocket: {port: 8080}
            periodSeconds: 1
- apiVersion: v1
  kind: Service
  metadata: {name: web}
  spec:
    ipFamilyPolicy: RequireDualStack
    ipFamilies: [IPv6, IPv4]
    selector: {app: web}
    ports: [{port: 80, targetPort: 8080}]
"#,
    );
    let pods = wait_for(120, "2 web pods Ready on 2 nodes", || {
        let p = ready_web_pods(&h);
        let mut nodes: Vec<&str> = p.iter().map(|(_, n, _)| n.as_str()).collect();
        nodes.sort();
        nodes.dedup();
        (p.len() == 2 && nodes.len() == 2).then_some(p)
    });
    let ip6 = |pod: &str| -> String {
        let p = h.json(&["get", "pod", pod]);
        p["status"]["podIPs"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|i| i["ip"].as_str())
            .find(|i| i.contains(':'))
            .unwrap_or_else(|| panic!("{pod} has no IPv6 address: {p}"))
            .to_owned()
    };
    let (a, b) = (&pods[0].0, &pods[1].0);
    let (a6, b6) = (ip6(a), ip6(b));
    assert!(a6.starts_with("fd42:") && b6.starts_with("fd42:"), "{a6} {b6}");
    // Pod to pod across the nodes by IPv6, both ways.
    assert_eq!(gets(&h, a, &b6, 8080, 1), [b.as_str()]);
    assert_eq!(gets(&h, b, &a6, 8080, 1), [a.as_str()]);
    // Through the Service's IPv6 cluster IP (its primary family here): both replicas.
    let cluster_ip = h.ok(&["get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}"]);
    assert!(cluster_ip.starts_with("fd43::"), "{cluster_ip}");
    let mut seen: Vec<String> = gets(&h, a, &cluster_ip, 80, 20);
    seen.sort();
    seen.dedup();
    let mut want = vec![a.clone(), b.clone()];
    want.sort();
    assert_eq!(seen, want, "both replicas through fd43");
}

/// An HA cluster on the harness (`up 4 --servers 3`: three servers on etcd members of their
/// own, one agent joined through the first): a power cut of the first server loses nothing.
/// Writes go on through another server within seconds; the agent's load balancer moves to a
/// live server, so its node keeps renewing its Lease and its pods run on, never restarted;
/// the first server comes back on its data with what was written meanwhile, and its pod runs
/// again in a new sandbox; the controller manager's leader stalls for 30 s and the cluster
/// settles (`stalled_leader`); a server deleted for good leaves the etcd cluster.
#[test]
fn a_server_power_cut_in_an_ha_cluster_loses_nothing() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let mut h = Harness::up_servers(4, 3, "", "");
    // The harness's kubeconfig names node1: from now on, node2's.
    h.kubeconfig = h.dir.join("node2/kubeconfig.yaml").display().to_string();
    let eps = h.ok(&[
        "get",
        "endpoints",
        "kubernetes",
        "-o",
        "jsonpath={.subsets[0].addresses[*].ip}",
    ]);
    assert_eq!(eps.split_whitespace().count(), 3, "{eps}");
    h.ok(&["create", "deployment", "web", "--image=nginx", "--replicas=4"]);
    let pods = |h: &Harness| -> WebPods {
        let list = h.json(&["get", "pods", "-l", "app=web"]);
        let mut out: Vec<_> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["status"]["phase"] == "Running")
            .map(|p| {
                let c = &p["status"]["containerStatuses"][0];
                (
                    p["metadata"]["uid"].as_str().unwrap_or("").to_string(),
                    p["spec"]["nodeName"].as_str().unwrap_or("").to_string(),
                    c["containerID"].as_str().unwrap_or("").to_string(),
                    c["restartCount"].as_i64().unwrap_or(-1),
                )
            })
            .collect();
        out.sort();
        out
    };
    let before = wait_for(120, "4 web pods Running", || {
        let p = pods(&h);
        (p.len() == 4).then_some(p)
    });
    // The scheduler spreads the replicas: one runs on the agent.
    assert!(before.iter().any(|p| p.1 == "node4"), "{before:#?}");
    // A pod on the agent asks the web Service every 200 ms from here on; its log (read at the
    // end) says when each answer came or failed.
    h.ok(&["expose", "deployment", "web", "--port=80"]);
    let ip = h.ok(&["get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}"]);
    h.apply(&ASKER.replace("IP", &ip));
    wait_for(60, "the asker's first answer", || {
        let log = h.kubectl(&["logs", "asker"]);
        String::from_utf8_lossy(&log.stdout)
            .contains(" 200 OK")
            .then_some(())
    });
    let renew = |h: &Harness| {
        h.ok(&[
            "-n",
            "kube-node-lease",
            "get",
            "lease",
            "node4",
            "-o",
            "jsonpath={.spec.renewTime}",
        ])
    };

    let cut_at = jiff::Timestamp::now().as_second();
    h.node_command("kill", "node1");
    let cut = Instant::now();
    let mut n = 0;
    loop {
        n += 1;
        if h.kubectl(&["create", "configmap", &format!("after-{n}")])
            .status
            .success()
        {
            break;
        }
        assert!(
            cut.elapsed() < Duration::from_secs(30),
            "no write accepted 30 s after the cut"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "writes accepted {:?} after the first server's power cut",
        cut.elapsed()
    );
    // The agent joined through node1; it renews its Lease through another server.
    let seen = renew(&h);
    wait_for(30, "node4's Lease renewed after the cut", || {
        (renew(&h) != seen).then_some(())
    });
    eprintln!("node4 renewed its Lease {:?} after the cut", cut.elapsed());
    let log = std::fs::read_to_string(h.dir.join("node4/log")).unwrap_or_default();
    assert!(
        log.contains("API server unreachable; using another"),
        "no failover in node4's log"
    );
    // Its pods (and the other survivors') ran on, untouched.
    let now = pods(&h);
    for p in before.iter().filter(|p| p.1 != "node1") {
        assert!(now.contains(p), "{p:?} changed: {now:#?}");
    }

    h.node_command("start", "node1");
    h.kubeconfig = h.dir.join("node1/kubeconfig.yaml").display().to_string();
    assert!(h
        .ok(&["get", "configmap", "-o", "name"])
        .contains(&format!("configmap/after-{n}")));
    // node1's pod runs again, the same pod in a new sandbox, its container counted as a
    // restart (the dead sandbox's container still holds its name in containerd).
    let on1 = before.iter().find(|p| p.1 == "node1").expect("a pod on node1");
    wait_for(90, "node1's pod Running again", || {
        let p = pods(&h);
        p.iter()
            .any(|p| p.0 == on1.0 && p.2 != on1.2 && p.3 == 1)
            .then_some(())
    });
    // ... and the Service's endpoints name its new address, not the dead sandbox's.
    let ips = |what: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = h.ok(what).split_whitespace().map(str::to_owned).collect();
        v.sort();
        v
    };
    wait_for(60, "the web endpoints naming the Running pods", || {
        let pods = ips(&[
            "get",
            "pods",
            "-l",
            "app=web",
            "--field-selector",
            "status.phase=Running",
            "-o",
            "jsonpath={.items[*].status.podIP}",
        ]);
        let eps = ips(&[
            "get",
            "endpoints",
            "web",
            "-o",
            "jsonpath={.subsets[*].addresses[*].ip}",
        ]);
        (pods.len() == 4 && pods == eps).then_some(())
    });
    let back_at = jiff::Timestamp::now().as_second();

    stalled_leader(&mut h, &pods);

    // The Service answered throughout, but for the dead node's endpoint: every failure came
    // between node1's power cut and a few seconds after the endpoints named its pod's new
    // address (the proxies learn it), none before, none after (not while the leader stalled:
    // its node's containers ran on).
    let log = h.ok(&["logs", "asker"]);
    let answers: Vec<(i64, bool)> = log
        .lines()
        .filter_map(|l| {
            let (at, answer) = l.split_once(' ')?;
            Some((at.parse().ok()?, answer.contains(" 200 OK")))
        })
        .collect();
    let outside: Vec<_> = answers
        .iter()
        .filter(|(at, ok)| !ok && (*at < cut_at || *at > back_at + 5))
        .collect();
    eprintln!(
        "the Service answered {} of {} questions; {} failed outside node1's outage",
        answers.iter().filter(|a| a.1).count(),
        answers.len(),
        outside.len()
    );
    assert!(answers.len() > 100, "{log}");
    assert!(
        outside.is_empty(),
        "failures outside node1's outage ({cut_at}..{back_at}): {outside:?}"
    );

    // A server gone for good leaves the etcd cluster (k3s's member controller): node3 is cut,
    // then its Node deleted; a server removes node3's member, and only then the Node goes (its
    // finalizer). Two members are left, and writes go on.
    let node3 = h.json(&["get", "node", "node3"]);
    let member = node3["metadata"]["annotations"]["etcd.r8s.io/node-name"]
        .as_str()
        .unwrap_or_else(|| panic!("node3 names no etcd member: {node3}"))
        .to_string();
    assert!(
        node3["metadata"]["finalizers"]
            .to_string()
            .contains("etcd.r8s.io/member"),
        "{node3}"
    );
    assert!(etcd_members(&h).contains(&member));
    h.node_command("kill", "node3");
    h.ok(&["delete", "node", "node3", "--wait=false"]);
    wait_for(60, "node3's Node gone", || {
        (!h.kubectl(&["get", "node", "node3"]).status.success()).then_some(())
    });
    let members = etcd_members(&h);
    assert_eq!(members.len(), 2, "{members:?}");
    assert!(!members.contains(&member), "{members:?}");
    h.ok(&["create", "configmap", "after-node3"]);
}

/// A pod on the agent that asks the web Service at `IP` every 200 ms (at most 5,000 times) and
/// logs when, and the answer's first line (FAIL for none twice in a row: a new replica is Ready
/// as its container starts, and may be asked a moment before nginx listens, as upstream
/// without a readiness probe).
const ASKER: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: asker}
spec:
  nodeName: node4
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: busybox
    command:
    - sh
    - -c
    - |
      i=0
      while [ $i -lt 5000 ]; do
        i=$((i+1))
        r=$(printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 IP 80 | head -1)
        [ -n "$r" ] || r=$(printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 IP 80 | head -1)
        echo "$(date +%s) ${r:-FAIL}"
        sleep 0.2
      done
"#;

/// The controller manager's leader stalls (SIGSTOP of its whole node for 30 s, a hung VM)
/// while the Deployment is scaled from 4 to 6: another server's controller manager takes the
/// Lease and makes the two pods; the stalled one, woken, learns it lost the Lease and steps
/// down, and the Deployment settles at six pods with the Lease left with the new leader.
fn lease_holder(h: &Harness) -> String {
    h.ok(&[
        "-n",
        "kube-system",
        "get",
        "lease",
        "kube-controller-manager",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ])
}

/// The server whose controller manager leads now, and its identity. The Lease may still name
/// a killed process until it expires; a server's log since its last start names its identity
/// when it leads.
pub(crate) fn live_leader(h: &Harness) -> (usize, String) {
    wait_for(60, "a live controller manager leading", || {
        let holder = lease_holder(h);
        let became = format!("became leader lease=kube-controller-manager identity={holder}");
        (1..=3)
            .find(|i| {
                let log = std::fs::read_to_string(h.dir.join(format!("node{i}/log"))).unwrap_or_default();
                let since = log.rfind("--- started again").unwrap_or(0);
                log[since..].contains(&became)
            })
            .map(|i| (i, holder))
    })
}

/// (uid, node, container ID, restart count) of the Running web pods.
type WebPods = Vec<(String, String, String, i64)>;

fn stalled_leader(h: &mut Harness, pods: &dyn Fn(&Harness) -> WebPods) {
    let (leader, holder) = live_leader(h);
    let node = format!("node{leader}");
    let log = h.dir.join(format!("{node}/log"));
    let mark = std::fs::metadata(&log).unwrap().len() as usize;
    // Talk to a server that runs on.
    let other = if leader == 2 { 3 } else { 2 };
    h.kubeconfig = h
        .dir
        .join(format!("node{other}/kubeconfig.yaml"))
        .display()
        .to_string();
    h.node_command("pause", &node);
    let paused = Instant::now();
    h.ok(&["scale", "deployment", "web", "--replicas=6"]);
    wait_for(60, "the Lease taken by another server", || {
        let now = lease_holder(h);
        (now != holder && !now.is_empty()).then_some(())
    });
    std::thread::sleep(Duration::from_secs(30).saturating_sub(paused.elapsed()));
    h.node_command("resume", &node);
    eprintln!(
        "{node} (the controller manager's leader) stalled {:?}",
        paused.elapsed()
    );
    wait_for(90, "6 web pods Running after the stall", || {
        (pods(h).len() == 6).then_some(())
    });
    wait_for(30, "the stalled leader stepping down", || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text[mark.min(text.len())..]
            .contains("leader election lost lease=kube-controller-manager")
            .then_some(())
    });
    // Two pods made, none deleted: the woken leader added none to be taken away again (one
    // run in four did, while the controllers' own service-account clients bypassed the fence).
    let events = h.ok(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.kind=ReplicaSet",
        "-o",
        "jsonpath={range .items[*]}{.reason} {.message} {.reportingInstance} {.source.host} {.firstTimestamp}{\"\\n\"}{end}",
    ]);
    if events.contains("SuccessfulDelete") {
        let elections: Vec<String> = (1..=3)
            .flat_map(|i| {
                std::fs::read_to_string(h.dir.join(format!("node{i}/log")))
                    .unwrap_or_default()
                    .lines()
                    .filter(|l| l.contains("r8s_client::leader") || l.contains("--- started again"))
                    .map(|l| format!("node{i}: {l}"))
                    .collect::<Vec<_>>()
            })
            .collect();
        let deploy = h.ok(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.kind=Deployment",
        ]);
        panic!(
            "pods deleted after the stall:\n{events}\n{deploy}\n{}\nstalled: node{leader} ({holder})",
            elections.join("\n")
        );
    }
    let all = wait_for(30, "6 web pods, none more", || {
        let all = h.json(&["get", "pods", "-l", "app=web"]);
        (all["items"].as_array().unwrap().len() == 6).then_some(all)
    });
    assert_eq!(all["items"].as_array().unwrap().len(), 6, "{all}");
    assert_ne!(lease_holder(h), holder, "the stalled leader took the Lease back");
    h.kubeconfig = h.dir.join("node1/kubeconfig.yaml").display().to_string();
}

/// What the controller manager works on while its server is killed: a Deployment rolling out
/// (slowly: one replica at a time, each ready 3 s before the next), an indexed Job of 100
/// completions, and later a StatefulSet scaling up one ordinal at a time on the agent. Pods
/// tolerate a lost node for 2 s, and nodes are lost after 15 s without a heartbeat.
const BUSY: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: roll}
  spec:
    replicas: 6
    minReadySeconds: 3
    strategy: {rollingUpdate: {maxSurge: 1, maxUnavailable: 0}}
    selector: {matchLabels: {app: roll}}
    template:
      metadata: {labels: {app: roll}}
      spec:
        terminationGracePeriodSeconds: 1
        tolerations:
        - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
        - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
        containers:
        - name: c
          image: busybox
          env: [{name: V, value: "1"}]
          command: [sleep, "3600"]
- apiVersion: apps/v1
  kind: StatefulSet
  metadata: {name: ord}
  spec:
    replicas: 1
    serviceName: ord
    selector: {matchLabels: {app: ord}}
    template:
      metadata: {labels: {app: ord}}
      spec:
        terminationGracePeriodSeconds: 1
        nodeSelector: {kubernetes.io/hostname: node4}
        containers:
        - {name: c, image: busybox, command: [sleep, "3600"]}
"#;

const JOB: &str = r#"
apiVersion: batch/v1
kind: Job
metadata: {name: many}
spec:
  completions: 100
  parallelism: 10
  completionMode: Indexed
  backoffLimit: 20
  template:
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 1
      tolerations:
      - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
      - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
      containers:
      - {name: c, image: busybox, command: [sh, -c, "echo $JOB_COMPLETION_INDEX"]}
"#;

/// A server killed while its controller manager leads, twice: mid-rollout and mid-Job, then
/// (with the first back) mid-scale. The rollout completes with six new replicas and no old
/// one; the Job completes every index, each with exactly one succeeded pod; the StatefulSet
/// reaches five ordinals, each made once. Writes go through a server that stays up.
#[test]
fn a_server_killed_mid_rollout_mid_job_and_mid_scale_loses_nothing() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let mut h = Harness::up_servers(4, 3, "--node-monitor-grace-period 15s", "");
    let use_other_than = |h: &mut Harness, dead: usize| {
        let other = if dead == 1 { 2 } else { 1 };
        h.kubeconfig = h
            .dir
            .join(format!("node{other}/kubeconfig.yaml"))
            .display()
            .to_string();
    };
    h.apply(BUSY);
    // (name, template hash, node) of roll's pods that run and are not being deleted.
    let roll = |h: &Harness| -> Vec<(String, String, String)> {
        live_pods(h, &["-l", "app=roll"])
            .iter()
            .map(|p| {
                (
                    p["metadata"]["name"].as_str().unwrap().to_owned(),
                    p["metadata"]["labels"]["pod-template-hash"]
                        .as_str()
                        .unwrap_or("")
                        .to_owned(),
                    p["spec"]["nodeName"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect()
    };
    let first = wait_for(120, "roll's 6 pods Running", || {
        let r = roll(&h);
        (r.len() == 6).then_some(r)
    });
    let old_hash = first[0].1.clone();

    // The Job starts, then (10 completions in) the rollout; the leader's server dies when both
    // are under way. In this order, as the rollout goes one replica at a time and the Job has
    // 90 completions to go, neither can finish before the other has begun (started together,
    // a slower machine finished the rollout before the Job's tenth completion).
    let (leader, _) = live_leader(&h);
    use_other_than(&mut h, leader);
    h.apply(JOB);
    let job_status = |h: &Harness| h.json(&["get", "job", "many"])["status"].clone();
    let succeeded = |h: &Harness| job_status(h)["succeeded"].as_i64().unwrap_or(0);
    wait_for(180, "the Job's first 10 completions", || {
        (succeeded(&h) >= 10).then_some(())
    });
    h.ok(&["set", "env", "deployment/roll", "V=2"]);
    wait_for(120, "the rollout under way, the Job not complete", || {
        let new = roll(&h).iter().filter(|p| p.1 != old_hash).count();
        let done = succeeded(&h);
        assert!(done < 100, "the Job completed before the rollout began");
        (1..6).contains(&new).then_some(())
    });
    let dead = format!("node{leader}");
    h.node_command("kill", &dead);
    let cut = Instant::now();
    eprintln!(
        "{dead} killed mid-rollout ({} new replicas) and mid-Job ({} succeeded)",
        roll(&h).iter().filter(|p| p.1 != old_hash).count(),
        job_status(&h)["succeeded"]
    );

    let done = wait_for(300, "the rollout complete", || {
        let d = h.json(&["get", "deployment", "roll"]);
        let st = &d["status"];
        let r = roll(&h);
        let all_new = r.len() == 6 && r.iter().all(|p| p.1 != old_hash && p.2 != dead);
        (all_new
            && st["updatedReplicas"] == 6
            && st["availableReplicas"] == 6
            && st["replicas"] == 6
            && st["observedGeneration"] == d["metadata"]["generation"])
            .then_some(r)
    });
    eprintln!("rollout complete {:?} after the kill", cut.elapsed());
    let rs = h.json(&["get", "rs", "-l", "app=roll"]);
    for r in rs["items"].as_array().unwrap() {
        let want = if r["metadata"]["labels"]["pod-template-hash"] == old_hash.as_str() {
            0
        } else {
            6
        };
        assert_eq!(r["spec"]["replicas"], want, "{r}");
    }
    assert_eq!(rs["items"].as_array().unwrap().len(), 2, "{rs}");
    assert_eq!(
        done.iter()
            .map(|p| &p.0)
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        6
    );

    let job = wait_for(300, "the Job complete", || {
        let j = h.json(&["get", "job", "many"]);
        let complete = j["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Complete" && c["status"] == "True");
        complete.then_some(j)
    });
    eprintln!("Job complete {:?} after the kill", cut.elapsed());
    assert_eq!(job["status"]["succeeded"], 100, "{}", job["status"]);
    assert_eq!(job["status"]["completedIndexes"], "0-99", "{}", job["status"]);
    // Each index succeeded in exactly one pod.
    let pods = h.json(&["get", "pods", "-l", "job-name=many"]);
    let mut succeeded = std::collections::BTreeMap::<i64, usize>::new();
    for p in pods["items"].as_array().unwrap() {
        if p["status"]["phase"] == "Succeeded" {
            let index = p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
                .as_str()
                .and_then(|i| i.parse().ok())
                .unwrap_or_else(|| panic!("a Job pod without its index: {p}"));
            *succeeded.entry(index).or_default() += 1;
        }
    }
    let twice: Vec<_> = succeeded.iter().filter(|(_, n)| **n != 1).collect();
    assert!(
        twice.is_empty(),
        "indexes that succeeded more than once: {twice:?}"
    );
    assert_eq!(succeeded.len(), 100, "{succeeded:?}");

    // The first server back (a quorum of three again), the StatefulSet scales from 1 to 5 one
    // ordinal at a time, and the new leader's server dies on the way.
    h.node_command("start", &dead);
    let (leader, _) = live_leader(&h);
    use_other_than(&mut h, leader);
    let ord = |h: &Harness| -> Vec<(String, String, bool)> {
        let l = h.json(&["get", "pods", "-l", "app=ord"]);
        let mut v: Vec<_> = l["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["metadata"]["name"].as_str().unwrap().to_owned(),
                    p["metadata"]["uid"].as_str().unwrap().to_owned(),
                    p["status"]["phase"] == "Running" && p["metadata"]["deletionTimestamp"].is_null(),
                )
            })
            .collect();
        v.sort();
        v
    };
    h.ok(&["scale", "statefulset", "ord", "--replicas=5"]);
    let mut seen = std::collections::BTreeMap::<String, String>::new();
    let mut record = |v: &[(String, String, bool)]| {
        for (name, uid, _) in v {
            let was = seen.entry(name.clone()).or_insert_with(|| uid.clone());
            assert_eq!(was, uid, "{name} made twice");
        }
    };
    wait_for(120, "ord-1 Running, ord-4 not yet", || {
        let v = ord(&h);
        record(&v);
        let running = |n: &str| v.iter().any(|p| p.0 == n && p.2);
        (running("ord-1") && !v.iter().any(|p| p.0 == "ord-4")).then_some(())
    });
    let dead = format!("node{leader}");
    h.node_command("kill", &dead);
    let cut = Instant::now();
    wait_for(120, "ord-0 to ord-4 Running", || {
        let v = ord(&h);
        record(&v);
        (v.len() == 5 && v.iter().all(|p| p.2)).then_some(())
    });
    eprintln!("StatefulSet scaled {:?} after {dead}'s kill", cut.elapsed());
    let names: Vec<String> = ord(&h).into_iter().map(|p| p.0).collect();
    assert_eq!(names, ["ord-0", "ord-1", "ord-2", "ord-3", "ord-4"]);
    assert_eq!(seen.len(), 5, "{seen:?}");
}

/// The names of the etcd cluster's members, asked of node1's member (its client port, with
/// its server's etcd client certificate).
fn etcd_members(h: &Harness) -> Vec<String> {
    let tls = h.dir.join("node1/server/tls");
    let read = |f: &str| std::fs::read_to_string(tls.join(f)).unwrap();
    let mut opts =
        r8s_store::etcd::EtcdOptions::from_endpoint_list(&format!("https://{}:2379", h.node_ip("node1")));
    opts.tls = Some(r8s_store::etcd::EtcdTls {
        ca_pem: read("etcd-ca.crt"),
        cert_pem: read("etcd-client.crt"),
        key_pem: read("etcd-client.key"),
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(r8s_store::etcd::member_list(&opts))
        .unwrap()
        .into_iter()
        .map(|m| m.name)
        .collect()
}

/// What a lost node runs when it comes back: a Deployment replica and a StatefulSet replica on
/// node2 (evicted 2 s after their node goes NotReady), node2 cut off (SIGKILL of the whole
/// node) and started again later on its data.
const RETURNING: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: web}
  spec:
    replicas: 2
    selector: {matchLabels: {app: web}}
    template:
      metadata: {labels: {app: web}}
      spec:
        terminationGracePeriodSeconds: 1
        # One per node while both are up; the replacement may join the other on node1.
        affinity:
          podAntiAffinity:
            preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 100
              podAffinityTerm:
                topologyKey: kubernetes.io/hostname
                labelSelector: {matchLabels: {app: web}}
        tolerations:
        - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
        - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
        containers:
        - {name: c, image: busybox, command: [sleep, "3600"]}
- apiVersion: apps/v1
  kind: StatefulSet
  metadata: {name: one}
  spec:
    replicas: 1
    serviceName: one
    selector: {matchLabels: {app: one}}
    template:
      metadata: {labels: {app: one}}
      spec:
        terminationGracePeriodSeconds: 1
        # On node2 if it can; anywhere else if not (so a second one-0 would run at once).
        affinity:
          nodeAffinity:
            preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 100
              preference:
                matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [node2]}]
        tolerations:
        - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
        - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
        containers:
        - {name: c, image: busybox, command: [sleep, "3600"]}
"#;

/// The pod UIDs of the containers node `i`'s containerd runs (asked of its socket with `ctr`).
fn running_pod_uids(h: &Harness, i: usize) -> Vec<String> {
    let sock = h.dir.join(format!("node{i}/agent/containerd/containerd.sock"));
    let ctr = |args: &[&str]| {
        let out = Command::new("ctr")
            .arg("--address")
            .arg(&sock)
            .args(["-n", "k8s.io"])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let mut uids = Vec::new();
    for line in ctr(&["tasks", "ls"]).lines().skip(1) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.get(2) != Some(&"RUNNING") {
            continue;
        }
        let info: Value = serde_json::from_str(&ctr(&["containers", "info", cols[0]])).unwrap_or_default();
        // Sandboxes (pause) and containers alike carry their pod's UID.
        if let Some(uid) = info["Labels"]["io.kubernetes.pod.uid"].as_str() {
            uids.push(uid.to_owned());
        }
    }
    uids.sort();
    uids.dedup();
    uids
}

/// A lost node that comes back loses nothing and doubles nothing: while node2 is cut off, its
/// Deployment replica is replaced on node1 but its StatefulSet replica is not (one-0 stays,
/// Terminating: its kubelet has not said it stopped); when node2 returns, its kubelet runs
/// neither of its evicted pods any more, confirms their deletion, and only then does one-0 run
/// again, once. Lost twice: by a power cut (SIGKILL of the whole node, started again on its
/// data: the kubelet starts neither again) and by a network partition (everything on node2
/// runs on alone; when the network is back the kubelet stops both, and the node is Ready again
/// within seconds).
#[test]
fn a_lost_node_that_comes_back_runs_none_of_its_evicted_pods_and_no_replica_twice() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: the multi-node harness needs root");
        return;
    }
    let h = Harness::up(2, "--node-monitor-grace-period 15s");
    h.apply(RETURNING);
    lose_node2(&h, Loss::PowerCut);
    // Again with a replica of each on node2: one-0 was made again on node1 (node2 was still
    // tainted unreachable then), the web replicas both run there.
    wait_for(60, "node2 untainted", || {
        let taints = h.json(&["get", "node", "node2"])["spec"]["taints"].clone();
        taints.as_array().is_none_or(|t| t.is_empty()).then_some(())
    });
    h.ok(&["delete", "pod", "one-0"]);
    h.ok(&["rollout", "restart", "deployment/web"]);
    h.ok(&["rollout", "status", "deployment/web", "--timeout=120s"]);
    lose_node2(&h, Loss::Partition);
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Loss {
    PowerCut,
    Partition,
}

fn lose_node2(h: &Harness, loss: Loss) {
    // (name, uid, node, deleting) of the pods labelled `app`.
    let pods = |app: &str| -> Vec<(String, String, String, bool)> {
        let l = h.json(&["get", "pods", "-l", &format!("app={app}")]);
        l["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["metadata"]["name"].as_str().unwrap().to_owned(),
                    p["metadata"]["uid"].as_str().unwrap().to_owned(),
                    p["spec"]["nodeName"].as_str().unwrap_or("").to_owned(),
                    !p["metadata"]["deletionTimestamp"].is_null(),
                )
            })
            .collect()
    };
    let running = |app: &str| -> Vec<(String, String, String)> {
        live_pods(h, &["-l", &format!("app={app}")])
            .iter()
            .map(|p| {
                (
                    p["metadata"]["name"].as_str().unwrap().to_owned(),
                    p["metadata"]["uid"].as_str().unwrap().to_owned(),
                    p["spec"]["nodeName"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect()
    };
    let (web_on_2, one_0) = wait_for(180, "web on both nodes and one-0 on node2, Running", || {
        let web = running("web");
        let one = running("one");
        let on2 = web.iter().find(|p| p.2 == "node2")?.clone();
        (web.len() == 2 && one.len() == 1 && one[0].2 == "node2").then(|| (on2, one[0].clone()))
    });
    let on_node2 = running_pod_uids(h, 2);
    assert!(
        on_node2.contains(&web_on_2.1) && on_node2.contains(&one_0.1),
        "node2's containerd runs {on_node2:?}"
    );

    let (lose, back) = match loss {
        Loss::PowerCut => ("kill", "start"),
        Loss::Partition => ("partition", "heal"),
    };
    h.node_command(lose, "node2");
    let lost = Instant::now();
    // The Deployment's replica is replaced on node1; the old one waits, Terminating.
    wait_for(120, "web's replica replaced on node1", || {
        let web = running("web");
        (web.len() == 2 && web.iter().all(|p| p.2 == "node1")).then_some(())
    });
    // one-0 is evicted (marked for deletion) but not made again while node2 may still run it.
    wait_for(60, "one-0 marked for deletion", || {
        pods("one").iter().any(|p| p.1 == one_0.1 && p.3).then_some(())
    });
    eprintln!("node2 lost: its pods evicted after {:?}", lost.elapsed());
    let until = Instant::now() + Duration::from_secs(15);
    while Instant::now() < until {
        let one = pods("one");
        assert_eq!(
            one.iter().map(|p| p.1.as_str()).collect::<Vec<_>>(),
            [one_0.1.as_str()],
            "a second one-0 while node2 is away: {one:?}"
        );
        std::thread::sleep(Duration::from_secs(1));
    }

    let returning = Instant::now();
    h.node_command(back, "node2");
    eprintln!(
        "{loss:?}: node2 back and Ready after {:?}, {:?} after its {back}",
        lost.elapsed(),
        returning.elapsed()
    );
    if loss == Loss::Partition {
        // Its kubelet reports the node Ready as soon as it reaches the server again (it was
        // marked NotReady meanwhile), not at its next periodic report.
        assert!(
            returning.elapsed() < Duration::from_secs(20),
            "node2 Ready only {:?} after the heal",
            returning.elapsed()
        );
    }
    // The evicted pods' deletions are confirmed by node2's kubelet, and their objects go.
    wait_for(60, "node2's evicted pods gone", || {
        let all: Vec<_> = pods("web").into_iter().chain(pods("one")).collect();
        all.iter()
            .all(|p| p.1 != web_on_2.1 && p.1 != one_0.1)
            .then_some(())
    });
    // one-0 runs again, once, as a new pod.
    let again = wait_for(120, "one-0 Running again", || {
        let one = running("one");
        (one.len() == 1).then(|| one[0].clone())
    });
    assert_ne!(again.1, one_0.1);
    assert_eq!(pods("one").len(), 1, "{:?}", pods("one"));
    // node2 never started the evicted pods again (after a power cut), or stopped them (after a
    // partition); what it runs now is only what is bound to it.
    let runs_evicted = |on: &[String]| on.contains(&web_on_2.1) || on.contains(&one_0.1);
    if loss == Loss::Partition {
        wait_for(30, "node2 stopping its evicted pods", || {
            (!runs_evicted(&running_pod_uids(h, 2))).then_some(())
        });
    }
    let on_node2 = running_pod_uids(h, 2);
    assert!(
        !runs_evicted(&on_node2),
        "node2 runs an evicted pod: {on_node2:?}"
    );
    let bound = h.json(&["get", "pods", "-A", "--field-selector", "spec.nodeName=node2"]);
    let bound: Vec<&str> = bound["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["metadata"]["uid"].as_str())
        .collect();
    for uid in &on_node2 {
        assert!(
            bound.contains(&uid.as_str()),
            "node2 runs pod {uid}, which is not bound to it: {bound:?}"
        );
    }
    let web = running("web");
    assert_eq!(web.len(), 2, "{web:?}");
}

/// A clock jump on one node (libfaketime moves node2's wall clock; its monotonic clock, and
/// every other node's clocks, stay): the node lifecycle controller judges a node by when it
/// saw its heartbeats change, on its own clock. With node2's clock 5 minutes behind, node2
/// stays Ready, untainted, its pods untouched (its Lease reads 5 minutes old); with its clock
/// 10 minutes ahead, node2 still runs, and once it dies it is NotReady and its Deployment
/// replica replaced within the grace period (its last Lease reads 10 minutes in the future).
#[test]
fn a_node_whose_clock_jumps_is_judged_on_the_servers_clock() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let h = Harness::up_env(
        2,
        1,
        "--node-monitor-grace-period 15s",
        "",
        &[("R8S_MN_FAKETIME", "1")],
    );
    h.apply(RETURNING);
    // (uid, node) of the pods that run and are not being deleted.
    let running = || -> Vec<(String, String)> {
        let mut v: Vec<_> = live_pods(&h, &[])
            .iter()
            .map(|p| {
                (
                    p["metadata"]["uid"].as_str().unwrap().to_owned(),
                    p["spec"]["nodeName"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let before = wait_for(180, "web on both nodes and one-0, Running", || {
        let r = running();
        (r.len() == 3 && r.iter().filter(|p| p.1 == "node2").count() >= 1).then_some(r)
    });
    // Ready and untainted, and the same pods.
    let healthy = |what: &str| {
        let n = h.json(&["get", "node", "node2"]);
        let ready = n["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .cloned()
            .unwrap_or_default();
        assert_eq!(ready["status"], "True", "{what}: {ready}");
        assert!(
            n["spec"]["taints"].as_array().is_none_or(|t| t.is_empty()),
            "{what}: {}",
            n["spec"]["taints"]
        );
        assert_eq!(running(), before, "{what}");
    };
    // How far node2's last Lease renewal reads from the host's clock, in seconds.
    let lease_skew = || {
        let renewed = h.ok(&[
            "-n",
            "kube-node-lease",
            "get",
            "lease",
            "node2",
            "-o",
            "jsonpath={.spec.renewTime}",
        ]);
        let renewed: jiff::Timestamp = renewed.parse().unwrap();
        renewed.duration_since(jiff::Timestamp::now()).as_secs()
    };
    // (offset, seconds watched, the Lease's skew expected: the offset less up to a renewal
    // interval)
    for (offset, secs, skewed) in [("-300", 30, -315..=-290), ("+600", 20, 585..=605)] {
        h.node_command_with("clock", "node2", &[offset]);
        let until = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < until {
            healthy(&format!("node2's clock {offset} s off"));
            std::thread::sleep(Duration::from_secs(2));
        }
        // node2 renewed its Lease meanwhile, on its own clock (the jump took).
        let skew = lease_skew();
        assert!(
            skewed.contains(&skew),
            "node2's clock {offset} s off, its Lease renewed {skew} s from now"
        );
    }

    h.node_command("kill", "node2");
    let lost = Instant::now();
    wait_for(45, "node2 NotReady", || {
        let n = h.json(&["get", "node", "node2"]);
        n["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "Unknown")
            .then_some(())
    });
    eprintln!(
        "node2, its clock 10 minutes ahead, NotReady {:?} after its death",
        lost.elapsed()
    );
    let web_on_2: Vec<&(String, String)> = before.iter().filter(|p| p.1 == "node2").collect();
    wait_for(60, "node2's pods evicted and web running on node1", || {
        let web = h.json(&["get", "pods", "-l", "app=web"]);
        let on1 = web["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| {
                p["metadata"]["deletionTimestamp"].is_null()
                    && p["status"]["phase"] == "Running"
                    && p["spec"]["nodeName"] == "node1"
            })
            .count();
        let all = h.json(&["get", "pods"]);
        let evicted = web_on_2.iter().all(|(uid, _)| {
            all["items"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["metadata"]["uid"] == uid.as_str())
                .is_none_or(|p| !p["metadata"]["deletionTimestamp"].is_null())
        });
        (on1 == 2 && evicted).then_some(())
    });
}
