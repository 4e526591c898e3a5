//! What the registry does for Services beyond the generic path (upstream's service REST
//! storage): cluster IPs and node ports allocated on create, kept on update, released on
//! delete.

use serde_json::{json, Value};

use super::allocator::{self, AllocError, Pool};
use super::meta;
use crate::handler::Ctx;
use crate::status::ApiError;

fn needs_cluster_ip(obj: &Value) -> bool {
    obj["spec"]["type"].as_str() != Some("ExternalName")
}

fn needs_node_ports(obj: &Value) -> bool {
    matches!(obj["spec"]["type"].as_str(), Some("NodePort" | "LoadBalancer"))
}

fn api_error(obj: &Value, e: AllocError) -> ApiError {
    let def = r8s_api::find("", "v1", "services").expect("in the catalogue");
    match e {
        AllocError::Invalid(fe) => super::invalid(def, meta::name(obj), &[fe]),
        AllocError::Full(m) => ApiError::internal(m),
        AllocError::Store(m) => ApiError::internal(m),
    }
}

/// Allocate what `obj` needs. Returns the allocations, to release if the create fails.
pub(crate) async fn allocate(ctx: &Ctx, obj: &mut Value) -> Result<Vec<(Pool, String)>, ApiError> {
    let store = ctx.shared.store.as_ref();
    let owner = format!("{}/{}", meta::namespace(obj), meta::name(obj));
    let mut done = Vec::new();
    let result = async {
        if needs_cluster_ip(obj) {
            let requested = obj["spec"]["clusterIP"]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_owned);
            if requested.as_deref() != Some("None") {
                let pool = Pool::ClusterIp(ctx.shared.service_cidr);
                let ip = allocator::allocate(store, pool, &owner, requested.as_deref(), "spec.clusterIPs")
                    .await
                    .map_err(|e| api_error(obj, e))?;
                done.push((pool, ip.clone()));
                obj["spec"]["clusterIP"] = json!(ip);
                obj["spec"]["clusterIPs"] = json!([ip]);
                obj["spec"]["ipFamilies"] = json!(["IPv4"]);
                obj["spec"]["ipFamilyPolicy"] = json!("SingleStack");
            } else {
                obj["spec"]["clusterIPs"] = json!(["None"]);
            }
            if obj["spec"]["internalTrafficPolicy"].is_null() {
                obj["spec"]["internalTrafficPolicy"] = json!("Cluster");
            }
        }
        if needs_node_ports(obj) {
            let count = obj["spec"]["ports"].as_array().map(Vec::len).unwrap_or(0);
            for i in 0..count {
                let requested = obj["spec"]["ports"][i]["nodePort"]
                    .as_i64()
                    .filter(|p| *p != 0)
                    .map(|p| p.to_string());
                let field = format!("spec.ports[{i}].nodePort");
                let port = allocator::allocate(store, Pool::NodePort, &owner, requested.as_deref(), &field)
                    .await
                    .map_err(|e| api_error(obj, e))?;
                done.push((Pool::NodePort, port.clone()));
                obj["spec"]["ports"][i]["nodePort"] = json!(port.parse::<i64>().unwrap_or(0));
            }
            if obj["spec"]["externalTrafficPolicy"].is_null() {
                obj["spec"]["externalTrafficPolicy"] = json!("Cluster");
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

pub(crate) async fn release(ctx: &Ctx, allocations: &[(Pool, String)]) {
    for (pool, value) in allocations {
        allocator::release(ctx.shared.store.as_ref(), *pool, value).await;
    }
}

/// Everything a stored service holds, to release when it is deleted.
pub(crate) fn allocations(ctx: &Ctx, obj: &Value) -> Vec<(Pool, String)> {
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
    out
}

/// On update, allocated values stay: an omitted cluster IP or node port keeps the stored one,
/// a different cluster IP is refused (it is immutable).
pub(crate) fn keep_allocations(obj: &mut Value, old: &Value) -> Result<(), ApiError> {
    let old_ip = old["spec"]["clusterIP"].as_str().unwrap_or("");
    match obj["spec"]["clusterIP"].as_str().unwrap_or("") {
        "" => {
            obj["spec"]["clusterIP"] = old["spec"]["clusterIP"].clone();
            obj["spec"]["clusterIPs"] = old["spec"]["clusterIPs"].clone();
        }
        ip if ip != old_ip => {
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
    let old_ports = old["spec"]["ports"].as_array().cloned().unwrap_or_default();
    if let Some(ports) = obj["spec"]["ports"].as_array_mut() {
        for p in ports {
            if p["nodePort"].as_i64().unwrap_or(0) == 0 {
                if let Some(np) = old_ports
                    .iter()
                    .find(|o| o["port"] == p["port"])
                    .and_then(|o| o["nodePort"].as_i64())
                {
                    p["nodePort"] = json!(np);
                }
            }
        }
    }
    Ok(())
}
