//! The gatekeepers' cost (issue 9): pod creates/s and gets/s through the secure chain — Node,RBAC
//! authorization, the default admission plugins, audit at Metadata level — against the open
//! chain (AlwaysAllow, no admission, no audit), in one run, with 1,000 Roles and RoleBindings
//! present; and the cost of one RBAC decision.
//!
//!   cargo build --release -p r8s --bins --examples && target/release/examples/security-bench
//!
//! The requests come from a token user bound to a pods Role in the benchmark namespace (an admin in
//! system:masters would be allowed before RBAC looks). Sizes: --pods N --gets N --roles N;
//! `--rounds N` (default 3) alternates the open and the secure chain N times and compares the
//! medians; `--breakdown` runs once each: open, secure without audit, secure without admission,
//! secure; `--threads` adds the CPU each request costs by thread (user/system µs), the
//! server's and the clients'.

#[path = "common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::{Api, Client};

const NS: &str = "bench";
const CLIENTS: usize = 64;

fn pod(name: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"app": "bench"}},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "3600"],
                                 "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "10m", "memory": "16Mi"}}}]}
    }))
    .unwrap()
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(NS.into()),
        ..Default::default()
    }
}

/// 1,000 Roles with a few rules each and a RoleBinding for each (one in ten also binds the
/// group every user is in, so the benchmark user's own grants are many, not one), and `edit`
/// for the benchmark user.
async fn populate(admin: &Client, roles: usize) {
    let post = PostParams::default();
    let _ = Api::<Namespace>::all(admin.clone())
        .create(
            &post,
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(NS.into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await;
    let _ = Api::<ServiceAccount>::namespaced(admin.clone(), NS)
        .create(
            &post,
            &ServiceAccount {
                metadata: meta("default"),
                ..Default::default()
            },
        )
        .await;
    let role_api: Api<Role> = Api::namespaced(admin.clone(), NS);
    let binding_api: Api<RoleBinding> = Api::namespaced(admin.clone(), NS);
    let rule = |verbs: &[&str], group: &str, res: &str| PolicyRule {
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        api_groups: Some(vec![group.into()]),
        resources: Some(vec![res.into()]),
        ..Default::default()
    };
    for i in 0..roles {
        let name = format!("role-{i:04}");
        role_api
            .create(
                &post,
                &Role {
                    metadata: meta(&name),
                    rules: Some(vec![
                        rule(&["get", "list"], "", &format!("things{i}")),
                        rule(&["watch"], "apps", "deployments"),
                        rule(&["get"], "", "configmaps"),
                    ]),
                },
            )
            .await
            .unwrap();
        let mut subjects = vec![Subject {
            kind: "User".into(),
            name: format!("user-{i}"),
            api_group: Some("rbac.authorization.k8s.io".into()),
            ..Default::default()
        }];
        if i % 10 == 0 {
            subjects.push(Subject {
                kind: "Group".into(),
                name: "system:authenticated".into(),
                api_group: Some("rbac.authorization.k8s.io".into()),
                ..Default::default()
            });
        }
        binding_api
            .create(
                &post,
                &RoleBinding {
                    metadata: meta(&name),
                    role_ref: RoleRef {
                        api_group: "rbac.authorization.k8s.io".into(),
                        kind: "Role".into(),
                        name,
                    },
                    subjects: Some(subjects),
                },
            )
            .await
            .unwrap();
    }
    // (Not `edit`: aggregated roles are filled by the controller manager, which does not run
    // here, so the user gets a Role of its own.)
    role_api
        .create(
            &post,
            &Role {
                metadata: meta("bench-pods"),
                rules: Some(vec![rule(
                    &["create", "get", "list", "watch", "delete"],
                    "",
                    "pods",
                )]),
            },
        )
        .await
        .unwrap();
    binding_api
        .create(
            &post,
            &RoleBinding {
                metadata: meta("bench-pods"),
                role_ref: RoleRef {
                    api_group: "rbac.authorization.k8s.io".into(),
                    kind: "Role".into(),
                    name: "bench-pods".into(),
                },
                subjects: Some(vec![Subject {
                    kind: "User".into(),
                    name: "bench".into(),
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    ..Default::default()
                }]),
            },
        )
        .await
        .unwrap();
}

/// A client that authenticates with the static token of user `bench`.
fn bench_client(dir: &std::path::Path, port: u16) -> Client {
    use rustls::pki_types::pem::PemObject;
    let ca = std::fs::read(dir.join("server/tls/ca.crt")).unwrap();
    let ca = rustls::pki_types::CertificateDer::from_pem_slice(&ca).unwrap();
    let mut config = kube::Config::new(format!("https://127.0.0.1:{port}").parse().unwrap());
    config.root_cert = Some(vec![ca.to_vec()]);
    config.auth_info.token = Some("benchtoken".to_owned().into());
    Client::try_from(config).unwrap()
}

/// `n` calls of `op(i)` from 64 concurrent clients: calls/s, p50, p99.
async fn run<F, Fut>(n: usize, op: F) -> (f64, Duration, Duration)
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let (lat, elapsed) = common::concurrently(n, CLIENTS, op).await;
    let rate = lat.len() as f64 / elapsed.as_secs_f64();
    (rate, common::pct(&lat, 0.5), common::pct(&lat, 0.99))
}

async fn chain(name: &str, extra: &[&str], pods: usize, gets: usize, roles: usize) -> Rates {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tokens.csv"), "benchtoken,bench,5001,\n").unwrap();
    std::fs::write(
        dir.path().join("audit-policy.yaml"),
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n",
    )
    .unwrap();
    let tokens = dir.path().join("tokens.csv").to_str().unwrap().to_owned();
    let mut args = vec![
        "--disable-agent",
        "--disable-controller-manager",
        "--disable-scheduler",
        "--token-auth-file",
        &tokens,
    ];
    let audit_policy = dir.path().join("audit-policy.yaml").to_str().unwrap().to_owned();
    let audit_log = dir.path().join("audit.log").to_str().unwrap().to_owned();
    let with_audit = extra.contains(&"audit");
    if with_audit {
        args.extend([
            "--audit-policy-file",
            &audit_policy,
            "--audit-log-path",
            &audit_log,
        ]);
    }
    args.extend(extra.iter().filter(|a| **a != "audit"));
    let (mut server, admin) = common::start_server(dir.path(), &args, None).await;
    let port: u16 = std::fs::read_to_string(dir.path().join("kubeconfig.yaml"))
        .unwrap()
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("server: https://127.0.0.1:")
                .map(|p| p.trim().parse().unwrap())
        })
        .unwrap();
    populate(&admin, roles).await;
    let client = bench_client(dir.path(), port);
    let api: Api<Pod> = Api::namespaced(client, NS);
    // RBAC follows its objects through a watch: wait until the user's binding counts.
    let deadline = Instant::now() + Duration::from_secs(30);
    while api.list(&Default::default()).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "{name}: the benchmark user never got its binding"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let raw_client = api.clone().into_client();
    let creating = api.clone();
    let pid = server.id();
    let cpu_before = common::cpu_time(pid);
    let threads = std::env::args().any(|a| a == "--threads");
    let me = std::process::id();
    let (t0, c0) = (common::thread_cpu(pid), common::thread_cpu(me));
    let (creates, c50, c99) = run(pods, move |i| {
        let api = creating.clone();
        async move {
            api.create(&PostParams::default(), &pod(&format!("p-{i:06}")))
                .await
                .unwrap();
        }
    })
    .await;
    let getting = api.clone();
    let cpu_created = common::cpu_time(pid);
    let (t1, c1) = (common::thread_cpu(pid), common::thread_cpu(me));
    let (gets_s, g50, g99) = run(gets, move |i| {
        let api = getting.clone();
        async move {
            api.get(&format!("p-{:06}", i % pods)).await.unwrap();
        }
    })
    .await;
    let cpu_got = common::cpu_time(pid);
    let (t2, c2) = (common::thread_cpu(pid), common::thread_cpu(me));
    // One pod as this chain serves it, for the clients' decoding cost (`decode_cost`).
    let pod_json = raw_client
        .request_text(
            http::Request::get(format!("/api/v1/namespaces/{NS}/pods/p-000000"))
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .unwrap();
    // The server's CPU per request: what the chain costs, whatever the neighbours do to the
    // wall clock.
    let per = |d: Duration, n: usize| d.as_secs_f64() * 1e6 / n as f64;
    let (c_cpu, g_cpu) = (
        per(cpu_created - cpu_before, pods),
        per(cpu_got - cpu_created, gets),
    );
    println!(
        "{name:<7} creates {creates:>7.0}/s (p50 {}, p99 {}, server CPU {c_cpu:.0} µs each)   gets {gets_s:>7.0}/s (p50 {}, p99 {}, server CPU {g_cpu:.0} µs each)",
        common::ms(c50),
        common::ms(c99),
        common::ms(g50),
        common::ms(g99)
    );
    if threads {
        // µs per request, user/system, by thread: the server's, then this process's (the
        // clients').
        for (what, before, after, n) in [
            ("server per create", &t0, &t1, pods),
            ("client per create", &c0, &c1, pods),
            ("server per get", &t1, &t2, gets),
            ("client per get", &c1, &c2, gets),
        ] {
            println!("        {what}: {}", common::thread_cpu_delta(before, after, n));
        }
    }
    if with_audit {
        let lines = std::fs::read_to_string(&audit_log)
            .map(|s| s.lines().count())
            .unwrap_or(0);
        println!("        audit log: {lines} events");
    }
    let _ = server.kill();
    let _ = server.wait();
    Rates {
        creates,
        gets: gets_s,
        create_cpu: c_cpu,
        get_cpu: g_cpu,
        pod_json,
    }
}

/// What one pass over a chain measured.
struct Rates {
    creates: f64,
    gets: f64,
    /// Server CPU per request, µs.
    create_cpu: f64,
    get_cpu: f64,
    /// A created pod as the chain's GET returns it.
    pod_json: String,
}

/// What decoding one served pod costs a kube-rs client (the typed `Pod`, as `Api::get` does),
/// µs: the share of each get the benchmark's own clients spend on the object's size, on the same
/// two cores as the server.
fn decode_cost(json: &str) -> f64 {
    const N: usize = 50_000;
    let started = Instant::now();
    for _ in 0..N {
        let pod: Pod = serde_json::from_str(std::hint::black_box(json)).unwrap();
        std::hint::black_box(pod);
    }
    started.elapsed().as_secs_f64() * 1e6 / N as f64
}

/// One RBAC decision, in process: the bootstrap policy plus `roles` Roles and RoleBindings.
async fn rbac_decisions(roles: usize) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn r8s_store::Store> = Arc::new(
        r8s_store::embedded::EmbeddedStore::open(r8s_store::embedded::EmbeddedOptions::new(dir.path()))
            .unwrap(),
    );
    let policy = r8s_apiserver::rbac::bootstrap_policy::policy();
    for r in &policy.cluster_roles {
        let v = serde_json::to_vec(r).unwrap();
        store
            .create(
                &format!("/registry/clusterroles/{}", r.metadata.name.as_deref().unwrap()),
                v.into(),
            )
            .await
            .unwrap();
    }
    for b in &policy.cluster_role_bindings {
        let v = serde_json::to_vec(b).unwrap();
        store
            .create(
                &format!(
                    "/registry/clusterrolebindings/{}",
                    b.metadata.name.as_deref().unwrap()
                ),
                v.into(),
            )
            .await
            .unwrap();
    }
    for i in 0..roles {
        let role = serde_json::json!({"metadata": {"name": format!("role-{i}"), "namespace": NS},
            "rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": [format!("things{i}")]},
                      {"verbs": ["watch"], "apiGroups": ["apps"], "resources": ["deployments"]}]});
        store
            .create(
                &format!("/registry/roles/{NS}/role-{i}"),
                serde_json::to_vec(&role).unwrap().into(),
            )
            .await
            .unwrap();
        let mut subjects = vec![serde_json::json!({"kind": "User", "name": format!("user-{i}")})];
        if i % 10 == 0 {
            subjects.push(serde_json::json!({"kind": "Group", "name": "system:authenticated"}));
        }
        let binding = serde_json::json!({"metadata": {"name": format!("role-{i}"), "namespace": NS},
            "roleRef": {"kind": "Role", "name": format!("role-{i}"), "apiGroup": "rbac.authorization.k8s.io"},
            "subjects": subjects});
        store
            .create(
                &format!("/registry/rolebindings/{NS}/role-{i}"),
                serde_json::to_vec(&binding).unwrap().into(),
            )
            .await
            .unwrap();
    }
    let rbac = r8s_apiserver::rbac::Rbac::start(store);
    rbac.wait_synced().await;
    let user = r8s_apiserver::authn::UserInfo {
        name: "user-7".into(),
        groups: vec!["system:authenticated".into()],
        ..Default::default()
    };
    let requests: Vec<_> = [
        ("GET", "/api/v1/namespaces/bench/things7"), // allowed by its own role
        ("GET", "/api/v1/namespaces/bench/pods"),    // denied after every grant
        ("GET", "/apis/apps/v1/namespaces/bench/deployments"), // a watch verb mismatch
        ("GET", "/api"),                             // system:discovery
    ]
    .iter()
    .map(|(m, p)| r8s_apiserver::request_info::parse_request(&m.parse().unwrap(), p, None))
    .collect();
    let mut lat = Vec::with_capacity(200_000);
    let mut allowed = 0;
    for i in 0..200_000 {
        let r = &requests[i % requests.len()];
        let t = Instant::now();
        if rbac.allows(&user, r) {
            allowed += 1;
        }
        lat.push(t.elapsed());
    }
    lat.sort();
    println!(
        "RBAC decision ({roles} Roles/RoleBindings + bootstrap policy, {} allowed of {}): p50 {:.2} µs, p99 {:.2} µs, max {:.1} µs",
        allowed,
        lat.len(),
        common::pct(&lat, 0.5).as_secs_f64() * 1e6,
        common::pct(&lat, 0.99).as_secs_f64() * 1e6,
        lat.last().unwrap().as_secs_f64() * 1e6,
    );
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let pods = common::arg("--pods", 5_000);
    let gets = common::arg("--gets", 20_000);
    let roles = common::arg("--roles", 1_000);
    println!("security-bench: {pods} pod creates and {gets} gets from {CLIENTS} clients, {roles} Roles/RoleBindings");
    rbac_decisions(roles).await;
    let all_plugins = "NamespaceLifecycle,LimitRanger,ServiceAccount,Priority,DefaultTolerationSeconds,NodeRestriction,PodSecurity,ResourceQuota,MutatingAdmissionWebhook,ValidatingAdmissionWebhook";
    let open_args = [
        "--authorization-mode",
        "AlwaysAllow",
        "--disable-admission-plugins",
        all_plugins,
    ];
    // `--breakdown`: also the secure chain without audit, and with audit but no admission, to
    // see where its cost goes.
    if std::env::args().any(|a| a == "--breakdown") {
        chain("open", &open_args, pods, gets, roles).await;
        chain("no-audit", &[], pods, gets, roles).await;
        chain(
            "no-adm",
            &["audit", "--disable-admission-plugins", all_plugins],
            pods,
            gets,
            roles,
        )
        .await;
        chain("secure", &["audit"], pods, gets, roles).await;
        return;
    }
    // This machine is shared (a VM whose neighbours come and go): one pass can land in a slow
    // spell. `--rounds N` alternates open and secure N times and compares the medians.
    let rounds = common::arg("--rounds", 3).max(1);
    let (mut open, mut secure) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        open.push(chain("open", &open_args, pods, gets, roles).await);
        secure.push(chain("secure", &["audit"], pods, gets, roles).await);
    }
    let median = |v: &[Rates], pick: fn(&Rates) -> f64| {
        let mut xs: Vec<f64> = v.iter().map(pick).collect();
        xs.sort_by(f64::total_cmp);
        xs[xs.len() / 2]
    };
    let (oc, og) = (median(&open, |r| r.creates), median(&open, |r| r.gets));
    let (sc, sg) = (median(&secure, |r| r.creates), median(&secure, |r| r.gets));
    let (occ, ogc) = (median(&open, |r| r.create_cpu), median(&open, |r| r.get_cpu));
    let (scc, sgc) = (median(&secure, |r| r.create_cpu), median(&secure, |r| r.get_cpu));
    println!(
        "medians of {rounds}: open creates {oc:.0}/s ({occ:.0} µs CPU), gets {og:.0}/s ({ogc:.0} µs); secure creates {sc:.0}/s ({scc:.0} µs), gets {sg:.0}/s ({sgc:.0} µs)"
    );
    // Decoding happens in the clients, which share the two cores with the server: the secure
    // chain's bigger pods cost them more per get whatever the server does.
    let (od, sd) = (decode_cost(&open[0].pod_json), decode_cost(&secure[0].pod_json));
    println!(
        "client decode of one served pod (serde_json into k8s-openapi Pod, one thread): open {} bytes {od:.2} µs, secure {} bytes {sd:.2} µs (+{:.2} µs per get)",
        open[0].pod_json.len(),
        secure[0].pod_json.len(),
        sd - od
    );
    println!(
        "secure/open throughput: creates {:.1}%, gets {:.1}% (target ≥ 90%); open/secure server CPU per request: creates {:.1}%, gets {:.1}%",
        sc / oc * 100.0,
        sg / og * 100.0,
        occ / scc * 100.0,
        ogc / sgc * 100.0
    );
}
