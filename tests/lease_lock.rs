//! Lease locks against DynamoDB Local.
mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use common::*;
use dynamodb_transactions::Item;
use dynamodb_transactions::fault::{FaultInjector, FaultMode, LateDelivery};
use dynamodb_transactions::lock::lease::{LeaseLock, LeaseLockBuilder};
use dynamodb_transactions::lock::{Expiry, LockError, OffsetClock, Wait, create_lock_table};

async fn lock_table(prefix: &str) -> (Client, String, TableGuard) {
    let client = client();
    let guard = TableGuard::default();
    let table = unique_name(prefix);
    guard.add(&table);
    create_lock_table(&client, &table)
        .await
        .expect("create_lock_table");
    (client, table, guard)
}

fn builder(client: Client, table: &str) -> LeaseLockBuilder {
    LeaseLock::builder(client)
        .table(table)
        .lease_duration(Duration::from_millis(1500))
        .heartbeat_interval(Duration::from_millis(300))
        .clock_skew_margin(Duration::from_millis(300))
        .poll_interval(Duration::from_millis(20))
}

/// The lock record of `name`, read consistently.
async fn record(client: &Client, table: &str, name: &str) -> Item {
    client
        .get_item()
        .table_name(table)
        .key("pk", s(name))
        .key("sk", s("#lease"))
        .consistent_read(true)
        .send()
        .await
        .expect("GetItem")
        .item
        .expect("the lock record exists")
}

fn num(item: &Item, attr: &str) -> u64 {
    item.get(attr)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
        .expect("number attribute")
}

fn owner(item: &Item) -> Option<&str> {
    item.get("owner")
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
}

fn readers(item: &Item) -> usize {
    item.get("readers")
        .and_then(|v| v.as_m().ok())
        .map_or(0, |m| m.len())
}

/// Polls the record until `cond` holds (fails the test after 10 s).
async fn until_record(
    client: &Client,
    table: &str,
    name: &str,
    what: &str,
    cond: impl Fn(&Item) -> bool,
) {
    for _ in 0..500 {
        if cond(&record(client, table, name).await) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("lock record {name} never reached: {what}");
}

#[tokio::test]
async fn mutual_exclusion_stress_50_tasks() {
    let (client, table, _guard) = lock_table("ll-stress").await;
    let lock = builder(client.clone(), &table)
        .lease_duration(Duration::from_secs(5))
        .heartbeat_interval(Duration::from_secs(1))
        .build()
        .unwrap();
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let (lock, client, table, tokens) =
                (lock.clone(), client.clone(), table.clone(), tokens.clone());
            tokio::spawn(async move {
                let guard = lock
                    .acquire("counter", Wait::Forever)
                    .await
                    .expect("acquire");
                // A counter item updated by unconditional read-modify-write, and a second counter
                // carried in the lock's own payload.
                let out = client
                    .get_item()
                    .table_name(&table)
                    .key("pk", s("data"))
                    .key("sk", s("value"))
                    .consistent_read(true)
                    .send()
                    .await
                    .unwrap();
                let current = out.item.map(|i| num(&i, "v")).unwrap_or(0);
                tokio::task::yield_now().await;
                client
                    .put_item()
                    .table_name(&table)
                    .item("pk", s("data"))
                    .item("sk", s("value"))
                    .item("v", n(current + 1))
                    .send()
                    .await
                    .unwrap();
                let carried = guard
                    .data()
                    .map(|d| u64::from_be_bytes(d.try_into().unwrap()))
                    .unwrap_or(0);
                tokens.lock().unwrap().push(guard.fencing_token());
                guard
                    .release_with_data(Some((carried + 1).to_be_bytes().to_vec()))
                    .await
                    .expect("release");
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let data = client
        .get_item()
        .table_name(&table)
        .key("pk", s("data"))
        .key("sk", s("value"))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    assert_eq!(
        num(&data, "v"),
        50,
        "lost updates: the lock let two holders in"
    );
    let rec = record(&client, &table, "counter").await;
    let payload = rec.get("data").unwrap().as_b().unwrap().as_ref().to_vec();
    assert_eq!(u64::from_be_bytes(payload.try_into().unwrap()), 50);
    assert_eq!(num(&rec, "fence"), 50);
    assert_eq!(owner(&rec), None, "released");
    let mut tokens = tokens.lock().unwrap().clone();
    tokens.sort();
    assert_eq!(
        tokens,
        (1..=50).collect::<Vec<u64>>(),
        "one distinct token per acquisition"
    );
}

#[tokio::test]
async fn fencing_tokens_survive_release_and_takeover() {
    let (client, table, _guard) = lock_table("ll-fence").await;
    let lock = builder(client.clone(), &table).build().unwrap();
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let g = lock.acquire("fe", Wait::NoWait).await.unwrap();
        tokens.push(g.fencing_token());
        g.release().await.unwrap();
        // Release keeps the record, so the counter survives.
        let rec = record(&client, &table, "fe").await;
        assert_eq!(owner(&rec), None);
        assert_eq!(num(&rec, "fence"), *tokens.last().unwrap());
    }
    let faults = FaultInjector::new();
    let crashing = builder(client_with(vec![shared(faults.clone())]), &table)
        .build()
        .unwrap();
    let dead = crashing.acquire("fe", Wait::NoWait).await.unwrap();
    tokens.push(dead.fencing_token());
    faults.crash_at(1, FaultMode::BeforeSend);
    let g = lock
        .acquire("fe", Wait::For(Duration::from_secs(15)))
        .await
        .expect("taken over");
    tokens.push(g.fencing_token());
    let shared_guard = {
        g.release().await.unwrap();
        lock.acquire_shared("fe", Wait::NoWait).await.unwrap()
    };
    tokens.push(shared_guard.fencing_token());
    shared_guard.release().await.unwrap();
    assert_eq!(tokens, vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(lock.current_fencing_token("fe").await.unwrap(), 6);
}

#[tokio::test]
async fn crashed_holder_is_taken_over_and_learns_it_lost() {
    let (client, table, _guard) = lock_table("ll-crash").await;
    let faults = FaultInjector::new();
    let crashing = builder(client_with(vec![shared(faults.clone())]), &table)
        .build()
        .unwrap();
    let lock = builder(client.clone(), &table).build().unwrap();
    let holder = crashing.acquire("cr", Wait::NoWait).await.unwrap();
    faults.crash_at(1, FaultMode::BeforeSend);
    let g = lock
        .acquire("cr", Wait::For(Duration::from_secs(15)))
        .await
        .expect("taken over");
    assert_eq!(
        owner(&record(&client, &table, "cr").await),
        Some(g.holder_id())
    );
    tokio::time::timeout(Duration::from_secs(10), holder.lost())
        .await
        .expect("lost() resolves");
    faults.disarm();
    assert!(holder.release().await.unwrap_err().is_lost());
    assert_eq!(
        owner(&record(&client, &table, "cr").await),
        Some(g.holder_id()),
        "the stale release changed nothing"
    );
    g.release().await.unwrap();
}

#[tokio::test]
async fn no_wait_timeout_and_forever() {
    let (client, table, _guard) = lock_table("ll-wait").await;
    let lock = builder(client.clone(), &table).build().unwrap();
    let holder = lock.acquire("w", Wait::Forever).await.unwrap();
    assert!(
        lock.acquire("w", Wait::NoWait)
            .await
            .unwrap_err()
            .is_would_block()
    );
    assert!(lock.try_acquire("w").await.unwrap().is_none());
    assert!(
        lock.acquire("w", Wait::For(Duration::from_millis(300)))
            .await
            .unwrap_err()
            .is_timeout()
    );
    assert_eq!(
        owner(&record(&client, &table, "w").await),
        Some(holder.holder_id())
    );
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire("w", Wait::Forever).await })
    };
    // The holder keeps heartbeating while the waiter waits.
    until_record(&client, &table, "w", "three heartbeats", |r| {
        num(r, "hb") >= 3
    })
    .await;
    assert!(!waiter.is_finished());
    holder.release().await.unwrap();
    let g = waiter.await.unwrap().expect("granted after release");
    assert_eq!(
        owner(&record(&client, &table, "w").await),
        Some(g.holder_id())
    );
    g.release().await.unwrap();
}

#[tokio::test]
async fn shared_locks_admit_many_readers_or_one_writer() {
    let (client, table, _guard) = lock_table("ll-shared").await;
    let lock = builder(client.clone(), &table).build().unwrap();
    let r1 = lock.acquire_shared("rw", Wait::NoWait).await.unwrap();
    let r2 = lock.acquire_shared("rw", Wait::NoWait).await.unwrap();
    assert!(r1.is_shared() && r2.is_shared());
    assert!(r2.fencing_token() > r1.fencing_token());
    assert_eq!(readers(&record(&client, &table, "rw").await), 2);
    assert!(
        lock.try_acquire("rw").await.unwrap().is_none(),
        "no writer while readers hold it"
    );
    r1.release().await.unwrap();
    assert!(lock.try_acquire("rw").await.unwrap().is_none());
    r2.release().await.unwrap();
    assert_eq!(readers(&record(&client, &table, "rw").await), 0);
    let w = lock
        .try_acquire("rw")
        .await
        .unwrap()
        .expect("free for a writer");
    assert!(
        lock.acquire_shared("rw", Wait::NoWait)
            .await
            .unwrap_err()
            .is_would_block(),
        "no reader while a writer holds it"
    );
    let w_token = w.fencing_token();
    w.release().await.unwrap();
    let r3 = lock.acquire_shared("rw", Wait::NoWait).await.unwrap();
    assert!(r3.fencing_token() > w_token);
    r3.release().await.unwrap();
}

#[tokio::test]
async fn dead_reader_is_removed_by_a_writer() {
    let (client, table, _guard) = lock_table("ll-deadreader").await;
    let faults = FaultInjector::new();
    let crashing = builder(client_with(vec![shared(faults.clone())]), &table)
        .build()
        .unwrap();
    let lock = builder(client.clone(), &table).build().unwrap();
    let reader = crashing.acquire_shared("dr", Wait::NoWait).await.unwrap();
    faults.crash_at(1, FaultMode::BeforeSend);
    let w = lock
        .acquire("dr", Wait::For(Duration::from_secs(15)))
        .await
        .expect("writer after the reader died");
    let rec = record(&client, &table, "dr").await;
    assert_eq!(readers(&rec), 0);
    assert_eq!(owner(&rec), Some(w.holder_id()));
    tokio::time::timeout(Duration::from_secs(10), reader.lost())
        .await
        .expect("the reader learns it lost");
    w.release().await.unwrap();
}

#[tokio::test]
async fn fail_closed_lock_never_expires() {
    let (client, table, _guard) = lock_table("ll-closed").await;
    let lock = builder(client.clone(), &table)
        .fail_closed()
        .build()
        .unwrap();
    let holder = lock.acquire("fc", Wait::NoWait).await.unwrap();
    let id = holder.holder_id().to_string();
    // The holder vanishes without releasing (no heartbeats exist for fail-closed locks).
    std::mem::forget(holder);
    // Even a fail-open waiter respects it, for several leases.
    let other = builder(client.clone(), &table).build().unwrap();
    assert!(
        other
            .acquire("fc", Wait::For(Duration::from_secs(4)))
            .await
            .unwrap_err()
            .is_timeout()
    );
    let rec = record(&client, &table, "fc").await;
    assert_eq!(owner(&rec), Some(id.as_str()));
    assert_eq!(
        rec.get("closed").and_then(|v| v.as_bool().ok()),
        Some(&true)
    );
}

#[tokio::test]
async fn lost_heartbeat_response_does_not_lose_the_lock() {
    let (client, table, _guard) = lock_table("ll-losthb").await;
    let faults = FaultInjector::new();
    let lock = builder(client_with(vec![shared(faults.clone())]), &table)
        .build()
        .unwrap();
    let g = lock.acquire("lh", Wait::NoWait).await.unwrap();
    faults.fail_operation_at("UpdateItem", 1, FaultMode::AfterSend);
    until_record(&client, &table, "lh", "heartbeat 3", |r| num(r, "hb") >= 3).await;
    assert_eq!(faults.injected(), 1);
    assert!(!g.is_lost());
    g.release().await.expect("still held");
}

#[tokio::test]
async fn lost_acquire_response_is_recognised() {
    let (client, table, _guard) = lock_table("ll-lostacq").await;
    let faults = FaultInjector::new();
    let lock = builder(client_with(vec![shared(faults.clone())]), &table)
        .build()
        .unwrap();
    faults.fail_operation_at("UpdateItem", 1, FaultMode::AfterSend);
    let g = lock
        .acquire("la", Wait::NoWait)
        .await
        .expect("our own landed write is recognised");
    assert_eq!(faults.injected(), 1);
    let rec = record(&client, &table, "la").await;
    assert_eq!(owner(&rec), Some(g.holder_id()));
    assert_eq!(g.fencing_token(), 1);
    assert_eq!(num(&rec, "fence"), 1, "acquired once, not twice");
    g.release().await.unwrap();
}

#[tokio::test]
async fn clock_skew_observed_and_wall_clock() {
    let (client, table, _guard) = lock_table("ll-skew").await;
    let lock = builder(client.clone(), &table).build().unwrap();
    let holder = lock.acquire("sk", Wait::NoWait).await.unwrap();
    // Observed expiry ignores wall clocks: an hour of skew changes nothing.
    let skewed = builder(client.clone(), &table)
        .clock(OffsetClock::new(3_600_000))
        .build()
        .unwrap();
    assert!(
        skewed
            .acquire("sk", Wait::For(Duration::from_secs(4)))
            .await
            .unwrap_err()
            .is_timeout()
    );
    // Wall-clock expiry tolerates skew within its margin.
    let within = builder(client.clone(), &table)
        .expiry(Expiry::WallClock)
        .clock(OffsetClock::new(5_000))
        .clock_skew_margin(Duration::from_secs(10))
        .build()
        .unwrap();
    assert!(
        within
            .acquire("sk", Wait::For(Duration::from_secs(2)))
            .await
            .unwrap_err()
            .is_timeout()
    );
    assert_eq!(
        owner(&record(&client, &table, "sk").await),
        Some(holder.holder_id())
    );
    assert!(!holder.is_lost());
    holder.release().await.unwrap();
}

#[tokio::test]
async fn simple_mutex_try_lock_extend_unlock() {
    let (client, table, _guard) = lock_table("ll-mutex").await;
    let lock = builder(client.clone(), &table)
        .manual_heartbeat()
        .build()
        .unwrap();
    let g = lock.try_acquire("job").await.unwrap().expect("free");
    assert!(lock.try_acquire("job").await.unwrap().is_none());
    g.heartbeat().await.unwrap();
    g.heartbeat().await.unwrap();
    assert_eq!(
        num(&record(&client, &table, "job").await, "hb"),
        2,
        "each extend renews once"
    );
    g.release().await.unwrap();
    let g = lock.try_acquire("job").await.unwrap().expect("unlocked");
    // Without extends, the lease runs out: the holder is told, and repeated try-locks from another
    // handle take the lock over once they have watched it stay silent for a lease.
    tokio::time::timeout(Duration::from_secs(10), g.lost())
        .await
        .expect("lease ran out");
    let other = builder(client.clone(), &table).build().unwrap();
    let mut taken = None;
    for _ in 0..200 {
        if let Some(t) = other.try_acquire("job").await.unwrap() {
            taken = Some(t);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let t = taken.expect("try_acquire takes over a dead lock");
    assert!(t.fencing_token() > g.fencing_token());
    assert!(matches!(g.heartbeat().await, Err(LockError::Lost { .. })));
    t.release().await.unwrap();
}

/// A client for the test endpoint whose requests go through `late`.
fn client_through(late: &LateDelivery) -> Client {
    let conf = client()
        .config()
        .to_builder()
        .http_client(late.http_client())
        .build();
    Client::from_conf(conf)
}

/// Regression: a lost answer to the acquiring write, noticed late (a timeout). The retry finds the
/// holder's own earlier write on the record; the lease must run from the first send, which may
/// be when the record was written (and when a waiter started watching it), not from the retry.
#[tokio::test]
async fn lost_acquire_response_counts_the_lease_from_the_first_send() {
    let (client, table, _guard) = lock_table("ll-lostlease").await;
    let late = LateDelivery::new();
    // Long enough that the retry is answered while at least half of the first write's lease is
    // left, however slow DynamoDB Local is: with less left the holder renews by takeover instead
    // (`long_lost_acquire_response_is_renewed_by_takeover`), and counts from that write.
    let lease = Duration::from_millis(3000);
    let lock = builder(client_through(&late), &table)
        .lease_duration(lease)
        .manual_heartbeat()
        .build()
        .unwrap();
    // The acquiring write lands; its caller hears of the failure 400 ms later and retries.
    late.lose_response("UpdateItem", 1, Duration::from_millis(400));
    // A waiter watches the record from the moment the first write landed, and takes the lock over
    // as soon as it may (Observed expiry, small margin).
    let waiter = {
        let (client, table) = (client.clone(), table.clone());
        tokio::spawn(async move {
            let other = builder(client.clone(), &table)
                .clock_skew_margin(Duration::from_millis(100))
                .build()
                .unwrap();
            loop {
                let rec = client
                    .get_item()
                    .table_name(&table)
                    .key("pk", s("ll"))
                    .key("sk", s("#lease"))
                    .consistent_read(true)
                    .send()
                    .await
                    .unwrap();
                if rec.item.is_some_and(|i| owner(&i).is_some()) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            loop {
                if let Some(g) = other.try_acquire("ll").await.unwrap() {
                    return g;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    let g = lock
        .acquire("ll", Wait::NoWait)
        .await
        .expect("our own landed write is recognised");
    let remaining = g.lease_remaining();
    let now = tokio::time::Instant::now();
    assert_eq!(late.struck(), 1);
    let first_send = late.first_struck_at().expect("the fault struck");
    // The guard's local lease ends no later than a lease after the first send (20 ms of slack for
    // the instants read around it).
    let expires = now + remaining;
    assert!(
        expires <= first_send + lease + Duration::from_millis(20),
        "the holder counts its lease from the retry: it expires {:?} after the first send (lease {lease:?})",
        expires - first_send
    );
    let taken = waiter.await.unwrap();
    assert!(
        g.is_lost(),
        "two holders: the waiter took the lock over while the holder still believes it holds it"
    );
    assert!(taken.fencing_token() > g.fencing_token());
    taken.release().await.unwrap();
}

/// Regression (found by tests/model_lease.rs): a heartbeat that failed ambiguously, was retried
/// and confirmed, and reaches DynamoDB only later (after a newer heartbeat) must not set the
/// heartbeat counter back. Otherwise a waiter that saw the old value earlier, and not the newer
/// one, judges the holder by its old observation and takes over while the holder, counting from
/// its newer heartbeat, still believes it holds the lock.
#[tokio::test]
async fn late_heartbeat_does_not_set_the_counter_back() {
    let (client, table, _guard) = lock_table("ll-latehb").await;
    let late = LateDelivery::new();
    let lease = Duration::from_millis(1500);
    let lock = builder(client_through(&late), &table)
        .lease_duration(lease)
        .manual_heartbeat()
        .build()
        .unwrap();
    let other = builder(client.clone(), &table)
        .clock_skew_margin(Duration::from_millis(100))
        .build()
        .unwrap();
    let g = lock.acquire("hb", Wait::NoWait).await.unwrap();
    // The first heartbeat request is stuck in the network; its retry renews (hb = 1).
    late.hold("UpdateItem", 1, 1, "GetItem");
    g.heartbeat().await.expect("renewed by the retry");
    assert_eq!(late.struck(), 1);
    assert_eq!(num(&record(&client, &table, "hb").await, "hb"), 1);
    // The waiter sees hb = 1 now, and nothing in between until after the stuck request lands.
    assert!(other.try_acquire("hb").await.unwrap().is_none());
    tokio::time::sleep(Duration::from_millis(400)).await;
    g.heartbeat().await.expect("renewed (hb = 2)");
    // Any answered GetItem through the faulty network delivers the stuck heartbeat (hb = 1).
    client_through(&late)
        .get_item()
        .table_name(&table)
        .key("pk", s("hb"))
        .key("sk", s("#lease"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        num(&record(&client, &table, "hb").await, "hb"),
        2,
        "a late heartbeat set the counter back"
    );
    let taken = loop {
        if let Some(t) = other.try_acquire("hb").await.unwrap() {
            break t;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(
        g.is_lost(),
        "two holders: the waiter took the lock over while the holder still believes it holds it"
    );
    taken.release().await.unwrap();
}

/// After a lost acquire response noticed only when most of the lease has passed, the acquirer does
/// not hand out the little that is left: it takes its own write over as a new owner (a new fencing
/// token and a fresh lease).
#[tokio::test]
async fn long_lost_acquire_response_is_renewed_by_takeover() {
    let (client, table, _guard) = lock_table("ll-lostlong").await;
    let late = LateDelivery::new();
    let lease = Duration::from_millis(1500);
    let lock = builder(client_through(&late), &table)
        .lease_duration(lease)
        .manual_heartbeat()
        .build()
        .unwrap();
    late.lose_response("UpdateItem", 1, Duration::from_millis(900));
    let g = lock.acquire("lo", Wait::NoWait).await.expect("acquired");
    assert_eq!(late.struck(), 1);
    assert!(
        g.lease_remaining() > lease / 2,
        "a fresh lease, not the rest of the first one"
    );
    assert_eq!(g.fencing_token(), 2, "the own landed write was taken over");
    let rec = record(&client, &table, "lo").await;
    assert_eq!(owner(&rec), Some(g.holder_id()));
    assert_eq!(num(&rec, "fence"), 2);
    g.release().await.unwrap();
}
