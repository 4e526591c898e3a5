//! The etcd backend: the same contract on a real etcd cluster, through its v3 gRPC API.
//!
//! Each write is one etcd transaction comparing the key's mod revision (or its version, for a
//! create), exactly as kube-apiserver's etcd3 store does; reads are linearizable ranges.
//!
//! Failures: with several endpoints the client balances over them, so a dead member only fails
//! the requests that were in flight on it. Reads are retried on transport errors until
//! `retry_for` runs out. Writes are retried only when the request never reached a member
//! (connection refused); otherwise the outcome is unknown and `Unavailable` is returned rather
//! than risking applying a write twice.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, DeleteOptions, EventType, GetOptions, KvClient, Txn, TxnOp,
    TxnOpResponse, WatchOptions,
};
use tokio::sync::mpsc;

use crate::{
    prefix_end, CompactionPolicy, DeleteResponse, Event, EventKind, GetResponse, KeyValue, RangeRequest,
    RangeResponse, Result, Revision, Store, StoreError, Watch, WATCH_BUFFER,
};

#[derive(Clone, Debug)]
pub struct EtcdOptions {
    /// `http://host:port` URLs of the members.
    pub endpoints: Vec<String>,
    /// How long to keep retrying a request that failed for a transport reason.
    pub retry_for: Duration,
    /// Per-request timeout.
    pub request_timeout: Duration,
    /// Mutual TLS, for `https://` members.
    pub tls: Option<EtcdTls>,
}

/// The CA that signs the members' certificates and this client's certificate and key (PEM).
#[derive(Clone, Debug)]
pub struct EtcdTls {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

/// A member of an etcd cluster: its name (empty until it has started) and peer URLs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub id: u64,
    pub name: String,
    pub peer_urls: Vec<String>,
}

impl EtcdOptions {
    /// Options for a comma-separated endpoint list, as `--datastore-endpoint` takes it.
    pub fn from_endpoint_list(list: &str) -> Self {
        Self {
            endpoints: list
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
            retry_for: Duration::from_secs(15),
            // Below etcd's own 7 s proposal timeout, so a request stuck behind a dead leader is
            // retried on another member soon after the election.
            request_timeout: Duration::from_secs(4),
            tls: None,
        }
    }

    fn connect_options(&self) -> ConnectOptions {
        let connect = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(5))
            .with_timeout(self.request_timeout)
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5));
        match &self.tls {
            Some(t) => connect.with_tls(
                etcd_client::TlsOptions::new()
                    .ca_certificate(etcd_client::Certificate::from_pem(&t.ca_pem))
                    .identity(etcd_client::Identity::from_pem(&t.cert_pem, &t.key_pem)),
            ),
            None => connect,
        }
    }

    async fn client(&self) -> Result<Client> {
        Client::connect(&self.endpoints, Some(self.connect_options()))
            .await
            .map_err(|e| {
                StoreError::Unavailable(format!(
                    "cannot connect to etcd at {}: {e}",
                    self.endpoints.join(",")
                ))
            })
    }
}

fn members_of(list: &[etcd_client::Member]) -> Vec<Member> {
    list.iter()
        .map(|m| Member {
            id: m.id(),
            name: m.name().to_string(),
            peer_urls: m.peer_urls().to_vec(),
        })
        .collect()
}

fn cluster_error(e: etcd_client::Error) -> StoreError {
    StoreError::Unavailable(format!("etcd cluster call failed: {e}"))
}

/// The cluster's members.
pub async fn member_list(opts: &EtcdOptions) -> Result<Vec<Member>> {
    let mut client = opts.client().await?;
    let list = client.member_list().await.map_err(cluster_error)?;
    Ok(members_of(list.members()))
}

/// Add a member at `peer_url` (etcd's MemberAdd, before the member starts); every member after
/// it, the new one (named "" until it starts) included.
pub async fn member_add(opts: &EtcdOptions, peer_url: &str) -> Result<Vec<Member>> {
    let mut client = opts.client().await?;
    let added = client.member_add([peer_url], None).await.map_err(cluster_error)?;
    Ok(members_of(added.member_list()))
}

/// Remove member `id`.
pub async fn member_remove(opts: &EtcdOptions, id: u64) -> Result<()> {
    let mut client = opts.client().await?;
    client.member_remove(id).await.map_err(cluster_error)?;
    Ok(())
}

/// A snapshot of the whole keyspace of the member `opts` names (etcd's Maintenance.Snapshot, the
/// stream `etcdctl snapshot save` writes, its SHA-256 at the end), written to `path`: to a
/// temporary file beside it first, synced, then renamed, so a failed or cut save leaves no
/// partial snapshot under that name. Returns its size in bytes.
pub async fn snapshot_to(opts: &EtcdOptions, path: &std::path::Path) -> Result<u64> {
    use tokio::io::AsyncWriteExt;
    let mut client = opts.client().await?;
    let mut stream = client.snapshot().await.map_err(cluster_error)?;
    let part = path.with_extension("part");
    let io = |e: std::io::Error| StoreError::Unavailable(format!("writing {}: {e}", part.display()));
    let mut file = tokio::fs::File::create(&part).await.map_err(io)?;
    let mut size = 0u64;
    let written = async {
        while let Some(chunk) = stream.message().await.map_err(cluster_error)? {
            file.write_all(chunk.blob()).await.map_err(io)?;
            size += chunk.blob().len() as u64;
        }
        file.sync_all().await.map_err(io)?;
        Ok::<_, StoreError>(())
    }
    .await;
    if let Err(e) = written {
        let _ = tokio::fs::remove_file(&part).await;
        return Err(e);
    }
    if size == 0 {
        let _ = tokio::fs::remove_file(&part).await;
        return Err(StoreError::Unavailable("etcd sent an empty snapshot".into()));
    }
    tokio::fs::rename(&part, path).await.map_err(io)?;
    Ok(size)
}

#[derive(Clone)]
pub struct EtcdStore {
    client: Client,
    /// Key-value calls, allowed responses as large as etcd sends (a LIST of many objects is
    /// larger than gRPC's 4 MiB default, as kube-apiserver also allows).
    kv: KvClient,
    opts: EtcdOptions,
    /// Dropped with the last handle, which stops the compactor.
    compactor_alive: Arc<()>,
}

/// Largest gRPC message accepted from etcd (kube-apiserver uses `math.MaxInt32`).
const MAX_MESSAGE: usize = i32::MAX as usize;

impl EtcdStore {
    pub async fn connect(opts: EtcdOptions) -> Result<Self> {
        if opts.endpoints.is_empty() {
            return Err(StoreError::Unavailable("no etcd endpoint given".into()));
        }
        let client = opts.client().await?;
        let kv = client.kv_client().max_decoding_message_size(MAX_MESSAGE);
        Ok(Self {
            client,
            kv,
            opts,
            compactor_alive: Arc::new(()),
        })
    }

    /// Run a read, retrying transport failures.
    async fn read<T, F, Fut>(&self, f: F) -> Result<T>
    where
        F: Fn(KvClient) -> Fut,
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        self.retrying(f).await.0
    }

    /// Run a write, retrying transport failures. The flag says whether an earlier attempt may
    /// have been applied even though it failed (the request reached a member, e.g. one whose
    /// leader then died); the caller resolves that by looking at what is stored.
    async fn write<T, F, Fut>(&self, f: F) -> (Result<T>, bool)
    where
        F: Fn(KvClient) -> Fut,
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        self.retrying(f).await
    }

    async fn retrying<T, F, Fut>(&self, f: F) -> (Result<T>, bool)
    where
        F: Fn(KvClient) -> Fut,
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        let deadline = Instant::now() + self.opts.retry_for;
        let mut backoff = Duration::from_millis(20);
        let mut ambiguous = false;
        loop {
            match f(self.kv.clone()).await {
                Ok(v) => return (Ok(v), ambiguous),
                Err(e) => {
                    let mapped = map_error(&e);
                    let transient = matches!(mapped, StoreError::Unavailable(_));
                    if !transient || Instant::now() + backoff > deadline {
                        return (Err(mapped), ambiguous);
                    }
                    ambiguous |= !never_sent(&e);
                    tracing::debug!(error = %e, "etcd request failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                }
            }
        }
    }
}

impl EtcdStore {
    /// Compact etcd by itself, as kube-apiserver's compactor does: every `policy.interval`,
    /// discard the history older than one interval (and beyond the latest
    /// `policy.retain_revisions` revisions, see `CompactionPolicy::target`). Runs until
    /// every handle to this store is dropped.
    pub fn start_compactor(&self, policy: CompactionPolicy) {
        let Some(interval) = policy.interval else { return };
        let weak = Arc::downgrade(&self.compactor_alive);
        let store = EtcdStore {
            client: self.client.clone(),
            kv: self.kv.clone(),
            opts: self.opts.clone(),
            compactor_alive: Arc::new(()),
        };
        tokio::spawn(async move {
            let mut last = 0;
            let mut previous_tick = 0;
            loop {
                tokio::time::sleep(interval).await;
                if weak.strong_count() == 0 {
                    return;
                }
                let Ok(current) = store.current_revision().await else {
                    continue;
                };
                let target = policy.target(current, previous_tick);
                previous_tick = current;
                if target <= last {
                    continue;
                }
                match store.compact(target).await {
                    // Another server compacted further already: fine.
                    Ok(()) | Err(StoreError::Compacted { .. }) => last = target,
                    Err(err) => tracing::warn!(%err, target, "etcd compaction failed"),
                }
            }
        });
    }

    /// The answer to a conditional delete whose earlier attempt failed ambiguously and whose key
    /// is now gone: the version it was asked to delete, and the revision now.
    async fn deleted_by_earlier_attempt(
        &self,
        key: &str,
        expected: Option<Revision>,
    ) -> Result<DeleteResponse> {
        let rev = expected.unwrap_or(0);
        let prev = self.get(key, rev).await?.kv;
        match prev {
            Some(prev) if prev.mod_revision == rev => Ok(DeleteResponse {
                prev,
                revision: self.current_revision().await?,
            }),
            _ => Err(StoreError::NotFound { key: key.to_owned() }),
        }
    }
}

/// True when the error shows the request never left this process (no connection).
fn never_sent(e: &etcd_client::Error) -> bool {
    let text = format!("{e:?}").to_lowercase();
    text.contains("connection refused")
        || text.contains("tcp connect error")
        || text.contains("error trying to connect")
}

fn map_error(e: &etcd_client::Error) -> StoreError {
    if let etcd_client::Error::GRpcStatus(status) = e {
        let msg = status.message();
        if msg.contains("required revision has been compacted") {
            return StoreError::Compacted {
                requested: 0,
                compacted: None,
            };
        }
        if msg.contains("required revision is a future revision") {
            return StoreError::FutureRevision {
                requested: 0,
                current: 0,
            };
        }
        use tonic::Code;
        return match status.code() {
            Code::Unavailable | Code::DeadlineExceeded | Code::Unknown | Code::Cancelled => {
                StoreError::Unavailable(format!("etcd: {msg}"))
            }
            _ => StoreError::Io(format!("etcd: {msg}")),
        };
    }
    StoreError::Unavailable(format!("etcd: {e}"))
}

fn convert(kv: &etcd_client::KeyValue) -> Result<KeyValue> {
    Ok(KeyValue {
        key: kv
            .key_str()
            .map_err(|_| StoreError::Io("etcd returned a key that is not UTF-8".into()))?
            .to_owned(),
        value: Bytes::copy_from_slice(kv.value()),
        create_revision: kv.create_revision(),
        mod_revision: kv.mod_revision(),
        version: kv.version(),
    })
}

fn header_revision(h: Option<&etcd_client::ResponseHeader>) -> Revision {
    h.map(|h| h.revision()).unwrap_or(0)
}

/// The revision a read was served at: the one asked for, else the latest (etcd's header always
/// carries the latest).
fn served_at(requested: Revision, h: Option<&etcd_client::ResponseHeader>) -> Revision {
    if requested > 0 {
        requested
    } else {
        header_revision(h)
    }
}

/// The current value from an `or_else` get inside a failed transaction.
fn current_from(responses: Vec<TxnOpResponse>) -> Result<Option<KeyValue>> {
    for r in responses {
        if let TxnOpResponse::Get(g) = r {
            return g.kvs().first().map(convert).transpose();
        }
    }
    Ok(None)
}

fn with_revision(err: StoreError, requested: Revision) -> StoreError {
    match err {
        StoreError::Compacted { compacted, .. } => StoreError::Compacted { requested, compacted },
        StoreError::FutureRevision { current, .. } => StoreError::FutureRevision { requested, current },
        other => other,
    }
}

#[async_trait]
impl Store for EtcdStore {
    async fn get(&self, key: &str, revision: Revision) -> Result<GetResponse> {
        let resp = self
            .read(|mut c| async move { c.get(key, Some(GetOptions::new().with_revision(revision))).await })
            .await
            .map_err(|e| with_revision(e, revision))?;
        Ok(GetResponse {
            kv: resp.kvs().first().map(convert).transpose()?,
            revision: served_at(revision, resp.header()),
        })
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        let end = prefix_end(req.prefix.as_bytes());
        let start: Vec<u8> = match &req.start_after {
            // The smallest key after `after`.
            Some(after) if after.as_str() >= req.prefix.as_str() => {
                let mut k = after.as_bytes().to_vec();
                k.push(0);
                k
            }
            _ => req.prefix.as_bytes().to_vec(),
        };
        let mut resp = self
            .read(|mut c| {
                let (start, end) = (start.clone(), end.clone());
                async move {
                    let opts = GetOptions::new()
                        .with_range(end)
                        .with_revision(req.revision)
                        .with_limit(req.limit as i64);
                    c.get(start, Some(opts)).await
                }
            })
            .await
            .map_err(|e| with_revision(e, req.revision))?;
        let kvs = resp.take_kvs().iter().map(convert).collect::<Result<Vec<_>>>()?;
        Ok(RangeResponse {
            more: resp.more(),
            count: req.count.then_some(resp.count()),
            revision: served_at(req.revision, resp.header()),
            kvs,
        })
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        let (resp, ambiguous) = self
            .write(|mut c| {
                let value = value.to_vec();
                async move {
                    let txn = Txn::new()
                        .when([Compare::version(key, CompareOp::Equal, 0)])
                        .and_then([TxnOp::put(key, value, None)]);
                    c.txn(txn).await
                }
            })
            .await;
        let resp = resp?;
        if !resp.succeeded() {
            if ambiguous {
                // An earlier attempt may be what created it: if the stored value is ours, it was.
                if let Some(kv) = self.get(key, 0).await?.kv {
                    if kv.value == value && kv.version == 1 {
                        return Ok(kv);
                    }
                }
            }
            return Err(StoreError::AlreadyExists { key: key.to_owned() });
        }
        let rev = header_revision(resp.header());
        Ok(KeyValue {
            key: key.to_owned(),
            value,
            create_revision: rev,
            mod_revision: rev,
            version: 1,
        })
    }

    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> Result<KeyValue> {
        let (resp, ambiguous) = self
            .write(|mut c| {
                let value = value.to_vec();
                async move {
                    let txn = Txn::new()
                        .when([Compare::mod_revision(key, CompareOp::Equal, expected)])
                        .and_then([TxnOp::put(
                            key,
                            value,
                            Some(etcd_client::PutOptions::new().with_prev_key()),
                        )])
                        .or_else([TxnOp::get(key, None)]);
                    c.txn(txn).await
                }
            })
            .await;
        let resp = resp?;
        let rev = header_revision(resp.header());
        if !resp.succeeded() {
            return match current_from(resp.op_responses())? {
                None => Err(StoreError::NotFound { key: key.to_owned() }),
                // An earlier attempt may be what moved it on: if the stored value is ours, it was.
                Some(current) if ambiguous && current.value == value => Ok(current),
                Some(current) => Err(StoreError::Conflict {
                    key: key.to_owned(),
                    expected,
                    current: Box::new(current),
                }),
            };
        }
        let prev = resp.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Put(p) => p.prev_key().map(convert),
            _ => None,
        });
        let prev = prev
            .transpose()?
            .ok_or_else(|| StoreError::NotFound { key: key.to_owned() })?;
        Ok(KeyValue {
            key: key.to_owned(),
            value,
            create_revision: prev.create_revision,
            mod_revision: rev,
            version: prev.version + 1,
        })
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<DeleteResponse> {
        let (resp, ambiguous) = self
            .write(|mut c| async move {
                let del = TxnOp::delete(key, Some(DeleteOptions::new().with_prev_key()));
                let txn = match expected {
                    Some(rev) => Txn::new()
                        .when([Compare::mod_revision(key, CompareOp::Equal, rev)])
                        .and_then([del])
                        .or_else([TxnOp::get(key, None)]),
                    None => Txn::new().and_then([del]),
                };
                c.txn(txn).await
            })
            .await;
        let resp = resp?;
        let revision = header_revision(resp.header());
        if !resp.succeeded() {
            return match current_from(resp.op_responses())? {
                // An earlier attempt may be what deleted it: the version it was asked to delete
                // is still readable at its revision.
                None if ambiguous && expected.is_some() => {
                    self.deleted_by_earlier_attempt(key, expected).await
                }
                None => Err(StoreError::NotFound { key: key.to_owned() }),
                Some(current) => Err(StoreError::Conflict {
                    key: key.to_owned(),
                    expected: expected.unwrap_or(0),
                    current: Box::new(current),
                }),
            };
        }
        let prev = resp.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Delete(d) => d.prev_kvs().first().map(convert),
            _ => None,
        });
        match prev.transpose()? {
            Some(prev) => Ok(DeleteResponse { prev, revision }),
            None => Err(StoreError::NotFound { key: key.to_owned() }),
        }
    }

    async fn watch(&self, prefix: &str, start_revision: Revision) -> Result<Watch> {
        if start_revision > 0 {
            // etcd reports a compacted start only on the stream; check first so the caller
            // gets the error from `watch` itself, as from the embedded store.
            match self.get(prefix, start_revision).await {
                Err(e @ StoreError::Compacted { .. }) => return Err(e),
                Err(StoreError::FutureRevision { .. }) | Ok(_) => {}
                Err(e) => return Err(e),
            }
        }
        let mut opts = WatchOptions::new().with_prefix().with_prev_key();
        if start_revision > 0 {
            opts = opts.with_start_revision(start_revision);
        }
        let stream = self
            .client
            .watch_client()
            .max_decoding_message_size(MAX_MESSAGE)
            .watch(prefix, Some(opts))
            .await
            .map_err(|e| map_error(&e))?;
        let (tx, rx) = mpsc::channel(WATCH_BUFFER);
        let requested = start_revision;
        let (mut sender, mut stream) = stream.split();
        // Progress requests go on the watch's own stream (etcd answers once the watch is
        // synced, after the events it has sent).
        let (progress_tx, mut progress_rx) = mpsc::unbounded_channel::<()>();
        let progress = crate::ProgressRequester::new(move || {
            let _ = progress_tx.send(());
        });
        tokio::spawn(async move {
            loop {
                let msg = tokio::select! {
                    msg = stream.message() => msg,
                    Some(()) = progress_rx.recv() => {
                        let _ = sender.request_progress().await;
                        continue;
                    }
                    _ = tx.closed() => return,
                };
                let resp = match msg {
                    Ok(Some(resp)) => resp,
                    Ok(None) => {
                        let _ = tx
                            .send(Err(StoreError::Unavailable("etcd closed the watch".into())))
                            .await;
                        return;
                    }
                    Err(e) => {
                        let _ = tx.send(Err(map_error(&e))).await;
                        return;
                    }
                };
                if resp.canceled() {
                    let err = if resp.compact_revision() > 0 {
                        StoreError::Compacted {
                            requested,
                            compacted: Some(resp.compact_revision()),
                        }
                    } else {
                        StoreError::Unavailable(format!("etcd cancelled the watch: {}", resp.cancel_reason()))
                    };
                    let _ = tx.send(Err(err)).await;
                    return;
                }
                if resp.events().is_empty() && !resp.created() {
                    if let Some(h) = resp.header() {
                        if tx
                            .send(Ok(crate::WatchItem::Progress(h.revision())))
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                    continue;
                }
                let mut events = Vec::with_capacity(resp.events().len());
                for ev in resp.events() {
                    let Some(kv) = ev.kv() else { continue };
                    let converted = convert(kv).and_then(|kv| {
                        Ok(Event {
                            kind: match ev.event_type() {
                                EventType::Put => EventKind::Put,
                                EventType::Delete => EventKind::Delete,
                            },
                            kv,
                            prev: ev.prev_kv().map(convert).transpose()?,
                        })
                    });
                    match converted {
                        Ok(e) => events.push(e),
                        Err(err) => {
                            let _ = tx.send(Err(err)).await;
                            return;
                        }
                    }
                }
                if !events.is_empty() && tx.send(Ok(crate::WatchItem::Events(events))).await.is_err() {
                    return;
                }
            }
        });
        Ok(Watch::new(rx, Arc::new(AtomicBool::new(false)), Some(progress)))
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.write(|mut c| async move { c.compact(revision, None).await })
            .await
            .0
            .map(|_| ())
            .map_err(|e| with_revision(e, revision))
    }

    async fn current_revision(&self) -> Result<Revision> {
        let resp = self
            .read(|mut c| async move { c.get("/", Some(GetOptions::new().with_count_only())).await })
            .await?;
        Ok(header_revision(resp.header()))
    }

    fn backend(&self) -> &'static str {
        "etcd"
    }
}
