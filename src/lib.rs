//! # dynamodb-transactions
//!
//! Multi-item ACID transactions of any size over Amazon DynamoDB, isolated reads outside
//! transactions at two levels ([`IsolationLevel::Uncommitted`] and [`IsolationLevel::Committed`];
//! inside a transaction every read is locked), and fair distributed locks.
//!
//! A [`Transaction`] coordinator records its requests in a TX record, locks each item, applies the
//! changes and commits with one conditional write on the record's version; any coordinator can resume,
//! finish or roll back any transaction. See `docs/PROTOCOL.md` for the protocol.
//!
//! ## Observability
//!
//! **Tracing.** The library emits [`tracing`] spans and events and installs no subscriber. Each
//! transaction's `commit`, `rollback` and [`run`](TransactionManager::run) span (level `info`)
//! carries its id (`tx`) and, when it ends, its `outcome` (`committed`, `rolled_back`, `unknown`,
//! `failed`) and, on failure, `error.kind` (`condition_failed`, `rolled_back`, `dynamodb`, ...);
//! the protocol's phases have `debug` spans below it. To see them, install a subscriber, e.g. with
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
//! **Metrics.** Counters and a phase-latency histogram go through the [`metrics`](::metrics)
//! facade, all named `dynamodb_tx_...`: commits by path, rollbacks by cause, contention waits and
//! wounds, retries, sweeper actions, lock acquisitions, releases, timeouts and losses. Nothing is
//! recorded until the application installs a recorder or exporter (for example
//! `metrics-exporter-prometheus`); `examples/metrics.rs` shows one, and `docs/OPERATIONS.md`
//! ("Observability") lists every metric with its labels.
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
pub use settings::{ContentionPolicy, Settings, TicketSource};
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
