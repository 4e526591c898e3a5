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
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_r8s"))
        .arg("server")
        .arg("--data-dir")
        .arg(dir.path())
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
    // Joining needs the shared datastore.
    let err = fails(&["--server", &url, "--token", token]);
    assert!(err.contains("--datastore-endpoint"), "{err}");
    drop(b);
}
