//! Tickets: a retried unit of work, a resumed handle and a second handle all contend with the
//! ticket in the transaction's record, whichever the ticket source (`NAME`: the counter,
//! `NAME_with_clock_tickets`: the clock); a clock ticket costs no request.

use std::time::Duration;

use dynamodb_transactions::fault::RequestCounter;
use dynamodb_transactions::{ContentionPolicy, Error, TicketSource, TransactionManager, TxState};

use crate::common::*;
use crate::{counter_row, lock, ordered_by, ordered_with, ticket_of};

#[tokio::test]
async fn a_retried_unit_of_work_keeps_its_ticket() {
    a_retried_unit_of_work_keeps_its_ticket_with(TicketSource::Counter).await;
}

#[tokio::test]
async fn a_retried_unit_of_work_keeps_its_ticket_with_clock_tickets() {
    a_retried_unit_of_work_keeps_its_ticket_with(TicketSource::Clock).await;
}

async fn a_retried_unit_of_work_keeps_its_ticket_with(source: TicketSource) {
    let env = TestEnv::new("ct-keep").await;
    let m = ordered_by(&env, source, Duration::from_secs(30));
    let attempts = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let ids = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (table, a2, ids2) = (env.table.clone(), attempts.clone(), ids.clone());
    m.run(async move |tx| {
        ids2.lock().unwrap().push(tx.id().clone());
        tx.get_item()
            .table_name(&table)
            .key("Id", s("k"))
            .send()
            .await?;
        if a2.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            // The first attempt loses (as if rolled back by a competitor).
            return Err(Error::RolledBack {
                tx_id: tx.id().clone(),
            });
        }
        Ok(())
    })
    .await
    .unwrap();
    let ids = ids.lock().unwrap().clone();
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1]);
    // The same ticket, in the retries' class: without the first attempt's top bit.
    let (first, retry) = (
        ticket_of(&env, &ids[0]).await,
        ticket_of(&env, &ids[1]).await,
    );
    assert!(first >= 1 << 63, "a first attempt's class: {first}");
    assert_eq!(retry, first - (1 << 63), "same ticket on retry");
}

/// Like [`ordered`], but tickets are taken at first contention (the default).
fn ordered_lazy(env: &TestEnv, source: TicketSource) -> TransactionManager {
    TransactionManager::builder(client())
        .transactions_table(env.manager.transactions_table())
        .images_table(env.manager.images_table())
        .configure(|s| {
            s.rollback_on_drop = false;
            s.ticket_source = source;
            s.contention = ContentionPolicy::Ordered {
                dead_after: Duration::from_secs(30),
                ticket_at_begin: false,
            };
            // Long enough that a loaded machine never makes the older one give up; with the old
            // bug both sides wait this long and the older one fails.
            s.lock_wait = Duration::from_secs(3);
            s.wound_grace = Duration::from_millis(50);
            // Tickets in records: every transaction has one from its first lock.
            s.record_on_demand = false;
        })
        .build()
}

/// `t` (holding "a", its record carrying the older ticket) and `young` (holding "b", younger)
/// each need the other's item. `t` must win without waiting for `young`: `young` waits for `t`
/// (or is rolled back), `t` rolls `young` back, commits, and nothing stays locked.
async fn crossing_with_the_older_transaction_wins(
    env: &TestEnv,
    t: dynamodb_transactions::Transaction,
    young: dynamodb_transactions::Transaction,
) {
    let (older, younger) = tokio::join!(lock(&t, &env.table, "b"), lock(&young, &env.table, "a"));
    older.expect("the older transaction takes the younger one's item without a wait cycle");
    let err = younger.expect_err("the younger transaction does not get the older one's item");
    // Wounded, or (on a loaded machine) it gave up waiting for the older one before noticing: both
    // are outcomes without a wait cycle; its commit below must then find it rolled back.
    assert!(
        err.is_rolled_back() || matches!(err, Error::ItemLocked { .. }),
        "the younger one was wounded or gave up waiting: {err:?}"
    );
    for k in ["a", "b"] {
        t.put_item()
            .table_name(&env.table)
            .item("Id", s(k))
            .item("v", n(7))
            .send()
            .await
            .unwrap();
    }
    let (t_id, young_id) = (t.id().clone(), young.id().clone());
    t.commit().await.unwrap();
    assert!(young.commit().await.unwrap_err().is_rolled_back());
    assert_eq!(env.tx_state(&t_id).await, Some((TxState::Committed, true)));
    assert_eq!(
        env.manager
            .transaction_state(&young_id)
            .await
            .unwrap()
            .map(|s| s.state),
        Some(TxState::RolledBack)
    );
    for k in ["a", "b"] {
        assert_eq!(
            env.raw_get(&env.table, &key(k)).await.unwrap(),
            item(&[("Id", s(k)), ("v", n(7))]),
            "{k}: the older transaction's write, no lock left"
        );
    }
}

#[tokio::test]
async fn a_resumed_transaction_keeps_the_ticket_in_its_record() {
    a_resumed_transaction_keeps_the_ticket_in_its_record_with(TicketSource::Counter).await;
}

#[tokio::test]
async fn a_resumed_transaction_keeps_the_ticket_in_its_record_with_clock_tickets() {
    a_resumed_transaction_keeps_the_ticket_in_its_record_with(TicketSource::Clock).await;
}

async fn a_resumed_transaction_keeps_the_ticket_in_its_record_with(source: TicketSource) {
    let env = TestEnv::new("ct-resume").await;
    for k in ["a", "b"] {
        env.raw_put(&env.table, item(&[("Id", s(k)), ("v", n(0))]))
            .await;
    }
    let m = ordered_by(&env, source, Duration::from_secs(30));
    // T takes its ticket as it begins and locks "a"; its coordinator dies.
    let t = m.begin();
    lock(&t, &env.table, "a").await.unwrap();
    let t_id = t.id().clone();
    t.abandon();
    // U, younger, locks "b".
    let u = m.begin();
    lock(&u, &env.table, "b").await.unwrap();
    assert!(ticket_of(&env, &t_id).await < ticket_of(&env, u.id()).await);
    // T is resumed by a new coordinator; T and U now need each other's item.
    let t = m.resume(&t_id).await.unwrap();
    let before = ticket_of(&env, &t_id).await;
    crossing_with_the_older_transaction_wins(&env, t, u).await;
    assert_eq!(
        ticket_of(&env, &t_id).await,
        before,
        "the record's ticket never changes"
    );
}

#[tokio::test]
async fn a_second_handle_adopts_the_ticket_another_handle_recorded() {
    a_second_handle_adopts_the_ticket_another_handle_recorded_with(TicketSource::Counter).await;
}

#[tokio::test]
async fn a_second_handle_adopts_the_ticket_another_handle_recorded_with_clock_tickets() {
    a_second_handle_adopts_the_ticket_another_handle_recorded_with(TicketSource::Clock).await;
}

async fn a_second_handle_adopts_the_ticket_another_handle_recorded_with(source: TicketSource) {
    let env = TestEnv::new("ct-second").await;
    for k in ["a", "b", "z"] {
        env.raw_put(&env.table, item(&[("Id", s(k)), ("v", n(0))]))
            .await;
    }
    let lazy = ordered_lazy(&env, source);
    // T locks "a" with no ticket yet; a second handle of T is made now (its record has no ticket).
    let t = lazy.begin();
    lock(&t, &env.table, "a").await.unwrap();
    let t2 = lazy.resume(t.id()).await.unwrap();
    // T's first handle meets contention (X, without a ticket, holds "z"): T's record gets its
    // ticket, and X is rolled back.
    let x = lazy.begin();
    lock(&x, &env.table, "z").await.unwrap();
    lock(&t, &env.table, "z").await.unwrap();
    let x_id = x.id().clone();
    x.abandon();
    assert_eq!(
        env.manager
            .transaction_state(&x_id)
            .await
            .unwrap()
            .map(|s| s.state),
        Some(TxState::RolledBack)
    );
    // U, younger than T, locks "b".
    let u = ordered_by(&env, source, Duration::from_secs(30)).begin();
    lock(&u, &env.table, "b").await.unwrap();
    assert!(ticket_of(&env, t.id()).await < ticket_of(&env, u.id()).await);
    // The second handle, not the one that took the ticket, meets U.
    let before = ticket_of(&env, t.id()).await;
    t.abandon();
    let t_id = t2.id().clone();
    crossing_with_the_older_transaction_wins(&env, t2, u).await;
    assert_eq!(
        ticket_of(&env, &t_id).await,
        before,
        "the record's ticket never changes"
    );
    assert_eq!(
        env.raw_get(&env.table, &key("z")).await.unwrap(),
        item(&[("Id", s("z")), ("v", n(0))])
    );
}

/// A clock ticket costs no request: a transaction that takes its ticket as it begins sends
/// exactly the requests of one that takes no ticket, and its record still carries the ticket. A
/// counter ticket costs one `UpdateItem` (the `ADD` on the counter row) more.
#[tokio::test]
async fn clock_tickets_take_no_ticket_requests() {
    let env = TestEnv::new("ct-clock-req").await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    let run = async |source: TicketSource, ticket_at_begin: bool| {
        let counter = RequestCounter::new();
        let m = TransactionManager::builder(client_with(vec![shared(counter.clone())]))
            .transactions_table(env.manager.transactions_table())
            .images_table(env.manager.images_table())
            .configure(|s| {
                s.rollback_on_drop = false;
                s.ticket_source = source;
                s.contention = ContentionPolicy::Ordered {
                    dead_after: Duration::from_secs(30),
                    ticket_at_begin,
                };
                // The ticket in the record its first lock creates.
                s.record_on_demand = false;
            })
            .build();
        let tx = m.begin();
        lock(&tx, &env.table, "k").await.unwrap();
        let sent = counter.snapshot();
        let header = item(&[("_TxId", s(tx.id().as_str())), ("_TxN", n(0))]);
        let row = env
            .raw_get(env.manager.transactions_table(), &header)
            .await
            .unwrap();
        tx.rollback().await.unwrap();
        (sent, row.contains_key("_TxK"))
    };
    let (none, ticketed) = run(TicketSource::Counter, false).await;
    assert!(!ticketed, "no contention, no ticket");
    let (clock, ticketed) = run(TicketSource::Clock, true).await;
    assert!(ticketed, "the clock ticket is in the record");
    assert_eq!(clock, none, "a clock ticket costs no request");
    assert_eq!(
        env.raw_get(env.manager.transactions_table(), &counter_row())
            .await,
        None,
        "no counter row"
    );
    let (mut counted, ticketed) = run(TicketSource::Counter, true).await;
    assert!(ticketed);
    *counted.get_mut("UpdateItem").unwrap() -= 1;
    counted.retain(|_, n| *n > 0);
    assert_eq!(counted, none, "a counter ticket costs one UpdateItem");
    assert!(
        env.raw_get(env.manager.transactions_table(), &counter_row())
            .await
            .is_some()
    );
}

/// A clock ticket taken as the transaction begins goes into the record whichever way the record is
/// created: here with the locks of a write-only transaction, batched into one request with the
/// record's creation. It must be the clock's (epoch microseconds, no request), never the counter's
/// (an `ADD` on the shared row, and a small number that would sort before every clock ticket).
#[tokio::test]
async fn clock_tickets_at_begin_go_with_batched_locks_too() {
    let env = TestEnv::new("ct-clock-batch").await;
    for k in ["a", "b"] {
        env.raw_put(&env.table, item(&[("Id", s(k)), ("v", n(1))]))
            .await;
    }
    let m = ordered_with(&env, TicketSource::Clock, Duration::from_secs(30), |s| {
        s.write_only_fast_path = false;
        s.batch_locks = true;
    });
    let tx = m.begin();
    for k in ["a", "b"] {
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s(k))
            .update_expression("SET v = v + :one")
            .expression_attribute_values(":one", n(1))
            .send()
            .await
            .unwrap();
    }
    let id = tx.id().clone();
    tx.commit().await.unwrap();
    assert_eq!(
        env.raw_get(env.manager.transactions_table(), &counter_row())
            .await,
        None,
        "no counter row"
    );
    let ticket = ticket_of(&env, &id).await;
    // 2020-01-01 in epoch microseconds, above the 12 tie-breaking bits.
    assert!(
        ticket >> 12 > 1_577_836_800_000_000,
        "a clock ticket, not the counter's: {ticket}"
    );
    for k in ["a", "b"] {
        let it = env
            .raw_get(&env.table, &item(&[("Id", s(k))]))
            .await
            .unwrap();
        assert_eq!(it["v"], n(2));
    }
}

/// Under `RollBackOthers` no ticket is ever compared: a unit of work that `run` retries after being
/// rolled back must not take one (an `ADD` on the shared counter row for nothing).
#[tokio::test]
async fn a_retry_without_ordered_contention_takes_no_ticket() {
    let env = TestEnv::with_settings("ct-noticket", |s| {
        s.contention = ContentionPolicy::RollBackOthers;
    })
    .await;
    let attempts = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let (table, a2) = (env.table.clone(), attempts.clone());
    env.manager
        .run(async move |tx| {
            tx.get_item()
                .table_name(&table)
                .key("Id", s("k"))
                .send()
                .await?;
            if a2.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                return Err(Error::RolledBack {
                    tx_id: tx.id().clone(),
                });
            }
            Ok(())
        })
        .await
        .unwrap();
    assert_eq!(attempts.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(
        env.raw_get(env.manager.transactions_table(), &counter_row())
            .await,
        None,
        "a ticket was taken although no policy compares tickets"
    );
}
