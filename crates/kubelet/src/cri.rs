//! A CRI v1 client over a unix socket (tonic with the protos of the `k8s-cri` crate).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use hyper_util::rt::TokioIo;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{VersionRequest, VersionResponse};
use tonic::transport::{Channel, Endpoint, Uri};

use crate::metrics::RuntimeOps;
use crate::Error;

/// The CRI API version this kubelet speaks.
pub const CRI_VERSION: &str = "v1";

pub type ImageClient = ImageServiceClient<Timed>;

#[derive(Clone)]
pub struct Cri {
    pub runtime: RuntimeServiceClient<Timed>,
    pub images: ImageServiceClient<Timed>,
    channel: Timed,
}

/// The channel to the runtime, timing each call for `/metrics` (by its gRPC method).
#[derive(Clone)]
pub struct Timed {
    inner: Channel,
    ops: Option<RuntimeOps>,
}

type Req = http::Request<tonic::body::Body>;
type Resp = http::Response<tonic::body::Body>;

impl tower::Service<Req> for Timed {
    type Response = Resp;
    type Error = tonic::transport::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Resp, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        tower::Service::poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let method = req.uri().path().rsplit('/').next().unwrap_or("").to_string();
        let ops = self.ops.clone();
        let began = Instant::now();
        let call = tower::Service::call(&mut self.inner, req);
        Box::pin(async move {
            let r = call.await;
            if let Some(ops) = ops {
                // A failed call answers with its status in the headers (trailers-only).
                let failed = match &r {
                    Err(_) => true,
                    Ok(resp) => resp.headers().get("grpc-status").is_some_and(|v| v != "0"),
                };
                ops.observe(&method, began.elapsed().as_secs_f64(), failed);
            }
            r
        })
    }
}

impl Cri {
    /// Connect to a CRI socket (e.g. `/run/containerd/containerd.sock`).
    pub async fn connect(socket: &Path) -> Result<Self, Error> {
        Self::connect_timed(socket, None).await
    }

    /// The same, recording every call's latency and outcome in `ops`.
    pub async fn connect_timed(socket: &Path, ops: Option<RuntimeOps>) -> Result<Self, Error> {
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
        let timed = Timed { inner: channel, ops };
        Ok(Self {
            runtime: RuntimeServiceClient::new(timed.clone()),
            images: ImageServiceClient::new(timed.clone()),
            channel: timed,
        })
    }

    /// The connection to the runtime's socket, for its services beyond CRI.
    pub fn channel(&self) -> Timed {
        self.channel.clone()
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
