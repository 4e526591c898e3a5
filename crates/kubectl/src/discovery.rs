//! API discovery as kubectl does it: the aggregated documents from `/api` and `/apis` (legacy
//! per-group-version documents from older servers), kept on disk in kubectl's own layout
//! (`<cache>/discovery/<host_port>/servergroups.json` and
//! `<group>/<version>/serverresources.json`, valid six hours) so r8s kubectl and the Go
//! kubectl share one cache; and the RESTMapper's job of turning `po`, `deploy.apps` or
//! `deployments.v1.apps` into a resource.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use crate::error::Result;
use crate::rest::Rest;

const TTL: Duration = Duration::from_secs(6 * 3600);
const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

#[derive(Debug, Clone, PartialEq)]
pub struct Resource {
    pub group: String,
    pub version: String,
    /// The plural name (`deployments`).
    pub name: String,
    pub singular: String,
    pub kind: String,
    pub namespaced: bool,
    pub verbs: Vec<String>,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
}

impl Resource {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The path of the collection, in `namespace` when the resource is namespaced and one is
    /// given.
    pub fn collection_path(&self, namespace: Option<&str>) -> String {
        let base = if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        match namespace {
            Some(ns) if self.namespaced => format!("{base}/namespaces/{ns}/{}", self.name),
            _ => format!("{base}/{}", self.name),
        }
    }

    /// `deployment.apps`, as `-o name` and multi-kind tables print it.
    pub fn kind_prefix(&self) -> String {
        if self.group.is_empty() {
            self.kind.to_lowercase()
        } else {
            format!("{}.{}", self.kind.to_lowercase(), self.group)
        }
    }

    /// `deployments.apps`, as errors name the resource.
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.name.clone()
        } else {
            format!("{}.{}", self.name, self.group)
        }
    }
}

#[derive(Debug, Clone)]
pub struct Group {
    pub name: String,
    /// Versions, preferred first.
    pub versions: Vec<String>,
}

#[derive(Debug, Clone, Default)]
pub struct Discovery {
    pub groups: Vec<Group>,
    /// Every resource of every served version, in discovery order, without subresources.
    pub resources: Vec<Resource>,
    /// Read from the cache (a miss may be staleness: refresh and look again).
    pub from_cache: bool,
}

/// `<cache>/discovery/<host with anything but word characters, '.', '/', '(' and ')' as '_'>`.
pub fn cache_dir_for(cache: &Path, server: &str) -> PathBuf {
    let host = server.replacen("https://", "", 1).replacen("http://", "", 1);
    let safe: String = host
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || matches!(c, '_' | '/' | '.' | '(' | ')') {
                c
            } else {
                '_'
            }
        })
        .collect();
    cache.join("discovery").join(safe)
}

impl Discovery {
    /// From the cache when it is fresh, else from the server (and cached).
    pub async fn load(rest: &Rest, dir: &Path) -> Result<Discovery> {
        if let Some(d) = Self::read_cache(dir) {
            return Ok(d);
        }
        Self::refresh(rest, dir).await
    }

    pub async fn refresh(rest: &Rest, dir: &Path) -> Result<Discovery> {
        let (groups, lists) = fetch(rest).await?;
        write_cache(dir, &groups, &lists);
        Ok(Self::from_documents(&groups, &lists, false))
    }

    fn read_cache(dir: &Path) -> Option<Discovery> {
        let groups_path = dir.join("servergroups.json");
        if !fresh(&groups_path) {
            return None;
        }
        let groups: Value = serde_json::from_slice(&std::fs::read(&groups_path).ok()?).ok()?;
        let mut lists = Vec::new();
        for g in groups["groups"].as_array()? {
            for v in g["versions"].as_array()? {
                let gv = v["groupVersion"].as_str()?;
                let path = dir.join(gv).join("serverresources.json");
                if !fresh(&path) {
                    return None;
                }
                lists.push(serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?);
            }
        }
        Some(Self::from_documents(&groups, &lists, true))
    }

    /// From an APIGroupList and the APIResourceLists of its versions.
    fn from_documents(groups: &Value, lists: &[Value], from_cache: bool) -> Discovery {
        let mut d = Discovery {
            from_cache,
            ..Default::default()
        };
        for g in groups["groups"].as_array().into_iter().flatten() {
            let name = g["name"].as_str().unwrap_or("").to_owned();
            let preferred = g["preferredVersion"]["version"].as_str().unwrap_or("");
            let mut versions: Vec<String> = g["versions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v["version"].as_str().map(str::to_owned))
                .collect();
            if let Some(i) = versions.iter().position(|v| v == preferred) {
                let p = versions.remove(i);
                versions.insert(0, p);
            }
            d.groups.push(Group { name, versions });
        }
        for list in lists {
            let gv = list["groupVersion"].as_str().unwrap_or("");
            let (group, version) = match gv.split_once('/') {
                Some((g, v)) => (g, v),
                None => ("", gv),
            };
            for r in list["resources"].as_array().into_iter().flatten() {
                let name = r["name"].as_str().unwrap_or("");
                if name.contains('/') {
                    continue;
                }
                let strings = |k: &str| -> Vec<String> {
                    r[k].as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|s| s.as_str().map(str::to_owned))
                        .collect()
                };
                d.resources.push(Resource {
                    group: group.to_owned(),
                    version: version.to_owned(),
                    name: name.to_owned(),
                    singular: r["singularName"].as_str().unwrap_or("").to_owned(),
                    kind: r["kind"].as_str().unwrap_or("").to_owned(),
                    namespaced: r["namespaced"].as_bool().unwrap_or(false),
                    verbs: strings("verbs"),
                    short_names: strings("shortNames"),
                    categories: strings("categories"),
                });
            }
        }
        d
    }

    /// The resources of each group's preferred version, in discovery order (core first).
    pub fn preferred(&self) -> impl Iterator<Item = &Resource> {
        self.groups.iter().flat_map(move |g| {
            let v = g.versions.first().cloned().unwrap_or_default();
            self.resources
                .iter()
                .filter(move |r| r.group == g.name && r.version == v)
        })
    }

    /// kubectl's RESTMapper: `arg` is `resource`, `resource.group` or
    /// `resource.version.group`, where resource may be plural, singular, a short name or
    /// the kind. None when nothing matches.
    pub fn resolve(&self, arg: &str) -> Option<&Resource> {
        // Names and kinds match in any case, short names only as they are (kubectl's
        // shortcut expander compares before the RESTMapper lowercases): `DEPLOY` is unknown.
        let lower = arg.to_lowercase();
        // resource.version.group first (only when the version is one the group serves).
        if let (Some((res, rest)), Some((orig, _))) = (lower.split_once('.'), arg.split_once('.')) {
            if let Some((version, group)) = rest.split_once('.') {
                if let Some(r) = self.find(res, orig, Some(group), Some(version)) {
                    return Some(r);
                }
            }
            if let Some(r) = self.find(res, orig, Some(rest), None) {
                return Some(r);
            }
        }
        self.find(&lower, arg, None, None)
    }

    /// `resource` or `resource.group` only (a GroupResource, as `explain` parses its
    /// argument's prefixes).
    pub fn resolve_group_resource(&self, arg: &str) -> Option<&Resource> {
        let lower = arg.to_lowercase();
        match (lower.split_once('.'), arg.split_once('.')) {
            (Some((res, group)), Some((orig, _))) => self.find(res, orig, Some(group), None),
            _ => self.find(&lower, arg, None, None),
        }
    }

    fn find(&self, res: &str, orig: &str, group: Option<&str>, version: Option<&str>) -> Option<&Resource> {
        let named = |r: &Resource| r.name == res || r.singular == res || r.kind.to_lowercase() == res;
        let matches = |r: &Resource| named(r) || r.short_names.iter().any(|s| s == orig);
        match (group, version) {
            (Some(g), Some(v)) => self
                .resources
                .iter()
                .find(|r| r.group == g && r.version == v && matches(r)),
            (Some(g), None) => {
                // A group named in full, or a prefix of one (`deploy.apps`).
                self.preferred()
                    .find(|r| r.group == g && matches(r))
                    .or_else(|| self.resources.iter().find(|r| r.group == g && matches(r)))
            }
            _ => {
                // Plural and singular names before short names, as the shortcut expander
                // only applies when the name is not a resource itself.
                self.preferred()
                    .find(|r| named(r))
                    .or_else(|| self.preferred().find(|r| matches(r)))
            }
        }
    }

    /// The resources of a category (`all`), in discovery order.
    pub fn category(&self, name: &str) -> Vec<&Resource> {
        self.preferred()
            .filter(|r| r.categories.iter().any(|c| c == name))
            .collect()
    }
}

fn fresh(path: &Path) -> bool {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .is_some_and(|age| age < TTL)
}

/// The APIGroupList (core group first) and each version's APIResourceList.
async fn fetch(rest: &Rest) -> Result<(Value, Vec<Value>)> {
    let core = rest.json(http::Method::GET, "/api", AGGREGATED, None).await?;
    let apis = rest.json(http::Method::GET, "/apis", AGGREGATED, None).await?;
    if core["kind"] == "APIGroupDiscoveryList" && apis["kind"] == "APIGroupDiscoveryList" {
        let mut groups = Vec::new();
        let mut lists = Vec::new();
        for doc in [&core, &apis] {
            for item in doc["items"].as_array().into_iter().flatten() {
                let name = item["metadata"]["name"].as_str().unwrap_or("");
                let mut versions = Vec::new();
                for v in item["versions"].as_array().into_iter().flatten() {
                    let version = v["version"].as_str().unwrap_or("");
                    let gv = if name.is_empty() {
                        version.to_owned()
                    } else {
                        format!("{name}/{version}")
                    };
                    versions.push(json!({"groupVersion": gv, "version": version}));
                    lists.push(resource_list(&gv, version, v));
                }
                let preferred = versions.first().cloned().unwrap_or(Value::Null);
                groups.push(json!({"name": name, "versions": versions, "preferredVersion": preferred}));
            }
        }
        return Ok((
            json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}),
            lists,
        ));
    }
    // Legacy discovery: /api's versions, /apis's groups, then each group version.
    let mut groups = Vec::new();
    let mut lists = Vec::new();
    let core_versions: Vec<String> = core["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    if !core_versions.is_empty() {
        let versions: Vec<Value> = core_versions
            .iter()
            .map(|v| json!({"groupVersion": v, "version": v}))
            .collect();
        groups.push(json!({"name": "", "versions": versions, "preferredVersion": versions[0]}));
    }
    for g in apis["groups"].as_array().into_iter().flatten() {
        groups.push(g.clone());
    }
    for g in &groups {
        for v in g["versions"].as_array().into_iter().flatten() {
            let gv = v["groupVersion"].as_str().unwrap_or("");
            let path = if gv.contains('/') {
                format!("/apis/{gv}")
            } else {
                format!("/api/{gv}")
            };
            lists.push(rest.get(&path).await?);
        }
    }
    Ok((
        json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}),
        lists,
    ))
}

/// An aggregated discovery version as the APIResourceList kubectl caches.
fn resource_list(gv: &str, version: &str, v: &Value) -> Value {
    let mut resources = Vec::new();
    for r in v["resources"].as_array().into_iter().flatten() {
        let name = r["resource"].as_str().unwrap_or("");
        let namespaced = r["scope"] == "Namespaced";
        let mut entry = json!({
            "name": name,
            "singularName": r["singularResource"],
            "namespaced": namespaced,
            "version": version,
            "kind": r["responseKind"]["kind"],
            "verbs": r["verbs"],
        });
        if let Some(g) = r["responseKind"]["group"].as_str().filter(|g| !g.is_empty()) {
            entry["group"] = json!(g);
        }
        for k in ["shortNames", "categories"] {
            if r[k].as_array().is_some_and(|a| !a.is_empty()) {
                entry[k] = r[k].clone();
            }
        }
        resources.push(entry);
        for s in r["subresources"].as_array().into_iter().flatten() {
            resources.push(json!({
                "name": format!("{name}/{}", s["subresource"].as_str().unwrap_or("")),
                "singularName": r["singularResource"],
                "namespaced": namespaced,
                "version": version,
                "kind": s["responseKind"]["kind"],
                "verbs": s["verbs"],
            }));
        }
    }
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources})
}

/// Best effort, as kubectl: a cache that cannot be written only costs the next run a fetch.
fn write_cache(dir: &Path, groups: &Value, lists: &[Value]) {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let write = |path: &Path, v: &Value| -> std::io::Result<()> {
        if let Some(parent) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o750)
                .create(parent)?;
        }
        // Write then rename, so a concurrent reader never sees half a file.
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o660)
            .open(&tmp)?;
        std::io::Write::write_all(&mut f, &serde_json::to_vec(v).unwrap_or_default())?;
        std::fs::rename(&tmp, path)
    };
    for list in lists {
        let gv = list["groupVersion"].as_str().unwrap_or("");
        let _ = write(&dir.join(gv).join("serverresources.json"), list);
    }
    let _ = write(&dir.join("servergroups.json"), groups);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn discovery() -> Discovery {
        let groups = json!({"groups": [
            {"name": "", "versions": [{"groupVersion": "v1", "version": "v1"}], "preferredVersion": {"version": "v1"}},
            {"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}], "preferredVersion": {"version": "v1"}},
            {"name": "events.k8s.io", "versions": [{"groupVersion": "events.k8s.io/v1", "version": "v1"}], "preferredVersion": {"version": "v1"}},
            {"name": "autoscaling", "versions": [{"groupVersion": "autoscaling/v2", "version": "v2"}, {"groupVersion": "autoscaling/v1", "version": "v1"}], "preferredVersion": {"version": "v2"}}]});
        let lists = vec![
            json!({"groupVersion": "v1", "resources": [
                {"name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod", "shortNames": ["po"], "categories": ["all"]},
                {"name": "pods/log", "singularName": "pod", "namespaced": true, "kind": "Pod"},
                {"name": "events", "singularName": "event", "namespaced": true, "kind": "Event", "shortNames": ["ev"]},
                {"name": "nodes", "singularName": "node", "namespaced": false, "kind": "Node", "shortNames": ["no"]}]}),
            json!({"groupVersion": "apps/v1", "resources": [
                {"name": "deployments", "singularName": "deployment", "namespaced": true, "kind": "Deployment", "shortNames": ["deploy"], "categories": ["all"]}]}),
            json!({"groupVersion": "events.k8s.io/v1", "resources": [
                {"name": "events", "singularName": "event", "namespaced": true, "kind": "Event", "shortNames": ["ev"]}]}),
            json!({"groupVersion": "autoscaling/v2", "resources": [
                {"name": "horizontalpodautoscalers", "singularName": "horizontalpodautoscaler", "namespaced": true, "kind": "HorizontalPodAutoscaler", "shortNames": ["hpa"]}]}),
            json!({"groupVersion": "autoscaling/v1", "resources": [
                {"name": "horizontalpodautoscalers", "singularName": "horizontalpodautoscaler", "namespaced": true, "kind": "HorizontalPodAutoscaler", "shortNames": ["hpa"]}]}),
        ];
        Discovery::from_documents(&groups, &lists, false)
    }

    #[test]
    fn names_resolve_as_kubectl_resolves_them() {
        let d = discovery();
        let r = |a: &str| {
            d.resolve(a)
                .map(|r| (r.group.as_str(), r.version.as_str(), r.name.as_str()))
        };
        assert_eq!(r("po"), Some(("", "v1", "pods")));
        assert_eq!(r("Pod"), Some(("", "v1", "pods")));
        assert_eq!(r("pod"), Some(("", "v1", "pods")));
        assert_eq!(r("deploy"), Some(("apps", "v1", "deployments")));
        assert_eq!(r("deployments.apps"), Some(("apps", "v1", "deployments")));
        assert_eq!(r("deployment.v1.apps"), Some(("apps", "v1", "deployments")));
        // The core group first among groups serving the same name.
        assert_eq!(r("events"), Some(("", "v1", "events")));
        assert_eq!(r("events.events.k8s.io"), Some(("events.k8s.io", "v1", "events")));
        // The preferred version unless one is named.
        assert_eq!(r("hpa"), Some(("autoscaling", "v2", "horizontalpodautoscalers")));
        assert_eq!(
            r("hpa.v1.autoscaling"),
            Some(("autoscaling", "v1", "horizontalpodautoscalers"))
        );
        assert_eq!(r("pods/log"), None);
        assert_eq!(r("nope"), None);
        // Names and kinds in any case; short names only as they are.
        assert_eq!(r("PODS"), Some(("", "v1", "pods")));
        assert_eq!(r("PO"), None);
        assert_eq!(r("DEPLOY"), None);
        // explain's prefixes: resource or resource.group, never with a version.
        let g = |a: &str| d.resolve_group_resource(a).map(|r| r.name.as_str());
        assert_eq!(g("deployments.apps"), Some("deployments"));
        assert_eq!(g("deployments.v1.apps"), None);
        assert_eq!(g("deploy"), Some("deployments"));
        let all: Vec<&str> = d.category("all").iter().map(|r| r.name.as_str()).collect();
        assert_eq!(all, ["pods", "deployments"]);
    }

    #[test]
    fn cache_is_kubectls_layout_and_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let cache = cache_dir_for(dir.path(), "https://127.0.0.1:6443");
        assert!(cache.ends_with("discovery/127.0.0.1_6443"), "{cache:?}");
        let d = discovery();
        let groups = json!({"groups": d.groups.iter().map(|g| json!({
            "name": g.name,
            "versions": g.versions.iter().map(|v| json!({"groupVersion": if g.name.is_empty() { v.clone() } else { format!("{}/{v}", g.name) }, "version": v})).collect::<Vec<_>>(),
            "preferredVersion": {"version": g.versions[0]}})).collect::<Vec<_>>()});
        let lists: Vec<Value> = ["v1", "apps/v1", "events.k8s.io/v1", "autoscaling/v2", "autoscaling/v1"]
            .iter()
            .map(|gv| json!({"groupVersion": gv, "resources": d.resources.iter()
                .filter(|r| r.api_version() == *gv)
                .map(|r| json!({"name": r.name, "singularName": r.singular, "namespaced": r.namespaced, "kind": r.kind, "shortNames": r.short_names, "categories": r.categories}))
                .collect::<Vec<_>>()}))
            .collect();
        write_cache(&cache, &groups, &lists);
        assert!(cache.join("apps/v1/serverresources.json").is_file());
        let back = Discovery::read_cache(&cache).expect("fresh cache");
        assert!(back.from_cache);
        assert_eq!(back.resources, d.resources);
        // A missing version document makes the whole cache stale.
        std::fs::remove_file(cache.join("apps/v1/serverresources.json")).unwrap();
        assert!(Discovery::read_cache(&cache).is_none());
    }
}
