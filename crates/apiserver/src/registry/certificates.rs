//! CertificateSigningRequests (upstream's `pkg/registry/certificates`): the requester recorded
//! by the server, validation of the request, the table; `approval` and `status` are views.

use r8s_api::validation::FieldError;
use serde_json::{json, Value};

use super::meta;
use super::strategy::{age_cell, col, drop_status, name_cell, Column, Strategy, AGE, NAME};
use crate::authn::UserInfo;

pub(crate) struct CertificateSigningRequests;

impl Strategy for CertificateSigningRequests {
    /// Upstream's field selector beyond the name: the signer.
    fn fields(&self, obj: &Value, f: &mut std::collections::BTreeMap<String, String>) {
        f.insert(
            "spec.signerName".into(),
            obj["spec"]["signerName"].as_str().unwrap_or("").to_owned(),
        );
    }

    fn status_subresource(&self) -> bool {
        true
    }

    /// Who asked is recorded by the server, never taken from the client (upstream).
    fn prepare_for_create(&self, u: &UserInfo, obj: &mut Value) {
        drop_status(obj);
        obj["spec"]["username"] = json!(u.name);
        obj["spec"]["groups"] = json!(u.groups);
        obj["spec"]["uid"] = if u.uid.is_empty() {
            Value::Null
        } else {
            json!(u.uid)
        };
        obj["spec"]["extra"] = if u.extra.is_empty() {
            Value::Null
        } else {
            json!(u.extra)
        };
        for k in ["uid", "extra"] {
            if obj["spec"][k].is_null() {
                if let Some(spec) = obj["spec"].as_object_mut() {
                    spec.remove(k);
                }
            }
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let spec = &obj["spec"];
        let request = spec["request"].as_str().unwrap_or_default();
        let pem =
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, request).unwrap_or_default();
        if request.is_empty() {
            errs.push(FieldError::required("spec.request", ""));
        } else if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE REQUEST-----") {
            errs.push(FieldError::invalid(
                "spec.request",
                "",
                "PEM block type must be CERTIFICATE REQUEST",
            ));
        }
        if spec["signerName"].as_str().is_none_or(str::is_empty) {
            errs.push(FieldError::required("spec.signerName", ""));
        }
        if spec["usages"].as_array().is_none_or(Vec::is_empty) {
            errs.push(FieldError::required("spec.usages", ""));
        }
        if let Some(e) = spec["expirationSeconds"].as_i64() {
            if e < 600 {
                errs.push(FieldError::invalid(
                    "spec.expirationSeconds",
                    &e.to_string(),
                    "may not specify a duration less than 600 seconds (10 minutes)",
                ));
            }
        }
        errs
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            AGE,
            col("SignerName", "string", "The signer of the requested certificate."),
            col(
                "Requestor",
                "string",
                "Name of the user who requested the certificate.",
            ),
            col(
                "RequestedDuration",
                "string",
                "The requested validity of the certificate.",
            ),
            col("Condition", "string", "The current state of the request."),
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let (spec, status) = (&obj["spec"], &obj["status"]);
        let mut conds: Vec<&str> = status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["type"].as_str())
            .collect();
        if status["certificate"].as_str().is_some_and(|c| !c.is_empty()) {
            conds.push("Issued");
        }
        let duration = spec["expirationSeconds"]
            .as_i64()
            .map(meta::human_duration)
            .unwrap_or_else(|| "<none>".into());
        vec![
            name_cell(obj),
            age_cell(obj),
            json!(spec["signerName"].as_str().unwrap_or("")),
            json!(spec["username"].as_str().unwrap_or("")),
            json!(duration),
            json!(if conds.is_empty() {
                "Pending".to_owned()
            } else {
                conds.join(",")
            }),
        ]
    }
}
