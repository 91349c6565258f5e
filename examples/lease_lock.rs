//! Lease locks: the simple mutex (try-lock, extend, unlock), fencing tokens, shared locks and a
//! payload.
//!
//! Run against DynamoDB Local: `AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:8000 cargo run --example lease_lock`.

#[path = "common/mod.rs"]
mod common;

use std::time::Duration;

use dynamodb_transactions::lock::lease::LeaseLock;
use dynamodb_transactions::lock::{Wait, create_lock_table};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = common::client(vec![]).await;
    let table = format!(
        "example-lease-locks-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    create_lock_table(&client, &table).await?;
    println!("created lock table {table}");

    // 1. The simple mutex: try-lock, extend, unlock. Renewal is manual here.
    let mutex = LeaseLock::builder(client.clone())
        .table(&table)
        .lease_duration(Duration::from_secs(10))
        .manual_heartbeat()
        .build()?;
    let guard = mutex.try_acquire("cron-job").await?.expect("free at first");
    println!(
        "try-lock: got 'cron-job' (fencing token {})",
        guard.fencing_token()
    );
    println!(
        "try-lock again: {}",
        if mutex.try_acquire("cron-job").await?.is_some() {
            "got it (wrong!)"
        } else {
            "busy"
        }
    );
    guard.heartbeat().await?;
    println!("extended: {:?} left on the lease", guard.lease_remaining());
    guard.release().await?;
    println!("unlocked");

    // 2. Fail-open locks with background heartbeats, a payload and fencing tokens.
    let locks = LeaseLock::builder(client.clone())
        .table(&table)
        .lease_duration(Duration::from_secs(5))
        .build()?;
    for round in 1..=3 {
        let g = locks
            .acquire("config", Wait::For(Duration::from_secs(10)))
            .await?;
        let seen = g
            .data()
            .map(|d| String::from_utf8_lossy(d).into_owned())
            .unwrap_or_else(|| "(none)".into());
        println!("round {round}: token {}, payload {seen}", g.fencing_token());
        g.release_with_data(Some(format!("written in round {round}").into_bytes()))
            .await?;
    }

    // 3. Shared locks: many readers or one writer.
    let r1 = locks.acquire_shared("catalog", Wait::NoWait).await?;
    let r2 = locks.acquire_shared("catalog", Wait::NoWait).await?;
    println!(
        "two readers hold 'catalog' (tokens {} and {})",
        r1.fencing_token(),
        r2.fencing_token()
    );
    println!(
        "a writer meanwhile: {}",
        if locks.try_acquire("catalog").await?.is_some() {
            "got it (wrong!)"
        } else {
            "must wait"
        }
    );
    r1.release().await?;
    r2.release().await?;
    let w = locks.acquire("catalog", Wait::NoWait).await?;
    println!(
        "after the readers left, a writer got token {}",
        w.fencing_token()
    );
    w.release().await?;

    client.delete_table().table_name(&table).send().await?;
    println!("deleted {table}");
    Ok(())
}
