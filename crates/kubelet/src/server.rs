//! The kubelet's own HTTPS API (upstream `pkg/kubelet/server`), on port 10250: what the API
//! server reaches for `kubectl logs` (`/containerLogs/<ns>/<pod>/<container>`), plus `/pods`,
//! `/metrics` and `/healthz`.
//!
//! Every request is authenticated and authorized as upstream's kubelet does with webhook
//! authentication and authorization: a client certificate signed by the cluster CA (CN → user,
//! O → groups), else a bearer token checked with a TokenReview; then a SubjectAccessReview for
//! the verb on `nodes/<subresource>` of this node (`proxy` for logs and pods, `log`, `stats`,
//! `metrics`, `spec` for those paths). The serving certificate is self-signed, as a kubelet's
//! is without serving-certificate bootstrap; the API server does not verify it (upstream's
//! default without `--kubelet-certificate-authority`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use k8s_cri::v1 as cri;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::ResourceExt;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::logs::LogOptions;
use crate::Error;

type Body = BoxBody<Bytes, Infallible>;

pub(crate) fn text(code: StatusCode, msg: impl Into<String>) -> Response<Body> {
    let mut body = msg.into();
    if !body.ends_with('\n') {
        body.push('\n');
    }
    Response::builder()
        .status(code)
        .header(http::header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(Full::new(Bytes::from(body)).boxed())
        .expect("valid response")
}

/// Who is asking.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Caller {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
}

/// The user of a verified client certificate: CN, and O as groups.
pub fn caller_of_certificate(der: &[u8]) -> Option<Caller> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let name = subject.iter_common_name().next()?.as_str().ok()?.to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(String::from))
        .collect();
    Some(Caller {
        name,
        uid: String::new(),
        groups,
    })
}

/// The verb and `nodes` subresource a request needs (upstream `GetRequestAttributes`).
pub fn attributes(method: &Method, path: &str) -> (&'static str, &'static str) {
    let verb = match *method {
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "get",
    };
    let under = |p: &str| path == p || path.starts_with(&format!("{p}/"));
    let sub = if under("/stats") {
        "stats"
    } else if under("/metrics") {
        "metrics"
    } else if under("/logs") {
        "log"
    } else if under("/spec") {
        "spec"
    } else {
        "proxy"
    };
    (verb, sub)
}

/// A self-signed serving certificate for the node's names and addresses.
pub fn serving_cert(names: &[String]) -> Result<(String, String), Error> {
    let key = rcgen::KeyPair::generate().map_err(|e| Error::Other(e.to_string()))?;
    let mut params =
        rcgen::CertificateParams::new(Vec::<String>::new()).map_err(|e| Error::Other(e.to_string()))?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("{}@kubelet", names[0]));
    for n in names {
        let san = match n.parse::<std::net::IpAddr>() {
            Ok(ip) => rcgen::SanType::IpAddress(ip),
            Err(_) => rcgen::SanType::DnsName(
                n.clone()
                    .try_into()
                    .map_err(|e: rcgen::Error| Error::Other(e.to_string()))?,
            ),
        };
        params.subject_alt_names.push(san);
    }
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params
        .self_signed(&key)
        .map_err(|e| Error::Other(e.to_string()))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// The TLS configuration: our certificate; client certificates optional, and verified against
/// the cluster CA when presented.
pub fn tls_config(
    cert_pem: &str,
    key_pem: &str,
    client_ca: &[Vec<u8>],
) -> Result<Arc<rustls::ServerConfig>, Error> {
    use rustls::pki_types::pem::PemObject;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::Other(e.to_string()))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| Error::Other(e.to_string()))?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Other(e.to_string()))?;
    let builder = if client_ca.is_empty() {
        builder.with_no_client_auth()
    } else {
        let mut roots = rustls::RootCertStore::empty();
        for c in client_ca {
            roots
                .add(CertificateDer::from(c.clone()))
                .map_err(|e| Error::Other(format!("client CA: {e}")))?;
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .allow_unauthenticated()
            .build()
            .map_err(|e| Error::Other(format!("client verifier: {e}")))?;
        builder.with_client_cert_verifier(verifier)
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| Error::Other(format!("serving certificate: {e}")))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Accept connections until `stop`.
pub async fn serve(
    agent: Arc<Agent>,
    listener: tokio::net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
    stop: CancellationToken,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    loop {
        let (tcp, peer) = tokio::select! {
            _ = stop.cancelled() => return,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(_) => continue,
            },
        };
        let acceptor = acceptor.clone();
        let agent = agent.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(tcp).await else {
                return;
            };
            let cert_caller = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(|c| caller_of_certificate(c));
            let service = hyper::service::service_fn(move |req| {
                let agent = agent.clone();
                let caller = cert_caller.clone();
                async move { Ok::<_, Infallible>(handle(agent, caller, peer, req).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            tokio::select! {
                _ = conn => {}
                _ = stop.cancelled() => {}
            }
        });
    }
}

async fn authenticate(agent: &Agent, caller: Option<Caller>, req: &Request<Incoming>) -> Option<Caller> {
    if caller.is_some() {
        return caller;
    }
    let token = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))?
        .trim()
        .to_string();
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: Some(token),
            audiences: None,
        },
        ..Default::default()
    };
    let api: Api<TokenReview> = Api::all(agent.client());
    let status = api.create(&PostParams::default(), &review).await.ok()?.status?;
    if status.authenticated != Some(true) {
        return None;
    }
    let user = status.user?;
    Some(Caller {
        name: user.username?,
        uid: user.uid.unwrap_or_default(),
        groups: user.groups.unwrap_or_default(),
    })
}

async fn authorize(agent: &Agent, caller: &Caller, verb: &str, sub: &str) -> Result<bool, String> {
    let sar = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(caller.name.clone()),
            uid: Some(caller.uid.clone()).filter(|u| !u.is_empty()),
            groups: Some(caller.groups.clone()),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                resource: Some("nodes".into()),
                subresource: Some(sub.into()),
                name: Some(agent.node_name().to_string()),
                version: Some("v1".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<SubjectAccessReview> = Api::all(agent.client());
    let r = api
        .create(&PostParams::default(), &sar)
        .await
        .map_err(|e| e.to_string())?;
    Ok(r.status.is_some_and(|s| s.allowed))
}

async fn handle(
    agent: Arc<Agent>,
    caller: Option<Caller>,
    peer: SocketAddr,
    req: Request<Incoming>,
) -> Response<Body> {
    let path = req.uri().path().to_string();
    let Some(caller) = authenticate(&agent, caller, &req).await else {
        tracing::debug!(%peer, %path, "kubelet API: unauthenticated");
        return text(StatusCode::UNAUTHORIZED, "Unauthorized");
    };
    let (verb, sub) = attributes(req.method(), &path);
    match authorize(&agent, &caller, verb, sub).await {
        Ok(true) => {}
        Ok(false) => {
            return text(
                StatusCode::FORBIDDEN,
                format!(
                    "Forbidden (user={}, verb={verb}, resource=nodes, subresource={sub})",
                    caller.name
                ),
            )
        }
        Err(e) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!(
                    "Authorization error (user={}, verb={verb}, resource=nodes, subresource={sub}): {e}",
                    caller.name
                ),
            )
        }
    }
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let method = req.method().clone();
    if matches!(method, Method::GET | Method::POST) {
        match parts.as_slice() {
            ["exec", ns, pod, container] => {
                return stream(&agent, req, Streaming::Exec, ns, pod, container).await
            }
            ["attach", ns, pod, container] => {
                return stream(&agent, req, Streaming::Attach, ns, pod, container).await
            }
            ["portForward", ns, pod] => {
                return stream(&agent, req, Streaming::PortForward, ns, pod, "").await
            }
            _ => {}
        }
    }
    match (&method, parts.as_slice()) {
        (&Method::GET, ["healthz"]) => text(StatusCode::OK, "ok"),
        (&Method::GET, ["metrics"]) => {
            agent.refresh_running_gauges().await;
            Response::builder()
                .header(
                    http::header::CONTENT_TYPE,
                    "text/plain; version=0.0.4; charset=utf-8",
                )
                .body(Full::new(Bytes::from(agent.metrics().render())).boxed())
                .expect("valid response")
        }
        (&Method::GET, ["metrics", "resource"]) => Response::builder()
            .header(
                http::header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )
            .body(Full::new(Bytes::from(agent.resource_snapshot().await.render())).boxed())
            .expect("valid response"),
        // The journey stages this node's process keeps (`r8s trace`) of the pods named by
        // `uid=` (and of what they led to), as the API server gathers them.
        (&Method::GET, ["trace"]) => {
            let uids: std::collections::HashSet<String> =
                form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes())
                    .filter(|(k, _)| k == "uid")
                    .map(|(_, v)| v.into_owned())
                    .collect();
            let stages = r8s_trace::journal().about(&uids);
            Response::builder()
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(Full::new(Bytes::from(serde_json::to_vec(&stages).unwrap_or_default())).boxed())
                .expect("valid response")
        }
        (&Method::GET, ["pods"]) => {
            let pods: Vec<Pod> = agent.pods();
            let list =
                serde_json::json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": pods});
            Response::builder()
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(Full::new(Bytes::from(list.to_string())).boxed())
                .expect("valid response")
        }
        (&Method::GET, ["containerLogs", ns, pod, container]) => {
            let query = req.uri().query().unwrap_or("");
            match LogOptions::from_query(query) {
                Ok(o) => container_logs(agent, ns, pod, container, o).await,
                Err(e) => text(StatusCode::BAD_REQUEST, e),
            }
        }
        _ => text(StatusCode::NOT_FOUND, "404 page not found"),
    }
}

/// The answer where there is no CRI runtime to ask (a hollow node).
fn no_runtime() -> Response<Body> {
    text(
        StatusCode::NOT_IMPLEMENTED,
        "this node has no container runtime (a hollow node)",
    )
}

/// The pod `ns/name` this kubelet runs.
fn pod_of(agent: &Agent, ns: &str, name: &str) -> Option<Arc<Pod>> {
    agent.pod_by_name(ns, name)
}

/// Upstream's 404 for a pod this kubelet does not run.
fn no_such_pod(name: &str) -> Response<Body> {
    text(StatusCode::NOT_FOUND, format!("pod {name:?} does not exist"))
}

/// What a streaming request asks the runtime for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Streaming {
    Exec,
    Attach,
    PortForward,
}

/// `/exec`, `/attach` and `/portForward`: ask the runtime (CRI `Exec`, `Attach`,
/// `PortForward`) for a streaming URL, and pass the upgrade request on to it (containerd's
/// streaming server on loopback speaks SPDY and WebSocket), as upstream's kubelet proxies to
/// its runtime's streaming server.
async fn stream(
    agent: &Agent,
    req: Request<Incoming>,
    kind: Streaming,
    ns: &str,
    pod_name: &str,
    container: &str,
) -> Response<Body> {
    let Some(pod) = pod_of(agent, ns, pod_name) else {
        return no_such_pod(pod_name);
    };
    let uid = pod.uid().unwrap_or_default();
    let query: Vec<(String, String)> = form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes())
        .into_owned()
        .collect();
    let flag = |k: &str| {
        query
            .iter()
            .any(|(n, v)| n == k && matches!(v.as_str(), "1" | "true" | "True"))
    };
    // With a terminal, stderr is folded into stdout (upstream's `NewOptions`; the runtime
    // refuses both).
    let streams = crate::translate::Streams {
        stdin: flag("stdin"),
        stdout: flag("stdout"),
        stderr: flag("stderr") && !flag("tty"),
        tty: flag("tty"),
    };
    let Some(cri) = agent.cri() else {
        return no_runtime();
    };
    let mut rt = cri.runtime.clone();
    let url = if kind == Streaming::PortForward {
        let sandbox = match agent.sandboxes_of(&uid).await {
            Ok(list) => list
                .into_iter()
                .find(|s| s.state == cri::PodSandboxState::SandboxReady as i32),
            Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        };
        let Some(sandbox) = sandbox else {
            return text(StatusCode::NOT_FOUND, format!("pod {pod_name:?} is not running"));
        };
        // The ports a WebSocket client forwards are named in the request (SPDY clients name
        // them per stream): `port=80&port=8080` or comma-separated, as upstream's
        // `NewV4Options`; the containerd streaming server opens a channel pair per port.
        let mut port = Vec::new();
        for (_, v) in query.iter().filter(|(k, _)| k == "port") {
            for p in v.split(',') {
                match p.parse::<u16>() {
                    Ok(p) if p >= 1 => port.push(i32::from(p)),
                    _ => {
                        return text(
                            StatusCode::BAD_REQUEST,
                            format!("unable to parse \"{v}\" as a port"),
                        )
                    }
                }
            }
        }
        rt.port_forward(cri::PortForwardRequest {
            pod_sandbox_id: sandbox.id,
            port,
        })
        .await
        .map(|r| r.into_inner().url)
    } else {
        let running = match agent.instances(&uid, container).await {
            Ok(list) => list
                .into_iter()
                .find(|c| c.state == cri::ContainerState::ContainerRunning as i32),
            Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        };
        let Some(running) = running else {
            return text(
                StatusCode::NOT_FOUND,
                format!("container not found ({container:?})"),
            );
        };
        if kind == Streaming::Exec {
            let cmd: Vec<String> = query
                .iter()
                .filter(|(k, _)| k == "command")
                .map(|(_, v)| v.clone())
                .collect();
            if cmd.is_empty() {
                return text(StatusCode::BAD_REQUEST, "you must specify at least 1 command");
            }
            rt.exec(cri::ExecRequest {
                container_id: running.id,
                cmd,
                tty: streams.tty,
                stdin: streams.stdin,
                stdout: streams.stdout,
                stderr: streams.stderr,
            })
            .await
            .map(|r| r.into_inner().url)
        } else {
            rt.attach(cri::AttachRequest {
                container_id: running.id,
                stdin: streams.stdin,
                tty: streams.tty,
                stdout: streams.stdout,
                stderr: streams.stderr,
            })
            .await
            .map(|r| r.into_inner().url)
        }
    };
    let url = match url {
        Ok(u) => u,
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e.message().to_string()),
    };
    // The runtime's streaming server: plain HTTP on loopback.
    let Some((host, path)) = url.strip_prefix("http://").and_then(|rest| {
        rest.find('/')
            .map(|i| (rest[..i].to_string(), rest[i..].to_string()))
    }) else {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("unsupported streaming URL {url:?}"),
        );
    };
    // A WebSocket client offering v5 gets v5 from the kubelet itself, over SPDY to the
    // runtime, so that it can end the command's input (see `translate`).
    if kind != Streaming::PortForward && crate::translate::offers_v5(req.headers()) {
        return crate::translate::serve(req, &host, &path, streams).await;
    }
    let backend = match tokio::net::TcpStream::connect(&host).await {
        Ok(t) => t,
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, format!("dial {host}: {e}")),
    };
    match r8s_api::upgrade::proxy(req, backend, &host, &path).await {
        Ok(r8s_api::upgrade::Proxied::Switched(resp)) => resp.map(|()| Full::new(Bytes::new()).boxed()),
        Ok(r8s_api::upgrade::Proxied::Refused {
            status,
            content_type,
            body,
        }) => refused(status, content_type, body),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

/// The runtime's refusal of an upgrade, passed on to the client as it came.
pub(crate) fn refused(status: StatusCode, content_type: Option<String>, body: Bytes) -> Response<Body> {
    let mut resp = Response::builder().status(status);
    if let Some(ct) = content_type {
        resp = resp.header(http::header::CONTENT_TYPE, ct);
    }
    resp.body(Full::new(body).boxed()).expect("valid response")
}

/// Upstream's words for a container that has no log to show (`validateContainerLogStatus`).
fn not_started(pod: &Pod, container: &str) -> String {
    let name = pod.name_any();
    let status = pod.status.as_ref().and_then(|s| {
        s.container_statuses
            .iter()
            .flatten()
            .chain(s.init_container_statuses.iter().flatten())
            .chain(s.ephemeral_container_statuses.iter().flatten())
            .find(|c| c.name == container)
            .cloned()
    });
    let waiting = status
        .as_ref()
        .and_then(|s| s.state.as_ref())
        .and_then(|s| s.waiting.as_ref())
        .and_then(|w| w.reason.clone());
    match (status, waiting.as_deref()) {
        (None, _) => format!("container {container:?} in pod {name:?} is not available"),
        (_, Some("ErrImagePull")) => {
            format!("container {container:?} in pod {name:?} is waiting to start: image can't be pulled")
        }
        (_, Some("ImagePullBackOff")) => format!(
            "container {container:?} in pod {name:?} is waiting to start: trying and failing to pull image"
        ),
        (_, Some(reason)) => format!("container {container:?} in pod {name:?} is waiting to start: {reason}"),
        (_, None) => format!("container {container:?} in pod {name:?} is waiting to start - no logs yet"),
    }
}

async fn container_logs(
    agent: Arc<Agent>,
    ns: &str,
    pod_name: &str,
    container: &str,
    o: LogOptions,
) -> Response<Body> {
    let Some(pod) = pod_of(&agent, ns, pod_name) else {
        return no_such_pod(pod_name);
    };
    let exists = pod.spec.as_ref().is_some_and(|s| {
        s.containers
            .iter()
            .chain(s.init_containers.iter().flatten())
            .any(|c| c.name == container)
            || s.ephemeral_containers
                .iter()
                .flatten()
                .any(|c| c.name == container)
    });
    if !exists {
        return text(
            StatusCode::NOT_FOUND,
            format!("container {container:?} not found in pod {pod_name:?}"),
        );
    }
    // The container's instances in the runtime, newest first.
    let instances = match agent.instances(&pod.uid().unwrap_or_default(), container).await {
        Ok(v) => v,
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let chosen = if o.previous {
        match instances.get(1) {
            Some(c) => c.clone(),
            None => {
                return text(
                    StatusCode::BAD_REQUEST,
                    format!("previous terminated container {container:?} in pod {pod_name:?} not found"),
                )
            }
        }
    } else {
        match instances.first() {
            Some(c) => c.clone(),
            None => return text(StatusCode::BAD_REQUEST, not_started(&pod, container)),
        }
    };
    let Some(cri) = agent.cri() else {
        return no_runtime();
    };
    let mut rt = cri.runtime.clone();
    let status = match rt
        .container_status(cri::ContainerStatusRequest {
            container_id: chosen.id.clone(),
            verbose: false,
        })
        .await
    {
        Ok(r) => r.into_inner().status.unwrap_or_default(),
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e.message().to_string()),
    };
    if status.state == cri::ContainerState::ContainerCreated as i32 && !o.previous {
        return text(StatusCode::BAD_REQUEST, not_started(&pod, container));
    }
    let path = std::path::PathBuf::from(&status.log_path);
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    let id = chosen.id.clone();
    let runtime = cri.runtime.clone();
    tokio::spawn(crate::logs::stream(path, o, tx, move || {
        let mut rt = runtime.clone();
        let id = id.clone();
        async move {
            rt.container_status(cri::ContainerStatusRequest {
                container_id: id,
                verbose: false,
            })
            .await
            .ok()
            .and_then(|r| r.into_inner().status)
            .is_some_and(|s| s.state == cri::ContainerState::ContainerRunning as i32)
        }
    }));
    let frames = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    Response::builder()
        .header(http::header::CONTENT_TYPE, "text/plain")
        .body(StreamBody::new(frames).boxed())
        .expect("valid response")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_attributes_as_upstream() {
        assert_eq!(attributes(&Method::GET, "/containerLogs/d/p/c"), ("get", "proxy"));
        assert_eq!(attributes(&Method::GET, "/pods"), ("get", "proxy"));
        assert_eq!(attributes(&Method::POST, "/exec/d/p/c"), ("create", "proxy"));
        assert_eq!(attributes(&Method::GET, "/stats/summary"), ("get", "stats"));
        assert_eq!(attributes(&Method::GET, "/metrics"), ("get", "metrics"));
        assert_eq!(attributes(&Method::GET, "/metrics/cadvisor"), ("get", "metrics"));
        assert_eq!(attributes(&Method::GET, "/logs/syslog"), ("get", "log"));
        assert_eq!(attributes(&Method::GET, "/spec"), ("get", "spec"));
        assert_eq!(attributes(&Method::GET, "/statsx"), ("get", "proxy"));
    }

    #[test]
    fn certificate_subjects_name_the_caller() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "kube-apiserver-kubelet-client");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:masters");
        let cert = params.self_signed(&key).unwrap();
        let c = caller_of_certificate(cert.der()).unwrap();
        assert_eq!(c.name, "kube-apiserver-kubelet-client");
        assert_eq!(c.groups, ["system:masters"]);
        let (pem, key) = serving_cert(&["node-1".into(), "127.0.0.1".into()]).unwrap();
        assert!(tls_config(&pem, &key, &[]).is_ok());
        assert!(tls_config(&pem, &key, &[cert.der().to_vec()]).is_ok());
    }
}
