//! An exhaustive model check of the transaction protocol, with the `stateright` model checker.
//!
//! The model is the protocol of docs/PROTOCOL.md at the level of single DynamoDB requests: every
//! action below is one request (a conditional write is atomic in DynamoDB, so it is one step), and
//! each names the implementation step it stands for. The checker explores every interleaving of:
//!
//! - the coordinators of 2–3 transactions over 2–3 items (buffered or interactive writes, the
//!   one-request and the phased commit, the write-only fast path, read locks (taken at commit, or
//!   interactively in each `ReadShape`: `RecordThenLock`; `LockThenRecord`, the first read's lock
//!   sent with the record's creation and later reads only locking; `RecordWithLock`, the same
//!   first read and each later read's append sent with its lock; a write on an item read earlier,
//!   whose request the one-request commit records itself when every item is held), inserts of
//!   absent items, deletes, large items whose before-image lives in the images table), and the
//!   batched locking commit (record and locks in one TransactWriteItems, images read after the
//!   locks, cancellation and ambiguous failure falling back to the per-item path), and
//!   roll-forward (`Settings::roll_forward`: the batch marks each write's lock, a marked write is
//!   applied by the write that settles its item after the flip, and a `Committed` reader computes
//!   it meanwhile), and a record only when needed (`Settings::record_on_demand`: the first read's
//!   lock taken alone, a one-item transaction committed by one conditional write on its item,
//!   any other creating its record with its next record write);
//! - crashes of a coordinator between any two of its requests, and resumption of its transaction
//!   by a new coordinator (`TransactionManager::resume`) that commits or rolls it back;
//! - lost responses (the write landed, the coordinator did not hear back and retries the step;
//!   with `RecordWithLock`, a read's append whose answer is lost, or which fails without landing,
//!   is not retried: the read goes on unrecorded);
//! - everybody else — contending coordinators, the sweeper, readers — as the "world": at any moment
//!   it may roll back any pending transaction (a contender's wound, `dead_after`, the sweeper, a
//!   skewed clock), settle any item of a decided transaction, finalize, delete records and images,
//!   put a tombstone under the id of a transaction whose record is absent while it holds a lock,
//!   and then release its unapplied locks.
//!
//! World actions are atomic compare-and-set steps whose guards are at most as strict as the
//! implementation's conditions, so the model has *more* behaviours than the implementation: an
//! invariant that holds here holds there (for the modelled sizes). Time is not modelled: every
//! rollback a clock could trigger may happen at any moment.
//!
//! Invariants (checked in every reachable state):
//! - **committed reads**: what a reader at `Committed` isolation computes for every item (the
//!   rules of `isolation::resolve`) equals the logical state: the initial items with the writes of
//!   exactly the committed transactions applied, each once, at its commit point. This is atomicity
//!   (all or nothing), isolation of committed reads, and "no lost image" in one statement;
//! - **no lost image**: an applied item of an undecided or rolled-back transaction always carries
//!   its before-image, or points to one that exists in the images table;
//! - **locks are covered by records**: an item locked by a transaction is named in its record, or
//!   the record is gone and the lock was never applied (with `ReadShape::LockThenRecord` or
//!   `ReadShape::RecordWithLock`, an interactive read's unapplied lock may come before its request
//!   is recorded);
//! - **locked reads hold until commit**: when a transaction commits, every item a handle of it
//!   read under lock (interactively) still holds what the read returned;
//! - **finalized means settled**: a finalized record has no applied lock left, and no write left
//!   to roll forward;
//! - **committed state is immutable**: a transaction that committed stays committed (its record
//!   is committed or gone) and commits at most once;
//! - **quiescent states are clean**: when nothing can move any more, no item is locked, no image
//!   is left, every record is gone and every item holds its logical value.
//!
//! `sometimes` properties prove the interesting states are reached (late locks, restores from the
//! images table, resumed commits, lost responses), and `buggy_protocols_are_caught` runs the same
//! checker on deliberately broken variants (Java's transient-lock bug, a decision not conditional
//! on the version, finalizing or deleting images too early, releasing an applied lock, reading a
//! batch's before-images before its locks, a lock whose record is absent released without a
//! tombstone, releasing a pending transaction's unrecorded lock, rolling forward the write of an
//! unmarked lock, marking locks taken item by item, a commit without record not conditional on its
//! lock) and expects a counterexample for each (the two
//! releases of a lock its record does not name under `LockThenRecord` and `RecordWithLock` alike).
//!
//! Not modelled: the wait/wound choices of the ordered contention policy (they only decide *when*
//! a pending holder is rolled back, and the world may roll back at any time), user
//! `ConditionExpression`s, chunk rows of large records, ticket bookkeeping.

#[path = "../model_support/mod.rs"]
mod model_support;

mod batch_steps;
mod config;
mod coordinator_steps;
mod model;
mod scenarios;
mod state;
mod stateright_model;
mod world_steps;

use config::*;
use model::*;
use state::*;
use stateright::{Expectation, Model, Property};
