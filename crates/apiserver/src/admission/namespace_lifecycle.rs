//! `NamespaceLifecycle` (upstream's admission plugin of that name, first of the default set):
//! nothing is created or updated in a namespace that does not exist, nothing new is created in
//! one that is being terminated, and the namespaces the system needs (`default`,
//! `kube-system`, `kube-public`) cannot be deleted.
//!
//! Upstream reads namespaces from an informer and falls back to a live read; r8s reads the
//! store, which is never stale.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Value};

use super::{Attributes, MutatingPlugin, Operation};
use crate::status::ApiError;

/// Namespaces that may not be deleted (upstream's immortal namespaces).
pub const IMMORTAL: &[&str] = &["default", "kube-system", "kube-public"];

pub struct NamespaceLifecycle {
    pub listers: super::listers::Listers,
}

impl NamespaceLifecycle {
    async fn namespace(&self, name: &str) -> Result<Option<Arc<Value>>, ApiError> {
        self.listers.namespace(name).await
    }
}

fn namespace_not_found(name: &str) -> ApiError {
    ApiError::new(404, "NotFound", format!("namespaces \"{name}\" not found"))
        .with_details(json!({"name": name, "kind": "namespaces"}))
}

#[async_trait]
impl MutatingPlugin for NamespaceLifecycle {
    fn name(&self) -> &'static str {
        "NamespaceLifecycle"
    }

    async fn admit(&self, attrs: &mut Attributes<'_>) -> Result<(), ApiError> {
        let r = attrs.request;
        let is_namespace = r.api_group.is_empty() && r.resource == "namespaces";
        if is_namespace {
            // Every operation on namespaces is allowed, except deleting the system's own.
            let name = match attrs.old_object {
                Some(old) if r.name.is_empty() => old["metadata"]["name"].as_str().unwrap_or(""),
                _ => r.name.as_str(),
            };
            if attrs.operation == Operation::Delete && IMMORTAL.contains(&name) {
                return Err(ApiError::forbidden(format!(
                    "namespaces \"{name}\" is forbidden: this namespace may not be deleted"
                ))
                .with_details(json!({"name": name, "kind": "namespaces"})));
            }
            return Ok(());
        }
        let ns = r.namespace.as_str();
        // Cluster-scoped resources, deletes, and access reviews (whose answer must not tell
        // whether a namespace exists) pass.
        if ns.is_empty()
            || !matches!(attrs.operation, Operation::Create | Operation::Update)
            || (r.api_group == "authorization.k8s.io" && r.resource == "localsubjectaccessreviews")
        {
            return Ok(());
        }
        let Some(namespace) = self.namespace(ns).await? else {
            return Err(namespace_not_found(ns));
        };
        if attrs.operation == Operation::Create && namespace["status"]["phase"] == "Terminating" {
            let mut err = attrs.forbidden(format!(
                "unable to create new content in namespace {ns} because it is being terminated"
            ));
            if let Some(d) = err.details.as_mut() {
                d["causes"] = json!([{
                    "reason": "NamespaceTerminating",
                    "message": format!("namespace {ns} is being terminated"),
                    "field": "metadata.namespace",
                }]);
            }
            return Err(err);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authn::UserInfo;
    use crate::request_info::parse_request;
    use r8s_store::Store;
    use std::sync::Arc;

    async fn store(namespaces: &[Value]) -> (tempfile::TempDir, Arc<dyn Store>) {
        let dir = tempfile::tempdir().unwrap();
        let s =
            r8s_store::embedded::EmbeddedStore::open(r8s_store::embedded::EmbeddedOptions::new(dir.path()))
                .unwrap();
        for n in namespaces {
            let key = format!("/registry/namespaces/{}", n["metadata"]["name"].as_str().unwrap());
            s.create(&key, serde_json::to_vec(n).unwrap().into())
                .await
                .unwrap();
        }
        (dir, Arc::new(s))
    }

    async fn run(
        store: Arc<dyn Store>,
        method: http::Method,
        path: &str,
        op: Operation,
        obj: Option<&mut Value>,
    ) -> Result<(), ApiError> {
        let info = parse_request(&method, path, None);
        let user = UserInfo::default();
        let mut attrs = Attributes {
            operation: op,
            request: &info,
            user: &user,
            object: obj,
            old_object: None,
            dry_run: false,
            options: None,
            warnings: &Default::default(),
        };
        NamespaceLifecycle {
            listers: crate::admission::listers::Listers::new(store),
        }
        .admit(&mut attrs)
        .await
    }

    #[tokio::test]
    async fn missing_terminating_and_immortal_namespaces() {
        let (_d, s) = store(&[
            json!({"metadata": {"name": "live"}, "status": {"phase": "Active"}}),
            json!({"metadata": {"name": "dying"}, "status": {"phase": "Terminating"}}),
        ])
        .await;
        let post = http::Method::POST;
        let mut cm = json!({"metadata": {"name": "c"}});
        run(
            s.clone(),
            post.clone(),
            "/api/v1/namespaces/live/configmaps",
            Operation::Create,
            Some(&mut cm),
        )
        .await
        .unwrap();
        let err = run(
            s.clone(),
            post.clone(),
            "/api/v1/namespaces/gone/configmaps",
            Operation::Create,
            Some(&mut cm),
        )
        .await
        .unwrap_err();
        assert_eq!(
            (err.code, err.message.as_str()),
            (404, "namespaces \"gone\" not found")
        );
        let err = run(
            s.clone(),
            post.clone(),
            "/api/v1/namespaces/dying/configmaps",
            Operation::Create,
            Some(&mut cm),
        )
        .await
        .unwrap_err();
        assert_eq!(err.code, 403);
        assert_eq!(
            err.message,
            "configmaps \"c\" is forbidden: unable to create new content in namespace dying because it is being terminated"
        );
        assert_eq!(
            err.to_status()["details"]["causes"][0]["reason"],
            "NamespaceTerminating"
        );
        // Updates in a terminating namespace pass; deletes always do.
        run(
            s.clone(),
            http::Method::PUT,
            "/api/v1/namespaces/dying/configmaps/c",
            Operation::Update,
            Some(&mut cm),
        )
        .await
        .unwrap();
        run(
            s.clone(),
            http::Method::DELETE,
            "/api/v1/namespaces/gone/configmaps/c",
            Operation::Delete,
            None,
        )
        .await
        .unwrap();
        let err = run(
            s.clone(),
            http::Method::DELETE,
            "/api/v1/namespaces/default",
            Operation::Delete,
            None,
        )
        .await
        .unwrap_err();
        assert_eq!(
            (err.code, err.message.as_str()),
            (
                403,
                "namespaces \"default\" is forbidden: this namespace may not be deleted"
            )
        );
        run(
            s.clone(),
            http::Method::DELETE,
            "/api/v1/namespaces/live",
            Operation::Delete,
            None,
        )
        .await
        .unwrap();
        // A generated name is not known yet: the error names the prefix.
        let mut generated = json!({"metadata": {"generateName": "web-"}});
        let err = run(
            s,
            post,
            "/api/v1/namespaces/dying/pods",
            Operation::Create,
            Some(&mut generated),
        )
        .await
        .unwrap_err();
        assert!(
            err.message.starts_with("pods \"web-\" is forbidden"),
            "{}",
            err.message
        );
    }
}
