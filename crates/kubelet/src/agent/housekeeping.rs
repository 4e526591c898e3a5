//! Housekeeping: what the runtime runs for pods no worker knows is stopped and their volumes
//! removed (upstream `HandlePodCleanups`), and, when the agent stops, every pod terminated.

use super::{Agent, SWEEP, TERMINATE_LIMIT};
use crate::spec;
use crate::Error;

impl Agent {
    /// The agent is stopping: every worker turns to terminating and terminates its pod as a
    /// deletion would, all at once; then whatever else the runtime runs is stopped and what is
    /// left of any pod's volumes is unmounted.
    pub(super) async fn terminate_all(&self) {
        let uids = {
            let mut workers = self.workers.lock().unwrap();
            let uids = workers.uids();
            for uid in &uids {
                workers.terminate(uid);
            }
            uids
        };
        tracing::info!(pods = uids.len(), "agent: stopping the pods");
        let work = async {
            let each = uids.iter().map(|uid| async move {
                if let Err(e) = self.sync(uid).await {
                    tracing::warn!(pod = %uid, error = %e, "agent: could not stop pod at shutdown");
                }
            });
            futures::future::join_all(each).await;
            // Sandboxes of no pod this agent knows (orphans).
            let Ok(list) = self.runtime.list_sandboxes(None).await else {
                tracing::warn!("agent: cannot list the pod sandboxes to stop at shutdown");
                return;
            };
            let mut uids: Vec<String> = list
                .iter()
                .map(|sb| sb.labels.get(spec::POD_UID).cloned().unwrap_or_default())
                .collect();
            uids.sort();
            uids.dedup();
            let orphans = uids.iter().map(|uid| async move {
                if let Err(e) = self.kill_pod(uid, None).await {
                    tracing::warn!(pod = %uid, error = %e, "agent: could not stop pod at shutdown");
                }
            });
            futures::future::join_all(orphans).await;
        };
        if tokio::time::timeout(TERMINATE_LIMIT, work).await.is_err() {
            tracing::warn!("agent: pods still stopping at shutdown; removing their volumes anyway");
        }
        // With their containers gone, the pods' volumes go too (tmpfs unmounted); a restarted
        // agent makes them again.
        for uid in self.volumes.pods_on_disk() {
            if let Err(e) = self.forget_pod(&uid) {
                tracing::warn!(pod = %uid, error = %e, "agent: could not remove pod volumes at shutdown");
            }
        }
    }

    /// A key no worker has: the SWEEP stops what the runtime runs for pods no worker knows
    /// and removes their volumes; a pod uid (the PLEG saw something of a pod already
    /// forgotten) has whatever still runs of it stopped.
    pub(super) async fn sweep(&self, key: &str) -> Result<(), Error> {
        if key != SWEEP {
            if !self.sandboxes_of(key).await?.is_empty() {
                self.kill_pod(key, None).await?;
            }
            return Ok(());
        }
        let live = self.workers.lock().unwrap().uids();
        let all = self.runtime.list_sandboxes(None).await?;
        for sb in all {
            let uid = sb.labels.get(spec::POD_UID).cloned().unwrap_or_default();
            if !live.contains(&uid) {
                self.kill_pod(&uid, None).await?;
            }
        }
        self.probes.retain_pods(&live);
        for uid in self.volumes.pods_on_disk() {
            if !live.contains(&uid) && self.sandboxes_of(&uid).await?.is_empty() {
                self.forget_pod(&uid)?;
            }
        }
        Ok(())
    }

    /// Every `LOCAL_VOLUMES_SWEEP`, keep the local volumes (r8s's provisioner's) in step with
    /// their PersistentVolumes: grown when their claim was expanded, their data removed when
    /// the volume is gone (a claim of a `Delete` class was deleted).
    pub(super) async fn local_volumes_loop(
        self: std::sync::Arc<Self>,
        stop: tokio_util::sync::CancellationToken,
    ) {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(LOCAL_VOLUMES_SWEEP) => {}
            }
            self.volumes.remove_deleted_local_volumes().await;
        }
    }
}

/// How often the data of deleted local volumes is looked for.
const LOCAL_VOLUMES_SWEEP: std::time::Duration = std::time::Duration::from_secs(10);
