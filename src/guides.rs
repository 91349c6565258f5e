//! The guides, as pages of this documentation: the same Markdown files as the repository's `docs/`
//! directory.
//!
//! - [`protocol`]: the TX-record protocol — records, locks, images, commit and rollback,
//!   recovery, and what each step costs.
//! - [`isolation`]: what reads outside a transaction see at each [`IsolationLevel`], and what they
//!   cost.
//! - [`operations`]: running the library in production — tables, the sweeper, IAM, the operator
//!   CLI, tracing and metrics.
//! - [`locks`]: the queue lock and the lease lock of the [`lock`](crate::lock) module.
//! - [`feed`]: the change feed — committed transactions, whole, from DynamoDB Streams (the
//!   `feed` feature).
//! - [`architecture`]: how the crate is laid out.
//!
//! A link from one guide to another (`PROTOCOL.md`, `ISOLATION.md`, ...) names the Markdown file:
//! read it here as the module of the same name.
//!
//! [`IsolationLevel`]: crate::IsolationLevel

/// The TX-record protocol (docs/PROTOCOL.md).
///
#[doc = include_str!("../docs/PROTOCOL.md")]
pub mod protocol {}

/// Reads and isolation levels (docs/ISOLATION.md).
///
#[doc = include_str!("../docs/ISOLATION.md")]
pub mod isolation {}

/// Operations: tables, the sweeper, IAM, the CLI, observability (docs/OPERATIONS.md).
///
#[doc = include_str!("../docs/OPERATIONS.md")]
pub mod operations {}

/// The queue lock and the lease lock (docs/LOCKS.md). Its examples are compiled as doc tests.
///
#[doc = include_str!("../docs/LOCKS.md")]
pub mod locks {}

/// The change feed (docs/FEED.md): what it delivers, in what order, restarts, bounds and cost.
///
#[doc = include_str!("../docs/FEED.md")]
pub mod feed {}

/// The crate's layout (docs/ARCHITECTURE.md).
///
#[doc = include_str!("../docs/ARCHITECTURE.md")]
pub mod architecture {}
