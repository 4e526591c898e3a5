//! The authz library (upstream's `library/authz.go`): the `authorizer` variable of admission
//! policies and webhook match conditions asks the API server's authorizers whether a user may
//! do something.
//!
//! ```text
//! authorizer.group('apps').resource('deployments').namespace('ns').name('web').check('update').allowed()
//! authorizer.path('/healthz').check('get').reason()
//! authorizer.serviceAccount('ns', 'sa').group('').resource('pods').check('list').allowed()
//! authorizer.requestResource.check('approve').allowed()   // the request's own resource
//! ```
//!
//! The authorizers answer asynchronously (a webhook authorizer calls out) while CEL evaluates
//! synchronously. So a [`Session`] keeps the decisions of one evaluation: `check()` answers
//! from it, and a check it has no answer for yet fails the evaluation and is remembered as
//! pending; [`eval`] then asks the authorizers for the pending checks and evaluates again.
//! CEL has no side effects, so the second evaluation takes the same path up to where the first
//! stopped. Each check costs 350,000 units (see `super::cost`), so an expression can make at
//! most two (upstream's pricing): the rounds are few.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use ::cel::common::types::{Kind, Type, STRING_TYPE};
use ::cel::common::value::CowVal;
use ::cel::objects::Opaque;
use ::cel::{DeclarationError, Env};

use super::{error, of_bool, of_opaque, of_string, opaque, string, take, Ret, Value};
use crate::authn::UserInfo;
use crate::authz::AuthorizerChain;
use crate::request_info::RequestInfo;

pub(crate) const AUTHORIZER: &str = "kubernetes.authorization.Authorizer";
pub(crate) const PATH_CHECK: &str = "kubernetes.authorization.PathCheck";
pub(crate) const GROUP_CHECK: &str = "kubernetes.authorization.GroupCheck";
pub(crate) const RESOURCE_CHECK: &str = "kubernetes.authorization.ResourceCheck";
pub(crate) const DECISION: &str = "kubernetes.authorization.Decision";

const AUTHORIZER_TYPE: Type = Type::simple_type(Kind::Opaque, AUTHORIZER);
const PATH_CHECK_TYPE: Type = Type::simple_type(Kind::Opaque, PATH_CHECK);
const GROUP_CHECK_TYPE: Type = Type::simple_type(Kind::Opaque, GROUP_CHECK);
const RESOURCE_CHECK_TYPE: Type = Type::simple_type(Kind::Opaque, RESOURCE_CHECK);
const DECISION_TYPE: Type = Type::simple_type(Kind::Opaque, DECISION);

/// What a check failing for want of a decision reports; [`eval`] looks for it.
const PENDING: &str = "authorization decision pending";
/// The most rounds of asking and evaluating again (each check costs enough that an
/// expression within the per-call limit makes at most two).
const MAX_ROUNDS: usize = 4;

/// Who is asking: the request's user, or a service account (`serviceAccount()`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct User {
    name: String,
    uid: String,
    groups: Vec<String>,
    extra: BTreeMap<String, Vec<String>>,
}

/// What a check asks about.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Target {
    Path(String),
    Resource {
        group: String,
        resource: String,
        subresource: String,
        namespace: String,
        name: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Query {
    user: User,
    target: Target,
    verb: String,
}

/// An authorizer's answer (upstream's `authorizer.Decision` with its reason and error).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Decided {
    Allow(String),
    Deny(String),
    NoOpinion(String),
}

/// The decisions of one evaluation, and the checks it still waits for.
#[derive(Debug, Default)]
pub(crate) struct Session {
    decided: Mutex<HashMap<Query, Decided>>,
    pending: Mutex<Vec<Query>>,
}

impl Session {
    fn decision(&self, q: Query) -> Option<Decided> {
        let decided = self.decided.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = decided.get(&q) {
            return Some(d.clone());
        }
        drop(decided);
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if !pending.contains(&q) {
            pending.push(q);
        }
        None
    }

    fn take_pending(&self) -> Vec<Query> {
        std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn record(&self, q: Query, d: Decided) {
        self.decided
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(q, d);
    }
}

/// A value of one of the library's types. Opaque values are compared by what they ask, not
/// by their session.
#[derive(Clone, Debug)]
enum Authz {
    Authorizer {
        session: Arc<Session>,
        user: User,
    },
    PathCheck {
        session: Arc<Session>,
        user: User,
        path: String,
    },
    GroupCheck {
        session: Arc<Session>,
        user: User,
        group: String,
    },
    ResourceCheck {
        session: Arc<Session>,
        user: User,
        target: Target,
    },
    Decision(Decided),
}

impl PartialEq for Authz {
    fn eq(&self, other: &Self) -> bool {
        use Authz::*;
        match (self, other) {
            (Authorizer { user: a, .. }, Authorizer { user: b, .. }) => a == b,
            (PathCheck { user: a, path: p, .. }, PathCheck { user: b, path: q, .. }) => a == b && p == q,
            (
                GroupCheck {
                    user: a, group: g, ..
                },
                GroupCheck {
                    user: b, group: h, ..
                },
            ) => a == b && g == h,
            (
                ResourceCheck {
                    user: a, target: t, ..
                },
                ResourceCheck {
                    user: b, target: u, ..
                },
            ) => a == b && t == u,
            (Decision(a), Decision(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Authz {}

impl Opaque for Authz {
    fn runtime_type_name(&self) -> &str {
        match self {
            Authz::Authorizer { .. } => AUTHORIZER,
            Authz::PathCheck { .. } => PATH_CHECK,
            Authz::GroupCheck { .. } => GROUP_CHECK,
            Authz::ResourceCheck { .. } => RESOURCE_CHECK,
            Authz::Decision(_) => DECISION,
        }
    }
}

fn user_of(u: &UserInfo) -> User {
    User {
        name: u.name.clone(),
        uid: u.uid.clone(),
        groups: u.groups.clone(),
        extra: u.extra.clone(),
    }
}

/// The `authorizer` variable for `user`, and `authorizer.requestResource` for the request's
/// resource (`request`), with a fresh session.
pub(crate) fn variables(
    user: &UserInfo,
    request: &RequestInfo,
    session: &Arc<Session>,
) -> [(&'static str, Value); 2] {
    let user = user_of(user);
    let authorizer = Authz::Authorizer {
        session: session.clone(),
        user: user.clone(),
    };
    let request_resource = Authz::ResourceCheck {
        session: session.clone(),
        user,
        target: Target::Resource {
            group: request.api_group.clone(),
            resource: request.resource.clone(),
            subresource: request.subresource.clone(),
            namespace: request.namespace.clone(),
            name: request.name.clone(),
        },
    };
    [
        ("authorizer", Value::Opaque(Arc::new(authorizer))),
        (
            "authorizer.requestResource",
            Value::Opaque(Arc::new(request_resource)),
        ),
    ]
}

pub(super) fn library(env: &mut Env) -> Result<(), DeclarationError> {
    let s = || STRING_TYPE;
    env.add_member_overload("path", "authorizer_path", AUTHORIZER_TYPE, vec![s()], path)?;
    env.add_member_overload("group", "authorizer_group", AUTHORIZER_TYPE, vec![s()], group)?;
    env.add_member_overload(
        "serviceAccount",
        "authorizer_serviceaccount",
        AUTHORIZER_TYPE,
        vec![s(), s()],
        service_account,
    )?;
    env.add_member_overload(
        "resource",
        "groupcheck_resource",
        GROUP_CHECK_TYPE,
        vec![s()],
        resource,
    )?;
    env.add_member_overload(
        "subresource",
        "resourcecheck_subresource",
        RESOURCE_CHECK_TYPE,
        vec![s()],
        subresource,
    )?;
    env.add_member_overload(
        "namespace",
        "resourcecheck_namespace",
        RESOURCE_CHECK_TYPE,
        vec![s()],
        namespace,
    )?;
    env.add_member_overload("name", "resourcecheck_name", RESOURCE_CHECK_TYPE, vec![s()], name)?;
    // Selectors narrow a check for authorizers that read them (upstream's
    // AuthorizeWithSelectors); none of r8s's authorizers does, as RBAC does not.
    env.add_member_overload(
        "fieldSelector",
        "authorizer_fieldselector",
        RESOURCE_CHECK_TYPE,
        vec![s()],
        selector,
    )?;
    env.add_member_overload(
        "labelSelector",
        "authorizer_labelselector",
        RESOURCE_CHECK_TYPE,
        vec![s()],
        selector,
    )?;
    env.add_member_overload("check", "pathcheck_check", PATH_CHECK_TYPE, vec![s()], check)?;
    env.add_member_overload(
        "check",
        "resourcecheck_check",
        RESOURCE_CHECK_TYPE,
        vec![s()],
        check,
    )?;
    env.add_member_overload("errored", "decision_errored", DECISION_TYPE, vec![], errored)?;
    env.add_member_overload("error", "decision_error", DECISION_TYPE, vec![], error_of)?;
    env.add_member_overload("allowed", "decision_allowed", DECISION_TYPE, vec![], allowed)?;
    env.add_member_overload("reason", "decision_reason", DECISION_TYPE, vec![], reason)?;
    Ok(())
}

fn arg(v: &CowVal<'_, '_>, type_name: &str) -> Result<Authz, ::cel::ExecutionError> {
    opaque::<Authz>(v.as_ref(), type_name)
}

fn path<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [a, p] = take(args)?;
    let Authz::Authorizer { session, user } = arg(&a, AUTHORIZER)? else {
        return Err(error("path", "not an authorizer"));
    };
    of_opaque(Authz::PathCheck {
        session,
        user,
        path: string(&p)?.to_owned(),
    })
}

fn group<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [a, g] = take(args)?;
    let Authz::Authorizer { session, user } = arg(&a, AUTHORIZER)? else {
        return Err(error("group", "not an authorizer"));
    };
    of_opaque(Authz::GroupCheck {
        session,
        user,
        group: string(&g)?.to_owned(),
    })
}

/// An authorizer for a service account: upstream's `ServiceAccountInfo.UserInfo()`.
fn service_account<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [a, ns, name] = take(args)?;
    let Authz::Authorizer { session, .. } = arg(&a, AUTHORIZER)? else {
        return Err(error("serviceAccount", "not an authorizer"));
    };
    let (ns, name) = (string(&ns)?, string(&name)?);
    of_opaque(Authz::Authorizer {
        session,
        user: User {
            name: format!("system:serviceaccount:{ns}:{name}"),
            uid: String::new(),
            groups: vec![
                "system:serviceaccounts".to_owned(),
                format!("system:serviceaccounts:{ns}"),
            ],
            extra: BTreeMap::new(),
        },
    })
}

fn resource<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [g, r] = take(args)?;
    let Authz::GroupCheck { session, user, group } = arg(&g, GROUP_CHECK)? else {
        return Err(error("resource", "not a group check"));
    };
    of_opaque(Authz::ResourceCheck {
        session,
        user,
        target: Target::Resource {
            group,
            resource: string(&r)?.to_owned(),
            subresource: String::new(),
            namespace: String::new(),
            name: String::new(),
        },
    })
}

/// `subresource()`, `namespace()` and `name()`: the same check with one attribute set.
fn narrow<'b, 'v>(args: Vec<CowVal<'b, 'v>>, set: fn(&mut Target, String)) -> Ret<'b, 'v> {
    let [r, v] = take(args)?;
    let Authz::ResourceCheck {
        session,
        user,
        mut target,
    } = arg(&r, RESOURCE_CHECK)?
    else {
        return Err(error("check", "not a resource check"));
    };
    set(&mut target, string(&v)?.to_owned());
    of_opaque(Authz::ResourceCheck {
        session,
        user,
        target,
    })
}

fn subresource<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    narrow(args, |t, v| {
        if let Target::Resource { subresource, .. } = t {
            *subresource = v;
        }
    })
}

fn namespace<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    narrow(args, |t, v| {
        if let Target::Resource { namespace, .. } = t {
            *namespace = v;
        }
    })
}

fn name<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    narrow(args, |t, v| {
        if let Target::Resource { name, .. } = t {
            *name = v;
        }
    })
}

fn selector<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [r, s] = take(args)?;
    string(&s)?;
    of_opaque(arg(&r, RESOURCE_CHECK)?)
}

fn check<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [c, verb] = take(args)?;
    let verb = string(&verb)?.to_owned();
    let (session, user, target) = match arg(&c, RESOURCE_CHECK).or_else(|_| arg(&c, PATH_CHECK))? {
        Authz::ResourceCheck {
            session,
            user,
            target,
        } => (session, user, target),
        Authz::PathCheck { session, user, path } => (session, user, Target::Path(path)),
        _ => return Err(error("check", "not a check")),
    };
    match session.decision(Query { user, target, verb }) {
        Some(d) => of_opaque(Authz::Decision(d)),
        None => Err(error("check", PENDING)),
    }
}

fn decision(v: &CowVal<'_, '_>) -> Result<Decided, ::cel::ExecutionError> {
    match arg(v, DECISION)? {
        Authz::Decision(d) => Ok(d),
        _ => Err(error("allowed", "not a decision")),
    }
}

fn errored<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [d] = take(args)?;
    decision(&d)?;
    // r8s's authorizers answer or have no opinion; none fails with an error.
    of_bool(false)
}

fn error_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [d] = take(args)?;
    decision(&d)?;
    of_string("")
}

fn allowed<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [d] = take(args)?;
    of_bool(matches!(decision(&d)?, Decided::Allow(_)))
}

fn reason<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Ret<'b, 'v> {
    let [d] = take(args)?;
    let (Decided::Allow(r) | Decided::Deny(r) | Decided::NoOpinion(r)) = decision(&d)?;
    of_string(r)
}

/// Ask `authorizers` what `q` asks.
async fn decide(authorizers: &AuthorizerChain, q: &Query) -> Decided {
    let user = UserInfo {
        name: q.user.name.clone(),
        uid: q.user.uid.clone(),
        groups: q.user.groups.clone(),
        extra: q.user.extra.clone(),
    };
    let info = match &q.target {
        Target::Path(path) => RequestInfo {
            is_resource_request: false,
            path: path.clone(),
            verb: q.verb.clone(),
            ..Default::default()
        },
        Target::Resource {
            group,
            resource,
            subresource,
            namespace,
            name,
        } => RequestInfo {
            is_resource_request: true,
            verb: q.verb.clone(),
            api_group: group.clone(),
            api_version: "*".to_owned(),
            namespace: namespace.clone(),
            resource: resource.clone(),
            subresource: subresource.clone(),
            name: name.clone(),
            ..Default::default()
        },
    };
    match authorizers.authorize(&user, &info).await {
        Ok(reason) => Decided::Allow(reason),
        Err(Some(reason)) => Decided::Deny(reason),
        Err(None) => Decided::NoOpinion(String::new()),
    }
}

/// Evaluate `expr` with `vars`, answering its authorization checks from `authorizers` (see
/// the module's documentation). Without `authorizers`, a check is an error.
pub(crate) async fn eval(
    expr: &super::Expr,
    vars: &[(&str, Value)],
    session: &Session,
    authorizers: Option<&AuthorizerChain>,
) -> Result<Value, String> {
    let mut result = expr.eval(vars);
    for _ in 0..MAX_ROUNDS {
        let pending = session.take_pending();
        if pending.is_empty() {
            break;
        }
        let Some(authorizers) = authorizers else {
            return Err("no authorizer to check with".to_owned());
        };
        for q in pending {
            let d = decide(authorizers, &q).await;
            session.record(q, d);
        }
        result = expr.eval(vars);
    }
    result
}

/// [`eval`], to a boolean (an error if the result is of another type).
pub(crate) async fn eval_bool(
    expr: &super::Expr,
    vars: &[(&str, Value)],
    session: &Session,
    authorizers: Option<&AuthorizerChain>,
) -> Result<bool, String> {
    match eval(expr, vars, session, authorizers).await? {
        Value::Bool(b) => Ok(b),
        other => Err(format!(
            "expression '{}' resulted in a non-bool value: {other:?}",
            expr.source
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authz::{Authorizer, Decision};

    /// Allows alice to get deployments in `ns` and everyone `/healthz`; denies list of pods
    /// to service accounts; no opinion otherwise. Counts what it is asked.
    struct Rules(std::sync::atomic::AtomicUsize);

    #[async_trait::async_trait]
    impl Authorizer for Rules {
        fn name(&self) -> &'static str {
            "test"
        }
        async fn authorize(&self, user: &UserInfo, r: &RequestInfo) -> Decision {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if !r.is_resource_request {
                return if r.path == "/healthz" {
                    Decision::Allow("health is public".into())
                } else {
                    Decision::NoOpinion
                };
            }
            if user.name == "alice"
                && r.api_group == "apps"
                && r.resource == "deployments"
                && r.namespace == "ns"
                && r.verb == "get"
                && r.api_version == "*"
            {
                return Decision::Allow("alice reads deployments".into());
            }
            if user.groups.iter().any(|g| g == "system:serviceaccounts:ns") && r.resource == "pods" {
                return Decision::Deny(format!("{} may not {} pods", user.name, r.verb));
            }
            Decision::NoOpinion
        }
    }

    #[tokio::test]
    async fn checks_ask_the_servers_authorizers() {
        let mut chain = AuthorizerChain::default();
        chain.push(Rules(Default::default()));
        let alice = UserInfo {
            name: "alice".into(),
            ..Default::default()
        };
        let request = RequestInfo {
            is_resource_request: true,
            verb: "create".into(),
            api_group: "apps".into(),
            resource: "deployments".into(),
            namespace: "ns".into(),
            ..Default::default()
        };
        let run = |src: &str, chain: Option<AuthorizerChain>| {
            let (alice, request, src) = (&alice, &request, src.to_owned());
            async move {
                let session = Arc::new(Session::default());
                let vars = variables(alice, request, &session);
                let e = super::super::Expr::compile(&src);
                assert_eq!(e.compile_error(), None, "{src}");
                eval(&e, &vars, &session, chain.as_ref()).await
            }
        };
        let holds = |v: Result<Value, String>| v == Ok(Value::Bool(true));
        let apps = "authorizer.group('apps').resource('deployments')";
        assert!(holds(
            run(
                &format!("{apps}.namespace('ns').check('get').allowed()"),
                Some(chain.clone())
            )
            .await
        ));
        assert!(holds(
            run(
                &format!("!{apps}.namespace('other').check('get').allowed()"),
                Some(chain.clone())
            )
            .await
        ));
        // The request's own resource, narrowed.
        assert!(holds(run(
            "authorizer.requestResource.check('get').allowed() && !authorizer.requestResource.name('x').namespace('y').check('get').allowed()",
            Some(chain.clone())
        )
        .await));
        assert!(holds(
            run(
                "authorizer.path('/healthz').check('get').reason() == 'health is public'",
                Some(chain.clone())
            )
            .await
        ));
        assert_eq!(
            run(
                "authorizer.serviceAccount('ns', 'sa').group('').resource('pods').check('list').reason()",
                Some(chain.clone())
            )
            .await,
            Ok(Value::String(Arc::new(
                "system:serviceaccount:ns:sa may not list pods".into()
            )))
        );
        assert!(holds(
            run("!authorizer.path('/x').check('get').errored() && authorizer.path('/x').check('get').error() == ''", Some(chain.clone()))
                .await
        ));
        // Without authorizers a check is an error, not a decision.
        assert!(run("authorizer.path('/healthz').check('get').allowed()", None)
            .await
            .is_err());
    }

    #[test]
    fn checks_cost_what_upstream_prices_them_at() {
        let e = super::super::Expr::compile(
            "authorizer.path('/a').check('get').allowed() && authorizer.path('/b').check('get').allowed()",
        );
        let session = Arc::new(Session::default());
        let vars = variables(&UserInfo::default(), &RequestInfo::default(), &session);
        let cost = e.cost(&vars);
        assert!((700_000..800_000).contains(&cost), "{cost}");
        let three = super::super::Expr::compile(
            "authorizer.path('/a').check('get').allowed() && authorizer.path('/b').check('get').allowed() && authorizer.path('/c').check('get').allowed()",
        );
        assert!(three.cost(&vars) > super::super::cost::PER_CALL_LIMIT);
    }
}
