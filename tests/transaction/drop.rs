//! Dropping a handle: an unfinished transaction is rolled back in the background; a resumed
//! handle that wrote nothing leaves the transaction alone.

use aws_sdk_dynamodb::types::ReturnValue;
use dynamodb_transactions::TxState;

use crate::common::*;

#[tokio::test]
async fn dropping_an_unfinished_transaction_rolls_it_back_in_the_background() {
    let env = TestEnv::with_settings("drop", |s| s.rollback_on_drop = true).await;
    env.raw_put(&env.table, item(&[("Id", s("a")), ("v", n(1))]))
        .await;
    let id = {
        let tx = env.manager.begin();
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s("a"))
            .update_expression("SET v = :two")
            .expression_attribute_values(":two", n(2))
            .return_values(ReturnValue::AllNew)
            .send()
            .await
            .unwrap();
        tx.id().clone()
        // dropped here, applied and locked
    };
    // The rollback runs on the runtime; wait for its outcome (bounded).
    let mut state = None;
    for _ in 0..100 {
        state = env
            .manager
            .transaction_state(&id)
            .await
            .unwrap()
            .map(|s| (s.state, s.finalized));
        if state == Some((TxState::RolledBack, true)) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(state, Some((TxState::RolledBack, true)));
    assert_eq!(
        env.raw_get(&env.table, &key("a")).await.unwrap(),
        item(&[("Id", s("a")), ("v", n(1))])
    );
}

/// Waits until the background task a dropped handle may have spawned had every chance to run.
async fn let_background_tasks_run() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}

/// Finding 9: a handle from `resume` that sent nothing must not decide anything when dropped,
/// even with `rollback_on_drop` (the default): another coordinator is driving the transaction.
#[tokio::test]
async fn dropping_a_resumed_handle_that_wrote_nothing_leaves_the_transaction_alone() {
    let env = TestEnv::with_settings("dropres", |s| s.rollback_on_drop = true).await;
    env.raw_put(&env.table, item(&[("Id", s("a")), ("v", n(1))]))
        .await;
    // Coordinator A records the transaction and locks the item, and stays live.
    let a = env.manager.begin();
    let id = a.id().clone();
    a.update_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .update_expression("SET v = :two")
        .expression_attribute_values(":two", n(2))
        .return_values(ReturnValue::AllOld)
        .send()
        .await
        .unwrap();
    // B inspects it through the API and is dropped without doing anything.
    let b = env.manager.resume(&id).await.unwrap();
    assert_eq!(b.id(), &id);
    drop(b);
    let_background_tasks_run().await;
    assert_eq!(
        env.tx_state(&id).await,
        Some((TxState::Pending, false)),
        "the dropped inspection handle decided the transaction"
    );
    a.commit().await.unwrap();
    assert_eq!(
        env.raw_get(&env.table, &key("a")).await.unwrap(),
        item(&[("Id", s("a")), ("v", n(2))])
    );
    // A handle that did write (here: locked an item for a read) still rolls back on drop.
    env.raw_put(&env.table, item(&[("Id", s("b")), ("v", n(1))]))
        .await;
    let c = env.manager.begin();
    let id = c.id().clone();
    c.get_item()
        .table_name(&env.table)
        .key("Id", s("b"))
        .send()
        .await
        .unwrap();
    let resumed = env.manager.resume(&id).await.unwrap();
    drop(c);
    drop(resumed);
    let mut state = None;
    for _ in 0..100 {
        state = env
            .manager
            .transaction_state(&id)
            .await
            .unwrap()
            .map(|s| (s.state, s.finalized));
        if state == Some((TxState::RolledBack, true)) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(state, Some((TxState::RolledBack, true)));
    assert!(!has_tx_attrs(
        &env.raw_get(&env.table, &key("b")).await.unwrap()
    ));
}
