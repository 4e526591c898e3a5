//! The served resources, with upstream's names, short names, categories and verbs.

/// Every verb a resource with full CRUD supports.
pub const STANDARD_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
/// Namespaces cannot be deleted as a collection.
const NAMESPACE_VERBS: &[&str] = &["create", "delete", "get", "list", "patch", "update", "watch"];

/// Reviews are only ever created.
pub const CREATE_ONLY: &[&str] = &["create"];

/// A subresource such as `pods/status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Subresource {
    pub name: &'static str,
    /// The kind the subresource reads and writes (e.g. `Scale` for `deployments/scale`).
    pub kind: &'static str,
    /// The group/version of that kind, when it is not the parent's ("autoscaling/v1").
    pub group_version: Option<&'static str>,
    pub verbs: &'static [&'static str],
}

/// One resource in one group version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResourceDef {
    /// "" for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    pub verbs: &'static [&'static str],
    pub subresources: &'static [Subresource],
    /// A custom resource, served from a CustomResourceDefinition (stored under its group, as
    /// upstream's `/registry/<group>/<resource>`), rather than built in.
    pub custom: bool,
}

impl ResourceDef {
    /// A review: a question asked by creating it and answered in the response, never stored.
    pub fn is_review(&self) -> bool {
        self.verbs == CREATE_ONLY
    }

    /// `v1` or `apps/v1`, as `apiVersion` is written.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `pods` or `deployments.apps`, as kubectl and error messages name it.
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_owned()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    pub fn subresource(&self, name: &str) -> Option<&Subresource> {
        self.subresources.iter().find(|s| s.name == name)
    }
}

/// `status`: the object's status, written apart from its spec.
pub const STATUS: Subresource = Subresource {
    name: "status",
    kind: "",
    group_version: None,
    verbs: &["get", "patch", "update"],
};
/// `scale`: an `autoscaling/v1` Scale over the object's replicas.
pub const SCALE: Subresource = Subresource {
    name: "scale",
    kind: "Scale",
    group_version: Some("autoscaling/v1"),
    verbs: &["get", "patch", "update"],
};
const BINDING: Subresource = Subresource {
    name: "binding",
    kind: "Binding",
    group_version: Some("v1"),
    verbs: &["create"],
};
const LOG: Subresource = Subresource {
    name: "log",
    kind: "Pod",
    group_version: None,
    verbs: &["get"],
};
const PROXY: Subresource = Subresource {
    name: "proxy",
    kind: "NodeProxyOptions",
    group_version: None,
    verbs: &["get"],
};
const EXEC: Subresource = Subresource {
    name: "exec",
    kind: "PodExecOptions",
    group_version: None,
    verbs: &["create", "get"],
};
const ATTACH: Subresource = Subresource {
    name: "attach",
    kind: "PodAttachOptions",
    group_version: None,
    verbs: &["create", "get"],
};
const PORTFORWARD: Subresource = Subresource {
    name: "portforward",
    kind: "PodPortForwardOptions",
    group_version: None,
    verbs: &["create", "get"],
};
const POD_PROXY: Subresource = Subresource {
    name: "proxy",
    kind: "PodProxyOptions",
    group_version: None,
    verbs: &["create", "delete", "get", "patch", "update"],
};
const SERVICE_PROXY: Subresource = Subresource {
    name: "proxy",
    kind: "ServiceProxyOptions",
    group_version: None,
    verbs: &["create", "delete", "get", "patch", "update"],
};
const RESIZE: Subresource = Subresource {
    name: "resize",
    kind: "Pod",
    group_version: None,
    verbs: &["get", "patch", "update"],
};
const EPHEMERAL_CONTAINERS: Subresource = Subresource {
    name: "ephemeralcontainers",
    kind: "Pod",
    group_version: None,
    verbs: &["get", "patch", "update"],
};
const TOKEN: Subresource = Subresource {
    name: "token",
    kind: "TokenRequest",
    group_version: Some("authentication.k8s.io/v1"),
    verbs: &["create"],
};
const APPROVAL: Subresource = Subresource {
    name: "approval",
    kind: "",
    group_version: None,
    verbs: &["get", "patch", "update"],
};
const EVICTION: Subresource = Subresource {
    name: "eviction",
    kind: "Eviction",
    group_version: Some("policy/v1"),
    verbs: &["create"],
};
const FINALIZE: Subresource = Subresource {
    name: "finalize",
    kind: "",
    group_version: None,
    verbs: &["update"],
};

macro_rules! res {
    ($group:expr, $version:expr, $kind:expr, $plural:expr, $singular:expr, $namespaced:expr,
     short: [$($short:expr),*], cat: [$($cat:expr),*], verbs: $verbs:expr, sub: [$($sub:expr),*]) => {
        ResourceDef {
            group: $group,
            version: $version,
            kind: $kind,
            plural: $plural,
            singular: $singular,
            namespaced: $namespaced,
            short_names: &[$($short),*],
            categories: &[$($cat),*],
            verbs: $verbs,
            subresources: &[$($sub),*],
            custom: false,
        }
    };
}

static CATALOGUE: &[ResourceDef] = &[
    res!("", "v1", "Namespace", "namespaces", "namespace", false,
         short: ["ns"], cat: [], verbs: NAMESPACE_VERBS, sub: [STATUS, FINALIZE]),
    res!("", "v1", "Pod", "pods", "pod", true,
         short: ["po"], cat: ["all"], verbs: STANDARD_VERBS, sub: [STATUS, ATTACH, BINDING, EPHEMERAL_CONTAINERS, EVICTION, EXEC, LOG, PORTFORWARD, POD_PROXY, RESIZE]),
    res!("", "v1", "Node", "nodes", "node", false,
         short: ["no"], cat: [], verbs: STANDARD_VERBS, sub: [STATUS, PROXY]),
    res!("", "v1", "Service", "services", "service", true,
         short: ["svc"], cat: ["all"], verbs: STANDARD_VERBS, sub: [STATUS, SERVICE_PROXY]),
    res!("", "v1", "Endpoints", "endpoints", "endpoints", true,
         short: ["ep"], cat: [], verbs: STANDARD_VERBS, sub: []),
    res!("", "v1", "ConfigMap", "configmaps", "configmap", true,
         short: ["cm"], cat: [], verbs: STANDARD_VERBS, sub: []),
    res!("", "v1", "Secret", "secrets", "secret", true,
         short: [], cat: [], verbs: STANDARD_VERBS, sub: []),
    res!("", "v1", "ServiceAccount", "serviceaccounts", "serviceaccount", true,
         short: ["sa"], cat: [], verbs: STANDARD_VERBS, sub: [TOKEN]),
    res!("", "v1", "Event", "events", "event", true,
         short: ["ev"], cat: [], verbs: STANDARD_VERBS, sub: []),
    res!("", "v1", "LimitRange", "limitranges", "limitrange", true,
         short: ["limits"], cat: [], verbs: STANDARD_VERBS, sub: []),
    res!("", "v1", "ResourceQuota", "resourcequotas", "resourcequota", true,
         short: ["quota"], cat: [], verbs: STANDARD_VERBS, sub: [STATUS]),
    res!("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", "persistentvolumeclaim", true,
         short: ["pvc"], cat: [], verbs: STANDARD_VERBS, sub: [STATUS]),
    res!("", "v1", "PersistentVolume", "persistentvolumes", "persistentvolume", false,
         short: ["pv"], cat: [], verbs: STANDARD_VERBS, sub: [STATUS]),
    res!("", "v1", "ReplicationController", "replicationcontrollers", "replicationcontroller", true,
         short: ["rc"], cat: ["all"], verbs: STANDARD_VERBS, sub: [STATUS, SCALE]),
    res!("", "v1", "PodTemplate", "podtemplates", "podtemplate", true,
         short: [], cat: [], verbs: STANDARD_VERBS, sub: []),
    res!("", "v1", "ComponentStatus", "componentstatuses", "componentstatus", false,
         short: ["cs"], cat: [], verbs: &["get", "list"], sub: []),
    res!("apps", "v1", "Deployment", "deployments", "deployment", true,
         short: ["deploy"], cat: ["all"], verbs: STANDARD_VERBS, sub: [STATUS, SCALE]),
    res!("apps", "v1", "ReplicaSet", "replicasets", "replicaset", true,
         short: ["rs"], cat: ["all"], verbs: STANDARD_VERBS, sub: [STATUS, SCALE]),
    res!("apps", "v1", "StatefulSet", "statefulsets", "statefulset", true,
         short: ["sts"], cat: ["all"], verbs: STANDARD_VERBS, sub: [STATUS, SCALE]),
    res!("apps", "v1", "DaemonSet", "daemonsets", "daemonset", true,
         short: ["ds"], cat: ["all"], verbs: STANDARD_VERBS, sub: [STATUS]),
    res!("apps", "v1", "ControllerRevision", "controllerrevisions", "controllerrevision", true,
         short: [], cat: [], verbs: STANDARD_VERBS, sub: []),
    res!("autoscaling", "v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers", "horizontalpodautoscaler", true,
         short: ["hpa"], cat: ["all"], verbs: STANDARD_VERBS, sub: [STATUS]),
    res!("autoscaling", "v1", "HorizontalPodAutoscaler", "horizontalpodautoscalers", "horizontalpodautoscaler", true,
         short: ["hpa"], cat: ["all"], verbs: STANDARD_VERBS, sub: [STATUS]),
    res!("batch", "v1", "Job", "jobs", "job", true,
         short: [], cat: ["all"], verbs: STANDARD_VERBS, sub: [STATUS]),
    res!("batch", "v1", "CronJob", "cronjobs", "cronjob", true,
         short: ["cj"], cat: ["all"], verbs: STANDARD_VERBS, sub: [STATUS]),
    res!("events.k8s.io", "v1", "Event", "events", "event", true,
         short: ["ev"], cat: [], verbs: STANDARD_VERBS, sub: []),
    res!("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", "endpointslice", true,
         short: [], cat: [], verbs: STANDARD_VERBS, sub: []),
    res!("coordination.k8s.io", "v1", "Lease", "leases", "lease", true,
         short: [], cat: [], verbs: STANDARD_VERBS, sub: []),
    res!("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", "priorityclass", false,
         short: ["pc"], cat: [], verbs: STANDARD_VERBS, sub: []),
    res!("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses", "runtimeclass", false,
         short: [], cat: [], verbs: STANDARD_VERBS, sub: []),
    res!("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", "networkpolicy", true,
         short: ["netpol"], cat: [], verbs: STANDARD_VERBS, sub: []),
    res!("networking.k8s.io", "v1", "Ingress", "ingresses", "ingress", true,
         short: ["ing"], cat: [], verbs: STANDARD_VERBS, sub: [STATUS]),
    res!("networking.k8s.io", "v1", "IngressClass", "ingressclasses", "ingressclass", false,
         short: [], cat: [], verbs: STANDARD_VERBS, sub: []),
    res!("networking.k8s.io", "v1", "ServiceCIDR", "servicecidrs", "servicecidr", false,
         short: [], cat: [], verbs: STANDARD_VERBS, sub: [STATUS]),
    res!("networking.k8s.io", "v1", "IPAddress", "ipaddresses", "ipaddress", false,
         short: ["ip"], cat: [], verbs: STANDARD_VERBS, sub: []),
    res!("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", "poddisruptionbudget", true,
         short: ["pdb"], cat: [], verbs: STANDARD_VERBS, sub: [STATUS]),
    res!("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", "clusterrole", false,
         short: [], cat: [], verbs: STANDARD_VERBS, sub: []),
    res!("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", "clusterrolebinding", false,
         short: [], cat: [], verbs: STANDARD_VERBS, sub: []),
    res!("rbac.authorization.k8s.io", "v1", "Role", "roles", "role", true,
         short: [], cat: [], verbs: STANDARD_VERBS, sub: []),
    res!("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", "rolebinding", true,
         short: [], cat: [], verbs: STANDARD_VERBS, sub: []),
    res!("certificates.k8s.io", "v1", "CertificateSigningRequest", "certificatesigningrequests", "certificatesigningrequest", false,
         short: ["csr"], cat: [], verbs: STANDARD_VERBS, sub: [STATUS, APPROVAL]),
    res!("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", "customresourcedefinition", false,
         short: ["crd", "crds"], cat: ["api-extensions"], verbs: STANDARD_VERBS, sub: [STATUS]),
    res!("storage.k8s.io", "v1", "StorageClass", "storageclasses", "storageclass", false,
         short: ["sc"], cat: [], verbs: STANDARD_VERBS, sub: []),
    res!("storage.k8s.io", "v1", "VolumeAttachment", "volumeattachments", "volumeattachment", false,
         short: [], cat: [], verbs: STANDARD_VERBS, sub: [STATUS]),
    res!("storage.k8s.io", "v1", "CSIDriver", "csidrivers", "csidriver", false,
         short: [], cat: [], verbs: STANDARD_VERBS, sub: []),
    res!("storage.k8s.io", "v1", "CSINode", "csinodes", "csinode", false,
         short: [], cat: [], verbs: STANDARD_VERBS, sub: []),
    res!("storage.k8s.io", "v1", "CSIStorageCapacity", "csistoragecapacities", "csistoragecapacity", true,
         short: [], cat: [], verbs: STANDARD_VERBS, sub: []),
    res!("flowcontrol.apiserver.k8s.io", "v1", "FlowSchema", "flowschemas", "flowschema", false,
         short: [], cat: [], verbs: STANDARD_VERBS, sub: [STATUS]),
    res!("flowcontrol.apiserver.k8s.io", "v1", "PriorityLevelConfiguration", "prioritylevelconfigurations", "prioritylevelconfiguration", false,
         short: [], cat: [], verbs: STANDARD_VERBS, sub: [STATUS]),
    res!("apiregistration.k8s.io", "v1", "APIService", "apiservices", "apiservice", false,
         short: [], cat: ["api-extensions"], verbs: STANDARD_VERBS, sub: [STATUS]),
    res!("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy", "validatingadmissionpolicies", "validatingadmissionpolicy", false,
         short: [], cat: ["api-extensions"], verbs: STANDARD_VERBS, sub: [STATUS]),
    res!("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybindings", "validatingadmissionpolicybinding", false,
         short: [], cat: ["api-extensions"], verbs: STANDARD_VERBS, sub: []),
    res!("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration", "mutatingwebhookconfigurations", "mutatingwebhookconfiguration", false,
         short: [], cat: ["api-extensions"], verbs: STANDARD_VERBS, sub: []),
    res!("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration", "validatingwebhookconfigurations", "validatingwebhookconfiguration", false,
         short: [], cat: ["api-extensions"], verbs: STANDARD_VERBS, sub: []),
    // Resource metrics, computed from the kubelets' figures, never stored (metrics-server's API).
    res!("metrics.k8s.io", "v1beta1", "NodeMetrics", "nodes", "", false,
         short: [], cat: [], verbs: &["get", "list"], sub: []),
    res!("metrics.k8s.io", "v1beta1", "PodMetrics", "pods", "", true,
         short: [], cat: [], verbs: &["get", "list"], sub: []),
    // Reviews: created to ask a question, answered in the response, never stored.
    res!("authorization.k8s.io", "v1", "SelfSubjectAccessReview", "selfsubjectaccessreviews", "selfsubjectaccessreview", false,
         short: [], cat: [], verbs: CREATE_ONLY, sub: []),
    res!("authorization.k8s.io", "v1", "SubjectAccessReview", "subjectaccessreviews", "subjectaccessreview", false,
         short: [], cat: [], verbs: CREATE_ONLY, sub: []),
    res!("authorization.k8s.io", "v1", "LocalSubjectAccessReview", "localsubjectaccessreviews", "localsubjectaccessreview", true,
         short: [], cat: [], verbs: CREATE_ONLY, sub: []),
    res!("authorization.k8s.io", "v1", "SelfSubjectRulesReview", "selfsubjectrulesreviews", "selfsubjectrulesreview", false,
         short: [], cat: [], verbs: CREATE_ONLY, sub: []),
    res!("authentication.k8s.io", "v1", "SelfSubjectReview", "selfsubjectreviews", "selfsubjectreview", false,
         short: [], cat: [], verbs: CREATE_ONLY, sub: []),
    res!("authentication.k8s.io", "v1", "TokenReview", "tokenreviews", "tokenreview", false,
         short: [], cat: [], verbs: CREATE_ONLY, sub: []),
];

/// Resources served only while their feature gate is on: InitializerConfigurations
/// (`--feature-gates=Initializers=true`), MutatingAdmissionPolicies and their bindings
/// (`MutatingAdmissionPolicy=true`).
/// A gate's state, and what it serves.
type Gated = (fn() -> bool, ResourceDef);

static ALPHA: &[Gated] = &[
    (
        crate::features::initializers,
        res!("admissionregistration.k8s.io", "v1alpha1", "InitializerConfiguration",
    "initializerconfigurations", "initializerconfiguration", false,
    short: [], cat: [], verbs: STANDARD_VERBS, sub: []),
    ),
    (
        crate::features::mutating_admission_policy,
        res!("admissionregistration.k8s.io", "v1alpha1", "MutatingAdmissionPolicy",
    "mutatingadmissionpolicies", "mutatingadmissionpolicy", false,
    short: [], cat: ["api-extensions"], verbs: STANDARD_VERBS, sub: []),
    ),
    (
        crate::features::mutating_admission_policy,
        res!("admissionregistration.k8s.io", "v1alpha1", "MutatingAdmissionPolicyBinding",
    "mutatingadmissionpolicybindings", "mutatingadmissionpolicybinding", false,
    short: [], cat: ["api-extensions"], verbs: STANDARD_VERBS, sub: []),
    ),
];

/// Every served resource. The gates are set at start, before the first call: the catalogue
/// is made once.
pub fn catalogue() -> &'static [ResourceDef] {
    if ALPHA.iter().any(|(on, _)| on()) {
        static WITH_ALPHA: std::sync::OnceLock<Vec<ResourceDef>> = std::sync::OnceLock::new();
        WITH_ALPHA.get_or_init(|| {
            CATALOGUE
                .iter()
                .copied()
                .chain(ALPHA.iter().filter(|(on, _)| on()).map(|(_, d)| *d))
                .collect()
        })
    } else {
        CATALOGUE
    }
}

/// The resource `plural` in `group`/`version`.
pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static ResourceDef> {
    catalogue()
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The served group versions, core first, each once, in catalogue order.
pub fn group_versions() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for r in catalogue() {
        if !out.contains(&(r.group, r.version)) {
            out.push((r.group, r.version));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_and_names() {
        let d = find("apps", "v1", "deployments").unwrap();
        assert_eq!(d.kind, "Deployment");
        assert_eq!(d.api_version(), "apps/v1");
        assert_eq!(d.group_resource(), "deployments.apps");
        assert_eq!(d.subresource("scale").unwrap().kind, "Scale");
        assert!(find("", "v1", "deployments").is_none());
        let pods = find("", "v1", "pods").unwrap();
        assert_eq!(pods.api_version(), "v1");
        assert_eq!(pods.group_resource(), "pods");
    }

    #[test]
    fn every_entry_is_unique_and_core_comes_first() {
        for (i, a) in CATALOGUE.iter().enumerate() {
            for b in &CATALOGUE[i + 1..] {
                assert!(
                    !(a.group == b.group && a.version == b.version && a.plural == b.plural),
                    "{} listed twice",
                    a.group_resource()
                );
            }
        }
        assert_eq!(group_versions()[0], ("", "v1"));
        assert!(group_versions().contains(&("coordination.k8s.io", "v1")));
    }
}
