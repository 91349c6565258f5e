//! What a waiter records of its wait (`_TxW`: the ticket of the older transaction it waits for).
//! Whoever meets another lock of the waiter reads it, to wait with the waiter instead of rolling
//! it back; a waiter that holds no other lock is met by nobody, so it does not write it at every
//! change of holder (on a hot item, that was every waiter's write at every handover).

use std::time::Duration;

use dynamodb_transactions::{Item, TxId};

use crate::common::*;
use crate::{lock, ordered, ticket_of};

/// The `_TxW` of `id`'s record, if any.
async fn waiting_on(env: &TestEnv, id: &TxId) -> Option<u64> {
    let header: Item = env
        .raw_get(
            env.manager.transactions_table(),
            &item(&[("_TxId", s(id.as_str())), ("_TxN", n(0))]),
        )
        .await
        .expect("the waiter's record");
    header
        .get("_TxW")
        .map(|v| v.as_n().unwrap().parse().unwrap())
}

/// `young` (holding `young_first` already, if given) waits for `old`'s lock on `k`; returns what
/// its record says it waits for while it waits, then lets `old` commit and `young` take the item
/// and commit.
async fn wait_on_older(env: &TestEnv, young_first: Option<&str>) -> (Option<u64>, u64) {
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    let m = ordered(env, Duration::from_secs(30));
    let old = m.begin();
    lock(&old, &env.table, "k").await.unwrap();
    let young = m.begin();
    if let Some(first) = young_first {
        lock(&young, &env.table, first).await.unwrap();
    }
    let young_id = young.id().clone();
    let table = env.table.clone();
    let waiting = tokio::spawn(async move {
        let read = young
            .get_item()
            .table_name(&table)
            .key("Id", s("k"))
            .send()
            .await
            .map(|o| o.item().cloned());
        (young, read)
    });
    // Well within the heartbeat (a third of `dead_after`): only the wait itself writes `_TxW`.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let recorded = waiting_on(env, &young_id).await;
    let old_ticket = ticket_of(env, old.id()).await;
    assert!(old_ticket < ticket_of(env, &young_id).await);

    old.update_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .update_expression("SET v = :two")
        .expression_attribute_values(":two", n(2))
        .send()
        .await
        .unwrap();
    old.commit().await.unwrap();
    let (young, read) = waiting.await.unwrap();
    let read = read.expect("the waiter takes the item once the older one committed");
    assert_eq!(read.and_then(|i| i.get("v").cloned()), Some(n(2)));
    assert_eq!(
        waiting_on(env, &young_id).await,
        None,
        "no wait left recorded once the lock is taken"
    );
    young.commit().await.unwrap();
    let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
    assert!(!has_tx_attrs(&raw), "left locked: {raw:?}");
    (recorded, old_ticket)
}

#[tokio::test]
async fn a_waiter_holding_no_other_lock_does_not_record_what_it_waits_for() {
    let env = TestEnv::new("ct-mark-lone").await;
    let (recorded, _) = wait_on_older(&env, None).await;
    assert_eq!(recorded, None, "a lone waiter wrote its wait");
}

#[tokio::test]
async fn a_waiter_holding_another_lock_records_what_it_waits_for() {
    let env = TestEnv::new("ct-mark-holds").await;
    // Below `k` in the library's key order: a read above it would be released while the waiter
    // waits (`Settings::reorder_held_reads`), leaving it holding nothing.
    env.raw_put(&env.table, item(&[("Id", s("h")), ("v", n(0))]))
        .await;
    let (recorded, old_ticket) = wait_on_older(&env, Some("h")).await;
    assert_eq!(recorded, Some(old_ticket));
}
