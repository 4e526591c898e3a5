//! WebSocket `v5.channel.k8s.io` in front, SPDY behind: how `exec` and `attach` get an end of
//! input through to a runtime that speaks only the older protocols.
//!
//! kubectl from 1.30 runs exec and attach over WebSocket and prefers `v5.channel.k8s.io`,
//! whose one addition is a close signal (`[255, channel]`) that ends a stream's input. A
//! runtime's streaming server of containerd 1.6's age knows WebSocket only up to v4, which
//! has no way to say "end of input": `echo hi | kubectl exec -i pod -- cat` would wait
//! forever, and so would `kubectl cp` into a pod (tar reads to the end of its input). Over
//! SPDY a stream is half-closed instead. Upstream solves it in the API server
//! (`StreamTranslatorProxy`: the client's WebSocket v5 in, SPDY to the kubelet, which passes
//! it to the runtime); r8s's API server passes the upgrade through untouched, so the
//! kubelet, which talks to the runtime, translates: it answers the client's WebSocket itself
//! with v5, opens SPDY (`v4.channel.k8s.io`) to the runtime's URL with the streams the request
//! asks for, and copies between them — stdin and resize in, stdout, stderr and the status
//! (the error stream) out, the close signal as the stdin stream's FIN.

use std::convert::Infallible;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http::{header, HeaderMap, Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use r8s_api::spdy;

use crate::server::{refused, text};
use tokio_tungstenite::tungstenite::protocol::{frame::coding::CloseCode, CloseFrame, Role};
use tokio_tungstenite::tungstenite::Message;

type Body = BoxBody<Bytes, Infallible>;

/// The protocol the client side speaks.
pub const V5: &str = "v5.channel.k8s.io";

use r8s_api::spdy::channel::{CLOSE, ERROR, RESIZE, STDERR, STDIN, STDOUT};

/// Whether the request is a WebSocket upgrade that offers `v5.channel.k8s.io`.
pub fn offers_v5(headers: &HeaderMap) -> bool {
    let websocket = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    websocket
        && headers
            .get_all(header::SEC_WEBSOCKET_PROTOCOL)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|p| p.trim() == V5)
}

/// The streams of a remote command, as the request's query asks for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Streams {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// Serve `req` (a WebSocket upgrade offering v5) through SPDY to the runtime's streaming
/// server at `host` + `path` (plain HTTP on loopback).
pub async fn serve(mut req: Request<Incoming>, host: &str, path: &str, streams: Streams) -> Response<Body> {
    let Some(key) = req.headers().get(header::SEC_WEBSOCKET_KEY).cloned() else {
        return text(StatusCode::BAD_REQUEST, "missing Sec-WebSocket-Key");
    };
    let tcp = match tokio::net::TcpStream::connect(host).await {
        Ok(t) => t,
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, format!("dial {host}: {e}")),
    };
    let conn = match spdy::upgrade(tcp, host, path, &[spdy::REMOTE_COMMAND_V4], &[]).await {
        Ok(c) => c,
        Err(spdy::UpgradeError::Refused {
            status,
            content_type,
            body,
        }) => return refused(status, content_type, body),
        Err(spdy::UpgradeError::Failed(e)) => return text(StatusCode::INTERNAL_SERVER_ERROR, e),
    };
    let spdy::Connection {
        reader, mut writer, ..
    } = conn;
    // The runtime waits for exactly the streams the command was started with.
    let mut channels = Vec::new();
    let plan = spdy::remote_command_streams(streams.stdin, streams.stdout, streams.stderr, streams.tty);
    for (kind, channel) in plan {
        match writer.open(&[("streamType", kind)]).await {
            Ok(id) => channels.push((id, channel)),
            Err(e) => {
                return text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("creating the {kind} stream: {e}"),
                )
            }
        }
    }
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let client = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(upgraded) = client.await else {
            writer.shutdown().await;
            return;
        };
        let ws =
            tokio_tungstenite::WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None)
                .await;
        copy(ws, reader, writer, channels).await;
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::UPGRADE, "websocket")
        .header(header::CONNECTION, "Upgrade")
        .header(header::SEC_WEBSOCKET_ACCEPT, accept)
        .header(header::SEC_WEBSOCKET_PROTOCOL, V5)
        .body(Full::new(Bytes::new()).boxed())
        .expect("valid response")
}

/// Copy between the client's WebSocket and the runtime's SPDY streams until the runtime is
/// done (its error stream and output streams ended, or the connection closed) or the client
/// goes away.
async fn copy<S>(
    ws: tokio_tungstenite::WebSocketStream<S>,
    mut reader: spdy::Reader,
    mut writer: spdy::Writer,
    channels: Vec<(u32, u8)>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut tx, mut rx) = ws.split();
    let stream_of = |channel: u8| channels.iter().find(|(_, c)| *c == channel).map(|(id, _)| *id);
    let channel_of = |stream: u32| channels.iter().find(|(id, _)| *id == stream).map(|(_, c)| *c);
    // Streams the runtime has yet to end: the error stream and the outputs.
    let mut open: Vec<u32> = channels
        .iter()
        .filter(|(_, c)| matches!(*c, ERROR | STDOUT | STDERR))
        .map(|(id, _)| *id)
        .collect();
    // The status is sent whole, in one message, once its stream ends (clients decode the
    // first message on the channel).
    let mut status = Vec::new();
    let mut client_open = true;
    loop {
        tokio::select! {
            frame = reader.next() => {
                let frame = match frame {
                    Ok(Some(f)) => f,
                    Ok(None) => break,
                    Err(e) => {
                        tracing::debug!(error = %e, "exec translation: the runtime's SPDY stream failed");
                        break;
                    }
                };
                tracing::trace!(?frame, "exec translation: from the runtime");
                match frame {
                    spdy::Frame::Data { stream, fin, data } => {
                        match channel_of(stream) {
                            Some(ERROR) => status.extend_from_slice(&data),
                            Some(channel @ (STDOUT | STDERR)) if !data.is_empty() => {
                                let mut m = Vec::with_capacity(data.len() + 1);
                                m.push(channel);
                                m.extend_from_slice(&data);
                                if tx.send(Message::binary(m)).await.is_err() {
                                    client_open = false;
                                    break;
                                }
                            }
                            _ => {}
                        }
                        if fin {
                            open.retain(|s| *s != stream);
                        }
                    }
                    spdy::Frame::Reply { stream, fin: true } | spdy::Frame::Reset { stream, .. } => {
                        open.retain(|s| *s != stream);
                    }
                    spdy::Frame::Ping { id } if id % 2 == 0 => {
                        let _ = writer.pong(id).await;
                    }
                    spdy::Frame::GoAway => break,
                    _ => {}
                }
                if open.is_empty() {
                    break;
                }
            }
            message = rx.next(), if client_open => {
                // Text frames carry the channel byte the same way (the Python client writes
                // a str's stdin as text; upstream's server reads either).
                let bin = match message {
                    Some(Ok(Message::Binary(bin))) => bin,
                    Some(Ok(Message::Text(text))) => Bytes::from(text.as_str().as_bytes().to_vec()),
                    Some(Ok(Message::Close(_))) => {
                        // Answer the close (tungstenite queued the reply) before going.
                        let _ = tx.close().await;
                        client_open = false;
                        break;
                    }
                    None | Some(Err(_)) => {
                        client_open = false;
                        break;
                    }
                    Some(Ok(_)) => continue,
                };
                let Some((&channel, data)) = bin.split_first() else { continue };
                let sent = match channel {
                    CLOSE => match data.first().and_then(|c| stream_of(*c)) {
                        Some(id) if data[0] == STDIN => writer.finish(id).await,
                        _ => Ok(()),
                    },
                    STDIN | RESIZE => match stream_of(channel) {
                        Some(id) if !data.is_empty() => writer.send(id, data).await,
                        _ => Ok(()),
                    },
                    _ => Ok(()),
                };
                if sent.is_err() {
                    break;
                }
            }
        }
    }
    if client_open {
        if !status.is_empty() {
            let mut m = Vec::with_capacity(status.len() + 1);
            m.push(ERROR);
            m.extend_from_slice(&status);
            let _ = tx.send(Message::binary(m)).await;
        }
        let _ = tx
            .send(Message::Close(Some(CloseFrame {
                code: CloseCode::Normal,
                reason: "".into(),
            })))
            .await;
    }
    writer.shutdown().await;
}

/// Entry point for the fuzz target `websocket` in `fuzz/` (not an API): an exec session's
/// translation fed from both ends. The input up to its first `0xFF 0x00 0xFF` is what the
/// client sends on its WebSocket (raw frames, masked as a client's must be), the rest what the
/// runtime sends on its SPDY connection (frames on streams 1, 3, 5, 7: stdin, stdout, stderr,
/// error). Each side then ends; the session must end too, whatever came, within 5 s.
#[doc(hidden)]
pub fn fuzz_session(data: &[u8]) {
    use std::sync::OnceLock;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    let rt = RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    });
    let (from_client, from_runtime) = match data.windows(3).position(|w| w == [0xff, 0, 0xff]) {
        Some(at) => (&data[..at], &data[at + 3..]),
        None => (data, &[][..]),
    };
    rt.block_on(async {
        let (mut client, kubelet_ws) = tokio::io::duplex(1 << 20);
        let (mut runtime, kubelet_spdy) = tokio::io::duplex(1 << 20);
        let spdy::Connection { reader, writer, .. } =
            spdy::Connection::new(kubelet_spdy, spdy::REMOTE_COMMAND_V4.to_owned());
        let channels = vec![(1, STDIN), (3, STDOUT), (5, STDERR), (7, ERROR), (9, RESIZE)];
        let (client_in, runtime_in) = (from_client.to_vec(), from_runtime.to_vec());
        // Each far end sends its bytes, ends its side, and reads whatever comes back.
        let client_end = tokio::spawn(async move {
            let _ = client.write_all(&client_in).await;
            let _ = client.shutdown().await;
            let mut sink = Vec::new();
            let _ = client.read_to_end(&mut sink).await;
        });
        let runtime_end = tokio::spawn(async move {
            let _ = runtime.write_all(&runtime_in).await;
            let _ = runtime.shutdown().await;
            let mut sink = Vec::new();
            let _ = runtime.read_to_end(&mut sink).await;
        });
        let ws = tokio_tungstenite::WebSocketStream::from_raw_socket(kubelet_ws, Role::Server, None).await;
        let session = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            copy(ws, reader, writer, channels),
        );
        assert!(
            session.await.is_ok(),
            "the session did not end when both sides had"
        );
        client_end.abort();
        runtime_end.abort();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The websocket fuzz corpus (and every input it once crashed on) goes through again.
    #[test]
    fn the_websocket_corpus_replays_without_a_panic() {
        assert!(r8s_api::fuzzing::replay("websocket", fuzz_session) > 0);
    }

    #[test]
    fn v5_is_recognised_among_the_offered_protocols() {
        let mut h = HeaderMap::new();
        h.insert(header::UPGRADE, "websocket".parse().unwrap());
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            "v5.channel.k8s.io, v4.channel.k8s.io".parse().unwrap(),
        );
        assert!(offers_v5(&h));
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            "v4.channel.k8s.io".parse().unwrap(),
        );
        assert!(!offers_v5(&h));
        h.insert(header::SEC_WEBSOCKET_PROTOCOL, V5.parse().unwrap());
        h.insert(header::UPGRADE, "SPDY/3.1".parse().unwrap());
        assert!(!offers_v5(&h), "a SPDY upgrade passes through");
    }
}
