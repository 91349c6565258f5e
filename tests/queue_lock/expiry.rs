//! Dead and departed holders and waiters: crashes, cancellation, clock skew.

use super::*;

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
    let lock = long_lease(client.clone(), &table);
    let holder = lock.acquire("cx", Wait::Forever).await.unwrap();
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire("cx", Wait::Forever).await })
    };
    until_rows(&client, &table, "cx", "the waiter's row", |r| r.len() == 2).await;
    waiter.abort(); // drops the acquire future midway
    assert!(waiter.await.unwrap_err().is_cancelled());
    cancelled_row_goes(&client, &table, &lock, holder, "cx").await;
}

/// A lock whose lease is long: a leftover row would block the next waiter for a minute.
fn long_lease(client: Client, table: &str) -> QueueLock {
    builder(client, table)
        .lease_duration(Duration::from_secs(60))
        .heartbeat_interval(Duration::from_secs(5))
        .build()
        .unwrap()
}

/// The cancelled waiter's row goes, and once `holder` releases `name` the next waiter takes it
/// at once.
async fn cancelled_row_goes(
    client: &Client,
    table: &str,
    lock: &QueueLock,
    holder: dynamodb_transactions::lock::queue::QueueGuard,
    name: &str,
) {
    until_rows(client, table, name, "the cancelled row gone", |r| {
        r.len() == 1
    })
    .await;
    holder.release().await.unwrap();
    let g = lock
        .acquire(name, Wait::For(Duration::from_secs(5)))
        .await
        .expect("not blocked by the cancelled waiter");
    g.release().await.unwrap();
}

/// Regression (failed once in CI under the DynamoDB profile, whose latency leaves a request's answer
/// on its way well after it landed): an `acquire` dropped while its ticket request has landed but
/// its answer has not come back leaves no entry behind. The entry was owned by nothing yet, so it
/// stayed in the queue until its lease ran out, blocking every later waiter.
#[tokio::test]
async fn waiter_cancelled_before_its_ticket_answer_does_not_block_the_queue() {
    let (client, table, _guard) = lock_table("ql-cancel-inflight").await;
    let lock = long_lease(client.clone(), &table);
    let late = LateDelivery::new();
    let slow = long_lease(client_through(&late), &table);
    let holder = lock.acquire("cf", Wait::Forever).await.unwrap();
    // The waiter's ticket request lands; its answer would reach it only 30 s later.
    late.lose_response("UpdateItem", 1, Duration::from_secs(30));
    let waiter = tokio::spawn(async move { slow.acquire("cf", Wait::Forever).await });
    until_rows(&client, &table, "cf", "the waiter's row", |r| r.len() == 2).await;
    assert_eq!(late.struck(), 1, "the answer is on its way");
    waiter.abort(); // drops the acquire future while it awaits that answer
    assert!(waiter.await.unwrap_err().is_cancelled());
    cancelled_row_goes(&client, &table, &lock, holder, "cf").await;
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
    // Someone judged the waiter dead (e.g. it was paused) and removed its entry.
    let owner = text(&rows(&client, &table, "gn").await[1], "owner").to_string();
    remove_entry(&client, &table, "gn", &owner).await;
    holder.release().await.unwrap();
    let err = waiter.await.unwrap().unwrap_err();
    assert!(err.is_lost(), "{err:?}");
    assert!(rows(&client, &table, "gn").await.is_empty());
}

/// `try_acquire` on a queue whose only entry is dead: the conditional ticket request is refused
/// (nothing written) until the handle has watched the entry stay silent for a lease; then it
/// removes the entry and takes the lock.
#[tokio::test]
async fn repeated_try_acquire_removes_a_dead_holder() {
    let (client, table, _guard) = lock_table("ql-trydead").await;
    let faults = FaultInjector::new();
    let crashing = builder(client_with(vec![shared(faults.clone())]), &table)
        .build()
        .unwrap();
    let lock = builder(client.clone(), &table).build().unwrap();
    let holder = crashing.acquire("td", Wait::NoWait).await.unwrap();
    faults.crash_at(1, FaultMode::BeforeSend);
    let mut refused = 0;
    let g = loop {
        if let Some(g) = lock.try_acquire("td").await.unwrap() {
            break g;
        }
        refused += 1;
        assert!(refused < 200, "the dead holder was never removed");
        let r = rows(&client, &table, "td").await;
        assert_eq!(r.len(), 1, "a refused try_acquire writes nothing");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        refused > 0,
        "a fresh handle must watch a lease before judging"
    );
    assert_eq!(g.ticket(), holder.ticket() + 1);
    let r = rows(&client, &table, "td").await;
    assert_eq!(r.len(), 1);
    assert_eq!(text(&r[0], "owner"), g.owner());
    g.release().await.unwrap();
    faults.disarm();
    assert!(holder.release().await.unwrap_err().is_lost());
}

/// A process that dies right after its ticket request landed (it never learns its ticket, and
/// cannot remove the entry) leaves an entry that is never renewed: the next acquirer removes it
/// after a lease and gets the lock.
#[tokio::test]
async fn entry_of_a_process_that_died_while_acquiring_is_removed() {
    let (client, table, _guard) = lock_table("ql-diedacq").await;
    let faults = FaultInjector::new();
    let dying = builder(client_with(vec![shared(faults.clone())]), &table)
        .build()
        .unwrap();
    faults.crash_at(1, FaultMode::AfterSend);
    assert!(dying.acquire("da", Wait::NoWait).await.is_err());
    let r = rows(&client, &table, "da").await;
    assert_eq!(r.len(), 1, "the ticket request landed");
    let lock = builder(client.clone(), &table).build().unwrap();
    let g = lock
        .acquire("da", Wait::For(Duration::from_secs(15)))
        .await
        .expect("the dead entry is removed");
    assert_eq!(g.ticket(), 2);
    let r = rows(&client, &table, "da").await;
    assert_eq!(r.len(), 1);
    assert_eq!(text(&r[0], "owner"), g.owner());
    g.release().await.unwrap();
}
