//! The agent's client-side load balancer (k3s's agent load balancer): a TCP proxy on loopback
//! in front of every API server of the cluster. The kubelet, Service proxy, DNS and overlay
//! talk to it; it passes each connection on, byte for byte (TLS goes end to end: the servers'
//! certificates name 127.0.0.1), to the server in use, and moves to the next when that one
//! stops answering:
//!
//! - a connection that cannot reach the server in use (refused, or no answer within
//!   `CONNECT_TIMEOUT`) tries the next server, and that one is used from then on;
//! - every `HEALTH_INTERVAL` the server in use is probed: dialled, sent a line that is no TLS
//!   handshake, and expected to answer it (with an alert, or by closing) within
//!   `PROBE_TIMEOUT`. A server that is gone refuses or does not answer the dial; one that is
//!   stopped (SIGSTOP) or hung accepts the dial in its kernel but never answers. Either way the
//!   connections open to it are closed (a watch on it would otherwise hang until TCP gives up,
//!   minutes later) and their clients reconnect through the next server.
//!
//! The list of servers starts with the one the agent joined and follows the `kubernetes`
//! Service's endpoints (every live server, see the API server's endpoint reconciler).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// How long a server may take to accept a connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How often the server in use is checked.
pub const HEALTH_INTERVAL: Duration = Duration::from_secs(1);
/// How long a live server may take to answer a probe.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether the server at `addr` is alive: it takes a connection and answers what is sent on
/// it (any bytes, or closing it).
async fn probe(addr: &str) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(Ok(mut s)) = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await else {
        return false;
    };
    if s.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").await.is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    // Data, EOF or a reset all mean a process answered; only silence means none did.
    tokio::time::timeout(PROBE_TIMEOUT, s.read(&mut buf))
        .await
        .is_ok()
}

#[derive(Default)]
struct State {
    /// `host:port` of every server, the one in use first.
    servers: Vec<String>,
    /// Closes the connections open to the server in use.
    generation: CancellationToken,
}

/// A running load balancer.
#[derive(Clone)]
pub struct LoadBalancer {
    pub local: SocketAddr,
    state: Arc<Mutex<State>>,
}

impl LoadBalancer {
    /// Listen on `127.0.0.1:port` (0: any free port) in front of `servers` (`host:port`).
    pub async fn start(port: u16, servers: Vec<String>, stop: CancellationToken) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        let lb = LoadBalancer {
            local: listener.local_addr()?,
            state: Arc::new(Mutex::new(State {
                servers,
                generation: CancellationToken::new(),
            })),
        };
        tokio::spawn(lb.clone().accept(listener, stop.clone()));
        tokio::spawn(lb.clone().health(stop));
        Ok(lb)
    }

    /// The servers, the one in use first.
    pub fn servers(&self) -> Vec<String> {
        self.state.lock().unwrap().servers.clone()
    }

    /// Replace the list of servers (e.g. from the kubernetes Service's endpoints); the one in
    /// use stays in use while it is listed.
    pub fn set_servers(&self, mut servers: Vec<String>) {
        servers.sort();
        servers.dedup();
        if servers.is_empty() {
            return;
        }
        let mut s = self.state.lock().unwrap();
        let current = s.servers.first().cloned();
        if let Some(i) = current.and_then(|c| servers.iter().position(|x| *x == c)) {
            servers[..=i].rotate_right(1);
        } else {
            s.generation.cancel();
            s.generation = CancellationToken::new();
        }
        s.servers = servers;
    }

    /// Stop using `server`: it goes to the end of the list and its connections close. False
    /// if it is not the one in use or there is no other.
    fn demote(&self, server: &str) -> bool {
        let mut s = self.state.lock().unwrap();
        if s.servers.first().map(String::as_str) != Some(server) || s.servers.len() < 2 {
            return false;
        }
        s.servers.rotate_left(1);
        s.generation.cancel();
        s.generation = CancellationToken::new();
        tracing::warn!(from = server, to = %s.servers[0], "API server unreachable; using another");
        true
    }

    /// Close the connections open to the server in use, which stays in use.
    fn reset(&self) {
        let mut s = self.state.lock().unwrap();
        s.generation.cancel();
        s.generation = CancellationToken::new();
    }

    async fn accept(self, listener: TcpListener, stop: CancellationToken) {
        loop {
            let conn = tokio::select! {
                _ = stop.cancelled() => return,
                c = listener.accept() => c,
            };
            let Ok((client, _)) = conn else { continue };
            let _ = client.set_nodelay(true);
            tokio::spawn(self.clone().serve(client));
        }
    }

    /// Pass one connection on to the first server that takes it.
    async fn serve(self, mut client: TcpStream) {
        let candidates = self.servers();
        for server in candidates {
            let closed = self.state.lock().unwrap().generation.clone();
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(server.as_str())).await {
                Ok(Ok(mut upstream)) => {
                    let _ = upstream.set_nodelay(true);
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
                        _ = closed.cancelled() => {}
                    }
                    return;
                }
                _ => {
                    self.demote(&server);
                }
            }
        }
    }

    /// Dial the server in use every `HEALTH_INTERVAL`; move on when it does not answer. With
    /// no other server, its connections close all the same: they are as dead as the probe
    /// (after a network partition they are half open: what was sent on them is retransmitted
    /// ever more slowly, tens of seconds after the network is back, and a watch on one hangs
    /// until TCP gives up), and their clients dial again, through the balancer, and get
    /// through as soon as the server can be reached (upstream's kubelet closes its
    /// connections when a heartbeat fails, for the same reason).
    async fn health(self, stop: CancellationToken) {
        let mut unreachable = false;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(HEALTH_INTERVAL) => {}
            }
            let Some(current) = self.servers().first().cloned() else {
                continue;
            };
            if probe(&current).await {
                if unreachable {
                    tracing::info!(server = %current, "API server reachable again");
                    unreachable = false;
                }
            } else if !self.demote(&current) {
                if !unreachable {
                    tracing::warn!(server = %current, "API server unreachable and no other known; closing its connections");
                }
                unreachable = true;
                self.reset();
            }
        }
    }
}

/// The `host:port` of each address of the `kubernetes` Endpoints.
pub fn servers_of(endpoints: &k8s_openapi::api::core::v1::Endpoints) -> Vec<String> {
    let mut out = Vec::new();
    for subset in endpoints.subsets.iter().flatten() {
        let port = subset
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some("https"))
            .or_else(|| subset.ports.iter().flatten().next())
            .map(|p| p.port);
        let Some(port) = port else { continue };
        for a in subset.addresses.iter().flatten() {
            let host = if a.ip.contains(':') {
                format!("[{}]", a.ip)
            } else {
                a.ip.clone()
            };
            out.push(format!("{host}:{port}"));
        }
    }
    out
}

/// Keep `lb`'s servers those of the `kubernetes` Endpoints, read every `every` through `client`
/// (itself through the balancer), until `stop`. The server the agent joined stays listed
/// until the Endpoints name others.
pub async fn follow_endpoints(
    lb: LoadBalancer,
    client: kube::Client,
    every: Duration,
    stop: CancellationToken,
) {
    let api: kube::Api<k8s_openapi::api::core::v1::Endpoints> = kube::Api::namespaced(client, "default");
    loop {
        match api.get("kubernetes").await {
            Ok(ep) => {
                let servers = servers_of(&ep);
                if !servers.is_empty() && servers != lb.servers() {
                    tracing::info!(?servers, "API servers");
                    lb.set_servers(servers);
                }
            }
            Err(e) => tracing::debug!(error = %e, "reading the kubernetes endpoints"),
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A backend that answers each connection's bytes with its name, until dropped.
    async fn backend(name: &'static str) -> (String, tokio::task::JoinHandle<()>) {
        backend_at("127.0.0.1:0", name).await
    }

    /// The same, listening on `addr`.
    async fn backend_at(addr: &str, name: &'static str) -> (String, tokio::task::JoinHandle<()>) {
        let l = TcpListener::bind(addr).await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let task = tokio::spawn(async move {
            loop {
                let (mut s, _) = l.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(name.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (addr, task)
    }

    async fn ask(stream: &mut TcpStream) -> Option<String> {
        stream.write_all(b"?").await.ok()?;
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .ok()?
            .ok()?;
        (n > 0).then(|| String::from_utf8_lossy(&buf[..n]).into_owned())
    }

    #[tokio::test]
    async fn connections_move_to_a_live_server_and_those_to_a_dead_one_close() {
        let (a, a_task) = backend("a").await;
        let (b, _b_task) = backend("b").await;
        let stop = CancellationToken::new();
        let lb = LoadBalancer::start(0, vec![a.clone(), b.clone()], stop.clone())
            .await
            .unwrap();
        let mut long = TcpStream::connect(lb.local).await.unwrap();
        assert_eq!(ask(&mut long).await.as_deref(), Some("a"));
        // a stops listening (its open connections would hang, as on a powered-off machine:
        // the backend task's connections live on in their own tasks).
        a_task.abort();
        let _ = a_task.await;
        // Within a health interval or two, the long connection is closed by the balancer...
        let closed = tokio::time::timeout(Duration::from_secs(5), async {
            let mut buf = [0u8; 8];
            loop {
                match long.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "the connection to the dead server stayed open");
        // ...and new connections go to b.
        let mut fresh = TcpStream::connect(lb.local).await.unwrap();
        assert_eq!(ask(&mut fresh).await.as_deref(), Some("b"));
        assert_eq!(lb.servers()[0], b);
        // The endpoints name a's address again and b: b stays in use.
        lb.set_servers(vec![a.clone(), b.clone()]);
        assert_eq!(lb.servers(), vec![b.clone(), a.clone()]);
        stop.cancel();
    }

    #[tokio::test]
    async fn with_one_server_the_connections_to_it_close_while_it_cannot_be_reached() {
        let (a, a_task) = backend("a").await;
        let stop = CancellationToken::new();
        let lb = LoadBalancer::start(0, vec![a.clone()], stop.clone())
            .await
            .unwrap();
        let mut long = TcpStream::connect(lb.local).await.unwrap();
        assert_eq!(ask(&mut long).await.as_deref(), Some("a"));
        // a cannot be reached (its listener gone; its open connection lives on, as one across
        // a network partition would): the connection is closed, so its client dials again.
        a_task.abort();
        let _ = a_task.await;
        let closed = tokio::time::timeout(Duration::from_secs(5), async {
            let mut buf = [0u8; 8];
            loop {
                match long.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(
            closed.is_ok(),
            "the connection to the unreachable server stayed open"
        );
        // Back at the same address: connections get through again, to it.
        let _again = backend_at(&a, "a again").await;
        // (A probe that failed just before may still close the first one.)
        let mut answer = None;
        for _ in 0..3 {
            let mut fresh = TcpStream::connect(lb.local).await.unwrap();
            answer = ask(&mut fresh).await;
            if answer.is_some() {
                break;
            }
        }
        assert_eq!(answer.as_deref(), Some("a again"));
        assert_eq!(lb.servers(), vec![a]);
        stop.cancel();
    }

    #[tokio::test]
    async fn a_server_that_accepts_but_never_answers_is_left() {
        // A stopped process: its kernel completes the handshake (the listener's backlog), and
        // nothing ever answers.
        let hung = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let hung_addr = hung.local_addr().unwrap().to_string();
        let (b, _b_task) = backend("b").await;
        assert!(!probe(&hung_addr).await);
        assert!(probe(&b).await);
        let stop = CancellationToken::new();
        let lb = LoadBalancer::start(0, vec![hung_addr.clone(), b.clone()], stop.clone())
            .await
            .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while lb.servers()[0] != b {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the hung server is still in use"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut fresh = TcpStream::connect(lb.local).await.unwrap();
        assert_eq!(ask(&mut fresh).await.as_deref(), Some("b"));
        stop.cancel();
        drop(hung);
    }

    #[test]
    fn servers_from_the_kubernetes_endpoints() {
        let ep: k8s_openapi::api::core::v1::Endpoints = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kubernetes"},
            "subsets": [{"addresses": [{"ip": "10.0.0.1"}, {"ip": "fd00::2"}],
                         "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}]
        }))
        .unwrap();
        assert_eq!(servers_of(&ep), vec!["10.0.0.1:6443", "[fd00::2]:6443"]);
    }
}
