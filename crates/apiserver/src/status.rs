//! Errors as Kubernetes returns them: a `metav1.Status` with the right code and reason.

use serde_json::{json, Value};

/// A failed request, answered as a `metav1.Status`.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Box<Value>>,
    /// The Status's `metadata.continue`: the token that goes on with an inconsistent list
    /// after a 410 (upstream's ResourceExpired for a continue past compaction).
    pub continue_token: Option<String>,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
            continue_token: None,
        }
    }

    pub fn with_continue(mut self, token: String) -> Self {
        self.continue_token = Some(token);
        self
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(Box::new(details));
        self
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(401, "Unauthorized", message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    pub fn not_found_path() -> Self {
        // Upstream answers unknown paths with a bare 404 "404 page not found"; as a Status it
        // keeps clients that decode errors happy.
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    pub fn method_not_allowed(verb: &str, what: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("{verb} is not supported on {what}"),
        )
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {}", message.into()),
        )
    }

    pub fn service_unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", message)
    }

    /// The `metav1.Status` body.
    pub fn to_status(&self) -> Value {
        // metav1.Status's fields in Go's order (clients compare bodies as text), each left out
        // when empty as Go's omitempty does.
        let mut s = serde_json::Map::new();
        s.insert("kind".into(), json!("Status"));
        s.insert("apiVersion".into(), json!("v1"));
        s.insert(
            "metadata".into(),
            match &self.continue_token {
                Some(t) => json!({"continue": t}),
                None => json!({}),
            },
        );
        s.insert("status".into(), json!("Failure"));
        if !self.message.is_empty() {
            s.insert("message".into(), json!(self.message));
        }
        if !self.reason.is_empty() {
            s.insert("reason".into(), json!(self.reason));
        }
        if let Some(d) = &self.details {
            // StatusDetails' fields are omitempty too: the core group is "" and left out.
            let mut d = (**d).clone();
            if let Some(o) = d.as_object_mut() {
                o.retain(|_, v| !matches!(v, Value::String(s) if s.is_empty()));
            }
            s.insert("details".into(), d);
        }
        if self.code != 0 {
            s.insert("code".into(), json!(self.code));
        }
        Value::Object(s)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_has_the_upstream_shape() {
        let s = ApiError::forbidden("nope").to_status();
        assert_eq!(s["kind"], "Status");
        assert_eq!(s["status"], "Failure");
        assert_eq!(s["reason"], "Forbidden");
        assert_eq!(s["code"], 403);
        assert_eq!(s["message"], "nope");
    }

    #[test]
    fn status_fields_come_in_gos_order() {
        let s = ApiError::new(404, "NotFound", "pods \"x\" not found")
            .with_details(json!({"name": "x", "group": "", "kind": "pods"}))
            .to_status();
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"x\" not found","reason":"NotFound","details":{"name":"x","kind":"pods"},"code":404}"#
        );
        // Without a reason (a webhook's denial), the field is left out, as Go's omitempty.
        let s = serde_json::to_string(&ApiError::new(400, "", "denied").to_status()).unwrap();
        assert_eq!(
            s,
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"denied","code":400}"#
        );
    }
}
