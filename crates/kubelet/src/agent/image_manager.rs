//! The image manager (upstream `pkg/kubelet/images`): a container's image pulled as its
//! imagePullPolicy says, with the pod's and the node's registry credentials, backing off after
//! a failed pull.

use std::time::{Duration, Instant};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::ResourceExt;

use super::{Agent, RELIST};

impl Agent {
    /// The container's image, pulled as its imagePullPolicy says (upstream's image manager
    /// `EnsureImageExists`): Never uses only what is there, IfNotPresent pulls when absent,
    /// Always pulls every time; pulls use the pod's imagePullSecrets, each matching credential
    /// in turn; a failed pull backs off as restarts do (ImagePullBackOff). Returns what the
    /// runtime knows of the image.
    pub(super) async fn ensure_image(
        &self,
        pod: &Pod,
        c: &k8s_openapi::api::core::v1::Container,
        sandbox_config: &cri::PodSandboxConfig,
    ) -> Result<Option<cri::Image>, (String, String)> {
        let image = c.image.clone().unwrap_or_default();
        let present = self.runtime.image_status(&image).await.ok().flatten();
        let airgap = self.airgap_images.contains(&crate::images::normalize(&image));
        let pull = match pull_decision(&image, c.image_pull_policy.as_deref(), present.is_some(), airgap) {
            Ok(pull) => pull,
            Err(msg) => {
                self.event(pod, "Warning", "ErrImageNeverPull", &msg).await;
                return Err(("ErrImageNeverPull".into(), msg));
            }
        };
        if !pull {
            let msg = format!("Container image \"{image}\" already present on machine");
            tracing::Span::current().record("decision", msg.as_str());
            self.event(pod, "Normal", "Pulled", &msg).await;
            return Ok(present);
        }
        // A failed pull is retried with the same back-off as restarts (ImagePullBackOff).
        let uid = pod.uid().unwrap_or_default();
        let key = format!("{uid}/pull/{image}");
        let record = self.record(&uid).unwrap_or_default();
        let in_backoff = record
            .lock()
            .unwrap()
            .backoff
            .in_backoff_since_update(&key, std::time::SystemTime::now());
        if in_backoff.is_some() {
            let now = std::time::SystemTime::now();
            let left = record.lock().unwrap().backoff.remaining_since_update(&key, now);
            self.wake_at(pod, now + left.unwrap_or_default());
            let msg = format!("Back-off pulling image \"{image}\"");
            self.event(pod, "Normal", "BackOff", &msg).await;
            self.event(pod, "Warning", "Failed", "Error: ImagePullBackOff")
                .await;
            return Err(("ImagePullBackOff".into(), msg));
        }
        // Our own containerd reaches a registry on loopback over plain HTTP.
        if self.opts.runtime_endpoint.is_none() {
            let (host, port, _) = crate::credentials::image_location(&image);
            if crate::containerd::is_loopback_host(&host) {
                let host_port = if port.is_empty() {
                    host
                } else {
                    format!("{host}:{port}")
                };
                let certs_d = self.opts.dir.join("containerd").join("certs.d");
                if let Err(e) = crate::containerd::allow_plain_http(&certs_d, &host_port) {
                    tracing::warn!(error = %e, "agent: could not configure the loopback registry");
                }
            }
        }
        self.event(pod, "Normal", "Pulling", &format!("Pulling image \"{image}\""))
            .await;
        let credentials = self.pull_credentials(pod, &image).await;
        let auths: Vec<Option<cri::AuthConfig>> = if credentials.is_empty() {
            vec![None]
        } else {
            credentials
                .into_iter()
                .map(|cr| {
                    Some(cri::AuthConfig {
                        username: cr.username,
                        password: cr.password,
                        ..Default::default()
                    })
                })
                .collect()
        };
        let began = Instant::now();
        let mut last_error = None;
        for auth in auths {
            match self.runtime.pull_image(&image, auth, sandbox_config).await {
                Ok(_) => {
                    last_error = None;
                    break;
                }
                Err(e) => last_error = Some(e),
            }
        }
        if let Some(e) = last_error {
            record
                .lock()
                .unwrap()
                .backoff
                .next(&key, std::time::SystemTime::now());
            let err = match &e {
                crate::Error::Status(s) => format!("rpc error: code = {:?} desc = {}", s.code(), s.message()),
                e => e.to_string(),
            };
            self.event(
                pod,
                "Warning",
                "Failed",
                &format!("Failed to pull image \"{image}\": {err}"),
            )
            .await;
            self.event(pod, "Warning", "Failed", "Error: ErrImagePull").await;
            // Back soon to report ImagePullBackOff, then at the back-off's end to pull again.
            self.wake_at(pod, std::time::SystemTime::now() + RELIST);
            return Err(("ErrImagePull".into(), err));
        }
        let took = go_duration(began.elapsed());
        let pulled = self.runtime.image_status(&image).await.ok().flatten();
        let size = pulled.as_ref().map(|i| i.size).unwrap_or(0);
        let msg = format!(
            "Successfully pulled image \"{image}\" in {took} ({took} including waiting). Image size: {size} bytes."
        );
        tracing::Span::current().record("decision", msg.as_str());
        self.event(pod, "Normal", "Pulled", &msg).await;
        Ok(pulled)
    }

    /// The registry credentials of the pod's imagePullSecrets that apply to `image`; a secret
    /// that cannot be read is a warning, and the pull goes on without it (as upstream).
    pub(super) async fn pull_credentials(
        &self,
        pod: &Pod,
        image: &str,
    ) -> Vec<crate::credentials::Credential> {
        let names: Vec<String> = pod
            .spec
            .as_ref()
            .and_then(|s| s.image_pull_secrets.as_ref())
            .into_iter()
            .flatten()
            .map(|r| r.name.clone())
            .filter(|n| !n.is_empty())
            .collect();
        // The node's own credentials come after the pod's (upstream's keyring order).
        let node = self.opts.registries.credentials(image);
        if names.is_empty() {
            return node;
        }
        let api: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        let mut keyring = crate::credentials::Keyring::default();
        let mut missing = Vec::new();
        for name in names {
            match api.get(&name).await {
                Ok(secret) => {
                    let data = serde_json::to_value(&secret.data).unwrap_or_default();
                    let type_ = secret.type_.unwrap_or_default();
                    if let Err(e) = keyring.add_secret(&type_, &data) {
                        tracing::warn!(secret = %name, error = %e, "agent: unusable image pull secret");
                    }
                }
                Err(_) => missing.push(name),
            }
        }
        if !missing.is_empty() {
            let msg = format!(
                "Unable to retrieve some image pull secrets ({}); attempting to pull the image may not succeed.",
                missing.join(", ")
            );
            self.event(pod, "Warning", "FailedToRetrieveImagePullSecret", &msg)
                .await;
        }
        let mut found = keyring.lookup(image);
        for c in node {
            if !found.contains(&c) {
                found.push(c);
            }
        }
        found
    }
}

/// A duration as upstream's image manager prints one: truncated to the millisecond, in Go's
/// form (`523ms`, `1.5s`, `2m3.004s`, `1h0m0s`).
fn go_duration(d: Duration) -> String {
    r8s_api::duration::format(Duration::from_millis(d.as_millis() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_durations_print_as_upstream() {
        assert_eq!(go_duration(Duration::from_micros(523_400)), "523ms");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(go_duration(Duration::from_millis(123_004)), "2m3.004s");
        assert_eq!(go_duration(Duration::from_secs(4500)), "1h15m0s");
    }
}

/// Whether to pull `image` under `policy` (upstream's defaulting when unset: Always for an
/// untagged or `:latest` image, else IfNotPresent), given whether it is `present` and whether it
/// is an `airgap` image (imported from a tarball: the only copy there is, used as it is even
/// under Always — r8s's choice; upstream would pull it and fail where no registry is reachable).
/// Err: the message of ErrImageNeverPull.
fn pull_decision(image: &str, policy: Option<&str>, present: bool, airgap: bool) -> Result<bool, String> {
    let policy = policy.unwrap_or_else(|| {
        let tagged = image.contains('@')
            || image
                .rsplit('/')
                .next()
                .and_then(|l| l.split_once(':'))
                .is_some_and(|(_, t)| t != "latest");
        if tagged {
            "IfNotPresent"
        } else {
            "Always"
        }
    });
    match policy {
        "Never" if !present => Err(format!(
            "Container image \"{image}\" is not present with pull policy of Never"
        )),
        "Never" => Ok(false),
        "Always" => Ok(!present || !airgap),
        _ => Ok(!present),
    }
}

#[cfg(test)]
mod pull_tests {
    use super::pull_decision;

    #[test]
    fn pulls_follow_the_policy_and_its_default() {
        // Defaults: untagged and :latest are Always, tagged and digests IfNotPresent.
        assert_eq!(pull_decision("nginx", None, true, false), Ok(true));
        assert_eq!(pull_decision("nginx:latest", None, true, false), Ok(true));
        assert_eq!(pull_decision("nginx:1.25", None, true, false), Ok(false));
        assert_eq!(pull_decision("nginx:1.25", None, false, false), Ok(true));
        assert_eq!(
            pull_decision("reg:5000/app@sha256:ab", None, true, false),
            Ok(false)
        );
        // An air-gap image is used as it is, even under Always.
        assert_eq!(pull_decision("nginx", Some("Always"), true, true), Ok(false));
        assert_eq!(pull_decision("nginx", Some("Always"), false, true), Ok(true));
        assert_eq!(pull_decision("nginx:1.25", Some("Never"), true, false), Ok(false));
        assert_eq!(
            pull_decision("ghost:1", Some("Never"), false, false),
            Err("Container image \"ghost:1\" is not present with pull policy of Never".into())
        );
    }
}
