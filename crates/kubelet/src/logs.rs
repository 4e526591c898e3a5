//! Container logs as `kubectl logs` gets them (upstream `pkg/kubelet/kuberuntime/logs`):
//! containerd writes each container's output to its CRI log file, one record per line —
//! `<RFC3339Nano time> <stdout|stderr> <P|F> <text>`, `P` for a partial line continued by the
//! next record — and this module reads those files back with the options of the pods/log
//! subresource: tailLines, timestamps, sinceSeconds/sinceTime, limitBytes, follow.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;

/// The options of a log request (upstream `PodLogOptions`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogOptions {
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    pub tail_lines: Option<i64>,
    pub limit_bytes: Option<i64>,
    /// Only records at or after this time.
    pub since: Option<jiff::Timestamp>,
}

impl LogOptions {
    /// From a query string such as `follow=true&tailLines=10`.
    pub fn from_query(query: &str) -> Result<Self, String> {
        let mut o = LogOptions::default();
        let mut since_seconds = None;
        let mut since_time = None;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = percent_decode(v);
            let flag = |v: &str| -> Result<bool, String> {
                match v {
                    "" | "true" | "1" => Ok(true),
                    "false" | "0" => Ok(false),
                    _ => Err(format!("invalid boolean value {v:?} for {k}")),
                }
            };
            let int = |v: &str| -> Result<i64, String> {
                v.parse::<i64>()
                    .map_err(|_| format!("invalid integer value {v:?} for {k}"))
            };
            match k {
                "follow" => o.follow = flag(&v)?,
                "previous" => o.previous = flag(&v)?,
                "timestamps" => o.timestamps = flag(&v)?,
                "tailLines" => o.tail_lines = Some(int(&v)?),
                "limitBytes" => o.limit_bytes = Some(int(&v)?),
                "sinceSeconds" => since_seconds = Some(int(&v)?),
                "sinceTime" => {
                    since_time = Some(
                        v.parse::<jiff::Timestamp>()
                            .map_err(|e| format!("invalid sinceTime {v:?}: {e}"))?,
                    )
                }
                _ => {}
            }
        }
        o.since = match (since_seconds, since_time) {
            (Some(s), _) => Some(jiff::Timestamp::now() - jiff::SignedDuration::from_secs(s)),
            (None, t) => t,
        };
        Ok(o)
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(v) => {
                        out.push(v);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One record of a CRI log file.
#[derive(Debug, PartialEq, Eq)]
pub struct Record<'a> {
    pub time: &'a str,
    pub stream: &'a str,
    pub partial: bool,
    pub text: &'a [u8],
}

/// Parse one line of a CRI log file (without its newline).
pub fn parse_record(line: &[u8]) -> Option<Record<'_>> {
    let mut parts = line.splitn(4, |b| *b == b' ');
    let time = std::str::from_utf8(parts.next()?).ok()?;
    let stream = std::str::from_utf8(parts.next()?).ok()?;
    let tag = parts.next()?;
    let text = parts.next().unwrap_or(b"");
    if !matches!(stream, "stdout" | "stderr") {
        return None;
    }
    Some(Record {
        time,
        stream,
        partial: tag.split(|b| *b == b':').next() == Some(b"P"),
        text,
    })
}

/// Turns CRI records into what the user sees: partial records joined into their line, a
/// timestamp in front when asked, records before `since` left out.
#[derive(Default)]
pub struct Renderer {
    timestamps: bool,
    since: Option<jiff::Timestamp>,
    /// A line begun by partial records: its first record's time and its text so far.
    pending: Option<(String, Vec<u8>)>,
}

impl Renderer {
    pub fn new(o: &LogOptions) -> Self {
        Self {
            timestamps: o.timestamps,
            since: o.since,
            pending: None,
        }
    }

    /// What partial records began and none ended: the text as written, without a newline
    /// (upstream's kubelet writes each record as it comes, so `echo -n DONE` reads "DONE").
    pub fn finish(&mut self) -> Option<Vec<u8>> {
        let (time, text) = self.pending.take()?;
        if let Some(since) = self.since {
            if time.parse::<jiff::Timestamp>().is_ok_and(|t| t < since) {
                return None;
            }
        }
        Some(if self.timestamps {
            [time.as_bytes(), b" ", &text].concat()
        } else {
            text
        })
    }

    /// Feed one file line; returns a whole output line when one is complete.
    pub fn line(&mut self, raw: &[u8]) -> Option<Vec<u8>> {
        let r = parse_record(raw)?;
        let (time, mut text) = match self.pending.take() {
            Some((t, mut so_far)) => {
                so_far.extend_from_slice(r.text);
                (t, so_far)
            }
            None => (r.time.to_string(), r.text.to_vec()),
        };
        if r.partial {
            self.pending = Some((time, text));
            return None;
        }
        if let Some(since) = self.since {
            if time.parse::<jiff::Timestamp>().is_ok_and(|t| t < since) {
                return None;
            }
        }
        text.push(b'\n');
        if self.timestamps {
            let mut out = Vec::with_capacity(time.len() + 1 + text.len());
            out.extend_from_slice(time.as_bytes());
            out.push(b' ');
            out.extend_from_slice(&text);
            Some(out)
        } else {
            Some(text)
        }
    }
}

/// Everything in `data` (whole file lines) rendered, then the last `tail` lines kept.
pub fn render_all(data: &[u8], o: &LogOptions) -> Vec<u8> {
    let mut r = Renderer::new(o);
    let mut lines: Vec<Vec<u8>> = data
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(|l| r.line(l))
        .collect();
    lines.extend(r.finish());
    if let Some(n) = o.tail_lines {
        let n = n.max(0) as usize;
        if lines.len() > n {
            lines.drain(..lines.len() - n);
        }
    }
    lines.concat()
}

/// Cuts output at `limitBytes`.
pub struct Limit(Option<u64>);

impl Limit {
    pub fn new(o: &LogOptions) -> Self {
        Self(o.limit_bytes.map(|l| l.max(0) as u64))
    }
    /// What of `chunk` may still go out; None once the limit is reached.
    pub fn take(&mut self, mut chunk: Vec<u8>) -> Option<Vec<u8>> {
        match &mut self.0 {
            None => Some(chunk),
            Some(0) => None,
            Some(left) => {
                chunk.truncate((*left).min(chunk.len() as u64) as usize);
                *left -= chunk.len() as u64;
                Some(chunk)
            }
        }
    }
    pub fn exhausted(&self) -> bool {
        self.0 == Some(0)
    }
}

/// Stream the log file at `path` into `tx`: what is there now (tailed), then, with `follow`,
/// what is appended until `running` says the container is done (and the file is drained) or
/// the receiver goes away.
pub async fn stream<F, Fut>(path: PathBuf, o: LogOptions, tx: tokio::sync::mpsc::Sender<Bytes>, running: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut limit = Limit::new(&o);
    let (data, mut offset) = match read_from(&path, 0) {
        Ok(v) => v,
        Err(_) => return,
    };
    // Only whole lines now; a line still being written is read with the next poll.
    let whole = data.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    offset -= (data.len() - whole) as u64;
    let first = render_all(&data[..whole], &o);
    if let Some(c) = limit.take(first).filter(|c| !c.is_empty()) {
        if tx.send(Bytes::from(c)).await.is_err() {
            return;
        }
    }
    if !o.follow || limit.exhausted() {
        return;
    }
    // Records from here on: the renderer keeps partial lines across polls.
    let mut r = Renderer::new(&LogOptions {
        since: o.since,
        timestamps: o.timestamps,
        ..Default::default()
    });
    let mut carry: Vec<u8> = Vec::new();
    loop {
        let alive = running().await;
        let (data, end) = match read_from(&path, offset) {
            Ok(v) => v,
            Err(_) => return,
        };
        offset = end;
        carry.extend_from_slice(&data);
        let mut out = Vec::new();
        while let Some(i) = carry.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = carry.drain(..=i).collect();
            if let Some(l) = r.line(&line[..line.len() - 1]) {
                out.extend_from_slice(&l);
            }
        }
        if !out.is_empty() {
            match limit.take(out) {
                Some(c) if !c.is_empty() => {
                    if tx.send(Bytes::from(c)).await.is_err() {
                        return;
                    }
                }
                _ => return,
            }
            if limit.exhausted() {
                return;
            }
        }
        if !alive && data.is_empty() {
            // The container is done: a line it left unfinished goes out as it is.
            if let Some(rest) = r.finish().and_then(|rest| limit.take(rest)) {
                let _ = tx.send(Bytes::from(rest)).await;
            }
            return;
        }
        if tx.is_closed() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The bytes of `path` from `offset` on, and the offset after them.
fn read_from(path: &Path, offset: u64) -> std::io::Result<(Vec<u8>, u64)> {
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    // A file shorter than where we were was rotated or truncated: start over.
    let start = if len < offset { 0 } else { offset };
    f.seek(SeekFrom::Start(start))?;
    let mut data = Vec::new();
    f.read_to_end(&mut data)?;
    let end = start + data.len() as u64;
    Ok((data, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &[u8] = b"2026-11-22T10:00:00.1Z stdout F one\n\
2026-11-22T10:00:01.2Z stderr F two\n\
2026-11-22T10:00:02.3Z stdout P thr\n\
2026-11-22T10:00:02.4Z stdout F ee\n\
2026-11-22T10:00:03.5Z stdout F \n\
2026-11-22T10:00:04.6Z stdout F four words here\n";

    /// A container that exits after `echo -n DONE` leaves a partial record last: it is read as
    /// written, without a newline (what FallbackToLogsOnError's termination message takes).
    #[test]
    fn an_unfinished_last_line_is_read_as_written() {
        let file = b"2026-11-22T10:00:00.1Z stdout F one\n2026-11-22T10:00:01.2Z stdout P DONE\n";
        assert_eq!(render_all(file, &LogOptions::default()), b"one\nDONE");
        let tail = LogOptions {
            tail_lines: Some(1),
            timestamps: true,
            ..Default::default()
        };
        assert_eq!(render_all(file, &tail), b"2026-11-22T10:00:01.2Z DONE");
    }

    #[test]
    fn records_parse() {
        let r = parse_record(b"2026-11-22T10:00:02.3Z stdout P thr").unwrap();
        assert_eq!(
            (r.time, r.stream, r.partial, r.text),
            ("2026-11-22T10:00:02.3Z", "stdout", true, &b"thr"[..])
        );
        let r = parse_record(b"2026-11-22T10:00:03.5Z stderr F ").unwrap();
        assert_eq!((r.partial, r.text), (false, &b""[..]));
        assert!(parse_record(b"garbage").is_none());
        assert!(parse_record(b"t stdin F x").is_none());
    }

    #[test]
    fn rendering_joins_partials_and_honours_options() {
        let all = render_all(FILE, &LogOptions::default());
        assert_eq!(
            String::from_utf8(all).unwrap(),
            "one\ntwo\nthree\n\nfour words here\n"
        );
        let tail = LogOptions {
            tail_lines: Some(2),
            ..Default::default()
        };
        assert_eq!(render_all(FILE, &tail), b"\nfour words here\n");
        let zero = LogOptions {
            tail_lines: Some(0),
            ..Default::default()
        };
        assert!(render_all(FILE, &zero).is_empty());
        let ts = LogOptions {
            timestamps: true,
            tail_lines: Some(3),
            ..Default::default()
        };
        assert_eq!(
            String::from_utf8(render_all(FILE, &ts)).unwrap(),
            "2026-11-22T10:00:02.3Z three\n2026-11-22T10:00:03.5Z \n2026-11-22T10:00:04.6Z four words here\n"
        );
        let since = LogOptions {
            since: Some("2026-11-22T10:00:01.5Z".parse().unwrap()),
            ..Default::default()
        };
        assert_eq!(render_all(FILE, &since), b"three\n\nfour words here\n");
        let mut limit = Limit::new(&LogOptions {
            limit_bytes: Some(5),
            ..Default::default()
        });
        assert_eq!(limit.take(b"one\n".to_vec()).unwrap(), b"one\n");
        assert_eq!(limit.take(b"two\n".to_vec()).unwrap(), b"t");
        assert!(limit.exhausted());
        assert_eq!(limit.take(b"x".to_vec()), None);
    }

    #[test]
    fn options_from_the_query() {
        let o =
            LogOptions::from_query("follow=true&tailLines=10&timestamps=true&limitBytes=100&previous=false")
                .unwrap();
        assert_eq!(
            o,
            LogOptions {
                follow: true,
                previous: false,
                timestamps: true,
                tail_lines: Some(10),
                limit_bytes: Some(100),
                since: None
            }
        );
        let o = LogOptions::from_query("sinceTime=2026-11-22T10%3A00%3A01Z").unwrap();
        assert_eq!(o.since, Some("2026-11-22T10:00:01Z".parse().unwrap()));
        let o = LogOptions::from_query("sinceSeconds=60").unwrap();
        let ago = jiff::Timestamp::now() - o.since.unwrap();
        assert!(ago.get_seconds() >= 59 && ago.get_seconds() <= 61, "{ago:?}");
        assert!(LogOptions::from_query("tailLines=x").is_err());
        assert!(LogOptions::from_query("follow=maybe").is_err());
    }

    #[tokio::test]
    async fn following_a_growing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        std::fs::write(&path, FILE).unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::channel(16);
        let alive = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let a = alive.clone();
        let o = LogOptions {
            follow: true,
            tail_lines: Some(1),
            ..Default::default()
        };
        let task = tokio::spawn(stream(path.clone(), o, tx, move || {
            let a = a.clone();
            async move { a.load(std::sync::atomic::Ordering::SeqCst) }
        }));
        assert_eq!(&rx.recv().await.unwrap()[..], b"four words here\n");
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"2026-11-22T10:00:05Z stdout P fi\n").unwrap();
        f.flush().unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        f.write_all(b"2026-11-22T10:00:05Z stdout F ve\n").unwrap();
        assert_eq!(&rx.recv().await.unwrap()[..], b"five\n");
        alive.store(false, std::sync::atomic::Ordering::SeqCst);
        // The container is done and the file drained: the stream ends.
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();
        assert!(rx.recv().await.is_none());
    }
}
