//! The kubelet's pod workers, end to end, on clusters that run few pods (so nothing but the
//! pod's own worker wakes the kubelet): time-driven work (activeDeadlineSeconds) happens at its
//! due time.

mod support;

use std::time::Instant;

use serde_json::Value;
use support::cluster::*;

fn phase(p: &Value) -> &str {
    p["status"]["phase"].as_str().unwrap_or("")
}

/// A lone pod (nothing else on the node to wake the kubelet) past its activeDeadlineSeconds is
/// stopped and Failed with DeadlineExceeded as soon as the deadline and its grace period allow.
#[test]
fn a_lone_pod_fails_at_its_active_deadline() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let c = start("lone-node", "10.203.0.0/16", "r8sk");
    let s = &c.s;
    s.ok(
        V,
        &[
            "run",
            "x",
            "--image=busybox",
            "--restart=Never",
            r#"--overrides={"spec":{"activeDeadlineSeconds":3,"terminationGracePeriodSeconds":1}}"#,
            "--",
            "sleep",
            "3600",
        ],
    );
    let running = wait_for(90, "x Running", || {
        let p = pod_json(s, "x")?;
        (phase(&p) == "Running").then_some(p)
    });
    // startTime is before Running was seen, so the deadline counts from at most now.
    let seen = Instant::now();
    let failed = wait_for(60, "x Failed", || {
        let p = pod_json(s, "x")?;
        (phase(&p) == "Failed").then_some(p)
    });
    let after = seen.elapsed();
    eprintln!(
        "x Failed {after:?} after Running was seen (startTime {})",
        running["status"]["startTime"]
    );
    assert_eq!(failed["status"]["reason"], "DeadlineExceeded", "{failed}");
    assert!(
        failed["status"]["containerStatuses"][0]["state"]["terminated"].is_object(),
        "{failed}"
    );
    // 3 s of deadline, 1 s of grace (at least 2 s for the stop), and a little slack.
    assert!(
        after.as_secs() <= 9,
        "Failed only {after:?} after Running:\n{failed}"
    );
    s.ok(V, &["delete", "pod", "x", "--timeout=60s"]);
}
