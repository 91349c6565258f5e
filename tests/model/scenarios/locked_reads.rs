//! Interactive locked reads (`Transaction::get_item`) in each `ReadShape`, and the transfer whose
//! one-request commit records its writes itself.

use super::*;

const SHAPES: [ReadShape; 3] = [
    ReadShape::RecordThenLock,
    ReadShape::LockThenRecord,
    ReadShape::RecordWithLock,
];

/// Interactive locked reads: a transaction reads two items (one absent) under lock and writes a
/// third, committing in one request, while another writes both items it read (in phases); one
/// crash, one lost response, records deleted once finalized. `shape` says how a read reaches
/// its lock.
pub(super) fn locked_reads(shape: ReadShape) -> Config {
    Config {
        reads: shape,
        ..config(
            "interactive locked reads vs a writer",
            vec![Some(1), Some(2), None],
            vec![false, false, false],
            vec![
                plan(
                    CommitPath::OneRequest,
                    vec![read_now(0), read_now(2), entry(1, Op::Update)],
                ),
                plan(
                    CommitPath::Phased,
                    vec![entry(0, Op::Update), entry(2, Op::Put(5))],
                ),
            ],
        )
    }
}

/// A transfer's shape: two locked reads, then a write on an item read; every item is held when the
/// commit starts, so the one-request commit records the write itself (`fold_into_decision`),
/// against a writer of the other item read.
fn transfer(shape: ReadShape) -> Config {
    Config {
        reads: shape,
        ..config(
            "a transfer whose commit records its writes",
            vec![Some(1), Some(2)],
            vec![false, false],
            vec![
                plan(
                    CommitPath::OneRequest,
                    vec![read_now(0), read_now(1), entry(1, Op::Update)],
                ),
                plan(CommitPath::Phased, vec![entry(0, Op::Put(5))]),
            ],
        )
    }
}

#[test]
fn transfer_with_the_writes_folded_into_the_commit() {
    for shape in SHAPES {
        let mut cfg = transfer(shape);
        cfg.name = match shape {
            ReadShape::RecordThenLock => "transfer, folded commit, record then lock",
            ReadShape::LockThenRecord => "transfer, folded commit, lock then record",
            ReadShape::RecordWithLock => "transfer, folded commit, record with lock",
        };
        assert_model_holds(cfg);
    }
}

/// A second handle may resume the transaction at any moment while its first coordinator runs;
/// records are deleted once finalized. A creation answered ambiguously, if it were retried as a
/// creation, would be caught here: the model found the record created anew after a second handle had
/// committed the transaction and its record had been deleted ("committed state is immutable"
/// failed): a handle now reads a record whose creation is in doubt and, finding none, ends the
/// transaction under a tombstone.
#[test]
fn transfer_with_a_second_handle() {
    let mut cfg = transfer(ReadShape::LockThenRecord);
    cfg.name = "transfer, folded commit, a second handle";
    cfg.second_handles = vec![0];
    cfg.crashes = 0;
    assert_model_holds(cfg);
}

/// The transfer with a second handle, the second read's append and lock in flight together: the
/// second handle may commit or roll back the transaction while they are, with or without the read
/// recorded, and lock the item itself before or after the first handle's lock lands. No lost
/// response in CI (the larger runs have one, and a crash).
#[test]
fn transfer_with_a_second_handle_record_with_lock() {
    let mut cfg = transfer(ReadShape::RecordWithLock);
    cfg.name = "transfer, folded commit, a second handle, record with lock";
    cfg.second_handles = vec![0];
    cfg.crashes = 0;
    cfg.lost_responses = 0;
    assert_model_holds(cfg);
}

#[test]
#[ignore = "larger run (1.2M unique states, ~21 s in release): cargo test --release --test model -- --ignored"]
fn transfer_with_a_second_handle_record_with_lock_and_a_lost_response() {
    let mut cfg = transfer(ReadShape::RecordWithLock);
    cfg.name = "transfer, folded commit, a second handle, record with lock, a lost response";
    cfg.second_handles = vec![0];
    cfg.crashes = 0;
    assert_model_holds(cfg);
}

/// Larger: the transfer with a second handle, one crash and one lost response, records deleted
/// once finalized.
#[test]
#[ignore = "larger run (~3 min in release): cargo test --release --test model -- --ignored"]
fn transfer_with_a_second_handle_a_crash_and_a_lost_response() {
    let mut cfg = transfer(ReadShape::LockThenRecord);
    cfg.name = "transfer, folded commit, a second handle, a crash, a lost response";
    cfg.second_handles = vec![0];
    cfg.crashes = 1;
    cfg.lost_responses = 1;
    assert_model_holds(cfg);
}

#[test]
#[ignore = "larger run (24.5M unique states, ~8 min in release): cargo test --release --test model -- --ignored"]
fn transfer_with_a_second_handle_record_with_lock_a_crash_and_a_lost_response() {
    let mut cfg = transfer(ReadShape::RecordWithLock);
    cfg.name =
        "transfer, folded commit, a second handle, record with lock, a crash, a lost response";
    cfg.second_handles = vec![0];
    cfg.crashes = 1;
    cfg.lost_responses = 1;
    assert_model_holds(cfg);
}

/// Larger: locked reads whose first lock goes with the record's creation, two lost responses.
#[test]
#[ignore = "larger run (1.2M unique states, ~8 s in release): cargo test --release --test model -- --ignored"]
fn locked_reads_lock_then_record_two_lost_responses() {
    let mut cfg = locked_reads(ReadShape::LockThenRecord);
    cfg.name = "locked reads, lock then record, two lost responses";
    cfg.lost_responses = 2;
    assert_model_holds(cfg);
}

/// Larger: locked reads whose later read sends its append with its lock, two lost responses (both
/// the append's and the lock's answers may be lost, or the creation's and the append's).
#[test]
#[ignore = "larger run (1.7M unique states, ~31 s in release): cargo test --release --test model -- --ignored"]
fn locked_reads_record_with_lock_two_lost_responses() {
    let mut cfg = locked_reads(ReadShape::RecordWithLock);
    cfg.name = "locked reads, record with lock, two lost responses";
    cfg.lost_responses = 2;
    assert_model_holds(cfg);
}

/// Two locked reads while a second handle may resume the transaction at any moment (its first
/// coordinator still running) and commit it in phases, with or without the second read, while a
/// writer wants the item read second.
fn locked_reads_second_handle(shape: ReadShape) -> Config {
    Config {
        reads: shape,
        crashes: 0,
        lost_responses: 0,
        second_handles: vec![0],
        delete_records: false,
        ..config(
            "locked reads with a second handle",
            vec![Some(1), Some(2), Some(3)],
            vec![false, false, false],
            vec![
                plan(
                    CommitPath::Phased,
                    vec![read_now(1), read_now(0), entry(2, Op::Update)],
                ),
                plan(CommitPath::OneRequest, vec![entry(0, Op::Update)]),
            ],
        )
    }
}

#[test]
fn locked_reads_record_then_lock() {
    let mut cfg = locked_reads(ReadShape::RecordThenLock);
    cfg.name = "locked reads, record then lock";
    assert_model_holds(cfg);
}

#[test]
fn locked_reads_lock_then_record() {
    let mut cfg = locked_reads(ReadShape::LockThenRecord);
    cfg.name = "locked reads, lock then record";
    assert_model_holds(cfg);
}

#[test]
fn locked_reads_phased_lock_then_record() {
    let mut cfg = locked_reads(ReadShape::LockThenRecord);
    cfg.name = "locked reads, lock then record, phased commit";
    cfg.txs[0].commit = CommitPath::Phased;
    assert_model_holds(cfg);
}

/// `RecordWithLock` with a lost response and no crash in CI (a read whose append's answer is lost,
/// or which fails without landing, goes on unrecorded); the phased commit below has the crash.
/// Both faults together are the larger runs.
#[test]
fn locked_reads_record_with_lock() {
    let mut cfg = locked_reads(ReadShape::RecordWithLock);
    cfg.name = "locked reads, record with lock, a lost response";
    cfg.crashes = 0;
    assert_model_holds(cfg);
}

#[test]
fn locked_reads_phased_record_with_lock() {
    let mut cfg = locked_reads(ReadShape::RecordWithLock);
    cfg.name = "locked reads, record with lock, phased commit, a crash";
    cfg.txs[0].commit = CommitPath::Phased;
    cfg.lost_responses = 0;
    assert_model_holds(cfg);
}

#[test]
#[ignore = "larger run (0.65M unique states, ~10 s in release): cargo test --release --test model -- --ignored"]
fn locked_reads_record_with_lock_a_crash_and_a_lost_response() {
    let mut cfg = locked_reads(ReadShape::RecordWithLock);
    cfg.name = "locked reads, record with lock, a crash, a lost response";
    assert_model_holds(cfg);
}

#[test]
#[ignore = "larger run (0.8M unique states, ~14 s in release): cargo test --release --test model -- --ignored"]
fn locked_reads_phased_record_with_lock_a_crash_and_a_lost_response() {
    let mut cfg = locked_reads(ReadShape::RecordWithLock);
    cfg.name = "locked reads, record with lock, phased commit, a crash, a lost response";
    cfg.txs[0].commit = CommitPath::Phased;
    assert_model_holds(cfg);
}

#[test]
fn locked_reads_with_a_second_handle() {
    for shape in SHAPES {
        let mut cfg = locked_reads_second_handle(shape);
        cfg.name = match shape {
            ReadShape::RecordThenLock => "locked reads, second handle, record then lock",
            ReadShape::LockThenRecord => "locked reads, second handle, lock then record",
            ReadShape::RecordWithLock => "locked reads, second handle, record with lock",
        };
        assert_model_holds(cfg);
    }
}

/// Locked reads against a writer of the item read second only (it is not held up by the first
/// read's lock): a lock released while the record does not name it lets the write in.
pub(super) fn locked_reads_writer_of_second(shape: ReadShape) -> Config {
    let mut cfg = locked_reads(shape);
    cfg.txs[1] = plan(CommitPath::OneRequest, vec![entry(2, Op::Put(5))]);
    cfg
}

/// The broken releases of a lock its record does not name are caught with `RecordWithLock` too:
/// the first read's lock released without a tombstone before its record's creation lands, and a
/// later read's lock, landed before its append, released while the transaction is pending (no
/// crash or lost response needed: two requests in flight together are enough).
#[test]
fn buggy_releases_of_unnamed_locks_are_caught_with_record_with_lock() {
    let no_faults = |cfg: Config| Config {
        crashes: 0,
        lost_responses: 0,
        ..cfg
    };
    assert_caught(
        Bug::OrphanReleaseWithoutTombstone,
        no_faults(locked_reads(ReadShape::RecordWithLock)),
    );
    assert_caught(
        Bug::ReleaseUnrecordedLock,
        no_faults(locked_reads_writer_of_second(ReadShape::RecordWithLock)),
    );
}
