//! RBAC: Roles, ClusterRoles and their bindings decide who may do what (the reference
//! document's "Authorization" stage, RBAC mode).

pub mod bootstrap_policy;
