//! Services (upstream's `pkg/registry/core/service`): defaults, validation, the table, and
//! what the registry does beyond the generic path: cluster IPs and node ports allocated on
//! create (begin-create), kept on update, released on delete (after-delete).

use std::collections::HashSet;

use async_trait::async_trait;
use r8s_api::validation::{dns1123_label, dns1123_subdomain, FieldError};
use serde_json::{json, Value};

use super::allocator::{self, AllocError, Pool};
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
    }

    fn prepare_for_update(&self, obj: &mut Value, old: &Value) -> Result<(), ApiError> {
        keep_status(obj, old);
        drop_type_dependent_fields(obj, old);
        keep_allocations(obj, old)
    }

    fn default(&self, obj: &mut Value) {
        default(obj);
    }

    fn validate_name(&self, name: &str) -> Vec<String> {
        dns1123_label(name)
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        validate(&mut errs, obj);
        errs
    }

    /// The cluster IP and node ports, given back unless the service is stored.
    async fn begin_create(&self, ctx: &Ctx, obj: &mut Value) -> Result<Option<Box<dyn Finish>>, ApiError> {
        let allocations = allocate(ctx, obj, &[]).await?;
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
        let added = allocate(ctx, obj, &before).await?;
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
            if p.get("targetPort").is_none_or(Value::is_null) {
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
    let def = r8s_api::find("", "v1", "services").expect("in the catalogue");
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
) -> Result<Vec<(Pool, String)>, ApiError> {
    let store = ctx.shared.store.as_ref();
    let owner = format!("{}/{}", meta::namespace(obj), meta::name(obj));
    let mut done = Vec::new();
    let result = async {
        if needs_cluster_ip(obj) {
            let requested = obj["spec"]["clusterIP"]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_owned);
            let pool = Pool::ClusterIp(ctx.shared.service_cidr);
            let kept = requested
                .as_ref()
                .is_some_and(|ip| held.contains(&(pool, ip.clone())));
            if requested.as_deref() == Some("None") {
                obj["spec"]["clusterIPs"] = json!(["None"]);
            } else if !kept {
                let ip = allocator::allocate(store, pool, &owner, requested.as_deref(), "spec.clusterIPs")
                    .await
                    .map_err(|e| api_error(obj, e))?;
                done.push((pool, ip.clone()));
                obj["spec"]["clusterIP"] = json!(ip);
                obj["spec"]["clusterIPs"] = json!([ip]);
                obj["spec"]["ipFamilies"] = json!(["IPv4"]);
                obj["spec"]["ipFamilyPolicy"] = json!("SingleStack");
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
    if let Some(ip) = obj["spec"]["clusterIP"]
        .as_str()
        .filter(|ip| !ip.is_empty() && *ip != "None")
    {
        out.push((Pool::ClusterIp(ctx.shared.service_cidr), ip.to_owned()));
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
/// request left out keeps its allocated value (the cluster IP and its families, node ports by
/// port and protocol, the health-check port); a different cluster IP is refused (it is
/// immutable).
fn keep_allocations(obj: &mut Value, old: &Value) -> Result<(), ApiError> {
    if needs_cluster_ip(old) && needs_cluster_ip(obj) {
        let old_ip = old["spec"]["clusterIP"].as_str().unwrap_or("");
        match obj["spec"]["clusterIP"].as_str().unwrap_or("") {
            "" => {
                obj["spec"]["clusterIP"] = old["spec"]["clusterIP"].clone();
                obj["spec"]["clusterIPs"] = old["spec"]["clusterIPs"].clone();
            }
            ip if !old_ip.is_empty() && ip != old_ip => {
                let def = r8s_api::find("", "v1", "services").expect("in the catalogue");
                return Err(super::invalid(
                    def,
                    meta::name(obj),
                    &[r8s_api::validation::FieldError::invalid_raw(
                        "spec.clusterIPs[0]",
                        &format!("[]string{{\"{ip}\"}}"),
                        "may not change once set",
                    )],
                ));
            }
            _ => {}
        }
        for f in ["ipFamilies", "ipFamilyPolicy"] {
            if obj["spec"][f].is_null() && !old["spec"][f].is_null() {
                obj["spec"][f] = old["spec"][f].clone();
            }
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
    Ok(())
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
}
