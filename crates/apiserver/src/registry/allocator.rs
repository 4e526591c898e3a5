//! Service cluster IPs and node ports, allocated as upstream's IP and port allocators do: each
//! value in use is a key under `/registry/ranges/...` created with create-if-absent, so two
//! concurrent creates can never get the same value, and released when its service goes.

use std::net::Ipv4Addr;

use r8s_store::{RangeRequest, Store, StoreError};

use r8s_api::validation::FieldError;

/// Why an allocation failed.
#[derive(Debug)]
pub(crate) enum AllocError {
    /// The requested value cannot be had.
    Invalid(FieldError),
    Full(String),
    Store(String),
}

/// The range `--service-cidr` gives, for cluster IPs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServiceCidr {
    pub network: Ipv4Addr,
    pub prefix_len: u8,
}

impl ServiceCidr {
    pub fn parse(s: &str) -> Result<Self, String> {
        let (ip, len) = s
            .split_once('/')
            .ok_or_else(|| format!("invalid CIDR {s:?}: expected a.b.c.d/n"))?;
        let ip: Ipv4Addr = ip
            .parse()
            .map_err(|_| format!("invalid CIDR {s:?}: bad address"))?;
        let prefix_len: u8 = len
            .parse()
            .map_err(|_| format!("invalid CIDR {s:?}: bad prefix length"))?;
        if !(8..=30).contains(&prefix_len) {
            return Err(format!(
                "invalid CIDR {s:?}: the prefix length must be between 8 and 30"
            ));
        }
        let mask = u32::MAX << (32 - prefix_len);
        Ok(Self {
            network: Ipv4Addr::from(u32::from(ip) & mask),
            prefix_len,
        })
    }

    fn size(&self) -> u32 {
        1 << (32 - self.prefix_len)
    }

    fn contains(&self, ip: Ipv4Addr) -> bool {
        let mask = u32::MAX << (32 - self.prefix_len);
        u32::from(ip) & mask == u32::from(self.network)
    }

    /// The first usable address, which upstream gives the `kubernetes` service.
    pub fn first(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.network) + 1)
    }
}

impl std::fmt::Display for ServiceCidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix_len)
    }
}

/// What is being allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pool {
    ClusterIp(ServiceCidr),
    NodePort,
}

const NODE_PORTS: std::ops::RangeInclusive<u32> = 30000..=32767;

impl Pool {
    fn prefix(&self) -> &'static str {
        match self {
            Pool::ClusterIp(_) => "/registry/ranges/serviceips/",
            Pool::NodePort => "/registry/ranges/servicenodeports/",
        }
    }

    fn what(&self) -> &'static str {
        match self {
            Pool::ClusterIp(_) => "IP",
            Pool::NodePort => "port",
        }
    }

    /// Whether `value` is a valid member of this pool.
    fn check(&self, value: &str) -> Result<(), String> {
        match self {
            Pool::ClusterIp(cidr) => match value.parse::<Ipv4Addr>() {
                Ok(ip)
                    if cidr.contains(ip)
                        && ip != cidr.network
                        && u32::from(ip) != u32::from(cidr.network) + cidr.size() - 1 =>
                {
                    Ok(())
                }
                Ok(_) => Err(format!(
                    "the provided IP ({value}) is not in the valid range. The range of valid IPs is {cidr}"
                )),
                Err(_) => Err("must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)".into()),
            },
            Pool::NodePort => match value.parse::<u32>() {
                Ok(p) if NODE_PORTS.contains(&p) => Ok(()),
                _ => Err(format!(
                    "provided port is not in the valid range. The range of valid ports is {}-{}",
                    NODE_PORTS.start(),
                    NODE_PORTS.end()
                )),
            },
        }
    }

    /// The candidates, in order from a position that spreads allocations out.
    fn candidate(&self, i: u32) -> String {
        match self {
            // Not the network or broadcast address, and .1 is the kubernetes service's.
            Pool::ClusterIp(cidr) => {
                let usable = cidr.size() - 3;
                Ipv4Addr::from(u32::from(cidr.network) + 2 + (i % usable)).to_string()
            }
            Pool::NodePort => {
                (NODE_PORTS.start() + i % (NODE_PORTS.end() - NODE_PORTS.start() + 1)).to_string()
            }
        }
    }

    fn len(&self) -> u32 {
        match self {
            Pool::ClusterIp(cidr) => cidr.size() - 3,
            Pool::NodePort => NODE_PORTS.end() - NODE_PORTS.start() + 1,
        }
    }
}

/// Random values tried before the free ones are listed.
const RANDOM_TRIES: u32 = 8;

/// Reserve `requested`, or a free value if none was asked for, for `owner` (ns/name). `field`
/// names where the value goes, for errors.
pub(crate) async fn allocate(
    store: &dyn Store,
    pool: Pool,
    owner: &str,
    requested: Option<&str>,
    field: &str,
) -> Result<String, AllocError> {
    // Upstream shows cluster IPs as the Go slice they are set in, ports as numbers.
    let invalid = |value: &str, why: String| {
        let shown = match pool {
            Pool::ClusterIp(_) => format!("[]string{{\"{value}\"}}"),
            Pool::NodePort => value.to_owned(),
        };
        AllocError::Invalid(FieldError::invalid_raw(field, &shown, why))
    };
    if let Some(value) = requested {
        pool.check(value).map_err(|why| invalid(value, why))?;
        return match store
            .create(
                &format!("{}{value}", pool.prefix()),
                bytes::Bytes::from(owner.to_owned()),
            )
            .await
        {
            Ok(_) => Ok(value.to_owned()),
            Err(StoreError::AlreadyExists { .. }) => Err(invalid(
                value,
                match pool {
                    Pool::ClusterIp(_) => {
                        format!("failed to allocate IP {value}: provided IP is already allocated")
                    }
                    Pool::NodePort => "provided port is already allocated".to_owned(),
                },
            )),
            Err(e) => Err(AllocError::Store(e.to_string())),
        };
    }
    // A few values at random first, each reserved by a create that fails if it is taken:
    // at the densities a range usually has, one or two tries, without reading what is used
    // (a read of every allocation per create made creating the 10,000th Service 50 times
    // slower than the 1,000th).
    let mut seed = uuid::Uuid::new_v4().as_u128();
    for _ in 0..RANDOM_TRIES.min(pool.len()) {
        let candidate = pool.candidate(seed as u32);
        seed >>= 32;
        if seed == 0 {
            seed = uuid::Uuid::new_v4().as_u128();
        }
        if reserve(store, pool, owner, &candidate).await? {
            return Ok(candidate);
        }
    }
    // A crowded range: the free values from what is used.
    let used = store
        .range(RangeRequest {
            prefix: pool.prefix().to_owned(),
            ..Default::default()
        })
        .await
        .map_err(|e| AllocError::Store(e.to_string()))?;
    let used: std::collections::HashSet<String> = used
        .kvs
        .iter()
        .map(|kv| kv.key.trim_start_matches(pool.prefix()).to_owned())
        .collect();
    let start = uuid::Uuid::new_v4().as_u128() as u32;
    for i in 0..pool.len() {
        let candidate = pool.candidate(start.wrapping_add(i));
        if used.contains(&candidate) {
            continue;
        }
        // Taken meanwhile by a concurrent create: try the next.
        if reserve(store, pool, owner, &candidate).await? {
            return Ok(candidate);
        }
    }
    Err(AllocError::Full(match pool {
        Pool::ClusterIp(_) => "failed to allocate a serviceIP: range is full".to_owned(),
        Pool::NodePort => "failed to allocate a nodePort: range is full".to_owned(),
    }))
}

/// Reserve `candidate` for `owner`: false when someone holds it already.
async fn reserve(store: &dyn Store, pool: Pool, owner: &str, candidate: &str) -> Result<bool, AllocError> {
    match store
        .create(
            &format!("{}{candidate}", pool.prefix()),
            bytes::Bytes::from(owner.to_owned()),
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(StoreError::AlreadyExists { .. }) => Ok(false),
        Err(e) => Err(AllocError::Store(e.to_string())),
    }
}

/// Give a value back.
pub(crate) async fn release(store: &dyn Store, pool: Pool, value: &str) {
    if let Err(e) = store.delete(&format!("{}{value}", pool.prefix()), None).await {
        if !matches!(e, StoreError::NotFound { .. }) {
            tracing::warn!(value, error = %e, "could not release an allocated {}", pool.what());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn cidrs() {
        let c = ServiceCidr::parse("10.43.7.9/16").unwrap();
        assert_eq!(c.to_string(), "10.43.0.0/16");
        assert_eq!(c.first(), Ipv4Addr::new(10, 43, 0, 1));
        assert!(c.contains(Ipv4Addr::new(10, 43, 255, 254)));
        assert!(!c.contains(Ipv4Addr::new(10, 44, 0, 1)));
        assert!(ServiceCidr::parse("10.43.0.0").is_err());
        assert!(ServiceCidr::parse("10.43.0.0/31").is_err());
    }

    #[tokio::test]
    async fn allocations_are_unique_and_released() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(
            r8s_store::embedded::EmbeddedStore::open(r8s_store::embedded::EmbeddedOptions::new(dir.path()))
                .unwrap(),
        );
        // A /29 has 6 host addresses; .1 is the kubernetes service's, 5 remain (.2 to .6).
        let pool = Pool::ClusterIp(ServiceCidr::parse("10.43.0.0/29").unwrap());
        let mut got = Vec::new();
        for i in 0..5 {
            got.push(
                allocate(store.as_ref(), pool, &format!("ns/s{i}"), None, "spec.clusterIP")
                    .await
                    .unwrap(),
            );
        }
        let mut unique = got.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), 5, "{got:?}");
        assert!(
            !got.contains(&"10.43.0.1".to_owned()) && !got.contains(&"10.43.0.7".to_owned()),
            "{got:?}"
        );
        let full = allocate(store.as_ref(), pool, "ns/x", None, "spec.clusterIP")
            .await
            .unwrap_err();
        assert!(
            matches!(&full, AllocError::Full(m) if m.contains("range is full")),
            "{full:?}"
        );
        let taken = allocate(store.as_ref(), pool, "ns/y", Some(&got[0]), "spec.clusterIPs")
            .await
            .unwrap_err();
        let AllocError::Invalid(fe) = taken else {
            panic!("{taken:?}")
        };
        assert_eq!(fe.field, "spec.clusterIPs");
        assert!(
            fe.message.ends_with("provided IP is already allocated"),
            "{}",
            fe.message
        );
        release(store.as_ref(), pool, &got[0]).await;
        assert_eq!(
            allocate(store.as_ref(), pool, "ns/y", Some(&got[0]), "spec.clusterIP")
                .await
                .unwrap(),
            got[0]
        );
        let outside = allocate(store.as_ref(), pool, "ns/z", Some("10.44.0.1"), "spec.clusterIP")
            .await
            .unwrap_err();
        assert!(matches!(outside, AllocError::Invalid(_)));
    }
}
