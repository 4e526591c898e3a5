//! TokenRequest (`POST serviceaccounts/<name>/token`): a signed, expiring token for a
//! ServiceAccount, optionally bound to a pod, secret or node so it dies with that object.

use crate::registry::Resource;
use bytes::Bytes;
use r8s_api::validation::FieldError;
use serde_json::{json, Value};

use super::{invalid, not_found, read, Query};
use crate::authn::service_account::{now, Claims, KubernetesClaim, ObjectRef};
use crate::context::Ctx;
use crate::status::ApiError;

/// Upstream's bounds on `spec.expirationSeconds`.
const MIN_EXPIRATION: i64 = 600;
const MAX_EXPIRATION: i64 = 1 << 32;
const DEFAULT_EXPIRATION: i64 = 3600;

pub(crate) async fn create(
    ctx: &Ctx,
    sa_def: &Resource,
    ns: &str,
    name: &str,
    query: &Query,
    body: Bytes,
) -> Result<Value, ApiError> {
    let Some(tokens) = ctx.shared.service_account_tokens.as_ref() else {
        return Err(ApiError::not_found_path());
    };
    let mut req: Value = if body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("error decoding TokenRequest: {e}")))?
    };
    if !req.is_object() || (!req["spec"].is_null() && !req["spec"].is_object()) {
        return Err(ApiError::bad_request(
            "TokenRequest in version \"v1\" cannot be handled as a TokenRequest: the body must be an object",
        ));
    }
    let spec = req["spec"].clone();
    let mut expiration = spec["expirationSeconds"].as_i64().unwrap_or(DEFAULT_EXPIRATION);
    let mut errs = Vec::new();
    if expiration < MIN_EXPIRATION {
        errs.push(FieldError::invalid(
            "spec.expirationSeconds",
            &expiration.to_string(),
            "may not specify a duration less than 10 minutes",
        ));
    }
    if expiration > MAX_EXPIRATION {
        errs.push(FieldError::invalid(
            "spec.expirationSeconds",
            &expiration.to_string(),
            "may not specify a duration larger than 2^32 seconds",
        ));
    }
    let bound = &spec["boundObjectRef"];
    let bound_kind = bound["kind"].as_str().unwrap_or_default();
    if bound.is_object() && !matches!(bound_kind, "Pod" | "Secret" | "Node") {
        errs.push(FieldError::not_supported(
            "spec.boundObjectRef.kind",
            bound_kind,
            &["Pod", "Node", "Secret"],
        ));
    }
    if !errs.is_empty() {
        let def = crate::registry::catalogue::builtin("authentication.k8s.io", "v1", "tokenreviews")
            .unwrap_or(sa_def);
        let mut e = invalid(def, name, &errs);
        e.message = e.message.replace(
            "TokenReview.authentication.k8s.io",
            "TokenRequest.authentication.k8s.io",
        );
        return Err(e);
    }
    // NodeRestriction: a kubelet gets tokens only for the pods bound to its node.
    let requesting_node = crate::authz::node::node_name(&ctx.user).map(str::to_owned);
    if requesting_node.is_some() && bound_kind != "Pod" {
        return Err(ApiError::forbidden(format!(
            "serviceaccounts \"{name}\" is forbidden: node requested token not bound to a pod"
        )));
    }
    if let Some(max) = tokens.max_expiration_seconds {
        expiration = expiration.min(max);
    }

    let sa = read(ctx, sa_def, ns, name).await?;
    let mut claim = KubernetesClaim {
        namespace: ns.to_owned(),
        serviceaccount: ObjectRef {
            name: name.to_owned(),
            uid: sa["metadata"]["uid"].as_str().unwrap_or_default().to_owned(),
        },
        ..Default::default()
    };
    if bound.is_object() {
        let (group, plural) = match bound_kind {
            "Pod" => ("", "pods"),
            "Secret" => ("", "secrets"),
            _ => ("", "nodes"),
        };
        let def =
            crate::registry::catalogue::builtin(group, "v1", plural).ok_or_else(ApiError::not_found_path)?;
        let bound_name = bound["name"].as_str().unwrap_or_default();
        let obj_ns = if def.namespaced { ns } else { "" };
        let obj = match read(ctx, def, obj_ns, bound_name).await {
            Ok(o) => o,
            Err(e) if e.code == 404 => return Err(not_found(def, bound_name)),
            Err(e) => return Err(e),
        };
        let uid = obj["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
        if let Some(want) = bound["uid"].as_str().filter(|u| !u.is_empty()) {
            if want != uid {
                return Err(ApiError::new(
                    409,
                    "Conflict",
                    format!(
                        "Operation cannot be fulfilled on {} \"{bound_name}\": the UID in the bound object reference ({want}) does not match the UID in record. The object might have been deleted and then recreated",
                        def.group_resource()
                    ),
                ));
            }
        }
        let r = ObjectRef {
            name: bound_name.to_owned(),
            uid,
        };
        if let Some(node) = &requesting_node {
            if obj["spec"]["nodeName"].as_str() != Some(node.as_str()) {
                return Err(ApiError::forbidden(format!(
                    "serviceaccounts \"{name}\" is forbidden: node requested token bound to a pod scheduled on a different node"
                )));
            }
        }
        match bound_kind {
            "Pod" => {
                // A pod-bound token also names the pod's node, as upstream's does.
                if let Some(node) = obj["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
                    let node_def = crate::registry::catalogue::builtin("", "v1", "nodes")
                        .ok_or_else(ApiError::not_found_path)?;
                    if let Ok(n) = read(ctx, node_def, "", node).await {
                        claim.node = Some(ObjectRef {
                            name: node.to_owned(),
                            uid: n["metadata"]["uid"].as_str().unwrap_or_default().to_owned(),
                        });
                    }
                }
                claim.pod = Some(r);
            }
            "Secret" => claim.secret = Some(r),
            _ => claim.node = Some(r),
        }
    }
    let audiences: Vec<String> = spec["audiences"]
        .as_array()
        .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect())
        .filter(|a: &Vec<String>| !a.is_empty())
        .unwrap_or_else(|| tokens.api_audiences.clone());
    let issued = now();
    let claims = Claims {
        iss: tokens.issuer.clone(),
        sub: format!("system:serviceaccount:{ns}:{name}"),
        aud: audiences.clone(),
        exp: issued + expiration,
        iat: issued,
        nbf: issued,
        jti: uuid::Uuid::new_v4().to_string(),
        kubernetes: claim,
    };
    let token = tokens.sign(&claims).map_err(ApiError::internal)?;
    let expires = time::OffsetDateTime::from_unix_timestamp(claims.exp)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_default();
    req["apiVersion"] = json!("authentication.k8s.io/v1");
    req["kind"] = json!("TokenRequest");
    req["metadata"] = json!({"name": name, "namespace": ns, "creationTimestamp": super::meta::now_rfc3339()});
    req["spec"]["audiences"] = json!(audiences);
    req["spec"]["expirationSeconds"] = json!(expiration);
    if req["spec"]["boundObjectRef"].is_null() {
        req["spec"]["boundObjectRef"] = Value::Null;
    }
    req["status"] = json!({"token": token, "expirationTimestamp": expires});
    if query.dry_run() {
        req["status"]["token"] = json!("");
    }
    Ok(req)
}
