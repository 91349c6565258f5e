//! `Settings::record_on_demand`: a read-modify-write of one item with no record, committed by one
//! conditional write on the item, against writers and each other; and a transaction that goes on
//! to a second item, creating its record then.

use super::*;

/// A counter without record (read, then `SET v = v + 1` on the item read) against a phased
/// writer of the same item (or a second counter); one crash, one lost response, records deleted
/// once finalized. The world may tombstone the counter while it has no record and release its
/// lock.
pub(super) fn counter_against(other: Plan, name: &'static str) -> Config {
    Config {
        reads: ReadShape::RecordWithLock,
        ..config(
            name,
            vec![Some(1)],
            vec![false],
            vec![
                on_demand(
                    CommitPath::OneRequest,
                    vec![read_now(0), entry(0, Op::Update)],
                ),
                other,
            ],
        )
    }
}

pub(super) fn counter_against_a_writer() -> Config {
    counter_against(
        plan(CommitPath::Phased, vec![entry(0, Op::Put(5))]),
        "a counter without record vs a writer",
    )
}

#[test]
fn a_counter_without_record_against_a_writer() {
    assert_model_holds(counter_against_a_writer());
}

#[test]
fn two_counters_without_record() {
    assert_model_holds(counter_against(
        on_demand(
            CommitPath::OneRequest,
            vec![read_now(0), entry(0, Op::Update)],
        ),
        "two counters without record",
    ));
}

/// The counter's item is absent: its lock is a placeholder, which the commit fills (or a release
/// deletes).
#[test]
fn a_counter_without_record_inserting_its_item() {
    let mut cfg = counter_against_a_writer();
    cfg.name = "a counter without record of an absent item vs a writer";
    cfg.items = vec![None];
    assert_model_holds(cfg);
}

/// A read without record, then a read of a second item, whose lock goes out with the record's
/// creation (naming both reads), then a write on the second item; against a writer of both.
pub(super) fn second_read_creates_the_record() -> Config {
    Config {
        reads: ReadShape::RecordWithLock,
        ..config(
            "a read without record, then a second read creating the record",
            vec![Some(1), Some(2)],
            vec![false, false],
            vec![
                on_demand(
                    CommitPath::OneRequest,
                    vec![read_now(0), read_now(1), entry(1, Op::Update)],
                ),
                plan(
                    CommitPath::Phased,
                    vec![entry(0, Op::Update), entry(1, Op::Put(5))],
                ),
            ],
        )
    }
}

#[test]
fn a_second_read_creates_the_record() {
    assert_model_holds(second_read_creates_the_record());
}
