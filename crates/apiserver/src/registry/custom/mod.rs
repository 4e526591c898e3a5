//! Custom resources (upstream's apiextensions-apiserver): the CustomResourceDefinition kind
//! itself, and the strategy every custom resource is served with — built from its CRD's
//! version (schema, subresources, printer columns, selectable fields) and going through the
//! same generic registry as the built-in kinds.
//!
//! A served custom resource is a `&'static Resource` (a definition with its strategy) like a
//! built-in one, so requests, watch caches and admission handle both alike. Each distinct
//! definition (the CRD version's names, scope, schema and subresources) is allocated once and
//! kept for the life of the process, with its strategy: a request in flight when its CRD changes or goes keeps a valid
//! definition, and a server's memory grows only with the number of distinct definitions it
//! has ever served (a few hundred bytes to a few KB each), never with requests.

pub(crate) mod controller;
pub(crate) mod conversion;
pub(crate) mod jsonpath;
pub(crate) mod openapi;
pub(crate) mod schema;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};

use async_trait::async_trait;
use r8s_api::catalogue::{SCALE, STANDARD_VERBS, STATUS};
use r8s_api::validation::{dns1035_label, dns1123_subdomain, FieldError};
use r8s_api::ResourceDef;
use serde_json::{json, Value};

use super::catalogue::Resource;
use super::meta::{self, human_age, str_field};
use super::strategy::{drop_status, keep_status, name_cell, Column, Strategy, NAME};
use crate::authn::UserInfo;
use crate::status::ApiError;

/// The finalizer a CRD carries while its instances are deleted.
pub(crate) const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// `s`, allocated once per distinct string for the life of the process.
pub(crate) fn leak(s: &str) -> &'static str {
    static STRINGS: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut set = STRINGS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(s) = set.get(s) {
        return s;
    }
    let leaked: &'static str = Box::leak(s.to_owned().into_boxed_str());
    set.insert(leaked);
    leaked
}

fn leak_list(items: &[String]) -> &'static [&'static str] {
    if items.is_empty() {
        return &[];
    }
    Box::leak(
        items
            .iter()
            .map(|s| leak(s))
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    )
}

/// Resources already made, by their definitions' content.
fn interned() -> &'static RwLock<HashMap<String, &'static Resource>> {
    static I: OnceLock<RwLock<HashMap<String, &'static Resource>>> = OnceLock::new();
    I.get_or_init(Default::default)
}

/// A custom resource made for `group`/`version`/`plural` (any of them, when its CRD changed),
/// for code that has the request's names but not its server's served set: admission plugins,
/// built before the server, which need the names and the schema.
pub(crate) fn find_made(group: &str, version: &str, plural: &str) -> Option<&'static Resource> {
    let i = interned().read().unwrap_or_else(PoisonError::into_inner);
    i.values()
        .find(|d| d.group == group && d.version == version && d.plural == plural)
        .copied()
}

/// [`find_made`] by kind.
pub(crate) fn find_made_kind(group: &str, version: &str, kind: &str) -> Option<&'static Resource> {
    let i = interned().read().unwrap_or_else(PoisonError::into_inner);
    i.values()
        .find(|d| d.group == group && d.version == version && d.kind == kind)
        .copied()
}

/// The served definitions of a CRD: one per served version, with the names it has been
/// granted (`status.acceptedNames`, as upstream serves them). `store`: the serving server's
/// datastore, where a conversion webhook's Service is looked up (such a CRD's definitions
/// are the server's own).
pub(crate) fn definitions(crd: &Value, store: &Arc<dyn r8s_store::Store>) -> Vec<&'static Resource> {
    let spec = &crd["spec"];
    let webhook = spec["conversion"]["strategy"] == "Webhook";
    let server = if webhook {
        format!("{:p}", Arc::as_ptr(store))
    } else {
        String::new()
    };
    let names = &crd["status"]["acceptedNames"];
    let group = spec["group"].as_str().unwrap_or("");
    let storage = storage_version(crd).unwrap_or_default();
    let versions: Vec<&Value> = spec["versions"].as_array().into_iter().flatten().collect();
    let multi = versions.len() > 1;
    let mut out = Vec::new();
    for v in versions.iter().filter(|v| v["served"].as_bool().unwrap_or(false)) {
        let content = json!({
            "group": group, "names": names, "scope": spec["scope"], "version": v,
            "storage": storage, "multi": multi, "conversion": spec["conversion"],
            "preserveUnknownFields": spec["preserveUnknownFields"], "server": server,
        })
        .to_string();
        if let Some(d) = interned()
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&content)
        {
            out.push(*d);
            continue;
        }
        let list = |k: &str| -> Vec<String> {
            names[k]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        };
        let subs = &v["subresources"];
        let mut subresources = Vec::new();
        if subs["status"].is_object() {
            subresources.push(STATUS);
        }
        if subs["scale"].is_object() {
            subresources.push(SCALE);
        }
        let version = v["name"].as_str().unwrap_or("");
        let def: &'static ResourceDef = Box::leak(Box::new(ResourceDef {
            group: leak(group),
            version: leak(version),
            kind: leak(names["kind"].as_str().unwrap_or("")),
            plural: leak(names["plural"].as_str().unwrap_or("")),
            singular: leak(names["singular"].as_str().unwrap_or("")),
            namespaced: spec["scope"] == "Namespaced",
            short_names: leak_list(&list("shortNames")),
            categories: leak_list(&list("categories")),
            verbs: STANDARD_VERBS,
            subresources: Box::leak(subresources.into_boxed_slice()),
            custom: true,
        }));
        let mut strategy = CustomResources::new(group, v, &storage, crd);
        if webhook {
            strategy.webhook = Some(Arc::new(conversion::Webhook::new(
                store.clone(),
                &spec["conversion"]["webhook"],
            )));
        }
        let mut i = interned().write().unwrap_or_else(PoisonError::into_inner);
        let res = *i
            .entry(content)
            .or_insert_with(|| Box::leak(Box::new(Resource::custom_resource(def, Arc::new(strategy)))));
        out.push(res);
    }
    out
}

/// The version a CRD's objects are stored in.
pub(crate) fn storage_version(crd: &Value) -> Option<String> {
    crd["spec"]["versions"]
        .as_array()?
        .iter()
        .find(|v| v["storage"].as_bool().unwrap_or(false))
        .and_then(|v| v["name"].as_str())
        .map(str::to_owned)
}

/// A printer column of a custom resource.
struct PrinterColumn {
    column: Column,
    path: jsonpath::Path,
}

/// How a custom resource's `scale` subresource maps onto it.
#[derive(Clone, Debug)]
pub(crate) struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
    pub label_selector: Option<String>,
}

/// The strategy of one version of a custom resource.
pub(crate) struct CustomResources {
    /// `group/version` of objects stored in the storage version.
    storage_api_version: String,
    pub schema: Option<Value>,
    /// The schema as server-side apply walks it (list and map types), made once per served
    /// definition like the definition itself.
    pub apply_schema: Option<&'static r8s_api::patch_strategy::SchemaNode>,
    /// `preserveUnknownFields` (v1beta1's legacy: nothing is pruned).
    preserve_unknown: bool,
    status: bool,
    pub scale: Option<ScalePaths>,
    columns: Vec<PrinterColumn>,
    /// `selectableFields`: field-selector names (`spec.color`) and their paths.
    selectable: Vec<(String, jsonpath::Path)>,
    /// The version's deprecation warning, if it is deprecated.
    pub warning: Option<String>,
    /// The CRD's conversion webhook (`None`: conversion only changes apiVersion).
    webhook: Option<Arc<conversion::Webhook>>,
    kind: String,
}

impl CustomResources {
    fn new(group: &str, v: &Value, storage: &str, crd: &Value) -> Self {
        let version = v["name"].as_str().unwrap_or("");
        let mut columns: Vec<PrinterColumn> = v["additionalPrinterColumns"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| {
                let path_text = c["jsonPath"].as_str()?;
                let path = jsonpath::Path::parse(path_text)?;
                let description = match c["description"].as_str().filter(|d| !d.is_empty()) {
                    Some(d) => leak(d),
                    None => leak(&format!(
                        "Custom resource definition column (in JSONPath format): {path_text}"
                    )),
                };
                Some(PrinterColumn {
                    column: Column {
                        name: leak(c["name"].as_str().unwrap_or("")),
                        kind: leak(c["type"].as_str().unwrap_or("string")),
                        format: leak(c["format"].as_str().unwrap_or("")),
                        description,
                        priority: c["priority"].as_i64().unwrap_or(0) as i32,
                    },
                    path,
                })
            })
            .collect();
        if v["additionalPrinterColumns"].as_array().is_none_or(Vec::is_empty) {
            columns.push(PrinterColumn {
                column: Column {
                    name: "Age",
                    kind: "date",
                    format: "",
                    description:
                        "Custom resource definition column (in JSONPath format): .metadata.creationTimestamp",
                    priority: 0,
                },
                path: jsonpath::Path::parse(".metadata.creationTimestamp").expect("a valid path"),
            });
        }
        let scale = &v["subresources"]["scale"];
        let deprecated = v["deprecated"].as_bool().unwrap_or(false);
        let kind = crd["spec"]["names"]["kind"].as_str().unwrap_or("");
        Self {
            storage_api_version: format!("{group}/{storage}"),
            schema: v["schema"]["openAPIV3Schema"]
                .as_object()
                .map(|_| v["schema"]["openAPIV3Schema"].clone()),
            apply_schema: v["schema"]["openAPIV3Schema"]
                .as_object()
                .map(|_| r8s_api::patch_strategy::SchemaNode::leaked(&v["schema"]["openAPIV3Schema"])),
            preserve_unknown: crd["spec"]["preserveUnknownFields"].as_bool().unwrap_or(false),
            status: v["subresources"]["status"].is_object(),
            scale: scale.is_object().then(|| ScalePaths {
                spec_replicas: scale["specReplicasPath"].as_str().unwrap_or("").to_owned(),
                status_replicas: scale["statusReplicasPath"].as_str().unwrap_or("").to_owned(),
                label_selector: scale["labelSelectorPath"].as_str().map(str::to_owned),
            }),
            columns,
            selectable: v["selectableFields"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| {
                    let p = f["jsonPath"].as_str()?;
                    Some((p.trim_start_matches('.').to_owned(), jsonpath::Path::parse(p)?))
                })
                .collect(),
            webhook: None,
            kind: kind.to_owned(),
            warning: deprecated.then(|| {
                v["deprecationWarning"]
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| format!("{group}/{version} {kind} is deprecated"))
            }),
        }
    }

    /// `obj` in `to` (`group/version`): itself if it is in that version already.
    pub fn convert(&self, mut obj: Value, to: &str) -> Result<Value, ApiError> {
        let from = obj["apiVersion"].as_str().unwrap_or("").to_owned();
        if from == to {
            return Ok(obj);
        }
        match &self.webhook {
            None => {
                obj["apiVersion"] = json!(to);
                Ok(obj)
            }
            Some(w) => conversion::block_on(w.convert(obj, to))
                .and_then(|r| r)
                .map_err(|e| conversion::failed(&self.kind, &from, &e)),
        }
    }

    /// Prune `obj` to its schema, returning the unknown fields dropped (JSON paths).
    pub fn prune(&self, obj: &mut Value) -> Vec<String> {
        let mut unknown = Vec::new();
        match &self.schema {
            Some(s) if !self.preserve_unknown => schema::prune(s, obj, &mut unknown),
            _ => {}
        }
        unknown
    }

    /// The replicas the scale subresource shows (spec, status) and its selector.
    pub fn scale_of(&self, obj: &Value) -> Option<(i64, i64, String)> {
        let s = self.scale.as_ref()?;
        let at = |p: &str| jsonpath::Path::parse(p).and_then(|p| p.first(obj).cloned());
        let spec = at(&s.spec_replicas).and_then(|v| v.as_i64()).unwrap_or(0);
        let status = at(&s.status_replicas).and_then(|v| v.as_i64()).unwrap_or(0);
        let selector = s
            .label_selector
            .as_deref()
            .and_then(at)
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        Some((spec, status, selector))
    }

    /// `obj` with the scale subresource's spec replicas set.
    pub fn set_replicas(&self, obj: &mut Value, replicas: i64) -> bool {
        let Some(s) = &self.scale else { return false };
        let Some(p) = jsonpath::Path::parse(&s.spec_replicas) else {
            return false;
        };
        p.set(obj, json!(replicas))
    }
}

#[async_trait]
impl Strategy for CustomResources {
    /// Objects are read through the current schema: another version's objects converted,
    /// and every object pruned and defaulted as it is served (upstream's decoding from
    /// storage), so a default added to the CRD shows on objects stored before it.
    fn converts(&self) -> bool {
        true
    }

    fn converts_remotely(&self) -> bool {
        self.webhook.is_some()
    }

    fn to_storage(&self, obj: Value) -> Value {
        match self.try_to_storage(obj.clone()) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e.message, "custom resource conversion failed");
                obj
            }
        }
    }

    fn try_to_storage(&self, obj: Value) -> Result<Value, ApiError> {
        self.convert(obj, &self.storage_api_version)
    }

    fn served_from_storage(&self, obj: Value, api_version: &str) -> Value {
        match self.try_served_from_storage(obj.clone(), api_version) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e.message, "custom resource conversion failed");
                obj
            }
        }
    }

    fn try_served_from_storage(&self, obj: Value, api_version: &str) -> Result<Value, ApiError> {
        let mut obj = self.convert(obj, api_version)?;
        self.prune(&mut obj);
        if let Some(s) = &self.schema {
            schema::default(s, &mut obj);
        }
        Ok(obj)
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn generation_changed(&self, obj: &Value, old: &Value) -> bool {
        // Upstream: anything but metadata (and status, when it has its own subresource).
        let strip = |v: &Value| {
            let mut v = v.clone();
            if let Some(o) = v.as_object_mut() {
                o.remove("metadata");
                if self.status {
                    o.remove("status");
                }
            }
            v
        };
        strip(obj) != strip(old)
    }

    fn status_subresource(&self) -> bool {
        self.status
    }

    fn default(&self, obj: &mut Value) {
        if let Some(s) = &self.schema {
            schema::default(s, obj);
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        match &self.schema {
            Some(s) => schema::validate(s, obj),
            None => Vec::new(),
        }
    }

    fn scale(&self, obj: &Value) -> (i64, i64, String) {
        self.scale_of(obj).unwrap_or_default()
    }

    fn set_scale(&self, obj: &mut Value, replicas: i64) {
        self.set_replicas(obj, replicas);
    }

    fn validate_update(&self, obj: &Value, old: &Value) -> Vec<FieldError> {
        match &self.schema {
            Some(s) => schema::validate_transitions(s, obj, old),
            None => Vec::new(),
        }
    }

    fn fields(&self, obj: &Value, fields: &mut BTreeMap<String, String>) {
        for (name, path) in &self.selectable {
            let v = match path.first(obj) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            fields.insert(name.clone(), v);
        }
    }

    fn columns(&self) -> Vec<Column> {
        let mut c = vec![NAME];
        c.extend(self.columns.iter().map(|p| Column { ..p.column }));
        c
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let mut cells = vec![name_cell(obj)];
        for c in &self.columns {
            let v = c.path.first(obj);
            cells.push(match (c.column.kind, v) {
                (_, None | Some(Value::Null)) => Value::Null,
                ("string", Some(Value::String(s))) => json!(s),
                ("string", Some(other)) => json!(other.to_string()),
                ("integer", Some(n)) if n.is_number() => json!(n.as_f64().map(|f| f as i64)),
                ("number", Some(n)) if n.is_number() => json!(n.as_f64()),
                ("boolean", Some(Value::Bool(b))) => json!(b),
                ("date", Some(Value::String(s))) => {
                    if meta::age_seconds(s).is_some() {
                        json!(human_age(Some(s)))
                    } else {
                        json!("<invalid>")
                    }
                }
                _ => Value::Null,
            });
        }
        cells
    }
}

/// The CustomResourceDefinition kind's own strategy.
pub(crate) struct CustomResourceDefinitions;

#[async_trait]
impl Strategy for CustomResourceDefinitions {
    fn tracks_generation(&self) -> bool {
        true
    }

    fn stamps_conditions(&self) -> bool {
        false
    }

    fn status_subresource(&self) -> bool {
        true
    }

    fn prepare_for_create(&self, _user: &UserInfo, obj: &mut Value) {
        drop_status(obj);
        // Upstream's PrepareForCreate: the storage version is the first stored.
        let stored: Vec<String> = storage_version(obj).into_iter().collect();
        obj["status"] = json!({"storedVersions": stored, "conditions": [],
            "acceptedNames": {"plural": "", "kind": ""}});
    }

    fn prepare_for_update(&self, obj: &mut Value, old: &Value) -> Result<(), ApiError> {
        keep_status(obj, old);
        // A new storage version joins the stored ones.
        if let Some(v) = storage_version(obj) {
            let stored = obj["status"]["storedVersions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if !stored.iter().any(|s| s == &json!(v)) {
                let mut stored = stored;
                stored.push(json!(v));
                obj["status"]["storedVersions"] = json!(stored);
            }
        }
        Ok(())
    }

    fn default(&self, obj: &mut Value) {
        let spec = &mut obj["spec"];
        if !spec.is_object() {
            return;
        }
        let kind = spec["names"]["kind"].as_str().unwrap_or("").to_owned();
        if spec["names"]["singular"].as_str().is_none_or(str::is_empty) && !kind.is_empty() {
            spec["names"]["singular"] = json!(kind.to_lowercase());
        }
        if spec["names"]["listKind"].as_str().is_none_or(str::is_empty) && !kind.is_empty() {
            spec["names"]["listKind"] = json!(format!("{kind}List"));
        }
        if spec["conversion"]["strategy"].as_str().is_none_or(str::is_empty) {
            spec["conversion"]["strategy"] = json!("None");
        }
        if spec["conversion"]["strategy"] == "Webhook"
            && spec["conversion"]["webhook"]["clientConfig"]["service"].is_object()
            && spec["conversion"]["webhook"]["clientConfig"]["service"]["port"].is_null()
        {
            spec["conversion"]["webhook"]["clientConfig"]["service"]["port"] = json!(443);
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        validate_crd(obj)
    }

    fn validate_update(&self, obj: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        // Versions once stored stay listed until a client removes them from the status.
        for v in obj["status"]["storedVersions"].as_array().into_iter().flatten() {
            let listed = obj["spec"]["versions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|s| s["name"] == *v);
            if !listed && old["status"]["storedVersions"] == obj["status"]["storedVersions"] {
                errs.push(FieldError::invalid(
                    "status.storedVersions",
                    v.as_str().unwrap_or(""),
                    "must appear in spec.versions",
                ));
            }
        }
        errs
    }

    fn holds_deletion(&self, obj: &Value) -> bool {
        // Upstream's CRD delete: the first one marks it Terminating with the cleanup
        // finalizer; the finalizer controller deletes the instances, then releases it.
        obj["metadata"]["deletionTimestamp"].is_null()
    }

    fn prepare_for_delete(&self, obj: &mut Value) {
        let mut finalizers = meta::finalizers(obj);
        if !finalizers.iter().any(|f| f == CLEANUP_FINALIZER) {
            finalizers.push(CLEANUP_FINALIZER.to_owned());
        }
        meta::meta_mut(obj).insert("finalizers".into(), json!(finalizers));
        set_condition(
            obj,
            "Terminating",
            "True",
            "InstanceDeletionPending",
            "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
        );
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            super::strategy::col(
                "Created At",
                "date",
                "CreationTimestamp is a timestamp representing the server time when this object was created.",
            ),
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        vec![
            name_cell(obj),
            json!(str_field(obj, &["metadata", "creationTimestamp"]).unwrap_or("")),
        ]
    }
}

/// Set condition `type` of a CRD's status (its transition time moves only when its status
/// does).
pub(crate) fn set_condition(crd: &mut Value, kind: &str, status: &str, reason: &str, message: &str) {
    let mut conditions = crd["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let now = meta::now_rfc3339();
    match conditions.iter_mut().find(|c| c["type"] == kind) {
        Some(c) => {
            if c["status"] != status {
                c["lastTransitionTime"] = json!(now);
            }
            c["status"] = json!(status);
            c["reason"] = json!(reason);
            c["message"] = json!(message);
        }
        None => conditions.push(json!({"type": kind, "status": status, "lastTransitionTime": now,
            "reason": reason, "message": message})),
    }
    crd["status"]["conditions"] = json!(conditions);
}

/// The condition `kind` of a CRD is True.
pub(crate) fn condition_true(crd: &Value, kind: &str) -> bool {
    crd["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] == "True")
}

/// Upstream's `ValidateCustomResourceDefinition`, for what clients meet: names, group,
/// scope, versions and their schemas.
fn validate_crd(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec = &obj["spec"];
    let group = spec["group"].as_str().unwrap_or("");
    let plural = spec["names"]["plural"].as_str().unwrap_or("");
    let name = meta::name(obj);
    if !name.is_empty() && name != format!("{plural}.{group}") {
        errs.push(FieldError::invalid(
            "metadata.name",
            name,
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    if group.is_empty() {
        errs.push(FieldError::required("spec.group", ""));
    } else {
        for e in dns1123_subdomain(group) {
            errs.push(FieldError::invalid("spec.group", group, e));
        }
        if group.split('.').count() < 2 {
            errs.push(FieldError::invalid(
                "spec.group",
                group,
                "should be a domain with at least one dot",
            ));
        }
    }
    match spec["scope"].as_str().unwrap_or("") {
        "Cluster" | "Namespaced" => {}
        "" => errs.push(FieldError::required("spec.scope", "")),
        other => errs.push(FieldError::not_supported(
            "spec.scope",
            other,
            &["Cluster", "Namespaced"],
        )),
    }
    let names = &spec["names"];
    for (field, lower) in [
        ("plural", true),
        ("singular", true),
        ("kind", false),
        ("listKind", false),
    ] {
        let v = names[field].as_str().unwrap_or("");
        let path = format!("spec.names.{field}");
        if v.is_empty() {
            if field != "singular" {
                errs.push(FieldError::required(path, ""));
            }
            continue;
        }
        if lower {
            for e in dns1035_label(v) {
                errs.push(FieldError::invalid(&path, v, e));
            }
        } else {
            // Upstream: the kind, lowercased, must be a DNS-1035 label.
            let problems = dns1035_label(&v.to_lowercase());
            if !problems.is_empty() {
                errs.push(FieldError::invalid(
                    &path,
                    v,
                    format!(
                        "may have mixed case, but should otherwise match: {}",
                        problems.join(",")
                    ),
                ));
            }
        }
    }
    if !names["kind"].as_str().unwrap_or("").is_empty() && names["kind"] == names["listKind"] {
        errs.push(FieldError::invalid(
            "spec.names.listKind",
            names["listKind"].as_str().unwrap_or(""),
            "kind and listKind may not be the same",
        ));
    }
    for (i, s) in names["shortNames"].as_array().into_iter().flatten().enumerate() {
        let s = s.as_str().unwrap_or("");
        for e in dns1035_label(s) {
            errs.push(FieldError::invalid(format!("spec.names.shortNames[{i}]"), s, e));
        }
    }
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    if versions.is_empty() {
        errs.push(FieldError::invalid(
            "spec.versions",
            "null",
            "must have exactly one version marked as storage version",
        ));
    } else {
        let storage = versions
            .iter()
            .filter(|v| v["storage"].as_bool().unwrap_or(false))
            .count();
        if storage != 1 {
            errs.push(FieldError {
                reason: "FieldValueInvalid",
                field: "spec.versions".into(),
                message: "Invalid value: []apiextensions.CustomResourceDefinitionVersion{...}: must have exactly one version marked as storage version".to_owned(),
            });
        }
        if !versions.iter().any(|v| v["served"].as_bool().unwrap_or(false)) {
            errs.push(FieldError::invalid(
                "spec.versions",
                "",
                "must have at least one version marked as served",
            ));
        }
        let mut seen = HashSet::new();
        for (i, v) in versions.iter().enumerate() {
            let path = format!("spec.versions[{i}]");
            let name = v["name"].as_str().unwrap_or("");
            if name.is_empty() {
                errs.push(FieldError::required(format!("{path}.name"), ""));
            } else {
                for e in dns1035_label(name) {
                    errs.push(FieldError::invalid(format!("{path}.name"), name, e));
                }
                if !seen.insert(name) {
                    errs.push(FieldError::invalid(
                        format!("{path}.name"),
                        name,
                        "must be unique",
                    ));
                }
            }
            let schema = &v["schema"]["openAPIV3Schema"];
            if !schema.is_object() {
                errs.push(FieldError::required(
                    format!("{path}.schema.openAPIV3Schema"),
                    "schemas are required",
                ));
            } else if schema["type"] != "object" {
                if schema["type"].as_str().is_none_or(str::is_empty) {
                    errs.push(FieldError::required(
                        format!("{path}.schema.openAPIV3Schema.type"),
                        "must not be empty at the root",
                    ));
                } else {
                    errs.push(FieldError::invalid(
                        format!("{path}.schema.openAPIV3Schema.type"),
                        schema["type"].as_str().unwrap_or(""),
                        "must be object at the root",
                    ));
                }
            }
            if schema.is_object() {
                let at = format!("{path}.schema.openAPIV3Schema");
                errs.extend(schema::check_structural(schema, &at));
                errs.extend(schema::check_rules(schema, &at));
            }
            let scale = &v["subresources"]["scale"];
            if scale.is_object() {
                for (field, required) in [("specReplicasPath", true), ("statusReplicasPath", true)] {
                    let p = scale[field].as_str().unwrap_or("");
                    if p.is_empty() && required {
                        errs.push(FieldError::required(
                            format!("{path}.subresources.scale.{field}"),
                            "",
                        ));
                    } else if !p.starts_with(".spec.") && field == "specReplicasPath" {
                        errs.push(FieldError::invalid(
                            format!("{path}.subresources.scale.{field}"),
                            p,
                            "should be a json path under .spec",
                        ));
                    } else if !p.starts_with(".status.") && field == "statusReplicasPath" {
                        errs.push(FieldError::invalid(
                            format!("{path}.subresources.scale.{field}"),
                            p,
                            "should be a json path under .status",
                        ));
                    }
                }
            }
            for (j, c) in v["additionalPrinterColumns"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                let cpath = format!("{path}.additionalPrinterColumns[{j}]");
                if c["name"].as_str().is_none_or(str::is_empty) {
                    errs.push(FieldError::required(format!("{cpath}.name"), ""));
                }
                match c["type"].as_str().unwrap_or("") {
                    "integer" | "number" | "string" | "boolean" | "date" => {}
                    "" => errs.push(FieldError::required(format!("{cpath}.type"), "")),
                    other => errs.push(FieldError::not_supported(
                        format!("{cpath}.type"),
                        other,
                        &["integer", "number", "string", "boolean", "date"],
                    )),
                }
                match c["jsonPath"].as_str() {
                    None | Some("") => errs.push(FieldError::required(format!("{cpath}.JSONPath"), "")),
                    Some(p) if jsonpath::Path::parse(p).is_none() => errs.push(FieldError::invalid(
                        format!("{cpath}.JSONPath"),
                        p,
                        "must be a simple json path starting with .",
                    )),
                    _ => {}
                }
            }
        }
    }
    match spec["conversion"]["strategy"].as_str().unwrap_or("None") {
        "None" => {}
        "Webhook" => {
            let cc = &spec["conversion"]["webhook"]["clientConfig"];
            if !cc.is_object() {
                errs.push(FieldError::required(
                    "spec.conversion.webhook",
                    "required when strategy is set to Webhook",
                ));
            } else if cc["url"].is_null() == cc["service"].is_null() {
                errs.push(FieldError::required(
                    "spec.conversion.webhook.clientConfig",
                    "exactly one of url or service is required",
                ));
            }
        }
        other => errs.push(FieldError::not_supported(
            "spec.conversion.strategy",
            other,
            &["None", "Webhook"],
        )),
    }
    if spec["preserveUnknownFields"] == true {
        errs.push(FieldError::invalid_raw(
            "spec.preserveUnknownFields",
            "true",
            "cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema instead",
        ));
    }
    if let Some(stored) = storage_version(obj) {
        let listed = obj["status"]["storedVersions"]
            .as_array()
            .is_none_or(|s| s.is_empty() || s.iter().any(|v| v == &json!(stored)));
        if !listed {
            errs.push(FieldError::invalid(
                "status.storedVersions",
                &stored,
                "must have the storage version",
            ));
        }
    }
    errs
}
