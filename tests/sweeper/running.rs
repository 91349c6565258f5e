//! How a sweep runs: a dry run writes nothing, and the background sweeper sweeps and stops.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_writes_nothing() {
    let env = TestEnv::new("sweep-dry").await;
    let idle = abandoned_pending(&env, "idle").await;
    let gone = TxId::new_random();
    env.raw_put(
        env.manager.images_table(),
        item(&[("_TxI", s(&format!("{gone}#x")))]),
    )
    .await;
    let before = env.scan_all(&env.table).await;

    let report = env
        .manager
        .sweep(
            &SweepOptions::new()
                .rollback_after(Duration::ZERO)
                .tables_to_scan([env.table.clone()])
                .dry_run(true),
        )
        .await
        .unwrap();
    assert!(report.dry_run);
    assert_eq!(report.rolled_back, vec![idle.clone()]);
    assert_eq!(report.orphan_images_deleted, 1);
    assert_eq!(state(&env, &idle).await, Some((TxState::Pending, false)));
    assert_eq!(env.scan_all(&env.table).await, before);
    assert_eq!(env.scan_all(env.manager.images_table()).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_sweeper_rolls_back_and_stops() {
    let env = TestEnv::new("sweep-bg").await;
    let idle = abandoned_pending(&env, "idle").await;
    let sweeper = env.manager.spawn_sweeper(
        Duration::from_millis(50),
        SweepOptions::new().rollback_after(Duration::ZERO),
    );
    // Wait (bounded) for two passes.
    for _ in 0..400 {
        if sweeper.passes() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(sweeper.passes() >= 2, "the sweeper kept running");
    assert!(sweeper.last_report().is_some());
    let totals = sweeper.stop().await;
    assert_eq!(totals.rolled_back, vec![idle.clone()]);
    assert!(totals.records_scanned >= 2);
    assert_eq!(state(&env, &idle).await, Some((TxState::RolledBack, true)));
    assert_eq!(bal(&env, "idle").await, plain("idle", 100));

    // sweep_every stops when its shutdown future resolves.
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let mut tx = Some(tx);
    let mut passes = 0;
    let totals = env
        .manager
        .sweep_every(
            Duration::from_millis(10),
            &SweepOptions::new(),
            async {
                let _ = rx.await;
            },
            |r| {
                assert!(r.is_ok());
                passes += 1;
                if passes == 3 {
                    let _ = tx.take().unwrap().send(());
                }
            },
        )
        .await;
    assert_eq!(passes, 3);
    assert_eq!(totals.records_scanned, 3);
}
