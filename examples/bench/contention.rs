//! The contention scenario: W coordinators run `run(...)` bank transfers over a few hot accounts
//! (examples/contention.rs's shape, ordered contention policy), once per ticket mode, each mode on
//! its own tables. Counts the requests on the shared ticket counter per committed transfer.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dynamodb_transactions::{ContentionPolicy, Error, Settings, TransactionManager};
use rand::{Rng, SeedableRng};

use crate::Args;
use crate::common;
use crate::recorder::Recorder;
use crate::stats::Dist;
use crate::transactions::{n_val, s};

/// A way of taking contention tickets: its name in the report and JSON, and what it changes in
/// the default `Settings`.
pub type Mode = (&'static str, fn(&mut Settings));

/// The ticket modes measured, in order. A new ticket source is one line here.
pub const MODES: &[Mode] = &[
    // The seed's mechanism: an atomic `ADD` on one counter row, at a transaction's first contention.
    ("counter", |_| {}),
    // The coordinator's clock: no request, no shared item (`TicketSource::Clock`).
    ("clock", |s| {
        s.ticket_source = dynamodb_transactions::TicketSource::Clock
    }),
    // The clock, with the ticket taken as each unit of work begins (free with the clock): ordered
    // by when they began, not by when they first met contention.
    ("clock-begin", |s| {
        s.ticket_source = dynamodb_transactions::TicketSource::Clock;
        s.contention = ContentionPolicy::Ordered {
            dead_after: Duration::from_secs(10),
            ticket_at_begin: true,
        };
    }),
];

/// What one mode did.
#[derive(Debug, Clone)]
pub struct ContentionFigures {
    pub mode: &'static str,
    pub committed: usize,
    /// Goodput while every worker had work: transfers committed before the first worker found
    /// none left, over that time. The run's end (the last few transfers, fewer and fewer workers,
    /// and whichever one waits longest) is left out: it measured the slowest transfer's luck.
    pub tx_per_s: f64,
    /// Committed transfers over the whole run, ramp-down included.
    pub tx_per_s_overall: f64,
    pub attempts: Dist,
    pub latency: Dist,
    /// Requests on the shared ticket counter (bookkeeping rows) per committed transfer.
    pub ticket_requests: f64,
    /// All requests per committed transfer.
    pub requests: f64,
    /// The sum of balances is what it was before (serializability of the transfers).
    pub total_conserved: bool,
}

fn balance(item: &dynamodb_transactions::Item) -> i64 {
    item.get("balance")
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn account(i: usize) -> String {
    format!("hot{i}")
}

/// Runs `args.transfers` transfers with `args.workers` coordinators under one ticket mode.
pub async fn measure(args: &Args, prefix: &str, (mode, configure): Mode) -> ContentionFigures {
    let prefix = format!("{prefix}-c{mode}");
    let table = format!("{prefix}-accounts");
    let recorder = Recorder::default();
    let admin = common::client(vec![]).await;
    let mgr = |c| {
        TransactionManager::builder(c)
            .transactions_table(format!("{prefix}-tx"))
            .images_table(format!("{prefix}-img"))
            .configure(|st| {
                st.contention = ContentionPolicy::Ordered {
                    dead_after: Duration::from_secs(10),
                    ticket_at_begin: false,
                };
                st.run_attempts = 10_000;
                st.lock_wait = Duration::from_secs(30);
                configure(st);
            })
            .build()
    };
    mgr(admin.clone()).create_tables().await.expect("tables");
    common::create_table(&admin, &table).await;
    for i in 0..args.accounts {
        admin
            .put_item()
            .table_name(&table)
            .item("Id", s(&account(i)))
            .item("balance", n_val(1000))
            .send()
            .await
            .expect("seed");
    }
    let next = Arc::new(AtomicU64::new(0));
    // When each transfer committed, and when the first worker found no transfer left.
    let done_at = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let drained_at = Arc::new(Mutex::new(None::<Instant>));
    let attempts = Arc::new(Mutex::new(Dist::counts()));
    let latency = Arc::new(Mutex::new(Dist::millis()));
    recorder.set_tag(1);
    let started = Instant::now();
    let mut handles = Vec::new();
    for w in 0..args.workers {
        let m = mgr(common::client(vec![common::shared(recorder.clone())]).await);
        let (next, attempts, latency, table, args) = (
            next.clone(),
            attempts.clone(),
            latency.clone(),
            table.clone(),
            args.clone(),
        );
        let (done_at, drained_at) = (done_at.clone(), drained_at.clone());
        handles.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed * 100 + w as u64);
            loop {
                if next.fetch_add(1, Ordering::SeqCst) as usize >= args.transfers {
                    drained_at
                        .lock()
                        .expect("drained")
                        .get_or_insert_with(Instant::now);
                    break;
                }
                let from = rng.random_range(0..args.accounts);
                let to = (from + rng.random_range(1..args.accounts)) % args.accounts;
                let amount: i64 = rng.random_range(1..10);
                let tries = Arc::new(AtomicU32::new(0));
                let t0 = Instant::now();
                let (table, tries2) = (table.clone(), tries.clone());
                m.run(async move |tx| {
                    tries2.fetch_add(1, Ordering::SeqCst);
                    // Lock in a canonical order (lowest key first), as the protocol's design advises.
                    let (lo, hi) = (from.min(to), from.max(to));
                    let mut read = Vec::new();
                    for k in [lo, hi] {
                        let out = tx
                            .get_item()
                            .table_name(&table)
                            .key("Id", s(&account(k)))
                            .send()
                            .await?;
                        read.push(balance(out.item().expect("account exists")));
                    }
                    let (a, b) = if lo == from {
                        (read[0], read[1])
                    } else {
                        (read[1], read[0])
                    };
                    for (k, v) in [(from, a - amount), (to, b + amount)] {
                        tx.update_item()
                            .table_name(&table)
                            .key("Id", s(&account(k)))
                            .update_expression("SET balance = :v")
                            .expression_attribute_values(":v", n_val(v))
                            .send()
                            .await?;
                    }
                    Ok::<_, Error>(())
                })
                .await
                .expect("transfer");
                latency
                    .lock()
                    .expect("latency")
                    .record_duration(t0.elapsed());
                done_at.lock().expect("done").push(Instant::now());
                attempts
                    .lock()
                    .expect("attempts")
                    .record(f64::from(tries.load(Ordering::SeqCst)));
            }
        }));
    }
    for h in handles {
        h.await.expect("worker");
    }
    let elapsed = started.elapsed();
    recorder.set_tag(0);
    let recs = recorder.take_all();
    let total: i64 = common::scan(&admin, &table).await.iter().map(balance).sum();
    if !args.keep_tables {
        common::drop_tables(
            &admin,
            &[table, format!("{prefix}-tx"), format!("{prefix}-img")],
        )
        .await;
    }
    let attempts = attempts.lock().expect("attempts").clone();
    let latency = latency.lock().expect("latency").clone();
    let committed = attempts.len() as usize;
    let per_tx = |v: usize| v as f64 / committed.max(1) as f64;
    let drained = drained_at
        .lock()
        .expect("drained")
        .unwrap_or_else(Instant::now);
    let steady = done_at
        .lock()
        .expect("done")
        .iter()
        .filter(|&&t| t <= drained)
        .count();
    ContentionFigures {
        mode,
        committed,
        tx_per_s: steady as f64 / (drained - started).as_secs_f64(),
        tx_per_s_overall: committed as f64 / elapsed.as_secs_f64(),
        attempts,
        latency,
        ticket_requests: per_tx(recs.iter().filter(|r| r.bookkeeping).count()),
        requests: per_tx(recs.len()),
        total_conserved: total == 1000 * args.accounts as i64,
    }
}

/// Every mode of [`MODES`], one after the other.
pub async fn bench_contention(args: &Args, prefix: &str) -> Vec<ContentionFigures> {
    let mut out = Vec::new();
    for &mode in MODES {
        eprintln!("  contention: tickets from {}", mode.0);
        out.push(measure(args, prefix, mode).await);
    }
    out
}
