//! Admission: mutating plugins run first, in order, and may change the object; validating
//! plugins run after and may only refuse. Any refusal fails the request (the reference
//! document's "Admission control" stage).

pub mod initializers;
pub mod node_restriction;
pub mod pod_security;
pub mod priority;
pub mod tolerations;
pub mod webhook;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::Value;

use crate::authn::UserInfo;
use crate::request_info::RequestInfo;
use crate::status::ApiError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

/// Warnings for the client (upstream's `warning.AddWarning`): collected while one request is
/// served, by admission plugins or anything else, and sent back as `Warning: 299 - "<text>"`
/// response headers, which kubectl prints as `Warning: <text>`. Clones share one list.
#[derive(Clone, Debug, Default)]
pub struct Warnings(Arc<Mutex<Vec<String>>>);

impl Warnings {
    /// Add a warning; one already added is not repeated (as upstream's recorder).
    pub fn add(&self, warning: impl Into<String>) {
        let warning = warning.into();
        let mut list = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if !warning.is_empty() && !list.contains(&warning) {
            list.push(warning);
        }
    }

    /// The warnings added so far, in order; the list is left empty.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// What admission plugins see of a request.
pub struct Attributes<'a> {
    pub operation: Operation,
    pub request: &'a RequestInfo,
    pub user: &'a UserInfo,
    /// The object being written (absent for deletes).
    pub object: Option<&'a mut Value>,
    /// The stored object an update or delete replaces.
    pub old_object: Option<&'a Value>,
    pub dry_run: bool,
    /// The request's options as upstream passes them to admission (`CreateOptions`,
    /// `UpdateOptions`, `PatchOptions` or `DeleteOptions`, `meta.k8s.io/v1`), when known.
    pub options: Option<&'a Value>,
    /// Where plugins put warnings for the client.
    pub warnings: &'a Warnings,
}

#[async_trait]
pub trait MutatingPlugin: Send + Sync {
    fn name(&self) -> &'static str;
    async fn admit(&self, attrs: &mut Attributes<'_>) -> Result<(), ApiError>;
}

#[async_trait]
pub trait ValidatingPlugin: Send + Sync {
    fn name(&self) -> &'static str;
    async fn validate(&self, attrs: &Attributes<'_>) -> Result<(), ApiError>;
}

#[derive(Default)]
pub struct AdmissionChain {
    mutating: Vec<Box<dyn MutatingPlugin>>,
    validating: Vec<Box<dyn ValidatingPlugin>>,
}

impl AdmissionChain {
    pub fn push_mutating(&mut self, p: impl MutatingPlugin + 'static) {
        self.mutating.push(Box::new(p));
    }

    pub fn push_validating(&mut self, p: impl ValidatingPlugin + 'static) {
        self.validating.push(Box::new(p));
    }

    /// Run every mutating plugin, then every validating one; the first refusal ends it.
    pub async fn run(&self, attrs: &mut Attributes<'_>) -> Result<(), ApiError> {
        for p in &self.mutating {
            p.admit(attrs).await?;
        }
        for p in &self.validating {
            p.validate(attrs).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct AddLabel;
    #[async_trait]
    impl MutatingPlugin for AddLabel {
        fn name(&self) -> &'static str {
            "AddLabel"
        }
        async fn admit(&self, attrs: &mut Attributes<'_>) -> Result<(), ApiError> {
            if let Some(obj) = attrs.object.as_deref_mut() {
                obj["metadata"]["labels"]["admitted"] = "yes".into();
            }
            Ok(())
        }
    }

    struct RequireLabel;
    #[async_trait]
    impl ValidatingPlugin for RequireLabel {
        fn name(&self) -> &'static str {
            "RequireLabel"
        }
        async fn validate(&self, attrs: &Attributes<'_>) -> Result<(), ApiError> {
            match attrs
                .object
                .as_deref()
                .and_then(|o| o["metadata"]["labels"]["admitted"].as_str())
            {
                Some("yes") => Ok(()),
                _ => Err(ApiError::forbidden("not admitted")),
            }
        }
    }

    #[tokio::test]
    async fn mutating_runs_before_validating_and_refusal_fails() {
        let info = RequestInfo::default();
        let user = UserInfo::default();
        let warnings = Warnings::default();
        let mut obj = serde_json::json!({"metadata": {}});
        let mut chain = AdmissionChain::default();
        chain.push_validating(RequireLabel);
        chain.push_mutating(AddLabel);
        let mut attrs = Attributes {
            operation: Operation::Create,
            request: &info,
            user: &user,
            object: Some(&mut obj),
            old_object: None,
            dry_run: false,
            options: None,
            warnings: &warnings,
        };
        chain.run(&mut attrs).await.unwrap();
        assert_eq!(obj["metadata"]["labels"]["admitted"], "yes");

        let mut only_validating = AdmissionChain::default();
        only_validating.push_validating(RequireLabel);
        let mut obj = serde_json::json!({"metadata": {}});
        let mut attrs = Attributes {
            operation: Operation::Create,
            request: &info,
            user: &user,
            object: Some(&mut obj),
            old_object: None,
            dry_run: false,
            options: None,
            warnings: &warnings,
        };
        assert_eq!(only_validating.run(&mut attrs).await.unwrap_err().code, 403);
    }
}
