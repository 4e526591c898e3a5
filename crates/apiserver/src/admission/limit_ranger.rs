//! `LimitRanger` (upstream's admission plugin of that name, on by default): the LimitRange
//! objects of a namespace give containers their default requests and limits (mutating, with a
//! `kubernetes.io/limit-ranger` annotation saying what was set), then bound what containers,
//! whole pods and persistent volume claims may ask for: min, max and the largest limit to
//! request ratio (validating), with upstream's messages.
//!
//! As upstream, pods are checked when they are created (their containers' resources cannot
//! change afterwards), claims when created or updated.

use std::sync::Arc;

use async_trait::async_trait;
use r8s_api::quantity::Quantity;
use r8s_api::quota::{parse_list, pod_effective, ResourceList};
use serde_json::{json, Value};

use super::{aggregate, Attributes, MutatingPlugin, Operation, ValidatingPlugin};
use crate::status::ApiError;

pub const ANNOTATION: &str = "kubernetes.io/limit-ranger";

pub struct LimitRanger {
    pub listers: super::listers::Listers,
}

/// Which requests the plugin looks at, and whether it is a pod.
fn supported(attrs: &Attributes<'_>) -> Option<bool> {
    if !attrs.request.subresource.is_empty() || !attrs.request.api_group.is_empty() {
        return None;
    }
    // An object being deleted is left alone.
    if attrs
        .old_object
        .is_some_and(|o| o["metadata"]["deletionTimestamp"].is_string())
    {
        return None;
    }
    match (attrs.request.resource.as_str(), attrs.operation) {
        ("pods", Operation::Create) => Some(true),
        ("persistentvolumeclaims", Operation::Create | Operation::Update) => Some(false),
        _ => None,
    }
}

impl LimitRanger {
    async fn limit_ranges(&self, ns: &str) -> Result<Vec<Arc<Value>>, ApiError> {
        self.listers.limit_ranges(ns).await
    }
}

fn items<'a>(limit_range: &'a Value, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    limit_range["spec"]["limits"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(move |l| l["type"] == kind)
}

/// Give the pod's containers the LimitRange's defaults they lack, and note what was set in the
/// annotation (upstream `PodMutateLimitFunc`).
fn apply_defaults(limit_range: &Value, pod: &mut Value) {
    let mut default_requests = ResourceList::new();
    let mut default_limits = ResourceList::new();
    for item in items(limit_range, "Container") {
        default_requests.extend(parse_list(&item["defaultRequest"]));
        default_limits.extend(parse_list(&item["default"]));
    }
    let mut notes: Vec<String> = Vec::new();
    for (list, label) in [("containers", "container"), ("initContainers", "init container")] {
        let Some(cs) = pod["spec"][list].as_array_mut() else {
            continue;
        };
        for c in cs {
            let name = c["name"].as_str().unwrap_or("").to_owned();
            let mut set = |field: &str, defaults: &ResourceList| -> Vec<String> {
                let mut added = Vec::new();
                for (k, q) in defaults {
                    let present = c["resources"][field].get(k).is_some_and(|v| !v.is_null());
                    if !present {
                        if !c["resources"][field].is_object() {
                            c["resources"][field] = json!({});
                        }
                        c["resources"][field][k] = json!(q.to_string());
                        added.push(k.clone());
                    }
                }
                added
            };
            let requests = set("requests", &default_requests);
            let limits = set("limits", &default_limits);
            if !requests.is_empty() {
                notes.push(format!("{} request for {label} {name}", requests.join(", ")));
            }
            if !limits.is_empty() {
                notes.push(format!("{} limit for {label} {name}", limits.join(", ")));
            }
        }
    }
    if !notes.is_empty() {
        if !pod["metadata"]["annotations"].is_object() {
            pod["metadata"]["annotations"] = json!({});
        }
        pod["metadata"]["annotations"][ANNOTATION] =
            json!(format!("LimitRanger plugin set: {}", notes.join("; ")));
    }
}

fn min_constraint(
    kind: &str,
    resource: &str,
    enforced: &Quantity,
    requests: &ResourceList,
    limits: &ResourceList,
) -> Option<String> {
    let Some(req) = requests.get(resource) else {
        return Some(format!(
            "minimum {resource} usage per {kind} is {enforced}.  No request is specified"
        ));
    };
    if enforced > req {
        return Some(format!(
            "minimum {resource} usage per {kind} is {enforced}, but request is {req}"
        ));
    }
    match limits.get(resource) {
        Some(lim) if enforced > lim => Some(format!(
            "minimum {resource} usage per {kind} is {enforced}, but limit is {lim}"
        )),
        _ => None,
    }
}

fn max_constraint(
    kind: &str,
    resource: &str,
    enforced: &Quantity,
    requests: &ResourceList,
    limits: &ResourceList,
) -> Option<String> {
    let Some(lim) = limits.get(resource) else {
        return Some(format!(
            "maximum {resource} usage per {kind} is {enforced}.  No limit is specified"
        ));
    };
    if lim > enforced {
        return Some(format!(
            "maximum {resource} usage per {kind} is {enforced}, but limit is {lim}"
        ));
    }
    match requests.get(resource) {
        Some(req) if req > enforced => Some(format!(
            "maximum {resource} usage per {kind} is {enforced}, but request is {req}"
        )),
        _ => None,
    }
}

/// For claims, whose limits are not user input: the request alone is bounded.
fn max_request_constraint(
    kind: &str,
    resource: &str,
    enforced: &Quantity,
    requests: &ResourceList,
) -> Option<String> {
    match requests.get(resource) {
        None => Some(format!(
            "maximum {resource} usage per {kind} is {enforced}.  No request is specified"
        )),
        Some(req) if req > enforced => Some(format!(
            "maximum {resource} usage per {kind} is {enforced}, but request is {req}"
        )),
        _ => None,
    }
}

fn ratio_constraint(
    kind: &str,
    resource: &str,
    enforced: &Quantity,
    requests: &ResourceList,
    limits: &ResourceList,
) -> Option<String> {
    let req = requests.get(resource).filter(|q| !q.is_zero());
    let Some(req) = req else {
        return Some(format!(
            "{resource} max limit to request ratio per {kind} is {enforced}, but no request is specified or request is 0"
        ));
    };
    let lim = limits.get(resource).filter(|q| !q.is_zero());
    let Some(lim) = lim else {
        return Some(format!(
            "{resource} max limit to request ratio per {kind} is {enforced}, but no limit is specified or limit is 0"
        ));
    };
    // limit > request × ratio, in exact thousandths.
    let (l, r, e) = (
        lim.milli_value().abs(),
        req.milli_value().abs(),
        enforced.milli_value(),
    );
    if l * 1000 > r * e {
        return Some(format!(
            "{resource} max limit to request ratio per {kind} is {enforced}, but provided ratio is {:.6}",
            l as f64 / r as f64
        ));
    }
    None
}

/// Min, max and ratio of one LimitRange item against requests and limits.
fn check_item(
    item: &Value,
    kind: &str,
    requests: &ResourceList,
    limits: &ResourceList,
    errs: &mut Vec<String>,
) {
    for (r, q) in parse_list(&item["min"]) {
        errs.extend(min_constraint(kind, &r, &q, requests, limits));
    }
    for (r, q) in parse_list(&item["max"]) {
        errs.extend(max_constraint(kind, &r, &q, requests, limits));
    }
    for (r, q) in parse_list(&item["maxLimitRequestRatio"]) {
        errs.extend(ratio_constraint(kind, &r, &q, requests, limits));
    }
}

/// Every violation of the LimitRange by a pod (upstream `PodValidateLimitFunc`).
fn validate_pod(limit_range: &Value, pod: &Value) -> Vec<String> {
    let mut errs = Vec::new();
    let spec = &pod["spec"];
    for item in limit_range["spec"]["limits"].as_array().into_iter().flatten() {
        match item["type"].as_str() {
            Some("Container") => {
                for list in ["containers", "initContainers"] {
                    for c in spec[list].as_array().into_iter().flatten() {
                        let requests = parse_list(&c["resources"]["requests"]);
                        let limits = parse_list(&c["resources"]["limits"]);
                        check_item(item, "Container", &requests, &limits, &mut errs);
                    }
                }
            }
            Some("Pod") => {
                let requests = pod_effective(spec, "requests");
                let limits = pod_effective(spec, "limits");
                check_item(item, "Pod", &requests, &limits, &mut errs);
            }
            _ => {}
        }
    }
    errs
}

/// Storage bounds of a claim; on update a request that did not change is not checked again.
fn validate_claim(limit_range: &Value, claim: &Value, old: Option<&Value>) -> Vec<String> {
    let mut errs = Vec::new();
    let requests = parse_list(&claim["spec"]["resources"]["requests"]);
    let old_requests = old
        .map(|o| parse_list(&o["spec"]["resources"]["requests"]))
        .unwrap_or_default();
    let unchanged = |r: &str| requests.get(r).is_some_and(|q| old_requests.get(r) == Some(q));
    for item in items(limit_range, "PersistentVolumeClaim") {
        for (r, q) in parse_list(&item["min"]) {
            if !unchanged(&r) {
                errs.extend(min_constraint(
                    "PersistentVolumeClaim",
                    &r,
                    &q,
                    &requests,
                    &ResourceList::new(),
                ));
            }
        }
        for (r, q) in parse_list(&item["max"]) {
            if !unchanged(&r) {
                errs.extend(max_request_constraint("PersistentVolumeClaim", &r, &q, &requests));
            }
        }
    }
    errs
}

#[async_trait]
impl MutatingPlugin for LimitRanger {
    fn name(&self) -> &'static str {
        "LimitRanger"
    }

    async fn admit(&self, attrs: &mut Attributes<'_>) -> Result<(), ApiError> {
        if supported(attrs) != Some(true) {
            return Ok(());
        }
        let ranges = self.limit_ranges(&attrs.request.namespace).await?;
        if let Some(pod) = attrs.object.as_deref_mut() {
            for lr in &ranges {
                apply_defaults(lr, pod);
            }
        }
        Ok(())
    }
}

#[async_trait]
impl ValidatingPlugin for LimitRanger {
    fn name(&self) -> &'static str {
        "LimitRanger"
    }

    async fn validate(&self, attrs: &Attributes<'_>) -> Result<(), ApiError> {
        let Some(is_pod) = supported(attrs) else {
            return Ok(());
        };
        let Some(obj) = attrs.object.as_deref() else {
            return Ok(());
        };
        for lr in self.limit_ranges(&attrs.request.namespace).await? {
            let errs = if is_pod {
                validate_pod(&lr, obj)
            } else {
                validate_claim(&lr, obj, attrs.old_object)
            };
            if !errs.is_empty() {
                return Err(attrs.forbidden(aggregate(&errs)));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use r8s_store::Store;
    use std::sync::Arc;

    fn limit_range() -> Value {
        json!({"metadata": {"name": "lr", "namespace": "dev"}, "spec": {"limits": [
            {"type": "Container",
             "default": {"cpu": "0.5", "memory": "128Mi"},
             "defaultRequest": {"cpu": "100m", "memory": "64Mi"},
             "max": {"cpu": "1"},
             "min": {"memory": "10Mi"}},
            {"type": "Pod", "max": {"memory": "1Gi"}},
            {"type": "PersistentVolumeClaim", "min": {"storage": "1Gi"}, "max": {"storage": "10Gi"}},
        ]}})
    }

    async fn store_with(objs: &[Value]) -> (tempfile::TempDir, Arc<dyn Store>) {
        let dir = tempfile::tempdir().unwrap();
        let s =
            r8s_store::embedded::EmbeddedStore::open(r8s_store::embedded::EmbeddedOptions::new(dir.path()))
                .unwrap();
        for o in objs {
            let key = format!(
                "/registry/limitranges/{}/{}",
                o["metadata"]["namespace"].as_str().unwrap(),
                o["metadata"]["name"].as_str().unwrap()
            );
            s.create(&key, serde_json::to_vec(o).unwrap().into())
                .await
                .unwrap();
        }
        (dir, Arc::new(s))
    }

    async fn admit_pod(store: Arc<dyn Store>, pod: &mut Value) -> Result<(), ApiError> {
        let plugin = LimitRanger {
            listers: crate::admission::listers::Listers::new(store),
        };
        crate::admission::testing::create_pod("dev", pod, Some(&plugin), Some(&plugin)).await
    }

    #[tokio::test]
    async fn defaults_are_applied_and_annotated() {
        let (_d, s) = store_with(&[limit_range()]).await;
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {
            "containers": [{"name": "c", "image": "x"}, {"name": "d", "image": "x", "resources": {"limits": {"cpu": "200m"}}}],
        }});
        admit_pod(s, &mut pod).await.unwrap();
        let c = &pod["spec"]["containers"][0]["resources"];
        assert_eq!(c["requests"], json!({"cpu": "100m", "memory": "64Mi"}));
        assert_eq!(c["limits"], json!({"cpu": "500m", "memory": "128Mi"}));
        assert_eq!(pod["spec"]["containers"][1]["resources"]["limits"]["cpu"], "200m");
        assert_eq!(
            pod["metadata"]["annotations"][ANNOTATION],
            "LimitRanger plugin set: cpu, memory request for container c; cpu, memory limit for container c; cpu, memory request for container d; memory limit for container d"
        );
    }

    #[tokio::test]
    async fn min_and_max_are_enforced_with_upstream_messages() {
        let (_d, s) = store_with(&[limit_range()]).await;
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x",
            "resources": {"requests": {"cpu": "100m", "memory": "5Mi"}, "limits": {"cpu": "2", "memory": "10Mi"}}}]}});
        let err = admit_pod(s.clone(), &mut pod).await.unwrap_err();
        assert_eq!(err.code, 403);
        assert_eq!(
            err.message,
            "pods \"p\" is forbidden: [minimum memory usage per Container is 10Mi, but request is 5Mi, maximum cpu usage per Container is 1, but limit is 2]"
        );
        // One error alone is not bracketed; the Pod item sums the containers.
        let mut pod = json!({"metadata": {"name": "q"}, "spec": {"containers": [
            {"name": "a", "image": "x", "resources": {"limits": {"memory": "600Mi"}}},
            {"name": "b", "image": "x", "resources": {"limits": {"memory": "600Mi"}}}]}});
        let err = admit_pod(s, &mut pod).await.unwrap_err();
        assert_eq!(
            err.message,
            "pods \"q\" is forbidden: maximum memory usage per Pod is 1Gi, but limit is 1200Mi"
        );
    }

    #[test]
    fn ratio_and_claims() {
        let lr = json!({"spec": {"limits": [{"type": "Container", "maxLimitRequestRatio": {"cpu": "2"}}]}});
        let pod = json!({"spec": {"containers": [{"name": "c",
            "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "300m"}}}]}});
        assert_eq!(
            validate_pod(&lr, &pod),
            vec![
                "cpu max limit to request ratio per Container is 2, but provided ratio is 3.000000"
                    .to_string()
            ]
        );
        let claim = json!({"spec": {"resources": {"requests": {"storage": "20Gi"}}}});
        assert_eq!(
            validate_claim(&limit_range(), &claim, None),
            vec!["maximum storage usage per PersistentVolumeClaim is 10Gi, but request is 20Gi".to_string()]
        );
        // Unchanged on update: not checked again.
        assert!(validate_claim(&limit_range(), &claim, Some(&claim)).is_empty());
    }
}
