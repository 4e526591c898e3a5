//! The workloads beyond Deployments end to end, with real containers and the real kubectl:
//! Jobs (NonIndexed, Indexed, failing, with a TTL) and CronJobs run to their conditions,
//! DaemonSets follow nodes and taints and roll back, StatefulSets start in order and keep their
//! names, and `kubectl drain` is refused by a PodDisruptionBudget, then allowed once the budget
//! allows.

use crate::support;

use serde_json::Value;
use support::cluster::*;

#[test]
fn jobs_run_to_their_conditions() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let c = start("jobs-node", "10.206.0.0/16", "r8sg");
    let s = &c.s;

    // `kubectl create job`: one pod to one success.
    s.ok(
        V,
        &[
            "create",
            "job",
            "count",
            "--image=busybox",
            "--",
            "sh",
            "-c",
            "echo done",
        ],
    );
    s.ok(
        V,
        &["wait", "--for=condition=complete", "job/count", "--timeout=120s"],
    );
    let job = json(s, &["get", "job", "count"]);
    assert_eq!(job["status"]["succeeded"], 1, "{job}");
    assert_eq!(
        job["status"]["uncountedTerminatedPods"],
        serde_json::json!({}),
        "{job}"
    );
    assert!(job["status"]["completionTime"].is_string(), "{job}");
    let conditions: Vec<&str> = job["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "True")
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(conditions, ["SuccessCriteriaMet", "Complete"], "{job}");
    // Its pod finished, was counted, and keeps no finalizer.
    let pods = json(s, &["get", "pods", "-l", "job-name=count"]);
    let pod = &pods["items"][0];
    assert_eq!(pod["status"]["phase"], "Succeeded", "{pod}");
    assert!(
        pod["metadata"]["finalizers"]
            .as_array()
            .is_none_or(|f| f.is_empty()),
        "{pod}"
    );
    // Both kubectl versions print the Job as upstream does.
    for v in ["1.27", V] {
        let table = s.ok(v, &["get", "jobs"]);
        let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
        assert_eq!(
            header,
            ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"],
            "{table}"
        );
        assert!(
            table.lines().nth(1).unwrap().contains("Complete   1/1"),
            "{table}"
        );
    }

    // Indexed: each index once, each pod told its index, and the Job deleted after its TTL.
    s.ok_stdin(
        V,
        &["apply", "-f", "-"],
        r#"{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "indexed"},
            "spec": {"completions": 3, "parallelism": 2, "completionMode": "Indexed", "ttlSecondsAfterFinished": 2,
                     "template": {"spec": {"restartPolicy": "Never", "containers": [
                        {"name": "w", "image": "busybox", "command": ["sh", "-c", "echo index=$JOB_COMPLETION_INDEX"]}]}}}}"#,
    );
    s.ok(
        V,
        &[
            "wait",
            "--for=condition=complete",
            "job/indexed",
            "--timeout=120s",
        ],
    );
    let job = json(s, &["get", "job", "indexed"]);
    assert_eq!(job["status"]["completedIndexes"], "0-2", "{job}");
    assert_eq!(job["status"]["succeeded"], 3, "{job}");
    let pods = json(s, &["get", "pods", "-l", "batch.kubernetes.io/job-name=indexed"]);
    let mut seen: Vec<String> = Vec::new();
    for p in pods["items"].as_array().unwrap() {
        let index = p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
            .as_str()
            .unwrap();
        assert_eq!(p["spec"]["hostname"], format!("indexed-{index}"), "{p}");
        let name = p["metadata"]["name"].as_str().unwrap();
        let log = s.ok(V, &["logs", name]);
        assert_eq!(log.trim(), format!("index={index}"), "{name}");
        seen.push(index.to_owned());
    }
    seen.sort();
    assert_eq!(seen, ["0", "1", "2"]);
    wait_for(60, "the finished Job deleted after its TTL", || {
        let out = s.kubectl(V, &["get", "job", "indexed"]);
        (!out.status.success()).then_some(())
    });
    wait_for(60, "its pods collected with it", || {
        let pods = json(s, &["get", "pods", "-l", "batch.kubernetes.io/job-name=indexed"]);
        pods["items"].as_array().unwrap().is_empty().then_some(())
    });

    // A Job whose pod fails with no retries left fails, with upstream's reason and message.
    s.ok_stdin(
        V,
        &["apply", "-f", "-"],
        r#"{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "broken"},
            "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "w", "image": "busybox", "command": ["sh", "-c", "exit 3"]}]}}}}"#,
    );
    s.ok(
        V,
        &["wait", "--for=condition=failed", "job/broken", "--timeout=120s"],
    );
    let job = json(s, &["get", "job", "broken"]);
    let failed = job["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Failed")
        .unwrap();
    assert_eq!(failed["reason"], "BackoffLimitExceeded", "{job}");
    assert_eq!(
        failed["message"], "Job has reached the specified backoff limit",
        "{job}"
    );
    assert_eq!(job["status"]["failed"], 1, "{job}");
    assert!(s
        .ok(V, &["get", "jobs"])
        .lines()
        .any(|l| l.starts_with("broken") && l.contains("Failed")));

    // Indexed with a limit per index: index 1 always fails, is retried once (after its own
    // back-off), and fails the Job only once the other indexes have finished.
    s.ok_stdin(
        V,
        &["apply", "-f", "-"],
        r#"{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "per-index"},
            "spec": {"completions": 3, "parallelism": 3, "completionMode": "Indexed", "backoffLimitPerIndex": 1,
                     "template": {"spec": {"restartPolicy": "Never", "containers": [
                        {"name": "w", "image": "busybox", "command": ["sh", "-c", "test $JOB_COMPLETION_INDEX -ne 1"]}]}}}}"#,
    );
    s.ok(
        V,
        &[
            "wait",
            "--for=condition=failed",
            "job/per-index",
            "--timeout=120s",
        ],
    );
    let job = json(s, &["get", "job", "per-index"]);
    assert_eq!(job["status"]["completedIndexes"], "0,2", "{job}");
    assert_eq!(job["status"]["failedIndexes"], "1", "{job}");
    assert_eq!(job["status"]["failed"], 2, "index 1 ran twice: {job}");
    let failed = job["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Failed")
        .unwrap();
    assert_eq!(failed["reason"], "FailedIndexes", "{job}");
    let pods = json(
        s,
        &["get", "pods", "-l", "batch.kubernetes.io/job-completion-index=1"],
    );
    let counts: Vec<&str> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["metadata"]["annotations"]["batch.kubernetes.io/job-index-failure-count"].as_str())
        .collect();
    let mut counts = counts;
    counts.sort();
    assert_eq!(counts, ["0", "1"], "{pods}");

    // Pods that restart always are refused with upstream's message.
    let out = s.kubectl_stdin(
        V,
        &["apply", "-f", "-"],
        r#"{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "always"},
            "spec": {"template": {"spec": {"containers": [{"name": "w", "image": "busybox"}]}}}}"#,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            r#"spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never""#
        ),
        "{err}"
    );
    // A pod failure policy: exit code 42 fails the Job at once, whatever the backoff limit;
    // the failure of a pod the policy ignores is not counted.
    s.ok_stdin(
        V,
        &["apply", "-f", "-"],
        r#"{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "policy"},
            "spec": {"backoffLimit": 6, "podFailurePolicy": {"rules": [
                {"action": "FailJob", "onExitCodes": {"containerName": "w", "operator": "In", "values": [42]}}]},
              "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "w", "image": "busybox", "command": ["sh", "-c", "exit 42"]}]}}}}"#,
    );
    s.ok(
        V,
        &["wait", "--for=condition=failed", "job/policy", "--timeout=90s"],
    );
    let job = json(s, &["get", "job", "policy"]);
    let failed = job["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Failed")
        .cloned()
        .unwrap();
    assert_eq!(failed["reason"], "PodFailurePolicy", "{job}");
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .ends_with("failed with exit code 42 matching FailJob rule at index 0"),
        "{job}"
    );
    assert_eq!(
        job["status"]["failed"], 1,
        "one pod, not the backoff limit: {job}"
    );
    // A success policy: index 0 is enough; the other indexes' pods are stopped.
    s.ok_stdin(
        V,
        &["apply", "-f", "-"],
        r#"{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "leader"},
            "spec": {"completions": 3, "parallelism": 3, "completionMode": "Indexed",
              "successPolicy": {"rules": [{"succeededIndexes": "0"}]},
              "template": {"spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [
                {"name": "w", "image": "busybox", "command": ["sh", "-c", "[ $JOB_COMPLETION_INDEX = 0 ] || exec sleep 600"]}]}}}}"#,
    );
    s.ok(
        V,
        &["wait", "--for=condition=complete", "job/leader", "--timeout=120s"],
    );
    let job = json(s, &["get", "job", "leader"]);
    let complete = job["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Complete")
        .cloned()
        .unwrap();
    assert_eq!(complete["reason"], "SuccessPolicy", "{job}");
    assert_eq!(complete["message"], "Matched rules at index 0", "{job}");
    assert_eq!(job["status"]["completedIndexes"], "0", "{job}");
    assert_eq!(job["status"]["active"], 0, "{job}");
    s.ok(
        V,
        &["delete", "jobs", "--all", "--cascade=foreground", "--timeout=60s"],
    );

    // A CronJob that fires every minute creates its Job at the next minute, named after it.
    s.ok(
        V,
        &[
            "create",
            "cronjob",
            "tick",
            "--image=busybox",
            "--schedule=* * * * *",
            "--",
            "true",
        ],
    );
    let cj = json(s, &["get", "cronjob", "tick"]);
    assert_eq!(cj["spec"]["concurrencyPolicy"], "Allow", "{cj}");
    let job = wait_for(75, "the CronJob's first Job", || {
        let jobs = json(s, &["get", "jobs"]);
        jobs["items"].as_array().unwrap().first().cloned()
    });
    let name = job["metadata"]["name"].as_str().unwrap();
    let minutes: u64 = name.strip_prefix("tick-").unwrap().parse().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 60;
    assert!(
        now.abs_diff(minutes) <= 2,
        "{name} is not named after this minute ({now})"
    );
    let scheduled = job["metadata"]["annotations"]["batch.kubernetes.io/cronjob-scheduled-timestamp"]
        .as_str()
        .unwrap();
    assert!(scheduled.ends_with(":00Z"), "{job}");
    assert_eq!(job["metadata"]["ownerReferences"][0]["kind"], "CronJob", "{job}");
    s.ok(
        V,
        &[
            "wait",
            "--for=condition=complete",
            &format!("job/{name}"),
            "--timeout=120s",
        ],
    );
    let cj = wait_for(30, "the CronJob's status", || {
        let cj = json(s, &["get", "cronjob", "tick"]);
        cj["status"]["lastSuccessfulTime"].is_string().then_some(cj)
    });
    assert!(cj["status"]["lastScheduleTime"].is_string(), "{cj}");
    let row = s.ok(V, &["get", "cronjob", "tick", "--no-headers"]);
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells[..8],
        ["tick", "*", "*", "*", "*", "*", "<none>", "False"],
        "{row}"
    );
    s.ok(V, &["delete", "cronjob", "tick", "--timeout=60s"]);
}

#[test]
fn drain_is_refused_by_a_disruption_budget_then_allowed() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let c = start("drain-node", "10.207.0.0/16", "r8si");
    let s = &c.s;
    s.ok(
        V,
        &[
            "create",
            "deployment",
            "web",
            "--image=busybox",
            "--replicas=2",
            "--",
            "sleep",
            "3600",
        ],
    );
    s.ok(V, &["rollout", "status", "deployment/web", "--timeout=120s"]);
    s.ok(
        V,
        &[
            "create",
            "poddisruptionbudget",
            "web",
            "--selector=app=web",
            "--min-available=2",
        ],
    );
    let pdb = wait_for(30, "the budget computed", || {
        let p = json(s, &["get", "pdb", "web"]);
        (p["status"]["currentHealthy"] == 2).then_some(p)
    });
    assert_eq!(pdb["status"]["desiredHealthy"], 2, "{pdb}");
    assert_eq!(pdb["status"]["expectedPods"], 2, "{pdb}");
    assert_eq!(pdb["status"]["disruptionsAllowed"], 0, "{pdb}");
    let table = s.ok(V, &["get", "pdb"]);
    assert!(
        table.starts_with("NAME   MIN AVAILABLE   MAX UNAVAILABLE   ALLOWED DISRUPTIONS   AGE"),
        "{table}"
    );

    // The budget forbids any eviction: drain gives up at its timeout, the pods still run.
    let out = s.kubectl(V, &["drain", "drain-node", "--ignore-daemonsets", "--timeout=8s"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "drain succeeded against the budget:\n{err}"
    );
    assert!(
        err.contains("Cannot evict pod as it would violate the pod's disruption budget."),
        "{err}"
    );
    let node = json(s, &["get", "node", "drain-node"]);
    assert_eq!(node["spec"]["unschedulable"], true, "drain cordons first: {node}");
    let pods = json(s, &["get", "pods", "-l", "app=web"]);
    assert_eq!(pods["items"].as_array().unwrap().len(), 2, "{pods}");
    assert!(pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["metadata"]["deletionTimestamp"].is_null()));

    // Once the budget allows it, the same drain evicts both pods.
    s.ok(
        V,
        &[
            "patch",
            "pdb",
            "web",
            "--type=merge",
            "-p",
            r#"{"spec":{"minAvailable":0}}"#,
        ],
    );
    wait_for(30, "the budget allowing disruptions", || {
        let p = json(s, &["get", "pdb", "web"]);
        (p["status"]["disruptionsAllowed"] == 2).then_some(())
    });
    let out = s.ok(
        V,
        &["drain", "drain-node", "--ignore-daemonsets", "--timeout=90s"],
    );
    assert!(out.contains("node/drain-node drained"), "{out}");
    assert_eq!(out.matches("evicted").count(), 2, "{out}");
    // The replacements wait for a schedulable node.
    let pods = json(
        s,
        &[
            "get",
            "pods",
            "-l",
            "app=web",
            "--field-selector=status.phase=Running",
        ],
    );
    assert!(pods["items"].as_array().unwrap().is_empty(), "{pods}");
    s.ok(V, &["uncordon", "drain-node"]);
    s.ok(V, &["rollout", "status", "deployment/web", "--timeout=120s"]);
    s.ok(V, &["delete", "deployment", "web", "--timeout=60s"]);

    // A ReplicationController, as older clients make them: kept at its replicas, scaled
    // through its scale subresource, and its pods collected with it.
    s.ok_stdin(
        V,
        &["apply", "-f", "-"],
        r#"{"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "legacy"},
            "spec": {"replicas": 2, "template": {"metadata": {"labels": {"app": "legacy"}},
                     "spec": {"terminationGracePeriodSeconds": 1,
                              "containers": [{"name": "l", "image": "busybox", "command": ["sleep", "3600"]}]}}}}"#,
    );
    wait_for(120, "the controller's two pods ready", || {
        let rc = json(s, &["get", "rc", "legacy"]);
        (rc["status"]["readyReplicas"] == 2).then_some(())
    });
    let rc = json(s, &["get", "rc", "legacy"]);
    assert_eq!(
        rc["spec"]["selector"],
        serde_json::json!({"app": "legacy"}),
        "defaulted from the template: {rc}"
    );
    let raw = s.ok(
        V,
        &[
            "get",
            "--raw",
            "/api/v1/namespaces/default/replicationcontrollers/legacy/scale",
        ],
    );
    let scale: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(scale["status"]["selector"], "app=legacy", "{scale}");
    s.ok(V, &["scale", "rc", "legacy", "--replicas=1"]);
    wait_for(60, "one pod left", || {
        let pods = json(s, &["get", "pods", "-l", "app=legacy"]);
        let live = pods["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .count();
        (live == 1).then_some(())
    });
    let table = s.ok("1.27", &["get", "rc"]);
    assert!(
        table.starts_with("NAME     DESIRED   CURRENT   READY   AGE"),
        "{table}"
    );
    s.ok(V, &["delete", "rc", "legacy", "--timeout=60s"]);
    wait_for(60, "its pods collected", || {
        let pods = json(s, &["get", "pods", "-l", "app=legacy"]);
        pods["items"].as_array().unwrap().is_empty().then_some(())
    });
}

fn pod_names(s: &support::Server, selector: &str) -> Vec<String> {
    let pods = json(s, &["get", "pods", "-l", selector]);
    let mut names: Vec<String> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn daemonsets_follow_nodes_and_taints_and_roll_back() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let c = start("ds-node", "10.208.0.0/16", "r8sa");
    let s = &c.s;
    s.ok_stdin(
        V,
        &["apply", "-f", "-"],
        r#"{"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                     "template": {"metadata": {"labels": {"app": "agent"}},
                                  "spec": {"terminationGracePeriodSeconds": 1,
                                           "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}],
                                           "containers": [{"name": "a", "image": "busybox", "command": ["sleep", "3600"]}]}}}}"#,
    );
    s.ok(V, &["rollout", "status", "daemonset/agent", "--timeout=120s"]);
    let ds = json(s, &["get", "ds", "agent"]);
    for (k, v) in [
        ("desiredNumberScheduled", 1),
        ("currentNumberScheduled", 1),
        ("numberReady", 1),
        ("updatedNumberScheduled", 1),
    ] {
        assert_eq!(ds["status"][k], v, "{k}: {ds}");
    }
    let pods = json(s, &["get", "pods", "-l", "app=agent"]);
    let pod = &pods["items"][0];
    assert_eq!(pod["spec"]["nodeName"], "ds-node", "{pod}");
    assert_eq!(
        pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"][0]["matchFields"][0]["values"][0],
        "ds-node",
        "{pod}"
    );
    let tolerated: Vec<&str> = pod["spec"]["tolerations"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["key"].as_str())
        .collect();
    assert!(tolerated.contains(&"node.kubernetes.io/unschedulable"), "{pod}");
    let table = s.ok("1.27", &["get", "ds"]);
    assert!(
        table.starts_with("NAME    DESIRED   CURRENT   READY   UP-TO-DATE   AVAILABLE   NODE SELECTOR   AGE"),
        "{table}"
    );

    // A node joins (a Node object with no kubelet): it gets a daemon pod; it leaves: the pod goes.
    s.ok_stdin(
        V,
        &["create", "-f", "-"],
        r#"{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "ghost"}}"#,
    );
    wait_for(30, "a daemon pod for the new node", || {
        let ds = json(s, &["get", "ds", "agent"]);
        (ds["status"]["desiredNumberScheduled"] == 2 && pod_names(s, "app=agent").len() == 2).then_some(())
    });
    s.ok(V, &["delete", "node", "ghost"]);
    wait_for(30, "the daemon pod of the gone node removed", || {
        let ds = json(s, &["get", "ds", "agent"]);
        (ds["status"]["desiredNumberScheduled"] == 1 && pod_names(s, "app=agent").len() == 1).then_some(())
    });

    // A taint the daemon does not tolerate removes it; lifting the taint brings it back.
    s.ok(V, &["taint", "node", "ds-node", "dedicated=db:NoExecute"]);
    wait_for(30, "the daemon pod gone from the tainted node", || {
        pod_names(s, "app=agent").is_empty().then_some(())
    });
    let ds = json(s, &["get", "ds", "agent"]);
    assert_eq!(ds["status"]["desiredNumberScheduled"], 0, "{ds}");
    s.ok(V, &["taint", "node", "ds-node", "dedicated-"]);
    s.ok(V, &["rollout", "status", "daemonset/agent", "--timeout=120s"]);
    let first = pod_names(s, "app=agent");
    assert_eq!(first.len(), 1);

    // A new template rolls out as a new revision; undo brings the first one back.
    s.ok(V, &["set", "env", "daemonset/agent", "VERSION=2"]);
    s.ok(V, &["rollout", "status", "daemonset/agent", "--timeout=120s"]);
    let second = pod_names(s, "app=agent");
    assert_eq!(second.len(), 1);
    assert_ne!(first, second, "the pod was replaced");
    let pod = json(s, &["get", "pod", &second[0]]);
    assert_eq!(pod["spec"]["containers"][0]["env"][0]["value"], "2", "{pod}");
    let history = s.ok(V, &["rollout", "history", "daemonset/agent"]);
    let revisions: Vec<&str> = history
        .lines()
        .skip(2)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(revisions, ["1", "2"], "{history}");
    let revs = json(s, &["get", "controllerrevisions", "-l", "app=agent"]);
    assert_eq!(revs["items"].as_array().unwrap().len(), 2, "{revs}");
    s.ok(V, &["rollout", "undo", "daemonset/agent"]);
    s.ok(V, &["rollout", "status", "daemonset/agent", "--timeout=120s"]);
    let ds = json(s, &["get", "ds", "agent"]);
    assert!(
        ds["spec"]["template"]["spec"]["containers"][0]["env"].is_null(),
        "{ds}"
    );
    let history = s.ok(V, &["rollout", "history", "daemonset/agent"]);
    let revisions: Vec<&str> = history
        .lines()
        .skip(2)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        revisions,
        ["2", "3"],
        "the first revision came back as the third: {history}"
    );
    s.ok(V, &["delete", "daemonset", "agent", "--timeout=60s"]);
    wait_for(60, "the daemon pods collected", || {
        pod_names(s, "app=agent").is_empty().then_some(())
    });
}

#[test]
fn statefulsets_start_in_order_and_keep_their_names() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let c = start("sts-node", "10.209.0.0/16", "r8sc");
    let s = &c.s;
    s.ok(V, &["create", "service", "clusterip", "web", "--clusterip=None"]);
    s.ok_stdin(
        V,
        &["apply", "-f", "-"],
        r#"{"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web"},
            "spec": {"serviceName": "web", "replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"terminationGracePeriodSeconds": 1,
                                           "containers": [{"name": "w", "image": "busybox", "command": ["sleep", "3600"]}]}}}}"#,
    );
    s.ok(V, &["rollout", "status", "statefulset/web", "--timeout=180s"]);
    assert_eq!(pod_names(s, "app=web"), ["web-0", "web-1", "web-2"]);
    // Each pod was created only once its predecessor was Ready.
    let ready_at = |p: &Value| -> String {
        p["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap()["lastTransitionTime"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    for (before, after) in [("web-0", "web-1"), ("web-1", "web-2")] {
        let b = json(s, &["get", "pod", before]);
        let a = json(s, &["get", "pod", after]);
        let created = a["metadata"]["creationTimestamp"].as_str().unwrap().to_owned();
        assert!(
            ready_at(&b) <= created,
            "{after} created at {created} before {before} was Ready at {}",
            ready_at(&b)
        );
        assert_eq!(a["spec"]["hostname"], after, "{a}");
        assert_eq!(a["spec"]["subdomain"], "web", "{a}");
        assert_eq!(
            a["metadata"]["labels"]["apps.kubernetes.io/pod-index"],
            &after[4..],
            "{a}"
        );
    }
    let table = s.ok("1.27", &["get", "sts"]);
    assert!(table.lines().nth(1).unwrap().starts_with("web    3/3"), "{table}");

    // A deleted pod comes back under its own name.
    let uid = json(s, &["get", "pod", "web-1"])["metadata"]["uid"].clone();
    s.ok(V, &["delete", "pod", "web-1", "--timeout=60s"]);
    wait_for(60, "web-1 back and Ready", || {
        let p = json(
            s,
            &["get", "pods", "-l", "statefulset.kubernetes.io/pod-name=web-1"],
        );
        let p = p["items"].as_array()?.first()?.clone();
        (p["metadata"]["uid"] != uid && ready_at_opt(&p)).then_some(())
    });

    // A pod whose identity label is taken away gets it back (the same pod, not a new one).
    let uid = json(s, &["get", "pod", "web-0"])["metadata"]["uid"].clone();
    s.ok(
        V,
        &[
            "label",
            "pod",
            "web-0",
            "statefulset.kubernetes.io/pod-name-",
            "apps.kubernetes.io/pod-index=9",
            "--overwrite",
        ],
    );
    wait_for(30, "web-0's identity labels restored", || {
        let p = json(s, &["get", "pod", "web-0"]);
        let labels = &p["metadata"]["labels"];
        (labels["statefulset.kubernetes.io/pod-name"] == "web-0"
            && labels["apps.kubernetes.io/pod-index"] == "0")
            .then_some(())
    });
    assert_eq!(json(s, &["get", "pod", "web-0"])["metadata"]["uid"], uid);

    // Scaling down removes the highest ordinals; an update rolls from the highest down.
    s.ok(V, &["scale", "statefulset", "web", "--replicas=2"]);
    wait_for(60, "web-2 removed", || {
        (pod_names(s, "app=web") == ["web-0", "web-1"]).then_some(())
    });
    s.ok(V, &["set", "env", "statefulset/web", "VERSION=2"]);
    s.ok(V, &["rollout", "status", "statefulset/web", "--timeout=180s"]);
    let set = json(s, &["get", "sts", "web"]);
    assert_eq!(
        set["status"]["currentRevision"], set["status"]["updateRevision"],
        "{set}"
    );
    assert_eq!(set["status"]["updatedReplicas"], 2, "{set}");
    for name in ["web-0", "web-1"] {
        let p = json(s, &["get", "pod", name]);
        assert_eq!(p["spec"]["containers"][0]["env"][0]["value"], "2", "{p}");
    }
    s.ok(V, &["rollout", "undo", "statefulset/web"]);
    s.ok(V, &["rollout", "status", "statefulset/web", "--timeout=180s"]);
    let p = json(s, &["get", "pod", "web-0"]);
    assert!(p["spec"]["containers"][0]["env"].is_null(), "{p}");
    s.ok(V, &["delete", "statefulset", "web", "--timeout=60s"]);
    wait_for(60, "the set's pods collected", || {
        pod_names(s, "app=web").is_empty().then_some(())
    });
    s.ok(V, &["delete", "service", "web"]);
}

fn ready_at_opt(p: &Value) -> bool {
    p["status"]["conditions"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}
