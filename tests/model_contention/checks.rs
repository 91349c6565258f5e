//! The configurations the model is checked in, with the ticket counter and with clock tickets,
//! and the deliberately broken variants it must catch.

use super::*;
use stateright::Expectation;

pub(super) fn config(name: &'static str, items: usize, plans: Vec<Vec<usize>>) -> Config {
    Config {
        name,
        items,
        plans,
        crashes: 1,
        resumes: 1,
        second_handles: false,
        dead_takeover: true,
        clock: None,
        wait_for_running: false,
        on_demand: false,
        ticket_at_begin: false,
        expect_lock_looks: false,
        bug: None,
    }
}

/// Two transactions locking two items in opposite orders; one crash, one resumption.
pub(super) fn crossing() -> Config {
    config(
        "2 tx x 2 items, crossing, crash + resume",
        2,
        vec![vec![0, 1], vec![1, 0]],
    )
}

/// As `crossing`, but a transaction may be resumed while its first handle still runs (and no
/// coordinator crashes).
pub(super) fn second_handles() -> Config {
    let mut cfg = config(
        "2 tx x 2 items, crossing, a second live handle",
        2,
        vec![vec![0, 1], vec![1, 0]],
    );
    cfg.crashes = 0;
    cfg.second_handles = true;
    cfg
}

/// Three transactions over two items, the third locking one item; one crash, one resumption.
pub(super) fn three_by_two_small() -> Config {
    config(
        "3 tx x 2 items (one single-item), crash + resume",
        2,
        vec![vec![0, 1], vec![1, 0], vec![0]],
    )
}

/// Three transactions over two items; one crash, one resumption.
fn three_by_two() -> Config {
    config(
        "3 tx x 2 items, crash + resume",
        2,
        vec![vec![0, 1], vec![1, 0], vec![0, 1]],
    )
}

/// Three transactions over three items in a ring of lock orders.
fn three_by_three() -> Config {
    let mut cfg = config(
        "3 tx x 3 items, ring, two crashes + resumes",
        3,
        vec![vec![0, 1], vec![1, 2], vec![2, 0]],
    );
    cfg.crashes = 2;
    cfg.resumes = 2;
    cfg
}

/// `crossing` with clock tickets: either may draw the older ticket, or both the same one.
pub(super) fn crossing_clock() -> Config {
    let mut cfg = crossing();
    cfg.name = "2 tx x 2 items, crossing, clock tickets, crash + resume";
    cfg.clock = Some(2);
    cfg
}

/// `second_handles` with clock tickets: each handle of a transaction reads its own clock.
fn second_handles_clock() -> Config {
    let mut cfg = second_handles();
    cfg.name = "2 tx x 2 items, crossing, clock tickets, a second live handle";
    cfg.clock = Some(2);
    cfg
}

/// `three_by_two_small` with clock tickets drawn from three values (every order, and ties).
pub(super) fn three_by_two_small_clock() -> Config {
    let mut cfg = three_by_two_small();
    cfg.name = "3 tx x 2 items (one single-item), clock tickets, crash + resume";
    cfg.clock = Some(3);
    cfg
}

/// Recorded transactions (no `on_demand`) with tickets taken at begin and clock tickets: a
/// transaction holds a ticket without meeting contention, so two tied transactions may record
/// waits for a third that finishes (`WaitsWithTiedHolder` deadlocks here too).
pub(super) fn recorded_clock_at_begin() -> Config {
    let mut cfg = checks::three_by_two_small_clock();
    cfg.name = "3 tx x 2 items (one single-item), recorded, clock tickets at begin";
    cfg.ticket_at_begin = true;
    cfg
}

pub(super) fn assert_model_holds(cfg: Config) {
    let (name, bug) = (cfg.name, cfg.bug.is_some());
    model_support::assert_model_holds(name, ContentionModel { cfg }, bug);
}

#[test]
fn crossing_transactions_with_a_resumed_coordinator() {
    assert_model_holds(crossing());
}

#[test]
fn a_second_live_handle_of_a_transaction() {
    assert_model_holds(second_handles());
}

#[test]
fn three_transactions_two_items() {
    assert_model_holds(three_by_two_small());
}

#[test]
#[ignore = "larger run (0.75M states, ~3 s in debug): cargo test --test model_contention -- --ignored"]
fn three_transactions_two_items_full() {
    assert_model_holds(three_by_two());
}

#[test]
#[ignore = "larger run (7.8M states, ~40 s in debug): cargo test --test model_contention -- --ignored"]
fn three_transactions_three_items() {
    assert_model_holds(three_by_three());
}

#[test]
fn crossing_transactions_with_clock_tickets() {
    assert_model_holds(crossing_clock());
}

#[test]
fn a_second_live_handle_with_clock_tickets() {
    assert_model_holds(second_handles_clock());
}

#[test]
fn three_transactions_two_items_with_clock_tickets() {
    assert_model_holds(three_by_two_small_clock());
}

#[test]
fn recorded_transactions_with_clock_tickets_at_begin() {
    checks::assert_model_holds(recorded_clock_at_begin());
}

#[test]
fn buggy_contention_is_caught() {
    let cases = [
        (Bug::ResumeTakesFreshTicket, crossing()),
        (Bug::KeepsOwnTicket, second_handles()),
        (Bug::UnconditionalWound, crossing()),
        (Bug::WoundIgnoresWounder, three_by_two_small()),
        (Bug::WoundIgnoresTicket, crossing()),
        (Bug::TakeoverIgnoresTouch, crossing()),
        (Bug::WaitsOnTie, crossing_clock()),
    ];
    for (bug, mut cfg) in cases {
        cfg.bug = Some(bug);
        let model = ContentionModel { cfg };
        model_support::assert_caught(&format!("{bug:?}"), model, &[Expectation::Always]);
    }
}
