//! The catalogue of served resources: each [`Resource`] is a definition (names, scope, verbs,
//! subresources) with the [`Strategy`] that gives its objects their behaviour. The built-in
//! resources are made once; the custom resources of established CustomResourceDefinitions are
//! made while the server runs (`custom::definitions`). Each server's [`Served`] set, reached
//! through the request context (`Shared.served`), says which are served now.

use std::ops::Deref;
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use r8s_api::ResourceDef;

use super::custom::CustomResources;
use super::strategy::{Plain, Strategy};

/// A served resource: its definition and its strategy.
pub(crate) struct Resource {
    pub def: &'static ResourceDef,
    pub strategy: Arc<dyn Strategy>,
    /// The strategy again, typed, for what only custom resources have (their schema, the
    /// CRD's warnings); `None` for built-ins.
    custom_strategy: Option<Arc<CustomResources>>,
}

impl Deref for Resource {
    type Target = ResourceDef;

    fn deref(&self) -> &ResourceDef {
        self.def
    }
}

impl std::fmt::Debug for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Resource({}/{})", self.def.api_version(), self.def.plural)
    }
}

impl Resource {
    /// A custom resource of `def`, served by `strategy`.
    pub fn custom_resource(def: &'static ResourceDef, strategy: Arc<CustomResources>) -> Self {
        Self {
            def,
            strategy: strategy.clone(),
            custom_strategy: Some(strategy),
        }
    }

    /// The strategy of a custom resource (`None` for a built-in).
    pub fn custom(&self) -> Option<&Arc<CustomResources>> {
        self.custom_strategy.as_ref()
    }

    /// Whether `self` and `other` are the same served resource.
    pub fn is(&self, other: &ResourceDef) -> bool {
        std::ptr::eq(self.def, other)
    }
}

/// Every built-in resource with its strategy, in `r8s_api::catalogue()`'s order.
pub(crate) fn builtins() -> &'static [Resource] {
    static BUILTINS: OnceLock<Vec<Resource>> = OnceLock::new();
    BUILTINS.get_or_init(|| {
        r8s_api::catalogue()
            .iter()
            .map(|def| Resource {
                def,
                strategy: builtin_strategy(def).unwrap_or_else(|| Arc::new(Plain)),
                custom_strategy: None,
            })
            .collect()
    })
}

/// The built-in resource `plural` of `group`/`version`.
pub(crate) fn builtin(group: &str, version: &str, plural: &str) -> Option<&'static Resource> {
    builtins()
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// What one API server serves: the built-in resources and the custom resources of its
/// established CustomResourceDefinitions, replaced whole when a CRD changes (readers take
/// the current set without waiting for a writer).
pub(crate) struct Served {
    current: RwLock<Arc<ServedSet>>,
}

/// One generation of the served resources.
pub(crate) struct ServedSet {
    /// Built-ins first, then custom resources by group and version priority.
    pub defs: Vec<&'static Resource>,
    /// Custom resources whose CRD is being deleted: served, but not created.
    pub terminating: Vec<&'static Resource>,
}

impl Served {
    pub fn builtin() -> Self {
        Self {
            current: RwLock::new(Arc::new(ServedSet {
                defs: builtins().iter().collect(),
                terminating: Vec::new(),
            })),
        }
    }

    /// The resources served now.
    pub fn current(&self) -> Arc<ServedSet> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Serve `custom` (and the built-ins); returns the custom definitions no longer served.
    pub fn set_custom(
        &self,
        custom: Vec<&'static Resource>,
        terminating: Vec<&'static Resource>,
    ) -> Vec<&'static Resource> {
        let mut defs: Vec<&'static Resource> = builtins().iter().collect();
        defs.extend(custom);
        let next = Arc::new(ServedSet { defs, terminating });
        let mut cur = self.current.write().unwrap_or_else(PoisonError::into_inner);
        let gone = cur
            .defs
            .iter()
            .filter(|d| d.custom && !next.defs.iter().any(|n| std::ptr::eq(*n, **d)))
            .copied()
            .collect();
        *cur = next;
        gone
    }
}

impl ServedSet {
    /// The resource `plural` in `group`/`version`: a built-in before a custom one.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<&'static Resource> {
        self.defs
            .iter()
            .find(|r| r.group == group && r.version == version && r.plural == plural)
            .copied()
    }

    /// The served group versions, core first, each once, in catalogue order (a custom
    /// group's versions by priority: its preferred version first).
    pub fn group_versions(&self) -> Vec<(&'static str, &'static str)> {
        let mut out: Vec<(&'static str, &'static str)> = Vec::new();
        for r in &self.defs {
            if !out.contains(&(r.group, r.version)) {
                out.push((r.group, r.version));
            }
        }
        out
    }

    /// Whether `group`/`version` is served here.
    pub fn find_group_version(&self, group: &str, version: &str) -> Option<()> {
        self.defs
            .iter()
            .any(|d| d.group == group && d.version == version)
            .then_some(())
    }

    /// The served groups but the core one, in order.
    pub fn groups(&self) -> Vec<&'static str> {
        let mut groups: Vec<&'static str> = Vec::new();
        for (g, _) in self.group_versions() {
            if !g.is_empty() && !groups.contains(&g) {
                groups.push(g);
            }
        }
        groups
    }

    pub fn is_terminating(&self, def: &ResourceDef) -> bool {
        self.terminating.iter().any(|t| t.is(def))
    }
}

/// Upstream's version priority (`version.CompareKubeAwareVersionStrings`): GA before beta
/// before alpha, higher numbers first, then anything else alphabetically.
pub(crate) fn version_order(a: &str, b: &str) -> std::cmp::Ordering {
    fn key(v: &str) -> (u8, i64, i64, String) {
        let parse = || -> Option<(i64, u8, i64)> {
            let rest = v.strip_prefix('v')?;
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            let major: i64 = digits.parse().ok()?;
            let tail = &rest[digits.len()..];
            if tail.is_empty() {
                return Some((major, 0, 0));
            }
            for (word, rank) in [("beta", 1u8), ("alpha", 2u8)] {
                if let Some(n) = tail.strip_prefix(word) {
                    if n.is_empty() {
                        return Some((major, rank, 0));
                    }
                    return Some((major, rank, n.parse().ok()?));
                }
            }
            None
        };
        match parse() {
            Some((major, rank, minor)) => (rank, -major, -minor, String::new()),
            None => (3, 0, 0, v.to_owned()),
        }
    }
    key(a).cmp(&key(b))
}

/// The strategy of a built-in resource. Leases and the reviews (never stored) need nothing of
/// their own: they have none here, and get the plain strategy.
fn builtin_strategy(def: &ResourceDef) -> Option<Arc<dyn Strategy>> {
    use super::*;
    if (def.group, def.version, def.plural) == ("autoscaling", "v1", "horizontalpodautoscalers") {
        // Served as v1 and stored as v2.
        return Some(Arc::new(autoscaling::HorizontalPodAutoscalers { v1: true }));
    }
    Some(match (def.group, def.plural) {
        ("", "namespaces") => Arc::new(namespaces::Namespaces),
        ("", "pods") => Arc::new(pods::Pods),
        ("", "nodes") => Arc::new(nodes::Nodes),
        ("", "services") => Arc::new(services::Services),
        ("", "endpoints") => Arc::new(endpoints::Endpoints),
        ("", "configmaps") => Arc::new(configmaps::ConfigMaps),
        ("", "persistentvolumeclaims") => Arc::new(storage::PersistentVolumeClaims),
        ("", "persistentvolumes") => Arc::new(storage::PersistentVolumes),
        ("", "secrets") => Arc::new(secrets::Secrets),
        ("", "serviceaccounts") => Arc::new(serviceaccounts::ServiceAccounts),
        ("", "events") => Arc::new(events::Events {
            stored_as_core: false,
        }),
        ("", "limitranges") => Arc::new(limitranges::LimitRanges),
        ("", "resourcequotas") => Arc::new(resourcequotas::ResourceQuotas),
        ("apps", "deployments") => Arc::new(apps::Workloads { deployment: true }),
        ("apps", "replicasets") => Arc::new(apps::Workloads { deployment: false }),
        ("apps", "statefulsets") => Arc::new(workloads::StatefulSets),
        ("apps", "daemonsets") => Arc::new(workloads::DaemonSets),
        ("apps", "controllerrevisions") => Arc::new(workloads::ControllerRevisions),
        ("", "replicationcontrollers") => Arc::new(workloads::ReplicationControllers),
        ("", "podtemplates") => Arc::new(workloads::PodTemplates),
        ("", "componentstatuses") => Arc::new(componentstatuses::ComponentStatuses),
        ("batch", "jobs") => Arc::new(batch::Jobs),
        ("autoscaling", "horizontalpodautoscalers") => {
            Arc::new(autoscaling::HorizontalPodAutoscalers { v1: false })
        }
        ("metrics.k8s.io", "nodes") => Arc::new(resource_metrics::ResourceMetrics),
        ("metrics.k8s.io", "pods") => Arc::new(resource_metrics::ResourceMetrics),
        ("batch", "cronjobs") => Arc::new(batch::CronJobs),
        ("apiextensions.k8s.io", "customresourcedefinitions") => Arc::new(custom::CustomResourceDefinitions),
        ("storage.k8s.io", "storageclasses") => Arc::new(storage_api::StorageClasses),
        ("storage.k8s.io", "volumeattachments") => Arc::new(storage_api::VolumeAttachments),
        ("storage.k8s.io", "csidrivers") => Arc::new(storage_api::CsiDrivers),
        ("storage.k8s.io", "csinodes") => Arc::new(storage_api::CsiNodes),
        ("storage.k8s.io", "csistoragecapacities") => Arc::new(storage_api::CsiStorageCapacities),
        ("flowcontrol.apiserver.k8s.io", "flowschemas") => Arc::new(flowcontrol::FlowSchemas),
        ("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations") => {
            Arc::new(flowcontrol::PriorityLevels)
        }
        ("apiregistration.k8s.io", "apiservices") => Arc::new(apiservices::ApiServices),
        ("policy", "poddisruptionbudgets") => Arc::new(disruption::PodDisruptionBudgets),
        ("events.k8s.io", "events") => Arc::new(events::Events { stored_as_core: true }),
        ("discovery.k8s.io", "endpointslices") => Arc::new(endpoints::EndpointSlices),
        ("scheduling.k8s.io", "priorityclasses") => Arc::new(priorityclasses::PriorityClasses),
        ("networking.k8s.io", "servicecidrs") => Arc::new(service_cidrs::ServiceCidrs),
        ("networking.k8s.io", "ipaddresses") => Arc::new(service_cidrs::IpAddresses),
        ("node.k8s.io", "runtimeclasses") => Arc::new(runtimeclasses::RuntimeClasses),
        ("networking.k8s.io", "networkpolicies") => Arc::new(networkpolicies::NetworkPolicies),
        ("networking.k8s.io", "ingresses") => Arc::new(ingresses::Ingresses),
        ("networking.k8s.io", "ingressclasses") => Arc::new(ingresses::IngressClasses),
        ("rbac.authorization.k8s.io", "clusterroles") => Arc::new(rbac::Roles { cluster: true }),
        ("rbac.authorization.k8s.io", "roles") => Arc::new(rbac::Roles { cluster: false }),
        ("rbac.authorization.k8s.io", "clusterrolebindings") => Arc::new(rbac::Bindings { cluster: true }),
        ("rbac.authorization.k8s.io", "rolebindings") => Arc::new(rbac::Bindings { cluster: false }),
        ("certificates.k8s.io", "certificatesigningrequests") => {
            Arc::new(certificates::CertificateSigningRequests)
        }
        ("admissionregistration.k8s.io", "validatingadmissionpolicies") => {
            Arc::new(admission_policies::Policies)
        }
        ("admissionregistration.k8s.io", "validatingadmissionpolicybindings") => {
            Arc::new(admission_policies::Bindings)
        }
        ("admissionregistration.k8s.io", "mutatingadmissionpolicies") => {
            Arc::new(admission_policies::MutatingPolicies)
        }
        ("admissionregistration.k8s.io", "mutatingadmissionpolicybindings") => {
            Arc::new(admission_policies::MutatingBindings)
        }
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations") => {
            Arc::new(webhook_configuration::WebhookConfigurations { mutating: true })
        }
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations") => {
            Arc::new(webhook_configuration::WebhookConfigurations { mutating: false })
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Served resources that knowingly have no strategy of their own (besides the reviews,
    /// which are never stored).
    const PLAIN: &[(&str, &str)] = &[
        ("coordination.k8s.io", "leases"),
        ("admissionregistration.k8s.io", "initializerconfigurations"),
    ];

    /// Subresources that are views of the object (the generic `subresource` module serves
    /// them) or streams the handler serves before the registry.
    const NOT_CONNECTED: &[&str] = &[
        "status",
        "scale",
        "finalize",
        "approval",
        "resize",
        "ephemeralcontainers",
        "exec",
        "attach",
        "portforward",
    ];

    #[test]
    fn every_built_in_resource_has_its_strategy_and_its_table_rows_fit_its_columns() {
        let samples = [
            json!({}),
            json!({
                "metadata": {"name": "x", "namespace": "ns", "creationTimestamp": "2020-01-01T00:00:00Z",
                             "labels": {"node-role.kubernetes.io/control-plane": ""}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}], "ports": [{"port": 80, "nodePort": 30080}],
                         "selector": {"app": "x"}, "hard": {"pods": "2", "limits.cpu": "1"}},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
                "subsets": [{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}]}],
                "endpoints": [{"addresses": ["10.0.0.1"]}], "ports": [{"port": 80}],
                "data": {"a": "b"}, "subjects": [{"kind": "User", "name": "u"}], "webhooks": [{}],
            }),
        ];
        assert_eq!(builtins().len(), r8s_api::catalogue().len());
        for res in builtins() {
            let def = res.def;
            let what = def.group_resource();
            if builtin_strategy(def).is_none() {
                assert!(
                    def.is_review() || PLAIN.contains(&(def.group, def.plural)),
                    "{what} has no strategy of its own"
                );
            }
            let strategy = &res.strategy;
            assert_eq!(
                strategy.status_subresource(),
                def.subresource("status").is_some(),
                "{what}: status subresource"
            );
            for sub in def.subresources {
                if !NOT_CONNECTED.contains(&sub.name) {
                    assert!(
                        strategy.connect(sub.name).is_some(),
                        "{what}/{} is not served",
                        sub.name
                    );
                }
            }
            let columns = strategy.columns().len();
            for obj in &samples {
                assert_eq!(strategy.cells(obj).len(), columns, "{what}: cells and columns");
            }
        }
    }

    #[test]
    fn versions_are_ordered_as_upstream_prefers_them() {
        let mut v = vec![
            "v1alpha1", "foo", "v2beta1", "v1", "v1beta2", "v2", "v10beta3", "bar",
        ];
        v.sort_by(|a, b| version_order(a, b));
        assert_eq!(
            v,
            ["v2", "v1", "v10beta3", "v2beta1", "v1beta2", "v1alpha1", "bar", "foo"]
        );
    }
}
