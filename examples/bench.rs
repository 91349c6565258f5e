//! Performance benchmark (issue 8): requests, write units, critical path and commit latency of
//! N-item transactions, against a sequential driver of the same protocol (the Java library's shape)
//! and native `TransactWriteItems`, all in one run; then the ticket-queue lock against a naive
//! lease-lock retry loop.
//!
//! ```text
//! export AWS_ENDPOINT_URL_DYNAMODB=$(scripts/dynamodb-local start)
//! cargo run --release --example bench            # full run (a few minutes)
//! cargo run --release --example bench -- --quick # smoke run
//! ```
//!
//! Every request is seen by an SDK interceptor defined here, which records its operation, the number
//! of actions (TransactWriteItems / BatchWriteItem), and when it was sent and answered. From the
//! intervals of one transaction the critical path is the longest chain of requests each of which was
//! sent after the previous one was answered.
//!
//! Write units assume small items (< 1 KB): PutItem / UpdateItem / DeleteItem = 1, each
//! TransactWriteItems action = 2 (condition checks included), each BatchWriteItem item = 1.
//!
//! The last line printed is one JSON object (keys of the per-N maps are N).

#[path = "common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::interceptors::{
    BeforeSerializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
    FinalizerInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::operation::batch_write_item::BatchWriteItemInput;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsInput;
use aws_sdk_dynamodb::types::{
    AttributeValue, Delete, Put, PutRequest, TransactWriteItem, Update, WriteRequest,
};
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_types::config_bag::{Storable, StoreReplace};
use clap::Parser;
use dynamodb_transactions::TransactionManager;
use dynamodb_transactions::lock::Wait;
use dynamodb_transactions::lock::lease::LeaseLock;
use dynamodb_transactions::lock::queue::QueueLock;
use futures::StreamExt;

#[derive(Parser, Debug, Clone)]
#[command(about = "Requests, critical path and latency of transactions and locks")]
struct Args {
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
    /// Measured transactions per driver for N > 100.
    #[arg(long, default_value_t = 2)]
    large: usize,
    /// Unmeasured warm-up transactions per driver and row (at most 1 for N > 100).
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Contenders on the one lock.
    #[arg(long, default_value_t = 16)]
    contenders: usize,
    /// Acquisitions per contender.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// How long a holder keeps the lock, ms.
    #[arg(long, default_value_t = 5)]
    hold_ms: u64,
    /// Sleep between tries of the naive lease-lock loop, ms.
    #[arg(long, default_value_t = 20)]
    naive_sleep_ms: u64,
    /// Disable the write-only fast path, to measure the locking protocol on write-only
    /// transactions too.
    #[arg(long)]
    locking: bool,
    /// `Settings::concurrency` of the library driver (default: the library's default).
    #[arg(long)]
    concurrency: Option<usize>,
    /// Fast smoke run: few transactions, few lock rounds.
    #[arg(long)]
    quick: bool,
    /// Skip the transaction benchmark.
    #[arg(long)]
    no_tx: bool,
    /// Skip the lock benchmark.
    #[arg(long)]
    no_locks: bool,
    /// Keep the tables afterwards.
    #[arg(long)]
    keep_tables: bool,
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
}

// ---------------------------------------------------------------------------------------------
// Request recorder (SDK interceptor)
// ---------------------------------------------------------------------------------------------

/// One request attempt as sent and answered.
#[derive(Debug, Clone)]
struct Rec {
    tag: u64,
    op: String,
    /// Actions of a TransactWriteItems, items of a BatchWriteItem, else 1.
    actions: u32,
    start: Instant,
    end: Instant,
    /// Whether DynamoDB answered with success (a failed condition counts as a failure).
    ok: bool,
}

#[derive(Debug, Default)]
struct RecState {
    /// Attached to requests made from now on; 0 = not measured.
    tag: u64,
    recs: Vec<Rec>,
}

/// Records every request attempt of the clients it is attached to.
#[derive(Debug, Clone, Default)]
struct Recorder(Arc<Mutex<RecState>>);

/// Per-request state kept in the operation's config bag between hooks.
#[derive(Debug, Clone)]
struct InFlight {
    tag: u64,
    op: String,
    actions: u32,
    start: Option<Instant>,
}

impl Storable for InFlight {
    type Storer = StoreReplace<Self>;
}

type HookResult = Result<(), aws_sdk_dynamodb::error::BoxError>;

impl Recorder {
    fn set_tag(&self, tag: u64) {
        self.0.lock().expect("recorder").tag = tag;
    }

    /// Removes and returns the records of `tag`.
    fn take(&self, tag: u64) -> Vec<Rec> {
        let mut s = self.0.lock().expect("recorder");
        let (mine, rest) = std::mem::take(&mut s.recs)
            .into_iter()
            .partition(|r| r.tag == tag);
        s.recs = rest;
        mine
    }

    fn take_all(&self) -> Vec<Rec> {
        std::mem::take(&mut self.0.lock().expect("recorder").recs)
    }
}

impl Intercept for Recorder {
    fn name(&self) -> &'static str {
        "BenchRecorder"
    }

    fn read_before_serialization(
        &self,
        ctx: &BeforeSerializationInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> HookResult {
        let op = cfg
            .load::<Metadata>()
            .map(|m| m.name().to_string())
            .unwrap_or_default();
        let input = ctx.input();
        let actions = if let Some(t) = input.downcast_ref::<TransactWriteItemsInput>() {
            t.transact_items().len() as u32
        } else if let Some(b) = input.downcast_ref::<BatchWriteItemInput>() {
            b.request_items()
                .map(|m| m.values().map(|v| v.len() as u32).sum())
                .unwrap_or(0)
        } else {
            1
        };
        let tag = self.0.lock().expect("recorder").tag;
        cfg.interceptor_state().store_put(InFlight {
            tag,
            op,
            actions,
            start: None,
        });
        Ok(())
    }

    fn read_before_transmit(
        &self,
        _ctx: &BeforeTransmitInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> HookResult {
        if let Some(f) = cfg.load::<InFlight>().cloned() {
            cfg.interceptor_state().store_put(InFlight {
                start: Some(Instant::now()),
                ..f
            });
        }
        Ok(())
    }

    fn read_after_attempt(
        &self,
        ctx: &FinalizerInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> HookResult {
        let end = Instant::now();
        let ok = matches!(ctx.output_or_error(), Some(Ok(_)));
        if let Some(f) = cfg.load::<InFlight>().cloned()
            && let Some(start) = f.start
        {
            self.0.lock().expect("recorder").recs.push(Rec {
                tag: f.tag,
                op: f.op.clone(),
                actions: f.actions,
                start,
                end,
                ok,
            });
            cfg.interceptor_state()
                .store_put(InFlight { start: None, ..f });
        }
        Ok(())
    }
}

/// Write units of a request under the small-item model.
fn write_units(r: &Rec) -> u32 {
    match r.op.as_str() {
        "PutItem" | "UpdateItem" | "DeleteItem" => 1,
        "TransactWriteItems" => 2 * r.actions,
        "BatchWriteItem" => r.actions,
        _ => 0,
    }
}

/// The longest chain of requests in which each was sent after the previous one was answered.
fn critical_path(recs: &[Rec]) -> usize {
    let mut iv: Vec<(Instant, Instant)> = recs.iter().map(|r| (r.start, r.end)).collect();
    iv.sort();
    let mut best = vec![1usize; iv.len()];
    for i in 0..iv.len() {
        for j in 0..i {
            if iv[j].1 <= iv[i].0 && best[j] + 1 > best[i] {
                best[i] = best[j] + 1;
            }
        }
    }
    best.into_iter().max().unwrap_or(0)
}

fn short_op(op: &str) -> &str {
    match op {
        "PutItem" => "Put",
        "UpdateItem" => "Upd",
        "DeleteItem" => "Del",
        "GetItem" => "Get",
        "TransactWriteItems" => "TWI",
        "TransactGetItems" => "TGI",
        "BatchWriteItem" => "BWI",
        "BatchGetItem" => "BGI",
        "Query" => "Query",
        "DescribeTable" => "Desc",
        other => other,
    }
}

// ---------------------------------------------------------------------------------------------
// Transactions
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Update,
    Insert,
    Delete,
    Read,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Update => "update",
            Kind::Insert => "insert",
            Kind::Delete => "delete",
            Kind::Read => "read lock",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Driver {
    Library,
    Sequential,
    Native,
}

/// What one driver did over the measured transactions of one row.
#[derive(Debug, Default, Clone)]
struct Stats {
    txs: usize,
    ops: BTreeMap<String, u64>,
    /// Failed requests per operation (conditions that did not hold, conflicts).
    failed: BTreeMap<String, u64>,
    requests: u64,
    units: u64,
    paths: Vec<usize>,
    lat_ms: Vec<f64>,
    /// Sum of request latencies per operation, ms.
    op_ms: BTreeMap<String, f64>,
    /// Sum over transactions of the time no request of it was in flight, ms.
    idle_ms: f64,
}

impl Stats {
    fn add(&mut self, recs: &[Rec], elapsed: Duration) {
        self.txs += 1;
        for r in recs {
            *self.ops.entry(r.op.clone()).or_default() += 1;
            if !r.ok {
                *self.failed.entry(r.op.clone()).or_default() += 1;
            }
            *self.op_ms.entry(r.op.clone()).or_default() +=
                r.end.duration_since(r.start).as_secs_f64() * 1000.0;
            self.units += u64::from(write_units(r));
        }
        self.idle_ms += (elapsed.as_secs_f64() - busy(recs).as_secs_f64()).max(0.0) * 1000.0;
        self.requests += recs.len() as u64;
        self.paths.push(critical_path(recs));
        self.lat_ms.push(elapsed.as_secs_f64() * 1000.0);
    }

    fn per_tx(&self, v: u64) -> f64 {
        v as f64 / self.txs.max(1) as f64
    }

    fn requests(&self) -> f64 {
        self.per_tx(self.requests)
    }

    fn units(&self) -> f64 {
        self.per_tx(self.units)
    }

    fn ops_text(&self) -> String {
        let mut parts = Vec::new();
        for (op, c) in &self.ops {
            let failed = match self.failed.get(op) {
                Some(&f) => format!(" ({} failed)", num(self.per_tx(f))),
                None => String::new(),
            };
            parts.push(format!("{} {}{failed}", num(self.per_tx(*c)), short_op(op)));
        }
        parts.join(" + ")
    }

    fn path_median(&self) -> usize {
        let mut p = self.paths.clone();
        p.sort_unstable();
        if p.is_empty() {
            0
        } else {
            common::percentile(&p, 50.0)
        }
    }

    fn path_text(&self) -> String {
        let (lo, hi) = (
            self.paths.iter().min().copied().unwrap_or(0),
            self.paths.iter().max().copied().unwrap_or(0),
        );
        let med = self.path_median();
        if lo == hi {
            format!("{med}")
        } else {
            format!("{med} ({lo}–{hi})")
        }
    }

    fn pct(&self, p: f64) -> f64 {
        let mut l = self.lat_ms.clone();
        l.sort_by(f64::total_cmp);
        if l.is_empty() {
            f64::NAN
        } else {
            common::percentile(&l, p)
        }
    }
}

/// Length of the union of the requests' intervals.
fn busy(recs: &[Rec]) -> Duration {
    let mut iv: Vec<(Instant, Instant)> = recs.iter().map(|r| (r.start, r.end)).collect();
    iv.sort();
    let mut total = Duration::ZERO;
    let mut cur: Option<(Instant, Instant)> = None;
    for (a, b) in iv {
        cur = match cur {
            Some((s, e)) if a <= e => Some((s, e.max(b))),
            Some((s, e)) => {
                total += e - s;
                Some((a, b))
            }
            None => Some((a, b)),
        };
    }
    if let Some((s, e)) = cur {
        total += e - s;
    }
    total
}

/// Formats a per-transaction mean: integer when it is one.
fn num(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i64)
    } else {
        format!("{v:.1}")
    }
}

#[derive(Debug, Clone)]
struct Row {
    kind: Kind,
    n: usize,
    lib: Stats,
    seq: Stats,
    native: Option<Stats>,
}

struct TxBench {
    admin: Client,
    recorder: Recorder,
    table: String,
    lib: TransactionManager,
    seq: TransactionManager,
    next_tag: AtomicU64,
    next_batch: AtomicU64,
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_string())
}

fn n_val(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// Padding so items look like small records (about 100 bytes).
const PAD: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

impl TxBench {
    /// Writes items `keys` (hits = 0) with BatchWriteItem, unmeasured.
    async fn seed(&self, keys: &[String]) {
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
                    let out = self
                        .admin
                        .batch_write_item()
                        .request_items(&self.table, reqs.clone())
                        .send()
                        .await
                        .expect("seed");
                    reqs = out
                        .unprocessed_items
                        .and_then(|mut m| m.remove(&self.table))
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

    /// Keys one transaction of `kind` with `n` items works on (seeded when they must exist).
    async fn prepare(&self, kind: Kind, n: usize) -> Vec<String> {
        match kind {
            Kind::Update | Kind::Read => (0..n).map(|i| format!("u{i}")).collect(),
            Kind::Insert => {
                let b = self.next_batch.fetch_add(1, Ordering::SeqCst);
                (0..n).map(|i| format!("i{b}-{i}")).collect()
            }
            Kind::Delete => {
                let b = self.next_batch.fetch_add(1, Ordering::SeqCst);
                let keys: Vec<String> = (0..n).map(|i| format!("d{b}-{i}")).collect();
                self.seed(&keys).await;
                keys
            }
        }
    }

    async fn run_library(&self, mgr: &TransactionManager, kind: Kind, keys: &[String]) {
        let tx = mgr.begin();
        for k in keys {
            match kind {
                Kind::Update => {
                    tx.update_item()
                        .table_name(&self.table)
                        .key("Id", s(k))
                        .update_expression("SET hits = hits + :one")
                        .expression_attribute_values(":one", n_val(1))
                        .send()
                        .await
                        .expect("update");
                }
                Kind::Insert => {
                    tx.put_item()
                        .table_name(&self.table)
                        .item("Id", s(k))
                        .item("hits", n_val(0))
                        .item("pad", s(PAD))
                        .send()
                        .await
                        .expect("put");
                }
                Kind::Delete => {
                    tx.delete_item()
                        .table_name(&self.table)
                        .key("Id", s(k))
                        .send()
                        .await
                        .expect("delete");
                }
                Kind::Read => {
                    let out = tx
                        .get_item()
                        .table_name(&self.table)
                        .key("Id", s(k))
                        .send()
                        .await
                        .expect("get");
                    assert!(out.item().is_some(), "item {k} exists");
                }
            }
        }
        tx.commit().await.expect("commit");
    }

    async fn run_native(&self, kind: Kind, keys: &[String]) {
        let items: Vec<TransactWriteItem> = keys
            .iter()
            .map(|k| match kind {
                Kind::Update => TransactWriteItem::builder()
                    .update(
                        Update::builder()
                            .table_name(&self.table)
                            .key("Id", s(k))
                            .update_expression("SET hits = hits + :one")
                            .expression_attribute_values(":one", n_val(1))
                            .build()
                            .expect("update"),
                    )
                    .build(),
                Kind::Insert => TransactWriteItem::builder()
                    .put(
                        Put::builder()
                            .table_name(&self.table)
                            .item("Id", s(k))
                            .item("hits", n_val(0))
                            .item("pad", s(PAD))
                            .condition_expression("attribute_not_exists(Id)")
                            .build()
                            .expect("put"),
                    )
                    .build(),
                Kind::Delete => TransactWriteItem::builder()
                    .delete(
                        Delete::builder()
                            .table_name(&self.table)
                            .key("Id", s(k))
                            .build()
                            .expect("delete"),
                    )
                    .build(),
                Kind::Read => unreachable!("no native read locks"),
            })
            .collect();
        self.admin
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await
            .expect("native transaction");
    }

    /// One transaction of `driver`, measured under a fresh tag.
    async fn one(&self, driver: Driver, kind: Kind, n: usize) -> (Vec<Rec>, Duration) {
        let keys = self.prepare(kind, n).await;
        let tag = self.next_tag.fetch_add(1, Ordering::SeqCst);
        self.recorder.set_tag(tag);
        let t0 = Instant::now();
        match driver {
            Driver::Library => self.run_library(&self.lib, kind, &keys).await,
            Driver::Sequential => self.run_library(&self.seq, kind, &keys).await,
            Driver::Native => self.run_native(kind, &keys).await,
        }
        let elapsed = t0.elapsed();
        self.recorder.set_tag(0);
        (self.recorder.take(tag), elapsed)
    }

    /// One row: the drivers take turns, transaction by transaction, so that noise from the shared
    /// machine hits them alike.
    async fn row(&self, args: &Args, kind: Kind, n: usize) -> Row {
        let native = kind != Kind::Read && n <= 100;
        let mut row = Row {
            kind,
            n,
            lib: Stats::default(),
            seq: Stats::default(),
            native: native.then(Stats::default),
        };
        let (warm, count) = (args.warmup(n), args.count(n));
        let t0 = Instant::now();
        for i in 0..warm + count {
            let mut drivers = vec![Driver::Library, Driver::Sequential];
            if native {
                drivers.push(Driver::Native);
            }
            // Alternate who goes first.
            if i % 2 == 1 {
                drivers.reverse();
            }
            for d in drivers {
                let (recs, el) = self.one(d, kind, n).await;
                if i >= warm {
                    match d {
                        Driver::Library => row.lib.add(&recs, el),
                        Driver::Sequential => row.seq.add(&recs, el),
                        Driver::Native => row.native.as_mut().expect("native").add(&recs, el),
                    }
                }
            }
        }
        self.recorder.take(0);
        eprintln!(
            "  {} N={n}: {count} tx per driver in {:.1} s; library p50 {:.1} ms, {} requests, path {}",
            kind.label(),
            t0.elapsed().as_secs_f64(),
            row.lib.pct(50.0),
            num(row.lib.requests()),
            row.lib.path_text()
        );
        row
    }
}

async fn bench_transactions(args: &Args, prefix: &str) -> Vec<Row> {
    let recorder = Recorder::default();
    let client = common::client(vec![common::shared(recorder.clone())]).await;
    let table = format!("{prefix}-items");
    let mgr = |c: Client, seq: bool| {
        TransactionManager::builder(c)
            .transactions_table(format!("{prefix}-tx"))
            .images_table(format!("{prefix}-img"))
            .configure(|st| {
                if let Some(c) = args.concurrency
                    && !seq
                {
                    st.concurrency = c;
                }
                if seq {
                    st.concurrency = 1;
                    st.one_shot_max_items = 0;
                }
                // The sequential driver is the Java library's shape: always the locking protocol.
                if seq || args.locking {
                    st.write_only_fast_path = false;
                }
            })
            .build()
    };
    let lib = mgr(client.clone(), false);
    let seq = mgr(client.clone(), true);
    lib.create_tables().await.expect("tables");
    common::create_table(&client, &table).await;
    let bench = TxBench {
        admin: client.clone(),
        recorder: recorder.clone(),
        table,
        lib,
        seq,
        next_tag: AtomicU64::new(1),
        next_batch: AtomicU64::new(0),
    };
    let max_n = args
        .sizes
        .iter()
        .chain(args.op_sizes.iter())
        .copied()
        .max()
        .unwrap_or(1);
    let keys: Vec<String> = (0..max_n).map(|i| format!("u{i}")).collect();
    bench.seed(&keys).await;
    // Fill the managers' key-schema caches (DescribeTable) before anything is measured.
    for m in [&bench.lib, &bench.seq] {
        bench.run_library(m, Kind::Update, &keys[..1]).await;
    }
    recorder.take_all();

    let mut plan: Vec<(Kind, usize)> = args.sizes.iter().map(|&n| (Kind::Update, n)).collect();
    for kind in [Kind::Insert, Kind::Delete, Kind::Read] {
        plan.extend(args.op_sizes.iter().map(|&n| (kind, n)));
    }
    plan.retain(|&(_, n)| n > 0);
    let mut rows = Vec::new();
    for (kind, n) in plan {
        rows.push(bench.row(args, kind, n).await);
    }
    if !args.keep_tables {
        common::drop_tables(
            &client,
            &[
                bench.table.clone(),
                format!("{prefix}-tx"),
                format!("{prefix}-img"),
            ],
        )
        .await;
    }
    rows
}

fn f1(v: f64) -> String {
    if v.is_nan() {
        "—".into()
    } else {
        format!("{v:.1}")
    }
}

fn tx_table(rows: &[Row]) -> String {
    let mut out = String::new();
    out.push_str(
        "| op | N | requests by op (per tx) | requests | write units | critical path | p50 ms | p99 ms \
         | sequential: requests / path / p50 ms | native: WU / p50 ms | p50 / native | Java model: requests = path |\n",
    );
    out.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        let native = r.native.as_ref();
        let java = match r.kind {
            Kind::Update => format!("{}", 7 * r.n + 6),
            _ => "—".into(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} / {} / {} | {} | {} | {} |",
            r.kind.label(),
            r.n,
            r.lib.ops_text(),
            num(r.lib.requests()),
            num(r.lib.units()),
            r.lib.path_text(),
            f1(r.lib.pct(50.0)),
            f1(r.lib.pct(99.0)),
            num(r.seq.requests()),
            r.seq.path_text(),
            f1(r.seq.pct(50.0)),
            native
                .map(|s| format!("{} / {}", num(s.units()), f1(s.pct(50.0))))
                .unwrap_or_else(|| "—".into()),
            native
                .map(|s| format!("{:.2}×", r.lib.pct(50.0) / s.pct(50.0)))
                .unwrap_or_else(|| "—".into()),
            java,
        );
    }
    out
}

/// Where the library's commit time goes: mean latency per request by operation, and the time
/// with no request in flight (client-side work and scheduling).
fn breakdown_table(rows: &[Row]) -> String {
    let mut out = String::new();
    out.push_str(
        "| op | N | driver | mean request latency by op, ms | no request in flight, ms per tx | p50 ms |\n",
    );
    out.push_str("|---|---|---|---|---|---|\n");
    for r in rows {
        let mut drivers = vec![("library", &r.lib), ("sequential", &r.seq)];
        if let Some(n) = &r.native {
            drivers.push(("native", n));
        }
        for (name, st) in drivers {
            let lat: Vec<String> = st
                .op_ms
                .iter()
                .map(|(op, ms)| format!("{} {:.2}", short_op(op), ms / st.ops[op] as f64))
                .collect();
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {:.1} | {} |",
                r.kind.label(),
                r.n,
                name,
                lat.join(", "),
                st.idle_ms / st.txs.max(1) as f64,
                f1(st.pct(50.0)),
            );
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Locks
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Default, Clone)]
struct LockFigures {
    name: String,
    acquisitions: usize,
    acq_per_s: f64,
    handoff_ms: Vec<f64>,
    wait_ms: Vec<f64>,
    reads_per_waiter_s: f64,
    requests_per_waiter_s: f64,
    /// Acquisitions that went back to the contender that had just released.
    reacquired: u64,
    /// Acquisitions while another contender held the lock (mutual exclusion check).
    overlaps: u64,
}

impl LockFigures {
    fn pct(v: &[f64], p: f64) -> f64 {
        let mut l = v.to_vec();
        l.sort_by(f64::total_cmp);
        if l.is_empty() {
            f64::NAN
        } else {
            common::percentile(&l, p)
        }
    }
}

/// Shared bookkeeping of one lock run.
#[derive(Default)]
struct Handoffs {
    /// When the current holder called release, and which contender it is.
    released: Mutex<Option<(Instant, usize)>>,
    /// Acquisitions by the contender that released the lock last.
    again: AtomicU64,
    /// The contender holding the lock as far as the contenders know.
    holder: Mutex<Option<usize>>,
    /// Acquisitions that returned while another contender still held the lock (must stay 0).
    overlaps: AtomicU64,
    handoff_ms: Mutex<Vec<f64>>,
    wait_ms: Mutex<Vec<f64>>,
}

impl Handoffs {
    fn acquired(&self, asked: Instant, who: usize) {
        let now = Instant::now();
        if self.holder.lock().expect("handoffs").replace(who).is_some() {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        match self.released.lock().expect("handoffs").take() {
            Some((_, prev)) if prev == who => {
                self.again.fetch_add(1, Ordering::SeqCst);
            }
            Some((t, _)) => self
                .handoff_ms
                .lock()
                .expect("handoffs")
                .push(now.duration_since(t).as_secs_f64() * 1000.0),
            None => {}
        }
        self.wait_ms
            .lock()
            .expect("handoffs")
            .push(now.duration_since(asked).as_secs_f64() * 1000.0);
    }

    fn releasing(&self, who: usize) {
        *self.holder.lock().expect("handoffs") = None;
        *self.released.lock().expect("handoffs") = Some((Instant::now(), who));
    }

    fn figures(&self, name: String, elapsed: Duration, recs: &[Rec]) -> LockFigures {
        let wait_ms = self.wait_ms.lock().expect("handoffs").clone();
        let waiter_s: f64 = wait_ms.iter().sum::<f64>() / 1000.0;
        let reads = recs
            .iter()
            .filter(|r| matches!(r.op.as_str(), "Query" | "GetItem"))
            .count();
        LockFigures {
            name,
            acquisitions: wait_ms.len(),
            acq_per_s: wait_ms.len() as f64 / elapsed.as_secs_f64(),
            handoff_ms: self.handoff_ms.lock().expect("handoffs").clone(),
            reads_per_waiter_s: reads as f64 / waiter_s.max(1e-9),
            requests_per_waiter_s: recs.len() as f64 / waiter_s.max(1e-9),
            reacquired: self.again.load(Ordering::SeqCst),
            overlaps: self.overlaps.load(Ordering::SeqCst),
            wait_ms,
        }
    }
}

async fn bench_queue(
    args: &Args,
    table: &str,
    label: &str,
    poll: Option<(Duration, Duration)>,
) -> LockFigures {
    let recorder = Recorder::default();
    let client = common::client(vec![common::shared(recorder.clone())]).await;
    let name = format!("queue-{}", uuid::Uuid::new_v4().simple());
    let shared = Arc::new(Handoffs::default());
    let hold = Duration::from_millis(args.hold_ms);
    recorder.set_tag(1);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for who in 0..args.contenders {
        let mut b = QueueLock::builder(client.clone()).table(table);
        if let Some((head, max)) = poll {
            b = b.poll_interval(head, max);
        }
        let lock = b.build().expect("queue lock");
        let (shared, name, rounds) = (shared.clone(), name.clone(), args.rounds);
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let asked = Instant::now();
                let g = lock
                    .acquire(&name, Wait::For(Duration::from_secs(120)))
                    .await
                    .expect("queue acquire");
                shared.acquired(asked, who);
                tokio::time::sleep(hold).await;
                shared.releasing(who);
                g.release().await.expect("queue release");
            }
        }));
    }
    for t in tasks {
        t.await.expect("contender");
    }
    let elapsed = started.elapsed();
    recorder.set_tag(0);
    shared.figures(label.to_string(), elapsed, &recorder.take_all())
}

async fn bench_lease(args: &Args, table: &str) -> LockFigures {
    let recorder = Recorder::default();
    let client = common::client(vec![common::shared(recorder.clone())]).await;
    let name = format!("lease-{}", uuid::Uuid::new_v4().simple());
    let shared = Arc::new(Handoffs::default());
    let hold = Duration::from_millis(args.hold_ms);
    let pause = Duration::from_millis(args.naive_sleep_ms);
    recorder.set_tag(1);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for who in 0..args.contenders {
        let lock = LeaseLock::builder(client.clone())
            .table(table)
            .build()
            .expect("lease lock");
        let (shared, name, rounds) = (shared.clone(), name.clone(), args.rounds);
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let asked = Instant::now();
                let g = loop {
                    if let Some(g) = lock.try_acquire(&name).await.expect("lease try_acquire") {
                        break g;
                    }
                    tokio::time::sleep(pause).await;
                };
                shared.acquired(asked, who);
                tokio::time::sleep(hold).await;
                shared.releasing(who);
                g.release().await.expect("lease release");
            }
        }));
    }
    for t in tasks {
        t.await.expect("contender");
    }
    let elapsed = started.elapsed();
    recorder.set_tag(0);
    shared.figures(
        format!("naive lease loop ({} ms sleeps)", args.naive_sleep_ms),
        elapsed,
        &recorder.take_all(),
    )
}

fn lock_table(args: &Args, figs: &[LockFigures]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| lock ({} contenders, hold {} ms) | acquisitions | acquisitions/s | handoff p50 ms | handoff p99 ms | re-taken by the releaser | wait p50 ms | wait max ms | reads / waiter / s | requests / waiter / s | overlaps |",
        args.contenders, args.hold_ms
    );
    out.push_str("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for f in figs {
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} | {} | {} | {} | {} | {} | {:.1} | {:.1} | {} |",
            f.name,
            f.acquisitions,
            f.acq_per_s,
            f1(LockFigures::pct(&f.handoff_ms, 50.0)),
            f1(LockFigures::pct(&f.handoff_ms, 99.0)),
            f.reacquired,
            f1(LockFigures::pct(&f.wait_ms, 50.0)),
            f1(LockFigures::pct(&f.wait_ms, 100.0)),
            f.reads_per_waiter_s,
            f.requests_per_waiter_s,
            f.overlaps,
        );
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------------------------

fn json_map(rows: &[&Row], f: impl Fn(&Row) -> Option<String>) -> String {
    let parts: Vec<String> = rows
        .iter()
        .filter_map(|r| f(r).map(|v| format!("\"{}\":{}", r.n, v)))
        .collect();
    format!("{{{}}}", parts.join(","))
}

fn jnum(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.2}")
    } else {
        "null".into()
    }
}

fn json(rows: &[Row], queue: Option<&LockFigures>, lease: Option<&LockFigures>) -> String {
    let updates: Vec<&Row> = rows.iter().filter(|r| r.kind == Kind::Update).collect();
    let mut fields = vec![
        format!(
            "\"requests\":{}",
            json_map(&updates, |r| Some(num(r.lib.requests())))
        ),
        format!(
            "\"write_units\":{}",
            json_map(&updates, |r| Some(num(r.lib.units())))
        ),
        format!(
            "\"critical_path\":{}",
            json_map(&updates, |r| Some(r.lib.path_median().to_string()))
        ),
        format!(
            "\"p50_ms\":{}",
            json_map(&updates, |r| Some(jnum(r.lib.pct(50.0))))
        ),
        format!(
            "\"p99_ms\":{}",
            json_map(&updates, |r| Some(jnum(r.lib.pct(99.0))))
        ),
        format!(
            "\"native_p50_ms\":{}",
            json_map(&updates, |r| r.native.as_ref().map(|s| jnum(s.pct(50.0))))
        ),
        format!(
            "\"sequential_p50_ms\":{}",
            json_map(&updates, |r| Some(jnum(r.seq.pct(50.0))))
        ),
        format!(
            "\"sequential_requests\":{}",
            json_map(&updates, |r| Some(num(r.seq.requests())))
        ),
        format!(
            "\"sequential_critical_path\":{}",
            json_map(&updates, |r| Some(r.seq.path_median().to_string()))
        ),
    ];
    for kind in [Kind::Insert, Kind::Delete, Kind::Read] {
        let of: Vec<&Row> = rows.iter().filter(|r| r.kind == kind).collect();
        if of.is_empty() {
            continue;
        }
        let key = kind.label().replace(' ', "_");
        fields.push(format!(
            "\"{key}\":{{\"requests\":{},\"critical_path\":{},\"p50_ms\":{}}}",
            json_map(&of, |r| Some(num(r.lib.requests()))),
            json_map(&of, |r| Some(r.lib.path_median().to_string())),
            json_map(&of, |r| Some(jnum(r.lib.pct(50.0)))),
        ));
    }
    if let Some(q) = queue {
        fields.push(format!(
            "\"queue_handoff_p50_ms\":{}",
            jnum(LockFigures::pct(&q.handoff_ms, 50.0))
        ));
        fields.push(format!(
            "\"queue_handoff_p99_ms\":{}",
            jnum(LockFigures::pct(&q.handoff_ms, 99.0))
        ));
        fields.push(format!(
            "\"queue_reads_per_waiter_per_s\":{}",
            jnum(q.reads_per_waiter_s)
        ));
        fields.push(format!(
            "\"queue_acquisitions_per_s\":{}",
            jnum(q.acq_per_s)
        ));
    }
    if let Some(l) = lease {
        fields.push(format!(
            "\"lease_handoff_p50_ms\":{}",
            jnum(LockFigures::pct(&l.handoff_ms, 50.0))
        ));
        fields.push(format!(
            "\"lease_handoff_p99_ms\":{}",
            jnum(LockFigures::pct(&l.handoff_ms, 99.0))
        ));
        fields.push(format!(
            "\"lease_acquisitions_per_s\":{}",
            jnum(l.acq_per_s)
        ));
    }
    format!("{{{}}}", fields.join(","))
}

fn goals(rows: &[Row], queue: Option<&LockFigures>) -> String {
    let mut out = String::new();
    let mark = |ok: bool| if ok { "met" } else { "NOT met" };
    let updates: Vec<&Row> = rows.iter().filter(|r| r.kind == Kind::Update).collect();
    if !updates.is_empty() {
        let req_ok = updates
            .iter()
            .all(|r| r.lib.requests() <= (2 * r.n + 8) as f64);
        let detail: Vec<String> = updates
            .iter()
            .map(|r| format!("N={}: {} ≤ {}", r.n, num(r.lib.requests()), 2 * r.n + 8))
            .collect();
        let _ = writeln!(
            out,
            "- Requests per N-item update transaction ≤ 2N + 8: **{}** ({})",
            mark(req_ok),
            detail.join(", ")
        );
        let small: Vec<&&Row> = updates.iter().filter(|r| r.n <= 100).collect();
        let path_ok = small.iter().all(|r| r.lib.path_median() <= 8);
        let detail: Vec<String> = small
            .iter()
            .map(|r| format!("N={}: {}", r.n, r.lib.path_text()))
            .collect();
        let _ = writeln!(
            out,
            "- Critical path ≤ 8 round trips for N ≤ 100: **{}** ({})",
            mark(path_ok),
            detail.join(", ")
        );
        if let Some(r) = updates.iter().find(|r| r.n == 25)
            && let Some(nat) = &r.native
        {
            let ratio = r.lib.pct(50.0) / nat.pct(50.0);
            let _ = writeln!(
                out,
                "- Commit latency at N = 25 within 3× native: **{}** ({:.1} ms vs {:.1} ms, {:.2}×)",
                mark(ratio <= 3.0),
                r.lib.pct(50.0),
                nat.pct(50.0),
                ratio
            );
        }
        if let Some(r) = updates.iter().find(|r| r.n == 1000) {
            let _ = writeln!(
                out,
                "- A 1,000-item transaction commits: **{}** ({} committed, p50 {:.0} ms)",
                mark(r.lib.txs > 0),
                r.lib.txs,
                r.lib.pct(50.0)
            );
        }
    }
    if let Some(q) = queue {
        let p50 = LockFigures::pct(&q.handoff_ms, 50.0);
        let _ = writeln!(
            out,
            "- Queue lock handoff p50 < 50 ms with ≤ 20 reads/s per waiter (default settings): **{}** ({:.1} ms, {:.1} reads/s per waiter)",
            mark(p50 < 50.0 && q.reads_per_waiter_s <= 20.0),
            p50,
            q.reads_per_waiter_s
        );
    }
    out
}

#[tokio::main]
async fn main() {
    let mut args = Args::parse();
    common::require_endpoint("bench");
    if args.quick {
        args.small = args.small.min(5);
        args.medium = args.medium.min(2);
        args.large = args.large.min(1);
        args.warmup = args.warmup.min(1);
        args.rounds = args.rounds.min(2);
    }
    let prefix = format!("bench-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    eprintln!("bench: tables {prefix}-*; {args:?}");

    let rows = if args.no_tx {
        Vec::new()
    } else {
        bench_transactions(&args, &prefix).await
    };

    let (mut queue, mut lease, mut tuned) = (None, None, Vec::new());
    if !args.no_locks {
        let admin = common::client(vec![]).await;
        let table = format!("{prefix}-locks");
        dynamodb_transactions::lock::create_lock_table(&admin, &table)
            .await
            .expect("lock table");
        eprintln!("  locks: queue (defaults)");
        queue = Some(bench_queue(&args, &table, "ticket queue (defaults)", None).await);
        for head in [50, 20] {
            eprintln!("  locks: queue (poll head {head} ms)");
            tuned.push(
                bench_queue(
                    &args,
                    &table,
                    &format!("ticket queue (poll head {head} ms, max 2 s)"),
                    Some((Duration::from_millis(head), Duration::from_secs(2))),
                )
                .await,
            );
        }
        eprintln!("  locks: naive lease loop");
        lease = Some(bench_lease(&args, &table).await);
        if !args.keep_tables {
            common::drop_tables(&admin, &[table]).await;
        }
    }

    if !rows.is_empty() {
        println!("### Transactions\n");
        println!("{}", tx_table(&rows));
        println!("#### Where the time goes\n");
        println!("{}", breakdown_table(&rows));
    }
    let figs: Vec<LockFigures> = queue
        .iter()
        .chain(tuned.iter())
        .chain(lease.iter())
        .cloned()
        .collect();
    if !figs.is_empty() {
        println!("### Locks\n");
        println!("{}", lock_table(&args, &figs));
    }
    println!("### Goals\n");
    println!("{}", goals(&rows, queue.as_ref()));
    println!("{}", json(&rows, queue.as_ref(), lease.as_ref()));
}
