//! Degrade, never exit: a server whose datastore's disk fills up refuses creates and updates
//! with a clear 503 (Retry-After), keeps serving reads and deletes, corrupts nothing, and takes
//! writes again once space is freed; one whose disk stalls answers writes 504 at their
//! deadline, keeps serving reads, lets its controllers step down and lead again, and lives on; one
//! whose disk fails (EIO) refuses writes with 503 and is reopened, without a restart, once the
//! disk works again.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use support::Server;

/// A tmpfs of `mib` MiB mounted on a directory of its own, unmounted and removed when dropped
/// (after the server on it: declare it first).
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(mib: u64) -> Self {
        let dir = std::env::temp_dir().join(format!("r8s-full-disk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(&dir)
            .status()
            .unwrap()
            .success();
        assert!(
            ok,
            "mounting a tmpfs on {} (the test runs as root)",
            dir.display()
        );
        Tmpfs(dir)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Free bytes on the filesystem of `path`.
fn free(path: &Path) -> u64 {
    let out = Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .unwrap()
}

/// (status, body) of a request to `s` as its admin.
fn request(s: &Server, method: &str, path: &str, body: Option<&str>) -> (String, String) {
    let tls = s.dir.path().join("server/tls");
    let mut cmd = Command::new("curl");
    cmd.args([
        "-sk",
        "--max-time",
        "30",
        "-o",
        "-",
        "-w",
        "\n%{http_code}",
        "-X",
        method,
    ])
    .arg("--cert")
    .arg(tls.join("client-admin.crt"))
    .arg("--key")
    .arg(tls.join("client-admin.key"));
    if let Some(b) = body {
        cmd.args(["-H", "Content-Type: application/json", "-d", b]);
    }
    let out = cmd
        .arg(format!("https://127.0.0.1:{}{path}", s.port))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.to_owned(), body.to_owned())
}

#[test]
fn a_full_disk_refuses_writes_clearly_keeps_reads_and_recovers() {
    let disk = Tmpfs::mount(160);
    let data = tempfile::Builder::new().tempdir_in(&disk.0).unwrap();
    let s = Server::start_in(data, &["--disable-agent"]);
    s.ok("1.33", &["create", "configmap", "before", "--from-literal=k=1"]);

    // Fill the disk until less than the datastore keeps free (64 MiB) is left: 32 MiB.
    let filler = disk.0.join("filler");
    let size = free(&disk.0).saturating_sub(32 << 20);
    let ok = Command::new("fallocate")
        .args(["-l", &size.to_string()])
        .arg(&filler)
        .status()
        .unwrap()
        .success();
    assert!(ok && free(&disk.0) < 40 << 20, "the disk did not fill");

    let cm =
        |name: &str| format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}"}}}}"#);
    let (code, body) = request(
        &s,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some(&cm("refused")),
    );
    assert!(
        code == "503" && body.contains("disk is full") && body.contains("\"retryAfterSeconds\":1"),
        "a create on a full disk: {code} {body}"
    );
    // An update too (a merge patch), and it changes nothing.
    let out = s.kubectl(
        "1.33",
        &[
            "patch",
            "cm",
            "before",
            "--type=merge",
            "-p",
            r#"{"data":{"k":"2"}}"#,
            "--request-timeout=60s",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("disk is full"), "{err}");
    // Reads go on, from the cache and from the datastore; nothing half-written shows.
    assert_eq!(
        s.ok("1.33", &["get", "cm", "before", "-o", "jsonpath={.data.k}"]),
        "1"
    );
    let (code, body) = request(&s, "GET", "/api/v1/namespaces/default/configmaps", None);
    assert!(
        code == "200" && body.contains("\"before\"") && !body.contains("\"refused\""),
        "{code} {body}"
    );
    assert!(s.kubectl("1.33", &["get", "cm", "refused"]).status.code() == Some(1));

    // Space freed: writes are taken again, and the server never stopped.
    std::fs::remove_file(&filler).unwrap();
    let (code, body) = request(
        &s,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some(&cm("after")),
    );
    assert_eq!(code, "201", "{body}");
    assert!(s
        .ok("1.33", &["get", "cm", "-o", "name"])
        .contains("configmap/after"));
}

#[test]
fn a_stalled_disk_times_writes_out_keeps_reads_and_the_controllers_come_back() {
    let dir = tempfile::tempdir().unwrap();
    // The hook's file lives beside the data directory, removed with it.
    let stall = dir.path().join("stall-commits");
    let stall_arg = stall.to_str().unwrap().to_owned();
    let s = Server::start_in(
        dir,
        &["--disable-agent", "--test-datastore-stall-while", &stall_arg],
    );
    s.ok("1.33", &["create", "configmap", "before", "--from-literal=k=1"]);
    let pid = s.pid();

    // The disk's syncs stall (every commit waits while the file exists).
    std::fs::write(&stall, "").unwrap();
    let stalled = Instant::now();
    let cm =
        |name: &str| format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}"}}}}"#);
    // A write with a deadline of its own is answered 504 Timeout when it passes (upstream's
    // finisher), not left hanging.
    let t = Instant::now();
    let (code, body) = request(
        &s,
        "POST",
        "/api/v1/namespaces/default/configmaps?timeout=2s",
        Some(&cm("late")),
    );
    let took = t.elapsed();
    assert!(
        code == "504"
            && body.contains(r#""reason":"Timeout""#)
            && body.contains("request did not complete within requested timeout"),
        "a create on a stalled disk: {code} {body}"
    );
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(6),
        "answered after {took:?}"
    );
    // A malformed deadline is the client's error.
    let (code, body) = request(&s, "GET", "/api/v1/namespaces?timeout=soon", None);
    assert!(
        code == "400" && body.contains("invalid timeout specified in the request URL"),
        "{code} {body}"
    );
    // Reads go on meanwhile: from the datastore (consistent) and from the watch cache.
    let t = Instant::now();
    assert_eq!(
        s.ok("1.33", &["get", "cm", "before", "-o", "jsonpath={.data.k}"]),
        "1"
    );
    let (code, body) = request(
        &s,
        "GET",
        "/api/v1/namespaces/default/configmaps?resourceVersion=0",
        None,
    );
    assert!(code == "200" && body.contains(r#""before""#), "{code} {body}");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "reads took {:?}",
        t.elapsed()
    );

    // Stalled past the leases' renew deadline (10 s): the controller manager steps down
    // rather than exit, and the server is still there.
    while stalled.elapsed() < Duration::from_secs(16) {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        Path::new(&format!("/proc/{pid}")).exists(),
        "the server exited during the stall:\n{}",
        s.log()
    );
    assert!(
        s.log().contains("leader election lost"),
        "no component stepped down during a 16 s stall:\n{}",
        s.log()
    );

    // The disk comes back: the write that timed out landed after all (its handler ran on, as
    // upstream's), writes are taken again, and the controllers lead again: a Deployment gets
    // its ReplicaSet.
    std::fs::remove_file(&stall).unwrap();
    s.ok("1.33", &["create", "deployment", "web", "--image=nginx"]);
    let deadline = Instant::now() + Duration::from_secs(45);
    loop {
        let rs = s.kubectl("1.33", &["get", "rs", "-l", "app=web", "-o", "name"]);
        if String::from_utf8_lossy(&rs.stdout).contains("replicaset.apps/web-") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no ReplicaSet for the Deployment after the stall:\n{}",
            s.log()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(s
        .ok("1.33", &["get", "cm", "-o", "name"])
        .contains("configmap/late"));
    assert!(Path::new(&format!("/proc/{pid}")).exists());
}

#[test]
fn a_failing_disk_refuses_writes_with_503_keeps_list_reads_and_the_store_is_reopened() {
    let dir = tempfile::tempdir().unwrap();
    // The hook's file lives beside the data directory, removed with it.
    let failing = dir.path().join("failing-disk");
    let failing_arg = failing.to_str().unwrap().to_owned();
    let s = Server::start_in(
        dir,
        &["--disable-agent", "--test-datastore-fail-while", &failing_arg],
    );
    s.ok("1.33", &["create", "configmap", "before", "--from-literal=k=1"]);
    let pid = s.pid();
    let cm =
        |name: &str| format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}"}}}}"#);

    // The disk fails every write and sync (EIO): a create is refused with 503 and Retry-After,
    // saying why; redb refuses everything after a failed I/O, so the datastore is closed.
    std::fs::write(&failing, "").unwrap();
    let (code, body) = request(
        &s,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some(&cm("refused")),
    );
    assert!(
        code == "503" && body.contains("disk failed an I/O") && body.contains(r#""retryAfterSeconds":1"#),
        "a create on a failing disk: {code} {body}"
    );
    // Lists from the watch cache go on.
    let (code, body) = request(
        &s,
        "GET",
        "/api/v1/namespaces/default/configmaps?resourceVersion=0",
        None,
    );
    assert!(
        code == "200" && body.contains(r#""before""#) && !body.contains(r#""refused""#),
        "{code} {body}"
    );

    // The disk works again: the store is reopened within seconds, without a restart, and
    // nothing was lost or half-written.
    std::fs::remove_file(&failing).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (code, body) = request(
            &s,
            "POST",
            "/api/v1/namespaces/default/configmaps",
            Some(&cm("after")),
        );
        if code == "201" {
            break;
        }
        assert!(
            code == "503" && Instant::now() < deadline,
            "{code} {body}\n{}",
            s.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let names = s.ok("1.33", &["get", "cm", "-o", "name"]);
    assert!(
        names.contains("configmap/before") && names.contains("configmap/after") && !names.contains("refused"),
        "{names}"
    );
    assert_eq!(
        s.ok("1.33", &["get", "cm", "before", "-o", "jsonpath={.data.k}"]),
        "1"
    );
    assert!(Path::new(&format!("/proc/{pid}")).exists());
    assert!(
        s.log().contains("datastore reopened after an I/O error"),
        "{}",
        s.log()
    );
}
