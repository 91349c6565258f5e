//! Large transactions: a thousand items over a chunked record, committed, and rolled back after
//! a resume.

use dynamodb_transactions::TxState;

use crate::common::*;

#[tokio::test]
async fn thousand_item_transaction_commits_with_chunked_record() {
    let env = TestEnv::new("big").await;
    // Existing items to update, and new ones to insert: 1,000 requests of ~600 bytes each, more than
    // one record row holds.
    for i in 0..500 {
        env.raw_put(
            &env.table,
            item(&[("Id", s(&format!("u{i}"))), ("n", n(i))]),
        )
        .await;
    }
    let payload = "x".repeat(600);
    let tx = env.manager.begin();
    let id = tx.id().clone();
    for i in 0..500 {
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s(&format!("u{i}")))
            .update_expression("SET n = n + :one, p = :p")
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":p", s(&payload))
            .send()
            .await
            .unwrap();
        tx.put_item()
            .table_name(&env.table)
            .item("Id", s(&format!("i{i}")))
            .item("p", s(&payload))
            .send()
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    let items = env.scan_all(&env.table).await;
    assert_eq!(items.len(), 1000);
    for it in &items {
        assert!(!has_tx_attrs(it));
        let idv = it["Id"].as_s().unwrap();
        assert_eq!(it["p"], s(&payload));
        if let Some(i) = idv.strip_prefix('u') {
            assert_eq!(
                it["n"],
                n(i.parse::<i64>().unwrap() + 1),
                "{idv} updated exactly once"
            );
        }
    }
    // The record spilled into chunk rows and is finalized; its header, which every lock batch
    // checks, holds no request.
    let rows = env.scan_all(env.manager.transactions_table()).await;
    let header = rows.iter().find(|r| r["_TxN"] == n(0)).unwrap();
    let chunks: i64 = header["_TxC"].as_n().unwrap().parse().unwrap();
    assert!(chunks >= 1, "requests spread over chunk rows");
    assert_eq!(
        header["_TxR"],
        aws_sdk_dynamodb::types::AttributeValue::L(vec![])
    );
    // And the gate rows its phased commit closed (`_TxN` -1 to -8), named by `_TxQ`.
    assert_eq!(header["_TxQ"], n(8));
    assert_eq!(rows.len() as i64, 1 + chunks + 8);
    assert_eq!(env.tx_state(&id).await, Some((TxState::Committed, true)));
    assert!(env.manager.delete_transaction(&id).await.unwrap());
    assert!(
        env.scan_all(env.manager.transactions_table())
            .await
            .is_empty(),
        "chunk and gate rows deleted too"
    );
}

#[tokio::test]
async fn large_transaction_rolls_back_after_resume() {
    // Item by item: the crash below is placed by the per-item path's request numbers.
    let env = TestEnv::with_settings("bigrb", |s| s.batch_locks = false).await;
    for i in 0..150 {
        env.raw_put(
            &env.table,
            item(&[("Id", s(&format!("u{i}"))), ("n", n(i))]),
        )
        .await;
    }
    let tx = env.manager.begin();
    let id = tx.id().clone();
    for i in 0..150 {
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s(&format!("u{i}")))
            .update_expression("SET n = :z")
            .expression_attribute_values(":z", n(-1))
            .send()
            .await
            .unwrap();
    }
    // The first apply batch lands (99 items), then the coordinator dies.
    env.faults.crash_at(
        1 + 150 + 2,
        dynamodb_transactions::fault::FaultMode::BeforeSend,
    );
    assert!(tx.commit().await.is_err());
    env.faults.disarm();
    let applied = env
        .scan_all(&env.table)
        .await
        .iter()
        .filter(|i| i.contains_key("_TxA"))
        .count();
    assert!(applied > 0 && applied < 150, "partly applied: {applied}");
    let (m2, _) = env.second_coordinator();
    m2.rollback_transaction(&id).await.unwrap();
    for it in env.scan_all(&env.table).await {
        let i: i64 = it["Id"].as_s().unwrap()[1..].parse().unwrap();
        assert_eq!(it["n"], n(i), "restored from its embedded image");
        assert!(!has_tx_attrs(&it));
    }
    assert_eq!(env.tx_state(&id).await, Some((TxState::RolledBack, true)));
}
