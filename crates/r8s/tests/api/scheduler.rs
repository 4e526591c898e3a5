//! End to end: the scheduler inside `r8s server`, with Node objects created through the API
//! (no kubelet), judged with the real kubectl.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::Server;

const V: &str = "1.33";

fn server() -> Server {
    // Nodes here never renew a Lease: keep the node lifecycle controller from tainting them.
    Server::start_with(&["--node-monitor-grace-period=1h"])
}

fn wait_for<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn json(s: &Server, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.extend(["-o", "json"]);
    serde_json::from_str(&s.ok(V, &a)).unwrap()
}

fn node(s: &Server, name: &str, cpu: &str, labels: &str, taints: &str) {
    let manifest = format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels: {{kubernetes.io/hostname: {name}{labels}}}\nspec:\n  taints: [{taints}]\nstatus:\n  capacity: {{cpu: \"{cpu}\", memory: 8Gi, pods: \"110\"}}\n  allocatable: {{cpu: \"{cpu}\", memory: 8Gi, pods: \"110\"}}\n"
    );
    s.ok_stdin(V, &["create", "-f", "-"], &manifest);
}

fn pod(s: &Server, name: &str, extra_spec: &str, cpu: &str) {
    let manifest = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n{extra_spec}  containers:\n  - name: c\n    image: nginx\n    resources: {{requests: {{cpu: \"{cpu}\"}}}}\n"
    );
    s.ok_stdin(V, &["create", "-f", "-"], &manifest);
}

fn node_of(s: &Server, pod: &str) -> Option<String> {
    json(s, &["get", "pod", pod])["spec"]["nodeName"]
        .as_str()
        .map(String::from)
}

fn wait_bound(s: &Server, pod: &str) -> String {
    wait_for(30, &format!("{pod} bound"), || node_of(s, pod))
}

/// The PodScheduled=False message of an unschedulable pod.
fn wait_unschedulable(s: &Server, pod: &str) -> String {
    wait_for(30, &format!("{pod} unschedulable"), || {
        let p = json(s, &["get", "pod", pod]);
        let c = p["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "PodScheduled")?
            .clone();
        (c["status"] == "False" && c["reason"] == "Unschedulable")
            .then(|| c["message"].as_str().unwrap().to_string())
    })
}

#[test]
fn deployment_spreads_over_three_nodes_with_scheduled_events() {
    let s = server();
    for n in ["n1", "n2", "n3"] {
        node(&s, n, "4", "", "");
    }
    s.ok(
        V,
        &["create", "deployment", "web", "--image=nginx", "--replicas=6"],
    );
    let nodes = wait_for(30, "6 pods bound", || {
        let pods = json(&s, &["get", "pods", "-l", "app=web"]);
        let nodes: Vec<String> = pods["items"]
            .as_array()?
            .iter()
            .filter_map(|p| p["spec"]["nodeName"].as_str().map(String::from))
            .collect();
        (nodes.len() == 6).then_some(nodes)
    });
    for n in ["n1", "n2", "n3"] {
        assert_eq!(
            nodes.iter().filter(|x| *x == n).count(),
            2,
            "spread evenly: {nodes:?}"
        );
    }
    // The API server recorded PodScheduled=True on bind; the scheduler said so in an event.
    let pods = json(&s, &["get", "pods", "-l", "app=web"]);
    let p = &pods["items"][0];
    let cond = p["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "PodScheduled")
        .unwrap();
    assert_eq!(cond["status"], "True");
    let events = wait_for(30, "Scheduled events", || {
        let e = s.ok(V, &["get", "events", "--field-selector", "reason=Scheduled"]);
        (e.matches("Successfully assigned default/web-").count() == 6).then_some(e)
    });
    assert!(events.contains("Scheduled"), "{events}");
}

#[test]
fn resources_taints_and_affinity_decide_placement_and_failures_say_why() {
    let s = server();
    node(&s, "small", "1", ", zone: a", "");
    node(&s, "big", "4", ", zone: b", "");
    node(
        &s,
        "gpu",
        "8",
        ", zone: a",
        "{key: dedicated, value: gpu, effect: NoSchedule}",
    );

    // Resource fit: 2 cpu fits only "big" (the tainted node is not an option without toleration).
    pod(&s, "two-cpu", "", "2");
    assert_eq!(wait_bound(&s, "two-cpu"), "big");
    // Too big for any node it may use.
    pod(&s, "huge", "", "16");
    let msg = wait_unschedulable(&s, "huge");
    assert_eq!(
        msg,
        "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, 2 Insufficient cpu. preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, 2 No preemption victims found for incoming pod."
    );
    let events = wait_for(30, "FailedScheduling event", || {
        let e = s.ok(
            V,
            &["get", "events", "--field-selector", "involvedObject.name=huge"],
        );
        e.contains("FailedScheduling").then_some(e)
    });
    assert!(events.contains("Insufficient cpu"), "{events}");

    // A toleration opens the tainted node; a node selector then picks it.
    let tolerate = "  tolerations: [{key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}]\n  nodeSelector: {kubernetes.io/hostname: gpu}\n";
    pod(&s, "tolerant", tolerate, "1");
    assert_eq!(wait_bound(&s, "tolerant"), "gpu");

    // Required node affinity: zone a, and only "small" is untainted there.
    let affinity = "  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n        - matchExpressions: [{key: zone, operator: In, values: [a]}]\n";
    pod(&s, "zone-a", affinity, "100m");
    assert_eq!(wait_bound(&s, "zone-a"), "small");
    pod(&s, "zone-a-big", affinity, "2");
    let msg = wait_unschedulable(&s, "zone-a-big");
    assert_eq!(
        msg,
        "0/3 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint {dedicated: gpu}. preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, 2 Preemption is not helpful for scheduling."
    );

    // A new node that fits: the unschedulable pod is retried and lands there.
    node(&s, "bigger", "32", ", zone: c", "");
    assert_eq!(wait_bound(&s, "huge"), "bigger");

    // The in-process scheduler's metrics are on the API server's /metrics.
    let value = |metrics: &str, series: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or(0.0)
    };
    // Four pods bound (one after being unschedulable; the binding is counted once it returns);
    // two pods were unschedulable at least once, and each time preemption was tried.
    let metrics = wait_for(30, "scheduler metrics", || {
        let m = s.ok(V, &["get", "--raw", "/metrics"]);
        (value(
            &m,
            "scheduler_schedule_attempts_total{result=\"scheduled\",profile=\"default-scheduler\"}",
        ) >= 4.0)
            .then_some(m)
    });
    assert!(
        value(
            &metrics,
            "scheduler_schedule_attempts_total{result=\"unschedulable\",profile=\"default-scheduler\"}"
        ) >= 2.0,
        "{metrics}"
    );
    assert!(
        value(&metrics, "scheduler_preemption_attempts_total") >= 2.0,
        "{metrics}"
    );
    assert!(metrics.contains("scheduler_scheduling_attempt_duration_seconds_bucket{"));
    assert!(metrics.contains("apiserver_request_total{"));
    assert!(metrics.trim_end().ends_with("# EOF") && metrics.matches("# EOF").count() == 1);
}

#[test]
fn pods_for_another_scheduler_are_left_alone() {
    let s = server();
    node(&s, "n1", "4", "", "");
    pod(&s, "mine", "  schedulerName: my-scheduler\n", "100m");
    pod(&s, "default", "", "100m");
    assert_eq!(wait_bound(&s, "default"), "n1");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(node_of(&s, "mine"), None);
    let p = json(&s, &["get", "pod", "mine"]);
    assert!(p["status"]["conditions"].is_null(), "untouched: {}", p["status"]);
}

fn items(s: &Server, args: &[&str]) -> Vec<Value> {
    json(s, args)["items"].as_array().cloned().unwrap_or_default()
}

#[test]
fn anti_affinity_and_topology_spread() {
    let s = server();
    node(&s, "a1", "8", ", zone: a", "");
    node(&s, "a2", "8", ", zone: a", "");
    node(&s, "b1", "8", ", zone: b", "");
    let deployment = |name: &str, replicas: usize, spec: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n{spec}      containers:\n      - name: c\n        image: nginx\n"
        )
    };
    let placed = |s: &Server, app: &str, n: usize| {
        wait_for(30, &format!("{n} {app} pods bound"), || {
            let nodes: Vec<String> = items(s, &["get", "pods", "-l", &format!("app={app}")])
                .iter()
                .filter_map(|p| p["spec"]["nodeName"].as_str().map(String::from))
                .collect();
            (nodes.len() == n).then_some(nodes)
        })
    };

    // Required anti-affinity on the host name: one replica per node, a fourth fits nowhere.
    let anti = "      affinity:\n        podAntiAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n          - labelSelector: {matchLabels: {app: db}}\n            topologyKey: kubernetes.io/hostname\n";
    s.ok_stdin(V, &["apply", "-f", "-"], &deployment("db", 3, anti));
    let mut nodes = placed(&s, "db", 3);
    nodes.sort();
    assert_eq!(nodes, ["a1", "a2", "b1"]);
    s.ok(V, &["scale", "deployment/db", "--replicas=4"]);
    let pending = wait_for(30, "a pending db pod", || {
        items(&s, &["get", "pods", "-l", "app=db"])
            .into_iter()
            .find(|p| p["spec"]["nodeName"].is_null())
    });
    let name = pending["metadata"]["name"].as_str().unwrap().to_string();
    assert_eq!(
        wait_unschedulable(&s, &name),
        "0/3 nodes are available: 3 node(s) didn't satisfy existing pods anti-affinity rules. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
    );

    // Zone spread with maxSkew 1: 2 and 2, although zone a has twice the nodes.
    let spread = "      topologySpreadConstraints:\n      - maxSkew: 1\n        topologyKey: zone\n        whenUnsatisfiable: DoNotSchedule\n        labelSelector: {matchLabels: {app: web}}\n";
    s.ok_stdin(V, &["apply", "-f", "-"], &deployment("web", 4, spread));
    let nodes = placed(&s, "web", 4);
    let in_b = nodes.iter().filter(|n| *n == "b1").count();
    assert_eq!(in_b, 2, "{nodes:?}");
}

#[test]
fn priority_classes_and_preemption() {
    let s = server();
    node(&s, "n1", "2", "", "");
    s.ok(V, &["create", "priorityclass", "low", "--value=10"]);
    s.ok(V, &["create", "priorityclass", "high", "--value=1000"]);
    // Priority admission resolves the class, and refuses an unknown one.
    let err = String::from_utf8(s.fails_stdin(
        V,
        &["create", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: nope\nspec:\n  priorityClassName: nope\n  containers:\n  - name: c\n    image: nginx\n",
    ))
    .unwrap();
    assert!(err.contains("no PriorityClass with name nope was found"), "{err}");
    pod(&s, "victim", "  priorityClassName: low\n", "2");
    assert_eq!(wait_bound(&s, "victim"), "n1");
    assert_eq!(json(&s, &["get", "pod", "victim"])["spec"]["priority"], 10);

    // A higher-priority pod that does not fit preempts it and is nominated to the node.
    pod(&s, "vip", "  priorityClassName: high\n", "2");
    wait_for(30, "victim deleted", || {
        json(&s, &["get", "pod", "victim"])["metadata"]["deletionTimestamp"]
            .is_string()
            .then_some(())
    });
    let nominated = wait_for(30, "nominated node", || {
        json(&s, &["get", "pod", "vip"])["status"]["nominatedNodeName"]
            .as_str()
            .map(String::from)
    });
    assert_eq!(nominated, "n1");
    let events = wait_for(30, "Preempted event", || {
        let e = s.ok(
            V,
            &["get", "events", "--field-selector", "involvedObject.name=victim"],
        );
        e.contains("Preempted").then_some(e)
    });
    assert!(events.contains("on node n1"), "{events}");
    // The victim was told why first: upstream's DisruptionTarget condition.
    let victim = json(&s, &["get", "pod", "victim"]);
    let target = support::condition(&victim, "DisruptionTarget");
    assert_eq!(target["status"], "True", "{victim}");
    assert_eq!(target["reason"], "PreemptionByScheduler");
    assert_eq!(
        target["message"],
        "default-scheduler: preempting to accommodate a higher priority pod"
    );
    // No kubelet here to finish the graceful deletion: do what it would.
    s.ok(V, &["delete", "pod", "victim", "--grace-period=0", "--force"]);
    assert_eq!(wait_bound(&s, "vip"), "n1");

    // An equal-priority pod cannot preempt: it says so.
    pod(&s, "peer", "  priorityClassName: high\n", "2");
    assert_eq!(
        wait_unschedulable(&s, "peer"),
        "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
    );
}

#[test]
fn scheduler_configuration_profiles() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("scheduler.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: default-scheduler\n- schedulerName: taint-blind\n  plugins:\n    filter:\n      disabled:\n      - name: TaintToleration\n",
    )
    .unwrap();
    let s = Server::start_with(&[
        "--node-monitor-grace-period=1h",
        "--scheduler-config",
        config.to_str().unwrap(),
    ]);
    node(
        &s,
        "only",
        "4",
        "",
        "{key: dedicated, value: x, effect: NoSchedule}",
    );
    pod(&s, "plain", "", "100m");
    pod(&s, "blind", "  schedulerName: taint-blind\n", "100m");
    assert_eq!(wait_bound(&s, "blind"), "only");
    assert_eq!(
        wait_unschedulable(&s, "plain"),
        "0/1 nodes are available: 1 node(s) had untolerated taint {dedicated: x}. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    );
}

/// NodeResourcesFit's scoringStrategy from pluginConfig: a MostAllocated profile packs pods
/// onto the node already in use, while the default profile (LeastAllocated) spreads.
#[test]
fn most_allocated_profiles_pack_pods() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("scheduler.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: default-scheduler\n- schedulerName: packer\n  plugins:\n    score:\n      disabled:\n      - name: NodeResourcesBalancedAllocation\n  pluginConfig:\n  - name: NodeResourcesFit\n    args:\n      scoringStrategy:\n        type: MostAllocated\n",
    )
    .unwrap();
    let s = Server::start_with(&[
        "--node-monitor-grace-period=1h",
        "--scheduler-config",
        config.to_str().unwrap(),
    ]);
    node(&s, "a", "4", "", "");
    node(&s, "b", "4", "", "");
    pod(&s, "first", "  schedulerName: packer\n", "1");
    let used = wait_bound(&s, "first");
    pod(&s, "second", "  schedulerName: packer\n", "1");
    assert_eq!(wait_bound(&s, "second"), used, "packed onto the node in use");
    pod(&s, "spread", "", "100m");
    assert_ne!(wait_bound(&s, "spread"), used, "the default profile spreads");
}
