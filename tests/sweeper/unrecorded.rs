//! Locks taken without a record (`Settings::record_on_demand`): a sweep of the items leaves a
//! young one to its running transaction, and releases one older than `rollback_after` under a
//! tombstone, in the tables it is told to scan and in those listed as holding such locks.

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

    // Found in the listed tables too, and left as well.
    let report = env.manager.sweep(&SweepOptions::new()).await.unwrap();
    assert_eq!(report.items_scanned, 1, "{report:?}");
    assert_eq!(report.pending_left, 1, "{report:?}");
    assert_eq!(a(&env).await["_TxId"], s(id.as_str()), "still locked");

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

    // Not named, and the listed tables not scanned: nothing finds it.
    let report = env
        .manager
        .sweep(&SweepOptions::new().scan_unrecorded_tables(false))
        .await
        .unwrap();
    assert_eq!(report.items_scanned, 0, "{report:?}");
    assert_eq!(a(&env).await["_TxId"], s(id.as_str()), "still locked");
    // Its table was listed before the lock went out: the default sweep finds it there.
    let report = env.manager.sweep(&SweepOptions::new()).await.unwrap();
    assert_eq!(report.items_scanned, 1, "{report:?}");
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

/// A table listed as holding locks without record and deleted since: the sweep reports it and
/// goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listed_table_that_is_gone_is_reported_and_the_sweep_goes_on() {
    let env = TestEnv::with_settings("sweep-unrec-gone", |s| s.record_on_demand = true).await;
    let gone = unique_name("sweep-unrec-never");
    env.client
        .update_item()
        .table_name(env.manager.transactions_table())
        .key("_TxId", s("~unrecorded-tables"))
        .key("_TxN", n(0))
        .update_expression("ADD #t :t")
        .expression_attribute_names("#t", "_TxB")
        .expression_attribute_values(":t", AttributeValue::Ss(vec![gone.clone()]))
        .send()
        .await
        .unwrap();
    let idle = abandoned_pending(&env, "idle").await;
    let report = env
        .manager
        .sweep(&SweepOptions::new().rollback_after(Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(report.rolled_back, vec![idle], "{report:?}");
    assert_eq!(report.errors.len(), 1, "{report:?}");
    assert_eq!(report.errors[0].table, gone, "{report:?}");
    assert_eq!(
        report.records_scanned, 1,
        "the list is not a record: {report:?}"
    );
}
