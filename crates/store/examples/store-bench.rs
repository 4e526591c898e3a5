//! The datastore benchmark: the same workload against the embedded backend and against a real
//! etcd started on this machine, in the same run.
//!
//!   cargo run --release -p r8s-store --example store-bench [-- --writes N --writers N]
//!
//! Workload, per backend (both keep their data under the system temp dir, fsync on):
//! 1. writes: 64 concurrent writers create keys with 1 KiB values (durable before acknowledged);
//! 2. range: read 10,000 keys under one prefix in one request, repeatedly;
//! 3. watch fan-out: 100 watchers on the prefix while 64 writers update 2,000 keys; latency is
//!    from the start of each write to its arrival at each watcher.
//!
//! Prints ops/s and p50/p99 latency for each backend and the embedded/etcd ratio.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use r8s_store::embedded::{EmbeddedOptions, EmbeddedStore};
use r8s_store::etcd::{EtcdOptions, EtcdStore};
use r8s_store::etcd_process::EtcdCluster;
use r8s_store::{CompactionPolicy, RangeRequest, Store};

struct Config {
    writers: usize,
    writes: usize,
    value_size: usize,
    ranges: usize,
    range_keys: usize,
    watchers: usize,
    watch_writes: usize,
}

#[derive(Default)]
struct Figures {
    write_ops: f64,
    write_p50: Duration,
    write_p99: Duration,
    range_ops: f64,
    range_p50: Duration,
    range_p99: Duration,
    range_keys: usize,
    watch_events: f64,
    watch_p50: Duration,
    watch_p99: Duration,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

async fn run(store: Arc<dyn Store>, cfg: &Config) -> Figures {
    let mut f = Figures::default();
    let prefix = "/registry/bench/";

    // 1. Concurrent durable writes.
    let per_writer = cfg.writes / cfg.writers;
    let started = Instant::now();
    let tasks: Vec<_> = (0..cfg.writers)
        .map(|w| {
            let store = store.clone();
            let value = Bytes::from(vec![b'v'; cfg.value_size]);
            tokio::spawn(async move {
                let mut lat = Vec::with_capacity(per_writer);
                for i in 0..per_writer {
                    let t = Instant::now();
                    store
                        .create(&format!("{prefix}w{w:03}-{i:06}"), value.clone())
                        .await
                        .expect("create");
                    lat.push(t.elapsed());
                }
                lat
            })
        })
        .collect();
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.unwrap());
    }
    let elapsed = started.elapsed();
    lat.sort();
    f.write_ops = lat.len() as f64 / elapsed.as_secs_f64();
    f.write_p50 = percentile(&lat, 0.50);
    f.write_p99 = percentile(&lat, 0.99);

    // 2. Range over every key written.
    let mut lat = Vec::with_capacity(cfg.ranges);
    let started = Instant::now();
    for _ in 0..cfg.ranges {
        let t = Instant::now();
        let r = store
            .range(RangeRequest {
                prefix: prefix.into(),
                limit: cfg.range_keys,
                ..Default::default()
            })
            .await
            .expect("range");
        lat.push(t.elapsed());
        f.range_keys = r.kvs.len();
    }
    let elapsed = started.elapsed();
    lat.sort();
    f.range_ops = cfg.ranges as f64 / elapsed.as_secs_f64();
    f.range_p50 = percentile(&lat, 0.50);
    f.range_p99 = percentile(&lat, 0.99);

    // 3. Watch fan-out: every watcher must see every update.
    let base = Instant::now();
    let watch_prefix = "/registry/fanout/";
    for i in 0..cfg.watch_writes {
        store
            .create(
                &format!("{watch_prefix}{i:06}"),
                Bytes::from(vec![b'0'; cfg.value_size]),
            )
            .await
            .unwrap();
    }
    let mut watchers = Vec::new();
    for _ in 0..cfg.watchers {
        let mut w = store.watch(watch_prefix, 0).await.expect("watch");
        let expect = cfg.watch_writes;
        watchers.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(expect);
            while lat.len() < expect {
                let batch = w.next().await.expect("watch open").expect("watch ok");
                let now = base.elapsed();
                for ev in batch {
                    // The value starts with the write's start time, in ns since `base`.
                    let sent = u64::from_le_bytes(ev.kv.value[..8].try_into().unwrap());
                    lat.push(now.saturating_sub(Duration::from_nanos(sent)));
                }
            }
            lat
        }));
    }
    let started = Instant::now();
    let per_writer = cfg.watch_writes / cfg.writers;
    let tasks: Vec<_> = (0..cfg.writers)
        .map(|w| {
            let store = store.clone();
            let size = cfg.value_size;
            tokio::spawn(async move {
                for i in (w * per_writer)..((w + 1) * per_writer) {
                    let key = format!("{watch_prefix}{i:06}");
                    let cur = store.get(&key, 0).await.unwrap().kv.unwrap();
                    let mut value = (base.elapsed().as_nanos() as u64).to_le_bytes().to_vec();
                    value.resize(size, b'1');
                    store
                        .update(&key, Bytes::from(value), cur.mod_revision)
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    // Writers covered per_writer * writers updates; the watchers expect exactly that many.
    let mut lat = Vec::new();
    for w in watchers {
        lat.extend(w.await.unwrap());
    }
    let elapsed = started.elapsed();
    lat.sort();
    f.watch_events = lat.len() as f64 / elapsed.as_secs_f64();
    f.watch_p50 = percentile(&lat, 0.50);
    f.watch_p99 = percentile(&lat, 0.99);
    f
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn print(name: &str, f: &Figures) {
    println!(
        "{name:<9} | {:>9.0} | {:>9} | {:>9} | {:>6.1} ({} keys) | {:>9} | {:>9} | {:>10.0} | {:>9} | {:>9}",
        f.write_ops,
        ms(f.write_p50),
        ms(f.write_p99),
        f.range_ops,
        f.range_keys,
        ms(f.range_p50),
        ms(f.range_p99),
        f.watch_events,
        ms(f.watch_p50),
        ms(f.watch_p99)
    );
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("a number"))
        .unwrap_or(default)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let writers = arg("--writers", 64);
    let cfg = Config {
        writers,
        writes: arg("--writes", 20_480) / writers * writers,
        value_size: 1024,
        ranges: arg("--ranges", 20),
        range_keys: arg("--range-keys", 10_000),
        watchers: arg("--watchers", 100),
        watch_writes: arg("--watch-writes", 2_048) / writers * writers,
    };
    println!(
        "store-bench: {} writers x 1 KiB, {} creates; range over {} keys x {}; {} watchers x {} updates",
        cfg.writers, cfg.writes, cfg.range_keys, cfg.ranges, cfg.watchers, cfg.watch_writes
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let mut opts = EmbeddedOptions::new(dir.path());
    opts.compaction = CompactionPolicy {
        interval: None,
        retain_revisions: 0,
    };
    let embedded = Arc::new(EmbeddedStore::open(opts).expect("open embedded"));
    let e = run(embedded.clone(), &cfg).await;
    drop(embedded);

    let cluster = EtcdCluster::start(1).expect("start etcd (apt-get install etcd-server)");
    let etcd = EtcdStore::connect(EtcdOptions::from_endpoint_list(&cluster.endpoints()))
        .await
        .expect("connect etcd");
    etcd.current_revision().await.expect("etcd ready");
    let version = std::process::Command::new(r8s_store::etcd_process::etcd_binary())
        .arg("--version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_owned()
        })
        .unwrap_or_default();
    let x = run(Arc::new(etcd), &cfg).await;
    drop(cluster);

    println!();
    println!("backend   |  writes/s | write p50 | write p99 | ranges/s               | range p50 | range p99 | watch ev/s | watch p50 | watch p99");
    print("embedded", &e);
    print("etcd", &x);
    println!();
    println!("etcd: {version}");
    println!(
        "ratio embedded/etcd: writes/s {:.2}x, write p99 {:.2}x, ranges/s {:.2}x, watch events/s {:.2}x",
        e.write_ops / x.write_ops,
        e.write_p99.as_secs_f64() / x.write_p99.as_secs_f64(),
        e.range_ops / x.range_ops,
        e.watch_events / x.watch_events
    );
}
