//! Transactions: commit paths and phases, roll-forward, rollbacks, contention, the sweeper and
//! dropped handles.

use super::*;

#[tokio::test]
async fn a_commit_counts_its_path_and_times_its_phases() {
    let recorder = DebuggingRecorder::new();
    let snap = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let env = TestEnv::new("mt-commit").await;
    env.raw_put(&env.table, item(&[("Id", s("c")), ("v", n(0))]))
        .await;
    Seen::take(&snap); // forget table creation

    let tx = env.manager.begin();
    for k in ["a", "b", "c"] {
        tx.put_item()
            .table_name(&env.table)
            .set_item(Some(item(&[("Id", s(k)), ("v", n(1))])))
            .send()
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();

    let seen = Seen::take(&snap);
    seen.assert_well_named();
    assert_eq!(
        seen.counter("dynamodb_tx_commits_total", &[("path", "one_request")]),
        1
    );
    assert_eq!(seen.counter("dynamodb_tx_commits_total", &[]), 1);
    assert_eq!(seen.counter("dynamodb_tx_rollbacks_total", &[]), 0);
    assert_eq!(seen.counter("dynamodb_tx_commit_errors_total", &[]), 0);
    // The puts assume creates: the batch met c existing and went again with c locked as such.
    assert_eq!(
        seen.counter(
            "dynamodb_tx_retries_total",
            &[("kind", "lock_batch_absent")]
        ),
        1
    );
    assert_eq!(
        seen.counter(
            "dynamodb_tx_retries_total",
            &[("kind", "lock_batch_fallback")]
        ),
        0
    );
    // (A one-request commit unlocks the items in its own request: no separate settle phase.)
    for phase in ["record", "lock", "commit"] {
        assert!(
            seen.samples("dynamodb_tx_phase_seconds", &[("phase", phase)]) >= 1,
            "no {phase} sample"
        );
    }

    // The write-only fast path is counted as such.
    let fast = TestEnv::with_settings("mt-fast", |s| s.write_only_fast_path = true).await;
    Seen::take(&snap);
    let tx = fast.manager.begin();
    tx.put_item()
        .table_name(&fast.table)
        .set_item(Some(item(&[("Id", s("f")), ("v", n(1))])))
        .send()
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let seen = Seen::take(&snap);
    assert_eq!(
        seen.counter("dynamodb_tx_commits_total", &[("path", "fast_path")]),
        1
    );
    assert_eq!(seen.counter("dynamodb_tx_commits_total", &[]), 1);
}

#[tokio::test]
async fn a_phased_commit_counts_the_writes_it_rolls_forward() {
    let recorder = DebuggingRecorder::new();
    let snap = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let env = TestEnv::with_settings("mt-roll", |s| {
        s.one_shot_max_items = 1;
        s.judge_conditions = false;
    })
    .await;
    for k in ["a", "b"] {
        env.raw_put(&env.table, item(&[("Id", s(k)), ("v", n(1))]))
            .await;
    }
    Seen::take(&snap);
    let tx = env.manager.begin();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .update_expression("SET v = v + :one")
        .expression_attribute_values(":one", n(1))
        .send()
        .await
        .unwrap();
    // A condition only DynamoDB judges (`judge_conditions` off): applied before the commit.
    tx.put_item()
        .table_name(&env.table)
        .set_item(Some(item(&[("Id", s("b")), ("v", n(5))])))
        .condition_expression("v = :one")
        .expression_attribute_values(":one", n(1))
        .send()
        .await
        .unwrap();
    tx.delete_item()
        .table_name(&env.table)
        .key("Id", s("c"))
        .send()
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let seen = Seen::take(&snap);
    seen.assert_well_named();
    assert_eq!(
        seen.counter("dynamodb_tx_commits_total", &[("path", "phased")]),
        1
    );
    assert_eq!(
        seen.counter("dynamodb_tx_rolled_forward_writes_total", &[]),
        2
    );
    assert_eq!(
        env.raw_get(&env.table, &key("a")).await,
        Some(item(&[("Id", s("a")), ("v", n(2))]))
    );
    assert_eq!(
        env.raw_get(&env.table, &key("b")).await,
        Some(item(&[("Id", s("b")), ("v", n(5))]))
    );
}

#[tokio::test]
async fn a_false_condition_counts_a_rollback_and_a_commit_error() {
    let recorder = DebuggingRecorder::new();
    let snap = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let env = TestEnv::new("mt-cond").await;
    Seen::take(&snap);

    let tx = env.manager.begin();
    tx.put_item()
        .table_name(&env.table)
        .set_item(Some(item(&[("Id", s("c")), ("v", n(1))])))
        .condition_expression("attribute_exists(Id)")
        .send()
        .await
        .unwrap();
    let err = tx.commit().await.unwrap_err();
    assert!(matches!(err, Error::ConditionFailed { .. }), "{err:?}");
    assert_eq!(env.raw_get(&env.table, &key("c")).await, None);

    let seen = Seen::take(&snap);
    seen.assert_well_named();
    assert_eq!(
        seen.counter(
            "dynamodb_tx_rollbacks_total",
            &[("cause", "condition_failed")]
        ),
        1
    );
    assert_eq!(seen.counter("dynamodb_tx_rollbacks_total", &[]), 1);
    assert_eq!(
        seen.counter(
            "dynamodb_tx_commit_errors_total",
            &[("kind", "condition_failed")]
        ),
        1
    );
    assert_eq!(seen.counter("dynamodb_tx_commits_total", &[]), 0);

    // An explicit rollback is counted as requested.
    let tx = env.manager.begin();
    tx.get_item()
        .table_name(&env.table)
        .key("Id", s("c"))
        .send()
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let seen = Seen::take(&snap);
    assert_eq!(
        seen.counter("dynamodb_tx_rollbacks_total", &[("cause", "requested")]),
        1
    );
    assert_eq!(seen.counter("dynamodb_tx_rollbacks_total", &[]), 1);
}

#[tokio::test]
async fn a_wound_and_a_wait_are_counted() {
    let recorder = DebuggingRecorder::new();
    let snap = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let env = TestEnv::with_settings("mt-wound", |s| {
        s.contention = ContentionPolicy::RollBackOthers
    })
    .await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    Seen::take(&snap);

    let holder = env.manager.begin();
    holder
        .get_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .send()
        .await
        .unwrap();
    let other = env.manager.begin();
    other
        .get_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .send()
        .await
        .unwrap();
    let err = holder.commit().await.unwrap_err();
    assert!(err.is_rolled_back(), "{err:?}");
    other.commit().await.unwrap();

    let seen = Seen::take(&snap);
    seen.assert_well_named();
    assert_eq!(seen.counter("dynamodb_tx_contention_wounds_total", &[]), 1);
    assert_eq!(seen.counter("dynamodb_tx_contention_waits_total", &[]), 0);
    // The wound is the holder's rollback.
    assert_eq!(
        seen.counter("dynamodb_tx_rollbacks_total", &[("cause", "wounded")]),
        1
    );
    assert_eq!(
        seen.counter(
            "dynamodb_tx_commit_errors_total",
            &[("kind", "rolled_back")]
        ),
        1
    );
    assert_eq!(seen.counter("dynamodb_tx_commits_total", &[]), 1);

    // Ordered contention: a younger transaction meeting an older one's lock waits.
    let ordered = TestEnv::with_settings("mt-wait", |s| {
        s.contention = ContentionPolicy::Ordered {
            dead_after: Duration::from_secs(30),
            ticket_at_begin: true,
        };
        s.lock_wait = Duration::from_millis(300);
    })
    .await;
    ordered
        .raw_put(&ordered.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    Seen::take(&snap);
    let old = ordered.manager.begin();
    old.get_item()
        .table_name(&ordered.table)
        .key("Id", s("k"))
        .send()
        .await
        .unwrap();
    let young = ordered.manager.begin();
    young
        .put_item()
        .table_name(&ordered.table)
        .set_item(Some(item(&[("Id", s("y")), ("v", n(1))])))
        .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
        .send()
        .await
        .unwrap();
    let err = young
        .get_item()
        .table_name(&ordered.table)
        .key("Id", s("k"))
        .send()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ItemLocked { .. }), "{err:?}");
    young.rollback().await.unwrap();
    old.commit().await.unwrap();
    let seen = Seen::take(&snap);
    assert!(seen.counter("dynamodb_tx_contention_waits_total", &[]) >= 1);
    assert_eq!(seen.counter("dynamodb_tx_contention_wounds_total", &[]), 0);
}

#[tokio::test]
async fn a_sweep_counts_its_actions() {
    let recorder = DebuggingRecorder::new();
    let snap = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let env = TestEnv::new("mt-sweep").await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;

    // A transaction left pending (its handle dropped; the test env does not roll back on drop).
    let tx = env.manager.begin();
    tx.get_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .send()
        .await
        .unwrap();
    drop(tx);
    Seen::take(&snap);

    let report = env
        .manager
        .sweep(&SweepOptions::new().rollback_after(Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(report.rolled_back.len(), 1, "{report:?}");

    let seen = Seen::take(&snap);
    seen.assert_well_named();
    assert_eq!(
        seen.counter(
            "dynamodb_tx_sweeper_actions_total",
            &[("action", "rolled_back")]
        ),
        1
    );
    assert_eq!(
        seen.counter("dynamodb_tx_rollbacks_total", &[("cause", "sweeper")]),
        1
    );
    assert_eq!(seen.counter("dynamodb_tx_rollbacks_total", &[]), 1);

    // A dry run counts nothing.
    env.manager
        .sweep(&SweepOptions::finish_everything_now().dry_run(true))
        .await
        .unwrap();
    assert_eq!(
        Seen::take(&snap).counter("dynamodb_tx_sweeper_actions_total", &[]),
        0
    );
}

#[tokio::test]
async fn a_dropped_handle_is_counted_and_rolled_back_in_the_background() {
    let recorder = DebuggingRecorder::new();
    let snap = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let env = TestEnv::with_settings("mt-drop", |s| s.rollback_on_drop = true).await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    Seen::take(&snap);

    let tx = env.manager.begin();
    tx.get_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .send()
        .await
        .unwrap();
    drop(tx);
    // The background rollback runs on this (current-thread) runtime: wait for the item's lock to go.
    let mut waited = 0;
    while has_tx_attrs(&env.raw_get(&env.table, &key("k")).await.unwrap()) {
        waited += 1;
        assert!(waited < 200, "the dropped handle was never rolled back");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let seen = Seen::take(&snap);
    assert_eq!(seen.counter("dynamodb_tx_dropped_handles_total", &[]), 1);
    assert_eq!(
        seen.counter("dynamodb_tx_rollbacks_total", &[("cause", "requested")]),
        1
    );
}
