//! The contention scenario: W coordinators run `run(...)` bank transfers over a few hot accounts
//! (examples/contention.rs's shape, ordered contention policy), once per ticket mode, each mode on
//! its own tables. Counts the requests on the shared ticket counter per committed transfer. Then
//! the same transfers without the library (`drivers::optimistic_transfer`: read, conditional
//! `TransactWriteItems`, retry), the baseline a user would write instead. With `--profile`, each
//! run again right after through a fresh profile.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::Client;
use dynamodb_transactions::fault::ProfileSettings;
use dynamodb_transactions::{ContentionPolicy, Error, Settings, TransactionManager};
use rand::{Rng, SeedableRng};

use crate::Args;
use crate::common;
use crate::drivers::optimistic_transfer;
use crate::profile::{Counts, Target};
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
    /// Transfers that never committed: the baseline's that reached its bound on attempts, or the
    /// library's that returned an error.
    pub gave_up: usize,
    /// The baseline's bound on attempts (`None`: the library's `run`).
    pub attempt_bound: Option<u32>,
    /// Through the profile: what it did over the run.
    pub profile: Option<Counts>,
}

/// The name of the baseline without the library, in the report and JSON.
pub const NATIVE: &str = "native optimistic";

/// Every ticket mode, then the baseline without the library.
#[derive(Debug, Clone, Default)]
pub struct ContentionResults {
    pub modes: Vec<ContentionFigures>,
    pub native: Option<ContentionFigures>,
}

impl ContentionResults {
    pub fn is_empty(&self) -> bool {
        self.modes.is_empty() && self.native.is_none()
    }
}

/// Who runs the transfers.
#[derive(Clone, Copy)]
pub enum How {
    /// The library's `run(...)` with this ticket mode.
    Library(Mode),
    /// [`optimistic_transfer`], without the library.
    Native,
}

/// One coordinator.
enum Worker {
    Library(TransactionManager),
    Native(Client),
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

/// Runs `args.transfers` transfers with `args.workers` coordinators, every client going to
/// `target`.
pub async fn measure(args: &Args, prefix: &str, how: How, target: &Target) -> ContentionFigures {
    let (mode, configure): Mode = match how {
        How::Library(m) => m,
        How::Native => (NATIVE, |_| {}),
    };
    let prefix = format!("{prefix}-c{}", mode.replace(' ', "-"));
    let table = format!("{prefix}-accounts");
    let recorder = Recorder::default();
    let admin = target.client(vec![]).await;
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
    if matches!(how, How::Library(_)) {
        mgr(admin.clone()).create_tables().await.expect("tables");
    }
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
    let gave_up = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for _ in 0..args.workers {
        let client = target.client(vec![common::shared(recorder.clone())]).await;
        workers.push(match how {
            How::Library(_) => Worker::Library(mgr(client)),
            How::Native => Worker::Native(client),
        });
    }
    let before = target.counts();
    recorder.set_tag(1);
    let started = Instant::now();
    let mut handles = Vec::new();
    for (w, worker) in workers.into_iter().enumerate() {
        let gave_up = gave_up.clone();
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
            // The baseline's backoff draws from its own generator: the transfers stay the same.
            let mut jitter = rand::rngs::StdRng::seed_from_u64(!(args.seed * 100 + w as u64));
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
                let t0 = Instant::now();
                let m = match &worker {
                    Worker::Library(m) => m,
                    Worker::Native(client) => {
                        let o = optimistic_transfer(
                            client,
                            &table,
                            "balance",
                            (&account(from), &account(to), amount),
                            args.native_attempts,
                            &mut jitter,
                        )
                        .await;
                        if o.committed {
                            latency
                                .lock()
                                .expect("latency")
                                .record_duration(t0.elapsed());
                            done_at.lock().expect("done").push(Instant::now());
                            attempts
                                .lock()
                                .expect("attempts")
                                .record(f64::from(o.attempts));
                        } else {
                            gave_up.fetch_add(1, Ordering::SeqCst);
                        }
                        continue;
                    }
                };
                let tries = Arc::new(AtomicU32::new(0));
                let (table, tries2) = (table.clone(), tries.clone());
                let ran = m
                    .run(async move |tx| {
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
                    .await;
                if let Err(e) = ran {
                    let short: String = e.to_string().chars().take(300).collect();
                    eprintln!("  contention {mode}: transfer FAILED: {short}");
                    gave_up.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
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
    let profile = target.counts_since(before);
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
        gave_up: gave_up.load(Ordering::SeqCst) as usize,
        attempt_bound: matches!(how, How::Native).then_some(args.native_attempts),
        profile,
    }
}

/// Every mode of [`MODES`], one after the other, then the baseline without the library; with
/// profile settings, each again right after through a fresh profile (the second results).
pub async fn bench_contention(
    args: &Args,
    prefix: &str,
    profile: Option<&ProfileSettings>,
) -> (ContentionResults, Option<ContentionResults>) {
    let mut raw = ContentionResults::default();
    let mut profiled = profile.map(|_| ContentionResults::default());
    let profiled_prefix = format!("{prefix}-p");
    let runs = MODES
        .iter()
        .map(|&m| How::Library(m))
        .chain((args.native_attempts > 0).then_some(How::Native));
    for how in runs {
        let name = match how {
            How::Library((mode, _)) => format!("tickets from {mode}"),
            How::Native => format!("{NATIVE} (at most {} attempts)", args.native_attempts),
        };
        eprintln!("  contention: {name}");
        let f = measure(args, prefix, how, &Target::raw()).await;
        let store = |out: &mut ContentionResults, f| match how {
            How::Library(_) => out.modes.push(f),
            How::Native => out.native = Some(f),
        };
        store(&mut raw, f);
        if let (Some(settings), Some(out)) = (profile, profiled.as_mut()) {
            eprintln!("  contention: {name}, through the profile");
            let f = measure(args, &profiled_prefix, how, &Target::profiled(settings)).await;
            store(out, f);
        }
    }
    (raw, profiled)
}
