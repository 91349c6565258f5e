//! Wiring up metrics and tracing: installs a Prometheus recorder (rendered to stdout at the end, no
//! HTTP listener) and a `tracing` fmt subscriber, runs a few transactions (a commit, a false
//! condition, a contention wound, a sweep, a queue lock) and prints every `dynamodb_tx_*` metric.
//!
//! ```text
//! AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:8000 RUST_LOG=dynamodb_transactions=debug \
//!     cargo run --example metrics
//! ```
//! The library only talks to the `metrics` facade: any recorder works the same way (StatsD,
//! OpenTelemetry, ...). Without one, every metric call is a no-op.

#[path = "common/mod.rs"]
mod common;

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use dynamodb_transactions::lock::Wait;
use dynamodb_transactions::lock::queue::QueueLock;
use dynamodb_transactions::sweeper::SweepOptions;
use dynamodb_transactions::{ContentionPolicy, TransactionManager};
use metrics_exporter_prometheus::PrometheusBuilder;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::require_endpoint("metrics");
    // Tracing: spans and events at the level RUST_LOG says (e.g. `dynamodb_transactions=debug`).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    // Metrics: a global Prometheus recorder; `handle.render()` gives the text exposition format.
    let handle = PrometheusBuilder::new()
        .set_buckets(&[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5])?
        .install_recorder()?;

    let client = common::client(vec![]).await;
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let table = format!("example-metrics-items-{suffix}");
    let manager = TransactionManager::builder(client.clone())
        .transactions_table(format!("example-metrics-tx-{suffix}"))
        .images_table(format!("example-metrics-img-{suffix}"))
        .configure(|s| s.contention = ContentionPolicy::RollBackOthers)
        .build();
    manager.create_tables().await?;
    common::create_table(&client, &table).await;
    let id = |k: &str| AttributeValue::S(k.to_string());

    // A commit (write-only: the fast path).
    manager
        .run(async |tx| {
            tx.put_item()
                .table_name(&table)
                .item("Id", id("a"))
                .item("balance", AttributeValue::N("100".into()))
                .send()
                .await?;
            Ok(())
        })
        .await?;

    // A false condition: rolled back, counted by cause.
    let failed = manager
        .run(async |tx| {
            tx.delete_item()
                .table_name(&table)
                .key("Id", id("missing"))
                .condition_expression("attribute_exists(Id)")
                .send()
                .await?;
            Ok(())
        })
        .await;
    println!("# a false condition: {}", failed.unwrap_err());

    // A wound: a second transaction needs the item the first one locked.
    let first = manager.begin();
    first
        .get_item()
        .table_name(&table)
        .key("Id", id("a"))
        .send()
        .await?;
    let second = manager.begin();
    second
        .get_item()
        .table_name(&table)
        .key("Id", id("a"))
        .send()
        .await?;
    second.commit().await?;
    println!("# the wounded one: {}", first.commit().await.unwrap_err());

    // A transaction left pending, then a sweep that finishes everything.
    let abandoned = manager.begin();
    abandoned
        .get_item()
        .table_name(&table)
        .key("Id", id("a"))
        .send()
        .await?;
    std::mem::forget(abandoned); // as if its process died (no rollback on drop)
    let report = manager
        .sweep(&SweepOptions::finish_everything_now())
        .await?;
    println!("# sweep: {} rolled back", report.rolled_back.len());

    // A queue lock taken and released.
    let locks = QueueLock::builder(client.clone())
        .table(format!("example-metrics-locks-{suffix}"))
        .build()?;
    locks.create_table().await?;
    let guard = locks
        .acquire("report", Wait::For(Duration::from_secs(10)))
        .await?;
    guard.release().await?;

    println!("{}", handle.render());

    let mut tables = vec![
        table.clone(),
        manager.transactions_table().to_string(),
        manager.images_table().to_string(),
        locks.table().to_string(),
    ];
    tables.sort();
    common::drop_tables(&client, &tables).await;
    Ok(())
}
