//! Contention benchmark: W coordinators run `run(...)` transfers over a few hot accounts, under the
//! ordered (ticket) contention policy (with tickets from the counter, from the clock, or both) and
//! under the Java library's roll-back-others policy, against the same DynamoDB in one run.
//!
//! ```text
//! cargo run --release --example contention -- --workers 16 --accounts 4 --transfers 400
//! cargo run --release --example contention -- --ticket-source clock
//! ```
//! The last line printed is a JSON object with the figures of each policy (`ordered`: counter
//! tickets, `ordered_clock`: clock tickets, `rollback_others`), among them `ticket_requests`: the
//! requests to the ticket counter per committed transfer, and `requests`: all requests per
//! committed transfer.

#[path = "common/mod.rs"]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use clap::{Parser, ValueEnum};
use dynamodb_transactions::fault::RequestCounter;
use dynamodb_transactions::{ContentionPolicy, Error, TicketSource, TransactionManager};
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
    /// Ordered policy: where tickets come from (`both`: measure the counter and the clock).
    #[arg(long, value_enum, default_value_t = Sources::Both)]
    ticket_source: Sources,
    /// Ordered policy: rounds per ticket source, alternating the sources (the figures are the
    /// median round's, the worst attempts of any round, and the mean requests), so that a loaded
    /// machine weighs on both alike.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Skip the roll-back-others policy.
    #[arg(long)]
    ordered_only: bool,
}

/// The ticket sources to measure the ordered policy with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Sources {
    Counter,
    Clock,
    Both,
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
    /// Requests to the ticket counter per committed transfer.
    ticket_requests: f64,
    /// Requests of every kind per committed transfer.
    requests: f64,
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

async fn measure(
    args: &Args,
    name: &'static str,
    policy: ContentionPolicy,
    source: TicketSource,
) -> Figures {
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
                s.ticket_source = source;
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
    let counter = RequestCounter::new();
    let started = Instant::now();
    let mut handles = Vec::new();
    for w in 0..args.workers {
        let m = mgr(common::client(vec![common::shared(counter.clone())]).await);
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
    let requests = counter.total();
    // Every ticket request is an `ADD 1` on the counter row: its value is how many landed.
    let tickets: u64 = admin
        .get_item()
        .table_name(format!("{prefix}-tx"))
        .key("_TxId", AttributeValue::S("~ticket-counter".into()))
        .key("_TxN", AttributeValue::N("0".into()))
        .consistent_read(true)
        .send()
        .await
        .expect("counter row")
        .item
        .and_then(|i| i.get("_TxK")?.as_n().ok()?.parse().ok())
        .unwrap_or(0);
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
        ticket_requests: tickets as f64 / n as f64,
        requests: requests as f64 / n as f64,
        total_conserved: total == 1000 * args.accounts as i64,
    }
}

/// One policy's figures over several rounds: the median round's goodput and latencies, the worst
/// attempts, the mean requests.
fn merge(mut rounds: Vec<Figures>) -> Figures {
    if rounds.len() == 1 {
        return rounds.pop().expect("one round");
    }
    let n = rounds.len() as f64;
    let median = |f: fn(&Figures) -> f64| {
        let mut v: Vec<f64> = rounds.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Figures {
        name: rounds[0].name,
        tx_per_s: median(|f| f.tx_per_s),
        attempts_mean: rounds.iter().map(|f| f.attempts_mean).sum::<f64>() / n,
        attempts_p99: rounds.iter().map(|f| f.attempts_p99).max().unwrap_or(0),
        attempts_max: rounds.iter().map(|f| f.attempts_max).max().unwrap_or(0),
        p50_ms: median(|f| f.p50_ms),
        p99_ms: median(|f| f.p99_ms),
        retries: rounds.iter().map(|f| f.retries).sum(),
        ticket_requests: rounds.iter().map(|f| f.ticket_requests).sum::<f64>() / n,
        requests: rounds.iter().map(|f| f.requests).sum::<f64>() / n,
        total_conserved: rounds.iter().all(|f| f.total_conserved),
    }
}

fn json(f: &Figures) -> String {
    format!(
        "{{\"tx_per_s\":{:.1},\"attempts_mean\":{:.2},\"attempts_p99\":{},\"attempts_max\":{},\"p50_ms\":{:.1},\"p99_ms\":{:.1},\"rolled_back_by_others\":{},\"ticket_requests\":{:.3},\"requests\":{:.2},\"total_conserved\":{}}}",
        f.tx_per_s,
        f.attempts_mean,
        f.attempts_p99,
        f.attempts_max,
        f.p50_ms,
        f.p99_ms,
        f.retries,
        f.ticket_requests,
        f.requests,
        f.total_conserved
    )
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    common::require_endpoint("contention");
    assert!(args.accounts >= 2, "need at least two accounts");
    println!(
        "contention: {} workers, {} accounts, {} transfers per policy and round, {} round(s), 2 items per transaction",
        args.workers, args.accounts, args.transfers, args.rounds
    );
    let ordered_policy = ContentionPolicy::Ordered {
        dead_after: Duration::from_secs(10),
        ticket_at_begin: args.ticket_at_begin,
    };
    let mut sources = Vec::new();
    if args.ticket_source != Sources::Clock {
        sources.push(("ordered", TicketSource::Counter));
    }
    if args.ticket_source != Sources::Counter {
        sources.push(("ordered_clock", TicketSource::Clock));
    }
    let mut rounds: Vec<Vec<Figures>> = sources.iter().map(|_| Vec::new()).collect();
    for r in 0..args.rounds.max(1) {
        for i in 0..sources.len() {
            // Alternate which source goes first.
            let i = if r % 2 == 0 { i } else { sources.len() - 1 - i };
            let (name, source) = sources[i];
            rounds[i].push(measure(&args, name, ordered_policy, source).await);
        }
    }
    let mut runs: Vec<Figures> = rounds.into_iter().map(merge).collect();
    if !args.ordered_only {
        runs.push(
            measure(
                &args,
                "rollback_others",
                ContentionPolicy::RollBackOthers,
                TicketSource::Counter,
            )
            .await,
        );
    }
    println!(
        "| policy | tx/s | attempts mean | attempts p99 | attempts max | p50 ms | p99 ms | retries | ticket requests/tx | requests/tx | total conserved |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for f in &runs {
        println!(
            "| {} | {:.1} | {:.2} | {} | {} | {:.1} | {:.1} | {} | {:.3} | {:.2} | {} |",
            f.name,
            f.tx_per_s,
            f.attempts_mean,
            f.attempts_p99,
            f.attempts_max,
            f.p50_ms,
            f.p99_ms,
            f.retries,
            f.ticket_requests,
            f.requests,
            f.total_conserved
        );
    }
    let fields: Vec<String> = runs
        .iter()
        .map(|f| format!("\"{}\":{}", f.name, json(f)))
        .collect();
    println!("{{{}}}", fields.join(","));
}
