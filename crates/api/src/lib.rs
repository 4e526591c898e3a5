//! The API's resource catalogue: what the API server serves, how each resource is named and
//! scoped, which verbs and subresources it has. Discovery, routing and (later) the per-resource
//! strategies all read it; adding a resource starts with an entry here.

pub mod catalogue;
pub mod features;
pub mod patch_strategy;
pub mod quantity;
pub mod quota;
pub mod selector;
pub mod typed;
pub mod upgrade;
pub mod validation;

pub use catalogue::{catalogue, find, group_versions, ResourceDef, Subresource};
