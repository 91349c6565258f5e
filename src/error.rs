//! The crate's error type.
//!
//! Every fallible operation returns [`Result<T>`](crate::Result). Variants carry what a caller needs to
//! act: the transaction id, the table and key concerned, the current item when a condition failed, and
//! for DynamoDB errors the error code, message and whether the request may have been applied anyway.

use std::collections::HashMap;
use std::fmt;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::AttributeValue;

use crate::TxId;

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

    /// The item is locked by another transaction, and contention resolution gave up.
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
    /// True when running the unit of work again may succeed: the transaction lost contention or was
    /// rolled back, or DynamoDB throttled, reported a conflict or failed transiently — what the
    /// SDK's retry classifier calls throttling or transient (throttling codes, 5xx answers,
    /// timeouts, a connection that could not be set up), and `TransactWriteItems` cancellation reasons that mean the same
    /// (`ThrottlingError`, `ProvisionedThroughputExceeded`, `TransactionConflict`). `commit` never
    /// returns a retryable error for a commit request that may have landed (see
    /// [`Transaction::commit`](crate::Transaction::commit)).
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::RolledBack { .. }
            | Error::ItemLocked { .. }
            | Error::Conflict { .. }
            | Error::ReadContention { .. } => true,
            Error::DynamoDb {
                code,
                ambiguous,
                source,
                ..
            } => {
                *ambiguous
                    || code.as_deref().is_some_and(is_transient_code)
                    // A connection that could not be set up: transient for the SDK too.
                    || find_source::<NeverSent>(source.as_ref()).is_some()
            }
            _ => false,
        }
    }

    /// True for a DynamoDB request that failed in a way that may nevertheless have applied it (a
    /// timeout, a lost or 5xx answer): the protocol must find out, never send it blindly again.
    pub(crate) fn may_have_landed(&self) -> bool {
        matches!(
            self,
            Error::DynamoDb {
                ambiguous: true,
                ..
            }
        )
    }

    /// True for [`Error::RolledBack`].
    pub fn is_rolled_back(&self) -> bool {
        matches!(self, Error::RolledBack { .. })
    }

    /// True for [`Error::ConditionFailed`].
    pub fn is_condition_failed(&self) -> bool {
        matches!(self, Error::ConditionFailed { .. })
    }

    /// True for [`Error::InvalidRequest`].
    pub fn is_invalid_request(&self) -> bool {
        matches!(self, Error::InvalidRequest { .. })
    }

    /// True for [`Error::ItemLocked`].
    pub fn is_item_locked(&self) -> bool {
        matches!(self, Error::ItemLocked { .. })
    }

    /// True for [`Error::Undetermined`] and [`Error::UnknownOutcome`]: the caller cannot know whether
    /// the transaction committed.
    pub fn is_undetermined(&self) -> bool {
        matches!(
            self,
            Error::Undetermined { .. } | Error::UnknownOutcome { .. }
        )
    }

    /// What this error says about the transaction's outcome, when [`Transaction::commit`],
    /// [`Transaction::rollback`] or [`TransactionManager::run`] returned it (`None` for an error
    /// that says nothing about a transaction, e.g. [`Error::TransactionFinished`] or a table
    /// error).
    ///
    /// | Error | Outcome |
    /// |---|---|
    /// | [`AlreadyCommitted`](Error::AlreadyCommitted) | [`Committed`](TxOutcome::Committed) |
    /// | [`CommittedWithout`](Error::CommittedWithout) | [`CommittedWithout`](TxOutcome::CommittedWithout) |
    /// | [`RolledBack`](Error::RolledBack), [`ConditionFailed`](Error::ConditionFailed), [`RequestRejected`](Error::RequestRejected), [`TableNotFound`](Error::TableNotFound) of the transactions table (nothing was written) | [`RolledBack`](TxOutcome::RolledBack) |
    /// | [`Undetermined`](Error::Undetermined), [`UnknownOutcome`](Error::UnknownOutcome), [`Invariant`](Error::Invariant) | [`Undetermined`](TxOutcome::Undetermined) |
    /// | [`ItemLocked`](Error::ItemLocked), [`DynamoDb`](Error::DynamoDb) (retryable or not), [`ReadContention`](Error::ReadContention), [`InvalidRequest`](Error::InvalidRequest), [`DuplicateRequest`](Error::DuplicateRequest), [`Serde`](Error::Serde), [`TableNotFound`](Error::TableNotFound) of another table | [`Pending`](TxOutcome::Pending) |
    /// | [`TransactionFinished`](Error::TransactionFinished), [`TransactionNotFound`](Error::TransactionNotFound), [`TableMismatch`](Error::TableMismatch) | `None` |
    ///
    /// A DynamoDB error is never "committed or not": `commit` resolves every failure after a commit
    /// request may have landed (by reading the record, or rolling back conditionally on its
    /// version) into `Ok`, [`Error::RolledBack`] or [`Error::Undetermined`], so a DynamoDB error it
    /// returns was met before any commit request could land.
    ///
    /// [`Transaction::commit`]: crate::Transaction::commit
    /// [`Transaction::rollback`]: crate::Transaction::rollback
    /// [`TransactionManager::run`]: crate::TransactionManager::run
    pub fn transaction_outcome(&self) -> Option<TxOutcome> {
        Some(match self {
            Error::AlreadyCommitted { .. } => TxOutcome::Committed,
            Error::CommittedWithout { .. } => TxOutcome::CommittedWithout,
            Error::RolledBack { .. }
            | Error::ConditionFailed { .. }
            | Error::RequestRejected { .. }
            | Error::TableNotFound {
                role: TableRole::Transactions,
                ..
            } => TxOutcome::RolledBack,
            Error::Undetermined { .. } | Error::UnknownOutcome { .. } | Error::Invariant(_) => {
                TxOutcome::Undetermined
            }
            Error::ItemLocked { .. }
            | Error::Conflict { .. }
            | Error::DynamoDb { .. }
            | Error::ReadContention { .. }
            | Error::InvalidRequest { .. }
            | Error::DuplicateRequest { .. }
            | Error::Serde(_)
            | Error::TableNotFound { .. } => TxOutcome::Pending,
            Error::TransactionFinished { .. }
            | Error::TransactionNotFound { .. }
            | Error::TableMismatch { .. } => return None,
        })
    }

    /// `self`, or [`Error::Conflict`] of transaction `tx_id` when `self` is DynamoDB's refusal of a
    /// request for a conflict with another transaction in flight (which wrote nothing).
    pub(crate) fn in_transaction(self, tx_id: &TxId) -> Error {
        match self {
            Error::DynamoDb {
                code: Some(code),
                ambiguous: false,
                table,
                key,
                ..
            } if code == "TransactionConflictException" || code == "TransactionConflict" => {
                Error::Conflict {
                    tx_id: tx_id.clone(),
                    table,
                    key,
                }
            }
            other => other,
        }
    }

    /// The DynamoDB error code, if this is a DynamoDB error.
    pub fn dynamodb_code(&self) -> Option<&str> {
        match self {
            Error::DynamoDb { code, .. } => code.as_deref(),
            _ => None,
        }
    }

    pub(crate) fn invalid(reason: impl fmt::Display) -> Error {
        Error::InvalidRequest {
            reason: reason.to_string(),
        }
    }

    pub(crate) fn invariant(msg: impl fmt::Display) -> Error {
        Error::Invariant(msg.to_string())
    }

    /// Wraps an SDK error, keeping its code and message and whether the request may have landed:
    /// a timeout, a failure to read the answer, or a 5xx answer (DynamoDB, or something before it,
    /// failed after receiving the request, which may have been applied). A dispatch failure is
    /// not ambiguous only when the send tracker (`ddb::SendTracker`) proved that no attempt of
    /// the request was sent.
    pub(crate) fn sdk<E, R>(operation: &'static str, err: SdkError<E, R>) -> Error
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: fmt::Debug + Send + Sync + 'static,
    {
        let ambiguous = match &err {
            SdkError::DispatchFailure(d) => d
                .as_connector_error()
                .is_none_or(|c| find_source::<NeverSent>(c).is_none()),
            SdkError::TimeoutError(_) | SdkError::ResponseError(_) => true,
            SdkError::ServiceError(s) => {
                let raw: &dyn std::any::Any = s.raw();
                raw.downcast_ref::<aws_smithy_runtime_api::http::Response>()
                    .is_some_and(|r| r.status().is_server_error())
                    || s.err().code().is_some_and(is_server_error_code)
            }
            // ConstructionFailure: the request was never built, so never sent.
            _ => false,
        };
        let (code, message) = match &err {
            SdkError::ServiceError(s) => (
                s.err().code().map(String::from),
                s.err().message().map(String::from),
            ),
            other => (None, Some(cause_chain(other))),
        };
        Error::DynamoDb {
            operation,
            table: None,
            key: None,
            code,
            message,
            ambiguous,
            source: Box::new(err),
        }
    }

    /// Names the table a failed DynamoDB request was sent to (other errors are returned as they
    /// are). DynamoDB's `ResourceNotFoundException` becomes [`Error::TableNotFound`].
    pub(crate) fn on_table(mut self, name: &str) -> Error {
        if self.is_resource_not_found() {
            return Error::table_not_found(name);
        }
        if let Error::DynamoDb { table, .. } = &mut self {
            *table = Some(name.to_string());
        }
        self
    }

    /// Names the table and the key of the item a failed DynamoDB request was about.
    /// DynamoDB's `ResourceNotFoundException` becomes [`Error::TableNotFound`].
    pub(crate) fn on_item(mut self, name: &str, item_key: &Item) -> Error {
        if self.is_resource_not_found() {
            return Error::table_not_found(name);
        }
        if let Error::DynamoDb { table, key, .. } = &mut self {
            *table = Some(name.to_string());
            *key = Some(item_key.clone());
        }
        self
    }

    /// DynamoDB's answer to a request on a table that does not exist (or is not active).
    fn is_resource_not_found(&self) -> bool {
        matches!(
            self,
            Error::DynamoDb { code: Some(c), ambiguous: false, .. } if c == "ResourceNotFoundException"
        )
    }

    /// [`Error::TableNotFound`] for `table`, with its role as the managers built in this process
    /// registered it.
    pub(crate) fn table_not_found(table: &str) -> Error {
        Error::TableNotFound {
            table: table.to_string(),
            role: table_role(table),
        }
    }
}

/// The transactions and images tables of every [`TransactionManager`](crate::TransactionManager)
/// built in this process, by name. A request that fails for a missing table knows only the
/// table's name; this tells whether it is one of the library's tables, so that the error can say
/// how to create it and what the failure left.
static LIBRARY_TABLES: std::sync::LazyLock<std::sync::RwLock<HashMap<String, TableRole>>> =
    std::sync::LazyLock::new(Default::default);

/// Notes that `table` is a transactions or images table (see [`LIBRARY_TABLES`]).
pub(crate) fn register_table(table: &str, role: TableRole) {
    let known = LIBRARY_TABLES
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(table)
        == Some(&role);
    if !known {
        LIBRARY_TABLES
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(table.to_string(), role);
    }
}

/// The role of `table`: [`TableRole::Other`] unless a manager of this process uses it as its
/// transactions or images table.
pub(crate) fn table_role(table: &str) -> TableRole {
    LIBRARY_TABLES
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(table)
        .copied()
        .unwrap_or(TableRole::Other)
}

/// The `Display` of [`Error::TableNotFound`]: for the library's tables, how to create them.
struct DisplayTableNotFound<'a>(&'a str, TableRole);

impl fmt::Display for DisplayTableNotFound<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const CREATE: &str = "create the tables with TransactionManager::create_tables() (or `dynamodb-tx tables create`)";
        let table = self.0;
        match self.1 {
            TableRole::Transactions => write!(
                f,
                "transactions table {table} does not exist; nothing was written: {CREATE}"
            ),
            TableRole::Images => write!(f, "images table {table} does not exist: {CREATE}"),
            TableRole::Other => write!(f, "table {table} does not exist"),
        }
    }
}

/// The messages of an error and its sources on one line, `outer: inner: innermost`, skipping a
/// message its predecessor already includes (many errors repeat their source's message) or that
/// came earlier (`io error` of two connector errors).
fn cause_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur = Some(e);
    while let Some(c) = cur {
        let msg = one_line(&c.to_string());
        if !msg.is_empty()
            && !parts.last().is_some_and(|p| p.contains(&msg))
            && !parts.contains(&msg)
        {
            parts.push(msg);
        }
        cur = c.source();
    }
    parts.join(": ")
}

/// Collapses line breaks and runs of white space into single spaces.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The first error of type `T` in the chain that starts at `e`.
fn find_source<'a, T: std::error::Error + 'static>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut cur = Some(e);
    while let Some(c) = cur {
        if let Some(t) = c.downcast_ref::<T>() {
            return Some(t);
        }
        cur = c.source();
    }
    None
}

/// ` on table T, key K` for the `Display` of [`Error::DynamoDb`]; empty when neither is known.
struct DisplayTarget<'a>(&'a Option<String>, &'a Option<Item>);

impl fmt::Display for DisplayTarget<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(t) = self.0 {
            write!(f, " on table {t}")?;
        }
        if let Some(k) = self.1 {
            write!(f, ", key {}", DisplayKey(k))?;
        }
        Ok(())
    }
}

/// A key (or item) on one line: `Id = "a", Sort = 5`, attributes in name order.
struct DisplayKey<'a>(&'a Item);

impl fmt::Display for DisplayKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&String> = self.0.keys().collect();
        names.sort();
        for (i, n) in names.into_iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            match &self.0[n] {
                AttributeValue::S(v) => write!(f, "{n} = {v:?}")?,
                AttributeValue::N(v) => write!(f, "{n} = {v}")?,
                AttributeValue::B(v) => write!(f, "{n} = <{} bytes>", v.as_ref().len())?,
                other => write!(f, "{n} = {}", one_line(&format!("{other:?}")))?,
            }
        }
        Ok(())
    }
}

/// The proof, put in the error chain by the send tracker (`ddb::SendTracker`), that no attempt of a
/// request left the machine: every attempt that reached the HTTP client failed while connecting.
#[derive(Debug)]
pub(crate) struct NeverSent(pub(crate) BoxError);

impl fmt::Display for NeverSent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the request was never sent")
    }
}

impl std::error::Error for NeverSent {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        // The orchestrator's wrapper says nothing: go on with what it wraps.
        self.0.source().or(Some(self.0.as_ref()))
    }
}

/// Error codes of a failure inside DynamoDB: the request may have been applied.
fn is_server_error_code(code: &str) -> bool {
    matches!(
        code,
        "InternalServerError" | "InternalFailure" | "ServiceUnavailable"
    )
}

/// True for error codes and `TransactWriteItems` cancellation reasons that say "try again": what
/// the SDK's retry classifier treats as throttling or transient (its throttling and transient code
/// lists, 5xx failures, modeled-retryable conflicts), and the cancellation reasons DynamoDB gives for
/// the same conditions (`ThrottlingError`, `ProvisionedThroughputExceeded`, `TransactionConflict`).
pub(crate) fn is_transient_code(code: &str) -> bool {
    is_server_error_code(code)
        || matches!(
            code,
            // The SDK's throttling codes.
            "Throttling"
                | "ThrottlingException"
                | "ThrottledException"
                | "RequestThrottledException"
                | "TooManyRequestsException"
                | "ProvisionedThroughputExceededException"
                | "TransactionInProgressException"
                | "RequestLimitExceeded"
                | "BandwidthLimitExceeded"
                | "LimitExceededException"
                | "RequestThrottled"
                | "SlowDown"
                | "PriorRequestNotComplete"
                // The SDK's transient codes and modeled-retryable errors.
                | "RequestTimeout"
                | "RequestTimeoutException"
                | "TransactionConflictException"
                | "ReplicatedWriteConflictException"
                // Cancellation reasons of TransactWriteItems.
                | "ThrottlingError"
                | "ProvisionedThroughputExceeded"
                | "TransactionConflict"
                | "ReplicatedWriteConflict"
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dynamodb(code: &str, ambiguous: bool) -> Error {
        Error::DynamoDb {
            operation: "UpdateItem",
            table: Some("Accounts".into()),
            key: None,
            code: Some(code.into()),
            message: Some("Transaction is ongoing for the item".into()),
            ambiguous,
            source: "refused".into(),
        }
    }

    #[test]
    fn a_conflict_in_a_transaction_says_it_is_pending_and_retryable() {
        let id = TxId::from("t-1");
        for code in ["TransactionConflictException", "TransactionConflict"] {
            let e = dynamodb(code, false).in_transaction(&id);
            assert!(matches!(e, Error::Conflict { .. }), "{e:?}");
            assert!(e.is_retryable());
            assert_eq!(e.transaction_outcome(), Some(TxOutcome::Pending));
            let text = e.to_string();
            assert!(
                text.contains("t-1") && text.contains("still pending"),
                "{text}"
            );
            assert!(text.contains("on table Accounts"), "{text}");
        }
        // Anything else, and a refusal of a retry whose first attempt may have landed, stay as
        // they are.
        assert!(matches!(
            dynamodb("ThrottlingException", false).in_transaction(&id),
            Error::DynamoDb { .. }
        ));
        assert!(matches!(
            dynamodb("TransactionConflictException", true).in_transaction(&id),
            Error::DynamoDb { .. }
        ));
    }
}
