//! Discovery: `/api`, `/apis`, `/apis/<group>`, `/api/v1`, `/apis/<group>/<version>`, and
//! `/version`, from the resource catalogue.

use http::{HeaderMap, Response, StatusCode};
use serde_json::{json, Value};

use crate::context::Ctx;
use crate::http::{json_response, Body};
use crate::registry::catalogue::ServedSet;
use crate::status::ApiError;

pub(crate) fn version() -> Value {
    let v = crate::KUBERNETES_VERSION.trim_start_matches('v');
    let mut parts = v.split('.');
    let major = parts.next().unwrap_or("1");
    let minor = parts.next().unwrap_or("0");
    json!({
        "major": major,
        "minor": minor,
        "gitVersion": format!("{}+r8s-{}", crate::KUBERNETES_VERSION, env!("CARGO_PKG_VERSION")),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
        "goVersion": "rustc",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            other => other,
        }),
    })
}

fn group_version_json(group: &str, version: &str) -> Value {
    json!({"groupVersion": format!("{group}/{version}"), "version": version})
}

fn group_json(set: &ServedSet, group: &str) -> Value {
    let versions: Vec<Value> = set
        .group_versions()
        .into_iter()
        .filter(|(g, _)| *g == group)
        .map(|(g, v)| group_version_json(g, v))
        .collect();
    json!({
        "name": group,
        "versions": versions,
        "preferredVersion": versions.first().cloned().unwrap_or(Value::Null),
    })
}

fn resource_list(set: &ServedSet, group: &str, version: &str) -> Option<Value> {
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    let mut resources = Vec::new();
    for r in set
        .defs
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        let mut entry = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": r.verbs,
        });
        if !r.short_names.is_empty() {
            entry["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            entry["categories"] = json!(r.categories);
        }
        resources.push(entry);
        for s in r.subresources {
            let mut sub = json!({
                "name": format!("{}/{}", r.plural, s.name),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": if s.kind.is_empty() { r.kind } else { s.kind },
                "verbs": s.verbs,
            });
            if let Some(gv) = s.group_version {
                let (g, v) = gv.split_once('/').unwrap_or(("", gv));
                sub["group"] = json!(g);
                sub["version"] = json!(v);
            }
            resources.push(sub);
        }
    }
    if resources.is_empty() {
        return None;
    }
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }))
}

/// The aggregated discovery version a client asks for in Accept (`v2` or `v2beta1`), if any.
fn aggregated_version(headers: &HeaderMap) -> Option<&'static str> {
    let accept = headers.get(http::header::ACCEPT)?.to_str().ok()?;
    // Media types in the client's order of preference.
    for media in accept.split(',') {
        let params: Vec<&str> = media.split(';').map(str::trim).collect();
        if !params.contains(&"as=APIGroupDiscoveryList") || !params.contains(&"g=apidiscovery.k8s.io") {
            continue;
        }
        if params.contains(&"v=v2") {
            return Some("v2");
        }
        if params.contains(&"v=v2beta1") {
            return Some("v2beta1");
        }
    }
    None
}

/// One group's entry in an `APIGroupDiscoveryList` (aggregated discovery, KEP-3352).
fn group_discovery(set: &ServedSet, group: &str) -> Value {
    let versions: Vec<Value> = set
        .group_versions()
        .into_iter()
        .filter(|(g, _)| *g == group)
        .map(|(g, v)| {
            let resources: Vec<Value> = set
                .defs
                .iter()
                .filter(|r| r.group == g && r.version == v)
                .map(|r| {
                    let subresources: Vec<Value> = r
                        .subresources
                        .iter()
                        .map(|s| {
                            let (sg, sv) = match s.group_version {
                                Some(gv) => gv.split_once('/').unwrap_or(("", gv)),
                                None => (r.group, r.version),
                            };
                            json!({
                                "subresource": s.name,
                                "responseKind": {"group": sg, "version": sv, "kind": if s.kind.is_empty() { r.kind } else { s.kind }},
                                "verbs": s.verbs,
                            })
                        })
                        .collect();
                    let mut entry = json!({
                        "resource": r.plural,
                        "responseKind": {"group": r.group, "version": r.version, "kind": r.kind},
                        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
                        "singularResource": r.singular,
                        "verbs": r.verbs,
                    });
                    if !r.short_names.is_empty() {
                        entry["shortNames"] = json!(r.short_names);
                    }
                    if !r.categories.is_empty() {
                        entry["categories"] = json!(r.categories);
                    }
                    if !subresources.is_empty() {
                        entry["subresources"] = json!(subresources);
                    }
                    entry
                })
                .collect();
            json!({"version": v, "resources": resources, "freshness": "Current"})
        })
        .collect();
    let metadata = if group.is_empty() {
        json!({})
    } else {
        json!({"name": group})
    };
    json!({"metadata": metadata, "versions": versions})
}

fn aggregated(version: &str, groups: Vec<Value>) -> Response<Body> {
    let body = json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{version}"),
        "metadata": {},
        "items": groups,
    });
    let mut resp = json_response(StatusCode::OK, &body);
    let headers = resp.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_str(&format!(
            "application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList"
        ))
        .expect("valid header"),
    );
    headers.insert(http::header::VARY, http::HeaderValue::from_static("Accept"));
    resp
}

/// An aggregated group's APIGroup (its available versions, the preferred first).
fn aggregated_group_json(routes: &[crate::aggregator::Route], group: &str) -> Value {
    let versions: Vec<Value> = routes
        .iter()
        .filter(|r| r.group == group)
        .map(|r| group_version_json(&r.group, &r.version))
        .collect();
    json!({
        "name": group,
        "versions": versions,
        "preferredVersion": versions.first().cloned().unwrap_or(Value::Null),
    })
}

/// An aggregated group's entry in aggregated discovery, from its servers' resource lists.
fn aggregated_group_discovery(routes: &[crate::aggregator::Route], group: &str) -> Value {
    let versions: Vec<Value> = routes
        .iter()
        .filter(|r| r.group == group)
        .map(|r| {
            let list: Vec<&Value> = r.resources["resources"]
                .as_array()
                .into_iter()
                .flatten()
                .collect();
            let resources: Vec<Value> = list
                .iter()
                .filter(|x| !x["name"].as_str().unwrap_or("").contains('/'))
                .map(|x| {
                    let name = x["name"].as_str().unwrap_or("");
                    let subresources: Vec<Value> = list
                        .iter()
                        .filter_map(|s| {
                            let (parent, sub) = s["name"].as_str()?.split_once('/')?;
                            (parent == name).then(|| json!({
                                "subresource": sub,
                                "responseKind": {"group": r.group, "version": r.version, "kind": s["kind"]},
                                "verbs": s["verbs"],
                            }))
                        })
                        .collect();
                    let mut e = json!({
                        "resource": name,
                        "responseKind": {"group": r.group, "version": r.version, "kind": x["kind"]},
                        "scope": if x["namespaced"] == true { "Namespaced" } else { "Cluster" },
                        "singularResource": x["singularName"],
                        "verbs": x["verbs"],
                    });
                    for k in ["shortNames", "categories"] {
                        if x[k].as_array().is_some_and(|a| !a.is_empty()) {
                            e[k] = x[k].clone();
                        }
                    }
                    if !subresources.is_empty() {
                        e["subresources"] = json!(subresources);
                    }
                    e
                })
                .collect();
            json!({"version": r.version, "resources": resources, "freshness": "Current"})
        })
        .collect();
    json!({"metadata": {"name": group}, "versions": versions})
}

/// Answer a discovery path, or `None` if it is not one.
pub(crate) fn route(ctx: &Ctx, path: &str, headers: &HeaderMap) -> Option<Result<Response<Body>, ApiError>> {
    let ok = |v: Value| Some(Ok(json_response(StatusCode::OK, &v)));
    let set = ctx.shared.served.current();
    let set = &*set;
    // Groups other API servers serve (available APIServices), after the local ones.
    let routes = ctx.shared.aggregator.available();
    let mut agg_groups: Vec<String> = Vec::new();
    for r in &routes {
        if !set.groups().contains(&r.group.as_str()) && !agg_groups.contains(&r.group) {
            agg_groups.push(r.group.clone());
        }
    }
    if let Some(version) = aggregated_version(headers) {
        match path {
            "/api" => return Some(Ok(aggregated(version, vec![group_discovery(set, "")]))),
            "/apis" => {
                let mut groups: Vec<Value> = set
                    .groups()
                    .into_iter()
                    .map(|g| group_discovery(set, g))
                    .collect();
                groups.extend(agg_groups.iter().map(|g| aggregated_group_discovery(&routes, g)));
                return Some(Ok(aggregated(version, groups)));
            }
            _ => {}
        }
    }
    match path {
        "/api" => ok(json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ctx.shared.advertise}],
        })),
        "/apis" => ok(json!({
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": set
                .groups()
                .into_iter()
                .map(|g| group_json(set, g))
                .chain(agg_groups.iter().map(|g| aggregated_group_json(&routes, g)))
                .collect::<Vec<_>>(),
        })),
        _ => {
            let rest = path.strip_prefix('/')?;
            let parts: Vec<&str> = rest.split('/').collect();
            match parts.as_slice() {
                ["api", version] => {
                    resource_list(set, "", version).map(|v| Ok(json_response(StatusCode::OK, &v)))
                }
                ["apis", group] if agg_groups.iter().any(|g| g == group) => {
                    let mut g = aggregated_group_json(&routes, group);
                    g["kind"] = json!("APIGroup");
                    g["apiVersion"] = json!("v1");
                    ok(g)
                }
                ["apis", group] if set.group_versions().iter().any(|(g, _)| g == group) => {
                    let mut g = group_json(set, group);
                    g["kind"] = json!("APIGroup");
                    g["apiVersion"] = json!("v1");
                    ok(g)
                }
                ["apis", group, version] => {
                    resource_list(set, group, version).map(|v| Ok(json_response(StatusCode::OK, &v)))
                }
                _ => None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builtin() -> std::sync::Arc<ServedSet> {
        crate::registry::catalogue::Served::builtin().current()
    }

    #[test]
    fn resource_lists_carry_subresources_and_names() {
        let set = builtin();
        let resource_list = |g, v| resource_list(&set, g, v);
        let core = resource_list("", "v1").unwrap();
        let names: Vec<&str> = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"pods"));
        assert!(names.contains(&"pods/status"));
        assert!(names.contains(&"pods/binding"));
        let apps = resource_list("apps", "v1").unwrap();
        let scale = apps["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "deployments/scale")
            .unwrap();
        assert_eq!(scale["group"], "autoscaling");
        assert_eq!(scale["kind"], "Scale");
        assert!(resource_list("nope", "v1").is_none());
    }

    #[test]
    fn aggregated_discovery_is_negotiated_and_complete() {
        let mut h = HeaderMap::new();
        assert_eq!(aggregated_version(&h), None);
        h.insert(http::header::ACCEPT, "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json".parse().unwrap());
        assert_eq!(aggregated_version(&h), Some("v2"));
        h.insert(
            http::header::ACCEPT,
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
                .parse()
                .unwrap(),
        );
        assert_eq!(aggregated_version(&h), Some("v2beta1"));
        let set = builtin();
        let group_discovery = |g| group_discovery(&set, g);
        let apps = group_discovery("apps");
        assert_eq!(apps["metadata"]["name"], "apps");
        let deploy = apps["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == "deployments")
            .unwrap();
        assert_eq!(deploy["scope"], "Namespaced");
        assert_eq!(deploy["shortNames"], json!(["deploy"]));
        let scale = deploy["subresources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["subresource"] == "scale")
            .unwrap();
        assert_eq!(
            scale["responseKind"],
            json!({"group": "autoscaling", "version": "v1", "kind": "Scale"})
        );
        let core = group_discovery("");
        assert_eq!(core["metadata"], json!({}));
        assert!(core["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["resource"] == "pods"));
    }

    #[test]
    fn version_is_kubernetes_shaped() {
        let v = version();
        assert_eq!(v["major"], "1");
        assert_eq!(v["minor"], "33");
        assert!(v["gitVersion"].as_str().unwrap().starts_with("v1.33.0"));
    }
}
