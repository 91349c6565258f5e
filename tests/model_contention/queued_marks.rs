//! The oldest waiter's mark (docs/PROTOCOL.md "The oldest waiter's mark",
//! `Settings::mark_oldest_waiter`) inside wound-wait across items: `queued` with `marks`, where an
//! item's `queue` is its one slot. A waiter that waits for a holder (or gives a younger one its
//! grace) writes its ticket into the slot, whatever the holder's state, conditional on the slot
//! holding no live mark older than its own; a free item's lock attempt passes an absent or expired
//! mark, or one no older than its ticket, and removes it; a refused attempt (or one without a
//! ticket, which takes one) waits for the mark's ticket; unlocks leave the mark; a mark whose
//! writer no longer waits at the item expires at any moment (a live waiter renews its own). The
//! A waiter holding no item that meets a holder behind an older live mark waits for the mark's
//! ticket without judging the holder. The FIFO property is the single slot's: no taker younger than a live waiter whose mark landed and
//! was neither replaced nor passed since (`registered`), and a waiter whose mark was replaced marks
//! again at its next look that finds the slot empty, expired or younger.

use super::checks::{
    assert_queued_holds, four_at_one, four_by_three, four_by_two, four_crossing, three_by_two,
};
use super::*;
use stateright::Expectation;

impl QueuedModel {
    /// A lock attempt of `t` on the free item `it` under marks.
    pub(super) fn attempt_marked(&self, s: &QState, t: Tx, it: &ItemState) -> Attempt {
        // `attribute_not_exists(_TxH) OR _TxH.t >= :mine OR _TxH.e < :now`, only the first and
        // last without a ticket.
        match oldest(it.queue & !it.expired) {
            Some(_) if !Self::ticketed(s, t) => Attempt::NeedsTicket,
            Some(m) if m < t => Attempt::Waits(m),
            _ => Attempt::Locks,
        }
    }

    /// The live mark `t`, meeting a holder of `it`, waits for instead of judging the holder: one
    /// older than its ticket, when `t` holds no item (one that holds some judges the holder,
    /// which may be waiting for it).
    pub(super) fn mark_ahead(&self, s: &QState, it: &ItemState, t: Tx) -> Option<Tx> {
        if s.items.iter().any(|i| i.holder == Some(t)) {
            return None;
        }
        let live = it.queue & !it.expired & !bit(t);
        if self.bug(QueueBug::WaitsBehindAnyMark) {
            return oldest(live);
        }
        oldest(live & older_than(t))
    }

    /// `t` writes its mark on `item`: it lands over no mark, an expired one or a younger one.
    pub(super) fn mark_item(&self, s: &mut QState, t: Tx, item: u8) {
        let it = &mut s.items[item as usize];
        let live = it.queue & !it.expired;
        if self.bug(QueueBug::MarkReplacesOlder) || oldest(live).is_none_or(|m| m >= t) {
            // One slot: the mark it replaces (younger, or expired) protects nobody any more;
            // an older one replaced (the bug) still should.
            s.registered &= !(it.queue & !bit(t) & !older_than(t));
            it.queue = bit(t);
            it.expired &= !bit(t);
            s.registered |= bit(t);
            s.lapsed &= !bit(t);
        }
    }

    /// The lock of `item` removes its mark.
    pub(super) fn pass_mark(&self, s: &mut QState, item: u8) {
        let it = &mut s.items[item as usize];
        s.registered &= !it.queue;
        it.queue = 0;
        it.expired = 0;
    }

    /// Whether `t` has its place at `it` (a registration in the holder's record; with marks, its
    /// mark on the item).
    pub(super) fn placed(&self, it: &ItemState, t: Tx) -> bool {
        let place = if self.cfg.marks { it.queue } else { it.regs };
        place & bit(t) != 0
    }
}

fn marked(mut cfg: QueuedConfig, name: &'static str) -> QueuedConfig {
    cfg.name = name;
    cfg.marks = true;
    cfg
}

#[test]
fn three_transactions_two_items_with_marks() {
    assert_queued_holds(marked(
        three_by_two(),
        "marked: 3 tx x 2 items, one crossing, 2 departures",
    ));
}

#[test]
fn three_transactions_two_items_with_marks_tickets_at_first_contention() {
    let mut cfg = marked(
        three_by_two(),
        "marked: 3 tx x 2 items, one crossing, 2 departures, tickets at first contention",
    );
    cfg.tickets_at_begin = 0;
    assert_queued_holds(cfg);
}

#[test]
fn four_transactions_two_items_with_marks() {
    assert_queued_holds(marked(four_by_two(), "marked: 4 tx x 2 items, 1 departure"));
}

#[test]
fn four_transactions_three_items_with_marks() {
    assert_queued_holds(marked(
        four_by_three(),
        "marked: 4 tx x 3 items, 1 departure",
    ));
}

#[test]
fn four_transactions_at_one_item_with_marks() {
    assert_queued_holds(marked(
        four_at_one(false),
        "marked: 4 tx at one item, 1 departure",
    ));
}

#[test]
#[ignore = "larger run (1.15M states, ~3 s in release): cargo test --release --test model_contention -- --ignored"]
fn four_transactions_crossing_with_marks() {
    assert_queued_holds(marked(
        four_crossing(),
        "marked: 4 tx x 2 items, all crossing, 2 departures",
    ));
}

#[test]
fn broken_marks_across_items_are_caught() {
    let cases = [
        (QueueBug::LockIgnoresQueue, three_by_two()),
        (QueueBug::MarkReplacesOlder, four_at_one(false)),
        (QueueBug::WoundsQueuedWaiter, four_by_two()),
        (QueueBug::WaitsBehindAnyMark, four_by_two()),
    ];
    for (bug, cfg) in cases {
        let mut cfg = marked(cfg, "marked, broken");
        cfg.bug = Some(bug);
        let model = QueuedModel { cfg };
        crate::model_support::assert_caught(&format!("{bug:?}"), model, &[Expectation::Always]);
    }
}
