//! Contention benchmark: W coordinators run `run(...)` transfers over a few hot accounts, under the
//! ordered (ticket) contention policy and under the Java library's roll-back-others policy, against
//! the same DynamoDB in one run.
//!
//! ```text
//! cargo run --release --example contention -- --workers 16 --accounts 4 --transfers 400
//! ```
//! The last line printed is a JSON object with the figures of both policies.

#[path = "common/mod.rs"]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use clap::Parser;
use dynamodb_transactions::{ContentionPolicy, Error, TransactionManager};
use rand::{Rng, SeedableRng};
use tokio::sync::Mutex;

#[derive(Parser, Debug, Clone)]
#[command(about = "Goodput and fairness of the contention policies")]
struct Args {
    /// Concurrent coordinators.
    #[arg(long, default_value_t = 16)]
    workers: usize,
    /// Hot accounts.
    #[arg(long, default_value_t = 4)]
    accounts: usize,
    /// Transfers per policy.
    #[arg(long, default_value_t = 400)]
    transfers: usize,
    /// Random seed.
    #[arg(long, default_value_t = 11)]
    seed: u64,
    /// Ordered policy: take tickets when transactions begin rather than at first contention.
    #[arg(long)]
    ticket_at_begin: bool,
}

#[derive(Debug)]
struct Figures {
    name: &'static str,
    tx_per_s: f64,
    attempts_mean: f64,
    attempts_p99: u32,
    attempts_max: u32,
    p50_ms: f64,
    p99_ms: f64,
    retries: u64,
    total_conserved: bool,
}

fn id(i: usize) -> AttributeValue {
    AttributeValue::S(format!("hot{i}"))
}

fn balance(item: &dynamodb_transactions::Item) -> i64 {
    item["balance"]
        .as_n()
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

async fn measure(args: &Args, name: &'static str, policy: ContentionPolicy) -> Figures {
    let prefix = format!(
        "cont-{}-{}",
        name.replace('_', ""),
        &uuid::Uuid::new_v4().simple().to_string()[..6]
    );
    let table = format!("{prefix}-accounts");
    let admin = common::client(vec![]).await;
    let mgr = |c| {
        TransactionManager::builder(c)
            .transactions_table(format!("{prefix}-tx"))
            .images_table(format!("{prefix}-img"))
            .configure(|s| {
                s.contention = policy;
                s.run_attempts = 10_000;
                s.lock_wait = Duration::from_secs(30);
            })
            .build()
    };
    mgr(admin.clone()).create_tables().await.expect("tables");
    common::create_table(&admin, &table).await;
    for i in 0..args.accounts {
        admin
            .put_item()
            .table_name(&table)
            .item("Id", id(i))
            .item("balance", AttributeValue::N("1000".into()))
            .send()
            .await
            .expect("seed");
    }
    let next = Arc::new(AtomicU64::new(0));
    let attempts_all: Arc<Mutex<Vec<u32>>> = Arc::default();
    let latencies: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let started = Instant::now();
    let mut handles = Vec::new();
    for w in 0..args.workers {
        let m = mgr(common::client(vec![]).await);
        let (next, attempts_all, latencies, table, args) = (
            next.clone(),
            attempts_all.clone(),
            latencies.clone(),
            table.clone(),
            args.clone(),
        );
        handles.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed * 100 + w as u64);
            while (next.fetch_add(1, Ordering::SeqCst) as usize) < args.transfers {
                let from = rng.random_range(0..args.accounts);
                let to = (from + rng.random_range(1..args.accounts)) % args.accounts;
                let amount: i64 = rng.random_range(1..10);
                let attempts = Arc::new(AtomicU32::new(0));
                let t0 = Instant::now();
                let (table, attempts2) = (table.clone(), attempts.clone());
                m.run(async move |tx| {
                    attempts2.fetch_add(1, Ordering::SeqCst);
                    // Lock in a canonical order (lowest key first), as the protocol's design advises.
                    let (lo, hi) = (from.min(to), from.max(to));
                    let x = tx
                        .get_item()
                        .table_name(&table)
                        .key("Id", id(lo))
                        .send()
                        .await?;
                    let y = tx
                        .get_item()
                        .table_name(&table)
                        .key("Id", id(hi))
                        .send()
                        .await?;
                    let x = balance(x.item().expect("exists"));
                    let y = balance(y.item().expect("exists"));
                    let (a, b) = if lo == from { (x, y) } else { (y, x) };
                    for (k, v) in [(from, a - amount), (to, b + amount)] {
                        tx.update_item()
                            .table_name(&table)
                            .key("Id", id(k))
                            .update_expression("SET balance = :v")
                            .expression_attribute_values(":v", AttributeValue::N(v.to_string()))
                            .send()
                            .await?;
                    }
                    Ok::<_, Error>(())
                })
                .await
                .expect("transfer");
                latencies.lock().await.push(t0.elapsed());
                attempts_all
                    .lock()
                    .await
                    .push(attempts.load(Ordering::SeqCst));
            }
        }));
    }
    for h in handles {
        h.await.expect("worker");
    }
    let elapsed = started.elapsed();
    let total: i64 = common::scan(&admin, &table).await.iter().map(balance).sum();
    common::drop_tables(
        &admin,
        &[table, format!("{prefix}-tx"), format!("{prefix}-img")],
    )
    .await;
    let mut attempts = attempts_all.lock().await.clone();
    attempts.sort_unstable();
    let mut lat = latencies.lock().await.clone();
    lat.sort_unstable();
    let n = attempts.len();
    Figures {
        name,
        tx_per_s: n as f64 / elapsed.as_secs_f64(),
        attempts_mean: attempts.iter().map(|&a| a as f64).sum::<f64>() / n as f64,
        attempts_p99: common::percentile(&attempts, 99.0),
        attempts_max: *attempts.last().unwrap_or(&0),
        p50_ms: common::percentile(&lat, 50.0).as_secs_f64() * 1000.0,
        p99_ms: common::percentile(&lat, 99.0).as_secs_f64() * 1000.0,
        retries: attempts.iter().map(|&a| u64::from(a - 1)).sum(),
        total_conserved: total == 1000 * args.accounts as i64,
    }
}

fn json(f: &Figures) -> String {
    format!(
        "{{\"tx_per_s\":{:.1},\"attempts_mean\":{:.2},\"attempts_p99\":{},\"attempts_max\":{},\"p50_ms\":{:.1},\"p99_ms\":{:.1},\"rolled_back_by_others\":{},\"total_conserved\":{}}}",
        f.tx_per_s,
        f.attempts_mean,
        f.attempts_p99,
        f.attempts_max,
        f.p50_ms,
        f.p99_ms,
        f.retries,
        f.total_conserved
    )
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    common::require_endpoint("contention");
    assert!(args.accounts >= 2, "need at least two accounts");
    println!(
        "contention: {} workers, {} accounts, {} transfers per policy, 2 items per transaction",
        args.workers, args.accounts, args.transfers
    );
    let ordered = measure(
        &args,
        "ordered",
        ContentionPolicy::Ordered {
            dead_after: Duration::from_secs(10),
            ticket_at_begin: args.ticket_at_begin,
        },
    )
    .await;
    let others = measure(&args, "rollback_others", ContentionPolicy::RollBackOthers).await;
    println!(
        "| policy | tx/s | attempts mean | attempts p99 | attempts max | p50 ms | p99 ms | retries | total conserved |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for f in [&ordered, &others] {
        println!(
            "| {} | {:.1} | {:.2} | {} | {} | {:.1} | {:.1} | {} | {} |",
            f.name,
            f.tx_per_s,
            f.attempts_mean,
            f.attempts_p99,
            f.attempts_max,
            f.p50_ms,
            f.p99_ms,
            f.retries,
            f.total_conserved
        );
    }
    println!(
        "{{\"ordered\":{},\"rollback_others\":{}}}",
        json(&ordered),
        json(&others)
    );
}
