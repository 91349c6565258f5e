//! A projection kept from the change feed: orders are written in transactions (moving orders
//! between customers, some rolled back), and a consumer keeps each customer's order total in a
//! second table from `dynamodb_transactions::feed`, applying each committed transaction to the
//! projection in one `TransactWriteItems` (so the projection never shows half of one) together
//! with a marker of the transaction, which makes a redelivery after a restart a no-op. The
//! consumer checkpoints in a table after every change. At the end the projection is compared with
//! the orders.
//!
//! ```text
//! cargo run --example feed_projection
//! ```
//! The endpoint comes from `AWS_ENDPOINT_URL_DYNAMODB`. The last line printed is a JSON summary.

#[path = "common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};
use dynamodb_transactions::feed::{Change, ChangeFeed, TableCheckpoint};
use dynamodb_transactions::{Item, TransactionManager};
use rand::{Rng, SeedableRng};

/// The customer and amount of an order image.
fn order(item: &Option<Item>) -> Option<(String, i64)> {
    let item = item.as_ref()?;
    let customer = item.get("customer")?.as_s().ok()?.clone();
    let amount = item.get("amount")?.as_n().ok()?.parse().ok()?;
    Some((customer, amount))
}

/// What a change does to the customers' totals.
fn deltas(change: &Change) -> HashMap<String, i64> {
    let mut d = HashMap::new();
    for it in change.items() {
        if let Some((c, a)) = order(&it.before) {
            *d.entry(c).or_insert(0) -= a;
        }
        if let Some((c, a)) = order(&it.after) {
            *d.entry(c).or_insert(0) += a;
        }
    }
    d.retain(|_, v| *v != 0);
    d
}

/// Applies a change to the projection: every total, plus a marker of the change, in one
/// `TransactWriteItems`; the marker's condition makes a second delivery write nothing.
async fn project(client: &Client, totals: &str, change: &Change) -> bool {
    let marker = match change {
        Change::Transaction { id, .. } => format!("applied#{id}"),
        // A single write has no id: this projection does not expect any.
        _ => return false,
    };
    let mut actions = vec![
        TransactWriteItem::builder()
            .put(
                Put::builder()
                    .table_name(totals)
                    .item("Id", AttributeValue::S(marker))
                    .condition_expression("attribute_not_exists(Id)")
                    .build()
                    .expect("complete"),
            )
            .build(),
    ];
    for (customer, delta) in deltas(change) {
        actions.push(
            TransactWriteItem::builder()
                .update(
                    Update::builder()
                        .table_name(totals)
                        .key("Id", AttributeValue::S(customer))
                        .update_expression("ADD #t :d")
                        .expression_attribute_names("#t", "total")
                        .expression_attribute_values(":d", AttributeValue::N(delta.to_string()))
                        .build()
                        .expect("complete"),
                )
                .build(),
        );
    }
    match client
        .transact_write_items()
        .set_transact_items(Some(actions))
        .send()
        .await
    {
        Ok(_) => true,
        // The marker exists: delivered before, already applied.
        Err(e) if format!("{e:?}").contains("ConditionalCheckFailed") => false,
        Err(e) => panic!(
            "projection: {}",
            aws_sdk_dynamodb::error::DisplayErrorContext(e)
        ),
    }
}

#[tokio::main]
async fn main() {
    common::require_endpoint("feed_projection");
    let client = common::client(vec![]).await;
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let (orders, totals, checkpoints) = (
        format!("Orders-{suffix}"),
        format!("CustomerTotals-{suffix}"),
        format!("FeedCheckpoints-{suffix}"),
    );
    let manager = TransactionManager::builder(client.clone())
        .transactions_table(format!("Transactions-{suffix}"))
        .images_table(format!("TransactionImages-{suffix}"))
        // Default settings: write-only transactions commit on the fast path, and mark their
        // writes for the feed because the orders table has a stream by the time this manager
        // first uses it (`Settings::fast_path_stamps`).
        .build();
    manager.create_tables().await.expect("create_tables");
    common::create_table(&client, &orders).await;
    common::create_table(&client, &totals).await;
    // The feed reads the orders' stream: both images of every write.
    common::enable_stream(&client, &orders).await;

    // The workload: orders created and moved between customers, one in four rolled back.
    let customers = ["ana", "ben", "cid", "dot"];
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let (mut committed, mut rolled_back) = (0, 0);
    for i in 0..40 {
        let tx = manager.begin();
        let mut ids: Vec<String> = (0..rng.random_range(1..=3))
            .map(|_| format!("order-{}", rng.random_range(0..12)))
            .collect();
        ids.sort();
        ids.dedup();
        for id in ids {
            tx.put_item()
                .table_name(&orders)
                .item("Id", AttributeValue::S(id))
                .item(
                    "customer",
                    AttributeValue::S(customers[rng.random_range(0..4)].into()),
                )
                .item(
                    "amount",
                    AttributeValue::N(rng.random_range(1..100).to_string()),
                )
                .send()
                .await
                .expect("put");
        }
        if i % 4 == 3 {
            tx.rollback().await.expect("rollback");
            rolled_back += 1;
        } else {
            tx.commit().await.expect("commit");
            committed += 1;
        }
    }

    // The consumer, as it would run in its own process: from the start, checkpointing.
    let checkpoint = TableCheckpoint::new(client.clone(), &checkpoints, "customer-totals");
    checkpoint.create_table().await.expect("checkpoint table");
    // The Streams client from the same configuration as the DynamoDB one: DynamoDB Local serves
    // its streams on its own endpoint.
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
    if let Ok(ep) = std::env::var("AWS_ENDPOINT_URL_DYNAMODB") {
        loader = loader.endpoint_url(ep);
    }
    if std::env::var("AWS_ACCESS_KEY_ID").is_err() {
        loader = loader.credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "local", "local", None, None, "static",
        ));
    }
    if std::env::var("AWS_REGION").is_err() {
        loader = loader.region(aws_sdk_dynamodb::config::Region::new("us-east-1"));
    }
    let sdk = loader.load().await;
    let mut feed = ChangeFeed::builder(client.clone())
        .table(&orders)
        .transactions_table(manager.transactions_table())
        .streams_client(aws_sdk_dynamodbstreams::Client::new(&sdk))
        .from_start()
        .checkpoint(checkpoint)
        .poll_interval(Duration::from_millis(200))
        .stop_when_idle(Duration::from_secs(3))
        .build()
        .expect("feed");
    let (mut delivered, mut applied, mut singles) = (0, 0, 0);
    while let Some(change) = feed.next().await.expect("feed") {
        delivered += 1;
        // Every write here is a transaction's: the fast path's too come whole.
        singles += usize::from(matches!(change, Change::Single(_)));
        if project(&client, &totals, &change).await {
            applied += 1;
        }
        feed.checkpoint().await.expect("checkpoint");
    }

    // The projection agrees with the orders.
    let mut expected: HashMap<String, i64> = HashMap::new();
    for item in common::scan(&client, &orders).await {
        if let Some((c, a)) = order(&Some(item)) {
            *expected.entry(c).or_insert(0) += a;
        }
    }
    let mut projected: HashMap<String, i64> = HashMap::new();
    for item in common::scan(&client, &totals).await {
        let id = item["Id"].as_s().expect("S").clone();
        if let Some(AttributeValue::N(t)) = item.get("total")
            && !id.starts_with("applied#")
        {
            projected.insert(id, t.parse().expect("a number"));
        }
    }
    projected.retain(|_, v| *v != 0);
    let agrees = projected == expected;
    for c in customers {
        println!(
            "{c}: {} (orders say {})",
            projected.get(c).unwrap_or(&0),
            expected.get(c).unwrap_or(&0)
        );
    }
    let tables = [
        orders,
        totals,
        checkpoints,
        manager.transactions_table().to_string(),
        manager.images_table().to_string(),
    ];
    common::drop_tables(&client, &tables).await;
    println!(
        "{}",
        serde_json::json!({
            "committed": committed,
            "rolled_back": rolled_back,
            "delivered": delivered,
            "applied": applied,
            "single_changes": singles,
            "projection_agrees": agrees,
        })
    );
    if !agrees || singles > 0 {
        std::process::exit(1);
    }
}
