//! `kubectl exec` and `kubectl logs`: the pod's container chosen as kubectl chooses it (`-c`,
//! the `kubectl.kubernetes.io/default-container` annotation, else the first, saying so), the
//! command run over the WebSocket exec protocol (kube-rs's v5/v4 channels) with standard
//! input, a raw terminal for `-t` and its size, and the command's exit code as ours; logs
//! streamed as they come.

use std::io::Write;

use http::Method;
use http_body_util::BodyExt;
use serde_json::Value;
use tokio::io::AsyncReadExt;

use crate::error::{msg, ApiError, Error, Result};
use crate::get::encode;
use crate::{out, Session};

/// The pod `arg` names (`NAME`, `pod/NAME`, or `TYPE/NAME` of a workload: its first pod).
async fn pod(session: &Session, arg: &str) -> Result<Value> {
    let ns = &session.conn.namespace;
    let (kind, name) = match arg.split_once('/') {
        Some((k, n)) => (Some(k), n),
        None => (None, arg),
    };
    let resource = match kind {
        Some(k) => Some(session.resource(k).await?),
        None => None,
    };
    if resource.as_ref().is_none_or(|r| r.name == "pods") {
        return match session
            .conn
            .rest
            .get(&format!("/api/v1/namespaces/{ns}/pods/{name}"))
            .await
        {
            Err(Error::Api(e)) if e.is_not_found() => Err(msg(format!(
                "error from server (NotFound): pods \"{name}\" not found in namespace \"{ns}\""
            ))),
            other => other,
        };
    }
    let r = resource.unwrap_or_else(|| unreachable!("checked above"));
    let obj = session
        .conn
        .rest
        .get(&format!("{}/{name}", r.collection_path(Some(ns))))
        .await?;
    let labels = obj["spec"]["selector"]["matchLabels"]
        .as_object()
        .or_else(|| obj["spec"]["selector"].as_object())
        .cloned()
        .unwrap_or_default();
    let selector: Vec<String> = labels
        .iter()
        .filter_map(|(k, v)| v.as_str().map(|v| format!("{k}={v}")))
        .collect();
    let list = session
        .conn
        .rest
        .get(&format!(
            "/api/v1/namespaces/{ns}/pods?labelSelector={}",
            encode(&selector.join(","))
        ))
        .await?;
    let mut pods: Vec<Value> = list["items"].as_array().cloned().unwrap_or_default();
    // Running pods first, then by name.
    pods.sort_by_key(|p| {
        (
            p["status"]["phase"] != "Running",
            p["metadata"]["name"].as_str().map(str::to_owned),
        )
    });
    pods.into_iter()
        .next()
        .ok_or_else(|| msg(format!("no pods found for {}/{name}", r.kind_prefix())))
}

/// The pod `target` names and its container (`-c` or the default), for a command that joins
/// a running container (`what`: "exec into", "attach"); whether standard input is a terminal
/// to use (`-t` with `-i` on a TTY; kubectl's warning otherwise).
async fn live_container(
    session: &Session,
    target: &str,
    asked: Option<&str>,
    what: &str,
    (stdin, tty, quiet): (bool, bool, bool),
) -> Result<(String, String, bool)> {
    let pod = pod(session, target).await?;
    let name = pod["metadata"]["name"].as_str().unwrap_or("").to_owned();
    let container = container(&pod, asked)?;
    if pod["status"]["phase"] == "Succeeded" || pod["status"]["phase"] == "Failed" {
        return Err(msg(format!(
            "cannot {what} a container in a completed pod; current phase is {}",
            pod["status"]["phase"].as_str().unwrap_or("")
        )));
    }
    let terminal = tty && stdin && std::io::IsTerminal::is_terminal(&std::io::stdin());
    if tty && !terminal && !quiet {
        eprintln!("Unable to use a TTY - input is not a terminal or the right kind of file");
    }
    Ok((name, container, terminal))
}

/// kubectl's default container: `-c`, the annotation, else the first (announced when the
/// pod has several).
fn container(pod: &Value, asked: Option<&str>) -> Result<String> {
    let name = pod["metadata"]["name"].as_str().unwrap_or("");
    let names = |k: &str| -> Vec<String> {
        pod["spec"][k]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str().map(str::to_owned))
            .collect()
    };
    let (containers, init, ephemeral) = (
        names("containers"),
        names("initContainers"),
        names("ephemeralContainers"),
    );
    if let Some(c) = asked {
        if containers.iter().chain(&init).chain(&ephemeral).any(|x| x == c) {
            return Ok(c.to_owned());
        }
        return Err(msg(format!("container {c} is not valid for pod {name}")));
    }
    if let Some(d) = pod["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"].as_str() {
        if containers.iter().any(|x| x == d) {
            return Ok(d.to_owned());
        }
    }
    let first = containers
        .first()
        .cloned()
        .ok_or_else(|| msg(format!("pod {name} has no containers")))?;
    if containers.len() + init.len() + ephemeral.len() > 1 {
        let mut all: Vec<String> = containers.clone();
        all.extend(init.iter().map(|c| format!("{c} (init)")));
        all.extend(ephemeral.iter().map(|c| format!("{c} (ephem)")));
        eprintln!("Defaulted container \"{first}\" out of: {}", all.join(", "));
    }
    Ok(first)
}

#[derive(clap::Args)]
pub struct ExecArgs {
    /// POD or TYPE/NAME, then -- COMMAND [args...]
    #[arg(required = true)]
    target: String,
    #[arg(last = true)]
    command: Vec<String>,
    /// Container name. If omitted, use the kubectl.kubernetes.io/default-container annotation.
    #[arg(short = 'c', long)]
    container: Option<String>,
    /// Pass stdin to the container.
    #[arg(short = 'i', long)]
    stdin: bool,
    /// Stdin is a TTY.
    #[arg(short = 't', long)]
    tty: bool,
    /// Only print output from the remote session.
    #[arg(short = 'q', long)]
    quiet: bool,
}

pub async fn exec(session: &Session, a: ExecArgs) -> Result<i32> {
    if a.command.is_empty() {
        return Err(msg("you must specify at least one command for the container"));
    }
    let (name, container, terminal) = live_container(
        session,
        &a.target,
        a.container.as_deref(),
        "exec into",
        (a.stdin, a.tty, a.quiet),
    )
    .await?;
    let mut query = vec![format!("container={}", encode(&container))];
    for c in &a.command {
        query.push(format!("command={}", encode(c)));
    }
    remote(session, &name, "exec", query, a.stdin, terminal).await
}

/// `exec` and `attach` alike: the upgraded connection, the terminal, the exit code.
async fn remote(
    session: &Session,
    name: &str,
    subresource: &str,
    query: Vec<String>,
    stdin: bool,
    terminal: bool,
) -> Result<i32> {
    let ns = session.conn.namespace.clone();
    let connection = connect(session, &ns, name, subresource, query, stdin, terminal).await?;
    let raw = if terminal { RawMode::enable() } else { None };
    let input: Option<Input> = stdin.then(|| Box::pin(tokio::io::stdin()) as Input);
    let status = stream(connection, input, None, terminal).await;
    drop(raw);
    let status = status?;
    let Some(status) = status else {
        return Ok(0);
    };
    if status["status"] == "Success" {
        return Ok(0);
    }
    let code = status["details"]["causes"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["reason"] == "ExitCode"))
        .and_then(|c| c["message"].as_str()?.parse::<i32>().ok());
    match code {
        Some(code) => {
            eprintln!("command terminated with exit code {code}");
            Ok(code)
        }
        None => Err(Error::Message(
            status["message"].as_str().unwrap_or("").to_owned(),
        )),
    }
}

#[derive(clap::Args)]
pub struct AttachArgs {
    /// POD or TYPE/NAME.
    target: String,
    /// Container name. If omitted, use the kubectl.kubernetes.io/default-container annotation.
    #[arg(short = 'c', long)]
    container: Option<String>,
    /// Pass stdin to the container.
    #[arg(short = 'i', long)]
    stdin: bool,
    /// Stdin is a TTY.
    #[arg(short = 't', long)]
    tty: bool,
    /// Only print output from the remote session.
    #[arg(short = 'q', long)]
    quiet: bool,
}

/// `kubectl attach`: the container's own standard streams.
pub async fn attach(session: &Session, a: AttachArgs) -> Result<i32> {
    let (name, container, terminal) = live_container(
        session,
        &a.target,
        a.container.as_deref(),
        "attach",
        (a.stdin, a.tty, a.quiet),
    )
    .await?;
    if terminal && !a.quiet {
        eprintln!("If you don't see a command prompt, try pressing enter.");
    }
    let query = vec![format!("container={}", encode(&container))];
    remote(session, &name, "attach", query, a.stdin, terminal).await
}

/// The upgraded connection of an exec or attach (`query` names the container and command;
/// stderr is its own stream unless there is a terminal).
async fn connect(
    session: &Session,
    ns: &str,
    name: &str,
    subresource: &str,
    mut query: Vec<String>,
    stdin: bool,
    terminal: bool,
) -> Result<kube::client::Connection> {
    query.push(format!("stdin={stdin}"));
    query.push("stdout=true".into());
    query.push(format!("stderr={}", !terminal));
    query.push(format!("tty={terminal}"));
    let uri = format!(
        "/api/v1/namespaces/{ns}/pods/{name}/{subresource}?{}",
        query.join("&")
    );
    let request = http::Request::get(uri)
        .body(Vec::new())
        .map_err(|e| msg(e.to_string()))?;
    session
        .conn
        .rest
        .client()
        .connect(request)
        .await
        .map_err(exec_error)
}

/// What a remote command reads as its standard input.
pub(crate) type Input = std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>;

/// Run `command` in `container` of pod `name` without a terminal: `input` as its standard
/// input, its standard output collected, its standard error passed on. The collected output
/// and the exit code (0, or the command's).
pub(crate) async fn run_in(
    session: &Session,
    ns: &str,
    name: &str,
    container: &str,
    command: &[&str],
    input: Option<Input>,
) -> Result<(Vec<u8>, i32)> {
    let mut query = vec![format!("container={}", encode(container))];
    for c in command {
        query.push(format!("command={}", encode(c)));
    }
    let connection = connect(session, ns, name, "exec", query, input.is_some(), false).await?;
    let mut output = Vec::new();
    let status = stream(connection, input, Some(&mut output), false).await?;
    let code = match status {
        Some(s) if s["status"] != "Success" => s["details"]["causes"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["reason"] == "ExitCode"))
            .and_then(|c| c["message"].as_str()?.parse::<i32>().ok())
            .unwrap_or(1),
        _ => 0,
    };
    Ok((output, code))
}

/// The container of pod `ns/name` for `kubectl cp` (`-c` or kubectl's default).
pub(crate) async fn pod_container(
    session: &Session,
    ns: &str,
    name: &str,
    asked: Option<&str>,
) -> Result<String> {
    let pod = session
        .conn
        .rest
        .get(&format!("/api/v1/namespaces/{ns}/pods/{name}"))
        .await?;
    container(&pod, asked)
}

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const STATUS: u8 = 3;
const RESIZE: u8 = 4;
const CLOSE: u8 = 255;

/// The remote command protocol's channels over the upgraded connection, until the status
/// comes (or the connection ends). kube-rs's own loop closes the whole connection at the end
/// of standard input where the server does not speak v5 (containerd 1.6's streaming server
/// answers v4), losing the output still to come; here the input just stays open then, as
/// client-go's v4 executor leaves it, and v5's close signal is sent where it exists.
async fn stream(
    connection: kube::client::Connection,
    input: Option<Input>,
    mut capture: Option<&mut Vec<u8>>,
    terminal: bool,
) -> Result<Option<Value>> {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let can_close = connection.supports_stream_close();
    let (mut tx, mut rx) = connection.into_stream().split();
    if terminal {
        if let Some((width, height)) = terminal_size() {
            let mut m = vec![RESIZE];
            m.extend_from_slice(format!("{{\"Width\":{width},\"Height\":{height}}}").as_bytes());
            let _ = tx.send(Message::binary(m)).await;
        }
    }
    let mut stdin_open = input.is_some();
    let mut stdin: Input = input.unwrap_or_else(|| Box::pin(tokio::io::empty()));
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        tokio::select! {
            message = rx.next() => {
                let bin = match message {
                    Some(Ok(Message::Binary(bin))) => bin,
                    Some(Ok(Message::Close(_))) | None => return Ok(None),
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => return Err(msg(format!("error reading from the container: {e}"))),
                };
                match bin.first() {
                    Some(&STDOUT) => match capture.as_deref_mut() {
                        Some(buf) => buf.extend_from_slice(&bin[1..]),
                        None => {
                            let mut out = std::io::stdout().lock();
                            let _ = out.write_all(&bin[1..]);
                            let _ = out.flush();
                        }
                    },
                    Some(&STDERR) => {
                        let _ = std::io::stderr().write_all(&bin[1..]);
                    }
                    Some(&STATUS) => {
                        return Ok(serde_json::from_slice(&bin[1..]).ok());
                    }
                    _ => {}
                }
            }
            read = stdin.read(&mut buf), if stdin_open => {
                match read {
                    Ok(0) | Err(_) => {
                        stdin_open = false;
                        if can_close {
                            let _ = tx.send(Message::binary(vec![CLOSE, STDIN])).await;
                        }
                    }
                    Ok(n) => {
                        let mut m = Vec::with_capacity(n + 1);
                        m.push(STDIN);
                        m.extend_from_slice(&buf[..n]);
                        if tx.send(Message::binary(m)).await.is_err() {
                            stdin_open = false;
                        }
                    }
                }
            }
        }
    }
}

fn exec_error(e: kube::Error) -> Error {
    match e {
        kube::Error::Api(s) => Error::Api(ApiError {
            code: s.code,
            reason: s.reason.clone(),
            message: s.message.clone(),
        }),
        other => msg(other.to_string()),
    }
}

fn terminal_size() -> Option<(u16, u16)> {
    // SAFETY: TIOCGWINSZ fills a winsize for a terminal descriptor and touches nothing else.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDIN_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
    (ok && ws.ws_col > 0).then_some((ws.ws_col, ws.ws_row))
}

/// The local terminal in raw mode for `-it`, restored when dropped.
struct RawMode(libc::termios);

impl RawMode {
    fn enable() -> Option<RawMode> {
        // SAFETY: tcgetattr/tcsetattr on standard input with a termios they fill.
        unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(libc::STDIN_FILENO, &mut t) != 0 {
                return None;
            }
            let saved = t;
            libc::cfmakeraw(&mut t);
            if libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &t) != 0 {
                return None;
            }
            Some(RawMode(saved))
        }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: restores the attributes read in `enable`.
        unsafe {
            libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &self.0);
        }
    }
}

#[derive(clap::Args)]
pub struct LogsArgs {
    /// POD or TYPE/NAME, then optionally the container.
    #[arg(required = true)]
    target: String,
    container_arg: Option<String>,
    /// Print the logs of this container.
    #[arg(short = 'c', long)]
    container: Option<String>,
    /// Specify if the logs should be streamed.
    #[arg(short = 'f', long)]
    follow: bool,
    /// Lines of recent log file to display. Defaults to -1.
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    tail: i64,
    /// Include timestamps on each line in the log output.
    #[arg(long)]
    timestamps: bool,
    /// If true, print the logs for the previous instance of the container in a pod if it exists.
    #[arg(short = 'p', long)]
    previous: bool,
    /// Only return logs newer than a relative duration like 5s, 2m, or 3h.
    #[arg(long)]
    since: Option<String>,
    /// Only return logs after a specific date (RFC3339).
    #[arg(long)]
    since_time: Option<String>,
    /// Maximum bytes of logs to return.
    #[arg(long)]
    limit_bytes: Option<u64>,
    /// Get all containers' logs in the pod(s).
    #[arg(long)]
    all_containers: bool,
}

pub async fn logs(session: &Session, a: LogsArgs) -> Result<i32> {
    let pod = pod(session, &a.target).await?;
    let name = pod["metadata"]["name"].as_str().unwrap_or("").to_owned();
    let containers: Vec<String> = if a.all_containers {
        ["initContainers", "containers", "ephemeralContainers"]
            .iter()
            .flat_map(|k| pod["spec"][*k].as_array().cloned().unwrap_or_default())
            .filter_map(|c| c["name"].as_str().map(str::to_owned))
            .collect()
    } else {
        vec![container(
            &pod,
            a.container.as_deref().or(a.container_arg.as_deref()),
        )?]
    };
    let mut query = Vec::new();
    if a.follow {
        query.push("follow=true".to_owned());
    }
    if a.tail >= 0 {
        query.push(format!("tailLines={}", a.tail));
    }
    if a.timestamps {
        query.push("timestamps=true".to_owned());
    }
    if a.previous {
        query.push("previous=true".to_owned());
    }
    if let Some(s) = &a.since {
        let d = crate::modify::parse_duration(s)?.unwrap_or_default();
        query.push(format!("sinceSeconds={}", d.as_secs_f64().ceil() as u64));
    }
    if let Some(t) = &a.since_time {
        query.push(format!("sinceTime={}", encode(t)));
    }
    if let Some(b) = a.limit_bytes {
        query.push(format!("limitBytes={b}"));
    }
    for c in containers {
        let mut q = query.clone();
        q.push(format!("container={}", encode(&c)));
        copy_log(session, &name, &q).await?;
    }
    Ok(0)
}

/// A container's log (`query` names it) copied to standard output as it comes.
async fn copy_log(session: &Session, name: &str, query: &[String]) -> Result<()> {
    let ns = &session.conn.namespace;
    let uri = format!("/api/v1/namespaces/{ns}/pods/{name}/log?{}", query.join("&"));
    let (code, mut body) = session.conn.rest.stream(Method::GET, &uri).await?;
    if !(200..300).contains(&code) {
        let bytes = body
            .collect()
            .await
            .map(|b| b.to_bytes().to_vec())
            .unwrap_or_default();
        return Err(Error::Api(ApiError::from_response(code, &bytes)));
    }
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { break };
        if let Some(data) = frame.data_ref() {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(data);
            let _ = out.flush();
        }
    }
    Ok(())
}

/// `kubectl run -i`'s session with the new pod's container: attached as `kubectl attach`
/// does, or — when the pod has already completed — its log (kubectl's fallback).
pub(crate) async fn attach_new_pod(
    session: &Session,
    pod: &Value,
    container: &str,
    stdin: bool,
    tty: bool,
    quiet: bool,
) -> Result<i32> {
    let name = pod["metadata"]["name"].as_str().unwrap_or("");
    if matches!(pod["status"]["phase"].as_str(), Some("Succeeded" | "Failed")) {
        copy_log(session, name, &[format!("container={}", encode(container))]).await?;
        return Ok(0);
    }
    let terminal = tty && stdin && std::io::IsTerminal::is_terminal(&std::io::stdin());
    if tty && !terminal && !quiet {
        eprintln!("Unable to use a TTY - input is not a terminal or the right kind of file");
    }
    if terminal && !quiet {
        eprintln!("If you don't see a command prompt, try pressing enter.");
    }
    let query = vec![format!("container={}", encode(container))];
    remote(session, name, "attach", query, stdin, terminal).await
}

#[derive(clap::Args)]
pub struct PortForwardArgs {
    /// POD or TYPE/NAME, then [LOCAL_PORT:]REMOTE_PORT …
    #[arg(required = true)]
    target: String,
    #[arg(required = true)]
    ports: Vec<String>,
    /// Addresses to listen on (comma separated). Only accepts IP addresses or localhost.
    #[arg(long, value_delimiter = ',', default_value = "localhost")]
    address: Vec<String>,
}

/// `kubectl port-forward`: a local listener per port; each connection gets its own stream
/// to the pod's port over the WebSocket port-forward protocol.
pub async fn port_forward(session: &Session, a: PortForwardArgs) -> Result<i32> {
    let pod = pod(session, &a.target).await?;
    if pod["status"]["phase"] != "Running" {
        return Err(msg(format!(
            "unable to forward port because pod is not running. Current status={}",
            pod["status"]["phase"].as_str().unwrap_or("")
        )));
    }
    let name = pod["metadata"]["name"].as_str().unwrap_or("").to_owned();
    let api: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(session.conn.rest.client().clone(), &session.conn.namespace);
    let mut listeners = Vec::new();
    for spec in &a.ports {
        let (local, remote) = match spec.split_once(':') {
            Some((l, r)) => (l, r),
            None => (spec.as_str(), spec.as_str()),
        };
        let remote: u16 = remote
            .parse()
            .map_err(|_| msg(format!("Error parsing remote port '{remote}'")))?;
        let local: u16 = if local.is_empty() {
            0
        } else {
            local
                .parse()
                .map_err(|_| msg(format!("Error parsing local port '{local}'")))?
        };
        for address in &a.address {
            let hosts: &[&str] = if address == "localhost" {
                &["127.0.0.1", "[::1]"]
            } else {
                &[address.as_str()]
            };
            for host in hosts {
                let bind = format!("{host}:{local}");
                match tokio::net::TcpListener::bind(bind.as_str()).await {
                    Ok(l) => {
                        let port = l.local_addr().map(|a| a.port()).unwrap_or(local);
                        out(&format!("Forwarding from {host}:{port} -> {remote}\n"));
                        listeners.push((l, remote));
                    }
                    Err(e) if *host == "[::1]" => {
                        let _ = e;
                    }
                    Err(e) => return Err(msg(format!("unable to listen on port {local}: {e}"))),
                }
            }
        }
    }
    let mut tasks = Vec::new();
    for (listener, remote) in listeners {
        let api = api.clone();
        let name = name.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let Ok((mut conn, _)) = listener.accept().await else {
                    break;
                };
                let local = listener.local_addr().map(|a| a.port()).unwrap_or(0);
                out(&format!("Handling connection for {local}\n"));
                let api = api.clone();
                let name = name.clone();
                tokio::spawn(async move {
                    let Ok(mut forwarder) = api.portforward(&name, &[remote]).await else {
                        eprintln!("E0000 an error occurred forwarding {local} -> {remote}");
                        return;
                    };
                    if let Some(mut upstream) = forwarder.take_stream(remote) {
                        let _ = tokio::io::copy_bidirectional(&mut conn, &mut upstream).await;
                    }
                    forwarder.abort();
                });
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    Ok(0)
}
