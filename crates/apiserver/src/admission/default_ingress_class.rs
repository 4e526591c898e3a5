//! `DefaultIngressClass` (upstream's admission plugin of that name, on by default): a new
//! Ingress that names no class — neither `spec.ingressClassName` nor the older
//! `kubernetes.io/ingress.class` annotation — gets the IngressClass annotated
//! `ingressclass.kubernetes.io/is-default-class: "true"`; with several such classes, the
//! newest (as upstream since 1.28, which no longer refuses the Ingress).

use async_trait::async_trait;
use serde_json::{json, Value};

use super::{Attributes, MutatingPlugin, Operation};
use crate::registry::ingresses::CLASS_ANNOTATION;
use crate::status::ApiError;

pub const DEFAULT_CLASS_ANNOTATION: &str = "ingressclass.kubernetes.io/is-default-class";

pub struct DefaultIngressClass {
    pub listers: super::listers::Listers,
}

/// The default among `classes`: marked so, the newest first, then by name.
pub fn default_class(classes: &[std::sync::Arc<Value>]) -> Option<String> {
    default_marked(classes, DEFAULT_CLASS_ANNOTATION)
}

/// The default among `classes` marked by `annotation` (`"true"`): the newest, then by name
/// (upstream's choice for IngressClasses and StorageClasses alike).
pub fn default_marked(classes: &[std::sync::Arc<Value>], annotation: &str) -> Option<String> {
    classes
        .iter()
        .filter(|c| c["metadata"]["annotations"][annotation] == "true")
        .max_by(|a, b| {
            let t = |c: &Value| {
                c["metadata"]["creationTimestamp"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            };
            let n = |c: &Value| c["metadata"]["name"].as_str().unwrap_or_default().to_string();
            // Newest wins; between equals, the first name.
            t(a).cmp(&t(b)).then_with(|| n(b).cmp(&n(a)))
        })
        .and_then(|c| c["metadata"]["name"].as_str().map(str::to_owned))
}

#[async_trait]
impl MutatingPlugin for DefaultIngressClass {
    fn name(&self) -> &'static str {
        "DefaultIngressClass"
    }

    async fn admit(&self, attrs: &mut Attributes<'_>) -> Result<(), ApiError> {
        let r = attrs.request;
        if attrs.operation != Operation::Create
            || r.api_group != "networking.k8s.io"
            || r.resource != "ingresses"
            || !r.subresource.is_empty()
        {
            return Ok(());
        }
        let Some(ingress) = attrs.object.as_deref_mut() else {
            return Ok(());
        };
        if !ingress["spec"]["ingressClassName"].is_null()
            || !ingress["metadata"]["annotations"][CLASS_ANNOTATION].is_null()
        {
            return Ok(());
        }
        if let Some(class) = default_class(&self.listers.ingress_classes().await?) {
            if !ingress["spec"].is_object() {
                ingress["spec"] = json!({});
            }
            ingress["spec"]["ingressClassName"] = json!(class);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_newest_marked_class_is_the_default() {
        let class = |name: &str, at: &str, marked: bool| {
            let mut c = json!({"metadata": {"name": name, "creationTimestamp": at}});
            if marked {
                c["metadata"]["annotations"] = json!({DEFAULT_CLASS_ANNOTATION: "true"});
            }
            Arc::new(c)
        };
        assert_eq!(default_class(&[class("a", "2026-01-01T00:00:00Z", false)]), None);
        let classes = [
            class("old", "2026-01-01T00:00:00Z", true),
            class("new", "2026-02-01T00:00:00Z", true),
            class("newest-unmarked", "2026-03-01T00:00:00Z", false),
        ];
        assert_eq!(default_class(&classes).as_deref(), Some("new"));
        let tie = [
            class("b", "2026-01-01T00:00:00Z", true),
            class("a", "2026-01-01T00:00:00Z", true),
        ];
        assert_eq!(default_class(&tie).as_deref(), Some("a"));
    }
}
