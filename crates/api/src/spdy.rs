//! The client side of SPDY/3.1 as Kubernetes streams use it (moby/spdystream under client-go's
//! `httpstream/spdy`): an HTTP/1.1 upgrade to `SPDY/3.1` with the stream protocol versions
//! offered in `X-Stream-Protocol-Version`, then streams the client opens (SYN_STREAM with a
//! `streamtype` header and the like), data on them, and a half-close (a DATA frame with FIN)
//! that the far side reads as the end of that stream's input.
//!
//! Written here because no maintained Rust crate speaks SPDY (it was retired in favour of
//! HTTP/2), while Kubernetes still uses it between the kubelet and the runtime's streaming
//! server and as kubectl's transport for older servers. Only what a client of those servers
//! needs is here:
//! - header blocks are sent as *stored* deflate blocks of the connection's one zlib stream,
//!   without the SPDY dictionary (a zlib stream that does not ask for a preset dictionary is
//!   read without one; spdystream's `zlib.NewReaderDict` accepts it), so no compressor is
//!   needed;
//! - the server's header blocks (its SYN_REPLY, HEADERS) are skipped unread: the streams of
//!   exec, attach and port-forward carry nothing a client needs in them, and skipping them
//!   means no inflater with the SPDY dictionary either;
//! - flow control (WINDOW_UPDATE) is not sent or obeyed: spdystream implements none.

use bytes::{Buf, Bytes, BytesMut};
use http::{header, Request, StatusCode};
use http_body_util::Empty;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The `Upgrade` header's protocol.
pub const UPGRADE: &str = "SPDY/3.1";
/// The header that offers (request) and names (101) the stream protocol.
pub const PROTOCOL_HEADER: &str = "x-stream-protocol-version";

const VERSION: u16 = 3;
const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const FLAG_FIN: u8 = 0x01;
/// The largest payload a frame's 24-bit length can say.
const MAX_DATA: usize = 0xff_ffff;

/// A frame from the server, as far as a client cares.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// Data on a stream; `fin` ends the server's side of it.
    Data { stream: u32, fin: bool, data: Bytes },
    /// The server accepted a stream (`fin`: and will send nothing on it).
    Reply { stream: u32, fin: bool },
    /// The server reset a stream.
    Reset { stream: u32, status: u32 },
    /// A ping, to be answered with the same id if the server sent it (an even id).
    Ping { id: u32 },
    /// The server is going away.
    GoAway,
    /// Anything else (SETTINGS, HEADERS, WINDOW_UPDATE, a server-opened stream): ignored.
    Other,
}

/// The next frame at the front of `buf`, and how many bytes it took; `None` while the frame
/// is not complete yet.
pub fn parse(buf: &[u8]) -> Result<Option<(Frame, usize)>, String> {
    if buf.len() < 8 {
        return Ok(None);
    }
    let len = (u32::from_be_bytes([0, buf[5], buf[6], buf[7]])) as usize;
    if buf.len() < 8 + len {
        return Ok(None);
    }
    let flags = buf[4];
    let payload = &buf[8..8 + len];
    let word = |i: usize| -> Result<u32, String> {
        payload
            .get(i..i + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or_else(|| format!("short SPDY control frame ({len} bytes)"))
    };
    let frame = if buf[0] & 0x80 == 0 {
        Frame::Data {
            stream: u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]),
            fin: flags & FLAG_FIN != 0,
            data: Bytes::copy_from_slice(payload),
        }
    } else {
        let version = u16::from_be_bytes([buf[0] & 0x7f, buf[1]]);
        if version != VERSION {
            return Err(format!("SPDY version {version} (not 3)"));
        }
        match u16::from_be_bytes([buf[2], buf[3]]) {
            SYN_REPLY => Frame::Reply {
                stream: word(0)? & 0x7fff_ffff,
                fin: flags & FLAG_FIN != 0,
            },
            RST_STREAM => Frame::Reset {
                stream: word(0)? & 0x7fff_ffff,
                status: word(4)?,
            },
            PING => Frame::Ping { id: word(0)? },
            GOAWAY => Frame::GoAway,
            _ => Frame::Other,
        }
    };
    Ok(Some((frame, 8 + len)))
}

fn control(kind: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + payload.len());
    out.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.push(flags);
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    out.extend_from_slice(payload);
    out
}

/// DATA frames for `data` on `stream` (split at the frame size limit), the last with FIN if
/// `fin`; an empty `data` with `fin` is the bare half-close.
pub fn data(stream: u32, fin: bool, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 8);
    let mut chunks: Vec<&[u8]> = data.chunks(MAX_DATA).collect();
    if chunks.is_empty() {
        chunks.push(&[]);
    }
    let last = chunks.len() - 1;
    for (i, chunk) in chunks.into_iter().enumerate() {
        out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
        out.push(if fin && i == last { FLAG_FIN } else { 0 });
        out.extend_from_slice(&(chunk.len() as u32).to_be_bytes()[1..]);
        out.extend_from_slice(chunk);
    }
    out
}

/// The answer to a server's PING.
pub fn ping(id: u32) -> Vec<u8> {
    control(PING, 0, &id.to_be_bytes())
}

/// The connection's outgoing header compression: one zlib stream for all header blocks, each
/// block stored (uncompressed) deflate blocks ending in a sync flush, as a compressor's flush
/// would leave them.
#[derive(Default)]
pub struct HeaderEncoder {
    started: bool,
}

impl HeaderEncoder {
    /// The next header block for `headers` (names are sent lower-case, as SPDY requires).
    pub fn block(&mut self, headers: &[(&str, &str)]) -> Vec<u8> {
        let mut raw = Vec::new();
        raw.extend_from_slice(&(headers.len() as u32).to_be_bytes());
        for (name, value) in headers {
            let name = name.to_ascii_lowercase();
            raw.extend_from_slice(&(name.len() as u32).to_be_bytes());
            raw.extend_from_slice(name.as_bytes());
            raw.extend_from_slice(&(value.len() as u32).to_be_bytes());
            raw.extend_from_slice(value.as_bytes());
        }
        let mut out = Vec::with_capacity(raw.len() + 8);
        if !self.started {
            // CMF 0x78 (deflate, 32 KiB window), FLG 0x01: no preset dictionary, and
            // 0x7801 is a multiple of 31 as RFC 1950 requires.
            out.extend_from_slice(&[0x78, 0x01]);
            self.started = true;
        }
        // BFINAL 0, BTYPE 00 (stored), padded to the byte; LEN and its complement. Then an
        // empty stored block, as a sync flush ends: Go's inflater hands a stored block's
        // bytes over only once it has read the next block's header, which must therefore be
        // inside this frame.
        for chunk in raw.chunks(0xffff).chain([&[][..]]) {
            out.push(0);
            let len = chunk.len() as u16;
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(&(!len).to_le_bytes());
            out.extend_from_slice(chunk);
        }
        out
    }

    /// A SYN_STREAM opening `stream` (odd ids: the client's) with `headers`; `fin` if the
    /// client will send nothing on it.
    pub fn syn_stream(&mut self, stream: u32, headers: &[(&str, &str)], fin: bool) -> Vec<u8> {
        let mut payload = Vec::new();
        payload.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
        payload.extend_from_slice(&0u32.to_be_bytes()); // associated-to stream
        payload.extend_from_slice(&[0, 0]); // priority 0, slot 0
        payload.extend_from_slice(&self.block(headers));
        control(SYN_STREAM, if fin { FLAG_FIN } else { 0 }, &payload)
    }
}

/// The remote command protocol's channels (WebSocket's first byte; SPDY's streams by type).
pub mod channel {
    pub const STDIN: u8 = 0;
    pub const STDOUT: u8 = 1;
    pub const STDERR: u8 = 2;
    /// The error stream: the command's status.
    pub const ERROR: u8 = 3;
    pub const RESIZE: u8 = 4;
    /// v5's close signal, followed by the channel closed.
    pub const CLOSE: u8 = 255;
}

/// The remote command protocol's stream protocol over SPDY (client-go's SPDY executor and
/// the kubelet's server speak it; the streams are what WebSocket calls channels).
pub const REMOTE_COMMAND_V4: &str = "v4.channel.k8s.io";

/// The streams of a remote command (`exec`, `attach`) a client opens, in client-go's order,
/// each with its `streamType` and its WebSocket channel number: the error stream (the
/// command's status) always, stdin, stdout and stderr as asked — stderr not with a terminal,
/// which folds it into stdout (upstream's `NewOptions`) — and the resize stream with one.
pub fn remote_command_streams(stdin: bool, stdout: bool, stderr: bool, tty: bool) -> Vec<(&'static str, u8)> {
    let mut out = vec![("error", channel::ERROR)];
    if stdin {
        out.push(("stdin", channel::STDIN));
    }
    if stdout {
        out.push(("stdout", channel::STDOUT));
    }
    if stderr && !tty {
        out.push(("stderr", channel::STDERR));
    }
    if tty {
        out.push(("resize", channel::RESIZE));
    }
    out
}

/// Why an upgrade did not happen.
#[derive(Debug)]
pub enum UpgradeError {
    /// The server answered without switching: its status, content type and body (at most
    /// 64 KiB), to be passed on.
    Refused {
        status: StatusCode,
        content_type: Option<String>,
        body: Bytes,
    },
    /// The connection failed.
    Failed(String),
}

/// An upgraded SPDY connection: the reading side frames arrive on, the writing side frames
/// are sent on.
pub struct Connection {
    /// The stream protocol the server chose (`X-Stream-Protocol-Version` of its 101).
    pub protocol: String,
    pub reader: Reader,
    pub writer: Writer,
}

/// Ask for a SPDY upgrade of `path_and_query` on `host` over `io` (a `POST`, as client-go's
/// executor sends it), offering `protocols` in order of preference, with `extra` headers.
pub async fn upgrade<S>(
    io: S,
    host: &str,
    path_and_query: &str,
    protocols: &[&str],
    extra: &[(http::HeaderName, http::HeaderValue)],
) -> Result<Connection, UpgradeError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let failed = |e: &dyn std::fmt::Display| UpgradeError::Failed(e.to_string());
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| failed(&e))?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    let mut req = Request::post(path_and_query)
        .header(header::HOST, host)
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, UPGRADE);
    for p in protocols {
        req = req.header(PROTOCOL_HEADER, *p);
    }
    for (name, value) in extra {
        req = req.header(name, value);
    }
    let req = req.body(Empty::<Bytes>::new()).map_err(|e| failed(&e))?;
    let mut resp = sender.send_request(req).await.map_err(|e| failed(&e))?;
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        let (status, content_type, body) = crate::upgrade::refusal(resp).await;
        return Err(UpgradeError::Refused {
            status,
            content_type,
            body,
        });
    }
    let protocol = resp
        .headers()
        .get(PROTOCOL_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let upgraded = hyper::upgrade::on(&mut resp).await.map_err(|e| failed(&e))?;
    Ok(Connection::new(TokioIo::new(upgraded), protocol))
}

impl Connection {
    /// A connection over `io`, already switched to SPDY (with `protocol` chosen).
    pub fn new<S>(io: S, protocol: String) -> Connection
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (r, w) = tokio::io::split(io);
        Connection {
            protocol,
            reader: Reader {
                io: Box::new(r),
                buf: BytesMut::with_capacity(64 * 1024),
            },
            writer: Writer {
                io: Box::new(w),
                headers: HeaderEncoder::default(),
                next_stream: 1,
            },
        }
    }
}

/// The reading side of a connection.
pub struct Reader {
    io: Box<dyn AsyncRead + Send + Unpin>,
    buf: BytesMut,
}

impl Reader {
    /// The next frame; `None` at the end of the connection.
    pub async fn next(&mut self) -> Result<Option<Frame>, String> {
        loop {
            if let Some((frame, used)) = parse(&self.buf)? {
                self.buf.advance(used);
                return Ok(Some(frame));
            }
            let n = self.io.read_buf(&mut self.buf).await.map_err(|e| e.to_string())?;
            if n == 0 {
                return Ok(None);
            }
        }
    }
}

/// The writing side of a connection.
pub struct Writer {
    io: Box<dyn AsyncWrite + Send + Unpin>,
    headers: HeaderEncoder,
    next_stream: u32,
}

impl Writer {
    /// Open a stream with `headers`: its id.
    pub async fn open(&mut self, headers: &[(&str, &str)]) -> std::io::Result<u32> {
        let id = self.next_stream;
        self.next_stream += 2;
        let frame = self.headers.syn_stream(id, headers, false);
        self.io.write_all(&frame).await?;
        self.io.flush().await?;
        Ok(id)
    }

    /// Send `bytes` on `stream`.
    pub async fn send(&mut self, stream: u32, bytes: &[u8]) -> std::io::Result<()> {
        self.io.write_all(&data(stream, false, bytes)).await?;
        self.io.flush().await
    }

    /// End the client's side of `stream` (the far side reads the end of its input).
    pub async fn finish(&mut self, stream: u32) -> std::io::Result<()> {
        self.io.write_all(&data(stream, true, &[])).await?;
        self.io.flush().await
    }

    /// Answer a server's ping.
    pub async fn pong(&mut self, id: u32) -> std::io::Result<()> {
        self.io.write_all(&ping(id)).await?;
        self.io.flush().await
    }

    /// Close the connection.
    pub async fn shutdown(&mut self) {
        let _ = self.io.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The raw header block inside a stored-block zlib piece (what a zlib reader gives back);
    /// the piece must end with the empty block of a sync flush.
    fn stored_payload(mut piece: &[u8]) -> Vec<u8> {
        assert!(
            piece.ends_with(&[0, 0, 0, 0xff, 0xff]),
            "no sync flush: {piece:?}"
        );
        let mut out = Vec::new();
        while !piece.is_empty() {
            assert_eq!(piece[0], 0, "BFINAL 0, BTYPE stored");
            let len = u16::from_le_bytes([piece[1], piece[2]]);
            let nlen = u16::from_le_bytes([piece[3], piece[4]]);
            assert_eq!(len, !nlen);
            out.extend_from_slice(&piece[5..5 + len as usize]);
            piece = &piece[5 + len as usize..];
        }
        out
    }

    #[test]
    fn syn_stream_frames_as_spdystream_reads_them() {
        let mut enc = HeaderEncoder::default();
        let f = enc.syn_stream(3, &[("streamType", "stdin")], false);
        // Control bit and version 3, type 1, no flags, length of the rest.
        assert_eq!(&f[..4], &[0x80, 0x03, 0x00, 0x01]);
        assert_eq!(f[4], 0);
        let len = u32::from_be_bytes([0, f[5], f[6], f[7]]) as usize;
        assert_eq!(len, f.len() - 8);
        assert_eq!(&f[8..12], &3u32.to_be_bytes());
        assert_eq!(&f[12..16], &[0, 0, 0, 0]);
        assert_eq!(&f[16..18], &[0, 0]);
        // The zlib stream starts here: a header that asks for no dictionary ...
        let (cmf, flg) = (f[18], f[19]);
        assert_eq!((u16::from(cmf) << 8 | u16::from(flg)) % 31, 0);
        assert_eq!(flg & 0x20, 0, "no preset dictionary");
        // ... then the block: one pair, the name lower-cased.
        let raw = stored_payload(&f[20..]);
        let mut want = 1u32.to_be_bytes().to_vec();
        want.extend_from_slice(&10u32.to_be_bytes());
        want.extend_from_slice(b"streamtype");
        want.extend_from_slice(&5u32.to_be_bytes());
        want.extend_from_slice(b"stdin");
        assert_eq!(raw, want);
        // The second block continues the same stream: no second zlib header.
        let g = enc.syn_stream(5, &[], true);
        assert_eq!(g[4], FLAG_FIN);
        assert_eq!(stored_payload(&g[18..]), 0u32.to_be_bytes());
    }

    #[test]
    fn data_frames_and_half_close() {
        assert_eq!(data(5, false, b"hi"), [0, 0, 0, 5, 0, 0, 0, 2, b'h', b'i']);
        assert_eq!(data(5, true, b""), [0, 0, 0, 5, FLAG_FIN, 0, 0, 0]);
        let (frame, used) = parse(&data(7, true, b"abc")).unwrap().unwrap();
        assert_eq!(used, 11);
        assert_eq!(
            frame,
            Frame::Data {
                stream: 7,
                fin: true,
                data: Bytes::from_static(b"abc")
            }
        );
    }

    #[test]
    fn server_frames_parse_and_wait_for_their_end() {
        // SYN_REPLY for stream 1 (its header block skipped unread).
        let reply = control(SYN_REPLY, 0, &[0, 0, 0, 1, 0x78, 0xbb, 1, 2, 3]);
        assert_eq!(parse(&reply[..reply.len() - 1]).unwrap(), None);
        assert_eq!(
            parse(&reply).unwrap(),
            Some((
                Frame::Reply {
                    stream: 1,
                    fin: false
                },
                reply.len()
            ))
        );
        let rst = control(RST_STREAM, 0, &[0, 0, 0, 3, 0, 0, 0, 5]);
        assert_eq!(
            parse(&rst).unwrap().unwrap().0,
            Frame::Reset { stream: 3, status: 5 }
        );
        assert_eq!(parse(&ping(2)).unwrap().unwrap().0, Frame::Ping { id: 2 });
        let settings = control(4, 0, &[0, 0, 0, 0]);
        assert_eq!(parse(&settings).unwrap().unwrap().0, Frame::Other);
        let v2 = [0x80, 0x02, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1];
        assert!(parse(&v2).is_err());
        assert!(parse(&control(RST_STREAM, 0, &[0, 0])).is_err());
    }

    #[test]
    fn remote_command_streams_follow_the_request() {
        let names = |p: Vec<(&'static str, u8)>| p.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
        assert_eq!(
            names(remote_command_streams(true, true, true, false)),
            ["error", "stdin", "stdout", "stderr"]
        );
        assert_eq!(
            names(remote_command_streams(false, true, false, false)),
            ["error", "stdout"]
        );
        // A terminal folds stderr into stdout and brings the resize stream.
        assert_eq!(
            remote_command_streams(true, true, true, true),
            [("error", 3), ("stdin", 0), ("stdout", 1), ("resize", 4)]
        );
    }

    #[test]
    fn large_data_is_split_at_the_frame_limit() {
        let big = vec![7u8; MAX_DATA + 10];
        let frames = data(1, true, &big);
        let (first, used) = parse(&frames).unwrap().unwrap();
        let Frame::Data { fin, data: d, .. } = first else {
            panic!()
        };
        assert!(!fin);
        assert_eq!(d.len(), MAX_DATA);
        let (second, _) = parse(&frames[used..]).unwrap().unwrap();
        let Frame::Data { fin, data: d, .. } = second else {
            panic!()
        };
        assert!(fin);
        assert_eq!(d.len(), 10);
    }
}
