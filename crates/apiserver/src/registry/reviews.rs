//! Reviews: objects created to ask the API server a question and answered in the response,
//! never stored — SubjectAccessReview and its self and local forms (`kubectl auth can-i`),
//! SelfSubjectRulesReview (`kubectl auth can-i --list`), SelfSubjectReview (`kubectl auth
//! whoami`) and TokenReview.

use std::collections::BTreeMap;

use bytes::Bytes;
use r8s_api::ResourceDef;
use serde_json::{json, Value};

use crate::authn::{AuthnRequest, UserInfo};
use crate::context::Ctx;
use crate::request_info::RequestInfo;
use crate::status::ApiError;

pub(crate) async fn create(ctx: &Ctx, def: &ResourceDef, ns: &str, body: Bytes) -> Result<Value, ApiError> {
    let mut obj: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("error decoding {}: {e}", def.kind)))?;
    if !obj.is_object() {
        return Err(ApiError::bad_request(format!(
            "a {} must be a JSON object",
            def.kind
        )));
    }
    // Decoded as its type would be: metadata and spec, when present, are objects.
    for field in ["metadata", "spec"] {
        if !obj[field].is_null() && !obj[field].is_object() {
            return Err(ApiError::bad_request(format!(
                "{} in version \"{}\" cannot be handled as a {}: {field} must be an object",
                def.kind, def.version, def.kind
            )));
        }
    }
    obj["apiVersion"] = json!(def.api_version());
    obj["kind"] = json!(def.kind);
    if obj["metadata"].is_null() {
        obj["metadata"] = json!({});
    }
    obj["metadata"]["creationTimestamp"] = Value::Null;
    let spec = obj["spec"].clone();
    let status = match def.kind {
        "SelfSubjectAccessReview" => access_review(ctx, &ctx.user, &spec, None).await?,
        "LocalSubjectAccessReview" => {
            let user = spec_user(&spec)?;
            access_review(ctx, &user, &spec, Some(ns)).await?
        }
        "SubjectAccessReview" => {
            let user = spec_user(&spec)?;
            access_review(ctx, &user, &spec, None).await?
        }
        "SelfSubjectRulesReview" => rules_review(ctx, &spec)?,
        "SelfSubjectReview" => json!({"userInfo": user_info_json(&ctx.user)}),
        "TokenReview" => token_review(ctx, &spec).await,
        _ => return Err(ApiError::not_found_path()),
    };
    obj["status"] = status;
    Ok(obj)
}

fn user_info_json(u: &UserInfo) -> Value {
    let mut v = json!({"username": u.name, "groups": u.groups});
    if !u.uid.is_empty() {
        v["uid"] = json!(u.uid);
    }
    if !u.extra.is_empty() {
        v["extra"] = json!(u.extra);
    }
    v
}

/// The user a (Local)SubjectAccessReview asks about.
fn spec_user(spec: &Value) -> Result<UserInfo, ApiError> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect())
            .unwrap_or_default()
    };
    let user = UserInfo {
        name: spec["user"].as_str().unwrap_or_default().to_owned(),
        uid: spec["uid"].as_str().unwrap_or_default().to_owned(),
        groups: strings(&spec["groups"]),
        extra: spec["extra"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), strings(v)))
                    .collect::<BTreeMap<_, _>>()
            })
            .unwrap_or_default(),
    };
    if user.name.is_empty() && user.groups.is_empty() {
        return Err(ApiError::new(
            422,
            "Invalid",
            "SubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.user: Invalid value: \"\": at least one of user or group must be specified",
        ));
    }
    Ok(user)
}

async fn access_review(
    ctx: &Ctx,
    user: &UserInfo,
    spec: &Value,
    local_ns: Option<&str>,
) -> Result<Value, ApiError> {
    let ra = &spec["resourceAttributes"];
    let nra = &spec["nonResourceAttributes"];
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let attrs = if ra.is_object() {
        let namespace = s(&ra["namespace"]);
        if let Some(ns) = local_ns {
            if !namespace.is_empty() && namespace != ns {
                return Err(ApiError::bad_request(format!(
                    "spec.resourceAttributes.namespace must match namespace: {ns}"
                )));
            }
        }
        RequestInfo {
            is_resource_request: true,
            verb: s(&ra["verb"]),
            api_group: s(&ra["group"]),
            api_version: s(&ra["version"]),
            namespace: local_ns.map(str::to_owned).unwrap_or(namespace),
            resource: s(&ra["resource"]),
            subresource: s(&ra["subresource"]),
            name: s(&ra["name"]),
            ..Default::default()
        }
    } else if nra.is_object() {
        RequestInfo {
            verb: s(&nra["verb"]),
            path: s(&nra["path"]),
            ..Default::default()
        }
    } else {
        return Err(ApiError::new(
            422,
            "Invalid",
            "spec.resourceAttributes: Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified",
        ));
    };
    Ok(match ctx.shared.authorizers.authorize(user, &attrs).await {
        Ok(reason) if reason.is_empty() => json!({"allowed": true}),
        Ok(reason) => json!({"allowed": true, "reason": reason}),
        Err(Some(reason)) => json!({"allowed": false, "denied": true, "reason": reason}),
        Err(None) => json!({"allowed": false}),
    })
}

/// What the requesting user may do in a namespace, as RBAC's rules say, with the union of
/// every authorizer's answer as upstream's `unionRuleResolver` makes it: the Node authorizer
/// cannot list a node's rules and the webhook none at all, each with upstream's error in
/// `evaluationError`; ABAC's policy rules are not listed here, so it makes the answer
/// `incomplete` without an error; AlwaysAllow allows everything.
fn rules_review(ctx: &Ctx, spec: &Value) -> Result<Value, ApiError> {
    let ns = spec["namespace"].as_str().unwrap_or_default();
    if ns.is_empty() {
        return Err(ApiError::bad_request("no namespace on request"));
    }
    let Some(rbac) = ctx.shared.rbac.as_ref() else {
        return Ok(json!({"resourceRules": [], "nonResourceRules": [], "incomplete": true}));
    };
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for r in rbac.rules_for(&ctx.user, ns) {
        if r.non_resource_urls.is_empty() {
            let mut v = json!({"verbs": r.verbs, "apiGroups": r.api_groups, "resources": r.resources});
            if !r.resource_names.is_empty() {
                v["resourceNames"] = json!(r.resource_names);
            }
            resource_rules.push(v);
        } else {
            non_resource_rules.push(json!({"verbs": r.verbs, "nonResourceURLs": r.non_resource_urls}));
        }
    }
    let mut incomplete = false;
    let mut errors: Vec<&str> = Vec::new();
    for name in ctx.shared.authorizers.names() {
        match name {
            "Node" => {
                let is_node = ctx.user.name.starts_with("system:node:")
                    && ctx.user.groups.iter().any(|g| g == "system:nodes");
                if is_node {
                    incomplete = true;
                    errors.push("node authorizer does not support user rule resolution");
                }
            }
            "Webhook" => {
                incomplete = true;
                errors.push("webhook authorizer does not support user rule resolution");
            }
            "ABAC" => incomplete = true,
            "AlwaysAllow" => {
                resource_rules.insert(0, json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}));
                non_resource_rules.insert(0, json!({"verbs": ["*"], "nonResourceURLs": ["*"]}));
            }
            _ => {}
        }
    }
    let mut status = json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": incomplete,
    });
    // utilerrors.NewAggregate's message: one error as it is, several as `[a, b]`.
    match errors.as_slice() {
        [] => {}
        [one] => status["evaluationError"] = json!(one),
        many => status["evaluationError"] = json!(format!("[{}]", many.join(", "))),
    }
    Ok(status)
}

/// Upstream's TokenReview: the token checked for the audiences asked (or the API server's
/// own), and `status.audiences` those it is good for.
async fn token_review(ctx: &Ctx, spec: &Value) -> Value {
    let token = spec["token"].as_str().unwrap_or_default();
    let mut headers = http::HeaderMap::new();
    if let Ok(v) = http::HeaderValue::from_str(&format!("Bearer {token}")) {
        headers.insert(http::header::AUTHORIZATION, v);
    }
    let req = AuthnRequest {
        headers: &headers,
        peer_certificates: crate::authn::PeerCertificates::none(),
        path: "",
        audiences: None,
    };
    let api_audiences: Vec<String> = ctx
        .shared
        .service_account_tokens
        .as_ref()
        .map(|t| t.api_audiences.clone())
        .unwrap_or_default();
    let asked: Vec<String> = spec["audiences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    let audiences = if asked.is_empty() {
        api_audiences.clone()
    } else {
        asked
    };
    if token.is_empty() {
        return json!({"authenticated": false, "user": {}, "error": "token is empty"});
    }
    match ctx
        .shared
        .authenticators
        .authenticate_for(&req, &audiences, &api_audiences)
        .await
    {
        Ok((user, good_for)) => {
            let good_for = good_for.unwrap_or_else(|| {
                crate::authn::service_account::token_audiences(token)
                    .into_iter()
                    .filter(|a| audiences.contains(a))
                    .collect()
            });
            json!({
                "authenticated": true,
                "user": user_info_json(&user),
                "audiences": good_for,
            })
        }
        // Nothing took the token (an audience-agnostic credential asked for other
        // audiences): unauthenticated, with no error, as upstream.
        Err(errors) if errors.is_empty() => json!({"authenticated": false, "user": {}}),
        Err(errors) => json!({"authenticated": false, "user": {}, "error": errors.join(", ")}),
    }
}
