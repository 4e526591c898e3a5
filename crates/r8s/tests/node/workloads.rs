//! The batch workloads and disruption budgets end to end, with real containers and the real
//! kubectl: Jobs (NonIndexed, Indexed, failing, with a TTL) run to their conditions, and
//! `kubectl drain` is refused by a PodDisruptionBudget, then allowed once the budget allows.

use crate::support;

use serde_json::Value;
use support::cluster::*;

fn json(s: &support::Server, args: &[&str]) -> Value {
    let mut full = args.to_vec();
    full.extend(["-o", "json"]);
    serde_json::from_str(&s.ok(V, &full)).unwrap()
}

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
}
