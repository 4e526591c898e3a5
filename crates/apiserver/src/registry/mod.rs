//! The generic registry (upstream's `genericregistry.Store`): create, get, list, watch,
//! update, patch, delete and deletecollection, written once for every resource in the
//! catalogue. Per-resource behaviour comes from each resource's [`strategy`], which its
//! [`Resource`] carries; nothing here tests which resource it serves.
//!
//! Objects are stored as JSON under `/registry/<resource>/<namespace>/<name>` (or
//! `/registry/<resource>/<name>` for cluster-scoped ones); `metadata.resourceVersion` is not
//! stored but set from the key's mod revision on every read.

pub(crate) mod admission_policies;
pub(crate) mod allocator;
pub(crate) mod apiservices;
mod apply;
mod apps;
pub(crate) mod autoscaling;
mod batch;
pub(crate) mod catalogue;
mod certificates;
pub(crate) mod componentstatuses;
mod configmaps;
pub(crate) mod convert;
pub(crate) mod custom;
pub(crate) mod disruption;
mod endpoints;
mod events;
pub(crate) mod flowcontrol;
pub(crate) mod fuzzing;
pub(crate) mod ingresses;
#[cfg(test)]
mod keyed_lists_tests;
mod limitranges;
pub(crate) mod meta;
mod namespaces;
mod networkpolicies;
mod nodes;
pub(crate) mod patch;
pub(crate) mod pods;
mod priorityclasses;
mod quantities;
mod rbac;
pub(crate) mod resource_metrics;
mod resourcequotas;
pub(crate) mod reviews;
mod runtimeclasses;
mod secrets;
pub(crate) mod service_cidrs;
mod serviceaccounts;
mod services;
mod storage;
pub(crate) mod storage_api;
pub(crate) mod strategy;
#[cfg(test)]
mod strategy_tests;
pub(crate) mod subresource;
pub(crate) mod system;
pub(crate) mod table;
pub(crate) mod token_request;
mod webhook_configuration;
pub(crate) mod workloads;

use std::collections::BTreeMap;

use bytes::Bytes;
use r8s_api::selector::{parse_field_selector, parse_label_selector, Selector};
use r8s_api::validation::FieldError;
use r8s_api::ResourceDef;
use r8s_store::{KeyValue, RangeRequest, StoreError};
use serde_json::{json, Value};

pub(crate) use catalogue::Resource;

use crate::admission::{Attributes, Operation};
use crate::context::Ctx;
use crate::status::ApiError;

/// Parsed query parameters.
#[derive(Clone)]
pub(crate) struct Query(BTreeMap<String, String>, Vec<String>);

impl Query {
    pub fn parse(q: Option<&str>) -> Self {
        // A repeated parameter counts by its first value, as upstream decodes it.
        let mut params = BTreeMap::new();
        for (k, v) in form_urlencoded::parse(q.unwrap_or("").as_bytes()) {
            params.entry(k.into_owned()).or_insert_with(|| v.into_owned());
        }
        Self(params, Vec::new())
    }

    /// The query with the fields the request body names twice (a JSON object's repeated key),
    /// which `fieldValidation` judges with the unknown ones.
    pub fn with_duplicate_fields(mut self, fields: Vec<String>) -> Self {
        self.1 = fields;
        self
    }

    pub fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str).filter(|v| !v.is_empty())
    }

    /// A boolean parameter: absent is false, else as upstream decodes it
    /// ([`crate::request_info::query_bool`]: `watch=True` is true).
    pub fn flag(&self, k: &str) -> bool {
        self.0.get(k).is_some_and(|v| crate::request_info::query_bool(v))
    }

    pub fn dry_run(&self) -> bool {
        self.0.get("dryRun").is_some_and(|v| v == "All")
    }

    /// Check that the integer parameters among `names` are integers, as upstream's parameter
    /// decoding does (`strconv.ParseInt`): a 400 with Go's words otherwise.
    pub fn check_integers(&self, names: &[&str]) -> Result<(), ApiError> {
        for n in names {
            if let Some(v) = self.0.get(*n).filter(|v| !v.is_empty()) {
                if v.parse::<i64>().is_err() {
                    let why = if v
                        .trim_start_matches(['-', '+'])
                        .chars()
                        .all(|c| c.is_ascii_digit())
                    {
                        "value out of range"
                    } else {
                        "invalid syntax"
                    };
                    return Err(ApiError::bad_request(format!(
                        "strconv.ParseInt: parsing {}: {why}",
                        serde_json::Value::from(v.as_str())
                    )));
                }
            }
        }
        Ok(())
    }
}

pub(crate) fn key(def: &ResourceDef, namespace: &str, name: &str) -> String {
    if def.namespaced {
        format!("/registry/{}/{namespace}/{name}", storage_resource(def))
    } else {
        format!("/registry/{}/{name}", storage_resource(def))
    }
}

fn storage_resource(def: &ResourceDef) -> String {
    // Upstream's etcd layout: the resource name alone (events.k8s.io Events share core Events'
    // storage, see `convert`); a custom resource's under its group.
    if def.custom {
        return format!("{}/{}", def.group, def.plural);
    }
    def.plural.to_owned()
}

/// The key prefix for a list or watch in `namespace` ("" = all namespaces).
pub(crate) fn prefix(def: &ResourceDef, namespace: &str) -> String {
    if def.namespaced && !namespace.is_empty() {
        format!("/registry/{}/{namespace}/", storage_resource(def))
    } else {
        format!("/registry/{}/", storage_resource(def))
    }
}

/// Decode a stored object as `def` and give it its resource version.
pub(crate) fn decode(def: &Resource, kv: &KeyValue) -> Result<Value, ApiError> {
    decode_with(def, &*def.strategy, kv)
}

/// [`decode`] with `def`'s strategy looked up already (once per list, not per object).
fn decode_with(def: &Resource, strategy: &dyn strategy::Strategy, kv: &KeyValue) -> Result<Value, ApiError> {
    let obj: Value = serde_json::from_slice(&kv.value)
        .map_err(|e| ApiError::internal(format!("stored object {} is unreadable: {e}", kv.key)))?;
    let mut obj = if strategy.converts() {
        strategy.try_served_from_storage(obj, &def.api_version())?
    } else {
        obj
    };
    meta::set_resource_version(&mut obj, kv.mod_revision);
    Ok(obj)
}

/// The stored form: apiVersion, kind and metadata first (so [`with_resource_version`] can find
/// the metadata without parsing), without resourceVersion.
pub(crate) fn encode(def: &Resource, obj: &Value) -> Bytes {
    if convert::converts(def) {
        return encode_in_order(&convert::to_storage(def, obj.clone()));
    }
    encode_in_order(obj)
}

/// [`encode`] for a request's write: a conversion that fails refuses the write.
pub(crate) fn try_encode(def: &Resource, obj: &Value) -> Result<Bytes, ApiError> {
    let s = &def.strategy;
    if s.converts() {
        return Ok(encode_in_order(&s.try_to_storage(obj.clone())?));
    }
    Ok(encode_in_order(obj))
}

/// Serialise in the stored order straight from the object (no copy of it: objects are large
/// and this runs on every write).
fn encode_in_order(obj: &Value) -> Bytes {
    use serde::ser::{SerializeMap, Serializer};
    let Some(o) = obj.as_object() else {
        return Bytes::from(serde_json::to_vec(obj).expect("JSON values serialize"));
    };
    /// Metadata without the fields that are never stored.
    struct StoredMeta<'a>(&'a Value);
    impl serde::Serialize for StoredMeta<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let Some(m) = self.0.as_object() else {
                return self.0.serialize(s);
            };
            let mut map = s.serialize_map(None)?;
            for (k, v) in m {
                if k != "resourceVersion" && k != "selfLink" {
                    map.serialize_entry(k, v)?;
                }
            }
            map.end()
        }
    }
    let mut out = Vec::with_capacity(1024);
    let mut ser = serde_json::Serializer::new(&mut out);
    let mut map = ser.serialize_map(None).expect("writing to a Vec");
    const FIRST: [&str; 3] = ["apiVersion", "kind", "metadata"];
    for k in FIRST {
        if let Some(v) = o.get(k) {
            if k == "metadata" {
                map.serialize_entry(k, &StoredMeta(v))
                    .expect("JSON values serialize");
            } else {
                map.serialize_entry(k, v).expect("JSON values serialize");
            }
        }
    }
    for (k, v) in o {
        if !FIRST.contains(&k.as_str()) {
            map.serialize_entry(k, v).expect("JSON values serialize");
        }
    }
    map.end().expect("JSON values serialize");
    Bytes::from(out)
}

/// A stored object's JSON with its resourceVersion, without parsing it: the version is spliced
/// in at the start of the top-level metadata, which [`encode`] puts before any other object.
/// `None` if the bytes are not in that shape.
pub(crate) fn with_resource_version(stored: &[u8], rv: i64) -> Option<Vec<u8>> {
    const META: &[u8] = b"\"metadata\":{";
    let at = stored.windows(META.len()).position(|w| w == META)? + META.len();
    // Only apiVersion and kind (plain strings) may come before the top-level metadata.
    if stored.first() != Some(&b'{') || stored[1..at - 1].contains(&b'{') {
        return None;
    }
    let mut out = Vec::with_capacity(stored.len() + 32);
    out.extend_from_slice(&stored[..at]);
    out.extend_from_slice(format!("\"resourceVersion\":\"{rv}\"").as_bytes());
    if stored.get(at) != Some(&b'}') {
        out.push(b',');
    }
    out.extend_from_slice(&stored[at..]);
    Some(out)
}

/// A stored object as JSON bytes of `def` with its resourceVersion.
fn raw_item(def: &Resource, kv: &KeyValue) -> Result<Vec<u8>, ApiError> {
    raw_item_as(def, kv, convert::converts(def))
}

/// [`raw_item`] knowing already whether `def` is stored in another form (asked once per
/// list: the strategy lookup is not free).
fn raw_item_as(def: &Resource, kv: &KeyValue, converts: bool) -> Result<Vec<u8>, ApiError> {
    match with_resource_version(&kv.value, kv.mod_revision).filter(|_| !converts) {
        Some(b) => Ok(b),
        None => Ok(serde_json::to_vec(&decode(def, kv)?).expect("JSON serializes")),
    }
}

pub(crate) fn not_found(def: &ResourceDef, name: &str) -> ApiError {
    ApiError::new(
        404,
        "NotFound",
        format!("{} \"{name}\" not found", def.group_resource()),
    )
    .with_details(json!({
        "name": name,
        "group": def.group,
        "kind": def.plural,
    }))
}

pub(crate) fn already_exists(def: &ResourceDef, name: &str) -> ApiError {
    ApiError::new(
        409,
        "AlreadyExists",
        format!("{} \"{name}\" already exists", def.group_resource()),
    )
    .with_details(json!({"name": name, "group": def.group, "kind": def.plural}))
}

pub(crate) fn conflict(def: &ResourceDef, name: &str) -> ApiError {
    ApiError::new(
        409,
        "Conflict",
        format!(
            "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
            def.group_resource()
        ),
    )
    .with_details(json!({"name": name, "group": def.group, "kind": def.plural}))
}

/// 422 with every field error as a cause, worded as upstream.
pub(crate) fn invalid(def: &ResourceDef, name: &str, errs: &[FieldError]) -> ApiError {
    let list: Vec<String> = errs.iter().map(ToString::to_string).collect();
    let summary = if list.len() == 1 {
        list[0].clone()
    } else {
        format!("[{}]", list.join(", "))
    };
    // Upstream's `NewInvalid` names the group kind: `Deployment.apps "web" is invalid`.
    let kind = if def.group.is_empty() {
        def.kind.to_owned()
    } else {
        format!("{}.{}", def.kind, def.group)
    };
    ApiError::new(422, "Invalid", format!("{kind} \"{name}\" is invalid: {summary}")).with_details(json!({
        "name": name,
        "group": def.group,
        "kind": def.kind,
        "causes": errs.iter().map(|e| json!({
            "reason": e.reason,
            "message": e.message,
            "field": e.field,
        })).collect::<Vec<_>>(),
    }))
}

pub(crate) fn store_error(def: &ResourceDef, name: &str, e: StoreError) -> ApiError {
    match e {
        StoreError::NotFound { .. } => not_found(def, name),
        StoreError::AlreadyExists { .. } => already_exists(def, name),
        StoreError::Conflict { .. } => conflict(def, name),
        StoreError::Compacted { requested, .. } => {
            ApiError::new(410, "Expired", format!("too old resource version: {requested}"))
        }
        // The datastore is down or has no quorum: try again in a moment (clients that honour
        // Retry-After, as client-go does, wait and retry by themselves).
        StoreError::Unavailable(m) => {
            ApiError::service_unavailable(m).with_details(serde_json::json!({"retryAfterSeconds": 1}))
        }
        other => ApiError::internal(other.to_string()),
    }
}

pub(crate) async fn read(ctx: &Ctx, def: &Resource, ns: &str, name: &str) -> Result<Value, ApiError> {
    let resp = ctx
        .shared
        .store
        .get(&key(def, ns, name), 0)
        .await
        .map_err(|e| store_error(def, name, e))?;
    let kv = resp.kv.ok_or_else(|| not_found(def, name))?;
    decode(def, &kv)
}

/// One object's stored JSON with its resourceVersion, not decoded (nothing inside it needs
/// looking at).
pub(crate) async fn get_stored(ctx: &Ctx, def: &Resource, ns: &str, name: &str) -> Result<Vec<u8>, ApiError> {
    let kv = ctx
        .shared
        .store
        .get(&key(def, ns, name), 0)
        .await
        .map_err(|e| store_error(def, name, e))?
        .kv
        .ok_or_else(|| not_found(def, name))?;
    raw_item(def, &kv)
}

/// One object as a client may get it: an uninitialized one is invisible unless the client
/// asks for it (`includeUninitialized=true`), as upstream's Initializers stage had it.
pub(crate) async fn get(
    ctx: &Ctx,
    def: &Resource,
    ns: &str,
    name: &str,
    query: &Query,
) -> Result<Value, ApiError> {
    let obj = read(ctx, def, ns, name).await?;
    if uninitialized(&obj) && !query.flag("includeUninitialized") {
        return Err(not_found(def, name));
    }
    Ok(obj)
}

/// A get at resourceVersion "0" (any state will do) from the watch cache, as upstream's
/// cacher serves it: an object the cache does not hold is not found. `None`: no "0" asked, or no
/// cache for this resource; the datastore answers.
pub(crate) async fn get_cached(
    ctx: &Ctx,
    def: &'static Resource,
    ns: &str,
    name: &str,
    query: &Query,
) -> Result<Option<std::sync::Arc<crate::watch_cache::CachedObject>>, ApiError> {
    if query.get("resourceVersion") != Some("0") {
        return Ok(None);
    }
    let Some(cache) = ctx.shared.watch_cache.get(def).await else {
        return Ok(None);
    };
    match cache.object(&key(def, ns, name)) {
        Some(o) if !o.uninitialized || query.flag("includeUninitialized") => Ok(Some(o)),
        _ => Err(not_found(def, name)),
    }
}

/// A page of a list: its items and the list's metadata (resourceVersion, and continue and
/// remainingItemCount when paged).
pub(crate) struct Page<T> {
    pub items: Vec<T>,
    pub meta: Value,
}

fn page<T>(items: Vec<T>, revision: i64, token: Option<String>, remaining: Option<i64>) -> Page<T> {
    let mut meta = json!({"resourceVersion": revision.to_string()});
    if let Some(t) = token {
        meta["continue"] = json!(t);
    }
    if let Some(r) = remaining {
        meta["remainingItemCount"] = json!(r);
    }
    Page { items, meta }
}

/// Label and field selectors of a list or watch.
#[derive(Default)]
pub(crate) struct Filter {
    labels: Selector,
    fields: Selector,
    /// With the Initializers gate on and no `includeUninitialized=true`: objects with pending
    /// initializers are not shown.
    hide_uninitialized: bool,
}

/// Whether an object still has initializers pending (only with the Initializers gate on).
pub(crate) fn uninitialized(obj: &Value) -> bool {
    r8s_api::features::initializers() && !obj["metadata"]["initializers"].is_null()
}

impl Filter {
    pub fn from_query(def: &Resource, query: &Query) -> Result<Self, ApiError> {
        let labels =
            parse_label_selector(query.get("labelSelector").unwrap_or("")).map_err(ApiError::bad_request)?;
        let fields =
            parse_field_selector(query.get("fieldSelector").unwrap_or("")).map_err(ApiError::bad_request)?;
        let known = strategy::fields(def, &json!({}));
        for r in &fields.0 {
            let (r8s_api::selector::Requirement::Equals(k, _)
            | r8s_api::selector::Requirement::NotEquals(k, _)) = r
            else {
                continue;
            };
            if !known.contains_key(k) {
                return Err(ApiError::bad_request(format!(
                    "\"{k}\" is not a known field selector: only \"{}\"",
                    known.keys().cloned().collect::<Vec<_>>().join("\", \"")
                )));
            }
        }
        let hide_uninitialized = r8s_api::features::initializers() && !query.flag("includeUninitialized");
        Ok(Self {
            labels,
            fields,
            hide_uninitialized,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty() && !self.hide_uninitialized
    }

    /// The value the field selector requires `field` to equal (`spec.nodeName=node-1`), if it
    /// does: only objects with it (before or after a change) can concern this filter.
    pub fn field_equals(&self, field: &str) -> Option<&str> {
        self.fields.0.iter().find_map(|r| match r {
            r8s_api::selector::Requirement::Equals(k, v) if k == field => Some(v.as_str()),
            _ => None,
        })
    }

    /// Match an object of the watch cache by its labels and fields.
    pub fn matches_cached(&self, obj: &crate::watch_cache::CachedObject) -> bool {
        (self.labels.is_empty() || self.labels.matches(&obj.labels))
            && (self.fields.is_empty() || self.fields.matches(&obj.fields))
            && !(self.hide_uninitialized && obj.uninitialized)
    }

    pub fn matches(&self, def: &Resource, obj: &Value) -> bool {
        (self.labels.is_empty() || self.labels.matches(&meta::labels(obj)))
            && (self.fields.is_empty() || self.fields.matches(&strategy::fields(def, obj)))
            && !(self.hide_uninitialized && uninitialized(obj))
    }
}

/// A 410 for a continue token past compaction (upstream's inconsistentContinue).
const CONTINUE_EXPIRED: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

/// The opaque `continue` token: the revision of the first page and the last key returned.
fn encode_continue(revision: i64, last_key: &str) -> String {
    use base64::Engine;
    let token = json!({"v": "meta.k8s.io/v1", "rv": revision, "start": last_key});
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(token.to_string())
}

fn decode_continue(token: &str) -> Result<(i64, String), ApiError> {
    use base64::Engine;
    let bad = || ApiError::bad_request("continue key is not valid: illegal base64 data or token format");
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    Ok((
        v["rv"].as_i64().ok_or_else(bad)?,
        v["start"].as_str().ok_or_else(bad)?.to_owned(),
    ))
}

/// The kind of a list of `def`.
pub(crate) fn list_kind(def: &ResourceDef) -> String {
    format!("{}List", def.kind)
}

/// Read a page of matching objects. Returns the objects, the revision read at, and the
/// continue token if more remain.
pub(crate) async fn list_objects(
    ctx: &Ctx,
    def: &Resource,
    ns: &str,
    query: &Query,
    filter: &Filter,
) -> Result<(Vec<Value>, i64, Option<String>, Option<i64>), ApiError> {
    let counted = filter.is_empty();
    let strategy = def.strategy.clone();
    list_page(ctx, def, ns, query, counted, |kv| {
        let obj = decode_with(def, &*strategy, kv)?;
        Ok(filter.matches(def, &obj).then_some(obj))
    })
    .await
}

/// Read a page of items: `take` turns each stored object into an item or skips it. `counted`:
/// every stored object is an item, so the remaining count is exact.
async fn list_page<T>(
    ctx: &Ctx,
    def: &Resource,
    ns: &str,
    query: &Query,
    counted: bool,
    take: impl Fn(&KeyValue) -> Result<Option<T>, ApiError>,
) -> Result<(Vec<T>, i64, Option<String>, Option<i64>), ApiError> {
    let limit: usize = query.get("limit").and_then(|l| l.parse().ok()).unwrap_or(0);
    let (mut revision, mut start_after) = match query.get("continue") {
        // rv -1: the inconsistent continuation a 410 handed out, at the latest revision.
        Some(token) => {
            let (rv, start) = decode_continue(token)?;
            (rv.max(0), Some(start))
        }
        None => (0, None),
    };
    let continued_from = start_after.clone();
    if revision == 0 {
        if let (Some(rv), Some("Exact")) = (query.get("resourceVersion"), query.get("resourceVersionMatch")) {
            revision = rv
                .parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv}")))?;
        }
    }
    let prefix = prefix(def, ns);
    let mut items = Vec::new();
    let mut remaining = None;
    loop {
        let page = ctx
            .shared
            .store
            .range(RangeRequest {
                prefix: prefix.clone(),
                start_after: start_after.clone(),
                limit: if limit == 0 { 0 } else { limit - items.len() },
                revision,
                count: limit > 0 && counted,
            })
            .await
            .map_err(|e| match e {
                // Upstream's handleCompactedErrorForPaging: the Status carries a token that
                // goes on from the same key at the latest revision (rv -1).
                StoreError::Compacted { .. } if continued_from.is_some() => {
                    ApiError::new(410, "Expired", CONTINUE_EXPIRED)
                        .with_continue(encode_continue(-1, continued_from.as_deref().unwrap_or("")))
                }
                StoreError::Compacted { .. } => ApiError::new(
                    410,
                    "Expired",
                    "The resourceVersion for the provided list is too old.",
                ),
                other => store_error(def, "", other),
            })?;
        revision = page.revision;
        for kv in &page.kvs {
            if let Some(item) = take(kv)? {
                items.push(item);
            }
        }
        if let Some(last) = page.kvs.last() {
            start_after = Some(last.key.clone());
        }
        if let Some(c) = page.count {
            remaining = Some(c - page.kvs.len() as i64);
        }
        let full = limit > 0 && items.len() >= limit;
        if !page.more || full {
            let token = (page.more && limit > 0)
                .then(|| encode_continue(revision, start_after.as_deref().unwrap_or("")));
            return Ok((items, revision, token, remaining.filter(|r| *r > 0 && page.more)));
        }
    }
}

/// A list "not older than" a resourceVersion the datastore has not reached waits for it a
/// little, then fails as upstream does (504, "Too large resource version").
async fn wait_for_revision(ctx: &Ctx, query: &Query) -> Result<(), ApiError> {
    if query.get("resourceVersionMatch") == Some("Exact") || query.get("continue").is_some() {
        return Ok(());
    }
    let Some(wanted) = query
        .get("resourceVersion")
        .and_then(|rv| rv.parse::<i64>().ok())
        .filter(|rv| *rv > 0)
    else {
        return Ok(());
    };
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(3);
    loop {
        let current = ctx
            .shared
            .store
            .current_revision()
            .await
            .map_err(|e| ApiError::service_unavailable(e.to_string()))?;
        if current >= wanted {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(ApiError::new(
                504,
                "Timeout",
                format!("Too large resource version: {wanted}, current: {current}"),
            )
            .with_details(json!({
                "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                "retryAfterSeconds": 1,
            })));
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A list from the watch cache when it can be served from it: a list at any revision ("0",
/// what informers ask for), not older than one the cache has applied, or at the latest
/// revision (no resourceVersion: upstream's ConsistentListFromCache — the datastore's
/// current revision is read, and the cache answers once it has applied it, asking its
/// datastore watch for progress when needed); never paged lists. Items are JSON with their
/// resourceVersion. `None`: the datastore answers.
pub(crate) async fn list_cached(
    ctx: &Ctx,
    def: &'static Resource,
    ns: &str,
    query: &Query,
    filter: &Filter,
) -> Result<Option<Page<Bytes>>, ApiError> {
    if query.get("limit").is_some_and(|l| l != "0")
        || query.get("continue").is_some()
        || query.get("resourceVersionMatch") == Some("Exact")
    {
        return Ok(None);
    }
    let min_revision = match query.get("resourceVersion") {
        None | Some("") => None,
        Some("0") => Some(0),
        Some(rv) => Some(
            rv.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv}")))?,
        ),
    };
    let Some(cache) = ctx.shared.watch_cache.get(def).await else {
        return Ok(None);
    };
    let keep = |o: &crate::watch_cache::CachedObject| filter.matches_cached(o);
    let listed = match min_revision {
        Some(min) => cache.list(&prefix(def, ns), min, keep).await,
        None => {
            // A consistent read needs the datastore's word on its latest revision: without it
            // (no quorum) the list fails now rather than wait on the datastore a second time.
            let current = ctx
                .shared
                .store
                .current_revision()
                .await
                .map_err(|e| store_error(def, "", e))?;
            cache.list_consistent(&prefix(def, ns), current, keep).await
        }
    };
    let Some((items, revision)) = listed else {
        return Ok(None);
    };
    ctx.shared
        .metrics
        .cache_lists
        .get_or_create(&crate::metrics::CacheListLabels {
            resource_prefix: format!("/{}", def.plural),
            index: String::new(),
        })
        .inc();
    let items = items.iter().map(|o| o.json.clone()).collect();
    Ok(Some(page(items, revision, None, None)))
}

/// A page of every stored object of `def` in `ns` as stored JSON with its resourceVersion, not
/// decoded (for a list without selectors).
pub(crate) async fn list_stored(
    ctx: &Ctx,
    def: &Resource,
    ns: &str,
    query: &Query,
) -> Result<Page<Vec<u8>>, ApiError> {
    wait_for_revision(ctx, query).await?;
    let converts = convert::converts(def);
    let (items, revision, token, remaining) = list_page(ctx, def, ns, query, true, |kv| {
        raw_item_as(def, kv, converts).map(Some)
    })
    .await?;
    Ok(page(items, revision, token, remaining))
}

/// A page of the objects of `def` in `ns` that `filter` keeps, decoded.
pub(crate) async fn list(
    ctx: &Ctx,
    def: &Resource,
    ns: &str,
    query: &Query,
    filter: &Filter,
) -> Result<Page<Value>, ApiError> {
    wait_for_revision(ctx, query).await?;
    let (items, revision, token, remaining) = list_objects(ctx, def, ns, query, filter).await?;
    Ok(page(items, revision, token, remaining))
}

/// Decode a request body as the resource's kind.
pub(crate) fn decode_body(def: &ResourceDef, body: &[u8]) -> Result<Value, ApiError> {
    let obj: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!("error decoding the request body as {}: {e}", def.kind))
    })?;
    if !obj.is_object() {
        return Err(ApiError::bad_request(format!(
            "the request body must be a {} object",
            def.kind
        )));
    }
    Ok(obj)
}

/// The fields a JSON body names twice in one object (`spec.replicas`, `spec.containers[0].name`),
/// as upstream's strict decoding reports them; serde_json keeps the last silently.
pub(crate) fn duplicate_fields(body: &[u8]) -> Vec<String> {
    use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
    use std::cell::RefCell;

    struct Walk<'a> {
        path: String,
        found: &'a RefCell<Vec<String>>,
    }
    impl<'de> DeserializeSeed<'de> for Walk<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Walk<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(key) = map.next_key::<String>()? {
                let path = if self.path.is_empty() {
                    key.clone()
                } else {
                    format!("{}.{key}", self.path)
                };
                if !seen.insert(key) {
                    self.found.borrow_mut().push(path.clone());
                }
                map.next_value_seed(Walk {
                    path,
                    found: self.found,
                })?;
            }
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            let mut i = 0;
            while seq
                .next_element_seed(Walk {
                    path: format!("{}[{i}]", self.path),
                    found: self.found,
                })?
                .is_some()
            {
                i += 1;
            }
            Ok(())
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
    }
    let found = RefCell::new(Vec::new());
    let mut d = serde_json::Deserializer::from_slice(body);
    let walk = Walk {
        path: String::new(),
        found: &found,
    };
    if walk.deserialize(&mut d).is_err() {
        return Vec::new();
    }
    found.into_inner()
}

/// Check an object's type and namespace, then decode it as its type, per the request's
/// `fieldValidation`: `Strict` refuses unknown fields, `Warn` (the default) drops them with a
/// warning, `Ignore` drops them silently. Returns the object and the warnings for the response.
pub(crate) fn typed(
    def: &Resource,
    mut obj: Value,
    ns: &str,
    query: &Query,
) -> Result<(Value, Vec<String>), ApiError> {
    check_type_and_namespace(def, &mut obj, ns)?;
    let cannot = |why: String| {
        ApiError::bad_request(format!(
            "{} in version \"{}\" cannot be handled as a {}: {why}",
            def.kind, def.version, def.kind
        ))
    };
    // metadata.initializers is not in today's ObjectMeta: kept aside through decoding while the
    // Initializers gate is on (off, it is an unknown field, as upstream now has it).
    let initializers = if r8s_api::features::initializers() {
        obj["metadata"]
            .as_object_mut()
            .and_then(|m| m.remove("initializers"))
    } else {
        None
    };
    let mut decoded = match def.custom() {
        // A custom resource is pruned to its CRD's schema.
        Some(s) => {
            let unknown_fields = s.prune(&mut obj);
            r8s_api::typed::Decoded {
                object: obj,
                unknown_fields,
            }
        }
        None => r8s_api::typed::decode(def, &obj).map_err(cannot)?,
    };
    quantities::canonicalize(def, &mut decoded.object).map_err(|e| cannot(e.to_owned()))?;
    // An empty pending list means initialized: the field goes (upstream).
    let pending =
        |i: &Value| i["pending"].as_array().is_some_and(|p| !p.is_empty()) || !i["result"].is_null();
    if let Some(i) = initializers.filter(pending) {
        meta::meta_mut(&mut decoded.object).insert("initializers".into(), i);
    }
    let unknown: Vec<String> = decoded
        .unknown_fields
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .chain(query.1.iter().map(|f| format!("duplicate field \"{f}\"")))
        .collect();
    match query.get("fieldValidation").unwrap_or("Warn") {
        "Strict" if !unknown.is_empty() => Err(cannot(format!("strict decoding error: {}", unknown.join(", ")))),
        "Strict" | "Warn" => Ok((decoded.object, unknown)),
        "Ignore" => Ok((decoded.object, Vec::new())),
        other => Err(ApiError::bad_request(format!(
            "fieldValidation: Unsupported value: \"{other}\": supported values: \"Ignore\", \"Strict\", \"Warn\""
        ))),
    }
}

/// Check `apiVersion`/`kind` (filling them in when absent) and the namespace.
pub(crate) fn check_type_and_namespace(def: &ResourceDef, obj: &mut Value, ns: &str) -> Result<(), ApiError> {
    if !obj.is_object() {
        return Err(ApiError::bad_request(format!(
            "the request body must be a {} object",
            def.kind
        )));
    }
    let want_version = def.api_version();
    match obj["apiVersion"].as_str() {
        None | Some("") => obj["apiVersion"] = json!(want_version),
        Some(v) if v == want_version => {}
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({want_version})"
            )))
        }
    }
    match obj["kind"].as_str() {
        None | Some("") => obj["kind"] = json!(def.kind),
        Some(k) if k == def.kind => {}
        Some(k) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                def.kind
            )))
        }
    }
    let m = meta::meta_mut(obj);
    if def.namespaced {
        match m.get("namespace").and_then(Value::as_str) {
            None | Some("") => {
                m.insert("namespace".into(), json!(ns));
            }
            Some(n) if n == ns => {}
            Some(_) => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ))
            }
        }
    } else {
        m.remove("namespace");
    }
    Ok(())
}

/// The options of a create or update as admission sees them (upstream's `CreateOptions`,
/// `UpdateOptions`, or `PatchOptions` when the request is a patch).
fn operation_options(ctx: &Ctx, kind: &str, dry_run: bool) -> Value {
    let kind = if ctx.info.verb == "patch" {
        "PatchOptions"
    } else {
        kind
    };
    let mut o = json!({"kind": kind, "apiVersion": "meta.k8s.io/v1"});
    if dry_run {
        o["dryRun"] = json!(["All"]);
    }
    let query = Query::parse(ctx.query.as_deref());
    if kind == "PatchOptions" && query.flag("force") {
        o["force"] = json!(true);
    }
    for key in ["fieldManager", "fieldValidation"] {
        if let Some(v) = query.get(key) {
            o[key] = json!(v);
        }
    }
    o
}

/// A write as the registry answers it; the endpoint frames it.
pub(crate) struct Written {
    /// The object as written (or as it would be, on a dry run).
    pub object: Value,
    /// The stored JSON with its resourceVersion, when the object is served as stored: sent as
    /// it is, with no second encoding.
    pub stored: Option<Vec<u8>>,
    /// Whether the write created the object (201) rather than changed it (200).
    pub created: bool,
    /// Warnings for the client (unknown fields dropped, …).
    pub warnings: Vec<String>,
}

/// Create a decoded request object: typed per `fieldValidation`, its field manager recorded,
/// then [`create_object`].
pub(crate) async fn create(
    ctx: &Ctx,
    def: &Resource,
    ns: &str,
    obj: Value,
    query: &Query,
) -> Result<Written, ApiError> {
    let (mut obj, warnings) = typed(def, obj, ns, query)?;
    apply::record_update(
        None,
        &mut obj,
        &ctx.field_manager(),
        &def.api_version(),
        patch::root_node(def, subresource::View::Main),
    );
    let (object, stored) = create_stored(ctx, def, ns, obj, query.dry_run()).await?;
    Ok(Written {
        object,
        stored,
        created: true,
        warnings,
    })
}

/// Replace an object with a decoded request object (typed per `fieldValidation`).
pub(crate) async fn update(
    ctx: &Ctx,
    def: &Resource,
    ns: &str,
    name: &str,
    obj: Value,
    query: &Query,
) -> Result<Written, ApiError> {
    let (obj, warnings) = typed(def, obj, ns, query)?;
    // Without a resourceVersion the update is unconditional: a write by someone else between
    // the read and ours (a controller's status) is not a conflict, the update goes on over the
    // newer object (upstream's GuaranteedUpdate).
    let unconditional =
        meta::str_field(&obj, &["metadata", "resourceVersion"]).is_none_or(|rv| rv.is_empty());
    let mut attempts = 0;
    let object = loop {
        let old = read(ctx, def, ns, name).await?;
        let target = Target { def, ns, name };
        let view = subresource::View::Main;
        if !unconditional {
            break apply_update(ctx, target, obj, &old, query.dry_run(), view).await?;
        }
        match apply_update(ctx, target, obj.clone(), &old, query.dry_run(), view).await {
            Err(e)
                if e.code == 409
                    && e.message.contains("the object has been modified")
                    && attempts < patch::MAX_ATTEMPTS =>
            {
                attempts += 1;
            }
            other => break other?,
        }
    };
    Ok(Written {
        object,
        stored: None,
        created: false,
        warnings,
    })
}

/// Create a decoded object: metadata, defaults, mutating admission, name, validation,
/// validating admission, allocations, store. Returns the stored object.
pub(crate) async fn create_object(
    ctx: &Ctx,
    def: &Resource,
    ns: &str,
    obj: Value,
    dry_run: bool,
) -> Result<Value, ApiError> {
    Ok(create_stored(ctx, def, ns, obj, dry_run).await?.0)
}

/// [`create_object`], also returning the stored JSON with its resourceVersion when the
/// object is stored as served (no dry run, no version conversion).
async fn create_stored(
    ctx: &Ctx,
    def: &Resource,
    ns: &str,
    mut obj: Value,
    dry_run: bool,
) -> Result<(Value, Option<Vec<u8>>), ApiError> {
    let strategy = def.strategy.clone();
    {
        let m = meta::meta_mut(&mut obj);
        m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        m.insert("creationTimestamp".into(), json!(meta::now_rfc3339()));
        m.remove("resourceVersion");
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        if strategy.tracks_generation() {
            m.insert("generation".into(), json!(1));
        } else {
            m.remove("generation");
        }
    }
    strategy.default(&mut obj);
    let options = operation_options(ctx, "CreateOptions", dry_run);
    // Mutating admission sees the object as the client sent it, defaulted, before its name is
    // generated; validating admission sees it as it will be stored (upstream's order).
    ctx.shared
        .admission
        .admit(&mut Attributes {
            operation: Operation::Create,
            request: &ctx.info,
            user: &ctx.user,
            object: Some(&mut obj),
            old_object: None,
            dry_run,
            options: Some(&options),
            warnings: &ctx.warnings,
        })
        .await?;
    {
        let m = meta::meta_mut(&mut obj);
        let name = m.get("name").and_then(Value::as_str).unwrap_or("").to_owned();
        if name.is_empty() {
            if let Some(g) = m
                .get("generateName")
                .and_then(Value::as_str)
                .filter(|g| !g.is_empty())
            {
                let generated = format!("{g}{}", meta::random_suffix());
                m.insert("name".into(), json!(generated));
            }
        }
    }
    strategy.prepare_for_create(&ctx.user, &mut obj);
    let name = meta::name(&obj).to_owned();
    let mut errs = strategy::validate(def, &obj);
    errs.extend(strategy.validate_create(&obj));
    if !errs.is_empty() {
        return Err(invalid(def, &name, &errs));
    }
    ctx.shared
        .admission
        .validate(&Attributes {
            operation: Operation::Create,
            request: &ctx.info,
            user: &ctx.user,
            object: Some(&mut obj),
            old_object: None,
            dry_run,
            options: Some(&options),
            warnings: &ctx.warnings,
        })
        .await?;
    // What the resource does before it is stored (a Service's cluster IP and node ports);
    // undone unless it is stored (a dry run gives them back at once).
    let finish = strategy.begin_create(ctx, &mut obj).await?;
    if dry_run {
        if let Some(f) = finish {
            f.finish(ctx, false).await;
        }
        // Everything but the write: a name collision is still reported.
        let exists = ctx
            .shared
            .store
            .get(&key(def, ns, &name), 0)
            .await
            .map_err(|e| store_error(def, &name, e))?;
        if exists.kv.is_some() {
            return Err(already_exists(def, &name));
        }
        return Ok((obj, None));
    }
    let encoded = try_encode(def, &obj)?;
    let stage = crate::journey::stage!("store.create", revision = tracing::field::Empty);
    let created = tracing::Instrument::instrument(
        ctx.shared.store.create(&key(def, ns, &name), encoded.clone()),
        stage.clone(),
    )
    .await;
    if let Ok(kv) = &created {
        stage.record("revision", kv.mod_revision);
    }
    drop(stage);
    let kv = match created {
        Ok(kv) => kv,
        Err(e) => {
            if let Some(f) = finish {
                f.finish(ctx, false).await;
            }
            return Err(store_error(def, &name, e));
        }
    };
    if let Some(f) = finish {
        f.finish(ctx, true).await;
    }
    meta::set_resource_version(&mut obj, kv.mod_revision);
    crate::journey::written(&ctx.journey, &obj, Some(kv.mod_revision));
    let stored = if convert::converts(def) {
        None
    } else {
        with_resource_version(&encoded, kv.mod_revision)
    };
    Ok((obj, stored))
}

/// The object a request is about.
#[derive(Clone, Copy)]
pub(crate) struct Target<'a> {
    pub def: &'a Resource,
    pub ns: &'a str,
    pub name: &'a str,
}

/// Write `obj` over `old` (stored at `old_rv`): metadata rules, strategy, admission, CAS.
/// Used by update and patch.
pub(crate) async fn apply_update(
    ctx: &Ctx,
    target: Target<'_>,
    mut obj: Value,
    old: &Value,
    dry_run: bool,
    view: subresource::View,
) -> Result<Value, ApiError> {
    let Target { def, ns, name } = target;
    let strategy = def.strategy.clone();
    check_type_and_namespace(def, &mut obj, ns)?;
    let old_rv = meta::resource_version(old).unwrap_or(0);
    let expected = match meta::resource_version(&obj) {
        Some(rv) => rv,
        None if meta::str_field(&obj, &["metadata", "resourceVersion"]).is_some_and(|s| !s.is_empty()) => {
            return Err(ApiError::bad_request(
                "metadata.resourceVersion: Invalid value: must be an integer",
            ))
        }
        // No resourceVersion: an unconditional update, as upstream allows for these resources.
        None => old_rv,
    };
    if expected != old_rv {
        return Err(conflict(def, name));
    }
    if meta::name(&obj) != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            meta::name(&obj)
        )));
    }
    // A uid in the new object must be the stored one (upstream's ValidateObjectMetaUpdate):
    // it is how a writer such as the kubelet's status manager makes sure it still writes the
    // object it read, not a new one under the same name.
    if let Some(uid) = obj["metadata"]["uid"].as_str().filter(|u| !u.is_empty()) {
        if old["metadata"]["uid"].as_str() != Some(uid) {
            return Err(invalid(
                def,
                name,
                &[FieldError::invalid("metadata.uid", uid, "field is immutable")],
            ));
        }
    }
    {
        // Immutable metadata stays as stored.
        let old_meta = &old["metadata"];
        let m = meta::meta_mut(&mut obj);
        for k in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ] {
            match old_meta.get(k) {
                Some(v) => m.insert(k.into(), v.clone()),
                None => m.remove(k),
            };
        }
        m.remove("resourceVersion");
    }
    if view != subresource::View::Apply {
        apply::record_update(
            Some(old),
            &mut obj,
            &ctx.field_manager(),
            &def.api_version(),
            patch::root_node(def, subresource::View::Main),
        );
    }
    let options = operation_options(ctx, "UpdateOptions", dry_run);
    ctx.shared
        .admission
        .admit(&mut Attributes {
            operation: Operation::Update,
            request: &ctx.info,
            user: &ctx.user,
            object: Some(&mut obj),
            old_object: Some(old),
            dry_run,
            options: Some(&options),
            warnings: &ctx.warnings,
        })
        .await?;
    if matches!(view, subresource::View::Main | subresource::View::Apply) {
        strategy.prepare_for_update(&mut obj, old)?;
    }
    strategy.default(&mut obj);
    if strategy.tracks_generation() && strategy.generation_changed(&obj, old) {
        let g = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
        meta::meta_mut(&mut obj).insert("generation".into(), json!(g));
    }
    let mut errs = strategy::validate(def, &obj);
    errs.extend(strategy.validate_update(&obj, old));
    if matches!(view, subresource::View::Main | subresource::View::Apply) {
        errs.extend(strategy.validate_main_update(&obj, old));
    }
    if !errs.is_empty() {
        return Err(invalid(def, name, &errs));
    }
    ctx.shared
        .admission
        .validate(&Attributes {
            operation: Operation::Update,
            request: &ctx.info,
            user: &ctx.user,
            object: Some(&mut obj),
            old_object: Some(old),
            dry_run,
            options: Some(&options),
            warnings: &ctx.warnings,
        })
        .await?;
    let finish = strategy.begin_update(ctx, &mut obj, old).await?;
    let result = write_update(ctx, def, strategy.as_ref(), ns, name, obj, old, old_rv, dry_run).await;
    if let Some(f) = finish {
        f.finish(ctx, matches!(result, Ok((_, true)))).await;
    }
    result.map(|(obj, _)| obj)
}

/// The write at the end of an update: nothing for a no-op, the delete of an object whose
/// last finalizer went, or the store's compare-and-swap. Returns the object and whether this
/// version of it was stored.
#[allow(clippy::too_many_arguments)]
async fn write_update(
    ctx: &Ctx,
    def: &Resource,
    strategy: &dyn strategy::Strategy,
    ns: &str,
    name: &str,
    mut obj: Value,
    old: &Value,
    old_rv: i64,
    dry_run: bool,
) -> Result<(Value, bool), ApiError> {
    let mut unchanged_check = obj.clone();
    meta::set_resource_version(&mut unchanged_check, old_rv);
    if unchanged_check == *old {
        // A no-op update writes nothing and keeps the resource version, as upstream.
        return Ok((old.clone(), false));
    }
    // An object being deleted whose last finalizer is removed goes away now (unless the
    // resource holds it longer: a namespace waits for its spec.finalizers).
    if old["metadata"]["deletionTimestamp"].is_string()
        && meta::finalizers(&obj).is_empty()
        && !strategy.holds_deletion(&obj)
    {
        if !dry_run {
            ctx.shared
                .store
                .delete(&key(def, ns, name), Some(old_rv))
                .await
                .map_err(|e| store_error(def, name, e))?;
            // Gone as surely as through a DELETE: what it held (a Service's cluster IP and
            // node ports) is released the same way.
            strategy.after_delete(ctx, old).await;
        }
        return Ok((obj, false));
    }
    if dry_run {
        meta::set_resource_version(&mut obj, old_rv);
        return Ok((obj, false));
    }
    let stage = crate::journey::stage!("store.update", revision = tracing::field::Empty);
    let kv = tracing::Instrument::instrument(
        ctx.shared
            .store
            .update(&key(def, ns, name), try_encode(def, &obj)?, old_rv),
        stage.clone(),
    )
    .await
    .map_err(|e| store_error(def, name, e))?;
    stage.record("revision", kv.mod_revision);
    drop(stage);
    meta::set_resource_version(&mut obj, kv.mod_revision);
    crate::journey::written(&ctx.journey, &obj, Some(kv.mod_revision));
    Ok((obj, true))
}

/// Delete one object, honouring preconditions, finalizers, graceful deletion and the
/// propagation policy. Returns the object as it now is (with deletionTimestamp if it stays) and
/// whether it is gone.
pub(crate) async fn delete_object(
    ctx: &Ctx,
    def: &Resource,
    ns: &str,
    name: &str,
    opts: &Value,
) -> Result<(Value, bool), ApiError> {
    // A delete without a resourceVersion precondition does not fail because someone else wrote
    // the object meanwhile: it starts over from the new version, as upstream's guaranteed
    // update does.
    let mut attempts = 0;
    loop {
        match delete_object_once(ctx, def, ns, name, opts).await {
            Err(e)
                if e.code == 409 && e.message.contains("the object has been modified") && attempts < 10 =>
            {
                attempts += 1;
            }
            other => return other,
        }
    }
}

async fn delete_object_once(
    ctx: &Ctx,
    def: &Resource,
    ns: &str,
    name: &str,
    opts: &Value,
) -> Result<(Value, bool), ApiError> {
    let dry_run = opts["dryRun"]
        .as_array()
        .is_some_and(|a| a.iter().any(|v| v == "All"));
    let strategy = def.strategy.clone();
    let old = read(ctx, def, ns, name).await?;
    crate::journey::written(&ctx.journey, &old, None);
    let rv = meta::resource_version(&old).unwrap_or(0);
    if let Some(uid) = opts["preconditions"]["uid"].as_str() {
        if old["metadata"]["uid"].as_str() != Some(uid) {
            return Err(ApiError::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    def.group_resource(),
                    old["metadata"]["uid"].as_str().unwrap_or("")
                ),
            ));
        }
    }
    if let Some(prv) = opts["preconditions"]["resourceVersion"].as_str() {
        if prv != rv.to_string() {
            return Err(ApiError::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: ResourceVersion in precondition: {prv}, ResourceVersion in object meta: {rv}",
                    def.group_resource()
                ),
            ));
        }
    }
    let mut options = json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"});
    if let (Some(o), Some(given)) = (options.as_object_mut(), opts.as_object()) {
        for (k, v) in given {
            if k != "kind" && k != "apiVersion" {
                o.insert(k.clone(), v.clone());
            }
        }
    }
    ctx.shared
        .admission
        .run(&mut Attributes {
            operation: Operation::Delete,
            request: &ctx.info,
            user: &ctx.user,
            object: None,
            old_object: Some(&old),
            dry_run,
            options: Some(&options),
            warnings: &ctx.warnings,
        })
        .await?;

    let mut finalizers = meta::finalizers(&old);
    match opts["propagationPolicy"].as_str() {
        Some("Foreground") => {
            if !finalizers.iter().any(|f| f == "foregroundDeletion") {
                finalizers.push("foregroundDeletion".into());
            }
        }
        Some("Orphan") => {
            if !finalizers.iter().any(|f| f == "orphan") {
                finalizers.push("orphan".into());
            }
        }
        Some("Background") | None => {}
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "DeleteOptions.propagationPolicy: Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\""
            )))
        }
    }
    // Held by the resource (a namespace until the namespace controller empties it), or
    // deleted gracefully (a pod on a node: the kubelet stops it and removes the object).
    let held = strategy.holds_deletion(&old);
    let grace = opts["gracePeriodSeconds"]
        .as_i64()
        .or_else(|| strategy.default_grace_period(&old));
    let graceful = grace.is_some_and(|g| strategy.is_graceful_delete(&old, g));

    if finalizers.is_empty() && !held && !graceful {
        if !dry_run {
            ctx.shared
                .store
                .delete(&key(def, ns, name), Some(rv))
                .await
                .map_err(|e| match e {
                    StoreError::Conflict { .. } => conflict(def, name),
                    other => store_error(def, name, other),
                })?;
            strategy.after_delete(ctx, &old).await;
        }
        return Ok((old, true));
    }
    // Upstream's BeforeDelete: a graceful deletion is due at now + grace; one under way may
    // only be shortened (the kubelet's final delete of a pod a finalizer keeps sets 0).
    let deleting = old["metadata"]["deletionTimestamp"].as_str().map(str::to_owned);
    let old_grace = old["metadata"]["deletionGracePeriodSeconds"].as_i64();
    let shorter = match (&deleting, old_grace, opts["gracePeriodSeconds"].as_i64()) {
        (Some(_), Some(was), Some(now)) if was > 0 && now.max(0) < was => Some(now.max(0)),
        _ => None,
    };
    if deleting.is_some() && shorter.is_none() && finalizers == meta::finalizers(&old) {
        // Already being deleted; nothing more to record.
        return Ok((old, false));
    }
    let mut obj = old.clone();
    {
        let m = meta::meta_mut(&mut obj);
        match (&deleting, shorter) {
            (Some(ts), Some(g)) => {
                let due = meta::rfc3339_plus(ts, g - old_grace.unwrap_or(0)).unwrap_or_else(|| ts.clone());
                m.insert("deletionTimestamp".into(), json!(due));
                m.insert("deletionGracePeriodSeconds".into(), json!(g));
            }
            (Some(_), None) => {}
            (None, _) => {
                let g = if graceful { grace.unwrap_or(30) } else { 0 };
                let now = meta::now_rfc3339();
                m.insert(
                    "deletionTimestamp".into(),
                    json!(meta::rfc3339_plus(&now, g).unwrap_or(now)),
                );
                m.insert("deletionGracePeriodSeconds".into(), json!(g));
            }
        }
        if !finalizers.is_empty() {
            m.insert("finalizers".into(), json!(finalizers));
        }
        m.remove("resourceVersion");
    }
    strategy.prepare_for_delete(&mut obj);
    if dry_run {
        meta::set_resource_version(&mut obj, rv);
        return Ok((obj, false));
    }
    let kv = ctx
        .shared
        .store
        .update(&key(def, ns, name), encode(def, &obj), rv)
        .await
        .map_err(|e| store_error(def, name, e))?;
    meta::set_resource_version(&mut obj, kv.mod_revision);
    Ok((obj, false))
}

/// `DeleteOptions` from the body or the query.
pub(crate) fn delete_options(query: &Query, body: &[u8]) -> Result<Value, ApiError> {
    let mut opts: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding DeleteOptions: {e}")))?
    };
    if let Some(p) = query.get("propagationPolicy") {
        opts["propagationPolicy"] = json!(p);
    }
    if let Some(g) = query
        .get("gracePeriodSeconds")
        .and_then(|g| g.parse::<i64>().ok())
    {
        opts["gracePeriodSeconds"] = json!(g);
    }
    if query.dry_run() {
        opts["dryRun"] = json!(["All"]);
    }
    Ok(opts)
}

/// Delete every object of `def` in `ns` that `filter` keeps; returns those deleted (as they
/// now are) and the revision the list was read at.
pub(crate) async fn delete_collection(
    ctx: &Ctx,
    def: &Resource,
    ns: &str,
    filter: &Filter,
    opts: &Value,
) -> Result<Page<Value>, ApiError> {
    let (items, revision, _, _) =
        list_objects(ctx, def, ns, &Query(BTreeMap::new(), Vec::new()), filter).await?;
    let mut deleted = Vec::new();
    for item in items {
        match delete_object(ctx, def, meta::namespace(&item), meta::name(&item), opts).await {
            Ok((obj, _)) => deleted.push(obj),
            // Gone in the meantime: fine.
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(page(deleted, revision, None, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_parameters_are_decoded_as_upstream() {
        let q = Query::parse(Some(
            "limit=abc&timeoutSeconds=30&gracePeriodSeconds=99999999999999999999",
        ));
        assert_eq!(
            q.check_integers(&["limit"]).unwrap_err().message,
            "strconv.ParseInt: parsing \"abc\": invalid syntax"
        );
        assert!(q.check_integers(&["timeoutSeconds", "continue"]).is_ok());
        let e = q.check_integers(&["gracePeriodSeconds"]).unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "strconv.ParseInt: parsing \"99999999999999999999\": value out of range"
        );
    }

    #[test]
    fn resource_versions_are_spliced_into_stored_objects() {
        let obj = json!({"spec": {"template": {"metadata": {"labels": {"a": "b"}}}}, "kind": "Deployment", "apiVersion": "apps/v1", "metadata": {"name": "web"}});
        let def = crate::registry::catalogue::builtin("apps", "v1", "deployments").unwrap();
        let stored = encode(def, &obj);
        assert!(stored.starts_with(b"{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"metadata\":{"));
        let out: Value = serde_json::from_slice(&with_resource_version(&stored, 42).unwrap()).unwrap();
        assert_eq!(out["metadata"]["resourceVersion"], "42");
        assert_eq!(out["metadata"]["name"], "web");
        assert!(out["spec"]["template"]["metadata"]
            .get("resourceVersion")
            .is_none());
        // resourceVersion and selfLink are never stored; the rest keeps its order.
        let with_rv = encode(
            def,
            &json!({"status": {"replicas": 1}, "metadata": {"name": "w", "resourceVersion": "9", "selfLink": "/x", "uid": "u"}, "kind": "Deployment", "apiVersion": "apps/v1", "spec": {}}),
        );
        assert_eq!(
            std::str::from_utf8(&with_rv).unwrap(),
            r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"w","uid":"u"},"status":{"replicas":1},"spec":{}}"#
        );
        let empty_meta = encode(def, &json!({"apiVersion": "v1", "kind": "X", "metadata": {}}));
        let out: Value = serde_json::from_slice(&with_resource_version(&empty_meta, 7).unwrap()).unwrap();
        assert_eq!(out["metadata"], json!({"resourceVersion": "7"}));
        // Not in the stored shape (a nested object before metadata): no splice.
        assert!(with_resource_version(br#"{"spec":{"metadata":{}},"metadata":{}}"#, 1).is_none());
    }
}

#[cfg(test)]
mod duplicate_field_tests {
    use super::*;

    /// The conformance spec's body: a repeated `spec.replicas` is found (with its path),
    /// as are repeats inside lists; a body without repeats has none.
    #[test]
    fn repeated_keys_are_found_with_their_paths() {
        let body = br#"{"spec": {"unknownField": "foo", "replicas": 2, "replicas": 3,
            "template": {"spec": {"containers": [{"name": "a", "name": "b"}]}}}}"#;
        assert_eq!(
            duplicate_fields(body),
            ["spec.replicas", "spec.template.spec.containers[0].name"]
        );
        assert!(duplicate_fields(br#"{"a": {"b": 1}, "b": [1, {"a": 2}]}"#).is_empty());
        assert!(duplicate_fields(b"not json").is_empty());
    }
}
