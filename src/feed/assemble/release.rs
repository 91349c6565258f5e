//! Releasing changes: when a committed transaction is whole (every item it wrote settled, or
//! given up after the grace period once every shard is read past it), and the order that keeps
//! each item's history in stream order.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use crate::keys::ItemRef;
use crate::tx_id::TxId;

use super::images::same;
use super::{Assembler, Change, Decision, Entry, Group, RecId};

impl Assembler {
    fn complete(&self, tx: &str, g: &Group, now: Instant) -> bool {
        let read_past = match (self.horizon, g.settled_time) {
            (Some(h), Some(t)) => h > t,
            _ => true,
        };
        match &g.decision {
            Some(Decision::Committed(None)) => {
                read_past && now.duration_since(g.last_at) >= self.grace
            }
            Some(Decision::Committed(Some(expected))) => expected.iter().all(|item| {
                g.settled.contains(item)
                    || (!self
                        .open_locks
                        .contains_key(&(item.clone(), tx.to_string()))
                        && read_past
                        && now.duration_since(g.first_at) >= self.grace)
            }),
            _ => false,
        }
    }

    /// Whether a transaction held goes later without another record arriving: its record not
    /// read yet, or committed and waiting only for the settle grace (no item it waits for is
    /// locked), and not held up behind an entry of another transaction that waits for more. A
    /// feed stopping when idle waits for these; not for transactions that wait for another
    /// coordinator (undecided, or an item still locked).
    pub fn releases_in_time(&self) -> bool {
        let in_time = |tx: &str| {
            self.groups.get(tx).is_some_and(|g| match &g.decision {
                None | Some(Decision::Committed(None)) => true,
                Some(Decision::Committed(Some(expected))) => expected.iter().all(|item| {
                    g.settled.contains(item)
                        || !self
                            .open_locks
                            .contains_key(&(item.clone(), tx.to_string()))
                }),
                Some(Decision::RolledBack | Decision::Pending) => false,
            })
        };
        let mut first: HashMap<&ItemRef, Option<&str>> = HashMap::new();
        for e in &self.entries {
            first.entry(&e.item).or_insert(e.tx.as_deref());
        }
        self.groups.keys().any(|tx| {
            in_time(tx)
                && self
                    .entries
                    .iter()
                    .filter(|e| e.tx.as_deref() == Some(tx.as_str()))
                    .all(|e| match first[&e.item] {
                        None => true,
                        Some(f) => f == tx || in_time(f),
                    })
        })
    }

    /// Releases every change that can go now, in order: a write made outside the library once no
    /// earlier change of its item waits; a committed transaction once it is whole and none of its
    /// items has an earlier change waiting. Each comes with the records it consumed; `None` when
    /// a transaction changed no user attribute (nothing to say, records still consumed).
    pub fn release(&mut self, now: Instant) -> Vec<(Option<Change>, Vec<RecId>)> {
        let mut out = Vec::new();
        loop {
            let ready: HashSet<String> = self
                .groups
                .iter()
                .filter(|(id, g)| self.complete(id, g, now))
                .map(|(id, _)| id.clone())
                .collect();
            // One pass in arrival order: which entries have no earlier waiting entry of their item.
            // The first waiting entry of each item, by its transaction (`None`: outside write).
            let mut blocked: HashMap<&ItemRef, Option<&str>> = HashMap::new();
            let mut free_singles = Vec::new();
            let mut group_ok: HashMap<&str, bool> = HashMap::new();
            for (i, e) in self.entries.iter().enumerate() {
                // An item a transaction settled twice (a late lock) does not block itself.
                let free = match blocked.get(&e.item) {
                    None => true,
                    Some(by) => e.tx.is_some() && *by == e.tx.as_deref(),
                };
                match &e.tx {
                    None => {
                        if free {
                            free_singles.push(i);
                        }
                    }
                    Some(tx) => {
                        let ok = group_ok.entry(tx.as_str()).or_insert(ready.contains(tx));
                        *ok &= free;
                    }
                }
                blocked.entry(&e.item).or_insert(e.tx.as_deref());
            }
            // Singles that are free are released first: they precede, in their item, anything
            // released after them.
            let groups: Vec<String> = group_ok
                .into_iter()
                .filter(|(_, ok)| *ok)
                .map(|(id, _)| id.to_string())
                .collect();
            if free_singles.is_empty() && groups.is_empty() {
                break;
            }
            // Take the free singles, in order; then each releasable group, in the order of its
            // first entry.
            let mut taken: Vec<Option<Entry>> = self.entries.drain(..).map(Some).collect();
            for i in free_singles {
                let e = taken[i].take().expect("a single taken once");
                out.push((Some(Change::Single(e.change)), e.recs));
            }
            let mut order: Vec<(usize, String)> = groups
                .into_iter()
                .map(|id| {
                    let first = taken
                        .iter()
                        .position(|e| e.as_ref().is_some_and(|e| e.tx.as_deref() == Some(&id)))
                        .unwrap_or(usize::MAX);
                    (first, id)
                })
                .collect();
            order.sort();
            for (_, id) in order {
                let mut items = Vec::new();
                let mut recs = Vec::new();
                for slot in taken.iter_mut() {
                    if slot.as_ref().is_some_and(|e| e.tx.as_deref() == Some(&id)) {
                        let mut e = slot.take().expect("present");
                        recs.append(&mut e.recs);
                        if !same(&e.change.before, &e.change.after) {
                            items.push(e.change);
                        }
                    }
                }
                self.finish(&id);
                let change = (!items.is_empty()).then_some(Change::Transaction {
                    id: TxId(id),
                    items,
                });
                out.push((change, recs));
            }
            self.entries = taken.into_iter().flatten().collect();
        }
        out
    }
}
