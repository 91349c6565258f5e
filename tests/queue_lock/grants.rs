//! Grants: mutual exclusion, FIFO order, waiting modes, fencing tokens, namespaces.

use super::*;

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
    // Exactly one ticket per acquisition (no ticket races), each issued together with its entry
    // by one UpdateItem; releases are UpdateItems too (one each); waiters read with GetItem.
    assert_eq!(*tokens.last().unwrap(), 50, "a ticket was wasted");
    assert!(counter.get("UpdateItem") >= 100, "{:?}", counter.snapshot());
    assert_eq!(counter.get("TransactWriteItems"), 0);
    assert_eq!(counter.get("DeleteItem"), 0);
    assert_eq!(counter.get("Query"), 0);
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
    assert_eq!(r.len(), 1, "the failed attempts left no entry");
    assert_eq!(text(&r[0], "owner"), holder.owner());
    let first = holder.ticket();
    holder.release().await.unwrap();
    let g = lock.try_acquire("nw").await.unwrap().expect("free now");
    // A refused no-wait attempt is a conditional write that fails: it takes no ticket.
    assert_eq!(g.ticket(), first + 1, "tickets are not reused, none wasted");
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

/// An uncontended cycle is two requests: the ticket request, which shows that nobody is ahead,
/// and the release, which hands the lock on. No read, no transaction.
#[tokio::test]
async fn uncontended_acquire_and_release_take_two_requests() {
    let (client, table, _guard) = lock_table("ql-two").await;
    let counter = dynamodb_transactions::fault::RequestCounter::new();
    // Heartbeats far apart: they are not part of the cycle.
    let lock = builder(client_with(vec![shared(counter.clone())]), &table)
        .lease_duration(Duration::from_secs(20))
        .heartbeat_interval(Duration::from_secs(10))
        .build()
        .unwrap();
    for round in 1..=3u64 {
        let before = counter.snapshot();
        let g = lock
            .acquire("two", Wait::For(Duration::from_secs(5)))
            .await
            .unwrap();
        assert_eq!(g.ticket(), round);
        g.release().await.unwrap();
        let after = counter.snapshot();
        let sent: u64 = after.values().sum::<u64>() - before.values().sum::<u64>();
        assert_eq!(sent, 2, "round {round}: {before:?} -> {after:?}");
    }
    assert!(rows(&client, &table, "two").await.is_empty());
}

/// The head of the queue gets the lock as soon as the holder's release lands: the release is the
/// handoff, with no grant write in between.
#[tokio::test]
async fn release_hands_the_lock_to_the_next_ticket() {
    let (client, table, _guard) = lock_table("ql-handoff").await;
    let lock = builder(client.clone(), &table).build().unwrap();
    let holder = lock.acquire("ho", Wait::NoWait).await.unwrap();
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let lock = lock.clone();
            tokio::spawn(async move {
                let g = lock.acquire("ho", Wait::Forever).await.expect("granted");
                let t = g.ticket();
                g.release().await.expect("released");
                t
            })
        })
        .collect();
    until_rows(&client, &table, "ho", "3 waiters", |r| r.len() == 4).await;
    holder.release().await.unwrap();
    let mut got = Vec::new();
    for w in waiters {
        got.push(w.await.unwrap());
    }
    got.sort();
    assert_eq!(got, vec![2, 3, 4]);
    assert!(rows(&client, &table, "ho").await.is_empty());
}
