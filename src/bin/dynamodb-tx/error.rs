//! Errors for the operator: what happened and what to do.

use dynamodb_transactions::Error;

use crate::{Cli, Ctx};

/// An error for the operator: what happened and what to do.
pub struct CliError {
    pub message: String,
    pub hint: Option<String>,
    pub code: u8,
}

impl CliError {
    pub fn new(message: impl Into<String>, hint: Option<String>) -> CliError {
        CliError {
            message: message.into(),
            hint,
            code: 1,
        }
    }
}

pub type CliResult<T = ()> = Result<T, CliError>;

/// Turns a library error into a message and a hint.
pub fn explain(ctx: &Ctx, e: Error) -> CliError {
    let cli = &ctx.cli;
    let hint = match &e {
        Error::TableNotFound { table } => Some(if *table == cli.transactions_table
            || *table == cli.images_table
        {
            format!(
                "create the tables with `dynamodb-tx tables create`, or name the right ones with \
                 --transactions-table/--images-table (DYNAMODB_TX_TRANSACTIONS_TABLE, \
                 DYNAMODB_TX_IMAGES_TABLE); looking at {}",
                endpoint_name(cli)
            )
        } else {
            format!("check the table name; looking at {}", endpoint_name(cli))
        }),
        Error::TableMismatch { .. } => Some(
            "another table has this name: pick other names with --transactions-table/--images-table"
                .into(),
        ),
        Error::TransactionNotFound { tx_id } => Some(format!(
            "no record {tx_id} in table {}: check the id with `dynamodb-tx tx list` (finalized records may have been deleted)",
            cli.transactions_table
        )),
        Error::AlreadyCommitted { .. } => {
            Some("a committed transaction cannot be rolled back".into())
        }
        Error::RolledBack { .. } => Some("a rolled-back transaction cannot be committed".into()),
        Error::UnknownOutcome { .. } | Error::Undetermined { .. } => {
            Some("run `dynamodb-tx tx show ID` later to learn the outcome".into())
        }
        Error::ItemLocked { owner, .. } => Some(format!(
            "another transaction holds the item: inspect it with `dynamodb-tx tx show {owner}`, or run `dynamodb-tx sweep`"
        )),
        Error::DynamoDb { code, message, .. } => {
            let msg = message.as_deref().unwrap_or_default().to_lowercase();
            match code.as_deref() {
                Some("ResourceNotFoundException") => Some(format!(
                    "a table is missing: run `dynamodb-tx tables create` or check the table names; looking at {}",
                    endpoint_name(cli)
                )),
                Some(
                    "AccessDeniedException"
                    | "UnrecognizedClientException"
                    | "InvalidSignatureException"
                    | "ExpiredTokenException",
                ) => Some(
                    "check your AWS credentials and IAM permissions (docs/OPERATIONS.md lists the ones each command needs)"
                        .into(),
                ),
                Some(
                    "ThrottlingException"
                    | "ProvisionedThroughputExceededException"
                    | "RequestLimitExceeded",
                ) => Some("DynamoDB throttled the requests: try again, or use fewer --segments".into()),
                _ if msg.contains("credential") => Some(
                    "no AWS credentials found: set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (any value works for DynamoDB Local)"
                        .into(),
                ),
                None => Some(format!(
                    "cannot reach DynamoDB at {}: check --endpoint (AWS_ENDPOINT_URL_DYNAMODB), --region and the network, or start DynamoDB Local",
                    endpoint_name(cli)
                )),
                _ => None,
            }
        }
        _ => None,
    };
    CliError::new(e.to_string(), hint)
}

pub fn endpoint_name(cli: &Cli) -> String {
    match (&cli.endpoint, &cli.region) {
        (Some(e), _) => e.clone(),
        (None, Some(r)) => format!("DynamoDB in {r}"),
        (None, None) => "DynamoDB (default region)".into(),
    }
}
