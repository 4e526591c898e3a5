//! The reference document's journey typed into r8s's own kubectl (`r8s kubectl`), with real
//! containers: create a Deployment and watch its rollout, `run --expose`, read the pods,
//! their logs, run commands in them (output, standard input, exit codes), scale, restart,
//! delete. The Go kubectl only checks what r8s kubectl did.

use crate::support;

use std::process::{Command, Stdio};

use support::cluster::*;

#[test]
fn the_journey_with_r8s_kubectl() {
    let _one = ONE_AGENT.lock().unwrap_or_else(|e| e.into_inner());
    let c = start("own-kubectl", "10.214.0.0/16", "r8sj");
    let s = &c.s;
    let k = |args: &[&str]| s.r8s_ok(args);

    assert_eq!(
        k(&["create", "deployment", "nginx", "--image=nginx", "--replicas=2"]),
        "deployment.apps/nginx created\n"
    );
    let status = k(&["rollout", "status", "deployment", "nginx", "--timeout=120s"]);
    assert!(
        status.ends_with("deployment \"nginx\" successfully rolled out\n"),
        "{status}"
    );
    assert_eq!(
        k(&[
            "run",
            "shell",
            "--image=busybox",
            "--port=8080",
            "--expose",
            "--command",
            "--",
            "sh",
            "-c",
            "echo started; sleep 3600"
        ]),
        "service/shell created\npod/shell created\n"
    );
    wait_for(90, "shell Running", || {
        (k(&["get", "pod", "shell", "-o", "jsonpath={.status.phase}"]) == "Running").then_some(())
    });
    // What r8s kubectl lists is what the Go kubectl lists.
    let names = k(&["get", "pods", "-o", "name"]);
    assert_eq!(names, s.ok(V, &["get", "pods", "-o", "name"]));
    assert_eq!(names.lines().count(), 3, "{names}");
    let wide = k(&["get", "pods", "-o", "wide", "-l", "app=nginx"]);
    assert!(wide.starts_with("NAME "), "{wide}");
    assert!(
        wide.lines()
            .skip(1)
            .all(|l| l.contains(" Running ") && l.contains("10.214.")),
        "{wide}"
    );
    let endpoints = k(&[
        "get",
        "endpoints",
        "shell",
        "-o",
        "jsonpath={.subsets[0].ports[0].port}",
    ]);
    assert_eq!(endpoints, "8080");

    // describe shows the running container and the pod's events.
    let described = wait_for(30, "the Started event", || {
        let d = k(&["describe", "pod", "shell"]);
        d.contains("Normal  Started").then_some(d)
    });
    for line in [
        "Status:           Running",
        "    State:          Running",
        "    Ready:          True",
        "    Restart Count:  0",
        "      sh\n      -c\n      echo started; sleep 3600\n",
        "Normal  Scheduled",
    ] {
        assert!(described.contains(line), "{line:?} missing from:\n{described}");
    }
    let described = k(&["describe", "deployment", "nginx"]);
    assert!(
        described.contains(
            "Replicas:               2 desired | 2 updated | 2 total | 2 available | 0 unavailable"
        ),
        "{described}"
    );

    // Logs and exec.
    wait_for(30, "the shell's log", || {
        (k(&["logs", "shell"]) == "started\n").then_some(())
    });
    assert_eq!(k(&["logs", "pod/shell", "--tail=1", "-c", "shell"]), "started\n");
    // By selector, with the source as a prefix; and the refusals, as kubectl 1.33 words them.
    for args in [
        &["logs", "-l", "run=shell", "--prefix"][..],
        &["logs", "-l", "run=shell", "--all-containers"],
        &["logs", "-l", "run=nobody"],
        &["logs"],
        &["logs", "shell", "-l", "run=shell"],
        &["logs", "-f", "-l", "app=nginx", "--max-log-requests=1"],
    ] {
        let ours = s.r8s_kubectl(args, None);
        let theirs = s.kubectl(V, args);
        assert_eq!(
            (
                String::from_utf8_lossy(&ours.stdout),
                String::from_utf8_lossy(&ours.stderr),
                ours.status.code()
            ),
            (
                String::from_utf8_lossy(&theirs.stdout),
                String::from_utf8_lossy(&theirs.stderr),
                theirs.status.code()
            ),
            "{args:?}"
        );
    }
    assert_eq!(
        k(&["logs", "-l", "run=shell", "--prefix"]),
        "[pod/shell/shell] started\n"
    );
    assert_eq!(
        k(&["exec", "shell", "--", "sh", "-c", "echo hello from $(hostname)"]),
        "hello from shell\n"
    );
    // Standard input reaches the command, and so does its end (WebSocket v5's close signal,
    // which the kubelet turns into SPDY's half-close for containerd): `tr` reads to the end.
    let piped = s.r8s_kubectl(
        &[
            "exec",
            "-i",
            "shell",
            "--",
            "sh",
            "-c",
            "timeout 20 tr a-z A-Z; echo done $?",
        ],
        Some("piped text\nand more\n"),
    );
    assert_eq!(
        String::from_utf8_lossy(&piped.stdout),
        "PIPED TEXT\nAND MORE\ndone 0\n"
    );
    // The same over SPDY, kubectl's transport where WebSocket v5 is not offered (forced as
    // kubectl's KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false forces it): the stdin stream's
    // half-close ends the input; the exit code comes from the error stream.
    let spdy = [("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false")];
    let piped = s.r8s_kubectl_env(
        &[
            "exec",
            "-i",
            "shell",
            "--",
            "sh",
            "-c",
            "timeout 20 tr a-z A-Z; exit 5",
        ],
        Some("over spdy\n"),
        &spdy,
    );
    assert_eq!(String::from_utf8_lossy(&piped.stdout), "OVER SPDY\n");
    assert_eq!(piped.status.code(), Some(5));
    assert!(
        String::from_utf8_lossy(&piped.stderr).contains("command terminated with exit code 5"),
        "{}",
        String::from_utf8_lossy(&piped.stderr)
    );
    let missing = s.r8s_kubectl_env(&["exec", "shell", "-c", "nope", "--", "true"], None, &spdy);
    assert_eq!(
        String::from_utf8_lossy(&missing.stderr),
        "error: container nope is not valid for pod shell\n"
    );
    // A terminal (`script` gives one) over both: the remote side sees a tty, the exit code
    // comes back, and kubectl ends although its raw-mode input never does.
    for env in [&[][..], &spdy[..]] {
        let line = format!(
            "{} kubectl --kubeconfig {} exec -it shell -- sh -c 'tty; exit 3'",
            env!("CARGO_BIN_EXE_r8s"),
            s.kubeconfig.display()
        );
        let out = Command::new("timeout")
            .args(["30", "script", "-qec", &line, "/dev/null"])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(3), "{env:?}: {text}");
        assert!(text.contains("/dev/pts/"), "{env:?}: {text}");
    }
    // The terminal's size goes with it, at the start and on every change (SIGWINCH), over
    // both transports: a pty of 30x100 made here, then resized to 40x120.
    const RESIZE: &str = r#"
import fcntl, os, pty, select, struct, sys, termios, time
def size(fd, rows, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
pid, fd = pty.fork()
if pid == 0:
    size(0, 30, 100)
    os.execv(sys.argv[1], sys.argv[1:])
seen, resized, deadline = b"", False, time.time() + 30
while time.time() < deadline:
    if select.select([fd], [], [], 0.2)[0]:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    if b"30 100" in seen and not resized:
        size(fd, 40, 120)
        resized = True
os.waitpid(pid, 0)
sys.stdout.write(seen.decode(errors="replace"))
"#;
    for env in [&[][..], &spdy[..]] {
        let out = Command::new("python3")
            .args(["-c", RESIZE, env!("CARGO_BIN_EXE_r8s"), "kubectl", "--kubeconfig"])
            .arg(&s.kubeconfig)
            .args([
                "exec",
                "-it",
                "shell",
                "--",
                "sh",
                "-c",
                // Every size change is printed (the first may come after the start).
                "trap 's=$(stty size); echo \"$s\"; [ \"$s\" = \"40 120\" ] && exit 0' WINCH; \
                 stty size; i=0; while [ $i -lt 20 ]; do sleep 1 & wait $!; i=$((i+1)); done",
            ])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("30 100") && text.contains("40 120"),
            "{env:?}: {text}"
        );
    }
    let failed = s.r8s_kubectl(
        &["exec", "shell", "--", "sh", "-c", "echo oops >&2; exit 3"],
        None,
    );
    assert_eq!(failed.status.code(), Some(3));
    let err = String::from_utf8_lossy(&failed.stderr);
    assert!(
        err.contains("oops") && err.contains("command terminated with exit code 3"),
        "{err}"
    );
    let missing = s.r8s_kubectl(&["exec", "missing", "--", "true"], None);
    assert_eq!(
        String::from_utf8_lossy(&missing.stderr),
        "error: error from server (NotFound): pods \"missing\" not found in namespace \"default\"\n"
    );
    // `cp` both ways through tar in the container: a directory up, back down, one file.
    let local = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(local.path().join("up/sub")).unwrap();
    std::fs::write(local.path().join("up/a.txt"), "alpha\n").unwrap();
    std::fs::write(local.path().join("up/sub/b.txt"), "beta\n").unwrap();
    let up = local.path().join("up").display().to_string();
    k(&["cp", &up, "shell:/tmp/up"]);
    assert_eq!(
        k(&["exec", "shell", "--", "cat", "/tmp/up/a.txt", "/tmp/up/sub/b.txt"]),
        "alpha\nbeta\n"
    );
    // Into an existing directory: under the source's name.
    let one = local.path().join("up/a.txt").display().to_string();
    k(&["cp", &one, "shell:/tmp"]);
    assert_eq!(k(&["exec", "shell", "--", "cat", "/tmp/a.txt"]), "alpha\n");
    // Over SPDY too (tar in the container reads to the half-close).
    let over_spdy = s.r8s_kubectl_env(
        &["cp", &one, "shell:/tmp/spdy.txt"],
        None,
        &[("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false")],
    );
    assert!(
        over_spdy.status.success(),
        "{}",
        String::from_utf8_lossy(&over_spdy.stderr)
    );
    assert_eq!(k(&["exec", "shell", "--", "cat", "/tmp/spdy.txt"]), "alpha\n");
    let down = local.path().join("down");
    k(&["cp", "shell:/tmp/up", &down.display().to_string()]);
    assert_eq!(std::fs::read_to_string(down.join("a.txt")).unwrap(), "alpha\n");
    assert_eq!(std::fs::read_to_string(down.join("sub/b.txt")).unwrap(), "beta\n");
    let host = local.path().join("hostname");
    k(&["cp", "default/shell:/etc/hostname", &host.display().to_string()]);
    assert_eq!(std::fs::read_to_string(&host).unwrap(), "shell\n");
    let missing = s.r8s_kubectl(&["cp", "/nonexistent-r8s", "shell:/tmp"], None);
    assert_eq!(
        String::from_utf8_lossy(&missing.stderr),
        "error: /nonexistent-r8s doesn't exist in local filesystem\n"
    );
    // `run -i --rm`: attached once running, the exit code returned, the pod deleted after.
    let once = s.r8s_kubectl(
        &[
            "run",
            "-i",
            "--rm",
            "--restart=Never",
            "once",
            "--image=busybox",
            "--",
            "sh",
            "-c",
            "sleep 2; echo hi; exit 3",
        ],
        None,
    );
    let (out, err) = (
        String::from_utf8_lossy(&once.stdout),
        String::from_utf8_lossy(&once.stderr),
    );
    assert_eq!(once.status.code(), Some(3), "{out}{err}");
    assert_eq!(out, "hi\npod \"once\" deleted\n", "{err}");
    assert!(err.contains("pod default/once terminated (Error)"), "{err}");
    // (kubectl does not wait for the deletion; the kubelet confirms it soon.)
    wait_for(30, "the run pod gone", || {
        (!s.kubectl(V, &["get", "pod", "once"]).status.success()).then_some(())
    });
    // Its standard input reaches the container (one line: see exec above).
    let reader = s.r8s_kubectl(
        &[
            "run",
            "-i",
            "--rm",
            "--restart=Never",
            "reader",
            "--image=busybox",
            "--",
            "sh",
            "-c",
            "head -n1 | tr a-z A-Z",
        ],
        Some("piped line\n"),
    );
    assert_eq!(
        String::from_utf8_lossy(&reader.stdout),
        "PIPED LINE\npod \"reader\" deleted\n",
        "{}",
        String::from_utf8_lossy(&reader.stderr)
    );
    assert_eq!(reader.status.code(), Some(0));
    let misuse = s.r8s_kubectl(&["run", "--rm", "x", "--image=busybox"], None);
    assert_eq!(
        String::from_utf8_lossy(&misuse.stderr),
        "error: --rm should only be used for attached containers\nSee 'kubectl run -h' for help and examples\n"
    );
    // A Deployment's logs are its first pod's.
    let deploy_logs = s.r8s_kubectl(&["logs", "deployment/nginx", "--tail=0"], None);
    assert!(deploy_logs.status.success(), "{deploy_logs:?}");

    // Port-forward: a local port reaches nginx in its pod, over WebSocket and over SPDY
    // (kubectl's KUBECTL_PORT_FORWARD_WEBSOCKETS=false, and its fallback).
    for websockets in ["true", "false"] {
        let mut forward = std::process::Command::new(env!("CARGO_BIN_EXE_r8s"))
            .args(["kubectl", "--kubeconfig"])
            .arg(&s.kubeconfig)
            .args(["port-forward", "deployment/nginx", ":80"])
            .env("KUBECTL_PORT_FORWARD_WEBSOCKETS", websockets)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufRead::lines(std::io::BufReader::new(forward.stdout.take().unwrap()));
        let first = lines.next().unwrap().unwrap();
        let port: u16 = first
            .strip_prefix("Forwarding from 127.0.0.1:")
            .and_then(|r| r.strip_suffix(" -> 80"))
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("{first}"));
        let page = {
            use std::io::{Read, Write};
            let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            conn.set_read_timeout(Some(std::time::Duration::from_secs(20)))
                .unwrap();
            conn.write_all(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
            let mut page = String::new();
            let _ = conn.read_to_string(&mut page);
            page
        };
        let _ = forward.kill();
        let _ = forward.wait();
        assert!(
            page.contains("Welcome to nginx"),
            "websockets {websockets}: {page}"
        );
    }

    // Attach: the container's own output as it comes.
    k(&[
        "run",
        "ticker",
        "--image=busybox",
        "--command",
        "--",
        "sh",
        "-c",
        "while true; do echo tick; sleep 1; done",
    ]);
    wait_for(90, "ticker Running", || {
        (k(&["get", "pod", "ticker", "-o", "jsonpath={.status.phase}"]) == "Running").then_some(())
    });
    let mut attach = std::process::Command::new(env!("CARGO_BIN_EXE_r8s"))
        .args(["kubectl", "--kubeconfig"])
        .arg(&s.kubeconfig)
        .args(["attach", "ticker"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap();
    let mut ticks = std::io::BufRead::lines(std::io::BufReader::new(attach.stdout.take().unwrap()));
    let tick = ticks.next().unwrap().unwrap();
    let _ = attach.kill();
    let _ = attach.wait();
    assert_eq!(tick, "tick");
    k(&["delete", "pod", "ticker", "--grace-period=1"]);

    // Scale, restart, and the rollout that follows.
    assert_eq!(
        k(&["scale", "deployment", "nginx", "--replicas=1"]),
        "deployment.apps/nginx scaled\n"
    );
    assert_eq!(
        k(&["rollout", "restart", "deployment/nginx"]),
        "deployment.apps/nginx restarted\n"
    );
    let status = k(&["rollout", "status", "deployment/nginx", "--timeout=120s"]);
    assert!(status.ends_with("successfully rolled out\n"), "{status}");
    // History and undo, read the same by both kubectls.
    let history = k(&["rollout", "history", "deployment/nginx"]);
    assert_eq!(history, s.ok(V, &["rollout", "history", "deployment/nginx"]));
    assert_eq!(
        history,
        "deployment.apps/nginx \nREVISION  CHANGE-CAUSE\n1         <none>\n2         <none>\n\n"
    );
    let revision = k(&["rollout", "history", "deployment/nginx", "--revision=1"]);
    assert_eq!(
        revision,
        s.ok(V, &["rollout", "history", "deployment/nginx", "--revision=1"])
    );
    assert_eq!(
        k(&["rollout", "undo", "deployment/nginx"]),
        "deployment.apps/nginx rolled back\n"
    );
    let status = k(&["rollout", "status", "deployment/nginx", "--timeout=120s"]);
    assert!(status.ends_with("successfully rolled out\n"), "{status}");
    assert_eq!(
        k(&["rollout", "history", "deployment/nginx"]),
        "deployment.apps/nginx \nREVISION  CHANGE-CAUSE\n2         <none>\n3         <none>\n\n"
    );
    let replicas = k(&["get", "deployment", "nginx", "-o", "jsonpath={.status.replicas}"]);
    assert_eq!(replicas, "1");

    // Usage from the metrics API, laid out as kubectl 1.33 lays it out.
    let header = |text: &str| text.lines().next().unwrap_or("").to_owned();
    let (ours, theirs) = wait_for(60, "kubectl top to have figures", || {
        let ours = s.r8s_kubectl(&["top", "pods"], None);
        let theirs = s.kubectl(V, &["top", "pods"]);
        (ours.status.success() && theirs.status.success()).then(|| {
            (
                String::from_utf8_lossy(&ours.stdout).into_owned(),
                String::from_utf8_lossy(&theirs.stdout).into_owned(),
            )
        })
    });
    assert_eq!(header(&ours), header(&theirs));
    let names = |text: &str| {
        text.lines()
            .skip(1)
            .map(|l| l.split(' ').next().unwrap_or("").to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&ours), names(&theirs));
    assert!(
        ours.lines()
            .skip(1)
            .all(|l| l.contains("m ") && l.trim_end().ends_with("Mi")),
        "{ours}"
    );
    let nodes = k(&["top", "nodes"]);
    assert_eq!(header(&nodes), header(&s.ok(V, &["top", "nodes"])));
    assert!(
        nodes
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("own-kubectl ") && l.contains('%')),
        "{nodes}"
    );

    // The node: taints, cordon.
    assert_eq!(
        k(&["taint", "nodes", "own-kubectl", "dedicated=x:NoSchedule"]),
        "node/own-kubectl tainted\n"
    );
    let taints = s.ok(
        V,
        &["get", "node", "own-kubectl", "-o", "jsonpath={.spec.taints}"],
    );
    assert!(
        taints.contains(r#""key":"dedicated""#) && taints.contains("NoSchedule"),
        "{taints}"
    );
    assert_eq!(
        k(&["taint", "node/own-kubectl", "dedicated:NoSchedule-"]),
        "node/own-kubectl untainted\n"
    );
    assert_eq!(k(&["cordon", "own-kubectl"]), "node/own-kubectl cordoned\n");
    assert_eq!(
        k(&["cordon", "own-kubectl"]),
        "node/own-kubectl already cordoned\n"
    );
    assert_eq!(k(&["uncordon", "own-kubectl"]), "node/own-kubectl uncordoned\n");
    assert_eq!(
        k(&["wait", "--for=condition=Ready", "pod/shell", "--timeout=60s"]),
        "pod/shell condition met\n"
    );

    // Deleting waits until the objects are gone.
    assert_eq!(
        k(&["delete", "pod/shell", "service/shell", "--grace-period=1"]),
        "pod \"shell\" deleted\nservice \"shell\" deleted\n"
    );
    let gone = s.kubectl(V, &["get", "pod", "shell"]);
    assert!(!gone.status.success());
    // Drain: the bare pod is refused without --force; then every pod is evicted.
    let bare = k(&[
        "run",
        "bare",
        "--image=busybox",
        "--command",
        "--",
        "sleep",
        "3600",
    ]);
    assert_eq!(bare, "pod/bare created\n");
    wait_for(90, "bare Running", || {
        (k(&["get", "pod", "bare", "-o", "jsonpath={.status.phase}"]) == "Running").then_some(())
    });
    let refused = s.r8s_kubectl(&["drain", "own-kubectl"], None);
    assert_eq!(refused.status.code(), Some(1));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("cannot delete Pods that declare no controller (use --force to override): default/bare"),
        "{err}"
    );
    let drained = k(&[
        "drain",
        "own-kubectl",
        "--force",
        "--grace-period=1",
        "--timeout=120s",
    ]);
    for line in [
        "node/own-kubectl already cordoned",
        "evicting pod default/bare",
        "pod/bare evicted",
        "node/own-kubectl drained",
    ] {
        assert!(drained.contains(line), "{line:?} missing from:\n{drained}");
    }
    assert!(!s.kubectl(V, &["get", "pod", "bare"]).status.success());
    assert_eq!(k(&["uncordon", "own-kubectl"]), "node/own-kubectl uncordoned\n");
    assert_eq!(
        k(&["delete", "deployment", "nginx"]),
        "deployment.apps \"nginx\" deleted\n"
    );
}
