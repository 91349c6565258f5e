//! What an error says to its caller: whether running the work again may succeed, whether a
//! failed request may have landed, which variant it is, and the transaction's outcome; and which
//! DynamoDB error codes mean "try again".

use super::sdk::{NeverSent, find_source};
use super::{Error, TableRole, TxOutcome};

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

    /// The DynamoDB error code, if this is a DynamoDB error.
    pub fn dynamodb_code(&self) -> Option<&str> {
        match self {
            Error::DynamoDb { code, .. } => code.as_deref(),
            _ => None,
        }
    }
}

/// Error codes of a failure inside DynamoDB: the request may have been applied.
pub(super) fn is_server_error_code(code: &str) -> bool {
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
    use crate::TxId;

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
