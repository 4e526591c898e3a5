//! The cluster's PKI, made at first start and reused after (as k3s does): one CA that signs the
//! API server's serving certificate and client certificates, an admin client certificate
//! (user `admin`, group `system:masters`), and the admin kubeconfig.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyPair, KeyUsagePurpose, SanType,
};

#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path}: {reason}")]
    Invalid { path: String, reason: String },
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),
}

/// Where the PKI lives and what it holds, as PEM.
pub struct Pki {
    pub dir: PathBuf,
    pub ca_cert_pem: String,
    ca_key_pem: String,
    pub serving_cert_pem: String,
    pub serving_key_pem: String,
    pub admin_cert_pem: String,
    pub admin_key_pem: String,
    /// The key that signs service-account tokens (ECDSA P-256, PKCS#8 PEM),
    /// `service-account.key`.
    pub service_account_key_pem: String,
}

/// The datastore's certificates (see [`Pki::etcd`]), as PEM; the files are in `dir`.
pub struct EtcdPki {
    pub dir: PathBuf,
    pub ca_pem: String,
    pub server_cert_pem: String,
    pub server_key_pem: String,
    pub client_cert_pem: String,
    pub client_key_pem: String,
}

impl EtcdPki {
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
const LEAF_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// Leaf certificates closer than this to expiry are renewed at start.
const RENEW_BEFORE: Duration = Duration::from_secs(90 * 24 * 3600);

impl Pki {
    /// Load the PKI under `dir`, creating what is missing: the CA, a serving certificate whose
    /// SANs include `sans` (reissued when a SAN is added or it nears expiry) and the admin
    /// client certificate.
    pub fn ensure(dir: &Path, sans: &[String]) -> Result<Self, PkiError> {
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        set_mode(dir, 0o700)?;
        let ca_cert_path = dir.join("ca.crt");
        let ca_key_path = dir.join("ca.key");
        let (ca_cert_pem, ca_key_pem) = match (read(&ca_cert_path)?, read(&ca_key_path)?) {
            (Some(c), Some(k)) => (c, k),
            (None, None) => new_ca(&format!("r8s-ca@{}", unix_now()), &ca_cert_path, &ca_key_path)?,
            _ => {
                return Err(PkiError::Invalid {
                    path: dir.display().to_string(),
                    reason: "only one of ca.crt and ca.key exists; restore the other or remove both".into(),
                })
            }
        };
        let ca_key = KeyPair::from_pem(&ca_key_pem).map_err(|e| invalid(&ca_key_path, e))?;
        let issuer = Issuer::from_ca_cert_pem(&ca_cert_pem, ca_key).map_err(|e| invalid(&ca_cert_path, e))?;

        let (serving_cert_pem, serving_key_pem) = leaf(dir, "serving-kube-apiserver", &issuer, |existing| {
            let mut params = CertificateParams::new(Vec::<String>::new())?;
            params.distinguished_name = dn("kube-apiserver", &[]);
            params.subject_alt_names = san_types(sans)?;
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
            params.key_usages = vec![
                KeyUsagePurpose::DigitalSignature,
                KeyUsagePurpose::KeyEncipherment,
            ];
            let reuse = existing.is_some_and(|cert| sans.iter().all(|s| cert_has_san(cert, s)));
            Ok((params, reuse))
        })?;
        let (admin_cert_pem, admin_key_pem) = leaf(dir, "client-admin", &issuer, |existing| {
            let mut params = CertificateParams::new(Vec::<String>::new())?;
            params.distinguished_name = dn("admin", &["system:masters"]);
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            params.key_usages = vec![
                KeyUsagePurpose::DigitalSignature,
                KeyUsagePurpose::KeyEncipherment,
            ];
            Ok((params, existing.is_some()))
        })?;
        let sa_key_path = dir.join("service-account.key");
        let service_account_key_pem = match read(&sa_key_path)? {
            Some(k) => k,
            None => {
                let key = KeyPair::generate()?.serialize_pem();
                write(&sa_key_path, &key, 0o600)?;
                key
            }
        };
        Ok(Self {
            service_account_key_pem,
            dir: dir.to_owned(),
            ca_cert_pem,
            ca_key_pem,
            serving_cert_pem,
            serving_key_pem,
            admin_cert_pem,
            admin_key_pem,
        })
    }

    /// The CA's private key (PEM), for a controller manager that signs client certificates.
    pub fn ca_key_pem(&self) -> &str {
        &self.ca_key_pem
    }

    pub fn ca_cert_path(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// Issue a client certificate for `user` in `groups`, signed by the cluster CA.
    pub fn issue_client_cert(&self, user: &str, groups: &[&str]) -> Result<(String, String), PkiError> {
        let ca_key = KeyPair::from_pem(&self.ca_key_pem)?;
        let issuer = Issuer::from_ca_cert_pem(&self.ca_cert_pem, ca_key)?;
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = dn(user, groups);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        validity(&mut params, LEAF_VALIDITY);
        let cert = params.signed_by(&key, &issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// The front-proxy CA (`front-proxy-ca.crt`, made at first use) and a client certificate
    /// it signs for `front-proxy-client`, which the aggregator presents to aggregated API
    /// servers (upstream's kubeadm layout). The CA is the one they trust for request headers.
    pub fn front_proxy_client(&self) -> Result<crate::ProxyIdentity, PkiError> {
        let (ca_cert_pem, issuer) = load_or_new_ca(&self.dir, "front-proxy-ca")?;
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = dn("front-proxy-client", &[]);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        validity(&mut params, LEAF_VALIDITY);
        let cert = params.signed_by(&key, &issuer)?;
        Ok(crate::ProxyIdentity {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            ca_pem: ca_cert_pem,
        })
    }

    /// The cluster datastore's PKI (`--cluster-init`'s etcd members), kubeadm's layout under
    /// this directory: the etcd CA (`etcd-ca.crt`, made once and shared by every server), this
    /// member's certificate for both its client and peer ports (`etcd-server`, for `sans`,
    /// reissued when a SAN is added), and the API server's client certificate
    /// (`etcd-client`, `kube-apiserver-etcd-client`).
    pub fn etcd(&self, sans: &[String]) -> Result<EtcdPki, PkiError> {
        let (ca_cert_pem, issuer) = load_or_new_ca(&self.dir, "etcd-ca")?;
        let (server_cert_pem, server_key_pem) = leaf(&self.dir, "etcd-server", &issuer, |existing| {
            let mut params = CertificateParams::new(Vec::<String>::new())?;
            params.distinguished_name = dn("etcd-server", &[]);
            params.subject_alt_names = san_types(sans)?;
            // Peers present it as clients of each other too.
            params.extended_key_usages = vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ];
            params.key_usages = vec![
                KeyUsagePurpose::DigitalSignature,
                KeyUsagePurpose::KeyEncipherment,
            ];
            let reuse = existing.is_some_and(|cert| sans.iter().all(|s| cert_has_san(cert, s)));
            Ok((params, reuse))
        })?;
        let (client_cert_pem, client_key_pem) = leaf(&self.dir, "etcd-client", &issuer, |existing| {
            let mut params = CertificateParams::new(Vec::<String>::new())?;
            params.distinguished_name = dn("kube-apiserver-etcd-client", &[]);
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            params.key_usages = vec![
                KeyUsagePurpose::DigitalSignature,
                KeyUsagePurpose::KeyEncipherment,
            ];
            Ok((params, existing.is_some()))
        })?;
        Ok(EtcdPki {
            dir: self.dir.clone(),
            ca_pem: ca_cert_pem,
            server_cert_pem,
            server_key_pem,
            client_cert_pem,
            client_key_pem,
        })
    }

    /// A kubeconfig for `server` authenticating with the admin client certificate.
    pub fn admin_kubeconfig(&self, server: &str) -> String {
        kubeconfig(
            server,
            &self.ca_cert_pem,
            &self.admin_cert_pem,
            &self.admin_key_pem,
        )
    }
}

/// A kubeconfig with one cluster, one user (a client certificate) and one context, all named
/// `default` (as k3s writes it).
pub fn kubeconfig(server: &str, ca_pem: &str, cert_pem: &str, key_pem: &str) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority-data: {}\n    server: {}\n  name: default\n\
         contexts:\n- context:\n    cluster: default\n    user: default\n  name: default\ncurrent-context: default\n\
         preferences: {{}}\nusers:\n- name: default\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
        b64(ca_pem),
        server,
        b64(cert_pem),
        b64(key_pem)
    )
}

/// Certificates (DER) as one PEM bundle, as a kubeconfig's CA data holds them.
pub fn certs_pem(ders: &[Vec<u8>]) -> String {
    let mut out = String::new();
    for der in ders {
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        out.push_str("-----BEGIN CERTIFICATE-----\n");
        for line in b64.as_bytes().chunks(64) {
            out.push_str(std::str::from_utf8(line).unwrap_or_default());
            out.push('\n');
        }
        out.push_str("-----END CERTIFICATE-----\n");
    }
    out
}

/// Write a file readable only by its owner.
pub fn write_private(path: &Path, contents: &str) -> Result<(), PkiError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
    }
    write(path, contents, 0o600)
}

/// Load `<dir>/<name>.{crt,key}` or (re)issue it. `make` gets the existing certificate (DER) if
/// any and says whether it can be kept.
/// A new self-signed CA named `common_name`, written to `cert_path` and `key_path`: its
/// certificate and key (PEM).
fn new_ca(common_name: &str, cert_path: &Path, key_path: &Path) -> Result<(String, String), PkiError> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name = dn(common_name, &[]);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut params, CA_VALIDITY);
    let cert = params.self_signed(&key)?;
    write(key_path, &key.serialize_pem(), 0o600)?;
    write(cert_path, &cert.pem(), 0o644)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// The CA `<dir>/<name>.{crt,key}` (made at first use, named `<name>@<time>`): its
/// certificate (PEM) and the issuer it signs as.
fn load_or_new_ca(dir: &Path, name: &str) -> Result<(String, Issuer<'static, KeyPair>), PkiError> {
    let cert_path = dir.join(format!("{name}.crt"));
    let key_path = dir.join(format!("{name}.key"));
    let (cert_pem, key_pem) = match (read(&cert_path)?, read(&key_path)?) {
        (Some(c), Some(k)) => (c, k),
        _ => new_ca(&format!("{name}@{}", unix_now()), &cert_path, &key_path)?,
    };
    let key = KeyPair::from_pem(&key_pem).map_err(|e| invalid(&key_path, e))?;
    let issuer = Issuer::from_ca_cert_pem(&cert_pem, key).map_err(|e| invalid(&cert_path, e))?;
    Ok((cert_pem, issuer))
}

/// Subject alternative names: IP addresses as such, anything else as a DNS name.
fn san_types(sans: &[String]) -> Result<Vec<SanType>, rcgen::Error> {
    sans.iter()
        .map(|s| match s.parse() {
            Ok(ip) => Ok(SanType::IpAddress(ip)),
            Err(_) => s.clone().try_into().map(SanType::DnsName),
        })
        .collect()
}

fn leaf(
    dir: &Path,
    name: &str,
    issuer: &Issuer<'_, KeyPair>,
    make: impl FnOnce(Option<&[u8]>) -> Result<(CertificateParams, bool), rcgen::Error>,
) -> Result<(String, String), PkiError> {
    let cert_path = dir.join(format!("{name}.crt"));
    let key_path = dir.join(format!("{name}.key"));
    let existing = match (read(&cert_path)?, read(&key_path)?) {
        (Some(c), Some(k)) => {
            let der = pem_der(&c).ok_or_else(|| invalid(&cert_path, "not a PEM certificate"))?;
            Some((c, k, der))
        }
        _ => None,
    };
    let fresh = existing
        .as_ref()
        .is_some_and(|(_, _, der)| !expires_within(der, RENEW_BEFORE));
    let (mut params, keep) = make(
        existing
            .as_ref()
            .filter(|_| fresh)
            .map(|(_, _, der)| der.as_slice()),
    )?;
    if let (true, Some((c, k, _))) = (keep && fresh, existing) {
        return Ok((c, k));
    }
    validity(&mut params, LEAF_VALIDITY);
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, issuer)?;
    write(&key_path, &key.serialize_pem(), 0o600)?;
    write(&cert_path, &cert.pem(), 0o644)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn dn(common_name: &str, organizations: &[&str]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    for o in organizations {
        dn.push(DnType::OrganizationName, *o);
    }
    dn
}

fn validity(params: &mut CertificateParams, valid_for: Duration) {
    let now = time_now();
    // A little slack for clocks that are behind.
    params.not_before = now - Duration::from_secs(3600);
    params.not_after = now + valid_for;
}

fn time_now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn pem_der(pem: &str) -> Option<Vec<u8>> {
    let (_, parsed) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).ok()?;
    Some(parsed.contents)
}

fn expires_within(der: &[u8], window: Duration) -> bool {
    match x509_parser::parse_x509_certificate(der) {
        Ok((_, cert)) => {
            let not_after = cert.validity().not_after.timestamp();
            not_after - (unix_now() as i64) < window.as_secs() as i64
        }
        Err(_) => true,
    }
}

fn cert_has_san(der: &[u8], san: &str) -> bool {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return false;
    };
    let Ok(Some(ext)) = cert.subject_alternative_name() else {
        return false;
    };
    ext.value.general_names.iter().any(|name| match name {
        x509_parser::extensions::GeneralName::DNSName(d) => *d == san,
        x509_parser::extensions::GeneralName::IPAddress(bytes) => match san.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V4(v4)) => *bytes == v4.octets(),
            Ok(std::net::IpAddr::V6(v6)) => *bytes == v6.octets(),
            Err(_) => false,
        },
        _ => false,
    })
}

fn read(path: &Path) -> Result<Option<String>, PkiError> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(path, e)),
    }
}

fn write(path: &Path, contents: &str, mode: u32) -> Result<(), PkiError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .map_err(|e| io(&tmp, e))?;
    f.write_all(contents.as_bytes()).map_err(|e| io(&tmp, e))?;
    f.sync_all().map_err(|e| io(&tmp, e))?;
    set_mode(&tmp, mode)?;
    std::fs::rename(&tmp, path).map_err(|e| io(path, e))
}

fn set_mode(path: &Path, mode: u32) -> Result<(), PkiError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|e| io(path, e))
}

fn io(path: &Path, source: std::io::Error) -> PkiError {
    PkiError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn invalid(path: &Path, reason: impl std::fmt::Display) -> PkiError {
    PkiError::Invalid {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject(pem: &str) -> (String, Vec<String>) {
        let der = pem_der(pem).unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
        let cn = cert
            .subject()
            .iter_common_name()
            .next()
            .unwrap()
            .as_str()
            .unwrap()
            .to_owned();
        let orgs = cert
            .subject()
            .iter_organization()
            .map(|o| o.as_str().unwrap().to_owned())
            .collect();
        (cn, orgs)
    }

    #[test]
    fn first_start_creates_and_restart_reuses() {
        let dir = tempfile::tempdir().unwrap();
        let sans = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
        let a = Pki::ensure(dir.path(), &sans).unwrap();
        assert_eq!(
            subject(&a.admin_cert_pem),
            ("admin".into(), vec!["system:masters".into()])
        );
        let der = pem_der(&a.serving_cert_pem).unwrap();
        assert!(cert_has_san(&der, "localhost"));
        assert!(cert_has_san(&der, "127.0.0.1"));
        assert!(!cert_has_san(&der, "example.com"));
        let b = Pki::ensure(dir.path(), &sans).unwrap();
        assert_eq!(a.ca_cert_pem, b.ca_cert_pem);
        assert_eq!(a.serving_cert_pem, b.serving_cert_pem);
        assert_eq!(a.admin_cert_pem, b.admin_cert_pem);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dir.path().join("ca.key"))
                .unwrap()
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_new_tls_san_reissues_only_the_serving_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let a = Pki::ensure(dir.path(), &["localhost".to_owned()]).unwrap();
        let b = Pki::ensure(dir.path(), &["localhost".to_owned(), "r8s.example".to_owned()]).unwrap();
        assert_eq!(a.ca_cert_pem, b.ca_cert_pem);
        assert_eq!(a.admin_cert_pem, b.admin_cert_pem);
        assert_ne!(a.serving_cert_pem, b.serving_cert_pem);
        assert!(cert_has_san(
            &pem_der(&b.serving_cert_pem).unwrap(),
            "r8s.example"
        ));
    }

    #[test]
    fn issued_client_certs_carry_user_and_groups() {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::ensure(dir.path(), &["localhost".to_owned()]).unwrap();
        let (cert, _key) = pki
            .issue_client_cert("system:node:n1", &["system:nodes"])
            .unwrap();
        assert_eq!(
            subject(&cert),
            ("system:node:n1".into(), vec!["system:nodes".into()])
        );
    }
}
