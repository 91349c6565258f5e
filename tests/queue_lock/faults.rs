//! Lost answers and late requests: every write of the queue lock is recognised or retried safely.

use super::*;

#[tokio::test]
async fn lost_ticket_response_is_recognised() {
    let (client, table, _guard) = lock_table("ql-lostticket").await;
    let faults = FaultInjector::new();
    let lock = builder(client_with(vec![shared(faults.clone())]), &table)
        .build()
        .unwrap();
    faults.fail_operation_at("UpdateItem", 1, FaultMode::AfterSend);
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
    faults.fail_operation_at("UpdateItem", 1, FaultMode::AfterSend);
    g.release()
        .await
        .expect("the retry finds the row gone after our own delete");
    assert_eq!(faults.injected(), 1);
    assert!(rows(&client, &table, "lr").await.is_empty());
}

/// Regression: the ticket request lands but its answer is lost (long after it landed); the retry
/// finds the entry already written and adopts it. The entry's lease must run from the first send
/// (when a waiter may first have seen it, and from when its stored expiry counts), not from the
/// adopting request.
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
    // The ticket request is applied; its caller learns of a failure only 800 ms later.
    late.lose_response("UpdateItem", 1, Duration::from_millis(800));
    let g = lock
        .acquire("ad", Wait::For(Duration::from_secs(10)))
        .await
        .expect("the entry written by the first request is adopted");
    let remaining = g.lease_remaining();
    let now = tokio::time::Instant::now();
    assert!(late.struck() >= 1);
    let first_send = late.first_struck_at().expect("the fault struck");
    let r = rows(&client, &table, "ad").await;
    assert_eq!(r.len(), 1, "one entry: the landed write was adopted");
    assert_eq!(text(&r[0], "owner"), g.owner());
    assert_eq!(g.ticket(), 1);
    assert_eq!(
        num(&get(&client, &table, "ad", "#ctr").await.unwrap(), "n"),
        1,
        "the retry took no second ticket"
    );
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

/// The answer to the removal of a dead entry is lost: the retry, on the next look at the queue,
/// finds the entry gone and the waiter proceeds; nothing else is removed.
#[tokio::test]
async fn lost_answer_to_a_dead_entry_removal() {
    let (client, table, _guard) = lock_table("ql-lostremove").await;
    let crash = FaultInjector::new();
    let crashing = builder(client_with(vec![shared(crash.clone())]), &table)
        .build()
        .unwrap();
    let holder = crashing.acquire("lx", Wait::NoWait).await.unwrap();
    crash.crash_at(1, FaultMode::BeforeSend);
    // The waiter's own heartbeats are far apart, so its UpdateItems are: 1 its ticket request,
    // 2 the removal of the dead holder's entry.
    let faults = FaultInjector::new();
    let lock = builder(client_with(vec![shared(faults.clone())]), &table)
        .lease_duration(Duration::from_secs(20))
        .heartbeat_interval(Duration::from_secs(10))
        .build()
        .unwrap();
    faults.fail_operation_at("UpdateItem", 2, FaultMode::AfterSend);
    let g = lock
        .acquire("lx", Wait::For(Duration::from_secs(15)))
        .await
        .expect("proceeds after the lost answer");
    assert_eq!(faults.injected(), 1);
    assert_eq!(g.ticket(), holder.ticket() + 1);
    let r = rows(&client, &table, "lx").await;
    assert_eq!(r.len(), 1);
    assert_eq!(text(&r[0], "owner"), g.owner());
    g.release().await.unwrap();
    crash.disarm();
}

/// An acquirer whose ticket answers are all lost gives up (a time-out) and removes the entry its
/// landed request wrote, so the queue is not blocked for a lease.
#[tokio::test]
async fn acquirer_that_gives_up_after_lost_answers_removes_its_entry() {
    let (client, table, _guard) = lock_table("ql-lostgiveup").await;
    let late = LateDelivery::new();
    let lock = builder(client_through(&late), &table)
        .lease_duration(Duration::from_secs(60))
        .heartbeat_interval(Duration::from_secs(10))
        .build()
        .unwrap();
    // The ticket request lands; its answer is lost after the whole wait.
    late.lose_response("UpdateItem", 1, Duration::from_millis(600));
    let err = lock
        .acquire("lg", Wait::For(Duration::from_millis(300)))
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    until_rows(&client, &table, "lg", "the entry removed", |r| r.is_empty()).await;
    let g = builder(client.clone(), &table)
        .build()
        .unwrap()
        .acquire("lg", Wait::For(Duration::from_secs(2)))
        .await
        .expect("not blocked by the abandoned entry");
    g.release().await.unwrap();
}
