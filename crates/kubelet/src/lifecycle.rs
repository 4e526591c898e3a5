//! Lifecycle hooks (upstream `pkg/kubelet/lifecycle/handlers.go`): postStart runs right after
//! the container starts and before it is reported running, preStop before the stop signal,
//! within the grace period. Their handlers are the prober's; their failure messages are
//! upstream's, since they become the `FailedPostStartHook` and `FailedPreStopHook` events.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod};
use kube::ResourceExt;

use crate::prober::{self, Action, ExecError, Target};
use crate::runtime::Runtime;

/// `name_namespace(uid)`, as upstream's `format.Pod`.
pub fn pod_ref(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.name_any(),
        pod.namespace().unwrap_or_default(),
        pod.uid().unwrap_or_default()
    )
}

/// Run one hook of container `c`, within `budget`; the failure is upstream's event message.
pub async fn run(
    rt: &dyn Runtime,
    hook: &LifecycleHandler,
    pod: &Pod,
    c: &Container,
    target: &Target,
    budget: Duration,
) -> Result<(), String> {
    let Some(action) = Action::of_hook(hook) else {
        return Ok(());
    };
    let within = format!("for Container {:?} in Pod {:?}", c.name, pod_ref(pod));
    match &action {
        Action::Exec(cmd) => match prober::exec(rt, cmd, target, budget).await {
            Ok(_) => Ok(()),
            Err(e) => {
                let (error, output) = match &e {
                    ExecError::Exited { cmd, code, output } => (
                        format!("command '{cmd}' exited with {code}: {output}"),
                        output.clone(),
                    ),
                    other => (other.message(), String::new()),
                };
                Err(format!(
                    "Exec lifecycle hook ({}) {within} failed - error: {error}, message: {output:?}",
                    go_slice(cmd)
                ))
            }
        },
        Action::Http(h) => match tokio::time::timeout(budget, prober::http_hook(h, target, budget)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!(
                "HTTP lifecycle hook ({}) {within} failed - error: {e}",
                h.path
            )),
            Err(_) => Err(format!(
                "HTTP lifecycle hook ({}) {within} failed - error: no answer within {}s",
                h.path,
                budget.as_secs()
            )),
        },
        // A sleep is cut short by the end of the budget, never a failure.
        Action::Sleep(d) => {
            tokio::time::sleep((*d).min(budget)).await;
            Ok(())
        }
        // tcpSocket is accepted for hooks but does nothing (upstream: deprecated, a no-op).
        Action::Tcp { .. } | Action::Grpc { .. } => Ok(()),
    }
}

/// A command as Go prints a `[]string`.
fn go_slice(cmd: &[String]) -> String {
    format!("[{}]", cmd.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pod_reference_and_command_as_upstream_prints_them() {
        let pod: Pod =
            serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "shop", "uid": "u-1"}}))
                .unwrap();
        assert_eq!(pod_ref(&pod), "web_shop(u-1)");
        assert_eq!(
            go_slice(&["sh".into(), "-c".into(), "exit 1".into()]),
            "[sh -c exit 1]"
        );
    }
}
