//! Owner references (upstream `metav1.GetControllerOf` and `NewControllerRef`): which object
//! controls another, and the reference a controller puts on what it creates.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::Resource;

/// The controller ownerReference of an object, if any.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
}

/// A controller ownerReference to `owner`, blocking its foreground deletion.
pub fn controller_ref<K: Resource + k8s_openapi::Metadata<Ty = ObjectMeta>>(owner: &K) -> OwnerReference {
    controller_ref_to(K::API_VERSION, K::KIND, owner.metadata())
}

/// A controller ownerReference to the object of this apiVersion, kind and metadata.
pub fn controller_ref_to(api_version: &str, kind: &str, owner: &ObjectMeta) -> OwnerReference {
    OwnerReference {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        name: owner.name.clone().unwrap_or_default(),
        uid: owner.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::ReplicaSet;

    #[test]
    fn controller_refs_round_trip() {
        let mut rs = ReplicaSet::default();
        rs.metadata.name = Some("web-1".into());
        rs.metadata.uid = Some("u1".into());
        let r = controller_ref(&rs);
        assert_eq!(
            (r.api_version.as_str(), r.kind.as_str()),
            ("apps/v1", "ReplicaSet")
        );
        let meta = ObjectMeta {
            owner_references: Some(vec![
                OwnerReference {
                    name: "other".into(),
                    ..Default::default()
                },
                r.clone(),
            ]),
            ..Default::default()
        };
        assert_eq!(controller_of(&meta), Some(&r));
        assert_eq!(controller_of(&ObjectMeta::default()), None);
    }
}
