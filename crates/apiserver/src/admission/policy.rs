//! The ValidatingAdmissionPolicy plugin (admissionregistration.k8s.io/v1): policies of CEL
//! validations bound to the requests their bindings select, evaluated in the server with
//! `object`, `oldObject`, `params`, `namespaceObject`, `request` and `variables` (upstream's
//! `plugin/policy/validating`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use r8s_api::selector::{from_label_selector, Selector};
use r8s_store::Store;
use serde_json::{json, Value};
use tokio::sync::watch;

use super::webhook::matching::{rule_matches, RequestAttrs};
use super::webhook::source::Rule;
use super::{Attributes, Operation, ValidatingPlugin};
use crate::authz::AuthorizerChain;
use crate::cel::{self, authz, Expr};
use crate::follow::{self, Change};
use crate::status::ApiError;

/// A policy's match constraints or a binding's match resources.
struct Matcher {
    rules: Vec<(Rule, Vec<String>)>,
    exclude: Vec<(Rule, Vec<String>)>,
    namespace_selector: Result<Selector, String>,
    object_selector: Result<Selector, String>,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

fn selector(v: &Value) -> Result<Selector, String> {
    if v.is_null() {
        return Ok(Selector::default());
    }
    from_label_selector(v)
}

impl Matcher {
    fn parse(v: &Value) -> Self {
        let rules = |v: &Value| {
            v.as_array()
                .into_iter()
                .flatten()
                .map(|r| {
                    (
                        Rule {
                            operations: strings(&r["operations"]),
                            api_groups: strings(&r["apiGroups"]),
                            api_versions: strings(&r["apiVersions"]),
                            resources: strings(&r["resources"]),
                            scope: r["scope"].as_str().unwrap_or("*").to_owned(),
                        },
                        strings(&r["resourceNames"]),
                    )
                })
                .collect()
        };
        Self {
            rules: rules(&v["resourceRules"]),
            exclude: rules(&v["excludeResourceRules"]),
            namespace_selector: selector(&v["namespaceSelector"]),
            object_selector: selector(&v["objectSelector"]),
        }
    }

    fn rule_hits(rules: &[(Rule, Vec<String>)], r: &RequestAttrs<'_>, name: &str) -> bool {
        rules.iter().any(|(rule, names)| {
            rule_matches(rule, r) && (names.is_empty() || names.iter().any(|n| n == name))
        })
    }

    /// Whether the request matches; `all_if_no_rules`: a binding without resource rules
    /// selects everything its policy does.
    fn matches(&self, req: &Request<'_>, all_if_no_rules: bool) -> Result<bool, String> {
        let hit = if self.rules.is_empty() {
            all_if_no_rules
        } else {
            Self::rule_hits(&self.rules, &req.attrs, req.name)
        };
        if !hit || Self::rule_hits(&self.exclude, &req.attrs, req.name) {
            return Ok(false);
        }
        let ns_sel = self.namespace_selector.as_ref().map_err(Clone::clone)?;
        if !ns_sel.is_empty() && (!req.attrs.namespace.is_empty() || req.attrs.resource == "namespaces") {
            let labels = req.namespace_labels();
            if !ns_sel.matches(&labels) {
                return Ok(false);
            }
        }
        let obj_sel = self.object_selector.as_ref().map_err(Clone::clone)?;
        if !obj_sel.is_empty() {
            let labels = |o: Option<&Value>| -> Option<BTreeMap<String, String>> {
                let m = o?.get("metadata")?.get("labels")?.as_object()?;
                Some(
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
                        .collect(),
                )
            };
            let empty = BTreeMap::new();
            let new = labels(req.object);
            let old = labels(req.old_object);
            let any = new.as_ref().is_some_and(|l| obj_sel.matches(l))
                || old.as_ref().is_some_and(|l| obj_sel.matches(l));
            let neither = new.is_none() && old.is_none() && obj_sel.matches(&empty);
            if !(any || neither) {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// A mutation of a MutatingAdmissionPolicy, compiled (`cel::mutation`).
struct Mutation {
    /// JSONPatch (a list of operations) rather than ApplyConfiguration (an object merged in).
    json_patch: bool,
    expression: Expr,
}

/// A validation of a policy, compiled.
struct Validation {
    expression: Expr,
    message: Option<String>,
    message_expression: Option<Expr>,
    reason: String,
}

/// A compiled policy.
struct Policy {
    name: String,
    matcher: Matcher,
    match_conditions: Vec<(String, Expr)>,
    variables: Vec<(String, Expr)>,
    validations: Vec<Validation>,
    /// A MutatingAdmissionPolicy's mutations, in order.
    mutations: Vec<Mutation>,
    /// `reinvocationPolicy: IfNeeded`: run again when a later plugin changed the object.
    reinvoke: bool,
    fail_open: bool,
    /// `apiVersion` and `kind` of its parameters.
    param_kind: Option<(String, String)>,
}

impl Policy {
    fn parse(v: &Value) -> Self {
        let spec = &v["spec"];
        let named = |list: &Value| -> Vec<(String, Expr)> {
            list.as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    (
                        c["name"].as_str().unwrap_or("").to_owned(),
                        Expr::compile(c["expression"].as_str().unwrap_or("")),
                    )
                })
                .collect()
        };
        Self {
            name: v["metadata"]["name"].as_str().unwrap_or("").to_owned(),
            matcher: Matcher::parse(&spec["matchConstraints"]),
            match_conditions: named(&spec["matchConditions"]),
            variables: named(&spec["variables"]),
            validations: spec["validations"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|val| Validation {
                    expression: Expr::compile(val["expression"].as_str().unwrap_or("")),
                    message: val["message"]
                        .as_str()
                        .filter(|m| !m.is_empty())
                        .map(str::to_owned),
                    message_expression: val["messageExpression"]
                        .as_str()
                        .filter(|m| !m.is_empty())
                        .map(Expr::compile),
                    reason: val["reason"].as_str().unwrap_or("Invalid").to_owned(),
                })
                .collect(),
            mutations: spec["mutations"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|m| {
                    let json_patch = m["patchType"] == "JSONPatch";
                    let src = if json_patch {
                        &m["jsonPatch"]["expression"]
                    } else {
                        &m["applyConfiguration"]["expression"]
                    };
                    Mutation {
                        json_patch,
                        expression: cel::mutation::compile(src.as_str().unwrap_or("")),
                    }
                })
                .collect(),
            reinvoke: spec["reinvocationPolicy"] == "IfNeeded",
            fail_open: spec["failurePolicy"] == "Ignore",
            param_kind: spec["paramKind"].is_object().then(|| {
                (
                    spec["paramKind"]["apiVersion"].as_str().unwrap_or("").to_owned(),
                    spec["paramKind"]["kind"].as_str().unwrap_or("").to_owned(),
                )
            }),
        }
    }
}

/// A compiled binding.
struct Binding {
    name: String,
    policy: String,
    matcher: Option<Matcher>,
    actions: Vec<String>,
    param_ref: Value,
}

/// Every binding with its policy, in binding name order.
type Compiled = Arc<Vec<(Arc<Binding>, Arc<Policy>)>>;

fn compile(policies: &BTreeMap<String, Value>, bindings: &BTreeMap<String, Value>) -> Compiled {
    let policies: BTreeMap<String, Arc<Policy>> = policies
        .values()
        .map(|p| {
            let p = Policy::parse(p);
            (p.name.clone(), Arc::new(p))
        })
        .collect();
    let mut out = Vec::new();
    for b in bindings.values() {
        let spec = &b["spec"];
        let binding = Binding {
            name: b["metadata"]["name"].as_str().unwrap_or("").to_owned(),
            policy: spec["policyName"].as_str().unwrap_or("").to_owned(),
            matcher: spec["matchResources"]
                .is_object()
                .then(|| Matcher::parse(&spec["matchResources"])),
            actions: strings(&spec["validationActions"]),
            param_ref: spec["paramRef"].clone(),
        };
        if let Some(p) = policies.get(&binding.policy) {
            out.push((Arc::new(binding), p.clone()));
        }
    }
    Arc::new(out)
}

/// What the plugin knows of a request.
struct Request<'a> {
    attrs: RequestAttrs<'a>,
    name: &'a str,
    object: Option<&'a Value>,
    old_object: Option<&'a Value>,
    namespace: Option<Arc<Value>>,
}

impl Request<'_> {
    fn namespace_labels(&self) -> BTreeMap<String, String> {
        let ns = match (&self.namespace, self.attrs.resource) {
            (Some(ns), _) => Some(&**ns),
            (None, "namespaces") => self.object.or(self.old_object),
            _ => None,
        };
        ns.and_then(|n| n["metadata"]["labels"].as_object())
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The ValidatingAdmissionPolicy plugin.
pub struct ValidatingAdmissionPolicy(Policies);

impl ValidatingAdmissionPolicy {
    /// Follow the policies and bindings in `store`. `authorizers`: what the expressions'
    /// `authorizer` variable asks; without, its checks are errors.
    pub fn start(store: Arc<dyn Store>, authorizers: Option<AuthorizerChain>) -> Self {
        Self(Policies::start(store, authorizers, Kind::Validating))
    }
}

/// The MutatingAdmissionPolicy plugin (admissionregistration.k8s.io/v1alpha1, behind the
/// `MutatingAdmissionPolicy` feature gate as upstream's): each mutation of a policy whose
/// binding selects the request patches the object, an apply configuration merged in as a
/// strategic merge patch (upstream applies it with server-side apply's merge: the same for
/// maps and keyed lists) or a JSON patch. A policy with `reinvocationPolicy: IfNeeded` runs
/// once more when a later mutating plugin changed the object.
pub struct MutatingAdmissionPolicy(Policies);

impl MutatingAdmissionPolicy {
    /// As [`ValidatingAdmissionPolicy::start`].
    pub fn start(store: Arc<dyn Store>, authorizers: Option<AuthorizerChain>) -> Self {
        Self(Policies::start(store, authorizers, Kind::Mutating))
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Validating,
    Mutating,
}

/// What both plugins are: the policies and bindings of one kind, followed from the datastore
/// and compiled, evaluated for each request they select.
struct Policies {
    rx: watch::Receiver<Option<Compiled>>,
    store: Arc<dyn Store>,
    listers: super::listers::Listers,
    /// What the expressions' `authorizer` asks (the API server's own authorizers).
    authorizers: Option<AuthorizerChain>,
    kind: Kind,
}

impl Policies {
    fn start(store: Arc<dyn Store>, authorizers: Option<AuthorizerChain>, kind: Kind) -> Self {
        let (tx, rx) = watch::channel(None);
        const VALIDATING: [&str; 2] = [
            "/registry/validatingadmissionpolicies/",
            "/registry/validatingadmissionpolicybindings/",
        ];
        const MUTATING: [&str; 2] = [
            "/registry/mutatingadmissionpolicies/",
            "/registry/mutatingadmissionpolicybindings/",
        ];
        let (prefixes, name): (&'static [&'static str; 2], _) = match kind {
            Kind::Validating => (&VALIDATING, "ValidatingAdmissionPolicy"),
            Kind::Mutating => (&MUTATING, "MutatingAdmissionPolicy"),
        };
        let [policies_prefix, bindings_prefix] = *prefixes;
        let mut policies: BTreeMap<String, Value> = BTreeMap::new();
        let mut bindings: BTreeMap<String, Value> = BTreeMap::new();
        let mut dirty = false;
        follow::spawn(store.clone(), prefixes, name, move |change| match change {
            Change::Reset => {
                policies.clear();
                bindings.clear();
                dirty = true;
            }
            Change::Put(key, json) => {
                if let Ok(obj) = serde_json::from_slice::<Value>(json) {
                    if let Some(name) = key.strip_prefix(bindings_prefix) {
                        bindings.insert(name.to_owned(), obj);
                    } else if let Some(name) = key.strip_prefix(policies_prefix) {
                        policies.insert(name.to_owned(), obj);
                    }
                    dirty = true;
                }
            }
            Change::Delete(key) => {
                if let Some(name) = key.strip_prefix(bindings_prefix) {
                    bindings.remove(name);
                } else if let Some(name) = key.strip_prefix(policies_prefix) {
                    policies.remove(name);
                }
                dirty = true;
            }
            Change::BatchEnd => {
                if dirty {
                    dirty = false;
                    tx.send_replace(Some(compile(&policies, &bindings)));
                }
            }
        });
        Self {
            rx,
            listers: super::listers::Listers::new(store.clone()),
            store,
            authorizers,
            kind,
        }
    }

    async fn compiled(&self) -> Option<Compiled> {
        if let Some(c) = self.rx.borrow().as_ref() {
            return Some(c.clone());
        }
        let mut rx = self.rx.clone();
        let got = tokio::time::timeout(Duration::from_secs(10), rx.wait_for(Option::is_some)).await;
        match got {
            Ok(Ok(c)) => c.clone(),
            _ => None,
        }
    }

    /// The parameter objects a binding names for a policy with `paramKind`.
    async fn params(
        &self,
        kind: &(String, String),
        param_ref: &Value,
        req_ns: &str,
    ) -> Result<Vec<Value>, String> {
        let (api_version, kind) = kind;
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version.as_str()));
        let def = crate::registry::catalogue::builtins()
            .iter()
            .find(|d| d.group == group && d.version == version && d.kind == kind)
            .or_else(|| crate::registry::custom::find_made_kind(group, version, kind))
            .ok_or_else(|| {
                format!("failed to find resource referenced by paramKind: '{api_version}, Kind={kind}'")
            })?;
        let ns = match param_ref["namespace"].as_str() {
            Some(ns) if !ns.is_empty() => ns.to_owned(),
            _ if def.namespaced => req_ns.to_owned(),
            _ => String::new(),
        };
        if let Some(name) = param_ref["name"].as_str().filter(|n| !n.is_empty()) {
            return match crate::registry::system::get(self.store.as_ref(), def, &ns, name).await {
                Ok(p) => Ok(vec![p]),
                Err(e) if e.code == 404 => Ok(Vec::new()),
                Err(e) => Err(e.message),
            };
        }
        let sel = selector(&param_ref["selector"])?;
        let all = crate::registry::system::list(self.store.as_ref(), def, &ns)
            .await
            .map_err(|e| e.message)?;
        Ok(all
            .into_iter()
            .filter(|p| {
                let labels: BTreeMap<String, String> = p["metadata"]["labels"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
                            .collect()
                    })
                    .unwrap_or_default();
                sel.matches(&labels)
            })
            .collect())
    }
}

fn operation(op: Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

/// The `request` variable (the fields upstream's CEL admission request carries).
pub(crate) fn request_value(a: &Attributes<'_>, name: &str) -> Value {
    let r = a.request;
    json!({
        "kind": {"group": r.api_group, "version": r.api_version, "kind": ""},
        "resource": {"group": r.api_group, "version": r.api_version, "resource": r.resource},
        "subResource": r.subresource,
        "name": name,
        "namespace": r.namespace,
        "operation": operation(a.operation),
        "userInfo": {
            "username": a.user.name,
            "uid": a.user.uid,
            "groups": a.user.groups,
            "extra": a.user.extra,
        },
        "dryRun": a.dry_run,
    })
}

/// The HTTP status and reason of a validation's `reason` (upstream's `reasonToCode`).
fn code_of(reason: &str) -> (u16, &'static str) {
    match reason {
        "Unauthorized" => (401, "Unauthorized"),
        "Forbidden" => (403, "Forbidden"),
        "RequestEntityTooLarge" => (413, "RequestEntityTooLarge"),
        _ => (422, "Invalid"),
    }
}

#[async_trait]
impl ValidatingPlugin for ValidatingAdmissionPolicy {
    fn name(&self) -> &'static str {
        "ValidatingAdmissionPolicy"
    }

    async fn validate(&self, a: &Attributes<'_>) -> Result<(), ApiError> {
        self.0.run(a, None, false).await
    }
}

#[async_trait]
impl super::MutatingPlugin for MutatingAdmissionPolicy {
    fn name(&self) -> &'static str {
        "MutatingAdmissionPolicy"
    }

    async fn admit(&self, a: &mut Attributes<'_>) -> Result<(), ApiError> {
        self.mutate(a, false).await
    }

    fn reinvokes(&self) -> bool {
        true
    }

    /// The policies with `reinvocationPolicy: IfNeeded` run again.
    async fn readmit(&self, a: &mut Attributes<'_>) -> Result<(), ApiError> {
        self.mutate(a, true).await
    }
}

impl MutatingAdmissionPolicy {
    async fn mutate(&self, a: &mut Attributes<'_>, again: bool) -> Result<(), ApiError> {
        // Only writes carry an object to mutate.
        let Some(mut object) = a.object.as_deref().cloned() else {
            return Ok(());
        };
        self.0.run(a, Some(&mut object), again).await?;
        if let Some(dst) = a.object.as_deref_mut() {
            *dst = object;
        }
        Ok(())
    }
}

impl Policies {
    /// Evaluate the policies whose bindings select the request: a validating policy's
    /// validations, or a mutating one's mutations of `mutated` (the object as the mutations
    /// before have left it; the request's own object is what the policies are matched with).
    /// `again`: the reinvocation, of the policies that ask for it only.
    async fn run(
        &self,
        a: &Attributes<'_>,
        mut mutated: Option<&mut Value>,
        again: bool,
    ) -> Result<(), ApiError> {
        let Some(compiled) = self.compiled().await else {
            return Ok(());
        };
        if compiled.is_empty() {
            return Ok(());
        }
        let info = a.request;
        let object = a.object.as_deref();
        let name = if info.name.is_empty() {
            object
                .or(a.old_object)
                .and_then(|o| o["metadata"]["name"].as_str())
                .unwrap_or("")
        } else {
            info.name.as_str()
        };
        let ns_obj = if info.namespace.is_empty() {
            None
        } else {
            self.listers.namespace(&info.namespace).await.ok().flatten()
        };
        let req = Request {
            attrs: RequestAttrs {
                operation: operation(a.operation),
                group: &info.api_group,
                version: &info.api_version,
                resource: &info.resource,
                subresource: &info.subresource,
                namespace: &info.namespace,
            },
            name,
            object,
            old_object: a.old_object,
            namespace: ns_obj.clone(),
        };
        for (binding, policy) in compiled.iter() {
            if again && !policy.reinvoke {
                continue;
            }
            let denied = |message: String, reason: &str| {
                let (code, reason) = code_of(reason);
                ApiError::new(
                    code,
                    reason,
                    format!(
                        "{}AdmissionPolicy '{}' with binding '{}' denied request: {message}",
                        match self.kind {
                            Kind::Validating => "Validating",
                            Kind::Mutating => "Mutating",
                        },
                        policy.name,
                        binding.name
                    ),
                )
            };
            let fail = |why: String| -> Result<(), ApiError> {
                if policy.fail_open {
                    Ok(())
                } else {
                    Err(denied(why, "Invalid"))
                }
            };
            match policy.matcher.matches(&req, false) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    fail(e)?;
                    continue;
                }
            }
            if let Some(m) = &binding.matcher {
                match m.matches(&req, true) {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(e) => {
                        fail(e)?;
                        continue;
                    }
                }
            }
            let params: Vec<Value> = match &policy.param_kind {
                None => vec![Value::Null],
                Some(kind) => match self.params(kind, &binding.param_ref, &info.namespace).await {
                    Ok(p) if p.is_empty() => {
                        if binding.param_ref["parameterNotFoundAction"] == "Allow" {
                            continue;
                        }
                        fail("failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction".to_owned())?;
                        continue;
                    }
                    Ok(p) => p,
                    Err(e) => {
                        fail(e)?;
                        continue;
                    }
                },
            };
            // The decisions of the authorization checks of this binding's expressions.
            let session = Arc::new(authz::Session::default());
            for param in &params {
                let mut vars: Vec<(&str, cel::Value)> = vec![
                    (
                        "object",
                        cel::value(mutated.as_deref().or(object).unwrap_or(&Value::Null)),
                    ),
                    ("oldObject", cel::value(a.old_object.unwrap_or(&Value::Null))),
                    ("params", cel::value(param)),
                    ("request", cel::value(&request_value(a, name))),
                    (
                        "namespaceObject",
                        cel::value(ns_obj.as_deref().unwrap_or(&Value::Null)),
                    ),
                ];
                vars.extend(authz::variables(a.user, info, &session));
                let authorizers = self.authorizers.as_ref();
                // matchConditions: all must hold (an error is the failure policy's). Each
                // expression's cost is charged before it runs (`cel::cost`): the conditions
                // to a budget of their own, the rest to the binding's.
                let mut conditions_left = cel::cost::MATCH_CONDITIONS_BUDGET;
                let mut left = cel::cost::RUNTIME_BUDGET;
                let mut skip = false;
                for (cname, cond) in &policy.match_conditions {
                    let result = match cond.charge(&vars, &mut conditions_left) {
                        Ok(()) => authz::eval_bool(cond, &vars, &session, authorizers).await,
                        Err(e) => Err(e.to_string()),
                    };
                    match result {
                        Ok(true) => {}
                        Ok(false) => {
                            skip = true;
                            break;
                        }
                        Err(e) => {
                            fail(format!("failed to evaluate match condition {cname:?}: {e}"))?;
                            skip = true;
                            break;
                        }
                    }
                }
                if skip {
                    continue;
                }
                // Variables in order, each seeing those before it (one that fails is left
                // out: an expression using it fails in turn).
                let mut var_values: Vec<(String, cel::Value)> = Vec::new();
                for (vname, expr) in &policy.variables {
                    let mut with: Vec<(&str, cel::Value)> = vars.clone();
                    with.push(("variables", cel::map(var_values.iter().map(|(k, v)| (k, v)))));
                    if expr.charge(&with, &mut left).is_err() {
                        continue;
                    }
                    if let Ok(v) = authz::eval(expr, &with, &session, authorizers).await {
                        var_values.push((vname.clone(), v));
                    }
                }
                vars.push(("variables", cel::map(var_values.iter().map(|(k, v)| (k, v)))));
                // Mutations in order, each on the object as the one before left it.
                for m in &policy.mutations {
                    let Some(target) = mutated.as_deref_mut() else {
                        break;
                    };
                    let result = match m.expression.charge(&vars, &mut left) {
                        Ok(()) => authz::eval(&m.expression, &vars, &session, authorizers).await,
                        Err(e) => Err(e.to_string()),
                    };
                    let applied = result.and_then(|v| cel::mutation::to_json(&v)).and_then(|patch| {
                        let resource = (
                            info.api_group.as_str(),
                            info.api_version.as_str(),
                            info.resource.as_str(),
                        );
                        crate::registry::patch::apply_mutation(resource, target, &patch, m.json_patch)
                    });
                    match applied {
                        Ok(()) => vars[0].1 = cel::value(target),
                        Err(e) => fail(format!(
                            "expression '{}' resulted in error: {e}",
                            m.expression.source
                        ))?,
                    }
                }
                for v in &policy.validations {
                    let result = match v.expression.charge(&vars, &mut left) {
                        Ok(()) => authz::eval_bool(&v.expression, &vars, &session, authorizers).await,
                        Err(e) => Err(e.to_string()),
                    };
                    let message = match result {
                        Ok(true) => continue,
                        Ok(false) => v
                            .message_expression
                            .as_ref()
                            .filter(|m| m.charge(&vars, &mut left).is_ok())
                            .and_then(|m| m.eval(&vars).ok())
                            .and_then(|m| cel::as_string(&m))
                            .filter(|m| !m.trim().is_empty())
                            .or_else(|| v.message.clone())
                            .unwrap_or_else(|| format!("failed expression: {}", v.expression.source)),
                        Err(e) => {
                            fail(format!(
                                "expression '{}' resulted in error: {e}",
                                v.expression.source
                            ))?;
                            continue;
                        }
                    };
                    if binding.actions.iter().any(|x| x == "Warn") {
                        a.warnings.add(format!(
                            "Validation failed for ValidatingAdmissionPolicy '{}' with binding '{}': {message}",
                            policy.name, binding.name
                        ));
                    }
                    if binding.actions.iter().any(|x| x == "Deny") {
                        return Err(denied(message, &v.reason));
                    }
                }
            }
        }
        Ok(())
    }
}
