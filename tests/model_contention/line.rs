//! A model of the line behind the oldest waiter's mark at one item (docs/PROTOCOL.md "The line
//! behind the mark"), checked with `stateright`: transactions that arrive at any moment with any
//! ticket, wait for the item, mark it or join the line behind its mark, take it (promoting a
//! waiter of the line to the mark) and release it; waiters that crash or give up at any step,
//! whose mark and entry then expire.
//!
//! One DynamoDB request per step:
//! - **try** (`Try`): a lock attempt, conditional on the item being unlocked and carrying no mark
//!   that counts and is older than the taker's ticket. A successful one takes the taker's own
//!   entry out of the line and either removes the mark or replaces it with an entry of the line
//!   (`promote`), conditional on that entry still being there; and it removes the whole line
//!   (`wipe`: entries that joined since its last look are lost, and their waiters join again)
//!   or only those two entries. Which entry, and which form: the implementation promotes the
//!   oldest live entry of the line as its last look found it, which may be stale, and wipes the
//!   line when it promotes nobody, or when the line holds nothing but the promoted and own
//!   entries (a condition on the line's size, so that no empty line stays on the item); the
//!   model lets it promote **any** entry the line holds, or none, in either form, a stronger
//!   check;
//! - **mark** (`Mark`): as in `marked.rs`: the taker's ticket into the one slot, whether the item
//!   is locked or not, conditional on the slot holding no mark that counts and is older;
//! - **join** (`Join`): a waiter that found a live mark older than itself puts its entry in the
//!   line, whether the item is locked or not (no condition but the item's existence);
//! - **release** (`Release`): the holder's commit or rollback unlocks the item, leaving the mark
//!   and the line;
//! - **leave** (`Leave`): a waiter crashes or gives up; **expire** (`Expire`, `ExpireEntry`):
//!   time passes for a mark or an entry whose writer no longer renews it (it departed: a waiter
//!   renews its mark and its entry at its looks). A promoted mark keeps its entry's expiry, so
//!   an entry that expired becomes a mark that does not count.
//!
//! With `hand_over` (docs/PROTOCOL.md "Handing the item over"), one more request:
//! - **hand over** (`HandOver`): the holder's commit unlocks the item and writes the lock of a
//!   waiter, conditional on the waiter's place being there and counting: the mark, if it is the
//!   waiter's, or its entry, behind no mark that counts and is older. It promotes an entry of
//!   the line (any, or none) and takes the waiter's entry out or leaves it (a holder that did not
//!   see it), wiping the line or not, as a lock does. The waiter holds the item from then on; a
//!   live one learns it at a look (`Learn`, which takes its entry out if it is still there), one
//!   that gives up releases it as it leaves (the read after its leave), and one that crashed
//!   holds it until a contender releases it after its grace (`ReleaseDead`).
//!
//! Properties, beside those of `marked.rs` (the item goes to the oldest marked waiter, no wait
//! for a finished transaction's mark, no deadlock): **no finished transaction in the line** (a
//! transaction that holds or held the item has no entry there, so no lock promotes it), and
//! `sometimes`: a waiter joins the line, a promoted waiter takes the item next, a departed
//! waiter's entry is promoted and then expires, every transaction holds the item. With
//! `hand_over`: **no finished transaction handed the item**, and `sometimes` a handover lands,
//! a departed waiter is handed the item (and released after its grace).

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
    /// Its lock attempt failed: it waits, looks, marks and joins.
    Waiting,
    Holding,
    Done,
    /// Crashed or gave up while waiting.
    Left,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LineState {
    pub phases: Vec<Phase>,
    pub holder: Option<Tx>,
    /// The ticket in the item's slot.
    pub mark: Option<Tx>,
    /// Transactions whose mark, if on the item, no longer counts (expired).
    pub expired: Set,
    /// The line behind the mark: the entries the item carries.
    pub line: Set,
    /// Entries that expired.
    pub line_expired: Set,
    /// Every transaction that ever joined the line (for the broken promotion).
    pub ever_joined: Set,
    /// Marks that never expire (for the broken promotion).
    pub forever: Set,
    pub leaves_left: u8,
    /// Ghost: the waiters whose mark landed (written, or promoted) since the item was last
    /// locked, and since a mark last expired.
    pub marked: Set,
    /// Ghosts for the properties.
    pub passed_older_marker: bool,
    pub waited_for_finished: bool,
    /// The transaction the last lock promoted, while it has not taken the item nor lost its
    /// mark.
    pub promoted: Option<Tx>,
    pub promoted_took_next: bool,
    pub joined: bool,
    pub departed_promoted_expired: bool,
    /// Every transaction whose mark ever landed (kept for the broken handover only).
    pub ever_marked: Set,
    pub handed_to_finished: bool,
    pub handed_over: bool,
    pub handed_to_departed: bool,
}

/// Deliberate bugs, to show the checker catches them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineBug {
    /// The promotion is not conditional on the entry still being in the line: a lock whose view
    /// is stale promotes a transaction that took the item since.
    PromoteWithoutCheck,
    /// The lock leaves its taker's own entry in the line.
    KeepsOwnEntry,
    /// The promoted mark is written without an expiry: a departed waiter promoted blocks the
    /// item for good.
    PromotedMarkNeverExpires,
    /// The handover is not conditional on the waiter's place: a holder whose view is stale
    /// hands the item to a transaction that took it and finished since.
    HandOverWithoutCheck,
}

#[derive(Clone, Debug)]
pub struct LineConfig {
    pub name: &'static str,
    pub txs: usize,
    pub leaves: u8,
    pub bug: Option<LineBug>,
    /// Holders hand the item over (`Settings::hand_over`).
    pub hand_over: bool,
}

pub struct LineModel {
    pub cfg: LineConfig,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LineAction {
    /// A lock attempt, promoting this entry if it succeeds, and removing the whole line
    /// (`true`) or only the promoted and own entries.
    Try(Tx, Option<Tx>, bool),
    Mark(Tx),
    Join(Tx),
    Release(Tx),
    Leave(Tx),
    Expire(Tx),
    ExpireEntry(Tx),
    /// The holder's commit hands the item to a waiter, promoting this entry, taking the waiter's
    /// entry out (`true`) or not, and wiping the line (`true`) or not.
    HandOver(Tx, Tx, Option<Tx>, bool, bool),
    Learn(Tx),
    ReleaseDead(Tx),
}

impl LineModel {
    fn bug(&self, b: LineBug) -> bool {
        self.cfg.bug == Some(b)
    }

    /// The mark on the item, if it counts.
    fn live_mark(s: &LineState) -> Option<Tx> {
        s.mark.filter(|&m| s.expired & bit(m) == 0)
    }

    /// Whether `t`'s lock attempt passes the lock and the mark.
    fn may_lock(s: &LineState, t: Tx) -> bool {
        s.holder.is_none() && Self::live_mark(s).is_none_or(|m| m >= t)
    }

    /// Whether `t`'s mark lands.
    fn may_mark(s: &LineState, t: Tx) -> bool {
        Self::live_mark(s).is_none_or(|m| m >= t)
    }

    /// The entries a lock by `t` may promote.
    fn promotable(&self, s: &LineState, t: Tx) -> Set {
        let pool = if self.bug(LineBug::PromoteWithoutCheck) {
            s.ever_joined
        } else {
            s.line
        };
        pool & !bit(t)
    }

    /// Whether a handover by the holder to `t` lands: `t`'s place is there and counts.
    fn may_hand_to(&self, s: &LineState, t: Tx) -> bool {
        if self.bug(LineBug::HandOverWithoutCheck) {
            return (s.ever_joined | s.ever_marked) & bit(t) != 0;
        }
        let in_line = s.line & bit(t) != 0 && s.line_expired & bit(t) == 0;
        Self::live_mark(s) == Some(t) || (in_line && Self::live_mark(s).is_none_or(|m| m >= t))
    }

    /// Takes the item for `t` (a lock, or a handover to it): the ghosts, the promotion and the
    /// line as a lock leaves them.
    fn take(&self, s: &mut LineState, t: Tx, promote: Option<Tx>, own_entry: bool, wipe: bool) {
        let older_marker = (0..t).any(|w| s.marked & bit(w) != 0 && s.phases[w] == Phase::Waiting);
        s.passed_older_marker |= older_marker;
        s.promoted_took_next |= s.promoted == Some(t);
        s.holder = Some(t);
        s.marked = 0;
        if own_entry && !self.bug(LineBug::KeepsOwnEntry) {
            s.line &= !bit(t);
            s.line_expired &= !bit(t);
        }
        s.promoted = promote;
        s.mark = promote;
        if let Some(p) = promote {
            if self.bug(LineBug::PromotedMarkNeverExpires) {
                s.forever |= bit(p);
            }
            // The mark carries the entry's expiry: an expired entry is a mark that does not
            // count.
            if s.line_expired & bit(p) != 0 && s.forever & bit(p) == 0 {
                s.expired |= bit(p);
            } else {
                s.expired &= !bit(p);
                s.marked |= bit(p);
                if self.bug(LineBug::HandOverWithoutCheck) {
                    s.ever_marked |= bit(p);
                }
            }
            s.line &= !bit(p);
            s.line_expired &= !bit(p);
        }
        if wipe {
            s.line = 0;
            s.line_expired = 0;
        }
    }

    fn deadlocked(&self, s: &LineState) -> bool {
        let waiting: Vec<Tx> = (0..self.cfg.txs)
            .filter(|&t| s.phases[t] == Phase::Waiting)
            .collect();
        if s.holder.is_some() || waiting.is_empty() {
            return false;
        }
        let mut later = s.clone();
        for t in 0..self.cfg.txs {
            if matches!(s.phases[t], Phase::Left | Phase::Done) && s.forever & bit(t) == 0 {
                later.expired |= bit(t);
            }
        }
        !waiting.iter().any(|&t| Self::may_lock(&later, t))
    }
}

impl Model for LineModel {
    type State = LineState;
    type Action = LineAction;

    fn init_states(&self) -> Vec<LineState> {
        vec![LineState {
            phases: vec![Phase::Idle; self.cfg.txs],
            holder: None,
            mark: None,
            expired: 0,
            line: 0,
            line_expired: 0,
            ever_joined: 0,
            forever: 0,
            leaves_left: self.cfg.leaves,
            marked: 0,
            passed_older_marker: false,
            waited_for_finished: false,
            promoted: None,
            promoted_took_next: false,
            joined: false,
            departed_promoted_expired: false,
            ever_marked: 0,
            handed_to_finished: false,
            handed_over: false,
            handed_to_departed: false,
        }]
    }

    fn actions(&self, s: &LineState, out: &mut Vec<LineAction>) {
        for t in 0..self.cfg.txs {
            match s.phases[t] {
                Phase::Idle | Phase::Waiting => {
                    out.push(LineAction::Try(t, None, true));
                    if Self::may_lock(s, t) {
                        if s.line != 0 {
                            out.push(LineAction::Try(t, None, false));
                        }
                        let pool = self.promotable(s, t);
                        for p in (0..self.cfg.txs).filter(|&p| pool & bit(p) != 0) {
                            out.push(LineAction::Try(t, Some(p), true));
                            out.push(LineAction::Try(t, Some(p), false));
                        }
                    }
                    // Handed the item: it holds it, and learns so at a look.
                    if s.holder == Some(t) {
                        out.push(LineAction::Learn(t));
                    }
                    if s.phases[t] == Phase::Waiting {
                        // A mark or a join is conditional on the waiter not holding the item.
                        if s.mark != Some(t) && s.holder != Some(t) {
                            out.push(LineAction::Mark(t));
                        }
                        // Behind a live older mark, not in the line (or its entry expired).
                        let behind = Self::live_mark(s).is_some_and(|m| m < t);
                        let placed = s.line & bit(t) != 0 && s.line_expired & bit(t) == 0;
                        if behind && !placed && s.holder != Some(t) {
                            out.push(LineAction::Join(t));
                        }
                        if s.leaves_left > 0 {
                            out.push(LineAction::Leave(t));
                        }
                    }
                }
                Phase::Holding => {
                    out.push(LineAction::Release(t));
                    if self.cfg.hand_over {
                        for w in (0..self.cfg.txs).filter(|&w| w != t && self.may_hand_to(s, w)) {
                            let pool = s.line & !bit(w) & !bit(t);
                            let promotions = std::iter::once(None)
                                .chain((0..self.cfg.txs).filter(|&p| pool & bit(p) != 0).map(Some));
                            for p in promotions {
                                for own_entry in [true, false] {
                                    for wipe in [true, false] {
                                        out.push(LineAction::HandOver(t, w, p, own_entry, wipe));
                                    }
                                }
                            }
                        }
                    }
                }
                Phase::Left if s.holder == Some(t) => out.push(LineAction::ReleaseDead(t)),
                Phase::Left | Phase::Done => {
                    if s.mark == Some(t) && s.expired & bit(t) == 0 && s.forever & bit(t) == 0 {
                        out.push(LineAction::Expire(t));
                    }
                    if s.line & bit(t) != 0 && s.line_expired & bit(t) == 0 {
                        out.push(LineAction::ExpireEntry(t));
                    }
                }
            }
        }
    }

    fn next_state(&self, last: &LineState, action: LineAction) -> Option<LineState> {
        let mut s = last.clone();
        match action {
            LineAction::Try(t, promote, wipe) => {
                if Self::may_lock(&s, t) {
                    self.take(&mut s, t, promote, true, wipe);
                    s.phases[t] = Phase::Holding;
                } else {
                    if s.holder.is_none()
                        && let Some(m) = Self::live_mark(&s)
                        && matches!(s.phases[m], Phase::Done | Phase::Holding)
                    {
                        s.waited_for_finished = true;
                    }
                    s.phases[t] = Phase::Waiting;
                }
            }
            LineAction::Mark(t) => {
                if Self::may_mark(&s, t) {
                    if s.promoted.is_some_and(|p| p != t) {
                        s.promoted = None;
                    }
                    s.mark = Some(t);
                    s.expired &= !bit(t);
                    s.forever &= !bit(t);
                    s.marked |= bit(t);
                    if self.bug(LineBug::HandOverWithoutCheck) {
                        s.ever_marked |= bit(t);
                    }
                }
            }
            LineAction::Join(t) => {
                s.line |= bit(t);
                s.line_expired &= !bit(t);
                s.ever_joined |= bit(t);
                s.joined = true;
            }
            LineAction::Release(h) => {
                s.holder = None;
                s.phases[h] = Phase::Done;
            }
            LineAction::Leave(t) => {
                s.phases[t] = Phase::Left;
                s.leaves_left -= 1;
                // Handed the item meanwhile: its read after the leave releases it.
                if s.holder == Some(t) {
                    s.holder = None;
                }
            }
            LineAction::HandOver(h, w, promote, own_entry, wipe) => {
                s.phases[h] = Phase::Done;
                s.handed_to_finished |= matches!(s.phases[w], Phase::Done | Phase::Holding);
                s.handed_over = true;
                s.handed_to_departed |= s.phases[w] == Phase::Left;
                self.take(&mut s, w, promote, own_entry, wipe);
            }
            LineAction::Learn(t) => {
                s.phases[t] = Phase::Holding;
                // Its entry, if the handover left it, goes now.
                s.line &= !bit(t);
                s.line_expired &= !bit(t);
            }
            LineAction::ReleaseDead(_) => {
                s.holder = None;
            }
            LineAction::Expire(t) => {
                s.expired |= bit(t);
                s.departed_promoted_expired |= s.promoted == Some(t);
                if s.promoted == Some(t) {
                    s.promoted = None;
                }
                // The waiters whose marks this one replaced count again only once they mark
                // again (at their next look).
                s.marked = 0;
            }
            LineAction::ExpireEntry(t) => {
                s.line_expired |= bit(t);
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "the item goes to the oldest marked waiter",
                |_: &LineModel, s: &LineState| !s.passed_older_marker,
            ),
            Property::always(
                "no wait for a finished transaction's mark",
                |_: &LineModel, s: &LineState| !s.waited_for_finished,
            ),
            Property::always(
                "no finished transaction in the line",
                |_: &LineModel, s: &LineState| {
                    (0..s.phases.len()).all(|t| {
                        !matches!(s.phases[t], Phase::Holding | Phase::Done) || s.line & bit(t) == 0
                    })
                },
            ),
            Property::always("no deadlock", |m: &LineModel, s: &LineState| {
                !m.deadlocked(s)
            }),
            Property::sometimes(
                "every transaction holds the item",
                |_: &LineModel, s: &LineState| s.phases.iter().all(|p| *p == Phase::Done),
            ),
            Property::sometimes("a waiter joins the line", |_: &LineModel, s: &LineState| {
                s.joined
            }),
            Property::sometimes(
                "a promoted waiter takes the item next",
                |_: &LineModel, s: &LineState| s.promoted_took_next,
            ),
            Property::sometimes(
                "a departed waiter's entry is promoted and expires",
                |_: &LineModel, s: &LineState| s.departed_promoted_expired,
            ),
            Property::always(
                "no finished transaction handed the item",
                |_: &LineModel, s: &LineState| !s.handed_to_finished,
            ),
            Property::sometimes(
                "a handover lands (or no handovers)",
                |m: &LineModel, s: &LineState| s.handed_over || !m.cfg.hand_over,
            ),
            Property::sometimes(
                "a departed waiter is handed the item (or no handovers)",
                |m: &LineModel, s: &LineState| s.handed_to_departed || !m.cfg.hand_over,
            ),
        ]
    }
}

fn config(name: &'static str, txs: usize, leaves: u8) -> LineConfig {
    LineConfig {
        name,
        txs,
        leaves,
        bug: None,
        hand_over: false,
    }
}

fn handing(name: &'static str, txs: usize, leaves: u8) -> LineConfig {
    LineConfig {
        hand_over: true,
        ..config(name, txs, leaves)
    }
}

fn assert_line_holds(cfg: LineConfig) {
    let (name, bug) = (cfg.name, cfg.bug.is_some());
    crate::model_support::assert_model_holds(name, LineModel { cfg }, bug);
}

#[test]
fn three_transactions_line_up_at_one_item_with_a_departure() {
    assert_line_holds(config("line: 3 tx at one item, 1 departure", 3, 1));
}

#[test]
fn four_transactions_line_up_at_one_item_with_two_departures() {
    assert_line_holds(config("line: 4 tx at one item, 2 departures", 4, 2));
}

#[test]
fn five_transactions_line_up_at_one_item_with_two_departures() {
    assert_line_holds(config("line: 5 tx at one item, 2 departures", 5, 2));
}

#[test]
fn three_transactions_hand_the_item_over_with_a_departure() {
    assert_line_holds(handing("line, handed over: 3 tx, 1 departure", 3, 1));
}

#[test]
fn four_transactions_hand_the_item_over_with_two_departures() {
    assert_line_holds(handing("line, handed over: 4 tx, 2 departures", 4, 2));
}

#[test]
fn five_transactions_hand_the_item_over_with_two_departures() {
    assert_line_holds(handing("line, handed over: 5 tx, 2 departures", 5, 2));
}

#[test]
fn a_handover_to_a_place_no_longer_there_is_caught() {
    use stateright::Expectation;
    let mut cfg = handing("line, handed over, broken", 3, 1);
    cfg.bug = Some(LineBug::HandOverWithoutCheck);
    crate::model_support::assert_caught(
        "HandOverWithoutCheck",
        LineModel { cfg },
        &[Expectation::Always],
    );
}

#[test]
fn broken_lines_are_caught() {
    use stateright::Expectation;
    let cases = [
        (LineBug::PromoteWithoutCheck, 5),
        (LineBug::KeepsOwnEntry, 3),
        (LineBug::PromotedMarkNeverExpires, 4),
    ];
    for (bug, txs) in cases {
        let mut cfg = config("line, broken", txs, 1);
        cfg.bug = Some(bug);
        crate::model_support::assert_caught(
            &format!("{bug:?}"),
            LineModel { cfg },
            &[Expectation::Always],
        );
    }
}
