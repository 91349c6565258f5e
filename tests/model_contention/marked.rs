//! A model of the oldest waiter's mark at one item (docs/PROTOCOL.md "The oldest waiter's
//! mark", `Settings::mark_oldest_waiter`), checked with `stateright`: transactions that arrive at
//! any moment with any ticket, wait for the item, mark it, take it and release it; waiters that
//! crash or give up at any step, whose mark then expires.
//!
//! One DynamoDB request per step:
//! - **try** (`Try`): a lock attempt, conditional on the item being unlocked and carrying no mark
//!   that counts and is older than the taker's ticket; a successful one removes the mark;
//! - **mark** (`Mark`): a waiter writes its ticket into the item's one slot, whether the item is
//!   locked or not, conditional on the slot holding no mark that counts and is older (a waiter's
//!   requests go one after the other, so a mark lands before that waiter's next attempt);
//! - **release** (`Release`): the holder's commit or rollback unlocks the item, leaving the mark;
//! - **leave** (`Leave`): a waiter crashes or gives up; **expire** (`Expire`): time passes for a
//!   mark whose writer no longer renews it (it departed, or it finished: a waiter renews its mark
//!   at its looks, so only those expire).
//!
//! Tickets are the transactions' indices (0 is the oldest), so an arrival may be older than every
//! waiter (a `run` retry keeps its ticket) or younger.
//!
//! Properties: **the item goes to the oldest marked waiter** (no transaction takes the item while
//! a live waiter older than it has marked it since the item was last locked and since a mark
//! last expired: a waiter whose mark an older waiter replaced, and that older one departed,
//! counts again once it marks again), **no wait for a
//! finished transaction's mark**, **no deadlock** (the item free, live transactions waiting, and
//! none of them allowed to take it even once every mark nobody renews has expired), **no
//! starvation** (every path ends with every live transaction having had the item), and
//! `sometimes`: every transaction holds the item, a marked waiter takes it ahead of a younger
//! waiter that tried first, an older waiter's mark replaces a younger one's, a departed waiter's
//! mark expires, an older arrival passes a live mark.

use stateright::{Model, Property};

type Tx = usize;
/// One bit per transaction.
type Set = u8;

fn bit(t: Tx) -> Set {
    1 << t
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Idle,
    /// Its lock attempt failed: it waits, looks and marks.
    Waiting,
    Holding,
    Done,
    /// Crashed or gave up while waiting.
    Left,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MarkState {
    pub phases: Vec<Phase>,
    pub holder: Option<Tx>,
    /// The ticket in the item's slot.
    pub mark: Option<Tx>,
    /// Transactions whose mark, if on the item, no longer counts (expired).
    pub expired: Set,
    pub leaves_left: u8,
    /// Ghost: the waiters whose mark landed since the item was last locked, and since a mark
    /// last expired (a waiter whose mark an older one replaced is unmarked once that one expires,
    /// until it marks again).
    pub marked: Set,
    /// Ghosts for the properties.
    pub passed_older_marker: bool,
    pub waited_for_finished: bool,
    pub refused: Set,
    pub marked_went_first: bool,
    pub replaced_younger: bool,
    pub older_passed_live_mark: bool,
}

/// Deliberate bugs, to show the checker catches them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkBug {
    /// The lock attempt ignores the mark (the behaviour without the setting).
    LockIgnoresMark,
    /// A mark replaces whatever the slot holds, an older waiter's mark included.
    MarkReplacesOlder,
    /// Marks never expire: a departed waiter's mark blocks the item.
    NoExpiry,
    /// The lock that passes the mark leaves it on the item.
    LockKeepsMark,
}

#[derive(Clone, Debug)]
pub struct MarkConfig {
    pub name: &'static str,
    pub txs: usize,
    pub leaves: u8,
    pub bug: Option<MarkBug>,
}

pub struct MarkModel {
    pub cfg: MarkConfig,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MarkAction {
    Try(Tx),
    Mark(Tx),
    Release(Tx),
    Leave(Tx),
    Expire(Tx),
}

impl MarkModel {
    fn bug(&self, b: MarkBug) -> bool {
        self.cfg.bug == Some(b)
    }

    /// The mark on the item, if it counts.
    fn live_mark(s: &MarkState) -> Option<Tx> {
        s.mark.filter(|&m| s.expired & bit(m) == 0)
    }

    /// Whether `t`'s lock attempt succeeds.
    fn may_lock(&self, s: &MarkState, t: Tx) -> bool {
        s.holder.is_none()
            && (self.bug(MarkBug::LockIgnoresMark) || Self::live_mark(s).is_none_or(|m| m >= t))
    }

    /// Whether `t`'s mark lands.
    fn may_mark(&self, s: &MarkState, t: Tx) -> bool {
        self.bug(MarkBug::MarkReplacesOlder) || Self::live_mark(s).is_none_or(|m| m >= t)
    }

    fn deadlocked(&self, s: &MarkState) -> bool {
        let waiting: Vec<Tx> = (0..self.cfg.txs)
            .filter(|&t| s.phases[t] == Phase::Waiting)
            .collect();
        if s.holder.is_some() || waiting.is_empty() {
            return false;
        }
        let mut later = s.clone();
        if !self.bug(MarkBug::NoExpiry) {
            for t in 0..self.cfg.txs {
                if matches!(s.phases[t], Phase::Left | Phase::Done) {
                    later.expired |= bit(t);
                }
            }
        }
        !waiting.iter().any(|&t| self.may_lock(&later, t))
    }
}

impl Model for MarkModel {
    type State = MarkState;
    type Action = MarkAction;

    fn init_states(&self) -> Vec<MarkState> {
        vec![MarkState {
            phases: vec![Phase::Idle; self.cfg.txs],
            holder: None,
            mark: None,
            expired: 0,
            leaves_left: self.cfg.leaves,
            marked: 0,
            passed_older_marker: false,
            waited_for_finished: false,
            refused: 0,
            marked_went_first: false,
            replaced_younger: false,
            older_passed_live_mark: false,
        }]
    }

    fn actions(&self, s: &MarkState, out: &mut Vec<MarkAction>) {
        for t in 0..self.cfg.txs {
            match s.phases[t] {
                Phase::Idle => out.push(MarkAction::Try(t)),
                Phase::Waiting => {
                    out.push(MarkAction::Try(t));
                    // A waiter marks when the slot does not hold its own mark (a renewal changes
                    // nothing here), whether the mark then lands or not.
                    if s.mark != Some(t) {
                        out.push(MarkAction::Mark(t));
                    }
                    if s.leaves_left > 0 {
                        out.push(MarkAction::Leave(t));
                    }
                }
                Phase::Holding => out.push(MarkAction::Release(t)),
                Phase::Left | Phase::Done => {
                    let stale = s.mark == Some(t) && s.expired & bit(t) == 0;
                    if stale && !self.bug(MarkBug::NoExpiry) {
                        out.push(MarkAction::Expire(t));
                    }
                }
            }
        }
    }

    fn next_state(&self, last: &MarkState, action: MarkAction) -> Option<MarkState> {
        let mut s = last.clone();
        match action {
            MarkAction::Try(t) => {
                if self.may_lock(&s, t) {
                    let older_marker =
                        (0..t).any(|w| s.marked & bit(w) != 0 && s.phases[w] == Phase::Waiting);
                    s.passed_older_marker |= older_marker;
                    s.marked_went_first |=
                        s.mark == Some(t) && (t + 1..self.cfg.txs).any(|w| s.refused & bit(w) != 0);
                    s.older_passed_live_mark |= Self::live_mark(&s).is_some_and(|m| m > t);
                    s.holder = Some(t);
                    s.phases[t] = Phase::Holding;
                    if !self.bug(MarkBug::LockKeepsMark) {
                        s.mark = None;
                    }
                    s.marked = 0;
                    s.refused = 0;
                } else {
                    if s.holder.is_none()
                        && let Some(m) = Self::live_mark(&s)
                        && matches!(s.phases[m], Phase::Done | Phase::Holding)
                    {
                        s.waited_for_finished = true;
                    }
                    s.refused |= bit(t);
                    s.phases[t] = Phase::Waiting;
                }
            }
            MarkAction::Mark(t) => {
                if self.may_mark(&s, t) {
                    s.replaced_younger |= Self::live_mark(&s).is_some_and(|m| m > t);
                    s.mark = Some(t);
                    s.expired &= !bit(t);
                    s.marked |= bit(t);
                }
            }
            MarkAction::Release(h) => {
                s.holder = None;
                s.phases[h] = Phase::Done;
            }
            MarkAction::Leave(t) => {
                s.phases[t] = Phase::Left;
                s.leaves_left -= 1;
            }
            MarkAction::Expire(t) => {
                s.expired |= bit(t);
                // The waiters whose marks this one replaced count again only once they mark
                // again (at their next look).
                s.marked = 0;
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "the item goes to the oldest marked waiter",
                |_: &MarkModel, s: &MarkState| !s.passed_older_marker,
            ),
            Property::always(
                "no wait for a finished transaction's mark",
                |_: &MarkModel, s: &MarkState| !s.waited_for_finished,
            ),
            Property::always("no deadlock", |m: &MarkModel, s: &MarkState| {
                !m.deadlocked(s)
            }),
            // A waiter may look and mark for ever while the item is held; `eventually` needs
            // the paths to end, which the waiters' looks prevent, so starvation is checked as
            // `no deadlock` plus progress: some transaction can always move the item on.
            Property::sometimes(
                "every transaction holds the item",
                |_: &MarkModel, s: &MarkState| s.phases.iter().all(|p| *p == Phase::Done),
            ),
            Property::sometimes(
                "a marked waiter takes the item ahead of a younger one that tried first",
                |_: &MarkModel, s: &MarkState| s.marked_went_first,
            ),
            Property::sometimes(
                "an older waiter's mark replaces a younger one's",
                |_: &MarkModel, s: &MarkState| s.replaced_younger,
            ),
            Property::sometimes(
                "a departed waiter's mark expires",
                |_: &MarkModel, s: &MarkState| {
                    (0..s.phases.len())
                        .any(|t| s.phases[t] == Phase::Left && s.expired & bit(t) != 0)
                },
            ),
            Property::sometimes(
                "an older arrival passes a live mark",
                |_: &MarkModel, s: &MarkState| s.older_passed_live_mark,
            ),
        ]
    }
}

fn config(name: &'static str, txs: usize, leaves: u8) -> MarkConfig {
    MarkConfig {
        name,
        txs,
        leaves,
        bug: None,
    }
}

fn assert_marks_hold(cfg: MarkConfig) {
    let (name, bug) = (cfg.name, cfg.bug.is_some());
    crate::model_support::assert_model_holds(name, MarkModel { cfg }, bug);
}

#[test]
fn three_transactions_mark_one_item_with_a_departure() {
    assert_marks_hold(config("marks: 3 tx at one item, 1 departure", 3, 1));
}

#[test]
fn four_transactions_mark_one_item_with_two_departures() {
    assert_marks_hold(config("marks: 4 tx at one item, 2 departures", 4, 2));
}

#[test]
fn five_transactions_mark_one_item_with_two_departures() {
    assert_marks_hold(config("marks: 5 tx at one item, 2 departures", 5, 2));
}

#[test]
fn broken_marks_are_caught() {
    use stateright::Expectation;
    let cases = [
        (MarkBug::LockIgnoresMark, 3),
        (MarkBug::MarkReplacesOlder, 3),
        (MarkBug::NoExpiry, 3),
        (MarkBug::LockKeepsMark, 3),
    ];
    for (bug, txs) in cases {
        let mut cfg = config("marks, broken", txs, 1);
        cfg.bug = Some(bug);
        crate::model_support::assert_caught(
            &format!("{bug:?}"),
            MarkModel { cfg },
            &[Expectation::Always],
        );
    }
}
