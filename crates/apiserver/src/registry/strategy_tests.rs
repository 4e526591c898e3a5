//! The built-in strategies through the catalogue, as the generic registry calls them:
//! defaults, validation, immutable fields, tables.

use super::Resource;
use r8s_api::validation::FieldError;
use serde_json::{json, Value};

use super::configmaps::MAX_DATA_BYTES;
use super::pods::defaults as pod_defaults;
use super::pods::qos_class;
use super::strategy::{self, validate, Column, MAX_ANNOTATIONS_BYTES};
use crate::authn::UserInfo;

fn default(def: &Resource, obj: &mut Value) {
    def.strategy.default(obj);
}

fn prepare_for_create(def: &Resource, obj: &mut Value) {
    def.strategy.prepare_for_create(&UserInfo::default(), obj);
}

fn validate_update(def: &Resource, obj: &Value, old: &Value) -> Vec<FieldError> {
    strategy::validate_update(def, obj, old)
}

fn columns(def: &Resource) -> Vec<Column> {
    def.strategy.columns()
}

/// A write of a pod's main resource: what an update may change.
fn validate_pod_update(obj: &Value, old: &Value) -> Vec<FieldError> {
    def("pods").strategy.validate_main_update(obj, old)
}

fn cells(def: &Resource, obj: &Value) -> Vec<Value> {
    def.strategy.cells(obj)
}

fn def(plural: &str) -> &'static Resource {
    super::catalogue::builtins()
        .iter()
        .find(|d| d.plural == plural && d.group != "events.k8s.io")
        .unwrap()
}

#[test]
fn secret_string_data_becomes_data() {
    let mut s = json!({"data": {"a": "eA==", "b": "eA=="}, "stringData": {"b": "yy", "c": "z"}});
    default(def("secrets"), &mut s);
    assert_eq!(
        s,
        json!({"type": "Opaque", "data": {"a": "eA==", "b": "eXk=", "c": "eg=="}})
    );
}

#[test]
fn pod_defaults_follow_upstream() {
    let mut pod = json!({"spec": {"containers": [
        {"name": "a", "image": "nginx"},
        {"name": "b", "image": "nginx:1.25"},
        {"name": "c", "image": "reg:5000/x:latest", "ports": [{"containerPort": 80}]},
    ]}});
    default(def("pods"), &mut pod);
    let s = &pod["spec"];
    assert_eq!(s["restartPolicy"], "Always");
    assert_eq!(s["dnsPolicy"], "ClusterFirst");
    assert_eq!(s["terminationGracePeriodSeconds"], 30);
    assert_eq!(s["schedulerName"], "default-scheduler");
    assert_eq!(s["containers"][0]["imagePullPolicy"], "Always");
    assert_eq!(s["containers"][1]["imagePullPolicy"], "IfNotPresent");
    assert_eq!(s["containers"][2]["imagePullPolicy"], "Always");
    assert_eq!(s["containers"][2]["ports"][0]["protocol"], "TCP");
}

#[test]
fn the_deprecated_service_account_alias_names_the_account_and_reads_as_the_name() {
    // Only the alias: it names the account.
    let mut pod = json!({"spec": {"serviceAccount": "builder", "containers": []}});
    default(def("pods"), &mut pod);
    assert_eq!(pod["spec"]["serviceAccountName"], "builder");
    assert_eq!(pod["spec"]["serviceAccount"], "builder");
    // Both, differing: the name wins and the alias follows it.
    let mut pod = json!({"spec": {"serviceAccountName": "a", "serviceAccount": "b"}});
    default(def("pods"), &mut pod);
    assert_eq!(
        (&pod["spec"]["serviceAccountName"], &pod["spec"]["serviceAccount"]),
        (&json!("a"), &json!("a"))
    );
    // Neither: no alias appears; a name chosen later (by admission) gets its alias when the
    // pod is prepared for storage.
    let mut pod = json!({"spec": {"containers": []}});
    default(def("pods"), &mut pod);
    assert!(pod["spec"].get("serviceAccount").is_none());
    pod["spec"]["serviceAccountName"] = json!("default");
    prepare_for_create(def("pods"), &mut pod);
    assert_eq!(pod["spec"]["serviceAccount"], "default");
    // Templates of workloads too.
    let mut d = json!({"spec": {"template": {"spec": {"serviceAccountName": "web", "containers": []}}}});
    default(def("deployments"), &mut d);
    assert_eq!(d["spec"]["template"]["spec"]["serviceAccount"], "web");
}

#[test]
fn namespaces_are_labelled_with_their_name_whatever_the_client_sent() {
    let mut ns =
        json!({"metadata": {"name": "team", "labels": {"kubernetes.io/metadata.name": "other", "a": "b"}}});
    default(def("namespaces"), &mut ns);
    assert_eq!(
        ns["metadata"]["labels"],
        json!({"kubernetes.io/metadata.name": "team", "a": "b"})
    );
    // A generated name is labelled once it is known.
    let mut ns = json!({"metadata": {"generateName": "team-"}});
    default(def("namespaces"), &mut ns);
    assert!(ns["metadata"]["labels"].is_null());
    ns["metadata"]["name"] = json!("team-x1y2z");
    prepare_for_create(def("namespaces"), &mut ns);
    assert_eq!(
        ns["metadata"]["labels"],
        json!({"kubernetes.io/metadata.name": "team-x1y2z"})
    );
}

#[test]
fn limit_range_container_items_default_from_max_and_min() {
    let mut lr = json!({"spec": {"limits": [
        {"type": "Container", "max": {"cpu": "800m", "memory": "1Gi"}, "min": {"cpu": "200m", "ephemeral-storage": "1Gi"},
         "default": {"memory": "512Mi"}},
        {"type": "Container", "min": {"cpu": "100m"}},
        {"type": "Container"},
        {"type": "Pod", "max": {"cpu": "2"}},
    ]}});
    default(def("limitranges"), &mut lr);
    let items = &lr["spec"]["limits"];
    // The limit given stays; the max fills the rest; requests follow the limits, then the min.
    assert_eq!(items[0]["default"], json!({"memory": "512Mi", "cpu": "800m"}));
    assert_eq!(
        items[0]["defaultRequest"],
        json!({"memory": "512Mi", "cpu": "800m", "ephemeral-storage": "1Gi"})
    );
    assert!(items[1].get("default").is_none(), "no max, no default limit");
    assert_eq!(items[1]["defaultRequest"], json!({"cpu": "100m"}));
    assert_eq!(items[2], json!({"type": "Container"}), "nothing to default from");
    assert_eq!(
        items[3],
        json!({"type": "Pod", "max": {"cpu": "2"}}),
        "only Container items"
    );
    // No spec: nothing is added.
    let mut empty = json!({"metadata": {"name": "x"}});
    default(def("limitranges"), &mut empty);
    assert_eq!(empty, json!({"metadata": {"name": "x"}}));
}

#[test]
fn services_endpoints_and_nodes_get_upstreams_defaults() {
    let mut svc =
        json!({"spec": {"type": "LoadBalancer", "sessionAffinity": "ClientIP", "ports": [{"port": 80}]}});
    default(def("services"), &mut svc);
    assert_eq!(
        svc["spec"]["sessionAffinityConfig"],
        json!({"clientIP": {"timeoutSeconds": 10800}})
    );
    assert_eq!(svc["spec"]["allocateLoadBalancerNodePorts"], true);
    let mut svc = json!({"spec": {"sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 5}}}});
    default(def("services"), &mut svc);
    assert!(
        svc["spec"].get("sessionAffinityConfig").is_none(),
        "no affinity, no config"
    );
    assert!(svc["spec"].get("allocateLoadBalancerNodePorts").is_none());

    let mut ep = json!({"subsets": [{"ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}]}]});
    default(def("endpoints"), &mut ep);
    assert_eq!(ep["subsets"][0]["ports"][0]["protocol"], "TCP");
    assert_eq!(ep["subsets"][0]["ports"][1]["protocol"], "UDP");
    let mut bare = json!({"metadata": {"name": "e"}});
    default(def("endpoints"), &mut bare);
    assert_eq!(bare, json!({"metadata": {"name": "e"}}));

    let mut node = json!({"status": {"capacity": {"cpu": "2"}}});
    default(def("nodes"), &mut node);
    assert_eq!(node["status"]["allocatable"], json!({"cpu": "2"}));
}

#[test]
fn a_new_service_has_an_empty_load_balancer_status_whatever_it_was_sent_with() {
    let user = crate::authn::UserInfo::default();
    let mut svc = json!({"spec": {}, "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}});
    def("services").strategy.prepare_for_create(&user, &mut svc);
    assert_eq!(svc["status"], json!({"loadBalancer": {}}));
}

#[test]
fn immutable_fields_are_refused_in_upstreams_words() {
    let text = |d: &str, new: Value, old: Value| -> Vec<String> {
        validate_update(def(d), &new, &old)
            .iter()
            .map(|e| e.to_string())
            .collect()
    };
    // ConfigMaps and Secrets marked immutable keep their data and the mark.
    let cm = json!({"immutable": true, "data": {"a": "1"}});
    assert_eq!(
        text("configmaps", json!({"data": {"a": "2"}}), cm.clone()),
        [
            "immutable: Forbidden: field is immutable when `immutable` is set",
            "data: Forbidden: field is immutable when `immutable` is set"
        ]
    );
    let relabelled = json!({"metadata": {"labels": {"x": "y"}}, "immutable": true, "data": {"a": "1"}});
    assert!(text("configmaps", relabelled, cm).is_empty());
    assert!(text(
        "configmaps",
        json!({"data": {"a": "2"}}),
        json!({"data": {"a": "1"}})
    )
    .is_empty());
    assert!(
        text(
            "configmaps",
            json!({"data": {}, "immutable": true}),
            json!({"immutable": true})
        )
        .is_empty(),
        "absent and empty data are the same"
    );
    assert_eq!(
        text(
            "secrets",
            json!({"type": "kubernetes.io/tls"}),
            json!({"type": "Opaque"})
        ),
        ["type: Invalid value: \"kubernetes.io/tls\": field is immutable"]
    );
    // A workload's selector.
    let d = |app: &str| json!({"spec": {"selector": {"matchLabels": {"app": app}}}});
    assert_eq!(
        text("deployments", d("web2"), d("web")),
        [
            r#"spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{"app":"web2"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable"#
        ]
    );
    assert_eq!(text("replicasets", d("b"), d("a")).len(), 1);
    let with_empty = json!({"spec": {"selector": {"matchLabels": {"app": "web"}, "matchExpressions": []}}});
    assert!(
        text("deployments", with_empty, d("web")).is_empty(),
        "nil and empty are equal"
    );
    // PriorityClasses and RoleBindings.
    assert_eq!(
        text(
            "priorityclasses",
            json!({"value": 2, "preemptionPolicy": "Never"}),
            json!({"value": 1, "preemptionPolicy": "PreemptLowerPriority"})
        ),
        [
            "value: Forbidden: may not be changed in an update.",
            "preemptionPolicy: Invalid value: \"Never\": field is immutable"
        ]
    );
    let rb = |name: &str| json!({"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}});
    assert_eq!(
        text("rolebindings", rb("edit"), rb("view")),
        [
            r#"roleRef: Invalid value: rbac.RoleRef{APIGroup:"rbac.authorization.k8s.io", Kind:"ClusterRole", Name:"edit"}: cannot change roleRef"#
        ]
    );
}

#[test]
fn workloads_must_restart_always_and_be_able_to_roll() {
    let d = |extra: Value| {
        let mut d = json!({"metadata": {"name": "web"}, "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}});
        merge(&mut d, &extra);
        default(def("deployments"), &mut d);
        validate(def("deployments"), &d)
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
    };
    fn merge(a: &mut Value, b: &Value) {
        match (a, b) {
            (Value::Object(a), Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
            (a, b) => *a = b.clone(),
        }
    }
    assert_eq!(d(json!({})), Vec::<String>::new());
    assert_eq!(
        d(json!({"spec": {"template": {"spec": {"restartPolicy": "Never", "activeDeadlineSeconds": 5}}}})),
        [
            "spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\"",
            "spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in ReplicaSet is not Supported",
        ]
    );
    assert_eq!(
        d(json!({"spec": {"strategy": {"rollingUpdate": {"maxUnavailable": 0, "maxSurge": "0%"}}}})),
        ["spec.strategy.rollingUpdate.maxUnavailable: Invalid value: intstr.IntOrString{Type:0, IntVal:0, StrVal:\"\"}: may not be 0 when `maxSurge` is 0"]
    );
    assert_eq!(
        d(json!({"spec": {"strategy": {"rollingUpdate": {"maxUnavailable": "150%", "maxSurge": "half"}}}})),
        [
            "spec.strategy.rollingUpdate.maxSurge: Invalid value: \"half\": a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
            "spec.strategy.rollingUpdate.maxUnavailable: Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:\"150%\"}: must not be greater than 100%",
        ]
    );
    assert_eq!(
        d(json!({"spec": {"strategy": {"type": "Recreate", "rollingUpdate": {"maxSurge": 1}}}})),
        ["spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` is 'Recreate'"]
    );
    assert_eq!(
        d(json!({"spec": {"minReadySeconds": 30, "progressDeadlineSeconds": 20}})),
        ["spec.progressDeadlineSeconds: Invalid value: 20: must be greater than minReadySeconds"]
    );
}

#[test]
fn data_and_annotations_have_upstreams_size_limits() {
    let big = "x".repeat(MAX_DATA_BYTES);
    let errs = |d: &str, obj: Value| {
        validate(def(d), &obj)
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        errs(
            "configmaps",
            json!({"metadata": {"name": "c"}, "data": {"k": big}})
        ),
        ["[]: Too long: may not be more than 1048576 bytes"]
    );
    assert!(errs(
        "configmaps",
        json!({"metadata": {"name": "c"}, "data": {"k": "x".repeat(1000)}})
    )
    .is_empty());
    // A Secret's data counts decoded (base64 is 4 bytes for every 3).
    let encoded = "eHh4".repeat(MAX_DATA_BYTES / 3 + 1);
    assert_eq!(
        errs(
            "secrets",
            json!({"metadata": {"name": "s"}, "data": {"k": encoded}})
        ),
        ["data: Too long: may not be more than 1048576 bytes"]
    );
    let notes = "n".repeat(MAX_ANNOTATIONS_BYTES);
    assert_eq!(
        errs(
            "configmaps",
            json!({"metadata": {"name": "c", "annotations": {"a": notes}}})
        ),
        ["metadata.annotations: Too long: may not be more than 262144 bytes"]
    );
}

#[test]
fn a_pod_stored_without_the_alias_may_still_be_updated() {
    let old = json!({"spec": {"serviceAccountName": "default", "containers": [{"name": "c", "image": "a"}]}});
    let mut new = old.clone();
    new["spec"]["containers"][0]["image"] = json!("b");
    default(def("pods"), &mut new);
    assert_eq!(new["spec"]["serviceAccount"], "default");
    let errs = validate_pod_update(&new, &{
        let mut o = old.clone();
        default(def("pods"), &mut o);
        o["spec"].as_object_mut().unwrap().remove("serviceAccount");
        o
    });
    assert!(errs.is_empty(), "{errs:?}");
    // Changing the account is still refused.
    let mut other = new.clone();
    other["spec"]["serviceAccountName"] = json!("other");
    pod_defaults::service_account_alias(&mut other["spec"]);
    assert!(!validate_pod_update(&other, &new).is_empty());
}

#[test]
fn deployment_defaults_and_validation() {
    let mut d = json!({"metadata": {"name": "web"}, "spec": {
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}}
    }});
    default(def("deployments"), &mut d);
    assert_eq!(d["spec"]["replicas"], 1);
    assert_eq!(d["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%");
    assert_eq!(d["spec"]["revisionHistoryLimit"], 10);
    assert_eq!(d["spec"]["progressDeadlineSeconds"], 600);
    assert!(validate(def("deployments"), &d).is_empty());
    d["spec"]["template"]["metadata"]["labels"]["app"] = json!("other");
    let errs = validate(def("deployments"), &d);
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].field, "spec.template.metadata.labels");
}

#[test]
fn qos_classes() {
    assert_eq!(qos_class(&json!({"containers": [{"name": "a"}]})), "BestEffort");
    let g = json!({"containers": [{"resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}}}]});
    assert_eq!(qos_class(&g), "Guaranteed");
    let b = json!({"containers": [{"resources": {"requests": {"cpu": "1"}}}]});
    assert_eq!(qos_class(&b), "Burstable");
    let same = json!({"containers": [{"resources": {"limits": {"cpu": "0.5", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "1024Mi"}}}]});
    assert_eq!(qos_class(&same), "Guaranteed");
}

#[test]
fn pods_request_what_they_limit_by_default() {
    let mut pod = json!({"spec": {
        "containers": [
            {"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "100m"}}},
            {"name": "b"}
        ],
        "initContainers": [{"name": "i", "resources": {"limits": {"memory": "64Mi"}}}]
    }});
    default(def("pods"), &mut pod);
    assert_eq!(
        pod["spec"]["containers"][0]["resources"]["requests"],
        json!({"cpu": "100m", "memory": "1Gi"})
    );
    assert_eq!(pod["spec"]["containers"][1]["resources"], json!({}));
    assert_eq!(
        pod["spec"]["initContainers"][0]["resources"]["requests"],
        json!({"memory": "64Mi"})
    );
    // Workload templates are left as written.
    let mut d = json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": "1"}}}]}}}});
    default(def("deployments"), &mut d);
    assert!(d["spec"]["template"]["spec"]["containers"][0]["resources"]
        .get("requests")
        .is_none());
}

#[test]
fn invalid_names_and_labels_are_reported_per_field() {
    let obj = json!({"metadata": {"name": "Bad_Name", "labels": {"ok": "yes", "bad key": "v"}}});
    let errs = validate(def("configmaps"), &obj);
    let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(fields, vec!["metadata.name", "metadata.labels"]);
    assert!(errs[0]
        .message
        .starts_with("Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain"));
}

#[test]
fn quota_rows_show_used_over_hard() {
    let q = json!({"metadata": {"name": "q"},
        "spec": {"hard": {"pods": "2", "limits.cpu": "2", "requests.memory": "1Gi"}},
        "status": {"hard": {"pods": "2", "limits.cpu": "2", "requests.memory": "1Gi"},
                   "used": {"pods": "2", "limits.cpu": "500m"}}});
    let cells = cells(def("resourcequotas"), &q);
    assert_eq!(cells[2], "pods: 2/2, requests.memory: 0/1Gi");
    assert_eq!(cells[3], "limits.cpu: 500m/2");
    assert_eq!(columns(def("resourcequotas")).len(), cells.len());
}

fn messages(errs: &[FieldError]) -> Vec<String> {
    errs.iter().map(ToString::to_string).collect()
}

/// A pod template with `labels` and one container, restarting as `restart`.
fn template(labels: Value, restart: &str) -> Value {
    json!({"metadata": {"labels": labels},
           "spec": {"restartPolicy": restart, "containers": [{"name": "c", "image": "busybox"}]}})
}

#[test]
fn a_job_selects_its_pods_by_a_generated_uid_label() {
    let jobs = def("jobs");
    let mut job = json!({"metadata": {"name": "pi", "uid": "u-1"},
                         "spec": {"template": template(json!({"app": "pi"}), "Never")}});
    default(jobs, &mut job);
    prepare_for_create(jobs, &mut job);
    assert_eq!(
        (
            job["spec"]["completions"].clone(),
            job["spec"]["parallelism"].clone(),
            job["spec"]["backoffLimit"].clone()
        ),
        (json!(1), json!(1), json!(6))
    );
    assert_eq!(job["spec"]["completionMode"], "NonIndexed");
    assert_eq!(job["spec"]["podReplacementPolicy"], "TerminatingOrFailed");
    assert_eq!(
        job["spec"]["selector"],
        json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}})
    );
    let labels = &job["spec"]["template"]["metadata"]["labels"];
    for (k, v) in [
        ("controller-uid", "u-1"),
        ("job-name", "pi"),
        ("batch.kubernetes.io/job-name", "pi"),
        ("app", "pi"),
    ] {
        assert_eq!(labels[k], v, "template label {k}");
    }
    // The Job's own labels came from the template before the generated ones were added.
    assert_eq!(job["metadata"]["labels"], json!({"app": "pi"}));
    assert_eq!(job["status"], json!({}));
    assert!(validate(jobs, &job).is_empty(), "{:?}", validate(jobs, &job));

    // Pods that restart always are refused; a foreign selector is not the generated one.
    let mut bad = json!({"metadata": {"name": "b", "uid": "u-2"},
                         "spec": {"selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "other"}},
                                  "template": template(json!({}), "Always")}});
    default(jobs, &mut bad);
    prepare_for_create(jobs, &mut bad);
    let errs = messages(&validate(jobs, &bad));
    assert!(
        errs.contains(
            &r#"spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never""#
                .to_owned()
        ),
        "{errs:?}"
    );
    assert!(
        errs.iter().any(|e| e.starts_with("spec.selector: Invalid value:")
            && e.ends_with("`selector` not auto-generated")),
        "{errs:?}"
    );

    // Indexed Jobs need completions; the template is fixed once the Job runs.
    let mut indexed = job.clone();
    indexed["spec"]["completionMode"] = json!("Indexed");
    indexed["spec"].as_object_mut().unwrap().remove("completions");
    assert_eq!(
        messages(&validate(jobs, &indexed)),
        ["spec.completions: Required value: when completion mode is Indexed"]
    );
    let mut changed = job.clone();
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx");
    assert_eq!(
        messages(&validate_update(jobs, &changed, &job)),
        ["spec.template: Invalid value: core.PodTemplateSpec{...}: field is immutable"]
    );
    changed["spec"]["parallelism"] = json!(3);
    changed["spec"]["template"] = job["spec"]["template"].clone();
    assert!(validate_update(jobs, &changed, &job).is_empty());
}

#[test]
fn job_rows_show_status_completions_and_duration() {
    let job = json!({"metadata": {"name": "pi", "creationTimestamp": "2020-01-01T00:00:00Z"},
                     "spec": {"completions": 3, "parallelism": 1, "template": template(json!({}), "Never")},
                     "status": {"succeeded": 3, "startTime": "2020-01-01T00:00:00Z", "completionTime": "2020-01-01T00:00:42Z",
                                "conditions": [{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}]}});
    let row = cells(def("jobs"), &job);
    assert_eq!(
        (&row[1], &row[2], &row[3]),
        (&json!("Complete"), &json!("3/3"), &json!("42s"))
    );
    let mut running = job.clone();
    running["status"] = json!({"succeeded": 1});
    running["spec"] = json!({"parallelism": 4});
    let row = cells(def("jobs"), &running);
    assert_eq!(
        (&row[1], &row[2], &row[3]),
        (&json!("Running"), &json!("1/1 of 4"), &json!(""))
    );
}

#[test]
fn cron_jobs_check_their_schedule_and_time_zone() {
    let cj = def("cronjobs");
    let mut c = json!({"metadata": {"name": "tick"},
                       "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": template(json!({}), "OnFailure")}}}});
    default(cj, &mut c);
    assert_eq!(
        (
            c["spec"]["concurrencyPolicy"].clone(),
            c["spec"]["successfulJobsHistoryLimit"].clone(),
            c["spec"]["failedJobsHistoryLimit"].clone()
        ),
        (json!("Allow"), json!(3), json!(1))
    );
    assert!(validate(cj, &c).is_empty(), "{:?}", validate(cj, &c));
    c["spec"]["schedule"] = json!("every minute");
    c["spec"]["timeZone"] = json!("Mars/Olympus");
    assert_eq!(
        messages(&validate(cj, &c)),
        [
            r#"spec.schedule: Invalid value: "every minute": expected exactly 5 fields, found 2: [every minute]"#,
            r#"spec.timeZone: Invalid value: "Mars/Olympus": unknown time zone Mars/Olympus"#,
        ]
    );
    c["spec"]["schedule"] = json!("@daily");
    c["spec"]["timeZone"] = json!("Europe/Berlin");
    assert!(validate(cj, &c).is_empty());
    let row = cells(cj, &c);
    assert_eq!(
        (&row[1], &row[2], &row[3]),
        (&json!("@daily"), &json!("Europe/Berlin"), &json!("False"))
    );
}

#[test]
fn stateful_sets_default_and_keep_their_identity_fields() {
    let sts = def("statefulsets");
    let mut s = json!({"metadata": {"name": "web"},
                       "spec": {"serviceName": "web", "selector": {"matchLabels": {"app": "web"}},
                                "template": template(json!({"app": "web"}), "Always"),
                                "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}]}});
    default(sts, &mut s);
    let spec = &s["spec"];
    assert_eq!(spec["podManagementPolicy"], "OrderedReady");
    assert_eq!(
        spec["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
    );
    assert_eq!(
        spec["persistentVolumeClaimRetentionPolicy"],
        json!({"whenDeleted": "Retain", "whenScaled": "Retain"})
    );
    assert_eq!(spec["volumeClaimTemplates"][0]["status"]["phase"], "Pending");
    assert!(validate(sts, &s).is_empty(), "{:?}", validate(sts, &s));
    let mut scaled = s.clone();
    scaled["spec"]["replicas"] = json!(5);
    assert!(sts.strategy.validate_main_update(&scaled, &s).is_empty());
    scaled["spec"]["serviceName"] = json!("other");
    assert_eq!(
        messages(&sts.strategy.validate_main_update(&scaled, &s)),
        ["spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"]
    );
    s["spec"]["podManagementPolicy"] = json!("Random");
    assert_eq!(
        messages(&validate(sts, &s)),
        [r#"spec.podManagementPolicy: Invalid value: "Random": must be 'OrderedReady' or 'Parallel'"#]
    );
    s["spec"]["podManagementPolicy"] = json!("Parallel");
    // maxUnavailable: validated as upstream, and dropped from new objects while the
    // MaxUnavailableStatefulSet gate is off (its default), unless the old object has it.
    for (v, message) in [
        (json!(0), "spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: intstr.IntOrString{Type:0, IntVal:0, StrVal:\"\"}: cannot be 0"),
        (json!("150%"), "spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:\"150%\"}: must not be greater than 100%"),
    ] {
        let mut bad = s.clone();
        bad["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] = v;
        assert_eq!(messages(&validate(sts, &bad)), [message]);
    }
    let mut new = s.clone();
    new["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] = json!(2);
    let mut created = new.clone();
    prepare_for_create(sts, &mut created);
    assert_eq!(
        created["spec"]["updateStrategy"]["rollingUpdate"],
        json!({"partition": 0})
    );
    let mut updated = new.clone();
    sts.strategy.prepare_for_update(&mut updated, &s).unwrap();
    assert_eq!(
        updated["spec"]["updateStrategy"]["rollingUpdate"],
        json!({"partition": 0})
    );
    let mut kept = new.clone();
    sts.strategy.prepare_for_update(&mut kept, &new).unwrap();
    assert_eq!(
        kept["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"],
        2
    );
}

#[test]
fn daemon_sets_roll_one_node_at_a_time_by_default() {
    let ds = def("daemonsets");
    let mut d = json!({"metadata": {"name": "agent"},
                       "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": template(json!({"app": "agent"}), "Always")}});
    default(ds, &mut d);
    prepare_for_create(ds, &mut d);
    assert_eq!(
        d["spec"]["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
    );
    assert_eq!(
        d["metadata"]["annotations"]["deprecated.daemonset.template.generation"],
        "1"
    );
    assert!(validate(ds, &d).is_empty());
    let mut updated = d.clone();
    updated["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx");
    ds.strategy.prepare_for_update(&mut updated, &d).unwrap();
    assert_eq!(
        updated["metadata"]["annotations"]["deprecated.daemonset.template.generation"],
        "2"
    );
    d["spec"]["updateStrategy"]["rollingUpdate"] = json!({"maxUnavailable": 1, "maxSurge": 1});
    assert_eq!(
        messages(&validate(ds, &d)),
        ["spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: intstr.IntOrString{Type:0, IntVal:1, StrVal:\"\"}: may not be set when maxUnavailable is non-zero"]
    );
    let mut other = d.clone();
    other["spec"]["selector"] = json!({"matchLabels": {"app": "x"}});
    assert!(messages(&validate_update(ds, &other, &d))[0].ends_with("field is immutable"));
}

#[test]
fn replication_controllers_select_their_template_labels_by_default() {
    let rc = def("replicationcontrollers");
    let mut r =
        json!({"metadata": {"name": "old"}, "spec": {"template": template(json!({"app": "old"}), "Always")}});
    default(rc, &mut r);
    assert_eq!(r["spec"]["selector"], json!({"app": "old"}));
    assert_eq!(r["metadata"]["labels"], json!({"app": "old"}));
    assert_eq!(r["spec"]["replicas"], 1);
    assert!(validate(rc, &r).is_empty());
    r["spec"]["selector"] = json!({"app": "new"});
    assert_eq!(
        messages(&validate(rc, &r)),
        [
            r#"spec.template.metadata.labels: Invalid value: "map[app:old]": `selector` does not match template `labels`"#
        ]
    );
}

#[test]
fn disruption_budgets_take_one_of_min_available_and_max_unavailable() {
    let pdb = def("poddisruptionbudgets");
    let mut p = json!({"metadata": {"name": "b"}, "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "x"}}}});
    prepare_for_create(pdb, &mut p);
    assert_eq!(p["status"]["disruptionsAllowed"], 0);
    assert!(validate(pdb, &p).is_empty());
    assert_eq!(cells(pdb, &p)[1..4], [json!("2"), json!("N/A"), json!(0)]);
    p["spec"]["maxUnavailable"] = json!("150%");
    assert_eq!(
        messages(&validate(pdb, &p)),
        [
            "spec: Invalid value: policy.PodDisruptionBudgetSpec{...}: minAvailable and maxUnavailable cannot be both set",
            "spec.maxUnavailable: Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:\"150%\"}: must not be greater than 100%",
        ]
    );
}

#[test]
fn job_defaults_add_no_fields_that_were_not_there() {
    let mut job = json!({"metadata": {"name": "j"}, "spec": {"template": template(json!({}), "OnFailure")}});
    default(def("jobs"), &mut job);
    assert!(job["spec"].get("podFailurePolicy").is_none(), "{job}");
    let mut cj = json!({"metadata": {"name": "c"}, "spec": {"schedule": "@daily"}});
    default(def("cronjobs"), &mut cj);
    assert!(cj["spec"].get("jobTemplate").is_none(), "{cj}");
}

/// rbac/v1's defaults, as Go clients rely on: a roleRef with an empty apiGroup (what
/// `rbacv1.RoleRef{Kind: "Role", Name: …}` sends) is in the RBAC group; User and Group subjects
/// are too, ServiceAccounts stay in the core group.
#[test]
fn role_bindings_default_their_api_groups() {
    let mut rb = json!({"metadata": {"name": "r", "namespace": "ns"},
        "roleRef": {"apiGroup": "", "kind": "Role", "name": "reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "ns"},
                     {"kind": "User", "name": "alice"}, {"kind": "Group", "name": "devs", "apiGroup": ""}]});
    default(def("rolebindings"), &mut rb);
    assert_eq!(rb["roleRef"]["apiGroup"], "rbac.authorization.k8s.io");
    assert!(rb["subjects"][0].get("apiGroup").is_none(), "{rb}");
    assert_eq!(rb["subjects"][1]["apiGroup"], "rbac.authorization.k8s.io");
    assert_eq!(rb["subjects"][2]["apiGroup"], "rbac.authorization.k8s.io");
    assert!(validate(def("rolebindings"), &rb).is_empty());
    let mut crb = json!({"metadata": {"name": "c"}, "roleRef": {"kind": "ClusterRole", "name": "view"}});
    default(def("clusterrolebindings"), &mut crb);
    assert_eq!(crb["roleRef"]["apiGroup"], "rbac.authorization.k8s.io");
}

/// A Service port's targetPort of 0 or "" is unset (Go's zero IntOrString, which client-go
/// sends): it defaults to the port, as upstream's defaulting does.
#[test]
fn a_zero_target_port_defaults_to_the_port() {
    let mut svc = json!({"metadata": {"name": "s", "namespace": "ns"}, "spec": {
        "clusterIP": "None",
        "ports": [{"name": "a", "port": 80, "targetPort": 0}, {"name": "b", "port": 81, "targetPort": ""}]}});
    default(def("services"), &mut svc);
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], 80);
    assert_eq!(svc["spec"]["ports"][1]["targetPort"], 81);
}

/// Field selectors as upstream converts them: events.k8s.io's own names, whichever form the
/// event is read in; a CertificateSigningRequest's signer.
#[test]
fn field_selectors_of_events_and_certificate_requests() {
    let ev = def_of("events.k8s.io", "events");
    let served = json!({"metadata": {"name": "e", "namespace": "ns"}, "reason": "Test",
        "reportingController": "test-controller", "regarding": {"kind": "Pod", "name": "p"}});
    let core = json!({"metadata": {"name": "e", "namespace": "ns"}, "reason": "Test",
        "reportingComponent": "test-controller", "involvedObject": {"kind": "Pod", "name": "p"}});
    for obj in [served, core] {
        let f = strategy::fields(ev, &obj);
        assert_eq!(f["reportingController"], "test-controller", "{obj}");
        assert_eq!(f["regarding.kind"], "Pod", "{obj}");
        assert!(!f.contains_key("involvedObject.kind"));
    }
    let csr = def_of("certificates.k8s.io", "certificatesigningrequests");
    let f = strategy::fields(
        csr,
        &json!({"metadata": {"name": "c"}, "spec": {"signerName": "example.com/x"}}),
    );
    assert_eq!(f["spec.signerName"], "example.com/x");
}

fn def_of(group: &str, plural: &str) -> &'static Resource {
    crate::registry::catalogue::builtin(group, "v1", plural).expect("in the catalogue")
}

#[test]
fn service_names_are_dns_1035_labels() {
    let svc = |name: &str| {
        json!({"metadata": {"name": name, "namespace": "default"},
               "spec": {"ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}], "type": "ClusterIP",
                        "sessionAffinity": "None", "ipFamilyPolicy": "SingleStack"}})
    };
    let name_errors = |name: &str| -> Vec<String> {
        messages(&validate(def("services"), &svc(name)))
            .into_iter()
            .filter(|m| m.starts_with("metadata.name"))
            .collect()
    };
    assert_eq!(name_errors("web-1"), Vec::<String>::new());
    // A digit first is a DNS-1123 label but not a DNS-1035 one, as upstream refuses it.
    assert_eq!(
        name_errors("1web"),
        ["metadata.name: Invalid value: \"1web\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"]
    );
}
