//! Locks taken without a record (`Settings::record_on_demand`): a sweep of the items leaves a
//! young one to its running transaction, and releases one older than `rollback_after` under a
//! tombstone.

use super::*;

/// A transaction without record that read `a` (`v` 1) under lock and buffered `v = 2`.
async fn read_without_record(env: &TestEnv) -> dynamodb_transactions::Transaction {
    env.raw_put(&env.table, item(&[("Id", s("a")), ("v", n(1))]))
        .await;
    let tx = env.manager.begin();
    tx.get_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .send()
        .await
        .unwrap();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .update_expression("SET v = :v")
        .expression_attribute_values(":v", n(2))
        .send()
        .await
        .unwrap();
    tx
}

async fn a(env: &TestEnv) -> Item {
    env.raw_get(&env.table, &key("a")).await.unwrap()
}

fn header(id: &TxId) -> Item {
    item(&[("_TxId", s(id.as_str())), ("_TxN", n(0))])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_leaves_a_young_lock_without_record_to_its_transaction() {
    let env = TestEnv::with_settings("sweep-unrec", |s| s.record_on_demand = true).await;
    let tx = read_without_record(&env).await;
    let id = tx.id().clone();
    assert_eq!(a(&env).await["_TxId"], s(id.as_str()));

    let report = env
        .manager
        .sweep(&SweepOptions::new().tables_to_scan([env.table.clone()]))
        .await
        .unwrap();
    assert_eq!(report.orphan_locks_released, 0, "{report:?}");
    assert_eq!(report.pending_left, 1, "{report:?}");
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!(a(&env).await["_TxId"], s(id.as_str()), "still locked");
    let tx_table = env.manager.transactions_table().to_string();
    assert!(
        env.raw_get(&tx_table, &header(&id)).await.is_none(),
        "no tombstone"
    );

    tx.commit().await.unwrap();
    let a = a(&env).await;
    assert_eq!(a, item(&[("Id", s("a")), ("v", n(2))]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_releases_an_old_lock_without_record_under_a_tombstone() {
    let env = TestEnv::with_settings("sweep-unrec-old", |s| s.record_on_demand = true).await;
    let tx = read_without_record(&env).await;
    let id = tx.id().clone();
    tx.abandon();
    // Its lock is an hour old.
    env.client
        .update_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .update_expression("SET #d = :d")
        .expression_attribute_names("#d", "_TxD")
        .expression_attribute_values(":d", n(now_ms() - HOUR_MS))
        .send()
        .await
        .unwrap();

    let report = env
        .manager
        .sweep(&SweepOptions::new().tables_to_scan([env.table.clone()]))
        .await
        .unwrap();
    assert_eq!(report.orphan_locks_released, 1, "{report:?}");
    assert_eq!(report.pending_left, 0, "{report:?}");
    assert_eq!(a(&env).await, item(&[("Id", s("a")), ("v", n(1))]));
    let tx_table = env.manager.transactions_table().to_string();
    let stone = env
        .raw_get(&tx_table, &header(&id))
        .await
        .expect("a tombstone");
    assert!(stone.contains_key("_TxX"), "{stone:?}");
}
