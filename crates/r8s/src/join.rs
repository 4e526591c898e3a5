//! Joining agents: the server keeps a bootstrap token (a `kube-system/bootstrap-token-<id>`
//! Secret) and the RBAC bindings that let its holders ask for node certificates and have them
//! approved (kubeadm's `kubeadm:get-nodes`-style bindings, named `r8s:*` here) and the
//! Service proxy's and network policy's read rights for nodes (agents run them as
//! themselves), and writes the
//! join token `K10<CA hash>::<id>.<secret>` to `<data-dir>/server/node-token`.

use std::path::Path;

use anyhow::Context;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};

/// `n` random characters of `[a-z0-9]` (a bootstrap token's alphabet) from the operating
/// system's random source; an error when there is none (no token is better than a guessable
/// one). Bytes of 252 and above are drawn again so that every character is equally likely.
fn random(n: usize) -> anyhow::Result<String> {
    use ring::rand::SecureRandom;
    const ALPHABET: &[u8; 36] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let rng = ring::rand::SystemRandom::new();
    let mut out = String::with_capacity(n);
    let mut buf = [0u8; 64];
    while out.len() < n {
        rng.fill(&mut buf).map_err(|_| {
            anyhow::anyhow!("the operating system's random source is unavailable: cannot make a join token")
        })?;
        for b in buf.iter().filter(|b| **b < 252) {
            if out.len() == n {
                break;
            }
            out.push(ALPHABET[usize::from(*b % 36)] as char);
        }
    }
    Ok(out)
}

async fn create_if_absent<K>(api: &Api<K>, obj: &K) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.create(&PostParams::default(), obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Make sure agents can join; returns the join token (see [`write_node_token`]).
pub async fn ensure(client: &kube::Client, server_dir: &Path, ca_pem: &str) -> anyhow::Result<String> {
    let token_path = server_dir.join("token");
    let bootstrap = match std::fs::read_to_string(&token_path) {
        Ok(t) if t.trim().len() == 23 => t.trim().to_owned(),
        _ => {
            let t = format!("{}.{}", random(6)?, random(16)?);
            r8s_apiserver::pki::write_private(&token_path, &t)?;
            t
        }
    };
    let (id, secret) = bootstrap.split_once('.').context("malformed server/token")?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "kube-system");
    let data = [
        ("token-id", id),
        ("token-secret", secret),
        ("usage-bootstrap-authentication", "true"),
        ("usage-bootstrap-signing", "true"),
        ("auth-extra-groups", "system:bootstrappers:r8s:default-node-token"),
        (
            "description",
            "The token r8s agents join with (r8s agent --token).",
        ),
    ];
    create_if_absent(
        &secrets,
        &Secret {
            metadata: ObjectMeta {
                name: Some(format!("bootstrap-token-{id}")),
                namespace: Some("kube-system".into()),
                ..Default::default()
            },
            type_: Some("bootstrap.kubernetes.io/token".into()),
            string_data: Some(data.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            ..Default::default()
        },
    )
    .await
    .context("creating the bootstrap token Secret")?;

    // What a node's network policy engine reads (kube-router's policy controller's rights).
    let roles: Api<ClusterRole> = Api::all(client.clone());
    create_if_absent(
        &roles,
        &ClusterRole {
            metadata: ObjectMeta {
                name: Some("r8s:network-policy".into()),
                ..Default::default()
            },
            rules: Some(vec![
                PolicyRule {
                    api_groups: Some(vec!["".into()]),
                    resources: Some(vec!["pods".into(), "namespaces".into()]),
                    verbs: vec!["get".into(), "list".into(), "watch".into()],
                    ..Default::default()
                },
                PolicyRule {
                    api_groups: Some(vec!["networking.k8s.io".into()]),
                    resources: Some(vec!["networkpolicies".into()]),
                    verbs: vec!["get".into(), "list".into(), "watch".into()],
                    ..Default::default()
                },
            ]),
            ..Default::default()
        },
    )
    .await
    .context("creating ClusterRole r8s:network-policy")?;
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    for (name, role, group) in [
        (
            "r8s:node-bootstrapper",
            "system:node-bootstrapper",
            "system:bootstrappers",
        ),
        (
            "r8s:node-autoapprove-bootstrap",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            "system:bootstrappers",
        ),
        (
            "r8s:node-autoapprove-certificate-rotation",
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            "system:nodes",
        ),
        // A joined agent runs the Service proxy and cluster DNS with its node's identity:
        // kube-proxy's read rights (Services, EndpointSlices, Nodes; Events) for nodes.
        ("r8s:node-proxier", "system:node-proxier", "system:nodes"),
        // Every node enforces network policy for its pods.
        ("r8s:network-policy", "r8s:network-policy", "system:nodes"),
    ] {
        create_if_absent(
            &bindings,
            &ClusterRoleBinding {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    ..Default::default()
                },
                role_ref: RoleRef {
                    api_group: "rbac.authorization.k8s.io".into(),
                    kind: "ClusterRole".into(),
                    name: role.into(),
                },
                subjects: Some(vec![Subject {
                    kind: "Group".into(),
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    name: group.into(),
                    ..Default::default()
                }]),
            },
        )
        .await
        .with_context(|| format!("creating ClusterRoleBinding {name}"))?;
    }

    use rustls::pki_types::pem::PemObject;
    let ca_der = rustls::pki_types::CertificateDer::from_pem_slice(ca_pem.as_bytes())
        .context("reading the cluster CA")?;
    Ok(r8s_kubelet::bootstrap::JoinToken::format(
        ca_der.as_ref(),
        &bootstrap,
    ))
}

/// Write the join token to `<server-dir>/node-token`, once everything a joining agent or
/// server needs is in place (its presence tells scripts the server is ready to be joined).
pub fn write_node_token(server_dir: &Path, join: &str) -> anyhow::Result<()> {
    r8s_apiserver::pki::write_private(&server_dir.join("node-token"), &format!("{join}\n"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_tokens_use_the_whole_alphabet_and_differ() {
        let a = random(16).unwrap();
        let b = random(16).unwrap();
        assert_eq!(a.len(), 16);
        assert_ne!(a, b);
        assert!(a.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()));
        // 3600 characters: every one of the 36 appears (a uniform draw misses one with
        // probability about 36 * (35/36)^3600, far below 1e-40).
        let many = random(3600).unwrap();
        for c in b"abcdefghijklmnopqrstuvwxyz0123456789" {
            assert!(many.as_bytes().contains(c), "{} never drawn", *c as char);
        }
    }
}
