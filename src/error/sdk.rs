//! Errors made from the SDK's failures: the error code and message, whether the request may have
//! landed, the table and key it was about, and a transaction's conflict with another in flight.

use std::fmt;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};

use super::classify::is_server_error_code;
use super::display::one_line;
use super::{BoxError, Error, Item};
use crate::TxId;

impl Error {
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

/// The first error of type `T` in the chain that starts at `e`.
pub(super) fn find_source<'a, T: std::error::Error + 'static>(
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
