//! The resource endpoints (upstream's `endpoints/handlers`): they read a request — its verb,
//! body, content type and `Accept` — call the registry, which answers with values, and frame the
//! answer as HTTP (status code, Table or list rendering, warnings). Watches and the kubelet's
//! connections (logs, proxies, exec/attach/port-forward) are streams and live here whole.
//!
//! The request path: filters (`handler`) → these endpoints → registry → admission → store.

mod html_links;
pub(crate) mod kubelet;
pub(crate) mod resource_metrics;
pub(crate) mod watch;

use crate::registry::Resource;
use bytes::Bytes;
use http::{HeaderMap, Method, Response, StatusCode};
use serde_json::{json, Value};

use crate::context::Ctx;
use crate::http::{
    content_type, json_response, partial_list, partial_object, raw_json, wants_partial, wants_table,
    with_warnings, Body, Partial,
};
use crate::registry::strategy::Connect;
use crate::registry::subresource::View;
use crate::registry::{self, table, Filter, Query, Written};
use crate::status::ApiError;

/// Answer a resource request (after the filters, with the body read).
pub(crate) async fn resource(
    ctx: &Ctx,
    method: &Method,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response<Body>, ApiError> {
    let info = &ctx.info;
    let served = ctx.shared.served.current();
    let def = served
        .find(&info.api_group, &info.api_version, &info.resource)
        .ok_or_else(ApiError::not_found_path)?;
    if let Some(warning) = def.custom().and_then(|s| s.warning.clone()) {
        // A deprecated version of a custom resource says so on every request.
        ctx.warnings.add(warning);
    }
    if info.verb == "create" && info.subresource.is_empty() && served.is_terminating(def) {
        return Err(ApiError::new(
            405,
            "MethodNotAllowed",
            "create not allowed while custom resource definition is terminating",
        ));
    }
    if !def.namespaced && !info.namespace.is_empty() && info.resource != "namespaces" {
        return Err(ApiError::not_found_path());
    }
    if def.namespaced && info.namespace.is_empty() && !matches!(info.verb.as_str(), "list" | "watch") {
        return Err(ApiError::not_found_path());
    }
    let query = Query::parse(ctx.query.as_deref());
    match info.verb.as_str() {
        "list" | "watch" => query.check_integers(&["limit", "timeoutSeconds"])?,
        "delete" | "deletecollection" => query.check_integers(&["gracePeriodSeconds"])?,
        _ => {}
    }
    // Bodies in Kubernetes' protobuf encoding (kubectl >= 1.32 sends typed objects so) are read
    // into JSON here; everything after works on JSON. Responses are always JSON.
    let body = if !body.is_empty() && content_type(headers).starts_with(crate::protobuf::MEDIA_TYPE) {
        let obj = crate::protobuf::decode(&body)
            .map_err(|e| ApiError::bad_request(format!("error decoding the protobuf request body: {e}")))?;
        Bytes::from(serde_json::to_vec(&obj).expect("JSON serializes"))
    } else {
        body
    };
    if !body.is_empty() && content_type(headers).starts_with("application/yaml") {
        return Err(ApiError::new(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/json, application/vnd.kubernetes.protobuf, application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json",
        ));
    }
    // Audit: the request object as sent (as JSON), before defaulting and admission.
    if ctx.audit.level() > crate::audit::Level::None
        && matches!(
            info.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    {
        ctx.audit.request_body(&info.verb, &body);
    }
    let ns = if def.namespaced {
        info.namespace.as_str()
    } else {
        ""
    };
    if def.is_review() {
        // Reviews have no table convertor: a Table is not a media type they can answer in
        // (upstream's `AllowsMediaTypeTransform`), so the negotiation fails.
        let accept = headers
            .get(http::header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if wants_table(headers) && accept.split(',').all(|a| a.contains("as=Table")) {
            return Err(ApiError::new(
                406,
                "NotAcceptable",
                "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf",
            ));
        }
        return match (method, info.verb.as_str()) {
            (&Method::POST, "create") if info.subresource.is_empty() => Ok(json_response(
                StatusCode::CREATED,
                &registry::reviews::create(ctx, def, ns, body).await?,
            )),
            (m, _) => Err(ApiError::method_not_allowed(m.as_str(), &def.group_resource())),
        };
    }
    if !info.subresource.is_empty() {
        if def.subresource(&info.subresource).is_none() {
            return Err(ApiError::not_found_path());
        }
        return subresource(
            ctx,
            def,
            ns,
            &info.name,
            &info.subresource,
            method,
            headers,
            &query,
            body,
        )
        .await;
    }
    if def.group == "metrics.k8s.io" {
        return resource_metrics::serve(ctx, def, method, &info.verb, ns, &info.name, headers, &query).await;
    }
    if def.kind == "ComponentStatus" && def.group.is_empty() {
        return component_statuses(ctx, def, method, &info.verb, &info.name, headers, &query).await;
    }
    let partial = wants_partial(headers);
    // One object asked of a list, a list of one object: upstream's 406s.
    let not_a_list = || {
        ApiError::new(
            406,
            "NotAcceptable",
            format!(
                "you requested PartialObjectMetadataList, but the requested object is not a list (*{}.{})",
                internal_package(def),
                def.kind
            ),
        )
    };
    match (partial, info.verb.as_str()) {
        (Some(Partial::List), "get" | "create" | "update" | "patch" | "delete" | "watch") => {
            return Err(not_a_list())
        }
        (Some(Partial::One), "list" | "deletecollection") => {
            return Err(ApiError::new(
                406,
                "NotAcceptable",
                format!(
                    "you requested PartialObjectMetadata, but the requested object is a list (*{}.{}List)",
                    internal_package(def),
                    def.kind
                ),
            ))
        }
        _ => {}
    }
    let shape = if partial == Some(Partial::One) {
        Shape::Partial
    } else if wants_table(headers) {
        Shape::Table
    } else {
        Shape::Object
    };
    match (method, info.verb.as_str()) {
        (_, "get") if partial.is_some() => {
            let obj = get_object(ctx, def, ns, &info.name, &query).await?;
            Ok(json_response(StatusCode::OK, &partial_object(&obj)))
        }
        (_, "get") => get(ctx, def, ns, &info.name, headers, &query).await,
        (_, "list") if partial.is_some() => {
            let filter = Filter::from_query(def, &query)?;
            // Metadata informers list at "0" too: from the watch cache when it can answer.
            let page = match registry::list_cached(ctx, def, ns, &query, &filter).await? {
                Some(page) => registry::Page {
                    items: page
                        .items
                        .iter()
                        .filter_map(|o| serde_json::from_slice(o).ok())
                        .collect(),
                    meta: page.meta,
                },
                None => registry::list(ctx, def, ns, &query, &filter).await?,
            };
            Ok(json_response(
                StatusCode::OK,
                &partial_list(&page.meta, &page.items),
            ))
        }
        (_, "list") => list(ctx, def, ns, headers, &query).await,
        (_, "watch") => watch::serve(ctx, def, ns, headers, &query).await,
        (_, "create") => shaped(def, &query, shape, create(ctx, def, ns, &query, body).await).await,
        (_, "update") => {
            shaped(
                def,
                &query,
                shape,
                update(ctx, def, ns, &info.name, &query, body).await,
            )
            .await
        }
        (_, "patch") => {
            let w =
                registry::patch::patch(ctx, def, ns, &info.name, View::Main, headers, &query, body).await?;
            shaped(def, &query, shape, written(w)).await
        }
        (_, "delete") => {
            let opts = registry::delete_options(&query, &body)?;
            let (obj, gone) = registry::delete_object(ctx, def, ns, &info.name, &opts).await?;
            // Upstream answers 200 with the object when it is gone, 202 when deletion is pending.
            let code = if gone {
                StatusCode::OK
            } else {
                StatusCode::ACCEPTED
            };
            let obj = match partial {
                Some(Partial::One) if obj["kind"] != "Status" => partial_object(&obj),
                _ => obj,
            };
            Ok(json_response(code, &obj))
        }
        (_, "deletecollection") => {
            let opts = registry::delete_options(&query, &body)?;
            let filter = Filter::from_query(def, &query)?;
            let deleted = registry::delete_collection(ctx, def, ns, &filter, &opts).await?;
            Ok(json_response(StatusCode::OK, &list_of(def, deleted)))
        }
        (m, _) => Err(ApiError::method_not_allowed(m.as_str(), &def.group_resource())),
    }
}

/// How a write's answer is shaped: the object, its metadata alone, or a Table row.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    Object,
    Partial,
    Table,
}

/// A write's answer shaped as the client asked (`as=PartialObjectMetadata` or `as=Table`),
/// its status code and warnings kept.
async fn shaped(
    def: &Resource,
    query: &Query,
    shape: Shape,
    resp: Result<Response<Body>, ApiError>,
) -> Result<Response<Body>, ApiError> {
    let resp = resp?;
    if shape == Shape::Object {
        return Ok(resp);
    }
    let (parts, body) = resp.into_parts();
    let bytes = http_body_util::BodyExt::collect(body)
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let obj: Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let obj = match shape {
        Shape::Table => table::render(def, &[obj], None, query),
        _ => partial_object(&obj),
    };
    let mut out = json_response(parts.status, &obj);
    for w in parts.headers.get_all(http::header::WARNING) {
        out.headers_mut().append(http::header::WARNING, w.clone());
    }
    Ok(out)
}

/// The Go package upstream's internal type of `def` lives in (for the 406 messages' `%T`).
fn internal_package(def: &Resource) -> &str {
    match def.group {
        "" => "core",
        g => g.split('.').next().unwrap_or(g),
    }
}

/// A write's answer: 201 with the object when it was created, else 200; the stored bytes as
/// they are when the registry has them (no second encoding); warnings as headers.
fn written(w: Written) -> Result<Response<Body>, ApiError> {
    let code = if w.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let resp = match w.stored {
        Some(bytes) => raw_json(code, bytes),
        None => json_response(code, &w.object),
    };
    Ok(with_warnings(resp, &w.warnings))
}

/// A list object around a page of decoded items.
fn list_of(def: &Resource, page: registry::Page<Value>) -> Value {
    json!({
        "kind": registry::list_kind(def),
        "apiVersion": def.api_version(),
        "metadata": page.meta,
        "items": page.items,
    })
}

/// A list response written around items that are JSON already.
fn raw_list(def: &Resource, page: registry::Page<impl AsRef<[u8]>>) -> Response<Body> {
    let items = &page.items;
    let mut body = Vec::with_capacity(items.iter().map(|o| o.as_ref().len() + 1).sum::<usize>() + 256);
    body.extend_from_slice(
        format!(
            "{{\"kind\":\"{}\",\"apiVersion\":\"{}\",\"metadata\":{},\"items\":[",
            registry::list_kind(def),
            def.api_version(),
            page.meta
        )
        .as_bytes(),
    );
    for (i, o) in items.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(o.as_ref());
    }
    body.extend_from_slice(b"]}");
    raw_json(StatusCode::OK, body)
}

/// ComponentStatuses: computed on each read, never stored, always with upstream's
/// deprecation warning.
async fn component_statuses(
    ctx: &Ctx,
    def: &Resource,
    method: &Method,
    verb: &str,
    name: &str,
    headers: &HeaderMap,
    query: &Query,
) -> Result<Response<Body>, ApiError> {
    use registry::componentstatuses as cs;
    let table = wants_table(headers);
    let body = match verb {
        "get" => {
            let obj = cs::one(ctx, name).await?;
            if table {
                table::render(def, &[obj], None, query)
            } else {
                obj
            }
        }
        "list" => {
            let items = cs::all(ctx).await;
            let meta = json!({});
            if table {
                table::render(def, &items, Some(meta), query)
            } else {
                list_of(def, registry::Page { items, meta })
            }
        }
        _ => {
            return Err(ApiError::method_not_allowed(
                method.as_str(),
                &def.group_resource(),
            ))
        }
    };
    Ok(crate::http::with_warnings(
        json_response(StatusCode::OK, &body),
        &[cs::DEPRECATED.to_owned()],
    ))
}

/// One object, decoded: from the watch cache for a get at resourceVersion "0", else as stored.
async fn get_object(
    ctx: &Ctx,
    def: &'static Resource,
    ns: &str,
    name: &str,
    query: &Query,
) -> Result<Value, ApiError> {
    match registry::get_cached(ctx, def, ns, name, query).await? {
        Some(o) => Ok(o.value()),
        None => registry::get(ctx, def, ns, name, query).await,
    }
}

async fn get(
    ctx: &Ctx,
    def: &'static Resource,
    ns: &str,
    name: &str,
    headers: &HeaderMap,
    query: &Query,
) -> Result<Response<Body>, ApiError> {
    let table = wants_table(headers);
    if !table {
        // At "0", any state will do: the watch cache's, as it was sent to watchers.
        if let Some(o) = registry::get_cached(ctx, def, ns, name, query).await? {
            return Ok(raw_json(StatusCode::OK, o.json.clone()));
        }
    }
    if !table && !r8s_api::features::initializers() {
        // Nothing to look at inside the object: the stored bytes with their resourceVersion.
        return Ok(raw_json(
            StatusCode::OK,
            registry::get_stored(ctx, def, ns, name).await?,
        ));
    }
    let obj = get_object(ctx, def, ns, name, query).await?;
    if table {
        return Ok(json_response(
            StatusCode::OK,
            &table::render(def, &[obj], None, query),
        ));
    }
    Ok(json_response(StatusCode::OK, &obj))
}

async fn list(
    ctx: &Ctx,
    def: &'static Resource,
    ns: &str,
    headers: &HeaderMap,
    query: &Query,
) -> Result<Response<Body>, ApiError> {
    let filter = Filter::from_query(def, query)?;
    let table = wants_table(headers);
    if let Some(page) = registry::list_cached(ctx, def, ns, query, &filter).await? {
        if table {
            let objects: Vec<Value> = page
                .items
                .iter()
                .filter_map(|o| serde_json::from_slice(o).ok())
                .collect();
            return Ok(json_response(
                StatusCode::OK,
                &table::render(def, &objects, Some(page.meta), query),
            ));
        }
        return Ok(raw_list(def, page));
    }
    if filter.is_empty() && !table {
        // Nothing to look at inside the objects: send the stored bytes as they are.
        return Ok(raw_list(def, registry::list_stored(ctx, def, ns, query).await?));
    }
    let page = registry::list(ctx, def, ns, query, &filter).await?;
    if table {
        return Ok(json_response(
            StatusCode::OK,
            &table::render(def, &page.items, Some(page.meta), query),
        ));
    }
    Ok(json_response(StatusCode::OK, &list_of(def, page)))
}

async fn create(
    ctx: &Ctx,
    def: &Resource,
    ns: &str,
    query: &Query,
    body: Bytes,
) -> Result<Response<Body>, ApiError> {
    let obj = registry::decode_body(def, &body)?;
    ctx.audit.object_decoded(&obj);
    let query = &query
        .clone()
        .with_duplicate_fields(registry::duplicate_fields(&body));
    written(registry::create(ctx, def, ns, obj, query).await?)
}

async fn update(
    ctx: &Ctx,
    def: &Resource,
    ns: &str,
    name: &str,
    query: &Query,
    body: Bytes,
) -> Result<Response<Body>, ApiError> {
    let obj = registry::decode_body(def, &body)?;
    ctx.audit.object_decoded(&obj);
    let query = &query
        .clone()
        .with_duplicate_fields(registry::duplicate_fields(&body));
    written(registry::update(ctx, def, ns, name, obj, query).await?)
}

/// A subresource: the status, scale, finalize, approval and resize views of an object, or a
/// connection (binding, the kubelet's log and proxies, a ServiceAccount's token).
#[allow(clippy::too_many_arguments)]
async fn subresource(
    ctx: &Ctx,
    def: &Resource,
    ns: &str,
    name: &str,
    sub: &str,
    method: &Method,
    headers: &HeaderMap,
    query: &Query,
    body: Bytes,
) -> Result<Response<Body>, ApiError> {
    let not_allowed =
        || ApiError::method_not_allowed(method.as_str(), &format!("{}/{sub}", def.group_resource()));
    let Some(view) = View::of(sub) else {
        return match (def.strategy.connect(sub), method) {
            (Some(Connect::Binding), &Method::POST) => Ok(json_response(
                StatusCode::CREATED,
                &registry::subresource::bind(ctx, def, ns, name, query, body).await?,
            )),
            (Some(Connect::NodeProxy), &Method::GET) => {
                let rest = ctx.info.parts.get(3..).map(|p| p.join("/")).unwrap_or_default();
                kubelet::node_proxy(ctx, name, &rest, ctx.query.as_deref()).await
            }
            (Some(Connect::PodProxy), _) => kubelet::pod_proxy(ctx, ns, name, method, headers, body).await,
            (Some(Connect::ServiceProxy), _) => {
                kubelet::service_proxy(ctx, ns, name, method, headers, body).await
            }
            (Some(Connect::PodLog), &Method::GET) => kubelet::pod_log(ctx, ns, name, query).await,
            (Some(Connect::Eviction), &Method::POST) => Ok(json_response(
                StatusCode::CREATED,
                &registry::disruption::evict(ctx, def, ns, name, query, body).await?,
            )),
            (Some(Connect::Token), &Method::POST) => Ok(json_response(
                StatusCode::CREATED,
                &registry::token_request::create(ctx, def, ns, name, query, body).await?,
            )),
            _ => Err(not_allowed()),
        };
    };
    // As upstream's handlers: a Table (the resource's columns for its status, the Scale's
    // own for scale — `kubectl get --subresource`) or the metadata alone when asked.
    let shape = match (wants_partial(headers), wants_table(headers)) {
        (Some(Partial::List), _) => {
            return Err(ApiError::new(
                406,
                "NotAcceptable",
                format!(
                "you requested PartialObjectMetadataList, but the requested object is not a list (*{}.{})",
                if view == View::Scale {
                    "autoscaling"
                } else {
                    internal_package(def)
                },
                if view == View::Scale { "Scale" } else { def.kind }
            ),
            ))
        }
        (Some(Partial::One), _) => Shape::Partial,
        (None, true) => Shape::Table,
        (None, false) => Shape::Object,
    };
    let resp = match *method {
        Method::GET => Ok(json_response(
            StatusCode::OK,
            &registry::subresource::get(ctx, def, ns, name, view).await?,
        )),
        // (Only namespaces serve `finalize`.)
        Method::PUT => Ok(json_response(
            StatusCode::OK,
            &registry::subresource::put(ctx, def, ns, name, view, query, &body).await?,
        )),
        Method::PATCH if view != View::Finalize => {
            written(registry::patch::patch(ctx, def, ns, name, view, headers, query, body).await?)
        }
        _ => Err(not_allowed()),
    };
    if view == View::Scale && shape == Shape::Table {
        let resp = resp?;
        let (parts, body) = resp.into_parts();
        let bytes = http_body_util::BodyExt::collect(body)
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let obj: Value = serde_json::from_slice(&bytes).unwrap_or_default();
        return Ok(json_response(parts.status, &table::render_scale(&obj, query)));
    }
    shaped(def, query, shape, resp).await
}
