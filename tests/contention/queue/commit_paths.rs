//! Waiting in ticket order keeps the cheap commit paths where they are safe: batched locks and
//! the write-only fast path on items that carry no queue, and the one-request commit carrying the
//! registrations it knows.

use std::time::Duration;

use dynamodb_transactions::fault::RequestCounter;

use super::*;

/// Waiting in ticket order keeps batched locks and the one-request commit: a transaction nobody
/// waits for writes its record and locks in one `TransactWriteItems` and commits with one more
/// that decides, applies and unlocks (no read of its record or items after the decision), and one
/// somebody registered behind learns the registration from the cancelled request and carries it
/// in the unlock of a second one.
#[tokio::test]
async fn waiting_in_ticket_order_keeps_the_one_request_commit() {
    let env = TestEnv::new("ct-fifo-one").await;
    for k in ["a", "b"] {
        env.raw_put(&env.table, item(&[("Id", s(k)), ("v", n(1))]))
            .await;
    }
    let counter = RequestCounter::new();
    let m = fifo_tuned(
        &env,
        client_with(vec![shared(counter.clone())]),
        false,
        Duration::from_secs(2),
        |s| s.write_only_fast_path = false,
    );
    let tx = m.begin();
    set_v(&tx, &env.table, "a", 2).await.unwrap();
    set_v(&tx, &env.table, "b", 2).await.unwrap();
    counter.reset();
    tx.commit().await.unwrap();
    // The record and both locks in one request (the items carry no queue), then the commit.
    let sent = counter.snapshot();
    assert_eq!(counter.get("TransactWriteItems"), 2, "{sent:?}");
    assert_eq!(counter.total(), 2, "{sent:?}");
    for k in ["a", "b"] {
        let raw = env.raw_get(&env.table, &key(k)).await.unwrap();
        assert_eq!(raw, item(&[("Id", s(k)), ("v", n(2))]), "{raw:?}");
    }

    // A waiter registers behind a holder of both items after they were locked.
    let (table, kb) = (env.table.clone(), key("b"));
    let h = m.begin();
    lock(&h, &table, "a").await.unwrap();
    set_v(&h, &env.table, "b", 3).await.unwrap();
    lock(&h, &table, "b").await.unwrap();
    let ttl = Duration::from_secs(600);
    assert!(
        dynamodb_transactions::fault::register_waiter(&m, h.id(), &table, &kb, 7, ttl)
            .await
            .unwrap()
    );
    counter.reset();
    h.commit().await.unwrap();
    assert_eq!(
        counter.get("TransactWriteItems"),
        2,
        "{:?}",
        counter.snapshot()
    );
    let raw = env.raw_get(&env.table, &key("b")).await.unwrap();
    assert_eq!(raw["v"], n(3), "{raw:?}");
    assert_eq!(ticket_keys(&raw), vec![7], "{raw:?}");
    assert!(!raw.contains_key("_TxId"), "{raw:?}");
    let raw = env.raw_get(&env.table, &key("a")).await.unwrap();
    assert_eq!(raw, item(&[("Id", s("a")), ("v", n(2))]), "{raw:?}");
}

/// Waiting in ticket order keeps the write-only fast path where no queue is: a write-only
/// transaction commits in one request on items that carry none, and takes the locking path (which
/// respects and carries the queue) on an item that does: a newcomer never passes a live older
/// entry through the fast path, and a put there keeps the queue's attributes.
#[tokio::test]
async fn waiting_in_ticket_order_keeps_the_fast_path_where_no_queue_is() {
    let env = TestEnv::new("ct-fifo-fast").await;
    let far = now_ms() + 600_000;
    let young = u64::MAX - 16;
    env.raw_put(&env.table, item(&[("Id", s("a")), ("v", n(1))]))
        .await;
    // Ticket 0 is older than every ticket the counter hands out.
    env.raw_put(&env.table, queued_item("old", &[(0, far)], 1))
        .await;
    env.raw_put(&env.table, queued_item("young", &[(young, far)], 4))
        .await;
    let mut emptied = item(&[("Id", s("emptied")), ("v", n(1))]);
    emptied.insert("_TxQV".into(), n(6));
    env.raw_put(&env.table, emptied).await;
    let counter = RequestCounter::new();
    let m = fifo_on(
        &env,
        client_with(vec![shared(counter.clone())]),
        true,
        Duration::from_millis(400),
    );
    // No queue: one request.
    let tx = m.begin();
    set_v(&tx, &env.table, "a", 2).await.unwrap();
    set_v(&tx, &env.table, "b", 2).await.unwrap();
    counter.reset();
    tx.commit().await.unwrap();
    assert_eq!(counter.total(), 1, "{:?}", counter.snapshot());
    assert_eq!(
        env.raw_get(&env.table, &key("b")).await.unwrap(),
        item(&[("Id", s("b")), ("v", n(2))])
    );

    // A live entry older than any newcomer: refused, the item not locked nor changed; the
    // newcomer's entry, which joined behind the older one while it waited, taken back off once
    // its commit failed for good.
    let tx = m.begin();
    set_v(&tx, &env.table, "old", 2).await.unwrap();
    let err = tx.commit().await.unwrap_err();
    assert!(is_locked_out(&err), "{err:?}");
    let raw = env.raw_get(&env.table, &key("old")).await.unwrap();
    assert!(!raw.contains_key("_TxId"), "{raw:?}");
    assert_eq!(raw["v"], n(1));
    assert_eq!(super::ticket_keys(&raw), vec![0]);
    assert_eq!(raw["_TxQV"], n(3), "the join, then the leave");

    // A younger entry: the locking path takes the item, and the queue stays as it was.
    let tx = m.begin();
    set_v(&tx, &env.table, "young", 2).await.unwrap();
    tx.commit().await.unwrap();
    let mut expected = queued_item("young", &[(young, far)], 4);
    expected.insert("v".into(), n(2));
    assert_eq!(
        env.raw_get(&env.table, &key("young")).await.unwrap(),
        expected
    );

    // A put over an item whose queue emptied keeps its version.
    let tx = m.begin();
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s("emptied"))
        .item("v", n(3))
        .send()
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let raw = env.raw_get(&env.table, &key("emptied")).await.unwrap();
    assert_eq!(raw.get("_TxQV"), Some(&n(6)), "{raw:?}");
    assert_eq!(raw["v"], n(3), "{raw:?}");
}
