//! One discovery cache (the role of client-go's memory-cached discovery client): the API
//! server's resources, fetched through kube-rs's `Discovery` and kept for a while, so the
//! controllers that need "every namespaced resource that can be listed" (namespace deletion,
//! resource quota) ask the server once per period instead of once per sync each.

use std::sync::Arc;
use std::time::Duration;

use kube::discovery::{ApiCapabilities, ApiResource, Discovery};
use kube::Client;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// A resource the server serves, with its scope and verbs.
pub type Served = (ApiResource, ApiCapabilities);

/// Everything the server serves, from its aggregated discovery (`/api` and `/apis` as
/// `APIGroupDiscoveryList`s: two requests, as client-go asks since Kubernetes 1.30), or group
/// by group (one request per group version) from a server without it.
pub async fn discover(client: &Client) -> Result<Discovery, kube::Error> {
    match Discovery::new(client.clone()).run_aggregated().await {
        Ok(d) => Ok(d),
        Err(e) => {
            tracing::debug!(error = %e, "no aggregated discovery; asking group by group");
            Discovery::new(client.clone()).run().await
        }
    }
}

pub struct DiscoveryCache {
    client: Client,
    ttl: Duration,
    cached: Mutex<Option<(Instant, Arc<Vec<Served>>)>>,
}

impl DiscoveryCache {
    pub fn new(client: Client, ttl: Duration) -> Arc<Self> {
        Arc::new(Self {
            client,
            ttl,
            cached: Mutex::new(None),
        })
    }

    /// Every resource the server recommends (the preferred version of each group), from the
    /// cache when it is younger than the TTL.
    pub async fn resources(&self) -> Result<Arc<Vec<Served>>, kube::Error> {
        let mut cached = self.cached.lock().await;
        if let Some((at, list)) = cached.as_ref() {
            if at.elapsed() < self.ttl {
                return Ok(list.clone());
            }
        }
        let discovery = discover(&self.client).await?;
        let list: Arc<Vec<Served>> = Arc::new(
            discovery
                .groups()
                .flat_map(|g| g.recommended_resources())
                .collect(),
        );
        *cached = Some((Instant::now(), list.clone()));
        Ok(list)
    }

    /// The resources whose capabilities pass `keep`.
    pub async fn select(
        &self,
        keep: impl Fn(&ApiResource, &ApiCapabilities) -> bool,
    ) -> Result<Vec<ApiResource>, kube::Error> {
        Ok(self
            .resources()
            .await?
            .iter()
            .filter(|(ar, caps)| keep(ar, caps))
            .map(|(ar, _)| ar.clone())
            .collect())
    }

    /// Forget what is cached: the next call asks the server.
    pub async fn invalidate(&self) {
        *self.cached.lock().await = None;
    }
}
