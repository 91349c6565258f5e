//! From stream records to changes: which record is a lock, which settles an item, which is a
//! write made outside the library; transactions held until whole and decided; changes released
//! in an order that keeps every item's history in stream order.
//!
//! Pure logic, no I/O: the reader feeds it records and the decisions it reads from TX records,
//! and takes the changes it releases.
//!
//! The assembler's state and its decisions live here; `images` reads what a record's images say
//! (lock owner, fast-path mark, before-image), `push` takes records in, and `release` lets
//! changes go once they are whole and in order.

mod images;
mod push;
mod release;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use crate::error::Item;
use crate::keys::ItemRef;
use crate::tx_id::TxId;

use super::{Change, ItemChange};

/// A stream record's place: the reader's index of its shard, and its sequence number.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct RecId {
    pub shard: usize,
    pub seq: String,
}

/// One stream record of a user table, images as items.
#[derive(Debug, Clone)]
pub(crate) struct StreamRec {
    pub id: RecId,
    pub table: String,
    pub key: Item,
    pub old: Option<Item>,
    pub new: Option<Item>,
    /// Its approximate creation time (epoch s).
    pub time: Option<i64>,
}

/// What a transaction's record says, as far as the feed needs it.
#[derive(Debug, Clone)]
pub(crate) enum Decision {
    /// Committed; the items it wrote in the tables the feed follows (`None`: the record is gone,
    /// deleted after it was finalized, so the items are not known).
    Committed(Option<HashSet<ItemRef>>),
    RolledBack,
    /// Not decided yet (or not readable): ask again later.
    Pending,
}

struct Entry {
    item: ItemRef,
    /// The transaction that settled this item; `None` for a write made outside the library.
    tx: Option<String>,
    change: ItemChange,
    recs: Vec<RecId>,
}

struct Group {
    decision: Option<Decision>,
    /// The items settled so far.
    settled: HashSet<ItemRef>,
    /// Creation time (epoch s) of its latest settling record.
    settled_time: Option<i64>,
    first_at: Instant,
    last_at: Instant,
    checked_at: Option<Instant>,
}

struct OpenLock {
    before: Option<Item>,
    rec: RecId,
}

/// How many finished transaction ids are remembered, to recognise a late lock's release.
const FINISHED_MEMORY: usize = 10_000;

pub(crate) struct Assembler {
    entries: VecDeque<Entry>,
    groups: HashMap<String, Group>,
    open_locks: HashMap<(ItemRef, String), OpenLock>,
    finished: HashSet<String>,
    finished_order: VecDeque<String>,
    /// How long a committed transaction waits for an item it wrote whose lock was never seen.
    pub grace: Duration,
    /// How often an undecided transaction's record is read again.
    pub recheck: Duration,
    /// Creation time (epoch s) every shard still catching up has been read to (`None`: every
    /// shard is caught up). A transaction's missing item may be given up only once every shard
    /// is read past the transaction's settling records: its lock came before them.
    pub horizon: Option<i64>,
}

impl Assembler {
    pub fn new() -> Assembler {
        Assembler {
            entries: VecDeque::new(),
            groups: HashMap::new(),
            open_locks: HashMap::new(),
            finished: HashSet::new(),
            finished_order: VecDeque::new(),
            grace: Duration::from_secs(10),
            recheck: Duration::from_millis(500),
            horizon: None,
        }
    }

    /// Records waiting in the buffer (changes not released yet, and locks of items not settled).
    pub fn buffered(&self) -> usize {
        self.entries.len() + self.open_locks.len()
    }

    fn finish(&mut self, tx: &str) {
        if self.finished.insert(tx.to_string()) {
            self.finished_order.push_back(tx.to_string());
            while self.finished_order.len() > FINISHED_MEMORY {
                if let Some(old) = self.finished_order.pop_front() {
                    self.finished.remove(&old);
                }
            }
        }
        self.groups.remove(tx);
    }
    /// Transactions whose record should be read now: some item settled, not decided yet (or
    /// pending when last read).
    pub fn to_check(&self, now: Instant) -> Vec<TxId> {
        self.groups
            .iter()
            .filter(|(_, g)| {
                matches!(g.decision, None | Some(Decision::Pending))
                    && g.checked_at
                        .is_none_or(|t| now.duration_since(t) >= self.recheck)
            })
            .map(|(id, _)| TxId(id.clone()))
            .collect()
    }

    /// What the record of `tx` says. A rolled-back transaction's items are dropped at once:
    /// returns the records consumed.
    pub fn decide(&mut self, tx: &TxId, decision: Decision, now: Instant) -> Vec<RecId> {
        let Some(g) = self.groups.get_mut(tx.as_str()) else {
            return Vec::new();
        };
        g.checked_at = Some(now);
        match decision {
            Decision::RolledBack => {
                let mut done = Vec::new();
                self.entries.retain_mut(|e| {
                    if e.tx.as_deref() == Some(tx.as_str()) {
                        done.append(&mut e.recs);
                        false
                    } else {
                        true
                    }
                });
                self.finish(tx.as_str());
                done
            }
            d => {
                g.decision = Some(d);
                Vec::new()
            }
        }
    }
}
