//! The node's CNI configuration: a conflist in the conf dir containerd reads, run by the real
//! plugins (Debian's containernetworking-plugins): `bridge` with `host-local` addresses from the
//! node's spec.podCIDRs (the gateway is the bridge; one range per family on a dual-stack
//! node, so each pod gets an address of each), then `portmap` for hostPorts.

use std::path::PathBuf;

use serde_json::json;

#[derive(Clone, Debug)]
pub struct CniOptions {
    pub conf_dir: PathBuf,
    /// host-local's allocation records.
    pub ipam_dir: PathBuf,
    pub bridge: String,
    /// Masquerade traffic leaving the pod network.
    pub ip_masq: bool,
    pub mtu: Option<u32>,
}

pub const CONFLIST: &str = "10-r8s.conflist";

/// The conflist for a node whose pods take addresses from `pod_cidrs` (the node's podCIDRs,
/// primary first: the first address a pod gets is its podIP).
pub fn conflist(opts: &CniOptions, pod_cidrs: &[String]) -> serde_json::Value {
    let ranges: Vec<_> = pod_cidrs.iter().map(|c| json!([{"subnet": c}])).collect();
    let routes: Vec<_> = pod_cidrs
        .iter()
        .map(|c| json!({"dst": if c.contains(':') { "::/0" } else { "0.0.0.0/0" }}))
        .collect();
    let mut bridge = json!({
        "type": "bridge",
        "bridge": opts.bridge,
        "isGateway": true,
        "ipMasq": opts.ip_masq,
        "hairpinMode": true,
        "ipam": {
            "type": "host-local",
            "ranges": ranges,
            "routes": routes,
            "dataDir": opts.ipam_dir,
        },
    });
    if let Some(mtu) = opts.mtu {
        bridge["mtu"] = json!(mtu);
    }
    json!({
        "cniVersion": "1.0.0",
        "name": "r8s",
        "plugins": [bridge, {"type": "portmap", "capabilities": {"portMappings": true}}],
    })
}

/// Write the conflist (atomically: containerd watches the directory).
pub fn write(opts: &CniOptions, pod_cidrs: &[String]) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(&opts.conf_dir)?;
    let path = opts.conf_dir.join(CONFLIST);
    let tmp = opts.conf_dir.join(format!(".{CONFLIST}.tmp"));
    std::fs::write(&tmp, serde_json::to_vec_pretty(&conflist(opts, pod_cidrs))?)?;
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

/// Remove the bridge link (when the agent is torn down for good, or after a test).
pub fn remove_bridge(name: &str) {
    let _ = std::process::Command::new("ip")
        .args(["link", "del", name])
        .status();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bridge_over_the_node_pod_cidr_then_portmap() {
        let opts = CniOptions {
            conf_dir: "/x/net.d".into(),
            ipam_dir: "/x/ipam".into(),
            bridge: "r8s0".into(),
            ip_masq: true,
            mtu: None,
        };
        let c = conflist(&opts, &["10.42.3.0/24".into()]);
        assert_eq!(c["cniVersion"], "1.0.0");
        let plugins = c["plugins"].as_array().unwrap();
        assert_eq!(plugins[0]["type"], "bridge");
        assert_eq!(plugins[0]["bridge"], "r8s0");
        assert_eq!(plugins[0]["ipam"]["ranges"][0][0]["subnet"], "10.42.3.0/24");
        assert_eq!(plugins[0]["ipam"]["dataDir"], "/x/ipam");
        assert_eq!(plugins[1]["type"], "portmap");
        assert_eq!(plugins[1]["capabilities"]["portMappings"], true);
        let dir = tempfile::tempdir().unwrap();
        let opts = CniOptions {
            conf_dir: dir.path().join("net.d"),
            ..opts
        };
        let path = write(&opts, &["10.42.3.0/24".into()]).unwrap();
        let read: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        assert_eq!(read, c);
        assert_eq!(c["plugins"][0]["ipam"]["routes"], json!([{"dst": "0.0.0.0/0"}]));
        // Dual-stack: a range set and a default route per family, the primary first.
        let dual = conflist(&opts, &["10.42.3.0/24".into(), "fd42:0:0:3::/64".into()]);
        assert_eq!(
            dual["plugins"][0]["ipam"]["ranges"],
            json!([[{"subnet": "10.42.3.0/24"}], [{"subnet": "fd42:0:0:3::/64"}]])
        );
        assert_eq!(
            dual["plugins"][0]["ipam"]["routes"],
            json!([{"dst": "0.0.0.0/0"}, {"dst": "::/0"}])
        );
    }
}
