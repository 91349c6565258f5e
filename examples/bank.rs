//! Random money transfers between accounts from concurrent coordinators, some of which crash on
//! purpose mid-transaction (a fault injector kills their client at a random DynamoDB request). Then
//! every abandoned transaction is recovered, and the tables are scanned: the total must be conserved
//! and nothing left locked.
//!
//! ```text
//! cargo run --example bank -- --accounts 20 --workers 8 --transfers 400 --crash-rate 0.1
//! ```
//! The endpoint comes from `AWS_ENDPOINT_URL_DYNAMODB` (`./scripts/demo` starts DynamoDB Local).
//! The last line printed is a JSON summary.

#[path = "common/mod.rs"]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use clap::Parser;
use dynamodb_transactions::fault::{FaultInjector, FaultMode};
use dynamodb_transactions::{Error, TransactionManager, TxId, TxState};
use rand::{Rng, SeedableRng};
use tokio::sync::Mutex;

#[derive(Parser, Debug, Clone)]
#[command(about = "Concurrent bank transfers with crashing coordinators")]
struct Args {
    /// Number of accounts.
    #[arg(long, default_value_t = 20)]
    accounts: usize,
    /// Concurrent coordinators.
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// Transfers in all.
    #[arg(long, default_value_t = 400)]
    transfers: usize,
    /// Fraction of transfers whose coordinator is abandoned at a random protocol step.
    #[arg(long, default_value_t = 0.1)]
    crash_rate: f64,
    /// Random seed.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Prefix of the table names (default: bank-<random>).
    #[arg(long)]
    table_prefix: Option<String>,
    /// Keep the tables afterwards.
    #[arg(long)]
    keep_tables: bool,
}

const START_BALANCE: i64 = 1000;

async fn client(faults: Option<FaultInjector>) -> Client {
    common::client(faults.into_iter().map(common::shared).collect()).await
}

fn manager(client: Client, prefix: &str) -> TransactionManager {
    TransactionManager::builder(client)
        .transactions_table(format!("{prefix}-tx"))
        .images_table(format!("{prefix}-img"))
        .configure(|s| s.rollback_on_drop = false)
        .build()
}

fn id(i: usize) -> AttributeValue {
    AttributeValue::S(format!("acct{i:04}"))
}

fn balance(item: &dynamodb_transactions::Item) -> i64 {
    item.get("balance")
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[derive(Default)]
struct Counts {
    committed: AtomicU64,
    rolled_back: AtomicU64,
    abandoned: AtomicU64,
    skipped: AtomicU64,
}

/// One transfer attempt. Returns whether it committed.
async fn transfer(
    m: &TransactionManager,
    table: &str,
    from: usize,
    to: usize,
    amount: i64,
) -> Result<bool, (TxId, Error)> {
    let tx = m.begin();
    let txid = tx.id().clone();
    let r = async {
        let a = tx
            .get_item()
            .table_name(table)
            .key("Id", id(from))
            .send()
            .await?;
        let b = tx
            .get_item()
            .table_name(table)
            .key("Id", id(to))
            .send()
            .await?;
        let (a, b) = (
            balance(a.item().expect("account exists")),
            balance(b.item().expect("account exists")),
        );
        if a < amount {
            return Ok(false);
        }
        tx.update_item()
            .table_name(table)
            .key("Id", id(from))
            .update_expression("SET balance = :v")
            .expression_attribute_values(":v", AttributeValue::N((a - amount).to_string()))
            .send()
            .await?;
        tx.update_item()
            .table_name(table)
            .key("Id", id(to))
            .update_expression("SET balance = :v")
            .expression_attribute_values(":v", AttributeValue::N((b + amount).to_string()))
            .send()
            .await?;
        Ok::<_, Error>(true)
    }
    .await;
    match r {
        Ok(true) => tx.commit().await.map(|_| true).map_err(|e| (txid, e)),
        Ok(false) => tx.rollback().await.map(|_| false).map_err(|e| (txid, e)),
        Err(e) => {
            tx.abandon();
            Err((txid, e))
        }
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    common::require_endpoint("bank");
    let prefix = args
        .table_prefix
        .clone()
        .unwrap_or_else(|| format!("bank-{}", &uuid::Uuid::new_v4().simple().to_string()[..6]));
    let table = format!("{prefix}-accounts");
    let admin = client(None).await;
    let setup = manager(admin.clone(), &prefix);
    setup
        .create_tables()
        .await
        .expect("create the transaction tables");
    common::create_table(&admin, &table).await;
    for i in 0..args.accounts {
        admin
            .put_item()
            .table_name(&table)
            .item("Id", id(i))
            .item("balance", AttributeValue::N(START_BALANCE.to_string()))
            .send()
            .await
            .expect("seed account");
    }
    let total_before: i64 = common::scan(&admin, &table).await.iter().map(balance).sum();
    println!(
        "bank: {} accounts in {table}, total {total_before}",
        args.accounts
    );
    println!(
        "bank: {} transfers by {} workers, crash rate {} (seed {})",
        args.transfers, args.workers, args.crash_rate, args.seed
    );

    let counts = Arc::new(Counts::default());
    let abandoned: Arc<Mutex<Vec<TxId>>> = Arc::default();
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut handles = Vec::new();
    for w in 0..args.workers {
        let faults = FaultInjector::new();
        let m = manager(client(Some(faults.clone())).await, &prefix);
        let (counts, abandoned, next, table, args) = (
            counts.clone(),
            abandoned.clone(),
            next.clone(),
            table.clone(),
            args.clone(),
        );
        handles.push(tokio::spawn(async move {
            let mut rng =
                rand::rngs::StdRng::seed_from_u64(args.seed.wrapping_mul(1000) + w as u64);
            while (next.fetch_add(1, Ordering::SeqCst) as usize) < args.transfers {
                let from = rng.random_range(0..args.accounts);
                let to = (from + rng.random_range(1..args.accounts.max(2))) % args.accounts;
                let amount = rng.random_range(1..100);
                let crash = rng.random_bool(args.crash_rate.clamp(0.0, 1.0));
                if crash {
                    // A transfer makes 6 requests (record, lock, append, lock, append, commit): die at one.
                    let mode = if rng.random_bool(0.5) {
                        FaultMode::BeforeSend
                    } else {
                        FaultMode::AfterSend
                    };
                    faults.crash_at(rng.random_range(1..=6), mode);
                }
                let mut attempts = 0;
                loop {
                    attempts += 1;
                    match transfer(&m, &table, from, to, amount).await {
                        Ok(true) => {
                            counts.committed.fetch_add(1, Ordering::SeqCst);
                            break;
                        }
                        Ok(false) => {
                            counts.skipped.fetch_add(1, Ordering::SeqCst);
                            break;
                        }
                        Err((txid, e)) => {
                            if faults.struck() {
                                // This coordinator "died": its transaction is left for recovery.
                                counts.abandoned.fetch_add(1, Ordering::SeqCst);
                                abandoned.lock().await.push(txid);
                                break;
                            }
                            if e.is_rolled_back() || e.is_retryable() {
                                counts.rolled_back.fetch_add(1, Ordering::SeqCst);
                                if attempts < 200 {
                                    continue;
                                }
                            }
                            panic!("transfer failed: {e}");
                        }
                    }
                }
                faults.disarm();
            }
        }));
    }
    for h in handles {
        h.await.expect("worker");
    }
    let elapsed = started.elapsed();

    // Recovery: finish or undo every abandoned transaction from a fresh coordinator.
    let recovery = manager(admin.clone(), &prefix);
    let ids = abandoned.lock().await.clone();
    let (mut rec_committed, mut rec_rolled_back) = (0, 0);
    for txid in &ids {
        match recovery
            .transaction_state(txid)
            .await
            .expect("read record")
            .map(|s| s.state)
        {
            None => rec_rolled_back += 1, // crashed before its record existed: nothing happened
            Some(TxState::Pending) => match recovery.rollback_transaction(txid).await {
                Ok(()) => rec_rolled_back += 1,
                Err(Error::AlreadyCommitted { .. }) => rec_committed += 1,
                Err(e) => panic!("recovering {txid}: {e}"),
            },
            Some(state) => {
                recovery.complete_transaction(txid).await.expect("complete");
                if state == TxState::Committed {
                    rec_committed += 1;
                } else {
                    rec_rolled_back += 1;
                }
            }
        }
    }

    let items = common::scan(&admin, &table).await;
    let total_after: i64 = items.iter().map(balance).sum();
    let locked = items
        .iter()
        .filter(|i| i.keys().any(|k| k.starts_with("_Tx")))
        .count();
    let images = common::scan(&admin, &format!("{prefix}-img")).await.len();
    let committed = counts.committed.load(Ordering::SeqCst) + rec_committed;
    let rolled_back = counts.rolled_back.load(Ordering::SeqCst) + rec_rolled_back;
    let abandoned_n = counts.abandoned.load(Ordering::SeqCst);
    println!(
        "bank: {} committed, {} skipped (insufficient funds), {} rolled back by contention, {} abandoned in {:.1}s",
        counts.committed.load(Ordering::SeqCst),
        counts.skipped.load(Ordering::SeqCst),
        counts.rolled_back.load(Ordering::SeqCst),
        abandoned_n,
        elapsed.as_secs_f64()
    );
    println!(
        "bank: recovery committed {rec_committed} and rolled back {rec_rolled_back} abandoned transactions"
    );
    println!(
        "bank: total before {total_before}, after {total_after} ({}); {locked} items locked, {images} images left",
        if total_before == total_after {
            "conserved"
        } else {
            "NOT CONSERVED"
        }
    );
    if !args.keep_tables {
        for t in [
            table.clone(),
            format!("{prefix}-tx"),
            format!("{prefix}-img"),
        ] {
            let _ = admin.delete_table().table_name(t).send().await;
        }
    }
    println!(
        "{{\"accounts\":{},\"total_before\":{total_before},\"total_after\":{total_after},\"committed\":{committed},\"rolled_back\":{rolled_back},\"abandoned\":{abandoned_n},\"locked_items_left\":{locked},\"images_left\":{images}}}",
        args.accounts
    );
    if total_before != total_after || locked > 0 || images > 0 {
        std::process::exit(1);
    }
}
