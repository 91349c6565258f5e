//! A model of FIFO at a locked item (docs/PROTOCOL.md "Waiting in ticket order"), checked with
//! `stateright`: one hot item, transactions that arrive at any moment with any ticket, wait for
//! it, register, take it and release it; waiters that crash or give up at any step, and whose
//! registration then expires.
//!
//! The model follows the design one DynamoDB request per step:
//! - **register** (`Register`): a waiter writes its entry (its ticket, an expiry) into the
//!   holder's record, conditional on that record being pending;
//! - **decide** (`Decide`): the holder's record leaves pending (commit, or a wound): from then on
//!   no registration lands on it;
//! - **release** (`Release`): whoever completes the holder (its coordinator, a wounder, the
//!   sweeper) reads its record and writes, with the unlock, the item's queue: the entries the item
//!   carried (frozen while it was locked) plus the record's registrations, less the expired ones;
//! - **join** (`Join`): a waiter refused by an older entry on the unlocked item writes its own
//!   entry on the item, conditional on the item unlocked and its queue as read;
//! - **try** (`Try`): a lock attempt, conditional on the item being unlocked and on its queue's
//!   oldest unexpired ticket being no older than the taker's (the fast condition on the oldest
//!   entry, or, when older entries have all expired, the slow one on the queue as read); a
//!   successful one leaves the queue on the item, and the taker's unlock drops its entry;
//! - **leave** (`Leave`): a waiter crashes or gives up; **expire** (`Expire`): its entries' time
//!   passes (a live waiter renews its entry at every poll, so only a departed one expires);
//! - **withdraw** (`Withdraw`): a departed waiter (one that gave up, not crashed) writes into the
//!   pending holder's record that its entry is withdrawn, conditional on that record pending, if
//!   the item carries its entry or the record holds its registration; the release leaves a
//!   withdrawn ticket out of the queue it writes.
//!
//! Tickets are the transactions' indices (0 is the oldest), so an arrival may be older than every
//! waiter (a `run` retry keeps its ticket) or younger.
//!
//! Properties: **no newcomer ahead of an older registered waiter** (when a transaction takes the
//! item, no live waiter whose registration landed holds an older ticket), **no deadlock** (the
//! item is free, live transactions wait for it, and none of them may take it even once every
//! departed waiter's entry has expired), **no starvation** (every path ends with every live
//! transaction having had the item), and `sometimes`: every transaction holds the item, an
//! older arrival goes ahead of younger waiters, a departed waiter's entry expires. Wound-wait
//! across items is `tests/model_contention.rs`'s; the queue with it across several items is
//! `queued` (tests/model_contention/queued.rs).

use stateright::{Model, Property};

type Tx = usize;
/// One bit per transaction.
type Set = u8;

fn bit(t: Tx) -> Set {
    1 << t
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Not arrived yet.
    Idle,
    /// Waiting for the item (its lock attempt failed); `registered`: its entry landed somewhere.
    Waiting {
        registered: bool,
    },
    /// Holding the item; `decided`: its record left pending (the release comes next).
    Holding {
        decided: bool,
    },
    Done,
    /// Crashed or gave up while waiting.
    Left,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FifoState {
    pub phases: Vec<Phase>,
    pub holder: Option<Tx>,
    /// The entries the item carries (written by releases, pruned by lock attempts).
    pub item_queue: Set,
    /// The registrations in the current holder's record.
    pub record_queue: Set,
    /// The item's entries as the holder's lock read them: what a one-request commit writes back
    /// (merged with the registrations it knows), the item's queue not changing while locked.
    pub locked_queue: Set,
    /// Departed transactions whose entries have expired.
    pub expired: Set,
    /// The withdrawals in the current holder's record.
    pub withdrawn: Set,
    pub leaves_left: u8,
    /// Ghosts for the properties.
    pub barged: bool,
    pub older_went_first: bool,
    pub joined: bool,
    pub withdrew: bool,
}

/// Deliberate bugs, to show the checker catches them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FifoBug {
    /// The lock attempt ignores the item's queue (today's behaviour: whoever polls first).
    LockIgnoresQueue,
    /// The release writes only the holder's registrations, forgetting the entries the item carried.
    ReleaseForgetsCarried,
    /// The taker clears the whole queue (its unlock should drop only its own entry).
    TakerClearsQueue,
    /// The fast lock condition lets anyone pass an expired oldest entry
    /// (`_TxQF.e < :now`), although live entries behind it are older than the taker.
    FastPathPassesExpiredHead,
    /// Registration lands whatever the holder's state: after the decision it is never read.
    RegisterAfterDecision,
    /// Entries never expire: a departed waiter's entry blocks the item.
    NoExpiry,
    /// A refused waiter's entry is written on the item whether or not it is locked: the holder's
    /// unlock writes back the queue its lock read, and the entry is lost.
    JoinWhileLocked,
    /// A waiter withdraws an entry it still waits with (a `run` retry that kept its first
    /// attempt's ticket would): the release drops a live waiter's place.
    WithdrawWhileWaiting,
}

#[derive(Clone, Debug)]
pub struct FifoConfig {
    pub name: &'static str,
    pub txs: usize,
    pub leaves: u8,
    pub bug: Option<FifoBug>,
}

pub struct FifoModel {
    pub cfg: FifoConfig,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FifoAction {
    Try(Tx),
    Join(Tx),
    Register(Tx),
    Decide(Tx),
    Release(Tx),
    Leave(Tx),
    Expire(Tx),
    Withdraw(Tx),
}

impl FifoModel {
    fn bug(&self, b: FifoBug) -> bool {
        self.cfg.bug == Some(b)
    }

    fn live_waiter(s: &FifoState, t: Tx) -> bool {
        matches!(s.phases[t], Phase::Waiting { .. })
    }

    /// The oldest entry on the item that still counts.
    fn floor(s: &FifoState) -> Option<Tx> {
        let live = s.item_queue & !s.expired;
        (live != 0).then(|| live.trailing_zeros() as Tx)
    }

    /// Whether `t`'s lock attempt succeeds: the fast condition (the oldest entry no older than
    /// `t`), or the slow one (every older entry expired, the queue as read).
    fn may_lock(&self, s: &FifoState, t: Tx) -> bool {
        if s.holder.is_some() {
            return false;
        }
        if self.bug(FifoBug::LockIgnoresQueue) {
            return true;
        }
        if self.bug(FifoBug::FastPathPassesExpiredHead) && s.item_queue != 0 {
            let head = s.item_queue.trailing_zeros() as Tx;
            if s.expired & bit(head) != 0 {
                return true;
            }
        }
        Self::floor(s).is_none_or(|f| f >= t)
    }

    /// Whether `t`'s withdrawal lands: the holder's record is pending, and the entry is on the
    /// item (as the lock read it) or registered in that record, not withdrawn yet.
    fn may_withdraw(&self, s: &FifoState, t: Tx) -> bool {
        let pending = s
            .holder
            .is_some_and(|h| s.phases[h] == Phase::Holding { decided: false });
        pending && (s.locked_queue | s.record_queue) & !s.withdrawn & bit(t) != 0
    }

    fn deadlocked(&self, s: &FifoState) -> bool {
        if s.holder.is_some() {
            return false;
        }
        let waiting: Vec<Tx> = (0..self.cfg.txs)
            .filter(|&t| Self::live_waiter(s, t))
            .collect();
        if waiting.is_empty() {
            return false;
        }
        let mut later = s.clone();
        if !self.bug(FifoBug::NoExpiry) {
            for t in 0..self.cfg.txs {
                if s.phases[t] == Phase::Left {
                    later.expired |= bit(t);
                }
            }
        }
        !waiting.iter().any(|&t| self.may_lock(&later, t))
    }
}

impl Model for FifoModel {
    type State = FifoState;
    type Action = FifoAction;

    fn init_states(&self) -> Vec<FifoState> {
        vec![FifoState {
            phases: vec![Phase::Idle; self.cfg.txs],
            holder: None,
            item_queue: 0,
            record_queue: 0,
            locked_queue: 0,
            expired: 0,
            withdrawn: 0,
            leaves_left: self.cfg.leaves,
            barged: false,
            older_went_first: false,
            joined: false,
            withdrew: false,
        }]
    }

    fn actions(&self, s: &FifoState, out: &mut Vec<FifoAction>) {
        for t in 0..self.cfg.txs {
            match s.phases[t] {
                Phase::Idle => out.push(FifoAction::Try(t)),
                Phase::Waiting { .. } => {
                    if self.may_lock(s, t) {
                        out.push(FifoAction::Try(t));
                    }
                    let holder_pending = s
                        .holder
                        .is_some_and(|h| s.phases[h] == Phase::Holding { decided: false });
                    // A waiter registers on the holder it meets (again after each handoff).
                    if s.holder.is_some()
                        && (holder_pending || self.bug(FifoBug::RegisterAfterDecision))
                        && s.record_queue & bit(t) == 0
                    {
                        out.push(FifoAction::Register(t));
                    }
                    // Refused by an older entry (not by a holder), with no entry on the item: it
                    // writes its own (conditional on the item unlocked).
                    let refused_by_queue = Self::floor(s).is_some_and(|f| f < t);
                    if refused_by_queue
                        && s.item_queue & bit(t) == 0
                        && (s.holder.is_none() || self.bug(FifoBug::JoinWhileLocked))
                    {
                        out.push(FifoAction::Join(t));
                    }
                    if s.leaves_left > 0 {
                        out.push(FifoAction::Leave(t));
                    }
                    if self.bug(FifoBug::WithdrawWhileWaiting) && self.may_withdraw(s, t) {
                        out.push(FifoAction::Withdraw(t));
                    }
                }
                Phase::Holding { decided: false } => out.push(FifoAction::Decide(t)),
                Phase::Holding { decided: true } => out.push(FifoAction::Release(t)),
                Phase::Left => {
                    let has_entry = (s.item_queue | s.record_queue) & bit(t) != 0;
                    if has_entry && s.expired & bit(t) == 0 && !self.bug(FifoBug::NoExpiry) {
                        out.push(FifoAction::Expire(t));
                    }
                    if self.may_withdraw(s, t) {
                        out.push(FifoAction::Withdraw(t));
                    }
                }
                Phase::Done => {}
            }
        }
    }

    fn next_state(&self, last: &FifoState, action: FifoAction) -> Option<FifoState> {
        let mut s = last.clone();
        match action {
            FifoAction::Try(t) => {
                if self.may_lock(&s, t) {
                    // Ghosts: a live waiter that registered, older than the taker, left behind.
                    let behind = (0..t).any(|w| {
                        s.phases[w] == Phase::Waiting { registered: true }
                            && s.expired & bit(w) == 0
                    });
                    s.barged |= behind;
                    let younger_waiting = (t + 1..self.cfg.txs).any(|w| Self::live_waiter(&s, w));
                    s.older_went_first |= s.phases[t] == Phase::Idle && younger_waiting;
                    s.holder = Some(t);
                    s.phases[t] = Phase::Holding { decided: false };
                    // The queue stays as it is (the unlock drops the taker's own entry); the
                    // slow path's rewrite without expired entries changes nothing that counts.
                    if self.bug(FifoBug::TakerClearsQueue) {
                        s.item_queue = 0;
                    }
                    s.locked_queue = s.item_queue;
                    s.record_queue = 0;
                    s.withdrawn = 0;
                } else {
                    s.phases[t] = Phase::Waiting {
                        registered: matches!(s.phases[t], Phase::Waiting { registered: true }),
                    };
                }
            }
            FifoAction::Join(t) => {
                s.item_queue |= bit(t);
                s.phases[t] = Phase::Waiting { registered: true };
                s.joined = true;
            }
            FifoAction::Register(t) => {
                let h = s.holder?;
                // Conditional on the holder's record being pending (lost otherwise, but the
                // waiter then learns the holder was decided and registers on the next one).
                if s.phases[h] == (Phase::Holding { decided: false }) {
                    s.record_queue |= bit(t);
                    s.phases[t] = Phase::Waiting { registered: true };
                } else if self.bug(FifoBug::RegisterAfterDecision) {
                    // Written into a decided record that nobody reads again.
                    s.phases[t] = Phase::Waiting { registered: true };
                }
            }
            FifoAction::Decide(h) => s.phases[h] = Phase::Holding { decided: true },
            FifoAction::Release(h) => {
                // The queue as the lock read it (the same as the item's now, unless a bug wrote
                // it while locked).
                let carried = if self.bug(FifoBug::ReleaseForgetsCarried) {
                    0
                } else {
                    s.locked_queue
                };
                s.item_queue = (carried | s.record_queue) & !s.expired & !s.withdrawn & !bit(h);
                s.record_queue = 0;
                s.withdrawn = 0;
                s.holder = None;
                s.phases[h] = Phase::Done;
            }
            FifoAction::Leave(t) => {
                s.phases[t] = Phase::Left;
                s.leaves_left -= 1;
            }
            FifoAction::Expire(t) => s.expired |= bit(t),
            FifoAction::Withdraw(t) => {
                // Conditional on the holder's record pending (as checked by `may_withdraw`).
                s.withdrawn |= bit(t);
                s.withdrew = true;
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "no newcomer ahead of an older registered waiter",
                |_: &FifoModel, s: &FifoState| !s.barged,
            ),
            Property::always("no deadlock", |m: &FifoModel, s: &FifoState| {
                !m.deadlocked(s)
            }),
            // Every step moves a transaction on (the state graph has no cycles), so every path
            // ends, and where it ends every transaction that stayed has had the item.
            Property::eventually(
                "no starvation: every live transaction gets the item",
                |_: &FifoModel, s: &FifoState| {
                    s.phases
                        .iter()
                        .all(|p| matches!(p, Phase::Done | Phase::Left))
                },
            ),
            Property::sometimes(
                "every transaction holds the item",
                |_: &FifoModel, s: &FifoState| s.phases.iter().all(|p| *p == Phase::Done),
            ),
            Property::sometimes(
                "an older arrival goes ahead of younger waiters",
                |_: &FifoModel, s: &FifoState| s.older_went_first,
            ),
            Property::sometimes(
                "a waiter refused by the queue joins it on the item",
                |_: &FifoModel, s: &FifoState| s.joined,
            ),
            Property::sometimes(
                "a departed waiter's entry expires",
                |_: &FifoModel, s: &FifoState| s.expired != 0,
            ),
            Property::sometimes(
                "a departed waiter withdraws its entry in the holder's record",
                |_: &FifoModel, s: &FifoState| s.withdrew,
            ),
        ]
    }
}

fn config(name: &'static str, txs: usize, leaves: u8) -> FifoConfig {
    FifoConfig {
        name,
        txs,
        leaves,
        bug: None,
    }
}

fn assert_fifo_holds(cfg: FifoConfig) {
    let (name, bug) = (cfg.name, cfg.bug.is_some());
    crate::model_support::assert_model_holds(name, FifoModel { cfg }, bug);
}

#[test]
fn three_transactions_at_one_item_with_a_departure() {
    assert_fifo_holds(config("fifo: 3 tx at one item, 1 departure", 3, 1));
}

#[test]
fn four_transactions_at_one_item_with_two_departures() {
    assert_fifo_holds(config("fifo: 4 tx at one item, 2 departures", 4, 2));
}

#[test]
fn five_transactions_at_one_item_with_two_departures() {
    assert_fifo_holds(config("fifo: 5 tx at one item, 2 departures", 5, 2));
}

#[test]
fn buggy_fifo_is_caught() {
    use stateright::Expectation;
    let cases = [
        (FifoBug::LockIgnoresQueue, 3),
        (FifoBug::ReleaseForgetsCarried, 4),
        (FifoBug::TakerClearsQueue, 4),
        (FifoBug::RegisterAfterDecision, 4),
        (FifoBug::NoExpiry, 3),
        (FifoBug::FastPathPassesExpiredHead, 4),
        (FifoBug::JoinWhileLocked, 4),
        (FifoBug::WithdrawWhileWaiting, 3),
    ];
    for (bug, txs) in cases {
        let mut cfg = config("fifo, broken", txs, 1);
        cfg.bug = Some(bug);
        let kinds = [Expectation::Always, Expectation::Eventually];
        crate::model_support::assert_caught(&format!("{bug:?}"), FifoModel { cfg }, &kinds);
    }
}
