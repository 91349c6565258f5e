//! Taking records in: a lock opens, the write that settles an item closes it into its
//! transaction's group (and decides it, for a commit without record, which marks its write), a
//! marked fast-path write joins its transaction, and a write made outside the library waits as a
//! single change.

use std::collections::HashSet;
use std::time::Instant;

use crate::item_lock::TRANSIENT;
use crate::keys::ItemRef;
use crate::tx_id::TxId;

use super::images::{before_from_settled, made_by, owner, strip};
use super::{Assembler, Decision, Entry, Group, ItemChange, OpenLock, RecId, StreamRec};

impl Assembler {
    /// Takes one record. Returns the records it consumed at once (nothing to release for them).
    pub fn push(&mut self, rec: StreamRec, now: Instant) -> Vec<RecId> {
        let item = ItemRef::new(&rec.table, &rec.key);
        let old_owner = owner(rec.old.as_ref()).map(str::to_string);
        let new_owner = owner(rec.new.as_ref()).map(str::to_string);
        match (old_owner, new_owner) {
            // A write of a fast-path transaction that marked it: the new image carries its id, the
            // old one does not (an update outside the library keeps the mark it found). One of a
            // transaction already delivered can only be a copy of a marked item made outside the
            // library: a single change.
            (None, None)
                if made_by(rec.new.as_ref()).is_some_and(|x| {
                    made_by(rec.old.as_ref()) != Some(x) && !self.finished.contains(x)
                }) =>
            {
                let tx = made_by(rec.new.as_ref()).unwrap_or_default().to_string();
                let before = rec.old.map(strip);
                let after = rec.new.map(strip);
                let change = ItemChange {
                    table: rec.table,
                    key: rec.key,
                    before,
                    after,
                };
                self.settle(item, tx, change, vec![rec.id], rec.time, now)
            }
            // A write of the protocol's attributes alone (a waiter's mark or queue entry on an
            // unlocked item): nothing a reader sees changed.
            (None, None)
                if rec.old.is_some()
                    && rec.old.clone().map(strip) == rec.new.clone().map(strip) =>
            {
                vec![rec.id]
            }
            // A write made outside the library.
            (None, None) => {
                self.entries.push_back(Entry {
                    item,
                    tx: None,
                    change: ItemChange {
                        table: rec.table,
                        key: rec.key,
                        before: rec.old.map(strip),
                        after: rec.new.map(strip),
                    },
                    recs: vec![rec.id],
                });
                Vec::new()
            }
            // A lock: the old image is the item before the transaction.
            (None, Some(tx)) => {
                let transient = rec.new.as_ref().is_some_and(|n| n.contains_key(TRANSIENT));
                let before = if transient { None } else { rec.old.map(strip) };
                let prev = self.open_locks.insert(
                    (item, tx),
                    OpenLock {
                        before,
                        rec: rec.id,
                    },
                );
                prev.map(|p| vec![p.rec]).unwrap_or_default()
            }
            // Locked before and after: an apply, a mark, a padding change. Nothing to say.
            (Some(a), Some(b)) if a == b => vec![rec.id],
            // The write that settles the item: the lock is gone, or handed over to the next
            // holder in the same write (`Settings::hand_over`), whose lock opens on the item as
            // this write leaves it.
            (Some(tx), new_owner) => {
                if let Some(next) = new_owner {
                    let before = rec.new.clone().map(strip);
                    let lock = OpenLock {
                        before,
                        rec: rec.id.clone(),
                    };
                    self.open_locks.insert((item.clone(), next), lock);
                }
                let lock = self.open_locks.remove(&(item.clone(), tx.clone()));
                let mut recs = Vec::new();
                let before = match lock {
                    Some(l) => {
                        recs.push(l.rec);
                        l.before
                    }
                    None => rec.old.as_ref().and_then(before_from_settled),
                };
                recs.push(rec.id);
                // Marked with its own id, the write is a transaction's whole say without a record
                // (`Settings::record_on_demand`: its commit, or the release of its lock by its
                // own rollback), and there is no record to read. Only if it is the first item the
                // transaction settles: a transaction that settled others has had a record.
                let whole = made_by(rec.new.as_ref()) == Some(tx.as_str())
                    && !self.groups.contains_key(&tx);
                let change = ItemChange {
                    table: rec.table,
                    key: rec.key,
                    after: rec.new.map(strip),
                    before,
                };
                let decided = whole.then(|| (TxId(tx.clone()), HashSet::from([item.clone()])));
                let mut done = self.settle(item, tx, change, recs, rec.time, now);
                if let Some((tx, items)) = decided {
                    done.extend(self.decide(&tx, Decision::Committed(Some(items)), now));
                }
                done
            }
        }
    }

    /// `tx` settled `item` with `change` (from the records `recs`, the latest created at `time`).
    /// Returns the records consumed at once.
    fn settle(
        &mut self,
        item: ItemRef,
        tx: String,
        change: ItemChange,
        recs: Vec<RecId>,
        time: Option<i64>,
        now: Instant,
    ) -> Vec<RecId> {
        if self.finished.contains(&tx) {
            // A late lock's release (or a repeat) after the transaction was delivered or
            // dropped: it changes nothing the feed has not said.
            return recs;
        }
        if let Some(Decision::RolledBack) = self.groups.get(&tx).and_then(|g| g.decision.as_ref()) {
            return recs;
        }
        let g = self.groups.entry(tx.clone()).or_insert(Group {
            decision: None,
            settled: HashSet::new(),
            settled_time: None,
            first_at: now,
            last_at: now,
            checked_at: None,
        });
        g.last_at = now;
        g.settled.insert(item.clone());
        g.settled_time = g.settled_time.max(time);
        self.entries.push_back(Entry {
            item,
            tx: Some(tx),
            change,
            recs,
        });
        Vec::new()
    }
}
