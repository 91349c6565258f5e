//! `create_tables` / `verify_tables` against DynamoDB Local.
mod common;

use aws_sdk_dynamodb::types::ScalarAttributeType;
use common::*;
use dynamodb_transactions::{Error, TableRole, TransactionManager};

#[tokio::test]
async fn create_tables_is_idempotent_and_verifies() {
    let client = client();
    let guard = TableGuard::default();
    let tx = unique_name("tbl-tx");
    let img = unique_name("tbl-img");
    guard.add(&tx);
    guard.add(&img);
    let m = TransactionManager::builder(client.clone())
        .transactions_table(&tx)
        .images_table(&img)
        .build();

    assert!(matches!(
        m.verify_tables().await,
        Err(Error::TableNotFound { ref table, role: TableRole::Transactions }) if *table == tx
    ));
    m.create_tables().await.unwrap();
    m.create_tables().await.unwrap(); // second call verifies instead of failing
    m.verify_tables().await.unwrap();

    let desc = client
        .describe_table()
        .table_name(&tx)
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
            ("_TxId".to_string(), "HASH".to_string()),
            ("_TxN".to_string(), "RANGE".to_string())
        ]
    );
    assert_eq!(
        desc.billing_mode_summary()
            .and_then(|b| b.billing_mode())
            .map(|b| b.as_str()),
        Some("PAY_PER_REQUEST")
    );
    let img_desc = client
        .describe_table()
        .table_name(&img)
        .send()
        .await
        .unwrap()
        .table
        .unwrap();
    assert_eq!(img_desc.key_schema().len(), 1);
    assert_eq!(img_desc.key_schema()[0].attribute_name(), "_TxI");
}

#[tokio::test]
async fn concurrent_create_tables_agree() {
    let client = client();
    let guard = TableGuard::default();
    let tx = unique_name("tbl-cc-tx");
    let img = unique_name("tbl-cc-img");
    guard.add(&tx);
    guard.add(&img);
    let m = TransactionManager::builder(client.clone())
        .transactions_table(&tx)
        .images_table(&img)
        .build();
    let (a, b) = tokio::join!(m.create_tables(), m.create_tables());
    a.unwrap();
    b.unwrap();
    m.verify_tables().await.unwrap();
}

#[tokio::test]
async fn wrong_key_schema_is_a_typed_error() {
    let client = client();
    let guard = TableGuard::default();
    let tx = unique_name("tbl-bad-tx");
    let img = unique_name("tbl-bad-img");
    guard.add(&tx);
    guard.add(&img);
    // A transactions table keyed on the wrong attribute, and an images table with a range key.
    create_table(&client, &tx, ("id", ScalarAttributeType::S), None).await;
    create_table(
        &client,
        &img,
        ("_TxI", ScalarAttributeType::S),
        Some(("x", ScalarAttributeType::N)),
    )
    .await;
    let m = TransactionManager::builder(client.clone())
        .transactions_table(&tx)
        .images_table(&img)
        .build();

    match m.create_tables().await {
        Err(Error::TableMismatch { table, mismatch }) => {
            assert!(table == tx || table == img, "names the table: {table}");
            assert!(
                mismatch.contains("expected"),
                "says what differs: {mismatch}"
            );
        }
        other => panic!("expected TableMismatch, got {other:?}"),
    }
    match m.verify_tables().await {
        Err(Error::TableMismatch { table, mismatch }) => {
            assert_eq!(table, tx);
            assert!(mismatch.contains("id HASH"), "{mismatch}");
            assert!(mismatch.contains("_TxId HASH"), "{mismatch}");
        }
        other => panic!("expected TableMismatch, got {other:?}"),
    }

    // A key of the right name but the wrong type is caught too.
    let tx2 = unique_name("tbl-type-tx");
    guard.add(&tx2);
    create_table(
        &client,
        &tx2,
        ("_TxId", ScalarAttributeType::N),
        Some(("_TxN", ScalarAttributeType::N)),
    )
    .await;
    let m2 = TransactionManager::builder(client.clone())
        .transactions_table(&tx2)
        .images_table(&img)
        .build();
    match m2.verify_tables().await {
        Err(Error::TableMismatch { table, mismatch }) => {
            assert_eq!(table, tx2);
            assert!(mismatch.contains("type N"), "{mismatch}");
        }
        other => panic!("expected TableMismatch, got {other:?}"),
    }
}
