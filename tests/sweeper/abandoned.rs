//! Transactions abandoned in every state end as they should; recent ones are left to their
//! coordinators unless the "finish everything now" preset is asked for.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_transactions_in_every_state_end_as_they_should() {
    let env = TestEnv::with_settings("sweep-states", |s| {
        s.one_shot_max_items = 0;
        // Writes applied before the commit (rolled forward, they would be applied after it).
        s.roll_forward = false;
    })
    .await;
    warm(&env.manager, &env.table).await;

    // Pending and idle: rolled back, the item restored from its image.
    let idle = abandoned_pending(&env, "idle").await;
    age_record(&env, &idle, HOUR_MS).await;

    // Pending and fresh: left alone, still locked and applied.
    let fresh = abandoned_pending(&env, "fresh").await;

    // Committed, not finalized: the phased commit died after the flip, before unlocking.
    // Requests: record PutItem, lock UpdateItem, apply TransactWriteItems, flip UpdateItem, unlock.
    let tx = begin_plus_ten(&env, "committed").await;
    let committed = tx.id().clone();
    env.faults.crash_at(5, FaultMode::BeforeSend);
    let _ = tx.commit().await;
    assert!(env.faults.struck());
    env.faults.disarm();
    assert_eq!(
        state(&env, &committed).await,
        Some((TxState::Committed, false))
    );
    assert!(has_tx_attrs(&bal(&env, "committed").await.unwrap()));
    age_record(&env, &committed, HOUR_MS).await;

    // Rolled back, not finalized: the rollback died after the decision.
    let tx_rb = {
        env.raw_put(&env.table, item(&[("Id", s("rolled")), ("bal", n(100))]))
            .await;
        let tx = env.manager.begin();
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s("rolled"))
            .update_expression("SET bal = bal + :x")
            .expression_attribute_values(":x", n(10))
            .return_values(ReturnValue::AllNew)
            .send()
            .await
            .unwrap();
        tx
    };
    let rolled = tx_rb.id().clone();
    env.faults.crash_at(2, FaultMode::BeforeSend);
    assert!(tx_rb.rollback().await.is_err());
    env.faults.disarm();
    assert_eq!(
        state(&env, &rolled).await,
        Some((TxState::RolledBack, false))
    );
    assert_eq!(bal(&env, "rolled").await.unwrap()["bal"], n(110));
    age_record(&env, &rolled, HOUR_MS).await;

    // Finalized and old: deleted. Finalized and recent: kept.
    let mut finished = Vec::new();
    for name in ["old", "recent"] {
        let tx = env.manager.begin();
        finished.push(tx.id().clone());
        tx.put_item()
            .table_name(&env.table)
            .item("Id", s(name))
            .item("bal", n(1))
            .send()
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    let (old, recent) = (finished[0].clone(), finished[1].clone());
    age_record(&env, &old, 2 * 24 * HOUR_MS).await;

    let report = env
        .manager
        .sweep(
            &SweepOptions::new()
                .rollback_after(Duration::from_secs(600))
                .delete_after(Some(Duration::from_secs(86_400))),
        )
        .await
        .unwrap();

    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.records_scanned, 6, "{report:?}");
    assert_eq!(report.rolled_back, vec![idle.clone()]);
    let completed: HashSet<_> = report.completed.iter().cloned().collect();
    assert_eq!(
        completed,
        HashSet::from([committed.clone(), rolled.clone()])
    );
    assert_eq!(report.deleted, 1);
    assert_eq!(report.pending_left, 1);
    assert_eq!(report.finalized_kept, 1);

    assert_eq!(state(&env, &idle).await, Some((TxState::RolledBack, true)));
    assert_eq!(bal(&env, "idle").await, plain("idle", 100));

    assert_eq!(state(&env, &fresh).await, Some((TxState::Pending, false)));
    let f = bal(&env, "fresh").await.unwrap();
    assert_eq!(f["_TxId"], s(fresh.as_str()));
    assert_eq!(f["bal"], n(110));

    assert_eq!(
        state(&env, &committed).await,
        Some((TxState::Committed, true))
    );
    assert_eq!(bal(&env, "committed").await, plain("committed", 110));

    assert_eq!(
        state(&env, &rolled).await,
        Some((TxState::RolledBack, true))
    );
    assert_eq!(bal(&env, "rolled").await, plain("rolled", 100));

    assert_eq!(state(&env, &old).await, None);
    assert_eq!(state(&env, &recent).await, Some((TxState::Committed, true)));
    assert_eq!(bal(&env, "old").await, plain("old", 1));

    // A second sweep finds nothing more to do.
    let again = env
        .manager
        .sweep(
            &SweepOptions::new()
                .rollback_after(Duration::from_secs(600))
                .delete_after(Some(Duration::from_secs(86_400))),
        )
        .await
        .unwrap();
    assert_eq!(again.actions(), 0, "{again:?}");
    assert_eq!(again.pending_left, 1);

    // With rollback_after = 0 every pending transaction counts as idle.
    let now = env
        .manager
        .sweep(&SweepOptions::new().rollback_after(Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(now.rolled_back, vec![fresh.clone()]);
    assert_eq!(bal(&env, "fresh").await, plain("fresh", 100));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recent_decided_transactions_are_left_to_their_coordinator() {
    let env = TestEnv::new("sweep-recent").await;
    let tx = env.manager.begin();
    env.raw_put(&env.table, item(&[("Id", s("r")), ("bal", n(100))]))
        .await;
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("r"))
        .update_expression("SET bal = bal + :x")
        .expression_attribute_values(":x", n(10))
        .return_values(ReturnValue::AllNew)
        .send()
        .await
        .unwrap();
    let id = tx.id().clone();
    warm(&env.manager, &env.table).await;
    env.faults.crash_at(2, FaultMode::BeforeSend);
    assert!(tx.rollback().await.is_err());
    env.faults.disarm();
    assert_eq!(state(&env, &id).await, Some((TxState::RolledBack, false)));

    let report = env.manager.sweep(&SweepOptions::new()).await.unwrap();
    assert_eq!(report.decided_left, 1, "{report:?}");
    assert!(report.completed.is_empty());
    assert_eq!(state(&env, &id).await, Some((TxState::RolledBack, false)));

    let report = env
        .manager
        .sweep(&SweepOptions::new().complete_after(Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(report.completed, vec![id.clone()]);
    assert_eq!(state(&env, &id).await, Some((TxState::RolledBack, true)));
    assert_eq!(bal(&env, "r").await, plain("r", 100));
}

/// The preset: a fresh pending transaction is rolled back and a fresh decided one completed, which
/// the defaults leave to their coordinators; finalized records stay unless deletion is asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finish_everything_now_settles_fresh_transactions() {
    let env = TestEnv::new("sweep-now").await;
    let pending = abandoned_pending(&env, "p").await;
    // Rolled back, not finalized: the rollback died after its decision.
    env.raw_put(&env.table, item(&[("Id", s("d")), ("bal", n(100))]))
        .await;
    let tx = env.manager.begin();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("d"))
        .update_expression("SET bal = bal + :x")
        .expression_attribute_values(":x", n(10))
        .return_values(ReturnValue::AllNew)
        .send()
        .await
        .unwrap();
    let decided = tx.id().clone();
    warm(&env.manager, &env.table).await;
    env.faults.crash_at(2, FaultMode::BeforeSend);
    assert!(tx.rollback().await.is_err());
    env.faults.disarm();
    assert_eq!(
        state(&env, &decided).await,
        Some((TxState::RolledBack, false))
    );

    let report = env.manager.sweep(&SweepOptions::new()).await.unwrap();
    assert_eq!(
        (report.pending_left, report.decided_left),
        (1, 1),
        "{report:?}"
    );

    let report = env
        .manager
        .sweep(&SweepOptions::finish_everything_now())
        .await
        .unwrap();
    assert_eq!(report.rolled_back, vec![pending.clone()], "{report:?}");
    assert_eq!(report.completed, vec![decided.clone()]);
    assert_eq!((report.pending_left, report.decided_left), (0, 0));
    assert_eq!(report.deleted, 0);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(
        state(&env, &pending).await,
        Some((TxState::RolledBack, true))
    );
    assert_eq!(
        state(&env, &decided).await,
        Some((TxState::RolledBack, true))
    );
    assert_eq!(bal(&env, "p").await, plain("p", 100));
    assert_eq!(bal(&env, "d").await, plain("d", 100));

    let report = env
        .manager
        .sweep(&SweepOptions::finish_everything_now().delete_after(Some(Duration::ZERO)))
        .await
        .unwrap();
    assert_eq!(report.deleted, 2, "{report:?}");
    assert_eq!(state(&env, &pending).await, None);
    assert_eq!(state(&env, &decided).await, None);
}
