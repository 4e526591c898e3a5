//! The Job controller (upstream `pkg/controller/job`) and the TTL-after-finished controller's
//! part for Jobs.
//!
//! Per sync of a Job: claim its pods; count the finished ones through the tracking finalizer
//! (`batch.kubernetes.io/job-tracking`: a finished pod's uid goes to
//! `status.uncountedTerminatedPods` first, then its finalizer is removed, then it moves to the
//! counters — so a pod deleted at any point is counted once); decide whether the Job failed
//! (backoffLimit, activeDeadlineSeconds) or succeeded (completions reached, or any success
//! without completions); otherwise keep `min(parallelism, remaining)` pods running — for an
//! Indexed Job one per pending completion index, lowest first — after the failure back-off
//! (10 s doubling to 10 min). Suspended Jobs run no pods. Finished Jobs with
//! `ttlSecondsAfterFinished` are deleted once it has passed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus, UncountedTerminatedPods};
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, DeleteParams, Patch, PropagationPolicy};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use serde_json::json;
#[cfg(test)]
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::claim::owner_key;
use crate::{Error, SyncResult};
use r8s_api::owner::{controller_of, controller_ref};
use r8s_client::events::Events;
use r8s_client::expectations::Expectations;
use r8s_client::informer::{key_of, lookup, Change, Factory, Informer};
use r8s_client::queue::{run_controller, WorkQueue};

pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// How often an index failed before this pod (with `backoffLimitPerIndex`).
pub const INDEX_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-failure-count";
const BACKOFF_BASE: Duration = Duration::from_secs(10);
const BACKOFF_MAX: Duration = Duration::from_secs(600);
const BURST: usize = 500;
/// Keys of pods whose Job is gone but whose tracking finalizer is still on them.
const ORPHAN_PREFIX: &str = "pod:";

pub struct JobController {
    client: Client,
    /// Deletes expired Jobs (as upstream's ttl-after-finished controller, with its identity).
    ttl_client: Client,
    jobs: Arc<Informer<Job>>,
    pods: Arc<Informer<Pod>>,
    job_store: Store<Job>,
    pod_store: Store<Pod>,
    queue: Arc<WorkQueue>,
    expectations: Arc<Expectations>,
    events: Events,
}

fn has_finalizer(p: &Pod) -> bool {
    p.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == TRACKING_FINALIZER)
}

fn phase(p: &Pod) -> &str {
    p.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

/// What a pod failure policy rule decided about a failed pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicyAction {
    /// Fail the Job, with upstream's message.
    FailJob(String),
    /// Fail the pod's index (with backoffLimitPerIndex).
    FailIndex,
    /// Not counted against the backoff limit; replaced.
    Ignore,
    /// Counted as usual.
    Count,
}

/// Upstream's `matchPodFailurePolicy`: the action of the first rule `pod` matches (a container,
/// init containers after the others, that exited non-zero with a code the rule names, or a pod
/// condition the rule names), and `None` if none does.
pub fn match_pod_failure_policy(
    policy: Option<&k8s_openapi::api::batch::v1::PodFailurePolicy>,
    pod: &Pod,
) -> Option<PolicyAction> {
    let policy = policy?;
    let status = pod.status.clone().unwrap_or_default();
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.name_any();
    for (index, rule) in policy.rules.iter().enumerate() {
        let message = if let Some(req) = &rule.on_exit_codes {
            let matched = status
                .container_statuses
                .iter()
                .flatten()
                .chain(status.init_container_statuses.iter().flatten())
                .filter(|c| req.container_name.as_ref().is_none_or(|n| *n == c.name))
                .find_map(|c| {
                    let code = c.state.as_ref()?.terminated.as_ref()?.exit_code;
                    let listed = req.values.contains(&code);
                    let hit = code != 0 && if req.operator == "In" { listed } else { !listed };
                    hit.then(|| (c.name.clone(), code))
                });
            let Some((container, code)) = matched else {
                continue;
            };
            format!(
                "Container {container} for pod {ns}/{name} failed with exit code {code} matching {} rule at index {index}",
                rule.action
            )
        } else if let Some(patterns) = &rule.on_pod_conditions {
            let matched = patterns.iter().find_map(|pat| {
                let want = pat.status.as_str();
                status
                    .conditions
                    .iter()
                    .flatten()
                    .find(|c| c.type_ == pat.type_ && c.status == want)
                    .map(|c| c.type_.clone())
            });
            let Some(condition) = matched else { continue };
            format!(
                "Pod {ns}/{name} has condition {condition} matching {} rule at index {index}",
                rule.action
            )
        } else {
            continue;
        };
        return Some(match rule.action.as_str() {
            "FailJob" => PolicyAction::FailJob(message),
            "FailIndex" => PolicyAction::FailIndex,
            "Ignore" => PolicyAction::Ignore,
            _ => PolicyAction::Count,
        });
    }
    None
}

/// Upstream's `matchSuccessPolicy` for an Indexed Job: the message of the first rule the
/// succeeded indexes satisfy.
pub fn match_success_policy(
    policy: Option<&k8s_openapi::api::batch::v1::SuccessPolicy>,
    completions: i32,
    succeeded: &BTreeSet<i32>,
) -> Option<String> {
    let policy = policy?;
    if succeeded.is_empty() {
        return None;
    }
    for (index, rule) in policy.rules.iter().enumerate() {
        let matched = match &rule.succeeded_indexes {
            Some(text) => {
                let required = parse_indexes(text, completions);
                if required.is_empty() {
                    continue;
                }
                let done = required.intersection(succeeded).count();
                match rule.succeeded_count {
                    Some(n) => done as i32 >= n,
                    None => done == required.len(),
                }
            }
            None => rule.succeeded_count.is_some_and(|n| succeeded.len() as i32 >= n),
        };
        if matched {
            return Some(format!("Matched rules at index {index}"));
        }
    }
    None
}

fn index_of(p: &Pod) -> Option<i32> {
    p.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(COMPLETION_INDEX))
        .and_then(|i| i.parse().ok())
}

fn failure_count(p: &Pod) -> i32 {
    p.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(INDEX_FAILURE_COUNT))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// The back-off before a replacement after `failures` failures: 10 s doubling, at most 10 min.
fn backoff_delay(failures: usize) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    BACKOFF_BASE
        .checked_mul(1u32.checked_shl(failures as u32 - 1).unwrap_or(u32::MAX))
        .unwrap_or(BACKOFF_MAX)
        .min(BACKOFF_MAX)
}

/// What is left of `delay` since `since`.
fn remaining(delay: Duration, since: jiff::Timestamp) -> Option<Duration> {
    let elapsed = Duration::from_secs((jiff::Timestamp::now() - since).get_seconds().max(0) as u64);
    delay.checked_sub(elapsed).filter(|d| !d.is_zero())
}

fn condition_true(job: &Job, type_: &str) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == type_))
        .is_some_and(|c| c.status == "True")
}

/// Whether the Job has finished (Complete or Failed).
pub fn is_finished(job: &Job) -> bool {
    condition_true(job, "Complete") || condition_true(job, "Failed")
}

/// Completion indexes as upstream writes them: `0-3,5,7,8` (runs of three or more as ranges).
pub fn format_indexes(set: &BTreeSet<i32>) -> String {
    let mut parts = Vec::new();
    let mut iter = set.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end = iter.next().unwrap_or(end);
        }
        match end - start {
            0 => parts.push(start.to_string()),
            1 => parts.push(format!("{start},{end}")),
            _ => parts.push(format!("{start}-{end}")),
        }
    }
    parts.join(",")
}

/// The indexes of a `completedIndexes` string (below `completions`).
pub fn parse_indexes(s: &str, completions: i32) -> BTreeSet<i32> {
    let mut out = BTreeSet::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.trim().parse::<i32>(), b.trim().parse::<i32>()) {
            out.extend((a..=b).filter(|i| *i < completions));
        }
    }
    out
}

fn condition(type_: &str, reason: &str, message: &str) -> JobCondition {
    let now = Time(jiff::Timestamp::now());
    JobCondition {
        type_: type_.into(),
        status: "True".into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_probe_time: Some(now.clone()),
        last_transition_time: Some(now),
    }
}

/// Set `c` among `conditions` (a condition already there with the same status is kept as it is).
fn set_condition(conditions: &mut Vec<JobCondition>, c: JobCondition) {
    match conditions.iter_mut().find(|x| x.type_ == c.type_) {
        Some(x) if x.status == c.status => {}
        Some(x) => *x = c,
        None => conditions.push(c),
    }
}

/// When a pod finished: its last container's end, else its readiness change, else its creation.
fn finish_time(p: &Pod) -> Option<jiff::Timestamp> {
    let status = p.status.as_ref()?;
    let ended = status
        .container_statuses
        .iter()
        .flatten()
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
        .map(|t| t.0)
        .max();
    ended
        .or_else(|| {
            status
                .conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == "Ready")
                .and_then(|c| c.last_transition_time.as_ref())
                .map(|t| t.0)
        })
        .or_else(|| p.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

impl JobController {
    pub fn new(factory: &Factory, ttl_client: Client, events: Events) -> Arc<Self> {
        let jobs = factory.get::<Job>();
        let pods = factory.get::<Pod>();
        let this = Arc::new(Self {
            client: factory.client(),
            ttl_client,
            job_store: jobs.store(),
            pod_store: pods.store(),
            jobs,
            pods,
            queue: WorkQueue::new("job"),
            expectations: Arc::new(Expectations::default()),
            events,
        });
        let q = this.queue.clone();
        this.jobs.add_handler(move |c| match c {
            Change::Added(o) | Change::Deleted(o) => q.add(key_of(&**o)),
            Change::Updated(_, o) => q.add(key_of(&**o)),
        });
        let weak = Arc::downgrade(&this);
        this.pods.add_handler(move |c| {
            if let Some(this) = weak.upgrade() {
                this.on_pod(c);
            }
        });
        this
    }

    fn on_pod(&self, change: Change<'_, Pod>) {
        let (pod, deleted) = match change {
            Change::Added(p) => (p, false),
            Change::Updated(_, p) => (p, false),
            Change::Deleted(p) => (p, true),
        };
        match owner_key(&self.job_store, &pod.metadata) {
            Some(key) => {
                if deleted || pod.metadata.deletion_timestamp.is_some() {
                    self.expectations.observe_del(&key, &pod.name_any());
                }
                if !deleted {
                    self.expectations.observe_add(&key, &pod.name_any());
                }
                self.queue.add(key);
            }
            // A Job's pod outliving its Job, or released by it (an orphan), keeps no finalizer
            // of ours (upstream's enqueueOrphanPod); one another kind controls is not ours.
            None if !deleted
                && has_finalizer(pod)
                && controller_of(&pod.metadata).is_none_or(|r| r.kind == "Job") =>
            {
                self.queue.add(format!("{ORPHAN_PREFIX}{}", key_of(&**pod)));
            }
            None => {}
        }
    }

    pub async fn run(self: Arc<Self>, workers: usize, stop: CancellationToken) {
        let this = self.clone();
        run_controller(
            self.queue.clone(),
            vec![self.jobs.clone().synced(), self.pods.clone().synced()],
            workers,
            stop,
            move |key| {
                let this = this.clone();
                async move { this.sync(&key).await }
            },
        )
        .await;
    }

    pub async fn sync(&self, key: &str) -> SyncResult {
        if let Some(pod_key) = key.strip_prefix(ORPHAN_PREFIX) {
            if let Some(pod) = lookup(&self.pod_store, pod_key) {
                if owner_key(&self.job_store, &pod.metadata).is_none()
                    && has_finalizer(&pod)
                    && controller_of(&pod.metadata).is_none_or(|r| r.kind == "Job")
                {
                    self.remove_finalizers(&[pod]).await?;
                }
            }
            return Ok(None);
        }
        let Some(job) = lookup(&self.job_store, key) else {
            self.expectations.forget(key);
            return Ok(None);
        };
        let ns = job.namespace().unwrap_or_default();
        let spec = job.spec.clone().unwrap_or_default();
        let matcher = crate::selector(spec.selector.as_ref())?;
        let candidates: Vec<Arc<Pod>> = self
            .pod_store
            .state()
            .into_iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(ns.as_str()))
            .filter(|p| claimable(p, &matcher))
            .collect();
        let jobs_api: Api<Job> = Api::namespaced(self.client.clone(), &ns);
        let pods_api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let pods = crate::claim::claim(&*job, &jobs_api, &pods_api, &matcher, candidates).await?;

        if is_finished(&job) {
            // Leave no finalizer behind, then the TTL.
            let tracked: Vec<Arc<Pod>> = pods.iter().filter(|p| has_finalizer(p)).cloned().collect();
            self.remove_finalizers(&tracked).await?;
            return self.ttl(&job).await;
        }
        if !self.expectations.satisfied(key) {
            return Ok(None);
        }
        let mut status = job.status.clone().unwrap_or_default();
        let mut conditions = status.conditions.clone().unwrap_or_default();
        let indexed = spec.completion_mode.as_deref() == Some("Indexed");
        let completions = spec.completions;
        let now = jiff::Timestamp::now();

        // 1. Count the finished pods through the tracking finalizer.
        let mut uncounted = status.uncounted_terminated_pods.clone().unwrap_or_default();
        let mut unc_ok: BTreeSet<String> = uncounted
            .succeeded
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect();
        let mut unc_failed: BTreeSet<String> =
            uncounted.failed.clone().unwrap_or_default().into_iter().collect();
        let mut completed = parse_indexes(
            status.completed_indexes.as_deref().unwrap_or(""),
            completions.unwrap_or(0),
        );
        let policy = spec.pod_failure_policy.as_ref();
        // With a failure policy (or podReplacementPolicy Failed) a pod has failed only once it
        // is Failed, not while it terminates.
        let wait_for_failed = policy.is_some() || spec.pod_replacement_policy.as_deref() == Some("Failed");
        let mut newly = Vec::new();
        for p in &pods {
            let uid = p.metadata.uid.clone().unwrap_or_default();
            let done = match phase(p) {
                "Succeeded" => Some(true),
                "Failed" => Some(false),
                // A pod deleted before it finished counts as failed.
                _ if p.metadata.deletion_timestamp.is_some() && !wait_for_failed => Some(false),
                _ => None,
            };
            let Some(ok) = done else { continue };
            if !has_finalizer(p) || unc_ok.contains(&uid) || unc_failed.contains(&uid) {
                continue;
            }
            if ok && indexed {
                if let Some(i) = index_of(p).filter(|i| completions.is_some_and(|c| *i < c)) {
                    completed.insert(i);
                }
            }
            if ok {
                unc_ok.insert(uid);
            } else if match_pod_failure_policy(policy, p) != Some(PolicyAction::Ignore) {
                unc_failed.insert(uid);
            }
            newly.push(p.clone());
        }
        if !newly.is_empty() {
            uncounted.succeeded = Some(unc_ok.iter().cloned().collect());
            uncounted.failed = Some(unc_failed.iter().cloned().collect());
            status.uncounted_terminated_pods = Some(uncounted);
            if indexed {
                status.completed_indexes = Some(format_indexes(&completed));
            }
            let written = self.write_status(&job, status.clone()).await?;
            self.remove_finalizers(&newly).await?;
            let mut s = written.status.clone().unwrap_or_default();
            let counted = |set: &BTreeSet<String>| set.len() as i32;
            s.succeeded = Some(if indexed {
                completed.len() as i32
            } else {
                s.succeeded.unwrap_or(0) + counted(&unc_ok)
            });
            s.failed = Some(s.failed.unwrap_or(0) + counted(&unc_failed));
            s.uncounted_terminated_pods = Some(UncountedTerminatedPods::default());
            self.write_status(&written, s).await?;
            // The counters changed: look again with them.
            return Ok(Some(Duration::ZERO));
        }
        // Uids recorded but not moved yet (a crash between the steps): move them now.
        if !unc_ok.is_empty() || !unc_failed.is_empty() {
            let still: Vec<Arc<Pod>> = pods
                .iter()
                .filter(|p| has_finalizer(p))
                .filter(|p| {
                    let uid = p.metadata.uid.clone().unwrap_or_default();
                    unc_ok.contains(&uid) || unc_failed.contains(&uid)
                })
                .cloned()
                .collect();
            self.remove_finalizers(&still).await?;
            if !indexed {
                status.succeeded = Some(status.succeeded.unwrap_or(0) + unc_ok.len() as i32);
            }
            status.failed = Some(status.failed.unwrap_or(0) + unc_failed.len() as i32);
            status.uncounted_terminated_pods = Some(UncountedTerminatedPods::default());
            self.write_status(&job, status).await?;
            return Ok(Some(Duration::ZERO));
        }
        let succeeded = if indexed {
            completed.len() as i32
        } else {
            status.succeeded.unwrap_or(0)
        };
        let failed = status.failed.unwrap_or(0);
        let active: Vec<Arc<Pod>> = pods
            .iter()
            .filter(|p| {
                p.metadata.deletion_timestamp.is_none() && !matches!(phase(p), "Succeeded" | "Failed")
            })
            .cloned()
            .collect();
        let terminating = pods
            .iter()
            .filter(|p| {
                p.metadata.deletion_timestamp.is_some() && !matches!(phase(p), "Succeeded" | "Failed")
            })
            .count() as i32;

        // 2. Suspension and the start time.
        let suspended = spec.suspend == Some(true);
        let mut requeue = None;
        if suspended {
            if !condition_true(&job, "Suspended") {
                set_condition(
                    &mut conditions,
                    condition("Suspended", "JobSuspended", "Job suspended"),
                );
                self.events.normal(&*job, "Suspended", "Job suspended".into());
            }
        } else {
            if condition_true(&job, "Suspended") {
                let mut c = condition("Suspended", "JobResumed", "Job resumed");
                c.status = "False".into();
                set_condition(&mut conditions, c);
                status.start_time = Some(Time(now));
                self.events.normal(&*job, "Resumed", "Job resumed".into());
            }
            status.start_time.get_or_insert(Time(now));
        }

        // Indexes that failed more often than backoffLimitPerIndex allows.
        let per_index = spec.backoff_limit_per_index.filter(|_| indexed);
        let mut index_failures: BTreeMap<i32, (i32, Option<jiff::Timestamp>)> = BTreeMap::new();
        let mut failed_indexes = parse_indexes(
            status.failed_indexes.as_deref().unwrap_or(""),
            completions.unwrap_or(0),
        );
        if let Some(limit) = per_index {
            for p in &pods {
                let failed_pod = phase(p) == "Failed"
                    || (!wait_for_failed
                        && p.metadata.deletion_timestamp.is_some()
                        && phase(p) != "Succeeded");
                let Some(i) = index_of(p).filter(|_| failed_pod) else {
                    continue;
                };
                let count = match match_pod_failure_policy(policy, p) {
                    Some(PolicyAction::Ignore) => continue,
                    Some(PolicyAction::FailIndex) => limit + 1,
                    _ => failure_count(p) + 1,
                };
                let entry = index_failures.entry(i).or_insert((0, None));
                if count > entry.0 {
                    *entry = (count, finish_time(p));
                }
            }
            for (i, (count, _)) in &index_failures {
                if *count > limit && !completed.contains(i) {
                    failed_indexes.insert(*i);
                }
            }
        }

        // 3. Failure and success.
        let restarts: i32 = active
            .iter()
            .flat_map(|p| {
                p.status
                    .iter()
                    .flat_map(|s| s.container_statuses.iter().flatten())
            })
            .map(|c| c.restart_count)
            .sum();
        let backoff_limit = spec.backoff_limit.unwrap_or(6);
        let on_failure = spec
            .template
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.as_deref())
            == Some("OnFailure");
        let mut failure = conditions
            .iter()
            .find(|c| c.type_ == "FailureTarget" && c.status == "True")
            .map(|c| {
                (
                    c.reason.clone().unwrap_or_default(),
                    c.message.clone().unwrap_or_default(),
                )
            });
        let all_finished = completed.len() + failed_indexes.len() >= completions.unwrap_or(0).max(0) as usize;
        if failure.is_none() && per_index.is_some() {
            if spec
                .max_failed_indexes
                .is_some_and(|m| failed_indexes.len() as i32 > m)
            {
                failure = Some((
                    "MaxFailedIndexesExceeded".into(),
                    "Job has exceeded the specified maximal number of failed indexes".into(),
                ));
            } else if !failed_indexes.is_empty() && all_finished {
                failure = Some(("FailedIndexes".into(), "Job has failed indexes".into()));
            }
        }
        if failure.is_none() && policy.is_some() {
            failure =
                pods.iter().filter(|p| phase(p) == "Failed").find_map(|p| {
                    match match_pod_failure_policy(policy, p) {
                        Some(PolicyAction::FailJob(message)) => {
                            Some(("PodFailurePolicy".to_owned(), message))
                        }
                        _ => None,
                    }
                });
        }
        if failure.is_none() {
            if failed > backoff_limit || (on_failure && restarts > 0 && restarts >= backoff_limit.max(1)) {
                failure = Some((
                    "BackoffLimitExceeded".into(),
                    "Job has reached the specified backoff limit".into(),
                ));
            } else if let (Some(deadline), Some(start), false) =
                (spec.active_deadline_seconds, &status.start_time, suspended)
            {
                let ran = (now - start.0).get_seconds();
                if ran >= deadline {
                    failure = Some((
                        "DeadlineExceeded".into(),
                        "Job was active longer than specified deadline".into(),
                    ));
                } else {
                    requeue = Some(Duration::from_secs((deadline - ran) as u64));
                }
            }
        }
        // Success: once met it stays; by the success policy's rules (Indexed), or when the
        // completions are reached.
        let success: Option<(String, String)> = conditions
            .iter()
            .find(|c| c.type_ == "SuccessCriteriaMet" && c.status == "True")
            .map(|c| {
                (
                    c.reason.clone().unwrap_or_default(),
                    c.message.clone().unwrap_or_default(),
                )
            })
            .or_else(|| {
                indexed
                    .then(|| {
                        match_success_policy(
                            spec.success_policy.as_ref(),
                            completions.unwrap_or(0),
                            &completed,
                        )
                    })
                    .flatten()
                    .map(|m| ("SuccessPolicy".to_owned(), m))
            })
            .or_else(|| {
                let reached = match completions {
                    None => succeeded > 0,
                    Some(c) => succeeded >= c,
                };
                reached.then(|| {
                    (
                        "CompletionsReached".to_owned(),
                        "Reached expected number of succeeded pods".to_owned(),
                    )
                })
            });
        let mut pods_to_delete: Vec<Arc<Pod>> = Vec::new();
        let mut to_create: Vec<Option<i32>> = Vec::new();
        let mut index_wait: Option<Duration> = None;
        if let Some((reason, message)) = &failure {
            set_condition(&mut conditions, condition("FailureTarget", reason, message));
            pods_to_delete = active.clone();
            if active.is_empty() && terminating == 0 {
                set_condition(&mut conditions, condition("Failed", reason, message));
                self.events.warning(&*job, reason, message.clone());
            }
        } else if let Some((reason, message)) = &success {
            set_condition(&mut conditions, condition("SuccessCriteriaMet", reason, message));
            pods_to_delete = active.clone();
            if active.is_empty() && terminating == 0 {
                set_condition(&mut conditions, condition("Complete", reason, message));
                status.completion_time = Some(Time(now));
                self.events.normal(&*job, "Completed", "Job completed".into());
            }
        } else if suspended {
            pods_to_delete = active.clone();
        } else {
            // 4. Keep the wanted number of pods running.
            let parallelism = spec.parallelism.unwrap_or(1).max(0);
            if indexed {
                let c = completions.unwrap_or(0);
                let mut running: BTreeMap<i32, Vec<Arc<Pod>>> = BTreeMap::new();
                for p in &active {
                    match index_of(p)
                        .filter(|i| *i < c && !completed.contains(i) && !failed_indexes.contains(i))
                    {
                        Some(i) => running.entry(i).or_default().push(p.clone()),
                        None => pods_to_delete.push(p.clone()),
                    }
                }
                // One pod per index: extra ones go.
                for list in running.values() {
                    pods_to_delete.extend(list.iter().skip(1).cloned());
                }
                // podReplacementPolicy Failed: an index whose pod still terminates is busy.
                if wait_for_failed {
                    for p in pods.iter().filter(|p| {
                        p.metadata.deletion_timestamp.is_some() && !matches!(phase(p), "Succeeded" | "Failed")
                    }) {
                        if let Some(i) = index_of(p) {
                            running.entry(i).or_default();
                        }
                    }
                }
                let running_count = running.values().filter(|l| !l.is_empty()).count() as i32;
                if running_count > parallelism {
                    let occupied = running.iter().rev().filter(|(_, l)| !l.is_empty());
                    for (_, list) in occupied.take((running_count - parallelism) as usize) {
                        pods_to_delete.push(list[0].clone());
                    }
                } else {
                    // An index that failed waits out its own back-off.
                    let ready = |i: &i32| match index_failures.get(i) {
                        Some((count, Some(at))) => match remaining(backoff_delay(*count as usize), *at) {
                            Some(wait) => {
                                index_wait = Some(index_wait.map_or(wait, |w: Duration| w.min(wait)));
                                false
                            }
                            None => true,
                        },
                        _ => true,
                    };
                    let pending = (0..c)
                        .filter(|i| {
                            !completed.contains(i) && !failed_indexes.contains(i) && !running.contains_key(i)
                        })
                        .filter(ready);
                    to_create = pending
                        .take((parallelism - running_count) as usize)
                        .map(Some)
                        .collect();
                }
            } else {
                let want = match completions {
                    None => parallelism,
                    Some(c) => parallelism.min(c - succeeded).max(0),
                };
                // podReplacementPolicy Failed: a replacement only once the pod it replaces is
                // Failed, so terminating pods still hold their places.
                let held = if wait_for_failed { terminating } else { 0 };
                let have = active.len() as i32;
                if have > want {
                    pods_to_delete = crate::replicaset::pods_to_delete(&active, (have - want) as usize);
                } else {
                    to_create = vec![None; (want - have - held).max(0) as usize];
                }
            }
            if let Some(wait) = index_wait {
                requeue = Some(requeue.map_or(wait, |r: Duration| r.min(wait)));
            }
            if !to_create.is_empty() && per_index.is_none() {
                if let Some(wait) = self.backoff(&pods) {
                    to_create.clear();
                    requeue = Some(requeue.map_or(wait, |r: Duration| r.min(wait)));
                }
            }
        }
        let wanted: Vec<(Option<i32>, Option<i32>)> = to_create
            .into_iter()
            .map(|i| {
                let failures = per_index.map(|_| i.and_then(|i| index_failures.get(&i)).map_or(0, |f| f.0));
                (i, failures)
            })
            .collect();
        let create_err = self.manage(key, &job, &pods_api, wanted).await.err();
        let delete_err = self
            .delete_pods(key, &job, &pods_api, &pods_to_delete)
            .await
            .err();

        let ready = active
            .iter()
            .filter(|p| crate::replicaset::pod_ready(p).0)
            .count() as i32;
        status.active = Some(active.len() as i32);
        status.ready = Some(ready);
        status.terminating = Some(terminating);
        status.succeeded = Some(succeeded);
        status.failed = Some(failed);
        status.uncounted_terminated_pods = Some(UncountedTerminatedPods::default());
        status.conditions = (!conditions.is_empty()).then_some(conditions);
        if indexed {
            let s = format_indexes(&completed);
            status.completed_indexes = (!s.is_empty()).then_some(s);
            if per_index.is_some() {
                status.failed_indexes = Some(format_indexes(&failed_indexes));
            }
        }
        if job.status.as_ref() != Some(&status) {
            let written = self.write_status(&job, status).await?;
            if is_finished(&written) {
                return self.ttl(&written).await;
            }
        }
        if let Some(e) = create_err.or(delete_err) {
            return Err(e);
        }
        Ok(requeue)
    }

    /// Time still to wait before a replacement pod after the failures since the last success (10 s doubling,
    /// at most 10 min, counted from the last failure's end).
    fn backoff(&self, pods: &[Arc<Pod>]) -> Option<Duration> {
        let last_success = pods
            .iter()
            .filter(|p| phase(p) == "Succeeded")
            .filter_map(|p| finish_time(p))
            .max();
        let failures: Vec<jiff::Timestamp> = pods
            .iter()
            .filter(|p| phase(p) == "Failed")
            .filter_map(|p| finish_time(p))
            .filter(|t| last_success.is_none_or(|s| *t > s))
            .collect();
        let last = failures.iter().max()?;
        remaining(backoff_delay(failures.len()), *last)
    }

    /// Create pods for the given completion indexes (`None`: a NonIndexed pod; with each, the
    /// failures of that index so far when backoffLimitPerIndex counts them) in slow-start
    /// batches.
    async fn manage(
        &self,
        key: &str,
        job: &Job,
        api: &Api<Pod>,
        wanted: Vec<(Option<i32>, Option<i32>)>,
    ) -> Result<(), Error> {
        if wanted.is_empty() {
            return Ok(());
        }
        let pods = wanted
            .into_iter()
            .take(BURST)
            .map(|(i, failures)| {
                let mut pod = pod_for(job, i);
                if let Some(n) = failures {
                    pod.metadata
                        .annotations
                        .get_or_insert_with(Default::default)
                        .insert(INDEX_FAILURE_COUNT.into(), n.to_string());
                }
                pod
            })
            .collect();
        self.expectations.begin(key);
        let (created, first_err) = crate::pod_control::create(api, &self.events, job, pods).await;
        self.expectations.record_adds(key, created);
        self.expectations.end(key);
        first_err.map_or(Ok(()), Err)
    }

    async fn delete_pods(
        &self,
        key: &str,
        job: &Job,
        api: &Api<Pod>,
        pods: &[Arc<Pod>],
    ) -> Result<(), Error> {
        if pods.iter().all(|p| p.metadata.deletion_timestamp.is_some()) {
            return Ok(());
        }
        self.expectations.begin(key);
        let (deleted, first_err) = crate::pod_control::delete(api, &self.events, job, pods).await;
        self.expectations.record_dels(key, deleted);
        self.expectations.end(key);
        first_err.map_or(Ok(()), Err)
    }

    async fn remove_finalizers(&self, pods: &[Arc<Pod>]) -> Result<(), Error> {
        let results = join_all(pods.iter().map(|p| {
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &p.namespace().unwrap_or_default());
            let rest: Vec<&String> = p
                .finalizers()
                .iter()
                .filter(|f| *f != TRACKING_FINALIZER)
                .collect();
            // The resourceVersion makes this a compare-and-swap on the finalizer list.
            let patch = json!({"metadata": {"finalizers": rest, "resourceVersion": p.resource_version()}});
            let name = p.name_any();
            async move {
                api.patch(&name, &crate::patch_params(), &Patch::Merge(&patch))
                    .await
            }
        }))
        .await;
        for r in results {
            match r {
                Ok(_) => {}
                Err(e) if r8s_client::is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    async fn write_status(&self, job: &Job, status: JobStatus) -> Result<Job, Error> {
        let api: Api<Job> = Api::namespaced(self.client.clone(), &job.namespace().unwrap_or_default());
        let mut updated = job.clone();
        updated.status = Some(status.clone());
        match api
            .replace_status(&job.name_any(), &crate::post_params(), &updated)
            .await
        {
            Ok(j) => Ok(j),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                // The cache is behind: write onto the current object once.
                let mut fresh = api.get(&job.name_any()).await?;
                if fresh.metadata.uid != job.metadata.uid {
                    return Err(Error::Other("the Job was replaced".into()));
                }
                fresh.status = Some(status);
                Ok(api
                    .replace_status(&job.name_any(), &crate::post_params(), &fresh)
                    .await?)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// A finished Job with `ttlSecondsAfterFinished` is deleted (with its pods) once that
    /// long has passed since it finished.
    async fn ttl(&self, job: &Job) -> SyncResult {
        let Some(ttl) = job.spec.as_ref().and_then(|s| s.ttl_seconds_after_finished) else {
            return Ok(None);
        };
        if job.metadata.deletion_timestamp.is_some() {
            return Ok(None);
        }
        let finished = job
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| {
                cs.iter()
                    .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
            })
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0)
            .unwrap_or_else(jiff::Timestamp::now);
        let since = (jiff::Timestamp::now() - finished).get_seconds();
        if since < ttl as i64 {
            return Ok(Some(Duration::from_secs((ttl as i64 - since) as u64)));
        }
        let api: Api<Job> = Api::namespaced(self.ttl_client.clone(), &job.namespace().unwrap_or_default());
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Foreground),
            preconditions: Some(kube::api::Preconditions {
                uid: job.metadata.uid.clone(),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(&job.name_any(), &dp).await {
            Ok(_) => Ok(None),
            Err(e) if r8s_client::is_not_found(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

/// A claim candidate: a pod a controller reference names, or an orphan the selector matches.
fn claimable(p: &Pod, matcher: &r8s_api::selector::Selector) -> bool {
    controller_of(&p.metadata).is_some() || matcher.matches_labels(p.metadata.labels.as_ref())
}

/// The pod a Job runs (for `index`, when Indexed), as upstream's controller makes it.
pub fn pod_for(job: &Job, index: Option<i32>) -> Pod {
    let name = job.name_any();
    let template = job.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
    let meta = template.metadata.unwrap_or_default();
    let mut spec = template.spec.unwrap_or_default();
    let mut labels = meta.labels.unwrap_or_default();
    let mut annotations = meta.annotations.unwrap_or_default();
    let mut finalizers = meta.finalizers.unwrap_or_default();
    if !finalizers.iter().any(|f| f == TRACKING_FINALIZER) {
        finalizers.push(TRACKING_FINALIZER.into());
    }
    let mut generate_name = format!("{name}-");
    if let Some(i) = index {
        annotations.insert(COMPLETION_INDEX.into(), i.to_string());
        labels.insert(COMPLETION_INDEX.into(), i.to_string());
        let suffix = format!("-{i}-");
        let keep = 58usize.saturating_sub(suffix.len()).min(name.len());
        generate_name = format!("{}{suffix}", &name[..keep]);
        spec.hostname = Some(format!("{name}-{i}"));
        let env = EnvVar {
            name: "JOB_COMPLETION_INDEX".into(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    api_version: None,
                    field_path: format!("metadata.labels['{COMPLETION_INDEX}']"),
                }),
                ..Default::default()
            }),
        };
        for c in spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten())
        {
            let list = c.env.get_or_insert_with(Vec::new);
            if !list.iter().any(|e| e.name == env.name) {
                list.push(env.clone());
            }
        }
    }
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(generate_name),
            namespace: job.namespace(),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            finalizers: Some(finalizers),
            owner_references: Some(vec![controller_ref(job)]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_failure_policy_rules_match_as_upstream() {
        let policy: k8s_openapi::api::batch::v1::PodFailurePolicy = serde_json::from_value(json!({"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
            {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [1]}}]}))
        .unwrap();
        let pod = |conditions: Value, code: i32| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "ns"}, "status": {"phase": "Failed",
                "conditions": conditions,
                "containerStatuses": [{"name": "main", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                    "state": {"terminated": {"exitCode": code}}}]}}))
            .unwrap()
        };
        assert_eq!(
            match_pod_failure_policy(
                Some(&policy),
                &pod(json!([{"type": "DisruptionTarget", "status": "True"}]), 42)
            ),
            Some(PolicyAction::Ignore)
        );
        assert_eq!(
            match_pod_failure_policy(Some(&policy), &pod(json!([]), 42)),
            Some(PolicyAction::FailJob(
                "Container main for pod ns/p failed with exit code 42 matching FailJob rule at index 1"
                    .into()
            ))
        );
        assert_eq!(
            match_pod_failure_policy(Some(&policy), &pod(json!([]), 3)),
            Some(PolicyAction::Count)
        );
        assert_eq!(match_pod_failure_policy(Some(&policy), &pod(json!([]), 1)), None);
        assert_eq!(match_pod_failure_policy(None, &pod(json!([]), 42)), None);
    }

    #[test]
    fn success_policy_rules_match_as_upstream() {
        let policy: k8s_openapi::api::batch::v1::SuccessPolicy = serde_json::from_value(json!({"rules": [
            {"succeededIndexes": "0-2", "succeededCount": 2}, {"succeededIndexes": "4"}, {"succeededCount": 3}]}))
        .unwrap();
        let set = |v: &[i32]| v.iter().copied().collect::<BTreeSet<i32>>();
        assert_eq!(match_success_policy(Some(&policy), 5, &set(&[0])), None);
        assert_eq!(
            match_success_policy(Some(&policy), 5, &set(&[0, 2])),
            Some("Matched rules at index 0".into())
        );
        assert_eq!(
            match_success_policy(Some(&policy), 5, &set(&[4])),
            Some("Matched rules at index 1".into())
        );
        assert_eq!(
            match_success_policy(Some(&policy), 5, &set(&[0, 3, 4])),
            Some("Matched rules at index 1".into())
        );
        assert_eq!(
            match_success_policy(Some(&policy), 8, &set(&[3, 5, 6])),
            Some("Matched rules at index 2".into())
        );
        assert_eq!(match_success_policy(None, 5, &set(&[0, 1, 2])), None);
    }

    #[test]
    fn completed_indexes_are_written_as_upstream_does() {
        let set: BTreeSet<i32> = [0, 1, 2, 3, 5, 7, 8].into_iter().collect();
        assert_eq!(format_indexes(&set), "0-3,5,7,8");
        assert_eq!(parse_indexes("0-3,5,7,8", 10), set);
        assert_eq!(
            parse_indexes("0-3,5,7,8", 6),
            [0, 1, 2, 3, 5].into_iter().collect()
        );
        assert_eq!(format_indexes(&BTreeSet::new()), "");
    }

    #[test]
    fn indexed_pods_carry_their_index() {
        let job: Job = serde_json::from_value(json!({
            "metadata": {"name": "work", "namespace": "default", "uid": "u"},
            "spec": {"template": {"metadata": {"labels": {"a": "b"}},
                                  "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}
        }))
        .unwrap();
        let pod = pod_for(&job, Some(3));
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("work-3-"));
        assert_eq!(pod.metadata.labels.as_ref().unwrap()[COMPLETION_INDEX], "3");
        assert_eq!(pod.metadata.annotations.as_ref().unwrap()[COMPLETION_INDEX], "3");
        assert_eq!(
            pod.metadata.finalizers.as_deref(),
            Some(&[TRACKING_FINALIZER.to_owned()][..])
        );
        let spec = pod.spec.unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("work-3"));
        assert_eq!(
            spec.containers[0].env.as_ref().unwrap()[0].name,
            "JOB_COMPLETION_INDEX"
        );
        let plain = pod_for(&job, None);
        assert_eq!(plain.metadata.generate_name.as_deref(), Some("work-"));
        assert!(plain.metadata.annotations.is_none());
    }
}
