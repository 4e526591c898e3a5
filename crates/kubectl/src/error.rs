//! Errors as kubectl reports them: `Error from server (NotFound): pods "x" not found` for the
//! API's Status, `error: …` for the client's own, exit code 1.

use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A metav1.Status the server answered with.
    #[error("{}", .0.display())]
    Api(ApiError),
    /// A client-side error, printed `error: <message>`.
    #[error("error: {0}")]
    Message(String),
    /// Printed exactly as it is (kubectl's messages that carry no `error:` prefix).
    #[error("{0}")]
    Raw(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

pub fn msg(s: impl Into<String>) -> Error {
    Error::Message(s.into())
}

#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: u16,
    pub reason: String,
    pub message: String,
}

impl ApiError {
    /// From a response body: the Status it holds, or what client-go makes of a bare code.
    pub fn from_response(code: u16, body: &[u8]) -> Self {
        if let Ok(v) = serde_json::from_slice::<Value>(body) {
            if v["kind"] == "Status" {
                return ApiError {
                    code: v["code"].as_u64().map(|c| c as u16).unwrap_or(code),
                    reason: v["reason"].as_str().unwrap_or("").to_owned(),
                    message: v["message"].as_str().unwrap_or("").to_owned(),
                };
            }
        }
        // client-go's newUnstructuredResponseError: a reason and message from the code.
        let (reason, message) = match code {
            400 => ("BadRequest", "the server rejected our request for an unknown reason"),
            401 => ("Unauthorized", "the server has asked for the client to provide credentials"),
            403 => ("Forbidden", "the server does not allow access to the requested resource"),
            404 => ("NotFound", "the server could not find the requested resource"),
            405 => ("MethodNotAllowed", "the server does not allow this method on the requested resource"),
            409 => ("Conflict", "the server reported a conflict"),
            422 => ("Invalid", "the server rejected our request due to an error in our request"),
            429 => ("TooManyRequests", "the server has received too many requests and has asked us to try again later"),
            500 => ("InternalError", "an error on the server has prevented the request from succeeding"),
            503 => ("ServiceUnavailable", "the server is currently unable to handle the request"),
            504 => ("Timeout", "the server was unable to return a response in the time allotted, but may still be processing the request"),
            _ => ("", "an error on the server has prevented the request from succeeding"),
        };
        let body = String::from_utf8_lossy(body).trim().to_owned();
        ApiError {
            code,
            reason: reason.to_owned(),
            message: if body.is_empty() || code == 404 {
                message.to_owned()
            } else {
                format!("{message} ({body})")
            },
        }
    }

    /// kubectl's `error when creating "FILE": …` inside the server's message.
    pub fn when(mut self, doing: &str, source: &str) -> Self {
        self.message = format!("error when {doing} \"{source}\": {}", self.message);
        self
    }

    pub fn is_not_found(&self) -> bool {
        self.code == 404
    }

    /// kubectl's `StandardErrorMessage`.
    pub fn display(&self) -> String {
        if self.reason == "Unauthorized" {
            format!(
                "error: You must be logged in to the server ({})",
                if self.message.is_empty() {
                    "Unauthorized"
                } else {
                    &self.message
                }
            )
        } else if self.reason.is_empty() {
            format!("Error from server: {}", self.message)
        } else {
            format!("Error from server ({}): {}", self.reason, self.message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_read_as_kubectl_prints_them() {
        let e = ApiError::from_response(
            404,
            br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"x\" not found","reason":"NotFound","details":{"name":"x","kind":"pods"},"code":404}"#,
        );
        assert_eq!(e.display(), r#"Error from server (NotFound): pods "x" not found"#);
        let e = ApiError::from_response(404, b"404 page not found");
        assert_eq!(
            e.display(),
            "Error from server (NotFound): the server could not find the requested resource"
        );
        let e = ApiError::from_response(401, b"");
        assert_eq!(
            e.display(),
            "error: You must be logged in to the server (the server has asked for the client to provide credentials)"
        );
    }
}
