//! Measures the queue lock (and the lease lock uncontended) with the workloads of the peer
//! comparison in docs/PERFORMANCE.md: uncontended cycles, 16 contenders with a 5 ms hold, and a
//! crash takeover. Prints a summary and, on the last line, the figures as JSON.
//!
//! Run against DynamoDB Local:
//! `AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:8000 cargo run --example queue_lock_bench`.
//! Options: `--contenders N` (16), `--per N` acquisitions each (20), `--cycles N` uncontended (200),
//! `--hold-ms N` (5), `--poll-head-ms N` (the lock's default), `--no-takeover`.

#[path = "common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use dynamodb_transactions::fault::{FaultInjector, FaultMode, RequestCounter};
use dynamodb_transactions::lock::lease::LeaseLock;
use dynamodb_transactions::lock::queue::{QueueLock, QueueLockBuilder};
use dynamodb_transactions::lock::{Wait, create_lock_table};
use tokio::time::Instant;

struct Args {
    contenders: usize,
    per: usize,
    cycles: usize,
    hold: Duration,
    poll_head: Option<Duration>,
    takeover: bool,
}

fn args() -> Args {
    let mut a = Args {
        contenders: 16,
        per: 20,
        cycles: 200,
        hold: Duration::from_millis(5),
        poll_head: None,
        takeover: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut num = || -> u64 {
            it.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{flag} needs a number"))
        };
        match flag.as_str() {
            "--contenders" => a.contenders = num() as usize,
            "--per" => a.per = num() as usize,
            "--cycles" => a.cycles = num() as usize,
            "--hold-ms" => a.hold = Duration::from_millis(num()),
            "--poll-head-ms" => a.poll_head = Some(Duration::from_millis(num())),
            "--no-takeover" => a.takeover = false,
            other => panic!("unknown option {other}"),
        }
    }
    a
}

/// The peer comparison's settings: lease 2 s, heartbeat 0.5 s; the lock's own poll defaults.
fn queue(client: &Client, table: &str, a: &Args) -> QueueLockBuilder {
    let b = QueueLock::builder(client.clone())
        .table(table)
        .lease_duration(Duration::from_secs(2))
        .heartbeat_interval(Duration::from_millis(500));
    match a.poll_head {
        Some(head) => b.poll_interval(head, Duration::from_secs(2)),
        None => b,
    }
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn total(c: &RequestCounter) -> u64 {
    c.snapshot().values().sum()
}

/// p50 of `cycles` acquire+release cycles of the queue lock and of the lease lock, interleaved
/// (so both see the same load), and requests per cycle of each.
async fn uncontended(
    c: &RequestCounter,
    cycles: usize,
    q: &QueueLock,
    l: &LeaseLock,
) -> [(f64, f64); 2] {
    let wait = Wait::For(Duration::from_secs(5));
    let (mut qt, mut lt) = (Vec::new(), Vec::new());
    let (mut qr, mut lr) = (0, 0);
    for i in 0..cycles + 5 {
        let (before, t) = (total(c), Instant::now());
        q.acquire("uncontended-q", wait)
            .await
            .expect("acquire")
            .release()
            .await
            .expect("release");
        let (mid, tq) = (total(c), t.elapsed());
        let t = Instant::now();
        l.acquire("uncontended-l", wait)
            .await
            .expect("acquire")
            .release()
            .await
            .expect("release");
        let (after, tl) = (total(c), t.elapsed());
        if i >= 5 {
            qt.push(ms(tq));
            lt.push(ms(tl));
            qr += mid - before;
            lr += after - mid;
        }
    }
    let n = cycles as f64;
    [
        (pct(&mut qt, 0.5), qr as f64 / n),
        (pct(&mut lt, 0.5), lr as f64 / n),
    ]
}

#[derive(Default)]
struct Contended {
    acquisitions_per_s: f64,
    handoff_p50_ms: f64,
    handoff_p99_ms: f64,
    wait_max_ms: f64,
    wait_ratio_max: f64,
    reads_per_waiter_per_s: f64,
    requests_per_acquisition: f64,
    retakes: u64,
}

/// `contenders` handles of one lock, `per` acquisitions each; the hold reads and writes a counter
/// item through an uncounted client (so it is not counted as the lock's requests).
async fn contended(
    client: &Client,
    plain: &Client,
    table: &str,
    a: &Args,
    c: &RequestCounter,
) -> Contended {
    let name = format!("contended-{}", uuid::Uuid::new_v4().simple());
    let holding = Arc::new(AtomicBool::new(false));
    // (release start, releaser) of the last release.
    let last: Arc<Mutex<Option<(Instant, usize)>>> = Arc::default();
    let holder_ticket = Arc::new(AtomicU64::new(0));
    let handoffs: Arc<Mutex<Vec<f64>>> = Arc::default();
    // (wait, tickets ahead at the request).
    let waits: Arc<Mutex<Vec<(Duration, u64)>>> = Arc::default();
    let retakes = Arc::new(AtomicU64::new(0));
    let before = c.snapshot();
    let start = Instant::now();
    let tasks: Vec<_> = (0..a.contenders)
        .map(|me| {
            let lock = queue(client, table, a).build().expect("queue lock");
            let (plain, table, name) = (plain.clone(), table.to_string(), name.clone());
            let (holding, last, holder_ticket, handoffs, waits, retakes) = (
                holding.clone(),
                last.clone(),
                holder_ticket.clone(),
                handoffs.clone(),
                waits.clone(),
                retakes.clone(),
            );
            let (per, hold) = (a.per, a.hold);
            tokio::spawn(async move {
                for _ in 0..per {
                    let asked = Instant::now();
                    let current = holder_ticket.load(Ordering::SeqCst);
                    let g = lock.acquire(&name, Wait::Forever).await.expect("acquire");
                    let got = Instant::now();
                    assert!(!holding.swap(true, Ordering::SeqCst), "two holders");
                    holder_ticket.store(g.ticket(), Ordering::SeqCst);
                    match *last.lock().unwrap() {
                        Some((at, who)) if who != me => handoffs.lock().unwrap().push(ms(got - at)),
                        Some(_) => {
                            retakes.fetch_add(1, Ordering::SeqCst);
                        }
                        None => {}
                    }
                    waits
                        .lock()
                        .unwrap()
                        .push((got - asked, g.ticket().saturating_sub(current.max(1))));
                    let key = [
                        ("pk".to_string(), AttributeValue::S(name.clone())),
                        ("sk".to_string(), AttributeValue::S("data".into())),
                    ];
                    let v = plain
                        .get_item()
                        .table_name(&table)
                        .set_key(Some(key.clone().into()))
                        .consistent_read(true)
                        .send()
                        .await
                        .expect("GetItem")
                        .item
                        .and_then(|i| {
                            i.get("v")
                                .and_then(|v| v.as_n().ok())
                                .and_then(|v| v.parse::<u64>().ok())
                        })
                        .unwrap_or(0);
                    tokio::time::sleep(hold).await;
                    let mut item: std::collections::HashMap<_, _> = key.into();
                    item.insert("v".into(), AttributeValue::N((v + 1).to_string()));
                    plain
                        .put_item()
                        .table_name(&table)
                        .set_item(Some(item))
                        .send()
                        .await
                        .expect("PutItem");
                    holding.store(false, Ordering::SeqCst);
                    *last.lock().unwrap() = Some((Instant::now(), me));
                    g.release().await.expect("release");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("contender");
    }
    let elapsed = start.elapsed();
    let after = c.snapshot();
    let delta =
        |op: &str| after.get(op).copied().unwrap_or(0) - before.get(op).copied().unwrap_or(0);
    let n = (a.contenders * a.per) as f64;
    let final_v = plain
        .get_item()
        .table_name(table)
        .key("pk", AttributeValue::S(name.clone()))
        .key("sk", AttributeValue::S("data".into()))
        .consistent_read(true)
        .send()
        .await
        .expect("GetItem")
        .item
        .and_then(|i| {
            i.get("v")
                .and_then(|v| v.as_n().ok())
                .and_then(|v| v.parse::<u64>().ok())
        })
        .unwrap_or(0);
    assert_eq!(final_v as f64, n, "lost updates: mutual exclusion broken");
    let cycle = elapsed.as_secs_f64() / n;
    let waits = waits.lock().unwrap().clone();
    let waited: f64 = waits.iter().map(|(w, _)| w.as_secs_f64()).sum();
    let ratio = waits
        .iter()
        .filter(|(_, ahead)| *ahead > 0)
        .map(|(w, ahead)| w.as_secs_f64() / (*ahead as f64 * cycle))
        .fold(0.0, f64::max);
    let mut h = handoffs.lock().unwrap().clone();
    let all: u64 = after.values().sum::<u64>() - before.values().sum::<u64>();
    Contended {
        acquisitions_per_s: n / elapsed.as_secs_f64(),
        handoff_p50_ms: pct(&mut h, 0.5),
        handoff_p99_ms: pct(&mut h, 0.99),
        wait_max_ms: waits.iter().map(|(w, _)| ms(*w)).fold(0.0, f64::max),
        wait_ratio_max: ratio,
        reads_per_waiter_per_s: (delta("GetItem") + delta("Query")) as f64 / waited.max(1e-9),
        requests_per_acquisition: all as f64 / n,
        retakes: retakes.load(Ordering::SeqCst),
    }
}

/// A holder heartbeating every 0.5 s loses DynamoDB for good; a waiter that started 0.5 s after
/// it was granted has watched for 1 s by then. Seconds from the crash to the waiter holding.
async fn takeover(client: &Client, table: &str, a: &Args) -> f64 {
    let faults = FaultInjector::new();
    let crashing_client = common::client(vec![common::shared(faults.clone())]).await;
    let holder_lock = queue(&crashing_client, table, a).build().expect("lock");
    let name = format!("takeover-{}", uuid::Uuid::new_v4().simple());
    let holder = holder_lock
        .acquire(&name, Wait::NoWait)
        .await
        .expect("holder");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let waiter = {
        let lock = queue(client, table, a).build().expect("lock");
        let name = name.clone();
        tokio::spawn(async move {
            let g = lock.acquire(&name, Wait::Forever).await.expect("waiter");
            let at = Instant::now();
            g.release().await.expect("release");
            at
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    faults.crash_at(1, FaultMode::BeforeSend);
    let crashed = Instant::now();
    let got = waiter.await.expect("waiter");
    drop(holder);
    (got - crashed).as_secs_f64()
}

#[tokio::main]
async fn main() {
    common::require_endpoint("queue_lock_bench");
    let a = args();
    let counter = RequestCounter::new();
    let client = common::client(vec![common::shared(counter.clone())]).await;
    let plain = common::client(vec![]).await;
    let table = format!(
        "queue-bench-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    create_lock_table(&plain, &table).await.expect("lock table");

    let q = queue(&client, &table, &a).build().expect("queue lock");
    let l = LeaseLock::builder(client.clone())
        .table(&table)
        .lease_duration(Duration::from_secs(2))
        .heartbeat_interval(Duration::from_millis(500))
        .build()
        .expect("lease lock");
    let [(queue_p50, queue_req), (lease_p50, lease_req)] =
        uncontended(&counter, a.cycles, &q, &l).await;
    println!(
        "uncontended p50: queue {queue_p50:.2} ms ({queue_req:.2} requests), lease {lease_p50:.2} ms ({lease_req:.2} requests)"
    );

    let c = contended(&client, &plain, &table, &a, &counter).await;
    println!(
        "{} contenders x {} (hold {:?}): {:.1} acquisitions/s, handoff p50 {:.2} ms (p99 {:.2}), max wait {:.0} ms ({:.2}x the ideal FIFO wait), {:.1} reads per waiter per s, {:.2} requests per acquisition, {} re-takes",
        a.contenders,
        a.per,
        a.hold,
        c.acquisitions_per_s,
        c.handoff_p50_ms,
        c.handoff_p99_ms,
        c.wait_max_ms,
        c.wait_ratio_max,
        c.reads_per_waiter_per_s,
        c.requests_per_acquisition,
        c.retakes
    );
    let take = if a.takeover {
        let s = takeover(&client, &table, &a).await;
        println!("crash takeover (lease 2 s, margin 2 s): {s:.2} s");
        Some(s)
    } else {
        None
    };
    let _ = plain.delete_table().table_name(&table).send().await;
    println!(
        "{{\"queue_uncontended_p50_ms\":{queue_p50:.2},\"queue_uncontended_requests\":{queue_req:.2},\"lease_uncontended_p50_ms\":{lease_p50:.2},\"lease_uncontended_requests\":{lease_req:.2},\"queue_acquisitions_per_s\":{:.1},\"queue_handoff_p50_ms\":{:.2},\"queue_handoff_p99_ms\":{:.2},\"queue_wait_max_ms\":{:.0},\"queue_wait_vs_ideal_max\":{:.2},\"queue_reads_per_waiter_per_s\":{:.1},\"queue_requests_per_acquisition\":{:.2},\"queue_retakes\":{},\"queue_takeover_s\":{}}}",
        c.acquisitions_per_s,
        c.handoff_p50_ms,
        c.handoff_p99_ms,
        c.wait_max_ms,
        c.wait_ratio_max,
        c.reads_per_waiter_per_s,
        c.requests_per_acquisition,
        c.retakes,
        take.map_or("null".to_string(), |s| format!("{s:.2}"))
    );
}
