//! r8s's own kubectl judged against the real one: each command runs with `r8s kubectl` and
//! with kubectl 1.33 against the same `r8s server`, on twin objects (names ending `-r8x` and
//! `-gox`), and stdout, stderr and the exit code must be the same once uids, resource
//! versions, times and ages are set aside.

use crate::support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use support::{kubectl_binary, Server};

struct Twins<'a> {
    server: &'a Server,
    dir: PathBuf,
}

#[derive(Debug, PartialEq)]
struct Run {
    stdout: String,
    stderr: String,
    code: i32,
}

impl<'a> Twins<'a> {
    fn new(server: &'a Server, dir: &tempfile::TempDir) -> Self {
        Twins {
            server,
            dir: dir.path().to_owned(),
        }
    }

    fn command(&self, ours: bool) -> Command {
        let mut cmd = if ours {
            let mut c = Command::new(env!("CARGO_BIN_EXE_r8s"));
            c.arg("kubectl");
            c
        } else {
            Command::new(kubectl_binary("1.33"))
        };
        let cache = self.dir.join(if ours { "cache-r8s" } else { "cache-go" });
        cmd.arg("--kubeconfig")
            .arg(&self.server.kubeconfig)
            .env("KUBECACHEDIR", cache)
            .env("HOME", &self.dir);
        cmd
    }

    /// `args` with `-T` replaced by each twin's suffix; `stdin` likewise.
    fn run(&self, ours: bool, args: &[&str], stdin: Option<&str>) -> Run {
        self.run_env(ours, args, stdin, &[])
    }

    fn run_env(&self, ours: bool, args: &[&str], stdin: Option<&str>, env: &[(&str, &str)]) -> Run {
        let suffix = if ours { "-r8x" } else { "-gox" };
        let args: Vec<String> = args.iter().map(|a| a.replace("-T", suffix)).collect();
        let mut command = self.command(ours);
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        if let Some(text) = stdin {
            input.write_all(text.replace("-T", suffix).as_bytes()).unwrap();
        }
        drop(input);
        let out = child.wait_with_output().unwrap();
        Run {
            stdout: normalise(&String::from_utf8_lossy(&out.stdout), suffix),
            stderr: normalise(&String::from_utf8_lossy(&out.stderr), suffix),
            code: out.status.code().unwrap_or(-1),
        }
    }

    /// `get -w` for three seconds while a ConfigMap comes, changes and goes.
    fn watch(&self, ours: bool) -> Run {
        let suffix = if ours { "-r8x" } else { "-gox" };
        let name = format!("watched{suffix}");
        let child = self
            .command(ours)
            .args([
                "get",
                "cm",
                "-l",
                &format!("watch={name}"),
                "-w",
                "--request-timeout=3s",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(800));
        let cm = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  labels:\n    watch: {name}\n"
        );
        self.server.ok_stdin("1.33", &["create", "-f", "-"], &cm);
        self.server.ok("1.33", &["label", "cm", &name, "more=yes"]);
        self.server.ok("1.33", &["delete", "cm", &name]);
        let out = child.wait_with_output().unwrap();
        Run {
            stdout: normalise(&String::from_utf8_lossy(&out.stdout), suffix),
            stderr: normalise(&String::from_utf8_lossy(&out.stderr), suffix),
            code: out.status.code().unwrap_or(-1),
        }
    }

    /// Both kubectls with `EDITOR` set, the same answer.
    fn same_editor(&self, args: &[&str], editor: &str) {
        let go = self.run_env(false, args, None, &[("EDITOR", editor)]);
        let ours = self.run_env(true, args, None, &[("EDITOR", editor)]);
        assert_eq!(
            ours, go,
            "r8s kubectl (left) and kubectl 1.33 (right) differ on {args:?} with EDITOR={editor}"
        );
    }

    /// Both kubectls, the same answer; ours is returned.
    fn same(&self, args: &[&str]) -> Run {
        self.same_stdin(args, None)
    }

    fn same_stdin(&self, args: &[&str], stdin: Option<&str>) -> Run {
        let go = self.run(false, args, stdin);
        let ours = self.run(true, args, stdin);
        assert_eq!(
            ours, go,
            "r8s kubectl (left) and kubectl 1.33 (right) differ on {args:?}\n--- r8s kubectl stdout:\n{}\n--- kubectl stdout:\n{}",
            ours.stdout, go.stdout
        );
        ours
    }
}

/// Set aside what differs between any two runs: the twin suffix, uids, resource versions,
/// timestamps and ages (a table's columns are compared with single spaces when an age
/// changes its width).
fn normalise(text: &str, suffix: &str) -> String {
    let mut out = String::new();
    let aged = text.split([' ', '\n']).any(is_age);
    for line in text.lines() {
        let mut words: Vec<String> = Vec::new();
        for word in line.split(' ') {
            let mut w = word.replace(suffix, "-N");
            let bare = w.trim_matches(|c| matches!(c, '"' | ',' | '(' | ')' | ':'));
            if is_uid(bare) {
                w = "UID".into();
            } else if bare.len() == 8
                && bare.bytes().enumerate().all(|(i, b)| {
                    if i == 2 || i == 5 {
                        b == b':'
                    } else {
                        b.is_ascii_digit()
                    }
                })
            {
                // A clock time, as `describe` dates (RFC 1123) show it.
                w = "CLOCK".into();
            } else if bare.parse::<std::net::Ipv4Addr>().is_ok() {
                w = "IPADDR".into();
            } else if let Some(suffix) = bare.strip_prefix("kube-api-access-").filter(|x| x.len() == 5) {
                w = w.replace(suffix, "XXXXX");
            } else if let Some(hash) = generated_hash(bare) {
                w = w.replace(&hash, "HASH");
            } else if is_age(&w) {
                w = "AGE".into();
            } else if (w.starts_with("\"20") && w.trim_end_matches(',').ends_with("Z\""))
                || (bare.len() == 20
                    && bare.starts_with("20")
                    && bare.ends_with('Z')
                    && bare.as_bytes()[10] == b'T')
            {
                // A timestamp, quoted in JSON or bare (RFC 3339, as `describe`'s generic
                // layout shows one): the twins may be made a second apart.
                w = "TIME".into();
            } else if !w.trim_matches(|c| c == '"' || c == ',').is_empty()
                && w.trim_matches(|c| c == '"' || c == ',')
                    .chars()
                    .all(|c| c.is_ascii_digit())
                && matches!(
                    words.iter().rev().find(|w| !w.is_empty()).map(String::as_str),
                    // (`describe`'s generic layout: "Resource Version:".)
                    Some("resourceVersion:" | "\"resourceVersion\":" | "Version:")
                )
            {
                w = "RV".into();
            }
            words.push(w);
        }
        if aged {
            words.retain(|w| !w.is_empty());
        }
        out.push_str(&words.join(" "));
        out.push('\n');
    }
    out
}

/// A pod-template hash (`web-N-598dd6d5ff`) or generated pod suffix after a twin's name.
fn generated_hash(word: &str) -> Option<String> {
    let (_, rest) = word.split_once("-N-")?;
    let hash = rest.split(['-', ':', '/']).next()?;
    let looks_generated = (5..=10).contains(&hash.len())
        && hash.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && hash.chars().any(|c| c.is_ascii_digit());
    looks_generated.then(|| hash.to_owned())
}

fn is_uid(s: &str) -> bool {
    s.len() == 36
        && s.chars().filter(|&c| c == '-').count() == 4
        && s.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
}

/// `5s`, `9m30s`, `2d3h`, `<unknown>`.
fn is_age(s: &str) -> bool {
    if s == "<unknown>" {
        return true;
    }
    let mut digits = false;
    let mut any_unit = false;
    for c in s.chars() {
        if c.is_ascii_digit() {
            digits = true;
        } else if matches!(c, 's' | 'm' | 'h' | 'd' | 'y') && digits {
            digits = false;
            any_unit = true;
        } else {
            return false;
        }
    }
    any_unit && !digits
}

const MANIFEST: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied-T\n  labels:\n    tier: web-T\ndata:\n  a: \"1\"\n  long: this is a long value with spaces that goes on and on and on past eighty columns for sure\n  script: |\n    echo one\n    echo two\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web-T\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {app: web-T}\n  template:\n    metadata:\n      labels: {app: web-T}\n    spec:\n      containers:\n      - name: c\n        image: nginx\n";

fn write(dir: &Path, name: &str, text: &str) -> String {
    for suffix in ["-r8x", "-gox"] {
        let file = dir.join(name.replace("-T", suffix));
        std::fs::write(&file, text.replace("-T", suffix)).unwrap();
    }
    dir.join(name).to_string_lossy().into_owned()
}

#[test]
fn r8s_kubectl_answers_as_kubectl_does() {
    let s = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let t = Twins::new(&s, &dir);

    // Discovery, from the server and then from each one's cache (kubectl's layout).
    t.same(&["api-versions"]);
    t.same(&["api-resources"]);
    t.same(&["api-resources", "--namespaced=false", "-o", "name"]);
    assert!(dir
        .path()
        .join("cache-r8s/discovery")
        .read_dir()
        .unwrap()
        .any(|e| e.unwrap().path().join("apps/v1/serverresources.json").is_file()));

    // Reading, and its errors.
    t.same(&["get"]);
    t.same(&["get", "pods"]);
    t.same(&["get", "nodes"]);
    t.same(&["get", "nope"]);
    t.same(&["get", "configmap", "nope"]);
    t.same(&["get", "ns", "-o", "name"]);
    t.same(&["get", "ns", "default", "-o", "yaml"]);
    t.same(&["get", "sa", "-A"]);
    t.same(&["--context", "nope", "get", "pods"]);

    // Generators.
    t.same(&["create", "namespace", "team-T"]);
    t.same(&["create", "namespace", "team-T"]);
    t.same(&[
        "-n",
        "team-T",
        "create",
        "configmap",
        "cm-T",
        "--from-literal=a=b",
        "--from-literal=n=123",
    ]);
    t.same(&[
        "create",
        "deployment",
        "d-T",
        "--image=registry:5000/nginx:1.25",
        "--replicas=2",
        "--port=80",
        "--dry-run=client",
        "-o",
        "yaml",
    ]);
    t.same(&[
        "create",
        "secret",
        "generic",
        "s-T",
        "--from-literal=user=admin",
        "--dry-run=client",
        "-o",
        "yaml",
    ]);
    t.same(&["-n", "team-T", "create", "serviceaccount", "robot-T"]);
    let dry = ["--dry-run=client", "-o", "yaml"];
    for generator in [
        &["create", "job", "j-T", "--image=busybox", "--", "echo", "hi"][..],
        &[
            "create",
            "cronjob",
            "cj-T",
            "--image=busybox",
            "--schedule=*/1 * * * *",
            "--",
            "echo",
            "hi",
        ],
        &["create", "service", "clusterip", "s-T", "--tcp=80:8080"],
        &[
            "create",
            "service",
            "nodeport",
            "s-T",
            "--tcp=80",
            "--node-port=30080",
        ],
        &["create", "service", "loadbalancer", "s-T", "--tcp=80:8080,443"],
        &[
            "create",
            "service",
            "externalname",
            "s-T",
            "--external-name=example.com",
        ],
        &["create", "service", "clusterip", "s-T", "--clusterip=None"],
        &[
            "create",
            "role",
            "r-T",
            "--verb=get,list",
            "--resource=pods,deployments.apps,pods/log",
            "--resource-name=a",
        ],
        &[
            "create",
            "clusterrole",
            "cr-T",
            "--verb=get",
            "--non-resource-url=/logs",
        ],
        &[
            "create",
            "rolebinding",
            "rb-T",
            "--role=r",
            "--user=bob",
            "--serviceaccount=default:sa",
            "--group=g",
        ],
        &[
            "create",
            "clusterrolebinding",
            "crb-T",
            "--clusterrole=cr",
            "--user=bob",
        ],
        &["create", "quota", "q-T", "--hard=pods=10,cpu=2"],
        &[
            "create",
            "priorityclass",
            "pc-T",
            "--value=100",
            "--description=d",
        ],
        &["create", "pdb", "p-T", "--selector=app=x", "--min-available=1"],
    ] {
        t.same(&[generator, &dry[..]].concat());
    }
    t.same(&["create", "role", "bad-T", "--verb=get", "--resource=nope"]);
    t.same(&["create", "job", "job-T", "--image=busybox"]);
    t.same(&["create", "job", "job-T", "--image=busybox"]);
    let token = s.r8s_ok(&["create", "token", "default", "--duration=10m"]);
    assert!(token.starts_with("eyJ") && token.ends_with('\n'), "{token}");
    t.same(&[
        "-n",
        "team-T",
        "create",
        "secret",
        "generic",
        "s-T",
        "--from-literal=user=admin",
    ]);
    t.same(&["-n", "team-T", "describe", "secret", "s-T"]);

    // Reading what was made, in every format.
    t.same(&["-n", "team-T", "get", "cm,sa"]);
    t.same(&["-n", "team-T", "get", "cm", "cm-T", "-o", "yaml"]);
    t.same(&["-n", "team-T", "get", "cm", "cm-T", "nope", "kube-root-ca.crt"]);
    t.same(&["-n", "team-T", "get", "configmaps", "-o", "json"]);
    t.same(&["-n", "team-T", "get", "sa/robot-T", "cm/cm-T", "-o", "name"]);

    // Files: create, create again, apply (created, unchanged, configured), delete.
    let manifest = write(dir.path(), "m-T.yaml", MANIFEST);
    t.same(&["create", "-f", &manifest]);
    t.same(&["create", "-f", &manifest]);
    // Applying over what `create` made warns and adds the annotation; diff shows nothing left.
    t.same(&["apply", "-f", &manifest]);
    let diff = [("KUBECTL_EXTERNAL_DIFF", "diff -u -N --label live --label merged")];
    let diffs = |args: &[&str]| {
        let go = t.run_env(false, args, None, &diff);
        let ours = t.run_env(true, args, None, &diff);
        assert_eq!(
            ours, go,
            "r8s kubectl (left) and kubectl 1.33 (right) differ on {args:?}"
        );
        ours
    };
    assert_eq!(diffs(&["diff", "-f", &manifest]).code, 0);
    t.same(&["get", "configmaps", "applied-T", "-o", "yaml"]);
    t.same(&["get", "cm", "-l", "tier=web-T", "--show-labels", "-L", "tier"]);
    // --sort-by: natural order of names, quantities by value, a missing field first.
    for (name, n) in [("s10-T", "2"), ("s2-T", "100m"), ("s1-T", "1Ki")] {
        t.same(&["create", "configmap", name, &format!("--from-literal=n={n}")]);
        t.same(&["label", "configmap", name, "sorted=s-T"]);
    }
    t.same(&["create", "configmap", "s0-T"]);
    t.same(&["label", "configmap", "s0-T", "sorted=s-T"]);
    t.same(&["get", "cm", "-l", "sorted=s-T", "--sort-by=.metadata.name"]);
    t.same(&[
        "get",
        "cm",
        "-l",
        "sorted=s-T",
        "--sort-by={.data.n}",
        "-o",
        "name",
    ]);
    t.same(&[
        "get",
        "cm",
        "-l",
        "sorted=s-T",
        "--sort-by=.data.n",
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ]);
    t.same(&["get", "cm", "-l", "sorted=s-T", "--sort-by=.nope"]);
    t.same(&["get", "cm", "-l", "sorted=s-T", "--sort-by=.nope", "-o", "name"]);
    t.same(&["get", "cm", "s2-T", "--sort-by=.nope"]);
    t.same(&["delete", "-f", &manifest]);
    t.same(&["apply", "-f", &manifest]);
    t.same(&["apply", "-f", &manifest]);
    write(
        dir.path(),
        "m-T.yaml",
        &MANIFEST
            .replace("replicas: 1", "replicas: 2")
            .replace("  a: \"1\"\n", ""),
    );
    t.same(&["apply", "-f", &manifest]);
    t.same(&["get", "cm", "applied-T", "-o", "yaml"]);
    t.same(&["get", "deployments.apps", "web-T", "-o", "jsonpath-not-yet"]);
    t.same_stdin(
        &["apply", "-f", "-"],
        Some(
            &MANIFEST
                .replace("replicas: 1", "replicas: 2")
                .replace("  a: \"1\"\n", ""),
        ),
    );

    // Watching: the list (nothing), then a row per change.
    let (go, ours) = (t.watch(false), t.watch(true));
    assert_eq!(ours, go);
    assert_eq!(ours.stdout.lines().count(), 4, "{}", ours.stdout);

    // Changing live objects.
    t.same(&["label", "cm", "applied-T", "a=b"]);
    t.same(&["label", "cm", "applied-T", "a=c"]);
    t.same(&["label", "cm", "applied-T", "a=c", "--overwrite"]);
    t.same(&["label", "cm", "applied-T", "a-"]);
    t.same(&["label", "cm", "applied-T", "nope-"]);
    t.same(&["annotate", "cm/applied-T", "note=x"]);
    t.same(&["annotate", "cm/applied-T", "note-"]);
    t.same(&["patch", "cm", "applied-T", "-p", r#"{"data":{"p":"1"}}"#]);
    t.same(&["patch", "cm", "applied-T", "-p", r#"{"data":{"p":"1"}}"#]);
    t.same(&[
        "patch",
        "cm",
        "applied-T",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/data/p"}]"#,
    ]);
    t.same(&["scale", "deployment", "web-T", "--replicas=3"]);
    t.same(&["rollout", "pause", "deployment/web-T"]);
    t.same(&["rollout", "pause", "deployment/web-T"]);
    t.same(&["rollout", "resume", "deployment/web-T"]);
    t.same(&["rollout", "resume", "deployment/web-T"]);
    t.same(&["rollout", "restart", "deployment/web-T"]);
    // A StatefulSet's and a DaemonSet's history live in ControllerRevisions.
    for kind in ["StatefulSet", "DaemonSet"] {
        let lower = kind.to_lowercase();
        let short = if kind == "StatefulSet" { "sts" } else { "ds" };
        let service = if kind == "StatefulSet" {
            format!("\n  serviceName: hist{short}-T")
        } else {
            String::new()
        };
        t.same_stdin(
            &["apply", "-f", "-"],
            Some(&format!(
                "apiVersion: apps/v1\nkind: {kind}\nmetadata:\n  name: hist{short}-T\nspec:{service}\n  selector:\n    matchLabels:\n      app: hist{short}-T\n  template:\n    metadata:\n      labels:\n        app: hist{short}-T\n    spec:\n      containers:\n      - name: c\n        image: busybox:1\n"
            )),
        );
        let target = format!("{lower}/hist{short}-T");
        t.same(&["rollout", "undo", &target]);
        t.same(&["set", "image", &target, "c=busybox:2"]);
        // The controller records the new revision.
        for _ in 0..50 {
            let revs = t
                .server
                .kubectl("1.33", &["get", "controllerrevisions", "-o", "name"]);
            let text = String::from_utf8_lossy(&revs.stdout).to_string();
            if text.matches(&format!("hist{short}-")).count() >= 4 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        t.same(&["rollout", "history", &target]);
        t.same(&["rollout", "history", &target, "--revision=1"]);
        t.same(&["rollout", "history", &target, "--revision=7"]);
        t.same(&["rollout", "undo", &target, "--to-revision=7"]);
        t.same(&["rollout", "undo", &target]);
        t.same(&[
            "get",
            &target,
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}",
        ]);
        t.same(&["rollout", "undo", &target, "--to-revision=2"]);
    }
    // Kinds kubectl has no describer for: its generic layout. (ControllerRevisions come out
    // the same too, but their hashed names order the twins' lists differently.)
    t.same_stdin(
        &["apply", "-f", "-"],
        Some("apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: lease-T\n  labels:\n    a: b\nspec:\n  holderIdentity: someone-T\n  leaseDurationSeconds: 15\n  strategy: OldestEmulationVersion\n"),
    );
    t.same(&["describe", "lease", "lease-T"]);
    t.same(&[
        "get",
        "deployment",
        "web-T",
        "-o",
        "jsonpath={.spec.replicas} {.metadata.labels}",
    ]);
    t.same(&[
        "get",
        "cm",
        "-l",
        "tier=web-T",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name}{\"\\n\"}{end}",
    ]);
    t.same(&[
        "get",
        "cm",
        "applied-T",
        "-o",
        "custom-columns=NAME:.metadata.name,TIER:.metadata.labels.tier,NONE:.nope",
    ]);
    t.same(&[
        "run",
        "pod-T",
        "--image=nginx",
        "--port=80",
        "--expose",
        "--env=A=1",
        "--labels=app=x-T",
        "--dry-run=client",
        "-o",
        "yaml",
        "--",
        "sleep",
        "10",
    ]);
    t.same(&[
        "run",
        "pod-T",
        "--image=nginx",
        "--port=80",
        "--expose",
        "--labels=app=pod-T",
    ]);
    t.same(&[
        "expose",
        "deployment",
        "web-T",
        "--port=80",
        "--name=svc-T",
        "--type=NodePort",
        "--dry-run=client",
        "-o",
        "yaml",
    ]);
    t.same(&[
        "expose",
        "deployment/web-T",
        "--port=8080",
        "--target-port=80",
        "--name=svc-T",
    ]);
    t.same(&["get", "svc", "svc-T", "pod-T", "-o", "jsonpath={.spec.ports}"]);
    t.same(&["cluster-info"]);
    t.same(&["auth", "whoami"]);
    t.same(&["--as=jane", "--as-group=devs", "auth", "whoami"]);
    t.same(&["--as=jane", "get", "pods"]);
    t.same(&[
        "--as=system:serviceaccount:default:default",
        "auth",
        "can-i",
        "list",
        "secrets",
    ]);
    t.same(&["auth", "can-i", "create", "pods"]);
    t.same(&["auth", "can-i", "get", "/logs"]);
    t.same(&["logs", "nopod"]);
    // A Deployment at rest (one still rolling out changes its conditions between the runs).
    t.same(&["create", "deployment", "zero-T", "--image=nginx", "--replicas=0"]);
    for suffix in ["-r8x", "-gox"] {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let reason = "jsonpath={.status.conditions[?(@.type==\"Progressing\")].reason}";
        while s.ok(
            "1.33",
            &["get", "deployment", &format!("zero{suffix}"), "-o", reason],
        ) != "NewReplicaSetAvailable"
        {
            assert!(
                std::time::Instant::now() < deadline,
                "zero{suffix} did not settle"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
    t.same(&["describe", "deployment", "zero-T"]);
    t.same(&[
        "wait",
        "--for=condition=Available",
        "deployment/zero-T",
        "--timeout=10s",
    ]);
    t.same(&[
        "wait",
        "--for=condition=Available=false",
        "deployment/zero-T",
        "--timeout=1s",
    ]);
    t.same(&["wait", "--for=jsonpath={.spec.replicas}=0", "deployment/zero-T"]);
    t.same(&["wait", "--for=delete", "configmap/nonexistent", "--timeout=1s"]);
    t.same(&["wait", "--for=condition=Ready", "pod/nonexistent", "--timeout=1s"]);
    t.same(&["set", "image", "deployment/zero-T", "nginx=nginx:2"]);
    t.same(&["set", "image", "deployment/zero-T", "nginx=nginx:2"]);
    t.same(&["set", "image", "deployment/zero-T", "nope=x"]);
    t.same(&["set", "env", "deployment/zero-T", "A=1", "B=2"]);
    t.same(&["set", "env", "deployment/zero-T", "A=1"]);
    t.same(&["set", "env", "deployment/zero-T", "B-"]);
    t.same(&["set", "env", "deployment/zero-T", "--list"]);
    t.same(&["set", "env", "deployment/zero-T", "-c", "nope", "X=1"]);
    t.same(&[
        "set",
        "resources",
        "deployment/zero-T",
        "--limits=cpu=200m,memory=512Mi",
    ]);
    t.same(&[
        "set",
        "resources",
        "deployment/zero-T",
        "--limits=cpu=200m",
        "--requests=cpu=100m",
    ]);
    t.same(&["set", "resources", "deployment/zero-T", "--limits=cpu=200m"]);
    t.same(&[
        "get",
        "deployment/zero-T",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].resources}",
    ]);
    t.same(&[
        "set",
        "resources",
        "deployment/zero-T",
        "-c",
        "nope",
        "--limits=cpu=1",
    ]);
    t.same(&["set", "resources", "deployment/zero-T"]);
    t.same(&["rollout", "status", "deployment/zero-T"]);
    t.same(&["events", "--for", "deployment/web-T"]);
    t.same(&["events", "--for", "deployment/zero-T", "--types=Warning"]);
    t.same(&[
        "autoscale",
        "deployment",
        "zero-T",
        "--min=1",
        "--max=3",
        "--cpu-percent=50",
        "--dry-run=client",
        "-o",
        "yaml",
    ]);
    t.same(&["autoscale", "deployment/zero-T", "--max=2"]);
    t.same(&["get", "hpa", "zero-T", "-o", "jsonpath={.spec}"]);
    let replacement = write(
        dir.path(),
        "one-T.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: one-T\ndata:\n  k: replaced\n",
    );
    t.same(&["replace", "-f", &replacement]);
    t.same(&["get", "cm", "one-T", "-o", "jsonpath={.data}"]);
    t.same_editor(&["edit", "cm", "one-T"], "true");
    t.same_editor(&["edit", "cm/one-T"], "sed -i s/replaced/edited/");
    t.same_editor(&["edit", "cm", "one-T"], "sed -i s/k:/k2:/");
    t.same(&["get", "cm", "one-T", "-o", "jsonpath={.data}"]);
    t.same(&["describe", "service", "svc-T"]);
    t.same(&["describe", "svc/pod-T"]);
    t.same(&["describe", "pod", "pod-T"]);
    // (One key: the Go kubectl prints a ConfigMap's keys in map order, which varies.)
    t.same(&["create", "configmap", "one-T", "--from-literal=k=v"]);
    t.same(&["describe", "configmap", "one-T"]);
    t.same(&["describe", "namespace", "default"]);
    t.same(&["describe", "serviceaccount", "default"]);
    t.same(&["describe", "pods", "nope"]);
    t.same(&[
        "delete",
        "svc/svc-T",
        "svc/pod-T",
        "pod/pod-T",
        "--grace-period=0",
        "--force",
    ]);

    // Deleting, waiting for the namespace to go.
    t.same(&["delete", "cm", "nope"]);
    t.same(&["delete", "-f", &manifest]);
    t.same(&["-n", "team-T", "delete", "cm", "-l", "nothing=here"]);
    t.same(&["delete", "namespace", "team-T"]);
    t.same(&["get", "ns", "team-T"]);

    // kubeconfig: each twin edits its own copy, and the files must come out the same.
    for suffix in ["-r8x", "-gox"] {
        std::fs::copy(&s.kubeconfig, dir.path().join(format!("kc{suffix}"))).unwrap();
    }
    let kc = dir.path().join("kc-T").to_string_lossy().into_owned();
    for edit in [
        &[
            "config",
            "set-context",
            "dev",
            "--cluster=default",
            "--user=default",
            "--namespace=team",
        ][..],
        &["config", "set-context", "dev", "--namespace=other"],
        &[
            "config",
            "set-cluster",
            "c2",
            "--server=https://127.0.0.1:1",
            "--insecure-skip-tls-verify",
        ],
        &["config", "set-credentials", "u2", "--token=abc"],
        &["config", "rename-context", "dev", "dev2"],
        &["config", "unset", "contexts.dev2.namespace"],
        &["config", "use-context", "dev2"],
        &["config", "delete-context", "dev2"],
        &["config", "delete-cluster", "c2"],
        &["config", "delete-cluster", "c2"],
        &["config", "set-context", "--current", "--namespace=x"],
        &["config", "use-context", "default"],
        &["config", "view"],
    ] {
        t.same(&[edit, &["--kubeconfig", &kc][..]].concat());
    }
    // (get-clusters and get-users are left out: the Go kubectl lists them in map order.)
    let file = |suffix: &str| std::fs::read_to_string(dir.path().join(format!("kc{suffix}"))).unwrap();
    assert_eq!(file("-r8x"), file("-gox"));

    t.same(&["config", "current-context"]);
    t.same(&["config", "get-contexts"]);
    t.same(&["config", "view"]);
    t.same(&["config", "view", "--minify"]);
}

/// `explain` from the server's OpenAPI v3 documents: kinds, fields through refs, arrays and
/// maps, enums, required marks, `--recursive`, `--api-version`, group-qualified names, and
/// the errors — the same text as kubectl 1.33 prints. A document is read once and then from
/// the cache, under its content hash.
#[test]
fn explain_answers_as_kubectl_does() {
    let s = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let t = Twins::new(&s, &dir);
    for args in [
        &["explain", "pods"][..],
        &["explain", "deploy.spec.strategy"],
        &["explain", "deployments.apps.spec.replicas"],
        &["explain", "svc.spec.type"],
        &["explain", "pods.spec.containers.ports"],
        &["explain", "deploy.metadata.labels"],
        &["explain", "jobs.spec.podFailurePolicy.rules"],
        &["explain", "hpa.spec.metrics"],
        &["explain", "pods.spec.containers", "--recursive"],
        &["explain", "deploy", "--recursive"],
        &["explain", "hpa.spec", "--api-version=autoscaling/v1"],
        &["explain", "hpa", "--api-version=v2"],
        &["explain", "pods", "--api-version=apps/v1"],
        &["explain", "deploy.spec.foo"],
        &["explain", "deployments.v1.apps.spec"],
        &["explain", "DEPLOY"],
        &["explain", "nope"],
        &["explain"],
    ] {
        t.same(args);
    }
    let cached: Vec<String> = std::fs::read_dir(dir.path().join("cache-r8s/discovery"))
        .unwrap()
        .flat_map(|server| std::fs::read_dir(server.unwrap().path().join("openapi")).unwrap())
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        cached
            .iter()
            .any(|n| n.starts_with("openapi_v3_apis_apps_v1_") && n.ends_with(".json")),
        "{cached:?}"
    );
    // From the cache, the same answer.
    t.same(&["explain", "deploy.spec.strategy"]);
}

/// `auth can-i --list`: the server's SelfSubjectRulesReview (RBAC's rules, and the Node
/// authorizer's "incomplete" for a node) printed as kubectl breaks down, compacts and sorts it.
#[test]
fn can_i_list_answers_as_kubectl_does() {
    let s = Server::start();
    s.wait_for_default_service_account("default");
    let dir = tempfile::tempdir().unwrap();
    let t = Twins::new(&s, &dir);
    let admin = t.same(&["auth", "can-i", "--list"]);
    assert!(
        admin.stdout.lines().nth(1).unwrap().starts_with("*.* "),
        "{}",
        admin.stdout
    );
    assert!(admin.stderr.is_empty(), "{}", admin.stderr);
    t.same(&["auth", "can-i", "--list", "--no-headers"]);
    t.same(&[
        "auth",
        "can-i",
        "--list",
        "--as=system:serviceaccount:default:default",
    ]);
    t.same(&[
        "auth",
        "can-i",
        "--list",
        "-n",
        "kube-system",
        "--as=system:serviceaccount:kube-system:coredns",
    ]);
    let node = t.same(&[
        "auth",
        "can-i",
        "--list",
        "--as=system:node:n1",
        "--as-group=system:nodes",
    ]);
    assert_eq!(
        node.stderr,
        "Warning: the list may be incomplete: node authorizer does not support user rule resolution\n"
    );
}

/// `apply --prune`: objects of the allowlisted kinds that match the selector, were made by
/// apply and are no longer in the configuration are deleted ("pruned"); `-l` also filters
/// what is applied; the flag's errors as kubectl's.
#[test]
fn apply_prune_answers_as_kubectl_does() {
    let s = Server::start();
    s.wait_for_default_service_account("default");
    let dir = tempfile::tempdir().unwrap();
    let t = Twins::new(&s, &dir);
    let cm = |name: &str, label: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  labels: {{app: {label}}}\ndata: {{k: v}}\n")
    };
    let both = format!(
        "{}---\n{}---\n{}",
        cm("a-T", "p-T"),
        cm("b-T", "p-T"),
        cm("c-T", "q-T")
    );
    let allow = "--prune-allowlist=core/v1/ConfigMap";
    t.same_stdin(&["apply", "--prune", "-f", "-"], Some(&both));
    // -l picks what is applied: c-T is not.
    t.same_stdin(
        &["apply", "--prune", "-l", "app=p-T", allow, "-f", "-"],
        Some(&both),
    );
    t.same(&["get", "cm", "c-T"]);
    let one = cm("a-T", "p-T");
    t.same_stdin(
        &[
            "apply",
            "--prune",
            "-l",
            "app=p-T",
            allow,
            "--dry-run=client",
            "-f",
            "-",
        ],
        Some(&one),
    );
    let pruned = t.same_stdin(
        &["apply", "--prune", "-l", "app=p-T", allow, "-f", "-"],
        Some(&one),
    );
    assert_eq!(pruned.stdout, "configmap/a-N unchanged\nconfigmap/b-N pruned\n");
    t.same(&["get", "cm", "-l", "app=p-T", "-o", "name"]);
    // Objects not made by apply are never pruned.
    t.same(&["create", "cm", "made-T"]);
    t.same(&["label", "cm", "made-T", "app=p-T"]);
    t.same_stdin(
        &["apply", "--prune", "-l", "app=p-T", allow, "-f", "-"],
        Some(&one),
    );
    t.same(&["get", "cm", "made-T", "-o", "name"]);
    t.same_stdin(
        &[
            "apply",
            "--prune",
            "-l",
            "app=p-T",
            "--prune-allowlist=ConfigMap",
            "-f",
            "-",
        ],
        Some(&one),
    );
    t.same_stdin(
        &[
            "apply",
            "--prune",
            "-l",
            "app=p-T",
            "--prune-allowlist=x/v1/Foo",
            "-f",
            "-",
        ],
        Some(&one),
    );
}

/// `create ingress`: kubectl's rule syntax (hosts, `*` for Prefix paths, named and numbered
/// ports, TLS per secret), annotations, default backends and its refusals; then a real create
/// and the table.
#[test]
fn create_ingress_answers_as_kubectl_does() {
    let s = Server::start();
    s.wait_for_default_service_account("default");
    let dir = tempfile::tempdir().unwrap();
    let t = Twins::new(&s, &dir);
    let dry = ["--dry-run=client", "-o", "yaml"];
    for args in [
        &["simple", "--rule=foo.com/bar=svc1:8080,tls=my-cert"][..],
        &["catch-all", "--class=other", "--rule=/path=svc:port"],
        &[
            "annotated",
            "--rule=foo.com/bar=svc:port",
            "--annotation",
            "a1=foo",
            "--annotation",
            "a2=bla",
        ],
        &[
            "multipath",
            "--rule=foo.com/=svc:port",
            "--rule=foo.com/admin/=svcadmin:portadmin",
        ],
        &[
            "prefix",
            "--rule=foo.com/path*=svc:8080",
            "--rule=bar.com/admin*=svc2:http",
        ],
        &[
            "secrets",
            "--rule=foo.com/*=svc:8080,tls=s1",
            "--rule=bar.com/*=svc:8080,tls=s1",
            "--rule=baz.com/*=svc:8080,tls=s2",
        ],
        &[
            "backend",
            "--default-backend=defaultsvc:http",
            "--rule=foo.com/*=svc:8080,tls",
        ],
        &["none"],
        &["bad", "--rule=foo"],
        &["bad", "--default-backend=a"],
        &["bad", "--rule=a/b=c:d", "--annotation=x"],
    ] {
        t.same(&[&["create", "ingress"][..], args, &dry[..]].concat());
    }
    t.same(&["create", "ingress", "web-T", "--rule=foo.com/*=svc:8080"]);
    t.same(&["get", "ingress", "web-T", "-o", "name"]);
}

/// `describe` with kubectl 1.33's own layouts for nodes (lease, conditions, capacity, pods'
/// requests and limits as shares of what is allocatable, their totals), jobs, stateful sets,
/// daemon sets, claims, endpoints and ingresses.
#[test]
fn describe_answers_as_kubectl_does() {
    let s = Server::start();
    s.wait_for_default_service_account("default");
    let dir = tempfile::tempdir().unwrap();
    let t = Twins::new(&s, &dir);
    let objects = r#"
apiVersion: v1
kind: Node
metadata:
  name: n2
  labels: {node-role.kubernetes.io/control-plane: "true", kubernetes.io/role: "edge"}
spec:
  podCIDR: 10.42.1.0/24
  podCIDRs: [10.42.1.0/24]
  taints: [{key: dedicated, value: infra, effect: NoSchedule}, {key: a, effect: NoExecute}]
---
apiVersion: v1
kind: Pod
metadata: {name: heavy}
spec:
  nodeName: n2
  tolerations: [{operator: Exists}]
  initContainers: [{name: i, image: busybox, resources: {requests: {cpu: "1", memory: 2Gi}}}]
  containers:
  - {name: a, image: busybox, resources: {requests: {cpu: 250m, memory: 128Mi}, limits: {cpu: 500m, memory: 256Mi}}}
  - {name: b, image: busybox, resources: {requests: {cpu: 100m, memory: 100M}}}
  volumes: [{name: d, persistentVolumeClaim: {claimName: c1}}]
---
apiVersion: v1
kind: Pod
metadata: {name: light, namespace: kube-system}
spec:
  nodeName: n2
  tolerations: [{operator: Exists}]
  containers:
  - {name: a, image: busybox, resources: {requests: {cpu: 1, memory: 1Gi, ephemeral-storage: 1Gi}, limits: {memory: 1536Mi}}}
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: n2, namespace: kube-node-lease}
spec: {holderIdentity: n2, leaseDurationSeconds: 40, renewTime: "2026-11-26T18:00:00.000000Z"}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: c1}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: Endpoints
metadata: {name: manual, labels: {x: "z"}}
subsets:
- addresses: [{ip: 10.0.0.1}, {ip: 10.0.0.2}]
  notReadyAddresses: [{ip: 10.0.0.3}]
  ports: [{port: 80, protocol: TCP}, {name: https, port: 443, protocol: TCP}]
- addresses: [{ip: 10.0.0.9}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, labels: {a: b}}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      nodeSelector: {kubernetes.io/os: linux}
      containers: [{name: c, image: busybox}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  replicas: 2
  serviceName: db
  selector: {matchLabels: {app: db}}
  updateStrategy: {rollingUpdate: {partition: 1}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: c, image: busybox}]
  volumeClaimTemplates:
  - metadata: {name: data, labels: {tier: storage}}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
---
apiVersion: batch/v1
kind: Job
metadata: {name: idx}
spec:
  completions: 3
  parallelism: 2
  completionMode: Indexed
  activeDeadlineSeconds: 100
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox, command: ["true"]}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: ing, annotations: {a: b}}
spec:
  tls: [{hosts: [foo.com], secretName: cert}, {hosts: [bar.com]}]
  rules:
  - host: foo.com
    http:
      paths:
      - {path: /bar, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
      - {path: /x, pathType: Exact, backend: {service: {name: nosvc, port: {name: http}}}}
"#;
    s.ok_stdin("1.33", &["apply", "-f", "-"], objects);
    s.ok(
        "1.33",
        &[
            "patch",
            "node",
            "n2",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"capacity":{"cpu":"4","memory":"16323216Ki","pods":"110","ephemeral-storage":"100Gi","hugepages-2Mi":"0","example.com/gpu":"2"},"allocatable":{"cpu":"3800m","memory":"16Gi","pods":"110","ephemeral-storage":"90Gi","hugepages-2Mi":"0","example.com/gpu":"2"},"addresses":[{"type":"InternalIP","address":"10.0.0.5"}],"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"ready","lastHeartbeatTime":"2026-11-26T18:00:00Z","lastTransitionTime":"2026-11-26T17:00:00Z"}],"nodeInfo":{"machineID":"m","systemUUID":"u","bootID":"b","kernelVersion":"6.1","osImage":"Debian","operatingSystem":"linux","architecture":"amd64","containerRuntimeVersion":"containerd://1.6","kubeletVersion":"v1.33.0","kubeProxyVersion":""}}}"#,
        ],
    );
    // Let the controllers make their pods and events first.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let node = t.same(&["describe", "node", "n2"]);
    // (The comparison sets whitespace aside.)
    assert!(
        node.stdout.contains("Roles: control-plane,edge"),
        "{}",
        node.stdout
    );
    assert!(
        node.stdout.contains("Non-terminated Pods: (2 in total)"),
        "{}",
        node.stdout
    );
    for args in [
        &["describe", "pvc", "c1"][..],
        &["describe", "endpoints", "manual"],
        &["describe", "ds", "agent"],
        &["describe", "sts", "db"],
        &["describe", "job", "idx"],
        &["describe", "ing", "ing"],
    ] {
        t.same(args);
    }
    // Cron jobs, budgets and RBAC objects (the rules compacted as `can-i --list` has them).
    t.same(&[
        "create",
        "cronjob",
        "cj-T",
        "--image=busybox",
        "--schedule=*/5 * * * *",
    ]);
    t.same(&[
        "create",
        "pdb",
        "pdb-T",
        "--selector=app=db",
        "--max-unavailable=50%",
    ]);
    t.same(&[
        "create",
        "role",
        "r-T",
        "--verb=get,list",
        "--resource=pods,deployments.apps,pods/log",
    ]);
    t.same(&[
        "create",
        "rolebinding",
        "rb-T",
        "--role=r-T",
        "--user=jane",
        "--serviceaccount=default:sa",
    ]);
    for args in [
        &["describe", "cronjob", "cj-T"][..],
        &["describe", "pdb", "pdb-T"],
        &["describe", "role", "r-T"],
        &["describe", "rolebinding", "rb-T"],
        &["describe", "clusterrole", "admin"],
        &["describe", "clusterrolebinding", "cluster-admin"],
    ] {
        t.same(args);
    }
}

/// `--validate`: the server's field validation asked for (strict by default, warn, ignore),
/// its warnings printed as kubectl prints them, and the flag's refusal.
#[test]
fn validate_answers_as_kubectl_does() {
    let s = Server::start();
    s.wait_for_default_service_account("default");
    let dir = tempfile::tempdir().unwrap();
    let t = Twins::new(&s, &dir);
    let cm = |name: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\nfoo: bar\ndata:\n  a: b\n")
    };
    let strict = t.same_stdin(&["create", "-f", "-"], Some(&cm("v1-T")));
    assert!(
        strict
            .stderr
            .contains("strict decoding error: unknown field \"foo\""),
        "{}",
        strict.stderr
    );
    let warned = t.same_stdin(&["create", "-f", "-", "--validate=warn"], Some(&cm("v2-T")));
    assert_eq!(warned.stderr, "Warning: unknown field \"foo\"\n");
    t.same_stdin(&["create", "-f", "-", "--validate=false"], Some(&cm("v3-T")));
    t.same_stdin(&["apply", "-f", "-"], Some(&cm("v4-T")));
    t.same_stdin(&["apply", "-f", "-", "--validate=warn"], Some(&cm("v4-T")));
    t.same_stdin(&["apply", "-f", "-", "--validate=warn"], Some(&cm("v4-T")));
    t.same_stdin(&["replace", "-f", "-", "--validate=ignore"], Some(&cm("v4-T")));
    t.same_stdin(&["create", "-f", "-", "--validate=bogus"], Some(&cm("v5-T")));
}

/// What kubectl holds as typed Go values prints in Go's field order with `-o json` (a
/// generator's object, `config view`, `auth whoami`); what it reads back unstructured, sorted.
/// And the TLS and docker-registry secret generators.
#[test]
fn typed_json_answers_as_kubectl_does() {
    let s = Server::start();
    s.wait_for_default_service_account("default");
    let dir = tempfile::tempdir().unwrap();
    let t = Twins::new(&s, &dir);
    let tls = s.dir.path().join("server/tls");
    let cert = tls.join("serving-kube-apiserver.crt").display().to_string();
    let key = tls.join("serving-kube-apiserver.key").display().to_string();
    let json = ["--dry-run=client", "-o", "json"];
    for generator in [
        &[
            "create",
            "deployment",
            "d-T",
            "--image=nginx",
            "--replicas=2",
            "--port=80",
        ][..],
        &[
            "create",
            "configmap",
            "c-T",
            "--from-literal=b=1",
            "--from-literal=a=2",
        ],
        &["create", "service", "nodeport", "s-T", "--tcp=80:8080"],
        &["create", "job", "j-T", "--image=busybox"],
        &[
            "create",
            "cronjob",
            "cj-T",
            "--image=busybox",
            "--schedule=* * * * *",
        ],
        &["create", "role", "r-T", "--verb=get", "--resource=pods"],
        &["create", "rolebinding", "rb-T", "--role=r", "--user=u"],
        &["create", "quota", "q-T", "--hard=pods=2,cpu=1"],
        &["create", "pdb", "p-T", "--selector=a=b", "--max-unavailable=1"],
        &["create", "ingress", "i-T", "--rule=a.com/p=svc:80,tls=sec"],
        &[
            "run",
            "p-T",
            "--image=nginx",
            "--port=80",
            "--env=A=B",
            "--labels=x=y",
        ],
        &["create", "secret", "tls", "t-T", "--cert", &cert, "--key", &key],
        &[
            "create",
            "secret",
            "docker-registry",
            "dr-T",
            "--docker-username=u",
            "--docker-password=p&<",
        ],
        &[
            "create",
            "secret",
            "docker-registry",
            "dr-T",
            "--docker-username=u",
            "--docker-password=p",
            "--docker-email=e@x",
            "--docker-server=reg:5000",
        ],
    ] {
        let run = t.same(&[generator, &json[..]].concat());
        assert!(run.stdout.starts_with("{\n    \"kind\": "), "{}", run.stdout);
    }
    // Created for real: the server's answer, still typed.
    let created = t.same(&[
        "create",
        "configmap",
        "real-T",
        "--from-literal=k=v",
        "-o",
        "json",
    ]);
    assert!(
        created.stdout.starts_with("{\n    \"kind\": \"ConfigMap\""),
        "{}",
        created.stdout
    );
    // Read back: unstructured, sorted.
    let got = t.same(&["get", "configmap", "real-T", "-o", "json"]);
    assert!(
        got.stdout.starts_with("{\n    \"apiVersion\": "),
        "{}",
        got.stdout
    );
    t.same(&["config", "view", "-o", "json"]);
    t.same(&["auth", "whoami", "-o", "json"]);
    // The secret generators' refusals.
    t.same(&["create", "secret", "tls", "t-T", "--cert", &cert]);
    t.same(&["create", "secret", "tls", "t-T", "--cert", &key, "--key", &cert]);
    t.same(&[
        "create",
        "secret",
        "tls",
        "t-T",
        "--cert",
        "/nonexistent",
        "--key",
        &key,
    ]);
    t.same(&[
        "create",
        "secret",
        "docker-registry",
        "dr-T",
        "--docker-username=u",
    ]);
}

/// A CONNECT proxy on loopback for one test: counts the tunnels it opens (only to loopback).
fn connect_proxy() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{BufRead, BufReader, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = std::sync::Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let seen = seen.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(client.try_clone().unwrap());
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                let target = line.split_whitespace().nth(1).unwrap_or_default().to_string();
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
                        break;
                    }
                }
                if !line.starts_with("CONNECT ") || !target.starts_with("127.0.0.1:") {
                    return;
                }
                let Ok(upstream) = TcpStream::connect(&target) else {
                    return;
                };
                seen.fetch_add(1, Ordering::SeqCst);
                let mut client = client;
                client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .unwrap();
                let (mut up_r, mut up_w) = (upstream.try_clone().unwrap(), upstream);
                let mut down_w = client.try_clone().unwrap();
                let t = std::thread::spawn(move || {
                    let _ = std::io::copy(&mut up_r, &mut down_w);
                });
                let _ = std::io::copy(&mut reader, &mut up_w);
                let _ = up_w.shutdown(std::net::Shutdown::Write);
                let _ = t.join();
            });
        }
    });
    (port, count)
}

/// Proxies as kubectl takes them: a cluster's `proxy-url` carries every request; the
/// environment's HTTPS_PROXY is never used for a loopback server (Go's rule).
#[test]
fn proxies_are_used_as_kubectl_uses_them() {
    use std::sync::atomic::Ordering;
    let s = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let t = Twins::new(&s, &dir);
    let (port, count) = connect_proxy();
    let proxy = format!("http://127.0.0.1:{port}");
    // The environment's proxy: not for 127.0.0.1.
    let go = t.run_env(
        false,
        &["get", "ns", "default", "-o", "name"],
        None,
        &[("HTTPS_PROXY", &proxy)],
    );
    let ours = t.run_env(
        true,
        &["get", "ns", "default", "-o", "name"],
        None,
        &[("HTTPS_PROXY", &proxy)],
    );
    assert_eq!(ours, go);
    assert_eq!(ours.code, 0, "{ours:?}");
    assert_eq!(count.load(Ordering::SeqCst), 0);
    // The kubeconfig's proxy-url: through the proxy, for both.
    let mut kc: serde_json::Value =
        serde_json::from_str(&s.ok("1.33", &["config", "view", "--raw", "-o", "json"])).unwrap();
    kc["clusters"][0]["cluster"]["proxy-url"] = serde_json::json!(proxy);
    let path = dir.path().join("proxied.kubeconfig");
    std::fs::write(&path, kc.to_string()).unwrap();
    let path = path.to_str().unwrap();
    for ours in [false, true] {
        let before = count.load(Ordering::SeqCst);
        let run = t.run(
            ours,
            &["--kubeconfig", path, "get", "ns", "default", "-o", "name"],
            None,
        );
        assert_eq!(run.code, 0, "{run:?}");
        assert_eq!(run.stdout, "namespace/default\n");
        assert!(
            count.load(Ordering::SeqCst) > before,
            "ours={ours}: no tunnel through the proxy"
        );
    }
}

/// `-o go-template` (and `template`): Go's text/template over the object as Go decodes it —
/// ranges, conditions, variables, pipelines, `printf`'s verbs, float64 numbers, `<no value>`,
/// kubectl's `exists`/`base64decode` — and Go's parse and execution errors with kubectl's
/// report. Templates (and JSONPath) see managedFields, as kubectl's.
#[test]
fn go_templates_answer_as_kubectl_does() {
    let s = Server::start();
    s.wait_for_default_service_account("default");
    let dir = tempfile::tempdir().unwrap();
    let t = Twins::new(&s, &dir);
    t.same(&["create", "cm", "gt-T", "--from-literal=a=b", "--from-literal=n=1"]);
    // Each twin lists only its own objects.
    t.same(&["label", "cm", "gt-T", "twin=x-T"]);
    t.same(&[
        "create",
        "secret",
        "generic",
        "gs-T",
        "--from-literal=password=s3cret",
    ]);
    for tmpl in [
        r#"{{range .items}}{{.metadata.name}}{{"\n"}}{{end}}"#,
        r#"{{range $i, $c := .items}}{{$i}}={{$c.metadata.name}} {{len $c.data}},{{end}}"#,
        r#"{{range .items}}{{if exists . "data" "a"}}{{.data.a | printf "%q"}}{{else}}-{{end}}{{end}}"#,
        r#"{{range .items}}{{range $k, $v := .data}}{{$k}}:{{$v}};{{end}}{{end}}"#,
        r#"{{with index .items 0}}{{.metadata.labels}} {{.metadata.resourceVersion | len}}{{end}}"#,
        r#"{{(index .items 0).metadata.managedFields | len}} {{printf "%d %v %s" 3 .kind .kind}}"#,
        r#"{{- range .items -}} {{ .metadata.name }} {{- end -}}"#,
        "{{.metadata.name",
        "{{nope .x}}",
    ] {
        t.same(&[
            "get",
            "cm",
            "-l",
            "twin=x-T",
            "-o",
            &format!("go-template={tmpl}"),
        ]);
    }
    t.same(&[
        "get",
        "secret",
        "gs-T",
        "-o",
        "go-template={{.data.password | base64decode}}",
    ]);
    t.same(&[
        "get",
        "cm",
        "gt-T",
        "-o",
        "jsonpath={.metadata.managedFields[0].manager}",
    ]);
    // An execution error: kubectl's report on stdout (with the raw object, which differs
    // between the twins) and its error.
    for ours in [false, true] {
        let run = t.run(
            ours,
            &["get", "cm", "gt-T", "-o", "go-template={{len .nope}}"],
            None,
        );
        assert_eq!(run.code, 1);
        assert!(run.stdout.starts_with("Error executing template: template: output:1:2: executing \"output\" at <len .nope>: error calling len: reflect: call of reflect.Value.Type on zero Value. Printing more information for debugging the template:"), "{}", run.stdout);
        assert_eq!(run.stderr, "error: error executing template \"{{len .nope}}\": template: output:1:2: executing \"output\" at <len .nope>: error calling len: reflect: call of reflect.Value.Type on zero Value\n");
    }
    t.same(&[
        "create",
        "cm",
        "x-T",
        "--dry-run=client",
        "-o",
        "go-template={{.metadata.name}}",
    ]);
}

/// The binary invoked as `kubectl` is kubectl; `version` names what it follows.
#[test]
fn r8s_binary_answers_as_kubectl() {
    let s = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("kubectl");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_r8s"), &link).unwrap();
    let out = Command::new(&link)
        .arg("--kubeconfig")
        .arg(&s.kubeconfig)
        .args(["version"])
        .env("KUBECACHEDIR", dir.path().join("cache"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("Client Version: v1.33."), "{text}");
    assert!(text.contains("Server Version: v1.33.0"), "{text}");
    // The server's machine needs no kubeconfig flag: KUBECONFIG names it here.
    let out = Command::new(&link)
        .args(["get", "ns", "kube-system", "-o", "name"])
        .env("KUBECONFIG", &s.kubeconfig)
        .env("HOME", dir.path())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "namespace/kube-system\n");
}

#[test]
fn normalising_keeps_what_matters() {
    assert_eq!(
        normalise("NAME   AGE\nweb-r8x   5m3s\n", "-r8x"),
        "NAME AGE\nweb-N AGE\n"
    );
    assert_eq!(
        normalise("  uid: 384295cf-8eb8-494d-a4ed-ae98b3acf881\n", "-r"),
        "  uid: UID\n"
    );
    assert_eq!(
        normalise("  resourceVersion: \"193\"\n", "-r"),
        "  resourceVersion: RV\n"
    );
    assert_eq!(
        normalise("  Creation Timestamp:  2026-11-29T08:18:20Z\n", "-r"),
        "  Creation Timestamp:  TIME\n"
    );
    assert!(!is_age("deployment"));
    assert!(is_age("2d3h"));
}
