//! `MutatingAdmissionWebhook` and `ValidatingAdmissionWebhook` (upstream's admission plugins of
//! those names, on by default): the webhooks of MutatingWebhookConfigurations and
//! ValidatingWebhookConfigurations (`admissionregistration.k8s.io/v1`) are called over HTTPS
//! with an AdmissionReview for each request their rules, namespace selector and object
//! selector match. Mutating webhooks run one after another, configurations in name order, and
//! may answer with a JSON patch; validating webhooks run side by side and may only refuse.
//!
//! `clientConfig.url` is dialled as given; `clientConfig.service` is resolved to the Service's
//! cluster IP and port (as upstream's cluster-IP resolver does) with `name.namespace.svc` as the
//! name its certificate must carry, which works only where this process can reach cluster IPs.

pub(crate) mod client;
pub(crate) mod matching;
mod review;
pub(crate) mod source;

use crate::registry::Resource;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use r8s_store::Store;
use serde_json::Value;

use self::matching::{Invocation, RequestAttrs};
use self::source::{Hook, Source};
use super::{Attributes, MutatingPlugin, Operation, ValidatingPlugin};
use crate::registry::meta;
use crate::request_info::RequestInfo;
use crate::status::ApiError;

/// Why a call brought no usable answer.
enum CallError {
    /// The webhook could not be called or answered nonsense (`ErrCallingWebhook`): the
    /// failure policy decides. The text is the whole `failed calling webhook "..."` message.
    Calling(String),
    /// A refusal or an error that fails the request whatever the failure policy.
    Status(ApiError),
}

/// The request as webhooks see it.
struct RequestView<'a> {
    def: &'static Resource,
    attrs: RequestAttrs<'a>,
    name: String,
}

fn operation(op: Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

impl<'a> RequestView<'a> {
    /// `None` for requests webhooks never see: non-resource requests and the webhook
    /// configurations themselves (as upstream exempts them, so a broken webhook cannot lock
    /// out its own repair).
    fn of(r: &'a RequestInfo, object: Option<&Value>, op: Operation) -> Option<Self> {
        if r.api_group == "admissionregistration.k8s.io" && r.resource.ends_with("webhookconfigurations") {
            return None;
        }
        let def = crate::registry::catalogue::builtin(&r.api_group, &r.api_version, &r.resource)
            .or_else(|| crate::registry::custom::find_made(&r.api_group, &r.api_version, &r.resource))?;
        let name = if r.name.is_empty() {
            object.map(|o| meta::name(o).to_owned()).unwrap_or_default()
        } else {
            r.name.clone()
        };
        Some(Self {
            def,
            attrs: RequestAttrs {
                operation: operation(op),
                group: &r.api_group,
                version: &r.api_version,
                resource: &r.resource,
                subresource: &r.subresource,
                namespace: &r.namespace,
            },
            name,
        })
    }
}

/// What webhook calls share: the datastore, for namespaces and services, and the server's
/// authorizers, for the match conditions' `authorizer`.
struct Dispatcher {
    source: Source,
    listers: super::listers::Listers,
    authorizers: Option<crate::authz::AuthorizerChain>,
}

/// Namespace labels, looked up once per request and only when a selector needs them.
#[derive(Default)]
struct NamespaceLabels(Option<Result<BTreeMap<String, String>, ApiError>>);

impl Dispatcher {
    async fn namespace_labels(
        &self,
        cache: &mut NamespaceLabels,
        view: &RequestView<'_>,
        a: &Attributes<'_>,
    ) -> Result<BTreeMap<String, String>, ApiError> {
        // A namespace being created or updated is matched by its new labels.
        if view.attrs.resource == "namespaces"
            && view.attrs.subresource.is_empty()
            && matches!(a.operation, Operation::Create | Operation::Update)
        {
            return Ok(a.object.as_deref().map(meta::labels).unwrap_or_default());
        }
        if cache.0.is_none() {
            let ns = view.attrs.namespace;
            let ns_def = crate::registry::catalogue::builtin("", "v1", "namespaces")
                .expect("namespaces are in the catalogue");
            let got = self.listers.namespace(ns).await.and_then(|found| {
                let obj = found.ok_or_else(|| crate::registry::not_found(ns_def, ns))?;
                Ok(meta::labels(&obj))
            });
            cache.0 = Some(got);
        }
        cache.0.clone().expect("just filled")
    }

    /// Upstream's `ShouldCallHook`: the resource to call `hook` for, or `None`.
    async fn should_call(
        &self,
        hook: &Hook,
        view: &RequestView<'_>,
        a: &Attributes<'_>,
        ns_cache: &mut NamespaceLabels,
    ) -> Result<Option<Invocation>, ApiError> {
        let Some(inv) = matching::match_rules(hook, view.def, &view.attrs) else {
            return Ok(None);
        };
        if matching::needs_namespace_labels(hook, &view.attrs) {
            let sel = hook
                .namespace_selector
                .as_ref()
                .map_err(|e| ApiError::internal(e.clone()))?;
            let labels = self.namespace_labels(ns_cache, view, a).await?;
            if !sel.matches(&labels) {
                return Ok(None);
            }
        }
        let obj_labels = a.object.as_deref().map(meta::labels);
        let old_labels = a.old_object.map(meta::labels);
        if !matching::object_selector_matches(hook, obj_labels.as_ref(), old_labels.as_ref())
            .map_err(ApiError::internal)?
        {
            return Ok(None);
        }
        if !hook.match_conditions.is_empty() {
            let name = a.object.as_deref().or(a.old_object).map(meta::name).unwrap_or("");
            let session = Arc::new(crate::cel::authz::Session::default());
            let mut vars = vec![
                (
                    "object",
                    crate::cel::value(a.object.as_deref().unwrap_or(&Value::Null)),
                ),
                (
                    "oldObject",
                    crate::cel::value(a.old_object.unwrap_or(&Value::Null)),
                ),
                (
                    "request",
                    crate::cel::value(&super::policy::request_value(a, name)),
                ),
            ];
            vars.extend(crate::cel::authz::variables(a.user, a.request, &session));
            // Each condition's cost is charged before it runs (`crate::cel::cost`).
            let mut left = crate::cel::cost::MATCH_CONDITIONS_BUDGET;
            for (cname, cond) in &hook.match_conditions {
                let result = match cond.charge(&vars, &mut left) {
                    Ok(()) => {
                        crate::cel::authz::eval_bool(cond, &vars, &session, self.authorizers.as_ref()).await
                    }
                    Err(e) => Err(e.to_string()),
                };
                match result {
                    Ok(true) => {}
                    Ok(false) => return Ok(None),
                    Err(_) if hook.fail_open => return Ok(None),
                    Err(e) => {
                        return Err(ApiError::internal(format!(
                            "failed calling webhook {:?}: failed to evaluate match condition {cname:?}: {e}",
                            hook.name
                        )))
                    }
                }
            }
        }
        Ok(Some(inv))
    }

    /// Where `hook` is reached.
    async fn endpoint(&self, hook: &Hook) -> Result<client::Endpoint, String> {
        if let Some(url) = &hook.url {
            return client::Endpoint::from_url(url, hook.timeout);
        }
        let Some(svc) = &hook.service else {
            return Err("webhook has no clientConfig url or service".into());
        };
        let obj = match self
            .listers
            .service(&svc.namespace, &svc.name)
            .await
            .map_err(|e| e.message)?
        {
            Some(obj) => obj,
            None => return Err(format!("service \"{}/{}\" not found", svc.namespace, svc.name)),
        };
        let ip = obj["spec"]["clusterIP"].as_str().unwrap_or("");
        if ip.is_empty() || ip == "None" {
            return Err(format!(
                "service \"{}/{}\" has no cluster IP",
                svc.namespace, svc.name
            ));
        }
        Ok(client::service_endpoint(
            ip,
            &svc.namespace,
            &svc.name,
            &svc.path,
            svc.port,
            hook.timeout,
        ))
    }

    /// Send `hook` the review of the request `a` (`object`: the new object already in the
    /// version the hook asked for) and verify the answer.
    #[allow(clippy::too_many_arguments)]
    async fn review(
        &self,
        hook: &Hook,
        mutating: bool,
        version: &str,
        view: &RequestView<'_>,
        inv: &Invocation,
        a: &Attributes<'_>,
        object: Option<&Value>,
    ) -> Result<review::Answer, (CallStage, String)> {
        let old_object = a.old_object.map(|o| versioned(view, inv, o));
        let uid = uuid::Uuid::new_v4().to_string();
        let (kg, kv, kk) = matching::kind_of(inv.def, view.attrs.subresource);
        let (rg, rv, rk) = matching::kind_of(view.def, view.attrs.subresource);
        let req = review::ReviewRequest {
            uid: &uid,
            kind: (&kg, &kv, &kk),
            resource: invocation_resource(inv),
            subresource: view.attrs.subresource,
            request_kind: (&rg, &rv, &rk),
            request_resource: (view.def.group, view.def.version, view.def.plural),
            name: &view.name,
            namespace: view.attrs.namespace,
            operation: view.attrs.operation,
            user: a.user,
            object,
            old_object: old_object.as_ref(),
            dry_run: a.dry_run,
            options: a.options,
        };
        self.call(hook, mutating, &req, version).await
    }

    /// Send the review for `hook` and verify the answer. Errors are the reason alone (the
    /// caller words them as its upstream dispatcher does).
    async fn call(
        &self,
        hook: &Hook,
        mutating: bool,
        req: &review::ReviewRequest<'_>,
        version: &str,
    ) -> Result<review::Answer, (CallStage, String)> {
        let tls = hook.tls.clone().map_err(|e| (CallStage::Client, e))?;
        let ep = self.endpoint(hook).await.map_err(|e| (CallStage::Client, e))?;
        let body = serde_json::to_vec(&review::build(version, req))
            .map_err(|e| (CallStage::Client, e.to_string()))?;
        let (code, bytes) = client::post(&ep, tls, body, hook.timeout)
            .await
            .map_err(|e| (CallStage::Call, e))?;
        if !(200..300).contains(&code) {
            return Err((CallStage::Call, server_error(code, &bytes)));
        }
        let answer: Value = serde_json::from_slice(&bytes).map_err(|e| {
            (
                CallStage::Call,
                format!("couldn't get version/kind; json parse error: {e}"),
            )
        })?;
        review::verify(req.uid, version, mutating, &answer).map_err(|e| (CallStage::Verify, e))
    }
}

/// Where a call failed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum CallStage {
    /// Before anything was sent (no client could be made).
    Client,
    /// Sending or reading the answer.
    Call,
    /// The answer is not a proper AdmissionReview response.
    Verify,
}

/// A non-2xx answer as client-go words it.
fn server_error(code: u16, body: &[u8]) -> String {
    if let Ok(status) = serde_json::from_slice::<Value>(body) {
        if status["kind"] == "Status" {
            if let Some(m) = status["message"].as_str().filter(|m| !m.is_empty()) {
                return m.to_owned();
            }
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match code {
        404 => "the server could not find the requested resource".to_owned(),
        500 if !text.is_empty() => {
            format!("an error on the server ({text:?}) has prevented the request from succeeding")
        }
        503 => "the server is currently unable to handle the request".to_owned(),
        _ if !text.is_empty() => format!("the server responded with the status code {code}: {text:?}"),
        _ => format!("the server responded with the status code {code} but did not return more information"),
    }
}

/// A webhook's warning as a header can carry it: control characters become spaces.
fn printable(w: &str) -> String {
    w.chars().map(|c| if c.is_control() { ' ' } else { c }).collect()
}

/// Upstream's dry-run rule: only webhooks without side effects (`None`, `NoneOnDryRun`) may see
/// a dry run; calling any other fails the request.
fn check_dry_run(hook: &Hook, dry_run: bool) -> Result<(), CallError> {
    if !dry_run {
        return Ok(());
    }
    match hook.side_effects.as_deref() {
        None => Err(CallError::Calling(format!(
            "failed calling webhook {:?}: Webhook SideEffects is nil",
            hook.name
        ))),
        Some("None" | "NoneOnDryRun") => Ok(()),
        Some(_) => Err(CallError::Status(review::dry_run_unsupported(&hook.name))),
    }
}

/// `obj` (of `from`) as an object of `to`, through the stored form they share.
fn convert(from: &Resource, to: &Resource, obj: &Value) -> Value {
    crate::registry::convert::from_storage(to, crate::registry::convert::to_storage(from, obj.clone()))
}

/// The object a webhook sees for `inv`: converted to an equivalent version, or as the
/// subresource's kind (a Scale for `scale`).
fn versioned(view: &RequestView<'_>, inv: &Invocation, obj: &Value) -> Value {
    if view.attrs.subresource == "scale" {
        return crate::registry::subresource::View::project(
            crate::registry::subresource::View::Scale,
            view.def,
            obj,
        );
    }
    if inv.converted {
        convert(view.def, inv.def, obj)
    } else {
        obj.clone()
    }
}

fn invocation_resource(inv: &Invocation) -> (&'static str, &'static str, &'static str) {
    (inv.def.group, inv.def.version, inv.def.plural)
}

/// The MutatingAdmissionWebhook plugin.
pub struct MutatingWebhook {
    d: Dispatcher,
}

impl MutatingWebhook {
    /// Start following the MutatingWebhookConfigurations in `store`; `authorizers` answer
    /// the match conditions' `authorizer` (without, its checks are errors).
    pub fn start(store: Arc<dyn Store>, authorizers: Option<crate::authz::AuthorizerChain>) -> Self {
        let source = Source::start(
            store.clone(),
            &["/registry/mutatingwebhookconfigurations/"],
            "MutatingAdmissionWebhook",
        );
        Self {
            d: Dispatcher {
                source,
                listers: super::listers::Listers::new(store),
                authorizers,
            },
        }
    }

    /// Call one mutating webhook and apply its patch; whether the object changed.
    async fn call_hook(
        &self,
        hook: &Hook,
        view: &RequestView<'_>,
        inv: &Invocation,
        a: &mut Attributes<'_>,
    ) -> Result<bool, CallError> {
        check_dry_run(hook, a.dry_run)?;
        let calling =
            |why: String| CallError::Calling(format!("failed calling webhook {:?}: {why}", hook.name));
        let Some(version) = review::review_version(&hook.review_versions) else {
            return Err(calling(
                "could not create admission objects: webhook does not accept known AdmissionReview versions (v1, v1beta1)".into(),
            ));
        };
        let object = a.object.as_deref().map(|o| versioned(view, inv, o));
        let answer = match self
            .d
            .review(hook, true, version, view, inv, a, object.as_ref())
            .await
        {
            Ok(answer) => answer,
            Err((CallStage::Client, e)) => return Err(calling(format!("could not get REST client: {e}"))),
            Err((CallStage::Call, e)) => return Err(calling(format!("failed to call webhook: {e}"))),
            Err((CallStage::Verify, e)) => {
                return Err(calling(format!("received invalid webhook response: {e}")))
            }
        };
        for w in &answer.warnings {
            a.warnings.add(printable(w));
        }
        if !answer.allowed {
            return Err(CallError::Status(review::denied(
                &hook.name,
                answer.result.as_ref(),
            )));
        }
        if answer.patch.is_empty() {
            return Ok(false);
        }
        let patch: json_patch::Patch = serde_json::from_slice(&answer.patch)
            .map_err(|e| calling(format!("received undecodable patch in webhook response: {e}")))?;
        if patch.0.is_empty() {
            return Ok(false);
        }
        let (Some(mut patched), Some(target)) = (object, a.object.as_deref_mut()) else {
            return Err(CallError::Status(ApiError::internal(format!(
                "admission webhook {:?} attempted to modify the object, which is not supported for this operation",
                hook.name
            ))));
        };
        if answer.patch_type != "JSONPatch" {
            return Err(calling(format!("unsupported patch type {:?}", answer.patch_type)));
        }
        json_patch::patch(&mut patched, &patch)
            .map_err(|e| CallError::Status(ApiError::internal(e.to_string())))?;
        let mut updated = if view.attrs.subresource == "scale" {
            // Only the Scale's replicas flow back into the object.
            let mut full = target.clone();
            full["spec"]["replicas"] = patched["spec"]["replicas"].clone();
            full
        } else if inv.converted {
            convert(inv.def, view.def, &patched)
        } else {
            patched
        };
        // What the webhook wrote is read back as the resource's type (unknown fields dropped;
        // a custom resource's pruned to its schema).
        match view.def.custom() {
            Some(s) => {
                s.prune(&mut updated);
            }
            None => {
                if let Ok(decoded) = r8s_api::typed::decode(view.def, &updated) {
                    updated = decoded.object;
                }
            }
        }
        let changed = updated != *target;
        *target = updated;
        Ok(changed)
    }
}

#[async_trait]
impl MutatingPlugin for MutatingWebhook {
    fn name(&self) -> &'static str {
        "MutatingAdmissionWebhook"
    }

    async fn admit(&self, a: &mut Attributes<'_>) -> Result<(), ApiError> {
        let info = a.request;
        let hooks = self.d.source.hooks().await;
        // No webhooks (the common case): nothing to look up for the request.
        if hooks.as_ref().is_some_and(|h| h.is_empty()) {
            return Ok(());
        }
        let Some(view) = RequestView::of(info, a.object.as_deref(), a.operation) else {
            return Ok(());
        };
        let Some(hooks) = hooks else {
            return Err(ApiError::forbidden("not yet ready to handle request"));
        };
        let original = a.object.as_deref().cloned();
        let mut ns_cache = NamespaceLabels::default();
        // Webhooks with `reinvocationPolicy: IfNeeded` already called, and those to call again
        // because a later webhook changed the object (upstream's reinvocation context).
        let mut reinvocable: Vec<usize> = Vec::new();
        let mut reinvoke: HashSet<usize> = HashSet::new();
        for round in 0..2 {
            if round == 1 && reinvoke.is_empty() {
                break;
            }
            for (i, hook) in hooks.iter().enumerate() {
                if round == 1 && !reinvoke.contains(&i) {
                    continue;
                }
                let Some(inv) = self.d.should_call(hook, &view, a, &mut ns_cache).await? else {
                    continue;
                };
                let result = self.call_hook(hook, &view, &inv, a).await;
                if matches!(result, Ok(true)) {
                    reinvoke.extend(reinvocable.drain(..));
                }
                if hook.reinvoke && round == 0 {
                    reinvocable.push(i);
                }
                match result {
                    Ok(_) => {}
                    Err(CallError::Calling(msg)) if hook.fail_open => {
                        tracing::warn!(webhook = %hook.name, configuration = %hook.configuration, error = %msg, "failed calling webhook, failing open");
                    }
                    Err(CallError::Calling(msg)) => {
                        tracing::warn!(webhook = %hook.name, configuration = %hook.configuration, error = %msg, "failed calling webhook, failing closed");
                        return Err(ApiError::internal(msg));
                    }
                    Err(CallError::Status(e)) => return Err(e),
                }
            }
        }
        // A changed object is defaulted and validated again, as upstream validates after
        // mutating admission.
        if let (Some(obj), Some(before)) = (a.object.as_deref_mut(), original) {
            if *obj != before {
                crate::registry::strategy::default(view.def, obj);
                let mut errs = crate::registry::strategy::validate(view.def, obj);
                if let Some(old) = a.old_object {
                    errs.extend(crate::registry::strategy::validate_update(view.def, obj, old));
                }
                if !errs.is_empty() {
                    return Err(crate::registry::invalid(view.def, meta::name(obj), &errs));
                }
            }
        }
        Ok(())
    }
}

/// The ValidatingAdmissionWebhook plugin.
pub struct ValidatingWebhook {
    d: Dispatcher,
}

impl ValidatingWebhook {
    /// Start following the ValidatingWebhookConfigurations in `store`; `authorizers` answer
    /// the match conditions' `authorizer` (without, its checks are errors).
    pub fn start(store: Arc<dyn Store>, authorizers: Option<crate::authz::AuthorizerChain>) -> Self {
        let source = Source::start(
            store.clone(),
            &["/registry/validatingwebhookconfigurations/"],
            "ValidatingAdmissionWebhook",
        );
        Self {
            d: Dispatcher {
                source,
                listers: super::listers::Listers::new(store),
                authorizers,
            },
        }
    }

    async fn call_hook(
        &self,
        hook: &Hook,
        view: &RequestView<'_>,
        inv: &Invocation,
        a: &Attributes<'_>,
    ) -> Result<(), CallError> {
        check_dry_run(hook, a.dry_run)?;
        let calling =
            |why: String| CallError::Calling(format!("failed calling webhook {:?}: {why}", hook.name));
        let Some(version) = review::review_version(&hook.review_versions) else {
            return Err(calling(
                "webhook does not accept known AdmissionReview versions (v1, v1beta1)".into(),
            ));
        };
        let object = a.object.as_deref().map(|o| versioned(view, inv, o));
        let answer = self
            .d
            .review(hook, false, version, view, inv, a, object.as_ref())
            .await
            .map_err(|(_, e)| calling(e))?;
        for w in &answer.warnings {
            a.warnings.add(printable(w));
        }
        if answer.allowed {
            Ok(())
        } else {
            Err(CallError::Status(review::denied(
                &hook.name,
                answer.result.as_ref(),
            )))
        }
    }
}

#[async_trait]
impl ValidatingPlugin for ValidatingWebhook {
    fn name(&self) -> &'static str {
        "ValidatingAdmissionWebhook"
    }

    async fn validate(&self, a: &Attributes<'_>) -> Result<(), ApiError> {
        let hooks = self.d.source.hooks().await;
        if hooks.as_ref().is_some_and(|h| h.is_empty()) {
            return Ok(());
        }
        let Some(view) = RequestView::of(a.request, a.object.as_deref(), a.operation) else {
            return Ok(());
        };
        let Some(hooks) = hooks else {
            return Err(ApiError::forbidden("not yet ready to handle request"));
        };
        let mut ns_cache = NamespaceLabels::default();
        let mut relevant = Vec::new();
        for hook in hooks.iter() {
            if let Some(inv) = self.d.should_call(hook, &view, a, &mut ns_cache).await? {
                relevant.push((hook.clone(), inv));
            }
        }
        // The relevant webhooks are called side by side; the first refusal (in webhook order)
        // is the answer.
        let calls = relevant
            .iter()
            .map(|(hook, inv)| self.call_hook(hook, &view, inv, a));
        let results = futures_util::future::join_all(calls).await;
        for ((hook, _), result) in relevant.iter().zip(results) {
            match result {
                Ok(()) => {}
                Err(CallError::Calling(msg)) if hook.fail_open => {
                    tracing::warn!(webhook = %hook.name, configuration = %hook.configuration, error = %msg, "failed calling webhook, failing open");
                }
                Err(CallError::Calling(msg)) => {
                    tracing::warn!(webhook = %hook.name, configuration = %hook.configuration, error = %msg, "failed calling webhook, failing closed");
                    return Err(ApiError::internal(msg));
                }
                Err(CallError::Status(e)) => return Err(e),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request_info::parse_request;
    use serde_json::json;

    fn hook(side_effects: Option<&str>) -> Hook {
        let mut h = json!({"name": "h.example.com"});
        if let Some(s) = side_effects {
            h["sideEffects"] = json!(s);
        }
        Hook::parse("c", &h)
    }

    #[test]
    fn dry_runs_reach_only_webhooks_without_side_effects() {
        assert!(check_dry_run(&hook(Some("Some")), false).is_ok());
        assert!(check_dry_run(&hook(Some("None")), true).is_ok());
        assert!(check_dry_run(&hook(Some("NoneOnDryRun")), true).is_ok());
        match check_dry_run(&hook(Some("Unknown")), true) {
            Err(CallError::Status(e)) => assert_eq!(
                (e.code, e.message.as_str()),
                (
                    400,
                    "admission webhook \"h.example.com\" does not support dry run"
                )
            ),
            _ => panic!("a dry run must not reach a webhook with side effects"),
        }
        assert!(
            matches!(check_dry_run(&hook(None), true), Err(CallError::Calling(m)) if m.ends_with("Webhook SideEffects is nil"))
        );
    }

    #[test]
    fn requests_as_webhooks_see_them() {
        let info = parse_request(&http::Method::POST, "/api/v1/namespaces/default/pods", None);
        let pod = json!({"metadata": {"name": "p"}});
        let view = RequestView::of(&info, Some(&pod), Operation::Create).unwrap();
        assert_eq!(
            (view.name.as_str(), view.attrs.operation, view.attrs.namespace),
            ("p", "CREATE", "default")
        );
        let cfg = parse_request(
            &http::Method::POST,
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            None,
        );
        assert!(
            RequestView::of(&cfg, None, Operation::Create).is_none(),
            "configurations are exempt"
        );

        // A scale request shows the webhook a Scale.
        let info = parse_request(
            &http::Method::PUT,
            "/apis/apps/v1/namespaces/ns/deployments/web/scale",
            None,
        );
        let view = RequestView::of(&info, None, Operation::Update).unwrap();
        let d = json!({"metadata": {"name": "web", "namespace": "ns"}, "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}}});
        let inv = Invocation {
            def: view.def,
            converted: false,
        };
        let scale = versioned(&view, &inv, &d);
        assert_eq!(
            (scale["kind"].as_str(), scale["spec"]["replicas"].as_i64()),
            (Some("Scale"), Some(3))
        );

        // Under matchPolicy Equivalent a core Event is shown as an events.k8s.io one.
        let info = parse_request(&http::Method::POST, "/api/v1/namespaces/ns/events", None);
        let view = RequestView::of(&info, None, Operation::Create).unwrap();
        let ev = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"}, "message": "hi", "involvedObject": {"name": "p"}});
        let inv = Invocation {
            def: crate::registry::catalogue::builtin("events.k8s.io", "v1", "events").unwrap(),
            converted: true,
        };
        let shown = versioned(&view, &inv, &ev);
        assert_eq!(
            (shown["apiVersion"].as_str(), shown["note"].as_str()),
            (Some("events.k8s.io/v1"), Some("hi"))
        );
        assert_eq!(convert(inv.def, view.def, &shown), ev);
    }

    #[test]
    fn failed_answers_and_warnings_in_words() {
        assert_eq!(
            server_error(500, b"boom"),
            "an error on the server (\"boom\") has prevented the request from succeeding"
        );
        assert_eq!(
            server_error(404, b""),
            "the server could not find the requested resource"
        );
        assert_eq!(
            server_error(418, b""),
            "the server responded with the status code 418 but did not return more information"
        );
        assert_eq!(
            server_error(403, br#"{"kind":"Status","message":"go away"}"#),
            "go away"
        );
        assert_eq!(printable("two\nlines"), "two lines");
    }
}
