//! The request's gatekeepers end to end, judged by the real kubectl: RBAC with upstream's
//! default roles, `kubectl auth can-i` / `whoami`, impersonation, privilege-escalation
//! prevention and anonymous requests.

use crate::support;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use support::{kubectl_binary, Server};

/// A server with a token file: `jane` and `rob` are plain users.
fn server() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "janetoken,jane,2001,\nrobtoken,rob,2002,\"devs\"\n").unwrap();
    let tokens = tokens.to_str().unwrap().to_owned();
    // The token file lives in the server's data directory, removed with it.
    Server::start_in(dir, &["--disable-agent", "--token-auth-file", &tokens])
}

/// kubectl as the user of `token`, against `s`.
fn as_token(s: &Server, token: &str, args: &[&str]) -> Output {
    Command::new(kubectl_binary("1.33"))
        .args([
            "--kubeconfig",
            "/dev/null",
            "--server",
            &format!("https://127.0.0.1:{}", s.port),
        ])
        .arg("--certificate-authority")
        .arg(s.dir.path().join("server/tls/ca.crt"))
        .args(["--token", token])
        .args(args)
        .env("KUBECACHEDIR", s.dir.path().join(format!("kubecache-{token}")))
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// kubectl's words for a 401 (depending on the request, the Status reason or its own).
fn assert_unauthorized(out: &Output) {
    let err = stderr(out);
    assert!(!out.status.success());
    assert!(
        err.contains("Unauthorized")
            || err.contains("the server has asked for the client to provide credentials"),
        "{err}"
    );
}

/// Retry `f` until it returns true (RBAC follows its objects through a watch, and the
/// aggregated roles are filled by a controller), for at most 20 s.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn rbac_with_default_roles_can_i_whoami_and_impersonation() {
    let s = server();
    s.ok("1.33", &["create", "namespace", "dev"]);

    // The default policy is there, aggregated roles included.
    let roles = s.ok("1.33", &["get", "clusterroles", "-o", "name"]);
    for r in [
        "cluster-admin",
        "admin",
        "edit",
        "view",
        "system:node",
        "system:kube-scheduler",
    ] {
        assert!(
            roles.contains(&format!("clusterrole.rbac.authorization.k8s.io/{r}\n")),
            "{r} missing:\n{roles}"
        );
    }

    // No binding: upstream's 403.
    let out = as_token(&s, "janetoken", &["get", "pods", "-n", "dev"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(
            "Error from server (Forbidden): pods is forbidden: User \"jane\" cannot list resource \"pods\" in API group \"\" in the namespace \"dev\""
        ),
        "{}",
        stderr(&out)
    );

    // view in dev: list, not create; nothing elsewhere.
    assert_eq!(
        s.ok(
            "1.33",
            &[
                "create",
                "rolebinding",
                "jane-view",
                "--clusterrole=view",
                "--user=jane",
                "-n",
                "dev"
            ]
        )
        .trim(),
        "rolebinding.rbac.authorization.k8s.io/jane-view created"
    );
    let table = s.ok("1.33", &["get", "rolebindings", "-n", "dev", "-o", "wide"]);
    assert!(
        table.contains("ClusterRole/view") && table.contains("jane"),
        "{table}"
    );
    eventually("jane may list pods in dev", || {
        as_token(&s, "janetoken", &["get", "pods", "-n", "dev"])
            .status
            .success()
    });
    let out = as_token(
        &s,
        "janetoken",
        &["create", "configmap", "c", "-n", "dev", "--from-literal=a=b"],
    );
    assert!(
        stderr(&out).contains("configmaps is forbidden: User \"jane\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"dev\""),
        "{}",
        stderr(&out)
    );
    assert!(!as_token(&s, "janetoken", &["get", "pods", "-n", "default"])
        .status
        .success());

    // kubectl auth can-i agrees, for several kubectl versions.
    for v in ["1.27", "1.30", "1.33"] {
        let can = |args: &[&str]| {
            Command::new(kubectl_binary(v))
                .args([
                    "--kubeconfig",
                    "/dev/null",
                    "--server",
                    &format!("https://127.0.0.1:{}", s.port),
                ])
                .arg("--certificate-authority")
                .arg(s.dir.path().join("server/tls/ca.crt"))
                .args(["--token", "janetoken", "auth", "can-i"])
                .args(args)
                .output()
                .unwrap()
        };
        let yes = can(&["list", "pods", "-n", "dev"]);
        assert!(yes.status.success(), "{v}: {}", stderr(&yes));
        assert_eq!(stdout(&yes).trim(), "yes");
        let no = can(&["create", "pods", "-n", "dev"]);
        assert!(!no.status.success());
        assert_eq!(stdout(&no).trim(), "no", "{v}");
        let no = can(&["list", "pods", "-n", "default"]);
        assert_eq!(stdout(&no).trim(), "no", "{v}");
        let list = can(&["--list", "-n", "dev"]);
        assert!(list.status.success(), "{v}: {}", stderr(&list));
        let rows = stdout(&list);
        let pods_row = rows
            .lines()
            .find(|l| l.starts_with("pods "))
            .unwrap_or_else(|| panic!("{v}: no pods row in:\n{rows}"));
        assert!(pods_row.contains("[get list watch]"), "{v}: {pods_row}");
        assert!(
            !rows.lines().any(|l| l.starts_with("secrets ")),
            "{v}: view must not read secrets:\n{rows}"
        );
    }

    // whoami.
    let who = as_token(&s, "robtoken", &["auth", "whoami", "-o", "json"]);
    assert!(who.status.success(), "{}", stderr(&who));
    let who: serde_json::Value = serde_json::from_slice(&who.stdout).unwrap();
    assert_eq!(who["status"]["userInfo"]["username"], "rob");
    assert_eq!(
        who["status"]["userInfo"]["groups"],
        serde_json::json!(["devs", "system:authenticated"])
    );

    // Impersonation: the admin may act as jane (and gets jane's answers); jane may not act as
    // anyone.
    assert!(s
        .ok("1.33", &["get", "pods", "-n", "dev", "--as=jane"])
        .is_empty());
    let out = s.kubectl("1.33", &["get", "pods", "-n", "default", "--as=jane"]);
    assert!(
        stderr(&out).contains(
            "User \"jane\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
        ),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        s.ok(
            "1.33",
            &["auth", "can-i", "list", "pods", "-n", "dev", "--as=jane"]
        )
        .trim(),
        "yes"
    );
    let out = as_token(&s, "janetoken", &["get", "pods", "-n", "dev", "--as=rob"]);
    assert!(
        stderr(&out).contains("users \"rob\" is forbidden: User \"jane\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"),
        "{}",
        stderr(&out)
    );
    let out = as_token(
        &s,
        "janetoken",
        &[
            "get",
            "pods",
            "-n",
            "dev",
            "--as=rob",
            "--as-group=system:masters",
        ],
    );
    assert!(!out.status.success());
}

#[test]
fn no_one_grants_what_they_do_not_hold() {
    let s = server();
    s.ok("1.33", &["create", "namespace", "dev"]);
    // rob's group may manage roles and bindings in dev, and holds view there.
    s.ok(
        "1.33",
        &[
            "create",
            "role",
            "rbac-manager",
            "-n",
            "dev",
            "--verb=get,list,create,update,delete",
            "--resource=roles.rbac.authorization.k8s.io,rolebindings.rbac.authorization.k8s.io",
        ],
    );
    s.ok(
        "1.33",
        &[
            "create",
            "rolebinding",
            "devs-rbac",
            "-n",
            "dev",
            "--role=rbac-manager",
            "--group=devs",
        ],
    );
    s.ok(
        "1.33",
        &[
            "create",
            "rolebinding",
            "devs-view",
            "-n",
            "dev",
            "--clusterrole=view",
            "--group=devs",
        ],
    );
    eventually("rob may list roles in dev", || {
        as_token(&s, "robtoken", &["get", "roles", "-n", "dev"])
            .status
            .success()
    });

    // Binding cluster-admin is refused with upstream's words; binding view (held) is fine.
    let out = as_token(
        &s,
        "robtoken",
        &[
            "create",
            "rolebinding",
            "grab",
            "-n",
            "dev",
            "--clusterrole=cluster-admin",
            "--user=rob",
        ],
    );
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("rolebindings.rbac.authorization.k8s.io \"grab\" is forbidden: user \"rob\" (groups=[\"devs\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:"),
        "{err}"
    );
    assert!(
        err.contains("{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}"),
        "{err}"
    );
    let out = as_token(
        &s,
        "robtoken",
        &[
            "create",
            "rolebinding",
            "jane-view",
            "-n",
            "dev",
            "--clusterrole=view",
            "--user=jane",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));

    // A role with more than rob holds is refused; one within view is fine.
    let out = as_token(
        &s,
        "robtoken",
        &[
            "create",
            "role",
            "secrets",
            "-n",
            "dev",
            "--verb=get",
            "--resource=secrets",
        ],
    );
    let err = stderr(&out);
    assert!(
        err.contains("is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\"]}"),
        "{err}"
    );
    let out = as_token(
        &s,
        "robtoken",
        &[
            "create",
            "role",
            "pod-reader",
            "-n",
            "dev",
            "--verb=get,list",
            "--resource=pods",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));

    // roleRef cannot change.
    let out = s.kubectl_stdin(
        "1.33",
        &["apply", "-f", "-"],
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: jane-view, namespace: dev}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}\nsubjects: [{kind: User, name: jane, apiGroup: rbac.authorization.k8s.io}]\n",
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains("cannot change roleRef"), "{}", stderr(&out));
}

/// A request refused before its body is read (401 here) still gets its answer over HTTP/2: the
/// body left unread must not reset the stream ahead of the answer (curl then said "Stream error
/// in the HTTP/2 framing layer" for about one POST in twenty), nor over HTTP/1.1 for a body
/// larger than the first read.
#[test]
fn a_request_refused_before_its_body_is_read_gets_its_answer() {
    let s = server();
    let ca = s.dir.path().join("server/tls/ca.crt");
    let url = format!(
        "https://127.0.0.1:{}/api/v1/namespaces/default/configmaps",
        s.port
    );
    let big = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","data":{{"a":"{}"}}}}"#,
        "x".repeat(1 << 20)
    );
    for (round, (version, body)) in std::iter::repeat_n(("--http2", "{}"), 100)
        .chain(std::iter::repeat_n(("--http2", big.as_str()), 3))
        .chain(std::iter::repeat_n(("--http1.1", big.as_str()), 3))
        .enumerate()
    {
        let out = Command::new("curl")
            .args(["-sS", version, "--cacert"])
            .arg(&ca)
            .args([
                "-H",
                "Authorization: Bearer no-such-token",
                "-H",
                "Content-Type: application/json",
            ])
            .args([
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--data-binary",
                "@-",
                &url,
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                // The body goes in as curl reads it; curl may stop reading once answered.
                let _ = child.stdin.take().unwrap().write_all(body.as_bytes());
                child.wait_with_output()
            })
            .unwrap();
        assert_eq!(
            stdout(&out),
            "401",
            "request {round} ({version}): {}",
            stderr(&out)
        );
    }
}

#[test]
fn anonymous_requests_reach_only_public_information() {
    let s = server();
    let curl = |path: &str| {
        let out = Command::new("curl")
            .args(["-sS", "--cacert"])
            .arg(s.dir.path().join("server/tls/ca.crt"))
            .args([
                "-w",
                "\n%{http_code}",
                &format!("https://127.0.0.1:{}{path}", s.port),
            ])
            .output()
            .unwrap();
        let text = stdout(&out);
        let (body, code) = text.rsplit_once('\n').unwrap();
        (code.to_owned(), body.to_owned())
    };
    assert_eq!(curl("/healthz"), ("200".to_owned(), "ok".to_owned()));
    assert_eq!(curl("/readyz").0, "200");
    let (code, body) = curl("/version");
    assert_eq!(code, "200");
    assert!(body.contains("\"gitVersion\""), "{body}");
    let (code, body) = curl("/api/v1/namespaces/default/pods");
    assert_eq!(code, "401");
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (status["kind"].as_str(), status["reason"].as_str()),
        (Some("Status"), Some("Unauthorized"))
    );
    assert_eq!(curl("/apis").0, "401");
    // Basic auth is off unless its flag is given.
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-u",
            "carol:s3cret",
            "--cacert",
        ])
        .arg(s.dir.path().join("server/tls/ca.crt"))
        .arg(format!(
            "https://127.0.0.1:{}/api/v1/namespaces/default/pods",
            s.port
        ))
        .output()
        .unwrap();
    assert_eq!(stdout(&out), "401");
}

/// The legacy chains the reference document tells: basic auth (`--basic-auth-file`) and ABAC
/// (`--authorization-mode=…,ABAC` with `--authorization-policy-file`).
#[test]
fn basic_auth_and_abac_work_when_configured() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("basic.csv");
    std::fs::write(&users, "s3cret,carol,3001,\"auditors\"\n").unwrap();
    let policy = dir.path().join("abac.jsonl");
    std::fs::write(
        &policy,
        concat!(
            r#"{"apiVersion": "abac.authorization.kubernetes.io/v1beta1", "kind": "Policy", "spec": {"group": "auditors", "readonly": true, "namespace": "*", "resource": "*", "apiGroup": "*"}}"#,
            "\n"
        ),
    )
    .unwrap();
    let (users, policy) = (
        users.to_str().unwrap().to_owned(),
        policy.to_str().unwrap().to_owned(),
    );
    let s = Server::start_in(
        dir,
        &[
            "--disable-agent",
            "--basic-auth-file",
            &users,
            "--authorization-mode",
            "Node,RBAC,ABAC",
            "--authorization-policy-file",
            &policy,
        ],
    );
    let curl = |user: &str, method: &str, path: &str| {
        let out = Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "-u",
                user,
                "-X",
                method,
                "--cacert",
            ])
            .arg(s.dir.path().join("server/tls/ca.crt"))
            .arg(format!("https://127.0.0.1:{}{path}", s.port))
            .output()
            .unwrap();
        stdout(&out)
    };
    assert_eq!(
        curl("carol:s3cret", "GET", "/api/v1/namespaces/default/pods"),
        "200"
    );
    assert_eq!(
        curl(
            "carol:s3cret",
            "GET",
            "/apis/apps/v1/namespaces/kube-system/deployments"
        ),
        "200"
    );
    // Read-only: a delete is forbidden; a wrong password is unauthorized.
    assert_eq!(
        curl("carol:s3cret", "DELETE", "/api/v1/namespaces/default/pods/x"),
        "403"
    );
    assert_eq!(
        curl("carol:wrong", "GET", "/api/v1/namespaces/default/pods"),
        "401"
    );
}

#[test]
fn service_account_tokens_authenticate_until_their_pod_is_gone() {
    let s = server();
    s.ok("1.33", &["create", "namespace", "dev"]);
    s.ok("1.33", &["-n", "dev", "create", "serviceaccount", "robot"]);
    s.ok(
        "1.33",
        &[
            "-n",
            "dev",
            "create",
            "rolebinding",
            "robot-view",
            "--clusterrole=view",
            "--serviceaccount=dev:robot",
        ],
    );
    s.ok(
        "1.33",
        &[
            "-n",
            "dev",
            "run",
            "p",
            "--image=busybox",
            "--overrides={\"spec\":{\"serviceAccountName\":\"robot\"}}",
        ],
    );

    // An unbound token and one bound to the pod.
    let plain = s
        .ok("1.33", &["-n", "dev", "create", "token", "robot"])
        .trim()
        .to_owned();
    let bound = s
        .ok(
            "1.33",
            &[
                "-n",
                "dev",
                "create",
                "token",
                "robot",
                "--bound-object-kind=Pod",
                "--bound-object-name=p",
                "--duration=1h",
            ],
        )
        .trim()
        .to_owned();
    for token in [&plain, &bound] {
        let who = as_token(&s, token, &["auth", "whoami", "-o", "json"]);
        assert!(who.status.success(), "{}", stderr(&who));
        let who: serde_json::Value = serde_json::from_slice(&who.stdout).unwrap();
        assert_eq!(
            who["status"]["userInfo"]["username"],
            "system:serviceaccount:dev:robot"
        );
        assert_eq!(
            who["status"]["userInfo"]["groups"],
            serde_json::json!([
                "system:serviceaccounts",
                "system:serviceaccounts:dev",
                "system:authenticated"
            ])
        );
    }
    eventually("the robot may list pods in dev", || {
        as_token(&s, &bound, &["-n", "dev", "get", "pods"])
            .status
            .success()
    });
    let who = as_token(&s, &bound, &["auth", "whoami", "-o", "json"]);
    let who: serde_json::Value = serde_json::from_slice(&who.stdout).unwrap();
    assert_eq!(
        who["status"]["userInfo"]["extra"]["authentication.kubernetes.io/pod-name"],
        serde_json::json!(["p"])
    );

    // Too short a lifetime is refused with upstream's words.
    let err = s.fails(
        "1.33",
        &["-n", "dev", "create", "token", "robot", "--duration=5m"],
    );
    assert!(
        err.contains("may not specify a duration less than 10 minutes"),
        "{err}"
    );

    // The pod goes: its token stops working, the plain one keeps working.
    s.ok(
        "1.33",
        &["-n", "dev", "delete", "pod", "p", "--grace-period=0", "--force"],
    );
    assert_unauthorized(&as_token(&s, &bound, &["-n", "dev", "get", "pods"]));
    assert!(as_token(&s, &plain, &["-n", "dev", "get", "pods"])
        .status
        .success());
    // So does the ServiceAccount's.
    s.ok("1.33", &["-n", "dev", "delete", "serviceaccount", "robot"]);
    assert_unauthorized(&as_token(&s, &plain, &["-n", "dev", "get", "pods"]));
}

#[test]
fn kubelets_reach_only_their_own_pods_objects_and_node() {
    let s = server();
    for n in ["n1", "n2"] {
        s.ok_stdin(
            "1.33",
            &["create", "-f", "-"],
            &format!("apiVersion: v1\nkind: Node\nmetadata: {{name: {n}}}\n"),
        );
    }
    s.ok(
        "1.33",
        &["create", "secret", "generic", "s1", "--from-literal=k=v"],
    );
    s.ok(
        "1.33",
        &["create", "secret", "generic", "s2", "--from-literal=k=v"],
    );
    s.ok("1.33", &["create", "configmap", "c2", "--from-literal=k=v"]);
    for (pod, node, secret) in [("on-n1", "n1", "s1"), ("on-n2", "n2", "s2")] {
        s.ok_stdin(
            "1.33",
            &["create", "-f", "-"],
            &format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: {pod}}}\nspec:\n  nodeName: {node}\n  containers: [{{name: c, image: busybox, envFrom: [{{configMapRef: {{name: c2}}}}]}}]\n  volumes: [{{name: s, secret: {{secretName: {secret}}}}}]\n"
            ),
        );
    }
    // Acting as the kubelet of n1 (impersonation by the admin gives the request its identity).
    let n1 = ["--as=system:node:n1", "--as-group=system:nodes"];
    let as_n1 = |args: &[&str]| {
        let mut all: Vec<&str> = n1.to_vec();
        all.extend_from_slice(args);
        s.kubectl("1.33", &all)
    };
    eventually("n1 may read the secret of its pod", || {
        as_n1(&["get", "secret", "s1"]).status.success()
    });
    let out = as_n1(&["get", "secret", "s2"]);
    assert!(
        stderr(&out).contains("secrets \"s2\" is forbidden: User \"system:node:n1\" cannot get resource \"secrets\" in API group \"\" in the namespace \"default\""),
        "{}",
        stderr(&out)
    );
    assert!(
        !as_n1(&["get", "secrets"]).status.success(),
        "a kubelet may not list every secret"
    );
    // A list of one secret by name is the kubelet's way to watch it.
    assert!(as_n1(&["get", "secrets", "--field-selector=metadata.name=s1"])
        .status
        .success());
    assert!(
        as_n1(&["get", "configmap", "c2"]).status.success(),
        "n2's pod uses c2, and so does n1's"
    );
    assert!(
        as_n1(&["get", "pods", "-A"]).status.success(),
        "system:node reads pods"
    );

    // NodeRestriction: only its own node and pods.
    let out = as_n1(&["delete", "pod", "on-n2"]);
    assert!(
        stderr(&out).contains("node \"n1\" can only delete pods with spec.nodeName set to itself"),
        "{}",
        stderr(&out)
    );
    let out = as_n1(&["label", "node", "n2", "a=b"]);
    assert!(
        stderr(&out).contains("node \"n1\" is not allowed to modify node \"n2\""),
        "{}",
        stderr(&out)
    );
    assert!(as_n1(&["label", "node", "n1", "a=b"]).status.success());
    assert!(as_n1(&["delete", "pod", "on-n1", "--grace-period=0", "--force"])
        .status
        .success());
}

/// An id-token for alice from `issuer`, for `aud`, good for `secs` (negative: expired).
fn id_token(key: &rcgen::KeyPair, issuer: &str, aud: &str, secs: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let claims = serde_json::json!({"iss": issuer, "aud": aud, "sub": "u-1", "email": "alice@example.com",
                                    "email_verified": true, "groups": ["dev"], "iat": now, "exp": now + secs});
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
    header.kid = Some("k1".into());
    jsonwebtoken::encode(
        &header,
        &claims,
        &jsonwebtoken::EncodingKey::from_ec_pem(key.serialize_pem().as_bytes()).unwrap(),
    )
    .unwrap()
}

/// An OIDC issuer on loopback signing with `key`: discovery, keys and, when `refresh` is
/// given, a token endpoint that trades that refresh token for a fresh id-token and the
/// refresh token "rotated" (each request's form is recorded in `refresh`'s log).
fn oidc_issuer(
    key: &rcgen::KeyPair,
    refresh: Option<(String, std::sync::Arc<std::sync::Mutex<Vec<String>>>)>,
) -> (support::https::HttpsServer, String) {
    use std::sync::{Arc, Mutex};
    let raw = key.public_key_raw().to_vec();
    let b64 = |b: &[u8]| base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, b);
    let jwk = serde_json::json!({"kty": "EC", "crv": "P-256", "kid": "k1", "use": "sig", "alg": "ES256",
                                 "x": b64(&raw[1..33]), "y": b64(&raw[33..65])});
    let issuer_url = Arc::new(Mutex::new(String::new()));
    let url_in = issuer_url.clone();
    let pem = key.serialize_pem();
    let issuer = support::https::HttpsServer::start(Arc::new(
        move |path: String, body: serde_json::Value| {
            let url = url_in.lock().unwrap().clone();
            let jwk = jwk.clone();
            let refresh = refresh.clone();
            let key = rcgen::KeyPair::from_pem(&pem).unwrap();
            Box::pin(async move {
                match path.as_str() {
                    "/.well-known/openid-configuration" => {
                        serde_json::json!({"issuer": url, "jwks_uri": format!("{url}/jwks"), "token_endpoint": format!("{url}/token")})
                    }
                    "/jwks" => serde_json::json!({"keys": [jwk]}),
                    "/token" => match refresh {
                        Some((want, log)) => {
                            let form = body.as_str().unwrap_or_default().to_string();
                            log.lock().unwrap().push(form.clone());
                            if form.contains(&format!("refresh_token={want}")) {
                                serde_json::json!({"access_token": "at", "id_token": id_token(&key, &url, "r8s", 600), "refresh_token": "rotated", "token_type": "Bearer"})
                            } else {
                                serde_json::json!({"error": "invalid_grant"})
                            }
                        }
                        None => serde_json::Value::Null,
                    },
                    _ => serde_json::Value::Null,
                }
            })
        },
    ));
    *issuer_url.lock().unwrap() = format!("https://{}", issuer.addr);
    let url = issuer_url.lock().unwrap().clone();
    (issuer, url)
}

/// OIDC ID tokens from an issuer on loopback authenticate users; an authorization webhook on
/// loopback allows and denies with its reason.
#[test]
fn oidc_tokens_and_an_authorization_webhook() {
    use std::sync::Arc;
    use support::https::HttpsServer;

    let key = rcgen::KeyPair::generate().unwrap();
    let (issuer, issuer_url) = oidc_issuer(&key, None);
    // The authorization webhook: jane may read configmaps, never secrets.
    let authz = HttpsServer::start(Arc::new(|_path: String, review: serde_json::Value| {
        Box::pin(async move {
            let spec = &review["spec"];
            let resource = spec["resourceAttributes"]["resource"]
                .as_str()
                .unwrap_or_default();
            let status = match (spec["user"].as_str(), resource) {
                (Some("jane"), "configmaps") => serde_json::json!({"allowed": true}),
                (Some("jane"), "secrets") => {
                    serde_json::json!({"allowed": false, "denied": true, "reason": "no secrets for jane"})
                }
                _ => serde_json::json!({"allowed": false}),
            };
            serde_json::json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "status": status})
        })
    }));

    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("issuer-ca.pem");
    std::fs::write(&ca_file, &issuer.ca_pem).unwrap();
    let webhook_config = dir.path().join("authz.kubeconfig");
    std::fs::write(
        &webhook_config,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: authz\n  cluster:\n    server: {}\n    certificate-authority-data: {}\nusers:\n- name: apiserver\n  user: {{}}\ncontexts:\n- name: c\n  context: {{cluster: authz, user: apiserver}}\ncurrent-context: c\n",
            authz.url("/authorize"),
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &authz.ca_pem)
        ),
    )
    .unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "janetoken,jane,2001,\n").unwrap();
    let (ca_file, webhook_config, tokens) = (
        ca_file.to_str().unwrap().to_owned(),
        webhook_config.to_str().unwrap().to_owned(),
        tokens.to_str().unwrap().to_owned(),
    );
    let s = Server::start_in(
        dir,
        &[
            "--disable-agent",
            "--token-auth-file",
            &tokens,
            "--oidc-issuer-url",
            &issuer_url,
            "--oidc-client-id",
            "r8s",
            "--oidc-username-claim",
            "email",
            "--oidc-groups-claim",
            "groups",
            "--oidc-groups-prefix",
            "oidc:",
            "--oidc-ca-file",
            &ca_file,
            "--authorization-mode",
            "Node,RBAC,Webhook",
            "--authorization-webhook-config-file",
            &webhook_config,
        ],
    );

    let id_token = |aud: &str| id_token(&key, &issuer_url, aud, 600);
    let who = as_token(&s, &id_token("r8s"), &["auth", "whoami", "-o", "json"]);
    assert!(who.status.success(), "{}\n{}", stderr(&who), s.log());
    let who: serde_json::Value = serde_json::from_slice(&who.stdout).unwrap();
    assert_eq!(who["status"]["userInfo"]["username"], "alice@example.com");
    assert_eq!(
        who["status"]["userInfo"]["groups"],
        serde_json::json!(["oidc:dev", "system:authenticated"])
    );
    assert_unauthorized(&as_token(&s, &id_token("someone-else"), &["auth", "whoami"]));

    assert!(as_token(&s, "janetoken", &["get", "configmaps"]).status.success());
    let out = as_token(&s, "janetoken", &["get", "secrets"]);
    assert!(
        stderr(&out).contains(
            "secrets is forbidden: User \"jane\" cannot list resource \"secrets\" in API group \"\" in the namespace \"default\": no secrets for jane"
        ),
        "{}",
        stderr(&out)
    );
    assert!(!as_token(&s, "janetoken", &["get", "pods"]).status.success());
}

/// kubectl's oidc auth provider: an expired id-token is refreshed at the issuer's token
/// endpoint with the refresh token, and both new tokens are written back into the kubeconfig
/// (the rotated refresh token must survive the run) — by r8s kubectl as by kubectl 1.33.
#[test]
fn oidc_tokens_are_refreshed_and_written_back() {
    let key = rcgen::KeyPair::generate().unwrap();
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (issuer, issuer_url) = oidc_issuer(&key, Some(("r1".into(), log.clone())));
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("issuer-ca.pem");
    std::fs::write(&ca_file, &issuer.ca_pem).unwrap();
    let ca_file = ca_file.to_str().unwrap().to_owned();
    let s = Server::start_in(
        tempfile::tempdir().unwrap(),
        &[
            "--disable-agent",
            "--oidc-issuer-url",
            &issuer_url,
            "--oidc-client-id",
            "r8s",
            "--oidc-username-claim",
            "email",
            "--oidc-ca-file",
            &ca_file,
        ],
    );
    let admin: serde_json::Value =
        serde_json::from_str(&s.ok("1.33", &["config", "view", "--raw", "-o", "json"])).unwrap();
    let expired = id_token(&key, &issuer_url, "r8s", -60);
    let kubeconfig = serde_json::json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": admin["clusters"],
        "users": [{"name": "alice", "user": {"auth-provider": {"name": "oidc", "config": {
            "idp-issuer-url": issuer_url, "client-id": "r8s", "client-secret": "s3cret",
            "id-token": expired, "refresh-token": "r1",
            "idp-certificate-authority-data": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &issuer.ca_pem),
        }}}}],
        "contexts": [{"name": "alice", "context": {"cluster": admin["clusters"][0]["name"], "user": "alice"}}],
        "current-context": "alice",
    });
    for ours in [true, false] {
        let path = dir.path().join(format!("alice-{ours}.kubeconfig"));
        std::fs::write(&path, kubeconfig.to_string()).unwrap();
        let mut cmd = if ours {
            let mut c = Command::new(env!("CARGO_BIN_EXE_r8s"));
            c.arg("kubectl");
            c
        } else {
            Command::new(kubectl_binary("1.33"))
        };
        let out = cmd
            .arg("--kubeconfig")
            .arg(&path)
            .args(["auth", "whoami", "-o", "json"])
            .env("HOME", dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "ours={ours}: {}", stderr(&out));
        let who: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            who["status"]["userInfo"]["username"], "alice@example.com",
            "ours={ours}"
        );
        let written = std::fs::read_to_string(&path).unwrap();
        assert!(
            written.contains("refresh-token: rotated"),
            "ours={ours}:\n{written}"
        );
        assert!(
            !written.contains(&expired),
            "ours={ours}: the expired token stayed:\n{written}"
        );
    }
    let log = log.lock().unwrap();
    assert!(
        log.iter()
            .all(|f| f.contains("grant_type=refresh_token") && f.contains("refresh_token=r1")),
        "{log:?}"
    );
    assert!(log.len() >= 2, "{log:?}");
}

/// The reference document's Initializers stage behind its feature gate: a new pod waits,
/// invisible, for its initializer; once the initializer removes its name the pod appears and a
/// watch sees it ADDED. With the gate off the field is unknown, as upstream has it now.
#[test]
fn initializers_hold_new_objects_until_initialized() {
    use std::io::{BufRead, BufReader};
    let s = Server::start_with(&["--feature-gates", "Initializers=true"]);
    s.ok_stdin(
        "1.33",
        &["create", "-f", "-"],
        "apiVersion: admissionregistration.k8s.io/v1alpha1\nkind: InitializerConfiguration\nmetadata: {name: pods}\ninitializers:\n- name: podimage.example.com\n  rules: [{apiGroups: [\"\"], apiVersions: [\"v1\"], resources: [pods]}]\n",
    );
    let mut watch = std::process::Command::new(kubectl_binary("1.33"))
        .arg("--kubeconfig")
        .arg(&s.kubeconfig)
        .args([
            "get",
            "--raw",
            "/api/v1/namespaces/default/pods?watch=true&timeoutSeconds=30",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let lines = BufReader::new(watch.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    s.ok("1.33", &["run", "held", "--image=busybox"]);
    let err = s.fails("1.33", &["get", "pod", "held"]);
    assert!(err.contains("pods \"held\" not found"), "{err}");
    assert!(s.ok("1.33", &["get", "pods", "-o", "name"]).trim().is_empty());
    let raw = s.ok(
        "1.33",
        &[
            "get",
            "--raw",
            "/api/v1/namespaces/default/pods/held?includeUninitialized=true",
        ],
    );
    let mut pod: serde_json::Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(
        pod["metadata"]["initializers"]["pending"][0]["name"],
        "podimage.example.com"
    );
    assert!(
        rx.recv_timeout(Duration::from_millis(500)).is_err(),
        "the watch saw an uninitialized pod"
    );

    // The initializer does its work and removes its name.
    pod["metadata"]["initializers"]["pending"] = serde_json::json!([]);
    pod["metadata"]["labels"]["initialized-by"] = serde_json::json!("podimage");
    s.ok_stdin(
        "1.33",
        &[
            "replace",
            "--raw",
            "/api/v1/namespaces/default/pods/held",
            "-f",
            "-",
        ],
        &pod.to_string(),
    );
    let got = s.ok("1.33", &["get", "pod", "held", "-o", "json"]);
    let got: serde_json::Value = serde_json::from_str(&got).unwrap();
    assert!(got["metadata"].get("initializers").is_none(), "{got}");
    assert_eq!(got["metadata"]["labels"]["initialized-by"], "podimage");
    let first = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the watch saw the pod appear");
    let ev: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(
        (ev["type"].as_str(), ev["object"]["metadata"]["name"].as_str()),
        (Some("ADDED"), Some("held"))
    );
    let _ = watch.kill();
    let _ = watch.wait();

    // Without the gate, the field is unknown.
    let plain = Server::start();
    let out = plain.kubectl_stdin(
        "1.33",
        &["create", "-f", "-"],
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  initializers: {pending: [{name: x}]}\n",
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains("initializers"), "{}", stderr(&out));
}

/// TokenReview checks a token for the audiences asked (the API server's own when none) and
/// says which of them it is good for (`status.audiences`), as upstream: a service-account
/// token for its own audiences, a token-file token only for the API server's.
#[test]
fn token_reviews_check_and_report_audiences() {
    let s = server();
    s.wait_for_default_service_account("default");
    let review = |token: &str, audiences: &[&str]| -> serde_json::Value {
        let body = serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": audiences},
        });
        let out = s.ok_stdin("1.33", &["create", "-f", "-", "-o", "json"], &body.to_string());
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["status"].clone()
    };
    let api = "https://kubernetes.default.svc.cluster.local";
    let plain = s.ok("1.33", &["create", "token", "default"]);
    let vault = s.ok(
        "1.33",
        &[
            "create",
            "token",
            "default",
            "--audience",
            "vault",
            "--audience",
            "other",
        ],
    );

    let r = review(&plain, &[]);
    assert_eq!(r["authenticated"], true, "{r}");
    assert_eq!(r["audiences"], serde_json::json!([api]), "{r}");
    assert_eq!(r["user"]["username"], "system:serviceaccount:default:default");
    // Meant for vault: good for vault (not for what it was not asked about), not for the API.
    let r = review(&vault, &["vault", "elsewhere"]);
    assert_eq!(r["authenticated"], true, "{r}");
    assert_eq!(r["audiences"], serde_json::json!(["vault"]), "{r}");
    let r = review(&vault, &[]);
    assert_eq!(r["authenticated"], false, "{r}");
    assert!(
        r["error"].as_str().unwrap_or_default().contains("audience"),
        "{r}"
    );
    let r = review(&plain, &["vault"]);
    assert_eq!(r["authenticated"], false, "{r}");
    // A token-file token is good for the API server's audiences only.
    let r = review("janetoken", &[]);
    assert_eq!(
        (r["authenticated"].clone(), r["audiences"].clone()),
        (true.into(), serde_json::json!([api])),
        "{r}"
    );
    let r = review("janetoken", &["vault"]);
    assert_eq!(r["authenticated"], false, "{r}");
    assert!(r["error"].is_null(), "no error, only unauthenticated: {r}");
    let r = review("nonsense", &[]);
    assert_eq!(r["authenticated"], false, "{r}");
}

/// A client certificate for `cn`, signed by the CA in `dir`'s `<name>.crt`/`<name>.key`;
/// written beside them, returns (cert path, key path).
fn client_cert(dir: &std::path::Path, ca: &str, cn: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let ca_cert = std::fs::read_to_string(dir.join(format!("{ca}.crt"))).unwrap();
    let ca_key =
        rcgen::KeyPair::from_pem(&std::fs::read_to_string(dir.join(format!("{ca}.key"))).unwrap()).unwrap();
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca_cert, ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(rcgen::DnType::CommonName, cn);
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, &issuer).unwrap();
    let (cert_path, key_path) = (
        dir.join(format!("test-{cn}.crt")),
        dir.join(format!("test-{cn}.key")),
    );
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    (cert_path, key_path)
}

#[test]
fn a_front_proxy_names_the_user_in_request_headers() {
    let s = server();
    let tls = s.dir.path().join("server/tls");
    // POST a SelfSubjectReview with the client certificate `cert` and `headers`: (code, body).
    let whoami = |cert: &(std::path::PathBuf, std::path::PathBuf), headers: &[&str]| {
        let mut cmd = Command::new("curl");
        cmd.args(["-sS", "--cacert"])
            .arg(tls.join("ca.crt"))
            .arg("--cert")
            .arg(&cert.0)
            .arg("--key")
            .arg(&cert.1)
            .args([
                "-H",
                "Content-Type: application/json",
                "-w",
                "\n%{http_code}",
                "-d",
            ])
            .arg(r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#);
        for h in headers {
            cmd.args(["-H", h]);
        }
        cmd.arg(format!(
            "https://127.0.0.1:{}/apis/authentication.k8s.io/v1/selfsubjectreviews",
            s.port
        ));
        let out = cmd.output().unwrap();
        let text = stdout(&out);
        let (body, code) = text.rsplit_once('\n').unwrap();
        // curl's own error (code 000: no answer) goes with the body, to say why.
        (code.to_owned(), format!("{body}{}", stderr(&out)))
    };
    let user_of = |body: &str| -> serde_json::Value {
        serde_json::from_str::<serde_json::Value>(body).unwrap()["status"]["userInfo"].clone()
    };
    let proxy = client_cert(&tls, "front-proxy-ca", "front-proxy-client");
    let (code, body) = whoami(
        &proxy,
        &[
            "X-Remote-User: alice",
            "X-Remote-Group: devs",
            "X-Remote-Group: ops",
            "X-Remote-Extra-Example.com%2fScope: read",
        ],
    );
    assert_eq!(code, "201", "{body}");
    let user = user_of(&body);
    assert_eq!(user["username"], "alice", "{body}");
    assert_eq!(
        user["groups"],
        serde_json::json!(["devs", "ops", "system:authenticated"]),
        "{body}"
    );
    assert_eq!(
        user["extra"]["example.com/scope"],
        serde_json::json!(["read"]),
        "{body}"
    );

    // The proxy's own certificate is no user of its own: without the headers, 401.
    let (code, body) = whoami(&proxy, &[]);
    assert_eq!(code, "401", "{body}");
    // A certificate of the same CA with a name not allowed may not name users.
    let other = client_cert(&tls, "front-proxy-ca", "intruder");
    let (code, body) = whoami(&other, &["X-Remote-User: alice"]);
    assert_eq!(code, "401", "{body}");
    // A cluster client certificate's headers mean nothing: it is its own user.
    let client = client_cert(&tls, "ca", "bob");
    let (code, body) = whoami(
        &client,
        &["X-Remote-User: alice", "X-Remote-Group: system:masters"],
    );
    assert_eq!(code, "201", "{body}");
    assert_eq!(user_of(&body)["username"], "bob", "{body}");
    assert!(!body.contains("system:masters"), "{body}");

    // What aggregated API servers read to trust the proxy.
    let cm = s.ok(
        "1.33",
        &[
            "get",
            "configmap",
            "-n",
            "kube-system",
            "extension-apiserver-authentication",
            "-o",
            "json",
        ],
    );
    let cm: serde_json::Value = serde_json::from_str(&cm).unwrap();
    assert_eq!(
        cm["data"]["requestheader-allowed-names"],
        "[\"front-proxy-client\"]"
    );
    assert_eq!(
        cm["data"]["requestheader-username-headers"],
        "[\"X-Remote-User\"]"
    );
    assert_eq!(
        cm["data"]["requestheader-client-ca-file"].as_str().map(str::trim),
        Some(
            std::fs::read_to_string(tls.join("front-proxy-ca.crt"))
                .unwrap()
                .trim()
        )
    );
}
