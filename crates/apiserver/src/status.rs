//! Errors as Kubernetes returns them: a `metav1.Status` with the right code and reason.

use serde_json::{json, Value};

/// A failed request, answered as a `metav1.Status`.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
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
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if self.reason.is_empty() {
            // A Status without a reason leaves it out (Go's omitempty), as webhook denials do.
            if let Some(o) = s.as_object_mut() {
                o.remove("reason");
            }
        }
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
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
}
