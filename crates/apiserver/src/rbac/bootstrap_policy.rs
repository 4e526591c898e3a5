//! The default roles and bindings the API server creates and reconciles at start-up, with the
//! permissions upstream's bootstrap policy gives them.

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};

/// Everything the bootstrap policy holds.
#[derive(Default)]
pub struct BootstrapPolicy {
    pub cluster_roles: Vec<ClusterRole>,
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
    /// Roles in kube-system and kube-public.
    pub roles: Vec<Role>,
    pub role_bindings: Vec<RoleBinding>,
}

/// The default policy.
pub fn policy() -> BootstrapPolicy {
    BootstrapPolicy::default()
}
