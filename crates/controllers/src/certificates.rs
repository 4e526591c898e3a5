//! Certificate controllers (upstream `csrapproving` and `csrsigning`): kubelet client
//! certificate requests are approved when the requester may ask for them (a
//! SubjectAccessReview for `certificatesigningrequests/nodeclient`, or `selfnodeclient` for a
//! node renewing its own), and approved requests for the client signers are signed with the
//! cluster CA. This is how an agent joining with a bootstrap token gets its node certificate.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use rcgen::{CertificateSigningRequestParams, DnType, DnValue, ExtendedKeyUsagePurpose, Issuer, KeyPair};
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::SyncResult;
use r8s_client::informer::{lookup, Change, Factory, Informer};
use r8s_client::queue::{run_controller, WorkQueue};

pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client";

/// How long signed certificates last unless the request asks for less (upstream's
/// `--cluster-signing-duration` default).
const DEFAULT_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// The CA that signs client certificates (`--cluster-signing-cert-file`/`-key-file`).
#[derive(Clone)]
pub struct SigningCa {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for SigningCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningCa(..)")
    }
}

pub struct CertificateController {
    client: Client,
    informer: Arc<Informer<CertificateSigningRequest>>,
    store: Store<CertificateSigningRequest>,
    queue: Arc<WorkQueue>,
    ca: Option<SigningCa>,
}

fn condition(csr: &CertificateSigningRequest, type_: &str) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

fn issued(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .is_some_and(|c| !c.0.is_empty())
}

/// What a kubelet client certificate request asks for, if it is well formed: the node's
/// user name. Upstream's `isNodeClientCert`: CN `system:node:<name>`, O `system:nodes` only,
/// no alternative names, usages of a client certificate.
pub fn kubelet_client_user(csr: &CertificateSigningRequest) -> Option<String> {
    if csr.spec.signer_name != KUBELET_CLIENT_SIGNER {
        return None;
    }
    let usages = csr.spec.usages.clone().unwrap_or_default();
    let allowed = ["digital signature", "key encipherment", "client auth"];
    if !usages.iter().any(|u| u == "client auth") || usages.iter().any(|u| !allowed.contains(&u.as_str())) {
        return None;
    }
    let pem = String::from_utf8(csr.spec.request.0.clone()).ok()?;
    let params = CertificateSigningRequestParams::from_pem(&pem).ok()?;
    let text = |v: &DnValue| match v {
        DnValue::Utf8String(s) => Some(s.clone()),
        DnValue::PrintableString(s) => Some(s.as_str().to_owned()),
        _ => None,
    };
    let dn = &params.params.distinguished_name;
    let cn = dn.get(&DnType::CommonName).and_then(text)?;
    let o = dn.get(&DnType::OrganizationName).and_then(text)?;
    if !cn.starts_with("system:node:") || cn.len() == "system:node:".len() || o != "system:nodes" {
        return None;
    }
    if !params.params.subject_alt_names.is_empty() {
        return None;
    }
    Some(cn)
}

impl CertificateController {
    pub fn new(factory: &Factory, ca: Option<SigningCa>) -> Arc<Self> {
        let informer = factory.get::<CertificateSigningRequest>();
        let this = Arc::new(Self {
            client: factory.client(),
            store: informer.store(),
            informer,
            queue: WorkQueue::new("csr"),
            ca,
        });
        let q = this.queue.clone();
        this.informer.add_handler(move |c| match c {
            Change::Added(r) | Change::Updated(_, r) => q.add(r.name_any()),
            Change::Deleted(_) => {}
        });
        this
    }

    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let this = self.clone();
        run_controller(
            self.queue.clone(),
            vec![self.informer.clone().synced()],
            1,
            stop,
            move |key| {
                let this = this.clone();
                async move { this.sync(&key).await }
            },
        )
        .await;
    }

    async fn sync(&self, name: &str) -> SyncResult {
        let Some(csr) = lookup(&self.store, name) else {
            return Ok(None);
        };
        if condition(&csr, "Denied") || condition(&csr, "Failed") || issued(&csr) {
            return Ok(None);
        }
        let api: Api<CertificateSigningRequest> = Api::all(self.client.clone());
        if !condition(&csr, "Approved") {
            self.approve(&api, &csr).await?;
            return Ok(None);
        }
        self.sign(&api, &csr).await
    }

    /// Approve a kubelet client request whose requester may make it.
    async fn approve(
        &self,
        api: &Api<CertificateSigningRequest>,
        csr: &CertificateSigningRequest,
    ) -> Result<(), Error> {
        let Some(node_user) = kubelet_client_user(csr) else {
            return Ok(());
        };
        let own = csr.spec.username.as_deref() == Some(node_user.as_str());
        let sub = if own { "selfnodeclient" } else { "nodeclient" };
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: csr.spec.username.clone(),
                groups: csr.spec.groups.clone(),
                uid: csr.spec.uid.clone(),
                extra: csr.spec.extra.clone(),
                resource_attributes: Some(ResourceAttributes {
                    group: Some("certificates.k8s.io".into()),
                    resource: Some("certificatesigningrequests".into()),
                    subresource: Some(sub.into()),
                    verb: Some("create".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let reviews: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let answer = reviews.create(&PostParams::default(), &review).await?;
        if !answer.status.is_some_and(|s| s.allowed) {
            return Ok(());
        }
        let mut updated = csr.clone();
        let status = updated.status.get_or_insert_with(Default::default);
        status
            .conditions
            .get_or_insert_with(Vec::new)
            .push(CertificateSigningRequestCondition {
                type_: "Approved".into(),
                status: "True".into(),
                reason: Some("AutoApproved".into()),
                message: Some("Auto approving kubelet client certificate after SubjectAccessReview.".into()),
                last_update_time: Some(Time(jiff::Timestamp::now())),
                ..Default::default()
            });
        api.replace_subresource("approval", &csr.name_any(), &PostParams::default(), &updated)
            .await?;
        Ok(())
    }

    /// Sign an approved request for one of the client signers.
    async fn sign(
        &self,
        api: &Api<CertificateSigningRequest>,
        csr: &CertificateSigningRequest,
    ) -> SyncResult {
        let Some(ca) = &self.ca else {
            return Ok(None);
        };
        if csr.spec.signer_name != KUBELET_CLIENT_SIGNER && csr.spec.signer_name != CLIENT_SIGNER {
            return Ok(None);
        }
        let pem = String::from_utf8(csr.spec.request.0.clone()).map_err(|e| Error::Other(e.to_string()))?;
        let duration = csr
            .spec
            .expiration_seconds
            .map(|s| Duration::from_secs(s.max(600) as u64))
            .unwrap_or(DEFAULT_DURATION)
            .min(DEFAULT_DURATION);
        let cert_pem = match sign_client(ca, &pem, duration) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(csr = %csr.name_any(), error = %e, "cannot sign the request");
                return Ok(None);
            }
        };
        let mut updated = csr.clone();
        updated.status.get_or_insert_with(Default::default).certificate =
            Some(k8s_openapi::ByteString(cert_pem.into_bytes()));
        api.replace_status(&csr.name_any(), &PostParams::default(), &updated)
            .await?;
        Ok(None)
    }
}

/// A client certificate for the key and subject of `csr_pem`, signed by `ca`.
pub fn sign_client(ca: &SigningCa, csr_pem: &str, duration: Duration) -> Result<String, String> {
    let key = KeyPair::from_pem(&ca.key_pem).map_err(|e| format!("the signing key: {e}"))?;
    let issuer =
        Issuer::from_ca_cert_pem(&ca.cert_pem, key).map_err(|e| format!("the signing certificate: {e}"))?;
    let mut csr =
        CertificateSigningRequestParams::from_pem(csr_pem).map_err(|e| format!("the request: {e}"))?;
    let now = time::OffsetDateTime::now_utc();
    // Backdated a little for clocks that lag, as upstream's signer does.
    csr.params.not_before = now - time::Duration::minutes(5);
    csr.params.not_after = now + time::Duration::seconds(duration.as_secs() as i64);
    csr.params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    csr.params.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyEncipherment,
    ];
    csr.params.is_ca = rcgen::IsCa::ExplicitNoCa;
    csr.params.serial_number = Some(rcgen::SerialNumber::from_slice(&serial()?));
    let cert = csr.signed_by(&issuer).map_err(|e| format!("signing: {e}"))?;
    Ok(cert.pem())
}

/// A random positive 128-bit serial number from the operating system's random source, as
/// upstream's signer draws one (RFC 5280 allows up to 20 octets).
fn serial() -> Result<[u8; 16], String> {
    use ring::rand::SecureRandom;
    let mut out = [0u8; 16];
    ring::rand::SystemRandom::new()
        .fill(&mut out)
        .map_err(|_| "the operating system's random source is unavailable".to_string())?;
    out[0] &= 0x7f;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::certificates::v1::CertificateSigningRequestSpec;

    fn request(cn: &str, o: &str, usages: &[&str], signer: &str) -> (CertificateSigningRequest, KeyPair) {
        let key = KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.distinguished_name.push(DnType::OrganizationName, o);
        let pem = params.serialize_request(&key).unwrap().pem().unwrap();
        let csr = CertificateSigningRequest {
            spec: CertificateSigningRequestSpec {
                request: k8s_openapi::ByteString(pem.into_bytes()),
                signer_name: signer.into(),
                usages: Some(usages.iter().map(|u| u.to_string()).collect()),
                ..Default::default()
            },
            ..Default::default()
        };
        (csr, key)
    }

    #[test]
    fn only_well_formed_kubelet_client_requests_qualify() {
        let ok = request(
            "system:node:n1",
            "system:nodes",
            &["digital signature", "client auth"],
            KUBELET_CLIENT_SIGNER,
        )
        .0;
        assert_eq!(kubelet_client_user(&ok).as_deref(), Some("system:node:n1"));
        for bad in [
            request(
                "system:node:n1",
                "system:masters",
                &["client auth"],
                KUBELET_CLIENT_SIGNER,
            )
            .0,
            request("admin", "system:nodes", &["client auth"], KUBELET_CLIENT_SIGNER).0,
            request(
                "system:node:n1",
                "system:nodes",
                &["server auth"],
                KUBELET_CLIENT_SIGNER,
            )
            .0,
            request("system:node:n1", "system:nodes", &["client auth"], CLIENT_SIGNER).0,
        ] {
            assert_eq!(kubelet_client_user(&bad), None);
        }
    }

    #[test]
    fn signed_certificates_carry_the_requested_subject_and_chain_to_the_ca() {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let ca = SigningCa {
            cert_pem: ca_cert.pem(),
            key_pem: ca_key.serialize_pem(),
        };
        let (csr, _) = request(
            "system:node:n1",
            "system:nodes",
            &["client auth"],
            KUBELET_CLIENT_SIGNER,
        );
        let pem = String::from_utf8(csr.spec.request.0.clone()).unwrap();
        let cert = sign_client(&ca, &pem, Duration::from_secs(3600)).unwrap();
        let (_, parsed) = x509_parser::pem::parse_x509_pem(cert.as_bytes()).unwrap();
        let x509 = parsed.parse_x509().unwrap();
        assert_eq!(x509.subject().to_string(), "CN=system:node:n1, O=system:nodes");
        let (_, ca_parsed) = x509_parser::pem::parse_x509_pem(ca.cert_pem.as_bytes()).unwrap();
        let ca_x509 = ca_parsed.parse_x509().unwrap();
        assert!(x509.verify_signature(Some(ca_x509.public_key())).is_ok());
        let lifetime = x509.validity().not_after.timestamp() - x509.validity().not_before.timestamp();
        assert_eq!(lifetime, 3600 + 300);
    }
}
