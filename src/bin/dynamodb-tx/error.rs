//! Errors for the operator: what happened and what to do, on one line, with an exit code per class.

use std::error::Error as StdError;
use std::fmt;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::client::result::ConnectorError;
use dynamodb_transactions::Error;

use crate::{Cli, Ctx};

/// The exit codes of `dynamodb-tx`, one per class of outcome. Documented in `--help`
/// ([`EXIT_CODES_HELP`]) and in docs/OPERATIONS.md.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Exit {
    /// Any other failure: DynamoDB refused or failed the operation (e.g. rolling back a committed
    /// transaction, throttling), or the outcome is undetermined.
    Other = 1,
    /// Bad arguments: an unknown flag or command, a bad duration, a missing argument.
    Usage = 2,
    /// `sweep` finished but reported errors or applied orphan locks that need an operator.
    NeedsOperator = 3,
    /// The transaction id names no record.
    NotFound = 4,
    /// A table is missing, or has the wrong keys.
    Tables = 5,
    /// DynamoDB cannot be reached or refused the caller: no endpoint answering, no region, no or
    /// invalid credentials, access denied.
    Unreachable = 6,
}

/// The exit code section of `--help`.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
    0  success
    1  the operation failed (DynamoDB refused it, throttling, undetermined outcome)
    2  bad arguments (unknown flag or command, bad duration)
    3  sweep finished but reported errors or applied orphan locks (need an operator)
    4  transaction not found
    5  table missing or with the wrong keys (see `dynamodb-tx tables create`)
    6  cannot reach DynamoDB: endpoint, region, credentials or permissions
  141  the reader of the output went away (`dynamodb-tx ... | head`), as with SIGPIPE

Errors are one line on stderr: what failed, then what to do. See docs/OPERATIONS.md.";

/// An error for the operator: what happened and what to do.
pub struct CliError {
    pub message: String,
    pub hint: Option<String>,
    pub exit: Exit,
}

impl CliError {
    /// An error of class [`Exit::Other`].
    pub fn new(message: impl Into<String>, hint: Option<String>) -> CliError {
        CliError {
            message: message.into(),
            hint,
            exit: Exit::Other,
        }
    }

    /// The same error with another exit class.
    pub fn exit(mut self, exit: Exit) -> CliError {
        self.exit = exit;
        self
    }
}

/// `message; hint`, on one line.
impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let line = match &self.hint {
            Some(h) => format!("{}; {h}", self.message),
            None => self.message.clone(),
        };
        f.write_str(&one_line(&line))
    }
}

pub type CliResult<T = ()> = Result<T, CliError>;

/// Collapses line breaks and runs of spaces.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The innermost error's message: for a transport failure the useful part (`Connection refused (os
/// error 111)`, `no providers in chain provided credentials`).
pub fn root_cause(e: &(dyn StdError + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// True when some error in the chain says so.
fn chain_mentions(e: &(dyn StdError + 'static), word: &str) -> bool {
    let mut cur = Some(e);
    while let Some(c) = cur {
        if c.to_string().to_lowercase().contains(word) {
            return true;
        }
        cur = c.source();
    }
    false
}

/// The connector error in the chain, if the request failed before DynamoDB answered.
fn connector_error<'a>(e: &'a (dyn StdError + 'static)) -> Option<&'a ConnectorError> {
    let mut cur = Some(e);
    while let Some(c) = cur {
        if let Some(ce) = c.downcast_ref::<ConnectorError>() {
            return Some(ce);
        }
        cur = c.source();
    }
    None
}

pub fn endpoint_name(cli: &Cli) -> String {
    match (&cli.endpoint, &cli.region) {
        (Some(e), _) => e.clone(),
        (None, Some(r)) => format!("DynamoDB in {r}"),
        (None, None) => "DynamoDB (default region)".into(),
    }
}

/// The hint for missing credentials.
pub fn credentials_hint() -> String {
    let profile = std::env::var("AWS_PROFILE")
        .ok()
        .filter(|p| !p.is_empty())
        .map(|p| {
            format!(" (AWS_PROFILE={p} gave none: is it in ~/.aws/config or ~/.aws/credentials?)")
        })
        .unwrap_or_default();
    format!(
        "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE to a configured profile{profile}; \
         any values work for DynamoDB Local"
    )
}

/// A failed DynamoDB request: `code`/`message` of a service error, else `source` says why no
/// answer came. `table` names the table when the caller knows it.
fn dynamodb_failure(
    cli: &Cli,
    operation: &str,
    table: Option<&str>,
    code: Option<&str>,
    message: Option<&str>,
    source: &(dyn StdError + 'static),
) -> CliError {
    let on = table.map(|t| format!(" on {t}")).unwrap_or_default();
    let msg = message.unwrap_or("no message");
    match code {
        Some("ResourceNotFoundException") => {
            let what = match table {
                Some(t) => format!("table {t} does not exist ({operation}: {msg})"),
                None => format!("a table does not exist ({operation}: {msg})"),
            };
            CliError::new(
                what,
                Some(format!(
                    "create the tables with `dynamodb-tx tables create`, or name the right ones with \
                     --transactions-table/--images-table (now {} and {}); looking at {}",
                    cli.transactions_table,
                    cli.images_table,
                    endpoint_name(cli)
                )),
            )
            .exit(Exit::Tables)
        }
        Some(
            c @ ("UnrecognizedClientException"
            | "InvalidSignatureException"
            | "ExpiredTokenException"
            | "MissingAuthenticationTokenException"),
        ) => CliError::new(
            format!("DynamoDB rejected the credentials ({operation}{on}: {c}: {msg})"),
            Some(format!(
                "check or renew your AWS credentials (AWS_PROFILE, AWS_ACCESS_KEY_ID); looking at {}",
                endpoint_name(cli)
            )),
        )
        .exit(Exit::Unreachable),
        Some(c @ "AccessDeniedException") => CliError::new(
            format!("access denied ({operation}{on}: {c}: {msg})"),
            Some(
                "grant the IAM actions this command needs (docs/OPERATIONS.md lists them)".into(),
            ),
        )
        .exit(Exit::Unreachable),
        Some(
            c @ ("ThrottlingException"
            | "ProvisionedThroughputExceededException"
            | "RequestLimitExceeded"),
        ) => CliError::new(
            format!("DynamoDB throttled the requests ({operation}{on}: {c})"),
            Some("try again later, or use fewer --segments".into()),
        ),
        Some(c) => CliError::new(format!("DynamoDB {operation}{on} failed ({c}): {msg}"), None),
        None => {
            let credentials = connector_error(source).is_some_and(|c| c.is_other())
                && chain_mentions(source, "credential");
            if credentials {
                CliError::new(
                    format!("no AWS credentials found ({})", root_cause(source)),
                    Some(credentials_hint()),
                )
            } else {
                CliError::new(
                    format!(
                        "cannot reach DynamoDB at {} ({operation}: {})",
                        endpoint_name(cli),
                        root_cause(source)
                    ),
                    Some(
                        "check --endpoint (AWS_ENDPOINT_URL_DYNAMODB), --region (AWS_REGION) and \
                         the network, or start DynamoDB Local"
                            .into(),
                    ),
                )
            }
            .exit(Exit::Unreachable)
        }
    }
}

/// Turns an error of a request the CLI sends itself into one line and an exit class.
pub fn sdk_error<E, R>(ctx: &Ctx, operation: &str, table: &str, e: SdkError<E, R>) -> CliError
where
    E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
    R: fmt::Debug + Send + Sync + 'static,
{
    let (code, message) = match &e {
        SdkError::ServiceError(s) => (
            s.err().code().map(String::from),
            s.err().message().map(String::from),
        ),
        _ => (None, None),
    };
    dynamodb_failure(
        &ctx.cli,
        operation,
        Some(table),
        code.as_deref(),
        message.as_deref(),
        &e,
    )
}

/// Turns a library error into one line and an exit class.
pub fn explain(ctx: &Ctx, e: &Error) -> CliError {
    let cli = &ctx.cli;
    let hint = match e {
        Error::TableNotFound { table, .. } => {
            let hint = if *table == cli.transactions_table || *table == cli.images_table {
                format!(
                    "create the tables with `dynamodb-tx tables create`, or name the right ones with \
                     --transactions-table/--images-table (DYNAMODB_TX_TRANSACTIONS_TABLE, \
                     DYNAMODB_TX_IMAGES_TABLE); looking at {}",
                    endpoint_name(cli)
                )
            } else {
                format!("check the table name; looking at {}", endpoint_name(cli))
            };
            // The library's message names `create_tables()`, for programs; the hint says what to
            // run here.
            return CliError::new(format!("table {table} does not exist"), Some(hint))
                .exit(Exit::Tables);
        }
        Error::TableMismatch { .. } => {
            return CliError::new(
                e.to_string(),
                Some(
                    "another table has this name: pick other names with \
                     --transactions-table/--images-table"
                        .into(),
                ),
            )
            .exit(Exit::Tables);
        }
        Error::TransactionNotFound { tx_id } => {
            return CliError::new(
                e.to_string(),
                Some(format!(
                    "check the id with `dynamodb-tx tx list` (no record {tx_id} in table {}; \
                     finalized records may have been deleted, and a transaction that wrote \
                     nothing has none, e.g. one whose single commit request was refused on a \
                     condition)",
                    cli.transactions_table
                )),
            )
            .exit(Exit::NotFound);
        }
        Error::DynamoDb {
            operation,
            code,
            message,
            source,
            ..
        } => {
            return dynamodb_failure(
                cli,
                operation,
                None,
                code.as_deref(),
                message.as_deref(),
                source.as_ref(),
            );
        }
        Error::AlreadyCommitted { .. } => {
            Some("a committed transaction cannot be rolled back".into())
        }
        Error::RolledBack { .. } => Some("a rolled-back transaction cannot be committed".into()),
        Error::UnknownOutcome { .. } | Error::Undetermined { .. } => {
            Some("run `dynamodb-tx tx show ID` later to learn the outcome".into())
        }
        Error::ItemLocked { owner, .. } => Some(format!(
            "another transaction holds the item: inspect it with `dynamodb-tx tx show {owner}`, \
             or run `dynamodb-tx sweep`"
        )),
        _ => None,
    };
    CliError::new(e.to_string(), hint)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_one_line() {
        let e = CliError::new("a\n  b", Some("c\nd".into()));
        assert_eq!(e.to_string(), "a b; c d");
    }
}
