//! Locks that carry their holder's recorded ticket (`_TxKR`) in the contention model
//! (docs/PROTOCOL.md "Judged by the lock's ticket", `contention::judge_by_lock`).
//!
//! A handle that knows the ticket its record holds writes it on every lock it takes. A waiter that
//! meets such a lock may judge the holder by it without reading the holder's record
//! ([`Action::LockLook`]): an older ticket is waited for (recorded in `_TxW` by a waiter holding
//! another lock, as a wait judged on the record is). A younger one changes nothing (the code
//! gives it its grace, reading no record, only to a waiter holding nothing). The waiter may look
//! at the record instead at any step ([`Action::Step`]), as the code does once the lock's
//! judgement stops standing.
//!
//! The lock's ticket judges exactly as the record's would only if it is the record's: the
//! property "a lock's recorded ticket is its holder's record's" checks that, and the model's
//! other properties (waits point at older transactions, no deadlock, the oldest never wounded)
//! hold with the judgement by the lock. `LockCarriesProposedTicket` (the lock carrying the
//! ticket the handle proposed, not the one its record holds) is caught.

use super::*;
use stateright::Expectation;

impl ContentionModel {
    /// The recorded ticket a lock taken by handle `h` of a transaction with a record carries: the
    /// one it contends with, its record's once it knows it (`None`: it knows none yet).
    pub(super) fn carries_recorded(&self, h: &Handle) -> Option<Ticket> {
        match self.cfg.bug {
            Some(Bug::LockCarriesProposedTicket) => h.proposed,
            _ => h.mine,
        }
    }

    /// Whether handle `k` is blocked on an item whose lock carries an older recorded ticket than
    /// its own, which it may wait for without reading the holder's record.
    pub(super) fn may_look_by_lock(&self, s: &State, k: Slot) -> bool {
        let h = &s.handles[k];
        Self::active(h)
            && Self::pending(s, h.tx)
            && !matches!(h.phase, Phase::Wounding { .. })
            && self.blocker(s, k).is_some()
            && self.lock_ticket_ahead(s, k).is_some()
    }

    /// The recorded ticket on the lock handle `k` is blocked on, if older than its own.
    fn lock_ticket_ahead(&self, s: &State, k: Slot) -> Option<Ticket> {
        let h = &s.handles[k];
        let mine = h.mine?;
        let item = *self.plan(h.tx).get(h.pc as usize)?;
        s.carried_recorded[item].filter(|&t| t < mine)
    }

    /// `judge_by_lock` on a lock carrying an older recorded ticket: wait for it, recording the
    /// wait as `resolve`'s `Wait` does (a waiter holding another lock writes `_TxW`).
    pub(super) fn lock_look(&self, s: &mut State, k: Slot) {
        let Some(on) = self.lock_ticket_ahead(s, k) else {
            return;
        };
        let tx = s.handles[k].tx;
        if s.records[tx as usize].exists && s.locks.contains(&Some(tx)) {
            s.records[tx as usize].waiting_on = Some(on);
            Self::wrote(s, tx, false);
        }
        s.handles[k].phase = Phase::Waiting { on };
        s.lock_ticket_wait = true;
    }
}

/// The properties of locks carrying recorded tickets: the lock's ticket is the record's, and (in
/// the configurations that reach it) a waiter waits on it alone.
pub(super) fn properties(cfg: &Config) -> Vec<Property<ContentionModel>> {
    let mut ps = vec![Property::always(
        "a lock's recorded ticket is its holder's record's",
        |_: &ContentionModel, s: &State| {
            s.carried_recorded
                .iter()
                .zip(&s.locks)
                .all(|(t, o)| match (t, o) {
                    (Some(t), Some(o)) => s.records[*o as usize].ticket == Some(*t),
                    (Some(_), None) => false,
                    (None, _) => true,
                })
        },
    )];
    if cfg.expect_lock_looks {
        ps.push(Property::sometimes(
            "a waiter waits on a lock's recorded ticket alone",
            |_: &ContentionModel, s: &State| s.lock_ticket_wait,
        ));
    }
    ps
}

/// `three_by_two_small`: a transaction that met contention at its first item locks it with its
/// ticket, and a third meets that lock.
fn three() -> Config {
    let mut cfg = checks::three_by_two_small();
    cfg.name = "3 tx x 2 items (one single-item), locks carrying recorded tickets";
    cfg.expect_lock_looks = true;
    cfg
}

/// `three`, tickets taken at begin: every lock carries one.
fn three_at_begin() -> Config {
    let mut cfg = three();
    cfg.name = "3 tx x 2 items (one single-item), locks carrying recorded tickets taken at begin";
    cfg.ticket_at_begin = true;
    cfg
}

#[test]
fn waiters_judge_holders_by_the_recorded_ticket_on_their_locks() {
    checks::assert_model_holds(three());
}

#[test]
fn waiters_judge_holders_by_the_recorded_ticket_on_their_locks_with_tickets_at_begin() {
    checks::assert_model_holds(three_at_begin());
}

#[test]
fn a_lock_carrying_another_ticket_than_its_records_is_caught() {
    let mut cfg = checks::second_handles();
    cfg.bug = Some(Bug::LockCarriesProposedTicket);
    let model = ContentionModel { cfg };
    model_support::assert_caught("LockCarriesProposedTicket", model, &[Expectation::Always]);
}
