//! Controller credentials: with `--use-service-account-credentials` each controller writes as
//! its own ServiceAccount in kube-system (`system:serviceaccount:kube-system:replicaset-controller`
//! …), holding only upstream's `system:controller:*` role, as kubeadm runs upstream's controller
//! manager. The controller manager itself (its own identity) creates the ServiceAccounts and
//! requests their tokens; the shared informers keep reading with its identity.
//!
//! Tokens are bound, expiring TokenRequest tokens written to files that kube-rs re-reads
//! (its `tokenFile` support), renewed long before they expire.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::Client;
use tokio_util::sync::CancellationToken;

use crate::Error;

/// Lifetime asked for each token, and how often it is renewed.
const TOKEN_SECONDS: i64 = 3600;
const RENEW_EVERY: Duration = Duration::from_secs(600);

/// How the controllers authenticate their writes.
#[derive(Clone)]
pub enum Credentials {
    /// Every controller as the controller manager.
    Shared,
    /// Each controller as its own ServiceAccount; `config` is the controller manager's own
    /// (server and CA are kept, the credentials replaced), token files go under `dir`.
    ServiceAccounts { config: Box<kube::Config>, dir: PathBuf },
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::Shared => f.write_str("Shared"),
            Credentials::ServiceAccounts { dir, .. } => write!(f, "ServiceAccounts({})", dir.display()),
        }
    }
}

/// The client `controller` writes with (`root` is the controller manager's own). A client of
/// its own is fenced by `fence` (the leader's, see `r8s_client::leader`) as `root` is: a
/// stalled leader that wakes must not write through it.
pub async fn client_for(
    root: &Client,
    creds: &Credentials,
    fence: Option<&r8s_client::leader::Fence>,
    controller: &str,
    stop: &CancellationToken,
) -> Result<Client, Error> {
    let Credentials::ServiceAccounts { config, dir } = creds else {
        return Ok(root.clone());
    };
    let sas: Api<ServiceAccount> = Api::namespaced(root.clone(), "kube-system");
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(controller.into()),
            namespace: Some("kube-system".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    match sas.create(&crate::post_params(), &sa).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::Other(format!("{}: {e}", dir.display())))?;
    let path = dir.join(format!("{controller}.token"));
    write_token(&sas, controller, &path).await?;
    // Renew in the background for as long as the controllers run.
    let (renew_sas, renew_path, name, stop) =
        (sas.clone(), path.clone(), controller.to_owned(), stop.clone());
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(RENEW_EVERY) => {}
            }
            if let Err(e) = write_token(&renew_sas, &name, &renew_path).await {
                tracing::warn!(controller = %name, error = %e, "renewing the controller's token failed");
            }
        }
    });
    let mut config = (**config).clone();
    config.auth_info = kube::config::AuthInfo {
        token_file: Some(path.to_string_lossy().into_owned()),
        ..Default::default()
    };
    let client = r8s_client::http2::client(config)?;
    Ok(match fence {
        Some(fence) => r8s_client::leader::fenced(client, fence.clone()),
        None => client,
    })
}

/// Request a token for ServiceAccount `name` and write it to `path` (atomically, mode 0600).
async fn write_token(sas: &Api<ServiceAccount>, name: &str, path: &std::path::Path) -> Result<(), Error> {
    let req = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(TOKEN_SECONDS),
            ..Default::default()
        },
        ..Default::default()
    };
    let got = sas
        .create_token_request(name, &PostParams::default(), &req)
        .await?;
    let token = got.status.map(|s| s.token).unwrap_or_default();
    let tmp = path.with_extension("token.tmp");
    let io = |e: std::io::Error| Error::Other(format!("{}: {e}", path.display()));
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io)?;
        f.write_all(token.as_bytes()).map_err(io)?;
    }
    std::fs::rename(&tmp, path).map_err(io)
}
