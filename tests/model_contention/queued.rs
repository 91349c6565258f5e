//! Waiting in ticket order across several items (docs/PROTOCOL.md "Waiting in ticket order"):
//! the queue of `fifo` inside the wound-wait of `tests/model_contention.rs`, checked with
//! `stateright`. It follows `Transaction::lock_one` and `contention::resolve`, one request (or one
//! decision on what a request returned) per step:
//! - 3–5 transactions, each locking its items one after the other and then committing; a
//!   transaction's ticket is its index (0 the oldest), in its record from the start
//!   (`tickets_at_begin`: `ticket_at_begin`, a `run` retry) or from its first contention (a
//!   holder, or any queue: an attempt without a ticket is refused by any queue);
//! - meeting a pending holder: wait if it is older or its `_TxW` names a ticket older than ours
//!   (recorded in our `_TxW`), else wound it: a later step rolls it back if the wounder and the
//!   victim are pending and the victim still has no ticket or a younger one (the version
//!   condition is left out: more wounds land); a holder without a live coordinator is rolled back
//!   whatever its ticket (`dead_after`);
//! - a waiter registers in the holder's record, conditional on that record being pending (not on
//!   its own: a waiter rolled back meanwhile registers until it notices); one that finds the
//!   holder decided looks again at once; one whose live entry the held item carries registers
//!   nothing (the holder's release keeps it); one about to wound a younger or ticketless holder
//!   may register with it first (during `wound_grace`, an optional step);
//! - a decision releases the transaction's items at once, each unlock writing the item's queue:
//!   its entries ∪ the record's registrations for it, less the expired ones and the holder's own
//!   (no registration lands after the decision, so reading them with it loses nothing);
//! - a lock attempt of a free item passes if its queue is empty or the oldest entry (`_TxQF`,
//!   expired or not) is not older than the attempt's ticket; a refused one waits for the oldest
//!   live older entry (`_TxW` names it; there is no holder to register with), or, when every older
//!   entry has expired, drops the expired ones (conditional on the queue as read: one step here);
//! - departures: a coordinator crashes (its transaction pending, its locks held until a takeover)
//!   or gives up (`lock_wait`; `run` then rolls it back); a wounded one learns it at its next
//!   step. The entries of a transaction with no live coordinator at that item expire at any
//!   moment. A live waiter renews its entry (by registering with a holder, or on the item when a
//!   free item's queue refuses it), so it never expires; `lapses` puts back the code before a
//!   refused waiter renewed on the item, whose entry could expire while it waited. Otherwise time
//!   is not modelled (grace, `lock_wait`, backoff and pacing only delay steps), nor the
//!   concurrent locks of one transaction.
//!
//! Properties: **waits point at older transactions** (queue waits too); **no deadlock** (no set of
//! pending transactions whose live coordinators, polling again once every departed entry has
//! expired and the recorded waits settle, are each blocked by a holder or an entry of another
//! member, or by an entry that never goes); **no starvation** (a run that stops has every
//! transaction with a live coordinator decided); **no newcomer ahead of a live registered
//! waiter** with an older ticket (its registration landed and its entry has not lapsed;
//! `strict_fifo`: lapsed or not); **the oldest pending transaction is never wounded**; **wounds
//! land only as judged**. `sometimes`: queue waits, registrations, wounds, a holder wounded while
//! it waits in another item's queue, expiries, takeovers, every transaction committing.
//!
//! With `lapses` (the code before the refused waiter's renewal on the item) and `strict_fifo` it
//! finds a live registered waiter passed by a younger transaction
//! (`waiters_whose_entry_lapses_are_caught`).

use stateright::{Model, Property};

/// A transaction, and its ticket (0 is the oldest).
type Tx = u8;
/// One bit per transaction.
type Set = u8;

fn bit(t: Tx) -> Set {
    1 << t
}

/// The tickets older than `t`.
fn older_than(t: Tx) -> Set {
    bit(t) - 1
}

fn oldest(s: Set) -> Option<Tx> {
    (s != 0).then(|| s.trailing_zeros() as Tx)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    Pending,
    Committed,
    /// Rolled back by a contender's ticket rule.
    Wounded,
    /// Rolled back by a contender as dead (`dead_after`).
    TakenOver,
    /// Rolled back by its own coordinator, which gave up waiting.
    GaveUp,
}

/// Why a contender rolls a holder back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rule {
    /// Younger, or without a ticket.
    Ticket,
    /// No live coordinator (`dead_after`).
    Dead,
    /// [`QueueBug::WoundsQueuedWaiter`]: it waits in a queue.
    Queued,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Locking its next item (or committing after the last one).
    Run,
    /// Waiting for ticket `on`, recorded in `_TxW`: for the pending `holder` of its item
    /// (`registered` once its registration landed in that holder's record), or (`None`) for an
    /// older entry of the free item's queue.
    Waiting {
        on: Tx,
        holder: Option<Tx>,
        registered: bool,
    },
    /// Decided to roll `victim` back.
    Wounding { victim: Tx, rule: Rule },
    /// Finished: committed, gave up, or learned that its transaction was decided.
    Done,
}

/// A transaction's coordinator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Coord {
    pub live: bool,
    /// Index of the next item in its plan.
    pub pc: u8,
    pub phase: Phase,
    /// Refused by its item's queue since it last registered: renewing nothing (`lapses` only).
    pub queued: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ItemState {
    pub holder: Option<Tx>,
    /// The entries the item carries (`_TxQ`; its oldest is `_TxQF`).
    pub queue: Set,
    /// The registrations for it in the holder's record (`_TxJ:<item>:*`).
    pub regs: Set,
    /// Entries (in either place) that have expired.
    pub expired: Set,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct QState {
    pub status: Vec<Status>,
    /// Transactions whose record holds their ticket.
    pub ticketed: Set,
    /// `_TxW` of each record.
    pub waiting_on: Vec<Option<Tx>>,
    pub items: Vec<ItemState>,
    pub coords: Vec<Coord>,
    pub departures_left: u8,
    // Ghosts for the properties.
    /// Whose registration landed since it reached its current item.
    pub registered: Set,
    /// Whose entry at its current item expired while it waited there.
    pub lapsed: Set,
    pub barged: bool,
    pub oldest_wounded: bool,
    pub misjudged_wound: bool,
}

/// Deliberate bugs, to show the checker catches them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueBug {
    /// The lock attempt ignores the item's queue (waiting in ticket order off).
    LockIgnoresQueue,
    /// The unlock writes the entries the item carried but not the holder's registrations.
    ReleaseForgetsRegistrations,
    /// A registration "lands" on a decided holder's record, which nobody reads again.
    RegisterOnDecided,
    /// A refused attempt waits for the oldest older entry, expired or not, and never drops any.
    QueueWaitIgnoresExpiry,
    /// A refused attempt waits for the oldest live entry, older than its ticket or not.
    QueueWaitOnAnyEntry,
    /// A contender rolls back a holder that waits in an item's queue whatever its ticket (as if
    /// a waiter in a queue had nothing to lose).
    WoundsQueuedWaiter,
    /// With marks: a mark replaces whatever the slot holds, an older waiter's live mark included.
    MarkReplacesOlder,
    /// With marks: a waiter at a held item waits for any live mark but its own, younger ones
    /// included, without judging the holder.
    WaitsBehindAnyMark,
}

#[derive(Clone, Debug)]
pub struct QueuedConfig {
    pub name: &'static str,
    pub items: usize,
    /// Items each transaction locks, in order; transaction `t`'s ticket is `t`.
    pub plans: Vec<Vec<u8>>,
    /// Transactions whose record holds their ticket from the start (`ticket_at_begin`, or a
    /// `run` retry); the others record theirs at their first contention.
    pub tickets_at_begin: Set,
    /// Crashes and give-ups, in all.
    pub departures: u8,
    /// The code before a waiter refused by a free item's queue renewed its entry on the item: it
    /// renewed nothing until it met a holder, so its entry could expire while it waited. Without
    /// (the code as built): a live waiter's entry never expires.
    pub lapses: bool,
    /// No newcomer ahead of an older registered waiter even when the waiter's entry lapsed.
    pub strict_fifo: bool,
    /// The oldest waiter's mark (`Settings::mark_oldest_waiter`) instead of the queue: `queue`
    /// is the item's one slot, written by waiters whether the item is locked or not, left by
    /// unlocks and removed by the lock that passes it (see `queued_marks.rs`).
    pub marks: bool,
    pub bug: Option<QueueBug>,
}

pub struct QueuedModel {
    pub cfg: QueuedConfig,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QAction {
    /// The coordinator's next request (lock, ticket, wait, registration, wound, commit).
    Step(Tx),
    /// The coordinator rolls back the holder of its item, which has no live coordinator.
    TakeOver(Tx),
    Crash(Tx),
    /// The waiting coordinator gives up; its transaction rolls itself back.
    GiveUp(Tx),
    /// The entries of transaction `.1` at item `.0` expire.
    Expire(u8, Tx),
    /// The coordinator, about to wound the younger (or ticketless) holder of its item after
    /// `wound_grace`, registers with it meanwhile (conditional on it pending). Optional: a grace
    /// that ends, or a holder decided, before the registration lands is the run without it.
    GraceRegister(Tx),
}

/// What a contender with ticket `mine` does about a pending holder (`contention::resolve`):
/// `Some(on)` waits (for ticket `on`), `None` wounds.
fn decide(mine: Tx, theirs: Option<Tx>, their_wait: Option<Tx>) -> Option<Tx> {
    if let Some(t) = theirs.filter(|&t| t < mine) {
        return Some(t);
    }
    their_wait.filter(|&on| on < mine)
}

/// What a lock attempt of a free item finds.
enum Attempt {
    Locks,
    /// Refused without a ticket: take one.
    NeedsTicket,
    /// Refused: wait for this entry's ticket.
    Waits(Tx),
    /// Refused, every older entry expired: drop the expired entries.
    Drops,
}

impl QueuedModel {
    fn bug(&self, b: QueueBug) -> bool {
        self.cfg.bug == Some(b)
    }

    fn n(&self) -> Tx {
        self.cfg.plans.len() as Tx
    }

    fn pending(s: &QState, t: Tx) -> bool {
        s.status[t as usize] == Status::Pending
    }

    fn ticketed(s: &QState, t: Tx) -> bool {
        s.ticketed & bit(t) != 0
    }

    fn active(c: &Coord) -> bool {
        c.live && c.phase != Phase::Done
    }

    fn has_live(s: &QState, t: Tx) -> bool {
        Self::active(&s.coords[t as usize])
    }

    /// The item transaction `t`'s coordinator locks next, if any.
    fn item_of(&self, s: &QState, t: Tx) -> Option<u8> {
        let c = &s.coords[t as usize];
        self.cfg.plans[t as usize].get(c.pc as usize).copied()
    }

    /// Whether a live coordinator of `t` waits at `item` (and renews its entry there).
    fn at(&self, s: &QState, t: Tx, item: u8) -> bool {
        Self::has_live(s, t) && self.item_of(s, t) == Some(item)
    }

    /// Whether the entries of `t` at `item` may expire now.
    fn expirable(&self, s: &QState, item: u8, t: Tx) -> bool {
        let it = &s.items[item as usize];
        if (it.queue | it.regs) & !it.expired & bit(t) == 0 || it.holder == Some(t) {
            // None live, or the holder's own (dropped by its unlock; its expiry changes nothing).
            return false;
        }
        !self.at(s, t, item) || (self.cfg.lapses && s.coords[t as usize].queued)
    }

    /// A lock attempt of `t` on `it`, a free item.
    fn attempt(&self, s: &QState, t: Tx, it: &ItemState) -> Attempt {
        if self.bug(QueueBug::LockIgnoresQueue) {
            return Attempt::Locks;
        }
        if self.cfg.marks {
            return self.attempt_marked(s, t, it);
        }
        // `attribute_not_exists(_TxQF) OR _TxQF.t >= :mine`, the first half only without a ticket.
        if !Self::ticketed(s, t) {
            return if it.queue == 0 {
                Attempt::Locks
            } else {
                Attempt::NeedsTicket
            };
        }
        if oldest(it.queue).is_none_or(|f| f >= t) {
            return Attempt::Locks;
        }
        let live = it.queue & !it.expired;
        let on = match self.cfg.bug {
            Some(QueueBug::QueueWaitIgnoresExpiry) => oldest(it.queue & older_than(t)),
            Some(QueueBug::QueueWaitOnAnyEntry) => oldest(live & !bit(t)),
            _ => oldest(live & older_than(t)),
        };
        on.map_or(Attempt::Drops, Attempt::Waits)
    }

    /// Whether a contender that judges `o` rolls it back because it sits in a queue (the bug).
    fn queued_victim(&self, s: &QState, o: Tx) -> bool {
        self.bug(QueueBug::WoundsQueuedWaiter)
            && Self::has_live(s, o)
            && matches!(
                s.coords[o as usize].phase,
                Phase::Waiting { holder: None, .. }
            )
    }

    /// Decides `t` (`to`) and releases its items, each unlock carrying the merged queue.
    fn decide_now(&self, s: &mut QState, t: Tx, to: Status) {
        s.status[t as usize] = to;
        let forget = self.bug(QueueBug::ReleaseForgetsRegistrations);
        for it in s.items.iter_mut().filter(|it| it.holder == Some(t)) {
            if self.cfg.marks {
                // The unlock leaves the mark.
                it.holder = None;
                continue;
            }
            let regs = if forget { 0 } else { it.regs };
            *it = ItemState {
                holder: None,
                queue: (it.queue | regs) & !it.expired & !bit(t),
                regs: 0,
                expired: 0,
            };
        }
    }

    fn wound(&self, s: &mut QState, t: Tx, victim: Tx, rule: Rule) {
        let c = &mut s.coords[t as usize];
        c.phase = Phase::Run;
        // `record::roll_back_judged`: the wounder pending, the victim pending and still younger
        // (or without a ticket); a takeover: still dead. Nothing written otherwise.
        let younger = !Self::ticketed(s, victim) || victim > t;
        let as_judged = match rule {
            Rule::Ticket => younger,
            Rule::Dead => !Self::has_live(s, victim),
            Rule::Queued => true,
        };
        if !(Self::pending(s, t) && Self::pending(s, victim) && as_judged) {
            return;
        }
        if rule != Rule::Dead {
            let n = self.n();
            let oldest_pending = (0..n)
                .filter(|&u| Self::pending(s, u) && Self::ticketed(s, u))
                .min();
            s.oldest_wounded |= Self::ticketed(s, victim) && oldest_pending == Some(victim);
            s.misjudged_wound |= !younger;
        }
        let to = if rule == Rule::Dead {
            Status::TakenOver
        } else {
            Status::Wounded
        };
        self.decide_now(s, victim, to);
    }

    /// Registers `t` in the record of `o`, the holder it waits for.
    fn register(&self, s: &mut QState, t: Tx, o: Tx) {
        let item = self.item_of(s, t).expect("a waiter has an item");
        let Phase::Waiting { on, .. } = s.coords[t as usize].phase else {
            unreachable!("only a waiter registers")
        };
        if self.cfg.marks {
            // A mark instead, on the item (whatever the holder's record says), landed or not.
            self.mark_item(s, t, item);
            s.coords[t as usize].phase = Phase::Waiting {
                on,
                holder: Some(o),
                registered: true,
            };
            return;
        }
        let landed = Self::pending(s, o);
        let c = &mut s.coords[t as usize];
        if landed || self.bug(QueueBug::RegisterOnDecided) {
            if landed {
                // A pending holder still holds the item it was met on (decisions release).
                let it = &mut s.items[item as usize];
                debug_assert_eq!(it.holder, Some(o));
                it.regs |= bit(t);
                // A ticket in both places keeps the later expiry: live again.
                it.expired &= !bit(t);
            }
            c.phase = Phase::Waiting {
                on,
                holder: Some(o),
                registered: true,
            };
            c.queued = false;
            s.registered |= bit(t);
            s.lapsed &= !bit(t);
        } else {
            // Decided since it was judged: look again at once.
            c.phase = Phase::Run;
        }
    }

    fn step(&self, s: &mut QState, t: Tx) {
        let c = s.coords[t as usize];
        match c.phase {
            Phase::Wounding { victim, rule } => return self.wound(s, t, victim, rule),
            Phase::Waiting {
                holder: Some(o),
                registered: false,
                ..
            } => return self.register(s, t, o),
            _ => {}
        }
        if !Self::pending(s, t) {
            // It learns the outcome at its next request.
            s.coords[t as usize].phase = Phase::Done;
            return;
        }
        let Some(item) = self.item_of(s, t) else {
            // Commit: one write conditional on the record being pending.
            self.decide_now(s, t, Status::Committed);
            s.coords[t as usize].phase = Phase::Done;
            return;
        };
        let it = s.items[item as usize];
        if let Some(o) = it.holder {
            debug_assert_ne!(o, t, "a transaction meets each item once");
            if !Self::ticketed(s, t) {
                // `Contender::ticket`: recorded at the first contention.
                s.ticketed |= bit(t);
                return;
            }
            // With marks: behind an older live mark, a waiter holding nothing waits for the
            // mark's ticket without judging the holder (the marked waiter, older, judges it).
            if self.cfg.marks
                && let Some(m) = self.mark_ahead(s, &it, t)
            {
                s.coords[t as usize].phase = Phase::Waiting {
                    on: m,
                    holder: Some(o),
                    registered: true,
                };
                Self::record_wait(s, t, m);
                return;
            }
            if self.queued_victim(s, o) {
                s.coords[t as usize].phase = Phase::Wounding {
                    victim: o,
                    rule: Rule::Queued,
                };
                return;
            }
            let theirs = Self::ticketed(s, o).then_some(o);
            let their_wait = s.waiting_on[o as usize];
            let c = &mut s.coords[t as usize];
            match decide(t, theirs, their_wait) {
                Some(on) => {
                    // The item carries its live entry: the holder's release keeps it, so the
                    // waiter registers nothing (`needs_renewal`: it is renewed only when low).
                    let carried = it.queue & !it.expired & bit(t) != 0;
                    if carried && !self.cfg.marks {
                        s.registered |= bit(t);
                    }
                    // With marks: its own live mark, or an older one, is on the item already.
                    let registered = if self.cfg.marks {
                        it.queue & !it.expired & (bit(t) | older_than(t)) != 0
                    } else {
                        carried
                            || matches!(c.phase,
                        Phase::Waiting { holder: Some(h), registered: true, .. } if h == o)
                    };
                    c.phase = Phase::Waiting {
                        on,
                        holder: Some(o),
                        registered,
                    };
                    Self::record_wait(s, t, on);
                }
                None => {
                    c.phase = Phase::Wounding {
                        victim: o,
                        rule: Rule::Ticket,
                    }
                }
            }
            return;
        }
        match self.attempt(s, t, &it) {
            Attempt::Locks => {
                // Ghost: a pending waiter with an older ticket, registered, left behind.
                let behind = (0..t).any(|w| {
                    Self::pending(s, w)
                        && self.at(s, w, item)
                        && s.registered & bit(w) != 0
                        && (self.cfg.strict_fifo || s.lapsed & bit(w) == 0)
                });
                s.barged |= behind;
                if self.cfg.marks {
                    self.pass_mark(s, item);
                }
                // The queue stays (the taker's unlock drops its own entry); `_TxW` is cleared.
                s.items[item as usize].holder = Some(t);
                s.waiting_on[t as usize] = None;
                s.registered &= !bit(t);
                s.lapsed &= !bit(t);
                let c = &mut s.coords[t as usize];
                c.pc += 1;
                c.phase = Phase::Run;
                c.queued = false;
            }
            Attempt::NeedsTicket => s.ticketed |= bit(t),
            Attempt::Waits(on) => {
                Self::record_wait(s, t, on);
                let c = &mut s.coords[t as usize];
                c.phase = Phase::Waiting {
                    on,
                    holder: None,
                    registered: false,
                };
                c.queued |= self.cfg.lapses;
            }
            Attempt::Drops => {
                let it = &mut s.items[item as usize];
                it.queue &= !it.expired;
                it.expired = 0;
                s.coords[t as usize].phase = Phase::Run;
            }
        }
    }
}

impl Model for QueuedModel {
    type State = QState;
    type Action = QAction;

    fn init_states(&self) -> Vec<QState> {
        let n = self.cfg.plans.len();
        assert!(n <= 8, "one bit per transaction");
        vec![QState {
            status: vec![Status::Pending; n],
            ticketed: self.cfg.tickets_at_begin,
            waiting_on: vec![None; n],
            items: vec![
                ItemState {
                    holder: None,
                    queue: 0,
                    regs: 0,
                    expired: 0,
                };
                self.cfg.items
            ],
            coords: vec![
                Coord {
                    live: true,
                    pc: 0,
                    phase: Phase::Run,
                    queued: false,
                };
                n
            ],
            departures_left: self.cfg.departures,
            registered: 0,
            lapsed: 0,
            barged: false,
            oldest_wounded: false,
            misjudged_wound: false,
        }]
    }

    fn actions(&self, s: &QState, out: &mut Vec<QAction>) {
        for t in 0..self.n() {
            let c = &s.coords[t as usize];
            if !Self::active(c) {
                continue;
            }
            out.push(QAction::Step(t));
            let waiting = !matches!(c.phase, Phase::Wounding { .. }) && Self::pending(s, t);
            if waiting
                && let Some(item) = self.item_of(s, t)
                && s.items[item as usize]
                    .holder
                    .is_some_and(|o| o != t && !Self::has_live(s, o) && Self::pending(s, o))
            {
                out.push(QAction::TakeOver(t));
            }
            if let Phase::Wounding {
                victim,
                rule: Rule::Ticket,
            } = c.phase
                && Self::pending(s, victim)
                && let Some(item) = self.item_of(s, t)
                && s.items[item as usize].holder == Some(victim)
                && !self.placed(&s.items[item as usize], t)
            {
                out.push(QAction::GraceRegister(t));
            }
            if s.departures_left > 0 {
                out.push(QAction::Crash(t));
                if waiting && matches!(c.phase, Phase::Waiting { .. }) {
                    out.push(QAction::GiveUp(t));
                }
            }
        }
        for i in 0..s.items.len() as u8 {
            for t in 0..self.n() {
                if self.expirable(s, i, t) {
                    out.push(QAction::Expire(i, t));
                }
            }
        }
    }

    fn next_state(&self, last: &QState, action: QAction) -> Option<QState> {
        let mut s = last.clone();
        match action {
            QAction::Step(t) => self.step(&mut s, t),
            QAction::TakeOver(t) => {
                let item = self.item_of(&s, t)?;
                let victim = s.items[item as usize].holder?;
                s.coords[t as usize].phase = Phase::Wounding {
                    victim,
                    rule: Rule::Dead,
                };
            }
            QAction::GraceRegister(t) if self.cfg.marks => {
                let item = self.item_of(&s, t)?;
                self.mark_item(&mut s, t, item);
            }
            QAction::GraceRegister(t) => {
                let item = self.item_of(&s, t)?;
                let it = &mut s.items[item as usize];
                it.regs |= bit(t);
                it.expired &= !bit(t);
                s.coords[t as usize].queued = false;
                s.registered |= bit(t);
                s.lapsed &= !bit(t);
            }
            QAction::Crash(t) => {
                s.coords[t as usize].live = false;
                s.departures_left -= 1;
            }
            QAction::GiveUp(t) => {
                self.decide_now(&mut s, t, Status::GaveUp);
                s.coords[t as usize].phase = Phase::Done;
                s.departures_left -= 1;
            }
            QAction::Expire(i, t) => {
                s.items[i as usize].expired |= bit(t);
                if self.at(&s, t, i) {
                    s.lapsed |= bit(t);
                }
            }
        }
        // A poll that changes nothing is no step (so that a run that cannot go on stops).
        (s != *last).then_some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        self.property_list()
    }
}

#[path = "queued_checks.rs"]
mod checks;
#[path = "queued_marks.rs"]
mod marks;
