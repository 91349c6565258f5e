//! Rollback racing a slow coordinator, and locks a rollback must release or leave (the rest of
//! Java 34-46): an image never saved, a rollback while another coordinator is about to apply, an orphaned
//! applied lock, a read lock's upgrade attempt.

use super::*;

/// Java: saving the image fails after the lock. Embedded images are written with the apply, so the
/// nearest state is item0 locked but not applied (the commit crashes before it applies).
async fn unlock_in_rollback_if_no_item_image_saved(phased: bool) {
    let fx = fixture_with("jp-noimage", phased).await;
    let k0 = key("item0");
    let item0a = with(&fx.item0, &[("attr1", s("original1"))]);
    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    put(&t1, &fx.table, &item0a).send().await.unwrap();
    // Record, lock of the existing item0 (two: a put assumes a create, the placeholder fails), then the TransactWriteItems.
    let at = RECORD + put_lock_requests(false) + 1;
    expect_err(crashing(&fx, at, BeforeSend, "TransactWriteItems", t1.commit()).await);
    assert_locked(&fx, &fx.table, &k0, Some(&fx.item0), &id, false, false).await;
    assert_no_image(&fx, &fx.table, &k0).await;
    second(&fx).rollback_transaction(&id).await.unwrap();
    assert_not_locked(&fx, &fx.table, &k0, Some(&fx.item0)).await;
    assert_images_empty(&fx).await;
}
both_paths!(unlock_in_rollback_if_no_item_image_saved);

/// The one case with a separate image: a > 64 KB item. The commit crashes after saving the image
/// and before applying; the rollback restores the item and, with `no_orphan`, must leave no image
/// behind.
async fn unlock_in_rollback_if_no_item_image_saved_images_table(no_orphan: bool) {
    let fx = fixture_with("jp-noimagebig", true).await;
    let k0 = key("item0");
    let big0 = make_item0_big(&fx).await;
    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    put(&t1, &fx.table, &with(&big0, &[("attr1", s("original1"))]))
        .send()
        .await
        .unwrap();
    // Record (1), lock (2 and 3: a put assumes a create, and item0 exists), image PutItem (4),
    // apply (5).
    let at = RECORD + put_lock_requests(false) + 1 + 1;
    expect_err(crashing(&fx, at, BeforeSend, "TransactWriteItems", t1.commit()).await);
    assert_locked(&fx, &fx.table, &k0, Some(&big0), &id, false, false).await;
    assert_eq!(fx.scan_all(fx.manager.images_table()).await.len(), 1);
    second(&fx).rollback_transaction(&id).await.unwrap();
    assert_not_locked(&fx, &fx.table, &k0, Some(&big0)).await;
    assert_state(&fx, &id, TxState::RolledBack, true).await;
    if no_orphan {
        assert_images_empty(&fx).await;
    }
}
mod unlock_in_rollback_if_no_item_image_saved_images_table {
    use super::unlock_in_rollback_if_no_item_image_saved_images_table as run;
    #[tokio::test]
    async fn restores_item() {
        run(false).await
    }
    #[tokio::test]
    async fn leaves_no_image() {
        run(true).await
    }
}

/// Java: t1's lock blocks while t2 rolls the transaction back (and, with `deleted`, deletes it); then
/// t1 goes on and must not apply. Here t1's commit records the put and crashes before locking; a
/// handle resumed before the rollback plays the slow coordinator. With `strict`, also checks the slow
/// coordinator leaves no lock behind.
async fn should_not_apply_after_rollback(phased: bool, deleted: bool, strict: bool) {
    let fx = fixture_with("jp-noapplyrb", phased).await;
    let k1 = key("item1");
    let item1 = item(&[("Id", s("item1")), ("attr1", s("original1"))]);
    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    put(&t1, &fx.table, &item1).send().await.unwrap();
    // Record (1), the first lock request (2).
    expect_err(crashing(&fx, 2, BeforeSend, "UpdateItem", t1.commit()).await);
    assert_not_locked(&fx, &fx.table, &k1, None).await;
    let slow = fx.manager.resume(&id).await.unwrap();

    let m2 = second(&fx);
    m2.rollback_transaction(&id).await.unwrap();
    assert_not_locked(&fx, &fx.table, &k1, None).await;
    if deleted {
        assert!(m2.delete_transaction(&id).await.unwrap());
    }
    let e = slow.commit().await.unwrap_err();
    if deleted {
        assert!(
            matches!(
                e,
                Error::UnknownOutcome { .. } | Error::TransactionNotFound { .. }
            ),
            "{e:?}"
        );
    } else {
        assert!(is_rolled_back(&e), "{e:?}");
    }
    let raw = fx.raw_get(&fx.table, &k1).await;
    assert!(
        raw.as_ref().is_none_or(|r| !r.contains_key("attr1")),
        "the put must not be applied: {raw:?}"
    );
    if strict {
        assert_not_locked(&fx, &fx.table, &k1, None).await;
    }
    if !deleted {
        assert!(fx.manager.delete_transaction(&id).await.unwrap());
    }

    // A new transaction on item1 completes.
    let item1a = item(&[("Id", s("item1")), ("attr1", s("new"))]);
    let t3 = fx.manager.begin();
    put(&t3, &fx.table, &item1a)
        .return_values(AllOld)
        .send()
        .await
        .unwrap();
    assert_locked(&fx, &fx.table, &k1, None, t3.id(), true, false).await;
    t3.commit().await.unwrap();
    assert_not_locked(&fx, &fx.table, &k1, Some(&item1a)).await;
}

mod should_not_apply_after_rollback {
    use super::should_not_apply_after_rollback as run;
    #[tokio::test]
    async fn one_shot() {
        run(false, false, false).await
    }
    #[tokio::test]
    async fn phased() {
        run(true, false, false).await
    }
    #[tokio::test]
    async fn leaves_no_lock() {
        run(false, false, true).await
    }
    #[tokio::test]
    async fn phased_leaves_no_lock() {
        run(true, false, true).await
    }
}

mod should_not_apply_after_rollback_and_deleted {
    use super::should_not_apply_after_rollback as run;
    #[tokio::test]
    async fn one_shot() {
        run(false, true, false).await
    }
    #[tokio::test]
    async fn phased() {
        run(true, true, false).await
    }
    #[tokio::test]
    async fn leaves_no_lock() {
        run(false, true, true).await
    }
    #[tokio::test]
    async fn phased_leaves_no_lock() {
        run(true, true, true).await
    }
}

/// Deletes every row of a TX record behind the library's back.
async fn raw_delete_record(fx: &Fx, id: &TxId) {
    for r in fx.record_rows(id).await {
        fx.client
            .delete_item()
            .table_name(fx.manager.transactions_table())
            .key("_TxId", r["_TxId"].clone())
            .key("_TxN", r["_TxN"].clone())
            .send()
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn should_not_apply_after_rollback_and_deleted_and_left_locked() {
    // Items left locked (not applied) by a transaction whose record is gone: new transactions steal
    // the locks. Built directly: t1 locks, then its record is deleted behind the library's back.
    let fx = fixture("jp-leftlocked").await;
    let k1 = key("item1");
    let k0 = key("item0");
    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    put(
        &t1,
        &fx.table,
        &item(&[("Id", s("item1")), ("attr1", s("original1"))]),
    )
    .return_values(AllOld)
    .send()
    .await
    .unwrap();
    delete(&t1, &fx.table, "item0")
        .return_values(AllOld)
        .send()
        .await
        .unwrap();
    t1.abandon();
    raw_delete_record(&fx, &id).await;
    let raw = fx.raw_get(&fx.table, &k1).await.unwrap();
    assert_eq!(raw.get("_TxId"), Some(&s(id.as_str())));
    assert_transient_flag(&raw, true);
    assert_eq!(
        fx.raw_get(&fx.table, &k0).await.unwrap().get("_TxId"),
        Some(&s(id.as_str()))
    );

    let item1a = item(&[("Id", s("item1")), ("attr1", s("new"))]);
    let t3 = fx.manager.begin();
    put(&t3, &fx.table, &item1a)
        .return_values(AllOld)
        .send()
        .await
        .unwrap();
    assert_locked(&fx, &fx.table, &k1, None, t3.id(), true, false).await;
    set_asdf(&t3, &fx.table, "item0", "t3")
        .send()
        .await
        .unwrap();
    t3.commit().await.unwrap();
    assert_not_locked(&fx, &fx.table, &k1, Some(&item1a)).await;
    assert_not_locked(
        &fx,
        &fx.table,
        &k0,
        Some(&with(&fx.item0, &[("asdf", s("t3"))])),
    )
    .await;
}

#[tokio::test]
async fn orphaned_applied_lock_is_not_stolen() {
    // Pitfall: an applied lock whose record is gone cannot be judged; it is reported, not broken.
    let fx = fixture("jp-orphanapplied").await;
    let k0 = key("item0");
    let item0a = with(&fx.item0, &[("asdf", s("t1"))]);
    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    set_asdf(&t1, &fx.table, "item0", "t1")
        .return_values(AllNew)
        .send()
        .await
        .unwrap();
    t1.abandon();
    raw_delete_record(&fx, &id).await;
    let t3 = fx.manager.begin();
    let e = set_asdf(&t3, &fx.table, "item0", "t3")
        .return_values(AllOld)
        .send()
        .await
        .unwrap_err();
    match &e {
        Error::ItemLocked { owner, key, .. } => {
            assert_eq!(owner, &id);
            assert_eq!(key, &k0);
        }
        other => panic!("expected ItemLocked, got {other:?}"),
    }
    let raw = fx.raw_get(&fx.table, &k0).await.unwrap();
    assert_eq!(user_attrs(&raw), item0a);
    assert_eq!(raw.get("_TxId"), Some(&s(id.as_str())));
}

#[tokio::test]
async fn rollback_after_read_lock_upgrade_attempt() {
    // Java pauses t2 after it loaded t1's record (holding a version with only the read); here that
    // stale roll-backer is a handle resumed at that point. Its rollback must use the record's
    // current requests (the version condition) and undo t1's upgrade to an applied update.
    let fx = fixture("jp-upgrade").await;
    let k1 = key("item1");
    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    assert_eq!(
        get(&t1, &fx.table, "item1").send().await.unwrap().item,
        None
    );
    assert_locked(&fx, &fx.table, &k1, Some(&k1), &id, true, false).await;
    let m2 = second(&fx);
    let stale = m2.resume(&id).await.unwrap();

    set_asdf(&t1, &fx.table, "item1", "wef")
        .return_values(AllNew)
        .send()
        .await
        .unwrap();
    assert_locked(&fx, &fx.table, &k1, Some(&item1()), &id, true, true).await;

    stale.rollback().await.unwrap();
    assert_state(&fx, &id, TxState::RolledBack, true).await;
    assert_not_locked(&fx, &fx.table, &k1, None).await;
    let t2 = m2.begin();
    assert_eq!(
        get(&t2, &fx.table, "item1").send().await.unwrap().item,
        None
    );
    t2.commit().await.unwrap();
    let e = get(&t1, &fx.table, "item2").send().await.unwrap_err();
    assert!(is_rolled_back(&e), "{e:?}");
    assert_not_locked(&fx, &fx.table, &k1, None).await;
    assert_not_locked(&fx, &fx.table, &key("item2"), None).await;
}
