//! PodDisruptionBudgets (policy/v1) and the `pods/eviction` subresource that honours them
//! (upstream's `pkg/registry/policy/poddisruptionbudget` and
//! `pkg/registry/core/pod/storage/eviction.go`).
//!
//! An eviction is a delete that asks first: a pod covered by a budget is deleted only if the
//! budget's `disruptionsAllowed` (kept by the disruption controller) is above zero, and the
//! budget is decremented — its `disruptedPods` records the pod — in the same step, so two
//! evictions racing for the last allowed disruption cannot both win.

use crate::registry::Resource;
use r8s_api::validation::FieldError;
use serde_json::{json, Value};

use super::apps::{go_int_or_string, int_or_percent};
use super::meta;
use super::strategy::{age_cell, col, name_cell, Column, Strategy, AGE, NAME};
use super::{read, store_error, Query};
use crate::authn::UserInfo;
use crate::context::Ctx;
use crate::status::ApiError;

/// Past this many pods recorded as disrupted and not yet gone, evictions are refused.
const MAX_DISRUPTED_PODS: usize = 2000;

/// PodDisruptionBudgets.
pub(crate) struct PodDisruptionBudgets;

impl Strategy for PodDisruptionBudgets {
    fn tracks_generation(&self) -> bool {
        true
    }

    fn status_subresource(&self) -> bool {
        true
    }

    fn prepare_for_create(&self, _user: &UserInfo, obj: &mut Value) {
        obj["status"] = json!({
            "disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0,
        });
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let spec = &obj["spec"];
        if !spec["minAvailable"].is_null() && !spec["maxUnavailable"].is_null() {
            errs.push(FieldError::invalid_raw(
                "spec",
                "policy.PodDisruptionBudgetSpec{...}",
                "minAvailable and maxUnavailable cannot be both set",
            ));
        }
        for key in ["minAvailable", "maxUnavailable"] {
            let v = &spec[key];
            if v.is_null() {
                continue;
            }
            let field = format!("spec.{key}");
            let n = int_or_percent(&mut errs, v, &field);
            if v.is_string() && n > 100 {
                errs.push(FieldError::invalid_raw(
                    field,
                    &go_int_or_string(v),
                    "must not be greater than 100%",
                ));
            }
        }
        match spec["unhealthyPodEvictionPolicy"].as_str() {
            None | Some("IfHealthyBudget") | Some("AlwaysAllow") => {}
            Some(p) => errs.push(FieldError::not_supported(
                "spec.unhealthyPodEvictionPolicy",
                p,
                &["AlwaysAllow", "IfHealthyBudget"],
            )),
        }
        if let Some(sel) = spec.get("selector").filter(|s| !s.is_null()) {
            if let Err(e) = label_selector(sel) {
                errs.push(FieldError::invalid("spec.selector", &sel.to_string(), e));
            }
        }
        errs
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col(
                "Min Available",
                "string",
                "The minimum number of pods that must be available.",
            ),
            col(
                "Max Unavailable",
                "string",
                "The maximum number of pods that may be unavailable.",
            ),
            col(
                "Allowed Disruptions",
                "integer",
                "Calculated number of pods that may be disrupted at this time.",
            ),
            AGE,
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let show = |v: &Value| match v {
            Value::Null => "N/A".to_owned(),
            Value::String(s) => s.clone(),
            v => v.to_string(),
        };
        vec![
            name_cell(obj),
            json!(show(&obj["spec"]["minAvailable"])),
            json!(show(&obj["spec"]["maxUnavailable"])),
            json!(obj["status"]["disruptionsAllowed"].as_i64().unwrap_or(0)),
            age_cell(obj),
        ]
    }
}

fn label_selector(sel: &Value) -> Result<r8s_api::selector::Selector, String> {
    let typed: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector =
        serde_json::from_value(sel.clone()).map_err(|e| e.to_string())?;
    r8s_api::selector::label_selector_as_selector(Some(&typed)).map_err(|e| e.to_string())
}

/// Whether a budget's selector picks the pod (policy/v1: an empty selector picks every pod
/// of the namespace, a missing one none).
fn selects(pdb: &Value, pod: &Value) -> bool {
    let sel = &pdb["spec"]["selector"];
    if sel.is_null() {
        return false;
    }
    let labels = meta::labels(pod);
    label_selector(sel).is_ok_and(|s| s.matches(&labels))
}

fn pod_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

fn too_many_requests(cause: String, retry_after: i64) -> ApiError {
    let mut details = json!({"causes": [{"reason": "DisruptionBudget", "message": cause}]});
    if retry_after > 0 {
        details["retryAfterSeconds"] = json!(retry_after);
    }
    ApiError::new(
        429,
        "TooManyRequests",
        "Cannot evict pod as it would violate the pod's disruption budget.",
    )
    .with_details(details)
}

/// POST pods/<name>/eviction: delete the pod if no disruption budget forbids it. Answers a
/// Success Status (201), 429 when a budget forbids it now.
/// The delete options with a resourceVersion precondition of `pod`'s, unless the client set
/// one.
fn with_version_precondition(opts: &Value, pod: &Value) -> Value {
    let mut opts = opts.clone();
    if opts["preconditions"]["resourceVersion"].is_null() {
        if !opts["preconditions"].is_object() {
            opts["preconditions"] = json!({});
        }
        opts["preconditions"]["resourceVersion"] = pod["metadata"]["resourceVersion"].clone();
    }
    opts
}

pub(crate) async fn evict(
    ctx: &Ctx,
    pods: &Resource,
    ns: &str,
    name: &str,
    query: &Query,
    body: bytes::Bytes,
) -> Result<Value, ApiError> {
    let eviction: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("error decoding Eviction: {e}")))?;
    if !eviction.is_object() {
        return Err(ApiError::bad_request("error decoding Eviction: not an object"));
    }
    if let Some(n) = eviction["metadata"]["name"].as_str().filter(|n| !n.is_empty()) {
        if n != name {
            return Err(ApiError::bad_request(
                "name in URL does not match name in Eviction object",
            ));
        }
    }
    let mut opts = match &eviction["deleteOptions"] {
        Value::Null => json!({}),
        o @ Value::Object(_) => o.clone(),
        _ => {
            return Err(ApiError::bad_request(
                "error decoding Eviction: deleteOptions must be an object",
            ))
        }
    };
    if query.dry_run() {
        opts["dryRun"] = json!(["All"]);
    }
    let dry_run = opts["dryRun"]
        .as_array()
        .is_some_and(|a| a.iter().any(|v| v == "All"));
    let pdb_def =
        crate::registry::catalogue::builtin("policy", "v1", "poddisruptionbudgets").expect("served");
    let success =
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201});
    for _ in 0..5 {
        let pod = read(ctx, pods, ns, name).await?;
        // Pods that are not running, or are already going, are deleted without asking.
        let phase = pod["status"]["phase"].as_str().unwrap_or("");
        if matches!(phase, "Succeeded" | "Failed" | "Pending")
            || pod["metadata"]["deletionTimestamp"].is_string()
        {
            // A Pending pod may start meanwhile: deleted only as it was read (upstream's
            // resourceVersion precondition), else looked at again.
            let opts = if phase == "Pending" {
                with_version_precondition(&opts, &pod)
            } else {
                opts.clone()
            };
            match condition_and_delete(ctx, pods, ns, name, &pod, &opts, dry_run).await {
                Err(e)
                    if e.code == 409
                        && opts["preconditions"]["resourceVersion"] == pod["metadata"]["resourceVersion"] =>
                {
                    continue
                }
                r => r?,
            };
            return Ok(success);
        }
        let budgets: Vec<Value> =
            super::list(ctx, pdb_def, ns, &Query::parse(None), &super::Filter::default())
                .await?
                .items
                .into_iter()
                .filter(|b| selects(b, &pod))
                .collect();
        let budget = match &budgets[..] {
            [] => {
                condition_and_delete(ctx, pods, ns, name, &pod, &opts, dry_run).await?;
                return Ok(success);
            }
            [one] => one.clone(),
            // Upstream answers this one as a Failure Status in a 201 response.
            _ => {
                return Ok(json!({
                    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                    "code": 500,
                }))
            }
        };
        let status = &budget["status"];
        let int = |k: &str| status[k].as_i64().unwrap_or(0);
        let budget_name = meta::name(&budget).to_owned();
        // An unhealthy pod does not count against a budget that is met already (or always,
        // with AlwaysAllow).
        if !pod_ready(&pod) {
            let always = budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow";
            if always || (int("currentHealthy") >= int("desiredHealthy") && int("desiredHealthy") > 0) {
                // Deleted only while still unhealthy as read (upstream's precondition).
                let opts = with_version_precondition(&opts, &pod);
                match condition_and_delete(ctx, pods, ns, name, &pod, &opts, dry_run).await {
                    Err(e)
                        if e.code == 409
                            && opts["preconditions"]["resourceVersion"]
                                == pod["metadata"]["resourceVersion"] =>
                    {
                        continue
                    }
                    r => r?,
                };
                return Ok(success);
            }
        }
        if status["observedGeneration"].as_i64().unwrap_or(0)
            < budget["metadata"]["generation"].as_i64().unwrap_or(0)
        {
            return Err(too_many_requests(
                format!("The disruption budget {budget_name} is still being processed by the server."),
                10,
            ));
        }
        let allowed = int("disruptionsAllowed");
        if allowed < 0 {
            return Err(ApiError::forbidden(format!(
                "poddisruptionbudgets.policy \"{budget_name}\" is forbidden: pdb disruptions allowed is negative"
            )));
        }
        if status["disruptedPods"].as_object().map_or(0, |m| m.len()) > MAX_DISRUPTED_PODS {
            return Err(ApiError::forbidden(format!(
                "poddisruptionbudgets.policy \"{budget_name}\" is forbidden: DisruptedPods map too big - too many evictions not confirmed by PDB controller"
            )));
        }
        if allowed == 0 {
            return Err(too_many_requests(
                format!(
                    "The disruption budget {budget_name} needs {} healthy pods and has {} currently",
                    int("desiredHealthy"),
                    int("currentHealthy")
                ),
                0,
            ));
        }
        if !dry_run {
            // Take the disruption: one fewer allowed, the pod recorded until it is gone.
            let mut updated = budget.clone();
            updated["status"]["disruptionsAllowed"] = json!(allowed - 1);
            if !updated["status"]["disruptedPods"].is_object() {
                updated["status"]["disruptedPods"] = json!({});
            }
            updated["status"]["disruptedPods"][name] = json!(meta::now_rfc3339());
            let rv = meta::resource_version(&budget).unwrap_or(0);
            match ctx
                .shared
                .store
                .update(
                    &super::key(pdb_def, ns, &budget_name),
                    super::encode(pdb_def, &updated),
                    rv,
                )
                .await
            {
                Ok(_) => {}
                Err(r8s_store::StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(store_error(pdb_def, &budget_name, e)),
            }
        }
        condition_and_delete(ctx, pods, ns, name, &pod, &opts, dry_run).await?;
        return Ok(success);
    }
    Err(ApiError::new(
        409,
        "Conflict",
        format!("Operation cannot be fulfilled on poddisruptionbudgets.policy: the budget of pod {name} kept changing"),
    ))
}

/// Upstream's `addConditionAndDeletePod`: unless dry run, the pod first gets its
/// `DisruptionTarget` condition (a pod already being deleted keeps what it has), then is deleted
/// with `opts`. A resourceVersion precondition moves to the version the condition wrote; one
/// that no longer holds is left to the delete to refuse.
async fn condition_and_delete(
    ctx: &Ctx,
    pods: &Resource,
    ns: &str,
    name: &str,
    pod: &Value,
    opts: &Value,
    dry_run: bool,
) -> Result<(), ApiError> {
    let mut opts = opts.clone();
    let mut pod = pod.clone();
    let want_rv = opts["preconditions"]["resourceVersion"]
        .as_str()
        .map(str::to_owned);
    let want_uid = opts["preconditions"]["uid"]
        .as_str()
        .filter(|u| !u.is_empty())
        .map(str::to_owned);
    for _ in 0..5 {
        if dry_run
            || pod["metadata"]["deletionTimestamp"].is_string()
            || want_uid.as_deref().is_some_and(|u| pod["metadata"]["uid"] != u)
            || want_rv
                .as_deref()
                .is_some_and(|v| pod["metadata"]["resourceVersion"] != v)
        {
            break;
        }
        match mark_disruption_target(ctx, pods, ns, &pod).await {
            Ok(rv) => {
                if want_rv.is_some() {
                    opts["preconditions"]["resourceVersion"] = json!(rv.to_string());
                }
                break;
            }
            // Changed since read: with the client's (or our) version precondition the delete
            // refuses it; without one, the condition goes on the newest pod.
            Err(r8s_store::StoreError::Conflict { .. }) if want_rv.is_none() => {
                pod = read(ctx, pods, ns, name).await?;
            }
            Err(r8s_store::StoreError::Conflict { .. }) => break,
            Err(e) => return Err(store_error(pods, name, e)),
        }
    }
    super::delete_object(ctx, pods, ns, name, &opts).await.map(|_| ())
}

/// Write the pod's `DisruptionTarget` condition as upstream's eviction does (reason
/// `EvictionByEvictionAPI`), replacing one it had; the pod's new resourceVersion.
async fn mark_disruption_target(
    ctx: &Ctx,
    pods: &Resource,
    ns: &str,
    pod: &Value,
) -> Result<i64, r8s_store::StoreError> {
    let mut obj = pod.clone();
    obj["status"]["conditions"] = json!(with_disruption_target(&pod["status"]["conditions"]));
    let rv = meta::resource_version(pod).unwrap_or(0);
    let kv = ctx
        .shared
        .store
        .update(
            &super::key(pods, ns, meta::name(pod)),
            super::encode(pods, &obj),
            rv,
        )
        .await?;
    Ok(kv.mod_revision)
}

/// `conditions` with `DisruptionTarget` True (EvictionByEvictionAPI) in place of any it had.
fn with_disruption_target(conditions: &Value) -> Vec<Value> {
    let mut out: Vec<Value> = conditions
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c["type"] != "DisruptionTarget")
        .collect();
    out.push(json!({
        "type": "DisruptionTarget",
        "status": "True",
        "lastProbeTime": null,
        "lastTransitionTime": meta::now_rfc3339(),
        "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting",
    }));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evictions_without_a_budget_check_are_pinned_to_the_version_read() {
        let pod = json!({"metadata": {"name": "p", "resourceVersion": "42"}});
        assert_eq!(
            with_version_precondition(&json!({}), &pod),
            json!({"preconditions": {"resourceVersion": "42"}})
        );
        // The client's own precondition stands.
        let theirs = json!({"gracePeriodSeconds": 0, "preconditions": {"resourceVersion": "7", "uid": "u"}});
        assert_eq!(with_version_precondition(&theirs, &pod), theirs);
        let uid_only = json!({"preconditions": {"uid": "u"}});
        assert_eq!(
            with_version_precondition(&uid_only, &pod),
            json!({"preconditions": {"uid": "u", "resourceVersion": "42"}})
        );
    }
}
