//! The runtime catalogue of strategies: which [`Strategy`] serves each (group, resource). The
//! built-in resources are registered at start; more can be registered while the server runs
//! (custom resources). A resource without an entry gets the [`Plain`] strategy.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use r8s_api::ResourceDef;

use super::strategy::{Plain, Strategy};

type ByResource = HashMap<String, Arc<dyn Strategy>>;

/// (group, resource) → strategy.
pub(crate) struct Catalogue {
    by_group: RwLock<HashMap<String, ByResource>>,
    fallback: Arc<dyn Strategy>,
}

impl Catalogue {
    /// A catalogue without entries: every resource gets the plain strategy.
    pub fn empty() -> Self {
        Self {
            by_group: RwLock::new(HashMap::new()),
            fallback: Arc::new(Plain),
        }
    }

    /// The built-in resources' strategies.
    pub fn builtin() -> Self {
        let c = Self::empty();
        for (group, resource, strategy) in builtin() {
            c.register(group, resource, strategy);
        }
        c
    }

    /// Serve `group`/`resource` with `strategy` (replacing any it had).
    pub fn register(&self, group: &str, resource: &str, strategy: Arc<dyn Strategy>) {
        self.by_group
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(group.to_owned())
            .or_default()
            .insert(resource.to_owned(), strategy);
    }

    /// The strategy registered for `group`/`resource`, if any.
    pub fn get(&self, group: &str, resource: &str) -> Option<Arc<dyn Strategy>> {
        self.by_group
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(group)
            .and_then(|r| r.get(resource))
            .cloned()
    }

    /// The strategy of `def`: its own, else the plain one.
    pub fn strategy(&self, def: &ResourceDef) -> Arc<dyn Strategy> {
        self.get(def.group, def.plural)
            .unwrap_or_else(|| self.fallback.clone())
    }
}

/// The catalogue the server uses.
pub(crate) fn global() -> &'static Catalogue {
    static GLOBAL: OnceLock<Catalogue> = OnceLock::new();
    GLOBAL.get_or_init(Catalogue::builtin)
}

/// Every built-in strategy, by group and resource.
fn builtin() -> Vec<(&'static str, &'static str, Arc<dyn Strategy>)> {
    r8s_api::catalogue()
        .iter()
        .map(|def| {
            (
                def.group,
                def.plural,
                Arc::new(super::legacy::Legacy(def)) as Arc<dyn Strategy>,
            )
        })
        .collect()
}
