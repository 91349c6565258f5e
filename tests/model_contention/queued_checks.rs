//! What the properties of `queued` (tests/model_contention/queued.rs) compute, the configurations
//! it is checked in, and the broken variants it must catch.

use super::*;
use stateright::{Checker, Expectation, Property};

impl QueuedModel {
    /// `t` waits for ticket `on`: recorded in its `_TxW` if it holds another lock (only whoever
    /// meets one reads it; the code writes a lone waiter's `_TxW` with its timed heartbeat only).
    pub(super) fn record_wait(s: &mut QState, t: Tx, on: Tx) {
        if s.items.iter().any(|i| i.holder == Some(t)) {
            s.waiting_on[t as usize] = Some(on);
        }
    }

    /// The transaction `t` is blocked by when its coordinator polls again, given `_TxW` values
    /// `waits`: `(blocker, on)`, `None` if the poll would change something (it locks, takes a
    /// ticket, wounds, drops expired entries, commits, or learns it was decided).
    fn blocked(&self, s: &QState, t: Tx, waits: &[Option<Tx>]) -> Option<(Tx, Tx)> {
        let c = &s.coords[t as usize];
        if !Self::active(c)
            || !Self::pending(s, t)
            || !Self::ticketed(s, t)
            || matches!(c.phase, Phase::Wounding { .. })
        {
            return None;
        }
        let it = &s.items[self.item_of(s, t)? as usize];
        match it.holder {
            Some(o) => {
                if self.cfg.marks
                    && let Some(m) = self.mark_ahead(s, it, t)
                {
                    return Some((m, m));
                }
                if !Self::has_live(s, o) || self.queued_victim(s, o) {
                    return None;
                }
                let on = decide(t, Self::ticketed(s, o).then_some(o), waits[o as usize])?;
                Some((o, on))
            }
            None => match self.attempt(s, t, it) {
                Attempt::Waits(on) => Some((on, on)),
                _ => None,
            },
        }
    }

    /// The deadlocked transactions, once every departed transaction's entries have expired and
    /// every blocked coordinator has polled again (recording its wait) until the waits settle.
    pub(super) fn deadlocked(&self, s: &QState) -> Set {
        let n = self.n();
        let mut later = s.clone();
        for i in 0..s.items.len() as u8 {
            for t in 0..n {
                if !self.at(s, t, i) && self.expirable(s, i, t) {
                    later.items[i as usize].expired |= bit(t);
                }
            }
        }
        let poll = |waits: &[Option<Tx>]| -> Vec<Option<(Tx, Tx)>> {
            (0..n).map(|t| self.blocked(&later, t, waits)).collect()
        };
        let mut waits = later.waiting_on.clone();
        let mut polled = poll(&waits);
        for _ in 0..=2 * n {
            let mut next = waits.clone();
            for (t, p) in polled.iter().enumerate() {
                if let Some((_, on)) = p {
                    next[t] = Some(*on);
                }
            }
            if next == waits {
                break;
            }
            waits = next;
            polled = poll(&waits);
        }
        // An entry whose owner has no live coordinator and that still blocks never goes.
        let gone: Set = (0..n)
            .filter(|&t| !Self::has_live(s, t))
            .fold(0, |a, t| a | bit(t));
        let mut members: Set = (0..n)
            .filter(|&t| polled[t as usize].is_some())
            .fold(0, |a, t| a | bit(t));
        loop {
            let keep = (0..n)
                .filter(|&t| {
                    members & bit(t) != 0
                        && polled[t as usize].is_some_and(|(b, _)| (members | gone) & bit(b) != 0)
                })
                .fold(0, |a, t| a | bit(t));
            if keep == members {
                return members;
            }
            members = keep;
        }
    }

    /// The properties `queued` checks.
    pub(super) fn property_list(&self) -> Vec<Property<Self>> {
        type M = QueuedModel;
        let mut properties = vec![
            Property::always("waits point at older transactions", |_: &M, s: &QState| {
                s.coords.iter().enumerate().all(|(t, c)| match c.phase {
                    Phase::Waiting { on, .. } if M::active(c) && M::pending(s, t as Tx) => {
                        M::ticketed(s, t as Tx) && on < t as Tx
                    }
                    _ => true,
                })
            }),
            Property::always("no deadlock", |m: &M, s: &QState| m.deadlocked(s) == 0),
            Property::always(
                "no starvation: a run that stops has every live transaction decided",
                |m: &M, s: &QState| {
                    (0..m.n()).all(|t| !M::has_live(s, t) || !M::pending(s, t)) || !m.stopped(s)
                },
            ),
            Property::always(
                "no newcomer ahead of a live registered waiter with an older ticket",
                |_: &M, s: &QState| !s.barged,
            ),
            Property::always(
                "the oldest pending transaction is never wounded",
                |_: &M, s: &QState| !s.oldest_wounded,
            ),
            Property::always("wounds land only as judged", |_: &M, s: &QState| {
                !s.misjudged_wound
            }),
            Property::sometimes("a transaction waits in a queue", |_: &M, s: &QState| {
                s.coords
                    .iter()
                    .any(|c| M::active(c) && matches!(c.phase, Phase::Waiting { holder: None, .. }))
            }),
            Property::sometimes("a waiter registers", |m: &M, s: &QState| {
                s.items
                    .iter()
                    .any(|it| it.regs != 0 || (m.cfg.marks && it.queue != 0))
            }),
            Property::sometimes(
                "a waiter registers with the younger holder it is about to wound",
                |m: &M, s: &QState| {
                    s.coords.iter().enumerate().any(|(t, c)| {
                        matches!(c.phase, Phase::Wounding { victim, rule: Rule::Ticket }
                            if s.items.iter().any(|it| it.holder == Some(victim)
                                && m.placed(it, t as Tx)))
                    })
                },
            ),
            Property::sometimes("a transaction is wounded", |_: &M, s: &QState| {
                s.status.contains(&Status::Wounded)
            }),
            Property::sometimes("an entry expires", |_: &M, s: &QState| {
                s.items.iter().any(|it| it.expired != 0)
            }),
            Property::sometimes("a dead holder is taken over", |_: &M, s: &QState| {
                s.status.contains(&Status::TakenOver)
            }),
            Property::sometimes("every transaction commits", |_: &M, s: &QState| {
                s.status.iter().all(|st| *st == Status::Committed)
            }),
        ];
        if self.cfg.plans.iter().any(|p| p.len() > 1) {
            properties.push(Property::sometimes(
                "a holder waiting in another item's queue is wounded",
                |_: &M, s: &QState| {
                    s.coords.iter().zip(&s.status).any(|(c, st)| {
                        *st == Status::Wounded
                            && c.live
                            && c.pc > 0
                            && matches!(c.phase, Phase::Waiting { holder: None, .. })
                    })
                },
            ));
        }
        properties
    }

    /// Whether no coordinator can change anything any more (departures aside).
    pub(super) fn stopped(&self, s: &QState) -> bool {
        let mut actions = Vec::new();
        self.actions(s, &mut actions);
        actions
            .into_iter()
            .filter(|a| !matches!(a, QAction::Crash(_) | QAction::GiveUp(_)))
            .all(|a| self.next_state(s, a).is_none())
    }
}

pub(super) fn config(
    name: &'static str,
    items: usize,
    plans: Vec<Vec<u8>>,
    departures: u8,
) -> QueuedConfig {
    QueuedConfig {
        name,
        items,
        tickets_at_begin: (1 << plans.len()) - 1,
        plans,
        departures,
        lapses: false,
        strict_fifo: true,
        marks: false,
        bug: None,
    }
}

/// Three transactions over two items, two in one order and the youngest in the other: the
/// oldest releases an item the second waits for (a queue with an entry) while the youngest,
/// holding the other item, arrives and waits in that queue, and is wounded by the second.
pub(super) fn three_by_two() -> QueuedConfig {
    config(
        "queued: 3 tx x 2 items, one crossing, 2 departures",
        2,
        vec![vec![0, 1], vec![0, 1], vec![1, 0]],
        2,
    )
}

/// Four transactions over two items: the outer two lock one item, the inner two both, crossing.
pub(super) fn four_by_two() -> QueuedConfig {
    config(
        "queued: 4 tx x 2 items, 1 departure",
        2,
        vec![vec![0], vec![0, 1], vec![1, 0], vec![1]],
        1,
    )
}

/// Four transactions locking two items each, in alternating orders.
pub(super) fn four_crossing() -> QueuedConfig {
    config(
        "queued: 4 tx x 2 items, all crossing, 2 departures",
        2,
        vec![vec![0, 1], vec![1, 0], vec![0, 1], vec![1, 0]],
        2,
    )
}

/// Four transactions over three items.
pub(super) fn four_by_three() -> QueuedConfig {
    config(
        "queued: 4 tx x 3 items, 1 departure",
        3,
        vec![vec![0, 1], vec![1, 2], vec![2, 0], vec![0, 2]],
        1,
    )
}

/// Four transactions at one item: the shortest run to the lapse of a live waiter's entry.
pub(super) fn four_at_one(lapses: bool) -> QueuedConfig {
    QueuedConfig {
        lapses,
        strict_fifo: true,
        ..config(
            "queued: 4 tx at one item, 1 departure, strict FIFO",
            1,
            vec![vec![0], vec![0], vec![0], vec![0]],
            1,
        )
    }
}

pub(super) fn assert_queued_holds(cfg: QueuedConfig) {
    let (name, bug) = (cfg.name, cfg.bug.is_some());
    crate::model_support::assert_model_holds(name, QueuedModel { cfg }, bug);
}

#[test]
fn three_transactions_two_items_with_queues() {
    assert_queued_holds(three_by_two());
}

/// Tickets recorded at the first contention (none from the start).
#[test]
fn three_transactions_two_items_tickets_at_first_contention() {
    let mut cfg = three_by_two();
    cfg.name = "queued: 3 tx x 2 items, one crossing, 2 departures, tickets at first contention";
    cfg.tickets_at_begin = 0;
    assert_queued_holds(cfg);
}

#[test]
fn four_transactions_two_items_with_queues() {
    assert_queued_holds(four_by_two());
}

#[test]
fn four_transactions_three_items_with_queues() {
    assert_queued_holds(four_by_three());
}

#[test]
#[ignore = "larger run (1.17M states, ~6 s in release): cargo test --release --test model_contention -- --ignored"]
fn four_transactions_crossing_with_queues() {
    assert_queued_holds(four_crossing());
}

/// Two of the four record their ticket from the start (`run` retries), the others at their first
/// contention.
#[test]
#[ignore = "larger run (1.67M states, ~8 s in release): cargo test --release --test model_contention -- --ignored"]
fn four_transactions_crossing_some_tickets_at_first_contention() {
    let mut cfg = four_crossing();
    cfg.name = "queued: 4 tx x 2 items, all crossing, 2 departures, tickets of 1 and 3 at begin";
    cfg.tickets_at_begin = 0b1010;
    assert_queued_holds(cfg);
}

#[test]
#[ignore = "larger run (0.90M states, ~4 s in release): cargo test --release --test model_contention -- --ignored"]
fn four_transactions_three_items_three_departures() {
    let mut cfg = four_by_three();
    cfg.name = "queued: 4 tx x 3 items, 3 departures";
    cfg.departures = 3;
    assert_queued_holds(cfg);
}

/// Five transactions over three items (the fifth crossing the first), one departure.
#[test]
#[ignore = "larger run (6.9M states, ~40 s and 1 GB in release): cargo test --release --test model_contention -- --ignored"]
fn five_transactions_three_items_with_queues() {
    let mut cfg = four_by_three();
    cfg.name = "queued: 5 tx x 3 items, 1 departure";
    cfg.plans.push(vec![1, 0]);
    cfg.tickets_at_begin = 0b11111;
    assert_queued_holds(cfg);
}

#[test]
fn four_transactions_at_one_item_keep_ticket_order() {
    assert_queued_holds(four_at_one(false));
}

/// The code before a waiter refused by the queue of a free item renewed its entry there: it had
/// no holder to register with, so its entry could expire while it waited, and a younger
/// transaction that looked first took the item ahead of it (fairness only: the older waiter then
/// met the younger holder and wounded it, or waited with it). The model finds it in 11 steps:
/// T0 holds the item, T1 and T2 register in its record; T0 commits, the item carrying both
/// entries; T2 is refused by T1's entry; T1 takes the item; T2's entry expires; T1's unlock drops
/// it; T3, younger than T2, takes the free item.
#[test]
fn waiters_whose_entry_lapses_are_caught() {
    let checker = crate::model_support::check(
        QueuedModel {
            cfg: four_at_one(true),
        },
        true,
    );
    assert!(
        checker
            .discovery("no newcomer ahead of a live registered waiter with an older ticket")
            .is_some(),
        "the lapse of a waiting entry was not caught"
    );
}

#[test]
fn buggy_queues_are_caught() {
    let cases = [
        (QueueBug::LockIgnoresQueue, three_by_two()),
        (QueueBug::ReleaseForgetsRegistrations, three_by_two()),
        (QueueBug::RegisterOnDecided, three_by_two()),
        (QueueBug::QueueWaitIgnoresExpiry, three_by_two()),
        (QueueBug::QueueWaitOnAnyEntry, four_at_one(false)),
        (QueueBug::WoundsQueuedWaiter, four_by_two()),
    ];
    for (bug, mut cfg) in cases {
        cfg.bug = Some(bug);
        cfg.strict_fifo = false;
        let model = QueuedModel { cfg };
        crate::model_support::assert_caught(&format!("{bug:?}"), model, &[Expectation::Always]);
    }
}
