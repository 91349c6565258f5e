//! A fair queue lock: five workers take turns in ticket order.
//!
//! Run against DynamoDB Local: `AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:8000 cargo run --example queue_lock`.

#[path = "common/mod.rs"]
mod common;

use std::time::Duration;

use dynamodb_transactions::lock::Wait;
use dynamodb_transactions::lock::queue::QueueLock;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = common::client(vec![]).await;
    let table = format!(
        "example-queue-locks-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let locks = QueueLock::builder(client.clone())
        .table(&table)
        .lease_duration(Duration::from_secs(5))
        .poll_interval(Duration::from_millis(20), Duration::from_millis(500))
        .build()?;
    locks.create_table().await?;
    println!("created lock table {table}");

    let first = locks.acquire("printer", Wait::NoWait).await?;
    println!("main holds 'printer' with ticket {}", first.fencing_token());
    match locks.try_acquire("printer").await? {
        Some(_) => println!("unexpected: acquired twice"),
        None => println!("a no-wait acquire fails while it is held"),
    }

    let mut workers = Vec::new();
    for i in 0..5 {
        let locks = locks.clone();
        workers.push(tokio::spawn(async move {
            let guard = locks
                .acquire("printer", Wait::For(Duration::from_secs(30)))
                .await?;
            println!(
                "worker {i} got ticket {} (lost: {})",
                guard.fencing_token(),
                guard.is_lost()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
            guard.release().await
        }));
        // Start them one after another so the ticket order is the start order.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("main releases");
    first.release().await?;
    for w in workers {
        w.await.expect("worker panicked")?;
    }

    let counter = locks.ticket_counter();
    println!(
        "tickets issued for 'printer' so far: {}",
        counter.current("printer").await?
    );
    client.delete_table().table_name(&table).send().await?;
    println!("deleted {table}");
    Ok(())
}
