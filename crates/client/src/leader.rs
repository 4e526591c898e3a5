//! Leader election on a coordination.k8s.io/v1 Lease, as client-go's `leaderelection` does it:
//! whoever holds an unexpired lease leads; the leader renews it every `retry_period`; a leader
//! that cannot renew within `renew_deadline` stops leading; a candidate takes the lease over once
//! `lease_duration` has passed since the last renewal. Every write is a compare-and-swap on the
//! Lease's resourceVersion, so two candidates never both win.
//!
//! Beyond client-go: a leader's writes are fenced. A process that stalls (SIGSTOP, a hung VM, a
//! long GC-like pause) wakes with every task runnable at once, and its controllers could act on
//! stale caches before its elector notices that another server took the Lease meanwhile (seen
//! here: a controller manager stopped for 30 s created two pods on waking, which the new leader
//! then deleted). [`Fence`] says whether the last successful renewal *began* less than the
//! renew deadline ago (by the monotonic clock, which runs on through a stall); [`fenced`] gives
//! the leader a client whose writes are refused, without reaching the server, while it does not.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    /// Valid while this candidate holds the Lease by a renewal begun within `renew_deadline`.
    pub fence: Fence,
    /// The Lease as this candidate last wrote it while leading, and when: the leader renews
    /// from it without reading the Lease first (client-go's optimistic fast path, one request
    /// per renewal instead of two), and falls back to a read when the write fails.
    observed: Arc<Mutex<Option<(Lease, Instant)>>>,
}

/// Until when a leader may write (see the module's notes).
#[derive(Clone, Debug, Default)]
pub struct Fence(Arc<Mutex<Option<Instant>>>);

impl Fence {
    /// Whether the leader may write now.
    pub fn valid(&self) -> bool {
        self.0.lock().unwrap().is_some_and(|until| Instant::now() < until)
    }

    /// Let the leader write until `until` (`None`: not at all). The elector sets it after each
    /// attempt; tests set it by hand.
    pub fn set(&self, until: Option<Instant>) {
        *self.0.lock().unwrap() = until;
    }
}

/// `client`, with every request but reads refused while `fence` is not valid (a
/// `kube::Error::Service` the callers retry as any failed write).
pub fn fenced(client: Client, fence: Fence) -> Client {
    let namespace = client.default_namespace().to_string();
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let (client, fence) = (client.clone(), fence.clone());
        async move {
            let read = matches!(*req.method(), http::Method::GET | http::Method::HEAD);
            if !read && !fence.valid() {
                return Err::<http::Response<kube::client::Body>, Box<dyn std::error::Error + Send + Sync>>(
                    "not leading: no renewal of the leader's Lease within its renew deadline".into(),
                );
            }
            client.send(req).await.map_err(Into::into)
        }
    });
    Client::new(service, namespace)
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
            fence: Fence::default(),
            observed: Arc::default(),
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
            self.fence.set(None);
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
    /// The fence follows: valid for `renew_deadline` from the start of a successful attempt,
    /// closed by one that finds the Lease another's.
    async fn attempt(&self, api: &Api<Lease>) -> Result<bool, kube::Error> {
        let began = Instant::now();
        let held = tokio::time::timeout(self.renew_deadline, self.try_acquire_or_renew(api))
            .await
            .unwrap_or_else(|_| Err(kube::Error::Service("the lease request timed out".into())));
        match held {
            Ok(true) => self.fence.set(Some(began + self.renew_deadline)),
            Ok(false) => self.fence.set(None),
            Err(_) => {}
        }
        held
    }

    /// One attempt: true if we hold the lease afterwards.
    pub async fn try_acquire_or_renew(&self, api: &Api<Lease>) -> Result<bool, kube::Error> {
        let now = MicroTime(jiff::Timestamp::now());
        // The leader renews the Lease it last wrote, while that renewal is still within the
        // lease duration: a compare-and-swap on its resourceVersion, so a Lease changed since
        // (another candidate took it over) fails the write, and the slow path reads it.
        let fast = self
            .observed
            .lock()
            .unwrap()
            .take()
            .filter(|(_, at)| at.elapsed() < self.lease_duration);
        if let Some((mut lease, _)) = fast {
            let spec = lease.spec.clone().unwrap_or_default();
            lease.spec = Some(self.spec(
                spec.acquire_time.unwrap_or(now.clone()),
                now.clone(),
                spec.lease_transitions.unwrap_or(0),
            ));
            match api
                .replace(&self.name, &kube::api::PostParams::default(), &lease)
                .await
            {
                Ok(written) => {
                    self.observe(written);
                    return Ok(true);
                }
                Err(e) => tracing::debug!(
                    lease = %self.name, error = %e,
                    "failed to renew the lease optimistically; reading it"
                ),
            }
        }
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
                Ok(written) => {
                    self.observe(written);
                    Ok(true)
                }
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
            Ok(written) => {
                self.observe(written);
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Keep `lease`, just written by this candidate, for the next renewal.
    fn observe(&self, lease: Lease) {
        *self.observed.lock().unwrap() = Some((lease, Instant::now()));
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
        self.observed.lock().unwrap().take();
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A client whose "server" counts the requests reaching it and answers each with a
    /// ConfigMap.
    fn counting() -> (Client, Arc<AtomicUsize>) {
        let seen = Arc::new(AtomicUsize::new(0));
        let s = seen.clone();
        let service = tower::service_fn(move |_req: http::Request<kube::client::Body>| {
            s.fetch_add(1, Ordering::SeqCst);
            async move {
                let body =
                    r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"default"}}"#;
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .header("content-type", "application/json")
                        .body(kube::client::Body::from(body.as_bytes().to_vec()))
                        .unwrap(),
                )
            }
        });
        (Client::new(service, "default"), seen)
    }

    #[tokio::test]
    async fn a_fenced_client_writes_only_within_the_renew_deadline_and_always_reads() {
        let (client, seen) = counting();
        let fence = Fence::default();
        let api: Api<ConfigMap> = Api::default_namespaced(fenced(client, fence.clone()));
        let cm: ConfigMap = serde_json::from_str(r#"{"metadata":{"name":"x"}}"#).unwrap();
        let pp = kube::api::PostParams::default();
        // Never renewed: writes refused before reaching the server, reads go through.
        let err = api.create(&pp, &cm).await.unwrap_err();
        assert!(err.to_string().contains("not leading"), "{err}");
        assert_eq!(seen.load(Ordering::SeqCst), 0);
        api.get("x").await.unwrap();
        assert_eq!(seen.load(Ordering::SeqCst), 1);
        // Renewed: writes pass.
        fence.set(Some(Instant::now() + Duration::from_secs(10)));
        assert!(fence.valid());
        api.create(&pp, &cm).await.unwrap();
        assert_eq!(seen.load(Ordering::SeqCst), 2);
        // The deadline passed (a stall): refused again, with nothing sent.
        fence.set(Some(Instant::now() - Duration::from_millis(1)));
        assert!(!fence.valid());
        assert!(api.delete("x", &Default::default()).await.is_err());
        assert_eq!(seen.load(Ordering::SeqCst), 2);
    }

    /// A server holding one Lease, writes compare-and-swapped on its resourceVersion; counts
    /// requests by method.
    #[allow(clippy::type_complexity)]
    fn lease_server() -> (Client, Arc<Mutex<Option<Lease>>>, Arc<Mutex<Vec<String>>>) {
        let stored: Arc<Mutex<Option<Lease>>> = Arc::default();
        let log: Arc<Mutex<Vec<String>>> = Arc::default();
        let (st, lg) = (stored.clone(), log.clone());
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let (st, lg) = (st.clone(), lg.clone());
            async move {
                let method = req.method().clone();
                lg.lock().unwrap().push(method.to_string());
                let body = http_body_util::BodyExt::collect(req.into_body())
                    .await
                    .unwrap()
                    .to_bytes();
                let reply = |code: u16, v: serde_json::Value| {
                    Ok::<_, std::convert::Infallible>(
                        http::Response::builder()
                            .status(code)
                            .header("content-type", "application/json")
                            .body(kube::client::Body::from(v.to_string().into_bytes()))
                            .unwrap(),
                    )
                };
                let status = |code: u16, reason: &str| {
                    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "reason": reason, "code": code, "message": reason})
                };
                let mut stored = st.lock().unwrap();
                match method {
                    http::Method::GET => match stored.as_ref() {
                        Some(l) => reply(200, serde_json::to_value(l).unwrap()),
                        None => reply(404, status(404, "NotFound")),
                    },
                    _ => {
                        let mut lease: Lease = serde_json::from_slice(&body).unwrap();
                        let current = stored.as_ref().and_then(|l| l.metadata.resource_version.clone());
                        let exists = stored.is_some();
                        let ok = if method == http::Method::POST {
                            !exists
                        } else {
                            exists && lease.metadata.resource_version == current
                        };
                        if !ok {
                            return reply(409, status(409, "Conflict"));
                        }
                        let next: u64 = current.map_or(1, |rv| rv.parse::<u64>().unwrap() + 1);
                        lease.metadata.resource_version = Some(next.to_string());
                        *stored = Some(lease.clone());
                        reply(200, serde_json::to_value(&lease).unwrap())
                    }
                }
            }
        });
        (Client::new(service, "kube-system"), stored, log)
    }

    #[tokio::test]
    async fn the_leader_renews_without_reading_until_a_write_conflicts() {
        let (client, stored, log) = lease_server();
        let api: Api<Lease> = Api::namespaced(client, "kube-system");
        let le = LeaderElection::new("lease", "me".into());
        let calls = |log: &Arc<Mutex<Vec<String>>>| std::mem::take(&mut *log.lock().unwrap());
        // Acquired: read (none there), create.
        assert!(le.try_acquire_or_renew(&api).await.unwrap());
        assert_eq!(calls(&log), ["GET", "POST"]);
        // Renewed twice: one write each, no read; the renew time moves.
        let first = stored.lock().unwrap().clone().unwrap().spec.unwrap().renew_time;
        for _ in 0..2 {
            assert!(le.try_acquire_or_renew(&api).await.unwrap());
            assert_eq!(calls(&log), ["PUT"]);
        }
        let spec = stored.lock().unwrap().clone().unwrap().spec.unwrap();
        assert_ne!(spec.renew_time, first);
        assert_eq!(spec.holder_identity.as_deref(), Some("me"));
        // Another candidate took the Lease over meanwhile: the optimistic write conflicts, the
        // slow path reads the Lease, finds it held and unexpired, and gives it up.
        {
            let mut s = stored.lock().unwrap();
            let l = s.as_mut().unwrap();
            l.spec.as_mut().unwrap().holder_identity = Some("other".into());
            l.spec.as_mut().unwrap().renew_time = Some(MicroTime(jiff::Timestamp::now()));
            let rv: u64 = l.metadata.resource_version.as_ref().unwrap().parse().unwrap();
            l.metadata.resource_version = Some((rv + 1).to_string());
        }
        assert!(!le.try_acquire_or_renew(&api).await.unwrap());
        assert_eq!(calls(&log), ["PUT", "GET"]);
        // Not leading: each attempt reads.
        assert!(!le.try_acquire_or_renew(&api).await.unwrap());
        assert_eq!(calls(&log), ["GET"]);
    }
}
