//! What the r8s agent does for the network beyond CNI (the reference document's "Inter-host
//! networking" and Services): cluster DNS ([`dns`]), the Service proxy ([`proxy`]) and the
//! overlay between nodes ([`overlay`]); network policy is to come here.

pub mod dns;
pub mod local;
pub mod nft;
pub mod overlay;
pub mod proxy;
