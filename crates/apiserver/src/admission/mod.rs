//! Admission: mutating plugins run first, in order, and may change the object; validating
//! plugins run after and may only refuse. Any refusal fails the request (the reference
//! document's "Admission control" stage).

pub mod default_ingress_class;
pub mod default_storage_class;
pub mod initializers;
pub mod limit_ranger;
pub mod listers;
pub mod namespace_lifecycle;
pub mod node_restriction;
pub mod pod_security;
pub mod policy;
pub mod priority;
pub mod pvc_resize;
pub mod resource_quota;
pub mod runtime_class;
pub mod service_account;
pub mod storage_protection;
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

impl Attributes<'_> {
    /// `resource.group` of the request (`pods`, `deployments.apps`).
    pub fn group_resource(&self) -> String {
        if self.request.api_group.is_empty() {
            self.request.resource.clone()
        } else {
            format!("{}.{}", self.request.resource, self.request.api_group)
        }
    }

    /// Whether the request is about the main resource `group`/`resource` (no subresource).
    pub fn is(&self, group: &str, resource: &str) -> bool {
        self.request.api_group == group
            && self.request.resource == resource
            && self.request.subresource.is_empty()
    }

    /// The object's name as upstream's admission errors give it: the request's, else the
    /// object's, else its generateName (before a name is generated), else "Unknown".
    pub fn name(&self) -> String {
        if !self.request.name.is_empty() {
            return self.request.name.clone();
        }
        let meta = match self.object.as_deref() {
            Some(o) => &o["metadata"],
            None => return "Unknown".into(),
        };
        meta["name"]
            .as_str()
            .filter(|n| !n.is_empty())
            .or(meta["generateName"].as_str().filter(|n| !n.is_empty()))
            .unwrap_or("Unknown")
            .to_owned()
    }

    /// 403 `<resource> "<name>" is forbidden: <reason>` (upstream's `admission.NewForbidden`).
    pub fn forbidden(&self, reason: impl std::fmt::Display) -> ApiError {
        let name = self.name();
        ApiError::forbidden(format!(
            "{} \"{name}\" is forbidden: {reason}",
            self.group_resource()
        ))
        .with_details(serde_json::json!({
            "name": name,
            "group": self.request.api_group,
            "kind": self.request.resource,
        }))
    }
}

/// Several errors as one message, as upstream's `utilerrors.NewAggregate`: one alone as it
/// is, more as `[a, b]`, repeats left out.
pub fn aggregate(errs: &[String]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for e in errs {
        if !seen.contains(&e.as_str()) {
            seen.push(e);
        }
    }
    match seen.len() {
        1 => seen[0].to_owned(),
        _ => format!("[{}]", seen.join(", ")),
    }
}

/// Append to the list at `field` of a mutated object, which is made a list if it is missing
/// or null (the list is neither copied nor re-encoded).
pub(crate) fn push_to_list(obj: &mut serde_json::Map<String, Value>, field: &str, item: Value) {
    let list = obj.entry(field).or_insert_with(|| Value::Array(Vec::new()));
    if !list.is_array() {
        *list = Value::Array(Vec::new());
    }
    if let Value::Array(items) = list {
        items.push(item);
    }
}

/// A stored object admission reads on every request (a namespace, a ServiceAccount, a
/// PriorityClass, …), parsed once per stored version and shared, and bounded (cleared when
/// full). Looked up first by where the bytes are: the listers hand out the same buffer for an
/// unchanged object, and an entry holds a reference to its buffer, so no other bytes can take
/// its place while the entry lives. Bytes read afresh from the datastore are found by their
/// content (hashing a few hundred bytes, which the first lookup avoids). One cache per thread:
/// every create looks several objects up, and a shared cache's lock was contended by the
/// runtime's workers.
pub(crate) fn parsed(stored: &bytes::Bytes) -> Option<std::sync::Arc<Value>> {
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::sync::Arc;
    const MAX_ENTRIES: usize = 4096;
    #[derive(Default)]
    struct Cache {
        by_buffer: HashMap<(usize, usize), (bytes::Bytes, Arc<Value>)>,
        by_content: HashMap<bytes::Bytes, Arc<Value>>,
    }
    thread_local! {
        static CACHE: RefCell<Cache> = RefCell::new(Cache::default());
    }
    let buffer = (stored.as_ptr() as usize, stored.len());
    CACHE.with_borrow_mut(|cache| {
        if let Some((_, v)) = cache.by_buffer.get(&buffer) {
            return Some(v.clone());
        }
        let value = match cache.by_content.get(stored) {
            Some(v) => v.clone(),
            None => {
                let v = Arc::new(serde_json::from_slice::<Value>(stored).ok()?);
                if cache.by_content.len() >= MAX_ENTRIES {
                    cache.by_content.clear();
                }
                cache.by_content.insert(stored.clone(), v.clone());
                v
            }
        };
        if cache.by_buffer.len() >= MAX_ENTRIES {
            cache.by_buffer.clear();
        }
        cache.by_buffer.insert(buffer, (stored.clone(), value.clone()));
        Some(value)
    })
}

#[async_trait]
pub trait MutatingPlugin: Send + Sync {
    fn name(&self) -> &'static str;
    async fn admit(&self, attrs: &mut Attributes<'_>) -> Result<(), ApiError>;

    /// Whether the plugin may want to run again when a later plugin changed the object
    /// (upstream's `reinvocationPolicy: IfNeeded`): then [`MutatingPlugin::readmit`] is called.
    fn reinvokes(&self) -> bool {
        false
    }

    /// The second run, after later plugins changed the object.
    async fn readmit(&self, _attrs: &mut Attributes<'_>) -> Result<(), ApiError> {
        Ok(())
    }
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
        self.admit(attrs).await?;
        self.validate(attrs).await
    }

    /// The mutating phase alone (the registry runs it before its own defaulting and
    /// validation, as upstream's handlers do).
    pub async fn admit(&self, attrs: &mut Attributes<'_>) -> Result<(), ApiError> {
        // The journey's stage (`r8s trace`): one per phase, naming each plugin with its time
        // and those that changed the object (a fingerprint before and after each: no copy).
        let stage = crate::journey::stage!(
            "admission",
            phase = "mutating",
            plugins = tracing::field::Empty,
            decision = tracing::field::Empty,
            error = tracing::field::Empty
        );
        let told = !stage.is_none();
        let mut timings = String::new();
        let mut changed = Vec::new();
        // The object as each plugin that may run again left it.
        let mut left: Vec<(&dyn MutatingPlugin, Option<Value>)> = Vec::new();
        let run = async {
            for p in &self.mutating {
                let before = told.then(|| attrs.object.as_deref().map(fingerprint));
                let began = std::time::Instant::now();
                let admitted = p.admit(attrs).await;
                if told {
                    timing(&mut timings, p.name(), began);
                    if before != Some(attrs.object.as_deref().map(fingerprint)) {
                        changed.push(p.name());
                    }
                }
                if let Err(e) = admitted {
                    return Err((p.name(), e));
                }
                if p.reinvokes() {
                    left.push((p.as_ref(), attrs.object.as_deref().cloned()));
                }
            }
            // Upstream's reinvocation: once more, where a later plugin changed the object.
            for (p, as_left) in left {
                if attrs.object.as_deref() != as_left.as_ref() {
                    p.readmit(attrs).await.map_err(|e| (p.name(), e))?;
                }
            }
            Ok(())
        };
        let result = tracing::Instrument::instrument(run, stage.clone()).await;
        if told {
            stage.record("plugins", timings.as_str());
            if !changed.is_empty() {
                let decision = format!("{} changed the object", changed.join(", "));
                stage.record("decision", decision.as_str());
            }
            if let Err((plugin, e)) = &result {
                stage.record(
                    "error",
                    tracing::field::display(format_args!("{plugin}: {}", e.message)),
                );
            }
        }
        result.map_err(|(_, e)| e)
    }

    /// The validating phase alone (after the object is validated, before it is stored).
    pub async fn validate(&self, attrs: &Attributes<'_>) -> Result<(), ApiError> {
        let stage = crate::journey::stage!(
            "admission",
            phase = "validating",
            plugins = tracing::field::Empty,
            error = tracing::field::Empty
        );
        let told = !stage.is_none();
        let mut timings = String::new();
        let run = async {
            for p in &self.validating {
                let began = std::time::Instant::now();
                let validated = p.validate(attrs).await;
                if told {
                    timing(&mut timings, p.name(), began);
                }
                validated.map_err(|e| (p.name(), e))?;
            }
            Ok(())
        };
        let result = tracing::Instrument::instrument(run, stage.clone()).await;
        if told {
            stage.record("plugins", timings.as_str());
            if let Err((plugin, e)) = &result {
                stage.record(
                    "error",
                    tracing::field::display(format_args!("{plugin}: {}", e.message)),
                );
            }
        }
        result.map_err(|(_, e)| e)
    }
}

/// `plugin 12µs` added to an admission stage's list of plugins.
fn timing(list: &mut String, plugin: &str, began: std::time::Instant) {
    use std::fmt::Write;
    if !list.is_empty() {
        list.push_str(", ");
    }
    let _ = write!(list, "{plugin} {}µs", began.elapsed().as_micros());
}

/// A fingerprint of a JSON value, to tell whether a plugin changed the object without keeping
/// a copy of it (`serde_json::Value` has no `Hash`).
fn fingerprint(v: &Value) -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    fn feed(v: &Value, h: &mut impl Hasher) {
        match v {
            Value::Null => 0u8.hash(h),
            Value::Bool(b) => (1u8, *b).hash(h),
            Value::Number(n) => (2u8, n.as_f64().map(f64::to_bits), n.as_i64()).hash(h),
            Value::String(s) => (3u8, s).hash(h),
            Value::Array(items) => {
                (4u8, items.len()).hash(h);
                items.iter().for_each(|i| feed(i, h));
            }
            Value::Object(map) => {
                (5u8, map.len()).hash(h);
                for (k, v) in map {
                    k.hash(h);
                    feed(v, h);
                }
            }
        }
    }
    let mut h = foldhash::fast::FixedState::with_seed(0).build_hasher();
    feed(v, &mut h);
    h.finish()
}

/// What the plugins' unit tests share.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// Create `pod` in namespace `ns` through `mutating` then `validating` (either may be
    /// absent), as the chain would run them.
    pub async fn create_pod(
        ns: &str,
        pod: &mut Value,
        mutating: Option<&dyn MutatingPlugin>,
        validating: Option<&dyn ValidatingPlugin>,
    ) -> Result<(), ApiError> {
        let path = format!("/api/v1/namespaces/{ns}/pods");
        let info = crate::request_info::parse_request(&http::Method::POST, &path, None);
        let user = UserInfo::default();
        let warnings = Warnings::default();
        let mut attrs = Attributes {
            operation: Operation::Create,
            request: &info,
            user: &user,
            object: Some(pod),
            old_object: None,
            dry_run: false,
            options: None,
            warnings: &warnings,
        };
        if let Some(m) = mutating {
            m.admit(&mut attrs).await?;
        }
        if let Some(v) = validating {
            v.validate(&attrs).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts its runs in the object's `runs` label; asks to run again.
    struct Counting;

    #[async_trait]
    impl MutatingPlugin for Counting {
        fn name(&self) -> &'static str {
            "counting"
        }
        async fn admit(&self, a: &mut Attributes<'_>) -> Result<(), ApiError> {
            if let Some(o) = a.object.as_deref_mut() {
                let runs = o["metadata"]["labels"]["runs"].as_str().unwrap_or("").to_owned() + "x";
                o["metadata"]["labels"]["runs"] = Value::String(runs);
            }
            Ok(())
        }
        fn reinvokes(&self) -> bool {
            true
        }
        async fn readmit(&self, a: &mut Attributes<'_>) -> Result<(), ApiError> {
            self.admit(a).await
        }
    }

    /// Sets a label to a fixed value.
    struct Setting(&'static str);

    #[async_trait]
    impl MutatingPlugin for Setting {
        fn name(&self) -> &'static str {
            "setting"
        }
        async fn admit(&self, a: &mut Attributes<'_>) -> Result<(), ApiError> {
            if let Some(o) = a.object.as_deref_mut() {
                o["metadata"]["labels"]["set"] = Value::String(self.0.to_owned());
            }
            Ok(())
        }
    }

    /// A plugin that asks to run again does, once, where a later plugin changed the object,
    /// and only there (upstream's reinvocation).
    #[tokio::test]
    async fn a_plugin_runs_again_when_a_later_one_changed_the_object() {
        let run = |later: &'static str| async move {
            let mut chain = AdmissionChain::default();
            chain.push_mutating(Counting);
            chain.push_mutating(Setting(later));
            let info =
                crate::request_info::parse_request(&http::Method::POST, "/api/v1/namespaces/d/pods", None);
            let user = UserInfo::default();
            let warnings = Warnings::default();
            let mut pod = serde_json::json!({"metadata": {"name": "p", "labels": {"set": "same"}}});
            let mut attrs = Attributes {
                operation: Operation::Create,
                request: &info,
                user: &user,
                object: Some(&mut pod),
                old_object: None,
                dry_run: false,
                options: None,
                warnings: &warnings,
            };
            chain.admit(&mut attrs).await.unwrap();
            pod["metadata"]["labels"]["runs"].as_str().unwrap().to_owned()
        };
        assert_eq!(run("changed").await, "xx");
        assert_eq!(run("same").await, "x");
    }

    #[test]
    fn stored_objects_are_parsed_once_per_content() {
        let a = bytes::Bytes::from(r#"{"metadata":{"name":"parsed-once-a"}}"#.as_bytes().to_vec());
        let first = parsed(&a).unwrap();
        assert_eq!(first["metadata"]["name"], "parsed-once-a");
        // The same buffer, and the same content in another buffer: the same parse.
        assert!(std::sync::Arc::ptr_eq(&first, &parsed(&a.clone()).unwrap()));
        let copy = bytes::Bytes::from(a.to_vec());
        assert_ne!(copy.as_ptr(), a.as_ptr());
        assert!(std::sync::Arc::ptr_eq(&first, &parsed(&copy).unwrap()));
        // Other content is another object, even of the same length.
        let b = bytes::Bytes::from(r#"{"metadata":{"name":"parsed-once-b"}}"#.as_bytes().to_vec());
        assert_eq!(parsed(&b).unwrap()["metadata"]["name"], "parsed-once-b");
        assert!(parsed(&bytes::Bytes::from_static(b"not json")).is_none());
    }

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
