//! Probes (upstream `pkg/kubelet/prober`): startup, liveness and readiness, one worker task per
//! (pod, container, probe) that probes the container it is pointed at every period and keeps a
//! result that changes only after `successThreshold` or `failureThreshold` equal outcomes in a
//! row. The pod worker points the probe workers at the running containers, reads the results
//! (`ready`, `started`, a liveness or startup failure to act on) and is woken when one changes.
//!
//! The handlers (exec through CRI `ExecSync`, httpGet, tcpSocket, grpc `grpc.health.v1.Health`,
//! sleep) are shared with the lifecycle hooks.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::Empty;
use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, HTTPGetAction, LifecycleHandler, Pod, Probe, TCPSocketAction,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use r8s_client::queue::WorkQueue;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, Notify};

use crate::runtime::Runtime;

/// Which probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Startup,
    Liveness,
    Readiness,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Startup => "Startup",
            Kind::Liveness => "Liveness",
            Kind::Readiness => "Readiness",
        })
    }
}

impl Kind {
    pub(crate) fn of(self, c: &Container) -> Option<&Probe> {
        match self {
            Kind::Startup => c.startup_probe.as_ref(),
            Kind::Liveness => c.liveness_probe.as_ref(),
            Kind::Readiness => c.readiness_probe.as_ref(),
        }
    }

    /// The result before the first probe of a container (upstream's initial values).
    fn initial(self) -> Option<bool> {
        match self {
            Kind::Startup => None,
            Kind::Liveness => Some(true),
            Kind::Readiness => Some(false),
        }
    }
}

/// What a probe or a hook does.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    Exec(Vec<String>),
    Http(HttpGet),
    Tcp { host: Option<String>, port: IntOrString },
    Grpc { port: i32, service: String },
    Sleep(Duration),
}

#[derive(Clone, Debug, PartialEq)]
pub struct HttpGet {
    /// `http` or `https` (the latter without verifying the certificate, as upstream).
    pub scheme: String,
    pub host: Option<String>,
    pub path: String,
    pub port: IntOrString,
    pub headers: Vec<(String, String)>,
}

impl HttpGet {
    fn new(h: &HTTPGetAction) -> Self {
        Self {
            scheme: h.scheme.clone().unwrap_or_else(|| "HTTP".into()).to_lowercase(),
            host: h.host.clone().filter(|h| !h.is_empty()),
            path: h.path.clone().unwrap_or_default(),
            port: h.port.clone(),
            headers: h
                .http_headers
                .iter()
                .flatten()
                .map(|h| (h.name.clone(), h.value.clone()))
                .collect(),
        }
    }
}

fn tcp(t: &TCPSocketAction) -> Action {
    Action::Tcp {
        host: t.host.clone().filter(|h| !h.is_empty()),
        port: t.port.clone(),
    }
}

impl Action {
    pub fn of_probe(p: &Probe) -> Option<Self> {
        if let Some(e) = &p.exec {
            return Some(Action::Exec(e.command.clone().unwrap_or_default()));
        }
        if let Some(h) = &p.http_get {
            return Some(Action::Http(HttpGet::new(h)));
        }
        if let Some(t) = &p.tcp_socket {
            return Some(tcp(t));
        }
        p.grpc.as_ref().map(|g| Action::Grpc {
            port: g.port,
            service: g.service.clone().unwrap_or_default(),
        })
    }

    pub fn of_hook(h: &LifecycleHandler) -> Option<Self> {
        if let Some(e) = &h.exec {
            return Some(Action::Exec(e.command.clone().unwrap_or_default()));
        }
        if let Some(g) = &h.http_get {
            return Some(Action::Http(HttpGet::new(g)));
        }
        if let Some(s) = &h.sleep {
            return Some(Action::Sleep(Duration::from_secs(s.seconds.max(0) as u64)));
        }
        h.tcp_socket.as_ref().map(tcp)
    }
}

/// The container a handler acts on.
#[derive(Clone, Debug)]
pub struct Target {
    pub container_id: String,
    pub pod_ip: String,
    pub ports: Vec<ContainerPort>,
}

/// A port by number or by the name of one of the container's ports.
pub fn resolve_port(port: &IntOrString, ports: &[ContainerPort]) -> Result<u16, String> {
    let n = match port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => match name.parse::<i32>() {
            Ok(n) => n,
            Err(_) => ports
                .iter()
                .find(|p| p.name.as_deref() == Some(name))
                .map(|p| p.container_port)
                .ok_or_else(|| format!("couldn't find port: {name}"))?,
        },
    };
    u16::try_from(n)
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("invalid port number: {n}"))
}

fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// A probe's verdict on an HTTP status code: 200 ≤ code < 400 is a success.
pub fn classify_http(code: u16) -> Result<(), String> {
    if (200..400).contains(&code) {
        Ok(())
    } else {
        Err(format!("HTTP probe failed with statuscode: {code}"))
    }
}

fn dial_error(addr: &str, e: &std::io::Error) -> String {
    let what = match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".to_string(),
        std::io::ErrorKind::TimedOut => "i/o timeout".to_string(),
        _ => e.to_string(),
    };
    format!("dial tcp {addr}: connect: {what}")
}

/// Run `action` against `t` within `timeout`: `Ok` or the failure's message. Exec failures are
/// `(output)`, others upstream's wording.
pub async fn run(rt: &dyn Runtime, action: &Action, t: &Target, timeout: Duration) -> Result<(), String> {
    match action {
        Action::Exec(cmd) => exec(rt, cmd, t, timeout)
            .await
            .map(|_| ())
            .map_err(|e| e.message()),
        Action::Http(h) => http_get(h, t, timeout).await,
        Action::Tcp { host, port } => tcp_check(host.as_deref(), port, t, timeout).await,
        Action::Grpc { port, service } => {
            let port = u16::try_from(*port).map_err(|_| format!("invalid port number: {port}"))?;
            grpc_check(&host_port(&t.pod_ip, port), service, timeout).await
        }
        Action::Sleep(d) => {
            tokio::time::sleep(*d).await;
            Ok(())
        }
    }
}

async fn tcp_check(
    host: Option<&str>,
    port: &IntOrString,
    t: &Target,
    timeout: Duration,
) -> Result<(), String> {
    let port = resolve_port(port, &t.ports)?;
    let addr = host_port(host.unwrap_or(&t.pod_ip), port);
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&addr)).await {
        Err(_) => Err(format!("dial tcp {addr}: i/o timeout")),
        Ok(Err(e)) => Err(dial_error(&addr, &e)),
        Ok(Ok(_)) => Ok(()),
    }
}

/// How a command run in the container failed.
#[derive(Debug)]
pub enum ExecError {
    /// It ran and exited non-zero; its output.
    Exited {
        cmd: String,
        code: i32,
        output: String,
    },
    TimedOut {
        cmd: String,
    },
    Runtime(String),
}

impl ExecError {
    /// The probe message (upstream's exec prober: the output, or that it timed out).
    pub fn message(&self) -> String {
        match self {
            ExecError::Exited { output, code, .. } if output.is_empty() => {
                format!("command exited with code {code}")
            }
            ExecError::Exited { output, .. } => output.clone(),
            ExecError::TimedOut { cmd } => format!("command {cmd:?} timed out"),
            ExecError::Runtime(e) => e.clone(),
        }
    }
}

/// `cmd` in the container through CRI `ExecSync`; its combined output when it exits 0.
pub async fn exec(
    rt: &dyn Runtime,
    cmd: &[String],
    t: &Target,
    timeout: Duration,
) -> Result<String, ExecError> {
    let joined = cmd.join(" ");
    let req = cri::ExecSyncRequest {
        container_id: t.container_id.clone(),
        cmd: cmd.to_vec(),
        timeout: timeout.as_secs().max(1) as i64,
    };
    // The runtime enforces the timeout; ours is the backstop should it not answer.
    let resp = match tokio::time::timeout(timeout + Duration::from_secs(2), rt.exec_sync(req)).await {
        Err(_) => return Err(ExecError::TimedOut { cmd: joined }),
        Ok(Err(crate::Error::Status(s))) if s.code() == tonic::Code::DeadlineExceeded => {
            return Err(ExecError::TimedOut { cmd: joined })
        }
        Ok(Err(e)) => return Err(ExecError::Runtime(crate::runtime::message(&e))),
        Ok(Ok(r)) => r,
    };
    let mut output = String::from_utf8_lossy(&resp.stdout).into_owned();
    output.push_str(&String::from_utf8_lossy(&resp.stderr));
    if resp.exit_code == 0 {
        Ok(output)
    } else {
        Err(ExecError::Exited {
            cmd: joined,
            code: resp.exit_code,
            output,
        })
    }
}

/// The GET the kubelet's prober sends for `h` to `authority`: upstream's default headers
/// (`Host`, `User-Agent: kube-probe/1.33`, `Accept: */*`) unless the probe gives its own, then
/// the probe's headers, and `Connection: close` (one request per connection, as upstream's
/// prober disables keep-alive).
pub fn http_request(h: &HttpGet, authority: &str) -> Result<http::Request<Empty<Bytes>>, String> {
    let path = if h.path.starts_with('/') {
        h.path.clone()
    } else {
        format!("/{}", h.path)
    };
    let has = |name: &str| h.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    let mut req = http::Request::get(path);
    if !has("host") {
        req = req.header(http::header::HOST, authority);
    }
    if !has("user-agent") {
        req = req.header(http::header::USER_AGENT, "kube-probe/1.33");
    }
    if !has("accept") {
        req = req.header(http::header::ACCEPT, "*/*");
    }
    for (n, v) in &h.headers {
        req = req.header(n.as_str(), v.as_str());
    }
    req.header(http::header::CONNECTION, "close")
        .body(Empty::new())
        .map_err(|e| e.to_string())
}

/// Send `req` over `s` with hyper's HTTP/1.1 client (header names in Go's canonical case, as
/// upstream's prober writes them) and give the response's status code.
async fn exchange<S>(s: S, req: http::Request<Empty<Bytes>>) -> Result<u16, String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
        .title_case_headers(true)
        .handshake(hyper_util::rt::TokioIo::new(s))
        .await
        .map_err(|e| e.to_string())?;
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    let result = sender
        .send_request(req)
        .await
        .map(|resp| resp.status().as_u16())
        .map_err(|e| e.to_string());
    driver.abort();
    result
}

fn tls_connector() -> tokio_rustls::TlsConnector {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(crate::bootstrap::LookOnly(provider)))
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

async fn http_get(h: &HttpGet, t: &Target, timeout: Duration) -> Result<(), String> {
    classify_http(http_status(h, t, timeout).await?)
}

/// An httpGet lifecycle hook: only a request that gets no answer fails (upstream's hook
/// handler does not look at the status code, unlike a probe).
pub async fn http_hook(h: &HttpGet, t: &Target, timeout: Duration) -> Result<(), String> {
    http_status(h, t, timeout).await.map(|_| ())
}

/// The status code `h` gets, or why there is none.
async fn http_status(h: &HttpGet, t: &Target, timeout: Duration) -> Result<u16, String> {
    let port = resolve_port(&h.port, &t.ports)?;
    let host = h.host.clone().unwrap_or_else(|| t.pod_ip.clone());
    let addr = host_port(&host, port);
    let path = if h.path.starts_with('/') {
        h.path.clone()
    } else {
        format!("/{}", h.path)
    };
    let url = format!("{}://{addr}{path}", h.scheme);
    let req = http_request(h, &addr)?;
    let work = async {
        let tcp = tokio::net::TcpStream::connect(&addr)
            .await
            .map_err(|e| dial_error(&addr, &e))?;
        if h.scheme == "https" {
            let name = rustls::pki_types::ServerName::try_from(host.clone()).map_err(|e| e.to_string())?;
            let tls = tls_connector()
                .connect(name, tcp)
                .await
                .map_err(|e| e.to_string())?;
            exchange(tls, req).await
        } else {
            exchange(tcp, req).await
        }
    };
    match tokio::time::timeout(timeout, work).await {
        Err(_) => Err(format!(
            "Get {url:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
        )),
        Ok(Err(e)) => Err(format!("Get {url:?}: {e}")),
        Ok(Ok(code)) => Ok(code),
    }
}

#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    service: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckResponse {
    #[prost(int32, tag = "1")]
    status: i32,
}

/// `grpc.health.v1.Health/Check`: SERVING (1) is a success.
async fn grpc_check(addr: &str, service: &str, timeout: Duration) -> Result<(), String> {
    let secs = timeout.as_secs();
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| e.to_string())?
        .connect_timeout(timeout)
        .timeout(timeout);
    let channel = endpoint
        .connect()
        .await
        .map_err(|_| format!("timeout: failed to connect service {addr:?} within {secs}s"))?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|_| format!("timeout: failed to connect service {addr:?} within {secs}s"))?;
    let path = http::uri::PathAndQuery::from_static("/grpc.health.v1.Health/Check");
    let req = tonic::Request::new(HealthCheckRequest {
        service: service.to_string(),
    });
    let resp = tokio::time::timeout(
        timeout,
        grpc.unary::<_, HealthCheckResponse, _>(req, path, tonic_prost::ProstCodec::default()),
    )
    .await
    .map_err(|_| format!("timeout: health rpc did not complete within {secs}s"))?;
    match resp {
        Ok(r) => match r.into_inner().status {
            1 => Ok(()),
            s => Err(format!(
                "service unhealthy (responded with {:?})",
                match s {
                    0 => "UNKNOWN",
                    2 => "NOT_SERVING",
                    3 => "SERVICE_UNKNOWN",
                    _ => "?",
                }
            )),
        },
        Err(s) => Err(format!("rpc error: code = {:?} desc = {}", s.code(), s.message())),
    }
}

/// A probe's result from its outcomes: it changes after `success` successes or `failure`
/// failures in a row (upstream worker's `resultRun`).
#[derive(Clone, Debug)]
pub struct Tracker {
    pub result: Option<bool>,
    last: Option<bool>,
    run: i32,
}

impl Tracker {
    pub fn new(initial: Option<bool>) -> Self {
        Self {
            result: initial,
            last: None,
            run: 0,
        }
    }

    /// One outcome; true when the result changed.
    pub fn observe(&mut self, ok: bool, success: i32, failure: i32) -> bool {
        if self.last == Some(ok) {
            self.run = self.run.saturating_add(1);
        } else {
            self.last = Some(ok);
            self.run = 1;
        }
        let threshold = if ok { success.max(1) } else { failure.max(1) };
        if self.run >= threshold && self.result != Some(ok) {
            self.result = Some(ok);
            return true;
        }
        false
    }
}

/// A probe's timing (defaults as upstream).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timing {
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success: i32,
    pub failure: i32,
}

impl Timing {
    pub fn of(p: &Probe) -> Self {
        let secs = |v: Option<i32>, d: i32| Duration::from_secs(v.filter(|v| *v > 0).unwrap_or(d) as u64);
        Self {
            initial_delay: Duration::from_secs(p.initial_delay_seconds.unwrap_or(0).max(0) as u64),
            period: secs(p.period_seconds, 10),
            timeout: secs(p.timeout_seconds, 1),
            success: p.success_threshold.filter(|v| *v > 0).unwrap_or(1),
            failure: p.failure_threshold.filter(|v| *v > 0).unwrap_or(3),
        }
    }
}

/// Something a probe worker wants recorded as an Event about its pod.
#[derive(Debug)]
pub struct ProbeEvent {
    pub pod: Arc<Pod>,
    pub reason: String,
    pub message: String,
}

/// The running container a worker probes.
#[derive(Clone)]
struct Aim {
    pod: Arc<Pod>,
    target: Target,
    started_at: SystemTime,
}

#[derive(Default)]
struct WorkerState {
    aim: Option<Aim>,
    /// The result for a container id, and the last failure's message.
    result: Option<(String, Option<bool>, String)>,
}

struct Shared {
    state: Mutex<WorkerState>,
    wake: Notify,
}

impl Shared {
    fn result_for(&self, container_id: &str) -> Option<(Option<bool>, String)> {
        let s = self.state.lock().unwrap();
        match &s.result {
            Some((id, r, m)) if id == container_id => Some((*r, m.clone())),
            _ => None,
        }
    }
}

struct Worker {
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

/// (pod uid, container name, probe).
type WorkerKey = (String, String, Kind);

/// The probe workers of every pod on the node (upstream `prober.Manager`).
pub struct ProbeManager {
    runtime: Arc<dyn Runtime>,
    queue: Arc<WorkQueue>,
    events: mpsc::UnboundedSender<ProbeEvent>,
    workers: Mutex<HashMap<WorkerKey, Worker>>,
}

impl ProbeManager {
    pub fn new(
        runtime: Arc<dyn Runtime>,
        queue: Arc<WorkQueue>,
        events: mpsc::UnboundedSender<ProbeEvent>,
    ) -> Self {
        Self {
            runtime,
            queue,
            events,
            workers: Mutex::new(HashMap::new()),
        }
    }

    /// Point the workers of container `c` at its running instance (`None`: not running). Workers
    /// are made on first sight, one per probe the container has.
    pub fn update(&self, pod: &Arc<Pod>, c: &Container, running: Option<(&str, SystemTime)>, pod_ip: &str) {
        let uid = pod.uid().unwrap_or_default();
        let mut workers = self.workers.lock().unwrap();
        // The startup worker first: the others wait for its success.
        let mut startup: Option<Arc<Shared>> = None;
        for kind in [Kind::Startup, Kind::Liveness, Kind::Readiness] {
            let Some(probe) = kind.of(c) else { continue };
            let key = (uid.clone(), c.name.clone(), kind);
            let shared = match workers.get(&key) {
                Some(w) => w.shared.clone(),
                None => {
                    let Some(action) = Action::of_probe(probe) else {
                        continue;
                    };
                    let shared = Arc::new(Shared {
                        state: Mutex::new(WorkerState::default()),
                        wake: Notify::new(),
                    });
                    let ctx = WorkerContext {
                        runtime: self.runtime.clone(),
                        queue: self.queue.clone(),
                        events: self.events.clone(),
                        pod_key: pod.uid().unwrap_or_default(),
                        container: c.name.clone(),
                        kind,
                        action,
                        timing: Timing::of(probe),
                        startup: if kind == Kind::Startup {
                            None
                        } else {
                            startup.clone()
                        },
                    };
                    let task = tokio::spawn(work(shared.clone(), ctx));
                    workers.insert(
                        key,
                        Worker {
                            shared: shared.clone(),
                            task,
                        },
                    );
                    shared
                }
            };
            let aim = running.map(|(id, started_at)| Aim {
                pod: pod.clone(),
                target: Target {
                    container_id: id.to_string(),
                    pod_ip: pod_ip.to_string(),
                    ports: c.ports.clone().unwrap_or_default(),
                },
                started_at,
            });
            let mut st = shared.state.lock().unwrap();
            let moved = st.aim.as_ref().map(|a| &a.target.container_id)
                != aim.as_ref().map(|a| &a.target.container_id);
            st.aim = aim;
            drop(st);
            if moved {
                shared.wake.notify_one();
            }
            if kind == Kind::Startup {
                startup = Some(shared);
            }
        }
    }

    fn shared(&self, uid: &str, container: &str, kind: Kind) -> Option<Arc<Shared>> {
        self.workers
            .lock()
            .unwrap()
            .get(&(uid.to_string(), container.to_string(), kind))
            .map(|w| w.shared.clone())
    }

    /// Whether the startup probe of container `container_id` succeeded (true without one).
    pub fn started(&self, uid: &str, container: &str, container_id: &str) -> bool {
        match self.shared(uid, container, Kind::Startup) {
            None => true,
            Some(s) => s.result_for(container_id).is_some_and(|(r, _)| r == Some(true)),
        }
    }

    /// Whether the `kind` probe of container `container_id` has succeeded (false while it has
    /// no worker or no result yet).
    pub fn probe_succeeded(&self, uid: &str, container: &str, container_id: &str, kind: Kind) -> bool {
        self.shared(uid, container, kind)
            .is_some_and(|s| s.result_for(container_id).is_some_and(|(r, _)| r == Some(true)))
    }

    /// Whether the readiness probe of container `container_id` says ready (true without one).
    pub fn ready(&self, uid: &str, container: &str, container_id: &str) -> bool {
        match self.shared(uid, container, Kind::Readiness) {
            None => true,
            Some(s) => s.result_for(container_id).is_some_and(|(r, _)| r == Some(true)),
        }
    }

    /// The liveness or startup probe that failed for container `container_id`, with its last
    /// failure's message: the container is to be killed and restarted.
    pub fn failed(&self, uid: &str, container: &str, container_id: &str) -> Option<(Kind, String)> {
        [Kind::Startup, Kind::Liveness].into_iter().find_map(|k| {
            let (r, m) = self.shared(uid, container, k)?.result_for(container_id)?;
            (r == Some(false)).then_some((k, m))
        })
    }

    /// The grace period a failed probe gives the container, if the probe sets one.
    pub fn grace(c: &Container, kind: Kind) -> Option<i64> {
        kind.of(c).and_then(|p| p.termination_grace_period_seconds)
    }

    /// Stop the workers of pod `uid`.
    pub fn forget_pod(&self, uid: &str) {
        self.workers.lock().unwrap().retain(|k, w| {
            let keep = k.0 != uid;
            if !keep {
                w.task.abort();
            }
            keep
        });
    }

    /// Stop the workers of pods not in `live`.
    pub fn retain_pods(&self, live: &[String]) {
        self.workers.lock().unwrap().retain(|k, w| {
            let keep = live.contains(&k.0);
            if !keep {
                w.task.abort();
            }
            keep
        });
    }

    pub fn stop_all(&self) {
        for (_, w) in self.workers.lock().unwrap().drain() {
            w.task.abort();
        }
    }
}

struct WorkerContext {
    runtime: Arc<dyn Runtime>,
    queue: Arc<WorkQueue>,
    events: mpsc::UnboundedSender<ProbeEvent>,
    pod_key: String,
    container: String,
    kind: Kind,
    action: Action,
    timing: Timing,
    startup: Option<Arc<Shared>>,
}

/// Sleep `d`, or less when the worker is pointed elsewhere.
async fn pause(me: &Shared, d: Duration) {
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = me.wake.notified() => {}
    }
}

/// One probe's worker (upstream `worker.run` / `doProbe`).
async fn work(me: Arc<Shared>, ctx: WorkerContext) {
    let mut tracker = Tracker::new(ctx.kind.initial());
    let mut probing = String::new();
    // After a liveness or startup failure the container is about to be restarted: no more
    // probes until a new one runs (upstream's `onHold`).
    let mut on_hold = false;
    loop {
        let aim = me.state.lock().unwrap().aim.clone();
        let Some(aim) = aim else {
            me.wake.notified().await;
            continue;
        };
        let id = aim.target.container_id.clone();
        if id != probing {
            probing = id.clone();
            tracker = Tracker::new(ctx.kind.initial());
            on_hold = false;
            me.state.lock().unwrap().result = Some((id.clone(), tracker.result, String::new()));
        }
        if on_hold || (ctx.kind == Kind::Startup && tracker.result == Some(true)) {
            me.wake.notified().await;
            continue;
        }
        if let Some(s) = &ctx.startup {
            if s.result_for(&id).map(|(r, _)| r) != Some(Some(true)) {
                pause(&me, Duration::from_millis(500)).await;
                continue;
            }
        }
        let running_for = SystemTime::now()
            .duration_since(aim.started_at)
            .unwrap_or_default();
        if running_for < ctx.timing.initial_delay {
            pause(&me, ctx.timing.initial_delay - running_for).await;
            continue;
        }
        let outcome = run(&*ctx.runtime, &ctx.action, &aim.target, ctx.timing.timeout).await;
        // Pointed elsewhere meanwhile: this outcome is of no use.
        if me
            .state
            .lock()
            .unwrap()
            .aim
            .as_ref()
            .map(|a| &a.target.container_id)
            != Some(&id)
        {
            continue;
        }
        let message = match &outcome {
            Ok(()) => String::new(),
            Err(m) => {
                let message = format!("{} probe failed: {m}", ctx.kind);
                tracing::debug!(pod = %ctx.pod_key, container = %ctx.container, %message, "prober");
                let _ = ctx.events.send(ProbeEvent {
                    pod: aim.pod.clone(),
                    reason: "Unhealthy".into(),
                    message: message.clone(),
                });
                m.clone()
            }
        };
        if tracker.observe(outcome.is_ok(), ctx.timing.success, ctx.timing.failure) {
            me.state.lock().unwrap().result = Some((id.clone(), tracker.result, message));
            if tracker.result == Some(false) && ctx.kind != Kind::Readiness {
                on_hold = true;
            }
            ctx.queue.add(ctx.pod_key.clone());
        }
        pause(&me, ctx.timing.period).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn results_change_only_after_threshold_runs() {
        // Liveness: starts a success, 3 failures in a row to fail, 1 success to recover.
        let mut t = Tracker::new(Kind::Liveness.initial());
        assert!(!t.observe(false, 1, 3));
        assert!(!t.observe(false, 1, 3));
        assert!(!t.observe(true, 1, 3), "a success breaks the run");
        assert!(!t.observe(false, 1, 3));
        assert!(!t.observe(false, 1, 3));
        assert!(t.observe(false, 1, 3));
        assert_eq!(t.result, Some(false));
        assert!(!t.observe(false, 1, 3), "already failed: no change");
        assert!(t.observe(true, 1, 3));
        assert_eq!(t.result, Some(true));
        // Readiness: starts not ready; successThreshold 2.
        let mut r = Tracker::new(Kind::Readiness.initial());
        assert_eq!(r.result, Some(false));
        assert!(!r.observe(true, 2, 1));
        assert!(r.observe(true, 2, 1));
        assert!(r.observe(false, 2, 1), "failureThreshold 1 fails at once");
        // Startup: unknown until it knows.
        let mut s = Tracker::new(Kind::Startup.initial());
        assert_eq!(s.result, None);
        assert!(s.observe(true, 1, 3));
    }

    #[test]
    fn timing_defaults_as_upstream() {
        let t = Timing::of(&Probe::default());
        assert_eq!(
            t,
            Timing {
                initial_delay: Duration::ZERO,
                period: Duration::from_secs(10),
                timeout: Duration::from_secs(1),
                success: 1,
                failure: 3,
            }
        );
        let p: Probe = serde_json::from_value(json!({"initialDelaySeconds": 2, "periodSeconds": 1,
            "timeoutSeconds": 5, "successThreshold": 2, "failureThreshold": 1}))
        .unwrap();
        let t = Timing::of(&p);
        assert_eq!(
            (
                t.initial_delay.as_secs(),
                t.period.as_secs(),
                t.timeout.as_secs(),
                t.success,
                t.failure
            ),
            (2, 1, 5, 2, 1)
        );
    }

    #[test]
    fn http_status_classification() {
        for ok in [200, 204, 301, 302, 399] {
            assert!(classify_http(ok).is_ok(), "{ok}");
        }
        for bad in [100, 199, 400, 404, 500, 503] {
            assert_eq!(
                classify_http(bad),
                Err(format!("HTTP probe failed with statuscode: {bad}"))
            );
        }
    }

    #[test]
    fn actions_from_probes_and_hooks() {
        let p: Probe = serde_json::from_value(json!({"httpGet": {"path": "healthz", "port": "web",
            "httpHeaders": [{"name": "Host", "value": "example.test"}, {"name": "X-A", "value": "1"}]}}))
        .unwrap();
        let Some(Action::Http(h)) = Action::of_probe(&p) else {
            panic!()
        };
        assert_eq!(h.scheme, "http");
        let req = http_request(&h, "10.0.0.1:8080").unwrap();
        assert_eq!((req.method(), req.uri().path()), (&http::Method::GET, "/healthz"));
        let hosts: Vec<_> = req.headers().get_all("host").iter().collect();
        assert_eq!(hosts, ["example.test"], "the header given wins");
        assert_eq!(req.headers()["x-a"], "1");
        assert_eq!(req.headers()["user-agent"], "kube-probe/1.33");
        assert_eq!(req.headers()["connection"], "close");
        let ports: Vec<ContainerPort> =
            serde_json::from_value(json!([{"name": "web", "containerPort": 8080}])).unwrap();
        assert_eq!(resolve_port(&h.port, &ports), Ok(8080));
        assert_eq!(resolve_port(&IntOrString::Int(81), &ports), Ok(81));
        assert_eq!(
            resolve_port(&IntOrString::String("nope".into()), &ports),
            Err("couldn't find port: nope".into())
        );
        let hook: LifecycleHandler = serde_json::from_value(json!({"sleep": {"seconds": 3}})).unwrap();
        assert_eq!(
            Action::of_hook(&hook),
            Some(Action::Sleep(Duration::from_secs(3)))
        );
        let g: Probe = serde_json::from_value(json!({"grpc": {"port": 9000}})).unwrap();
        assert_eq!(
            Action::of_probe(&g),
            Some(Action::Grpc {
                port: 9000,
                service: String::new()
            })
        );
    }

    /// A one-shot HTTP server on loopback answering `status`.
    async fn answer(status: &'static str) -> (u16, tokio::task::JoinHandle<String>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let n = s.read(&mut buf).await.unwrap();
            let resp = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
            s.write_all(resp.as_bytes()).await.unwrap();
            String::from_utf8_lossy(&buf[..n]).into_owned()
        });
        (port, task)
    }

    fn loopback_target() -> Target {
        Target {
            container_id: String::new(),
            pod_ip: "127.0.0.1".into(),
            ports: vec![],
        }
    }

    fn http(port: u16) -> HttpGet {
        HttpGet {
            scheme: "http".into(),
            host: None,
            path: "/ready".into(),
            port: IntOrString::Int(port as i32),
            headers: vec![],
        }
    }

    #[tokio::test]
    async fn http_and_tcp_probes_on_loopback() {
        let t = loopback_target();
        let (port, server) = answer("200 OK").await;
        assert_eq!(http_get(&http(port), &t, Duration::from_secs(2)).await, Ok(()));
        let seen = server.await.unwrap();
        assert!(seen.starts_with("GET /ready HTTP/1.1\r\n"), "{seen}");
        assert!(seen.contains(&format!("Host: 127.0.0.1:{port}\r\n")), "{seen}");
        let (port, server) = answer("503 Service Unavailable").await;
        assert_eq!(
            http_get(&http(port), &t, Duration::from_secs(2)).await,
            Err("HTTP probe failed with statuscode: 503".into())
        );
        server.await.unwrap();
        // Nobody listens on a port just released.
        let free = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let err = http_get(&http(free), &t, Duration::from_secs(2))
            .await
            .unwrap_err();
        assert_eq!(
            err,
            format!("Get \"http://127.0.0.1:{free}/ready\": dial tcp 127.0.0.1:{free}: connect: connection refused")
        );
        assert_eq!(
            tcp_check(None, &IntOrString::Int(free as i32), &t, Duration::from_secs(1)).await,
            Err(format!("dial tcp 127.0.0.1:{free}: connect: connection refused"))
        );
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = l.local_addr().unwrap().port() as i32;
        assert_eq!(
            tcp_check(None, &IntOrString::Int(open), &t, Duration::from_secs(1)).await,
            Ok(())
        );
        drop(l);
        // A server that never answers: the timeout.
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let err = http_get(&http(port), &t, Duration::from_millis(300))
            .await
            .unwrap_err();
        assert!(err.contains("context deadline exceeded"), "{err}");
        drop(l);
    }
}
