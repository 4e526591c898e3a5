//! The per-resource part of the registry (upstream's `rest.RESTCreateStrategy`,
//! `RESTUpdateStrategy`, `RESTDeleteStrategy`, `TableConvertor` and the generic store's
//! BeginCreate/AfterDelete hooks): one object per resource, carried by its
//! [`Resource`](super::catalogue::Resource). The generic registry asks it; everything else is shared.
//! Every method has a default, so a plain resource implements almost nothing.

use std::collections::BTreeMap;

use async_trait::async_trait;
use r8s_api::validation::{dns1123_subdomain, label_value, qualified_name, FieldError};
use serde_json::{json, Value};

use super::catalogue::Resource;
use super::meta::{self, human_age, str_field};
use crate::authn::UserInfo;
use crate::context::Ctx;
use crate::status::ApiError;

/// What a resource does beyond the generic registry.
#[async_trait]
pub(crate) trait Strategy: Send + Sync {
    /// Whether objects are stored in another version's form (upstream's storage version; see
    /// `convert`): then [`Strategy::to_storage`] and [`Strategy::served_from_storage`] convert them.
    fn converts(&self) -> bool {
        false
    }

    /// The stored form of a served object.
    fn to_storage(&self, obj: Value) -> Value {
        obj
    }

    /// A served object (of `api_version`) from its stored form.
    fn served_from_storage(&self, obj: Value, api_version: &str) -> Value {
        let _ = api_version;
        obj
    }

    /// Whether converting an object calls out over the network (a custom resource's
    /// conversion webhook): such objects are never decoded under a lock, so the watch cache
    /// (which decodes while it holds its window) does not serve them.
    fn converts_remotely(&self) -> bool {
        false
    }

    /// [`Strategy::to_storage`], for writes that can refuse an object that does not convert
    /// (a custom resource's conversion webhook failing).
    fn try_to_storage(&self, obj: Value) -> Result<Value, ApiError> {
        Ok(self.to_storage(obj))
    }

    /// [`Strategy::served_from_storage`], for reads that can fail.
    fn try_served_from_storage(&self, obj: Value, api_version: &str) -> Result<Value, ApiError> {
        Ok(self.served_from_storage(obj, api_version))
    }

    /// Check and canonicalise the quantities of a decoded object (upstream's decoder and
    /// `SetDefaults_ResourceList`; see `quantities`). Errors are upstream's decoding message.
    fn canonicalize_quantities(&self, obj: &mut Value) -> Result<(), &'static str> {
        let _ = obj;
        Ok(())
    }

    /// Whether spec changes bump `metadata.generation`.
    fn tracks_generation(&self) -> bool {
        false
    }

    /// Whether an update bumps `metadata.generation` (asked when it is tracked): upstream's
    /// built-in kinds count spec changes.
    fn generation_changed(&self, obj: &Value, old: &Value) -> bool {
        obj.get("spec") != old.get("spec")
    }

    /// Whether status is written only through the `status` subresource: create drops it and an
    /// update of the main resource keeps the stored one (see the default
    /// [`prepare_for_create`](Strategy::prepare_for_create) and
    /// [`prepare_for_update`](Strategy::prepare_for_update)).
    fn status_subresource(&self) -> bool {
        false
    }

    /// Upstream's `PrepareForCreate`: what a client may not set on create (`user`: who asks).
    /// Runs after mutating admission, once a generated name is known.
    fn prepare_for_create(&self, user: &UserInfo, obj: &mut Value) {
        let _ = user;
        if self.status_subresource() {
            drop_status(obj);
        }
    }

    /// Upstream's `PrepareForUpdate` for writes of the main resource (not its subresources).
    fn prepare_for_update(&self, obj: &mut Value, old: &Value) -> Result<(), ApiError> {
        if self.status_subresource() {
            keep_status(obj, old);
        }
        Ok(())
    }

    /// Upstream's defaulting (`SetDefaults_*`), on create and on every update.
    fn default(&self, obj: &mut Value) {
        let _ = obj;
    }

    /// What `metadata.name` must be (upstream's `ValidateObjectMeta` name function): a DNS
    /// subdomain unless the resource says otherwise.
    fn validate_name(&self, name: &str) -> Vec<String> {
        dns1123_subdomain(name)
    }

    /// Resource-specific validation (upstream's `Validate`); metadata is checked by the
    /// registry (see [`validate`]).
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let _ = obj;
        Vec::new()
    }

    /// Checks of a create only (what an update may carry but a new object may not).
    fn validate_create(&self, obj: &Value) -> Vec<FieldError> {
        let _ = obj;
        Vec::new()
    }

    /// Checks that need the stored object (upstream's `ValidateUpdate`), for every write.
    fn validate_update(&self, obj: &Value, old: &Value) -> Vec<FieldError> {
        let _ = (obj, old);
        Vec::new()
    }

    /// Checks of a write of the main resource only (not of status or another subresource):
    /// upstream's main strategy's `ValidateUpdate` where its status strategy has another.
    fn validate_main_update(&self, obj: &Value, old: &Value) -> Vec<FieldError> {
        let _ = (obj, old);
        Vec::new()
    }

    /// Upstream's `BeginCreate`: runs after validating admission, before the object is
    /// stored (e.g. a Service's cluster IP and node ports). The returned [`Finish`] is told
    /// whether the object was stored (a dry run is not).
    async fn begin_create(&self, ctx: &Ctx, obj: &mut Value) -> Result<Option<Box<dyn Finish>>, ApiError> {
        let _ = (ctx, obj);
        Ok(None)
    }

    /// Upstream's `BeginUpdate`: runs after validating admission, before the object is
    /// written (e.g. a Service that now needs node ports gets them). The returned [`Finish`]
    /// is told whether the object was stored.
    async fn begin_update(
        &self,
        ctx: &Ctx,
        obj: &mut Value,
        old: &Value,
    ) -> Result<Option<Box<dyn Finish>>, ApiError> {
        let _ = (ctx, obj, old);
        Ok(None)
    }

    /// Whether an object must stay once its `metadata.finalizers` are gone (a namespace waits
    /// for its `spec.finalizers` too).
    fn holds_deletion(&self, obj: &Value) -> bool {
        let _ = obj;
        false
    }

    /// The grace period of a delete that gives none (upstream's
    /// `RESTGracefulDeleteStrategy`); `None`: deleted at once.
    fn default_grace_period(&self, obj: &Value) -> Option<i64> {
        let _ = obj;
        None
    }

    /// Upstream's `CheckGracefulDelete`: whether a delete with `grace` seconds only marks the
    /// object (someone else removes it: the kubelet a pod on its node).
    fn is_graceful_delete(&self, obj: &Value, grace: i64) -> bool {
        let _ = (obj, grace);
        false
    }

    /// An object a delete keeps (finalizers, graceful deletion), before it is written with
    /// its deletionTimestamp (a namespace becomes Terminating).
    fn prepare_for_delete(&self, obj: &mut Value) {
        let _ = obj;
    }

    /// Upstream's `AfterDelete`: the object is gone from the datastore.
    async fn after_delete(&self, ctx: &Ctx, old: &Value) {
        let _ = (ctx, old);
    }

    /// The values field selectors can name beyond `metadata.name` and `metadata.namespace`
    /// (upstream's `GetAttrs`).
    fn fields(&self, obj: &Value, fields: &mut BTreeMap<String, String>) {
        let _ = (obj, fields);
    }

    /// Upstream's printer columns (`pkg/printers/internalversion`).
    fn columns(&self) -> Vec<Column> {
        vec![NAME, AGE]
    }

    /// One row's cells, in the order of [`columns`](Strategy::columns).
    fn cells(&self, obj: &Value) -> Vec<Value> {
        vec![name_cell(obj), age_cell(obj)]
    }

    /// What the `scale` subresource shows of `obj`: the replicas wanted and had, and the
    /// selector of what is scaled (upstream's per-kind scale storage; built-ins keep them
    /// at `spec.replicas`, `status.replicas` and `spec.selector`).
    fn scale(&self, obj: &Value) -> (i64, i64, String) {
        let selector = super::apps::selector_string(&obj["spec"]["selector"]);
        (
            obj["spec"]["replicas"].as_i64().unwrap_or(0),
            obj["status"]["replicas"].as_i64().unwrap_or(0),
            if selector == "<none>" {
                String::new()
            } else {
                selector
            },
        )
    }

    /// Set the replicas a `scale` write asks for.
    fn set_scale(&self, obj: &mut Value, replicas: i64) {
        obj["spec"]["replicas"] = json!(replicas);
    }

    /// Whether a `status` write stamps conditions written without a `lastTransitionTime`
    /// (see `subresource`); CRDs keep their conditions as written, as upstream does.
    fn stamps_conditions(&self) -> bool {
        true
    }

    /// The metadata fields a `status` write may not change (upstream's status strategies
    /// reset them: a Deployment's labels, a pod's owners).
    fn status_keeps_metadata(&self) -> &'static [&'static str] {
        &[]
    }

    /// The subresource `sub` when it is served by something other than a view of the object
    /// (upstream's connecters and binding/token storage). Only asked for subresources the
    /// catalogue lists for the resource.
    fn connect(&self, sub: &str) -> Option<Connect> {
        let _ = sub;
        None
    }
}

/// What happens at the end of a create that a [`Strategy::begin_create`] began (upstream's
/// `FinishFunc`).
#[async_trait]
pub(crate) trait Finish: Send {
    /// `stored`: whether the object was written.
    async fn finish(self: Box<Self>, ctx: &Ctx, stored: bool);
}

/// Subresources served by something other than a view of the object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Connect {
    /// `pods/binding`.
    Binding,
    /// `pods/log`, from the pod's kubelet.
    PodLog,
    /// `pods/proxy`, to the pod over HTTP.
    PodProxy,
    /// `nodes/proxy`, to the node's kubelet.
    NodeProxy,
    /// `services/proxy`, through an endpoint.
    ServiceProxy,
    /// `serviceaccounts/token`: a TokenRequest.
    Token,
    /// `pods/eviction`: a delete that honours disruption budgets.
    Eviction,
}

/// A strategy with every default: for resources that need nothing of their own.
pub(crate) struct Plain;

impl Strategy for Plain {}

/// Status as the client may not set it on create.
pub(crate) fn drop_status(obj: &mut Value) {
    if let Some(o) = obj.as_object_mut() {
        o.remove("status");
    }
}

/// Status as stored, whatever the update sent.
pub(crate) fn keep_status(obj: &mut Value, old: &Value) {
    match old.get("status") {
        Some(s) => obj["status"] = s.clone(),
        None => drop_status(obj),
    }
}

/// Defaults of `res`'s objects.
pub(crate) fn default(res: &Resource, obj: &mut Value) {
    res.strategy.default(obj);
}

/// Every check of an object of `res`: metadata, then the resource's own.
pub(crate) fn validate(res: &Resource, obj: &Value) -> Vec<FieldError> {
    let s = &*res.strategy;
    let mut errs = validate_meta(s, obj);
    errs.extend(s.validate(obj));
    errs
}

/// The checks of an update of `res`'s object that need the stored one.
pub(crate) fn validate_update(res: &Resource, obj: &Value, old: &Value) -> Vec<FieldError> {
    res.strategy.validate_update(obj, old)
}

/// The values field selectors can name (upstream's `GetAttrs`/field label conversion).
pub(crate) fn fields(res: &Resource, obj: &Value) -> BTreeMap<String, String> {
    let mut f = BTreeMap::new();
    f.insert("metadata.name".into(), meta::name(obj).to_owned());
    if res.namespaced {
        f.insert("metadata.namespace".into(), meta::namespace(obj).to_owned());
    }
    res.strategy.fields(obj, &mut f);
    f
}

/// A column of a Table.
pub(crate) struct Column {
    pub name: &'static str,
    pub kind: &'static str,
    pub format: &'static str,
    pub description: &'static str,
    /// Shown only with `-o wide`.
    pub priority: i32,
}

pub(crate) const fn col(name: &'static str, kind: &'static str, description: &'static str) -> Column {
    Column {
        name,
        kind,
        format: "",
        description,
        priority: 0,
    }
}

pub(crate) const fn wide(name: &'static str, description: &'static str) -> Column {
    Column {
        name,
        kind: "string",
        format: "",
        description,
        priority: 1,
    }
}

pub(crate) const NAME: Column = Column {
    name: "Name",
    kind: "string",
    format: "name",
    description: "Name must be unique within a namespace.",
    priority: 0,
};

pub(crate) const AGE: Column = col(
    "Age",
    "string",
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
);

/// The Name cell.
pub(crate) fn name_cell(obj: &Value) -> Value {
    json!(meta::name(obj))
}

/// The Age cell.
pub(crate) fn age_cell(obj: &Value) -> Value {
    json!(human_age(str_field(obj, &["metadata", "creationTimestamp"])))
}

/// Labels and annotations: qualified names as keys, label values (`values_are_labels`) or
/// any strings as values.
pub(crate) fn validate_string_map(
    errs: &mut Vec<FieldError>,
    field: &str,
    v: &Value,
    values_are_labels: bool,
) {
    let Some(m) = v.as_object() else {
        if !v.is_null() {
            errs.push(FieldError::invalid(
                field,
                &v.to_string(),
                "must be a map of strings",
            ));
        }
        return;
    };
    for (k, val) in m {
        for e in qualified_name(k) {
            errs.push(FieldError::invalid(field, k, e));
        }
        match val.as_str() {
            Some(s) if values_are_labels => {
                for e in label_value(s) {
                    errs.push(FieldError::invalid(field, s, e));
                }
            }
            Some(_) => {}
            None => errs.push(FieldError::invalid(
                format!("{field}[{k}]"),
                &val.to_string(),
                "must be a string",
            )),
        }
    }
}

/// Metadata checks shared by every resource, the name as the resource's strategy wants it.
pub(crate) fn validate_meta(s: &dyn Strategy, obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let name = meta::name(obj);
    if name.is_empty() {
        errs.push(FieldError::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else {
        for p in s.validate_name(name) {
            errs.push(FieldError::invalid("metadata.name", name, p));
        }
    }
    validate_string_map(&mut errs, "metadata.labels", &obj["metadata"]["labels"], true);
    validate_string_map(
        &mut errs,
        "metadata.annotations",
        &obj["metadata"]["annotations"],
        false,
    );
    if total_size(&obj["metadata"]["annotations"]) > MAX_ANNOTATIONS_BYTES {
        errs.push(FieldError::too_long(
            "metadata.annotations",
            MAX_ANNOTATIONS_BYTES,
        ));
    }
    errs
}

/// Upstream's limit on all of an object's annotations together (keys and values).
pub(crate) const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// The bytes of a string map's keys and values.
pub(crate) fn total_size(map: &Value) -> usize {
    map.as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum()
}

/// Go's `%#v` of a string value.
pub(crate) fn go_string(v: &Value) -> String {
    serde_json::to_string(v.as_str().unwrap_or("")).unwrap_or_default()
}

/// How many entries a map has.
pub(crate) fn count(v: &Value) -> usize {
    v.as_object().map(|m| m.len()).unwrap_or(0)
}
