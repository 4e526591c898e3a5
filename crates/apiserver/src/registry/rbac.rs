//! RBAC roles and bindings (upstream's `pkg/registry/rbac`): names as path segments, rules and
//! role references as upstream validates them, a roleRef that cannot change, the tables, and
//! the escalation check before a write (upstream's policy-based storage).

use async_trait::async_trait;
use r8s_api::validation::FieldError;
use r8s_api::ResourceDef;
use serde_json::{json, Value};

use super::meta::{self, str_field};
use super::strategy::{age_cell, col, go_string, name_cell, wide, Column, Finish, Strategy, AGE, NAME};
use crate::context::Ctx;
use crate::status::ApiError;

const GROUP: &str = "rbac.authorization.k8s.io";

fn def(plural: &str) -> &'static ResourceDef {
    crate::registry::catalogue::builtin(GROUP, "v1", plural).expect("RBAC resources are in the catalogue")
}

/// Roles, or ClusterRoles (`cluster`).
pub(crate) struct Roles {
    pub cluster: bool,
}

/// RoleBindings, or ClusterRoleBindings (`cluster`).
pub(crate) struct Bindings {
    pub cluster: bool,
}

impl Roles {
    fn def(&self) -> &'static ResourceDef {
        def(if self.cluster { "clusterroles" } else { "roles" })
    }
}

impl Bindings {
    fn def(&self) -> &'static ResourceDef {
        def(if self.cluster {
            "clusterrolebindings"
        } else {
            "rolebindings"
        })
    }
}

#[async_trait]
impl Strategy for Roles {
    /// RBAC names only need to be a path segment (`system:node` is one), as upstream.
    fn validate_name(&self, name: &str) -> Vec<String> {
        path_segment_name(name)
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        validate_rules(&mut errs, obj, self.cluster);
        errs
    }

    async fn begin_create(&self, ctx: &Ctx, obj: &mut Value) -> Result<Option<Box<dyn Finish>>, ApiError> {
        crate::rbac::escalation::check_role(ctx, self.def(), meta::namespace(obj), obj, None).await?;
        Ok(None)
    }

    async fn begin_update(
        &self,
        ctx: &Ctx,
        obj: &mut Value,
        old: &Value,
    ) -> Result<Option<Box<dyn Finish>>, ApiError> {
        crate::rbac::escalation::check_role(ctx, self.def(), meta::namespace(obj), obj, Some(old)).await?;
        Ok(None)
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col(
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

#[async_trait]
impl Strategy for Bindings {
    fn validate_name(&self, name: &str) -> Vec<String> {
        path_segment_name(name)
    }

    /// rbac/v1's defaults: a roleRef without an apiGroup is in the RBAC group, as are User and
    /// Group subjects without one (ServiceAccounts are in the core group).
    fn default(&self, obj: &mut Value) {
        if obj.get("roleRef").is_some_and(Value::is_object)
            && obj["roleRef"]["apiGroup"].as_str().is_none_or(str::is_empty)
        {
            obj["roleRef"]["apiGroup"] = json!(GROUP);
        }
        for subject in obj
            .get_mut("subjects")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let kind = subject["kind"].as_str().unwrap_or("");
            if matches!(kind, "User" | "Group") && subject["apiGroup"].as_str().is_none_or(str::is_empty) {
                subject["apiGroup"] = json!(GROUP);
            }
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        validate_binding(&mut errs, obj, self.cluster);
        errs
    }

    fn validate_update(&self, obj: &Value, old: &Value) -> Vec<FieldError> {
        if obj["roleRef"] == old["roleRef"] {
            return Vec::new();
        }
        let r = &obj["roleRef"];
        vec![FieldError::invalid_raw(
            "roleRef",
            &format!(
                "rbac.RoleRef{{APIGroup:{}, Kind:{}, Name:{}}}",
                go_string(&r["apiGroup"]),
                go_string(&r["kind"]),
                go_string(&r["name"])
            ),
            "cannot change roleRef",
        )]
    }

    async fn begin_create(&self, ctx: &Ctx, obj: &mut Value) -> Result<Option<Box<dyn Finish>>, ApiError> {
        crate::rbac::escalation::check_binding(ctx, self.def(), meta::namespace(obj), obj, None).await?;
        Ok(None)
    }

    async fn begin_update(
        &self,
        ctx: &Ctx,
        obj: &mut Value,
        old: &Value,
    ) -> Result<Option<Box<dyn Finish>>, ApiError> {
        crate::rbac::escalation::check_binding(ctx, self.def(), meta::namespace(obj), obj, Some(old)).await?;
        Ok(None)
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col(
                "Role",
                "string",
                "RoleRef is the reference to the role this binding grants.",
            ),
            AGE,
            wide("Users", "Users in the binding."),
            wide("Groups", "Groups in the binding."),
            wide("ServiceAccounts", "ServiceAccounts in the binding."),
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let subjects = |kind: &str| {
            let names: Vec<String> = obj["subjects"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|s| s["kind"] == kind)
                .map(|s| match (kind, s["namespace"].as_str()) {
                    ("ServiceAccount", Some(ns)) => format!("{ns}/{}", s["name"].as_str().unwrap_or("")),
                    _ => s["name"].as_str().unwrap_or("").to_owned(),
                })
                .collect();
            json!(names.join(", "))
        };
        vec![
            name_cell(obj),
            json!(format!(
                "{}/{}",
                obj["roleRef"]["kind"].as_str().unwrap_or(""),
                obj["roleRef"]["name"].as_str().unwrap_or("")
            )),
            age_cell(obj),
            subjects("User"),
            subjects("Group"),
            subjects("ServiceAccount"),
        ]
    }
}

/// upstream's `path.IsValidPathSegmentName`.
fn path_segment_name(name: &str) -> Vec<String> {
    if name == "." || name == ".." {
        return vec![format!("may not be '{name}'")];
    }
    ["/", "%"]
        .iter()
        .filter(|c| name.contains(*c))
        .map(|c| format!("may not contain '{c}'"))
        .collect()
}

/// upstream's `ValidatePolicyRule`: verbs always; resource rules name groups; only
/// ClusterRoles may hold non-resource URLs, and never beside resources.
fn validate_rules(errs: &mut Vec<FieldError>, obj: &Value, cluster: bool) {
    let empty = |v: &Value| v.as_array().is_none_or(Vec::is_empty);
    for (i, r) in obj["rules"].as_array().into_iter().flatten().enumerate() {
        let path = format!("rules[{i}]");
        if empty(&r["verbs"]) {
            errs.push(FieldError::required(
                format!("{path}.verbs"),
                "verbs must contain at least one value",
            ));
        }
        if !empty(&r["nonResourceURLs"]) {
            if !cluster {
                errs.push(FieldError::invalid(
                    format!("{path}.nonResourceURLs"),
                    &r["nonResourceURLs"].to_string(),
                    "namespaced rules cannot apply to non-resource URLs",
                ));
            }
            if !empty(&r["apiGroups"]) || !empty(&r["resources"]) || !empty(&r["resourceNames"]) {
                errs.push(FieldError::invalid(
                    format!("{path}.nonResourceURLs"),
                    &r["nonResourceURLs"].to_string(),
                    "rules cannot apply to both regular resources and non-resource URLs",
                ));
            }
            continue;
        }
        if empty(&r["apiGroups"]) {
            errs.push(FieldError::required(
                format!("{path}.apiGroups"),
                "resource rules must supply at least one api group",
            ));
        }
        if empty(&r["resources"]) {
            errs.push(FieldError::required(
                format!("{path}.resources"),
                "resource rules must supply at least one resource",
            ));
        }
    }
}

/// upstream's `ValidateRoleBinding`: a roleRef to a Role or ClusterRole in the RBAC group (a
/// ClusterRoleBinding only to a ClusterRole), and subjects of the known kinds.
fn validate_binding(errs: &mut Vec<FieldError>, obj: &Value, cluster: bool) {
    let role_ref = &obj["roleRef"];
    match role_ref["apiGroup"].as_str() {
        Some("rbac.authorization.k8s.io") => {}
        other => errs.push(FieldError::not_supported(
            "roleRef.apiGroup",
            other.unwrap_or(""),
            &["rbac.authorization.k8s.io"],
        )),
    }
    let kinds: &[&str] = if cluster {
        &["ClusterRole"]
    } else {
        &["ClusterRole", "Role"]
    };
    match role_ref["kind"].as_str() {
        Some(k) if kinds.contains(&k) => {}
        other => errs.push(FieldError::not_supported(
            "roleRef.kind",
            other.unwrap_or(""),
            kinds,
        )),
    }
    if role_ref["name"].as_str().is_none_or(str::is_empty) {
        errs.push(FieldError::required("roleRef.name", ""));
    }
    for (i, subject) in obj["subjects"].as_array().into_iter().flatten().enumerate() {
        let path = format!("subjects[{i}]");
        if subject["name"].as_str().is_none_or(str::is_empty) {
            errs.push(FieldError::required(format!("{path}.name"), ""));
        }
        match subject["kind"].as_str() {
            Some("ServiceAccount") => {
                if cluster && subject["namespace"].as_str().is_none_or(str::is_empty) {
                    errs.push(FieldError::required(format!("{path}.namespace"), ""));
                }
            }
            Some("User") | Some("Group") => {}
            other => errs.push(FieldError::not_supported(
                format!("{path}.kind"),
                other.unwrap_or(""),
                &["ServiceAccount", "User", "Group"],
            )),
        }
    }
}
