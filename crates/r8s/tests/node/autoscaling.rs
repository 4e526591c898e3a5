//! Resource metrics and autoscaling end to end, with real containers and the real kubectl:
//! `kubectl top` shows the kubelet's cgroup figures served in-process as `metrics.k8s.io`, and
//! they move when a pod burns CPU; `kubectl autoscale` makes a HorizontalPodAutoscaler that
//! scales a Deployment up under that load and back down once it stops (the controller's sync
//! period and stabilisation window shortened through its flags, the scrape resolution too).

use crate::support;

use serde_json::Value;
use support::cluster::*;

/// Millicores from `kubectl top`'s CPU cell ("123m").
fn millicores(cell: &str) -> i64 {
    cell.trim_end_matches('m').parse().unwrap_or(-1)
}

/// The CPU cell of each pod row of `kubectl top pods` (name → millicores).
fn top_pods(s: &support::Server, version: &str) -> Vec<(String, i64)> {
    let out = s.kubectl(version, &["top", "pods", "-l", "app=burn"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            (cells.len() == 3).then(|| (cells[0].to_owned(), millicores(cells[1])))
        })
        .collect()
}

fn replicas(s: &support::Server, name: &str) -> i64 {
    json(s, &["get", "deployment", name])["status"]["replicas"]
        .as_i64()
        .unwrap_or(0)
}

#[test]
fn top_shows_usage_and_an_autoscaler_follows_it() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let c = start_with(
        "hpa-node",
        "10.210.0.0/16",
        "r8st",
        &[
            "--metric-resolution=3s",
            "--horizontal-pod-autoscaler-sync-period=3s",
            "--horizontal-pod-autoscaler-downscale-stabilization=10s",
        ],
    );
    let s = &c.s;

    // Discovery lists the metrics API as metrics-server does, without an aggregated server.
    let resources: Value =
        serde_json::from_str(&s.ok(V, &["get", "--raw", "/apis/metrics.k8s.io/v1beta1"])).unwrap();
    let names: Vec<(&str, &str)> = resources["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["name"].as_str().unwrap(), r["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(names, [("nodes", "NodeMetrics"), ("pods", "PodMetrics")]);

    // A pod that burns CPU (capped at 200m, asking for 100m) until a moment the test chose,
    // then idles: every replica stops at the same time.
    let until = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 70;
    s.ok_stdin(
        V,
        &["apply", "-f", "-"],
        &format!(
            r#"{{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {{"name": "burn"}},
            "spec": {{"replicas": 1, "selector": {{"matchLabels": {{"app": "burn"}}}},
              "template": {{"metadata": {{"labels": {{"app": "burn"}}}}, "spec": {{"terminationGracePeriodSeconds": 1, "containers": [
                {{"name": "burn", "image": "busybox", "resources": {{"requests": {{"cpu": "100m"}}, "limits": {{"cpu": "200m"}}}},
                 "command": ["sh", "-c", "while [ $(date +%s) -lt {until} ]; do :; done; exec sleep 3600"]}}]}}}}}}}}"#
        ),
    );
    s.ok(V, &["rollout", "status", "deployment/burn", "--timeout=120s"]);

    // `kubectl top` (both versions) shows the burning pod near its cap, and the node.
    for v in [V, "1.27"] {
        let (_, cpu) = wait_for(60, "kubectl top pods to show the burning pod", || {
            top_pods(s, v).into_iter().find(|(_, cpu)| *cpu >= 100)
        });
        assert!(cpu <= 260, "the pod is capped at 200m: {cpu}m");
        let nodes = s.ok(v, &["top", "nodes"]);
        let header: Vec<&str> = nodes.lines().next().unwrap().split_whitespace().collect();
        let percent = if v == V {
            ["CPU(%)", "MEMORY(%)"]
        } else {
            ["CPU%", "MEMORY%"]
        };
        assert_eq!(
            header,
            ["NAME", "CPU(cores)", percent[0], "MEMORY(bytes)", percent[1]],
            "{nodes}"
        );
        let row: Vec<&str> = nodes.lines().nth(1).unwrap().split_whitespace().collect();
        assert_eq!(row[0], "hpa-node", "{nodes}");
        assert!(
            millicores(row[1]) >= 100,
            "the node burns at least the pod's CPU: {nodes}"
        );
        assert!(row[3].ends_with("Mi") && row[2].ends_with('%'), "{nodes}");
    }
    // The API's own shapes and words.
    let pods: Value = serde_json::from_str(&s.ok(
        V,
        &[
            "get",
            "--raw",
            "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=app%3Dburn",
        ],
    ))
    .unwrap();
    let item = &pods["items"][0];
    assert_eq!(item["kind"], "PodMetrics", "{pods}");
    assert_eq!(item["metadata"]["labels"]["app"], "burn", "{pods}");
    assert_eq!(item["containers"][0]["name"], "burn", "{pods}");
    assert!(item["window"].as_str().unwrap().ends_with('s'), "{pods}");
    let missing = s.fails(V, &["top", "pod", "nothing-here"]);
    assert!(missing.contains("pods \"nothing-here\" not found"), "{missing}");
    let bad = s.fails(
        V,
        &[
            "get",
            "--raw",
            "/apis/metrics.k8s.io/v1beta1/pods?fieldSelector=spec.nodeName%3Dx",
        ],
    );
    assert!(
        bad.contains("is not a known field selector: only") && bad.contains("metadata.namespace"),
        "{bad}"
    );

    // The autoscaler: invalid specs are refused in upstream's words.
    let invalid = String::from_utf8(s.fails_stdin(
        V,
        &["apply", "-f", "-"],
        r#"{"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "bad"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "burn"}, "minReplicas": 2, "maxReplicas": 1}}"#,
    ))
    .unwrap();
    assert!(
        invalid
            .contains("spec.maxReplicas: Invalid value: 1: must be greater than or equal to `minReplicas`"),
        "{invalid}"
    );
    // kubectl 1.33 creates an autoscaling/v2 HPA, 1.27 a v1 one; both read back in both forms.
    s.ok(
        V,
        &[
            "autoscale",
            "deployment",
            "burn",
            "--cpu-percent=50",
            "--min=1",
            "--max=3",
        ],
    );
    s.ok(
        V,
        &[
            "create",
            "deployment",
            "idle",
            "--image=busybox",
            "--",
            "sleep",
            "3600",
        ],
    );
    s.ok("1.27", &["autoscale", "deployment", "idle", "--max=2"]);
    let idle = json(s, &["get", "hpa.v2.autoscaling", "idle"]);
    assert_eq!(
        idle["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"], 80,
        "a v1 autoscaler without a target gets the default: {idle}"
    );
    let burn_v1: Value = serde_json::from_str(&s.ok(
        V,
        &[
            "get",
            "--raw",
            "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers/burn",
        ],
    ))
    .unwrap();
    assert_eq!(burn_v1["apiVersion"], "autoscaling/v1", "{burn_v1}");
    assert_eq!(burn_v1["spec"]["targetCPUUtilizationPercentage"], 50, "{burn_v1}");

    // Under load: scaled up to the maximum, with upstream's status, table and event.
    wait_for(90, "the autoscaler to scale burn up to 3", || {
        (replicas(s, "burn") == 3).then_some(())
    });
    let hpa = json(s, &["get", "hpa", "burn"]);
    assert_eq!(hpa["status"]["desiredReplicas"], 3, "{hpa}");
    let active = hpa["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "ScalingActive")
        .cloned()
        .unwrap();
    assert_eq!(active["reason"], "ValidMetricFound", "{hpa}");
    wait_for(20, "the scale-up event", || {
        events_of(s, "burn")
            .iter()
            .any(|(r, m)| {
                r == "SuccessfulRescale"
                    && m == "New size: 3; reason: cpu resource utilization (percentage of request) above target"
            })
            .then_some(())
    });
    for v in [V, "1.27"] {
        let table = s.ok(v, &["get", "hpa", "burn"]);
        let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
        assert_eq!(
            header,
            [
                "NAME",
                "REFERENCE",
                "TARGETS",
                "MINPODS",
                "MAXPODS",
                "REPLICAS",
                "AGE"
            ],
            "{table}"
        );
        let row = table.lines().nth(1).unwrap();
        assert!(
            row.contains("Deployment/burn") && row.contains("%/50%"),
            "{table}"
        );
    }

    // The load stops: `kubectl top` shows it, and the autoscaler scales back to the minimum.
    wait_for(120, "kubectl top pods to show the load gone", || {
        let rows = top_pods(s, V);
        (!rows.is_empty() && rows.iter().all(|(_, cpu)| *cpu < 50)).then_some(())
    });
    wait_for(90, "the autoscaler to scale burn back to 1", || {
        (replicas(s, "burn") == 1).then_some(())
    });
    // (Events are written in the background.)
    wait_for(20, "the scale-down event", || {
        events_of(s, "burn")
            .iter()
            .any(|(r, m)| r == "SuccessfulRescale" && m == "New size: 1; reason: All metrics below target")
            .then_some(())
    });
    // The idle one stayed where it was.
    assert_eq!(replicas(s, "idle"), 1);
}
