//! The transaction's outcome from the error alone, for each outcome driven for real and checked
//! against the record.

use dynamodb_transactions::{Error, TableRole, TransactionManager, TxOutcome, TxState};

use crate::common::*;

/// Each outcome, driven for real, read from the error alone, and checked against the record.
#[tokio::test]
async fn the_error_alone_tells_the_outcome() {
    let env = TestEnv::with_settings("outcome", |s| {
        s.write_only_fast_path = false;
        s.rollback_on_drop = false;
    })
    .await;
    env.raw_put(&env.table, item(&[("Id", s("a")), ("v", n(1))]))
        .await;
    let state = |id: dynamodb_transactions::TxId| {
        let m = env.manager.clone();
        async move {
            m.transaction_state(&id)
                .await
                .unwrap()
                .map(|s| (s.state, s.finalized))
        }
    };

    // Rolled back: a condition was false.
    let tx = env.manager.begin();
    let id = tx.id().clone();
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s("a"))
        .condition_expression("attribute_not_exists(Id)")
        .send()
        .await
        .unwrap();
    let err = tx.commit().await.unwrap_err();
    assert!(err.is_condition_failed(), "{err:?}");
    assert_eq!(err.transaction_outcome(), Some(TxOutcome::RolledBack));
    assert!(
        err.to_string()
            .starts_with(&format!("transaction {id} was rolled back: ")),
        "{err}"
    );
    assert_eq!(state(id).await, Some((TxState::RolledBack, true)));

    // Rolled back in the write-only fast path's single request, refused as a whole: nothing was
    // written, not even a record, so there is no state to read; the error alone says it.
    let fast = TransactionManager::builder(env.client.clone())
        .transactions_table(env.manager.transactions_table())
        .images_table(env.manager.images_table())
        .configure(|s| s.write_only_fast_path = true)
        .build();
    let tx = fast.begin();
    let id = tx.id().clone();
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s("a"))
        .condition_expression("attribute_not_exists(Id)")
        .send()
        .await
        .unwrap();
    let err = tx.commit().await.unwrap_err();
    assert!(err.is_condition_failed(), "{err:?}");
    assert_eq!(err.transaction_outcome(), Some(TxOutcome::RolledBack));
    assert!(err.to_string().contains(id.as_str()), "{err}");
    assert_eq!(state(id).await, None);

    // Rolled back: another coordinator rolled it back before the commit.
    let tx = env.manager.begin();
    let id = tx.id().clone();
    tx.get_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .send()
        .await
        .unwrap(); // recorded and locked
    env.manager.rollback_transaction(&id).await.unwrap();
    let err = tx.commit().await.unwrap_err();
    assert!(err.is_rolled_back(), "{err:?}");
    assert_eq!(err.transaction_outcome(), Some(TxOutcome::RolledBack));
    assert_eq!(state(id).await.map(|s| s.0), Some(TxState::RolledBack));

    // Committed: another coordinator committed it; this handle's rollback cannot undo it.
    let tx = env.manager.begin();
    let id = tx.id().clone();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .update_expression("SET v = :v")
        .expression_attribute_values(":v", n(2))
        .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew)
        .send()
        .await
        .unwrap(); // applied under a lock
    env.manager
        .resume(&id)
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
    let err = tx.rollback().await.unwrap_err();
    assert_eq!(
        err.transaction_outcome(),
        Some(TxOutcome::Committed),
        "{err:?}"
    );
    assert_eq!(state(id).await, Some((TxState::Committed, true)));
    assert_eq!(env.raw_get(&env.table, &key("a")).await.unwrap()["v"], n(2));

    // Pending:
    // tests/transaction/in_doubt.rs::a_commit_throttled_throughout_returns_a_retryable_error and
    // a_commit_that_cannot_connect_leaves_nothing_decided above. Undetermined:
    // tests/fast_path.rs::a_coordinator_that_dies_after_sending_reports_an_undetermined_outcome.

    // A missing transactions table: nothing was written. Another table may be missing after
    // the transaction wrote (a table deleted meanwhile): nothing decided.
    let missing = |role| Error::TableNotFound {
        table: "T".into(),
        role,
    };
    assert_eq!(
        missing(TableRole::Transactions).transaction_outcome(),
        Some(TxOutcome::RolledBack)
    );
    assert_eq!(
        missing(TableRole::Images).transaction_outcome(),
        Some(TxOutcome::Pending)
    );
    assert_eq!(
        missing(TableRole::Other).transaction_outcome(),
        Some(TxOutcome::Pending)
    );

    // Not about a transaction.
    assert_eq!(
        Error::TransactionNotFound { tx_id: "t".into() }.transaction_outcome(),
        None
    );
}
