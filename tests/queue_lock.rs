//! The ticket queue lock against DynamoDB Local.
mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use common::*;
use dynamodb_transactions::Item;
use dynamodb_transactions::fault::{FaultInjector, FaultMode, LateDelivery};
use dynamodb_transactions::lock::queue::{QueueLock, QueueLockBuilder};
use dynamodb_transactions::lock::{
    Expiry, LockError, OffsetClock, TicketCounter, Wait, create_lock_table,
};

/// A fresh lock table, deleted when the guard drops.
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

/// Short leases so crash tests stay fast.
fn builder(client: Client, table: &str) -> QueueLockBuilder {
    QueueLock::builder(client)
        .table(table)
        .lease_duration(Duration::from_millis(1500))
        .heartbeat_interval(Duration::from_millis(300))
        .clock_skew_margin(Duration::from_millis(300))
        .poll_interval(Duration::from_millis(20), Duration::from_millis(200))
}

/// The queue rows of lock `name` (default namespace), read consistently.
async fn rows(client: &Client, table: &str, name: &str) -> Vec<Item> {
    rows_ns(client, table, name, "").await
}

async fn rows_ns(client: &Client, table: &str, name: &str, ns: &str) -> Vec<Item> {
    let out = client
        .query()
        .table_name(table)
        .key_condition_expression("pk = :pk AND begins_with(sk, :p)")
        .expression_attribute_values(":pk", s(name))
        .expression_attribute_values(":p", s(&format!("{ns}#q#")))
        .consistent_read(true)
        .send()
        .await
        .expect("Query");
    out.items().to_vec()
}

async fn get(client: &Client, table: &str, pk: &str, sk: &str) -> Option<Item> {
    client
        .get_item()
        .table_name(table)
        .key("pk", s(pk))
        .key("sk", s(sk))
        .consistent_read(true)
        .send()
        .await
        .expect("GetItem")
        .item
}

fn num(item: &Item, attr: &str) -> u64 {
    item.get(attr)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
        .expect("number attribute")
}

fn text<'a>(item: &'a Item, attr: &str) -> &'a str {
    item.get(attr)
        .and_then(|v| v.as_s().ok())
        .expect("string attribute")
}

/// Polls until `cond` holds on the rows of `name` (fails the test after 10 s).
async fn until_rows(
    client: &Client,
    table: &str,
    name: &str,
    what: &str,
    cond: impl Fn(&[Item]) -> bool,
) {
    for _ in 0..500 {
        if cond(&rows(client, table, name).await) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("queue of {name} never reached: {what}");
}

#[tokio::test]
async fn create_table_is_idempotent_and_enables_ttl() {
    let (client, table, _guard) = lock_table("ql-table").await;
    create_lock_table(&client, &table)
        .await
        .expect("second call verifies");
    let desc = client
        .describe_table()
        .table_name(&table)
        .send()
        .await
        .unwrap()
        .table
        .unwrap();
    let keys: Vec<_> = desc
        .key_schema()
        .iter()
        .map(|k| {
            (
                k.attribute_name().to_string(),
                k.key_type().as_str().to_string(),
            )
        })
        .collect();
    assert_eq!(
        keys,
        vec![
            ("pk".to_string(), "HASH".to_string()),
            ("sk".to_string(), "RANGE".to_string())
        ]
    );
    let ttl = client
        .describe_time_to_live()
        .table_name(&table)
        .send()
        .await
        .unwrap();
    let d = ttl.time_to_live_description().unwrap();
    assert_eq!(d.attribute_name(), Some("ttl"));
    assert_eq!(d.time_to_live_status().map(|s| s.as_str()), Some("ENABLED"));
}

#[tokio::test]
async fn ticket_counter_issues_each_ticket_once() {
    let (client, table, _guard) = lock_table("ql-counter").await;
    let counter = TicketCounter::new(client.clone(), &table);
    assert_eq!(counter.current("c").await.unwrap(), 0);
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let c = counter.clone();
            tokio::spawn(async move { c.next("c").await.unwrap() })
        })
        .collect();
    let mut got = Vec::new();
    for t in tasks {
        got.push(t.await.unwrap());
    }
    got.sort();
    assert_eq!(got, (1..=20).collect::<Vec<u64>>());
    assert_eq!(counter.current("c").await.unwrap(), 20);
    assert_eq!(
        num(&get(&client, &table, "c", "#ctr").await.unwrap(), "n"),
        20
    );
}

#[tokio::test]
async fn mutual_exclusion_stress_50_tasks() {
    let (client, table, _guard) = lock_table("ql-stress").await;
    // A longer lease: 50 waiters and a busy DynamoDB Local must not make live rows look dead.
    let counter = dynamodb_transactions::fault::RequestCounter::new();
    let lock = builder(client_with(vec![shared(counter.clone())]), &table)
        .lease_duration(Duration::from_secs(6))
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
                // Read-modify-write with no condition: only the lock protects it.
                let current = get(&client, &table, "data", "value")
                    .await
                    .map(|i| num(&i, "v"))
                    .unwrap_or(0);
                tokio::task::yield_now().await;
                client
                    .put_item()
                    .table_name(&table)
                    .item("pk", s("data"))
                    .item("sk", s("value"))
                    .item("v", n(current + 1))
                    .send()
                    .await
                    .expect("PutItem");
                tokens.lock().unwrap().push(guard.fencing_token());
                guard.release().await.expect("release");
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let data = get(&client, &table, "data", "value")
        .await
        .expect("counter item");
    assert_eq!(
        num(&data, "v"),
        50,
        "lost updates: the lock let two holders in"
    );
    // Grants happened in ticket order: the tokens, in grant order, strictly increase.
    let tokens = tokens.lock().unwrap().clone();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens out of order: {tokens:?}"
    );
    assert!(
        rows(&client, &table, "counter").await.is_empty(),
        "every row was deleted on release"
    );
    assert_eq!(
        num(&get(&client, &table, "counter", "#ctr").await.unwrap(), "n"),
        *tokens.last().unwrap()
    );
    // One delete per release; at least one ticket transaction per acquisition.
    assert_eq!(counter.get("DeleteItem"), 50, "{:?}", counter.snapshot());
    assert!(counter.get("TransactWriteItems") >= 50);
}

#[tokio::test]
async fn fifo_grant_order_equals_ticket_order() {
    let (client, table, _guard) = lock_table("ql-fifo").await;
    // A longer lease: the order of grants is under test, not expiry, and a waiter's lease counts
    // from its first ticket request, which a loaded machine can make slow.
    let lock = builder(client.clone(), &table)
        .lease_duration(Duration::from_secs(6))
        .heartbeat_interval(Duration::from_secs(1))
        .build()
        .unwrap();
    let holder = lock.acquire("fifo", Wait::NoWait).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..12)
        .map(|_| {
            let (lock, order) = (lock.clone(), order.clone());
            tokio::spawn(async move {
                let g = lock.acquire("fifo", Wait::Forever).await.expect("acquire");
                order.lock().unwrap().push(g.ticket());
                g.release().await.expect("release");
            })
        })
        .collect();
    // All twelve are queued behind the holder before it lets go.
    until_rows(&client, &table, "fifo", "13 rows", |r| r.len() == 13).await;
    let queued: Vec<u64> = rows(&client, &table, "fifo")
        .await
        .iter()
        .map(|r| text(r, "sk")[3..].parse().unwrap())
        .collect();
    holder.release().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(order.len(), 12);
    assert_eq!(
        order,
        queued[1..].to_vec(),
        "grants must follow ticket order"
    );
}

#[tokio::test]
async fn no_wait_fails_at_once_and_leaves_no_row() {
    let (client, table, _guard) = lock_table("ql-nowait").await;
    let lock = builder(client.clone(), &table).build().unwrap();
    let holder = lock.acquire("nw", Wait::NoWait).await.unwrap();
    let err = lock.acquire("nw", Wait::NoWait).await.unwrap_err();
    assert!(
        matches!(err, LockError::WouldBlock { ref name } if name == "nw"),
        "{err:?}"
    );
    assert!(lock.try_acquire("nw").await.unwrap().is_none());
    let r = rows(&client, &table, "nw").await;
    assert_eq!(r.len(), 1, "the failed attempts removed their rows");
    assert_eq!(text(&r[0], "owner"), holder.owner());
    holder.release().await.unwrap();
    let g = lock.try_acquire("nw").await.unwrap().expect("free now");
    assert!(g.ticket() > 3, "tickets of failed attempts are not reused");
    g.release().await.unwrap();
    assert!(rows(&client, &table, "nw").await.is_empty());
}

#[tokio::test]
async fn timeout_gives_up_and_removes_its_row() {
    let (client, table, _guard) = lock_table("ql-timeout").await;
    let lock = builder(client.clone(), &table).build().unwrap();
    let holder = lock.acquire("to", Wait::Forever).await.unwrap();
    let err = lock
        .acquire("to", Wait::For(Duration::from_millis(400)))
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    let r = rows(&client, &table, "to").await;
    assert_eq!(r.len(), 1);
    assert_eq!(text(&r[0], "owner"), holder.owner());
    holder.release().await.unwrap();
}

#[tokio::test]
async fn forever_waits_until_release() {
    let (client, table, _guard) = lock_table("ql-forever").await;
    let lock = builder(client.clone(), &table).build().unwrap();
    let holder = lock.acquire("fv", Wait::Forever).await.unwrap();
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire("fv", Wait::Forever).await })
    };
    until_rows(&client, &table, "fv", "the waiter's row", |r| r.len() == 2).await;
    // Several heartbeats later the waiter still waits and its row is renewed.
    until_rows(&client, &table, "fv", "the waiter's heartbeat", |r| {
        r.len() == 2 && num(&r[1], "hb") >= 2
    })
    .await;
    assert!(!waiter.is_finished());
    let first = holder.ticket();
    holder.release().await.unwrap();
    let g = waiter.await.unwrap().expect("granted after release");
    assert!(g.ticket() > first);
    g.release().await.unwrap();
}

#[tokio::test]
async fn crashed_holder_is_overtaken_after_expiry() {
    let (client, table, _guard) = lock_table("ql-crash").await;
    let faults = FaultInjector::new();
    let crashing = builder(client_with(vec![shared(faults.clone())]), &table)
        .build()
        .unwrap();
    let lock = builder(client.clone(), &table).build().unwrap();
    let holder = crashing.acquire("cr", Wait::NoWait).await.unwrap();
    // The holder's process loses DynamoDB for good: no more heartbeats reach the table.
    faults.crash_at(1, FaultMode::BeforeSend);
    let g = lock
        .acquire("cr", Wait::For(Duration::from_secs(15)))
        .await
        .expect("taken over");
    assert!(g.fencing_token() > holder.fencing_token());
    let r = rows(&client, &table, "cr").await;
    assert_eq!(r.len(), 1, "the dead row was deleted");
    assert_eq!(text(&r[0], "owner"), g.owner());
    // The crashed holder learns that it lost the lock.
    tokio::time::timeout(Duration::from_secs(10), holder.lost())
        .await
        .expect("lost() resolves");
    assert!(holder.is_lost());
    faults.disarm();
    let err = holder.release().await.unwrap_err();
    assert!(err.is_lost(), "{err:?}");
    g.release().await.unwrap();
}

#[tokio::test]
async fn cancelled_waiter_does_not_block_the_queue() {
    let (client, table, _guard) = lock_table("ql-cancel").await;
    // A long lease: a leftover row would block the next waiter for a minute.
    let lock = builder(client.clone(), &table)
        .lease_duration(Duration::from_secs(60))
        .heartbeat_interval(Duration::from_secs(5))
        .build()
        .unwrap();
    let holder = lock.acquire("cx", Wait::Forever).await.unwrap();
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire("cx", Wait::Forever).await })
    };
    until_rows(&client, &table, "cx", "the waiter's row", |r| r.len() == 2).await;
    waiter.abort(); // drops the acquire future midway
    assert!(waiter.await.unwrap_err().is_cancelled());
    until_rows(&client, &table, "cx", "the cancelled row gone", |r| {
        r.len() == 1
    })
    .await;
    holder.release().await.unwrap();
    let g = lock
        .acquire("cx", Wait::For(Duration::from_secs(5)))
        .await
        .expect("not blocked by the cancelled waiter");
    g.release().await.unwrap();
}

#[tokio::test]
async fn clock_skew_does_not_fool_observed_expiry() {
    let (client, table, _guard) = lock_table("ql-skew").await;
    let lock = builder(client.clone(), &table).build().unwrap();
    let holder = lock.acquire("sk", Wait::Forever).await.unwrap();
    // A waiter whose clock runs an hour ahead: every stored expiry looks long past to it.
    let skewed = builder(client.clone(), &table)
        .clock(OffsetClock::new(3_600_000))
        .build()
        .unwrap();
    let err = skewed
        .acquire("sk", Wait::For(Duration::from_secs(4)))
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    let r = rows(&client, &table, "sk").await;
    assert_eq!(r.len(), 1);
    assert_eq!(
        text(&r[0], "owner"),
        holder.owner(),
        "the live holder kept its row"
    );
    assert!(!holder.is_lost());
    holder.release().await.unwrap();
}

#[tokio::test]
async fn wall_clock_expiry_tolerates_skew_within_the_margin() {
    let (client, table, _guard) = lock_table("ql-wall").await;
    let lock = builder(client.clone(), &table)
        .expiry(Expiry::WallClock)
        .build()
        .unwrap();
    let holder = lock.acquire("wc", Wait::Forever).await.unwrap();
    // 5 s ahead with a 10 s margin: the holder's row must not look expired.
    let within = builder(client.clone(), &table)
        .expiry(Expiry::WallClock)
        .clock(OffsetClock::new(5_000))
        .clock_skew_margin(Duration::from_secs(10))
        .build()
        .unwrap();
    assert!(
        within
            .acquire("wc", Wait::For(Duration::from_secs(2)))
            .await
            .unwrap_err()
            .is_timeout()
    );
    assert_eq!(
        text(&rows(&client, &table, "wc").await[0], "owner"),
        holder.owner()
    );
    // A crashed holder is taken over by the wall clock (no observation period needed).
    let faults = FaultInjector::new();
    let crashing = builder(client_with(vec![shared(faults.clone())]), &table)
        .expiry(Expiry::WallClock)
        .build()
        .unwrap();
    holder.release().await.unwrap();
    let dead = crashing.acquire("wc", Wait::NoWait).await.unwrap();
    faults.crash_at(1, FaultMode::BeforeSend);
    let g = lock
        .acquire("wc", Wait::For(Duration::from_secs(10)))
        .await
        .expect("taken over");
    assert!(g.ticket() > dead.ticket());
    g.release().await.unwrap();
}

#[tokio::test]
async fn lost_ticket_response_is_recognised() {
    let (client, table, _guard) = lock_table("ql-lostticket").await;
    let faults = FaultInjector::new();
    let lock = builder(client_with(vec![shared(faults.clone())]), &table)
        .build()
        .unwrap();
    faults.fail_operation_at("TransactWriteItems", 1, FaultMode::AfterSend);
    let g = lock
        .acquire("lt", Wait::NoWait)
        .await
        .expect("acquired despite the lost response");
    assert_eq!(faults.injected(), 1);
    let r = rows(&client, &table, "lt").await;
    assert_eq!(
        r.len(),
        1,
        "exactly one row: the landed write was recognised, not duplicated"
    );
    assert_eq!(text(&r[0], "owner"), g.owner());
    assert_eq!(
        num(&get(&client, &table, "lt", "#ctr").await.unwrap(), "n"),
        g.ticket()
    );
    assert_eq!(g.ticket(), 1);
    g.release().await.unwrap();
}

#[tokio::test]
async fn lost_heartbeat_response_keeps_the_lock() {
    let (client, table, _guard) = lock_table("ql-losthb").await;
    let faults = FaultInjector::new();
    let lock = builder(client_with(vec![shared(faults.clone())]), &table)
        .build()
        .unwrap();
    let g = lock.acquire("lh", Wait::NoWait).await.unwrap();
    // The next two heartbeats are applied but their responses are lost.
    faults.fail_operation_at("UpdateItem", 1, FaultMode::AfterSend);
    until_rows(&client, &table, "lh", "heartbeat 3", |r| {
        r.len() == 1 && num(&r[0], "hb") >= 3
    })
    .await;
    assert_eq!(faults.injected(), 1);
    assert!(!g.is_lost());
    g.release().await.expect("still ours");
    assert!(rows(&client, &table, "lh").await.is_empty());
}

#[tokio::test]
async fn lost_release_response_still_releases() {
    let (client, table, _guard) = lock_table("ql-lostrel").await;
    let faults = FaultInjector::new();
    let lock = builder(client_with(vec![shared(faults.clone())]), &table)
        .build()
        .unwrap();
    let g = lock.acquire("lr", Wait::NoWait).await.unwrap();
    faults.fail_operation_at("DeleteItem", 1, FaultMode::AfterSend);
    g.release()
        .await
        .expect("the retry finds the row gone after our own delete");
    assert_eq!(faults.injected(), 1);
    assert!(rows(&client, &table, "lr").await.is_empty());
}

#[tokio::test]
async fn fencing_tokens_increase_across_release_and_takeover() {
    let (client, table, _guard) = lock_table("ql-fence").await;
    let lock = builder(client.clone(), &table).build().unwrap();
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let g = lock.acquire("fe", Wait::NoWait).await.unwrap();
        tokens.push(g.fencing_token());
        g.release().await.unwrap();
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
        .unwrap();
    tokens.push(g.fencing_token());
    g.release().await.unwrap();
    let g = lock.acquire("fe", Wait::NoWait).await.unwrap();
    tokens.push(g.fencing_token());
    g.release().await.unwrap();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    let distinct: HashSet<_> = tokens.iter().collect();
    assert_eq!(distinct.len(), tokens.len());
}

#[tokio::test]
async fn namespaces_are_independent_queues() {
    let (client, table, _guard) = lock_table("ql-ns").await;
    let a = builder(client.clone(), &table)
        .namespace("read")
        .build()
        .unwrap();
    let b = builder(client.clone(), &table)
        .namespace("write")
        .build()
        .unwrap();
    let ga = a.acquire("entity", Wait::NoWait).await.unwrap();
    let gb = b
        .acquire("entity", Wait::NoWait)
        .await
        .expect("other namespace is free");
    assert!(a.try_acquire("entity").await.unwrap().is_none());
    assert_eq!(rows_ns(&client, &table, "entity", "read").await.len(), 1);
    assert_eq!(rows_ns(&client, &table, "entity", "write").await.len(), 1);
    assert!(get(&client, &table, "entity", "read#ctr").await.is_some());
    assert!(get(&client, &table, "entity", "write#ctr").await.is_some());
    ga.release().await.unwrap();
    gb.release().await.unwrap();
    assert!(matches!(
        QueueLock::builder(client)
            .table(&table)
            .namespace("a#b")
            .build(),
        Err(LockError::InvalidConfig(_))
    ));
}

#[tokio::test]
async fn dropped_guard_releases_in_the_background() {
    let (client, table, _guard) = lock_table("ql-drop").await;
    let lock = builder(client.clone(), &table).build().unwrap();
    let g = lock.acquire("dr", Wait::NoWait).await.unwrap();
    drop(g);
    until_rows(&client, &table, "dr", "empty", |r| r.is_empty()).await;
    let g = lock.acquire("dr", Wait::NoWait).await.expect("free again");
    g.release().await.unwrap();
}

#[tokio::test]
async fn waiter_whose_row_was_deleted_never_proceeds() {
    let (client, table, _guard) = lock_table("ql-gone").await;
    let lock = builder(client.clone(), &table).build().unwrap();
    let holder = lock.acquire("gn", Wait::Forever).await.unwrap();
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire("gn", Wait::Forever).await })
    };
    until_rows(&client, &table, "gn", "the waiter's row", |r| r.len() == 2).await;
    // Someone judged the waiter dead (e.g. it was paused) and deleted its row.
    let sk = text(&rows(&client, &table, "gn").await[1], "sk").to_string();
    client
        .delete_item()
        .table_name(&table)
        .key("pk", s("gn"))
        .key("sk", s(&sk))
        .send()
        .await
        .unwrap();
    holder.release().await.unwrap();
    let err = waiter.await.unwrap().unwrap_err();
    assert!(err.is_lost(), "{err:?}");
    assert!(rows(&client, &table, "gn").await.is_empty());
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

/// Regression: the ticket request fails ambiguously (it and its replays are stuck in the network);
/// they arrive only after the acquirer read the counter again, so its fresh request for the same
/// ticket finds the row already written by the first one and adopts it. The row's lease must run
/// from the first send of that ticket's requests (when a waiter may first have seen the row, and
/// from when its stored expiry counts), not from the adopting request.
#[tokio::test]
async fn adopted_row_counts_its_lease_from_the_first_send() {
    let (client, table, _guard) = lock_table("ql-adoptlease").await;
    let late = LateDelivery::new();
    let lease = Duration::from_millis(3000);
    let lock = builder(client_through(&late), &table)
        .lease_duration(lease)
        .heartbeat_interval(Duration::from_millis(1500))
        .expiry(Expiry::WallClock)
        .build()
        .unwrap();
    // The ticket request and its three replays (same token) fail for the caller but are kept;
    // they land right after the next counter read is answered.
    late.hold("TransactWriteItems", 1, 4, "GetItem");
    let g = lock
        .acquire("ad", Wait::For(Duration::from_secs(10)))
        .await
        .expect("the row written by the first request is adopted");
    let remaining = g.lease_remaining();
    let now = tokio::time::Instant::now();
    assert!(late.struck() >= 1);
    let first_send = late.first_struck_at().expect("the fault struck");
    let r = rows(&client, &table, "ad").await;
    assert_eq!(r.len(), 1, "one row: the landed write was adopted");
    assert_eq!(text(&r[0], "owner"), g.owner());
    assert_eq!(g.ticket(), 1);
    let expires = now + remaining;
    assert!(
        expires <= first_send + lease + Duration::from_millis(20),
        "the holder counts its lease from the adopting request: it expires {:?} after the first send (lease {lease:?})",
        expires - first_send
    );
    g.release().await.unwrap();
}

/// Regression (found by tests/model_lease.rs): a heartbeat that failed ambiguously, was retried
/// and confirmed, and reaches DynamoDB only after a newer heartbeat must not set the row's
/// heartbeat counter (and stored expiry) back: a waiter that saw the old value earlier would judge
/// the row by that old observation while its holder counts from the newer heartbeat.
#[tokio::test]
async fn late_heartbeat_does_not_set_the_row_back() {
    let (client, table, _guard) = lock_table("ql-latehb").await;
    let late = LateDelivery::new();
    let lock = builder(client_through(&late), &table)
        .lease_duration(Duration::from_secs(20))
        .heartbeat_interval(Duration::from_secs(10))
        .build()
        .unwrap();
    let g = lock.acquire("hb", Wait::NoWait).await.unwrap();
    late.hold("UpdateItem", 1, 1, "GetItem");
    g.heartbeat().await.expect("renewed by the retry");
    assert_eq!(late.struck(), 1);
    let first = rows(&client, &table, "hb").await;
    assert_eq!(num(&first[0], "hb"), 1);
    tokio::time::sleep(Duration::from_millis(20)).await;
    g.heartbeat().await.expect("renewed (hb = 2)");
    let renewed = rows(&client, &table, "hb").await;
    // Any answered GetItem through the faulty network delivers the stuck heartbeat.
    client_through(&late)
        .get_item()
        .table_name(&table)
        .key("pk", s("hb"))
        .key("sk", s("#ctr"))
        .send()
        .await
        .unwrap();
    let after = rows(&client, &table, "hb").await;
    assert_eq!(num(&after[0], "hb"), 2, "a late heartbeat set the row back");
    assert_eq!(num(&after[0], "exp_ms"), num(&renewed[0], "exp_ms"));
    g.release().await.unwrap();
}
