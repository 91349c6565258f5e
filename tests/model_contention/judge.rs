//! How a contender judges a pending holder (`contention::resolve`), and a candidate rule checked
//! beside it: an older contender that waits for a younger holder whose record shows no wait
//! (running, in its grace, or wounding someone), instead of wounding it once the grace is over.
//! The wait is not recorded and is judged again at every poll. docs/PROTOCOL.md ("What the
//! hot-item goals still need") argues why no cycle of waits can stay: a holder holds a lock, so
//! every wait it makes is recorded, and the new waits point from older to strictly younger. Built
//! behind `Settings::wait_for_running_holders` (off by default).

use super::*;
use stateright::Expectation;

/// What a contender does about a pending holder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Judgement {
    /// Wait for (a transaction with) ticket `on`, older than the contender; recorded in `_TxW` by a
    /// waiter that holds a lock.
    Wait(Ticket),
    /// The candidate rule: wait for a younger holder that records no wait, without recording it.
    WaitForRunning,
    /// Roll the holder back.
    Wound,
}

/// What a contender with ticket `mine` does about a pending holder (`contention::resolve`):
/// `Some(on)` waits (for ticket `on`), `None` wounds. An equal ticket is not older (`tie_waits`:
/// [`Bug::WaitsOnTie`]). A younger holder (or one without ticket) that records a wait for a
/// transaction older than the contender is waited with; a holder with an equal ticket is not
/// (`tie_waits_with`: [`Bug::WaitsWithTiedHolder`]).
pub(super) fn decide(
    mine: Ticket,
    theirs: Option<Ticket>,
    their_wait: Option<Ticket>,
    tie_waits: bool,
    tie_waits_with: bool,
) -> Option<Ticket> {
    let older = |t: Ticket| t < mine || (tie_waits && t == mine);
    if let Some(t) = theirs.filter(|&t| older(t)) {
        return Some(t);
    }
    if theirs == Some(mine) && !tie_waits_with {
        return None;
    }
    their_wait.filter(|&on| older(on))
}

/// [`decide`], with the candidate rule when `cfg.wait_for_running`.
pub(super) fn judge(
    cfg: &Config,
    mine: Ticket,
    theirs: Option<Ticket>,
    their_wait: Option<Ticket>,
) -> Judgement {
    let bug = |b: Bug| cfg.bug == Some(b);
    if let Some(on) = decide(
        mine,
        theirs,
        their_wait,
        bug(Bug::WaitsOnTie),
        bug(Bug::WaitsWithTiedHolder),
    ) {
        return Judgement::Wait(on);
    }
    let younger = theirs.is_none_or(|t| t > mine) || cfg.bug == Some(Bug::WaitsForRunningTie);
    let records_none = match cfg.bug {
        Some(Bug::WaitsForRunningThatWaits) => true,
        Some(Bug::WaitsForRunningThatWaitsYounger) => their_wait.is_none_or(|on| on > mine),
        _ => their_wait.is_none(),
    };
    if cfg.wait_for_running && younger && records_none {
        Judgement::WaitForRunning
    } else {
        Judgement::Wound
    }
}

fn running(mut cfg: Config, name: &'static str) -> Config {
    cfg.name = name;
    cfg.wait_for_running = true;
    cfg
}

fn ring() -> Config {
    let mut cfg = checks::config(
        "3 tx x 3 items, ring, waiting for running holders, two crashes + resumes",
        3,
        vec![vec![0, 1], vec![1, 2], vec![2, 0]],
    );
    cfg.crashes = 2;
    cfg.resumes = 2;
    cfg.wait_for_running = true;
    cfg
}

#[test]
fn waiting_for_running_holders_crossing() {
    checks::assert_model_holds(running(
        checks::crossing(),
        "2 tx x 2 items, crossing, waiting for running holders, crash + resume",
    ));
}

#[test]
fn waiting_for_running_holders_three_transactions() {
    checks::assert_model_holds(running(
        checks::three_by_two_small(),
        "3 tx x 2 items (one single-item), waiting for running holders, crash + resume",
    ));
}

#[test]
fn waiting_for_running_holders_with_clock_tickets() {
    checks::assert_model_holds(running(
        checks::three_by_two_small_clock(),
        "3 tx x 2 items (one single-item), clock tickets, waiting for running holders",
    ));
}

#[test]
#[ignore = "larger run (3.6M states, ~3 s in release): cargo test --release --test model_contention -- --ignored"]
fn waiting_for_running_holders_ring() {
    checks::assert_model_holds(ring());
}

#[test]
fn waiting_for_running_holders_broken_is_caught() {
    let cases = [
        (
            Bug::WaitsForRunningThatWaits,
            running(checks::three_by_two_small(), "broken"),
        ),
        (
            Bug::WaitsForRunningTie,
            running(checks::crossing_clock(), "broken"),
        ),
    ];
    for (bug, mut cfg) in cases {
        cfg.bug = Some(bug);
        let model = ContentionModel { cfg };
        model_support::assert_caught(&format!("{bug:?}"), model, &[Expectation::Always]);
    }
}

/// Waiting also for a younger holder whose recorded wait is for a transaction younger than the
/// contender (which would spare the third attempts traced in the transfers from then to)
/// deadlocks in the ring with crashes and resumes; the smaller configurations do not show it.
#[test]
#[ignore = "larger run (the ring, ~3 s in release): cargo test --release --test model_contention -- --ignored"]
fn waiting_also_for_holders_waiting_for_younger_deadlocks_in_the_ring() {
    let mut cfg = ring();
    cfg.bug = Some(Bug::WaitsForRunningThatWaitsYounger);
    model_support::assert_caught(
        "WaitsForRunningThatWaitsYounger",
        ContentionModel { cfg },
        &[Expectation::Always],
    );
}
