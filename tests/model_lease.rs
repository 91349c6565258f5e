//! An exhaustive model check of the lease lock's timing under lost responses, with `stateright`.
//!
//! `tests/model/` leaves time out; this model is about nothing else. Time runs in discrete ticks
//! up to a horizon. There are two parties and one lock record:
//!
//! - the **holder** (`LeaseLock::acquire` then heartbeats, src/lock/lease.rs and heartbeat.rs)
//!   sends one request at a time: acquiring writes (`SET owner = id` if there is no owner), then
//!   heartbeats (`SET hb = target` if the owner is still its id and the counter is not past the
//!   target). Every request can land at any
//!   tick from its send on, or never; its answer can arrive, or be lost (the holder sees an
//!   ambiguous failure and retries; an unanswered request may still land later). After an
//!   ambiguous acquire the next attempt uses a fresh owner id; an attempt whose condition fails on
//!   one of its own earlier ids adopts that write. The holder **believes it holds** from the answer
//!   that grants it until its local deadline, (send instant of the write that made it holder, or
//!   of the first send of the last confirmed heartbeat) + lease, on its own monotonic clock;
//! - the **waiter** (another `LeaseLock` handle) tries at any tick: it takes a free record, or it
//!   observes the holder's `(owner, hb)` and takes the record over (a write conditional on the
//!   judged values, atomic here) once the holder looks dead: in `Expiry::Observed` mode when the
//!   pair has not changed for a lease since the waiter first saw it, in `Expiry::WallClock` mode
//!   when its clock is past the stored expiry. The clock-skew margin is taken as fully used up by
//!   drift or skew (a waiter whose clock runs fast, or is ahead, by the whole margin), so the model
//!   has no margin: the worst case the configuration admits. It **believes it holds** from its
//!   successful write until it releases; it may release and try again later (keeping what it
//!   observed, as the implementation does).
//!
//! Invariant: **at most one holder**: at no tick do the holder (by its own clock) and the waiter
//! both believe they hold the lock. `sometimes` properties show that the lost-response paths are
//! explored (an acquire adopted after a lost answer, a heartbeat confirmed after a lost answer, a
//! takeover), and `old_lease_counting_is_caught` puts back the bugs (the lease counted from the
//! retry that found the holder's own write; a heartbeat counted from its retry; the same
//! owner id reused across ambiguous attempts) and expects a counterexample for each.

mod model_support;

use stateright::{Checker, Model, Property};

/// Ticks in a lease.
const LEASE: u8 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Expiry {
    Observed,
    WallClock,
}

/// Deliberately broken variants, each of which the checker must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Bug {
    /// The old code: an acquire that finds its own earlier write counts the lease from the send of
    /// the attempt that found it.
    CountFromRetry,
    /// A heartbeat confirmed after ambiguous attempts counts from its last attempt's send.
    BeatFromRetry,
    /// Every attempt uses the same owner id (an attempt that succeeds outright counts from its own
    /// send, though an earlier attempt of the same id may have been seen by the waiter).
    ReuseId,
    /// Heartbeats conditional on the owner only: a late request of an earlier renewal sets the
    /// counter (and stored expiry) back (found by this model).
    BeatSetsBack,
}

#[derive(Clone, Debug)]
struct Config {
    name: &'static str,
    expiry: Expiry,
    /// Ticks explored.
    horizon: u8,
    /// Acquiring attempts the holder may send.
    attempts: u8,
    /// Heartbeat requests (attempts included) the holder may send.
    beats: u8,
    /// Answers that may be lost.
    lost: u8,
    bug: Option<Bug>,
}

/// A holder id: the owner written by the holder's acquire attempt `n` (or, with
/// [`Bug::ReuseId`], by all of them), or the waiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Owner {
    Holder(u8),
    Waiter,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Record {
    owner: Option<Owner>,
    hb: u8,
    /// Stored expiry (`exp_ms`) in ticks: the writer's clock at send + lease.
    exp: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    /// An acquiring write as owner `id`.
    Acquire { id: u8 },
    /// A heartbeat setting `hb = target`, conditional on owner `id`.
    Beat { id: u8, target: u8 },
}

/// What a landed request did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Outcome {
    Applied,
    /// Condition failed; the record's owner at that moment.
    Failed(Option<Owner>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Msg {
    kind: Kind,
    sent: u8,
    landed: Option<Outcome>,
    /// The holder is waiting for this answer.
    awaited: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Holder {
    /// Acquiring; `next_id` is the owner id of the next attempt.
    Acquiring { next_id: u8 },
    Holds {
        id: u8,
        hb: u8,
        deadline: u8,
        /// A heartbeat in progress: its target and the send instant that will count.
        beat: Option<(u8, u8)>,
    },
    /// It learned it lost the lock (or its lease ran out); it believes nothing any more.
    Lost,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Waiter {
    /// It believes it holds the lock.
    holds: bool,
    /// What it last observed of another holder: (owner, hb, first seen). Kept while it holds the
    /// lock and after, as the implementation keeps its observations.
    seen: Option<(Owner, u8, u8)>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    now: u8,
    record: Record,
    holder: Holder,
    /// Ids of the holder's ambiguous acquire attempts, with their send instants.
    ambiguous: Vec<(u8, u8)>,
    waiter: Waiter,
    net: Vec<Msg>,
    attempts_left: u8,
    beats_left: u8,
    lost_left: u8,
    // Ghosts for the `sometimes` properties.
    adopted: bool,
    beat_after_loss: bool,
    taken_over: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Action {
    Tick,
    /// The holder sends its next acquire attempt or heartbeat.
    Send,
    /// Request `m` reaches DynamoDB and is applied (or its condition fails) now.
    Land(usize),
    /// The answer of request `m` reaches the holder.
    Answer(usize),
    /// The holder gets an ambiguous failure for request `m` (lost answer, or a request that has
    /// not landed yet and may land later).
    Lose(usize),
    /// The waiter tries to acquire (or take over).
    WaiterTry,
    WaiterRelease,
}

struct LeaseModel {
    cfg: Config,
}

impl LeaseModel {
    fn bug(&self, b: Bug) -> bool {
        self.cfg.bug == Some(b)
    }

    /// The holder believes it holds the lock.
    fn holder_believes(s: &State) -> bool {
        matches!(s.holder, Holder::Holds { deadline, .. } if s.now < deadline)
    }

    /// The holder's local lease ran out: it knows it lost the lock.
    fn expire_holder(s: &mut State) {
        if let Holder::Holds { deadline, .. } = s.holder
            && s.now >= deadline
        {
            s.holder = Holder::Lost;
        }
    }

    fn land(s: &mut State, m: usize, bug_sets_back: bool) {
        let msg = s.net[m];
        let r = &mut s.record;
        let outcome = match msg.kind {
            Kind::Acquire { id } => {
                if r.owner.is_none() {
                    *r = Record {
                        owner: Some(Owner::Holder(id)),
                        hb: 0,
                        exp: msg.sent + LEASE,
                    };
                    Outcome::Applied
                } else {
                    Outcome::Failed(r.owner)
                }
            }
            Kind::Beat { id, target } => {
                if r.owner == Some(Owner::Holder(id)) && (r.hb <= target || bug_sets_back) {
                    r.hb = target;
                    r.exp = msg.sent + LEASE;
                    Outcome::Applied
                } else {
                    Outcome::Failed(r.owner)
                }
            }
        };
        s.net[m].landed = Some(outcome);
    }

    fn answer(&self, s: &mut State, m: usize) {
        let msg = s.net.remove(m);
        let Some(outcome) = msg.landed else { return };
        match (msg.kind, s.holder) {
            (Kind::Acquire { id }, Holder::Acquiring { .. }) => match outcome {
                Outcome::Applied => {
                    s.holder = Holder::Holds {
                        id,
                        hb: 0,
                        deadline: msg.sent + LEASE,
                        beat: None,
                    };
                }
                Outcome::Failed(Some(Owner::Holder(mine))) => {
                    // An earlier, ambiguous attempt of ours landed: adopt it. Its lease runs from
                    // the first send of that write (the fix), or from this retry (the old code).
                    let Some(&(_, first)) = s.ambiguous.iter().find(|(i, _)| *i == mine) else {
                        return;
                    };
                    let from = if self.bug(Bug::CountFromRetry) {
                        msg.sent
                    } else if self.bug(Bug::ReuseId) {
                        // Same id for all attempts: the earliest ambiguous send.
                        s.ambiguous.iter().map(|&(_, t)| t).min().unwrap_or(first)
                    } else {
                        first
                    };
                    s.holder = Holder::Holds {
                        id: mine,
                        hb: 0,
                        deadline: from + LEASE,
                        beat: None,
                    };
                    s.adopted = true;
                }
                Outcome::Failed(_) => {}
            },
            (
                Kind::Beat { target, .. },
                Holder::Holds {
                    id,
                    deadline,
                    beat: Some((t, first)),
                    ..
                },
            ) if t == target => match outcome {
                Outcome::Applied => {
                    let from = if self.bug(Bug::BeatFromRetry) {
                        msg.sent
                    } else {
                        first
                    };
                    if first != msg.sent {
                        s.beat_after_loss = true;
                    }
                    s.holder = Holder::Holds {
                        id,
                        hb: target,
                        deadline: deadline.max(from + LEASE),
                        beat: None,
                    };
                }
                Outcome::Failed(_) => s.holder = Holder::Lost,
            },
            _ => {}
        }
        Self::expire_holder(s);
    }

    fn lose(&self, s: &mut State, m: usize) {
        s.lost_left -= 1;
        let msg = s.net[m];
        if msg.landed.is_some() {
            s.net.remove(m);
        } else {
            s.net[m].awaited = false;
        }
        if let (Kind::Acquire { id }, Holder::Acquiring { next_id }) = (msg.kind, s.holder) {
            s.ambiguous.push((id, msg.sent));
            if !self.bug(Bug::ReuseId) {
                s.holder = Holder::Acquiring {
                    next_id: next_id + 1,
                };
            }
        }
        // A lost heartbeat answer: the holder retries with the same target (`beat` kept).
    }

    fn send(&self, s: &mut State) -> bool {
        if s.net.iter().any(|m| m.awaited) {
            return false;
        }
        let now = s.now;
        let kind = match s.holder {
            Holder::Acquiring { next_id } => {
                if s.attempts_left == 0 {
                    return false;
                }
                s.attempts_left -= 1;
                Kind::Acquire { id: next_id }
            }
            Holder::Holds {
                id,
                hb,
                deadline,
                beat,
            } => {
                if s.beats_left == 0 || now >= deadline {
                    return false;
                }
                s.beats_left -= 1;
                let (target, first) = beat.unwrap_or((hb + 1, now));
                s.holder = Holder::Holds {
                    id,
                    hb,
                    deadline,
                    beat: Some((target, first)),
                };
                Kind::Beat { id, target }
            }
            Holder::Lost => return false,
        };
        s.net.push(Msg {
            kind,
            sent: now,
            landed: None,
            awaited: true,
        });
        true
    }

    fn waiter_try(&self, s: &mut State) -> bool {
        if s.waiter.holds {
            return false;
        }
        let r = s.record;
        let Some(owner) = r.owner else {
            s.record = Record {
                owner: Some(Owner::Waiter),
                hb: 0,
                exp: s.now + LEASE,
            };
            s.waiter.holds = true;
            return true;
        };
        let first_seen = match s.waiter.seen {
            Some((o, hb, t)) if o == owner && hb == r.hb => t,
            _ => s.now,
        };
        let dead = match self.cfg.expiry {
            Expiry::Observed => s.now >= first_seen + LEASE,
            Expiry::WallClock => s.now >= r.exp,
        };
        if dead {
            s.record = Record {
                owner: Some(Owner::Waiter),
                hb: 0,
                exp: s.now + LEASE,
            };
            s.waiter.holds = true;
            s.taken_over = true;
        }
        s.waiter.seen = Some((owner, r.hb, first_seen));
        true
    }
}

impl Model for LeaseModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            record: Record {
                owner: None,
                hb: 0,
                exp: 0,
            },
            holder: Holder::Acquiring { next_id: 0 },
            ambiguous: Vec::new(),
            waiter: Waiter {
                holds: false,
                seen: None,
            },
            net: Vec::new(),
            attempts_left: self.cfg.attempts,
            beats_left: self.cfg.beats,
            lost_left: self.cfg.lost,
            adopted: false,
            beat_after_loss: false,
            taken_over: false,
        }]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        if s.now < self.cfg.horizon {
            out.push(Action::Tick);
        }
        out.push(Action::Send);
        for (m, msg) in s.net.iter().enumerate() {
            if msg.landed.is_none() {
                out.push(Action::Land(m));
            }
            if msg.awaited {
                if msg.landed.is_some() {
                    out.push(Action::Answer(m));
                }
                if s.lost_left > 0 {
                    out.push(Action::Lose(m));
                }
            }
        }
        out.push(if s.waiter.holds {
            Action::WaiterRelease
        } else {
            Action::WaiterTry
        });
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        let changed = match action {
            Action::Tick => {
                s.now += 1;
                Self::expire_holder(&mut s);
                true
            }
            Action::Send => self.send(&mut s),
            Action::Land(m) => {
                Self::land(&mut s, m, self.bug(Bug::BeatSetsBack));
                // Answered requests leave the network; unawaited landed ones are done.
                if !s.net[m].awaited {
                    s.net.remove(m);
                }
                true
            }
            Action::Answer(m) => {
                self.answer(&mut s, m);
                true
            }
            Action::Lose(m) => {
                self.lose(&mut s, m);
                true
            }
            Action::WaiterTry => self.waiter_try(&mut s),
            Action::WaiterRelease => {
                if s.record.owner == Some(Owner::Waiter) {
                    s.record.owner = None;
                }
                s.waiter.holds = false;
                true
            }
        };
        (changed && s != *last).then_some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("at most one holder", |_: &LeaseModel, s: &State| {
                !(LeaseModel::holder_believes(s) && s.waiter.holds)
            }),
            Property::sometimes(
                "an acquire adopted after a lost answer",
                |_: &LeaseModel, s: &State| s.adopted && LeaseModel::holder_believes(s),
            ),
            Property::sometimes(
                "a heartbeat confirmed after a lost answer",
                |_: &LeaseModel, s: &State| s.beat_after_loss,
            ),
            Property::sometimes(
                "the waiter takes over an adopted acquisition",
                |_: &LeaseModel, s: &State| s.adopted && s.taken_over,
            ),
        ]
    }
}

fn config(name: &'static str, expiry: Expiry) -> Config {
    Config {
        name,
        expiry,
        horizon: 5,
        attempts: 2,
        beats: 3,
        lost: 1,
        bug: None,
    }
}

fn check(cfg: Config) -> impl Checker<LeaseModel> {
    let bug = cfg.bug.is_some();
    model_support::check(LeaseModel { cfg }, bug)
}

fn assert_model_holds(cfg: Config) {
    let (name, bug) = (cfg.name, cfg.bug.is_some());
    model_support::assert_model_holds(name, LeaseModel { cfg }, bug);
}

#[test]
fn lease_observed_expiry() {
    assert_model_holds(config("lease, observed expiry", Expiry::Observed));
}

#[test]
fn lease_wall_clock_expiry() {
    assert_model_holds(config("lease, wall-clock expiry", Expiry::WallClock));
}

#[test]
#[ignore = "larger run (1.6M + 2.4M unique states, ~3 min in debug): cargo test --release --test model_lease -- --ignored"]
fn lease_longer_horizon_more_attempts_and_losses() {
    for (name, expiry) in [
        ("lease, observed, 7 ticks", Expiry::Observed),
        ("lease, wall clock, 7 ticks", Expiry::WallClock),
    ] {
        let mut cfg = config(name, expiry);
        cfg.horizon = 7;
        cfg.attempts = 3;
        cfg.lost = 2;
        assert_model_holds(cfg);
    }
}

#[test]
fn old_lease_counting_is_caught() {
    for expiry in [Expiry::Observed, Expiry::WallClock] {
        for bug in [
            Bug::CountFromRetry,
            Bug::BeatFromRetry,
            Bug::ReuseId,
            Bug::BeatSetsBack,
        ] {
            let mut cfg = config("mutant", expiry);
            cfg.bug = Some(bug);
            let checker = check(cfg);
            let path = checker.discovery("at most one holder");
            println!(
                "{bug:?} ({expiry:?}): {}",
                path.as_ref().map_or("not caught".to_string(), |p| format!(
                    "caught after {:?}",
                    p.clone().into_actions()
                ))
            );
            // A reused id is harmless with wall-clock expiry: a waiter judges by the stored expiry,
            // which every successful write renews, not by what it observed earlier.
            let harmless = bug == Bug::ReuseId && expiry == Expiry::WallClock;
            assert_eq!(
                path.is_some(),
                !harmless,
                "{bug:?} ({expiry:?}): expected {}",
                if harmless {
                    "no counterexample"
                } else {
                    "a counterexample"
                }
            );
        }
    }
}
