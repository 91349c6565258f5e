//! An exhaustive model check of the ordered contention policy (ticket-ordered wound-wait,
//! `ContentionPolicy::Ordered`) with crashed and resumed coordinators, with the `stateright` model
//! checker. tests/model/ checks the protocol's safety and leaves *when* a pending holder is rolled
//! back to "the world"; this model checks the wait/wound choices themselves.
//!
//! The model follows `contention::resolve` and `Transaction::lock_one`, one DynamoDB request (or one
//! decision on what a request returned) per step:
//!
//! - 2–3 transactions, each locking its items in a fixed order and then committing; every item
//!   lock names its holder, and a decision (commit, rollback) releases the holder's locks;
//! - a ticket counter (`~ticket-counter`, one atomic `ADD`: `TakeTicket`), tickets in records
//!   (`_TxK`, written once with `if_not_exists`: `RecordTicket`) and in handles (the ticket a handle
//!   contends with, and the ticket it proposes for its record, shared by `run` retries);
//! - or, for `TicketSource::Clock`, tickets read from skewed clocks: a coordinator meeting
//!   contention draws any ticket of a small range (`Draw`), so a later ticket may be older or
//!   younger than an earlier one, and two transactions may hold equal tickets (the tie-breaker
//!   collides); the rest of the protocol is the same;
//! - meeting a pending holder: wait if the holder's recorded ticket is older, or if the holder
//!   records (`_TxW`) that it waits for a transaction older than us (the wait is recorded in our
//!   `_TxW`); otherwise wound it: roll it back (a separate step, so the holder may change between
//!   the read and the rollback) with one conditional request that decides exactly what was judged
//!   (`record::roll_back_judged`): the holder still pending at the version read, still without a
//!   ticket or with a younger one than ours (or, for a `dead_after` takeover, with no write to its
//!   record since it was judged dead), and the wounder's own record still pending; when the
//!   condition fails nothing is written and the contender judges again at its next step;
//! - every write a coordinator makes to its record: an append (a new request; here in one step
//!   with the item's lock, and not for an item the transaction holds already), a ticket
//!   (`set_ticket`), a recorded wait (`_TxW`, a heartbeat) and its clearing change its last-update
//!   time `_TxD`; appends also change its version;
//! - coordinators that crash between any two steps, and resumption of a pending transaction by a
//!   new handle built from its record (`TransactionManager::resume`), also while the first handle
//!   still runs (two live handles of one transaction);
//! - optionally `dead_after` takeover: a holder whose every coordinator has crashed may be rolled
//!   back by a contender whatever its ticket (time is not modelled: "dead" means no live handle,
//!   i.e. `dead_after` is assumed longer than any pause of a live coordinator).
//!
//! Invariants:
//! - **waits point at older transactions**: a live handle that decided to wait for ticket `on`
//!   belongs to a transaction whose record holds a younger ticket than `on`: the precondition of
//!   the no-deadlock argument in docs/PROTOCOL.md (others judge a transaction by its record);
//! - **no deadlock**: no set of pending transactions whose every live handle is blocked on an
//!   item of another member and would, polling again, keep waiting. Polls are replayed until the
//!   recorded `_TxW` values settle, so a transient cycle built from a stale `_TxW` (which the next
//!   poll breaks) is not a deadlock, but any cycle that survives its members' polls is;
//! - **the oldest is never wounded**: the pending transaction with the oldest recorded ticket is
//!   never rolled back by the ticket rule (only a `dead_after` takeover may roll it back), whoever
//!   the wounder and whenever its ticket was recorded. (Without the wound's conditions the model
//!   finds two ways: a transaction meeting contention for the first time takes its ticket from the
//!   counter and then records it, and a contender that read its record in between saw no ticket;
//!   and a wounder rolled back after it decided still carried the wound out);
//! - **wounds land only as judged**: when a wound lands, the wounder is pending and the victim,
//!   as it is then, may be rolled back by it: a younger or no ticket (ticket rule), or no write to
//!   its record since it was judged dead (takeover).
//!
//! `sometimes` properties show that waits, wounds, resumption under contention and commits of
//! every transaction are reached, and `buggy_contention_is_caught` puts back the bug found by the
//! outside review (a resumed handle ignores its record's ticket and contends with a fresh, younger
//! one), a variant (a handle keeps its own ticket when its record already had another), the
//! unconditional wound (`rollback_transaction(owner)`, as `resolve` did before) and the wound
//! without each of its conditions in turn (the wounder pending, the ticket order, the takeover's
//! `_TxD`), and a tie taken for "older" (`t <= mine`, which clock tickets could meet), and expects
//! a counterexample for each.
//!
//! `fifo` (tests/model_contention/fifo.rs) models the waiting in ticket order at one item
//! (docs/PROTOCOL.md "Waiting in ticket order"), its own model with its own properties and broken
//! variants.
//!
//! `queued` (tests/model_contention/queued.rs) puts that queue into wound-wait over several items:
//! 3–5 transactions locking two items each (or one) in differing orders, tickets, `_TxW` waits,
//! wounds, takeovers, crashes and give-ups, with registrations in the holder's record, the merged
//! queue written by every release, the queue condition on every lock attempt and waits for the
//! oldest live older entry, and entries of departed waiters expiring. It checks that waits
//! (queue waits too) point at older transactions, no deadlock, no starvation, no newcomer ahead
//! of a live registered waiter, the oldest never wounded, wounds only as judged, and catches its
//! own broken variants; it finds that a waiter behind an older entry of a free item can lose its
//! place (its entry is renewed only by registering with a holder), a question of fairness only.
//!
//! Abstractions: a lock attempt, and the `_TxW` clear that follows a successful one, are one step;
//! a handle learns that its transaction was decided at its next step (the protocol model covers the
//! late locks such a handle may take); `wound_grace`, `lock_wait` timeouts and backoff only delay
//! steps (every interleaving is explored anyway); `run` retries are not modelled.

mod model_support;

#[path = "model_contention/bugs.rs"]
mod bugs;
#[path = "model_contention/checks.rs"]
mod checks;
#[path = "model_contention/deadlock.rs"]
mod deadlock;
#[path = "model_contention/fifo.rs"]
mod fifo;
#[path = "model_contention/judge.rs"]
mod judge;
#[path = "model_contention/line.rs"]
mod line;
#[path = "model_contention/lock_tickets.rs"]
mod lock_tickets;
#[path = "model_contention/marked.rs"]
mod marked;
#[path = "model_contention/queued.rs"]
mod queued;
#[path = "model_contention/unrecorded.rs"]
mod unrecorded;

use bugs::Bug;
use judge::{Judgement, judge};
use stateright::{Model, Property};

type Tx = u8;
type Slot = usize;
type Ticket = u8;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Status {
    Pending,
    Committed,
    RolledBack,
}

/// A transaction's record: its state, `_TxK` and `_TxW`. `exists`: false for a transaction that
/// took its first lock without a record (`Config::on_demand`) until it creates one; a tombstone
/// exists, rolled back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Record {
    exists: bool,
    status: Status,
    ticket: Option<Ticket>,
    waiting_on: Option<Ticket>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Phase {
    /// Locking its next item (or committing after the last one).
    Run,
    /// Decided to wait for (a transaction with) ticket `on`, and recorded that in `_TxW`.
    Waiting { on: Ticket },
    /// The candidate rule ([`judge`]): waits, unrecorded, for the younger holder `on`.
    WaitingForRunning { on: Tx },
    /// Decided to roll back `victim` (`dead`: as a `dead_after` takeover). `appended`: the victim
    /// appended to its record since (a new version); `touched`: any write to its record since (a
    /// new `_TxD`). `unrecorded`: judged without a record, by its lock (rolled back by a
    /// tombstone, see [`unrecorded`]).
    Wounding {
        victim: Tx,
        dead: bool,
        appended: bool,
        touched: bool,
        unrecorded: bool,
    },
    /// Finished: committed, or learned that its transaction was decided.
    Done,
}

/// A coordinator: one `Transaction` handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Handle {
    tx: Tx,
    live: bool,
    resumed: bool,
    /// Index of the next item to lock in the transaction's plan.
    pc: u8,
    phase: Phase,
    /// The ticket this handle proposes for its record (taken from the counter).
    proposed: Option<Ticket>,
    /// The ticket this handle contends with.
    mine: Option<Ticket>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    records: Vec<Record>,
    /// Holder of each item's lock.
    locks: Vec<Option<Tx>>,
    /// The ticket an item's lock taken without a record carries (`_TxK` on the item; 0: none yet).
    carried: Vec<Option<Ticket>>,
    /// The ticket an item's lock taken with a record carries: its holder's record's, as the
    /// locking handle knew it (`_TxKR`; `None`: the handle knew none). See [`lock_tickets`].
    carried_recorded: Vec<Option<Ticket>>,
    handles: Vec<Handle>,
    /// The next ticket the counter hands out.
    counter: Ticket,
    crashes_left: u8,
    resumes_left: u8,
    // Ghost variables for the properties.
    oldest_wounded: bool,
    misjudged_wound: bool,
    tombstoned: bool,
    quiet_wait: bool,
    lock_ticket_wait: bool,
}

#[derive(Clone, Debug)]
struct Config {
    name: &'static str,
    items: usize,
    /// Items each transaction locks, in order.
    plans: Vec<Vec<usize>>,
    crashes: u8,
    resumes: u8,
    /// Whether a transaction may be resumed while one of its handles is still live.
    second_handles: bool,
    dead_takeover: bool,
    /// Clock tickets: a coordinator draws any ticket in `1..=n` (skewed clocks, ties) instead of
    /// taking the counter's next one.
    clock: Option<Ticket>,
    /// The candidate rule of [`judge`].
    wait_for_running: bool,
    /// `Settings::record_on_demand`: every transaction takes its first lock without a record.
    on_demand: bool,
    /// `ContentionPolicy::Ordered`'s `ticket_at_begin`: a transaction without record takes its
    /// ticket before its first lock (which then carries it).
    ticket_at_begin: bool,
    /// The configuration reaches a wait judged by a lock's recorded ticket alone (a `sometimes`
    /// property of [`lock_tickets`]).
    expect_lock_looks: bool,
    bug: Option<Bug>,
}

struct ContentionModel {
    cfg: Config,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Action {
    /// The handle's next request (lock, ticket, wait, wound or commit).
    Step(Slot),
    /// A contender treats the holder, whose coordinators have all crashed, as dead.
    TakeOver(Slot),
    Crash(Slot),
    Resume(Tx),
    /// Clock tickets: the handle's ticket, read from its (skewed) clock.
    Draw(Slot, Ticket),
    /// A waiter holding no lock judges the holder by the ticket its lock without record carries,
    /// reading no record ([`unrecorded`]).
    QuietLook(Slot),
    /// A waiter judges the holder older by the recorded ticket its lock carries, reading no
    /// record ([`lock_tickets`]).
    LockLook(Slot),
}

impl ContentionModel {
    fn plan(&self, tx: Tx) -> &[usize] {
        &self.cfg.plans[tx as usize]
    }

    fn pending(s: &State, tx: Tx) -> bool {
        s.records[tx as usize].status == Status::Pending
    }

    fn has_live_handle(s: &State, tx: Tx) -> bool {
        s.handles
            .iter()
            .any(|h| h.live && h.tx == tx && h.phase != Phase::Done)
    }

    /// The pending transaction holding the item handle `k` needs next, if any.
    fn blocker(&self, s: &State, k: Slot) -> Option<Tx> {
        let h = &s.handles[k];
        let item = *self.plan(h.tx).get(h.pc as usize)?;
        s.locks[item].filter(|&o| o != h.tx && Self::pending(s, o))
    }

    /// Whether handle `k`'s next step is taking a ticket (it met contention and has none, or it
    /// takes one before its first lock without record; not one that holds its lock without record
    /// and creates its record next).
    fn needs_ticket(&self, s: &State, k: Slot) -> bool {
        let h = &s.handles[k];
        let creates_record = !s.records[h.tx as usize].exists && h.pc > 0;
        !matches!(h.phase, Phase::Wounding { .. })
            && !creates_record
            && Self::pending(s, h.tx)
            && h.mine.is_none()
            && h.proposed.is_none()
            && (self.takes_ticket_at_begin(s, k)
                || self
                    .plan(h.tx)
                    .get(h.pc as usize)
                    .is_some_and(|&item| s.locks[item].is_some_and(|o| o != h.tx)))
    }

    fn decide_now(s: &mut State, tx: Tx, to: Status) {
        s.records[tx as usize].status = to;
        for ((l, c), r) in s
            .locks
            .iter_mut()
            .zip(s.carried.iter_mut())
            .zip(s.carried_recorded.iter_mut())
        {
            if *l == Some(tx) {
                *l = None;
                *c = None;
                *r = None;
            }
        }
    }

    /// A write of transaction `tx` to its own record (`append`: a new version as well as a new
    /// `_TxD`), as seen by the contenders that judged it.
    fn wrote(s: &mut State, tx: Tx, append: bool) {
        for h in s.handles.iter_mut() {
            if let Phase::Wounding {
                victim,
                appended,
                touched,
                ..
            } = &mut h.phase
                && *victim == tx
            {
                *touched = true;
                *appended |= append;
            }
        }
    }

    fn step(&self, s: &mut State, k: Slot) {
        let h = s.handles[k];
        let tx = h.tx;
        if let Phase::Wounding {
            victim,
            dead,
            unrecorded: true,
            ..
        } = h.phase
        {
            self.tombstone(s, k, victim, dead);
            return;
        }
        if let Phase::Wounding {
            victim,
            dead,
            appended,
            touched,
            ..
        } = h.phase
        {
            // `record::roll_back_judged`, one `TransactWriteItems`: our record pending (condition
            // check), the victim pending at the version judged, and still a younger (or no) ticket
            // than ours, or (takeover) the `_TxD` judged dead. Nothing written otherwise: the next
            // step judges again.
            let v = s.records[victim as usize].ticket;
            let bug = self.cfg.bug;
            let as_judged = !appended
                && if dead {
                    !touched || bug == Some(Bug::TakeoverIgnoresTouch)
                } else {
                    v.is_none_or(|v| h.mine.is_some_and(|m| v > m))
                        || bug == Some(Bug::WoundIgnoresTicket)
                };
            let conditions =
                (Self::pending(s, tx) || bug == Some(Bug::WoundIgnoresWounder)) && as_judged;
            if Self::pending(s, victim)
                && (conditions || self.cfg.bug == Some(Bug::UnconditionalWound))
            {
                s.oldest_wounded |= !dead && v.is_some_and(|v| Self::oldest(s, v));
                let may = if dead {
                    !touched
                } else {
                    v.is_none_or(|v| h.mine.is_some_and(|m| v > m))
                };
                s.misjudged_wound |= !Self::pending(s, tx) || !may;
                Self::decide_now(s, victim, Status::RolledBack);
            }
            s.handles[k].phase = Phase::Run;
            return;
        }
        if !Self::pending(s, tx) {
            // It learns the outcome (the record) at its next request.
            s.handles[k].phase = Phase::Done;
            return;
        }
        let plan = self.plan(tx);
        let Some(&item) = plan.get(h.pc as usize) else {
            // Commit: one write conditional on the record being pending (or, without record, on
            // the one lock: released only under a tombstone, which decides the transaction).
            Self::decide_now(s, tx, Status::Committed);
            s.handles[k].phase = Phase::Done;
            return;
        };
        if self.step_without_record(s, k) {
            return;
        }
        let exists = s.records[tx as usize].exists;
        let holder = match s.locks[item] {
            None => None,
            Some(o) if o == tx => None,
            // Locks of decided transactions are released with the decision.
            Some(o) => Some(o),
        };
        let Some(o) = holder else {
            // A new request is appended to the record (a new version); an item this transaction
            // holds already (a resumed handle re-driving its record) is in it. A recorded wait is
            // cleared (`clear_waiting`). Either is a write to the record.
            // Without a record, nothing is written to it: the lock carries the ticket instead.
            let new = s.locks[item] != Some(tx);
            let waited = s.records[tx as usize].waiting_on.take().is_some();
            s.locks[item] = Some(tx);
            if !exists {
                s.carried[item] = Some(self.carries(&h));
            } else if new || waited {
                Self::wrote(s, tx, new);
            }
            if exists && new {
                s.carried_recorded[item] = self.carries_recorded(&h);
            }
            let h = &mut s.handles[k];
            h.pc += 1;
            h.phase = Phase::Run;
            return;
        };
        // Contention: the contender's ticket first (`Contender::ticket`).
        let Some(mine) = h.mine else {
            self.ticket_step(s, k);
            return;
        };
        // `resolve`: read the holder's record and decide (by its lock if it has none).
        let waits = s.records[o as usize].waiting_on;
        let Some(judgement) = self.judge_holder(s, mine, o, item, waits) else {
            return;
        };
        match judgement {
            Judgement::Wait(on) => {
                // Recorded in `_TxW` (with a heartbeat) before backing off, by a waiter that holds
                // another lock: only whoever meets one reads it. A waiter holding none records
                // nothing here (the code writes `_TxW` with its timed heartbeat only).
                if exists && s.locks.contains(&Some(tx)) {
                    s.records[tx as usize].waiting_on = Some(on);
                    Self::wrote(s, tx, false);
                }
                s.handles[k].phase = Phase::Waiting { on };
            }
            Judgement::WaitForRunning => {
                // Not recorded; a wait recorded before is cleared (`clear_waiting`).
                if s.records[tx as usize].waiting_on.take().is_some() {
                    Self::wrote(s, tx, false);
                }
                s.handles[k].phase = Phase::WaitingForRunning { on: o };
            }
            Judgement::Wound => {
                s.handles[k].phase = Phase::Wounding {
                    victim: o,
                    dead: false,
                    appended: false,
                    touched: false,
                    unrecorded: !s.records[o as usize].exists,
                };
            }
        }
    }

    /// Handle `k`'s ticket, one request a step: taken (`take_ticket`, one atomic ADD on the
    /// counter), then recorded (`set_ticket`) to contend with the record's.
    fn ticket_step(&self, s: &mut State, k: Slot) {
        let h = s.handles[k];
        let tx = h.tx;
        match h.proposed {
            None => {
                s.handles[k].proposed = Some(s.counter);
                s.counter += 1;
            }
            // Without a record, it contends with its ticket unrecorded (it holds nothing).
            Some(p) if !s.records[tx as usize].exists => s.handles[k].mine = Some(p),
            Some(p) => {
                // `set_ticket`: `_TxK = if_not_exists(_TxK, p)`, returning the record's ticket.
                let r = &mut s.records[tx as usize];
                let recorded = *r.ticket.get_or_insert(p);
                Self::wrote(s, tx, false);
                s.handles[k].mine = Some(match self.cfg.bug {
                    Some(Bug::ResumeTakesFreshTicket | Bug::KeepsOwnTicket) => p,
                    _ => recorded,
                });
            }
        }
    }

    /// Whether the handle can take a step.
    fn active(h: &Handle) -> bool {
        h.live && h.phase != Phase::Done
    }
}

impl Model for ContentionModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let n = self.cfg.plans.len();
        vec![State {
            records: vec![
                Record {
                    exists: !self.cfg.on_demand,
                    status: Status::Pending,
                    ticket: None,
                    waiting_on: None,
                };
                n
            ],
            locks: vec![None; self.cfg.items],
            carried: vec![None; self.cfg.items],
            carried_recorded: vec![None; self.cfg.items],
            handles: (0..n as Tx)
                .map(|tx| Handle {
                    tx,
                    live: true,
                    resumed: false,
                    pc: 0,
                    phase: Phase::Run,
                    proposed: None,
                    mine: None,
                })
                .collect(),
            counter: 1,
            crashes_left: self.cfg.crashes,
            resumes_left: self.cfg.resumes,
            oldest_wounded: false,
            misjudged_wound: false,
            tombstoned: false,
            quiet_wait: false,
            lock_ticket_wait: false,
        }]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        for (k, h) in s.handles.iter().enumerate() {
            if !Self::active(h) {
                continue;
            }
            match self.cfg.clock {
                // Any clock, any skew: every ticket of the range may be read.
                Some(range) if self.needs_ticket(s, k) => {
                    out.extend((1..=range).map(|t| Action::Draw(k, t)));
                }
                _ => out.push(Action::Step(k)),
            }
            if s.crashes_left > 0 {
                out.push(Action::Crash(k));
            }
            if self.cfg.dead_takeover
                && !matches!(h.phase, Phase::Wounding { .. })
                && Self::pending(s, h.tx)
                && self
                    .blocker(s, k)
                    .is_some_and(|o| !Self::has_live_handle(s, o))
            {
                out.push(Action::TakeOver(k));
            }
            if self.may_look_quietly(s, k) {
                out.push(Action::QuietLook(k));
            }
            if self.may_look_by_lock(s, k) {
                out.push(Action::LockLook(k));
            }
        }
        if s.resumes_left > 0 {
            for tx in 0..s.records.len() as Tx {
                // Only a record can be resumed.
                if Self::pending(s, tx)
                    && s.records[tx as usize].exists
                    && (self.cfg.second_handles || !Self::has_live_handle(s, tx))
                {
                    out.push(Action::Resume(tx));
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Step(k) => self.step(&mut s, k),
            Action::TakeOver(k) => {
                let victim = self.blocker(&s, k)?;
                s.handles[k].phase = Phase::Wounding {
                    victim,
                    dead: true,
                    appended: false,
                    touched: false,
                    unrecorded: !s.records[victim as usize].exists,
                };
            }
            Action::Crash(k) => {
                s.handles[k].live = false;
                s.crashes_left -= 1;
            }
            Action::Resume(tx) => {
                // `Transaction::from_record`: the record's ticket is the handle's ticket.
                let t = match self.cfg.bug {
                    Some(Bug::ResumeTakesFreshTicket) => None,
                    _ => s.records[tx as usize].ticket,
                };
                s.handles.push(Handle {
                    tx,
                    live: true,
                    resumed: true,
                    pc: 0,
                    phase: Phase::Run,
                    proposed: t,
                    mine: t,
                });
                s.resumes_left -= 1;
            }
            Action::Draw(k, t) => s.handles[k].proposed = Some(t),
            Action::QuietLook(k) => self.quiet_look(&mut s, k)?,
            Action::LockLook(k) => self.lock_look(&mut s, k),
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always(
                "waits point at older transactions",
                |_: &ContentionModel, s: &State| {
                    s.handles.iter().all(|h| match h.phase {
                        // A waiter without record contends with its ticket unrecorded.
                        Phase::Waiting { on }
                            if ContentionModel::active(h) && ContentionModel::pending(s, h.tx) =>
                        {
                            let r = &s.records[h.tx as usize];
                            let own = if r.exists { r.ticket } else { h.mine };
                            own.is_some_and(|r| on < r)
                        }
                        _ => true,
                    })
                },
            ),
            Property::always("no deadlock", |m: &ContentionModel, s: &State| {
                m.deadlocked(s).is_empty()
            }),
            Property::always(
                "the oldest pending transaction is never wounded",
                |_: &ContentionModel, s: &State| !s.oldest_wounded,
            ),
            Property::always(
                "wounds land only as judged",
                |_: &ContentionModel, s: &State| !s.misjudged_wound,
            ),
            Property::sometimes("a transaction waits", |_: &ContentionModel, s: &State| {
                s.handles
                    .iter()
                    .any(|h| matches!(h.phase, Phase::Waiting { .. }))
            }),
            Property::sometimes(
                "a transaction wounds another",
                |_: &ContentionModel, s: &State| {
                    s.records.iter().any(|r| r.status == Status::RolledBack)
                },
            ),
            Property::sometimes(
                "a resumed handle meets contention",
                |_: &ContentionModel, s: &State| {
                    s.handles.iter().any(|h| {
                        h.resumed
                            && matches!(h.phase, Phase::Waiting { .. } | Phase::Wounding { .. })
                    })
                },
            ),
            Property::sometimes(
                "every transaction commits",
                |_: &ContentionModel, s: &State| {
                    s.records.iter().all(|r| r.status == Status::Committed)
                },
            ),
        ];
        if self.cfg.wait_for_running {
            properties.push(Property::sometimes(
                "an older transaction waits for a younger running one",
                |_: &ContentionModel, s: &State| {
                    s.handles
                        .iter()
                        .any(|h| matches!(h.phase, Phase::WaitingForRunning { .. }))
                },
            ));
        }
        if self.cfg.on_demand {
            properties.extend(unrecorded::properties());
        }
        properties.extend(lock_tickets::properties(&self.cfg));
        if self.cfg.clock.is_some() {
            properties.push(Property::sometimes(
                "a transaction meets a holder with an equal ticket",
                |m: &ContentionModel, s: &State| {
                    (0..s.handles.len()).any(|k| {
                        let h = &s.handles[k];
                        ContentionModel::active(h)
                            && m.blocker(s, k).is_some_and(|o| {
                                h.mine.is_some() && s.records[o as usize].ticket == h.mine
                            })
                    })
                },
            ));
        }
        properties
    }
}
