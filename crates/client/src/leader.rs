//! Leader election on a coordination.k8s.io/v1 Lease, as client-go's `leaderelection` does it:
//! whoever holds an unexpired lease leads; the leader renews it every `retry_period`; a leader
//! that cannot renew within `renew_deadline` stops leading; a candidate takes the lease over once
//! `lease_duration` has passed since the last renewal. Every write is a compare-and-swap on the
//! Lease's resourceVersion, so two candidates never both win.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::Api;
use kube::Client;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Debug)]
pub struct LeaderElection {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl LeaderElection {
    /// Upstream's defaults: 15 s lease, 10 s renew deadline, 2 s retry.
    pub fn new(name: &str, identity: String) -> Self {
        Self {
            namespace: "kube-system".into(),
            name: name.into(),
            identity,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// Campaign until leading, then run `lead` with a token that is cancelled when leadership is
    /// lost; campaign again after. Returns when `stop` is cancelled (releasing the lease).
    pub async fn run<F, Fut>(&self, client: Client, stop: CancellationToken, lead: F)
    where
        F: Fn(CancellationToken) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let api: Api<Lease> = Api::namespaced(client, &self.namespace);
        loop {
            // Campaign.
            loop {
                match self.attempt(&api).await {
                    Ok(true) => break,
                    Ok(false) => {}
                    Err(e) => tracing::debug!(lease = %self.name, error = %e, "leader election"),
                }
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(self.retry_period) => {}
                }
            }
            tracing::info!(lease = %self.name, identity = %self.identity, "became leader");
            let leading = stop.child_token();
            let task = tokio::spawn(lead(leading.clone()));
            let mut last_renew = tokio::time::Instant::now();
            let lost = loop {
                tokio::select! {
                    _ = stop.cancelled() => break false,
                    _ = tokio::time::sleep(self.retry_period) => {}
                }
                match self.attempt(&api).await {
                    Ok(true) => last_renew = tokio::time::Instant::now(),
                    Ok(false) => break true,
                    Err(e) => {
                        tracing::warn!(lease = %self.name, error = %e, "failed to renew lease");
                        if last_renew.elapsed() > self.renew_deadline {
                            break true;
                        }
                    }
                }
            };
            leading.cancel();
            let _ = task.await;
            if !lost {
                self.release(&api).await;
                return;
            }
            tracing::warn!(lease = %self.name, "leader election lost");
        }
    }

    /// One attempt, given the renew deadline at most (upstream's renew loop): a server whose
    /// datastore stalls must not hold a candidate or the leader in one request past it.
    async fn attempt(&self, api: &Api<Lease>) -> Result<bool, kube::Error> {
        tokio::time::timeout(self.renew_deadline, self.try_acquire_or_renew(api))
            .await
            .unwrap_or_else(|_| Err(kube::Error::Service("the lease request timed out".into())))
    }

    /// One attempt: true if we hold the lease afterwards.
    pub async fn try_acquire_or_renew(&self, api: &Api<Lease>) -> Result<bool, kube::Error> {
        let now = MicroTime(jiff::Timestamp::now());
        let Some(mut lease) = api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    namespace: Some(self.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(self.spec(now.clone(), now, 0)),
            };
            return match api.create(&kube::api::PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let ours = holder == self.identity;
        if !ours && !holder.is_empty() {
            let duration = spec
                .lease_duration_seconds
                .map(|s| Duration::from_secs(s.max(0) as u64))
                .unwrap_or(self.lease_duration);
            let renewed = spec.renew_time.as_ref().map(|t| t.0);
            let expired = match renewed {
                Some(t) => {
                    let age = jiff::Timestamp::now().duration_since(t);
                    age.is_negative() || age.unsigned_abs() > duration
                }
                None => true,
            };
            if !expired {
                return Ok(false);
            }
        }
        let (acquired, transitions) = if ours {
            (
                spec.acquire_time.clone().unwrap_or(now.clone()),
                spec.lease_transitions.unwrap_or(0),
            )
        } else {
            (now.clone(), spec.lease_transitions.unwrap_or(0) + 1)
        };
        lease.spec = Some(self.spec(acquired, now, transitions));
        match api
            .replace(&self.name, &kube::api::PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn spec(&self, acquired: MicroTime, renewed: MicroTime, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.lease_duration.as_secs() as i32),
            acquire_time: Some(acquired),
            renew_time: Some(renewed),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    /// Give the lease up so another candidate need not wait for it to expire.
    async fn release(&self, api: &Api<Lease>) {
        let Ok(Some(mut lease)) = api.get_opt(&self.name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else { return };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        let _ = api
            .replace(&self.name, &kube::api::PostParams::default(), &lease)
            .await;
    }
}
