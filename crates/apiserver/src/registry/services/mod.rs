//! Services (upstream's `pkg/registry/core/service`): defaults, validation, the table, and
//! what the registry does beyond the generic path: cluster IPs and node ports allocated on
//! create (begin-create), kept on update, released on delete (after-delete).

use std::collections::HashSet;

use async_trait::async_trait;
use r8s_api::validation::{dns1035_label, dns1123_subdomain, FieldError};
use serde_json::{json, Value};

use super::allocator::{self, AllocError, IpFamily, Pool};
use super::meta;
use super::pods::validation as pod_validation;
use super::strategy::{
    age_cell, col, keep_status, name_cell, wide, Column, Connect, Finish, Strategy, AGE, NAME,
};
use crate::context::Ctx;
use crate::status::ApiError;

pub(crate) struct Services;

#[async_trait]
impl Strategy for Services {
    fn tracks_generation(&self) -> bool {
        true
    }

    fn status_subresource(&self) -> bool {
        true
    }

    /// A new Service's status is upstream's empty `ServiceStatus`, which encodes as
    /// `{"loadBalancer": {}}` (clients such as the Python one expect the field).
    fn prepare_for_create(&self, _user: &crate::authn::UserInfo, obj: &mut Value) {
        super::strategy::drop_status(obj);
        obj["status"] = json!({"loadBalancer": {}});
        families::normalize_create(obj);
    }

    fn prepare_for_update(&self, obj: &mut Value, old: &Value) -> Result<(), ApiError> {
        keep_status(obj, old);
        families::normalize_update(obj, old);
        drop_type_dependent_fields(obj, old);
        keep_allocations(obj, old);
        Ok(())
    }

    fn default(&self, obj: &mut Value) {
        default(obj);
    }

    /// Upstream's `ValidateServiceName`: a DNS-1035 label (a Service's name becomes a DNS
    /// name and an environment variable prefix, so it may not start with a digit).
    fn validate_name(&self, name: &str) -> Vec<String> {
        dns1035_label(name)
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        validate(&mut errs, obj);
        errs.extend(families::validate(obj));
        errs
    }

    fn validate_update(&self, obj: &Value, old: &Value) -> Vec<FieldError> {
        families::validate_update(obj, old)
    }

    /// The cluster IP and node ports, given back unless the service is stored.
    async fn begin_create(&self, ctx: &Ctx, obj: &mut Value) -> Result<Option<Box<dyn Finish>>, ApiError> {
        let allocations = allocate(ctx, obj, &[], None).await?;
        Ok(Some(Box::new(ReleaseUnlessStored(allocations))))
    }

    /// What the updated Service needs and does not hold yet (a type now needing node ports,
    /// a health-check port, a cluster IP) is allocated; what it no longer holds is released
    /// once the update is stored.
    async fn begin_update(
        &self,
        ctx: &Ctx,
        obj: &mut Value,
        old: &Value,
    ) -> Result<Option<Box<dyn Finish>>, ApiError> {
        let before = allocations(ctx, old);
        let added = allocate(ctx, obj, &before, Some(old)).await?;
        let after = allocations(ctx, obj);
        let released = before.into_iter().filter(|a| !after.contains(a)).collect();
        Ok(Some(Box::new(UpdateAllocations { added, released })))
    }

    async fn after_delete(&self, ctx: &Ctx, old: &Value) {
        release(ctx, &allocations(ctx, old)).await;
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col("Type", "string", "The type of the service"),
            col("Cluster-IP", "string", "The cluster IP of the service"),
            col("External-IP", "string", "The external IPs of the service"),
            col("Port(s)", "string", "The ports of the service"),
            AGE,
            wide("Selector", "The selector of the service"),
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let spec = &obj["spec"];
        let ports: Vec<String> = spec["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                let mut s = p["port"].to_string();
                if let Some(np) = p["nodePort"].as_i64().filter(|n| *n != 0) {
                    s.push_str(&format!(":{np}"));
                }
                format!("{s}/{}", p["protocol"].as_str().unwrap_or("TCP"))
            })
            .collect();
        let sel = meta::string_map(&spec["selector"]);
        let sel: Vec<String> = sel.iter().map(|(k, v)| format!("{k}={v}")).collect();
        vec![
            name_cell(obj),
            json!(spec["type"].as_str().unwrap_or("ClusterIP")),
            json!(spec["clusterIP"].as_str().unwrap_or("<none>")),
            json!(external_ip(obj)),
            json!(if ports.is_empty() {
                "<none>".to_owned()
            } else {
                ports.join(",")
            }),
            age_cell(obj),
            json!(if sel.is_empty() {
                "<none>".to_owned()
            } else {
                sel.join(",")
            }),
        ]
    }

    fn connect(&self, sub: &str) -> Option<Connect> {
        (sub == "proxy").then_some(Connect::ServiceProxy)
    }
}

/// The External-IP column as upstream's printer fills it: external IPs (and, for a
/// LoadBalancer, its ingress first, or `<pending>` while it has none); an ExternalName's name.
fn external_ip(obj: &Value) -> String {
    let spec = &obj["spec"];
    let externals: Vec<&str> = spec["externalIPs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    match spec["type"].as_str().unwrap_or("ClusterIP") {
        "ClusterIP" | "NodePort" if externals.is_empty() => "<none>".into(),
        "ClusterIP" | "NodePort" => externals.join(","),
        "LoadBalancer" => {
            let mut lb: String = obj["status"]["loadBalancer"]["ingress"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|i| i["ip"].as_str().or(i["hostname"].as_str()))
                .collect::<Vec<_>>()
                .join(",");
            // Not wide: long lists are cut, as upstream's loadBalancerStatusStringer.
            if lb.len() > 16 {
                lb = format!("{}...", &lb[..13]);
            }
            match (lb.is_empty(), externals.is_empty()) {
                (true, true) => "<pending>".into(),
                (false, true) => lb,
                (true, false) => externals.join(","),
                (false, false) => format!("{lb},{}", externals.join(",")),
            }
        }
        "ExternalName" => spec["externalName"].as_str().unwrap_or_default().into(),
        _ => "<unknown>".into(),
    }
}

/// Allocations to give back if the create does not store the service.
struct ReleaseUnlessStored(Vec<(Pool, String)>);

#[async_trait]
impl Finish for ReleaseUnlessStored {
    async fn finish(self: Box<Self>, ctx: &Ctx, stored: bool) {
        if !stored {
            release(ctx, &self.0).await;
        }
    }
}

/// On update: what was allocated for it (given back unless stored) and what it gave up
/// (given back once stored).
struct UpdateAllocations {
    added: Vec<(Pool, String)>,
    released: Vec<(Pool, String)>,
}

#[async_trait]
impl Finish for UpdateAllocations {
    async fn finish(self: Box<Self>, ctx: &Ctx, stored: bool) {
        release(ctx, if stored { &self.released } else { &self.added }).await;
    }
}

/// Upstream's `SetDefaults_Service`.
fn default(obj: &mut Value) {
    let spec = &mut obj["spec"];
    if !spec.is_object() {
        return;
    }
    if spec.get("type").is_none_or(Value::is_null) {
        spec["type"] = json!("ClusterIP");
    }
    if spec.get("sessionAffinity").is_none_or(Value::is_null) {
        spec["sessionAffinity"] = json!("None");
    }
    // Client affinity lasts three hours unless the service says otherwise; without
    // affinity there is nothing to configure.
    match spec["sessionAffinity"].as_str() {
        Some("None") => {
            if let Some(s) = spec.as_object_mut() {
                s.remove("sessionAffinityConfig");
            }
        }
        Some("ClientIP") if spec["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"].is_null() => {
            spec["sessionAffinityConfig"] = json!({"clientIP": {"timeoutSeconds": 10800}});
        }
        _ => {}
    }
    if spec["type"] == "LoadBalancer"
        && spec
            .get("allocateLoadBalancerNodePorts")
            .is_none_or(Value::is_null)
    {
        spec["allocateLoadBalancerNodePorts"] = json!(true);
    }
    let kind = spec["type"].as_str().unwrap_or("").to_owned();
    if matches!(kind.as_str(), "NodePort" | "LoadBalancer")
        && spec.get("externalTrafficPolicy").is_none_or(Value::is_null)
    {
        spec["externalTrafficPolicy"] = json!("Cluster");
    }
    if matches!(kind.as_str(), "ClusterIP" | "NodePort" | "LoadBalancer")
        && spec.get("internalTrafficPolicy").is_none_or(Value::is_null)
    {
        spec["internalTrafficPolicy"] = json!("Cluster");
    }
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports {
            if p.get("protocol").is_none_or(Value::is_null) {
                p["protocol"] = json!("TCP");
            }
            // 0 and "" are Go's zero IntOrString, what client-go sends for an unset targetPort.
            let unset = match p.get("targetPort") {
                None | Some(Value::Null) => true,
                Some(Value::Number(n)) => n.as_i64() == Some(0),
                Some(Value::String(s)) => s.is_empty(),
                Some(_) => false,
            };
            if unset {
                p["targetPort"] = p["port"].clone();
            }
        }
    }
}

/// A Service's spec as upstream's `ValidateService` words its errors (ports, type, session
/// affinity, external name, selector), checked after defaulting and before any address is
/// allocated.
fn validate(errs: &mut Vec<FieldError>, obj: &Value) {
    let spec = &obj["spec"];
    let kind = spec["type"].as_str().unwrap_or("");
    let headless = spec["clusterIP"] == "None";
    let ports: &[Value] = spec["ports"].as_array().map_or(&[], Vec::as_slice);
    if ports.is_empty() && !headless && kind != "ExternalName" {
        errs.push(FieldError::required("spec.ports", ""));
    }
    if kind == "ExternalName" {
        let cname = spec["externalName"].as_str().unwrap_or("");
        let cname = cname.strip_suffix('.').unwrap_or(cname);
        if cname.is_empty() {
            errs.push(FieldError::required("spec.externalName", ""));
        } else {
            for m in dns1123_subdomain(cname) {
                errs.push(FieldError::invalid("spec.externalName", cname, m));
            }
        }
    }
    let mut names = HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        let at = format!("spec.ports[{i}]");
        let name = p["name"].as_str().unwrap_or("");
        if !name.is_empty() || ports.len() > 1 {
            pod_validation::label_name(errs, &format!("{at}.name"), name);
        }
        if !name.is_empty() && !names.insert(name) {
            errs.push(FieldError::duplicate(format!("{at}.name"), name));
        }
        pod_validation::port_number(errs, &format!("{at}.port"), p["port"].as_i64().unwrap_or(0));
        pod_validation::protocol(
            errs,
            &format!("{at}.protocol"),
            p["protocol"].as_str().unwrap_or(""),
        );
        match &p["targetPort"] {
            Value::Number(n) => {
                pod_validation::port_number(errs, &format!("{at}.targetPort"), n.as_i64().unwrap_or(0))
            }
            Value::String(s) => {
                for m in pod_validation::port_name(s) {
                    errs.push(FieldError::invalid(format!("{at}.targetPort"), s, m));
                }
            }
            _ => {}
        }
    }
    if !spec["selector"].is_null() {
        super::strategy::validate_string_map(errs, "spec.selector", &spec["selector"], true);
    }
    match spec["sessionAffinity"].as_str().unwrap_or("") {
        "" => errs.push(FieldError::required("spec.sessionAffinity", "")),
        "ClientIP" | "None" => {}
        other => errs.push(FieldError::not_supported(
            "spec.sessionAffinity",
            other,
            &["ClientIP", "None"],
        )),
    }
    const TYPES: [&str; 4] = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
    if kind.is_empty() {
        errs.push(FieldError::required("spec.type", ""));
    } else if !TYPES.contains(&kind) {
        errs.push(FieldError::not_supported("spec.type", kind, &TYPES));
    }
    if kind == "ClusterIP" {
        for (i, p) in ports.iter().enumerate() {
            if p["nodePort"].as_i64().unwrap_or(0) != 0 {
                errs.push(FieldError::forbidden(
                    format!("spec.ports[{i}].nodePort"),
                    "may not be used when `type` is 'ClusterIP'",
                ));
            }
        }
    }
    // Upstream's validateServiceExternalTrafficPolicy.
    let externally_accessible = matches!(kind, "NodePort" | "LoadBalancer")
        || (kind == "ClusterIP" && spec["externalIPs"].as_array().is_some_and(|a| !a.is_empty()));
    match spec["externalTrafficPolicy"].as_str() {
        Some(etp) if !externally_accessible => errs.push(FieldError::invalid(
            "spec.externalTrafficPolicy",
            etp,
            "may only be set for externally-accessible services",
        )),
        Some("Cluster" | "Local") | None => {}
        Some(other) => errs.push(FieldError::not_supported(
            "spec.externalTrafficPolicy",
            other,
            &["Cluster", "Local"],
        )),
    }
    let hc = spec["healthCheckNodePort"].as_i64().unwrap_or(0);
    if hc != 0 {
        if !needs_health_check(obj) {
            errs.push(FieldError::invalid_raw(
                "spec.healthCheckNodePort",
                &hc.to_string(),
                "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
            ));
        } else {
            pod_validation::port_number(errs, "spec.healthCheckNodePort", hc);
        }
    }
    if let Some(itp) = spec["internalTrafficPolicy"].as_str() {
        if !["Cluster", "Local"].contains(&itp) {
            errs.push(FieldError::not_supported(
                "spec.internalTrafficPolicy",
                itp,
                &["Cluster", "Local"],
            ));
        }
    }
    // One port and protocol once (printed as Go prints the key upstream compares).
    let mut seen = HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        let key = (
            p["protocol"].as_str().unwrap_or(""),
            p["port"].as_i64().unwrap_or(0),
        );
        if !seen.insert(key) {
            errs.push(FieldError::duplicate_raw(
                format!("spec.ports[{i}]"),
                &format!(
                    "core.ServicePort{{Name:\"\", Protocol:\"{}\", AppProtocol:(*string)(nil), Port:{}, TargetPort:intstr.IntOrString{{Type:0, IntVal:0, StrVal:\"\"}}, NodePort:0}}",
                    key.0, key.1
                ),
            ));
        }
    }
}

fn needs_cluster_ip(obj: &Value) -> bool {
    obj["spec"]["type"].as_str() != Some("ExternalName")
}

/// Upstream's `needsNodePort`: NodePort Services, and LoadBalancers unless
/// `allocateLoadBalancerNodePorts` is false.
fn needs_node_ports(obj: &Value) -> bool {
    match obj["spec"]["type"].as_str() {
        Some("NodePort") => true,
        Some("LoadBalancer") => obj["spec"]["allocateLoadBalancerNodePorts"].as_bool() != Some(false),
        _ => false,
    }
}

/// Whether the ports a user names are node ports to allocate (even when none are needed).
fn may_have_node_ports(obj: &Value) -> bool {
    matches!(obj["spec"]["type"].as_str(), Some("NodePort" | "LoadBalancer"))
}

/// Upstream's `NeedsHealthCheck`: a LoadBalancer keeping client addresses
/// (`externalTrafficPolicy: Local`) gets a health-check node port.
fn needs_health_check(obj: &Value) -> bool {
    obj["spec"]["type"] == "LoadBalancer" && obj["spec"]["externalTrafficPolicy"] == "Local"
}

/// Upstream's `dropTypeDependentFields`: when an update changes the type, the values the
/// old type had (perhaps allocated for it) and the new one cannot have are wiped — unless the
/// user changed them too, in which case validation speaks.
fn drop_type_dependent_fields(obj: &mut Value, old: &Value) {
    let same = |obj: &Value, f: &str| obj["spec"][f] == old["spec"][f];
    if needs_cluster_ip(old) && !needs_cluster_ip(obj) {
        let spec = &mut obj["spec"];
        if spec["clusterIP"] == old["spec"]["clusterIP"] && spec["clusterIPs"] == old["spec"]["clusterIPs"] {
            remove(spec, &["clusterIP", "clusterIPs"]);
        }
        if spec["ipFamilies"] == old["spec"]["ipFamilies"] {
            remove(spec, &["ipFamilies"]);
        }
        if spec["ipFamilyPolicy"] == old["spec"]["ipFamilyPolicy"] {
            remove(spec, &["ipFamilyPolicy"]);
        }
    }
    if needs_node_ports(old) && !needs_node_ports(obj) {
        let node_ports = |o: &Value| -> Vec<Value> {
            o["spec"]["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| p["nodePort"].clone())
                .collect()
        };
        if node_ports(obj) == node_ports(old) {
            for p in obj["spec"]["ports"].as_array_mut().into_iter().flatten() {
                if let Some(p) = p.as_object_mut() {
                    p.remove("nodePort");
                }
            }
        }
    }
    if needs_health_check(old) && !needs_health_check(obj) && same(obj, "healthCheckNodePort") {
        remove(&mut obj["spec"], &["healthCheckNodePort"]);
    }
    if old["spec"]["type"] == "LoadBalancer" && obj["spec"]["type"] != "LoadBalancer" {
        if same(obj, "allocateLoadBalancerNodePorts") {
            remove(&mut obj["spec"], &["allocateLoadBalancerNodePorts"]);
        }
        if same(obj, "loadBalancerClass") {
            remove(&mut obj["spec"], &["loadBalancerClass"]);
        }
    }
    let external = |o: &Value| matches!(o["spec"]["type"].as_str(), Some("NodePort" | "LoadBalancer"));
    if external(old) && !external(obj) && same(obj, "externalTrafficPolicy") {
        remove(&mut obj["spec"], &["externalTrafficPolicy"]);
    }
    // A load balancer's status goes with its type.
    if obj["spec"]["type"] != "LoadBalancer" && obj["status"].is_object() {
        obj["status"]["loadBalancer"] = json!({});
    }
}

/// A port's protocol, TCP when not given (yet: updates are defaulted after this).
fn protocol(port: &Value) -> &str {
    port["protocol"].as_str().unwrap_or("TCP")
}

fn remove(v: &mut Value, fields: &[&str]) {
    if let Some(m) = v.as_object_mut() {
        for f in fields {
            m.remove(*f);
        }
    }
}

fn api_error(obj: &Value, e: AllocError) -> ApiError {
    let def = crate::registry::catalogue::builtin("", "v1", "services").expect("in the catalogue");
    match e {
        AllocError::Invalid(fe) => super::invalid(def, meta::name(obj), &[fe]),
        AllocError::Full(m) => ApiError::internal(m),
        AllocError::Store(m) => ApiError::internal(m),
    }
}

/// Allocate what `obj` needs and `held` (what it holds already, on update) does not cover.
/// Returns the new allocations, to release if the write fails.
async fn allocate(
    ctx: &Ctx,
    obj: &mut Value,
    held: &[(Pool, String)],
    old: Option<&Value>,
) -> Result<Vec<(Pool, String)>, ApiError> {
    let def = crate::registry::catalogue::builtin("", "v1", "services").expect("in the catalogue");
    families::init(&ctx.shared.service_cidrs, obj, old)
        .map_err(|e| super::invalid(def, meta::name(obj), &e))?;
    let store = ctx.shared.store.as_ref();
    let owner = format!("{}/{}", meta::namespace(obj), meta::name(obj));
    let mut done = Vec::new();
    let result = async {
        if needs_cluster_ip(obj) && !families::headless(obj) {
            let mut ips = families::cluster_ips(obj);
            let old_ips = old.map(families::cluster_ips).unwrap_or_default();
            for (i, family) in families::families(obj).iter().enumerate() {
                let requested = ips.get(i).filter(|ip| !ip.is_empty()).cloned();
                // What the Service holds already stays (even of a family the cluster no
                // longer serves).
                if requested.as_ref().is_some_and(|ip| old_ips.contains(ip)) {
                    continue;
                }
                let Some(cidr) = IpFamily::parse(family).and_then(|f| ctx.shared.service_cidrs.of(f)) else {
                    continue; // refused by the family checks before
                };
                let pool = Pool::ClusterIp(cidr);
                let ip = allocator::allocate(store, pool, &owner, requested.as_deref(), "spec.clusterIPs")
                    .await
                    .map_err(|e| api_error(obj, e))?;
                done.push((pool, ip.clone()));
                match ips.get_mut(i) {
                    Some(slot) => *slot = ip,
                    None => ips.push(ip),
                }
            }
            if let Some(first) = ips.first() {
                obj["spec"]["clusterIP"] = json!(first);
                obj["spec"]["clusterIPs"] = json!(ips);
            }
        }
        if may_have_node_ports(obj) {
            let needed = needs_node_ports(obj);
            let count = obj["spec"]["ports"].as_array().map(Vec::len).unwrap_or(0);
            for i in 0..count {
                let requested = obj["spec"]["ports"][i]["nodePort"]
                    .as_i64()
                    .filter(|p| *p != 0)
                    .map(|p| p.to_string());
                if requested.is_none() && !needed {
                    continue;
                }
                let already = requested.as_ref().is_some_and(|p| {
                    held.contains(&(Pool::NodePort, p.clone())) || done.contains(&(Pool::NodePort, p.clone()))
                });
                if already {
                    continue;
                }
                let field = format!("spec.ports[{i}].nodePort");
                let port = allocator::allocate(store, Pool::NodePort, &owner, requested.as_deref(), &field)
                    .await
                    .map_err(|e| api_error(obj, e))?;
                done.push((Pool::NodePort, port.clone()));
                obj["spec"]["ports"][i]["nodePort"] = json!(port.parse::<i64>().unwrap_or(0));
            }
        }
        if needs_health_check(obj) {
            let requested = obj["spec"]["healthCheckNodePort"]
                .as_i64()
                .filter(|p| *p != 0)
                .map(|p| p.to_string());
            let already = requested
                .as_ref()
                .is_some_and(|p| held.contains(&(Pool::NodePort, p.clone())));
            if !already {
                let port = allocator::allocate(
                    store,
                    Pool::NodePort,
                    &owner,
                    requested.as_deref(),
                    "spec.healthCheckNodePort",
                )
                .await
                .map_err(|e| api_error(obj, e))?;
                done.push((Pool::NodePort, port.clone()));
                obj["spec"]["healthCheckNodePort"] = json!(port.parse::<i64>().unwrap_or(0));
            }
        }
        Ok::<(), ApiError>(())
    }
    .await;
    match result {
        Ok(()) => Ok(done),
        Err(e) => {
            release(ctx, &done).await;
            Err(e)
        }
    }
}

async fn release(ctx: &Ctx, allocations: &[(Pool, String)]) {
    for (pool, value) in allocations {
        allocator::release(ctx.shared.store.as_ref(), *pool, value).await;
    }
}

/// Everything a stored service holds, to release when it is deleted.
fn allocations(ctx: &Ctx, obj: &Value) -> Vec<(Pool, String)> {
    let mut out = Vec::new();
    for ip in families::cluster_ips(obj) {
        // An address of a family the cluster no longer serves is not released (upstream's).
        let cidr = IpFamily::of_str(&ip).and_then(|f| ctx.shared.service_cidrs.of(f));
        if let Some(cidr) = cidr {
            out.push((Pool::ClusterIp(cidr), ip));
        }
    }
    for p in obj["spec"]["ports"].as_array().into_iter().flatten() {
        if let Some(np) = p["nodePort"].as_i64().filter(|n| *n != 0) {
            out.push((Pool::NodePort, np.to_string()));
        }
    }
    if let Some(hc) = obj["spec"]["healthCheckNodePort"].as_i64().filter(|n| *n != 0) {
        out.push((Pool::NodePort, hc.to_string()));
    }
    out
}

/// Upstream's `patchAllocatedValues` on update: what the old and new types both need and the
/// request left out keeps its allocated value (the cluster IPs, node ports by port and
/// protocol, the health-check port). Changed addresses are refused later, by
/// `families::validate_update`.
fn keep_allocations(obj: &mut Value, old: &Value) {
    if needs_cluster_ip(old) && needs_cluster_ip(obj) {
        if obj["spec"]["clusterIP"].as_str().unwrap_or("").is_empty() {
            obj["spec"]["clusterIP"] = old["spec"]["clusterIP"].clone();
        }
        if families::cluster_ips(obj).is_empty() && !families::cluster_ips(old).is_empty() {
            obj["spec"]["clusterIPs"] = old["spec"]["clusterIPs"].clone();
        }
    }
    if needs_node_ports(old) && needs_node_ports(obj) {
        let old_ports = old["spec"]["ports"].as_array().cloned().unwrap_or_default();
        for p in obj["spec"]["ports"].as_array_mut().into_iter().flatten() {
            if p["nodePort"].as_i64().unwrap_or(0) == 0 {
                if let Some(np) = old_ports
                    .iter()
                    .find(|o| o["port"] == p["port"] && protocol(o) == protocol(p))
                    .and_then(|o| o["nodePort"].as_i64())
                {
                    p["nodePort"] = json!(np);
                }
            }
        }
    }
    if needs_health_check(old)
        && needs_health_check(obj)
        && obj["spec"]["healthCheckNodePort"].as_i64().unwrap_or(0) == 0
    {
        obj["spec"]["healthCheckNodePort"] = old["spec"]["healthCheckNodePort"].clone();
    }
}

/// The Service's IP families and addresses (upstream's `pkg/registry/core/service/storage/
/// alloc.go` and `ValidateServiceClusterIPsRelatedFields`): which families a Service gets on
/// this cluster, from its ipFamilyPolicy, ipFamilies and clusterIPs.
mod families {
    use super::super::allocator::{IpFamily, ServiceCidrs};
    use r8s_api::validation::FieldError;
    use serde_json::{json, Value};

    const POLICIES: [&str; 3] = ["PreferDualStack", "RequireDualStack", "SingleStack"];

    fn strings(v: &Value) -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|s| s.as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// A list as Go prints it in a field error (`[]string{"a", "b"}`).
    pub(super) fn go_list(ty: &str, items: &[String]) -> String {
        let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
        format!("[]{ty}{{{}}}", quoted.join(", "))
    }

    pub(super) fn cluster_ips(obj: &Value) -> Vec<String> {
        strings(&obj["spec"]["clusterIPs"])
    }

    pub(super) fn families(obj: &Value) -> Vec<String> {
        strings(&obj["spec"]["ipFamilies"])
    }

    fn policy(obj: &Value) -> &str {
        obj["spec"]["ipFamilyPolicy"].as_str().unwrap_or("")
    }

    pub(super) fn headless(obj: &Value) -> bool {
        cluster_ips(obj) == ["None"]
    }

    fn selectorless(obj: &Value) -> bool {
        obj["spec"]["selector"].as_object().is_none_or(|m| m.is_empty())
    }

    /// Upstream's `NormalizeClusterIPs` on create: a client that sets only `clusterIP` gets
    /// `clusterIPs` from it.
    pub(super) fn normalize_create(obj: &mut Value) {
        let ip = obj["spec"]["clusterIP"].as_str().unwrap_or("").to_owned();
        if !ip.is_empty() && cluster_ips(obj).is_empty() && obj["spec"].is_object() {
            obj["spec"]["clusterIPs"] = json!([ip]);
        }
    }

    /// Upstream's `NormalizeClusterIPs` on update: an old client that left `clusterIPs` out
    /// keeps them; one that changed only `clusterIP` gets `clusterIPs` to match.
    pub(super) fn normalize_update(obj: &mut Value, old: &Value) {
        if !obj["spec"].is_object() {
            return;
        }
        let (ip, old_ip) = (
            obj["spec"]["clusterIP"].as_str().unwrap_or("").to_owned(),
            old["spec"]["clusterIP"].as_str().unwrap_or("").to_owned(),
        );
        if !cluster_ips(old).is_empty() && cluster_ips(obj).is_empty() && ip == old_ip {
            obj["spec"]["clusterIPs"] = old["spec"]["clusterIPs"].clone();
        }
        if ip != old_ip {
            let same = cluster_ips(obj) == cluster_ips(old);
            if !old_ip.is_empty() && ip.is_empty() && same {
                obj["spec"]["clusterIPs"] = Value::Null;
            }
            if !ip.is_empty() && same {
                obj["spec"]["clusterIPs"] = json!([ip]);
            }
        }
    }

    /// Upstream's `ValidateServiceClusterIPsRelatedFields`.
    pub(super) fn validate(obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if obj["spec"]["type"] == "ExternalName" {
            return errs;
        }
        let ips = cluster_ips(obj);
        let shown = go_list("string", &ips);
        let ip = obj["spec"]["clusterIP"].as_str().unwrap_or("");
        if !ip.is_empty() {
            if ips.is_empty() {
                errs.push(FieldError::required("spec.clusterIPs", ""));
            } else if ips[0] != ip {
                errs.push(FieldError::invalid_raw(
                    "spec.clusterIPs",
                    &shown,
                    "first value must match `clusterIP`",
                ));
            }
        } else if !ips.is_empty() {
            errs.push(FieldError::invalid_raw(
                "spec.clusterIPs",
                &shown,
                "must be empty when `clusterIP` is not specified",
            ));
        }
        let fams = families(obj);
        for (i, f) in fams.iter().enumerate() {
            if IpFamily::parse(f).is_none() {
                errs.push(FieldError::not_supported(
                    format!("spec.ipFamilies[{i}]"),
                    f,
                    &["IPv4", "IPv6"],
                ));
            }
            if fams[..i].contains(f) {
                errs.push(FieldError::duplicate(format!("spec.ipFamilies[{i}]"), f));
            }
        }
        let p = policy(obj);
        if !obj["spec"]["ipFamilyPolicy"].is_null() && !POLICIES.contains(&p) {
            errs.push(FieldError::not_supported("spec.ipFamilyPolicy", p, &POLICIES));
        }
        let mut bad_ips = false;
        for (i, ip) in ips.iter().enumerate() {
            if i == 0 && ip == "None" {
                if ips.len() > 1 {
                    bad_ips = true;
                    errs.push(FieldError::invalid_raw(
                        "spec.clusterIPs",
                        &shown,
                        "'None' must be the first and only value",
                    ));
                }
                continue;
            }
            if IpFamily::of_str(ip).is_none() {
                bad_ips = true;
                errs.push(FieldError::invalid(
                    format!("spec.clusterIPs[{i}]"),
                    ip,
                    "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                ));
            }
        }
        if ips.len() > 2 {
            errs.push(FieldError::invalid_raw(
                "spec.clusterIPs",
                &shown,
                "may only hold up to 2 values",
            ));
        }
        if bad_ips {
            return errs;
        }
        if ips.len() > 1 {
            let fams_of: Vec<_> = ips.iter().filter_map(|ip| IpFamily::of_str(ip)).collect();
            if fams_of.len() != 2 || fams_of[0] == fams_of[1] {
                errs.push(FieldError::invalid_raw(
                    "spec.clusterIPs",
                    &shown,
                    "may specify no more than one IP for each IP family",
                ));
            }
        }
        if !headless(obj) {
            for (i, (ip, f)) in ips.iter().zip(&fams).enumerate() {
                let (Some(fam), Some(want)) = (IpFamily::of_str(ip), IpFamily::parse(f)) else {
                    continue;
                };
                if fam != want {
                    errs.push(FieldError::invalid(
                        format!("spec.clusterIPs[{i}]"),
                        ip,
                        format!("expected an {want} value as indicated by `ipFamilies[{i}]`"),
                    ));
                }
            }
        }
        errs
    }

    /// Upstream's `isMatchingPreferDualStackClusterIPFields`: an update of a PreferDualStack
    /// Service that keeps its type, policy, addresses and families is left as it is, so a
    /// cluster turned dual- or single-stack does not change its Services behind their backs.
    fn unchanged_prefer_dual_stack(obj: &Value, old: &Value) -> bool {
        obj["spec"]["type"] == old["spec"]["type"]
            && matches!(
                obj["spec"]["type"].as_str(),
                Some("ClusterIP" | "NodePort" | "LoadBalancer")
            )
            && policy(obj) == "PreferDualStack"
            && policy(old) == "PreferDualStack"
            && cluster_ips(obj) == cluster_ips(old)
            && families(obj) == families(old)
    }

    /// Upstream's `initIPFamilyFields`: default the policy, infer and check the families
    /// against what the cluster serves, and add the second family where the policy wants it.
    pub(super) fn init(
        cidrs: &ServiceCidrs,
        obj: &mut Value,
        old: Option<&Value>,
    ) -> Result<(), Vec<FieldError>> {
        if obj["spec"]["type"] == "ExternalName" || !obj["spec"].is_object() {
            return Ok(());
        }
        if obj["spec"]["ipFamilyPolicy"].is_null() {
            let from_old = old
                .map(|o| o["spec"]["ipFamilyPolicy"].clone())
                .filter(|p| !p.is_null());
            obj["spec"]["ipFamilyPolicy"] = match from_old {
                Some(p) => p,
                None if obj["spec"]["clusterIP"] == "None" && selectorless(obj) => json!("RequireDualStack"),
                None => json!("SingleStack"),
            };
        }
        if let Some(old) = old {
            if unchanged_prefer_dual_stack(obj, old) {
                return Ok(());
            }
        }
        let errs = validate(obj);
        if !errs.is_empty() {
            return Err(errs);
        }
        let mut errs = Vec::new();
        let policy_shown = format!("{:?}", policy(obj));
        let single = policy(obj) == "SingleStack";
        if let Some(old) = old {
            let (ips, fams) = (cluster_ips(obj), families(obj));
            if single {
                if ips == cluster_ips(old) && ips.len() > 1 {
                    obj["spec"]["clusterIPs"] = json!([ips[0]]);
                }
                if fams == families(old) && fams.len() > 1 {
                    obj["spec"]["ipFamilies"] = json!([fams[0]]);
                }
            } else {
                if !ips.is_empty() && ips.len() < cluster_ips(old).len() {
                    errs.push(FieldError::invalid_raw(
                        "spec.ipFamilyPolicy",
                        &policy_shown,
                        "must be 'SingleStack' to release the secondary cluster IP",
                    ));
                }
                if !fams.is_empty() && fams.len() < families(old).len() {
                    errs.push(FieldError::invalid_raw(
                        "spec.ipFamilyPolicy",
                        &policy_shown,
                        "must be 'SingleStack' to release the secondary IP family",
                    ));
                }
            }
        }
        let ips = cluster_ips(obj);
        let mut fams = families(obj);
        if single {
            if ips.len() == 2 {
                errs.push(FieldError::invalid_raw(
                    "spec.ipFamilyPolicy",
                    &policy_shown,
                    "must be 'RequireDualStack' or 'PreferDualStack' when multiple cluster IPs are specified",
                ));
            }
            if fams.len() == 2 {
                errs.push(FieldError::invalid_raw(
                    "spec.ipFamilyPolicy",
                    &policy_shown,
                    "must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified",
                ));
            }
        }
        for (i, ip) in ips.iter().enumerate() {
            if ip == "None" {
                break;
            }
            let Some(fam) = IpFamily::of_str(ip) else { continue };
            if i >= fams.len() {
                if cidrs.of(fam).is_none() {
                    errs.push(FieldError::invalid_raw(
                        format!("spec.clusterIPs[{i}]"),
                        &go_list("string", &ips),
                        format!("{fam} is not configured on this cluster"),
                    ));
                } else {
                    fams.push(fam.name().to_owned());
                }
            }
        }
        if !errs.is_empty() {
            return Err(errs);
        }
        let primary = cidrs.primary().family();
        let other_of = |f: &str| IpFamily::parse(f).unwrap_or(primary).other().name().to_owned();
        if obj["spec"]["clusterIP"] == "None" && selectorless(obj) {
            // Headless without a selector may name both families even on a single-stack
            // cluster: its endpoints are whatever its owner writes.
            if fams.is_empty() {
                fams.push(primary.name().to_owned());
            }
            if fams.len() < 2 && !single {
                let other = other_of(&fams[0]);
                fams.push(other);
            }
            obj["spec"]["ipFamilies"] = json!(fams);
            return Ok(());
        }
        if policy(obj) == "RequireDualStack" && !cidrs.dual() {
            errs.push(FieldError::invalid_raw(
                "spec.ipFamilyPolicy",
                &policy_shown,
                "this cluster is not configured for dual-stack services",
            ));
        }
        for (i, f) in fams.iter().enumerate() {
            if IpFamily::parse(f).and_then(|f| cidrs.of(f)).is_none() {
                errs.push(FieldError::invalid(
                    format!("spec.ipFamilies[{i}]"),
                    f,
                    "not configured on this cluster",
                ));
            }
        }
        if !errs.is_empty() {
            return Err(errs);
        }
        if fams.is_empty() {
            fams.push(primary.name().to_owned());
        }
        if !single && fams.len() == 1 && cidrs.dual() {
            let other = other_of(&fams[0]);
            fams.push(other);
        }
        obj["spec"]["ipFamilies"] = json!(fams);
        Ok(())
    }

    /// Upstream's `validateUpgradeDowngradeClusterIPs` and `…IPFamilies`: the addresses and
    /// families a Service has keep their places; only a secondary may come or go, and only
    /// a SingleStack policy releases one.
    pub(super) fn validate_update(obj: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if obj["spec"]["type"] == "ExternalName" || old["spec"]["type"] == "ExternalName" {
            return errs;
        }
        let policy_shown = match obj["spec"]["ipFamilyPolicy"].as_str() {
            Some(p) => format!("{p:?}"),
            None => "\"null\"".to_owned(),
        };
        let single = policy(obj) == "SingleStack";
        let (new_headless, old_headless) = (headless(obj), headless(old));
        let (ips, old_ips) = (cluster_ips(obj), cluster_ips(old));
        let ips_shown = go_list("string", &ips);
        let changed = |at: &str, shown: &str| FieldError::invalid_raw(at, shown, "may not change once set");
        if !(new_headless && old_headless) {
            if ips.len() == old_ips.len() {
                for i in 0..ips.len() {
                    if ips[i] != old_ips[i] {
                        errs.push(changed(&format!("spec.clusterIPs[{i}]"), &ips_shown));
                    }
                }
            } else if ips.len() < old_ips.len() {
                if ips.is_empty() {
                    errs.push(FieldError::invalid_raw(
                        "spec.clusterIPs[0]",
                        &ips_shown,
                        "primary clusterIP can not be unset",
                    ));
                } else if ips[0] != old_ips[0] {
                    errs.push(changed("spec.clusterIPs[0]", &ips_shown));
                }
                if ips.len() == 1 && !single {
                    errs.push(FieldError::invalid_raw(
                        "spec.ipFamilyPolicy",
                        &policy_shown,
                        "must be set to 'SingleStack' when releasing the secondary clusterIP",
                    ));
                }
            } else if !old_ips.is_empty() && ips[0] != old_ips[0] {
                errs.push(changed("spec.clusterIPs[0]", &ips_shown));
            }
        }
        if new_headless != old_headless || new_headless {
            return errs;
        }
        let (fams, old_fams) = (families(obj), families(old));
        let fams_shown = go_list("core.IPFamily", &fams);
        if fams.len() == old_fams.len() {
            for i in 0..fams.len() {
                if fams[i] != old_fams[i] {
                    errs.push(changed("spec.ipFamilies[0]", &fams_shown));
                }
            }
        } else if fams.len() < old_fams.len() {
            if ips.is_empty() {
                errs.push(FieldError::invalid_raw(
                    "spec.ipFamilies[0]",
                    &fams_shown,
                    "primary ipFamily can not be unset",
                ));
            }
            // (Upstream shows the cluster IPs here.)
            if !fams.is_empty() && fams[0] != old_fams[0] {
                errs.push(changed("spec.ipFamilies[0]", &ips_shown));
            }
            if fams.len() == 1 && !single {
                errs.push(FieldError::invalid_raw(
                    "spec.ipFamilyPolicy",
                    &policy_shown,
                    "must be set to 'SingleStack' when releasing the secondary ipFamily",
                ));
            }
        } else if !old_fams.is_empty() && !fams.is_empty() && fams[0] != old_fams[0] {
            errs.push(changed("spec.ipFamilies[0]", &ips_shown));
        }
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn external_ip_column_as_upstream() {
        let svc = |v: Value| external_ip(&v);
        assert_eq!(svc(json!({"spec": {"type": "ClusterIP"}})), "<none>");
        assert_eq!(
            svc(json!({"spec": {"type": "NodePort", "externalIPs": ["192.0.2.1", "192.0.2.2"]}})),
            "192.0.2.1,192.0.2.2"
        );
        assert_eq!(svc(json!({"spec": {"type": "LoadBalancer"}})), "<pending>");
        assert_eq!(
            svc(
                json!({"spec": {"type": "LoadBalancer"}, "status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.7"}]}}})
            ),
            "198.51.100.7"
        );
        assert_eq!(
            svc(
                json!({"spec": {"type": "LoadBalancer"}, "status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.7"}, {"ip": "198.51.100.8"}]}}})
            ),
            "198.51.100.7,..."
        );
        assert_eq!(
            svc(json!({"spec": {"type": "ExternalName", "externalName": "example.com"}})),
            "example.com"
        );
    }

    fn errors(spec: Value) -> Vec<String> {
        let mut errs = Vec::new();
        validate(&mut errs, &json!({"spec": spec}));
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_defaulted_service_is_valid() {
        let ok = json!({"type": "ClusterIP", "sessionAffinity": "None", "selector": {"app": "web"},
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": "http"},
                      {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 5353}]});
        assert_eq!(errors(ok), Vec::<String>::new());
        let headless = json!({"type": "ClusterIP", "clusterIP": "None", "sessionAffinity": "None"});
        assert_eq!(errors(headless), Vec::<String>::new());
        let external =
            json!({"type": "ExternalName", "externalName": "db.example.com.", "sessionAffinity": "None"});
        assert_eq!(errors(external), Vec::<String>::new());
    }

    #[test]
    fn service_mistakes_are_named_in_upstreams_words() {
        let bad = json!({"type": "Ingress", "sessionAffinity": "Sticky", "selector": {"app": "bad value!"},
            "ports": [{"port": 0, "protocol": "HTTP", "targetPort": 70000},
                      {"name": "a", "port": 80, "protocol": "TCP", "targetPort": "Bad_Name"},
                      {"name": "a", "port": 80, "protocol": "TCP", "targetPort": 80}]});
        let errs = errors(bad);
        for want in [
            "spec.ports[0].name: Required value",
            "spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive",
            "spec.ports[0].protocol: Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
            "spec.ports[0].targetPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
            "spec.ports[1].targetPort: Invalid value: \"Bad_Name\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
            "spec.ports[2].name: Duplicate value: \"a\"",
            "spec.sessionAffinity: Unsupported value: \"Sticky\": supported values: \"ClientIP\", \"None\"",
            "spec.type: Unsupported value: \"Ingress\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\"",
            "spec.ports[2]: Duplicate value: core.ServicePort{Name:\"\", Protocol:\"TCP\", AppProtocol:(*string)(nil), Port:80, TargetPort:intstr.IntOrString{Type:0, IntVal:0, StrVal:\"\"}, NodePort:0}",
        ] {
            assert!(errs.iter().any(|e| e == want), "{want} not in {errs:#?}");
        }
        assert!(
            errs.iter()
                .any(|e| e.starts_with("spec.selector: Invalid value: \"bad value!\"")),
            "{errs:#?}"
        );
        assert_eq!(
            errors(json!({"type": "ClusterIP", "sessionAffinity": "None"})),
            ["spec.ports: Required value"]
        );
        assert_eq!(
            errors(json!({"type": "ExternalName", "sessionAffinity": "None"})),
            ["spec.externalName: Required value"]
        );
        assert_eq!(
            errors(json!({"type": "ClusterIP", "sessionAffinity": "None",
                "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80, "nodePort": 30080}]})),
            ["spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"]
        );
    }

    #[test]
    fn a_type_change_wipes_what_the_old_type_had_unless_the_user_changed_it() {
        let old = json!({"spec": {"type": "LoadBalancer", "clusterIP": "10.43.0.5", "clusterIPs": ["10.43.0.5"],
            "externalTrafficPolicy": "Local", "healthCheckNodePort": 31000, "allocateLoadBalancerNodePorts": true,
            "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}});
        let mut obj = old.clone();
        obj["spec"]["type"] = json!("ClusterIP");
        drop_type_dependent_fields(&mut obj, &old);
        assert_eq!(
            obj,
            json!({"spec": {"type": "ClusterIP", "clusterIP": "10.43.0.5", "clusterIPs": ["10.43.0.5"],
                "ports": [{"port": 80, "protocol": "TCP"}]}, "status": {"loadBalancer": {}}})
        );
        // A node port the user changed in the same update stays (and validation refuses it).
        let mut obj = old.clone();
        obj["spec"]["type"] = json!("ClusterIP");
        obj["spec"]["ports"][0]["nodePort"] = json!(30081);
        drop_type_dependent_fields(&mut obj, &old);
        assert_eq!(obj["spec"]["ports"][0]["nodePort"], 30081);
        assert!(errors(obj["spec"].clone()).contains(
            &"spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'".to_string()
        ));
        // To ExternalName: the cluster IP goes too.
        let mut obj = old.clone();
        obj["spec"]["type"] = json!("ExternalName");
        obj["spec"]["externalName"] = json!("example.com");
        drop_type_dependent_fields(&mut obj, &old);
        assert!(obj["spec"]["clusterIP"].is_null() && obj["spec"]["clusterIPs"].is_null());
    }

    #[test]
    fn traffic_policy_fields_only_where_upstream_allows_them() {
        let spec = json!({"type": "ClusterIP", "externalTrafficPolicy": "Local", "sessionAffinity": "None",
            "ports": [{"port": 80, "protocol": "TCP"}]});
        assert_eq!(
            errors(spec),
            ["spec.externalTrafficPolicy: Invalid value: \"Local\": may only be set for externally-accessible services"]
        );
        let spec = json!({"type": "NodePort", "healthCheckNodePort": 31000, "sessionAffinity": "None",
            "externalTrafficPolicy": "Cluster", "ports": [{"port": 80, "protocol": "TCP"}]});
        assert_eq!(
            errors(spec),
            ["spec.healthCheckNodePort: Invalid value: 31000: may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'"]
        );
        let spec = json!({"type": "NodePort", "externalTrafficPolicy": "Nearest", "sessionAffinity": "None",
            "ports": [{"port": 80, "protocol": "TCP"}]});
        assert_eq!(
            errors(spec),
            ["spec.externalTrafficPolicy: Unsupported value: \"Nearest\": supported values: \"Cluster\", \"Local\""]
        );
    }

    fn init(cidrs: &str, spec: Value, old: Option<Value>) -> Result<Value, Vec<String>> {
        let cidrs = allocator::ServiceCidrs::parse(cidrs).unwrap();
        let mut obj = json!({"spec": spec});
        families::normalize_create(&mut obj);
        match families::init(&cidrs, &mut obj, old.as_ref()) {
            Ok(()) => Ok(json!({
                "policy": obj["spec"]["ipFamilyPolicy"],
                "families": obj["spec"]["ipFamilies"],
                "ips": obj["spec"]["clusterIPs"],
            })),
            Err(e) => Err(e.iter().map(ToString::to_string).collect()),
        }
    }

    #[test]
    fn ip_families_on_a_single_stack_cluster() {
        let v4 = "10.43.0.0/16";
        let sel = json!({"app": "web"});
        assert_eq!(
            init(v4, json!({"type": "ClusterIP", "selector": sel}), None).unwrap(),
            json!({"policy": "SingleStack", "families": ["IPv4"], "ips": null})
        );
        assert_eq!(
            init(
                v4,
                json!({"type": "ClusterIP", "ipFamilyPolicy": "PreferDualStack"}),
                None
            )
            .unwrap()["families"],
            json!(["IPv4"])
        );
        assert_eq!(
            init(v4, json!({"type": "ClusterIP", "ipFamilyPolicy": "RequireDualStack"}), None).unwrap_err(),
            ["spec.ipFamilyPolicy: Invalid value: \"RequireDualStack\": this cluster is not configured for dual-stack services"]
        );
        assert_eq!(
            init(v4, json!({"type": "ClusterIP", "ipFamilies": ["IPv6"]}), None).unwrap_err(),
            ["spec.ipFamilies[0]: Invalid value: \"IPv6\": not configured on this cluster"]
        );
        assert_eq!(
            init(v4, json!({"type": "ClusterIP", "clusterIP": "fd43::5"}), None).unwrap_err(),
            ["spec.clusterIPs[0]: Invalid value: []string{\"fd43::5\"}: IPv6 is not configured on this cluster"]
        );
        // Headless: with a selector it follows the cluster; without one it may hold both.
        assert_eq!(
            init(
                v4,
                json!({"type": "ClusterIP", "clusterIP": "None", "selector": sel}),
                None
            )
            .unwrap(),
            json!({"policy": "SingleStack", "families": ["IPv4"], "ips": ["None"]})
        );
        assert_eq!(
            init(v4, json!({"type": "ClusterIP", "clusterIP": "None"}), None).unwrap(),
            json!({"policy": "RequireDualStack", "families": ["IPv4", "IPv6"], "ips": ["None"]})
        );
        assert_eq!(
            init(
                v4,
                json!({"type": "ExternalName", "externalName": "example.com"}),
                None
            )
            .unwrap(),
            json!({"policy": null, "families": null, "ips": null})
        );
    }

    #[test]
    fn ip_families_on_a_dual_stack_cluster() {
        let dual = "10.43.0.0/16,fd43::/112";
        assert_eq!(
            init(dual, json!({"type": "ClusterIP"}), None).unwrap()["families"],
            json!(["IPv4"])
        );
        assert_eq!(
            init(
                dual,
                json!({"type": "ClusterIP", "ipFamilyPolicy": "PreferDualStack"}),
                None
            )
            .unwrap()["families"],
            json!(["IPv4", "IPv6"])
        );
        assert_eq!(
            init(
                dual,
                json!({"type": "ClusterIP", "ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv6"]}),
                None
            )
            .unwrap()["families"],
            json!(["IPv6", "IPv4"])
        );
        assert_eq!(
            init(dual, json!({"type": "ClusterIP", "clusterIP": "fd43::5"}), None).unwrap()["families"],
            json!(["IPv6"])
        );
        assert_eq!(
            init(dual, json!({"type": "ClusterIP", "ipFamilyPolicy": "SingleStack", "ipFamilies": ["IPv4", "IPv6"]}), None)
                .unwrap_err(),
            ["spec.ipFamilyPolicy: Invalid value: \"SingleStack\": must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified"]
        );
        assert_eq!(
            init(
                dual,
                json!({"type": "ClusterIP", "ipFamilyPolicy": "RequireDualStack", "clusterIP": "10.43.0.5",
                       "clusterIPs": ["10.43.0.5", "10.43.0.6"]}),
                None
            )
            .unwrap_err(),
            ["spec.clusterIPs: Invalid value: []string{\"10.43.0.5\", \"10.43.0.6\"}: may specify no more than one IP for each IP family"]
        );
        assert_eq!(
            init(dual, json!({"type": "ClusterIP", "clusterIP": "10.43.0.5", "ipFamilies": ["IPv6"]}), None).unwrap_err(),
            ["spec.clusterIPs[0]: Invalid value: \"10.43.0.5\": expected an IPv6 value as indicated by `ipFamilies[0]`"]
        );
        assert_eq!(
            init(dual, json!({"type": "ClusterIP", "ipFamilyPolicy": "Both"}), None).unwrap_err(),
            ["spec.ipFamilyPolicy: Unsupported value: \"Both\": supported values: \"PreferDualStack\", \"RequireDualStack\", \"SingleStack\""]
        );

        // Updates: a secondary family added by the policy; released only by SingleStack.
        let single = json!({"spec": {"type": "ClusterIP", "clusterIP": "10.43.0.5", "clusterIPs": ["10.43.0.5"],
            "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack"}});
        let up = json!({"type": "ClusterIP", "clusterIP": "10.43.0.5", "clusterIPs": ["10.43.0.5"],
            "ipFamilies": ["IPv4"], "ipFamilyPolicy": "RequireDualStack"});
        assert_eq!(
            init(dual, up, Some(single.clone())).unwrap()["families"],
            json!(["IPv4", "IPv6"])
        );
        let both = json!({"spec": {"type": "ClusterIP", "clusterIP": "10.43.0.5", "clusterIPs": ["10.43.0.5", "fd43::7"],
            "ipFamilies": ["IPv4", "IPv6"], "ipFamilyPolicy": "RequireDualStack"}});
        let mut down = both["spec"].clone();
        down["ipFamilyPolicy"] = json!("SingleStack");
        assert_eq!(
            init(dual, down, Some(both.clone())).unwrap(),
            json!({"policy": "SingleStack", "families": ["IPv4"], "ips": ["10.43.0.5"]})
        );
        let mut cut = both["spec"].clone();
        cut["clusterIPs"] = json!(["10.43.0.5"]);
        assert_eq!(
            init(dual, cut, Some(both.clone())).unwrap_err(),
            ["spec.ipFamilyPolicy: Invalid value: \"RequireDualStack\": must be 'SingleStack' to release the secondary cluster IP"]
        );
        let mut moved = both.clone();
        moved["spec"]["clusterIPs"] = json!(["10.43.0.5", "fd43::8"]);
        assert_eq!(
            families::validate_update(&moved, &both)
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["spec.clusterIPs[1]: Invalid value: []string{\"10.43.0.5\", \"fd43::8\"}: may not change once set"]
        );
        assert!(families::validate_update(&single, &single).is_empty());
    }
}
