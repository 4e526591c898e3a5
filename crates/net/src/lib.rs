//! What the r8s agent does for the network beyond CNI (the reference document's "Inter-host
//! networking" and Services): cluster DNS ([`dns`]), the Service proxy ([`proxy`]), the
//! overlay between nodes ([`overlay`]) and network policy ([`policy`]).

pub mod dns;
pub mod local;
pub mod nft;
pub mod overlay;
pub mod policy;
pub mod proxy;
