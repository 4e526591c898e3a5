//! NodeRestriction: what RBAC's `system:node` role allows any kubelet, this plugin narrows to
//! the kubelet's own node — its Node object, its Lease, the pods bound to it — as upstream's
//! plugin of the same name does.

use async_trait::async_trait;

use super::{Attributes, Operation, ValidatingPlugin};
use crate::authz::node::node_name;
use crate::status::ApiError;

pub struct NodeRestriction;

/// Labels a kubelet may not set on its own Node (they steer workloads to trusted nodes).
const RESTRICTED_LABEL_PREFIX: &str = "node-restriction.kubernetes.io/";

/// The name of the object written: the new object's on a create, the URL's otherwise.
fn target_name(a: &Attributes<'_>) -> String {
    if a.operation == Operation::Create {
        a.object
            .as_deref()
            .and_then(|o| o["metadata"]["name"].as_str())
            .unwrap_or_default()
            .to_owned()
    } else {
        a.request.name.clone()
    }
}

fn forbidden(what: &str, name: &str, msg: String) -> ApiError {
    ApiError::forbidden(format!("{what} \"{name}\" is forbidden: {msg}"))
}

#[async_trait]
impl ValidatingPlugin for NodeRestriction {
    fn name(&self) -> &'static str {
        "NodeRestriction"
    }

    async fn validate(&self, a: &Attributes<'_>) -> Result<(), ApiError> {
        let Some(node) = node_name(a.user) else {
            return Ok(());
        };
        let r = a.request;
        let name = r.name.as_str();
        let object_node = |o: Option<&serde_json::Value>| {
            o.and_then(|p| p["spec"]["nodeName"].as_str())
                .unwrap_or_default()
                .to_owned()
        };
        match (r.api_group.as_str(), r.resource.as_str()) {
            ("", "pods") => match (a.operation, r.subresource.as_str()) {
                (Operation::Create, "") => {
                    let pod = a.object.as_deref();
                    let mirror = pod.is_some_and(|p| {
                        p["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_string()
                    });
                    let pod_name = pod
                        .and_then(|p| p["metadata"]["name"].as_str())
                        .unwrap_or_default();
                    if !mirror {
                        return Err(forbidden(
                            "pods",
                            pod_name,
                            format!("pod does not have \"kubernetes.io/config.mirror\" annotation, node \"{node}\" can only create mirror pods"),
                        ));
                    }
                    let bound = object_node(pod);
                    if bound != node {
                        return Err(forbidden(
                            "pods",
                            pod_name,
                            format!("node \"{node}\" can only create pods with spec.nodeName set to itself"),
                        ));
                    }
                    Ok(())
                }
                (Operation::Delete, "") => {
                    if object_node(a.old_object) != node {
                        return Err(forbidden(
                            "pods",
                            name,
                            format!("node \"{node}\" can only delete pods with spec.nodeName set to itself"),
                        ));
                    }
                    Ok(())
                }
                (Operation::Update, "status") => {
                    if object_node(a.old_object) != node {
                        return Err(forbidden(
                            "pods",
                            name,
                            format!("node \"{node}\" can only update pod status for pods with spec.nodeName set to itself"),
                        ));
                    }
                    Ok(())
                }
                (Operation::Update, "") => Err(forbidden(
                    "pods",
                    name,
                    format!("node \"{node}\" can only update pod status"),
                )),
                _ => Ok(()),
            },
            ("", "nodes") => {
                let target = target_name(a);
                if target != node {
                    return Err(forbidden(
                        "nodes",
                        &target,
                        format!("node \"{node}\" is not allowed to modify node \"{target}\""),
                    ));
                }
                let labels = |o: Option<&serde_json::Value>| {
                    o.and_then(|o| o["metadata"]["labels"].as_object().cloned())
                        .unwrap_or_default()
                };
                let new = labels(a.object.as_deref());
                let old = labels(a.old_object);
                let mut changed: Vec<&String> = new
                    .keys()
                    .chain(old.keys())
                    .filter(|k| k.starts_with(RESTRICTED_LABEL_PREFIX) && new.get(*k) != old.get(*k))
                    .collect();
                changed.sort();
                changed.dedup();
                if !changed.is_empty() {
                    let list: Vec<String> = changed.iter().map(|k| k.to_string()).collect();
                    return Err(forbidden(
                        "nodes",
                        &target,
                        format!("is not allowed to modify labels: {}", list.join(", ")),
                    ));
                }
                Ok(())
            }
            ("coordination.k8s.io", "leases") if r.namespace == "kube-node-lease" => {
                let target = target_name(a);
                if target != node {
                    return Err(forbidden(
                        "leases.coordination.k8s.io",
                        &target,
                        "can only access node lease with the same name as the requesting node".into(),
                    ));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authn::UserInfo;
    use crate::request_info::parse_request;
    use http::Method;
    use serde_json::json;

    fn kubelet(node: &str) -> UserInfo {
        UserInfo {
            name: format!("system:node:{node}"),
            groups: vec!["system:nodes".into(), "system:authenticated".into()],
            ..Default::default()
        }
    }

    async fn check(
        user: &UserInfo,
        method: Method,
        path: &str,
        op: Operation,
        obj: Option<serde_json::Value>,
        old: Option<serde_json::Value>,
    ) -> Result<(), ApiError> {
        let info = parse_request(&method, path, None);
        let mut obj = obj;
        let warnings = crate::admission::Warnings::default();
        let a = Attributes {
            operation: op,
            request: &info,
            user,
            object: obj.as_mut(),
            old_object: old.as_ref(),
            dry_run: false,
            options: None,
            warnings: &warnings,
        };
        NodeRestriction.validate(&a).await
    }

    #[tokio::test]
    async fn kubelets_touch_only_their_own_node_lease_and_pods() {
        let n1 = kubelet("n1");
        let on = |node: &str| json!({"metadata": {"name": "p"}, "spec": {"nodeName": node}});
        assert!(check(
            &n1,
            Method::PATCH,
            "/api/v1/namespaces/d/pods/p/status",
            Operation::Update,
            Some(on("n1")),
            Some(on("n1"))
        )
        .await
        .is_ok());
        let err = check(
            &n1,
            Method::PATCH,
            "/api/v1/namespaces/d/pods/p/status",
            Operation::Update,
            Some(on("n2")),
            Some(on("n2")),
        )
        .await
        .unwrap_err();
        assert_eq!(err.code, 403);
        assert!(check(
            &n1,
            Method::DELETE,
            "/api/v1/namespaces/d/pods/p",
            Operation::Delete,
            None,
            Some(on("n1"))
        )
        .await
        .is_ok());
        let err = check(
            &n1,
            Method::DELETE,
            "/api/v1/namespaces/d/pods/p",
            Operation::Delete,
            None,
            Some(on("n2")),
        )
        .await
        .unwrap_err();
        assert_eq!(
            err.message,
            "pods \"p\" is forbidden: node \"n1\" can only delete pods with spec.nodeName set to itself"
        );
        let err = check(
            &n1,
            Method::POST,
            "/api/v1/namespaces/d/pods",
            Operation::Create,
            Some(on("n1")),
            None,
        )
        .await
        .unwrap_err();
        assert!(
            err.message.contains("can only create mirror pods"),
            "{}",
            err.message
        );

        let node = |name: &str| json!({"metadata": {"name": name}});
        assert!(check(
            &n1,
            Method::POST,
            "/api/v1/nodes",
            Operation::Create,
            Some(node("n1")),
            None
        )
        .await
        .is_ok());
        let err = check(
            &n1,
            Method::PATCH,
            "/api/v1/nodes/n2/status",
            Operation::Update,
            Some(node("n2")),
            Some(node("n2")),
        )
        .await
        .unwrap_err();
        assert_eq!(
            err.message,
            "nodes \"n2\" is forbidden: node \"n1\" is not allowed to modify node \"n2\""
        );
        let labelled =
            json!({"metadata": {"name": "n1", "labels": {"node-restriction.kubernetes.io/trusted": "yes"}}});
        assert!(check(
            &n1,
            Method::PUT,
            "/api/v1/nodes/n1",
            Operation::Update,
            Some(labelled),
            Some(node("n1"))
        )
        .await
        .is_err());

        let lease = |name: &str| json!({"metadata": {"name": name, "namespace": "kube-node-lease"}});
        assert!(check(
            &n1,
            Method::PUT,
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1",
            Operation::Update,
            Some(lease("n1")),
            Some(lease("n1"))
        )
        .await
        .is_ok());
        assert!(check(
            &n1,
            Method::PUT,
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n2",
            Operation::Update,
            Some(lease("n2")),
            Some(lease("n2"))
        )
        .await
        .is_err());

        // Anyone else is not this plugin's business.
        let admin = UserInfo {
            name: "admin".into(),
            groups: vec!["system:masters".into()],
            ..Default::default()
        };
        assert!(check(
            &admin,
            Method::DELETE,
            "/api/v1/namespaces/d/pods/p",
            Operation::Delete,
            None,
            Some(on("n2"))
        )
        .await
        .is_ok());
    }
}
