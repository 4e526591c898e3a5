//! A CRI v1 client over a unix socket (tonic with the protos of the `k8s-cri` crate).

use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{VersionRequest, VersionResponse};
use tonic::transport::{Channel, Endpoint, Uri};

use crate::Error;

/// The CRI API version this kubelet speaks.
pub const CRI_VERSION: &str = "v1";

#[derive(Clone)]
pub struct Cri {
    pub runtime: RuntimeServiceClient<Channel>,
    pub images: ImageServiceClient<Channel>,
}

impl Cri {
    /// Connect to a CRI socket (e.g. `/run/containerd/containerd.sock`).
    pub async fn connect(socket: &Path) -> Result<Self, Error> {
        let socket: PathBuf = socket.to_path_buf();
        // The URI is required by tonic but unused: every connection goes to the socket.
        let channel = Endpoint::try_from("http://[::1]:0")?
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let socket = socket.clone();
                async move {
                    Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(socket).await?))
                }
            }))
            .await?;
        Ok(Self {
            runtime: RuntimeServiceClient::new(channel.clone()),
            images: ImageServiceClient::new(channel),
        })
    }

    /// The runtime's name and versions (CRI `Version`).
    pub async fn version(&self) -> Result<VersionResponse, Error> {
        let mut rt = self.runtime.clone();
        Ok(rt
            .version(VersionRequest {
                version: CRI_VERSION.into(),
            })
            .await?
            .into_inner())
    }
}
