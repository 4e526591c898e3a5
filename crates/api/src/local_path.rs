//! The names r8s's built-in local volume provisioner shares between its parts: the controller
//! that makes a PersistentVolume for a claim, the node agent that holds the data, and the
//! default StorageClass.

/// The provisioner's name, in a StorageClass's `provisioner` and a volume's
/// `pv.kubernetes.io/provisioned-by`.
pub const PROVISIONER: &str = "r8s.io/local-path";

/// The default StorageClass r8s makes (as k3s names its own).
pub const DEFAULT_CLASS: &str = "local-path";

/// The Node annotation where a node's agent keeps local volumes (an absolute directory).
pub const DIR_ANNOTATION: &str = "r8s.io/local-path-dir";

/// The directory of the volume `pv_name` for the claim `namespace/claim` under a node's `dir`.
pub fn volume_dir(dir: &str, pv_name: &str, namespace: &str, claim: &str) -> String {
    format!("{}/{pv_name}_{namespace}_{claim}", dir.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    #[test]
    fn volume_directories_name_the_volume_and_its_claim() {
        assert_eq!(
            super::volume_dir("/var/lib/r8s/agent/storage/", "pvc-1", "default", "data"),
            "/var/lib/r8s/agent/storage/pvc-1_default_data"
        );
    }
}
