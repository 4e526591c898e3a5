//! A connection's client certificate chain and what the authenticators found about it.
//!
//! The TLS handshake verified the chain against every CA the server trusts; the x509 and
//! request-header authenticators then check it against their own CA alone. The chain is the
//! connection's for its life, so each such verdict (and the leaf's subject) is worked out on the
//! connection's first request and reused by the others: a kubelet's or a controller's
//! connection carries thousands of requests, and a signature check each time was a tenth of
//! the server's CPU at 1,000 nodes. A verdict holds only until the chain's first certificate
//! expires; after that every request is verified afresh (and fails), as upstream's per-request
//! `Verify` would.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::ClientCertVerifier;

/// A verifier's identity for the verdict cache: unique for the process's life.
pub(crate) fn verifier_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Whether `chain` (leaf first) verifies against `verifier` now.
pub(crate) fn chain_verifies(verifier: &dyn ClientCertVerifier, chain: &[CertificateDer<'static>]) -> bool {
    match chain.split_first() {
        Some((leaf, intermediates)) => verifier
            .verify_client_cert(leaf, intermediates, UnixTime::now())
            .is_ok(),
        None => false,
    }
}

/// The leaf's subject: its common name and its organisations.
pub type Subject = (String, Vec<String>);

/// The client certificates of one connection (none for a connection without them).
pub struct PeerCertificates {
    chain: Vec<CertificateDer<'static>>,
    /// Verdicts by verifier id.
    verdicts: Mutex<Vec<(u64, bool)>>,
    /// The earliest `notAfter` of the chain, Unix seconds (0 when a certificate is unreadable:
    /// then nothing is cached).
    expires: OnceLock<i64>,
    subject: OnceLock<Result<Subject, String>>,
}

static NONE: PeerCertificates = PeerCertificates::new(Vec::new());

impl PeerCertificates {
    pub const fn new(chain: Vec<CertificateDer<'static>>) -> Self {
        Self {
            chain,
            verdicts: Mutex::new(Vec::new()),
            expires: OnceLock::new(),
            subject: OnceLock::new(),
        }
    }

    /// A request without certificates (a TokenReview's, a test's).
    pub fn none() -> &'static Self {
        &NONE
    }

    pub fn chain(&self) -> &[CertificateDer<'static>] {
        &self.chain
    }

    pub fn is_empty(&self) -> bool {
        self.chain.is_empty()
    }

    /// Whether the chain verifies against `verifier` (known by `id`, from [`verifier_id`]).
    pub(crate) fn verifies(&self, id: u64, verifier: &dyn ClientCertVerifier) -> bool {
        if self.chain.is_empty() {
            return false;
        }
        let expires = *self.expires.get_or_init(|| {
            self.chain
                .iter()
                .map(|c| match x509_parser::parse_x509_certificate(c) {
                    Ok((_, cert)) => cert.validity().not_after.timestamp(),
                    Err(_) => 0,
                })
                .min()
                .unwrap_or(0)
        });
        let now = UnixTime::now().as_secs() as i64;
        if now >= expires {
            return chain_verifies(verifier, &self.chain);
        }
        if let Some(&(_, v)) = self.lock().iter().find(|(i, _)| *i == id) {
            return v;
        }
        // Verified outside the lock: two first requests at once both verify, and agree.
        let v = chain_verifies(verifier, &self.chain);
        self.lock().push((id, v));
        v
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(u64, bool)>> {
        self.verdicts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The leaf's common name and organisations, or why it cannot be read.
    pub(crate) fn subject(&self) -> Result<&Subject, &str> {
        self.subject
            .get_or_init(|| {
                let leaf = self.chain.first().ok_or("no client certificate")?;
                let (_, cert) = x509_parser::parse_x509_certificate(leaf)
                    .map_err(|e| format!("unreadable client certificate: {e}"))?;
                let name = cert
                    .subject()
                    .iter_common_name()
                    .next()
                    .and_then(|cn| cn.as_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                let groups = cert
                    .subject()
                    .iter_organization()
                    .filter_map(|o| o.as_str().ok().map(str::to_owned))
                    .collect();
                Ok((name, groups))
            })
            .as_ref()
            .map_err(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    /// A verifier that counts its calls and accepts what `ok` says.
    #[derive(Debug)]
    struct Counting {
        calls: AtomicUsize,
        ok: bool,
    }

    impl ClientCertVerifier for Counting {
        fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
            &[]
        }
        fn verify_client_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: UnixTime,
        ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            if self.ok {
                Ok(rustls::server::danger::ClientCertVerified::assertion())
            } else {
                Err(rustls::Error::General("no".into()))
            }
        }
        fn verify_tls12_signature(
            &self,
            _: &[u8],
            _: &CertificateDer<'_>,
            _: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            unreachable!()
        }
        fn verify_tls13_signature(
            &self,
            _: &[u8],
            _: &CertificateDer<'_>,
            _: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            unreachable!()
        }
        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            Vec::new()
        }
    }

    fn cert(cn: &str, not_after: (i32, u8, u8)) -> CertificateDer<'static> {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "team");
        params.not_after = rcgen::date_time_ymd(not_after.0, not_after.1, not_after.2);
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().clone()
    }

    #[test]
    fn a_verdict_is_reached_once_per_verifier_and_connection() {
        let peer = PeerCertificates::new(vec![cert("alice", (2999, 1, 1))]);
        let yes = Arc::new(Counting {
            calls: 0.into(),
            ok: true,
        });
        let no = Arc::new(Counting {
            calls: 0.into(),
            ok: false,
        });
        let (yes_id, no_id) = (verifier_id(), verifier_id());
        for _ in 0..5 {
            assert!(peer.verifies(yes_id, &*yes));
            assert!(!peer.verifies(no_id, &*no));
        }
        assert_eq!(yes.calls.load(Ordering::SeqCst), 1);
        assert_eq!(no.calls.load(Ordering::SeqCst), 1);
        // Another connection with the same certificate verifies on its own.
        let other = PeerCertificates::new(peer.chain().to_vec());
        assert!(other.verifies(yes_id, &*yes));
        assert_eq!(yes.calls.load(Ordering::SeqCst), 2);
        assert_eq!(
            peer.subject().unwrap(),
            &("alice".to_owned(), vec!["team".to_owned()])
        );
        // Without certificates nothing verifies and the verifier is not asked.
        assert!(!PeerCertificates::none().verifies(yes_id, &*yes));
        assert_eq!(yes.calls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn an_expired_chain_is_verified_on_every_request() {
        let peer = PeerCertificates::new(vec![cert("old", (2001, 1, 1))]);
        let v = Counting {
            calls: 0.into(),
            ok: false,
        };
        let id = verifier_id();
        for _ in 0..3 {
            assert!(!peer.verifies(id, &v));
        }
        assert_eq!(v.calls.load(Ordering::SeqCst), 3);
    }
}
