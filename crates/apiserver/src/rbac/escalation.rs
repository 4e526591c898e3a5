//! Privilege-escalation prevention: no one writes a role granting, or a binding to a role
//! holding, permissions they do not hold themselves, unless they may `escalate` (roles) or
//! `bind` (bindings) — upstream's `ConfirmNoEscalation`, `RoleEscalationAuthorized` and
//! `BindingAuthorized`.

use serde_json::Value;

use super::rules::{compact_string, uncovered, Rule};
use crate::authn::UserInfo;
use crate::context::Ctx;
use crate::request_info::RequestInfo;
use crate::status::ApiError;
use r8s_api::ResourceDef;

const GROUP: &str = "rbac.authorization.k8s.io";

/// Check a create or update of a Role or ClusterRole (`def`; `old`: the stored object of an
/// update): its rules must be held by the writer, unless it may `escalate`.
pub(crate) async fn check_role(
    ctx: &Ctx,
    def: &ResourceDef,
    ns: &str,
    obj: &Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    let Some(rbac) = ctx.shared.rbac.as_ref() else {
        return Ok(());
    };
    if old.is_some_and(|o| o["rules"] == obj["rules"] && o["aggregationRule"] == obj["aggregationRule"]) {
        return Ok(());
    }
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    if may(ctx, "escalate", def.plural, ns, name).await {
        return Ok(());
    }
    if !obj["aggregationRule"].is_null() {
        return Err(forbidden(
            def,
            name,
            "must have cluster-admin privileges to use the aggregationRule".into(),
        ));
    }
    let requested = Rule::all_from_json(obj);
    let owned = rbac.rules_for(&ctx.user, ns);
    confirm_no_escalation(&ctx.user, &owned, &requested).map_err(|r| forbidden(def, name, r))
}

/// Check a create or update of a RoleBinding or ClusterRoleBinding (`def`): the role it binds
/// must be held by the writer, unless it may `bind` that role.
pub(crate) async fn check_binding(
    ctx: &Ctx,
    def: &ResourceDef,
    ns: &str,
    obj: &Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    let Some(rbac) = ctx.shared.rbac.as_ref() else {
        return Ok(());
    };
    // roleRef cannot change, so an update grants nothing new.
    if old.is_some() {
        return Ok(());
    }
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let kind = obj["roleRef"]["kind"].as_str().unwrap_or_default();
    let role = obj["roleRef"]["name"].as_str().unwrap_or_default();
    let role_resource = if kind == "Role" { "roles" } else { "clusterroles" };
    if may(ctx, "bind", role_resource, ns, role).await {
        return Ok(());
    }
    let Some(requested) = rbac.role_rules(kind, ns, role) else {
        return Err(forbidden(
            def,
            name,
            format!("{role_resource}.{GROUP} \"{role}\" not found"),
        ));
    };
    let owned = rbac.rules_for(&ctx.user, ns);
    confirm_no_escalation(&ctx.user, &owned, &requested).map_err(|r| forbidden(def, name, r))
}

fn forbidden(def: &ResourceDef, name: &str, reason: String) -> ApiError {
    ApiError::forbidden(format!(
        "{}.{GROUP} \"{name}\" is forbidden: {reason}",
        def.plural
    ))
}

/// Whether the authorizers allow `verb` on the role `name` (e.g. `escalate`, `bind`).
async fn may(ctx: &Ctx, verb: &str, resource: &str, ns: &str, name: &str) -> bool {
    let attrs = RequestInfo {
        is_resource_request: true,
        verb: verb.into(),
        api_group: GROUP.into(),
        api_version: "v1".into(),
        namespace: ns.into(),
        resource: resource.into(),
        name: name.into(),
        ..Default::default()
    };
    ctx.shared.authorizers.authorize(&ctx.user, &attrs).await.is_ok()
}

/// `Err` with upstream's message when `owned` does not cover `requested`.
fn confirm_no_escalation(user: &UserInfo, owned: &[Rule], requested: &[Rule]) -> Result<(), String> {
    let missing = uncovered(owned, requested);
    if missing.is_empty() {
        return Ok(());
    }
    let mut lines: Vec<String> = compact(missing).iter().map(compact_string).collect();
    lines.sort();
    lines.dedup();
    let groups: Vec<String> = user.groups.iter().map(|g| format!("{g:?}")).collect();
    Err(format!(
        "user {:?} (groups=[{}]) is attempting to grant RBAC permissions not currently held:\n{}",
        user.name,
        groups.join(" "),
        lines.join("\n")
    ))
}

/// Merge single-resource rules that differ only in verb, as upstream's `CompactRules` does, so
/// a refusal lists `Verbs:["get" "list"]` once rather than a line per verb.
fn compact(rules: Vec<Rule>) -> Vec<Rule> {
    let mut out: Vec<Rule> = Vec::new();
    for r in rules {
        let simple = r.api_groups.len() == 1 && r.resources.len() == 1 && r.resource_names.is_empty();
        if simple {
            if let Some(existing) = out.iter_mut().find(|o| {
                o.api_groups == r.api_groups
                    && o.resources == r.resources
                    && o.resource_names.is_empty()
                    && o.non_resource_urls.is_empty()
            }) {
                for v in r.verbs {
                    if !existing.verbs.contains(&v) {
                        existing.verbs.push(v);
                    }
                }
                continue;
            }
        }
        out.push(r);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Rule {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
        Rule {
            verbs: v(verbs),
            api_groups: v(groups),
            resources: v(resources),
            ..Default::default()
        }
    }

    #[test]
    fn refusal_lists_what_is_missing_in_upstreams_words() {
        let user = UserInfo {
            name: "jane".into(),
            groups: vec!["devs".into(), "system:authenticated".into()],
            ..Default::default()
        };
        let owned = vec![rule(&["get", "list"], &[""], &["pods"])];
        assert!(confirm_no_escalation(&user, &owned, &[rule(&["get"], &[""], &["pods"])]).is_ok());
        let err = confirm_no_escalation(
            &user,
            &owned,
            &[
                rule(&["get", "list", "delete"], &[""], &["pods", "secrets"]),
                rule(&["*"], &["*"], &["*"]),
            ],
        )
        .unwrap_err();
        assert_eq!(
            err,
            "user \"jane\" (groups=[\"devs\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n\
             {APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\"]}\n\
             {APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"list\" \"delete\"]}\n\
             {APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}"
        );
    }
}
