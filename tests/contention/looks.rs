//! What a waiter sends at each look at a locked item.

use std::time::Duration;

use dynamodb_transactions::fault::RequestCounter;

use super::*;

/// A waiter reads its own record in the same request as the holder's (one `BatchGetItem` per
/// look, no `GetItem` of its own): rolled back while it waits (here by an operator), it stops at
/// its next look, and the holder keeps the item and commits.
#[tokio::test]
async fn a_waiter_reads_its_own_record_with_the_holders_at_each_look() {
    let env = TestEnv::new("ct-look").await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    let m = ordered(&env, Duration::from_secs(30));
    let holder = m.begin();
    lock(&holder, &env.table, "k").await.unwrap();
    set_v(&holder, &env.table, "k", 2).await.unwrap();

    let counter = RequestCounter::new();
    let m2 = TransactionManager::builder(client_with(vec![shared(counter.clone())]))
        .transactions_table(env.manager.transactions_table())
        .images_table(env.manager.images_table())
        .configure(|s| {
            s.rollback_on_drop = false;
            s.contention = ContentionPolicy::Ordered {
                dead_after: Duration::from_secs(30),
                ticket_at_begin: true,
            };
            s.lock_wait = Duration::from_secs(20);
        })
        .build();
    let waiter = m2.begin();
    let waiter_id = waiter.id().clone();
    let table = env.table.clone();
    let waiting = tokio::spawn(async move { lock(&waiter, &table, "k").await });

    // Younger, it waits for the holder: two looks that read both records.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while counter.snapshot().get("BatchGetItem").copied().unwrap_or(0) < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no look read both records: {:?}",
            counter.snapshot()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    m.rollback_transaction(&waiter_id).await.unwrap();
    let out = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter stops at its next look")
        .unwrap();
    assert!(matches!(out, Err(Error::RolledBack { .. })), "{out:?}");
    let sent = counter.snapshot();
    // At most the first look reads the holder's record alone (before the waiter's record holds
    // its ticket); no look reads the waiter's own record by itself.
    assert!(sent.get("GetItem").copied().unwrap_or(0) <= 1, "{sent:?}");

    let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
    assert_eq!(raw["_TxId"], s(holder.id().as_str()), "{raw:?}");
    holder.commit().await.unwrap();
    let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
    assert_eq!(raw["v"], n(2));
    assert!(!has_tx_attrs(&raw), "{raw:?}");
}
