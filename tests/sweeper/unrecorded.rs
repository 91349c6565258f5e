//! Locks taken without a record (`Settings::record_on_demand`): a sweep of the items leaves a
//! young one to its running transaction, and releases one older than `rollback_after` under a
//! tombstone, in the tables it is told to scan and in those listed as holding such locks.

use super::*;

/// A transaction without record that read item `id` (put with `v` 1) under lock.
async fn read_locked(env: &TestEnv, id: &str) -> dynamodb_transactions::Transaction {
    env.raw_put(&env.table, item(&[("Id", s(id)), ("v", n(1))]))
        .await;
    let tx = env.manager.begin();
    tx.get_item()
        .table_name(&env.table)
        .key("Id", s(id))
        .send()
        .await
        .unwrap();
    tx
}

/// A transaction without record that read `a` (`v` 1) under lock and buffered `v = 2`.
async fn read_without_record(env: &TestEnv) -> dynamodb_transactions::Transaction {
    let tx = read_locked(env, "a").await;
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

/// Makes the lock on `a` an hour old (its stamp, `_TxD`).
async fn age_lock_of_a(env: &TestEnv) {
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
    age_lock_of_a(&env).await;

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

/// Where writes are marked for the change feed (`Settings::fast_path_stamps`), the sweep's
/// release of a lock without record under its tombstone marks the item with the holder's id: the
/// feed learns from it that the holder did nothing else there, and does not wait for a record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweeps_release_of_a_lock_without_record_is_marked_for_the_feed() {
    let env = TestEnv::with_settings("sweep-unrec-mark", |s| {
        s.record_on_demand = true;
        s.fast_path_stamps = dynamodb_transactions::FastPathStamps::Always;
    })
    .await;
    let tx = read_without_record(&env).await;
    let id = tx.id().clone();
    tx.abandon();
    age_lock_of_a(&env).await;
    let report = env.manager.sweep(&SweepOptions::new()).await.unwrap();
    assert_eq!(report.orphan_locks_released, 1, "{report:?}");
    assert_eq!(
        a(&env).await,
        item(&[("Id", s("a")), ("v", n(1)), ("_TxM", s(id.as_str()))])
    );
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

/// Twelve abandoned transactions without record, each holding the lock of one item.
async fn twelve_abandoned_locks(env: &TestEnv) {
    for i in 0..12 {
        read_locked(env, &format!("k{i}")).await.abandon();
    }
}

/// Every lock old enough to release, the listed tables read in `k` slices.
fn in_slices(k: u32) -> SweepOptions {
    SweepOptions::new()
        .rollback_after(Duration::ZERO)
        .sweep_images(false)
        .unrecorded_table_slices(k)
}

async fn locked_items(env: &TestEnv) -> usize {
    let mut locked = 0;
    for i in 0..12 {
        let it = env
            .raw_get(&env.table, &key(&format!("k{i}")))
            .await
            .unwrap();
        locked += usize::from(it.contains_key("_TxId"));
    }
    locked
}

/// With `unrecorded_table_slices(3)`, a pass reads one slice of three of each listed table, the
/// next in turn: three passes release every lock, none of them all, and a fourth starts again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listed_tables_are_read_one_slice_per_pass_in_turn() {
    let env = TestEnv::with_settings("sweep-unrec-slices", |s| s.record_on_demand = true).await;
    twelve_abandoned_locks(&env).await;
    let opts = in_slices(3);
    let mut released = Vec::new();
    for turn in 0..3 {
        let report = env.manager.sweep(&opts).await.unwrap();
        assert_eq!(report.unrecorded_slice, Some((turn, 3)), "{report:?}");
        assert_eq!(
            report.items_scanned, report.orphan_locks_released,
            "{report:?}"
        );
        assert!(report.errors.is_empty(), "{report:?}");
        released.push(report.orphan_locks_released);
    }
    println!("locks released per pass: {released:?}");
    assert_eq!(released.iter().sum::<u64>(), 12, "{released:?}");
    assert!(released.iter().all(|&r| r < 12), "{released:?}");
    assert_eq!(locked_items(&env).await, 0);
    let report = env.manager.sweep(&opts).await.unwrap();
    assert_eq!(report.unrecorded_slice, Some((0, 3)), "{report:?}");
    assert_eq!(report.items_scanned, 0, "{report:?}");
}

/// A dry run writes nothing, so it takes no turn: it reads every listed table whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_with_slices_reads_the_listed_tables_whole_and_takes_no_turn() {
    let env = TestEnv::with_settings("sweep-unrec-slices-dry", |s| s.record_on_demand = true).await;
    twelve_abandoned_locks(&env).await;
    let opts = in_slices(3);
    let report = env
        .manager
        .sweep(&opts.clone().dry_run(true))
        .await
        .unwrap();
    assert_eq!(report.unrecorded_slice, None, "{report:?}");
    assert_eq!(report.orphan_locks_released, 12, "{report:?}");
    assert_eq!(locked_items(&env).await, 12);
    let report = env.manager.sweep(&opts).await.unwrap();
    assert_eq!(report.unrecorded_slice, Some((0, 3)), "{report:?}");
}
