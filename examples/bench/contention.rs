//! The contention scenario: W coordinators run `run(...)` bank transfers over a few hot accounts
//! (examples/contention.rs's shape, ordered contention policy), once per ticket mode, each mode on
//! its own tables. Counts the requests on the shared ticket counter per committed transfer. Then
//! the same transfers without the library (`drivers::optimistic_transfer`: read, conditional
//! `TransactWriteItems`, retry), the baseline a user would write instead. Then the hot items: the
//! transfers with default settings in both read orders (lowest key first, and from-then-to as a
//! user writes it first), and a hot counter (one item, read-modify-write in `run`; its workers
//! with a manager each, as separate processes, then sharing one, as tasks of one process) beside
//! its native optimistic increment (retried until it commits, as `run` is) and a sketch of a
//! handover lock without the library (`drivers::handover_increment`: what handing the item over
//! in the releasing write moves), each with its FIFO ideal and physical bound. With `--profile`,
//! each run again right after through a fresh profile.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::Client;
use dynamodb_transactions::fault::ProfileSettings;
use dynamodb_transactions::{ContentionPolicy, Error, Settings, TransactionManager};
use rand::{Rng, SeedableRng};

use crate::Args;
use crate::common;
use crate::drivers::{HandoverPace, handover_increment, optimistic_increment, optimistic_transfer};
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
    /// What the workers did.
    pub workload: Workload,
    /// Arrival → the first read of the attempt that committed returned (the library: its first
    /// lock taken), ms.
    pub wait: Dist,
    /// How long a committed attempt held its items: its first read returned → `run` returned,
    /// mean ms (`None` for the native baselines, which hold nothing).
    pub hold_mean_ms: Option<f64>,
    /// The FIFO ideal of each wait: the workers present on a conflicting item at arrival × the mean
    /// hold, ms (as the lock benchmark computes it).
    pub ideal: Dist,
    /// The physical bound of goodput: as many holders at once as disjoint item sets fit (one for
    /// the counter, accounts / 2 for transfers), each for the mean hold, per second.
    pub bound_per_s: Option<f64>,
    /// Reads (`GetItem`, `BatchGetItem`, `Query`) per second of waiting, over the workers.
    pub reads_per_waiter_s: f64,
    /// Writes refused per second of waiting, over the workers (see [`crate::recorder::polls`]):
    /// polls too.
    pub refused_writes_per_waiter_s: f64,
}

/// What the workers of a contention run do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Bank transfers between two of the hot accounts, reading them in this order.
    Transfer(Order),
    /// Increments of one counter item: read it, write it + 1.
    Counter,
}

/// In which order a transfer reads its two accounts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// The lower key first, whichever way the money goes (a canonical order).
    LowestFirst,
    /// The account debited first, then the one credited: as a user writes it first.
    FromThenTo,
}

/// A hot-item run: its name in the report and JSON, who runs it, and what.
#[derive(Clone, Copy)]
pub struct Hot {
    pub name: &'static str,
    pub how: How,
    pub workload: Workload,
    /// The library's workers share one manager and one client, as tasks of one process would
    /// (otherwise each has its own, as separate processes would).
    pub shared: bool,
}

/// The hot-item runs, in order: the library with default settings (no tuning: `run`'s default
/// attempts and `lock_wait`), then the native optimistic baseline of the same workload. The
/// native transfer is the ticket-mode part's (`ContentionResults::native`).
pub const HOT: &[Hot] = &[
    Hot {
        name: "transfer, lowest first",
        how: How::Library(("defaults", |_| {})),
        workload: Workload::Transfer(Order::LowestFirst),
        shared: false,
    },
    Hot {
        name: "transfer, from then to",
        how: How::Library(("defaults", |_| {})),
        workload: Workload::Transfer(Order::FromThenTo),
        shared: false,
    },
    // The same transfers as tasks of one process: a waiter holding nothing else waits in
    // process while a transfer of its own manager holds the item (docs/PROTOCOL.md "Handing the
    // item over", *Waiting in process*).
    Hot {
        name: "transfer, lowest first, one manager",
        how: How::Library(("defaults", |_| {})),
        workload: Workload::Transfer(Order::LowestFirst),
        shared: true,
    },
    Hot {
        name: "transfer, from then to, one manager",
        how: How::Library(("defaults", |_| {})),
        workload: Workload::Transfer(Order::FromThenTo),
        shared: true,
    },
    // The behaviour before `run_relocks_reads`: a retry starts with nothing locked.
    Hot {
        name: "transfer, from then to, retries relock nothing",
        how: How::Library(("no relock", |s| s.run_relocks_reads = false)),
        workload: Workload::Transfer(Order::FromThenTo),
        shared: false,
    },
    Hot {
        name: "hot counter",
        how: How::Library(("defaults", |_| {})),
        workload: Workload::Counter,
        shared: false,
    },
    // The same workers as tasks of one process: a holder hands the item to a waiter of its own
    // manager in process (docs/PROTOCOL.md "Handing the item over", *Told in process*).
    Hot {
        name: "hot counter, one manager",
        how: How::Library(("defaults", |_| {})),
        workload: Workload::Counter,
        shared: true,
    },
    Hot {
        name: "hot counter, retries relock nothing",
        how: How::Library(("no relock", |s| s.run_relocks_reads = false)),
        workload: Workload::Counter,
        shared: false,
    },
    Hot {
        name: "hot counter, native optimistic",
        how: How::Native,
        workload: Workload::Counter,
        shared: false,
    },
    Hot {
        name: "hot counter, native handover",
        how: How::Handover,
        workload: Workload::Counter,
        shared: false,
    },
];

/// The attempts of the counter's native optimistic increment: until it commits (as `run`, which
/// the library's rows use, retries without bound), unless `--counter-native-attempts` bounds it.
fn counter_native_attempts(args: &crate::Args) -> u32 {
    match args.counter_native_attempts {
        0 => u32::MAX,
        n => n,
    }
}

/// The name of the baseline without the library, in the report and JSON.
pub const NATIVE: &str = "native optimistic";

/// Every ticket mode, then the baseline without the library.
#[derive(Debug, Clone, Default)]
pub struct ContentionResults {
    pub modes: Vec<ContentionFigures>,
    pub native: Option<ContentionFigures>,
    /// The hot-item runs ([`HOT`]).
    pub hot: Vec<ContentionFigures>,
}

impl ContentionResults {
    pub fn is_empty(&self) -> bool {
        self.modes.is_empty() && self.native.is_none() && self.hot.is_empty()
    }

    pub fn hot(&self, name: &str) -> Option<&ContentionFigures> {
        self.hot.iter().find(|f| f.mode == name)
    }
}

/// Who runs the transfers.
#[derive(Clone, Copy)]
pub enum How {
    /// The library's `run(...)` with this ticket mode.
    Library(Mode),
    /// [`optimistic_transfer`], without the library.
    Native,
    /// [`handover_increment`], without the library (the counter only).
    Handover,
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

/// Which items the workers are on, to tell each arrival its FIFO position: how many workers are
/// on an item it needs (waiting for it or holding it) when it arrives.
struct Board(Mutex<Vec<Option<[usize; 2]>>>);

impl Board {
    fn new(workers: usize) -> Self {
        Board(Mutex::new(vec![None; workers]))
    }

    fn arrive(&self, who: usize, items: [usize; 2]) -> usize {
        let mut on = self.0.lock().expect("board");
        let position = on
            .iter()
            .enumerate()
            .filter(|&(w, o)| w != who && o.is_some_and(|o| o.iter().any(|i| items.contains(i))))
            .count();
        on[who] = Some(items);
        position
    }

    fn leave(&self, who: usize) {
        self.0.lock().expect("board")[who] = None;
    }
}

/// What one committed unit of work measured.
struct Done {
    at: Instant,
    attempts: u32,
    latency: Duration,
    /// Arrival → the first read of the committing attempt returned.
    wait: Duration,
    /// That read → done (`None`: the native baselines hold nothing).
    hold: Option<Duration>,
    position: usize,
}

const COUNTER: &str = "counter";

/// Runs the workload with its coordinators (`args.workers` for transfers, `args.counter_workers`
/// for the counter), every client going to `target`. `tuned`: the ticket-mode runs' settings
/// (`run` retries without bound, `lock_wait` 30 s); otherwise the library's defaults.
pub async fn measure(
    args: &Args,
    prefix: &str,
    run: Hot,
    tuned: bool,
    target: &Target,
) -> ContentionFigures {
    let Hot {
        name: mode,
        how,
        workload,
        shared,
    } = run;
    let configure: fn(&mut Settings) = match how {
        How::Library((_, c)) => c,
        How::Native | How::Handover => |_: &mut Settings| {},
    };
    let prefix = format!("{prefix}-c{}", mode.replace([' ', ','], "-"));
    let table = format!("{prefix}-accounts");
    let recorder = Recorder::default();
    let admin = target.client(vec![]).await;
    let fifo = args.wait_in_ticket_order;
    let on_demand = !args.no_record_on_demand;
    let mark = !args.no_mark_oldest_waiter;
    let line_reads = args.line_looks_read;
    let hand_over = !args.no_hand_over;
    let grace = args.wound_grace_ms.map(Duration::from_millis);
    let patience = args.first_attempt_patience_ms.map(Duration::from_millis);
    let out_of_order = !args.no_yield_out_of_order;
    let reorder = !args.no_reorder_held_reads;
    let keeps_turn = args.reorder_keeps_turn;
    let wait_for_running = args.wait_for_running_holders;
    let mgr = |c| {
        TransactionManager::builder(c)
            .transactions_table(format!("{prefix}-tx"))
            .images_table(format!("{prefix}-img"))
            .configure(|st| {
                st.wait_in_ticket_order = fifo;
                st.record_on_demand = on_demand;
                st.mark_oldest_waiter = mark;
                st.line_looks_read = line_reads;
                st.hand_over = hand_over;
                st.wait_for_running_holders = wait_for_running;
                if let Some(g) = grace {
                    st.wound_grace = g;
                }
                if let Some(p) = patience {
                    st.first_attempt_patience = p;
                }
                st.yield_out_of_order = out_of_order;
                st.reorder_held_reads = reorder;
                st.reorder_keeps_turn = keeps_turn;
                if tuned {
                    st.contention = ContentionPolicy::Ordered {
                        dead_after: Duration::from_secs(10),
                        ticket_at_begin: false,
                    };
                    st.run_attempts = 10_000;
                    st.lock_wait = Duration::from_secs(30);
                }
                configure(st);
            })
            .build()
    };
    if matches!(how, How::Library(_)) {
        mgr(admin.clone()).create_tables().await.expect("tables");
    }
    common::create_table(&admin, &table).await;
    let (workers, jobs) = match workload {
        Workload::Transfer(_) => {
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
            (args.workers, args.transfers)
        }
        Workload::Counter => {
            admin
                .put_item()
                .table_name(&table)
                .item("Id", s(COUNTER))
                .item("n", n_val(0))
                .send()
                .await
                .expect("seed");
            (args.counter_workers, args.increments)
        }
    };
    let next = Arc::new(AtomicU64::new(0));
    let done = Arc::new(Mutex::new(Vec::<Done>::new()));
    // When the first worker found no work left.
    let drained_at = Arc::new(Mutex::new(None::<Instant>));
    let gave_up = Arc::new(AtomicU64::new(0));
    let board = Arc::new(Board::new(workers));
    let mut coordinators = Vec::new();
    let mut one_manager = None;
    for _ in 0..workers {
        let client = target.client(vec![common::shared(recorder.clone())]).await;
        coordinators.push(match how {
            How::Library(_) if shared => {
                Worker::Library(one_manager.get_or_insert_with(|| mgr(client)).clone())
            }
            How::Library(_) => Worker::Library(mgr(client)),
            How::Native | How::Handover => Worker::Native(client),
        });
    }
    let before = target.counts();
    recorder.set_tag(1);
    let started = Instant::now();
    let mut handles = Vec::new();
    for (w, worker) in coordinators.into_iter().enumerate() {
        let (next, done, drained_at, gave_up, board) = (
            next.clone(),
            done.clone(),
            drained_at.clone(),
            gave_up.clone(),
            board.clone(),
        );
        let (table, args) = (table.clone(), args.clone());
        handles.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed * 100 + w as u64);
            // The baseline's backoff draws from its own generator: the transfers stay the same.
            let mut jitter = rand::rngs::StdRng::seed_from_u64(!(args.seed * 100 + w as u64));
            loop {
                if next.fetch_add(1, Ordering::SeqCst) as usize >= jobs {
                    drained_at
                        .lock()
                        .expect("drained")
                        .get_or_insert_with(Instant::now);
                    break;
                }
                let (from, to, amount) = match workload {
                    Workload::Transfer(_) => {
                        let from = rng.random_range(0..args.accounts);
                        let to = (from + rng.random_range(1..args.accounts)) % args.accounts;
                        (from, to, rng.random_range(1..10i64))
                    }
                    Workload::Counter => (0, 0, 0),
                };
                let position = board.arrive(w, [from, to]);
                let t0 = Instant::now();
                let m = match &worker {
                    Worker::Library(m) => m,
                    Worker::Native(client) => {
                        let o = match workload {
                            Workload::Transfer(_) => {
                                optimistic_transfer(
                                    client,
                                    &table,
                                    "balance",
                                    (&account(from), &account(to), amount),
                                    args.native_attempts,
                                    &mut jitter,
                                )
                                .await
                            }
                            Workload::Counter if matches!(how, How::Handover) => {
                                handover_increment(
                                    client,
                                    &table,
                                    (COUNTER, "n"),
                                    &format!("w{w}-{}", next.load(Ordering::SeqCst)),
                                    HandoverPace {
                                        width: args.handover_width,
                                        racers: args.handover_racers,
                                        per_place: Duration::from_millis(args.handover_pace_ms),
                                    },
                                )
                                .await
                            }
                            Workload::Counter => {
                                optimistic_increment(
                                    client,
                                    &table,
                                    (COUNTER, "n"),
                                    counter_native_attempts(&args),
                                    &mut jitter,
                                )
                                .await
                            }
                        };
                        board.leave(w);
                        match (o.committed, o.read_at) {
                            (true, Some(read)) => done.lock().expect("done").push(Done {
                                at: Instant::now(),
                                attempts: o.attempts,
                                latency: t0.elapsed(),
                                wait: read - t0,
                                hold: None,
                                position,
                            }),
                            _ => {
                                gave_up.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        continue;
                    }
                };
                let tries = Arc::new(AtomicU32::new(0));
                let first_read = Arc::new(Mutex::new(None::<Instant>));
                let (table, tries2, read2) = (table.clone(), tries.clone(), first_read.clone());
                let ran = m
                    .run(async move |tx| {
                        tries2.fetch_add(1, Ordering::SeqCst);
                        *read2.lock().expect("read") = None;
                        let get =
                            |k: String| tx.get_item().table_name(&table).key("Id", s(&k)).send();
                        let Workload::Transfer(order) = workload else {
                            let out = get(COUNTER.to_string()).await?;
                            read2.lock().expect("read").get_or_insert_with(Instant::now);
                            let n = out.item().map_or(0, |i| number(i, "n"));
                            tx.update_item()
                                .table_name(&table)
                                .key("Id", s(COUNTER))
                                .update_expression("SET n = :v")
                                .expression_attribute_values(":v", n_val(n + 1))
                                .send()
                                .await?;
                            return Ok::<_, Error>(());
                        };
                        let first = match order {
                            // A canonical order, as the protocol's design advises.
                            Order::LowestFirst => from.min(to),
                            Order::FromThenTo => from,
                        };
                        let second = if first == from { to } else { from };
                        let mut read = Vec::new();
                        for k in [first, second] {
                            let out = get(account(k)).await?;
                            read2.lock().expect("read").get_or_insert_with(Instant::now);
                            read.push(balance(out.item().expect("account exists")));
                        }
                        let (a, b) = if first == from {
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
                board.leave(w);
                if let Err(e) = ran {
                    let short: String = e.to_string().chars().take(300).collect();
                    eprintln!("  contention {mode}: unit of work FAILED: {short}");
                    gave_up.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
                let now = Instant::now();
                let read = first_read.lock().expect("read").unwrap_or(now);
                done.lock().expect("done").push(Done {
                    at: now,
                    attempts: tries.load(Ordering::SeqCst),
                    latency: now - t0,
                    wait: read - t0,
                    hold: Some(now - read),
                    position,
                });
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
    let conserved = match workload {
        Workload::Transfer(_) => {
            let total: i64 = common::scan(&admin, &table).await.iter().map(balance).sum();
            total == 1000 * args.accounts as i64
        }
        Workload::Counter => {
            let items = common::scan(&admin, &table).await;
            let n = items.first().map_or(0, |i| number(i, "n"));
            n == done.lock().expect("done").len() as i64
        }
    };
    if !args.keep_tables {
        common::drop_tables(
            &admin,
            &[table, format!("{prefix}-tx"), format!("{prefix}-img")],
        )
        .await;
    }
    let done = std::mem::take(&mut *done.lock().expect("done"));
    let (mut attempts, mut latency, mut wait, mut ideal) = (
        Dist::counts(),
        Dist::millis(),
        Dist::millis(),
        Dist::millis(),
    );
    let holds: Vec<f64> = done
        .iter()
        .filter_map(|d| d.hold.map(|h| h.as_secs_f64() * 1000.0))
        .collect();
    let hold_mean_ms = (!holds.is_empty()).then(|| holds.iter().sum::<f64>() / holds.len() as f64);
    for d in &done {
        attempts.record(f64::from(d.attempts));
        latency.record_duration(d.latency);
        wait.record_duration(d.wait);
        if let Some(h) = hold_mean_ms {
            ideal.record(d.position as f64 * h);
        }
    }
    let committed = done.len();
    let per_tx = |v: usize| v as f64 / committed.max(1) as f64;
    let drained = drained_at
        .lock()
        .expect("drained")
        .unwrap_or_else(Instant::now);
    let steady = done.iter().filter(|d| d.at <= drained).count();
    let waited: f64 = done.iter().map(|d| d.wait.as_secs_f64()).sum();
    let (reads, refused_writes) = crate::recorder::polls(&recs);
    if args.ops_per_tx {
        let mut by: std::collections::BTreeMap<(String, bool), usize> = Default::default();
        for r in &recs {
            *by.entry((r.op.clone(), r.ok)).or_default() += 1;
        }
        for ((op, ok), n) in by {
            eprintln!("  {mode}: {op} ok={ok}: {:.2}/tx", per_tx(n));
        }
    }
    let holders = match workload {
        Workload::Transfer(_) => (args.accounts / 2) as f64,
        Workload::Counter => 1.0,
    };
    ContentionFigures {
        mode,
        committed,
        tx_per_s: steady as f64 / (drained - started).as_secs_f64(),
        tx_per_s_overall: committed as f64 / elapsed.as_secs_f64(),
        attempts,
        latency,
        ticket_requests: per_tx(recs.iter().filter(|r| r.bookkeeping).count()),
        requests: per_tx(recs.len()),
        total_conserved: conserved,
        gave_up: gave_up.load(Ordering::SeqCst) as usize,
        attempt_bound: match (how, workload) {
            (How::Native, Workload::Counter) => Some(counter_native_attempts(args)),
            (How::Native, _) => Some(args.native_attempts),
            _ => None,
        },
        profile,
        workload,
        wait,
        hold_mean_ms,
        ideal,
        bound_per_s: hold_mean_ms.map(|h| holders * 1000.0 / h.max(1e-9)),
        reads_per_waiter_s: reads as f64 / waited.max(1e-9),
        refused_writes_per_waiter_s: refused_writes as f64 / waited.max(1e-9),
    }
}

fn number(item: &dynamodb_transactions::Item, attr: &str) -> i64 {
    item.get(attr)
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Every mode of [`MODES`], one after the other, then the baseline without the library, then the
/// hot-item runs ([`HOT`]); with profile settings, each again right after through a fresh profile
/// (the second results).
pub async fn bench_contention(
    args: &Args,
    prefix: &str,
    profile: Option<&ProfileSettings>,
) -> (ContentionResults, Option<ContentionResults>) {
    let mut raw = ContentionResults::default();
    let mut profiled = profile.map(|_| ContentionResults::default());
    let profiled_prefix = format!("{prefix}-p");
    let transfer = Workload::Transfer(Order::LowestFirst);
    let modes = MODES.iter().filter(|_| !args.hot_only).map(|&m| {
        (
            Hot {
                name: m.0,
                how: How::Library(m),
                workload: transfer,
                shared: false,
            },
            true,
        )
    });
    let native = (args.native_attempts > 0).then_some((
        Hot {
            name: NATIVE,
            how: How::Native,
            workload: transfer,
            shared: false,
        },
        true,
    ));
    let hot = HOT
        .iter()
        .filter(|h| args.native_attempts > 0 || matches!(h.how, How::Library(_)))
        .filter(|h| {
            args.hot_filter
                .as_ref()
                .is_none_or(|f| match f.strip_prefix('=') {
                    Some(exact) => h.name == exact,
                    None => h.name.contains(f.as_str()),
                })
        })
        .map(|&h| (h, false));
    for (run, tuned) in modes.chain(native).chain(hot) {
        let name = match (run.how, tuned) {
            (How::Library((mode, _)), true) => format!("tickets from {mode}"),
            (How::Native, true) => format!("{NATIVE} (at most {} attempts)", args.native_attempts),
            (_, _) => run.name.to_string(),
        };
        eprintln!("  contention: {name}");
        let store = |out: &mut ContentionResults, f| match (run.how, tuned) {
            (How::Library(_), true) => out.modes.push(f),
            (How::Native, true) => out.native = Some(f),
            (_, _) => out.hot.push(f),
        };
        let f = measure(args, prefix, run, tuned, &Target::raw()).await;
        store(&mut raw, f);
        if let (Some(settings), Some(out)) = (profile, profiled.as_mut()) {
            eprintln!("  contention: {name}, through the profile");
            let f = measure(
                args,
                &profiled_prefix,
                run,
                tuned,
                &Target::profiled(settings),
            )
            .await;
            store(out, f);
        }
    }
    (raw, profiled)
}
