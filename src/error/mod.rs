//! The crate's error type.
//!
//! Every fallible operation returns [`Result<T>`](crate::Result). Variants carry what a caller needs to
//! act: the transaction id, the table and key concerned, the current item when a condition failed, and
//! for DynamoDB errors the error code, message and whether the request may have been applied anyway.

mod classify;
mod display;
mod sdk;
mod table_roles;

use std::collections::HashMap;
use std::fmt;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::TxId;
use display::{DisplayKey, DisplayTableNotFound, DisplayTarget, one_line};

pub(crate) use classify::is_transient_code;
pub(crate) use sdk::NeverSent;
pub(crate) use table_roles::register_table;

/// A DynamoDB item or key: attribute name to value.
pub type Item = HashMap<String, AttributeValue>;

/// `std::result::Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A boxed error source.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong.
///
/// Match on the variants you can act on and use [`Error::is_retryable`] to decide whether running the
/// whole unit of work again may succeed. New variants may be added in minor versions.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The transaction was rolled back (by this coordinator, by a competitor that needed its items, or
    /// because a request failed). None of its writes are visible.
    #[error("transaction {tx_id} was rolled back")]
    RolledBack {
        /// The transaction.
        tx_id: TxId,
    },

    /// The transaction is already committed, so it cannot be changed or rolled back.
    #[error("transaction {tx_id} is already committed")]
    AlreadyCommitted {
        /// The transaction.
        tx_id: TxId,
    },

    /// Another handle of this transaction (another coordinator, or a handle made by
    /// [`TransactionManager::resume`](crate::TransactionManager::resume)) committed it before this
    /// handle recorded its last `unrecorded` requests: the transaction committed without them, so
    /// they were never applied. Whatever this handle recorded before (reads, writes with
    /// `ReturnValues`) is part of the committed transaction.
    #[error(
        "transaction {tx_id} was committed by another handle before {unrecorded} request(s) of this handle were recorded; they were not applied"
    )]
    CommittedWithout {
        /// The transaction.
        tx_id: TxId,
        /// How many requests of this handle are not part of the committed transaction.
        unrecorded: usize,
    },

    /// The transaction's record is gone, so whether it committed or rolled back cannot be known.
    #[error("the outcome of transaction {tx_id} is unknown: its record was deleted")]
    UnknownOutcome {
        /// The transaction.
        tx_id: TxId,
    },

    /// Whether the commit took effect is undetermined: a commit request failed ambiguously (a
    /// timeout, a lost response, a 5xx answer) and neither reading the record back nor rolling the
    /// transaction back settled it. Resume the transaction later to learn the outcome; it is never
    /// left half-applied, and never applied twice. Not retryable: running the work again could apply
    /// it twice.
    #[error("the outcome of committing transaction {tx_id} is undetermined: {source}")]
    Undetermined {
        /// The transaction.
        tx_id: TxId,
        /// What failed.
        #[source]
        source: Box<Error>,
    },

    /// No transaction with this id exists.
    #[error("transaction {tx_id} not found")]
    TransactionNotFound {
        /// The transaction.
        tx_id: TxId,
    },

    /// A transaction writes each item at most once; this request writes an item again. Only this
    /// request is refused: the transaction is unchanged (still pending) and goes on.
    #[error(
        "transaction {tx_id} already writes this item of table {table} (key {}); this request was refused and the transaction is still pending",
        DisplayKey(key)
    )]
    DuplicateRequest {
        /// The transaction.
        tx_id: TxId,
        /// Table of the item.
        table: String,
        /// Key of the item.
        key: Item,
    },

    /// The request is invalid; nothing was written for it.
    #[error("invalid request: {reason}")]
    InvalidRequest {
        /// What is wrong with it.
        reason: String,
    },

    /// The item is locked by another transaction, and contention resolution gave up: after
    /// `Settings::lock_attempts` or `Settings::lock_wait`, or at once when, under ordered
    /// contention, a transaction holding other locks meets the lock of a `run` retry (which
    /// outranks it: retrying, in `run`, makes it one too). The transaction is still pending: roll
    /// it back (or let `run` do it) and try again.
    #[error(
        "item of table {table} (key {}) is locked by transaction {owner}",
        DisplayKey(key)
    )]
    ItemLocked {
        /// Table of the item.
        table: String,
        /// Key of the item.
        key: Item,
        /// The transaction holding the lock.
        owner: TxId,
    },

    /// DynamoDB refused a request of the transaction because an item it touches is part of
    /// another `TransactWriteItems` in flight (`TransactionConflictException`, or a
    /// `TransactionConflict` cancellation), and the library's resends (a few, over about 75 ms) met
    /// the same refusal. Nothing of that request was written, and the transaction was not decided:
    /// it is still pending and may hold locks. Retry the call, roll the transaction back, or run the
    /// work again ([`TransactionManager::run`](crate::TransactionManager::run) does).
    #[error(
        "transaction {tx_id} is still pending: DynamoDB refused a request{} because another transaction's write of the item was in flight (TransactionConflict); retry, or roll back",
        DisplayTarget(table, key)
    )]
    Conflict {
        /// The transaction.
        tx_id: TxId,
        /// Table of the request, when it names one.
        table: Option<String>,
        /// Key of the item, when the request is on one.
        key: Option<Item>,
    },

    /// A request's `ConditionExpression` was false. The transaction was rolled back: none of its
    /// writes took effect, which this error alone establishes.
    ///
    /// Displayed as `transaction <id> was rolled back: the condition of request <i> on table <t>
    /// failed (key <k>)`.
    ///
    /// [`TransactionManager::transaction_state`](crate::TransactionManager::transaction_state) of
    /// the id may afterwards be `Ok(None)`: a transaction whose only commit request was refused
    /// (the write-only fast path, one `TransactWriteItems` refused as a whole) never wrote a
    /// record, nor anything else, and a transaction that wrote nothing has no state to look up.
    /// Rely on the error: it is definitive, nothing of the transaction was applied. A transaction
    /// that had written a record (it read, locked, or committed through the locking protocol)
    /// shows `RolledBack` until the record is deleted.
    #[error(
        "transaction {tx_id} was rolled back: the condition of request {request_index} on table {table} failed (key {})",
        DisplayKey(key)
    )]
    ConditionFailed {
        /// The transaction.
        tx_id: TxId,
        /// Position of the failed request in the transaction (0-based, in the order of calls).
        request_index: usize,
        /// Table of the item.
        table: String,
        /// Key of the item.
        key: Item,
        /// The item as it was when the condition was evaluated (`None` if it did not exist).
        item: Option<Item>,
    },

    /// DynamoDB rejected a request of the transaction when it was applied (for example a type
    /// mismatch in an update expression). The transaction was rolled back.
    #[error(
        "transaction {tx_id} was rolled back: request {request_index} on table {table} was rejected by DynamoDB: {}",
        one_line(message)
    )]
    RequestRejected {
        /// The transaction.
        tx_id: TxId,
        /// Position of the request in the transaction.
        request_index: usize,
        /// Table of the item.
        table: String,
        /// DynamoDB's message.
        message: String,
    },

    /// The transaction was already committed, rolled back or abandoned by this handle.
    #[error("transaction {tx_id} is finished and cannot be used")]
    TransactionFinished {
        /// The transaction.
        tx_id: TxId,
    },

    /// A table does not exist (or is not active yet: DynamoDB answers the same while a table is
    /// being created).
    ///
    /// For the manager's transactions or images table the message says how to create it:
    /// `transactions table <t> does not exist; nothing was written: create the tables with
    /// TransactionManager::create_tables() (or dynamodb-tx tables create)`. A transaction needs
    /// the transactions table before it writes anything, so when `commit` or `run` returns this
    /// error for it, nothing of the transaction was written
    /// ([`transaction_outcome`](Error::transaction_outcome) is `RolledBack`).
    ///
    /// For a table of your own, a request's `send()` on a transaction returns it when the table
    /// is missing: that request is refused and the transaction is unchanged. It stays usable, and
    /// its `commit` applies its other writes.
    #[error("{}", DisplayTableNotFound(table, *role))]
    TableNotFound {
        /// The table.
        table: String,
        /// Which table it is: the manager's transactions or images table, or another one.
        role: TableRole,
    },

    /// An existing table does not have the layout the library needs.
    #[error("table {table} has the wrong layout: {mismatch}")]
    TableMismatch {
        /// The table.
        table: String,
        /// What differs.
        mismatch: String,
    },

    /// A read at `Committed` isolation kept finding the item in flux and gave up.
    #[error(
        "could not read a committed version of an item of table {table} after {attempts} attempts"
    )]
    ReadContention {
        /// The table.
        table: String,
        /// Attempts made.
        attempts: u32,
    },

    /// A DynamoDB request failed.
    ///
    /// Displayed on one line as `DynamoDB <operation> failed (<code>) on table <table>, key <key>:
    /// <message>` (table and key where known); for a failure
    /// without an answer (no connection, a timeout) the message is the chain of causes, e.g.
    /// `DynamoDB DescribeTable failed: dispatch failure: io error: client error (Connect): tcp
    /// connect error: Connection refused (os error 111)`. The SDK error stays available as the
    /// [`source`](std::error::Error::source).
    #[error("DynamoDB {operation} failed{}{}: {}", code.as_deref().map(|c| format!(" ({c})")).unwrap_or_default(), DisplayTarget(table, key), one_line(message.as_deref().unwrap_or("no message")))]
    DynamoDb {
        /// The operation, e.g. `"UpdateItem"`.
        operation: &'static str,
        /// The table of the request, when it names one (`None` for requests over several tables,
        /// such as `TransactWriteItems`).
        table: Option<String>,
        /// The key of the item, for a request on one item whose key is known.
        key: Option<Item>,
        /// DynamoDB's error code, e.g. `"ThrottlingException"`.
        code: Option<String>,
        /// DynamoDB's message.
        message: Option<String>,
        /// True when the request may have been applied although it failed (timeout, lost response,
        /// 5xx answer). False when DynamoDB answered with a 4xx error, when the request could not
        /// be built, and when the client proves that no attempt of it left the machine (the
        /// connection was refused or could not be set up: DNS failure, TLS handshake, connect
        /// timeout). A reset or timeout after the request was sent is ambiguous.
        ambiguous: bool,
        /// The SDK error.
        #[source]
        source: BoxError,
    },

    /// An item could not be converted to or from a Rust type.
    #[error("item conversion failed: {0}")]
    Serde(#[from] serde_dynamo::Error),

    /// An internal invariant of the protocol was found broken (a bug, or tables changed behind the
    /// library's back). The message says what was found.
    #[error("protocol invariant broken: {0}")]
    Invariant(String),
}

/// What happened to a transaction whose `commit`, `rollback` or `run` failed, as
/// [`Error::transaction_outcome`] reads it from the error alone.
///
/// The answer is about this call: another coordinator may decide a [`Pending`](TxOutcome::Pending)
/// transaction later (roll it back, or resume and commit it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TxOutcome {
    /// The transaction is committed: every write took effect (or will once its completion,
    /// which any coordinator or the sweeper finishes, releases the locks). Do not run the work
    /// again.
    Committed,
    /// The transaction is rolled back (or nothing of it was ever written): none of its writes
    /// took effect. Running the work again is safe.
    RolledBack,
    /// Nothing was decided: the transaction is not committed, and no commit request of this call
    /// can still land. It may hold locks (pending) or have been rolled back meanwhile by a
    /// contender. Roll it back ([`TransactionManager::rollback_transaction`], or `rollback` on a
    /// resumed handle), resume it to try again, or leave it to contenders and the sweeper, which
    /// roll it back. Running the work again in a new transaction is safe once it is rolled back;
    /// [`TransactionManager::run`] does exactly that.
    ///
    /// [`TransactionManager::rollback_transaction`]: crate::TransactionManager::rollback_transaction
    /// [`TransactionManager::run`]: crate::TransactionManager::run
    Pending,
    /// The transaction committed, but without some requests of this handle: another handle of the
    /// same transaction decided it before they were recorded
    /// ([`Error::CommittedWithout`]). Those requests never took effect; what this handle recorded
    /// earlier did. Running the whole work again would apply the recorded part twice: run only what
    /// is missing, in a new transaction.
    CommittedWithout,
    /// Whether the transaction committed cannot be known from here: a commit request may have
    /// landed and the record could not be read back (or is gone). It is applied at most once;
    /// resume it (or read [`TransactionManager::transaction_state`]) later to learn the outcome.
    /// Do not simply run the work again.
    ///
    /// [`TransactionManager::transaction_state`]: crate::TransactionManager::transaction_state
    Undetermined,
}

/// Which table an [`Error::TableNotFound`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TableRole {
    /// The transactions table of a [`TransactionManager`](crate::TransactionManager) (TX records
    /// and the ticket counter): create it with
    /// [`TransactionManager::create_tables`](crate::TransactionManager::create_tables).
    Transactions,
    /// The images table of a [`TransactionManager`](crate::TransactionManager) (before-images too
    /// large for their item): created by
    /// [`TransactionManager::create_tables`](crate::TransactionManager::create_tables) too.
    Images,
    /// Any other table: one your requests name, or a lock table.
    Other,
}

impl Error {
    pub(crate) fn invalid(reason: impl fmt::Display) -> Error {
        Error::InvalidRequest {
            reason: reason.to_string(),
        }
    }

    pub(crate) fn invariant(msg: impl fmt::Display) -> Error {
        Error::Invariant(msg.to_string())
    }
}
