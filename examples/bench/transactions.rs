//! The transaction scenarios (update, insert, delete, read lock, bank transfer) and the rows that
//! measure them: every driver of a row runs the same scenario on fresh keys, the drivers taking
//! turns transaction by transaction so that noise from the shared machine hits them alike. With
//! `--profile`, each row is measured again right after, on tables of its own, through a fresh
//! `DynamoDbProfile` that every client and manager of the row shares.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use dynamodb_transactions::TransactionManager;
use dynamodb_transactions::fault::ProfileSettings;
use futures::StreamExt;

use crate::Args;
use crate::common;
use crate::drivers::{Driver, optimistic_transfer, run_native};
use crate::profile::{Counts, Target};
use crate::recorder::{Rec, Recorder};
use crate::report::num;
use crate::stats::Stats;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// N `update_item`s (`SET hits = hits + :one`, buffered) and `commit()`.
    Update,
    /// N `put_item`s of new items.
    Insert,
    /// N `delete_item`s of existing items.
    Delete,
    /// N `get_item`s (read locks) and `commit()`.
    Read,
    /// A bank transfer: `get_item` two accounts, update both, `commit()` (N = 2).
    Transfer,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Update => "update",
            Kind::Insert => "insert",
            Kind::Delete => "delete",
            Kind::Read => "read lock",
            Kind::Transfer => "transfer",
        }
    }

    /// Transactions that only write: the fast path applies, and native `TransactWriteItems` can
    /// do the same.
    pub fn writes_only(self) -> bool {
        matches!(self, Kind::Update | Kind::Insert | Kind::Delete)
    }
}

/// What each driver did over the measured transactions of one (kind, N).
#[derive(Debug, Clone)]
pub struct Row {
    pub kind: Kind,
    pub n: usize,
    pub lib: Stats,
    /// The locking protocol (fast path off); only for write-only kinds.
    pub locking: Option<Stats>,
    /// The other setting the row compares: per-item locks (write-only kinds) or locked reads
    /// before recording (reads and transfers).
    pub alt: Option<Stats>,
    pub seq: Stats,
    /// Every write applied before the commit (`roll_forward = false`); only for write-only kinds
    /// committed in phases.
    pub apply_first: Option<Stats>,
    /// Native `TransactWriteItems`; only for write-only kinds with N ≤ 100.
    pub native: Option<Stats>,
    /// Two native `TransactWriteItems` in a row; only for updates with N ≤ 100.
    pub native_twice: Option<Stats>,
    /// The transfer without the library (read, then conditional `TransactWriteItems`).
    pub native_optimistic: Option<Stats>,
    /// Through the profile: what it did over the whole row, warm-ups included.
    pub profile: Option<Counts>,
}

impl Row {
    fn stats_mut(&mut self, d: Driver) -> &mut Stats {
        match d {
            Driver::Library => &mut self.lib,
            Driver::Locking => self.locking.as_mut().expect("locking row"),
            Driver::PerItem | Driver::LockedReads => self.alt.as_mut().expect("alt row"),
            Driver::Sequential => &mut self.seq,
            Driver::ApplyFirst => self.apply_first.as_mut().expect("apply-first row"),
            Driver::Native => self.native.as_mut().expect("native row"),
            Driver::NativeTwice => self.native_twice.as_mut().expect("native-twice row"),
            Driver::NativeOptimistic => self
                .native_optimistic
                .as_mut()
                .expect("native-optimistic row"),
        }
    }
}

pub fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_string())
}

pub fn n_val(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// Padding so items look like small records (about 100 bytes).
pub const PAD: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn hits(item: Option<&dynamodb_transactions::Item>) -> i64 {
    item.and_then(|i| i.get("hits"))
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
        .expect("item with hits")
}

struct TxBench {
    target: Target,
    native_attempts: u32,
    admin: Client,
    recorder: Recorder,
    table: String,
    lib: TransactionManager,
    locking: TransactionManager,
    per_item: TransactionManager,
    locked_reads: TransactionManager,
    apply_first: TransactionManager,
    seq: TransactionManager,
    next_tag: AtomicU64,
}

/// Numbers the key batches of inserts and deletes across every bench of the process: the rows
/// through the profile share their tables, so keys must not repeat from one bench to the next.
static NEXT_BATCH: AtomicU64 = AtomicU64::new(0);

/// Writes items `keys` (hits = 0) with BatchWriteItem, unmeasured.
pub async fn seed(client: &Client, table: &str, keys: &[String]) {
    let chunks: Vec<Vec<WriteRequest>> = keys
        .chunks(25)
        .map(|c| {
            c.iter()
                .map(|k| {
                    WriteRequest::builder()
                        .put_request(
                            PutRequest::builder()
                                .item("Id", s(k))
                                .item("hits", n_val(0))
                                .item("pad", s(PAD))
                                .build()
                                .expect("put request"),
                        )
                        .build()
                })
                .collect()
        })
        .collect();
    futures::stream::iter(chunks)
        .for_each_concurrent(8, |mut reqs| async move {
            for _ in 0..20 {
                let out = client
                    .batch_write_item()
                    .request_items(table, reqs.clone())
                    .send()
                    .await
                    .expect("seed");
                reqs = out
                    .unprocessed_items
                    .and_then(|mut m| m.remove(table))
                    .unwrap_or_default();
                if reqs.is_empty() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            panic!("seeding did not finish");
        })
        .await;
}

impl TxBench {
    /// Keys one transaction of `kind` with `n` items works on (seeded when they must exist).
    async fn prepare(&self, kind: Kind, n: usize) -> Vec<String> {
        match kind {
            Kind::Update | Kind::Read | Kind::Transfer => (0..n).map(|i| format!("u{i}")).collect(),
            Kind::Insert => {
                let b = NEXT_BATCH.fetch_add(1, Ordering::SeqCst);
                (0..n).map(|i| format!("i{b}-{i}")).collect()
            }
            Kind::Delete => {
                let b = NEXT_BATCH.fetch_add(1, Ordering::SeqCst);
                let keys: Vec<String> = (0..n).map(|i| format!("d{b}-{i}")).collect();
                seed(&self.admin, &self.table, &keys).await;
                keys
            }
        }
    }

    /// One transaction of the scenario `kind` through the library.
    async fn run_library(
        &self,
        mgr: &TransactionManager,
        kind: Kind,
        keys: &[String],
    ) -> dynamodb_transactions::Result<()> {
        let tx = mgr.begin();
        let table = &self.table;
        match kind {
            Kind::Update => {
                for k in keys {
                    tx.update_item()
                        .table_name(table)
                        .key("Id", s(k))
                        .update_expression("SET hits = hits + :one")
                        .expression_attribute_values(":one", n_val(1))
                        .send()
                        .await?;
                }
            }
            Kind::Insert => {
                for k in keys {
                    tx.put_item()
                        .table_name(table)
                        .item("Id", s(k))
                        .item("hits", n_val(0))
                        .item("pad", s(PAD))
                        .send()
                        .await?;
                }
            }
            Kind::Delete => {
                for k in keys {
                    tx.delete_item()
                        .table_name(table)
                        .key("Id", s(k))
                        .send()
                        .await?;
                }
            }
            Kind::Read => {
                for k in keys {
                    let out = tx
                        .get_item()
                        .table_name(table)
                        .key("Id", s(k))
                        .send()
                        .await?;
                    assert!(out.item().is_some(), "item {k} exists");
                }
            }
            Kind::Transfer => {
                let mut balances = Vec::new();
                for k in keys {
                    let out = tx
                        .get_item()
                        .table_name(table)
                        .key("Id", s(k))
                        .send()
                        .await?;
                    balances.push(hits(out.item()));
                }
                // The first account pays one to the second.
                for (i, (k, b)) in keys.iter().zip(balances).enumerate() {
                    let delta = if i == 0 { -1 } else { 1 };
                    tx.update_item()
                        .table_name(table)
                        .key("Id", s(k))
                        .update_expression("SET hits = :v")
                        .expression_attribute_values(":v", n_val(b + delta))
                        .send()
                        .await?;
                }
            }
        }
        tx.commit().await
    }

    /// One transaction of `driver`, measured under a fresh tag: its requests, its time, whether
    /// it committed, and what the profile did meanwhile (zero when raw).
    async fn one(&self, driver: Driver, kind: Kind, n: usize) -> One {
        let keys = self.prepare(kind, n).await;
        let tag = self.next_tag.fetch_add(1, Ordering::SeqCst);
        let before = self.target.counts();
        self.recorder.set_tag(tag);
        let t0 = Instant::now();
        let manager = match driver {
            Driver::Library => Some(&self.lib),
            Driver::Locking => Some(&self.locking),
            Driver::PerItem => Some(&self.per_item),
            Driver::LockedReads => Some(&self.locked_reads),
            Driver::ApplyFirst => Some(&self.apply_first),
            Driver::Sequential => Some(&self.seq),
            Driver::Native | Driver::NativeTwice | Driver::NativeOptimistic => None,
        };
        let outcome = if let Some(m) = manager {
            self.run_library(m, kind, &keys)
                .await
                .map_err(|e| e.to_string())
        } else {
            match driver {
                Driver::Native => run_native(&self.admin, &self.table, kind, &keys).await,
                Driver::NativeTwice => {
                    match run_native(&self.admin, &self.table, kind, &keys).await {
                        Ok(()) => run_native(&self.admin, &self.table, kind, &keys).await,
                        e => e,
                    }
                }
                Driver::NativeOptimistic => {
                    let o = optimistic_transfer(
                        &self.admin,
                        &self.table,
                        "hits",
                        (&keys[0], &keys[1], 1),
                        self.native_attempts,
                        &mut rand::rng(),
                    )
                    .await;
                    if o.committed {
                        Ok(())
                    } else {
                        Err(format!("gave up after {} attempts: {o:?}", o.attempts))
                    }
                }
                _ => unreachable!("a library driver has a manager"),
            }
        };
        let elapsed = t0.elapsed();
        self.recorder.set_tag(0);
        let recs = self.recorder.take(tag);
        if std::env::var_os("BENCH_TIMELINE").is_some() && n >= 25 {
            let mut v: Vec<&Rec> = recs.iter().collect();
            v.sort_by_key(|r| r.start);
            eprintln!(
                "timeline {} {} N={n}: {:.1} ms",
                driver.label(),
                kind.label(),
                elapsed.as_secs_f64() * 1e3
            );
            for r in v {
                eprintln!(
                    "  {:7.1} {:7.1} {:4} {} {}",
                    (r.start - t0).as_secs_f64() * 1e3,
                    (r.end - t0).as_secs_f64() * 1e3,
                    r.actions,
                    r.op,
                    if r.ok { "" } else { "FAIL" }
                );
            }
        }
        One {
            recs,
            elapsed,
            outcome,
            counts: self.target.counts().since(&before),
        }
    }

    async fn row(&self, args: &Args, kind: Kind, n: usize) -> Row {
        let drivers = Driver::for_row(kind, n);
        let mut row = Row {
            kind,
            n,
            lib: Stats::default(),
            locking: drivers.contains(&Driver::Locking).then(Stats::default),
            alt: drivers
                .iter()
                .any(|d| matches!(d, Driver::PerItem | Driver::LockedReads))
                .then(Stats::default),
            seq: Stats::default(),
            apply_first: drivers.contains(&Driver::ApplyFirst).then(Stats::default),
            native: drivers.contains(&Driver::Native).then(Stats::default),
            native_twice: drivers.contains(&Driver::NativeTwice).then(Stats::default),
            native_optimistic: drivers
                .contains(&Driver::NativeOptimistic)
                .then(Stats::default),
            profile: None,
        };
        let (warm, count) = (args.warmup(n), args.count(n));
        let t0 = Instant::now();
        let before = self.target.counts();
        for i in 0..warm + count {
            let mut order = drivers.clone();
            // Alternate who goes first.
            if i % 2 == 1 {
                order.reverse();
            }
            for d in order {
                let one = self.one(d, kind, n).await;
                if let Err(e) = &one.outcome {
                    let short: String = e.chars().take(300).collect();
                    eprintln!("  {} {} N={n}: FAILED: {short}", d.label(), kind.label());
                }
                if i >= warm {
                    let st = row.stats_mut(d);
                    match one.outcome {
                        Ok(()) => st.add(&one.recs, one.elapsed),
                        Err(_) => st.errors += 1,
                    }
                    st.profile += one.counts;
                }
            }
        }
        row.profile = self.target.counts_since(before);
        self.recorder.take(0);
        eprintln!(
            "  {}{} N={n}: {count} tx per driver in {:.1} s; library p50 {:.1} ms, {} requests, path {}",
            if self.target.is_profiled() {
                "profile: "
            } else {
                ""
            },
            kind.label(),
            t0.elapsed().as_secs_f64(),
            row.lib.pct(50.0),
            num(row.lib.requests()),
            row.lib.path_median()
        );
        row
    }
}

impl TxBench {
    /// The drivers' managers and an admin client on `{prefix}-items`, `-tx` and `-img`, every
    /// client going to `target`.
    async fn new(args: &Args, prefix: &str, target: Target) -> TxBench {
        let recorder = Recorder::default();
        let client = target.client(vec![common::shared(recorder.clone())]).await;
        let mgr = |d: Driver| d.manager(client.clone(), prefix, args.concurrency);
        TxBench {
            target,
            native_attempts: args.native_attempts,
            admin: client.clone(),
            recorder,
            table: format!("{prefix}-items"),
            lib: mgr(Driver::Library),
            locking: mgr(Driver::Locking),
            per_item: mgr(Driver::PerItem),
            locked_reads: mgr(Driver::LockedReads),
            apply_first: mgr(Driver::ApplyFirst),
            seq: mgr(Driver::Sequential),
            next_tag: AtomicU64::new(1),
        }
    }

    /// Creates the tables and seeds the items every row shares.
    async fn create(&self, args: &Args) {
        self.lib.create_tables().await.expect("tables");
        common::create_table(&self.admin, &self.table).await;
        let max_n = args
            .sizes
            .iter()
            .chain(args.op_sizes.iter())
            .copied()
            .max()
            .unwrap_or(1)
            .max(2);
        let keys: Vec<String> = (0..max_n).map(|i| format!("u{i}")).collect();
        seed(&self.admin, &self.table, &keys).await;
    }

    /// Fills the managers' key-schema caches (DescribeTable), and the profile's, before anything
    /// is measured.
    async fn warm_up(&self) {
        let key = ["u0".to_string()];
        for m in [
            &self.lib,
            &self.locking,
            &self.per_item,
            &self.locked_reads,
            &self.apply_first,
            &self.seq,
        ] {
            self.run_library(m, Kind::Update, &key)
                .await
                .expect("warm-up transaction");
        }
        self.recorder.take_all();
    }

    async fn drop_tables(&self, prefix: &str) {
        common::drop_tables(
            &self.admin,
            &[
                self.table.clone(),
                format!("{prefix}-tx"),
                format!("{prefix}-img"),
            ],
        )
        .await;
    }
}

/// One measured transaction.
struct One {
    recs: Vec<Rec>,
    elapsed: Duration,
    outcome: Result<(), String>,
    counts: Counts,
}

/// Runs every transaction row: the update sizes, then insert, delete and read lock at the op
/// sizes, then the bank transfer. With profile settings, each row again through a fresh profile
/// right after (on tables of their own): the second list.
pub async fn bench_transactions(
    args: &Args,
    prefix: &str,
    profile: Option<&ProfileSettings>,
) -> (Vec<Row>, Option<Vec<Row>>) {
    let bench = TxBench::new(args, prefix, Target::raw()).await;
    bench.create(args).await;
    bench.warm_up().await;
    let profiled_prefix = format!("{prefix}-p");
    if let Some(settings) = profile {
        TxBench::new(args, &profiled_prefix, Target::profiled(settings))
            .await
            .create(args)
            .await;
    }

    let mut plan: Vec<(Kind, usize)> = args.sizes.iter().map(|&n| (Kind::Update, n)).collect();
    for kind in [Kind::Insert, Kind::Delete, Kind::Read] {
        plan.extend(args.op_sizes.iter().map(|&n| (kind, n)));
    }
    plan.push((Kind::Transfer, 2));
    plan.retain(|&(_, n)| n > 0);
    let mut rows = Vec::new();
    let mut profiled = profile.map(|_| Vec::new());
    for (kind, n) in plan {
        rows.push(bench.row(args, kind, n).await);
        if let (Some(settings), Some(out)) = (profile, profiled.as_mut()) {
            let b = TxBench::new(args, &profiled_prefix, Target::profiled(settings)).await;
            b.warm_up().await;
            out.push(b.row(args, kind, n).await);
        }
    }
    if !args.keep_tables {
        bench.drop_tables(prefix).await;
        if profile.is_some() {
            let raw = TxBench::new(args, &profiled_prefix, Target::raw()).await;
            raw.drop_tables(&profiled_prefix).await;
        }
    }
    (rows, profiled)
}
