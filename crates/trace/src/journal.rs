//! The bounded rings the journey layer keeps its stages in.

use std::collections::{HashMap, HashSet, VecDeque};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};

use crate::Stage;

/// Stages kept per component unless `--trace-ring-size` says otherwise: the whole journey of
/// a few hundred objects, a few MB at most.
pub const DEFAULT_CAPACITY: usize = 8192;

/// The stages a process keeps: one ring per component (the component of a group's outermost
/// stage), each holding at most `capacity` stages; the oldest groups go first. Nothing in it
/// grows without bound.
pub struct Journal {
    capacity: AtomicUsize,
    rings: Mutex<HashMap<String, Ring>>,
    /// Where each kept group also goes (`--tracing-endpoint`: the OTLP exporter's queue).
    exporter: OnceLock<Exporter>,
}

type Exporter = Box<dyn Fn(&[Stage]) + Send + Sync>;

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("capacity", &self.capacity)
            .field("exporting", &self.exporter.get().is_some())
            .finish()
    }
}

#[derive(Debug, Default)]
struct Ring {
    groups: VecDeque<Vec<Stage>>,
    stages: usize,
}

impl Ring {
    fn trim(&mut self, capacity: usize) {
        while self.stages > capacity {
            match self.groups.pop_front() {
                Some(g) => self.stages -= g.len(),
                None => break,
            }
        }
    }
}

static JOURNAL: LazyLock<Arc<Journal>> = LazyLock::new(|| Arc::new(Journal::new(DEFAULT_CAPACITY)));

/// The process's journal, which the journey layer fills and the API server and the kubelet's
/// server read.
pub fn journal() -> Arc<Journal> {
    JOURNAL.clone()
}

impl Journal {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: AtomicUsize::new(capacity),
            rings: Mutex::default(),
            exporter: OnceLock::new(),
        }
    }

    /// Hand every group kept from now on to `export` as well (once per journal; it must not
    /// block: the OTLP exporter queues the group, or drops it when its queue is full).
    pub fn export_to(&self, export: impl Fn(&[Stage]) + Send + Sync + 'static) {
        let _ = self.exporter.set(Box::new(export));
    }

    pub fn capacity(&self) -> usize {
        self.capacity.load(Ordering::Relaxed)
    }

    /// Change the bound of every ring (0 keeps nothing); rings over it are cut at once.
    pub fn set_capacity(&self, capacity: usize) {
        self.capacity.store(capacity, Ordering::Relaxed);
        let mut rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        for ring in rings.values_mut() {
            ring.trim(capacity);
        }
    }

    /// Keep a group: an outermost stage (depth 0) and the stages under it.
    pub fn keep(&self, mut group: Vec<Stage>) {
        let capacity = self.capacity();
        if capacity == 0 || group.is_empty() {
            return;
        }
        // The exporter has the whole group; the ring keeps what fits.
        if let Some(export) = self.exporter.get() {
            export(&group);
        }
        group.truncate(capacity);
        let mut rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        let component = group[0].component.as_ref();
        let ring = match rings.get_mut(component) {
            Some(r) => r,
            None => rings.entry(component.to_owned()).or_default(),
        };
        ring.stages += group.len();
        ring.groups.push_back(group);
        ring.trim(capacity);
    }

    /// How many stages each component's ring holds.
    pub fn sizes(&self) -> HashMap<String, usize> {
        let rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        rings.iter().map(|(c, r)| (c.clone(), r.stages)).collect()
    }

    /// The groups about one of `uids` or caused by one of them (their `owner`), flattened.
    pub fn about(&self, uids: &HashSet<String>) -> Vec<Stage> {
        let rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        rings
            .values()
            .flat_map(|r| &r.groups)
            .filter(|g| uids.contains(&g[0].uid) || g[0].owner.as_ref().is_some_and(|o| uids.contains(o)))
            .flatten()
            .cloned()
            .collect()
    }

    /// The story of `uid` as far as this journal knows it ([`crate::story::join`]).
    pub fn story(&self, uid: &str) -> Vec<Stage> {
        let rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        crate::story::join(uid, rings.values().flat_map(|r| &r.groups).flatten())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(component: &'static str, uid: &str, start: u64) -> Stage {
        Stage {
            component: component.into(),
            stage: "s".into(),
            uid: uid.into(),
            owner: None,
            start_unix_nanos: start,
            duration_nanos: 1,
            depth: 0,
            fields: Default::default(),
        }
    }

    #[test]
    fn each_ring_holds_at_most_its_capacity_and_drops_the_oldest() {
        let j = Journal::new(3);
        for i in 0..10 {
            j.keep(vec![stage("apiserver", &format!("u{i}"), i)]);
        }
        j.keep(vec![stage("kubelet", "k", 0)]);
        assert_eq!(j.sizes()["apiserver"], 3);
        assert_eq!(j.sizes()["kubelet"], 1);
        let kept: HashSet<String> = (0..10).map(|i| format!("u{i}")).collect();
        let mut uids: Vec<_> = j.about(&kept).into_iter().map(|s| s.uid).collect();
        uids.sort();
        assert_eq!(uids, ["u7", "u8", "u9"]);
        j.set_capacity(1);
        assert_eq!(j.sizes()["apiserver"], 1);
        let exported = Arc::new(AtomicUsize::new(0));
        let counter = exported.clone();
        j.export_to(move |group| {
            counter.fetch_add(group.len(), Ordering::Relaxed);
        });
        j.keep(vec![stage("kubelet", "k2", 1), stage("kubelet", "k3", 2)]);
        assert_eq!(exported.load(Ordering::Relaxed), 2);
        j.set_capacity(0);
        j.keep(vec![stage("apiserver", "x", 0)]);
        assert_eq!(j.sizes()["apiserver"], 0);
    }
}
