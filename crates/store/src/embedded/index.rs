//! The in-memory MVCC index, like etcd's `treeIndex`: for every key, the revisions at which it
//! was written, so a read at any retained revision finds the right version without scanning the
//! log. Values stay on disk; the index only says which revision to read.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::Revision;

/// One write of a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub mod_revision: Revision,
    pub create_revision: Revision,
    pub version: i64,
    pub tombstone: bool,
}

#[derive(Default)]
pub(crate) struct Index {
    keys: BTreeMap<String, Vec<Entry>>,
    /// The latest committed revision.
    pub current: Revision,
    /// Reads and watches below this revision fail with `Compacted`.
    pub compacted: Revision,
}

impl Index {
    /// Record a write. Entries of one key must arrive in revision order.
    pub fn push(&mut self, key: &str, entry: Entry) {
        match self.keys.get_mut(key) {
            Some(entries) => entries.push(entry),
            None => {
                self.keys.insert(key.to_owned(), vec![entry]);
            }
        }
        self.current = self.current.max(entry.mod_revision);
    }

    /// The latest write of `key`, tombstones included.
    pub fn latest(&self, key: &str) -> Option<Entry> {
        self.keys.get(key).and_then(|e| e.last().copied())
    }

    /// The live version of `key` at `revision`: `None` if it did not exist or was deleted.
    pub fn at(&self, key: &str, revision: Revision) -> Option<Entry> {
        self.keys.get(key).and_then(|e| visible(e, revision))
    }

    /// The live keys under `prefix` after `start_after`, at `revision`, in key order: at most
    /// `limit` of them (0 = all), whether more follow, and optionally how many there are in all.
    pub fn range(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
        revision: Revision,
        count: bool,
    ) -> (Vec<(String, Entry)>, bool, Option<i64>) {
        let lower = match start_after {
            Some(after) if after >= prefix => Bound::Excluded(after),
            _ => Bound::Included(prefix),
        };
        let mut out = Vec::new();
        let mut more = false;
        let mut total = 0i64;
        for (key, entries) in self.keys.range::<str, _>((lower, Bound::Unbounded)) {
            if !key.starts_with(prefix) {
                break;
            }
            let Some(entry) = visible(entries, revision) else {
                continue;
            };
            total += 1;
            if limit == 0 || out.len() < limit {
                out.push((key.clone(), entry));
            } else {
                more = true;
                if !count {
                    break;
                }
            }
        }
        (out, more, count.then_some(total))
    }

    /// The revisions of `key` that compaction at `compacted` may discard: every write below it
    /// except the latest one, and that one too if it is a deletion.
    pub fn discardable(entries: &[Entry], compacted: Revision) -> Vec<Revision> {
        let below = entries.partition_point(|e| e.mod_revision < compacted);
        if below == 0 {
            return Vec::new();
        }
        let keep_last = !entries[below - 1].tombstone;
        let n = if keep_last { below - 1 } else { below };
        entries[..n].iter().map(|e| e.mod_revision).collect()
    }

    /// Collect up to `budget` discardable revisions, visiting keys from `cursor` on. Returns the
    /// revisions (with their keys) and the cursor to continue from (`None` when the pass is done).
    pub fn compaction_step(
        &self,
        cursor: Option<&str>,
        budget: usize,
    ) -> (Vec<(String, Revision)>, Option<String>) {
        let lower = match cursor {
            Some(c) => Bound::Excluded(c),
            None => Bound::Unbounded,
        };
        let mut out = Vec::new();
        for (key, entries) in self.keys.range::<str, _>((lower, Bound::Unbounded)) {
            for rev in Self::discardable(entries, self.compacted) {
                out.push((key.clone(), rev));
            }
            if out.len() >= budget {
                return (out, Some(key.clone()));
            }
        }
        (out, None)
    }

    /// Forget revisions that compaction removed from disk.
    pub fn forget(&mut self, removed: &[(String, Revision)]) {
        for (key, rev) in removed {
            if let Some(entries) = self.keys.get_mut(key) {
                entries.retain(|e| e.mod_revision != *rev);
                if entries.is_empty() {
                    self.keys.remove(key);
                }
            }
        }
    }

    /// How many keys (live or with retained history) the index holds.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.keys.len()
    }
}

fn visible(entries: &[Entry], revision: Revision) -> Option<Entry> {
    let n = entries.partition_point(|e| e.mod_revision <= revision);
    if n == 0 {
        return None;
    }
    let e = entries[n - 1];
    (!e.tombstone).then_some(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(rev: Revision, create: Revision, version: i64) -> Entry {
        Entry {
            mod_revision: rev,
            create_revision: create,
            version,
            tombstone: false,
        }
    }

    fn del(rev: Revision) -> Entry {
        Entry {
            mod_revision: rev,
            create_revision: 0,
            version: 0,
            tombstone: true,
        }
    }

    #[test]
    fn reads_resolve_the_version_at_a_revision() {
        let mut ix = Index::default();
        ix.push("/a", put(1, 1, 1));
        ix.push("/a", put(3, 1, 2));
        ix.push("/a", del(5));
        ix.push("/a", put(7, 7, 1));
        assert_eq!(ix.at("/a", 0), None);
        assert_eq!(ix.at("/a", 2).unwrap().mod_revision, 1);
        assert_eq!(ix.at("/a", 4).unwrap().version, 2);
        assert_eq!(ix.at("/a", 5), None);
        assert_eq!(ix.at("/a", 6), None);
        assert_eq!(ix.at("/a", 7).unwrap().create_revision, 7);
        assert_eq!(ix.current, 7);
    }

    #[test]
    fn range_pages_and_counts() {
        let mut ix = Index::default();
        for (i, k) in ["/p/a", "/p/b", "/p/c", "/q/a"].iter().enumerate() {
            let r = i as Revision + 1;
            ix.push(k, put(r, r, 1));
        }
        ix.push("/p/b", del(5));
        let (kvs, more, count) = ix.range("/p/", None, 1, 5, true);
        assert_eq!(kvs.len(), 1);
        assert_eq!(kvs[0].0, "/p/a");
        assert!(more);
        assert_eq!(count, Some(2));
        let (kvs, more, _) = ix.range("/p/", Some("/p/a"), 1, 5, false);
        assert_eq!(kvs[0].0, "/p/c");
        assert!(!more);
        // At revision 4 the deleted key is still there.
        let (kvs, _, _) = ix.range("/p/", None, 0, 4, false);
        assert_eq!(kvs.len(), 3);
    }

    #[test]
    fn compaction_keeps_the_latest_live_version_below_the_mark() {
        let entries = [put(1, 1, 1), put(3, 1, 2), put(6, 1, 3)];
        assert_eq!(Index::discardable(&entries, 5), vec![1]);
        // The latest version below the mark stays: it is the previous value of the write at 3.
        assert_eq!(Index::discardable(&entries, 3), Vec::<Revision>::new());
        assert_eq!(Index::discardable(&entries, 4), vec![1]);
        assert_eq!(Index::discardable(&entries, 1), Vec::<Revision>::new());
        let deleted = [put(1, 1, 1), del(2)];
        assert_eq!(Index::discardable(&deleted, 3), vec![1, 2]);
        assert_eq!(Index::discardable(&deleted, 2), Vec::<Revision>::new());
    }

    #[test]
    fn compaction_step_respects_budget_and_forget_drops_empty_keys() {
        let mut ix = Index::default();
        ix.push("/a", put(1, 1, 1));
        ix.push("/a", del(2));
        ix.push("/b", put(3, 3, 1));
        ix.push("/b", put(4, 3, 2));
        ix.compacted = 5;
        let (first, cursor) = ix.compaction_step(None, 1);
        assert_eq!(first, vec![("/a".to_owned(), 1), ("/a".to_owned(), 2)]);
        assert_eq!(cursor.as_deref(), Some("/a"));
        let (second, cursor) = ix.compaction_step(cursor.as_deref(), 1);
        assert_eq!(second, vec![("/b".to_owned(), 3)]);
        let (_, cursor) = ix.compaction_step(cursor.as_deref(), 1);
        assert_eq!(cursor, None);
        ix.forget(&first);
        ix.forget(&second);
        assert_eq!(ix.len(), 1);
        assert_eq!(ix.at("/b", 5).unwrap().version, 2);
    }
}
