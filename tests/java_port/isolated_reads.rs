//! Isolated reads outside transactions (Java 13-20)

use super::*;

/// Commits `tx` on the phased path (the fixture must be phased) but crashes right before the record's
/// flip to committed: every write is applied and the items stay locked, the record pending.
/// `locks` is how many requests the commit's locks take (see `lock_requests` and `put_lock_requests`; the transaction must
/// not have a record yet, and its items must fit one apply batch).
async fn commit_crashing_before_flip(fx: &Fx, tx: Transaction, locks: u64) -> TxId {
    assert!(fx.phased);
    let id = tx.id().clone();
    // Record PutItem, the locks, the apply TransactWriteItems, then the flip UpdateItem.
    let at = RECORD + locks + 1 + 1;
    expect_err(crashing(fx, at, BeforeSend, "UpdateItem", tx.commit()).await);
    assert_state(fx, &id, TxState::Pending, false).await;
    id
}

#[tokio::test]
async fn get_item_uncommitted_insert() {
    // Java's put applies at once; here a phased commit crashed before its flip leaves it applied.
    let fx = fixture_with("jp-uncins", true).await;
    let k1 = key("item1");
    let item1 = item1();
    let t1 = fx.manager.begin();
    put(&t1, &fx.table, &item1).send().await.unwrap();
    let id = commit_crashing_before_flip(&fx, t1, put_lock_requests(true)).await;
    let raw = assert_locked(&fx, &fx.table, &k1, Some(&item1), &id, true, true).await;
    let got = read(&fx.manager, &fx.table, "item1", IsolationLevel::Uncommitted).await;
    assert_eq!(got.as_ref(), Some(&item1));
    assert_eq!(fx.raw_get(&fx.table, &k1).await.as_ref(), Some(&raw));

    second(&fx).rollback_transaction(&id).await.unwrap();
    assert_not_locked(&fx, &fx.table, &k1, None).await;
}

#[tokio::test]
async fn get_item_uncommitted_deleted() {
    // The delete uses AllOld to lock the item now.
    let fx = fixture("jp-uncdel").await;
    let k0 = key("item0");
    let t1 = fx.manager.begin();
    delete(&t1, &fx.table, "item0")
        .return_values(AllOld)
        .send()
        .await
        .unwrap();
    assert_locked(&fx, &fx.table, &k0, Some(&fx.item0), t1.id(), false, false).await;
    let got = read(&fx.manager, &fx.table, "item0", IsolationLevel::Uncommitted).await;
    assert_eq!(got.as_ref(), Some(&fx.item0));
    assert_locked(&fx, &fx.table, &k0, Some(&fx.item0), t1.id(), false, false).await;
    t1.rollback().await.unwrap();
    assert_not_locked(&fx, &fx.table, &k0, Some(&fx.item0)).await;
}

#[tokio::test]
async fn get_item_committed_insert() {
    // The insert is applied by a phased commit crashed before its flip.
    let fx = fixture_with("jp-comins", true).await;
    let k1 = key("item1");
    let item1 = item1();
    let t1 = fx.manager.begin();
    put(&t1, &fx.table, &item1).send().await.unwrap();
    let id = commit_crashing_before_flip(&fx, t1, put_lock_requests(true)).await;
    assert_locked(&fx, &fx.table, &k1, Some(&item1), &id, true, true).await;
    assert_eq!(
        read(&fx.manager, &fx.table, "item1", IsolationLevel::Committed).await,
        None
    );
    assert_locked(&fx, &fx.table, &k1, Some(&item1), &id, true, true).await;
    second(&fx).rollback_transaction(&id).await.unwrap();
    assert_not_locked(&fx, &fx.table, &k1, None).await;
}

#[tokio::test]
async fn get_item_committed_deleted() {
    // The delete uses AllOld to lock the item now.
    let fx = fixture("jp-comdel").await;
    let k0 = key("item0");
    let t1 = fx.manager.begin();
    delete(&t1, &fx.table, "item0")
        .return_values(AllOld)
        .send()
        .await
        .unwrap();
    assert_locked(&fx, &fx.table, &k0, Some(&fx.item0), t1.id(), false, false).await;
    let got = read(&fx.manager, &fx.table, "item0", IsolationLevel::Committed).await;
    assert_eq!(got.as_ref(), Some(&fx.item0));
    assert_locked(&fx, &fx.table, &k0, Some(&fx.item0), t1.id(), false, false).await;
    t1.rollback().await.unwrap();
    assert_not_locked(&fx, &fx.table, &k0, Some(&fx.item0)).await;
}

#[tokio::test]
async fn get_item_committed_updated() {
    // The update uses AllNew so it is applied now (embedding item0 as its image).
    let fx = fixture("jp-comupd").await;
    let k0 = key("item0");
    let item1 = with(&fx.item0, &[("asdf", s("asdf"))]);
    let t1 = fx.manager.begin();
    set_asdf(&t1, &fx.table, "item0", "asdf")
        .return_values(AllNew)
        .send()
        .await
        .unwrap();
    assert_locked(&fx, &fx.table, &k0, Some(&item1), t1.id(), false, true).await;
    assert_image(&fx, &fx.table, &k0, &fx.item0).await;
    let got = read(&fx.manager, &fx.table, "item0", IsolationLevel::Committed).await;
    assert_eq!(got.as_ref(), Some(&fx.item0));
    assert_locked(&fx, &fx.table, &k0, Some(&item1), t1.id(), false, true).await;
    t1.commit().await.unwrap();
    let got = read(&fx.manager, &fx.table, "item0", IsolationLevel::Committed).await;
    assert_eq!(got.as_ref(), Some(&item1));
    assert_not_locked(&fx, &fx.table, &k0, Some(&item1)).await;
}

#[tokio::test]
async fn get_item_committed_updated_and_applied() {
    // Java's no-op doCommit = a phased commit that crashes at its unlock, after the flip.
    let fx = fixture_with("jp-comupdapp", true).await;
    let k0 = key("item0");
    let item1 = with(&fx.item0, &[("asdf", s("asdf"))]);
    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    set_asdf(&t1, &fx.table, "item0", "asdf")
        .send()
        .await
        .unwrap();
    // Record (1), lock (2), apply (3), flip (4), unlock (5). Committed but not finished: commit
    // says so (never Ok while locks are left).
    let r = crashing(&fx, 5, BeforeSend, "UpdateItem", t1.commit()).await;
    assert!(matches!(r, Err(Error::AlreadyCommitted { .. })), "{r:?}");
    assert_state(&fx, &id, TxState::Committed, false).await;
    assert_locked(&fx, &fx.table, &k0, Some(&item1), &id, false, true).await;
    let got = read(&fx.manager, &fx.table, "item0", IsolationLevel::Committed).await;
    assert_eq!(got.as_ref(), Some(&item1));
    assert_locked(&fx, &fx.table, &k0, Some(&item1), &id, false, true).await;
    assert_eq!(
        second(&fx).complete_transaction(&id).await.unwrap(),
        TxState::Committed
    );
    assert_not_locked(&fx, &fx.table, &k0, Some(&item1)).await;
    assert_state(&fx, &id, TxState::Committed, true).await;
}

async fn delete_all_images(fx: &Fx) -> usize {
    let rows = fx.scan_all(fx.manager.images_table()).await;
    for r in &rows {
        fx.client
            .delete_item()
            .table_name(fx.manager.images_table())
            .key("_TxI", r["_TxI"].clone())
            .send()
            .await
            .unwrap();
    }
    rows.len()
}

#[tokio::test]
async fn get_item_committed_missing_image() {
    // Images live in the item; only a > 64 KB image goes to the images table, and that one is
    // deleted behind the library's back. The read gives up with ReadContention.
    let fx = fixture("jp-commissimg").await;
    let k0 = key("item0");
    let big0 = make_item0_big(&fx).await;
    let big1 = with(&big0, &[("asdf", s("asdf"))]);
    let t1 = fx.manager.begin();
    set_asdf(&t1, &fx.table, "item0", "asdf")
        .return_values(AllNew)
        .send()
        .await
        .unwrap();
    let raw = assert_locked(&fx, &fx.table, &k0, Some(&big1), t1.id(), false, true).await;
    assert!(
        raw.contains_key("_TxI") && !raw.contains_key("_TxG"),
        "{:?}",
        raw.keys()
    );
    let got = read(&fx.manager, &fx.table, "item0", IsolationLevel::Committed).await;
    assert_eq!(got.as_ref(), Some(&big0));
    assert_eq!(delete_all_images(&fx).await, 1);
    let e = fx
        .manager
        .get_item()
        .table_name(&fx.table)
        .key("Id", s("item0"))
        .isolation(IsolationLevel::Committed)
        .send()
        .await
        .unwrap_err();
    assert!(matches!(e, Error::ReadContention { .. }), "{e:?}");
    t1.abandon();
}

#[tokio::test]
async fn get_item_committed_concurrent_commit() {
    // Java stubs a stale pending record and a missing image. Nearest: the transaction committed
    // (phased commit crashed at its unlock) and its images-table image is gone already; a committed
    // read must not chase the image and returns the current item.
    let fx = fixture_with("jp-comconc", true).await;
    let k0 = key("item0");
    let big0 = make_item0_big(&fx).await;
    let big1 = with(&big0, &[("asdf", s("asdf"))]);
    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    set_asdf(&t1, &fx.table, "item0", "asdf")
        .send()
        .await
        .unwrap();
    // Record (1), lock (2), image PutItem (3), apply (4), flip (5), unlock (6). Committed but not
    // finished: commit says so.
    let r = crashing(&fx, 6, BeforeSend, "UpdateItem", t1.commit()).await;
    assert!(matches!(r, Err(Error::AlreadyCommitted { .. })), "{r:?}");
    assert_state(&fx, &id, TxState::Committed, false).await;
    let raw = assert_locked(&fx, &fx.table, &k0, Some(&big1), &id, false, true).await;
    assert!(raw.contains_key("_TxI"), "{:?}", raw.keys());
    assert_eq!(delete_all_images(&fx).await, 1);
    let got = read(&fx.manager, &fx.table, "item0", IsolationLevel::Committed).await;
    assert_eq!(got.as_ref(), Some(&big1));
    second(&fx).complete_transaction(&id).await.unwrap();
    assert_not_locked(&fx, &fx.table, &k0, Some(&big1)).await;
    assert_images_empty(&fx).await;
}
