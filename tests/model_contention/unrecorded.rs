//! Holders without record (`Settings::record_on_demand`) in the contention model
//! (docs/PROTOCOL.md "A record only when needed", `contention::judge_unrecorded`).
//!
//! With `Config::on_demand` every transaction takes its first lock without a record: the lock
//! carries the ticket its transaction has by then (`_TxK` on the item, 0 for none; with
//! `ticket_at_begin` the ticket is taken before the lock). A transaction that needs another lock
//! first creates its record, with the same ticket (`ticket_for_record`); one whose plan is that
//! one item commits on the lock alone. A waiter without record contends with its ticket
//! unrecorded: it holds nothing, so nobody judges it.
//!
//! A contender that finds no record judges the holder by its lock: an older ticket is waited
//! for (not recorded by a waiter without record), anything else is rolled back by a tombstone
//! (`contention::decide_absent`), put only where no record is, and only while the wounder's own
//! record, if it has one, is pending: a record created since makes it fail, and the holder is
//! judged again; a wounder rolled back since decides nothing. A `dead_after` takeover tombstones the same way. A waiter
//! holding no lock may also judge the holder by its lock alone, without reading the record
//! (`lock_judgement_stands`, [`Action::QuietLook`]), whatever the record says by then: an
//! older ticket is waited for, anything else given its grace (nothing happens).
//!
//! The model's properties hold with judgement by the lock: the ghost variables judge a victim
//! without record by its handle's ticket (what the lock should carry), not by the lock.

use super::*;
use stateright::Expectation;

impl ContentionModel {
    /// Whether handle `k` takes its ticket before its first lock (`ticket_at_begin`): a first
    /// handle that has none yet (a resumed one has its record's). With a record, it records the
    /// ticket before the lock too (the record's creation carries it in the code).
    pub(super) fn takes_ticket_at_begin(&self, s: &State, k: Slot) -> bool {
        let h = &s.handles[k];
        self.cfg.ticket_at_begin && h.pc == 0 && !h.resumed && h.mine.is_none()
    }

    /// The steps that are not lock attempts: the ticket taken before the first lock, and the
    /// record's creation before a second lock by a transaction without record. False when the
    /// next step is a lock attempt.
    pub(super) fn step_without_record(&self, s: &mut State, k: Slot) -> bool {
        let h = s.handles[k];
        if s.records[h.tx as usize].exists {
            if self.takes_ticket_at_begin(s, k) {
                self.ticket_step(s, k);
                return true;
            }
            return false;
        }
        let r = &mut s.records[h.tx as usize];
        if h.pc > 0 {
            // `ticket_for_record`: the record carries the ticket the lock carries.
            r.exists = true;
            r.ticket = h.proposed;
            return true;
        }
        if self.takes_ticket_at_begin(s, k) && h.proposed.is_none() {
            s.handles[k].proposed = Some(s.counter);
            s.counter += 1;
            return true;
        }
        false
    }

    /// The ticket a lock taken without record by handle `h` carries (0: none).
    pub(super) fn carries(&self, h: &Handle) -> Ticket {
        h.proposed.unwrap_or(0)
    }

    /// How a contender with ticket `mine` judges the holder `o` of `item` at a look that reads its
    /// record: by the record (`waits`: its `_TxW`), or, when it has none, by the ticket its lock
    /// carries (`judge_unrecorded`; no wait for a younger holder, nor for a running one). `None`:
    /// nothing is done but looking again (a holder without record whose lock carries a ticket
    /// equal to ours, neither older nor younger, as a record's equal ticket fails the wound's
    /// condition).
    pub(super) fn judge_holder(
        &self,
        s: &State,
        mine: Ticket,
        o: Tx,
        item: usize,
        waits: Option<Ticket>,
    ) -> Option<Judgement> {
        let r = &s.records[o as usize];
        if r.exists {
            return Some(judge(&self.cfg, mine, r.ticket, waits));
        }
        let bug = |b: Bug| self.cfg.bug == Some(b);
        let carried = s.carried[item].filter(|&t| t != 0);
        let carried = carried.filter(|_| !bug(Bug::UnrecordedJudgedWithoutTicket));
        if carried == Some(mine) && !bug(Bug::TombstonesTiedHolder) && !bug(Bug::WaitsOnTie) {
            return None;
        }
        Some(
            match judge::decide(mine, carried, None, bug(Bug::WaitsOnTie), false) {
                Some(on) => Judgement::Wait(on),
                None => Judgement::Wound,
            },
        )
    }

    /// A transaction's ticket as the properties judge it: its record's, or, without a record, its
    /// handle's (what its lock should carry, and what it contends with).
    fn true_ticket(s: &State, tx: Tx) -> Option<Ticket> {
        let r = &s.records[tx as usize];
        if r.exists {
            return r.ticket;
        }
        s.handles.iter().find(|h| h.tx == tx)?.proposed
    }

    /// Whether ticket `v` is the oldest of the pending transactions' tickets.
    pub(super) fn oldest(s: &State, v: Ticket) -> bool {
        (0..s.records.len() as Tx)
            .all(|t| !Self::pending(s, t) || Self::true_ticket(s, t).is_none_or(|t| t >= v))
    }

    /// The wound of a holder judged without record: its tombstone, put only where no record is
    /// (then its lock released), and only while the wounder's record, if it has one, is pending
    /// (as `record::roll_back_judged`'s wound). A record created since makes it fail, and the next
    /// step judges again.
    pub(super) fn tombstone(&self, s: &mut State, k: Slot, victim: Tx, dead: bool) {
        let h = s.handles[k];
        let bug = self.cfg.bug;
        let absent = !s.records[victim as usize].exists || bug == Some(Bug::TombstoneOverRecord);
        let wounder = !s.records[h.tx as usize].exists
            || Self::pending(s, h.tx)
            || bug == Some(Bug::TombstoneIgnoresWounder);
        if Self::pending(s, victim) && absent && wounder {
            let v = Self::true_ticket(s, victim);
            s.oldest_wounded |= !dead && v.is_some_and(|v| Self::oldest(s, v));
            let may = dead || v.is_none_or(|v| h.mine.is_some_and(|m| v > m));
            s.misjudged_wound |= !Self::pending(s, h.tx) || !may;
            s.records[victim as usize].exists = true;
            s.tombstoned = true;
            Self::decide_now(s, victim, Status::RolledBack);
        }
        s.handles[k].phase = Phase::Run;
    }

    /// The item handle `k` is blocked on, held by a lock taken without record, if it holds no lock
    /// itself (a look by that lock alone is allowed then).
    pub(super) fn may_look_quietly(&self, s: &State, k: Slot) -> bool {
        let h = &s.handles[k];
        Self::active(h)
            && Self::pending(s, h.tx)
            && !matches!(h.phase, Phase::Wounding { .. })
            && h.mine.is_some()
            && !s.locks.contains(&Some(h.tx))
            && self.blocker(s, k).is_some()
            && s.carried[self.plan(h.tx)[h.pc as usize]].is_some()
    }

    /// `judge_by_lock`: an older ticket on the lock is waited for; anything else is in its
    /// grace (`None`: nothing changes).
    pub(super) fn quiet_look(&self, s: &mut State, k: Slot) -> Option<()> {
        let h = s.handles[k];
        let carried = s.carried[self.plan(h.tx)[h.pc as usize]].filter(|&t| t != 0)?;
        let on = judge::decide(h.mine?, Some(carried), None, false, false)?;
        s.handles[k].phase = Phase::Waiting { on };
        s.quiet_wait = true;
        Some(())
    }
}

/// The `sometimes` properties of a model with holders without record.
pub(super) fn properties() -> Vec<Property<ContentionModel>> {
    vec![
        Property::sometimes(
            "a transaction commits without a record",
            |_: &ContentionModel, s: &State| {
                s.records
                    .iter()
                    .any(|r| r.status == Status::Committed && !r.exists)
            },
        ),
        Property::sometimes(
            "a holder without record is waited for",
            |m: &ContentionModel, s: &State| {
                (0..s.handles.len()).any(|k| {
                    matches!(s.handles[k].phase, Phase::Waiting { .. })
                        && m.blocker(s, k)
                            .is_some_and(|o| !s.records[o as usize].exists)
                })
            },
        ),
        Property::sometimes(
            "a holder without record is tombstoned",
            |_: &ContentionModel, s: &State| s.tombstoned,
        ),
        Property::sometimes(
            "a waiter holding nothing waits on a lock's ticket alone",
            |_: &ContentionModel, s: &State| s.quiet_wait,
        ),
    ]
}

fn on_demand(mut cfg: Config, name: &'static str, ticket_at_begin: bool) -> Config {
    cfg.name = name;
    cfg.on_demand = true;
    cfg.ticket_at_begin = ticket_at_begin;
    cfg
}

fn three() -> Config {
    on_demand(
        checks::three_by_two_small(),
        "3 tx x 2 items (one single-item), first locks without record, crash + resume",
        false,
    )
}

fn three_at_begin() -> Config {
    on_demand(
        checks::three_by_two_small(),
        "3 tx x 2 items (one single-item), first locks without record, ticket at begin",
        true,
    )
}

fn three_clock() -> Config {
    on_demand(
        checks::three_by_two_small_clock(),
        "3 tx x 2 items (one single-item), first locks without record, clock tickets",
        true,
    )
}

/// `three_clock`, tickets drawn at first contention only (a lock may carry none, and a record
/// created without one may get a ticket older than its contenders' later).
fn three_clock_at_contention() -> Config {
    on_demand(
        checks::three_by_two_small_clock(),
        "3 tx x 2 items (one single-item), first locks without record, clock tickets at contention",
        false,
    )
}

#[test]
fn holders_without_record() {
    checks::assert_model_holds(three());
}

#[test]
fn holders_without_record_with_tickets_at_begin() {
    checks::assert_model_holds(three_at_begin());
}

#[test]
fn holders_without_record_with_clock_tickets() {
    checks::assert_model_holds(three_clock());
}

#[test]
fn holders_without_record_with_clock_tickets_at_contention() {
    checks::assert_model_holds(three_clock_at_contention());
}

#[test]
fn holders_without_record_broken_is_caught() {
    let cases = [
        (Bug::UnrecordedJudgedWithoutTicket, three_at_begin()),
        (Bug::TombstoneOverRecord, three_clock_at_contention()),
        (Bug::TombstoneIgnoresWounder, three_at_begin()),
        (Bug::WaitsWithTiedHolder, three_clock()),
        (Bug::WaitsWithTiedHolder, checks::recorded_clock_at_begin()),
        (Bug::TombstonesTiedHolder, three_clock()),
    ];
    for (bug, mut cfg) in cases {
        cfg.bug = Some(bug);
        let model = ContentionModel { cfg };
        model_support::assert_caught(&format!("{bug:?}"), model, &[Expectation::Always]);
    }
}
