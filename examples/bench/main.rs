//! Performance benchmark, all in one run against one DynamoDB:
//! - transactions: requests, write units, critical path and commit latency of N-item transactions
//!   through the library (default settings), the locking protocol (fast path off), the Java
//!   library's request shape (sequential) and native `TransactWriteItems`; read locks and a bank
//!   transfer (beside the optimistic transfer a user writes without the library);
//! - contention: bank transfers over hot accounts, once per ticket mode, then without the library
//!   (read, conditional `TransactWriteItems`, retry); then the hot items with default settings:
//!   transfers in both read orders and a hot counter, each beside the native optimistic
//!   equivalent, its FIFO ideal and its physical bound;
//! - locks: the queue and lease locks and the peer `dynamodb-lease` uncontended and under
//!   contention, in the shape of the peer-lock comparison;
//! - change feed: the lag from a transaction's commit to the feed yielding it, and `GetRecords`
//!   per shard per second.
//!
//! With `--profile dynamodb`, every scenario runs a second time right after the first, through
//! `fault::DynamoDbProfile` (DynamoDB's transaction conflicts, stale eventually consistent reads,
//! per-item throttling, a network round trip of `--rtt-ms` and DynamoDB's service time per
//! request), and the report shows both.
//!
//! ```text
//! export AWS_ENDPOINT_URL_DYNAMODB=$(scripts/dynamodb-local start)
//! cargo run --release --example bench            # full run (several minutes)
//! cargo run --release --example bench -- --quick # smoke run
//! cargo run --release --example bench -- --profile dynamodb   # raw and through the profile
//! ```
//!
//! `BENCH_TIMELINE=1` prints each measured transaction of N >= 25 request by request (start and
//! end in ms from its begin, actions, operation) on stderr: where its time goes.
//!
//! Requests are seen by an SDK interceptor (`recorder`); percentiles come from HdrHistogram
//! (`stats`). Write units assume small items (< 1 KB): PutItem / UpdateItem / DeleteItem = 1, each
//! TransactWriteItems action = 2 (condition checks included), each BatchWriteItem item = 1.
//!
//! The last line printed is one JSON object (keys of the per-N maps are N).

#[path = "../common/mod.rs"]
mod common;

mod contention;
mod drivers;
mod feed;
mod goals;
mod json;
mod locks;
mod profile;
mod recorder;
mod report;
mod stats;
mod transactions;

use clap::Parser;

use crate::contention::ContentionResults;
use crate::locks::LockResults;
use crate::transactions::Row;

#[derive(Parser, Debug, Clone)]
#[command(about = "Requests, critical path and latency of transactions, contention and locks")]
pub struct Args {
    /// Items per transaction (update rows), comma separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 10, 25, 100, 1000])]
    sizes: Vec<usize>,
    /// Items per transaction of the insert, delete and read-lock rows (0: none).
    #[arg(long, value_delimiter = ',', default_values_t = [10usize, 100])]
    op_sizes: Vec<usize>,
    /// Measured transactions per driver for N <= 25.
    #[arg(long, default_value_t = 50)]
    small: usize,
    /// Measured transactions per driver for 25 < N <= 100.
    #[arg(long, default_value_t = 10)]
    medium: usize,
    /// Measured transactions per driver for N > 100 (4: the median of 2 moved by a tenth between
    /// runs).
    #[arg(long, default_value_t = 4)]
    large: usize,
    /// Unmeasured warm-up transactions per driver and row (at most 1 for N > 100).
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// `Settings::concurrency` of the library and locking drivers (default: the library's).
    #[arg(long)]
    concurrency: Option<usize>,
    /// Contention: concurrent coordinators.
    #[arg(long, default_value_t = 16)]
    workers: usize,
    /// Contention: hot accounts.
    #[arg(long, default_value_t = 4)]
    accounts: usize,
    /// Contention: transfers per ticket mode.
    #[arg(long, default_value_t = 400)]
    transfers: usize,
    /// Hot counter: concurrent coordinators incrementing the one item.
    #[arg(long, default_value_t = 32)]
    counter_workers: usize,
    /// Hot counter: increments per run.
    #[arg(long, default_value_t = 400)]
    increments: usize,
    /// Hot counter without the library (native optimistic): attempts before an increment gives
    /// up (0: until it commits, as the library's `run` retries).
    #[arg(long, default_value_t = 0)]
    counter_native_attempts: u32,
    /// Contention: only the hot-item runs (and the native transfer), not every ticket mode.
    #[arg(long)]
    hot_only: bool,
    /// Contention: only the hot-item runs whose name contains this (say `from then to`), or, after
    /// a `=`, whose name is exactly the rest (say `=transfer, from then to`).
    #[arg(long)]
    hot_filter: Option<String>,
    /// Contention: every library run waits in ticket order (`Settings::wait_in_ticket_order`).
    #[arg(long)]
    wait_in_ticket_order: bool,
    /// Contention: every library run writes a transaction's record from its first locked read
    /// (`Settings::record_on_demand` off; on by default, a record only once it is needed).
    #[arg(long)]
    no_record_on_demand: bool,
    /// Contention: no library run marks the items its waiters wait for
    /// (`Settings::mark_oldest_waiter` off; on by default): a freed item goes to whoever looks
    /// first.
    #[arg(long)]
    no_mark_oldest_waiter: bool,
    /// Contention: waiters far back in the line behind the mark look by reading
    /// (`Settings::line_looks_read`; off by default).
    #[arg(long)]
    line_looks_read: bool,
    /// Contention: no library run's commit without record hands the item over to its oldest live
    /// waiter (`Settings::hand_over` off; on by default).
    #[arg(long)]
    no_hand_over: bool,
    /// Contention: every library run gives a younger running holder this long before rolling it
    /// back (`Settings::wound_grace`; the library's default when absent).
    #[arg(long)]
    wound_grace_ms: Option<u64>,
    /// Contention: how long every library run's first attempt waits behind a retry drawn after
    /// it, holding nothing else, before `run` retries it (`Settings::first_attempt_patience`;
    /// the library's default when absent).
    #[arg(long)]
    first_attempt_patience_ms: Option<u64>,
    /// Contention: no library run's first attempt gives itself up when it meets contention on an
    /// item below one it holds (`Settings::yield_out_of_order` off; on by default): it waits
    /// holding its items.
    #[arg(long)]
    no_yield_out_of_order: bool,
    /// Contention: no library run releases the reads held above an item it meets contention on
    /// (`Settings::reorder_held_reads` off; on by default): it waits holding them, or its first
    /// attempt gives itself up (`Settings::yield_out_of_order`).
    #[arg(long)]
    no_reorder_held_reads: bool,
    /// Contention: a read released to take an item below it in key order keeps the
    /// transaction's turn at its item (`Settings::reorder_keeps_turn`; off by default).
    #[arg(long)]
    reorder_keeps_turn: bool,
    /// Contention: every library run waits for younger running holders
    /// (`Settings::wait_for_running_holders`).
    #[arg(long)]
    wait_for_running_holders: bool,
    /// Contention: print each run's requests per committed transaction, by operation and
    /// outcome (to stderr; where the requests of a contended run go).
    #[arg(long)]
    ops_per_tx: bool,
    /// Contention: random seed.
    #[arg(long, default_value_t = 11)]
    seed: u64,
    /// Locks: uncontended acquire + release cycles measured.
    #[arg(long, default_value_t = 200)]
    solo_cycles: usize,
    /// Locks: uncontended warm-up cycles.
    #[arg(long, default_value_t = 5)]
    solo_warmup: usize,
    /// Locks: contenders on the one lock.
    #[arg(long, default_value_t = 16)]
    contenders: usize,
    /// Locks: acquisitions per contender.
    #[arg(long, default_value_t = 20)]
    rounds: usize,
    /// Locks: how long a holder sleeps between reading and writing the counter, ms.
    #[arg(long, default_value_t = 5)]
    hold_ms: u64,
    /// Locks: sleep between tries of the naive lease-lock loop, ms.
    #[arg(long, default_value_t = 20)]
    naive_sleep_ms: u64,
    /// Fast smoke run: few transactions, transfers and lock rounds.
    #[arg(long)]
    quick: bool,
    /// Skip the transaction benchmark.
    #[arg(long)]
    no_tx: bool,
    /// Skip the contention benchmark.
    #[arg(long)]
    no_contention: bool,
    /// Skip the change feed's lag.
    #[arg(long)]
    no_feed: bool,
    /// Change feed: transactions committed (one every 100 ms) while the feed follows.
    #[arg(long, default_value_t = 100)]
    feed_transactions: usize,
    /// Skip the lock benchmark.
    #[arg(long)]
    no_locks: bool,
    /// Keep the tables afterwards.
    #[arg(long)]
    keep_tables: bool,
    /// Transfers without the library (contention and the transfer row): attempts before a
    /// transfer gives up (0: no native run in the contention part, the counter's included).
    #[arg(long, default_value_t = 20)]
    native_attempts: u32,
    /// The hot counter's handover sketch (beside native optimistic): reads on the way at once
    /// for each of the first `--handover-racers` waiters in its queue.
    #[arg(long, default_value_t = 3)]
    handover_width: u32,
    /// The handover sketch: how many of the first waiters in its queue read at full pace.
    #[arg(long, default_value_t = 2)]
    handover_racers: usize,
    /// The handover sketch: a waiter further back sleeps this many ms per place before a read.
    #[arg(long, default_value_t = 3)]
    handover_pace_ms: u64,
    /// Also run every scenario through this profile of DynamoDB, and report both.
    #[arg(long, value_enum)]
    profile: Option<profile::ProfileName>,
    /// The profile's network round trip, ms (plus up to 2 ms of jitter).
    #[arg(long, default_value_t = 5)]
    rtt_ms: u64,
    /// The profile's random seed (jitter, stale versions).
    #[arg(long, default_value_t = 1)]
    profile_seed: u64,
    /// The profile without DynamoDB's service time: a request takes the round trip plus DynamoDB
    /// Local's own time.
    #[arg(long)]
    local_service_time: bool,
}

/// What one pass measured: against DynamoDB Local as it answers, or through the profile.
#[derive(Debug, Default)]
pub struct Results {
    pub rows: Vec<Row>,
    pub contention: ContentionResults,
    pub locks: LockResults,
    pub feed: Option<feed::FeedFigures>,
}

impl Args {
    fn count(&self, n: usize) -> usize {
        match n {
            0..=25 => self.small,
            26..=100 => self.medium,
            _ => self.large,
        }
    }

    fn warmup(&self, n: usize) -> usize {
        if n > 100 {
            self.warmup.min(1)
        } else {
            self.warmup
        }
    }

    fn shrink_for_quick(&mut self) {
        self.small = self.small.min(5);
        self.medium = self.medium.min(2);
        self.large = self.large.min(1);
        self.warmup = self.warmup.min(1);
        self.transfers = self.transfers.min(40);
        self.increments = self.increments.min(40);
        self.solo_cycles = self.solo_cycles.min(20);
        self.solo_warmup = self.solo_warmup.min(2);
        self.rounds = self.rounds.min(3);
        self.feed_transactions = self.feed_transactions.min(10);
    }
}

#[tokio::main]
async fn main() {
    let mut args = Args::parse();
    common::require_endpoint("bench");
    // `RUST_LOG=dynamodb_transactions=debug` shows what the library did (on stderr).
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    if args.quick {
        args.shrink_for_quick();
    }
    assert!(args.accounts >= 2, "need at least two accounts");
    let prefix = format!("bench-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    eprintln!("bench: tables {prefix}-*; {args:?}");

    let settings = profile::settings(&args);
    if let Some(st) = &settings {
        eprintln!("bench: and through the profile: {}", profile::describe(st));
    }
    let settings = settings.as_ref();

    let mut raw = Results::default();
    let mut profiled = settings.map(|_| Results::default());
    if !args.no_tx {
        let (r, p) = transactions::bench_transactions(&args, &prefix, settings).await;
        raw.rows = r;
        if let (Some(out), Some(p)) = (profiled.as_mut(), p) {
            out.rows = p;
        }
    }
    if !args.no_contention {
        let (r, p) = contention::bench_contention(&args, &prefix, settings).await;
        raw.contention = r;
        if let (Some(out), Some(p)) = (profiled.as_mut(), p) {
            out.contention = p;
        }
    }
    if !args.no_locks {
        let (r, p) = locks::bench_locks(&args, &prefix, settings).await;
        raw.locks = r;
        if let (Some(out), Some(p)) = (profiled.as_mut(), p) {
            out.locks = p;
        }
    }
    if !args.no_feed {
        let (r, p) = feed::bench_feed(&args, &prefix, settings).await;
        raw.feed = r;
        if let Some(out) = profiled.as_mut() {
            out.feed = p;
        }
    }
    let heading = |what: &str| println!("#### {what} through the DynamoDB profile\n");

    let rows = &raw.rows;
    if !rows.is_empty() {
        println!("### Transactions\n");
        println!("{}", report::tx_table(rows));
        println!("#### Where the time goes\n");
        println!("{}", report::breakdown_table(rows));
        if let Some(p) = &profiled {
            heading("Transactions");
            println!("{}", report::tx_table(&p.rows));
            heading("Where the time goes");
            println!("{}", report::breakdown_table(&p.rows));
        }
    }
    if !raw.contention.is_empty() {
        println!("### Contention\n");
        if !raw.contention.modes.is_empty() {
            println!("{}", report::contention_table(&args, &raw.contention));
            if let Some(p) = &profiled {
                heading("Contention");
                println!("{}", report::contention_table(&args, &p.contention));
            }
        }
        if !raw.contention.hot.is_empty() {
            println!("#### Hot items\n");
            println!(
                "{}",
                report::hot_table(
                    &args,
                    &raw.contention,
                    profiled.as_ref().map(|p| &p.contention)
                )
            );
        }
    }
    let locks = &raw.locks;
    if !locks.uncontended.is_empty() || !locks.contended.is_empty() {
        println!("### Locks\n");
        println!("{}", report::lock_tables(&args, locks));
        if let Some(p) = &profiled {
            heading("Locks");
            println!("{}", report::lock_tables(&args, &p.locks));
        }
    }
    if let Some(f) = &raw.feed {
        println!("### Change feed\n");
        println!(
            "{}",
            feed::table(f, profiled.as_ref().and_then(|p| p.feed.as_ref()))
        );
    }
    if let (Some(p), Some(st)) = (&profiled, settings) {
        println!("### What the profile did\n");
        println!("{}", report::profile_events_table(p));
        println!("### DynamoDB Local and the profile side by side\n");
        println!("{}", report::side_by_side(&args, &raw, p, st));
    }
    println!("### Goals\n");
    println!("{}", goals::goals(rows, locks, &raw.contention.modes));
    println!(
        "{}",
        goals::hot_goals(&raw.contention, goals::HOT_BASELINE_TX_PER_S)
    );
    if let Some(p) = &profiled {
        println!("Through the profile:\n");
        println!(
            "{}",
            goals::hot_goals(&p.contention, goals::HOT_BASELINE_TX_PER_S_PROFILE)
        );
    }
    println!("{}", json::json(&raw, profiled.as_ref().zip(settings)));
}
