//! What the r8s agent does for the network beyond CNI (the reference document's "Inter-host
//! networking" and Services): today cluster DNS ([`dns`]); the Service proxy, the overlay
//! between nodes and network policy are to come here.

pub mod dns;
pub mod local;
pub mod nft;
pub mod proxy;
