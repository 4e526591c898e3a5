//! Servers joining a cluster (k3s's bootstrap data): every server of a cluster serves with the
//! same cluster CA, front-proxy CA and service-account signing key. The first server keeps
//! them in the datastore — the Secret `kube-system/r8s-server-bootstrap`, encrypted with a key
//! derived from the join token (PBKDF2-HMAC-SHA256, AES-256-GCM), so the datastore and its
//! backups never hold them in the clear — and a server that joins with `--token` fetches and
//! decrypts them before it makes its own serving certificate:
//!
//! - `--server URL --token TOKEN`: through the first server's API. The server is verified by
//!   the CA hash in the token (as a joining agent does) before the token is sent; the token's
//!   bootstrap identity may read that one Secret and nothing else.
//! - `--datastore-endpoint E --token TOKEN` without `--server`: straight from the shared
//!   datastore; the decrypted CA must have the token's hash.
//!
//! As in k3s, the agents' join token is the servers' too: whoever holds it can join a server.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;
use kube::api::{Api, PostParams};
use ring::aead;
use ring::rand::SecureRandom;

/// The Secret holding the encrypted bootstrap data.
pub const SECRET: &str = "r8s-server-bootstrap";
/// The files of `<data-dir>/server/tls` every server shares.
pub const SHARED_FILES: &[&str] = &[
    "ca.crt",
    "ca.key",
    "front-proxy-ca.crt",
    "front-proxy-ca.key",
    "service-account.key",
];
/// Shared too when they exist: the etcd CA of a `--cluster-init` cluster.
pub const SHARED_IF_PRESENT: &[&str] = &["etcd-ca.crt", "etcd-ca.key"];
const ITERATIONS: u32 = 100_000;
/// What the bootstrap token's group may do: read this one Secret.
const ROLE: &str = "r8s:server-bootstrap";
const JOIN_GROUP: &str = "system:bootstrappers:r8s:default-node-token";

/// The key for `bootstrap` (`<id>.<secret>`) and `salt`.
fn key(bootstrap: &str, salt: &[u8]) -> aead::LessSafeKey {
    let mut key = [0u8; 32];
    ring::pbkdf2::derive(
        ring::pbkdf2::PBKDF2_HMAC_SHA256,
        std::num::NonZeroU32::new(ITERATIONS).expect("nonzero"),
        salt,
        bootstrap.as_bytes(),
        &mut key,
    );
    aead::LessSafeKey::new(aead::UnboundKey::new(&aead::AES_256_GCM, &key).expect("32-byte key"))
}

/// `files` (name → contents) sealed with `bootstrap`: the Secret's data (salt, nonce, data).
pub fn seal(bootstrap: &str, files: &BTreeMap<String, String>) -> anyhow::Result<BTreeMap<String, Vec<u8>>> {
    let rng = ring::rand::SystemRandom::new();
    let mut salt = [0u8; 16];
    let mut nonce = [0u8; 12];
    rng.fill(&mut salt)
        .and_then(|_| rng.fill(&mut nonce))
        .map_err(|_| anyhow::anyhow!("the operating system's random source is unavailable"))?;
    let mut data = serde_json::to_vec(files)?;
    key(bootstrap, &salt)
        .seal_in_place_append_tag(
            aead::Nonce::assume_unique_for_key(nonce),
            aead::Aad::empty(),
            &mut data,
        )
        .map_err(|_| anyhow::anyhow!("encrypting the bootstrap data failed"))?;
    Ok(BTreeMap::from([
        ("salt".to_string(), salt.to_vec()),
        ("nonce".to_string(), nonce.to_vec()),
        ("data".to_string(), data),
    ]))
}

/// The files sealed in `sealed` by [`seal`], if `bootstrap` is the token they were sealed with.
pub fn open(bootstrap: &str, sealed: &BTreeMap<String, Vec<u8>>) -> anyhow::Result<BTreeMap<String, String>> {
    let field = |name: &str| {
        sealed
            .get(name)
            .with_context(|| format!("the bootstrap data has no {name:?}"))
    };
    let nonce: [u8; 12] = field("nonce")?
        .as_slice()
        .try_into()
        .context("the bootstrap data's nonce is not 12 bytes")?;
    let mut data = field("data")?.clone();
    let plain = key(bootstrap, field("salt")?)
        .open_in_place(
            aead::Nonce::assume_unique_for_key(nonce),
            aead::Aad::empty(),
            &mut data,
        )
        .map_err(|_| {
            anyhow::anyhow!(
                "the cluster's bootstrap data does not open with this token (a token of another cluster?)"
            )
        })?;
    Ok(serde_json::from_slice(plain)?)
}

/// First server: put the shared files in the datastore (once; a server that joined finds
/// them there) and let the join token read them.
pub async fn publish(admin: &kube::Client, tls_dir: &Path, bootstrap: &str) -> anyhow::Result<()> {
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "kube-system");
    if secrets.get_opt(SECRET).await?.is_none() {
        let mut files = BTreeMap::new();
        for name in SHARED_FILES {
            let path = tls_dir.join(name);
            let text =
                std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            files.insert(name.to_string(), text);
        }
        for name in SHARED_IF_PRESENT {
            if let Ok(text) = std::fs::read_to_string(tls_dir.join(name)) {
                files.insert(name.to_string(), text);
            }
        }
        let data = seal(bootstrap, &files)?
            .into_iter()
            .map(|(k, v)| (k, ByteString(v)))
            .collect();
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(SECRET.into()),
                namespace: Some("kube-system".into()),
                ..Default::default()
            },
            type_: Some("r8s.io/server-bootstrap".into()),
            data: Some(data),
            ..Default::default()
        };
        match secrets.create(&PostParams::default(), &secret).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    let roles: Api<Role> = Api::namespaced(admin.clone(), "kube-system");
    let role = Role {
        metadata: ObjectMeta {
            name: Some(ROLE.into()),
            namespace: Some("kube-system".into()),
            ..Default::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["secrets".into()]),
            resource_names: Some(vec![SECRET.into()]),
            verbs: vec!["get".into()],
            ..Default::default()
        }]),
    };
    let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), "kube-system");
    let binding = RoleBinding {
        metadata: ObjectMeta {
            name: Some(ROLE.into()),
            namespace: Some("kube-system".into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: ROLE.into(),
        },
        subjects: Some(vec![Subject {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Group".into(),
            name: JOIN_GROUP.into(),
            ..Default::default()
        }]),
    };
    for r in [
        roles.create(&PostParams::default(), &role).await.map(|_| ()),
        bindings
            .create(&PostParams::default(), &binding)
            .await
            .map(|_| ()),
    ] {
        match r {
            Ok(()) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The sealed data of the bootstrap Secret.
fn sealed_of(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
    secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect()
}

/// What a join attempt found: refused for good, or not yet possible.
enum Attempt {
    Refused(anyhow::Error),
    NotYet(anyhow::Error),
}

/// Joining server, through `server`'s API: the shared files, decrypted. A server that is not
/// reachable yet, or not ready to be joined (still starting), is asked again for up to two
/// minutes; a token it refuses, or a CA that is not the token's, is an error at once.
pub async fn fetch(
    server: &str,
    token: &r8s_kubelet::bootstrap::JoinToken,
) -> anyhow::Result<BTreeMap<String, String>> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        match fetch_once(server, token).await {
            Ok(files) => return Ok(files),
            Err(Attempt::Refused(e)) => return Err(e),
            Err(Attempt::NotYet(e)) if tokio::time::Instant::now() < deadline => {
                tracing::info!(error = %format!("{e:#}"), "cannot join yet; retrying");
                tokio::time::sleep(std::time::Duration::from_secs(2)).await;
            }
            Err(Attempt::NotYet(e)) => return Err(e),
        }
    }
}

async fn fetch_once(
    server: &str,
    token: &r8s_kubelet::bootstrap::JoinToken,
) -> Result<BTreeMap<String, String>, Attempt> {
    use r8s_kubelet::bootstrap::BootstrapError;
    let refused = |e: anyhow::Error| Attempt::Refused(e);
    let ca_der = match r8s_kubelet::bootstrap::fetch_ca(server, &token.ca_hash).await {
        Ok(der) => der,
        Err(e @ BootstrapError::Unreachable { .. }) => return Err(Attempt::NotYet(e.into())),
        Err(e) => return Err(refused(e.into())),
    };
    let url = server
        .parse()
        .with_context(|| format!("--server {server:?}"))
        .map_err(refused)?;
    let mut config = kube::Config::new(url);
    config.root_cert = Some(vec![ca_der]);
    config.auth_info.token = Some(token.bootstrap.clone().into());
    let client = kube::Client::try_from(config).map_err(|e| refused(e.into()))?;
    let secrets: Api<Secret> = Api::namespaced(client, "kube-system");
    let secret = match secrets.get(SECRET).await {
        Ok(s) => s,
        Err(kube::Error::Api(s)) if s.code == 401 => {
            return Err(refused(anyhow::anyhow!(
                "{server} refused the join token (expired, deleted, or of another cluster)"
            )))
        }
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 403 => {
            return Err(Attempt::NotYet(anyhow::anyhow!(
                "{server} has no server bootstrap data for this token yet"
            )))
        }
        Err(e) => {
            return Err(Attempt::NotYet(
                anyhow::Error::from(e).context(format!("reading the bootstrap data from {server}")),
            ))
        }
    };
    let files = open(&token.bootstrap, &sealed_of(&secret)).map_err(refused)?;
    check(&files, token).map_err(refused)?;
    Ok(files)
}

/// Joining server on a shared datastore, without `--server`: the shared files, read from it
/// (None when no server has put them there yet: this server is the first).
pub async fn fetch_from_store(
    store: &dyn r8s_store::Store,
    token: &r8s_kubelet::bootstrap::JoinToken,
) -> anyhow::Result<Option<BTreeMap<String, String>>> {
    let key = format!("/registry/secrets/kube-system/{SECRET}");
    let Some(kv) = store.get(&key, 0).await?.kv else {
        return Ok(None);
    };
    let secret: Secret = serde_json::from_slice(&kv.value).context("decoding the stored bootstrap Secret")?;
    let files = open(&token.bootstrap, &sealed_of(&secret))?;
    check(&files, token)?;
    Ok(Some(files))
}

/// The files hold every shared file, and the CA is the one the token names.
fn check(files: &BTreeMap<String, String>, token: &r8s_kubelet::bootstrap::JoinToken) -> anyhow::Result<()> {
    if let Some(missing) = SHARED_FILES.iter().find(|f| !files.contains_key(**f)) {
        anyhow::bail!("the cluster's bootstrap data lacks {missing}");
    }
    use rustls::pki_types::pem::PemObject;
    let der = rustls::pki_types::CertificateDer::from_pem_slice(files["ca.crt"].as_bytes())
        .map_err(|e| anyhow::anyhow!("the cluster's CA certificate: {e}"))?;
    if r8s_kubelet::bootstrap::ca_hash(&der) != token.ca_hash {
        anyhow::bail!("the cluster's CA is not the one the join token names (a token of another cluster?)");
    }
    Ok(())
}

/// Write the shared files into `tls_dir` (private files 0600) and the token's bootstrap part
/// as this server's own (`<server-dir>/token`), so that every server hands out one join token.
pub fn install(
    files: &BTreeMap<String, String>,
    tls_dir: &Path,
    server_dir: &Path,
    token: &r8s_kubelet::bootstrap::JoinToken,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(tls_dir).with_context(|| format!("creating {}", tls_dir.display()))?;
    for name in SHARED_FILES.iter().chain(SHARED_IF_PRESENT) {
        if let Some(text) = files.get(*name) {
            r8s_apiserver::pki::write_private(&tls_dir.join(name), text)?;
        }
    }
    r8s_apiserver::pki::write_private(&server_dir.join("token"), &token.bootstrap)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_data_opens_only_with_its_token() {
        let files = BTreeMap::from([("ca.key".to_string(), "-----BEGIN PRIVATE KEY-----".to_string())]);
        let sealed = seal("abcdef.0123456789abcdef", &files).unwrap();
        let text = String::from_utf8_lossy(&sealed["data"]).to_string();
        assert!(!text.contains("PRIVATE KEY"), "stored in the clear");
        assert_eq!(open("abcdef.0123456789abcdef", &sealed).unwrap(), files);
        let wrong = open("abcdef.0123456789abcdeg", &sealed).unwrap_err().to_string();
        assert!(wrong.contains("does not open with this token"), "{wrong}");
        let mut tampered = sealed.clone();
        tampered.get_mut("data").unwrap()[0] ^= 1;
        assert!(open("abcdef.0123456789abcdef", &tampered).is_err());
        // Two seals of the same files differ (fresh salt and nonce).
        assert_ne!(
            seal("abcdef.0123456789abcdef", &files).unwrap()["data"],
            sealed["data"]
        );
    }
}
