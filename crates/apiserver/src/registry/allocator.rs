//! Service cluster IPs and node ports, allocated as upstream's IP and port allocators do: each
//! value in use is a key under `/registry/ranges/...` created with create-if-absent, so two
//! concurrent creates can never get the same value, and released when its service goes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

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

/// An IP family, as Services name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpFamily {
    IPv4,
    IPv6,
}

impl IpFamily {
    pub fn of(ip: IpAddr) -> Self {
        if ip.is_ipv4() {
            IpFamily::IPv4
        } else {
            IpFamily::IPv6
        }
    }

    /// The family of an address written as text (`None` when it is not an address).
    pub fn of_str(ip: &str) -> Option<Self> {
        ip.parse::<IpAddr>().ok().map(Self::of)
    }

    pub fn name(self) -> &'static str {
        match self {
            IpFamily::IPv4 => "IPv4",
            IpFamily::IPv6 => "IPv6",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "IPv4" => Some(IpFamily::IPv4),
            "IPv6" => Some(IpFamily::IPv6),
            _ => None,
        }
    }

    pub fn other(self) -> Self {
        match self {
            IpFamily::IPv4 => IpFamily::IPv6,
            IpFamily::IPv6 => IpFamily::IPv4,
        }
    }

    fn bits(self) -> u8 {
        match self {
            IpFamily::IPv4 => 32,
            IpFamily::IPv6 => 128,
        }
    }
}

impl std::fmt::Display for IpFamily {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u32::from(a) as u128,
        IpAddr::V6(a) => u128::from(a),
    }
}

fn from_u128(family: IpFamily, n: u128) -> IpAddr {
    match family {
        IpFamily::IPv4 => IpAddr::V4(Ipv4Addr::from(n as u32)),
        IpFamily::IPv6 => IpAddr::V6(Ipv6Addr::from(n)),
    }
}

/// One range `--service-cidr` gives, for cluster IPs of its family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServiceCidr {
    pub network: IpAddr,
    pub prefix_len: u8,
}

impl ServiceCidr {
    pub fn parse(s: &str) -> Result<Self, String> {
        let (ip, len) = s
            .split_once('/')
            .ok_or_else(|| format!("invalid CIDR {s:?}: expected an address/prefix length"))?;
        let ip: IpAddr = ip
            .parse()
            .map_err(|_| format!("invalid CIDR {s:?}: bad address"))?;
        let prefix_len: u8 = len
            .parse()
            .map_err(|_| format!("invalid CIDR {s:?}: bad prefix length"))?;
        // IPv4 as upstream's allocator takes it; IPv6 from a /64 (upstream's ServiceCIDR
        // allocator's widest) to a /126, leaving room for a few addresses.
        let (lo, hi) = match ip {
            IpAddr::V4(_) => (8, 30),
            IpAddr::V6(_) => (64, 126),
        };
        if !(lo..=hi).contains(&prefix_len) {
            return Err(format!(
                "invalid CIDR {s:?}: the prefix length must be between {lo} and {hi}"
            ));
        }
        let family = IpFamily::of(ip);
        let host_bits = family.bits() - prefix_len;
        let mask = !((1u128 << host_bits) - 1) & (u128::MAX >> (128 - family.bits() as u32));
        Ok(Self {
            network: from_u128(family, to_u128(ip) & mask),
            prefix_len,
        })
    }

    pub fn family(&self) -> IpFamily {
        IpFamily::of(self.network)
    }

    fn host_bits(&self) -> u8 {
        self.family().bits() - self.prefix_len
    }

    /// Addresses a Service may get: not the network address, not an IPv4 range's broadcast
    /// address, not the first (the `kubernetes` Service's), and for wide IPv6 ranges only
    /// the first 2^32 of them.
    fn usable(&self) -> u32 {
        let size = 1u128 << self.host_bits();
        let reserved = if self.family() == IpFamily::IPv4 { 3 } else { 2 };
        (size - reserved).min(u32::MAX as u128) as u32
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        IpFamily::of(ip) == self.family()
            && to_u128(ip) >> self.host_bits() == to_u128(self.network) >> self.host_bits()
    }

    /// The first usable address, which upstream gives the `kubernetes` service.
    pub fn first(&self) -> IpAddr {
        from_u128(self.family(), to_u128(self.network) + 1)
    }

    fn nth(&self, n: u128) -> IpAddr {
        from_u128(self.family(), to_u128(self.network) + n)
    }

    /// Whether `ip` may be asked for: inside, and neither the network nor (IPv4) the
    /// broadcast address.
    fn allocatable(&self, ip: IpAddr) -> bool {
        let offset = to_u128(ip).wrapping_sub(to_u128(self.network));
        let last = (1u128 << self.host_bits()) - 1;
        self.contains(ip) && offset != 0 && !(self.family() == IpFamily::IPv4 && offset == last)
    }
}

impl std::fmt::Display for ServiceCidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix_len)
    }
}

/// The cluster's Service ranges (`--service-cidr`, one range or two of different families
/// separated by a comma, the first the primary family), as upstream's
/// `--service-cluster-ip-range`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceCidrs(Vec<ServiceCidr>);

impl ServiceCidrs {
    pub fn parse(s: &str) -> Result<Self, String> {
        let cidrs = s
            .split(',')
            .map(|c| ServiceCidr::parse(c.trim()))
            .collect::<Result<Vec<_>, _>>()?;
        match cidrs.as_slice() {
            [_] => {}
            [a, b] if a.family() != b.family() => {}
            [_, _] => {
                return Err(format!(
                    "{s:?}: the two ranges must be of different IP families (one IPv4, one IPv6)"
                ))
            }
            _ => return Err(format!("{s:?}: at most two ranges, one per IP family")),
        }
        Ok(Self(cidrs))
    }

    /// The primary range: the `kubernetes` Service's and single-stack Services' default.
    pub fn primary(&self) -> ServiceCidr {
        self.0[0]
    }

    pub fn of(&self, family: IpFamily) -> Option<ServiceCidr> {
        self.0.iter().copied().find(|c| c.family() == family)
    }

    /// Whether the cluster is dual-stack.
    pub fn dual(&self) -> bool {
        self.0.len() == 2
    }

    pub fn iter(&self) -> impl Iterator<Item = ServiceCidr> + '_ {
        self.0.iter().copied()
    }
}

impl std::fmt::Display for ServiceCidrs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&parts.join(","))
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
            Pool::ClusterIp(cidr) => match value.parse::<IpAddr>() {
                Ok(ip) if cidr.allocatable(ip) => Ok(()),
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
            Pool::ClusterIp(cidr) => cidr.nth(2 + (i % cidr.usable()) as u128).to_string(),
            Pool::NodePort => {
                (NODE_PORTS.start() + i % (NODE_PORTS.end() - NODE_PORTS.start() + 1)).to_string()
            }
        }
    }

    fn len(&self) -> u32 {
        match self {
            Pool::ClusterIp(cidr) => cidr.usable(),
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
        assert_eq!(c.first(), IpAddr::from([10, 43, 0, 1]));
        assert!(c.contains(IpAddr::from([10, 43, 255, 254])));
        assert!(!c.contains(IpAddr::from([10, 44, 0, 1])));
        assert!(ServiceCidr::parse("10.43.0.0").is_err());
        assert!(ServiceCidr::parse("10.43.0.0/31").is_err());
        let v6 = ServiceCidr::parse("fd43:0:0:1::9/112").unwrap();
        assert_eq!(v6.to_string(), "fd43:0:0:1::/112");
        assert_eq!(v6.family(), IpFamily::IPv6);
        assert_eq!(v6.first().to_string(), "fd43:0:0:1::1");
        assert!(v6.contains("fd43:0:0:1::ffff".parse().unwrap()));
        assert!(!v6.contains("fd43:0:0:1::1:0".parse().unwrap()));
        assert!(!v6.contains(IpAddr::from([10, 43, 0, 1])));
        // An IPv6 range's last address is a host address (no broadcast).
        assert!(v6.allocatable("fd43:0:0:1::ffff".parse().unwrap()));
        assert!(!v6.allocatable("fd43:0:0:1::".parse().unwrap()));
        assert!(ServiceCidr::parse("fd43::/48").is_err());
        let dual = ServiceCidrs::parse("10.43.0.0/16,fd43::/112").unwrap();
        assert!(dual.dual());
        assert_eq!(dual.primary().family(), IpFamily::IPv4);
        assert_eq!(
            dual.of(IpFamily::IPv6),
            Some(ServiceCidr::parse("fd43::/112").unwrap())
        );
        assert_eq!(dual.to_string(), "10.43.0.0/16,fd43::/112");
        assert!(ServiceCidrs::parse("10.43.0.0/16,10.44.0.0/16").is_err());
        assert!(ServiceCidrs::parse("10.43.0.0/16,fd43::/112,fd44::/112").is_err());
        assert!(!ServiceCidrs::parse("fd43::/112").unwrap().dual());
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
        // An IPv6 range of 6 addresses (::/125 less the network and ::1): all different,
        // the last one included, and the pools of both families apart.
        let v6 = Pool::ClusterIp(ServiceCidr::parse("fd43::/125").unwrap());
        let mut got = Vec::new();
        for i in 0..6 {
            got.push(
                allocate(store.as_ref(), v6, &format!("ns/v{i}"), None, "spec.clusterIPs")
                    .await
                    .unwrap(),
            );
        }
        got.sort();
        got.dedup();
        assert_eq!(got.len(), 6, "{got:?}");
        assert!(
            got.contains(&"fd43::7".to_owned()) && !got.contains(&"fd43::1".to_owned()),
            "{got:?}"
        );
        assert!(matches!(
            allocate(store.as_ref(), v6, "ns/v", None, "spec.clusterIPs").await,
            Err(AllocError::Full(_))
        ));
        let wrong = allocate(store.as_ref(), v6, "ns/w", Some("10.43.0.3"), "spec.clusterIPs")
            .await
            .unwrap_err();
        assert!(matches!(wrong, AllocError::Invalid(_)), "{wrong:?}");
    }
}
