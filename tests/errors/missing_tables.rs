//! Missing tables: the library's own tables say how to create them and what the failure left; a
//! missing user table refuses only its request.

use dynamodb_transactions::{Error, TableRole, TransactionManager, TxOutcome};

use crate::common::*;

/// A manager whose tables were never created: every way of using it says which table is missing
/// and names `create_tables()`, and a commit that met it reports that nothing was written, which
/// is true. Once the tables exist, the same manager works.
#[tokio::test]
async fn a_missing_transactions_table_names_create_tables() {
    let env = TestEnv::new("no-tables").await;
    let tx_table = unique_name("no-tables-tx");
    let img_table = unique_name("no-tables-img");
    env.guard.add(&tx_table);
    env.guard.add(&img_table);
    let check = |e: &Error| {
        assert!(
            matches!(e, Error::TableNotFound { table, role: TableRole::Transactions } if *table == tx_table),
            "{e:?}"
        );
        let line = e.to_string();
        assert_eq!(
            line,
            format!(
                "transactions table {tx_table} does not exist; nothing was written: create the \
                 tables with TransactionManager::create_tables() (or `dynamodb-tx tables create`)"
            )
        );
        assert_eq!(e.transaction_outcome(), Some(TxOutcome::RolledBack), "{e}");
        assert!(!e.is_retryable(), "{e}");
    };
    for fast_path in [true, false] {
        let m = TransactionManager::builder(client())
            .transactions_table(&tx_table)
            .images_table(&img_table)
            .configure(|s| s.write_only_fast_path = fast_path)
            .build();
        // A write-only commit (the fast path, or the locking protocol).
        let tx = m.begin();
        tx.put_item()
            .table_name(&env.table)
            .item("Id", s("a"))
            .send()
            .await
            .unwrap(); // buffered: the user table exists
        check(&tx.commit().await.unwrap_err());
        // `run`, whose rollback of the failed attempt meets the missing table too.
        let e = m
            .run(async |tx| {
                tx.put_item()
                    .table_name(&env.table)
                    .item("Id", s("a"))
                    .send()
                    .await?;
                Ok(())
            })
            .await
            .unwrap_err();
        check(&e);
        // A locked read records the transaction first.
        let tx = m.begin();
        let e = tx
            .get_item()
            .table_name(&env.table)
            .key("Id", s("a"))
            .send()
            .await
            .unwrap_err();
        check(&e);
        check(&m.transaction_state(&"t1".into()).await.unwrap_err());
    }
    assert!(env.raw_get(&env.table, &key("a")).await.is_none());

    let m = TransactionManager::builder(client())
        .transactions_table(&tx_table)
        .images_table(&img_table)
        .build();
    let e = m.verify_tables().await.unwrap_err();
    check(&e);
    m.create_tables().await.unwrap();
    let tx = m.begin();
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s("a"))
        .send()
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(env.raw_get(&env.table, &key("a")).await.is_some());
}

/// A missing images table names `create_tables()` too.
#[tokio::test]
async fn a_missing_images_table_names_create_tables() {
    let env = TestEnv::new("no-images").await;
    let img_table = unique_name("no-images-img");
    let m = TransactionManager::builder(client())
        .transactions_table(env.manager.transactions_table())
        .images_table(&img_table)
        .build();
    let e = m.verify_tables().await.unwrap_err();
    assert!(
        matches!(&e, Error::TableNotFound { table, role: TableRole::Images } if *table == img_table),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        format!(
            "images table {img_table} does not exist: create the tables with \
             TransactionManager::create_tables() (or `dynamodb-tx tables create`)"
        )
    );
}

/// A request on a table that does not exist is refused by its `send()`; the transaction is left
/// as it was, stays usable, and commits its other writes.
#[tokio::test]
async fn a_missing_user_table_refuses_only_its_request() {
    let env = TestEnv::new("no-user-table").await;
    let missing = unique_name("no-user-table-x");
    let tx = env.manager.begin();
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s("a"))
        .send()
        .await
        .unwrap();
    let e = tx
        .put_item()
        .table_name(&missing)
        .item("Id", s("b"))
        .send()
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::TableNotFound { table, role: TableRole::Other } if *table == missing),
        "{e:?}"
    );
    assert_eq!(e.to_string(), format!("table {missing} does not exist"));
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s("c"))
        .send()
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(env.raw_get(&env.table, &key("a")).await.is_some());
    assert!(env.raw_get(&env.table, &key("c")).await.is_some());
}
