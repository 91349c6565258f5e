//! # dynamodb-transactions
//!
//! Multi-item ACID transactions of any size over Amazon DynamoDB, reads isolated from writers in
//! flight, and fair distributed locks, on `aws-sdk-dynamodb`.
//!
//! A [`Transaction`] coordinator records its requests in a TX record, locks each item, applies the
//! changes and commits with one conditional write on the record's version; any coordinator can
//! resume, finish or roll back any transaction, and a crash at any request leaves a state others
//! can complete (the [protocol](guides::protocol)). Contending transactions are ordered by tickets
//! (wound-wait): none starves, none deadlocks. The [`lock`] module has a FIFO queue lock and lease
//! locks with fencing tokens; the [`sweeper`] finishes what crashed coordinators left.
//! With the `feed` feature, `feed::ChangeFeed` reads the tables' DynamoDB Streams and yields each
//! committed transaction once and whole, never a lock or a rolled-back write.
//!
//! ## When to use it
//!
//! DynamoDB's own `TransactWriteItems` is all-or-nothing, in one request. Use this library when
//! you need what it cannot do:
//!
//! - **more than 100 items** in one transaction;
//! - **reads isolated from concurrent writers**: outside a transaction, reads that never see
//!   uncommitted writes; inside one, locked reads that hold until the commit;
//! - **interactive read-then-write**: read items, decide, write, with `ConditionExpression`s
//!   checked under lock and `ReturnValues`;
//! - **resumable coordinators**: a transaction has an id ([`TxId`]); another process can
//!   [`resume`](TransactionManager::resume) it, commit it or roll it back.
//!
//! When a transaction only writes, fewer than 100 items, native `TransactWriteItems` does it in one
//! request, and so does this library: it takes the same one-request fast path, for the same cost
//! plus one action that writes its record (2 write units). Native `TransactWriteItems` is enough
//! there, unless the same items also take part in the library's transactions: a write that
//! bypasses the library ignores its locks.
//!
//! ## What a transaction costs
//!
//! | transaction | requests | round trips in sequence | write units |
//! |---|---|---|---|
//! | write-only, < 100 items (fast path) | 1 `TransactWriteItems` | 1 | 2N + 2 (native: 2N) |
//! | N ≤ 98 writes through locks (taken after reads, for `ReturnValues`, or on meeting a lock) | 2 | 2 | about 4N + 4 |
//! | 1,000 updates (locks in batches of 99) | about 34 | about 9 | about 4N, plus the padding of batched locks |
//!
//! A `TransactWriteItems` action costs 2 write units per KB, a plain write 1. Each locked read
//! costs one round trip (its record write and its lock go out together; see
//! [`Settings::locked_reads`]), so a transfer (two reads, two writes, the commit) waits for 3. A read at
//! [`Committed`](IsolationLevel::Committed) costs one request, two when a transaction in flight
//! holds the item. The [protocol guide](guides::protocol) breaks each path down; the repository's
//! `docs/PERFORMANCE.md` has the measurements.
//!
//! ## Isolation levels
//!
//! Inside a transaction every read is locked ([`IsolationLevel::ReadLock`]) and the transaction is
//! serializable. Reads outside one ([`TransactionManager::get_item`], `batch_get_item`, `query`,
//! `scan`) choose a level:
//!
//! - [`IsolationLevel::Committed`] (the default): committed state only; an item a transaction in
//!   flight changed is served from its before-image. No consistent cut across items.
//! - [`IsolationLevel::Uncommitted`]: the item as stored, including writes that may yet be rolled
//!   back. No extra request.
//!
//! The [isolation guide](guides::isolation) says what each level guarantees.
//!
//! ## Errors and outcomes
//!
//! Transactions and reads return [`Result`] with one [`Error`] type, displayed on one line saying
//! what failed and what it left (the locks have their own, [`lock::LockError`]). After a failed `commit`, `rollback` or `run`,
//! [`Error::transaction_outcome`] tells from the error alone what happened to the transaction
//! ([`TxOutcome`]): `Committed`, `RolledBack` (nothing took effect: safe to run the work again),
//! `Pending` (nothing decided yet), `CommittedWithout` (committed without some requests of this
//! handle) or `Undetermined` (resume it later to learn; applied at most once).
//! [`Error::is_retryable`] says whether running the whole unit of work again may succeed
//! (contention, throttling, transient failures). [`TransactionManager::run`] does that for you: it
//! runs the closure in a transaction, commits, and on a retryable error rolls the attempt back and
//! runs it again.
//!
//! ## Example
//!
//! A transfer between two accounts (the repository's `examples/quickstart.rs` is the whole
//! program, with the tables it needs):
//!
//! ```no_run
//! use aws_sdk_dynamodb::types::AttributeValue;
//! use dynamodb_transactions::{Error, TransactionManager, TxOutcome};
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let client = aws_sdk_dynamodb::Client::new(&aws_config::load_from_env().await);
//! let manager = TransactionManager::builder(client).build();
//! // The library's tables, `Transactions` and `TransactionImages` (idempotent).
//! manager.create_tables().await?;
//!
//! // All or nothing. `run` commits, and runs the closure again if the transaction loses
//! // contention or DynamoDB throttles.
//! let amount = AttributeValue::N("10".into());
//! let transfer = manager
//!     .run(async |tx| {
//!         tx.update_item()
//!             .table_name("Accounts")
//!             .key("Id", AttributeValue::S("alice".into()))
//!             .update_expression("SET balance = balance - :a")
//!             .condition_expression("balance >= :a")
//!             .expression_attribute_values(":a", amount.clone())
//!             .send()
//!             .await?;
//!         tx.update_item()
//!             .table_name("Accounts")
//!             .key("Id", AttributeValue::S("bob".into()))
//!             .update_expression("SET balance = balance + :a")
//!             .expression_attribute_values(":a", amount.clone())
//!             .send()
//!             .await?;
//!         Ok(())
//!     })
//!     .await;
//! match transfer {
//!     Ok(()) => println!("moved 10"),
//!     // A false condition rolls the transaction back: nothing of it took effect.
//!     Err(Error::ConditionFailed { .. }) => println!("too little money"),
//!     Err(e) if e.transaction_outcome() == Some(TxOutcome::Undetermined) => {
//!         println!("outcome unknown for now; resume the transaction later: {e}")
//!     }
//!     Err(e) => return Err(e.into()),
//! }
//! # Ok(()) }
//! ```
//!
//! ## Guides
//!
//! The [`guides`] module holds the [protocol](guides::protocol), [isolation](guides::isolation),
//! [operations](guides::operations) (tables, the sweeper, IAM, the `dynamodb-tx` CLI, every
//! metric), [locks](guides::locks) and [architecture](guides::architecture) guides.
//!
//! ## Observability
//!
//! **Tracing.** The library emits [`tracing`](https://docs.rs/tracing) spans and events and
//! installs no subscriber. Each transaction's `commit`, `rollback` and
//! [`run`](TransactionManager::run) span (level `info`) carries its id (`tx`) and, when it ends,
//! its `outcome` (`committed`, `rolled_back`, `unknown`, `failed`) and, on failure, `error.kind`
//! (`condition_failed`, `rolled_back`, `dynamodb`, ...); the protocol's phases have `debug` spans
//! below it. To see them, install a subscriber, e.g. with
//! `tracing-subscriber` (features `fmt`, `env-filter`):
//!
//! ```
//! tracing_subscriber::fmt()
//!     .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
//!     .init();
//! ```
//!
//! and run with `RUST_LOG=dynamodb_transactions=debug`.
//!
//! **Metrics.** Counters and a phase-latency histogram go through the
//! [`metrics`](https://docs.rs/metrics) facade, all named `dynamodb_tx_...`: commits by path,
//! rollbacks by cause, contention waits and wounds, retries, sweeper actions, lock acquisitions,
//! releases, timeouts and losses. Nothing is recorded until the application installs a recorder or
//! exporter (for example `metrics-exporter-prometheus`); `examples/metrics.rs` shows one, and the
//! [operations guide](guides::operations) ("Observability") lists every metric with its labels.
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]
// Errors carry the table, key and current item a caller needs to act; like the AWS SDK's own
// examples, we accept a large `Err` variant rather than hide those fields behind boxes.
#![allow(clippy::result_large_err)]

mod contention;
mod ddb;
mod error;
mod expr;
#[cfg(feature = "fault-injection")]
#[cfg_attr(docsrs, doc(cfg(feature = "fault-injection")))]
pub mod fault;
#[cfg(feature = "feed")]
#[cfg_attr(docsrs, doc(cfg(feature = "feed")))]
pub mod feed;
pub mod guides;
mod isolation;
/// Internals the project's own tests check against DynamoDB Local (differential tests); not part of
/// the API, and not stable.
#[cfg(feature = "fault-injection")]
#[doc(hidden)]
pub mod testing {
    pub use crate::expr::{Applied, apply_update, condition_holds, value_eq};
}
mod item_lock;
mod keys;
pub mod lock;
mod manager;
mod metrics;
mod record;
mod request;
mod settings;
mod settle;
pub mod sweeper;
mod tables;
mod ticket;
mod transaction;
mod tx_id;
mod typed;

pub use error::{BoxError, Error, Item, Result, TableRole, TxOutcome};
pub use isolation::{
    BatchGetOutput, IsolatedBatchGetItemBuilder, IsolatedGetItemBuilder, IsolatedQueryBuilder,
    IsolatedScanBuilder, IsolationLevel, Page,
};
pub use manager::{
    DEFAULT_IMAGES_TABLE, DEFAULT_TRANSACTIONS_TABLE, TransactionManager,
    TransactionManagerBuilder, TransactionStatus,
};
pub use record::TxState;
pub use settings::{ContentionPolicy, FastPathStamps, LockedReads, Settings, TicketSource};
pub use transaction::{
    DeleteItemBuilder, GetItemBuilder, GetOutput, PutItemBuilder, Transaction, UpdateItemBuilder,
    WriteOutput,
};
pub use tx_id::TxId;
pub use typed::{from_item, from_items, to_item};

/// The README's examples, compiled as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

#[cfg(test)]
mod readme_tests {
    /// README.md's quick start is `examples/quickstart.rs` word for word (less the example's `//!`
    /// header): the doc test compiles what the README shows, `cargo run --example quickstart`
    /// runs it.
    #[test]
    fn the_quick_start_is_the_example() {
        let readme = include_str!("../README.md");
        let section = &readme[readme.find("## Quick start").expect("a quick start")..];
        let block = section
            .split("```rust,no_run\n")
            .nth(1)
            .and_then(|b| b.split("\n```\n").next())
            .expect("a Rust block in the quick start");
        let example = include_str!("../examples/quickstart.rs");
        let code: String = example
            .lines()
            .skip_while(|l| l.starts_with("//!") || l.is_empty())
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(
            format!("{block}\n"),
            code,
            "copy examples/quickstart.rs into README.md"
        );
    }
}
