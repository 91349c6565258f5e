//! What errors say: the transaction's outcome from the error alone, a one-line `Display`, and
//! whether a failed request may have landed (`ambiguous`), tested against real sockets: a refused
//! connection is not ambiguous; a request sent and then cut off, or never answered, is.
//! One file per concept; the helpers they share are here.
#[path = "../common/mod.rs"]
mod common;

mod ambiguous_requests;
mod display;
mod lost_endpoint;
mod missing_tables;
mod outcomes;

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use dynamodb_transactions::{Error, TransactionManager};

/// A client for `endpoint` with the SDK's standard retries (3 attempts, short backoff) and a short
/// attempt timeout.
fn client_for(endpoint: &str) -> Client {
    let conf = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("local", "local", None, None, "static"))
        .retry_config(
            RetryConfig::standard()
                .with_max_attempts(3)
                .with_initial_backoff(Duration::from_millis(10)),
        )
        .timeout_config(
            TimeoutConfig::builder()
                .operation_attempt_timeout(Duration::from_millis(700))
                .build(),
        )
        .build();
    Client::from_conf(conf)
}

fn manager_for(endpoint: &str) -> TransactionManager {
    TransactionManager::builder(client_for(endpoint))
        .transactions_table("Tx")
        .images_table("TxImages")
        .build()
}
fn ambiguous(e: &Error) -> bool {
    match e {
        Error::DynamoDb { ambiguous, .. } => *ambiguous,
        other => panic!("expected a DynamoDB error, got {other:?}"),
    }
}

fn assert_one_readable_line(e: &Error) {
    let line = e.to_string();
    assert!(!line.contains('\n'), "{line}");
    assert!(!line.contains('{'), "a debug dump: {line}");
    assert!(!line.contains("DispatchFailure("), "a debug dump: {line}");
    assert!(
        std::error::Error::source(e).is_some(),
        "the SDK error stays in the source chain"
    );
}
