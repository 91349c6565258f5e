//! Orphaned images and locks of deleted records are cleaned; applied orphan locks are reported.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_images_and_locks_of_deleted_records_are_cleaned() {
    let env = TestEnv::new("sweep-orphans").await;
    let images = env.manager.images_table().to_string();

    // A finalized transaction that read-locked "late" (committed), and one still pending.
    env.raw_put(&env.table, item(&[("Id", s("late")), ("v", s("x"))]))
        .await;
    let tx = env.manager.begin();
    let finalized = tx.id().clone();
    tx.get_item()
        .table_name(&env.table)
        .key("Id", s("late"))
        .send()
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        state(&env, &finalized).await,
        Some((TxState::Committed, true))
    );
    // A slow coordinator's lock that landed after the transaction finished.
    env.raw_put(
        &env.table,
        item(&[
            ("Id", s("late")),
            ("v", s("x")),
            ("_TxId", s(finalized.as_str())),
            ("_TxD", n(now_ms())),
        ]),
    )
    .await;
    let pending = abandoned_pending(&env, "pending").await;

    // Images: of a vanished transaction, of a finalized one, of a pending one.
    let gone = TxId::new_random();
    for owner in [&gone, &finalized, &pending] {
        env.raw_put(
            &images,
            item(&[
                (
                    "_TxI",
                    s(&format!("{owner}#{}", uuid::Uuid::new_v4().simple())),
                ),
                ("bal", n(1)),
            ]),
        )
        .await;
    }

    // Request rows of a record whose header is gone (deleted by TTL), and one of a live record.
    for (owner, row) in [(&gone, 1), (&gone, 2), (&pending, 7)] {
        env.raw_put(
            env.manager.transactions_table(),
            item(&[
                ("_TxId", s(owner.as_str())),
                ("_TxN", n(row)),
                ("_TxR", AttributeValue::L(vec![])),
            ]),
        )
        .await;
    }

    // Locks of the vanished transaction: unapplied on an existing item, a transient placeholder, and
    // an applied write (which only an operator can judge).
    env.raw_put(
        &env.table,
        item(&[
            ("Id", s("held")),
            ("v", s("keep me")),
            ("_TxId", s(gone.as_str())),
            ("_TxD", n(now_ms())),
        ]),
    )
    .await;
    env.raw_put(
        &env.table,
        item(&[
            ("Id", s("placeholder")),
            ("_TxId", s(gone.as_str())),
            ("_TxD", n(now_ms())),
            ("_TxT", AttributeValue::Bool(true)),
        ]),
    )
    .await;
    let applied = item(&[
        ("Id", s("applied")),
        ("v", s("new")),
        ("_TxId", s(gone.as_str())),
        ("_TxD", n(now_ms())),
        ("_TxA", s("1")),
        (
            "_TxG",
            AttributeValue::M(item(&[("Id", s("applied")), ("v", s("old"))])),
        ),
    ]);
    env.raw_put(&env.table, applied.clone()).await;
    // The same, with its before-image in the images table: the image must survive for the operator.
    let kept_image = format!("{gone}#needed");
    env.raw_put(
        &images,
        item(&[
            ("_TxI", s(&kept_image)),
            ("Id", s("applied2")),
            ("v", s("old")),
        ]),
    )
    .await;
    let applied2 = item(&[
        ("Id", s("applied2")),
        ("v", s("new")),
        ("_TxId", s(gone.as_str())),
        ("_TxD", n(now_ms())),
        ("_TxA", s("1")),
        ("_TxI", s(&kept_image)),
    ]);
    env.raw_put(&env.table, applied2.clone()).await;
    env.raw_put(&env.table, item(&[("Id", s("free")), ("v", s("f"))]))
        .await;

    let report = env
        .manager
        .sweep(
            &SweepOptions::new()
                .tables_to_scan([env.table.clone()])
                .segments(3),
        )
        .await
        .unwrap();

    assert_eq!(report.records_scanned, 2, "{report:?}");
    assert_eq!(report.orphan_chunks_deleted, 2, "{report:?}");
    let rows: Vec<(String, String)> = env
        .scan_all(env.manager.transactions_table())
        .await
        .iter()
        .map(|i| {
            (
                i["_TxId"].as_s().unwrap().clone(),
                i["_TxN"].as_n().unwrap().clone(),
            )
        })
        .filter(|(_, r)| r != "0")
        .collect();
    assert_eq!(rows, vec![(pending.to_string(), "7".to_string())]);
    assert_eq!(report.images_scanned, 4, "{report:?}");
    assert_eq!(report.orphan_images_deleted, 2, "{report:?}");
    let mut left: Vec<String> = env
        .scan_all(&images)
        .await
        .iter()
        .map(|i| i["_TxI"].as_s().unwrap().clone())
        .collect();
    left.sort_by_key(|i| i != &kept_image);
    assert_eq!(left.len(), 2, "{left:?}");
    assert_eq!(left[0], kept_image);
    assert!(left[1].starts_with(pending.as_str()), "{left:?}");

    assert_eq!(report.orphan_locks_released, 2, "{report:?}");
    assert_eq!(report.stale_locks_completed, 1, "{report:?}");
    let mut orphans = report.applied_orphans.clone();
    orphans.sort_by_key(|o| o.image_id.is_some());
    assert_eq!(orphans.len(), 2, "{report:?}");
    assert!(orphans.iter().all(|o| o.owner == gone));
    assert_eq!(orphans[0].key, key("applied"));
    assert_eq!(orphans[0].image_id, None);
    assert_eq!(orphans[1].key, key("applied2"));
    assert_eq!(orphans[1].image_id.as_deref(), Some(kept_image.as_str()));
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!(report.pending_left, 1);

    assert_eq!(
        bal(&env, "held").await,
        Some(item(&[("Id", s("held")), ("v", s("keep me"))]))
    );
    assert_eq!(bal(&env, "placeholder").await, None);
    assert_eq!(bal(&env, "applied").await, Some(applied));
    assert_eq!(bal(&env, "applied2").await, Some(applied2));
    assert_eq!(
        bal(&env, "late").await,
        Some(item(&[("Id", s("late")), ("v", s("x"))]))
    );
    // The pending transaction keeps its lock.
    assert_eq!(
        bal(&env, "pending").await.unwrap()["_TxId"],
        s(pending.as_str())
    );
}

/// With `LockedReads::LockThenRecord`, a read's lock the record never named outlives the
/// transaction's rollback by another coordinator; a sweep of the items releases it once the record
/// is finalized (completing the owner alone would leave the lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_releases_read_locks_a_finalized_record_never_named() {
    let env = TestEnv::with_settings("sweep-unnamed", |s| {
        s.locked_reads = dynamodb_transactions::LockedReads::LockThenRecord;
        s.rollback_on_drop = false;
    })
    .await;
    for k in ["a", "b"] {
        env.raw_put(&env.table, item(&[("Id", s(k)), ("v", s("x"))]))
            .await;
    }
    let tx = env.manager.begin();
    let id = tx.id().clone();
    for k in ["a", "b"] {
        tx.get_item()
            .table_name(&env.table)
            .key("Id", s(k))
            .send()
            .await
            .unwrap();
    }
    tx.abandon();
    let (m2, _) = env.second_coordinator();
    m2.rollback_transaction(&id).await.unwrap();
    assert_eq!(env.tx_state(&id).await, Some((TxState::RolledBack, true)));
    let b = env.raw_get(&env.table, &key("b")).await.unwrap();
    assert_eq!(b["_TxId"], s(id.as_str()), "b's lock is not named: {b:?}");
    assert!(!has_tx_attrs(
        &env.raw_get(&env.table, &key("a")).await.unwrap()
    ));

    let report = env
        .manager
        .sweep(&SweepOptions::new().tables_to_scan([env.table.clone()]))
        .await
        .unwrap();
    assert_eq!(report.errors.len(), 0, "{report:?}");
    assert_eq!(report.stale_locks_completed, 1, "{report:?}");
    assert_eq!(
        env.raw_get(&env.table, &key("b")).await.unwrap(),
        item(&[("Id", s("b")), ("v", s("x"))])
    );
}

/// The bound on a lock its record does not name, with default settings: a coordinator whose
/// second read's append never landed (while the read's lock did) dies. Its record is pending and
/// names only the first read. One sweep pass that scans the items' table, once the record has
/// been still for `rollback_after`, rolls the transaction back, releases the named lock with the
/// rollback and the unnamed one as the lock of a finalized transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_sweep_pass_clears_the_unnamed_read_lock_of_a_crashed_coordinator() {
    let env = TestEnv::with_settings("sweep-crashed-read", |s| {
        s.rollback_on_drop = false;
    })
    .await;
    for k in ["a", "b"] {
        env.raw_put(&env.table, item(&[("Id", s(k)), ("v", s("x"))]))
            .await;
    }
    let tx = env.manager.begin();
    let id = tx.id().clone();
    tx.get_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .send()
        .await
        .unwrap();
    // The second read sends the record's append, then its lock: the append fails before it is
    // sent, the lock lands, and the coordinator dies.
    env.faults
        .fail_operation_at("UpdateItem", 1, FaultMode::BeforeSend);
    tx.get_item()
        .table_name(&env.table)
        .key("Id", s("b"))
        .send()
        .await
        .unwrap_err();
    tx.abandon();
    assert_eq!(state(&env, &id).await, Some((TxState::Pending, false)));
    let b = env.raw_get(&env.table, &key("b")).await.unwrap();
    assert_eq!(b["_TxId"], s(id.as_str()), "b's lock landed: {b:?}");

    let report = env
        .manager
        .sweep(&SweepOptions::finish_everything_now().tables_to_scan([env.table.clone()]))
        .await
        .unwrap();
    assert_eq!(report.errors.len(), 0, "{report:?}");
    assert_eq!(report.rolled_back, vec![id.clone()], "{report:?}");
    assert_eq!(report.stale_locks_completed, 1, "{report:?}");
    assert_eq!(state(&env, &id).await, Some((TxState::RolledBack, true)));
    for k in ["a", "b"] {
        assert_eq!(
            env.raw_get(&env.table, &key(k)).await.unwrap(),
            item(&[("Id", s(k)), ("v", s("x"))])
        );
    }
}
