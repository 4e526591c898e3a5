//! The AdmissionReview a webhook receives and what its answer must look like (upstream's
//! `webhook/request` package), and the Status of a denial (`webhook/errors`).

use base64::Engine;
use serde_json::{json, Map, Value};

use crate::authn::UserInfo;
use crate::status::ApiError;

/// Everything an AdmissionReview request carries.
pub(crate) struct ReviewRequest<'a> {
    pub uid: &'a str,
    /// Group, version and kind of the object as the webhook sees it.
    pub kind: (&'a str, &'a str, &'a str),
    /// Group, version and resource the webhook is called for.
    pub resource: (&'a str, &'a str, &'a str),
    pub subresource: &'a str,
    /// The request's own kind and resource (differ under `matchPolicy: Equivalent`).
    pub request_kind: (&'a str, &'a str, &'a str),
    pub request_resource: (&'a str, &'a str, &'a str),
    pub name: &'a str,
    pub namespace: &'a str,
    pub operation: &'a str,
    pub user: &'a UserInfo,
    pub object: Option<&'a Value>,
    pub old_object: Option<&'a Value>,
    pub dry_run: bool,
    pub options: Option<&'a Value>,
}

/// The AdmissionReview versions r8s speaks, in the webhook's order of preference.
pub(crate) fn review_version(accepted: &[String]) -> Option<&'static str> {
    accepted.iter().find_map(|v| match v.as_str() {
        "v1" => Some("v1"),
        "v1beta1" => Some("v1beta1"),
        _ => None,
    })
}

fn gvk((group, version, kind): (&str, &str, &str)) -> Value {
    json!({"group": group, "version": version, "kind": kind})
}

fn gvr((group, version, resource): (&str, &str, &str)) -> Value {
    json!({"group": group, "version": version, "resource": resource})
}

/// Upstream's `CreateV1AdmissionReview` (and its v1beta1 twin, the same shape).
pub(crate) fn build(version: &str, r: &ReviewRequest<'_>) -> Value {
    let mut user = Map::new();
    if !r.user.name.is_empty() {
        user.insert("username".into(), json!(r.user.name));
    }
    if !r.user.uid.is_empty() {
        user.insert("uid".into(), json!(r.user.uid));
    }
    if !r.user.groups.is_empty() {
        user.insert("groups".into(), json!(r.user.groups));
    }
    if !r.user.extra.is_empty() {
        user.insert("extra".into(), json!(r.user.extra));
    }
    let mut req = Map::new();
    req.insert("uid".into(), json!(r.uid));
    req.insert("kind".into(), gvk(r.kind));
    req.insert("resource".into(), gvr(r.resource));
    if !r.subresource.is_empty() {
        req.insert("subResource".into(), json!(r.subresource));
    }
    req.insert("requestKind".into(), gvk(r.request_kind));
    req.insert("requestResource".into(), gvr(r.request_resource));
    if !r.subresource.is_empty() {
        req.insert("requestSubResource".into(), json!(r.subresource));
    }
    if !r.name.is_empty() {
        req.insert("name".into(), json!(r.name));
    }
    if !r.namespace.is_empty() {
        req.insert("namespace".into(), json!(r.namespace));
    }
    req.insert("operation".into(), json!(r.operation));
    req.insert("userInfo".into(), Value::Object(user));
    req.insert("object".into(), r.object.cloned().unwrap_or(Value::Null));
    req.insert("oldObject".into(), r.old_object.cloned().unwrap_or(Value::Null));
    req.insert("dryRun".into(), json!(r.dry_run));
    req.insert("options".into(), r.options.cloned().unwrap_or(Value::Null));
    json!({
        "kind": "AdmissionReview",
        "apiVersion": format!("admission.k8s.io/{version}"),
        "request": Value::Object(req),
    })
}

/// What a webhook answered.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Answer {
    pub allowed: bool,
    /// The decoded `patch`.
    pub patch: Vec<u8>,
    pub patch_type: String,
    pub result: Option<Value>,
    pub warnings: Vec<String>,
}

/// Upstream's `VerifyAdmissionResponse`: the answer to the review `uid` of `version`.
pub(crate) fn verify(uid: &str, version: &str, mutating: bool, review: &Value) -> Result<Answer, String> {
    let resp = &review["response"];
    if !resp.is_object() {
        return Err("webhook response was absent".into());
    }
    let patch_b64 = resp["patch"].as_str().unwrap_or("");
    let patch = base64::engine::general_purpose::STANDARD
        .decode(patch_b64)
        .map_err(|e| format!("illegal base64 data in response.patch: {e}"))?;
    let patch_type = resp.get("patchType").filter(|p| !p.is_null());
    let mut answer = Answer {
        allowed: resp["allowed"].as_bool().unwrap_or(false),
        result: resp.get("status").filter(|s| s.is_object()).cloned(),
        warnings: resp["warnings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|w| w.as_str().map(str::to_owned))
            .collect(),
        ..Default::default()
    };
    if version == "v1beta1" {
        // v1beta1 answers were never checked for uid, kind or patch type.
        if mutating && !patch.is_empty() {
            answer.patch = patch;
            answer.patch_type = "JSONPatch".into();
        }
        return Ok(answer);
    }
    let got_uid = resp["uid"].as_str().unwrap_or("");
    if got_uid != uid {
        return Err(format!("expected response.uid={uid:?}, got {got_uid:?}"));
    }
    let api_version = review["apiVersion"].as_str().unwrap_or("");
    let kind = review["kind"].as_str().unwrap_or("");
    if api_version != "admission.k8s.io/v1" || kind != "AdmissionReview" {
        let (g, v) = api_version.split_once('/').unwrap_or(("", api_version));
        return Err(format!(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {g}/{v}, Kind={kind}"
        ));
    }
    if mutating {
        if !patch.is_empty() && patch_type.is_none() {
            return Err("webhook returned response.patch but not response.patchType".into());
        }
        if patch.is_empty() && patch_type.is_some() {
            return Err("webhook returned response.patchType but not response.patch".into());
        }
        if let Some(pt) = patch_type {
            let pt = pt.as_str().unwrap_or("");
            if pt.is_empty() {
                return Err(format!("webhook returned invalid response.patchType of {pt:?}"));
            }
            answer.patch_type = pt.to_owned();
        }
        answer.patch = patch;
    } else {
        if !patch.is_empty() {
            return Err("validating webhook may not return response.patch".into());
        }
        if patch_type.is_some() {
            return Err("validating webhook may not return response.patchType".into());
        }
    }
    Ok(answer)
}

/// The reasons of `metav1.StatusReason`, to keep a webhook's own.
const REASONS: &[&str] = &[
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "AlreadyExists",
    "Conflict",
    "Gone",
    "Invalid",
    "ServerTimeout",
    "StoreReadError",
    "Timeout",
    "TooManyRequests",
    "BadRequest",
    "MethodNotAllowed",
    "NotAcceptable",
    "RequestEntityTooLarge",
    "UnsupportedMediaType",
    "InternalError",
    "Expired",
    "ServiceUnavailable",
];

/// Upstream's `ToStatusErr`: a denial with the webhook's status, its code at least 400.
pub(crate) fn denied(webhook: &str, result: Option<&Value>) -> ApiError {
    let empty = json!({});
    let result = result.unwrap_or(&empty);
    let denied_by = format!("admission webhook {webhook:?} denied the request");
    let message = result["message"].as_str().filter(|m| !m.is_empty());
    let reason = result["reason"].as_str().filter(|r| !r.is_empty());
    let message = match (message, reason) {
        (Some(m), _) => format!("{denied_by}: {m}"),
        (None, Some(r)) => format!("{denied_by}: {r}"),
        (None, None) => format!("{denied_by} without explanation"),
    };
    let code = result["code"]
        .as_u64()
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| *c >= 400)
        .unwrap_or(400);
    let reason = reason
        .and_then(|r| REASONS.iter().find(|k| **k == r).copied())
        .unwrap_or("");
    let mut err = ApiError::new(code, reason, message);
    if let Some(d) = result.get("details").filter(|d| d.is_object()) {
        err = err.with_details(d.clone());
    }
    err
}

/// Upstream's `NewDryRunUnsupportedErr`.
pub(crate) fn dry_run_unsupported(webhook: &str) -> ApiError {
    ApiError::bad_request(format!("admission webhook {webhook:?} does not support dry run"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request<'a>(user: &'a UserInfo, obj: &'a Value, options: &'a Value) -> ReviewRequest<'a> {
        ReviewRequest {
            uid: "u-1",
            kind: ("", "v1", "Pod"),
            resource: ("", "v1", "pods"),
            subresource: "",
            request_kind: ("", "v1", "Pod"),
            request_resource: ("", "v1", "pods"),
            name: "p",
            namespace: "default",
            operation: "CREATE",
            user,
            object: Some(obj),
            old_object: None,
            dry_run: false,
            options: Some(options),
        }
    }

    #[test]
    fn reviews_carry_the_request() {
        let user = UserInfo {
            name: "alice".into(),
            uid: String::new(),
            groups: vec!["system:authenticated".into()],
            extra: Default::default(),
        };
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        let options = json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"});
        let review = build("v1", &request(&user, &pod, &options));
        assert_eq!(
            review,
            json!({
                "kind": "AdmissionReview",
                "apiVersion": "admission.k8s.io/v1",
                "request": {
                    "uid": "u-1",
                    "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "resource": {"group": "", "version": "v1", "resource": "pods"},
                    "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
                    "requestResource": {"group": "", "version": "v1", "resource": "pods"},
                    "name": "p",
                    "namespace": "default",
                    "operation": "CREATE",
                    "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
                    "object": pod,
                    "oldObject": null,
                    "dryRun": false,
                    "options": options,
                }
            })
        );
        let mut status = request(&user, &pod, &options);
        status.subresource = "status";
        status.operation = "UPDATE";
        status.old_object = Some(&pod);
        let review = build("v1beta1", &status);
        assert_eq!(review["apiVersion"], "admission.k8s.io/v1beta1");
        assert_eq!(review["request"]["subResource"], "status");
        assert_eq!(review["request"]["requestSubResource"], "status");
        assert_eq!(review["request"]["oldObject"], pod);
        assert_eq!(
            review_version(&["v2".into(), "v1beta1".into(), "v1".into()]),
            Some("v1beta1")
        );
        assert_eq!(review_version(&["v2".into()]), None);
    }

    #[test]
    fn answers_are_verified() {
        let ok = |resp: Value| json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp});
        let a = verify("u", "v1", true, &ok(json!({"uid": "u", "allowed": true, "patchType": "JSONPatch", "patch": "W10=", "warnings": ["careful"]}))).unwrap();
        assert_eq!(
            (a.allowed, a.patch.as_slice(), a.patch_type.as_str()),
            (true, &b"[]"[..], "JSONPatch")
        );
        assert_eq!(a.warnings, ["careful"]);
        assert_eq!(
            verify("u", "v1", true, &ok(json!({"uid": "x", "allowed": true}))).unwrap_err(),
            "expected response.uid=\"u\", got \"x\""
        );
        assert_eq!(
            verify("u", "v1", true, &json!({"kind": "AdmissionReview"})).unwrap_err(),
            "webhook response was absent"
        );
        assert_eq!(
            verify(
                "u",
                "v1",
                true,
                &json!({"apiVersion": "v1", "kind": "Status", "response": {"uid": "u"}})
            )
            .unwrap_err(),
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got /v1, Kind=Status"
        );
        assert_eq!(
            verify(
                "u",
                "v1",
                true,
                &ok(json!({"uid": "u", "allowed": true, "patch": "W10="}))
            )
            .unwrap_err(),
            "webhook returned response.patch but not response.patchType"
        );
        assert_eq!(
            verify(
                "u",
                "v1",
                false,
                &ok(json!({"uid": "u", "allowed": true, "patchType": "JSONPatch"}))
            )
            .unwrap_err(),
            "validating webhook may not return response.patchType"
        );
        // v1beta1 answers are taken as they come.
        let a = verify(
            "u",
            "v1beta1",
            true,
            &json!({"response": {"allowed": true, "patch": "W10="}}),
        )
        .unwrap();
        assert_eq!(a.patch_type, "JSONPatch");
    }

    #[test]
    fn denials_read_as_upstream() {
        let e = denied(
            "deny.example.com",
            Some(&json!({"message": "no pods today", "code": 403})),
        );
        assert_eq!(
            (e.code, e.message.as_str()),
            (
                403,
                "admission webhook \"deny.example.com\" denied the request: no pods today"
            )
        );
        let e = denied("deny.example.com", None);
        assert_eq!(
            (e.code, e.reason, e.message.as_str()),
            (
                400,
                "",
                "admission webhook \"deny.example.com\" denied the request without explanation"
            )
        );
        let e = denied("d.example.com", Some(&json!({"reason": "Invalid", "code": 200})));
        assert_eq!((e.code, e.reason), (400, "Invalid"));
        assert_eq!(
            e.message,
            "admission webhook \"d.example.com\" denied the request: Invalid"
        );
        assert_eq!(
            dry_run_unsupported("m.example.com").message,
            "admission webhook \"m.example.com\" does not support dry run"
        );
    }
}
