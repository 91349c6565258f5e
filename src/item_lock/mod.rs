//! Item locks: the attributes the protocol keeps on user items, and every write that takes, applies,
//! releases or undoes a lock.
//!
//! On a locked item:
//! - `_TxId` (S): the owning transaction.
//! - `_TxD` (N): when it was locked (epoch ms; informational).
//! - `_TxT` (BOOL true): the item did not exist and was inserted only to hold the lock (transient).
//! - `_TxA` (S `"1"`): the transaction's write has been applied (set in the same write as the change).
//! - `_TxG` (M): the item's before-image, written in the same write that applies the change, so an
//!   applied item always carries what rollback needs.
//! - `_TxI` (S): instead of `_TxG`, the id of the before-image in the images table (items too large to
//!   carry their own image).
//! - `_TxP` (B): padding a batched lock writes so that DynamoDB refuses the lock of an item without
//!   room for the transaction's update; removed by the apply or the unlock.
//! - `_TxU` (N): the index of the transaction's write of this item in its record, set by a batched
//!   lock (whose request is conditional on the record being pending) when the write may be rolled
//!   forward: applied after the commit, in the write that unlocks (see [`Observed::roll`]).
//! - `_TxK` (N): on a lock taken without a record (`Settings::record_on_demand`), the holder's
//!   contention ticket, or 0 if its unit of work had none when the lock went out: whoever meets
//!   the lock before the record exists judges the holder by it (see [`Observed::ticket`]).
//! - `_TxHO` (BOOL true): the lock was handed over by the item's previous holder in its commit
//!   (`Settings::hand_over`, see [`handover`]): the item's waiters watch for the next handover
//!   only while a handed-over lock holds it.
//! - `_TxKR` (N): on a lock taken by a handle that knew the ticket its record holds, that ticket:
//!   whoever meets the lock may judge by it how the holder's ticket compares with its own without
//!   reading the record (see [`Observed::recorded_ticket`]).
//!
//! On an unlocked item, not a lock attribute:
//! - `_TxM` (S): the transaction whose write-only fast path wrote this version of the item, or
//!   whose commit or lock release without record (`Settings::record_on_demand`) did, when it
//!   marked its writes for the change feed (`Settings::fast_path_stamps`). It stays until a later
//!   put replaces it or another fast-path write re-marks it; an update outside the library keeps
//!   it, so a stream record is that transaction's write only when its new image has the mark and
//!   its old image has not the same one.
//! - `_TxQ`, `_TxQF`, `_TxQV`: the queue of waiters the item carries (only with
//!   `Settings::wait_in_ticket_order`; see [`queue`]). Not lock attributes: they stay after the
//!   unlock.
//! - `_TxH`: the oldest waiter's mark (only with `Settings::mark_oldest_waiter`; see [`head`]).
//!   Not a lock attribute: a lock that passes it removes it, an unlock leaves it.
//!
//! This module reads a lock ([`Observed`], [`LockInfo`]); [`acquire`] takes it, [`apply`] applies
//! the transaction's write under it, [`release`] settles the item and [`image`] keeps large
//! before-images in the images table.

mod acquire;
mod apply;
pub(crate) mod handover;
pub(crate) mod head;
mod image;
pub(crate) mod line;
pub(crate) mod notice;
pub(crate) mod queue;
mod release;

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::TxId;
use crate::ddb::Placeholders;
use crate::error::Item;
use crate::keys::KeySchema;

pub(crate) use acquire::{
    Existence, Guard, HolderTicket, LockOutcome, LockTicket, lock, lock_item_write,
    look_by_reading, met_told, watch_for_handover,
};
pub(crate) use apply::{
    ImagePlace, Stage, mark_made, request_writes, roll_forward_write, unlocked_write,
};
pub(crate) use image::{
    image_delete_write, image_id, load_table_image, save_table_image, unapplied_image_id,
};
pub(crate) use release::{release_write, settle_write};

pub(crate) const OWNER: &str = "_TxId";
pub(crate) const LOCK_DATE: &str = "_TxD";
pub(crate) const TRANSIENT: &str = "_TxT";
pub(crate) const APPLIED: &str = "_TxA";
pub(crate) const IMAGE: &str = "_TxG";
pub(crate) const IMAGE_REF: &str = "_TxI";
pub(crate) const PAD: &str = "_TxP";
pub(crate) const ROLL: &str = "_TxU";
pub(crate) const TICKET: &str = "_TxK";
pub(crate) const RECORDED_TICKET: &str = "_TxKR";
pub(crate) const HANDED: &str = "_TxHO";
/// The fast-path transaction that wrote the item (see the module docs); never removed by a lock.
pub(crate) const MADE: &str = "_TxM";

/// Lock attributes removed when an item is released.
const LOCK_ATTRS: [&str; 11] = [
    OWNER,
    LOCK_DATE,
    TRANSIENT,
    APPLIED,
    IMAGE,
    IMAGE_REF,
    PAD,
    ROLL,
    TICKET,
    RECORDED_TICKET,
    HANDED,
];

/// Removes every `_Tx*` attribute: what callers may see.
pub(crate) fn strip(mut item: Item) -> Item {
    item.retain(|k, _| !k.starts_with(crate::expr::RESERVED_PREFIX));
    item
}

/// What an item's raw attributes say about its lock.
#[derive(Debug, Clone, Default)]
pub(crate) struct Observed {
    pub exists: bool,
    pub owner: Option<String>,
    pub transient: bool,
    pub applied: bool,
    /// The applied write is a delete (`_TxA = "D"`): the item is unchanged until the unlock deletes
    /// it.
    pub applied_delete: bool,
    /// The embedded before-image.
    pub image: Option<Item>,
    /// The images-table id of the before-image.
    pub image_ref: Option<String>,
    /// The item without lock attributes (empty for a placeholder).
    pub user: Item,
    /// `_TxD`: the lock's stamp (lock time in ms plus a random fraction), different for every lock
    /// taken on the item.
    pub stamp: Option<String>,
    /// `_TxU`: the index (in the record) of the write this lock may roll forward. Only a batched
    /// lock sets it, in a request conditional on the record being pending, so no write that sets it
    /// lands after the decision: an unapplied lock that carries it once its transaction is committed
    /// is the lock the commit was decided under, and its write is applied exactly once, by the
    /// write that removes it.
    pub roll: Option<usize>,
    /// `_TxK`: the lock was taken without a record, by a holder with this ticket (0: none). Only
    /// such a lock carries it, so it also tells a lock whose record is absent because its
    /// transaction did not need one yet from the lock of a transaction whose record is gone.
    pub ticket: Option<u64>,
    /// `_TxKR`: the lock was taken by a handle that knew the ticket its record holds, this one.
    /// A record's ticket never changes, so the lock tells how its holder compares with a
    /// contender as the record would; only the holder's state and liveness need the record.
    pub recorded_ticket: Option<u64>,
    /// The queue attributes the item carries (`_TxQ*`, see [`queue`]), raw.
    pub queue: Item,
    /// The oldest waiter's mark and the line behind it, as the item carries them (see [`head`]).
    pub waiters: handover::Waiters,
    /// `_TxHO`: the lock was handed over by the previous holder.
    pub handed: bool,
}

/// The number attribute `attr` of `raw`, if it has one that parses as `T`.
fn number<T: std::str::FromStr>(raw: &Item, attr: &str) -> Option<T> {
    raw.get(attr)?.as_n().ok()?.parse().ok()
}

impl Observed {
    pub fn of(raw: Option<&Item>) -> Observed {
        let Some(raw) = raw else {
            return Observed::default();
        };
        Observed {
            exists: true,
            owner: raw.get(OWNER).and_then(|v| v.as_s().ok()).cloned(),
            transient: matches!(raw.get(TRANSIENT), Some(AttributeValue::Bool(true))),
            applied: raw.contains_key(APPLIED),
            applied_delete: raw
                .get(APPLIED)
                .and_then(|v| v.as_s().ok())
                .is_some_and(|s| s == "D"),
            image: raw.get(IMAGE).and_then(|v| v.as_m().ok()).cloned(),
            image_ref: raw.get(IMAGE_REF).and_then(|v| v.as_s().ok()).cloned(),
            user: strip(raw.clone()),
            stamp: raw.get(LOCK_DATE).and_then(|v| v.as_n().ok()).cloned(),
            roll: number(raw, ROLL),
            ticket: number(raw, TICKET),
            recorded_ticket: number(raw, RECORDED_TICKET),
            queue: queue::raw_attrs(raw),
            waiters: handover::Waiters::of(raw),
            handed: raw.contains_key(HANDED),
        }
    }

    /// When the lock was taken (epoch ms), from its stamp.
    pub fn locked_ms(&self) -> Option<u64> {
        let stamp = self.stamp.as_deref()?;
        stamp.split('.').next()?.parse().ok()
    }

    pub fn locked_by(&self, id: &TxId) -> bool {
        self.owner.as_deref() == Some(id.as_str())
    }

    /// The item still carries `lock`, the lock `me` took: locked by `me` and applied already, or
    /// under the same stamp. Another stamp is a lock of `me` re-taken late by another handle after
    /// a decision released ours.
    pub fn holds(&self, me: &TxId, lock: &LockInfo) -> bool {
        // Stamps are numbers: DynamoDB answers with its canonical text, not the text written.
        let same_stamp = match (&self.stamp, &lock.stamp) {
            (_, None) => true,
            (Some(found), Some(ours)) => crate::keys::same_number(found, ours),
            (None, Some(_)) => false,
        };
        self.locked_by(me) && (self.applied || same_stamp)
    }

    /// The item as committed state shows it, ignoring any lock: `None` when it does not exist
    /// (absent, or a placeholder that holds a lock on an absent item — also once a delete of it is
    /// marked: a marked delete changes nothing, so the placeholder still holds no item).
    pub fn visible(&self) -> Option<Item> {
        let holds_item = !self.transient || (self.applied && !self.applied_delete);
        (self.exists && holds_item).then(|| self.user.clone())
    }
}

/// What a coordinator knows about an item it holds locked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LockInfo {
    /// The item did not exist before the lock.
    pub transient: bool,
    /// The transaction's write has been applied.
    pub applied: bool,
    /// The item before the transaction (`None`: it did not exist).
    pub before: Option<Item>,
    /// The item now, without lock attributes (`None`: it does not exist or is a placeholder).
    pub current: Option<Item>,
    /// Where the before-image lives when it is in the images table.
    pub image_ref: Option<String>,
    /// The lock's `_TxD` stamp. Applies are conditional on it, so that a write can only land on
    /// the lock it was prepared under: another handle of the same transaction may re-lock the
    /// item after a decision released it (a late lock), and an apply must not land on that.
    pub stamp: Option<String>,
    /// A batched lock whose item was not read: `before` and `current` are unknown (not absent)
    /// until the coordinator reads them, which a phased apply does first. The one-request commit
    /// needs neither.
    pub image_unread: bool,
    /// `_TxU`: the write this lock may roll forward after the commit (see [`Observed::roll`]).
    pub roll: Option<usize>,
    /// The queue attributes the item carried when it was locked (they do not change while it is
    /// locked): a `Put` applied under the lock carries them over.
    pub queue: Item,
    /// `_TxK`, on a lock taken without a record (see [`Observed::ticket`]): the write that unlocks
    /// removes it with the other lock attributes.
    pub ticket: Option<u64>,
    /// `_TxKR` (see [`Observed::recorded_ticket`]): the write that unlocks removes it with the
    /// other lock attributes.
    pub recorded_ticket: Option<u64>,
    /// The item's waiters, as this coordinator last saw them while holding it: whom its commit
    /// may hand the item over to (`Settings::hand_over`, see [`handover`]).
    pub waiters: handover::Waiters,
    /// `_TxHO`: the lock was handed over to this coordinator; the write that unlocks removes it.
    pub handed: bool,
}

/// Test seam, set only through `fault::zero_ended_lock_stamps`: every new stamp's random
/// fraction ends in 0 (about one stamp in ten does in production).
pub(crate) static ZERO_ENDED_STAMPS: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// A stamp for a new lock: the time in ms with a random fraction, unique per lock in practice.
/// Written in DynamoDB's canonical form (no trailing zeros), the text DynamoDB answers with.
fn new_stamp() -> String {
    let mut fraction = rand::random_range(0..1_000_000u32);
    if ZERO_ENDED_STAMPS.load(std::sync::atomic::Ordering::Relaxed) {
        fraction -= fraction % 10;
    }
    let stamp = format!("{}.{:06}", crate::ddb::now_millis(), fraction);
    crate::keys::canonical_number(&stamp).unwrap_or(stamp)
}

impl LockInfo {
    /// From an item observed locked by us.
    pub fn from_observed(obs: &Observed) -> LockInfo {
        let before = if obs.transient {
            None
        } else if obs.applied {
            obs.image.clone()
        } else {
            Some(obs.user.clone())
        };
        LockInfo {
            transient: obs.transient,
            applied: obs.applied,
            before,
            current: obs.visible(),
            image_ref: obs.image_ref.clone(),
            stamp: obs.stamp.clone(),
            image_unread: false,
            roll: obs.roll,
            queue: obs.queue.clone(),
            ticket: obs.ticket,
            recorded_ticket: obs.recorded_ticket,
            waiters: obs.waiters.clone(),
            handed: obs.handed,
        }
    }

    /// A placeholder a batch inserted for an absent item: nothing to read, the item did not exist.
    pub fn placeholder(stamp: String, roll: Option<usize>) -> LockInfo {
        LockInfo {
            transient: true,
            applied: false,
            before: None,
            current: None,
            image_ref: None,
            stamp: Some(stamp),
            image_unread: false,
            roll,
            queue: Item::new(),
            ticket: None,
            recorded_ticket: None,
            waiters: Default::default(),
            handed: false,
        }
    }

    /// A lock a batch took on an existing item without reading it.
    pub fn unread(stamp: String, roll: Option<usize>) -> LockInfo {
        LockInfo {
            transient: false,
            applied: false,
            before: None,
            current: None,
            image_ref: None,
            stamp: Some(stamp),
            image_unread: true,
            roll,
            queue: Item::new(),
            ticket: None,
            recorded_ticket: None,
            waiters: Default::default(),
            handed: false,
        }
    }
}

fn me_condition(ph: &mut Placeholders, me: &TxId) -> String {
    format!(
        "{} = {}",
        ph.name(OWNER),
        ph.value("Me", AttributeValue::S(me.0.clone()))
    )
}

fn applied_condition(ph: &mut Placeholders, applied: bool) -> String {
    let a = ph.name(APPLIED);
    if applied {
        format!("attribute_exists({a})")
    } else {
        format!("attribute_not_exists({a})")
    }
}

/// A map from item key names to values, for error messages.
pub(crate) fn key_of(schema: &KeySchema, item: &Item) -> Item {
    schema
        .names()
        .filter_map(|n| item.get(n).map(|v| (n.to_string(), v.clone())))
        .collect::<HashMap<_, _>>()
}

impl LockInfo {
    /// What the item looks like to a settle step, as far as this coordinator knows.
    pub fn as_observed(&self, me: &TxId) -> Observed {
        Observed {
            exists: true,
            owner: Some(me.0.clone()),
            transient: self.transient,
            applied: self.applied,
            applied_delete: false,
            image: if self.applied && self.image_ref.is_none() {
                self.before.clone()
            } else {
                None
            },
            image_ref: self.image_ref.clone(),
            user: self.current.clone().unwrap_or_default(),
            stamp: self.stamp.clone(),
            roll: self.roll,
            ticket: self.ticket,
            recorded_ticket: self.recorded_ticket,
            queue: self.queue.clone(),
            waiters: self.waiters.clone(),
            handed: self.handed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn locked(stamp: &str, applied: bool) -> Observed {
        let mut raw = Item::new();
        raw.insert(OWNER.into(), AttributeValue::S("me".into()));
        raw.insert(LOCK_DATE.into(), AttributeValue::N(stamp.into()));
        if applied {
            raw.insert(APPLIED.into(), AttributeValue::S("1".into()));
        }
        Observed::of(Some(&raw))
    }

    fn ours(stamp: Option<&str>) -> LockInfo {
        LockInfo {
            transient: false,
            applied: false,
            before: None,
            current: None,
            image_ref: None,
            stamp: stamp.map(String::from),
            image_unread: false,
            roll: None,
            queue: Item::new(),
            ticket: None,
            recorded_ticket: None,
            waiters: Default::default(),
            handed: false,
        }
    }

    #[test]
    fn a_lock_without_record_tells_its_ticket_and_time() {
        let mut raw = Item::new();
        raw.insert(OWNER.into(), AttributeValue::S("them".into()));
        raw.insert(
            LOCK_DATE.into(),
            AttributeValue::N("1700000000123.45".into()),
        );
        assert_eq!(Observed::of(Some(&raw)).ticket, None);
        raw.insert(TICKET.into(), AttributeValue::N("0".into()));
        let obs = Observed::of(Some(&raw));
        assert_eq!(
            (obs.ticket, obs.locked_ms()),
            (Some(0), Some(1700000000123))
        );
        raw.insert(TICKET.into(), AttributeValue::N("42".into()));
        assert_eq!(Observed::of(Some(&raw)).ticket, Some(42));
        // DynamoDB writes a stamp without fraction as an integer.
        raw.insert(LOCK_DATE.into(), AttributeValue::N("1700000000123".into()));
        assert_eq!(Observed::of(Some(&raw)).locked_ms(), Some(1700000000123));
    }

    #[test]
    fn a_lock_is_recognised_by_its_stamp_as_a_number() {
        let me = TxId("me".into());
        // DynamoDB answers `…450` written as `…45`, and `…000000` as the integer.
        let lock = ours(Some("1700000000000.123450"));
        assert!(locked("1700000000000.12345", false).holds(&me, &lock));
        assert!(locked("1700000000000.123450", false).holds(&me, &lock));
        assert!(locked("1700000000000", false).holds(&me, &ours(Some("1700000000000.000000"))));
        // Another stamp is another lock, unless ours is applied already.
        assert!(!locked("1700000000000.12346", false).holds(&me, &lock));
        assert!(locked("1700000000000.12346", true).holds(&me, &lock));
        assert!(locked("1", false).holds(&me, &ours(None)));
        assert!(!locked("1700000000000.12345", false).holds(&TxId("other".into()), &lock));
    }

    #[test]
    fn new_stamps_are_canonical() {
        ZERO_ENDED_STAMPS.store(true, std::sync::atomic::Ordering::Relaxed);
        for _ in 0..100 {
            let s = new_stamp();
            assert_eq!(
                crate::keys::canonical_number(&s).as_deref(),
                Some(s.as_str())
            );
            assert!(!s.ends_with('0') || !s.contains('.'), "{s}");
        }
        ZERO_ENDED_STAMPS.store(false, std::sync::atomic::Ordering::Relaxed);
    }
}
