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

/// The default options, but every listed table read whole at each pass.
fn whole() -> SweepOptions {
    SweepOptions::new().unrecorded_scan_period(Duration::ZERO)
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
    let report = env.manager.sweep(&whole()).await.unwrap();
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
        .sweep(&whole().scan_unrecorded_tables(false))
        .await
        .unwrap();
    assert_eq!(report.items_scanned, 0, "{report:?}");
    assert_eq!(a(&env).await["_TxId"], s(id.as_str()), "still locked");
    // Its table was listed before the lock went out: the default sweep finds it there.
    let report = env.manager.sweep(&whole()).await.unwrap();
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
    let report = env.manager.sweep(&whole()).await.unwrap();
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
        .sweep(&whole().rollback_after(Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(report.rolled_back, vec![idle], "{report:?}");
    assert_eq!(report.errors.len(), 1, "{report:?}");
    assert_eq!(report.errors[0].table, gone, "{report:?}");
    // Not read: it is gone.
    assert!(report.unrecorded_tables.is_empty(), "{report:?}");
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

/// By default a sweep pass does not read the listed tables whole: a background sweeper passing
/// every minute would read each of them whole every minute, the cost of `tables_to_scan`, for
/// every table a transaction ever read under lock first. The first pass reads the slice due now,
/// the next one, moments later, no more; once a day has passed, the whole table is due.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_a_pass_reads_a_slice_of_each_listed_table_not_all_of_it() {
    let env = TestEnv::with_settings("sweep-unrec-paced", |s| s.record_on_demand = true).await;
    twelve_abandoned_locks(&env).await;
    let opts = SweepOptions::new()
        .rollback_after(Duration::ZERO)
        .sweep_images(false);
    let first = env.manager.sweep(&opts).await.unwrap();
    let second = env.manager.sweep(&opts).await.unwrap();
    assert!(first.errors.is_empty() && second.errors.is_empty());
    let scanned = first.items_scanned + second.items_scanned;
    assert!(scanned < 12, "read whole: {first:?} {second:?}");
    assert_eq!(locked_items(&env).await as u64, 12 - scanned);
    let read = first.unrecorded_slices.expect("paced");
    assert_eq!((read.count, read.of), (1, 96), "{first:?}");
    assert_eq!(
        first.unrecorded_tables,
        vec![env.table.clone()],
        "{first:?}"
    );
    // Within 15 minutes of the first (a window of a day's 96), nothing more is due.
    let read = second.unrecorded_slices.expect("paced");
    assert!(read.count <= 1, "{second:?}");

    // A day later every slice is due, once.
    read_up_to(&env, now_ms() - 24 * HOUR_MS).await;
    let day_after = env.manager.sweep(&opts).await.unwrap();
    let read = day_after.unrecorded_slices.expect("paced");
    assert_eq!((read.count, read.of), (96, 96), "{day_after:?}");
    let mut slices: Vec<u32> = read.indexes().collect();
    slices.sort_unstable();
    assert_eq!(slices, (0..96).collect::<Vec<_>>());
    assert_eq!(
        day_after.orphan_locks_released,
        12 - scanned,
        "{day_after:?}"
    );
    assert_eq!(locked_items(&env).await, 0);
}

/// Sets the time up to which the listed tables' due slices were read (`_TxRU` on the row that
/// lists them), as if the last pass had come then.
async fn read_up_to(env: &TestEnv, at: u64) {
    env.client
        .update_item()
        .table_name(env.manager.transactions_table())
        .key("_TxId", s("~unrecorded-tables"))
        .key("_TxN", n(0))
        .update_expression("SET #e = :e")
        .expression_attribute_names("#e", "_TxRU")
        .expression_attribute_values(":e", n(at))
        .send()
        .await
        .unwrap();
}

/// Every lock old enough to release, the listed tables read in 3 slices over 3 days.
fn in_slices() -> SweepOptions {
    SweepOptions::new()
        .rollback_after(Duration::ZERO)
        .sweep_images(false)
        .unrecorded_scan_period(Duration::from_secs(3 * 86_400))
        .unrecorded_table_slices(3)
}

/// In 3 slices over 3 days, a pass reads the slices whose day came since the last pass read: the
/// one of the day it came, one per day passed since, the three once three days passed; the passes
/// together read every lock once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listed_tables_are_read_by_the_slices_due_since_the_last_pass() {
    let env = TestEnv::with_settings("sweep-unrec-slices", |s| s.record_on_demand = true).await;
    twelve_abandoned_locks(&env).await;
    let opts = in_slices();
    const DAY_MS: u64 = 24 * HOUR_MS;
    let today = (now_ms() / DAY_MS % 3) as u32;
    let mut released = Vec::new();
    // No pass before: the slice of today.
    let report = env.manager.sweep(&opts).await.unwrap();
    let read = report.unrecorded_slices.expect("paced");
    assert_eq!(
        (read.first, read.count, read.of),
        (today, 1, 3),
        "{report:?}"
    );
    released.push(report.orphan_locks_released);
    // The last pass a day ago: today's slice again (its day came since).
    read_up_to(&env, now_ms() - DAY_MS).await;
    let report = env.manager.sweep(&opts).await.unwrap();
    let read = report.unrecorded_slices.expect("paced");
    assert_eq!((read.first, read.count), (today, 1), "{report:?}");
    assert_eq!(report.orphan_locks_released, 0, "{report:?}");
    // Two days ago: yesterday's slice and today's.
    read_up_to(&env, now_ms() - 2 * DAY_MS).await;
    let report = env.manager.sweep(&opts).await.unwrap();
    let read = report.unrecorded_slices.expect("paced");
    assert_eq!((read.first, read.count), ((today + 2) % 3, 2), "{report:?}");
    released.push(report.orphan_locks_released);
    assert_eq!(
        report.items_scanned, report.orphan_locks_released,
        "{report:?}"
    );
    // A week ago: all three, once.
    read_up_to(&env, now_ms() - 7 * DAY_MS).await;
    let report = env.manager.sweep(&opts).await.unwrap();
    let read = report.unrecorded_slices.expect("paced");
    assert_eq!(read.count, 3, "{report:?}");
    released.push(report.orphan_locks_released);
    assert!(report.errors.is_empty(), "{report:?}");
    println!("locks released per pass: {released:?}");
    assert_eq!(released.iter().sum::<u64>(), 12, "{released:?}");
    assert!(released[..2].iter().sum::<u64>() < 12, "{released:?}");
    assert_eq!(locked_items(&env).await, 0);
}

/// Two sweepers passing at once claim each due slice once: the one whose claim lands reads the
/// slice, the other reads none (its claim, conditional on the time the row said the slices were
/// read up to, fails; or it read the row after that claim, and nothing was due).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sweepers_at_once_read_each_due_slice_once() {
    let env = TestEnv::with_settings("sweep-unrec-twice", |s| s.record_on_demand = true).await;
    twelve_abandoned_locks(&env).await;
    let opts = in_slices();
    let (other, _) = env.second_coordinator();
    let (a, b) = tokio::join!(env.manager.sweep(&opts), other.sweep(&opts));
    let (a, b) = (a.unwrap(), b.unwrap());
    let read =
        |r: &dynamodb_transactions::sweeper::SweepReport| r.unrecorded_slices.expect("paced").count;
    assert_eq!(read(&a) + read(&b), 1, "{a:?} {b:?}");
    // Only the one that claimed the slice read the table.
    assert_eq!(a.unrecorded_tables.len() + b.unrecorded_tables.len(), 1);
    assert_eq!(
        a.items_scanned + b.items_scanned,
        a.orphan_locks_released + b.orphan_locks_released
    );
    assert_eq!(
        locked_items(&env).await as u64,
        12 - a.orphan_locks_released - b.orphan_locks_released
    );
}

/// A dry run writes nothing, so it claims nothing: it reads every listed table whole, and the
/// pass after it is still the first to claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_with_slices_reads_the_listed_tables_whole_and_claims_nothing() {
    let env = TestEnv::with_settings("sweep-unrec-slices-dry", |s| s.record_on_demand = true).await;
    twelve_abandoned_locks(&env).await;
    let opts = in_slices();
    let report = env
        .manager
        .sweep(&opts.clone().dry_run(true))
        .await
        .unwrap();
    assert_eq!(report.unrecorded_slices, None, "{report:?}");
    assert_eq!(report.orphan_locks_released, 12, "{report:?}");
    assert_eq!(locked_items(&env).await, 12);
    let report = env.manager.sweep(&opts).await.unwrap();
    assert_eq!(
        report.unrecorded_slices.map(|r| r.count),
        Some(1),
        "{report:?}"
    );
}

/// With a zero period, as in `finish_everything_now`, a pass reads every listed table whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_period_reads_the_listed_tables_whole_at_every_pass() {
    let env = TestEnv::with_settings("sweep-unrec-whole", |s| s.record_on_demand = true).await;
    twelve_abandoned_locks(&env).await;
    let report = env
        .manager
        .sweep(&SweepOptions::finish_everything_now().sweep_images(false))
        .await
        .unwrap();
    assert_eq!(report.unrecorded_slices, None, "{report:?}");
    assert_eq!(
        report.unrecorded_tables,
        vec![env.table.clone()],
        "{report:?}"
    );
    assert_eq!(report.orphan_locks_released, 12, "{report:?}");
    assert_eq!(locked_items(&env).await, 0);
}
