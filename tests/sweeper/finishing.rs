//! Finishing leaves nothing behind, and finishing twice is harmless.

use super::*;

/// Runs `f` on a fresh runtime with a fresh coordinator over `env`'s tables (for hooks).
fn on_other_coordinator<T>(
    tx_table: &str,
    image_table: &str,
    f: impl AsyncFnOnce(TransactionManager) -> T,
) -> T {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let m = TransactionManager::builder(client())
        .transactions_table(tx_table)
        .images_table(image_table)
        .configure(|s| {
            s.rollback_on_drop = false;
            s.write_only_fast_path = false;
        })
        .build();
    rt.block_on(f(m))
}

/// A coordinator over `env`'s tables whose client carries `hook`.
fn coordinator_with(env: &TestEnv, hook: &RunBefore) -> TransactionManager {
    TransactionManager::builder(client_with(vec![shared(hook.clone())]))
        .transactions_table(env.manager.transactions_table())
        .images_table(env.manager.images_table())
        .configure(|s| {
            s.rollback_on_drop = false;
            s.write_only_fast_path = false;
        })
        .build()
}

/// Rows of a transaction in the transactions table (header and chunks).
async fn record_rows(env: &TestEnv, id: &TxId) -> Vec<String> {
    env.record_rows(id)
        .await
        .iter()
        .map(|i| i["_TxN"].as_n().unwrap().clone())
        .collect()
}

/// Finding 5: two completers of a rolled-back transaction whose before-image is in the images
/// table. The slower one read the item (locked, applied, image in the table) before the faster
/// one restored it and deleted the image: it must see that someone else settled the item and
/// succeed, not fail with "before-image missing".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_completers_with_an_images_table_image_both_succeed() {
    let env = TestEnv::new("sweep-race-img").await;
    warm(&env.manager, &env.table).await;
    let big = "x".repeat(70 * 1024);
    let original = item(&[("Id", s("big")), ("bal", n(100)), ("blob", s(&big))]);
    env.raw_put(&env.table, original.clone()).await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("big"))
        .update_expression("SET bal = bal + :x")
        .expression_attribute_values(":x", n(10))
        .return_values(ReturnValue::AllNew)
        .send()
        .await
        .unwrap();
    let raw = bal(&env, "big").await.unwrap();
    assert!(raw.contains_key("_TxI"), "the image is in the images table");
    assert_eq!(env.scan_all(env.manager.images_table()).await.len(), 1);
    // Rolled back, not completed: the rollback died right after its decision.
    env.faults.crash_at(2, FaultMode::BeforeSend);
    assert!(tx.rollback().await.is_err());
    env.faults.disarm();
    assert_eq!(state(&env, &id).await, Some((TxState::RolledBack, false)));

    // The slower completer is held just before it loads the image; meanwhile the faster one
    // completes everything (restores the item, deletes the image, finalizes).
    let (txt, imgt) = (
        env.manager.transactions_table().to_string(),
        env.manager.images_table().to_string(),
    );
    let first = std::sync::Arc::new(std::sync::Mutex::new(None));
    let first_out = first.clone();
    let hook_id = id.clone();
    let hook = RunBefore::new("GetItem", env.manager.images_table(), move || {
        let r = on_other_coordinator(&txt, &imgt, async move |m| {
            m.complete_transaction(&hook_id).await
        });
        *first_out.lock().unwrap() = Some(r);
    });
    let slower = coordinator_with(&env, &hook);
    let r = slower.complete_transaction(&id).await;
    assert!(hook.ran(), "the race was staged");
    let first = first.lock().unwrap().take().unwrap();
    assert!(
        matches!(first, Ok(TxState::RolledBack)),
        "faster: {first:?}"
    );
    assert!(matches!(r, Ok(TxState::RolledBack)), "slower: {r:?}");
    assert_eq!(bal(&env, "big").await, Some(original));
    assert!(env.scan_all(env.manager.images_table()).await.is_empty());
    assert_eq!(state(&env, &id).await, Some((TxState::RolledBack, true)));
}

/// Finding 8: the sweeper judged version v idle; just before its decision a live coordinator
/// appends (v+1). The sweeper must not decide a version it never judged idle: the transaction
/// stays pending and its coordinator commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweeper_decides_only_the_version_it_judged_idle() {
    let env = TestEnv::new("sweep-judged").await;
    warm(&env.manager, &env.table).await;
    env.raw_put(&env.table, item(&[("Id", s("a")), ("bal", n(100))]))
        .await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .update_expression("SET bal = bal + :x")
        .expression_attribute_values(":x", n(10))
        .return_values(ReturnValue::AllNew)
        .send()
        .await
        .unwrap();
    age_record(&env, &id, HOUR_MS).await;

    // When the sweeper's decision (an UpdateItem setting the state) is about to be sent, another
    // coordinator of the transaction appends a request (version 2) and locks its item.
    let (txt, imgt, table) = (
        env.manager.transactions_table().to_string(),
        env.manager.images_table().to_string(),
        env.table.clone(),
    );
    let appended = std::sync::Arc::new(std::sync::Mutex::new(None));
    let appended_out = appended.clone();
    let hook_id = id.clone();
    let hook = RunBefore::new("UpdateItem", ":_TxTo", move || {
        let r = on_other_coordinator(&txt, &imgt, async move |m| {
            let live = m.resume(&hook_id).await?;
            live.put_item()
                .table_name(&table)
                .item("Id", s("b"))
                .item("v", s("new"))
                .return_values(ReturnValue::AllOld)
                .send()
                .await?;
            live.abandon();
            Ok::<_, dynamodb_transactions::Error>(())
        });
        *appended_out.lock().unwrap() = Some(r);
    });
    let sweeper = coordinator_with(&env, &hook);
    let report = sweeper
        .sweep(&SweepOptions::new().rollback_after(Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(hook.ran(), "the race was staged");
    appended.lock().unwrap().take().unwrap().unwrap();
    assert!(report.rolled_back.is_empty(), "{report:?}");
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!(state(&env, &id).await, Some((TxState::Pending, false)));

    tx.commit().await.unwrap();
    assert_eq!(state(&env, &id).await, Some((TxState::Committed, true)));
    assert_eq!(bal(&env, "a").await, plain("a", 110));
    assert_eq!(
        bal(&env, "b").await,
        Some(item(&[("Id", s("b")), ("v", s("new"))]))
    );
}

/// Finding 10(a): a phased commit whose unlock answer is lost (the unlock landed) still finishes:
/// `commit` returning Ok means the record is finalized and no item keeps a lock attribute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn phased_commit_with_a_lost_unlock_answer_still_finishes() {
    let env = TestEnv::with_settings("sweep-lost-unlock", |s| s.one_shot_max_items = 0).await;
    warm(&env.manager, &env.table).await;
    let tx = begin_plus_ten(&env, "a").await;
    let id = tx.id().clone();
    // Requests: record PutItem, lock UpdateItem, apply TransactWriteItems, flip UpdateItem,
    // unlock UpdateItem (its answer is lost), finalize.
    env.faults.fail_once_at(5, FaultMode::AfterSend);
    tx.commit().await.unwrap();
    assert!(env.faults.struck());
    assert_eq!(state(&env, &id).await, Some((TxState::Committed, true)));
    let a = bal(&env, "a").await.unwrap();
    assert!(!has_tx_attrs(&a), "{a:?}");
    assert_eq!(Some(a), plain("a", 110));
}

/// Finding 10(d): a crash between the deletes of a record's rows must not leave a record that
/// `resume` cannot load; calling delete again, or a sweep, removes whatever is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupted_record_delete_leaves_nothing_a_sweep_misses() {
    let env = TestEnv::with_settings("sweep-del-crash", |s| s.one_shot_max_items = 0).await;
    warm(&env.manager, &env.table).await;
    // Two 200 KB puts: too much for the header, each request goes to a chunk row.
    let tx = env.manager.begin();
    let id = tx.id().clone();
    for k in ["c1", "c2"] {
        tx.put_item()
            .table_name(&env.table)
            .item("Id", s(k))
            .item("blob", s(&"y".repeat(200 * 1024)))
            .send()
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    assert_eq!(state(&env, &id).await, Some((TxState::Committed, true)));
    assert_eq!(
        record_rows(&env, &id).await.len(),
        3,
        "header and two chunk rows"
    );

    // Requests of a delete: read the header, then the two deletes. Crash between them.
    env.faults.crash_at(3, FaultMode::BeforeSend);
    assert!(env.manager.delete_transaction(&id).await.is_err());
    env.faults.disarm();
    match env.manager.resume(&id).await {
        Ok(_) | Err(dynamodb_transactions::Error::TransactionNotFound { .. }) => {}
        Err(e) => panic!("resume after an interrupted delete: {e}"),
    }
    env.manager.describe_transaction(&id).await.unwrap();
    // What the crash left (a request row without its header), the next sweep removes.
    let report = env.manager.sweep(&SweepOptions::new()).await.unwrap();
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!(report.orphan_chunks_deleted, 2, "{report:?}");
    assert!(record_rows(&env, &id).await.is_empty());
    assert!(env.manager.delete_transaction(&id).await.unwrap());
    let report = env
        .manager
        .sweep(&SweepOptions::new().delete_after(Some(Duration::ZERO)))
        .await
        .unwrap();
    assert!(report.errors.is_empty(), "{report:?}");
    assert!(record_rows(&env, &id).await.is_empty());
}

/// Finding 10(e): finalizing again (completing a finished transaction) leaves the finalize time
/// `_TxD` and the TTL `_TxE` alone, so a repeated completion never pushes deletion back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizing_again_does_not_push_deletion_back() {
    let env = TestEnv::with_settings("sweep-refinal", |s| {
        s.one_shot_max_items = 0;
        s.record_ttl = Some(Duration::from_secs(3600));
    })
    .await;
    warm(&env.manager, &env.table).await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s("f"))
        .send()
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let header = || async {
        let h = env
            .raw_get(
                env.manager.transactions_table(),
                &item(&[("_TxId", s(id.as_str())), ("_TxN", n(0))]),
            )
            .await
            .unwrap();
        (h["_TxF"].clone(), h["_TxD"].clone(), h["_TxE"].clone())
    };
    let before = header().await;
    // Let the clock move past a second, so that a rewrite would show in `_TxE` (seconds) too.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(
        env.manager.complete_transaction(&id).await.unwrap(),
        TxState::Committed
    );
    let again = env.manager.resume(&id).await.unwrap();
    again.commit().await.unwrap();
    assert_eq!(header().await, before);
}
