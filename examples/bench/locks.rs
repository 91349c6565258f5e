//! The lock scenarios, in the shape of the peer-lock comparison (docs/PERFORMANCE.md):
//! - *uncontended*: one client per lock acquires and releases it in a loop (after warm-ups), the
//!   locks taking turns cycle by cycle;
//! - *contended*: C contenders × R acquisitions of one lock; each hold is a consistent `GetItem`
//!   of a counter, a sleep, and a `PutItem` of the counter + 1, so the final counter checks mutual
//!   exclusion beside an in-process holder flag.
//!
//! Only the locks' own requests are recorded (the counter goes through another client).
//!
//! Beside our queue and lease locks runs the Rust peer `dynamodb-lease` (a conditional `PutItem`
//! to acquire, a `DeleteItem` to release, a fixed cooldown between tries), on a table of its own
//! schema. With `--profile`, every run again right after through a fresh profile.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::TimeToLiveSpecification;
use dynamodb_transactions::fault::ProfileSettings;
use dynamodb_transactions::lock::Wait;
use dynamodb_transactions::lock::lease::{LeaseGuard, LeaseLock};
use dynamodb_transactions::lock::queue::{QueueGuard, QueueLock};

use crate::Args;
use crate::common;
use crate::profile::{Counts, Target};
use crate::recorder::Recorder;
use crate::stats::Dist;
use crate::transactions::{n_val, s};

/// Which lock, and how a contender waits for it.
#[derive(Debug, Clone)]
pub enum LockUnderTest {
    /// `QueueLock::acquire`, optionally with another poll interval (head, max).
    Queue(Option<(Duration, Duration)>),
    /// `LeaseLock::acquire`, polling at this interval.
    Lease(Duration),
    /// `LeaseLock::try_acquire` in a loop with fixed sleeps: the naive baseline.
    NaiveLease(Duration),
    /// The peer `dynamodb-lease`'s `acquire`, with this cooldown between tries.
    Peer(Duration),
}

enum Lock {
    Queue(QueueLock),
    Lease(LeaseLock),
    Naive(LeaseLock, Duration),
    Peer(dynamodb_lease::Client),
}

enum Guard {
    Queue(QueueGuard),
    Lease(LeaseGuard),
    Peer(dynamodb_lease::Lease),
}

/// The lock tables: ours, and the peer's (hash key `key`, time to live on `lease_expiry`).
#[derive(Debug, Clone)]
pub struct Tables {
    pub ours: String,
    pub peer: String,
}

/// The peer's lease and heartbeat, as in the peer comparison (docs/PERFORMANCE.md).
const PEER_LEASE_S: u32 = 2;
const PEER_HEARTBEAT: Duration = Duration::from_millis(500);

const WAIT: Wait = Wait::For(Duration::from_secs(120));

impl Lock {
    /// The peer's client checks its table (`DescribeTable`, `DescribeTimeToLive`): build locks
    /// before recording.
    async fn build(what: &LockUnderTest, client: Client, tables: &Tables) -> Lock {
        let table = tables.ours.as_str();
        match *what {
            LockUnderTest::Queue(poll) => {
                let mut b = QueueLock::builder(client).table(table);
                if let Some((head, max)) = poll {
                    b = b.poll_interval(head, max);
                }
                Lock::Queue(b.build().expect("queue lock"))
            }
            LockUnderTest::Lease(poll) => Lock::Lease(
                LeaseLock::builder(client)
                    .table(table)
                    .poll_interval(poll)
                    .build()
                    .expect("lease lock"),
            ),
            LockUnderTest::NaiveLease(pause) => Lock::Naive(
                LeaseLock::builder(client)
                    .table(table)
                    .build()
                    .expect("lease lock"),
                pause,
            ),
            LockUnderTest::Peer(cooldown) => Lock::Peer(
                dynamodb_lease::Client::builder()
                    .table_name(&tables.peer)
                    .lease_ttl_seconds(PEER_LEASE_S)
                    .extend_every(PEER_HEARTBEAT)
                    .acquire_cooldown(cooldown)
                    .build_and_check_db(client)
                    .await
                    .expect("dynamodb-lease client"),
            ),
        }
    }

    async fn acquire(&self, name: &str) -> Guard {
        match self {
            Lock::Queue(l) => Guard::Queue(l.acquire(name, WAIT).await.expect("queue acquire")),
            Lock::Lease(l) => Guard::Lease(l.acquire(name, WAIT).await.expect("lease acquire")),
            Lock::Naive(l, pause) => loop {
                if let Some(g) = l.try_acquire(name).await.expect("lease try_acquire") {
                    break Guard::Lease(g);
                }
                tokio::time::sleep(*pause).await;
            },
            Lock::Peer(c) => Guard::Peer(c.acquire(name).await.expect("dynamodb-lease acquire")),
        }
    }
}

impl Guard {
    async fn release(self) {
        match self {
            Guard::Queue(g) => g.release().await.expect("queue release"),
            Guard::Lease(g) => g.release().await.expect("lease release"),
            Guard::Peer(g) => g.release().await.expect("dynamodb-lease release"),
        }
    }
}

/// One client acquiring and releasing one lock.
#[derive(Debug, Clone)]
pub struct Uncontended {
    pub name: String,
    /// acquire + release, ms.
    pub cycle: Dist,
    /// Requests per acquire + release.
    pub requests: f64,
}

/// Acquire + release of each lock by its own client, `cycles` times after `warmup` cycles, the
/// locks taking turns cycle by cycle: DynamoDB Local keeps warming up over a run, so locks measured
/// one after the other would not meet the same server.
pub async fn uncontended(
    locks: &[(&LockUnderTest, &str)],
    tables: &Tables,
    warmup: usize,
    cycles: usize,
    target: &Target,
) -> (Vec<Uncontended>, Option<Counts>) {
    let mut under_test = Vec::new();
    for (what, label) in locks {
        let recorder = Recorder::default();
        let client = target.client(vec![common::shared(recorder.clone())]).await;
        let lock = Lock::build(what, client, tables).await;
        let name = format!("solo-{}", uuid::Uuid::new_v4().simple());
        under_test.push((label, recorder, lock, name, Dist::millis()));
    }
    let before = target.counts();
    for i in 0..warmup + cycles {
        for (_, recorder, lock, name, cycle) in &mut under_test {
            if i == warmup {
                recorder.take_all();
                recorder.set_tag(1);
            }
            let t0 = Instant::now();
            lock.acquire(name).await.release().await;
            if i >= warmup {
                cycle.record_duration(t0.elapsed());
            }
        }
    }
    let profile = target.counts_since(before);
    let out = under_test
        .into_iter()
        .map(|(label, recorder, _, _, cycle)| {
            recorder.set_tag(0);
            let recs = recorder.take(1);
            Uncontended {
                name: label.to_string(),
                cycle,
                requests: recs.len() as f64 / cycles.max(1) as f64,
            }
        })
        .collect();
    (out, profile)
}

/// What one contended run measured.
#[derive(Debug, Clone)]
pub struct Contended {
    pub name: String,
    pub acquisitions: usize,
    pub acq_per_s: f64,
    /// Release call → another contender's acquire returned, ms.
    pub handoff: Dist,
    /// acquire called → returned, ms.
    pub wait: Dist,
    /// The FIFO ideal of the longest wait: position at arrival (contenders waiting or holding)
    /// × the mean hold, ms (the largest over acquisitions).
    pub wait_max_ideal_ms: f64,
    pub hold_mean_ms: f64,
    pub reads_per_waiter_s: f64,
    pub requests_per_waiter_s: f64,
    pub requests_per_acq: f64,
    /// Acquisitions that went back to the contender that had just released.
    pub reacquired: u64,
    /// Acquisitions while another contender held the lock (must stay 0).
    pub overlaps: u64,
    /// The counter incremented under the lock equals the acquisitions (mutual exclusion).
    pub counter_exact: bool,
    /// Through the profile: what it did over the run.
    pub profile: Option<Counts>,
}

/// Shared bookkeeping of one contended run.
#[derive(Default)]
struct Board {
    /// When the current holder called release, and which contender it is.
    released: Mutex<Option<(Instant, usize)>>,
    /// Acquisitions by the contender that released the lock last.
    again: AtomicU64,
    /// The contender holding the lock as far as the contenders know.
    holder: Mutex<Option<usize>>,
    overlaps: AtomicU64,
    /// Contenders inside acquire or holding the lock.
    present: AtomicUsize,
    handoff: Mutex<Option<Dist>>,
    /// (wait ms, contenders present when it asked).
    waits: Mutex<Vec<(f64, usize)>>,
    hold: Mutex<Option<Dist>>,
}

impl Board {
    /// Called when a contender starts to acquire; returns its FIFO position.
    fn asking(&self) -> usize {
        self.present.fetch_add(1, Ordering::SeqCst)
    }

    fn acquired(&self, asked: Instant, position: usize, who: usize) {
        let now = Instant::now();
        if self.holder.lock().expect("board").replace(who).is_some() {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        match self.released.lock().expect("board").take() {
            Some((_, prev)) if prev == who => {
                self.again.fetch_add(1, Ordering::SeqCst);
            }
            Some((t, _)) => self
                .handoff
                .lock()
                .expect("board")
                .get_or_insert_with(Dist::millis)
                .record_duration(now.duration_since(t)),
            None => {}
        }
        self.waits
            .lock()
            .expect("board")
            .push((now.duration_since(asked).as_secs_f64() * 1000.0, position));
    }

    /// Called when the holder is about to release: from now on it is no longer ahead of anyone.
    fn releasing(&self, who: usize, held: Duration) {
        self.present.fetch_sub(1, Ordering::SeqCst);
        *self.holder.lock().expect("board") = None;
        *self.released.lock().expect("board") = Some((Instant::now(), who));
        self.hold
            .lock()
            .expect("board")
            .get_or_insert_with(Dist::millis)
            .record_duration(held);
    }
}

/// The critical section: read the counter (consistently), hold, write it back + 1.
async fn hold_counter(client: &Client, table: &str, hold: Duration) {
    let out = client
        .get_item()
        .table_name(table)
        .key("Id", s("counter"))
        .consistent_read(true)
        .send()
        .await
        .expect("counter get");
    let v: i64 = out
        .item()
        .and_then(|i| i.get("n"))
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    tokio::time::sleep(hold).await;
    client
        .put_item()
        .table_name(table)
        .item("Id", s("counter"))
        .item("n", n_val(v + 1))
        .send()
        .await
        .expect("counter put");
}

/// `args.contenders` contenders, `args.rounds` acquisitions each, on one lock name.
pub async fn contended(
    args: &Args,
    what: &LockUnderTest,
    label: &str,
    tables: &Tables,
    counter_table: &str,
    target: &Target,
) -> Contended {
    let recorder = Recorder::default();
    let client = target.client(vec![common::shared(recorder.clone())]).await;
    let plain = target.client(vec![]).await;
    let name = format!("busy-{}", uuid::Uuid::new_v4().simple());
    let board = Arc::new(Board::default());
    let hold = Duration::from_millis(args.hold_ms);
    let mut locks = Vec::new();
    for _ in 0..args.contenders {
        locks.push(Lock::build(what, client.clone(), tables).await);
    }
    recorder.take_all();
    let before = target.counts();
    recorder.set_tag(1);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (who, lock) in locks.into_iter().enumerate() {
        let (board, name, rounds) = (board.clone(), name.clone(), args.rounds);
        let (plain, table) = (plain.clone(), counter_table.to_string());
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let asked = Instant::now();
                let position = board.asking();
                let g = lock.acquire(&name).await;
                board.acquired(asked, position, who);
                let t0 = Instant::now();
                hold_counter(&plain, &table, hold).await;
                board.releasing(who, t0.elapsed());
                g.release().await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("contender");
    }
    let elapsed = started.elapsed();
    recorder.set_tag(0);
    let profile = target.counts_since(before);
    let recs = recorder.take_all();
    let final_count = plain
        .get_item()
        .table_name(counter_table)
        .key("Id", s("counter"))
        .consistent_read(true)
        .send()
        .await
        .expect("counter")
        .item()
        .and_then(|i| i.get("n"))
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    // The next run starts from zero again.
    plain
        .delete_item()
        .table_name(counter_table)
        .key("Id", s("counter"))
        .send()
        .await
        .expect("counter reset");

    let waits = board.waits.lock().expect("board").clone();
    let hold_ms = board
        .hold
        .lock()
        .expect("board")
        .clone()
        .unwrap_or_else(Dist::millis);
    let hold_mean_ms = hold_ms.mean();
    let mut wait = Dist::millis();
    let mut ideal_max: f64 = 0.0;
    for &(w, position) in &waits {
        wait.record(w);
        ideal_max = ideal_max.max(position as f64 * hold_mean_ms);
    }
    let waiter_s: f64 = waits.iter().map(|w| w.0).sum::<f64>() / 1000.0;
    let reads = recs
        .iter()
        .filter(|r| matches!(r.op.as_str(), "Query" | "GetItem"))
        .count();
    let acquisitions = waits.len();
    Contended {
        name: label.to_string(),
        acquisitions,
        acq_per_s: acquisitions as f64 / elapsed.as_secs_f64(),
        handoff: board
            .handoff
            .lock()
            .expect("board")
            .clone()
            .unwrap_or_else(Dist::millis),
        wait,
        wait_max_ideal_ms: ideal_max,
        hold_mean_ms,
        reads_per_waiter_s: reads as f64 / waiter_s.max(1e-9),
        requests_per_waiter_s: recs.len() as f64 / waiter_s.max(1e-9),
        requests_per_acq: recs.len() as f64 / acquisitions.max(1) as f64,
        reacquired: board.again.load(Ordering::SeqCst),
        overlaps: board.overlaps.load(Ordering::SeqCst),
        counter_exact: final_count == acquisitions as u64,
        profile,
    }
}

/// Everything the lock part measures.
#[derive(Debug, Default)]
pub struct LockResults {
    pub uncontended: Vec<Uncontended>,
    /// Through the profile: what it did over the uncontended cycles (all locks).
    pub uncontended_profile: Option<Counts>,
    pub contended: Vec<Contended>,
}

impl LockResults {
    pub fn uncontended(&self, name: &str) -> Option<&Uncontended> {
        self.uncontended.iter().find(|u| u.name == name)
    }

    pub fn contended(&self, name: &str) -> Option<&Contended> {
        self.contended.iter().find(|c| c.name == name)
    }
}

/// Names of the runs the JSON reads.
pub const QUEUE: &str = "ticket queue (defaults)";
pub const LEASE: &str = "lease lock (acquire, poll 50 ms)";
pub const PEER: &str = "dynamodb-lease 0.22 (acquire, cooldown 50 ms)";

/// The uncontended and contended runs of the queue and lease locks and of `dynamodb-lease`, plus
/// a tuned queue and the naive lease loop for comparison; with profile settings, each scenario
/// again right after through a fresh profile (the second results).
pub async fn bench_locks(
    args: &Args,
    prefix: &str,
    profile: Option<&ProfileSettings>,
) -> (LockResults, Option<LockResults>) {
    let admin = common::client(vec![]).await;
    let tables = Tables {
        ours: format!("{prefix}-locks"),
        peer: format!("{prefix}-peer-leases"),
    };
    let counter_table = format!("{prefix}-counter");
    dynamodb_transactions::lock::create_lock_table(&admin, &tables.ours)
        .await
        .expect("lock table");
    common::create_table(&admin, &counter_table).await;
    common::create_table_keyed(&admin, &tables.peer, "key").await;
    admin
        .update_time_to_live()
        .table_name(&tables.peer)
        .time_to_live_specification(
            TimeToLiveSpecification::builder()
                .attribute_name("lease_expiry")
                .enabled(true)
                .build()
                .expect("ttl"),
        )
        .send()
        .await
        .expect("time to live of the peer's table");
    let poll = Duration::from_millis(50);
    let naive = format!("naive lease loop ({} ms sleeps)", args.naive_sleep_ms);
    let runs: Vec<(LockUnderTest, String, bool)> = vec![
        (LockUnderTest::Queue(None), QUEUE.to_string(), true),
        (LockUnderTest::Lease(poll), LEASE.to_string(), true),
        (LockUnderTest::Peer(poll), PEER.to_string(), true),
        (
            LockUnderTest::Queue(Some((Duration::from_millis(20), Duration::from_secs(2)))),
            "ticket queue (poll head 20 ms, max 2 s)".to_string(),
            false,
        ),
        (
            LockUnderTest::NaiveLease(Duration::from_millis(args.naive_sleep_ms)),
            naive,
            false,
        ),
    ];
    let mut raw = LockResults::default();
    let mut profiled = profile.map(|_| LockResults::default());
    let solo: Vec<(&LockUnderTest, &str)> = runs
        .iter()
        .filter(|(_, _, solo)| *solo)
        .map(|(what, label, _)| (what, label.as_str()))
        .collect();
    let (warm, cycles) = (args.solo_warmup, args.solo_cycles);
    eprintln!("  locks: uncontended, side by side");
    (raw.uncontended, raw.uncontended_profile) =
        uncontended(&solo, &tables, warm, cycles, &Target::raw()).await;
    if let (Some(settings), Some(out)) = (profile, profiled.as_mut()) {
        eprintln!("  locks: uncontended, side by side, through the profile");
        let target = Target::profiled(settings);
        (out.uncontended, out.uncontended_profile) =
            uncontended(&solo, &tables, warm, cycles, &target).await;
    }
    for (what, label, _) in &runs {
        eprintln!("  locks: {label}, {} contenders", args.contenders);
        let target = Target::raw();
        raw.contended
            .push(contended(args, what, label, &tables, &counter_table, &target).await);
        if let (Some(settings), Some(out)) = (profile, profiled.as_mut()) {
            eprintln!("  locks: {label}, through the profile");
            let target = Target::profiled(settings);
            out.contended
                .push(contended(args, what, label, &tables, &counter_table, &target).await);
        }
    }
    if !args.keep_tables {
        common::drop_tables(&admin, &[tables.ours, tables.peer, counter_table]).await;
    }
    (raw, profiled)
}
