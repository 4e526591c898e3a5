//! Running the overlay on a node: wait for the node's podCIDR, set up this side (device,
//! masquerade), publish it in the Node's annotations, then follow every Node and bring the
//! kernel's entries to them on each change; on a clean stop remove what was set up.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use r8s_client::informer::Factory;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::dataplane::Dataplane;
use super::{backend_data, node_subnets, peers, Backend, OverlayConfig};
use super::{
    ANNOTATION_BACKEND_DATA, ANNOTATION_BACKEND_TYPE, ANNOTATION_PUBLIC_IP, ANNOTATION_SUBNET_MANAGER,
};

/// Run until `stop`. `client` is the node's own (it patches its Node's annotations and reads
/// all Nodes). An error is why the overlay could not start.
pub async fn run(client: kube::Client, cfg: OverlayConfig, stop: CancellationToken) -> Result<(), String> {
    if cfg.backend == Backend::None {
        return Ok(());
    }
    let factory = Factory::new(client.clone(), None);
    let nodes = factory.get::<Node>();
    let wake = Arc::new(Notify::new());
    {
        let wake = wake.clone();
        nodes.add_handler(move |_| wake.notify_one());
    }
    let tasks = factory.start(&stop);
    let store = nodes.store();
    // This node's subnet, once node IPAM has given it one.
    let subnet = loop {
        let own = store
            .state()
            .into_iter()
            .find(|n| n.metadata.name.as_deref() == Some(cfg.node_name.as_str()));
        if let (Some(s), s6) = own.map(|n| node_subnets(&n)).unwrap_or_default() {
            break (s, s6);
        }
        tokio::select! {
            _ = wake.notified() => {}
            _ = stop.cancelled() => {
                tasks.iter().for_each(|t| t.abort());
                return Ok(());
            }
        }
    };
    let (subnet, subnet6) = subnet;
    let (mut dp, mac) = Dataplane::open(cfg.clone(), subnet, subnet6).await?;
    tracing::info!(backend = cfg.backend.as_str(), subnet = %format!("{}/{}", subnet.0, subnet.1),
        subnet6 = ?subnet6, "overlay: this node's side is up");
    let mut annotations = serde_json::Map::new();
    annotations.insert(ANNOTATION_BACKEND_TYPE.into(), cfg.backend.as_str().into());
    annotations.insert(ANNOTATION_PUBLIC_IP.into(), cfg.node_ip.to_string().into());
    annotations.insert(ANNOTATION_SUBNET_MANAGER.into(), "true".into());
    if let Some(mac) = mac {
        annotations.insert(ANNOTATION_BACKEND_DATA.into(), backend_data(cfg.vni, &mac).into());
    }
    let patch = serde_json::json!({"metadata": {"annotations": annotations}});
    let api: Api<Node> = Api::all(client);
    // Published until it sticks (the API may be briefly away); peers learn of this node then.
    let mut published = false;
    loop {
        if !published {
            match api
                .patch(&cfg.node_name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => published = true,
                Err(e) => {
                    tracing::warn!(error = %e, "overlay: could not publish this node's tunnel endpoint")
                }
            }
        }
        let want = peers(&cfg, store.state().iter().map(|n| n.as_ref()));
        if let Err(e) = dp.apply(&want).await {
            tracing::warn!(error = %e, "overlay: some peers are not programmed yet");
        }
        let retry = !published || dp.installed().count() != want.len();
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(std::time::Duration::from_secs(1)), if retry => {}
            _ = stop.cancelled() => break,
        }
    }
    tasks.iter().for_each(|t| t.abort());
    dp.close().await
}
