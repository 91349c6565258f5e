//! Reads of an item in every state a transaction can leave it in, at both levels (the Java
//! library's facade cases and more).

use super::*;

#[tokio::test]
async fn committed_item_is_read_at_both_levels() {
    let env = TestEnv::new("iso-committed").await;
    env.raw_put(&env.table, v1("a")).await;
    assert_reads(&env, UNCOMMITTED, "a", Some(&v1("a"))).await;
    assert_reads(&env, COMMITTED, "a", Some(&v1("a"))).await;
}

#[tokio::test]
async fn pending_insert_is_seen_only_uncommitted() {
    let env = TestEnv::new("iso-insert").await;
    let tx = pending_update(&env, "a").await;
    let inserted = item(&[("Id", s("a")), ("s_someattr", s("val2")), ("n_other", n(2))]);
    assert_reads(&env, UNCOMMITTED, "a", Some(&inserted)).await;
    assert_reads(&env, COMMITTED, "a", None).await;
    tx.rollback().await.unwrap();
    assert_reads(&env, UNCOMMITTED, "a", None).await;
}

#[tokio::test]
async fn lock_placeholder_does_not_exist() {
    let env = TestEnv::new("iso-placeholder").await;
    let tx = env.manager.begin();
    // A read lock on an absent item inserts a placeholder.
    let got = tx
        .get_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .send()
        .await
        .unwrap();
    assert_eq!(got.item, None);
    assert!(
        env.raw_get(&env.table, &key("a")).await.is_some(),
        "placeholder stored"
    );
    assert_reads(&env, UNCOMMITTED, "a", None).await;
    assert_reads(&env, COMMITTED, "a", None).await;
    tx.rollback().await.unwrap();
}

#[tokio::test]
async fn pending_update_is_hidden_at_committed() {
    let env = TestEnv::new("iso-update").await;
    env.raw_put(&env.table, v1("a")).await;
    let tx = pending_update(&env, "a").await;
    assert_reads(&env, UNCOMMITTED, "a", Some(&v2("a"))).await;
    assert_reads(&env, COMMITTED, "a", Some(&v1("a"))).await;
    tx.commit().await.unwrap();
    assert_reads(&env, COMMITTED, "a", Some(&v2("a"))).await;
}

#[tokio::test]
async fn pending_delete_still_shows_the_item() {
    let env = TestEnv::new("iso-delete").await;
    env.raw_put(&env.table, v1("a")).await;
    let tx = env.manager.begin();
    tx.delete_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .return_values(ReturnValue::AllOld)
        .send()
        .await
        .unwrap();
    assert!(has_tx_attrs(
        &env.raw_get(&env.table, &key("a")).await.unwrap()
    ));
    assert_reads(&env, UNCOMMITTED, "a", Some(&v1("a"))).await;
    assert_reads(&env, COMMITTED, "a", Some(&v1("a"))).await;
    tx.commit().await.unwrap();
    assert_reads(&env, COMMITTED, "a", None).await;
}

/// Found by the model check (tests/model/): a phased delete of an item that did not exist marks
/// its placeholder (`_TxT` + `_TxA = "D"`); readers must still see no item, not an item holding only
/// its key.
#[tokio::test]
async fn pending_delete_of_an_absent_item_reads_as_absent() {
    let env = TestEnv::with_settings("iso-del-absent", |s| {
        s.one_shot_max_items = 0;
        // Writes applied before the commit (rolled forward, they would be applied after it).
        s.roll_forward = false;
    })
    .await;
    for k in 1..10 {
        let tx = env.manager.begin();
        let tx_id = tx.id().clone();
        tx.delete_item()
            .table_name(&env.table)
            .key("Id", s("gone"))
            .send()
            .await
            .unwrap();
        // Die before the flip: the delete is marked on the placeholder, the record pending.
        env.faults.crash_at(k, FaultMode::BeforeSend);
        let _ = tx.commit().await;
        env.faults.disarm();
        let raw = env.raw_get(&env.table, &key("gone")).await;
        let marked = raw
            .as_ref()
            .is_some_and(|r| r.get("_TxA") == Some(&s("D")) && r.contains_key("_TxT"));
        let state = env
            .manager
            .transaction_state(&tx_id)
            .await
            .unwrap()
            .map(|s| (s.state, s.finalized));
        if marked && matches!(state, Some((TxState::Pending, _))) {
            assert_reads(&env, UNCOMMITTED, "gone", None).await;
            assert_reads(&env, COMMITTED, "gone", None).await;
            env.manager.rollback_transaction(&tx_id).await.unwrap();
            assert_eq!(env.raw_get(&env.table, &key("gone")).await, None);
            assert_reads(&env, COMMITTED, "gone", None).await;
            return;
        }
        let _ = env.manager.rollback_transaction(&tx_id).await;
    }
    panic!("no request left a marked placeholder of a pending transaction");
}

/// Leaves `id` updated to v2 by a transaction that is committed but has not unlocked its items: the
/// coordinator dies at the first request after the record flipped to committed.
async fn committed_not_unlocked(env: &TestEnv, id: &str) -> TxId {
    for k in 1..20 {
        env.raw_put(&env.table, v1(id)).await;
        let tx = env.manager.begin();
        let tx_id = tx.id().clone();
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s(id))
            .update_expression("SET s_someattr = :s, n_other = :n")
            .expression_attribute_values(":s", s("val2"))
            .expression_attribute_values(":n", n(2))
            .send()
            .await
            .unwrap();
        env.faults.crash_at(k, FaultMode::BeforeSend);
        let res = tx.commit().await;
        env.faults.disarm();
        let state = env
            .manager
            .transaction_state(&tx_id)
            .await
            .unwrap()
            .map(|s| (s.state, s.finalized));
        let raw = env.raw_get(&env.table, &key(id)).await.unwrap();
        // (commit reports AlreadyCommitted once the record is committed but unlocking failed.)
        let _ = res;
        if matches!(state, Some((TxState::Committed, _))) && raw.contains_key("_TxA") {
            return tx_id;
        }
        // Not the step we want: settle whatever is left and try the next request.
        let _ = env.manager.complete_transaction(&tx_id).await;
        let _ = env.manager.rollback_transaction(&tx_id).await;
    }
    panic!("no request left the transaction committed but locked");
}

#[tokio::test]
async fn committed_but_locked_item_is_read_as_stored() {
    let env = TestEnv::with_settings("iso-cnu", |s| {
        s.one_shot_max_items = 0;
        // Writes applied before the commit (rolled forward, they would be applied after it).
        s.roll_forward = false;
    })
    .await;
    let id = committed_not_unlocked(&env, "a").await;
    assert_reads(&env, UNCOMMITTED, "a", Some(&v2("a"))).await;
    assert_reads(&env, COMMITTED, "a", Some(&v2("a"))).await;
    // A committed-but-locked insert is visible too.
    assert_eq!(
        env.manager.complete_transaction(&id).await.unwrap(),
        TxState::Committed
    );
    assert!(!has_tx_attrs(
        &env.raw_get(&env.table, &key("a")).await.unwrap()
    ));
}

#[tokio::test]
async fn missing_image_is_read_contention_at_committed() {
    let env = TestEnv::new("iso-noimage").await;
    let tx = pending_record(&env).await;
    let mut stored = v2("a");
    stored.insert("_TxId".into(), s(tx.id().as_str()));
    stored.insert("_TxA".into(), s("1"));
    stored.insert("_TxD".into(), n(1));
    stored.insert("_TxI".into(), s("no-such-image"));
    env.raw_put(&env.table, stored).await;
    assert_reads(&env, UNCOMMITTED, "a", Some(&v2("a"))).await;
    for projection in [false, true] {
        for got in four_reads(&env, COMMITTED, "a", projection).await {
            assert!(
                matches!(got, Err(Error::ReadContention { ref table, attempts: 4 }) if *table == env.table),
                "{got:?}"
            );
        }
    }
    // Bounded: each attempt reads the item, the owner's record and the image.
    env.counter.reset();
    let got = env
        .manager
        .get_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .send()
        .await;
    assert!(matches!(got, Err(Error::ReadContention { .. })));
    assert_eq!(env.counter.get("GetItem"), 12);
    // An applied item whose owner's record is gone is re-read, then given up on.
    let mut stored = v2("c");
    stored.insert("_TxId".into(), s("no-such-transaction"));
    stored.insert("_TxA".into(), s("1"));
    stored.insert("_TxG".into(), AttributeValue::M(v1("c")));
    env.raw_put(&env.table, stored).await;
    env.counter.reset();
    let got = env
        .manager
        .get_item()
        .table_name(&env.table)
        .key("Id", s("c"))
        .send()
        .await;
    assert!(matches!(got, Err(Error::ReadContention { .. })), "{got:?}");
    assert_eq!(env.counter.get("GetItem"), 8);
    // An applied item without any image breaks an invariant, reported as such.
    let mut stored = v2("b");
    stored.insert("_TxId".into(), s(tx.id().as_str()));
    stored.insert("_TxA".into(), s("1"));
    env.raw_put(&env.table, stored).await;
    let got = env
        .manager
        .get_item()
        .table_name(&env.table)
        .key("Id", s("b"))
        .send()
        .await;
    assert!(matches!(got, Err(Error::Invariant(_))), "{got:?}");
    tx.rollback().await.unwrap();
}

#[tokio::test]
async fn large_item_image_is_read_from_images_table() {
    let env = TestEnv::new("iso-bigimage").await;
    let big = "x".repeat(70_000);
    let mut old = v1("a");
    old.insert("blob".into(), s(&big));
    env.raw_put(&env.table, old.clone()).await;
    let tx = pending_update(&env, "a").await;
    let raw = env.raw_get(&env.table, &key("a")).await.unwrap();
    assert!(
        raw.contains_key("_TxI"),
        "image in the images table: {:?}",
        raw.keys()
    );
    let mut new = v2("a");
    new.insert("blob".into(), s(&big));
    assert_reads(&env, UNCOMMITTED, "a", Some(&new)).await;
    assert_reads(&env, COMMITTED, "a", Some(&old)).await;
    tx.rollback().await.unwrap();
    assert_reads(&env, UNCOMMITTED, "a", Some(&old)).await;
}

#[tokio::test]
async fn rolled_back_but_not_restored_serves_the_image() {
    let env = TestEnv::new("iso-rb").await;
    env.raw_put(&env.table, v1("a")).await;
    let tx = pending_update(&env, "a").await;
    let id = tx.id().clone();
    // The coordinator dies right after flipping the record to rolled back.
    env.faults.crash_at(2, FaultMode::BeforeSend);
    assert!(tx.rollback().await.is_err());
    env.faults.disarm();
    assert_eq!(
        env.manager
            .transaction_state(&id)
            .await
            .unwrap()
            .map(|s| s.state),
        Some(TxState::RolledBack)
    );
    assert!(
        env.raw_get(&env.table, &key("a"))
            .await
            .unwrap()
            .contains_key("_TxA")
    );
    assert_reads(&env, UNCOMMITTED, "a", Some(&v2("a"))).await;
    assert_reads(&env, COMMITTED, "a", Some(&v1("a"))).await;
}
