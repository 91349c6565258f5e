//! From stream records to changes: which record is a lock, which settles an item, which is a
//! write made outside the library; transactions held until whole and decided; changes released
//! in an order that keeps every item's history in stream order.
//!
//! Pure logic, no I/O: the reader feeds it records and the decisions it reads from TX records,
//! and takes the changes it releases.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;

use crate::error::Item;
use crate::expr::value_eq;
use crate::item_lock::{APPLIED, IMAGE, MADE, OWNER, TRANSIENT};
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

/// The protocol owner of an image (`_TxId`), if any.
fn owner(image: Option<&Item>) -> Option<&str> {
    image
        .and_then(|i| i.get(OWNER))
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
}

/// The fast-path transaction that marked an image (`_TxM`), if any.
fn made_by(image: Option<&Item>) -> Option<&str> {
    image
        .and_then(|i| i.get(MADE))
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
}

/// The user attributes of an item: every `_Tx` attribute removed.
pub(crate) fn strip(mut item: Item) -> Item {
    item.retain(|k, _| !k.starts_with("_Tx"));
    item
}

fn same(a: &Option<Item>, b: &Option<Item>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(x), Some(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| value_eq(v, w)))
        }
        _ => false,
    }
}

/// The item before the transaction, from the record that settles it, when its lock was not
/// seen: an unapplied lock left the user attributes as they were; an applied one carries the
/// before-image (`_TxG`) unless it was kept in the images table (then unknown: `None`).
fn before_from_settled(old: &Item) -> Option<Item> {
    let applied = old
        .get(APPLIED)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
        == Some("1");
    let transient = old.contains_key(TRANSIENT);
    if applied {
        match old.get(IMAGE) {
            Some(AttributeValue::M(m)) => Some(strip(m.clone())),
            _ => None,
        }
    } else if transient {
        None
    } else {
        Some(strip(old.clone()))
    }
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
            // The write that settles the item: the lock is gone.
            (Some(tx), _) => {
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
                let change = ItemChange {
                    table: rec.table,
                    key: rec.key,
                    after: rec.new.map(strip),
                    before,
                };
                self.settle(item, tx, change, recs, rec.time, now)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.into())
    }

    fn item(pairs: &[(&str, AttributeValue)]) -> Item {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    fn rec(seq: u32, id: &str, old: Option<Item>, new: Option<Item>) -> StreamRec {
        StreamRec {
            id: RecId {
                shard: 0,
                seq: format!("{seq:05}"),
            },
            table: "T".into(),
            key: item(&[("Id", s(id))]),
            old,
            new,
            time: None,
        }
    }

    fn locked(id: &str, v: &str, tx: &str) -> Item {
        item(&[
            ("Id", s(id)),
            ("v", s(v)),
            ("_TxId", s(tx)),
            ("_TxD", AttributeValue::N("1".into())),
        ])
    }

    fn plain(id: &str, v: &str) -> Item {
        item(&[("Id", s(id)), ("v", s(v))])
    }

    fn expected(ids: &[&str]) -> Option<HashSet<ItemRef>> {
        Some(
            ids.iter()
                .map(|i| ItemRef::new("T", &item(&[("Id", s(i))])))
                .collect(),
        )
    }

    #[test]
    fn a_committed_transaction_is_released_whole_after_its_decision() {
        let mut a = Assembler::new();
        let now = Instant::now();
        assert!(
            a.push(
                rec(1, "a", Some(plain("a", "0")), Some(locked("a", "0", "x"))),
                now
            )
            .is_empty()
        );
        assert!(
            a.push(
                rec(
                    2,
                    "b",
                    None,
                    Some(item(&[
                        ("Id", s("b")),
                        ("_TxId", s("x")),
                        ("_TxT", AttributeValue::Bool(true))
                    ]))
                ),
                now
            )
            .is_empty()
        );
        a.push(
            rec(3, "a", Some(locked("a", "0", "x")), Some(plain("a", "1"))),
            now,
        );
        // An outside write of another item goes at once.
        a.push(rec(4, "c", None, Some(plain("c", "9"))), now);
        let out = a.release(now);
        assert_eq!(out.len(), 1);
        assert!(matches!(&out[0].0, Some(Change::Single(c)) if c.after == Some(plain("c", "9"))));
        a.push(
            rec(5, "b", Some(locked("b", "", "x")), Some(plain("b", "2"))),
            now,
        );
        assert_eq!(a.to_check(now).len(), 1);
        a.decide(
            &TxId("x".into()),
            Decision::Committed(expected(&["a", "b"])),
            now,
        );
        let out = a.release(now);
        assert_eq!(out.len(), 1);
        let (Some(Change::Transaction { id, items }), recs) = &out[0] else {
            panic!("a transaction")
        };
        assert_eq!(id.as_str(), "x");
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].before, Some(plain("a", "0")));
        assert_eq!(items[0].after, Some(plain("a", "1")));
        assert_eq!(items[1].before, None);
        assert_eq!(recs.len(), 4);
        assert_eq!(a.buffered(), 0);
    }

    #[test]
    fn a_rolled_back_transaction_yields_nothing_and_later_writes_wait_for_its_decision() {
        let mut a = Assembler::new();
        let now = Instant::now();
        a.push(
            rec(1, "a", Some(plain("a", "0")), Some(locked("a", "0", "x"))),
            now,
        );
        let mut applied = locked("a", "5", "x");
        applied.insert("_TxA".into(), s("1"));
        assert_eq!(
            a.push(
                rec(2, "a", Some(locked("a", "0", "x")), Some(applied.clone())),
                now
            )
            .len(),
            1
        );
        a.push(rec(3, "a", Some(applied), Some(plain("a", "0"))), now);
        a.push(
            rec(4, "a", Some(plain("a", "0")), Some(plain("a", "7"))),
            now,
        );
        assert!(
            a.release(now).is_empty(),
            "the outside write waits behind the undecided one"
        );
        let done = a.decide(&TxId("x".into()), Decision::RolledBack, now);
        assert_eq!(done.len(), 2);
        let out = a.release(now);
        assert_eq!(out.len(), 1);
        assert!(matches!(&out[0].0, Some(Change::Single(c)) if c.after == Some(plain("a", "7"))));
    }

    #[test]
    fn transactions_sharing_an_item_come_in_commit_order() {
        let mut a = Assembler::new();
        let now = Instant::now();
        a.push(
            rec(1, "a", Some(plain("a", "0")), Some(locked("a", "0", "x"))),
            now,
        );
        a.push(
            rec(2, "a", Some(locked("a", "0", "x")), Some(plain("a", "1"))),
            now,
        );
        a.push(
            rec(3, "a", Some(plain("a", "1")), Some(locked("a", "1", "y"))),
            now,
        );
        a.push(
            rec(4, "a", Some(locked("a", "1", "y")), Some(plain("a", "2"))),
            now,
        );
        a.decide(
            &TxId("y".into()),
            Decision::Committed(expected(&["a"])),
            now,
        );
        assert!(a.release(now).is_empty(), "y waits for x");
        a.decide(
            &TxId("x".into()),
            Decision::Committed(expected(&["a"])),
            now,
        );
        let out = a.release(now);
        let ids: Vec<_> = out
            .iter()
            .map(|(c, _)| match c {
                Some(Change::Transaction { id, .. }) => id.as_str().to_string(),
                _ => panic!("transactions"),
            })
            .collect();
        assert_eq!(ids, ["x", "y"]);
    }

    fn marked(id: &str, v: &str, tx: &str) -> Item {
        item(&[("Id", s(id)), ("v", s(v)), ("_TxM", s(tx))])
    }

    #[test]
    fn marked_fast_path_writes_are_one_transaction_and_a_later_outside_update_is_single() {
        let mut a = Assembler::new();
        let now = Instant::now();
        a.push(
            rec(1, "a", Some(plain("a", "0")), Some(marked("a", "1", "x"))),
            now,
        );
        a.push(rec(2, "b", None, Some(marked("b", "2", "x"))), now);
        // An outside update of a keeps the mark: not x's.
        a.push(
            rec(
                3,
                "a",
                Some(marked("a", "1", "x")),
                Some(marked("a", "5", "x")),
            ),
            now,
        );
        // A second fast-path transaction re-marks b.
        a.push(
            rec(
                4,
                "b",
                Some(marked("b", "2", "x")),
                Some(marked("b", "3", "y")),
            ),
            now,
        );
        assert!(a.release(now).is_empty(), "everything waits for x");
        let mut checked: Vec<_> = a.to_check(now).into_iter().map(|t| t.0).collect();
        checked.sort();
        assert_eq!(checked, ["x", "y"]);
        a.decide(
            &TxId("x".into()),
            Decision::Committed(expected(&["a", "b"])),
            now,
        );
        a.decide(
            &TxId("y".into()),
            Decision::Committed(expected(&["b"])),
            now,
        );
        let out = a.release(now);
        assert_eq!(out.len(), 3, "{out:?}");
        let Some(Change::Transaction { id, items }) = &out[0].0 else {
            panic!("x first: {out:?}")
        };
        assert_eq!(id.as_str(), "x");
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].before, Some(plain("a", "0")));
        assert_eq!(items[0].after, Some(plain("a", "1")));
        assert_eq!(items[1].before, None);
        assert_eq!(items[1].after, Some(plain("b", "2")));
        let singles: Vec<_> = out
            .iter()
            .filter_map(|(c, _)| match c {
                Some(Change::Single(c)) => Some(c),
                _ => None,
            })
            .collect();
        assert_eq!(singles.len(), 1);
        assert_eq!(singles[0].before, Some(plain("a", "1")), "stripped");
        assert_eq!(singles[0].after, Some(plain("a", "5")), "stripped");
        assert!(
            out.iter().any(
                |(c, _)| matches!(c, Some(Change::Transaction { id, .. }) if id.as_str() == "y")
            )
        );
        assert_eq!(a.buffered(), 0);
    }

    #[test]
    fn an_item_never_seen_locked_is_given_up_only_once_every_shard_is_read_past_the_commit() {
        let mut a = Assembler::new();
        a.grace = Duration::ZERO;
        let now = Instant::now();
        let mut settle = rec(2, "a", Some(locked("a", "0", "x")), Some(plain("a", "1")));
        settle.time = Some(100);
        a.push(settle, now);
        a.decide(
            &TxId("x".into()),
            Decision::Committed(expected(&["a", "b"])),
            now,
        );
        // A shard is still at second 100: b's lock may be in it.
        a.horizon = Some(100);
        assert!(a.release(now).is_empty());
        a.horizon = Some(101);
        let out = a.release(now);
        assert_eq!(out.len(), 1);
    }
}
