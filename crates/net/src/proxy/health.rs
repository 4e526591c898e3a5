//! Health-check node ports (kube-proxy's service health server, `pkg/proxy/healthcheck`): a
//! LoadBalancer Service with `externalTrafficPolicy: Local` keeps client addresses, so only
//! nodes with an endpoint of their own can take its traffic. Each node serves HTTP on the
//! Service's `healthCheckNodePort`, answering 200 while it has a ready local endpoint and 503
//! otherwise, with upstream's JSON body and headers, so an external load balancer sends
//! traffic only to nodes that can serve it.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio_util::sync::CancellationToken;

/// One Service's server.
struct Served {
    port: u16,
    local: Arc<AtomicUsize>,
    stop: CancellationToken,
}

/// The health-check servers of this node, one per Service that needs one.
pub struct HealthServers {
    bind: IpAddr,
    /// Whether the proxy's last sync succeeded (`serviceProxyHealthy`).
    healthy: Arc<AtomicBool>,
    by_service: HashMap<String, Served>,
}

impl HealthServers {
    /// Servers listening on `bind` (all addresses, as upstream, unless told otherwise).
    pub fn new(bind: IpAddr) -> Self {
        HealthServers {
            bind,
            healthy: Arc::new(AtomicBool::new(true)),
            by_service: HashMap::new(),
        }
    }

    pub fn set_healthy(&self, healthy: bool) {
        self.healthy.store(healthy, Ordering::Relaxed);
    }

    /// Service `key` (namespace/name) wants a server on `port` reporting `local` endpoints,
    /// or none. A port that cannot be bound is logged and tried again on the next change.
    pub fn set(&mut self, key: &str, want: Option<(u16, usize)>) {
        if let (Some(s), Some((port, local))) = (self.by_service.get(key), want) {
            if s.port == port {
                s.local.store(local, Ordering::Relaxed);
                return;
            }
        }
        if let Some(old) = self.by_service.remove(key) {
            old.stop.cancel();
        }
        let Some((port, local)) = want else {
            return;
        };
        let addr = SocketAddr::new(self.bind, port);
        let listener = match std::net::TcpListener::bind(addr).and_then(|l| {
            l.set_nonblocking(true)?;
            tokio::net::TcpListener::from_std(l)
        }) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(service = key, %addr, error = %e, "proxy: could not start the Service's health check server");
                return;
            }
        };
        let served = Served {
            port,
            local: Arc::new(AtomicUsize::new(local)),
            stop: CancellationToken::new(),
        };
        let (ns, name) = key.split_once('/').unwrap_or(("", key));
        let answer = Answer {
            namespace: ns.to_owned(),
            name: name.to_owned(),
            local: served.local.clone(),
            healthy: self.healthy.clone(),
        };
        tokio::spawn(serve(listener, Arc::new(answer), served.stop.clone()));
        self.by_service.insert(key.to_owned(), served);
    }

    /// The ports served now.
    pub fn ports(&self) -> Vec<u16> {
        self.by_service.values().map(|s| s.port).collect()
    }

    /// Stop every server.
    pub fn stop(&mut self) {
        for (_, s) in self.by_service.drain() {
            s.stop.cancel();
        }
    }
}

impl Drop for HealthServers {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Answer {
    namespace: String,
    name: String,
    local: Arc<AtomicUsize>,
    healthy: Arc<AtomicBool>,
}

impl Answer {
    /// Upstream's response, whatever the path or method.
    fn respond(&self) -> Response<Full<Bytes>> {
        let local = self.local.load(Ordering::Relaxed);
        let healthy = self.healthy.load(Ordering::Relaxed);
        let body = format!(
            "{{\n\t\"service\": {{\n\t\t\"namespace\": {},\n\t\t\"name\": {}\n\t}},\n\t\"localEndpoints\": {local},\n\t\"serviceProxyHealthy\": {healthy}\n}}",
            serde_json::Value::from(self.namespace.as_str()),
            serde_json::Value::from(self.name.as_str()),
        );
        let status = if local > 0 && healthy {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        Response::builder()
            .status(status)
            .header("Content-Type", "application/json")
            .header("X-Content-Type-Options", "nosniff")
            .header("X-Load-Balancing-Endpoint-Weight", local.to_string())
            .body(Full::new(Bytes::from(body)))
            .expect("a valid response")
    }
}

async fn serve(listener: tokio::net::TcpListener, answer: Arc<Answer>, stop: CancellationToken) {
    loop {
        let stream = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((s, _)) => s,
                Err(_) => continue,
            },
        };
        let answer = answer.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |_req: Request<hyper::body::Incoming>| {
                let a = answer.clone();
                async move { Ok::<_, Infallible>(a.respond()) }
            });
            let conn =
                hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = conn => {}
                _ = stop.cancelled() => {}
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(port: u16) -> String {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    #[tokio::test]
    async fn answers_as_kube_proxy_and_follows_the_local_endpoints() {
        let mut h = HealthServers::new("127.0.0.1".parse().unwrap());
        let port = free_port();
        h.set("web/front", Some((port, 2)));
        let got = get(port).await;
        assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
        assert!(
            got.to_ascii_lowercase()
                .contains("x-load-balancing-endpoint-weight: 2\r\n"),
            "{got}"
        );
        assert!(
            got.to_ascii_lowercase()
                .contains("content-type: application/json\r\n"),
            "{got}"
        );
        assert!(got.ends_with("\r\n\r\n{\n\t\"service\": {\n\t\t\"namespace\": \"web\",\n\t\t\"name\": \"front\"\n\t},\n\t\"localEndpoints\": 2,\n\t\"serviceProxyHealthy\": true\n}"), "{got}");
        // No local endpoint: 503.
        h.set("web/front", Some((port, 0)));
        assert!(get(port)
            .await
            .starts_with("HTTP/1.1 503 Service Unavailable\r\n"));
        // The proxy failing its syncs: 503 even with endpoints.
        h.set("web/front", Some((port, 1)));
        h.set_healthy(false);
        let got = get(port).await;
        assert!(
            got.starts_with("HTTP/1.1 503") && got.contains("\"serviceProxyHealthy\": false"),
            "{got}"
        );
        // Gone: the port is closed.
        h.set("web/front", None);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err());
        assert!(h.ports().is_empty());
    }
}
