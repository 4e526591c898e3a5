//! What the API server makes at start, as upstream's bootstrap controllers do: the
//! `default`, `kube-system`, `kube-public` and `kube-node-lease` namespaces, and the
//! `system-node-critical` and `system-cluster-critical` PriorityClasses.

use r8s_store::{Store, StoreError};
use serde_json::{json, Value};

use crate::registry;

const SYSTEM_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

pub(crate) async fn ensure_namespaces(store: &dyn Store) -> Result<(), StoreError> {
    let def =
        crate::registry::catalogue::builtin("", "v1", "namespaces").expect("namespaces are in the catalogue");
    for ns in SYSTEM_NAMESPACES {
        let obj = json!({
            "kind": "Namespace",
            "apiVersion": "v1",
            "metadata": {
                "name": ns,
                "uid": uuid::Uuid::new_v4().to_string(),
                "creationTimestamp": registry::meta::now_rfc3339(),
                "labels": {"kubernetes.io/metadata.name": ns},
            },
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        });
        let value = registry::encode(def, &obj);
        create_if_absent(store, &registry::key(def, "", ns), value).await?;
    }
    Ok(())
}

pub(crate) async fn ensure_priority_classes(store: &dyn Store) -> Result<(), StoreError> {
    let def = crate::registry::catalogue::builtin("scheduling.k8s.io", "v1", "priorityclasses")
        .expect("in the catalogue");
    for (name, value, description) in [
        ("system-node-critical", 2_000_001_000, "Used for system critical pods that must not be moved from their current node."),
        ("system-cluster-critical", 2_000_000_000, "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary."),
    ] {
        let obj = json!({
            "kind": "PriorityClass",
            "apiVersion": "scheduling.k8s.io/v1",
            "metadata": {
                "name": name,
                "uid": uuid::Uuid::new_v4().to_string(),
                "creationTimestamp": registry::meta::now_rfc3339(),
            },
            "value": value,
            "globalDefault": false,
            "description": description,
            "preemptionPolicy": "PreemptLowerPriority",
        });
        create_if_absent(store, &registry::key(def, "", name), registry::encode(def, &obj)).await?;
    }
    Ok(())
}

/// The `kubernetes` Service in `default`, on the first address of the service range, as
/// upstream's bootstrap controller makes it. (Its endpoints: [`ensure_kubernetes_endpoints`].)
pub(crate) async fn ensure_kubernetes_service(
    store: &dyn Store,
    cidr: registry::allocator::ServiceCidr,
    port: u16,
) -> Result<(), StoreError> {
    let def = crate::registry::catalogue::builtin("", "v1", "services").expect("in the catalogue");
    let ip = cidr.first().to_string();
    create_if_absent(
        store,
        &format!("/registry/ranges/serviceips/{ip}"),
        bytes::Bytes::from("default/kubernetes"),
    )
    .await?;
    let obj = json!({
        "kind": "Service",
        "apiVersion": "v1",
        "metadata": {
            "name": "kubernetes",
            "namespace": "default",
            "uid": uuid::Uuid::new_v4().to_string(),
            "creationTimestamp": registry::meta::now_rfc3339(),
            "labels": {"component": "apiserver", "provider": "kubernetes"},
        },
        "spec": {
            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}],
            "clusterIP": ip,
            "clusterIPs": [ip],
            "type": "ClusterIP",
            "sessionAffinity": "None",
            "ipFamilies": [cidr.family().name()],
            "ipFamilyPolicy": "SingleStack",
            "internalTrafficPolicy": "Cluster",
        },
        "status": {"loadBalancer": {}},
    });
    create_if_absent(
        store,
        &registry::key(def, "default", "kubernetes"),
        registry::encode(def, &obj),
    )
    .await
}

/// The `kubernetes` Service's Endpoints and EndpointSlice: the live API servers' addresses
/// (`ips`, of one family) and their port, put right when they say otherwise, as upstream's
/// endpoint reconciler keeps them (see `endpoint_reconciler`). Services without a selector are
/// left to whoever writes their endpoints, so the controllers do not touch these.
pub(crate) async fn ensure_kubernetes_endpoints(
    store: &dyn Store,
    ips: &[std::net::IpAddr],
    port: u16,
) -> Result<(), StoreError> {
    let mut ips: Vec<std::net::IpAddr> = ips.to_vec();
    ips.sort();
    ips.dedup();
    let address_type = if ips.first().is_some_and(|ip| ip.is_ipv6()) {
        "IPv6"
    } else {
        "IPv4"
    };
    let ips: Vec<String> = ips.iter().map(|ip| ip.to_string()).collect();
    let endpoints = crate::registry::catalogue::builtin("", "v1", "endpoints").expect("in the catalogue");
    let addresses: Vec<Value> = ips.iter().map(|ip| json!({"ip": ip})).collect();
    let subsets = json!([{
        "addresses": addresses,
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    }]);
    let labels = json!({"endpointslice.kubernetes.io/skip-mirror": "true"});
    upsert(
        store,
        endpoints,
        "kubernetes",
        json!({"kind": "Endpoints", "apiVersion": "v1"}),
        labels,
        |o| {
            o["subsets"] = subsets.clone();
        },
    )
    .await?;
    let slices = crate::registry::catalogue::builtin("discovery.k8s.io", "v1", "endpointslices")
        .expect("in the catalogue");
    let labels = json!({"kubernetes.io/service-name": "kubernetes"});
    upsert(
        store,
        slices,
        "kubernetes",
        json!({"kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1"}),
        labels,
        |o| {
            o["addressType"] = json!(address_type);
            o["endpoints"] = ips
                .iter()
                .map(|ip| json!({"addresses": [ip], "conditions": {"ready": true}}))
                .collect();
            o["ports"] = json!([{"name": "https", "port": port, "protocol": "TCP"}]);
        },
    )
    .await
}

/// Create `default/<name>` of `def` from `head`, or update it, so that `fill` and `labels`
/// hold; nothing is written when they already do.
async fn upsert(
    store: &dyn Store,
    def: &crate::registry::Resource,
    name: &str,
    head: Value,
    labels: Value,
    fill: impl Fn(&mut Value),
) -> Result<(), StoreError> {
    let key = registry::key(def, "default", name);
    let current = store.get(&key, 0).await?.kv;
    let (mut obj, rev) = match &current {
        Some(kv) => match serde_json::from_slice::<Value>(&kv.value) {
            Ok(v) => (v, Some(kv.mod_revision)),
            Err(_) => (head.clone(), Some(kv.mod_revision)),
        },
        None => (head.clone(), None),
    };
    let before = obj.clone();
    if rev.is_none() {
        obj["metadata"] = json!({
            "name": name,
            "namespace": "default",
            "uid": uuid::Uuid::new_v4().to_string(),
            "creationTimestamp": registry::meta::now_rfc3339(),
        });
    }
    obj["metadata"]["labels"] = labels;
    fill(&mut obj);
    if rev.is_some() && obj == before {
        return Ok(());
    }
    if let Some(m) = obj["metadata"].as_object_mut() {
        m.remove("resourceVersion");
    }
    let value = registry::encode(def, &obj);
    match rev {
        Some(rev) => store.update(&key, value, rev).await.map(|_| ()),
        None => create_if_absent(store, &key, value).await,
    }
}

async fn create_if_absent(store: &dyn Store, key: &str, value: bytes::Bytes) -> Result<(), StoreError> {
    match store.create(key, value).await {
        Ok(_) | Err(StoreError::AlreadyExists { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The default roles and bindings of [`crate::rbac::bootstrap_policy`]: created when missing,
/// and, as upstream's reconciliation does, topped up with rules or subjects an older version
/// lacked unless an object is annotated `rbac.authorization.kubernetes.io/autoupdate: "false"`.
/// Nothing an administrator added is removed; the rules of aggregated ClusterRoles are left to
/// the aggregation controller.
pub(crate) async fn ensure_rbac_policy(store: &dyn Store) -> Result<(), StoreError> {
    let policy = crate::rbac::bootstrap_policy::policy();
    let mut objects: Vec<(&str, Value)> = Vec::new();
    let value = |o: Result<Value, serde_json::Error>| o.expect("policy objects serialize");
    objects.extend(
        policy
            .cluster_roles
            .iter()
            .map(|o| ("clusterroles", value(serde_json::to_value(o)))),
    );
    objects.extend(
        policy
            .roles
            .iter()
            .map(|o| ("roles", value(serde_json::to_value(o)))),
    );
    objects.extend(
        policy
            .cluster_role_bindings
            .iter()
            .map(|o| ("clusterrolebindings", value(serde_json::to_value(o)))),
    );
    objects.extend(
        policy
            .role_bindings
            .iter()
            .map(|o| ("rolebindings", value(serde_json::to_value(o)))),
    );
    for (plural, mut obj) in objects {
        let def = crate::registry::catalogue::builtin("rbac.authorization.k8s.io", "v1", plural)
            .expect("in the catalogue");
        let ns = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        let key = registry::key(def, &ns, &name);
        let existing = store.get(&key, 0).await?.kv;
        let Some(kv) = existing else {
            obj["metadata"]["uid"] = json!(uuid::Uuid::new_v4().to_string());
            obj["metadata"]["creationTimestamp"] = json!(registry::meta::now_rfc3339());
            create_if_absent(store, &key, registry::encode(def, &obj)).await?;
            continue;
        };
        let Ok(mut current) = serde_json::from_slice::<Value>(&kv.value) else {
            continue;
        };
        if current["metadata"]["annotations"]["rbac.authorization.kubernetes.io/autoupdate"] == "false" {
            continue;
        }
        let before = current.clone();
        for field in ["labels", "annotations"] {
            for (k, v) in obj["metadata"][field].as_object().into_iter().flatten() {
                if current["metadata"][field].get(k).is_none() {
                    current["metadata"][field][k] = v.clone();
                }
            }
        }
        if !obj["aggregationRule"].is_null() {
            current["aggregationRule"] = obj["aggregationRule"].clone();
        } else {
            let list = if plural.ends_with("bindings") {
                "subjects"
            } else {
                "rules"
            };
            for item in obj[list].as_array().cloned().unwrap_or_default() {
                let have = current[list].as_array().is_some_and(|a| a.contains(&item));
                if !have {
                    if !current[list].is_array() {
                        current[list] = json!([]);
                    }
                    current[list].as_array_mut().expect("an array").push(item);
                }
            }
        }
        if current != before {
            tracing::info!(resource = plural, %name, "reconciling a default RBAC object");
            match store
                .update(&key, registry::encode(def, &current), kv.mod_revision)
                .await
            {
                Ok(_) | Err(StoreError::Conflict { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// API priority and fairness's mandatory and suggested configuration, created when absent
/// (a cluster's own changes are kept).
pub(crate) async fn ensure_flow_control(store: &dyn Store) -> Result<(), StoreError> {
    let (levels, schemas) = registry::flowcontrol::bootstrap_objects();
    for (plural, objects) in [("prioritylevelconfigurations", levels), ("flowschemas", schemas)] {
        let def = crate::registry::catalogue::builtin("flowcontrol.apiserver.k8s.io", "v1", plural)
            .expect("in the catalogue");
        for obj in objects {
            let name = registry::meta::name(&obj).to_owned();
            create_if_absent(store, &registry::key(def, "", &name), registry::encode(def, &obj)).await?;
        }
    }
    Ok(())
}

/// `kube-system/extension-apiserver-authentication`: what aggregated API servers read to trust
/// this server's client certificates and its front proxy's request headers (upstream's
/// cluster-authentication-trust controller). Rewritten at every start.
pub(crate) async fn ensure_extension_authentication(
    store: &dyn Store,
    client_ca: &str,
    request_header: Option<&crate::authn::RequestHeaderConfig>,
) -> Result<(), StoreError> {
    let def = crate::registry::catalogue::builtin("", "v1", "configmaps").expect("in the catalogue");
    let mut data = serde_json::json!({"client-ca-file": client_ca});
    if let Some(r) = request_header {
        // Lists as JSON text, as upstream writes them.
        let list = |l: &[String]| serde_json::json!(serde_json::to_string(l).unwrap_or_default());
        data["requestheader-client-ca-file"] = serde_json::json!(r.client_ca_pem);
        data["requestheader-allowed-names"] = list(&r.allowed_names);
        data["requestheader-username-headers"] = list(&r.username_headers);
        data["requestheader-group-headers"] = list(&r.group_headers);
        data["requestheader-extra-headers-prefix"] = list(&r.extra_headers_prefix);
        data["requestheader-uid-headers"] = list(&r.uid_headers);
    }
    let name = "extension-apiserver-authentication";
    let key = registry::key(def, "kube-system", name);
    let obj = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "kube-system", "uid": uuid::Uuid::new_v4().to_string(),
            "creationTimestamp": registry::meta::now_rfc3339()},
        "data": data});
    match store.get(&key, 0).await?.kv {
        None => create_if_absent(store, &key, registry::encode(def, &obj)).await,
        Some(kv) => {
            let mut current: serde_json::Value = serde_json::from_slice(&kv.value).unwrap_or_default();
            if current["data"] == obj["data"] {
                return Ok(());
            }
            current["data"] = obj["data"].clone();
            match store
                .update(&key, registry::encode(def, &current), kv.mod_revision)
                .await
            {
                Ok(_) | Err(StoreError::Conflict { .. }) => Ok(()),
                Err(e) => Err(e),
            }
        }
    }
}

/// An APIService for every built-in group version, served locally (upstream's
/// apiservice-registration-controller registers them so at start).
pub(crate) async fn ensure_local_apiservices(store: &dyn Store) -> Result<(), StoreError> {
    let def = crate::registry::catalogue::builtin("apiregistration.k8s.io", "v1", "apiservices")
        .expect("in the catalogue");
    for (i, (group, version)) in r8s_api::group_versions().into_iter().enumerate() {
        let obj = registry::apiservices::local(group, version, i, "onstart");
        let name = registry::meta::name(&obj).to_owned();
        create_if_absent(store, &registry::key(def, "", &name), registry::encode(def, &obj)).await?;
    }
    Ok(())
}

/// The default ServiceCIDR, `kubernetes`, for the server's Service ranges (upstream's
/// default-servicecidr controller); kept as it is once made.
pub(crate) async fn ensure_default_service_cidr(
    store: &dyn Store,
    cidrs: &crate::ServiceCidrs,
) -> Result<(), StoreError> {
    let def = crate::registry::catalogue::builtin("networking.k8s.io", "v1", "servicecidrs")
        .expect("in the catalogue");
    let ranges: Vec<String> = cidrs.iter().map(|c| c.to_string()).collect();
    let obj = registry::service_cidrs::default_object(&ranges);
    let name = registry::service_cidrs::DEFAULT_NAME;
    create_if_absent(store, &registry::key(def, "", name), registry::encode(def, &obj)).await
}

#[cfg(test)]
mod endpoint_tests {
    use super::*;

    #[tokio::test]
    async fn the_kubernetes_endpoints_follow_the_server_and_are_not_rewritten_needlessly() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            r8s_store::embedded::EmbeddedStore::open(r8s_store::embedded::EmbeddedOptions::new(dir.path()))
                .unwrap();
        let ip: std::net::IpAddr = "192.0.2.10".parse().unwrap();
        let key = |plural: &str| {
            let def = r8s_api::catalogue().iter().find(|d| d.plural == plural).unwrap();
            registry::key(def, "default", "kubernetes")
        };
        let (ep_key, slice_key) = (key("endpoints"), key("endpointslices"));
        let read = |key: &String| {
            let (store, key) = (&store, key.clone());
            async move {
                let key = key.as_str();
                let kv = store.get(key, 0).await.unwrap().kv.unwrap();
                (
                    serde_json::from_slice::<Value>(&kv.value).unwrap(),
                    kv.mod_revision,
                )
            }
        };
        ensure_kubernetes_endpoints(&store, &[ip], 6443).await.unwrap();
        let (ep, rev) = read(&ep_key).await;
        assert_eq!(
            ep["subsets"],
            json!([{"addresses": [{"ip": "192.0.2.10"}], "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}])
        );
        let (slice, _) = read(&slice_key).await;
        assert_eq!(slice["endpoints"][0]["addresses"], json!(["192.0.2.10"]));
        assert_eq!(
            slice["metadata"]["labels"]["kubernetes.io/service-name"],
            "kubernetes"
        );
        // Same again: nothing written.
        ensure_kubernetes_endpoints(&store, &[ip], 6443).await.unwrap();
        assert_eq!(read(&ep_key).await.1, rev);
        // Another port: put right, the object's identity kept.
        ensure_kubernetes_endpoints(&store, &[ip], 7443).await.unwrap();
        let (moved, rev2) = read(&ep_key).await;
        assert!(rev2 > rev);
        assert_eq!(moved["subsets"][0]["ports"][0]["port"], 7443);
        assert_eq!(moved["metadata"]["uid"], ep["metadata"]["uid"]);
    }
}
