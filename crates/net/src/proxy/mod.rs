//! The Service proxy (the role of kube-proxy in its nftables mode, KEP-3866): Services and
//! EndpointSlices from informers become one nftables table, `ip r8s`, programmed over netlink
//! in atomic transactions. [`model`] turns one Service into its chains and map elements,
//! [`table`] keeps the kernel in step (only what changed), [`run`] follows the API, [`health`]
//! serves the health-check node ports of LoadBalancers that keep client addresses.

pub mod health;
pub mod metrics;
pub mod model;
pub mod run;
pub mod table;

pub use health::HealthServers;
pub use metrics::ProxyMetrics;
pub use model::{health_check, service_rules, ProxyConfig, ServiceRules};
pub use run::run;
pub use table::{Proxier, SyncStats};
