//! Subresources: `status` (its own write path: only status changes), `scale` (an
//! `autoscaling/v1` Scale over spec.replicas), `binding` (pods: sets spec.nodeName and the
//! PodScheduled condition) and `finalize` (namespaces: spec.finalizers).

use crate::registry::Resource;
use bytes::Bytes;
use serde_json::{json, Value};

use super::{apply_update, decode_body, meta, read, store_error, Query, Target};
use crate::context::Ctx;
use crate::status::ApiError;

/// Which part of an object a request reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum View {
    Main,
    /// The main resource, written by server-side apply (which keeps its own field records).
    Apply,
    Status,
    Scale,
    Finalize,
    /// CertificateSigningRequests' `approval`: only status.conditions.
    Approval,
    /// Pods' `resize` (in-place vertical scaling): only the containers' cpu and memory
    /// requests and limits, and their resizePolicy.
    Resize,
    /// Pods' `ephemeralcontainers`: only spec.ephemeralContainers, and only additions.
    EphemeralContainers,
}

impl View {
    /// The view a subresource reads and writes; `None` for connections (binding, proxies, …).
    pub fn of(sub: &str) -> Option<View> {
        Some(match sub {
            "status" => View::Status,
            "scale" => View::Scale,
            "finalize" => View::Finalize,
            "approval" => View::Approval,
            "resize" => View::Resize,
            "ephemeralcontainers" => View::EphemeralContainers,
            _ => return None,
        })
    }

    /// What a client of this view sees of `obj`.
    pub fn project(view: View, def: &Resource, obj: &Value) -> Value {
        match view {
            View::Main
            | View::Apply
            | View::Status
            | View::Finalize
            | View::Approval
            | View::Resize
            | View::EphemeralContainers => obj.clone(),
            View::Scale => {
                let m = &obj["metadata"];
                let (spec, status, selector) = def.strategy.scale(obj);
                json!({
                    "kind": "Scale",
                    "apiVersion": "autoscaling/v1",
                    "metadata": {
                        "name": m["name"],
                        "namespace": m["namespace"],
                        "uid": m["uid"],
                        "resourceVersion": m["resourceVersion"],
                        "creationTimestamp": m["creationTimestamp"],
                    },
                    "spec": {"replicas": spec},
                    "status": {
                        "replicas": status,
                        "selector": selector,
                    },
                })
            }
        }
    }

    /// The whole object to write when a client of this view sends `new`. Only the view's part
    /// changes; `new`'s resourceVersion is the precondition.
    pub fn merge_back(self, def: &Resource, old: &Value, new: Value) -> Result<Value, ApiError> {
        let rv = new["metadata"]["resourceVersion"].clone();
        let mut full = match self {
            View::Main | View::Apply => return Ok(new),
            View::Status => {
                // Upstream's status strategies: what is outside metadata and status stays as
                // stored (the spec above all); the writer's metadata is taken, so labels and
                // annotations set through /status are kept, but for what the kind's status
                // strategy resets (a Deployment's or ReplicaSet's labels, a pod's owners).
                let mut full = old.clone();
                if new["metadata"].is_object() {
                    full["metadata"] = new["metadata"].clone();
                    for field in def.strategy.status_keeps_metadata() {
                        match old["metadata"].get(*field) {
                            Some(v) => full["metadata"][*field] = v.clone(),
                            None => {
                                meta::meta_mut(&mut full).remove(*field);
                            }
                        }
                    }
                }
                match new.get("status") {
                    Some(s) => {
                        full["status"] = s.clone();
                        if def.strategy.stamps_conditions() {
                            stamp_conditions(&mut full["status"]);
                        }
                    }
                    None => {
                        if let Some(o) = full.as_object_mut() {
                            o.remove("status");
                        }
                    }
                }
                full
            }
            View::Scale => {
                let replicas = new["spec"]["replicas"].as_i64().unwrap_or(0);
                if replicas < 0 {
                    return Err(super::invalid(
                        def,
                        meta::name(old),
                        &[r8s_api::validation::FieldError::invalid(
                            "spec.replicas",
                            &replicas.to_string(),
                            "must be greater than or equal to 0",
                        )],
                    ));
                }
                let mut full = old.clone();
                def.strategy.set_scale(&mut full, replicas);
                full
            }
            View::Finalize => {
                let mut full = old.clone();
                full["spec"]["finalizers"] = new["spec"]["finalizers"].clone();
                full
            }
            View::Approval => {
                // Upstream's approval strategy: the conditions and the writer's metadata; the
                // spec and the issued certificate stay.
                let mut full = old.clone();
                full["status"]["conditions"] = new["status"]["conditions"].clone();
                if new["metadata"].is_object() {
                    full["metadata"] = new["metadata"].clone();
                }
                full
            }
            View::Resize => resize(old, &new)?,
            View::EphemeralContainers => super::pods::ephemeral::merge(def, old, &new)?,
        };
        let m = meta::meta_mut(&mut full);
        if rv.is_string() {
            m.insert("resourceVersion".into(), rv);
        }
        Ok(full)
    }
}

/// Conditions written without a `lastTransitionTime` (Go's zero time, `null`) get the time of
/// the write. Upstream stores the zero time; but `metav1.Condition`'s time is required in the
/// typed clients r8s's own components use (kube-rs over k8s-openapi), and one Service whose
/// condition they cannot decode would stop every Service informer of the cluster. A deviation,
/// chosen so that nothing a client writes can blind the control plane.
fn stamp_conditions(status: &mut Value) {
    let now = super::meta::now_rfc3339();
    for c in status
        .get_mut("conditions")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(c) = c.as_object_mut() {
            if c.get("lastTransitionTime").is_none_or(Value::is_null) {
                c.insert("lastTransitionTime".into(), json!(now));
            }
        }
    }
}

/// The pod `old` with the container resources of `new` (upstream's resize validation: only
/// cpu and memory of the containers may change, and the pod's QoS class may not).
fn resize(old: &Value, new: &Value) -> Result<Value, ApiError> {
    let name = meta::name(old).to_string();
    let forbidden = |detail: &str| {
        ApiError::new(
            422,
            "Invalid",
            format!("Pod \"{name}\" is invalid: spec: Forbidden: {detail}"),
        )
        .with_details(json!({"name": name, "kind": "Pod", "causes": [
            {"reason": "FieldValueForbidden", "message": format!("Forbidden: {detail}"), "field": "spec"}
        ]}))
    };
    let without_resources = |spec: &Value| {
        let mut spec = spec.clone();
        for list in ["containers", "initContainers"] {
            for c in spec[list].as_array_mut().into_iter().flatten() {
                if let Some(o) = c.as_object_mut() {
                    o.remove("resources");
                    o.remove("resizePolicy");
                }
            }
        }
        spec
    };
    if without_resources(&new["spec"]) != without_resources(&old["spec"]) {
        return Err(forbidden("only cpu and memory resources are mutable"));
    }
    let mut full = old.clone();
    let containers = full["spec"]["containers"]
        .as_array_mut()
        .cloned()
        .unwrap_or_default();
    let mut out = Vec::new();
    for mut c in containers {
        let wanted = new["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|n| n["name"] == c["name"]);
        if let Some(n) = wanted {
            for which in ["requests", "limits"] {
                let keys = |v: &Value| -> Vec<String> {
                    v["resources"][which]
                        .as_object()
                        .map(|m| {
                            m.keys()
                                .filter(|k| *k != "cpu" && *k != "memory")
                                .cloned()
                                .collect()
                        })
                        .unwrap_or_default()
                };
                let others = |v: &Value| -> Vec<Value> {
                    keys(v).iter().map(|k| v["resources"][which][k].clone()).collect()
                };
                if keys(n) != keys(&c) || others(n) != others(&c) {
                    return Err(forbidden("only cpu and memory resources are mutable"));
                }
            }
            c["resources"] = n["resources"].clone();
            if !n["resizePolicy"].is_null() {
                c["resizePolicy"] = n["resizePolicy"].clone();
            }
        }
        out.push(c);
    }
    full["spec"]["containers"] = Value::Array(out);
    let (was, now) = (
        super::pods::qos_class(&old["spec"]),
        super::pods::qos_class(&full["spec"]),
    );
    if was != now {
        return Err(ApiError::new(
            422,
            "Invalid",
            format!("Pod \"{name}\" is invalid: spec: Invalid value: \"{now}\": Pod QOS Class may not change as a result of resizing"),
        ));
    }
    Ok(full)
}

/// GET of a view: the object projected on it.
pub(crate) async fn get(
    ctx: &Ctx,
    def: &Resource,
    ns: &str,
    name: &str,
    view: View,
) -> Result<Value, ApiError> {
    let obj = read(ctx, def, ns, name).await?;
    Ok(View::project(view, def, &obj))
}

/// PUT of a view: the view's part of the body merged back into the stored object and written
/// (only namespaces serve `finalize`).
pub(crate) async fn put(
    ctx: &Ctx,
    def: &Resource,
    ns: &str,
    name: &str,
    view: View,
    query: &Query,
    body: &[u8],
) -> Result<Value, ApiError> {
    let new = if view == View::Scale {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding Scale: {e}")))?
    } else {
        decode_body(def, body)?
    };
    let old = read(ctx, def, ns, name).await?;
    let full = view.merge_back(def, &old, new)?;
    let written = apply_update(ctx, Target { def, ns, name }, full, &old, query.dry_run(), view).await?;
    Ok(View::project(view, def, &written))
}

/// POST pods/<name>/binding: assign the pod to a node, once. Answers a Success Status.
pub(crate) async fn bind(
    ctx: &Ctx,
    def: &Resource,
    ns: &str,
    name: &str,
    query: &Query,
    body: Bytes,
) -> Result<Value, ApiError> {
    let binding: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("error decoding Binding: {e}")))?;
    let node = binding["target"]["name"].as_str().unwrap_or("").to_owned();
    if node.is_empty() {
        return Err(ApiError::new(
            422,
            "Invalid",
            format!("Binding \"{name}\" is invalid: target.name: Required value"),
        ));
    }
    for _ in 0..5 {
        let old = read(ctx, def, ns, name).await?;
        if let Some(existing) = old["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
            return Err(ApiError::new(
                409,
                "Conflict",
                format!("Operation cannot be fulfilled on pods/binding \"{name}\": pod {name} is already assigned to node \"{existing}\""),
            ));
        }
        if old["metadata"]["deletionTimestamp"].is_string() {
            return Err(ApiError::new(
                409,
                "Conflict",
                format!("Operation cannot be fulfilled on pods/binding \"{name}\": pod {name} is being deleted, cannot be assigned to a host"),
            ));
        }
        let mut obj = old.clone();
        obj["spec"]["nodeName"] = json!(node);
        let conditions = obj["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut conditions: Vec<Value> = conditions
            .into_iter()
            .filter(|c| c["type"] != "PodScheduled")
            .collect();
        conditions.push(json!({
            "type": "PodScheduled",
            "status": "True",
            "lastProbeTime": null,
            "lastTransitionTime": meta::now_rfc3339(),
        }));
        obj["status"]["conditions"] = json!(conditions);
        if query.dry_run() {
            break;
        }
        let rv = meta::resource_version(&old).unwrap_or(0);
        let stage = crate::journey::stage!("store.update", revision = tracing::field::Empty);
        let written = tracing::Instrument::instrument(
            ctx.shared
                .store
                .update(&super::key(def, ns, name), super::encode(def, &obj), rv),
            stage.clone(),
        )
        .await;
        if let Ok(kv) = &written {
            stage.record("revision", kv.mod_revision);
            crate::journey::written(&ctx.journey, &obj, Some(kv.mod_revision));
        }
        drop(stage);
        match written {
            Ok(_) => break,
            Err(r8s_store::StoreError::Conflict { .. }) => continue,
            Err(e) => return Err(store_error(def, name, e)),
        }
    }
    Ok(json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(group: &str, plural: &str) -> &'static Resource {
        crate::registry::catalogue::builtin(group, "v1", plural).expect("in the catalogue")
    }

    /// A /status write keeps the stored spec, takes the writer's status and metadata (the
    /// conformance specs patch annotations through /status), but for what the kind resets.
    #[test]
    fn a_status_write_takes_status_and_metadata_not_spec() {
        let old = json!({"metadata": {"name": "i", "resourceVersion": "5", "labels": {"a": "1"}},
            "spec": {"rules": []}, "status": {}});
        let new = json!({"metadata": {"name": "i", "resourceVersion": "5", "labels": {"a": "2"},
            "annotations": {"patchedstatus": "true"}},
            "spec": {"rules": [{"host": "x"}]}, "status": {"loadBalancer": {"ingress": [{"ip": "169.1.1.1"}]}}});
        let ing = View::Status
            .merge_back(def("networking.k8s.io", "ingresses"), &old, new.clone())
            .unwrap();
        assert_eq!(ing["spec"], old["spec"]);
        assert_eq!(ing["status"], new["status"]);
        assert_eq!(ing["metadata"]["annotations"]["patchedstatus"], "true");
        assert_eq!(ing["metadata"]["labels"]["a"], "2");
        // A Deployment's labels are not a status writer's (upstream's status strategy).
        let d = View::Status
            .merge_back(def("apps", "deployments"), &old, new)
            .unwrap();
        assert_eq!(d["metadata"]["labels"]["a"], "1");
        assert_eq!(d["metadata"]["annotations"]["patchedstatus"], "true");
    }

    /// An approval takes the conditions and the writer's metadata (the conformance spec
    /// patches an annotation through `approval`), never the certificate.
    #[test]
    fn an_approval_write_takes_conditions_and_metadata() {
        let old = json!({"metadata": {"name": "c"}, "spec": {"signerName": "s"},
            "status": {"certificate": "Y2VydA=="}});
        let new = json!({"metadata": {"name": "c", "annotations": {"patchedapproval": "true"}},
            "spec": {"signerName": "other"},
            "status": {"certificate": "", "conditions": [{"type": "Approved", "status": "True"}]}});
        let csr = View::Approval
            .merge_back(
                def("certificates.k8s.io", "certificatesigningrequests"),
                &old,
                new,
            )
            .unwrap();
        assert_eq!(csr["metadata"]["annotations"]["patchedapproval"], "true");
        assert_eq!(csr["spec"]["signerName"], "s");
        assert_eq!(csr["status"]["certificate"], "Y2VydA==");
        assert_eq!(csr["status"]["conditions"][0]["type"], "Approved");
    }

    /// A condition written with Go's zero time (`null`) gets the write's time: typed clients
    /// (kube-rs) cannot decode a metav1.Condition without one.
    #[test]
    fn conditions_without_a_transition_time_get_one() {
        let old = json!({"metadata": {"name": "s"}, "spec": {}, "status": {}});
        let new = json!({"metadata": {"name": "s"}, "status": {"conditions": [
            {"type": "StatusUpdate", "status": "True", "reason": "E2E", "message": "m", "lastTransitionTime": null},
            {"type": "Other", "status": "True", "reason": "R", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
        let svc = View::Status.merge_back(def("", "services"), &old, new).unwrap();
        let c = &svc["status"]["conditions"];
        assert!(c[0]["lastTransitionTime"].is_string(), "{svc}");
        assert_eq!(c[1]["lastTransitionTime"], "2026-01-01T00:00:00Z");
        let decoded: k8s_openapi::api::core::v1::Service = serde_json::from_value(svc).unwrap();
        assert_eq!(decoded.status.unwrap().conditions.unwrap().len(), 2);
    }
}
