//! Servers joining a cluster with its token (k3s's `--server --token`), on a shared etcd: the
//! joining server takes the cluster's CA and service-account keys (kept encrypted in the
//! datastore), so every credential one server issues works on the other; the `kubernetes`
//! Service lists every live server; a wrong token is refused with a clear error.

use crate::support;

use std::process::Command;
use std::time::{Duration, Instant};

use r8s_store::etcd_process::EtcdCluster;
use support::Server;

fn endpoints(s: &Server) -> Vec<String> {
    let out = s.ok(
        "1.33",
        &[
            "get",
            "endpoints",
            "kubernetes",
            "-o",
            "jsonpath={.subsets[0].addresses[*].ip}",
        ],
    );
    out.split_whitespace().map(str::to_owned).collect()
}

fn wait_endpoints(s: &Server, want: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let got = endpoints(s);
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "kubernetes endpoints {got:?}, want {want:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// `r8s server` run to fail: its exit status and output.
fn fails(args: &[&str]) -> String {
    fails_in(tempfile::tempdir().unwrap().path(), args)
}

fn fails_in(dir: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_r8s"))
        .arg("server")
        .arg("--data-dir")
        .arg(dir)
        .args(["--disable-agent", "--https-listen-port", "0"])
        .args(args)
        .output()
        .unwrap();
    assert!(!out.status.success(), "r8s server {args:?} did not fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_server_joins_with_the_token_and_serves_the_same_cluster() {
    let etcd = EtcdCluster::start(1).expect("start etcd (CI installs Debian's etcd-server)");
    let endpoints_arg = etcd.endpoints();
    let a = Server::start_with(&["--datastore-endpoint", &endpoints_arg]);
    let token = std::fs::read_to_string(a.dir.path().join("server/node-token")).unwrap();
    let token = token.trim();
    let url = format!("https://127.0.0.1:{}", a.port);

    // The bootstrap data is in the datastore, encrypted: no key in the clear.
    let stored = a.ok(
        "1.33",
        &[
            "-n",
            "kube-system",
            "get",
            "secret",
            "r8s-server-bootstrap",
            "-o",
            "json",
        ],
    );
    assert!(
        !stored.contains("PRIVATE KEY") && stored.contains("\"salt\""),
        "{stored}"
    );

    // A second server on another address, the same port, joins through the first.
    let b = Server::start_at(
        tempfile::tempdir().unwrap(),
        "127.0.0.2",
        a.port,
        &[
            "--disable-agent",
            "--datastore-endpoint",
            &endpoints_arg,
            "--server",
            &url,
            "--token",
            token,
        ],
    );
    for f in ["ca.crt", "ca.key", "service-account.key", "front-proxy-ca.crt"] {
        assert_eq!(
            std::fs::read(a.dir.path().join("server/tls").join(f)).unwrap(),
            std::fs::read(b.dir.path().join("server/tls").join(f)).unwrap(),
            "{f} differs"
        );
    }
    // Each server has its own serving certificate, for its own address.
    assert_ne!(
        std::fs::read(a.dir.path().join("server/tls/serving-kube-apiserver.crt")).unwrap(),
        std::fs::read(b.dir.path().join("server/tls/serving-kube-apiserver.crt")).unwrap(),
    );
    // One join token for the whole cluster.
    assert_eq!(
        std::fs::read_to_string(b.dir.path().join("server/node-token"))
            .unwrap()
            .trim(),
        token
    );
    // What one server writes the other serves; a ServiceAccount token one signs the other takes.
    a.ok("1.33", &["create", "configmap", "from-a", "--from-literal=k=v"]);
    assert_eq!(
        b.ok(
            "1.33",
            &["get", "configmap", "from-a", "-o", "jsonpath={.data.k}"]
        ),
        "v"
    );
    a.ok("1.33", &["create", "serviceaccount", "robot"]);
    let sa_token = a.ok("1.33", &["create", "token", "robot"]);
    let ca = b.dir.path().join("server/tls/ca.crt");
    let who = Command::new(support::kubectl_binary("1.33"))
        .arg("--kubeconfig=/dev/null")
        .arg(format!("--server=https://127.0.0.2:{}", a.port))
        .arg(format!("--certificate-authority={}", ca.display()))
        .args([
            "--token",
            sa_token.trim(),
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&who.stdout),
        "system:serviceaccount:default:robot",
        "{}",
        String::from_utf8_lossy(&who.stderr)
    );
    // The admin credentials of one work on the other (one CA).
    let mut cmd = a.command(
        "1.33",
        &[
            "--server",
            &format!("https://127.0.0.2:{}", a.port),
            "get",
            "cm",
            "from-a",
        ],
    );
    assert!(cmd.output().unwrap().status.success());

    // The kubernetes Service lists both servers; one that stops cleanly leaves it at once.
    wait_endpoints(&a, &["127.0.0.1", "127.0.0.2"]);

    // A third server joins from the datastore alone (no --server), on another address.
    let mut c = Server::start_at(
        tempfile::tempdir().unwrap(),
        "127.0.0.3",
        a.port,
        &[
            "--disable-agent",
            "--datastore-endpoint",
            &endpoints_arg,
            "--token",
            token,
        ],
    );
    assert_eq!(
        std::fs::read(a.dir.path().join("server/tls/ca.key")).unwrap(),
        std::fs::read(c.dir.path().join("server/tls/ca.key")).unwrap(),
    );
    wait_endpoints(&b, &["127.0.0.1", "127.0.0.2", "127.0.0.3"]);
    assert!(c.terminate(Duration::from_secs(30)), "{}", c.log());
    wait_endpoints(&a, &["127.0.0.1", "127.0.0.2"]);

    // A token of another cluster (its secret wrong, or its CA hash) is refused, clearly.
    let (hash, bootstrap) = token.split_once("::").unwrap();
    let wrong_secret = format!("{hash}::{}xxxxxxxx", &bootstrap[..bootstrap.len() - 8]);
    let err = fails(&[
        "--datastore-endpoint",
        &endpoints_arg,
        "--server",
        &url,
        "--token",
        &wrong_secret,
    ]);
    assert!(err.contains("refused the join token"), "{err}");
    let wrong_ca = format!("K10{}::{bootstrap}", "0".repeat(64));
    let err = fails(&[
        "--datastore-endpoint",
        &endpoints_arg,
        "--server",
        &url,
        "--token",
        &wrong_ca,
    ]);
    assert!(err.contains("does not present the cluster CA"), "{err}");
    let err = fails(&["--datastore-endpoint", &endpoints_arg, "--token", &wrong_secret]);
    assert!(err.contains("does not open with this token"), "{err}");
    // A token alone names no cluster to join.
    let err = fails(&["--token", token]);
    assert!(err.contains("give the server to join with --server"), "{err}");
    drop(b);
}

/// The etcd member a server runs (its child process named etcd).
fn etcd_of(server: u32) -> u32 {
    let out = Command::new("pgrep")
        .args(["-P", &server.to_string(), "-x", "etcd"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or_else(|| panic!("server {server} runs no etcd member"))
        .parse()
        .unwrap()
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status();
}

/// SIGCONT to `pids` when dropped (also when the test fails: a stopped member would outlive it).
struct Resume(Vec<u32>);

impl Drop for Resume {
    fn drop(&mut self) {
        for p in &self.0 {
            signal(*p, "CONT");
        }
    }
}

fn scopeguard(pids: &[u32]) -> Resume {
    Resume(pids.to_vec())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `--cluster-init`: three servers, each with an etcd member of its own (the distribution's
/// etcd, run by r8s, mutual TLS from the shared etcd CA), joined with the token. A power cut of
/// the first (SIGKILL: its member dies with it) loses nothing: the others take writes again
/// within seconds, the `kubernetes` Service drops it once its lease runs out, and it comes back
/// on its data, with what was written meanwhile.
#[test]
fn three_servers_on_etcd_members_of_their_own_survive_the_loss_of_one() {
    let (port, client, peer) = (free_port(), free_port(), free_port());
    let etcd_ports = [
        "--etcd-client-port".to_string(),
        client.to_string(),
        "--etcd-peer-port".to_string(),
        peer.to_string(),
    ];
    let with = |more: &[&str]| -> Vec<String> {
        let mut v = vec!["--disable-agent".to_string()];
        v.extend(etcd_ports.iter().cloned());
        v.extend(more.iter().map(|s| s.to_string()));
        v
    };
    fn refs(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }
    let a_args = with(&["--cluster-init"]);
    let mut a = Server::start_at(tempfile::tempdir().unwrap(), "127.0.0.1", port, &refs(&a_args));
    assert!(
        a.dir.path().join("server/db/etcd/member").is_dir(),
        "no etcd member data"
    );
    assert!(!a.dir.path().join("server/db/state.redb").exists());
    let token = std::fs::read_to_string(a.dir.path().join("server/node-token")).unwrap();
    let url = format!("https://127.0.0.1:{port}");
    let join = with(&["--server", &url, "--token", token.trim()]);
    let b = Server::start_at(tempfile::tempdir().unwrap(), "127.0.0.2", port, &refs(&join));
    eprintln!("second server up");
    let c = Server::start_at(tempfile::tempdir().unwrap(), "127.0.0.3", port, &refs(&join));
    wait_endpoints(&a, &["127.0.0.1", "127.0.0.2", "127.0.0.3"]);
    b.ok("1.33", &["create", "configmap", "before", "--from-literal=k=1"]);
    assert_eq!(
        c.ok("1.33", &["get", "cm", "before", "-o", "jsonpath={.data.k}"]),
        "1"
    );

    // Power cut of the first server.
    a.sigkill();
    let cut = Instant::now();
    let mut n = 0;
    loop {
        n += 1;
        let out = b.kubectl(
            "1.33",
            &["create", "configmap", &format!("after-{n}"), "--from-literal=k=2"],
        );
        if out.status.success() {
            break;
        }
        assert!(
            cut.elapsed() < Duration::from_secs(30),
            "no write accepted 30 s after the power cut: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            b.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "writes accepted again {:?} after the first server's power cut",
        cut.elapsed()
    );
    assert_eq!(
        c.ok(
            "1.33",
            &["get", "cm", &format!("after-{n}"), "-o", "jsonpath={.data.k}"]
        ),
        "2"
    );
    wait_endpoints(&b, &["127.0.0.2", "127.0.0.3"]);

    // Back on its data: it rejoins, with what was written meanwhile.
    a.restart(&refs(&a_args));
    assert_eq!(
        a.ok(
            "1.33",
            &["get", "cm", &format!("after-{n}"), "-o", "jsonpath={.data.k}"]
        ),
        "2"
    );
    wait_endpoints(&c, &["127.0.0.1", "127.0.0.2", "127.0.0.3"]);

    // Degrade, never exit: with the other two members paused (SIGSTOP), the first server has
    // no quorum. It answers writes with 503 and Retry-After, and takes writes again once they
    // are back.
    let members: Vec<u32> = [&b, &c].iter().map(|s| etcd_of(s.pid())).collect();
    a.ok("1.33", &["get", "cm", "before"]);
    // A service account's token made before, allowed to read.
    let sa_token = a.ok("1.33", &["create", "token", "default"]);
    a.ok(
        "1.33",
        &[
            "create",
            "clusterrolebinding",
            "sa-view",
            "--clusterrole=view",
            "--serviceaccount=default:default",
        ],
    );
    let tls = a.dir.path().join("server/tls");
    // (status, body, seconds) of a GET to the first server, as the admin or with a token.
    let get = |path: &str, token: Option<&str>| -> (String, String, f64) {
        let mut cmd = Command::new("curl");
        cmd.args([
            "-sk",
            "--max-time",
            "60",
            "-o",
            "-",
            "-w",
            "\n%{http_code} %{time_total}",
        ]);
        match token {
            Some(t) => {
                cmd.args(["-H", &format!("Authorization: Bearer {t}")]);
            }
            None => {
                cmd.arg("--cert")
                    .arg(tls.join("client-admin.crt"))
                    .arg("--key")
                    .arg(tls.join("client-admin.key"));
            }
        }
        let out = cmd
            .arg(format!("https://127.0.0.1:{port}{path}"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let (body, last) = text.rsplit_once('\n').unwrap_or(("", &text));
        let (code, secs) = last.split_once(' ').unwrap_or((last, "0"));
        (code.to_owned(), body.to_owned(), secs.parse().unwrap_or(0.0))
    };
    // Warm: the caches of the resources read below exist before the quorum goes.
    for path in [
        "/api/v1/namespaces/default/configmaps?resourceVersion=0",
        "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=0&timeoutSeconds=1",
    ] {
        assert_eq!(get(path, Some(&sa_token)).0, "200", "{path}");
    }
    for m in &members {
        signal(*m, "STOP");
    }
    let resumed = scopeguard(&members);
    std::thread::sleep(Duration::from_secs(2));
    // Reads that any state will do are served from the watch cache, at once (upstream's
    // cacher answers resourceVersion "0" from memory), and a token made before still
    // authenticates (its service account read from the cache, as upstream's informers).
    for (path, token, want_code, want) in [
        (
            "/api/v1/namespaces/default/configmaps?resourceVersion=0",
            None,
            "200",
            &["\"name\":\"before\""][..],
        ),
        (
            "/api/v1/namespaces/default/configmaps?resourceVersion=0",
            Some(sa_token.as_str()),
            "200",
            &["\"name\":\"before\""],
        ),
        (
            "/api/v1/namespaces/default/configmaps/before?resourceVersion=0",
            None,
            "200",
            &["\"k\":\"1\""],
        ),
        (
            "/api/v1/namespaces/default/configmaps/nothing?resourceVersion=0",
            None,
            "404",
            &["\"reason\":\"NotFound\""],
        ),
        (
            "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=0&timeoutSeconds=1",
            Some(sa_token.as_str()),
            "200",
            &["{\"type\":\"ADDED\"", "\"name\":\"before\""],
        ),
    ] {
        let (code, body, secs) = get(path, token);
        assert!(
            code == want_code && want.iter().all(|w| body.contains(w)) && secs < 3.0,
            "{path} without quorum: {code} in {secs} s: {body}"
        );
    }
    // A consistent list needs the datastore's latest revision: 503 with Retry-After, once.
    let (code, body, secs) = get("/api/v1/namespaces/default/configmaps", None);
    assert!(
        code == "503" && body.contains("\"retryAfterSeconds\":1") && secs < 25.0,
        "a consistent list without quorum: {code} in {secs} s: {body}"
    );
    // One request, as it is answered (kubectl would wait and retry, as Retry-After asks).
    let refused = Command::new("curl")
        .args([
            "-sk",
            "--max-time",
            "90",
            "-D",
            "-",
            "-o",
            "/dev/null",
            "-X",
            "POST",
        ])
        .arg("--cert")
        .arg(tls.join("client-admin.crt"))
        .arg("--key")
        .arg(tls.join("client-admin.key"))
        .args(["-H", "Content-Type: application/json", "-d"])
        .arg(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"no-quorum"}}"#)
        .arg(format!(
            "https://127.0.0.1:{port}/api/v1/namespaces/default/configmaps"
        ))
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&refused.stdout).to_ascii_lowercase();
    let status = head.split_whitespace().nth(1);
    assert!(status == Some("503") && head.contains("retry-after: 1"), "{head}");
    drop(resumed);
    let back = Instant::now();
    loop {
        if a.kubectl("1.33", &["create", "configmap", "quorum-again"])
            .status
            .success()
        {
            break;
        }
        assert!(
            back.elapsed() < Duration::from_secs(60),
            "writes did not resume:\n{}",
            a.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    for s in [&b, &c] {
        assert!(s
            .ok("1.33", &["get", "cm", "quorum-again", "-o", "name"])
            .contains("quorum-again"));
    }

    // A server stopped as an operator stops it (SIGTERM) stops its member the same way: etcd
    // closes (a leader hands its leadership on first) rather than dying with the server.
    let member = etcd_of(a.pid());
    a.kill();
    let log = std::fs::read_to_string(a.dir.path().join("server/etcd.log")).unwrap();
    let since = log.rfind("starting an etcd server").unwrap_or(0);
    assert!(
        log[since..].contains("closed etcd server"),
        "the member did not stop gracefully:\n{}",
        &log[log.len().saturating_sub(3000)..]
    );
    assert!(!std::path::Path::new(&format!("/proc/{member}")).exists());
    c.ok("1.33", &["create", "configmap", "after-a-stopped"]);

    // Flags that make no sense together are refused.
    let err = fails(&["--cluster-init", "--datastore-endpoint", "http://127.0.0.1:1"]);
    assert!(err.contains("--cluster-init starts a new cluster"), "{err}");
}

/// A server whose data is in the embedded datastore is not silently started on an empty etcd
/// cluster by `--cluster-init` (nothing lost: it refuses, and its data stays as it was).
#[test]
fn cluster_init_refuses_a_server_with_embedded_data() {
    let mut s = Server::start();
    s.ok("1.33", &["create", "configmap", "kept"]);
    assert!(s.terminate(Duration::from_secs(30)));
    let err = fails_in(s.dir.path(), &["--cluster-init"]);
    assert!(err.contains("data is in the embedded datastore"), "{err}");
    s.restart(&["--disable-agent"]);
    s.ok("1.33", &["get", "configmap", "kept"]);
}

/// `r8s etcd-snapshot` with data dir `dir`: (success, stdout, stderr).
fn snapshot_cmd(dir: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_r8s"))
        .arg("etcd-snapshot")
        .args(args)
        .arg("--data-dir")
        .arg(dir)
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The snapshot names `r8s etcd-snapshot ls` lists.
fn snapshot_names(dir: &std::path::Path) -> Vec<String> {
    let (ok, out, err) = snapshot_cmd(dir, &["ls"]);
    assert!(ok, "{err}");
    let mut lines = out.lines();
    assert!(
        lines
            .next()
            .is_some_and(|h| h.starts_with("NAME") && h.contains("LOCATION") && h.contains("SIZE")),
        "{out}"
    );
    lines
        .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
        .collect()
}

/// Snapshots of a `--cluster-init` server's etcd member, as k3s users take them: on demand
/// (`r8s etcd-snapshot save`), on a schedule with a retention, listed, deleted, and restored
/// into the stopped server, which comes back with the snapshot's data and takes writes.
#[test]
fn etcd_snapshots_are_taken_on_demand_and_on_schedule_and_restore_the_data() {
    let (port, client, peer) = (free_port(), free_port(), free_port());
    let (client, peer) = (client.to_string(), peer.to_string());
    let args = [
        "--disable-agent",
        "--cluster-init",
        "--etcd-client-port",
        &client,
        "--etcd-peer-port",
        &peer,
        "--etcd-snapshot-schedule-cron",
        "*/2 * * * * *",
        "--etcd-snapshot-retention",
        "2",
    ];
    let mut s = Server::start_at(tempfile::tempdir().unwrap(), "127.0.0.1", port, &args);
    let dir = s.dir.path().to_path_buf();
    s.ok("1.33", &["create", "configmap", "kept", "--from-literal=k=1"]);
    let (ok, out, err) = snapshot_cmd(&dir, &["save", "--name", "before-change"]);
    assert!(
        ok && out.contains("Snapshot before-change-") && out.contains(" saved ("),
        "{out}{err}"
    );
    let before = snapshot_names(&dir)
        .into_iter()
        .find(|n| n.starts_with("before-change-"))
        .expect("the snapshot saved is listed");
    let size = std::fs::metadata(dir.join("server/db/snapshots").join(&before))
        .unwrap()
        .len();
    assert!(size > 4096, "a snapshot of {size} bytes");

    // Scheduled every 2 s, 2 kept: after 7 s (three or more taken), two of them — looked at
    // again if a listing falls between a save and its prune — and the on-demand one stays.
    std::thread::sleep(Duration::from_secs(7));
    let mut names = snapshot_names(&dir);
    for _ in 0..20 {
        if names.iter().filter(|n| n.starts_with("etcd-snapshot-")).count() == 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
        names = snapshot_names(&dir);
    }
    let scheduled = names.iter().filter(|n| n.starts_with("etcd-snapshot-")).count();
    assert_eq!(scheduled, 2, "{names:?}");
    assert!(names.contains(&before), "{names:?}");
    // Deleted by name; a name that is not there is an error.
    let extra = snapshot_cmd(&dir, &["save", "--name", "extra"]);
    assert!(extra.0, "{}", extra.2);
    let extra_name = snapshot_names(&dir)
        .into_iter()
        .find(|n| n.starts_with("extra-"))
        .unwrap();
    let (ok, out, _) = snapshot_cmd(&dir, &["delete", &extra_name]);
    assert!(ok && out.contains("deleted"), "{out}");
    assert!(!snapshot_names(&dir).contains(&extra_name));
    let (ok, _, err) = snapshot_cmd(&dir, &["delete", &extra_name]);
    assert!(!ok && err.contains("not found"), "{err}");

    // Changes after the snapshot.
    s.ok("1.33", &["create", "configmap", "later"]);
    s.ok("1.33", &["delete", "configmap", "kept"]);

    // A running server's member is not restored into.
    let (ok, _, err) = snapshot_cmd(&dir, &["restore", &before]);
    assert!(!ok && err.contains("stop this server"), "{err}");
    s.kill();
    let (ok, _, err) = snapshot_cmd(&dir, &["restore", "no-such-snapshot"]);
    assert!(!ok && err.contains("not found"), "{err}");
    let (ok, out, err) = snapshot_cmd(&dir, &["restore", &before]);
    assert!(ok && out.contains("Restored"), "{out}{err}");

    // Back with the snapshot's data: what was kept is there, what came later is not.
    s.restart(&args);
    assert_eq!(
        s.ok("1.33", &["get", "cm", "kept", "-o", "jsonpath={.data.k}"]),
        "1"
    );
    let later = s.kubectl("1.33", &["get", "cm", "later"]);
    assert!(
        !later.status.success(),
        "a configmap made after the snapshot is back"
    );
    s.ok("1.33", &["create", "configmap", "after-restore"]);

    // A server on the embedded datastore has no member to snapshot.
    let plain = tempfile::tempdir().unwrap();
    let (ok, _, err) = snapshot_cmd(plain.path(), &["save"]);
    assert!(!ok && err.contains("holds no etcd member"), "{err}");
}
