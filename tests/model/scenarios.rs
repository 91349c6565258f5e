//! The configurations checked, and the tests that run the checker on them (the larger ones are
//! `#[ignore]`d: run them in release).

use super::*;

mod locked_reads;
mod on_demand;

use locked_reads::{locked_reads, locked_reads_writer_of_second};
use on_demand::{counter_against_a_writer, second_read_creates_the_record};

/// Two transactions over an existing and an absent item: one commits in one request, the other in
/// phases (with a delete and an insert); one crash, one lost response.
fn two_by_two() -> Config {
    config(
        "2 tx x 2 items, one-request + phased",
        vec![Some(1), None],
        vec![false, false],
        vec![
            plan(
                CommitPath::OneRequest,
                vec![entry(0, Op::Update), entry(1, Op::Put(5))],
            ),
            plan(
                CommitPath::Phased,
                vec![entry(1, Op::Delete), entry(0, Op::Update)],
            ),
        ],
    )
}

/// An interactive transaction (an update applied at once, on a large item whose image goes to the
/// images table, then an insert) against a write-only fast-path transaction.
fn interactive_and_fast() -> Config {
    let interactive = Entry {
        item: 0,
        op: Op::Update,
        now: true,
    };
    config(
        "interactive + images table vs fast path",
        vec![Some(1), None],
        vec![true, false],
        vec![
            plan(CommitPath::Phased, vec![interactive, entry(1, Op::Put(5))]),
            Plan {
                fast: true,
                ..plan(
                    CommitPath::OneRequest,
                    vec![entry(0, Op::Put(7)), entry(1, Op::Update)],
                )
            },
        ],
    )
}

/// Three transactions over three items, with a read lock of an absent item; one crash.
fn three_by_three() -> Config {
    Config {
        lost_responses: 0,
        ..config(
            "3 tx x 3 items, read locks",
            vec![Some(1), Some(2), None],
            vec![false, true, false],
            vec![
                plan(
                    CommitPath::OneRequest,
                    vec![entry(2, Op::Get), entry(0, Op::Update)],
                ),
                plan(
                    CommitPath::Phased,
                    vec![entry(1, Op::Update), entry(2, Op::Put(5))],
                ),
                plan(
                    CommitPath::Phased,
                    vec![entry(0, Op::Delete), entry(1, Op::Put(9))],
                ),
            ],
        )
    }
}

/// The interactive transaction (appends, an immediate apply, an images-table image) while a
/// second handle may resume it at any moment, its first coordinator still running, and a one-item
/// transaction contends for the inserted item.
fn concurrent_handles() -> Config {
    let interactive = interactive_and_fast().txs.remove(0);
    Config {
        crashes: 0,
        second_handles: vec![0],
        // Records are deleted long after their coordinators stopped (`delete_after`, TTL): a
        // handle still retrying the record's creation could otherwise create it anew.
        delete_records: false,
        ..config(
            "a second handle resuming a live transaction",
            vec![Some(1), None],
            vec![true, false],
            vec![
                interactive,
                plan(CommitPath::OneRequest, vec![entry(1, Op::Update)]),
            ],
        )
    }
}

#[test]
fn second_handles_of_live_transactions() {
    assert_model_holds(concurrent_handles());
}

/// Three transactions over two items: a read lock, an insert, a delete (no crash in CI).
fn three_by_two() -> Config {
    Config {
        crashes: 0,
        lost_responses: 0,
        ..config(
            "3 tx x 2 items, read lock",
            vec![Some(1), None],
            vec![false, false],
            vec![
                plan(
                    CommitPath::OneRequest,
                    vec![entry(1, Op::Get), entry(0, Op::Update)],
                ),
                plan(
                    CommitPath::Phased,
                    vec![entry(0, Op::Update), entry(1, Op::Put(5))],
                ),
                plan(CommitPath::Phased, vec![entry(1, Op::Delete)]),
            ],
        )
    }
}

/// The batched locking commit: two transactions over two existing items, each writing its record
/// and locking both items in one TransactWriteItems. One commits in one request; the other in
/// phases (an update of a large item, whose image it reads after the batch and saves in the images
/// table, and a delete that makes the other's batch meet an absent item and send it again with a
/// placeholder for it); one crash, one lost response.
fn batched_two_by_two() -> Config {
    config(
        "batched locks: one-request + phased",
        vec![Some(1), Some(2)],
        vec![false, true],
        vec![
            batched(
                CommitPath::OneRequest,
                vec![entry(0, Op::Update), entry(1, Op::Put(5))],
            ),
            batched(
                CommitPath::Phased,
                vec![entry(1, Op::Update), entry(0, Op::Delete)],
            ),
        ],
    )
}

/// A batched transaction against the per-item path and a read lock, over three items (one absent):
/// the batch meets an absent item or the other's locks and falls back.
fn batched_against_per_item() -> Config {
    Config {
        lost_responses: 0,
        ..config(
            "batched locks vs per-item locks",
            vec![Some(1), Some(2)],
            vec![false, false],
            vec![
                batched(
                    CommitPath::Phased,
                    vec![entry(0, Op::Update), entry(1, Op::Update)],
                ),
                plan(
                    CommitPath::OneRequest,
                    vec![entry(1, Op::Get), entry(0, Op::Put(5))],
                ),
            ],
        )
    }
}

/// Batched locks on an item that starts absent: the put's and the update's locks insert a
/// placeholder in the batch (`Existence::Either`), or lock the item the other transaction created;
/// one commits in one request, the other in phases; one crash, one lost response.
fn batched_inserts() -> Config {
    config(
        "batched locks: placeholders for absent items",
        vec![None, Some(1)],
        vec![false, false],
        vec![
            batched(
                CommitPath::OneRequest,
                vec![entry(0, Op::Put(5)), entry(1, Op::Update)],
            ),
            batched(
                CommitPath::Phased,
                vec![entry(0, Op::Update), entry(1, Op::Delete)],
            ),
        ],
    )
}

/// A batched phased transaction while a second handle may resume it at any moment.
fn batched_concurrent_handles() -> Config {
    Config {
        crashes: 0,
        second_handles: vec![0],
        delete_records: false,
        ..config(
            "batched locks, a second handle resuming a live transaction",
            vec![Some(1), Some(2)],
            vec![true, false],
            vec![
                batched(
                    CommitPath::Phased,
                    vec![entry(0, Op::Update), entry(1, Op::Put(5))],
                ),
                plan(CommitPath::OneRequest, vec![entry(1, Op::Update)]),
            ],
        )
    }
}

/// Roll-forward: a batched phased transaction updates an existing item and inserts an absent
/// one, its writes applied by the settle after the flip, against a batched one-request
/// transaction deleting the first item and updating the second; one crash, one lost response.
fn rolled_forward() -> Config {
    config(
        "roll-forward: writes applied after the commit",
        vec![Some(1), None],
        vec![false, false],
        vec![
            rolled(vec![entry(0, Op::Update), entry(1, Op::Put(5))]),
            batched(
                CommitPath::OneRequest,
                vec![entry(0, Op::Delete), entry(1, Op::Update)],
            ),
        ],
    )
}

/// Roll-forward while a second handle may resume the transaction at any moment (its per-item
/// locks may land late, after the write was rolled forward and the item unlocked).
fn rolled_forward_concurrent_handles() -> Config {
    Config {
        crashes: 0,
        lost_responses: 0,
        second_handles: vec![0],
        delete_records: false,
        ..config(
            "roll-forward, a second handle resuming a live transaction",
            vec![Some(1), Some(2)],
            vec![false, false],
            vec![
                rolled(vec![entry(0, Op::Update), entry(1, Op::Delete)]),
                plan(CommitPath::OneRequest, vec![entry(1, Op::Update)]),
            ],
        )
    }
}

#[test]
fn roll_forward() {
    assert_model_holds(rolled_forward());
}

/// Roll-forward where the put is applied before the flip (a condition DynamoDB judges) beside an
/// update and a delete rolled forward, against a one-request writer; one crash, one lost response.
#[test]
fn roll_forward_beside_a_write_applied_before_the_flip() {
    let mut cfg = config(
        "roll-forward beside a write applied before the flip",
        vec![Some(1), Some(2), Some(3)],
        vec![false, false, false],
        vec![
            Plan {
                roll_applies_puts: true,
                ..rolled(vec![
                    entry(0, Op::Put(5)),
                    entry(1, Op::Update),
                    entry(2, Op::Delete),
                ])
            },
            plan(CommitPath::OneRequest, vec![entry(0, Op::Update)]),
        ],
    );
    cfg.lost_responses = 1;
    assert_model_holds(cfg);
}

#[test]
fn roll_forward_second_handles() {
    assert_model_holds(rolled_forward_concurrent_handles());
}

#[test]
#[ignore = "larger run: cargo test --release --test model -- --ignored"]
fn roll_forward_second_handles_and_a_lost_response() {
    let mut cfg = rolled_forward_concurrent_handles();
    cfg.name = "roll-forward, a second handle and a lost response";
    cfg.lost_responses = 1;
    assert_model_holds(cfg);
}

#[test]
fn batched_locks_two_transactions_two_items() {
    assert_model_holds(batched_two_by_two());
}

#[test]
fn batched_locks_insert_placeholders() {
    assert_model_holds(batched_inserts());
}

#[test]
fn batched_locks_against_per_item_locks() {
    assert_model_holds(batched_against_per_item());
}

#[test]
fn batched_locks_second_handles() {
    let mut cfg = batched_concurrent_handles();
    cfg.name = "batched locks, a second handle, no lost response";
    cfg.lost_responses = 0;
    assert_model_holds(cfg);
}

#[test]
#[ignore = "larger run (1.7M states): cargo test --release --test model -- --ignored"]
fn batched_locks_second_handles_and_a_lost_response() {
    assert_model_holds(batched_concurrent_handles());
}

fn assert_model_holds(cfg: Config) {
    let (name, bug) = (cfg.name, cfg.bug.is_some());
    model_support::assert_model_holds(name, ProtocolModel { cfg }, bug);
}

#[test]
fn two_transactions_two_items() {
    assert_model_holds(two_by_two());
}

#[test]
fn interactive_transaction_images_table_and_fast_path() {
    assert_model_holds(interactive_and_fast());
}

#[test]
fn three_transactions_two_items() {
    assert_model_holds(three_by_two());
}

#[test]
#[ignore = "larger run (1.6M states): cargo test --release --test model -- --ignored"]
fn three_transactions_two_items_with_a_crash() {
    let mut cfg = three_by_two();
    cfg.name = "3 tx x 2 items, read lock, one crash";
    cfg.crashes = 1;
    assert_model_holds(cfg);
}

#[test]
#[ignore = "larger run (20M states, ~8 min in release): cargo test --release --test model -- --ignored"]
fn three_transactions_three_items() {
    assert_model_holds(three_by_three());
}

#[test]
#[ignore = "larger run (0.6M states): cargo test --release --test model -- --ignored"]
fn two_transactions_two_items_two_crashes_two_lost_responses() {
    let mut cfg = two_by_two();
    cfg.name = "2 tx x 2 items, two crashes, two lost responses";
    cfg.crashes = 2;
    cfg.lost_responses = 2;
    assert_model_holds(cfg);
}

#[test]
fn buggy_protocols_are_caught() {
    let cases = [
        (Bug::PlaceholderWithoutAbsentCheck, interactive_and_fast()),
        (Bug::PlaceholderWithoutAbsentCheck, batched_inserts()),
        (Bug::DecideIgnoresVersion, concurrent_handles()),
        (Bug::FinalizeBeforeSettle, two_by_two()),
        (Bug::DeleteImageBeforeSettle, interactive_and_fast()),
        (Bug::ReleaseIgnoresApplied, two_by_two()),
        (Bug::ApplyIgnoresLockStamp, concurrent_handles()),
        (Bug::BatchImagesReadBeforeLock, batched_two_by_two()),
        (
            Bug::RollForwardIgnoresMark,
            rolled_forward_concurrent_handles(),
        ),
        (
            Bug::RollMarkOnPerItemLock,
            rolled_forward_concurrent_handles(),
        ),
        (
            Bug::OrphanReleaseWithoutTombstone,
            locked_reads(ReadShape::LockThenRecord),
        ),
        (
            Bug::ReleaseUnrecordedLock,
            locked_reads_writer_of_second(ReadShape::LockThenRecord),
        ),
        (
            Bug::CommitWithoutRecordIgnoresLock,
            counter_against_a_writer(),
        ),
        // A counter that never creates its record is safe without the tombstone (its commit is
        // conditional on its lock); one that goes on to a second item is not.
        (
            Bug::OrphanReleaseWithoutTombstone,
            second_read_creates_the_record(),
        ),
    ];
    for (bug, cfg) in cases {
        assert_caught(bug, cfg);
    }
}

/// Runs the checker on `cfg` broken by `bug` (until its first counterexample) and fails unless an
/// `always` property is violated.
fn assert_caught(bug: Bug, mut cfg: Config) {
    let reads = cfg.reads;
    cfg.bug = Some(bug);
    let what = format!("{bug:?} ({reads:?})");
    model_support::assert_caught(&what, ProtocolModel { cfg }, &[Expectation::Always]);
}
