//! The README's quick start as a whole program: a client from the environment, the library's
//! tables and an `Accounts` table, two accounts, a transfer, and the balances read back.
//!
//! ```text
//! export AWS_ENDPOINT_URL_DYNAMODB=$(scripts/dynamodb-local start)
//! cargo run --example quickstart
//! ```
//!
//! README.md shows the code below this comment, word for word (a unit test in src/lib.rs checks
//! that they are the same).

use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_config::meta::region::RegionProviderChain;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::client::Waiters;
use aws_sdk_dynamodb::config::Credentials;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use dynamodb_transactions::{Error, TransactionManager};

#[tokio::main]
async fn main() {
    if let Err(e) = quickstart().await {
        // The library's errors are one line each, saying what failed and what it left.
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

async fn quickstart() -> Result<(), Box<dyn std::error::Error>> {
    // A client from the usual AWS configuration (environment, profile, instance role). DynamoDB
    // Local (`AWS_ENDPOINT_URL_DYNAMODB`) takes any credentials: dummy ones when none are set.
    let mut config = aws_config::defaults(BehaviorVersion::latest())
        .region(RegionProviderChain::default_provider().or_else("us-east-1"));
    if std::env::var_os("AWS_ENDPOINT_URL_DYNAMODB").is_some()
        && std::env::var_os("AWS_ACCESS_KEY_ID").is_none()
    {
        config =
            config.credentials_provider(Credentials::new("local", "local", None, None, "local"));
    }
    let client = Client::new(&config.load().await);

    // The library's two tables, `Transactions` and `TransactionImages` (idempotent), and ours.
    let manager = TransactionManager::builder(client.clone()).build();
    manager.create_tables().await?;
    create_accounts_table(&client).await?;

    // Two accounts, written in one transaction.
    manager
        .run(async |tx| {
            for (id, balance) in [("alice", "100"), ("bob", "0")] {
                tx.put_item()
                    .table_name("Accounts")
                    .item("Id", AttributeValue::S(id.into()))
                    .item("balance", AttributeValue::N(balance.into()))
                    .send()
                    .await?;
            }
            Ok(())
        })
        .await?;

    transfer(&manager, "alice", "bob", 10).await?;

    // Reads outside a transaction see committed state only (`IsolationLevel::Committed`).
    for id in ["alice", "bob"] {
        let account = manager
            .get_item()
            .table_name("Accounts")
            .key("Id", AttributeValue::S(id.into()))
            .send()
            .await?
            .item
            .unwrap_or_default();
        let balance = account.get("balance").and_then(|b| b.as_n().ok());
        println!("{id}: {}", balance.map_or("(none)", String::as_str));
    }
    Ok(())
}

/// Moves `amount` from one account to another, all or nothing. `run` commits, and runs the
/// closure again if the transaction loses contention; a false condition (too little money) is
/// an `Error::ConditionFailed` saying that the transaction was rolled back.
async fn transfer(
    manager: &TransactionManager,
    from: &str,
    to: &str,
    amount: u64,
) -> Result<(), Error> {
    let amount = AttributeValue::N(amount.to_string());
    manager
        .run(async |tx| {
            tx.update_item()
                .table_name("Accounts")
                .key("Id", AttributeValue::S(from.into()))
                .update_expression("SET balance = balance - :a")
                .condition_expression("balance >= :a")
                .expression_attribute_values(":a", amount.clone())
                .send()
                .await?;
            tx.update_item()
                .table_name("Accounts")
                .key("Id", AttributeValue::S(to.into()))
                .update_expression("SET balance = balance + :a")
                .expression_attribute_values(":a", amount.clone())
                .send()
                .await?;
            Ok(())
        })
        .await
}

/// Creates the `Accounts` table (hash key `Id`, a string) unless it exists, and waits until it
/// is active.
async fn create_accounts_table(client: &Client) -> Result<(), Box<dyn std::error::Error>> {
    let created = client
        .create_table()
        .table_name("Accounts")
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("Id")
                .attribute_type(ScalarAttributeType::S)
                .build()?,
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("Id")
                .key_type(KeyType::Hash)
                .build()?,
        )
        .send()
        .await;
    if let Err(e) = created
        && !e
            .as_service_error()
            .is_some_and(|e| e.is_resource_in_use_exception())
    {
        return Err(e.into());
    }
    client
        .wait_until_table_exists()
        .table_name("Accounts")
        .wait(Duration::from_secs(120))
        .await?;
    Ok(())
}
