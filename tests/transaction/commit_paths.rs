//! What each commit path writes: nothing for an empty transaction, n + 2 requests for n updates,
//! and the record's TTL inside the one-request commit.

use dynamodb_transactions::TxState;

use crate::common::*;

#[tokio::test]
async fn empty_transaction_commits_without_writing() {
    let env = TestEnv::new("empty").await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    tx.commit().await.unwrap();
    assert_eq!(env.counter.total(), 0);
    assert_eq!(env.tx_state(&id).await, None);
}

/// Per-item locks (`batch_locks` off): the record, one lock per item, the one-request commit.
#[tokio::test]
async fn n_item_update_costs_n_plus_two_requests() {
    let env = TestEnv::with_settings("count", |s| s.batch_locks = false).await;
    for i in 0..10 {
        env.raw_put(
            &env.table,
            item(&[("Id", s(&format!("k{i}"))), ("v", n(0))]),
        )
        .await;
    }
    // Warm the key-schema cache.
    env.manager
        .get_item()
        .table_name(&env.table)
        .key("Id", s("k0"))
        .send()
        .await
        .unwrap();
    env.counter.reset();
    let tx = env.manager.begin();
    for i in 0..10 {
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s(&format!("k{i}")))
            .update_expression("SET v = :one")
            .expression_attribute_values(":one", n(1))
            .send()
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    let c = env.counter.snapshot();
    assert_eq!(env.counter.total(), 12, "{c:?}");
    assert_eq!(c.get("PutItem"), Some(&1)); // the record
    assert_eq!(c.get("UpdateItem"), Some(&10)); // the locks
    assert_eq!(c.get("TransactWriteItems"), Some(&1)); // apply + unlock + commit
    for i in 0..10 {
        let it = env
            .raw_get(&env.table, &key(&format!("k{i}")))
            .await
            .unwrap();
        assert_eq!(it, item(&[("Id", s(&format!("k{i}"))), ("v", n(1))]));
    }
}

/// Finding 10(c): the one-request commit finalizes the record in its `TransactWriteItems`; the
/// record's TTL attribute must travel in it too, not in a later best-effort write a crash skips.
#[tokio::test]
async fn the_one_request_commit_writes_the_record_ttl_in_the_commit() {
    let env = TestEnv::with_settings("ttl1", |s| {
        s.record_ttl = Some(std::time::Duration::from_secs(86_400))
    })
    .await;
    env.raw_put(&env.table, item(&[("Id", s("a")), ("v", n(1))]))
        .await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .update_expression("SET v = :v")
        .expression_attribute_values(":v", n(2))
        .send()
        .await
        .unwrap();
    // Record and lock (1), the one-request commit (2); the process dies right after it.
    env.faults
        .crash_at(3, dynamodb_transactions::fault::FaultMode::BeforeSend);
    tx.commit().await.unwrap();
    env.faults.disarm();
    assert_eq!(env.counter.get("TransactWriteItems"), 2);
    assert_eq!(env.tx_state(&id).await, Some((TxState::Committed, true)));
    let header = env
        .scan_all(env.manager.transactions_table())
        .await
        .into_iter()
        .find(|r| r["_TxId"] == s(id.as_str()) && r["_TxN"] == n(0))
        .unwrap();
    let expires: u64 = header
        .get("_TxE")
        .expect("the finalized record carries its TTL")
        .as_n()
        .unwrap()
        .parse()
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        expires > now + 86_000 && expires <= now + 86_400,
        "{expires}"
    );
}
