//! The CronJob controller (upstream `pkg/controller/cronjob`, v2): creates a Job at each
//! scheduled time — named `<cronjob>-<minutes since the epoch>`, so a time is never run twice —
//! honouring suspend, startingDeadlineSeconds and concurrencyPolicy, keeps `status.active`,
//! `lastScheduleTime` and `lastSuccessfulTime`, deletes finished Jobs past the history limits,
//! and sleeps until the next scheduled time.

use std::sync::Arc;
use std::time::Duration;

use jiff::tz::TimeZone;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, DeleteParams, PropagationPolicy};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::{Error, SyncResult};
use r8s_api::cron::Schedule;
use r8s_api::owner::{controller_of, controller_ref};
use r8s_client::events::Events;
use r8s_client::informer::{key_of, lookup, Change, Factory, Informer};
use r8s_client::queue::{run_controller, WorkQueue};

pub const SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";
/// More missed start times than this are not counted one by one (upstream's limit).
const MAX_MISSED: usize = 100;

pub struct CronJobController {
    client: Client,
    cronjobs: Arc<Informer<CronJob>>,
    jobs: Arc<Informer<Job>>,
    cron_store: Store<CronJob>,
    job_store: Store<Job>,
    queue: Arc<WorkQueue>,
    events: Events,
}

fn finished(job: &Job) -> Option<&str> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        .map(|c| c.type_.as_str())
}

/// The most recent scheduled time in (`earliest`, `now`], and how many were missed; `None`
/// when nothing is due.
pub fn most_recent_due(
    schedule: &Schedule,
    tz: &TimeZone,
    earliest: Timestamp,
    now: Timestamp,
) -> (Option<Timestamp>, usize) {
    let mut t = earliest;
    let mut last = None;
    let mut missed = 0;
    while let Some(next) = schedule.next(t, tz) {
        if next > now {
            break;
        }
        last = Some(next);
        missed += 1;
        t = next;
        if missed > MAX_MISSED {
            // Jump to the last few minutes rather than walking years of minutes.
            let skip = now
                .checked_sub(jiff::SignedDuration::from_secs(3600))
                .unwrap_or(now);
            if skip > t {
                t = skip;
            }
        }
    }
    (last, missed)
}

impl CronJobController {
    pub fn new(factory: &Factory, events: Events) -> Arc<Self> {
        let cronjobs = factory.get::<CronJob>();
        let jobs = factory.get::<Job>();
        let this = Arc::new(Self {
            client: factory.client(),
            cron_store: cronjobs.store(),
            job_store: jobs.store(),
            cronjobs,
            jobs,
            queue: WorkQueue::new("cronjob"),
            events,
        });
        let q = this.queue.clone();
        this.cronjobs.add_handler(move |c| match c {
            Change::Added(o) | Change::Deleted(o) => q.add(key_of(&**o)),
            Change::Updated(_, o) => q.add(key_of(&**o)),
        });
        let q = this.queue.clone();
        this.jobs.add_handler(move |c| {
            let job = match c {
                Change::Added(j) | Change::Deleted(j) => j,
                Change::Updated(_, j) => j,
            };
            if let Some(r) = controller_of(&job.metadata).filter(|r| r.kind == "CronJob") {
                q.add(format!(
                    "{}/{}",
                    job.metadata.namespace.as_deref().unwrap_or(""),
                    r.name
                ));
            }
        });
        this
    }

    pub async fn run(self: Arc<Self>, workers: usize, stop: CancellationToken) {
        let this = self.clone();
        run_controller(
            self.queue.clone(),
            vec![self.cronjobs.clone().synced(), self.jobs.clone().synced()],
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
        let Some(cj) = lookup(&self.cron_store, key) else {
            return Ok(None);
        };
        let ns = cj.namespace().unwrap_or_default();
        let uid = cj.metadata.uid.clone().unwrap_or_default();
        let spec = cj.spec.clone().unwrap_or_default();
        let jobs: Vec<Arc<Job>> = self
            .job_store
            .state()
            .into_iter()
            .filter(|j| j.metadata.namespace.as_deref() == Some(ns.as_str()))
            .filter(|j| controller_of(&j.metadata).is_some_and(|r| r.uid == uid))
            .collect();
        let old = cj.status.clone().unwrap_or_default();
        let mut status = old.clone();
        // Active: our Jobs not finished yet.
        let mut active: Vec<ObjectReference> = Vec::new();
        for j in &jobs {
            match finished(j) {
                None => active.push(reference(j)),
                Some(kind) => {
                    let was_active = old.active.iter().flatten().any(|r| r.uid == j.metadata.uid);
                    if was_active {
                        self.events.normal(
                            &*cj,
                            "SawCompletedJob",
                            format!("Saw completed job: {}, condition: {kind}", j.name_any()),
                        );
                    }
                    if kind == "Complete" {
                        let done = j.status.as_ref().and_then(|s| s.completion_time.clone());
                        if done.as_ref().map(|t| t.0) > status.last_successful_time.as_ref().map(|t| t.0) {
                            status.last_successful_time = done;
                        }
                    }
                }
            }
        }
        active.sort_by(|a, b| a.name.cmp(&b.name));
        status.active = (!active.is_empty()).then_some(active);
        let api: Api<Job> = Api::namespaced(self.client.clone(), &ns);
        self.clean_history(&cj, &api, &jobs, &spec).await;

        let mut requeue = None;
        if cj.metadata.deletion_timestamp.is_none() && spec.suspend != Some(true) {
            let tz = match spec.time_zone.as_deref() {
                Some(name) => match TimeZone::get(name) {
                    Ok(tz) => Some(tz),
                    Err(_) => {
                        self.events.warning(
                            &*cj,
                            "UnknownTimeZone",
                            format!("invalid timeZone: {name:?}: unknown time zone {name}"),
                        );
                        None
                    }
                },
                None => Some(TimeZone::try_system().unwrap_or(TimeZone::UTC)),
            };
            match (Schedule::parse(&spec.schedule), tz) {
                (Err(e), _) => {
                    self.events.warning(
                        &*cj,
                        "UnparseableSchedule",
                        format!("unparseable schedule: {:?} : {e}", spec.schedule),
                    );
                }
                (Ok(_), None) => {}
                (Ok(schedule), Some(tz)) => {
                    let now = Timestamp::now();
                    let mut earliest = old
                        .last_schedule_time
                        .as_ref()
                        .or(cj.metadata.creation_timestamp.as_ref())
                        .map(|t| t.0)
                        .unwrap_or(now);
                    if let Some(deadline) = spec.starting_deadline_seconds {
                        let floor = now - jiff::SignedDuration::from_secs(deadline);
                        if floor > earliest {
                            earliest = floor;
                        }
                    }
                    let (due, missed) = most_recent_due(&schedule, &tz, earliest, now);
                    if missed > MAX_MISSED {
                        self.events.warning(&*cj, "TooManyMissedTimes", "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew".into());
                    }
                    if let Some(at) = due {
                        self.run_at(&cj, &api, &spec, &mut status, at).await?;
                    }
                    if let Some(next) = schedule.next(now, &tz) {
                        let wait = (next - Timestamp::now()).get_milliseconds().max(0) as u64 + 100;
                        requeue = Some(Duration::from_millis(wait));
                    }
                }
            }
        }
        if status != old {
            let cron_api: Api<CronJob> = Api::namespaced(self.client.clone(), &ns);
            let mut updated = (*cj).clone();
            updated.status = Some(status);
            match cron_api
                .replace_status(&cj.name_any(), &crate::post_params(), &updated)
                .await
            {
                Ok(_) => {}
                Err(e) if r8s_client::is_not_found(&e) => return Ok(None),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(requeue)
    }

    /// Start the run scheduled at `at`, as the concurrency policy allows.
    async fn run_at(
        &self,
        cj: &CronJob,
        api: &Api<Job>,
        spec: &k8s_openapi::api::batch::v1::CronJobSpec,
        status: &mut CronJobStatus,
        at: Timestamp,
    ) -> Result<(), Error> {
        if let Some(deadline) = spec.starting_deadline_seconds {
            if (Timestamp::now() - at).get_seconds() > deadline {
                self.events.warning(
                    cj,
                    "MissSchedule",
                    format!("Missed scheduled time to start a job: {}", at),
                );
                return Ok(());
            }
        }
        let name = format!("{}-{}", cj.name_any(), at.as_second() / 60);
        let active = status.active.clone().unwrap_or_default();
        if active.iter().any(|r| r.name.as_deref() == Some(name.as_str())) {
            return Ok(());
        }
        match spec.concurrency_policy.as_deref() {
            Some("Forbid") if !active.is_empty() => {
                self.events.normal(
                    cj,
                    "JobAlreadyActive",
                    "Not starting job because prior execution is running and concurrency policy is Forbid"
                        .into(),
                );
                return Ok(());
            }
            Some("Replace") => {
                for r in &active {
                    let Some(n) = r.name.as_deref() else { continue };
                    let dp = DeleteParams {
                        propagation_policy: Some(PropagationPolicy::Background),
                        ..Default::default()
                    };
                    match api.delete(n, &dp).await {
                        Ok(_) => self
                            .events
                            .normal(cj, "SuccessfulDelete", format!("Deleted job {n}")),
                        Err(e) if r8s_client::is_not_found(&e) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                status.active = None;
            }
            _ => {}
        }
        let template = spec.job_template.clone();
        let meta = template.metadata.unwrap_or_default();
        let mut annotations = meta.annotations.unwrap_or_default();
        annotations.insert(
            SCHEDULED_TIMESTAMP.into(),
            at.to_zoned(TimeZone::UTC).timestamp().to_string(),
        );
        let job = Job {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: cj.namespace(),
                labels: meta.labels,
                annotations: Some(annotations),
                owner_references: Some(vec![controller_ref(cj)]),
                ..Default::default()
            },
            spec: template.spec,
            status: None,
        };
        let created = match api.create(&crate::post_params(), &job).await {
            Ok(j) => {
                self.events
                    .normal(cj, "SuccessfulCreate", format!("Created job {name}"));
                j
            }
            Err(kube::Error::Api(e)) if e.code == 409 && e.reason == "AlreadyExists" => {
                match api.get_opt(&name).await? {
                    Some(j)
                        if controller_of(&j.metadata)
                            .is_some_and(|r| Some(&r.uid) == cj.metadata.uid.as_ref()) =>
                    {
                        j
                    }
                    _ => return Ok(()),
                }
            }
            Err(e) => {
                self.events
                    .warning(cj, "FailedCreate", format!("Error creating job: {e}"));
                return Err(e.into());
            }
        };
        let mut active = status.active.clone().unwrap_or_default();
        if finished(&created).is_none() && !active.iter().any(|r| r.uid == created.metadata.uid) {
            active.push(reference(&created));
        }
        status.active = (!active.is_empty()).then_some(active);
        status.last_schedule_time = Some(Time(at));
        Ok(())
    }

    /// Delete the oldest finished Jobs beyond the history limits.
    async fn clean_history(
        &self,
        cj: &CronJob,
        api: &Api<Job>,
        jobs: &[Arc<Job>],
        spec: &k8s_openapi::api::batch::v1::CronJobSpec,
    ) {
        for (kind, limit) in [
            ("Complete", spec.successful_jobs_history_limit.unwrap_or(3)),
            ("Failed", spec.failed_jobs_history_limit.unwrap_or(1)),
        ] {
            let mut done: Vec<&Arc<Job>> = jobs.iter().filter(|j| finished(j) == Some(kind)).collect();
            if done.len() <= limit.max(0) as usize {
                continue;
            }
            let started = |j: &Job| {
                j.status
                    .as_ref()
                    .and_then(|s| s.start_time.as_ref())
                    .or(j.metadata.creation_timestamp.as_ref())
                    .map(|t| t.0)
            };
            done.sort_by_key(|j| started(j));
            let excess = done.len() - limit.max(0) as usize;
            for j in done.into_iter().take(excess) {
                if j.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                let dp = DeleteParams {
                    propagation_policy: Some(PropagationPolicy::Background),
                    ..Default::default()
                };
                match api.delete(&j.name_any(), &dp).await {
                    Ok(_) => {
                        self.events
                            .normal(cj, "SuccessfulDelete", format!("Deleted job {}", j.name_any()))
                    }
                    Err(e) if r8s_client::is_not_found(&e) => {}
                    Err(e) => {
                        tracing::warn!(job = %j.name_any(), error = %e, "deleting a finished job failed")
                    }
                }
            }
        }
    }
}

fn reference(j: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: j.metadata.name.clone(),
        namespace: j.metadata.namespace.clone(),
        uid: j.metadata.uid.clone(),
        resource_version: j.metadata.resource_version.clone(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_recent_missed_time_is_run_once() {
        let every_minute = Schedule::parse("* * * * *").unwrap();
        let ts = |s: &str| s.parse::<Timestamp>().unwrap();
        let (due, missed) = most_recent_due(
            &every_minute,
            &TimeZone::UTC,
            ts("2026-01-01T00:00:00Z"),
            ts("2026-01-01T00:03:30Z"),
        );
        assert_eq!(
            (due.unwrap().to_string().as_str(), missed),
            ("2026-01-01T00:03:00Z", 3)
        );
        let (due, missed) = most_recent_due(
            &every_minute,
            &TimeZone::UTC,
            ts("2026-01-01T00:03:00Z"),
            ts("2026-01-01T00:03:30Z"),
        );
        assert_eq!((due, missed), (None, 0));
        // Days of missed minutes: still the latest one, without walking them all.
        let (due, missed) = most_recent_due(
            &every_minute,
            &TimeZone::UTC,
            ts("2025-01-01T00:00:00Z"),
            ts("2026-01-01T00:03:30Z"),
        );
        assert_eq!(due.unwrap().to_string(), "2026-01-01T00:03:00Z");
        assert!(missed > MAX_MISSED);
    }
}
