// Group-commit append throughput of redb vs SQLite (WAL, synchronous=FULL): 400 commits of
// 64 records of 1 KiB each, the shape of the embedded store's log under 64 writers.
use std::time::Instant;
const BATCH: usize = 64;
const BATCHES: usize = 400;
fn main() {
    let dir = std::env::args().nth(1).unwrap();
    let val = vec![7u8; 1024];
    // redb
    let p = format!("{dir}/r.redb");
    let _ = std::fs::remove_file(&p);
    let db = redb::Database::create(&p).unwrap();
    let t: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("log");
    let mut lat = vec![];
    let start = Instant::now();
    let mut rev = 0u64;
    for _ in 0..BATCHES {
        let s = Instant::now();
        let w = db.begin_write().unwrap();
        { let mut tb = w.open_table(t).unwrap();
          for _ in 0..BATCH { rev += 1; tb.insert(rev, val.as_slice()).unwrap(); } }
        w.commit().unwrap();
        lat.push(s.elapsed().as_secs_f64());
    }
    let el = start.elapsed().as_secs_f64();
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("redb   : {:.0} records/s, commit p50 {:.2} ms p99 {:.2} ms", (BATCH*BATCHES) as f64 / el, lat[lat.len()/2]*1e3, lat[lat.len()*99/100]*1e3);
    // sqlite
    let p = format!("{dir}/s.db");
    let _ = std::fs::remove_file(&p);
    let c = rusqlite::Connection::open(&p).unwrap();
    c.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; CREATE TABLE log(rev INTEGER PRIMARY KEY, v BLOB);").unwrap();
    let mut lat = vec![];
    let start = Instant::now();
    let mut rev = 0i64;
    let mut c = c;
    for _ in 0..BATCHES {
        let s = Instant::now();
        let tx = c.transaction().unwrap();
        { let mut st = tx.prepare_cached("INSERT INTO log(rev,v) VALUES(?,?)").unwrap();
          for _ in 0..BATCH { rev += 1; st.execute(rusqlite::params![rev, &val]).unwrap(); } }
        tx.commit().unwrap();
        lat.push(s.elapsed().as_secs_f64());
    }
    let el = start.elapsed().as_secs_f64();
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("sqlite : {:.0} records/s, commit p50 {:.2} ms p99 {:.2} ms", (BATCH*BATCHES) as f64 / el, lat[lat.len()/2]*1e3, lat[lat.len()*99/100]*1e3);
}
