//! The contention policies: who waits, who is rolled back, and that no schedule deadlocks. The
//! ordered policy's tests run with each ticket source (`NAME`: the counter,
//! `NAME_with_clock_tickets`: the clock).

use std::time::Duration;

use dynamodb_transactions::{ContentionPolicy, Error, TicketSource, TransactionManager, TxState};

use crate::common::*;
use crate::{
    counter_row, lock, ordered, ordered_by, ordered_on, ordered_with, reads_and_locks_k, ticket_of,
};

#[tokio::test]
async fn a_younger_transaction_waits_for_an_older_one_and_never_rolls_it_back() {
    a_younger_transaction_waits_for_an_older_one_and_never_rolls_it_back_with(
        TicketSource::Counter,
    )
    .await;
}

#[tokio::test]
async fn a_younger_transaction_waits_for_an_older_one_and_never_rolls_it_back_with_clock_tickets() {
    a_younger_transaction_waits_for_an_older_one_and_never_rolls_it_back_with(TicketSource::Clock)
        .await;
}

async fn a_younger_transaction_waits_for_an_older_one_and_never_rolls_it_back_with(
    source: TicketSource,
) {
    let env = TestEnv::new("ct-wait").await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    let m = ordered_by(&env, source, Duration::from_secs(30));
    let old = m.begin();
    lock(&old, &env.table, "k").await.unwrap();
    let young = m.begin();
    lock(&young, &env.table, "other").await.unwrap();
    assert!(ticket_of(&env, old.id()).await < ticket_of(&env, young.id()).await);

    // The younger one meets the older one's lock: it waits, then gives up, and the older one is
    // untouched.
    let err = young
        .get_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .send()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ItemLocked { .. }), "{err:?}");
    assert!(err.is_retryable());
    assert_eq!(
        env.tx_state(old.id()).await,
        Some((TxState::Pending, false))
    );
    let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
    assert_eq!(
        raw["_TxId"],
        s(old.id().as_str()),
        "still locked by the older transaction"
    );

    old.update_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .update_expression("SET v = :two")
        .expression_attribute_values(":two", n(2))
        .send()
        .await
        .unwrap();
    old.commit().await.unwrap();
    young.rollback().await.unwrap();
    assert_eq!(
        env.raw_get(&env.table, &key("k")).await.unwrap(),
        item(&[("Id", s("k")), ("v", n(2))])
    );
}

#[tokio::test]
async fn an_older_transaction_rolls_back_a_younger_one() {
    an_older_transaction_rolls_back_a_younger_one_with(TicketSource::Counter).await;
}

#[tokio::test]
async fn an_older_transaction_rolls_back_a_younger_one_with_clock_tickets() {
    an_older_transaction_rolls_back_a_younger_one_with(TicketSource::Clock).await;
}

async fn an_older_transaction_rolls_back_a_younger_one_with(source: TicketSource) {
    let env = TestEnv::new("ct-wound").await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    let m = ordered_by(&env, source, Duration::from_secs(30));
    let old = m.begin();
    lock(&old, &env.table, "first").await.unwrap();
    let young = m.begin();
    lock(&young, &env.table, "k").await.unwrap();
    young
        .update_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .update_expression("SET v = :y")
        .expression_attribute_values(":y", n(100))
        .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew)
        .send()
        .await
        .unwrap();
    assert!(ticket_of(&env, old.id()).await < ticket_of(&env, young.id()).await);

    // The older one needs the item: after a short grace it rolls the younger one back.
    let got = old
        .get_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        got.item.unwrap()["v"],
        n(1),
        "the younger one's applied write was undone"
    );
    assert_eq!(
        env.tx_state(young.id()).await,
        Some((TxState::RolledBack, true))
    );
    assert!(young.commit().await.unwrap_err().is_rolled_back());
    old.commit().await.unwrap();
    assert_eq!(
        env.raw_get(&env.table, &key("k")).await.unwrap(),
        item(&[("Id", s("k")), ("v", n(1))])
    );
}

#[tokio::test]
async fn a_dead_transaction_is_rolled_back_whatever_its_ticket() {
    let env = TestEnv::new("ct-dead").await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    let m = ordered(&env, Duration::from_millis(300));
    let old = m.begin();
    let old_id = old.id().clone();
    lock(&old, &env.table, "k").await.unwrap();
    old.abandon(); // its coordinator dies, holding the lock
    tokio::time::sleep(Duration::from_millis(400)).await;
    let young = m.begin();
    lock(&young, &env.table, "k").await.unwrap();
    assert_eq!(
        env.tx_state(&old_id).await,
        Some((TxState::RolledBack, true))
    );
    young.commit().await.unwrap();
    assert_eq!(
        env.raw_get(&env.table, &key("k")).await.unwrap(),
        item(&[("Id", s("k")), ("v", n(1))])
    );
}

/// Under tickets, a holder resolved (here a dead one, rolled back) is progress, not a failed
/// attempt: even with `lock_attempts = 1` the next attempt takes the item. Before, the attempt
/// that met the holder counted, the lock gave up with `ItemLocked`, and `run` started the whole
/// unit of work again.
#[tokio::test]
async fn a_holder_resolved_does_not_use_up_the_lock_attempts() {
    let env = TestEnv::new("ct-handover").await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    let m = ordered(&env, Duration::from_millis(300));
    let old = m.begin();
    let old_id = old.id().clone();
    lock(&old, &env.table, "k").await.unwrap();
    old.abandon();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let strict = ordered_with(
        &env,
        TicketSource::Counter,
        Duration::from_millis(300),
        |s| s.lock_attempts = 1,
    );
    let young = strict.begin();
    lock(&young, &env.table, "k").await.unwrap();
    young
        .update_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .update_expression("SET v = :two")
        .expression_attribute_values(":two", n(2))
        .send()
        .await
        .unwrap();
    young.commit().await.unwrap();
    assert_eq!(
        env.tx_state(&old_id).await,
        Some((TxState::RolledBack, true))
    );
    assert_eq!(
        env.raw_get(&env.table, &key("k")).await.unwrap(),
        item(&[("Id", s("k")), ("v", n(2))])
    );
}

/// The same with a younger holder that is running: the older transaction gives it its grace, then
/// rolls it back and takes the item, still with `lock_attempts = 1` (the grace is no attempt, and
/// the holder rolled back is not one resolved before).
#[tokio::test]
async fn a_younger_holder_given_its_grace_does_not_use_up_the_lock_attempts() {
    let env = TestEnv::new("ct-handover-grace").await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    let strict = ordered_with(&env, TicketSource::Counter, Duration::from_secs(30), |s| {
        s.lock_attempts = 1
    });
    let old = strict.begin();
    lock(&old, &env.table, "first").await.unwrap();
    let young = strict.begin();
    lock(&young, &env.table, "k").await.unwrap();
    assert!(ticket_of(&env, old.id()).await < ticket_of(&env, young.id()).await);
    lock(&old, &env.table, "k").await.unwrap();
    assert_eq!(
        env.tx_state(young.id()).await,
        Some((TxState::RolledBack, true))
    );
    assert!(young.commit().await.unwrap_err().is_rolled_back());
    old.commit().await.unwrap();
}

#[tokio::test]
async fn roll_back_others_policy_rolls_back_the_holder_whatever_its_age() {
    let env = TestEnv::with_settings("ct-rbo", |s| {
        s.contention = ContentionPolicy::RollBackOthers
    })
    .await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    let old = env.manager.begin();
    lock(&old, &env.table, "k").await.unwrap();
    let young = env.manager.begin();
    lock(&young, &env.table, "k").await.unwrap();
    assert_eq!(
        env.tx_state(old.id()).await,
        Some((TxState::RolledBack, true))
    );
    assert!(old.commit().await.unwrap_err().is_rolled_back());
    young.commit().await.unwrap();
}

#[tokio::test]
async fn crossing_lock_orders_never_deadlock() {
    crossing_lock_orders_never_deadlock_with(TicketSource::Counter).await;
}

#[tokio::test]
async fn crossing_lock_orders_never_deadlock_with_clock_tickets() {
    crossing_lock_orders_never_deadlock_with(TicketSource::Clock).await;
}

async fn crossing_lock_orders_never_deadlock_with(source: TicketSource) {
    let env = TestEnv::new("ct-cross").await;
    for k in ["a", "b", "c"] {
        env.raw_put(&env.table, item(&[("Id", s(k)), ("v", n(0))]))
            .await;
    }
    // Default policy: tickets at first contention.
    let orders: [&[&str]; 4] = [
        &["a", "b", "c"],
        &["c", "b", "a"],
        &["b", "a", "c"],
        &["c", "a", "b"],
    ];
    let mut handles = Vec::new();
    for (w, order) in orders.iter().enumerate() {
        let m = TransactionManager::builder(client())
            .transactions_table(env.manager.transactions_table())
            .images_table(env.manager.images_table())
            .configure(|s| {
                s.run_attempts = 50;
                s.ticket_source = source;
            })
            .build();
        let table = env.table.clone();
        let order: Vec<String> = order.iter().map(|s| s.to_string()).collect();
        handles.push(tokio::spawn(async move {
            for _ in 0..4 {
                let (table, order) = (table.clone(), order.clone());
                m.run(async move |tx| {
                    // Read every item in this worker's order, then increment all of them.
                    let mut vals = Vec::new();
                    for k in &order {
                        let it = tx
                            .get_item()
                            .table_name(&table)
                            .key("Id", s(k))
                            .send()
                            .await?;
                        vals.push(
                            it.item.unwrap()["v"]
                                .as_n()
                                .unwrap()
                                .parse::<i64>()
                                .unwrap(),
                        );
                    }
                    for (k, v) in order.iter().zip(vals) {
                        tx.put_item()
                            .table_name(&table)
                            .item("Id", s(k))
                            .item("v", n(v + 1))
                            .send()
                            .await?;
                    }
                    Ok::<_, Error>(())
                })
                .await
                .unwrap_or_else(|e| panic!("worker {w}: {e}"));
            }
        }));
    }
    for h in handles {
        tokio::time::timeout(Duration::from_secs(120), h)
            .await
            .expect("no deadlock")
            .unwrap();
    }
    // 4 workers x 4 increments, no lost update.
    for k in ["a", "b", "c"] {
        assert_eq!(
            env.raw_get(&env.table, &key(k)).await.unwrap(),
            item(&[("Id", s(k)), ("v", n(16))])
        );
    }
    if source == TicketSource::Clock {
        assert_eq!(
            env.raw_get(env.manager.transactions_table(), &counter_row())
                .await,
            None,
            "clock tickets never touch the ticket counter"
        );
    }
}

/// A lock left on an item by a transaction whose record is decided and finalized (a read's lock
/// the record does not name): the contender that meets it releases it, reading only the record's
/// header and the item, without completing the transaction again (whose items are all settled).
#[tokio::test]
async fn a_finalized_holders_stray_lock_is_released_without_completing_it_again() {
    let env = TestEnv::new("ct-final").await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    let m = ordered(&env, Duration::from_secs(30));
    // The lock attributes a read leaves, taken from a real one.
    let probe = m.begin();
    lock(&probe, &env.table, "k").await.unwrap();
    let locked = env.raw_get(&env.table, &key("k")).await.unwrap();
    probe.rollback().await.unwrap();
    // A transaction that committed (finalized) naming only another item, and its stray lock on k.
    let gone = m.begin();
    lock(&gone, &env.table, "other").await.unwrap();
    let gone_id = gone.id().clone();
    gone.commit().await.unwrap();
    let mut stray = locked.clone();
    stray.insert("_TxId".into(), s(gone_id.as_str()));
    // Judged on its record at once: without the probe's ticket (a lock carrying one would be
    // waited for as an older holder's for a fifth of the grace first).
    stray.remove("_TxKR");
    env.raw_put(&env.table, stray).await;

    let counter = dynamodb_transactions::fault::RequestCounter::new();
    let m2 = ordered_on(&env, client_with(vec![shared(counter.clone())]), |_| {});
    let tx = m2.begin();
    reads_and_locks_k(&env, &tx).await;
    // The record's creation, its ticket (the counter, then the record); the lock refused, the
    // holder's header (with ours, in one request), the item, its release, the lock taken.
    // Completing the holder again would read its whole record and the item once more, and try to
    // finalize it again.
    let sent = counter.snapshot();
    assert_eq!(sent.get("Query"), None, "{sent:?}");
    assert_eq!(sent.get("GetItem"), None, "{sent:?}");
    assert_eq!(sent.get("BatchGetItem"), Some(&2), "{sent:?}");
    assert_eq!(sent.get("UpdateItem"), Some(&5), "{sent:?}");
    tx.rollback().await.unwrap();
    let status = m.transaction_state(&gone_id).await.unwrap().unwrap();
    assert_eq!((status.state, status.finalized), (TxState::Committed, true));
}
