//! `kubectl exec` and `kubectl logs`: the pod's container chosen as kubectl chooses it (`-c`,
//! the `kubectl.kubernetes.io/default-container` annotation, else the first, saying so), the
//! command run over the remote command protocol (WebSocket v5, else SPDY) with standard
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
    let link = connect(session, &ns, name, subresource, query, stdin, terminal).await?;
    let raw = if terminal { RawMode::enable() } else { None };
    let input: Option<Input> = stdin.then(|| Box::pin(tokio::io::stdin()) as Input);
    let status = stream(link, input, None, terminal).await;
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
/// stderr is its own stream unless there is a terminal), as client-go's fallback executor
/// makes it: WebSocket asking for `v5.channel.k8s.io` only, and SPDY where the upgrade to
/// that fails (a server before 1.30, or a v4-only one: v4 cannot end the command's input,
/// SPDY can). `KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false` goes straight to SPDY, as kubectl.
async fn connect(
    session: &Session,
    ns: &str,
    name: &str,
    subresource: &str,
    mut query: Vec<String>,
    stdin: bool,
    terminal: bool,
) -> Result<Link> {
    query.push(format!("stdin={stdin}"));
    query.push("stdout=true".into());
    query.push(format!("stderr={}", !terminal));
    query.push(format!("tty={terminal}"));
    let uri = format!(
        "/api/v1/namespaces/{ns}/pods/{name}/{subresource}?{}",
        query.join("&")
    );
    let client = session.conn.rest.client();
    if !feature_off("KUBECTL_REMOTE_COMMAND_WEBSOCKETS") {
        let request = http::Request::get(&uri)
            .body(Vec::new())
            .map_err(|e| msg(e.to_string()))?;
        match client.connect(request).await {
            Ok(c) if c.supports_stream_close() => return Ok(Link::Ws(Box::new(c))),
            // v4 only, or the upgrade refused: SPDY.
            Ok(_) | Err(kube::Error::Api(_)) | Err(kube::Error::UpgradeConnection(_)) => {}
            Err(e) => return Err(exec_error(e)),
        }
    }
    let mut conn = spdy_upgrade(client, &uri, r8s_api::spdy::REMOTE_COMMAND_V4).await?;
    let mut channels = Vec::new();
    for (kind, channel) in r8s_api::spdy::remote_command_streams(stdin, true, !terminal, terminal) {
        let id = conn
            .writer
            .open(&[("streamType", kind)])
            .await
            .map_err(|e| msg(format!("error creating {kind} stream: {e}")))?;
        channels.push((id, channel));
    }
    Ok(Link::Spdy { conn, channels })
}

/// A SPDY/3.1 connection to `uri` (exec, attach, portforward) through the session's client
/// (its credentials, proxy and TLS), offering the stream `protocol`; the server's refusal as
/// kubectl reports it.
async fn spdy_upgrade(client: &kube::Client, uri: &str, protocol: &str) -> Result<r8s_api::spdy::Connection> {
    let request = http::Request::post(uri)
        .header(http::header::CONNECTION, "Upgrade")
        .header(http::header::UPGRADE, r8s_api::spdy::UPGRADE)
        .header(r8s_api::spdy::PROTOCOL_HEADER, protocol)
        .body(kube::client::Body::from(Vec::new()))
        .map_err(|e| msg(e.to_string()))?;
    let resp = client.send(request).await.map_err(exec_error)?;
    if resp.status() != http::StatusCode::SWITCHING_PROTOCOLS {
        let code = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        // A Status is the server's error; anything else client-go's SPDY dialer reports.
        let is_status = serde_json::from_slice::<Value>(&body).is_ok_and(|s| s["kind"] == "Status");
        return Err(if is_status {
            Error::Api(ApiError::from_response(code, &body))
        } else {
            msg(format!(
                "unable to upgrade connection: {}",
                String::from_utf8_lossy(&body).trim()
            ))
        });
    }
    let protocol = resp
        .headers()
        .get(r8s_api::spdy::PROTOCOL_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let upgraded = hyper::upgrade::on(resp)
        .await
        .map_err(|e| msg(format!("unable to upgrade connection: {e}")))?;
    Ok(r8s_api::spdy::Connection::new(
        hyper_util::rt::TokioIo::new(upgraded),
        protocol,
    ))
}

/// One forwarded connection over SPDY (`portforward.k8s.io`, kubectl's transport where
/// WebSocket is not used): an error stream and a data stream for `port`, the data copied both
/// ways, each side's end passed on as a half-close; what the error stream says, as the error.
async fn spdy_forward(
    client: &kube::Client,
    ns: &str,
    pod: &str,
    port: u16,
    mut local: tokio::net::TcpStream,
) -> Result<()> {
    use r8s_api::spdy::Frame;
    use tokio::io::AsyncWriteExt;
    let uri = format!("/api/v1/namespaces/{ns}/pods/{pod}/portforward");
    let conn = spdy_upgrade(client, &uri, "portforward.k8s.io").await?;
    let (mut reader, mut writer) = (conn.reader, conn.writer);
    let port_text = port.to_string();
    let headers = |kind| {
        [
            ("streamType", kind),
            ("port", port_text.as_str()),
            ("requestID", "0"),
        ]
    };
    let error = writer
        .open(&headers("error"))
        .await
        .map_err(|e| msg(e.to_string()))?;
    // kubectl writes nothing on the error stream.
    writer.finish(error).await.map_err(|e| msg(e.to_string()))?;
    let data = writer
        .open(&headers("data"))
        .await
        .map_err(|e| msg(e.to_string()))?;
    let (mut from_local, mut to_local) = local.split();
    let mut buf = vec![0u8; 32 * 1024];
    let (mut local_open, mut remote_open) = (true, true);
    let mut failure = Vec::new();
    while local_open || remote_open {
        tokio::select! {
            read = from_local.read(&mut buf), if local_open => match read {
                Ok(0) | Err(_) => {
                    local_open = false;
                    let _ = writer.finish(data).await;
                }
                Ok(n) => {
                    if writer.send(data, &buf[..n]).await.is_err() {
                        break;
                    }
                }
            },
            frame = reader.next() => match frame {
                Ok(Some(Frame::Data { stream, fin, data: bytes })) if stream == data => {
                    if !bytes.is_empty() && to_local.write_all(&bytes).await.is_err() {
                        break;
                    }
                    if fin {
                        remote_open = false;
                        let _ = to_local.shutdown().await;
                    }
                }
                Ok(Some(Frame::Data { stream, data: bytes, .. })) if stream == error => {
                    failure.extend_from_slice(&bytes);
                }
                Ok(Some(Frame::Reset { stream, .. })) if stream == data => break,
                Ok(Some(Frame::Ping { id })) if id % 2 == 0 => {
                    let _ = writer.pong(id).await;
                }
                Ok(Some(Frame::GoAway)) | Ok(None) | Err(_) => break,
                Ok(Some(_)) => {}
            },
        }
        if !failure.is_empty() {
            break;
        }
    }
    writer.shutdown().await;
    if failure.is_empty() {
        Ok(())
    } else {
        Err(Error::Raw(String::from_utf8_lossy(&failure).into_owned()))
    }
}

/// Whether kubectl's feature variable `name` (`KUBECTL_REMOTE_COMMAND_WEBSOCKETS`,
/// `KUBECTL_PORT_FORWARD_WEBSOCKETS`) turns the feature off (Go's boolean words for false).
fn feature_off(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| matches!(v.as_str(), "0" | "f" | "F" | "false" | "FALSE" | "False"))
}

/// A remote command's connection.
enum Link {
    /// WebSocket, v5.
    Ws(Box<kube::client::Connection>),
    /// SPDY, with the streams opened and their channel numbers.
    Spdy {
        conn: r8s_api::spdy::Connection,
        channels: Vec<(u32, u8)>,
    },
}

type WsStream = tokio_tungstenite::WebSocketStream<hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>>;

/// The receiving half of a link.
enum Rx {
    Ws(futures::stream::SplitStream<WsStream>),
    Spdy {
        reader: r8s_api::spdy::Reader,
        channels: Vec<(u32, u8)>,
        status: Vec<u8>,
    },
}

/// What came in.
enum Event {
    /// Output on a channel.
    Out(u8, Vec<u8>),
    /// The command's status (`None`: the connection ended without one).
    Done(Option<Value>),
    /// A SPDY ping to answer.
    Ping(u32),
    Nothing,
}

impl Rx {
    async fn next(&mut self) -> Result<Event> {
        use futures::StreamExt;
        use tokio_tungstenite::tungstenite::Message;
        match self {
            Rx::Ws(rx) => {
                let bin = match rx.next().await {
                    Some(Ok(Message::Binary(bin))) => bin,
                    Some(Ok(Message::Close(_))) | None => return Ok(Event::Done(None)),
                    Some(Ok(_)) => return Ok(Event::Nothing),
                    Some(Err(e)) => return Err(msg(format!("error reading from the container: {e}"))),
                };
                Ok(match bin.split_first() {
                    Some((&STATUS, rest)) => Event::Done(serde_json::from_slice(rest).ok()),
                    Some((&channel, rest)) => Event::Out(channel, rest.to_vec()),
                    None => Event::Nothing,
                })
            }
            Rx::Spdy {
                reader,
                channels,
                status,
            } => {
                use r8s_api::spdy::Frame;
                let frame = reader
                    .next()
                    .await
                    .map_err(|e| msg(format!("error reading from the container: {e}")))?;
                let channel_of = |id: u32| channels.iter().find(|(s, _)| *s == id).map(|(_, c)| *c);
                Ok(match frame {
                    None | Some(Frame::GoAway) => Event::Done(serde_json::from_slice(status).ok()),
                    Some(Frame::Data { stream, fin, data }) => match channel_of(stream) {
                        Some(STATUS) => {
                            status.extend_from_slice(&data);
                            if fin {
                                Event::Done(serde_json::from_slice(status).ok())
                            } else {
                                Event::Nothing
                            }
                        }
                        Some(channel) if !data.is_empty() => Event::Out(channel, data.to_vec()),
                        _ => Event::Nothing,
                    },
                    // The server resets the error stream once the status is written.
                    Some(Frame::Reset { stream, .. }) if channel_of(stream) == Some(STATUS) => {
                        Event::Done(serde_json::from_slice(status).ok())
                    }
                    Some(Frame::Ping { id }) if id % 2 == 0 => Event::Ping(id),
                    Some(_) => Event::Nothing,
                })
            }
        }
    }
}

/// The sending half of a link.
enum Tx {
    Ws {
        tx: futures::stream::SplitSink<WsStream, tokio_tungstenite::tungstenite::Message>,
        can_close: bool,
    },
    Spdy {
        writer: r8s_api::spdy::Writer,
        channels: Vec<(u32, u8)>,
    },
}

impl Tx {
    /// Send `data` on `channel` (stdin, resize); false once the link is gone.
    async fn send(&mut self, channel: u8, data: &[u8]) -> bool {
        use futures::SinkExt;
        match self {
            Tx::Ws { tx, .. } => {
                let mut m = Vec::with_capacity(data.len() + 1);
                m.push(channel);
                m.extend_from_slice(data);
                tx.send(tokio_tungstenite::tungstenite::Message::binary(m))
                    .await
                    .is_ok()
            }
            Tx::Spdy { writer, channels } => match channels.iter().find(|(_, c)| *c == channel) {
                Some((id, _)) => writer.send(*id, data).await.is_ok(),
                None => true,
            },
        }
    }

    /// End the input on `channel`: v5's close signal, SPDY's half-close (v4 over WebSocket
    /// has neither and leaves it open, as client-go's v4 executor does).
    async fn close(&mut self, channel: u8) {
        use futures::SinkExt;
        match self {
            Tx::Ws { tx, can_close } => {
                if *can_close {
                    let _ = tx
                        .send(tokio_tungstenite::tungstenite::Message::binary(vec![
                            CLOSE, channel,
                        ]))
                        .await;
                }
            }
            Tx::Spdy { writer, channels } => {
                if let Some((id, _)) = channels.iter().find(|(_, c)| *c == channel) {
                    let _ = writer.finish(*id).await;
                }
            }
        }
    }

    async fn pong(&mut self, id: u32) {
        if let Tx::Spdy { writer, .. } = self {
            let _ = writer.pong(id).await;
        }
    }
}

impl Link {
    fn split(self) -> (Rx, Tx) {
        use futures::StreamExt;
        match self {
            Link::Ws(c) => {
                let can_close = c.supports_stream_close();
                let (tx, rx) = (*c).into_stream().split();
                (Rx::Ws(rx), Tx::Ws { tx, can_close })
            }
            Link::Spdy { conn, channels } => (
                Rx::Spdy {
                    reader: conn.reader,
                    channels: channels.clone(),
                    status: Vec::new(),
                },
                Tx::Spdy {
                    writer: conn.writer,
                    channels,
                },
            ),
        }
    }
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
    let link = connect(session, ns, name, "exec", query, input.is_some(), false).await?;
    let mut output = Vec::new();
    let status = stream(link, input, Some(&mut output), false).await?;
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

use r8s_api::spdy::channel::{CLOSE, ERROR as STATUS, RESIZE, STDERR, STDIN, STDOUT};

/// The remote command protocol's channels over the link, until the status comes (or the
/// connection ends). kube-rs's own loop closes the whole connection at the end of standard
/// input where the server does not speak v5, losing the output still to come; here the end
/// of input is v5's close signal or SPDY's half-close (see `connect`).
async fn stream(
    link: Link,
    input: Option<Input>,
    mut capture: Option<&mut Vec<u8>>,
    terminal: bool,
) -> Result<Option<Value>> {
    let (mut rx, mut tx) = link.split();
    if terminal {
        if let Some((width, height)) = terminal_size() {
            let size = format!("{{\"Width\":{width},\"Height\":{height}}}");
            tx.send(RESIZE, size.as_bytes()).await;
        }
    }
    // The terminal's new size whenever it changes (kubectl's `monitorSize`).
    let mut resized = terminal
        .then(|| tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change()).ok())
        .flatten();
    let mut stdin_open = input.is_some();
    let mut stdin: Input = input.unwrap_or_else(|| Box::pin(tokio::io::empty()));
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        tokio::select! {
            Some(()) = async { resized.as_mut()?.recv().await } => {
                if let Some((width, height)) = terminal_size() {
                    let size = format!("{{\"Width\":{width},\"Height\":{height}}}");
                    tx.send(RESIZE, size.as_bytes()).await;
                }
            }
            event = rx.next() => match event? {
                Event::Out(STDOUT, data) => match capture.as_deref_mut() {
                    Some(buf) => buf.extend_from_slice(&data),
                    None => {
                        let mut out = std::io::stdout().lock();
                        let _ = out.write_all(&data);
                        let _ = out.flush();
                    }
                },
                Event::Out(STDERR, data) => {
                    let _ = std::io::stderr().write_all(&data);
                }
                Event::Done(status) => return Ok(status),
                Event::Ping(id) => tx.pong(id).await,
                Event::Out(..) | Event::Nothing => {}
            },
            read = stdin.read(&mut buf), if stdin_open => {
                match read {
                    Ok(0) | Err(_) => {
                        stdin_open = false;
                        tx.close(STDIN).await;
                    }
                    Ok(n) => {
                        if !tx.send(STDIN, &buf[..n]).await {
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
    target: Option<String>,
    container_arg: Option<String>,
    /// Selector (label query) to filter on (the logs of every pod it selects; `--tail`
    /// defaults to 10 then).
    #[arg(short = 'l', long)]
    selector: Option<String>,
    /// Prefix each log line with the log source (pod name and container name).
    #[arg(long)]
    prefix: bool,
    /// Specify maximum number of concurrent logs to follow when using by a selector. Defaults to 5.
    #[arg(long, default_value_t = 5)]
    max_log_requests: usize,
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
    let usage = |m: &str| Error::Raw(format!("error: {m}\nSee 'kubectl logs -h' for help and examples"));
    let ns = session.conn.namespace.clone();
    let pods: Vec<Value> = match (&a.target, &a.selector) {
        (None, None) => {
            return Err(usage(
                "expected 'logs [-f] [-p] (POD | TYPE/NAME) [-c CONTAINER]'.\nPOD or TYPE/NAME is a required argument for the logs command",
            ))
        }
        (Some(_), Some(_)) if a.container_arg.is_none() => {
            return Err(usage("only a selector (-l) or a POD name is allowed"))
        }
        (Some(target), _) => vec![pod(session, target).await?],
        (None, Some(selector)) => {
            let list = session
                .conn
                .rest
                .get(&format!(
                    "/api/v1/namespaces/{ns}/pods?labelSelector={}",
                    encode(selector)
                ))
                .await?;
            let pods = list["items"].as_array().cloned().unwrap_or_default();
            if pods.is_empty() {
                eprintln!("No resources found in {ns} namespace.");
            }
            pods
        }
    };
    if a.all_containers {
        if let Some(c) = a.container.as_deref().or(a.container_arg.as_deref()) {
            return Err(msg(format!(
                "--all-containers=true should not be specified with container name {c}"
            )));
        }
    }
    if a.container.is_some() && a.container_arg.is_some() {
        return Err(msg("only one of -c or an inline [CONTAINER] arg is allowed"));
    }
    // One request per pod and container.
    let mut sources: Vec<(String, String)> = Vec::new();
    for pod in &pods {
        let name = pod["metadata"]["name"].as_str().unwrap_or("").to_owned();
        if a.all_containers {
            for c in ["initContainers", "containers", "ephemeralContainers"]
                .iter()
                .flat_map(|k| pod["spec"][*k].as_array().cloned().unwrap_or_default())
                .filter_map(|c| c["name"].as_str().map(str::to_owned))
            {
                sources.push((name.clone(), c));
            }
        } else {
            let c = container(pod, a.container.as_deref().or(a.container_arg.as_deref()))?;
            sources.push((name, c));
        }
    }
    if a.follow && sources.len() > 1 && sources.len() > a.max_log_requests {
        return Err(msg(format!(
            "you are attempting to follow {} log streams, but maximum allowed concurrency is {}, use --max-log-requests to increase the limit",
            sources.len(),
            a.max_log_requests
        )));
    }
    let mut query = Vec::new();
    if a.follow {
        query.push("follow=true".to_owned());
    }
    let tail = if a.tail < 0 && a.selector.is_some() {
        10
    } else {
        a.tail
    };
    if tail >= 0 {
        query.push(format!("tailLines={tail}"));
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
    let request = |(pod, c): (String, String)| {
        let mut q = query.clone();
        q.push(format!("container={}", encode(&c)));
        let prefix = a.prefix.then(|| format!("[pod/{pod}/{c}] "));
        async move { copy_log(session, &pod, &q, prefix.as_deref()).await }
    };
    if a.follow && sources.len() > 1 {
        // Followed streams run side by side, their lines interleaved whole (kubectl's
        // parallelConsumeRequest); the first error ends them all.
        futures::future::try_join_all(sources.into_iter().map(request)).await?;
    } else {
        for source in sources {
            request(source).await?;
        }
    }
    Ok(0)
}

/// A container's log (`query` names it) copied to standard output as it comes, each line
/// after `prefix` if there is one (written with its line in one write, as kubectl's
/// prefixing writer, so that parallel streams do not interleave inside a line).
async fn copy_log(session: &Session, name: &str, query: &[String], prefix: Option<&str>) -> Result<()> {
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
    let mut pending: Vec<u8> = Vec::new();
    let write = |bytes: &[u8]| {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(bytes);
        let _ = out.flush();
    };
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { break };
        let Some(data) = frame.data_ref() else { continue };
        // Whole lines only (the log API sends them whole; a split one waits for its end).
        pending.extend_from_slice(data);
        let Some(end) = pending.iter().rposition(|b| *b == b'\n') else {
            continue;
        };
        let lines: Vec<u8> = pending.drain(..=end).collect();
        match prefix {
            None => write(&lines),
            Some(p) => {
                let mut text = Vec::with_capacity(lines.len() + p.len() * 4);
                for line in lines.split_inclusive(|b| *b == b'\n') {
                    text.extend_from_slice(p.as_bytes());
                    text.extend_from_slice(line);
                }
                write(&text);
            }
        }
    }
    if !pending.is_empty() {
        match prefix {
            Some(p) => write(&[p.as_bytes(), &pending[..]].concat()),
            None => write(&pending),
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
        copy_log(session, name, &[format!("container={}", encode(container))], None).await?;
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
    let spdy = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(feature_off(
        "KUBECTL_PORT_FORWARD_WEBSOCKETS",
    )));
    for (listener, remote) in listeners {
        let api = api.clone();
        let name = name.clone();
        let (client, ns) = (session.conn.rest.client().clone(), session.conn.namespace.clone());
        let spdy = spdy.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let Ok((mut conn, _)) = listener.accept().await else {
                    break;
                };
                let local = listener.local_addr().map(|a| a.port()).unwrap_or(0);
                out(&format!("Handling connection for {local}\n"));
                let api = api.clone();
                let name = name.clone();
                let (client, ns) = (client.clone(), ns.clone());
                let spdy = spdy.clone();
                tokio::spawn(async move {
                    // WebSocket (kube-rs's v4 port-forward) unless it is off or was refused;
                    // then SPDY, as kubectl's fallback dialer.
                    if !spdy.load(std::sync::atomic::Ordering::Relaxed) {
                        match api.portforward(&name, &[remote]).await {
                            Ok(mut forwarder) => {
                                if let Some(mut upstream) = forwarder.take_stream(remote) {
                                    let _ = tokio::io::copy_bidirectional(&mut conn, &mut upstream).await;
                                }
                                forwarder.abort();
                                return;
                            }
                            Err(kube::Error::Api(_)) | Err(kube::Error::UpgradeConnection(_)) => {
                                spdy.store(true, std::sync::atomic::Ordering::Relaxed);
                            }
                            Err(_) => {
                                eprintln!("E0000 an error occurred forwarding {local} -> {remote}");
                                return;
                            }
                        }
                    }
                    if let Err(e) = spdy_forward(&client, &ns, &name, remote, conn).await {
                        let why = match e {
                            Error::Raw(m) | Error::Message(m) => m,
                            other => other.to_string(),
                        };
                        eprintln!("E0000 an error occurred forwarding {local} -> {remote}: {why}");
                    }
                });
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    Ok(0)
}
