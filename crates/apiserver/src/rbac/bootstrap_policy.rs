//! The default roles and bindings the API server creates and reconciles at start-up, with the
//! permissions upstream's bootstrap policy gives them.
//!
//! This is Kubernetes v1.33's default RBAC policy under its default feature gates. Roles and rules that
//! only exist behind gates off by default in 1.33 are left out: dynamic resource allocation's,
//! ClusterTrustBundle discovery, VolumeAttributesClass protection, storage version migration and
//! garbage collection, the kubelet's service-account tokens for credential providers. Those whose gates
//! are on are in: MultiCIDRServiceAllocator (GA) gives the service-cidrs-controller and kube-proxy's
//! servicecidrs rule, SELinuxChangePolicy (beta) the selinux-warning-controller, KubeletFineGrainedAuthz
//! (beta) the kubelet API admin's nodes/pods, nodes/healthz and nodes/configz.
//!
//! Verbs, resources, URLs and resource names are written as space-separated words.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::{
    AggregationRule, ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

/// Everything the bootstrap policy holds.
#[derive(Default)]
pub struct BootstrapPolicy {
    pub cluster_roles: Vec<ClusterRole>,
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
    /// Roles in kube-system and kube-public.
    pub roles: Vec<Role>,
    pub role_bindings: Vec<RoleBinding>,
}

/// The label every bootstrap object carries.
pub const BOOTSTRAPPING_LABEL: (&str, &str) = ("kubernetes.io/bootstrapping", "rbac-defaults");
/// The annotation that lets reconciliation at start-up update an object (an admin sets it to "false"
/// to keep their own changes).
pub const AUTOUPDATE_ANNOTATION: (&str, &str) = ("rbac.authorization.kubernetes.io/autoupdate", "true");
/// Prefix of the aggregation labels: `…aggregate-to-admin`, `…-edit`, `…-view`.
const AGGREGATE_TO: &str = "rbac.authorization.k8s.io/aggregate-to-";
/// Every controller's role is this prefix plus the name of its service account in kube-system.
const CONTROLLER_PREFIX: &str = "system:controller:";
const KUBE_SYSTEM: &str = "kube-system";
const KUBE_PUBLIC: &str = "kube-public";

// API groups.
const CORE: &str = "";
const ADMISSION: &str = "admissionregistration.k8s.io";
const APPS: &str = "apps";
const AUTHN: &str = "authentication.k8s.io";
const AUTHZ: &str = "authorization.k8s.io";
const AUTOSCALING: &str = "autoscaling";
const BATCH: &str = "batch";
const CERTS: &str = "certificates.k8s.io";
const COORDINATION: &str = "coordination.k8s.io";
const DISCOVERY: &str = "discovery.k8s.io";
const EVENTS: &str = "events.k8s.io";
const EXTENSIONS: &str = "extensions";
const NETWORKING: &str = "networking.k8s.io";
const NODE: &str = "node.k8s.io";
const POLICY: &str = "policy";
const RBAC: &str = "rbac.authorization.k8s.io";
const STORAGE: &str = "storage.k8s.io";
const ANY: &str = "*";

// Verb sets.
const READ: &str = "get list watch";
const WRITE: &str = "create update patch delete deletecollection";
const READ_WRITE: &str = "get list watch create update patch delete deletecollection";
const READ_UPDATE: &str = "get list watch update patch";

fn words(list: &str) -> Vec<String> {
    list.split_whitespace().map(str::to_string).collect()
}

/// A rule over `resources` in the API `groups`.
fn rule(verbs: &str, groups: &[&str], resources: &str) -> PolicyRule {
    PolicyRule {
        verbs: words(verbs),
        api_groups: Some(groups.iter().map(|g| g.to_string()).collect()),
        resources: Some(words(resources)),
        ..Default::default()
    }
}

/// A rule over non-resource URLs (`/healthz`, `/api/*`…).
fn non_resource(verbs: &str, urls: &str) -> PolicyRule {
    PolicyRule {
        verbs: words(verbs),
        non_resource_urls: Some(words(urls)),
        ..Default::default()
    }
}

/// Narrows a rule to objects of these names.
trait Names {
    fn names(self, names: &str) -> Self;
}

impl Names for PolicyRule {
    fn names(mut self, names: &str) -> Self {
        self.resource_names = Some(words(names));
        self
    }
}

/// Recording events, through either events API.
fn events() -> PolicyRule {
    rule("create update patch", &[CORE, EVENTS], "events")
}

fn meta(name: &str, namespace: Option<&str>, label: Option<String>) -> ObjectMeta {
    let mut labels = BTreeMap::from([(
        BOOTSTRAPPING_LABEL.0.to_string(),
        BOOTSTRAPPING_LABEL.1.to_string(),
    )]);
    labels.extend(label.map(|l| (l, "true".to_string())));
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: namespace.map(str::to_string),
        labels: Some(labels),
        annotations: Some(BTreeMap::from([(
            AUTOUPDATE_ANNOTATION.0.to_string(),
            AUTOUPDATE_ANNOTATION.1.to_string(),
        )])),
        ..Default::default()
    }
}

fn cluster_role(name: &str, rules: Vec<PolicyRule>) -> ClusterRole {
    ClusterRole {
        metadata: meta(name, None, None),
        rules: Some(rules),
        aggregation_rule: None,
    }
}

/// A role whose rules aggregate into the `into` role (admin, edit or view).
fn aggregates_to(into: &str, name: &str, rules: Vec<PolicyRule>) -> ClusterRole {
    let label = Some(format!("{AGGREGATE_TO}{into}"));
    ClusterRole {
        metadata: meta(name, None, label),
        rules: Some(rules),
        aggregation_rule: None,
    }
}

/// admin, edit or view: no rules of its own, it gathers those of every role labelled
/// `aggregate-to-<name>`, and is itself aggregated into `into` (view into edit, edit into admin).
fn aggregated(name: &str, into: Option<&str>) -> ClusterRole {
    let selector = LabelSelector {
        match_labels: Some(BTreeMap::from([(
            format!("{AGGREGATE_TO}{name}"),
            "true".to_string(),
        )])),
        ..Default::default()
    };
    ClusterRole {
        metadata: meta(name, None, into.map(|into| format!("{AGGREGATE_TO}{into}"))),
        rules: None,
        aggregation_rule: Some(AggregationRule {
            cluster_role_selectors: Some(vec![selector]),
        }),
    }
}

fn subject(kind: &str, name: &str) -> Subject {
    Subject {
        api_group: Some(RBAC.to_string()),
        kind: kind.to_string(),
        name: name.to_string(),
        namespace: None,
    }
}

fn service_account(namespace: &str, name: &str) -> Subject {
    Subject {
        api_group: None,
        kind: "ServiceAccount".to_string(),
        name: name.to_string(),
        namespace: Some(namespace.to_string()),
    }
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef {
        api_group: RBAC.to_string(),
        kind: kind.to_string(),
        name: name.to_string(),
    }
}

/// A ClusterRoleBinding named after the ClusterRole it grants.
fn bind(role: &str, subjects: Vec<Subject>) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: meta(role, None, None),
        role_ref: role_ref("ClusterRole", role),
        subjects: (!subjects.is_empty()).then_some(subjects),
    }
}

fn bind_group(role: &str, groups: &str) -> ClusterRoleBinding {
    bind(
        role,
        groups.split_whitespace().map(|g| subject("Group", g)).collect(),
    )
}

fn bind_user(role: &str, user: &str) -> ClusterRoleBinding {
    bind(role, vec![subject("User", user)])
}

fn bind_sa(role: &str, namespace: &str, sa: &str) -> ClusterRoleBinding {
    bind(role, vec![service_account(namespace, sa)])
}

fn role(namespace: &str, name: &str, rules: Vec<PolicyRule>) -> Role {
    Role {
        metadata: meta(name, Some(namespace), None),
        rules: Some(rules),
    }
}

/// A RoleBinding named after the Role it grants in the same namespace.
fn role_binding(namespace: &str, role: &str, subjects: Vec<Subject>) -> RoleBinding {
    RoleBinding {
        metadata: meta(role, Some(namespace), None),
        role_ref: role_ref("Role", role),
        subjects: Some(subjects),
    }
}

/// The default policy.
pub fn policy() -> BootstrapPolicy {
    let mut cluster_roles = cluster_roles();
    let mut cluster_role_bindings = cluster_role_bindings();
    for (sa, rules) in controller_roles() {
        let name = format!("{CONTROLLER_PREFIX}{sa}");
        cluster_roles.push(cluster_role(&name, rules));
        cluster_role_bindings.push(bind_sa(&name, KUBE_SYSTEM, sa));
    }
    let (roles, role_bindings) = namespaced();
    BootstrapPolicy {
        cluster_roles,
        cluster_role_bindings,
        roles,
        role_bindings,
    }
}

/// What a kubelet may do (the Node authorizer and the NodeRestriction admission plugin narrow most of
/// it to the node's own objects).
fn node_rules() -> Vec<PolicyRule> {
    vec![
        rule("create", &[AUTHN], "tokenreviews"),
        rule(
            "create",
            &[AUTHZ],
            "subjectaccessreviews localsubjectaccessreviews",
        ),
        rule(READ, &[CORE], "services"),
        rule("create get list watch", &[CORE], "nodes"),
        rule("update patch", &[CORE], "nodes/status"),
        rule("update patch", &[CORE], "nodes"),
        rule("create update patch", &[CORE], "events"),
        rule(READ, &[CORE], "pods"),
        rule("create delete", &[CORE], "pods"),
        rule("update patch", &[CORE], "pods/status"),
        rule("create", &[CORE], "pods/eviction"),
        rule(READ, &[CORE], "secrets configmaps"),
        rule("get", &[CORE], "persistentvolumeclaims persistentvolumes"),
        rule("get", &[CORE], "endpoints"),
        rule("create get list watch", &[CERTS], "certificatesigningrequests"),
        rule("get create update patch delete", &[COORDINATION], "leases"),
        rule("get", &[STORAGE], "volumeattachments"),
        rule("create", &[CORE], "serviceaccounts/token"),
        rule("get update patch", &[CORE], "persistentvolumeclaims/status"),
        rule(READ, &[STORAGE], "csidrivers"),
        rule("get create update patch delete", &[STORAGE], "csinodes"),
        rule(READ, &[NODE], "runtimeclasses"),
    ]
}

fn cluster_roles() -> Vec<ClusterRole> {
    let approver = |signer: &str| {
        let rules = vec![rule("approve", &[CERTS], "signers").names(&format!("kubernetes.io/{signer}"))];
        cluster_role(&format!("system:certificates.k8s.io:{signer}-approver"), rules)
    };
    vec![
        cluster_role("cluster-admin", vec![rule("*", &[ANY], "*"), non_resource("*", "*")]),
        cluster_role(
            "system:discovery",
            vec![non_resource(
                "get",
                "/livez /readyz /healthz /version /version/ /openapi /openapi/* /api /api/* /apis /apis/*",
            )],
        ),
        cluster_role(
            "system:monitoring",
            vec![non_resource("get", "/metrics /metrics/slis /livez /readyz /healthz /livez/* /readyz/* /healthz/*")],
        ),
        cluster_role(
            "system:basic-user",
            vec![
                rule("create", &[AUTHZ], "selfsubjectaccessreviews selfsubjectrulesreviews"),
                rule("create", &[AUTHN], "selfsubjectreviews"),
            ],
        ),
        cluster_role(
            "system:public-info-viewer",
            vec![non_resource("get", "/livez /readyz /healthz /version /version/")],
        ),
        aggregated("admin", None),
        aggregated("edit", Some("admin")),
        aggregated("view", Some("edit")),
        aggregates_to(
            "admin",
            "system:aggregate-to-admin",
            vec![
                rule("create", &[AUTHZ], "localsubjectaccessreviews"),
                rule(READ_WRITE, &[RBAC], "roles rolebindings"),
            ],
        ),
        aggregates_to(
            "edit",
            "system:aggregate-to-edit",
            vec![
                rule(READ, &[CORE], "pods/attach pods/proxy pods/exec pods/portforward secrets services/proxy"),
                rule("impersonate", &[CORE], "serviceaccounts"),
                rule(WRITE, &[CORE], "pods pods/attach pods/proxy pods/exec pods/portforward"),
                rule("create", &[CORE], "pods/eviction"),
                rule(
                    WRITE,
                    &[CORE],
                    "replicationcontrollers replicationcontrollers/scale serviceaccounts services \
                     services/proxy persistentvolumeclaims configmaps secrets events",
                ),
                rule("create", &[CORE], "serviceaccounts/token"),
                rule(
                    WRITE,
                    &[APPS],
                    "statefulsets statefulsets/scale daemonsets deployments deployments/scale \
                     deployments/rollback replicasets replicasets/scale",
                ),
                rule(WRITE, &[AUTOSCALING], "horizontalpodautoscalers"),
                rule(WRITE, &[BATCH], "jobs cronjobs"),
                rule(
                    WRITE,
                    &[EXTENSIONS],
                    "daemonsets deployments deployments/scale deployments/rollback ingresses replicasets \
                     replicasets/scale replicationcontrollers/scale networkpolicies",
                ),
                rule(WRITE, &[POLICY], "poddisruptionbudgets"),
                rule(WRITE, &[NETWORKING], "networkpolicies ingresses"),
                rule(READ_WRITE, &[COORDINATION], "leases"),
            ],
        ),
        aggregates_to(
            "view",
            "system:aggregate-to-view",
            vec![
                rule(
                    READ,
                    &[CORE],
                    "pods replicationcontrollers replicationcontrollers/scale serviceaccounts services \
                     services/status endpoints persistentvolumeclaims persistentvolumeclaims/status configmaps",
                ),
                rule(
                    READ,
                    &[CORE],
                    "limitranges resourcequotas bindings events pods/status resourcequotas/status \
                     namespaces/status replicationcontrollers/status pods/log",
                ),
                rule(READ, &[CORE], "namespaces"),
                rule(READ, &[DISCOVERY], "endpointslices"),
                rule(
                    READ,
                    &[APPS],
                    "controllerrevisions statefulsets statefulsets/status statefulsets/scale daemonsets \
                     daemonsets/status deployments deployments/status deployments/scale replicasets \
                     replicasets/status replicasets/scale",
                ),
                rule(READ, &[AUTOSCALING], "horizontalpodautoscalers horizontalpodautoscalers/status"),
                rule(READ, &[BATCH], "jobs cronjobs cronjobs/status jobs/status"),
                rule(
                    READ,
                    &[EXTENSIONS],
                    "daemonsets daemonsets/status deployments deployments/scale deployments/status ingresses \
                     ingresses/status replicasets replicasets/scale replicasets/status \
                     replicationcontrollers/scale networkpolicies",
                ),
                rule(READ, &[POLICY], "poddisruptionbudgets poddisruptionbudgets/status"),
                rule(READ, &[NETWORKING], "networkpolicies ingresses ingresses/status"),
            ],
        ),
        // metrics-server's reader role (k3s ships it): resource metrics for whoever can view.
        aggregates_to(
            "view",
            "system:aggregated-metrics-reader",
            vec![rule("get list watch", &["metrics.k8s.io"], "pods nodes")],
        ),
        cluster_role(
            "system:heapster",
            vec![rule(READ, &[CORE], "events pods nodes namespaces"), rule(READ, &[EXTENSIONS], "deployments")],
        ),
        cluster_role("system:node", node_rules()),
        cluster_role(
            "system:node-problem-detector",
            vec![rule("get", &[CORE], "nodes"), rule("patch", &[CORE], "nodes/status"), events()],
        ),
        cluster_role(
            "system:node-bootstrapper",
            vec![rule("create get list watch", &[CERTS], "certificatesigningrequests")],
        ),
        cluster_role(
            "system:auth-delegator",
            vec![rule("create", &[AUTHN], "tokenreviews"), rule("create", &[AUTHZ], "subjectaccessreviews")],
        ),
        cluster_role("system:kube-aggregator", vec![rule(READ, &[CORE], "services endpoints")]),
        cluster_role(
            "system:kube-controller-manager",
            vec![
                events(),
                rule("create", &[COORDINATION], "leases"),
                rule("get update", &[COORDINATION], "leases").names("kube-controller-manager"),
                rule("create", &[CORE], "secrets serviceaccounts"),
                rule("delete", &[CORE], "secrets"),
                rule("get", &[CORE], "namespaces secrets serviceaccounts configmaps"),
                rule("update", &[CORE], "secrets serviceaccounts"),
                rule("create", &[AUTHN], "tokenreviews"),
                rule("create", &[AUTHZ], "subjectaccessreviews"),
                rule("list watch", &[ANY], "*"),
                rule("create", &[CORE], "serviceaccounts/token"),
            ],
        ),
        cluster_role("system:kube-dns", vec![rule("list watch", &[CORE], "endpoints services")]),
        cluster_role(
            "system:persistent-volume-provisioner",
            vec![
                rule("get list watch create delete", &[CORE], "persistentvolumes"),
                rule("get list watch update", &[CORE], "persistentvolumeclaims"),
                rule(READ, &[STORAGE], "storageclasses"),
                rule("watch", &[CORE], "events"),
                events(),
            ],
        ),
        cluster_role(
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            vec![rule("create", &[CERTS], "certificatesigningrequests/nodeclient")],
        ),
        cluster_role(
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            vec![rule("create", &[CERTS], "certificatesigningrequests/selfnodeclient")],
        ),
        cluster_role(
            "system:volume-scheduler",
            vec![
                rule(READ_UPDATE, &[CORE], "persistentvolumes"),
                rule(READ, &[STORAGE], "storageclasses"),
                rule(READ_UPDATE, &[CORE], "persistentvolumeclaims"),
            ],
        ),
        approver("legacy-unknown"),
        approver("kubelet-serving"),
        approver("kube-apiserver-client"),
        approver("kube-apiserver-client-kubelet"),
        cluster_role(
            "system:service-account-issuer-discovery",
            vec![non_resource(
                "get",
                "/.well-known/openid-configuration /.well-known/openid-configuration/ /openid/v1/jwks \
                 /openid/v1/jwks/",
            )],
        ),
        cluster_role(
            "system:kubelet-api-admin",
            vec![
                rule(READ, &[CORE], "nodes"),
                rule("proxy", &[CORE], "nodes"),
                rule("*", &[CORE], "nodes/proxy nodes/metrics nodes/stats nodes/log"),
                // KubeletFineGrainedAuthz (beta, on by default in 1.33).
                rule("*", &[CORE], "nodes/pods nodes/healthz nodes/configz"),
            ],
        ),
        cluster_role(
            "system:node-proxier",
            vec![
                rule("list watch", &[CORE], "services endpoints"),
                rule(READ, &[CORE], "nodes"),
                events(),
                // MultiCIDRServiceAllocator (GA in 1.33).
                rule("list watch", &[NETWORKING], "servicecidrs"),
                rule("list watch", &[DISCOVERY], "endpointslices"),
            ],
        ),
        cluster_role(
            "system:kube-scheduler",
            vec![
                events(),
                rule("create", &[COORDINATION], "leases"),
                rule("get update list watch", &[COORDINATION], "leases").names("kube-scheduler"),
                rule(READ_WRITE, &[COORDINATION], "leasecandidates"),
                rule(READ, &[CORE], "nodes"),
                rule("get list watch delete", &[CORE], "pods"),
                rule("create", &[CORE], "pods/binding bindings"),
                rule("patch update", &[CORE], "pods/status"),
                rule(READ, &[CORE], "services replicationcontrollers"),
                rule(READ, &[APPS, EXTENSIONS], "replicasets"),
                rule(READ, &[APPS], "statefulsets"),
                rule(READ, &[POLICY], "poddisruptionbudgets"),
                rule(READ, &[CORE], "persistentvolumeclaims persistentvolumes"),
                rule("create", &[AUTHN], "tokenreviews"),
                rule("create", &[AUTHZ], "subjectaccessreviews"),
                rule(READ, &[STORAGE], "csinodes"),
                rule(READ, &[STORAGE], "volumeattachments"),
                rule(READ, &[CORE], "namespaces"),
                rule(READ, &[STORAGE], "csidrivers"),
                rule(READ, &[STORAGE], "csistoragecapacities"),
            ],
        ),
    ]
}

fn cluster_role_bindings() -> Vec<ClusterRoleBinding> {
    vec![
        bind_group("cluster-admin", "system:masters"),
        bind_group("system:monitoring", "system:monitoring"),
        bind_group("system:discovery", "system:authenticated"),
        bind_group("system:basic-user", "system:authenticated"),
        bind_group(
            "system:public-info-viewer",
            "system:authenticated system:unauthenticated",
        ),
        bind_user("system:node-proxier", "system:kube-proxy"),
        bind_user("system:kube-controller-manager", "system:kube-controller-manager"),
        bind_sa("system:kube-dns", KUBE_SYSTEM, "kube-dns"),
        bind_user("system:kube-scheduler", "system:kube-scheduler"),
        bind_user("system:volume-scheduler", "system:kube-scheduler"),
        // Kept with no subjects, as upstream does since the Node authorizer replaced the binding to the
        // system:nodes group: reconciliation then removes that subject from clusters that still have it.
        bind("system:node", vec![]),
        bind_group(
            "system:service-account-issuer-discovery",
            "system:serviceaccounts",
        ),
    ]
}

/// The controllers of kube-controller-manager that run with their own service account in kube-system,
/// and what each may do; the ClusterRole is `system:controller:<name>`, bound to that service account.
fn controller_roles() -> Vec<(&'static str, Vec<PolicyRule>)> {
    let pvs = "persistentvolumes";
    let pvcs = "persistentvolumeclaims";
    vec![
        (
            "attachdetach-controller",
            vec![
                rule("list watch", &[CORE], "persistentvolumes persistentvolumeclaims"),
                rule(READ, &[CORE], "nodes"),
                rule("patch update", &[CORE], "nodes/status"),
                rule("list watch", &[CORE], "pods"),
                events(),
                rule("get create delete list watch", &[STORAGE], "volumeattachments"),
                rule(READ, &[STORAGE], "csidrivers"),
                rule(READ, &[STORAGE], "csinodes"),
            ],
        ),
        (
            "clusterrole-aggregation-controller",
            vec![rule(
                "escalate get list watch update patch",
                &[RBAC],
                "clusterroles",
            )],
        ),
        (
            "cronjob-controller",
            vec![
                rule("get list watch update", &[BATCH], "cronjobs"),
                rule("get list watch create update delete patch", &[BATCH], "jobs"),
                rule("update", &[BATCH], "cronjobs/status"),
                rule("update", &[BATCH], "cronjobs/finalizers"),
                rule("list watch delete", &[CORE], "pods"),
                events(),
            ],
        ),
        (
            "daemon-set-controller",
            vec![
                rule(READ, &[EXTENSIONS, APPS], "daemonsets"),
                rule("update", &[EXTENSIONS, APPS], "daemonsets/status"),
                rule("update", &[EXTENSIONS, APPS], "daemonsets/finalizers"),
                rule("list watch", &[CORE], "nodes"),
                rule("list watch create delete patch", &[CORE], "pods"),
                rule("create", &[CORE], "pods/binding"),
                rule(
                    "get list watch create delete update patch",
                    &[APPS],
                    "controllerrevisions",
                ),
                events(),
            ],
        ),
        (
            "deployment-controller",
            vec![
                rule("get list watch update", &[EXTENSIONS, APPS], "deployments"),
                rule("update", &[EXTENSIONS, APPS], "deployments/status"),
                rule("update", &[EXTENSIONS, APPS], "deployments/finalizers"),
                rule(
                    "get list watch create update patch delete",
                    &[APPS, EXTENSIONS],
                    "replicasets",
                ),
                rule("get list watch update", &[CORE], "pods"),
                events(),
            ],
        ),
        (
            "disruption-controller",
            vec![
                rule(READ, &[EXTENSIONS, APPS], "deployments"),
                rule(READ, &[APPS, EXTENSIONS], "replicasets"),
                rule(READ, &[CORE], "replicationcontrollers"),
                rule(READ, &[POLICY], "poddisruptionbudgets"),
                rule(READ, &[APPS], "statefulsets"),
                rule("update", &[POLICY], "poddisruptionbudgets/status"),
                rule("patch update", &[CORE], "pods/status"),
                rule("get", &[ANY], "*/scale"),
                events(),
            ],
        ),
        (
            "endpoint-controller",
            vec![
                rule(READ, &[CORE], "services pods"),
                rule("get list watch create update delete", &[CORE], "endpoints"),
                rule("create", &[CORE], "endpoints/restricted"),
                events(),
            ],
        ),
        (
            "endpointslice-controller",
            vec![
                rule(READ, &[CORE], "services pods nodes"),
                rule("update", &[CORE], "services/finalizers"),
                rule(
                    "get list watch create update delete",
                    &[DISCOVERY],
                    "endpointslices",
                ),
                events(),
            ],
        ),
        (
            "endpointslicemirroring-controller",
            vec![
                rule(READ, &[CORE], "services endpoints"),
                rule("update", &[CORE], "services/finalizers"),
                rule("update", &[CORE], "endpoints/finalizers"),
                rule(
                    "get list watch create update delete",
                    &[DISCOVERY],
                    "endpointslices",
                ),
                events(),
            ],
        ),
        (
            "expand-controller",
            vec![
                rule(READ_UPDATE, &[CORE], pvs),
                rule("update patch", &[CORE], "persistentvolumeclaims/status"),
                rule(READ, &[CORE], pvcs),
                events(),
            ],
        ),
        (
            "ephemeral-volume-controller",
            vec![
                rule(READ, &[CORE], "pods"),
                rule("update", &[CORE], "pods/finalizers"),
                rule("get list watch create", &[CORE], pvcs),
                events(),
            ],
        ),
        (
            "generic-garbage-collector",
            vec![rule("get list watch patch update delete", &[ANY], "*"), events()],
        ),
        (
            "horizontal-pod-autoscaler",
            vec![
                rule(READ, &[AUTOSCALING], "horizontalpodautoscalers"),
                rule("update", &[AUTOSCALING], "horizontalpodautoscalers/status"),
                rule("get update", &[ANY], "*/scale"),
                rule("list watch", &[CORE], "pods"),
                rule("list watch", &["metrics.k8s.io"], "pods"),
                rule(READ, &["custom.metrics.k8s.io"], "*"),
                rule(READ, &["external.metrics.k8s.io"], "*"),
                events(),
            ],
        ),
        (
            "job-controller",
            vec![
                rule(READ_UPDATE, &[BATCH], "jobs"),
                rule("update", &[BATCH], "jobs/status"),
                rule("update", &[BATCH], "jobs/finalizers"),
                rule("list watch create delete patch", &[CORE], "pods"),
                events(),
            ],
        ),
        (
            "namespace-controller",
            vec![
                rule("get list watch delete", &[CORE], "namespaces"),
                rule("update", &[CORE], "namespaces/finalize namespaces/status"),
                rule("get list watch delete deletecollection", &[ANY], "*"),
            ],
        ),
        (
            "node-controller",
            vec![
                rule("get list watch update delete patch", &[CORE], "nodes"),
                rule("patch update", &[CORE], "nodes/status"),
                rule("patch update", &[CORE], "pods/status"),
                rule("get list watch delete", &[CORE], "pods"),
                events(),
            ],
        ),
        (
            "persistent-volume-binder",
            vec![
                rule("get list watch update create delete", &[CORE], pvs),
                rule("update", &[CORE], "persistentvolumes/status"),
                // r8s adds `delete`: the claim of a local volume whose node was deleted is
                // given up (upstream leaves that to the local static provisioner).
                rule("get list watch update delete", &[CORE], pvcs),
                rule("update", &[CORE], "persistentvolumeclaims/status"),
                rule("list watch get create delete", &[CORE], "pods"),
                rule(READ, &[STORAGE], "storageclasses"),
                rule("list watch", &[CORE], "nodes"),
                events(),
                // The recycler watches its pod's events.
                rule("watch", &[CORE], "events"),
                // A volume plugin's (portworx's) service lookup.
                rule("get", &[CORE], "services"),
            ],
        ),
        (
            "pod-garbage-collector",
            vec![
                rule("list watch delete", &[CORE], "pods"),
                rule(READ, &[CORE], "nodes"),
                rule("patch", &[CORE], "pods/status"),
            ],
        ),
        (
            "replicaset-controller",
            vec![
                rule("get list watch update", &[APPS, EXTENSIONS], "replicasets"),
                rule("update", &[APPS, EXTENSIONS], "replicasets/status"),
                rule("update", &[APPS, EXTENSIONS], "replicasets/finalizers"),
                rule("list watch patch create delete", &[CORE], "pods"),
                events(),
            ],
        ),
        (
            "replication-controller",
            vec![
                rule("get list watch update", &[CORE], "replicationcontrollers"),
                rule("update", &[CORE], "replicationcontrollers/status"),
                rule("update", &[CORE], "replicationcontrollers/finalizers"),
                rule("list watch patch create delete", &[CORE], "pods"),
                events(),
            ],
        ),
        (
            "resourcequota-controller",
            vec![
                rule("list watch", &[ANY], "*"),
                rule("update", &[CORE], "resourcequotas/status"),
                events(),
            ],
        ),
        (
            "route-controller",
            vec![
                rule("list watch", &[CORE], "nodes"),
                rule("patch", &[CORE], "nodes/status"),
                events(),
            ],
        ),
        (
            "service-account-controller",
            vec![rule("create", &[CORE], "serviceaccounts"), events()],
        ),
        (
            "service-controller",
            vec![
                rule(READ, &[CORE], "services"),
                rule("patch update", &[CORE], "services/status"),
                rule("list watch", &[CORE], "nodes"),
                events(),
            ],
        ),
        // MultiCIDRServiceAllocator (GA in 1.33).
        (
            "service-cidrs-controller",
            vec![
                rule("get list watch patch update", &[NETWORKING], "servicecidrs"),
                rule("patch update", &[NETWORKING], "servicecidrs/finalizers"),
                rule("patch update", &[NETWORKING], "servicecidrs/status"),
                rule(READ, &[NETWORKING], "ipaddresses"),
                events(),
            ],
        ),
        (
            "statefulset-controller",
            vec![
                rule("list watch", &[CORE], "pods"),
                rule(READ, &[APPS], "statefulsets"),
                rule("update", &[APPS], "statefulsets/status"),
                rule("update", &[APPS], "statefulsets/finalizers"),
                rule("get create delete update patch", &[CORE], "pods"),
                rule(
                    "get create delete update patch list watch",
                    &[APPS],
                    "controllerrevisions",
                ),
                rule("get create", &[CORE], pvcs),
                events(),
                // The PersistentVolumeClaim retention policy (StatefulSetAutoDeletePVC, GA).
                rule("update delete", &[CORE], pvcs),
            ],
        ),
        (
            "ttl-controller",
            vec![rule("update patch list watch", &[CORE], "nodes"), events()],
        ),
        (
            "certificate-controller",
            vec![
                rule("get list watch delete", &[CERTS], "certificatesigningrequests"),
                rule(
                    "update",
                    &[CERTS],
                    "certificatesigningrequests/status certificatesigningrequests/approval",
                ),
                rule("approve", &[CERTS], "signers").names("kubernetes.io/kube-apiserver-client-kubelet"),
                rule("sign", &[CERTS], "signers").names(
                    "kubernetes.io/legacy-unknown kubernetes.io/kube-apiserver-client \
                 kubernetes.io/kube-apiserver-client-kubelet kubernetes.io/kubelet-serving",
                ),
                rule("create", &[AUTHZ], "subjectaccessreviews"),
                events(),
            ],
        ),
        (
            "pvc-protection-controller",
            vec![
                rule("get list watch update", &[CORE], pvcs),
                rule(READ, &[CORE], "pods"),
                events(),
            ],
        ),
        (
            "pv-protection-controller",
            vec![rule("get list watch update", &[CORE], pvs), events()],
        ),
        (
            "ttl-after-finished-controller",
            vec![rule("get list watch delete", &[BATCH], "jobs"), events()],
        ),
        (
            "root-ca-cert-publisher",
            vec![rule("create update", &[CORE], "configmaps"), events()],
        ),
        (
            "validatingadmissionpolicy-status-controller",
            vec![
                rule(READ, &[ADMISSION], "validatingadmissionpolicies"),
                rule(
                    "get patch update",
                    &[ADMISSION],
                    "validatingadmissionpolicies/status",
                ),
                events(),
            ],
        ),
        (
            "legacy-service-account-token-cleaner",
            vec![
                rule("get", &[CORE], "configmaps")
                    .names("kube-apiserver-legacy-service-account-token-tracking"),
                rule("patch delete", &[CORE], "secrets"),
            ],
        ),
        // SELinuxChangePolicy (beta, on by default in 1.33).
        (
            "selinux-warning-controller",
            vec![
                events(),
                rule(READ, &[CORE], pvs),
                rule(READ, &[CORE], pvcs),
                rule(READ, &[CORE], "pods"),
                rule(READ, &[STORAGE], "csidrivers"),
            ],
        ),
    ]
}

/// The Roles and RoleBindings of kube-system and kube-public.
fn namespaced() -> (Vec<Role>, Vec<RoleBinding>) {
    let controller = |name: &str| format!("{CONTROLLER_PREFIX}{name}");
    let sa = |name: &str| service_account(KUBE_SYSTEM, name);
    let user = |name: &str| subject("User", name);
    let (kcm_lock, scheduler_lock) = (
        "system::leader-locking-kube-controller-manager",
        "system::leader-locking-kube-scheduler",
    );
    let roles = vec![
        // The configmap with the client CA and request-header settings that aggregated and delegating
        // API servers read to authenticate their callers.
        role(
            KUBE_SYSTEM,
            "extension-apiserver-authentication-reader",
            vec![rule(READ, &[CORE], "configmaps").names("extension-apiserver-authentication")],
        ),
        role(
            KUBE_SYSTEM,
            &controller("bootstrap-signer"),
            vec![rule(READ, &[CORE], "secrets")],
        ),
        role(
            KUBE_SYSTEM,
            &controller("cloud-provider"),
            vec![rule("create get list watch", &[CORE], "configmaps")],
        ),
        role(
            KUBE_SYSTEM,
            &controller("token-cleaner"),
            vec![rule("get list watch delete", &[CORE], "secrets"), events()],
        ),
        role(
            KUBE_SYSTEM,
            kcm_lock,
            vec![
                rule("watch", &[CORE], "configmaps"),
                rule("get update", &[CORE], "configmaps").names("kube-controller-manager"),
                rule("get watch list create update", &[COORDINATION], "leases"),
            ],
        ),
        role(
            KUBE_SYSTEM,
            scheduler_lock,
            vec![
                rule("watch", &[CORE], "configmaps"),
                rule("get update", &[CORE], "configmaps").names("kube-scheduler"),
            ],
        ),
        role(
            KUBE_PUBLIC,
            &controller("bootstrap-signer"),
            vec![
                rule(READ, &[CORE], "configmaps"),
                rule("update", &[CORE], "configmaps").names("cluster-info"),
                events(),
            ],
        ),
    ];
    let mut auth_reader = role_binding(
        KUBE_SYSTEM,
        "extension-apiserver-authentication-reader",
        vec![
            user("system:kube-controller-manager"),
            user("system:kube-scheduler"),
        ],
    );
    auth_reader.metadata.name = Some("system::extension-apiserver-authentication-reader".to_string());
    let role_bindings = vec![
        auth_reader,
        role_binding(
            KUBE_SYSTEM,
            kcm_lock,
            vec![
                user("system:kube-controller-manager"),
                sa("kube-controller-manager"),
                sa("leader-election-controller"),
            ],
        ),
        role_binding(
            KUBE_SYSTEM,
            scheduler_lock,
            vec![user("system:kube-scheduler"), sa("kube-scheduler")],
        ),
        role_binding(
            KUBE_SYSTEM,
            &controller("bootstrap-signer"),
            vec![sa("bootstrap-signer")],
        ),
        role_binding(
            KUBE_SYSTEM,
            &controller("cloud-provider"),
            vec![sa("cloud-provider")],
        ),
        role_binding(
            KUBE_SYSTEM,
            &controller("token-cleaner"),
            vec![sa("token-cleaner")],
        ),
        role_binding(
            KUBE_PUBLIC,
            &controller("bootstrap-signer"),
            vec![sa("bootstrap-signer")],
        ),
    ];
    (roles, role_bindings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn has(list: &Option<Vec<String>>, item: &str) -> bool {
        list.iter().flatten().any(|x| x == "*" || x == item)
    }

    /// RBAC's matching: `*` wildcards, `*/sub` for any resource's subresource, and resourceNames only
    /// for requests that name an object.
    fn rule_allows(r: &PolicyRule, verb: &str, group: &str, resource: &str, name: Option<&str>) -> bool {
        let resource_ok = r.resources.iter().flatten().any(|x| {
            x == "*"
                || x == resource
                || x.strip_prefix("*/")
                    .is_some_and(|sub| resource.split_once('/').is_some_and(|(_, s)| s == sub))
        });
        let name_ok = match &r.resource_names {
            None => true,
            Some(names) if names.is_empty() => true,
            Some(names) => name.is_some_and(|n| names.iter().any(|x| x == n)),
        };
        r.verbs.iter().any(|v| v == "*" || v == verb) && has(&r.api_groups, group) && resource_ok && name_ok
    }

    fn allows(rules: &[PolicyRule], verb: &str, group: &str, resource: &str) -> bool {
        rules.iter().any(|r| rule_allows(r, verb, group, resource, None))
    }

    fn allows_named(rules: &[PolicyRule], verb: &str, group: &str, resource: &str, name: &str) -> bool {
        rules
            .iter()
            .any(|r| rule_allows(r, verb, group, resource, Some(name)))
    }

    fn allows_url(rules: &[PolicyRule], verb: &str, url: &str) -> bool {
        rules.iter().any(|r| {
            r.verbs.iter().any(|v| v == "*" || v == verb)
                && r.non_resource_urls
                    .iter()
                    .flatten()
                    .any(|u| u == url || u.strip_suffix('*').is_some_and(|prefix| url.starts_with(prefix)))
        })
    }

    fn cluster_role<'a>(p: &'a BootstrapPolicy, name: &str) -> &'a ClusterRole {
        p.cluster_roles
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no ClusterRole {name}"))
    }

    fn rules_of(p: &BootstrapPolicy, name: &str) -> Vec<PolicyRule> {
        cluster_role(p, name).rules.clone().unwrap_or_default()
    }

    /// A ClusterRole's rules as the aggregation controller fills them: its own plus, through its
    /// selectors, those of every role whose labels match (transitively: edit gathers view's).
    fn effective_rules(p: &BootstrapPolicy, name: &str) -> Vec<PolicyRule> {
        let role = cluster_role(p, name);
        let mut rules = role.rules.clone().unwrap_or_default();
        let selectors = role
            .aggregation_rule
            .iter()
            .flat_map(|a| a.cluster_role_selectors.iter().flatten());
        for selector in selectors {
            for other in &p.cluster_roles {
                let labels = other.metadata.labels.clone().unwrap_or_default();
                let matches = selector
                    .match_labels
                    .iter()
                    .flatten()
                    .all(|(k, v)| labels.get(k) == Some(v));
                let other_name = other.metadata.name.as_deref().unwrap();
                if matches && other_name != name {
                    rules.extend(effective_rules(p, other_name));
                }
            }
        }
        rules
    }

    fn binding<'a>(p: &'a BootstrapPolicy, name: &str) -> &'a ClusterRoleBinding {
        p.cluster_role_bindings
            .iter()
            .find(|b| b.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no ClusterRoleBinding {name}"))
    }

    fn subjects(b: &ClusterRoleBinding) -> Vec<(String, String, Option<String>)> {
        b.subjects
            .iter()
            .flatten()
            .map(|s| (s.kind.clone(), s.name.clone(), s.namespace.clone()))
            .collect()
    }

    fn names<'a>(metas: impl Iterator<Item = &'a ObjectMeta>) -> Vec<(Option<String>, String)> {
        metas
            .map(|m| {
                (
                    m.namespace.clone(),
                    m.name.clone().expect("every object is named"),
                )
            })
            .collect()
    }

    fn all_metas(p: &BootstrapPolicy) -> Vec<&ObjectMeta> {
        let mut metas: Vec<&ObjectMeta> = p.cluster_roles.iter().map(|r| &r.metadata).collect();
        metas.extend(p.cluster_role_bindings.iter().map(|b| &b.metadata));
        metas.extend(p.roles.iter().map(|r| &r.metadata));
        metas.extend(p.role_bindings.iter().map(|b| &b.metadata));
        metas
    }

    #[test]
    fn names_are_unique_within_each_kind() {
        let p = policy();
        let kinds = [
            ("ClusterRole", names(p.cluster_roles.iter().map(|r| &r.metadata))),
            (
                "ClusterRoleBinding",
                names(p.cluster_role_bindings.iter().map(|b| &b.metadata)),
            ),
            ("Role", names(p.roles.iter().map(|r| &r.metadata))),
            ("RoleBinding", names(p.role_bindings.iter().map(|b| &b.metadata))),
        ];
        for (kind, list) in kinds {
            let unique: BTreeSet<_> = list.iter().collect();
            assert_eq!(unique.len(), list.len(), "duplicate {kind} names in {list:?}");
        }
    }

    #[test]
    fn bindings_refer_to_roles_that_exist() {
        let p = policy();
        let cluster_roles: BTreeSet<_> = p
            .cluster_roles
            .iter()
            .filter_map(|r| r.metadata.name.clone())
            .collect();
        for b in &p.cluster_role_bindings {
            assert_eq!(b.role_ref.api_group, RBAC);
            assert_eq!(b.role_ref.kind, "ClusterRole");
            assert!(
                cluster_roles.contains(&b.role_ref.name),
                "{:?} grants a missing ClusterRole",
                b.metadata.name
            );
        }
        let roles: BTreeSet<_> = p
            .roles
            .iter()
            .map(|r| (r.metadata.namespace.clone(), r.metadata.name.clone()))
            .collect();
        for b in &p.role_bindings {
            assert!(
                b.metadata.namespace.is_some(),
                "{:?} has no namespace",
                b.metadata.name
            );
            assert_eq!(b.role_ref.api_group, RBAC);
            assert_eq!(b.role_ref.kind, "Role");
            let target = (b.metadata.namespace.clone(), Some(b.role_ref.name.clone()));
            assert!(
                roles.contains(&target),
                "RoleBinding {target:?} grants a Role missing from its namespace"
            );
        }
        for r in &p.roles {
            let ns = r.metadata.namespace.as_deref();
            assert!(
                matches!(ns, Some(KUBE_SYSTEM | KUBE_PUBLIC)),
                "{:?} in {ns:?}",
                r.metadata.name
            );
        }
    }

    #[test]
    fn every_object_carries_the_bootstrap_label_and_autoupdate_annotation() {
        let p = policy();
        for m in all_metas(&p) {
            let label = m.labels.as_ref().and_then(|l| l.get(BOOTSTRAPPING_LABEL.0));
            assert_eq!(
                label.map(String::as_str),
                Some(BOOTSTRAPPING_LABEL.1),
                "{:?}",
                m.name
            );
            let annotation = m
                .annotations
                .as_ref()
                .and_then(|a| a.get(AUTOUPDATE_ANNOTATION.0));
            assert_eq!(
                annotation.map(String::as_str),
                Some(AUTOUPDATE_ANNOTATION.1),
                "{:?}",
                m.name
            );
        }
    }

    #[test]
    fn counts_match_upstream_1_33_with_default_feature_gates() {
        let p = policy();
        // 31 roles of policy.go and 35 controller roles, and metrics-server's reader role
        // (served in-process here).
        assert_eq!(p.cluster_roles.len(), 67);
        // 12 bindings of policy.go (system:node's without subjects) and one per controller.
        assert_eq!(p.cluster_role_bindings.len(), 47);
        assert_eq!(p.roles.len(), 7);
        assert_eq!(p.role_bindings.len(), 7);
    }

    #[test]
    fn each_controller_role_is_bound_to_its_service_account() {
        let p = policy();
        let expected: BTreeSet<&str> = [
            "attachdetach-controller",
            "certificate-controller",
            "clusterrole-aggregation-controller",
            "cronjob-controller",
            "daemon-set-controller",
            "deployment-controller",
            "disruption-controller",
            "endpoint-controller",
            "endpointslice-controller",
            "endpointslicemirroring-controller",
            "ephemeral-volume-controller",
            "expand-controller",
            "generic-garbage-collector",
            "horizontal-pod-autoscaler",
            "job-controller",
            "legacy-service-account-token-cleaner",
            "namespace-controller",
            "node-controller",
            "persistent-volume-binder",
            "pod-garbage-collector",
            "pv-protection-controller",
            "pvc-protection-controller",
            "replicaset-controller",
            "replication-controller",
            "resourcequota-controller",
            "root-ca-cert-publisher",
            "route-controller",
            "selinux-warning-controller",
            "service-account-controller",
            "service-cidrs-controller",
            "service-controller",
            "statefulset-controller",
            "ttl-after-finished-controller",
            "ttl-controller",
            "validatingadmissionpolicy-status-controller",
        ]
        .into();
        let controllers: BTreeSet<&str> = p
            .cluster_roles
            .iter()
            .filter_map(|r| r.metadata.name.as_deref()?.strip_prefix(CONTROLLER_PREFIX))
            .collect();
        assert_eq!(controllers, expected);
        for sa in expected {
            let b = binding(&p, &format!("{CONTROLLER_PREFIX}{sa}"));
            assert_eq!(
                subjects(b),
                vec![("ServiceAccount".into(), sa.into(), Some(KUBE_SYSTEM.into()))]
            );
            assert_eq!(b.subjects.as_ref().unwrap()[0].api_group, None);
        }
    }

    #[test]
    fn roles_behind_gates_off_by_default_are_absent() {
        let p = policy();
        for name in [
            "system:controller:resource-claim-controller",
            "system:controller:device-taint-eviction-controller",
            "system:controller:volumeattributesclass-protection-controller",
            "system:controller:storage-version-migrator-controller",
            "system:controller:storage-version-garbage-collector",
            "system:cluster-trust-bundle-discovery",
        ] {
            assert!(
                !p.cluster_roles
                    .iter()
                    .any(|r| r.metadata.name.as_deref() == Some(name)),
                "{name}"
            );
        }
        let node = rules_of(&p, "system:node");
        assert!(!allows(&node, "get", "resource.k8s.io", "resourceclaims"));
        assert!(!allows(&node, "get", CORE, "serviceaccounts"));
        assert!(!allows(&node, "get", CERTS, "clustertrustbundles"));
    }

    #[test]
    fn default_cluster_role_bindings_have_upstreams_subjects() {
        let p = policy();
        let group = |n: &str| ("Group".to_string(), n.to_string(), None);
        let user = |n: &str| ("User".to_string(), n.to_string(), None);
        assert_eq!(
            subjects(binding(&p, "cluster-admin")),
            vec![group("system:masters")]
        );
        assert_eq!(
            subjects(binding(&p, "system:basic-user")),
            vec![group("system:authenticated")]
        );
        assert_eq!(
            subjects(binding(&p, "system:discovery")),
            vec![group("system:authenticated")]
        );
        assert_eq!(
            subjects(binding(&p, "system:public-info-viewer")),
            vec![group("system:authenticated"), group("system:unauthenticated")]
        );
        assert_eq!(
            subjects(binding(&p, "system:monitoring")),
            vec![group("system:monitoring")]
        );
        assert_eq!(
            subjects(binding(&p, "system:service-account-issuer-discovery")),
            vec![group("system:serviceaccounts")]
        );
        assert_eq!(
            subjects(binding(&p, "system:kube-scheduler")),
            vec![user("system:kube-scheduler")]
        );
        assert_eq!(
            subjects(binding(&p, "system:volume-scheduler")),
            vec![user("system:kube-scheduler")]
        );
        assert_eq!(
            subjects(binding(&p, "system:kube-controller-manager")),
            vec![user("system:kube-controller-manager")]
        );
        assert_eq!(
            subjects(binding(&p, "system:node-proxier")),
            vec![user("system:kube-proxy")]
        );
        assert_eq!(
            subjects(binding(&p, "system:kube-dns")),
            vec![(
                "ServiceAccount".into(),
                "kube-dns".into(),
                Some(KUBE_SYSTEM.into())
            )]
        );
        // Users and groups name the RBAC API group; service accounts do not.
        for b in &p.cluster_role_bindings {
            for s in b.subjects.iter().flatten() {
                let expected = (s.kind != "ServiceAccount").then(|| RBAC.to_string());
                assert_eq!(s.api_group, expected, "{:?}", b.metadata.name);
            }
        }
        // Nodes are authorized by the Node authorizer: system:node's binding grants nobody.
        assert_eq!(binding(&p, "system:node").subjects, None);
    }

    #[test]
    fn node_may_run_its_pods_and_report_status() {
        let node = rules_of(&policy(), "system:node");
        assert!(allows(&node, "get", CORE, "nodes"));
        assert!(allows(&node, "patch", CORE, "nodes/status"));
        assert!(allows(&node, "create", CORE, "serviceaccounts/token"));
        assert!(allows(&node, "update", CORE, "pods/status"));
        assert!(allows(&node, "get", CORE, "secrets"));
        assert!(allows(&node, "update", COORDINATION, "leases"));
        assert!(!allows(&node, "delete", CORE, "nodes"));
        assert!(!allows(&node, "create", CORE, "secrets"));
        assert!(!allows(&node, "create", CORE, "pods/binding"));
    }

    #[test]
    fn scheduler_may_bind_pods_and_hold_its_lease() {
        let p = policy();
        let scheduler = rules_of(&p, "system:kube-scheduler");
        assert!(allows(&scheduler, "create", CORE, "pods/binding"));
        assert!(allows(&scheduler, "create", CORE, "bindings"));
        assert!(allows(&scheduler, "patch", CORE, "pods/status"));
        assert!(allows(&scheduler, "list", STORAGE, "csinodes"));
        assert!(allows_named(
            &scheduler,
            "update",
            COORDINATION,
            "leases",
            "kube-scheduler"
        ));
        assert!(!allows_named(
            &scheduler,
            "update",
            COORDINATION,
            "leases",
            "kube-controller-manager"
        ));
        assert!(!allows(&scheduler, "create", CORE, "pods"));
        let volume = rules_of(&p, "system:volume-scheduler");
        assert!(allows(&volume, "patch", CORE, "persistentvolumeclaims"));
    }

    #[test]
    fn aggregated_roles_gather_their_labelled_parts() {
        let p = policy();
        for (part, into) in [
            ("system:aggregate-to-admin", "admin"),
            ("system:aggregate-to-edit", "edit"),
            ("system:aggregate-to-view", "view"),
        ] {
            let labels = cluster_role(&p, part).metadata.labels.clone().unwrap();
            assert_eq!(
                labels.get(&format!("{AGGREGATE_TO}{into}")).map(String::as_str),
                Some("true")
            );
            let selectors = cluster_role(&p, into)
                .aggregation_rule
                .clone()
                .unwrap()
                .cluster_role_selectors;
            let selected = selectors.unwrap()[0].match_labels.clone().unwrap();
            assert_eq!(
                selected,
                BTreeMap::from([(format!("{AGGREGATE_TO}{into}"), "true".to_string())])
            );
            assert_eq!(
                cluster_role(&p, into).rules,
                None,
                "{into} has no rules of its own"
            );
        }

        let view = effective_rules(&p, "view");
        assert!(allows(&view, "get", CORE, "pods"));
        assert!(allows(&view, "list", APPS, "deployments"));
        for verb in ["get", "list", "watch", "create"] {
            assert!(!allows(&view, verb, CORE, "secrets"), "view may {verb} secrets");
        }
        assert!(!allows(&view, "create", CORE, "pods"));
        // Word lists continued over several lines split into whole words.
        assert!(allows(&view, "watch", CORE, "configmaps"));
        assert!(allows(&view, "get", APPS, "replicasets/scale"));
        assert!(allows(&view, "get", EXTENSIONS, "networkpolicies"));

        let edit = effective_rules(&p, "edit");
        assert!(allows(&edit, "create", APPS, "deployments"));
        assert!(allows(&edit, "get", CORE, "pods"), "edit includes view");
        assert!(allows(&edit, "get", CORE, "secrets"));
        assert!(allows(&edit, "create", CORE, "pods/exec"));
        assert!(allows(&edit, "update", CORE, "services/proxy"));
        assert!(allows(&edit, "patch", APPS, "replicasets/scale"));
        assert!(
            !allows(&edit, "create", CORE, "endpoints"),
            "edit may not write endpoints (CVE-2021-25740)"
        );
        assert!(!allows(&edit, "create", RBAC, "rolebindings"));
        assert!(!allows(&edit, "update", CORE, "resourcequotas"));

        let admin = effective_rules(&p, "admin");
        assert!(allows(&admin, "create", RBAC, "rolebindings"));
        assert!(
            allows(&admin, "delete", APPS, "statefulsets"),
            "admin includes edit"
        );
        assert!(
            allows(&admin, "get", CORE, "pods"),
            "admin includes view through edit"
        );
        assert!(!allows(&admin, "create", CORE, "namespaces"));
    }

    #[test]
    fn public_info_and_discovery_urls() {
        let p = policy();
        let public = rules_of(&p, "system:public-info-viewer");
        for url in ["/healthz", "/livez", "/readyz", "/version", "/version/"] {
            assert!(allows_url(&public, "get", url), "{url}");
        }
        assert!(!allows_url(&public, "get", "/metrics"));
        assert!(!allows_url(&public, "get", "/api"));
        assert!(!allows_url(&public, "post", "/healthz"));
        let discovery = rules_of(&p, "system:discovery");
        assert!(allows_url(&discovery, "get", "/apis/apps/v1"));
        assert!(allows_url(&discovery, "get", "/openapi/v3"));
        assert!(!allows_url(&discovery, "get", "/metrics"));
        let monitoring = rules_of(&p, "system:monitoring");
        assert!(allows_url(&monitoring, "get", "/metrics"));
        assert!(allows_url(&monitoring, "get", "/readyz/etcd"));
        let issuer = rules_of(&p, "system:service-account-issuer-discovery");
        assert!(allows_url(&issuer, "get", "/openid/v1/jwks"));
        assert!(allows_url(&issuer, "get", "/.well-known/openid-configuration"));
    }

    #[test]
    fn controllers_hold_what_they_need() {
        let p = policy();
        let rs = rules_of(&p, "system:controller:replicaset-controller");
        assert!(allows(&rs, "create", CORE, "pods"));
        assert!(allows(&rs, "delete", CORE, "pods"));
        assert!(allows(&rs, "update", APPS, "replicasets/status"));
        assert!(!allows(&rs, "get", CORE, "secrets"));
        let gc = rules_of(&p, "system:controller:generic-garbage-collector");
        assert!(allows(&gc, "delete", "example.com", "widgets"));
        let hpa = rules_of(&p, "system:controller:horizontal-pod-autoscaler");
        assert!(
            allows(&hpa, "update", APPS, "deployments/scale"),
            "*/scale covers any scale subresource"
        );
        assert!(!allows(&hpa, "update", APPS, "deployments"));
        let signer = rules_of(&p, "system:controller:certificate-controller");
        assert!(allows_named(
            &signer,
            "sign",
            CERTS,
            "signers",
            "kubernetes.io/kubelet-serving"
        ));
        assert!(!allows_named(
            &signer,
            "approve",
            CERTS,
            "signers",
            "kubernetes.io/kubelet-serving"
        ));
        let proxier = rules_of(&p, "system:node-proxier");
        assert!(allows(&proxier, "watch", DISCOVERY, "endpointslices"));
        assert!(allows(&proxier, "list", NETWORKING, "servicecidrs"));
    }

    #[test]
    fn cluster_admin_may_do_anything() {
        let admin = rules_of(&policy(), "cluster-admin");
        let resources = PolicyRule {
            verbs: words("*"),
            api_groups: Some(words("*")),
            resources: Some(words("*")),
            ..Default::default()
        };
        let urls = PolicyRule {
            verbs: words("*"),
            non_resource_urls: Some(words("*")),
            ..Default::default()
        };
        assert_eq!(admin, vec![resources, urls]);
        assert!(allows(&admin, "delete", CORE, "nodes"));
        assert!(allows(&admin, "escalate", RBAC, "clusterroles"));
        assert!(allows_url(&admin, "get", "/metrics"));
    }

    #[test]
    fn namespaced_roles_are_confined_to_their_objects() {
        let p = policy();
        let role = |ns: &str, name: &str| {
            p.roles
                .iter()
                .find(|r| {
                    r.metadata.namespace.as_deref() == Some(ns) && r.metadata.name.as_deref() == Some(name)
                })
                .and_then(|r| r.rules.clone())
                .unwrap_or_else(|| panic!("no Role {ns}/{name}"))
        };
        let reader = role(KUBE_SYSTEM, "extension-apiserver-authentication-reader");
        assert!(allows_named(
            &reader,
            "get",
            CORE,
            "configmaps",
            "extension-apiserver-authentication"
        ));
        assert!(!allows_named(&reader, "get", CORE, "configmaps", "kube-proxy"));
        let lock = role(KUBE_SYSTEM, "system::leader-locking-kube-controller-manager");
        assert!(allows(&lock, "update", COORDINATION, "leases"));
        let signer = role(KUBE_PUBLIC, "system:controller:bootstrap-signer");
        assert!(allows_named(
            &signer,
            "update",
            CORE,
            "configmaps",
            "cluster-info"
        ));
        assert!(!allows_named(&signer, "update", CORE, "configmaps", "other"));
        let reader_binding = p
            .role_bindings
            .iter()
            .find(|b| b.metadata.name.as_deref() == Some("system::extension-apiserver-authentication-reader"))
            .unwrap();
        let who: Vec<_> = reader_binding
            .subjects
            .iter()
            .flatten()
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(who, ["system:kube-controller-manager", "system:kube-scheduler"]);
    }
}
