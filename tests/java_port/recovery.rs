//! Multi-coordinator drive and crash recovery (Java 34-46; the rollback races are in rollback_races.rs)

use super::*;

/// Java: a coordinator whose unlocks fail after the commit point. Phased: the commit crashes at its
/// unlock, after the flip (so it reports success). One-shot: the single committing request is applied
/// but its response is lost. Either way another coordinator finishes, and the first one's retry is a
/// no-op. `placeholder`: the read-locked item is missing (as in Java), else it is item0.
async fn drive_commit(phased: bool, placeholder: bool) {
    let fx = fixture_with("jp-drivecommit", phased).await;
    let read_id = if placeholder { "item2" } else { "item0" };
    let (k1, k2) = (key("item1"), key(read_id));
    let read_before = if placeholder {
        None
    } else {
        Some(fx.item0.clone())
    };
    let read_shown = read_before.clone().unwrap_or_else(|| k2.clone());
    let original = item(&[("Id", s("item1")), ("attr", s("original"))]);
    let t1 = fx.manager.begin();
    put(&t1, &fx.table, &original).send().await.unwrap();
    t1.commit().await.unwrap();
    assert_not_locked(&fx, &fx.table, &k1, Some(&original)).await;
    assert_not_locked(&fx, &fx.table, &k2, read_before.as_ref()).await;

    let new = with(&original, &[("attr2", s("new"))]);
    let t2 = fx.manager.begin();
    let id = t2.id().clone();
    put(&t2, &fx.table, &new).send().await.unwrap();
    let got = get(&t2, &fx.table, read_id).send().await.unwrap().item;
    assert_eq!(got, read_before);
    assert_locked(
        &fx,
        &fx.table,
        &k2,
        Some(&read_shown),
        &id,
        placeholder,
        false,
    )
    .await;
    if phased {
        // The read recorded both requests. Lock item1 (1 and 2: a put assumes a create, and
        // item1 exists), apply (3), flip (4), unlock both (5). Committed but not finished: commit
        // says so.
        let r = crashing(
            &fx,
            put_lock_requests(false) + 3,
            BeforeSend,
            "TransactWriteItems",
            t2.commit(),
        )
        .await;
        assert!(matches!(r, Err(Error::AlreadyCommitted { .. })), "{r:?}");
        assert_state(&fx, &id, TxState::Committed, false).await;
        assert_locked(&fx, &fx.table, &k1, Some(&new), &id, false, true).await;
        assert_image(&fx, &fx.table, &k1, &original).await;
        assert_locked(
            &fx,
            &fx.table,
            &k2,
            Some(&read_shown),
            &id,
            placeholder,
            false,
        )
        .await;
    } else {
        // The read recorded both requests. Lock item1 (1 and 2: a put assumes a create, and item1
        // exists), the committing TransactWriteItems (3).
        let e = expect_err(
            crashing(
                &fx,
                put_lock_requests(false) + 1,
                AfterSend,
                "TransactWriteItems",
                t2.commit(),
            )
            .await,
        );
        assert!(e.is_undetermined() || e.is_retryable(), "{e:?}");
        assert_state(&fx, &id, TxState::Committed, true).await;
    }
    let m2 = second(&fx);
    m2.resume(&id).await.unwrap().commit().await.unwrap();
    assert_not_locked(&fx, &fx.table, &k1, Some(&new)).await;
    assert_not_locked(&fx, &fx.table, &k2, read_before.as_ref()).await;
    assert_state(&fx, &id, TxState::Committed, true).await;
    // The first coordinator, back: committing again is a no-op.
    fx.manager
        .resume(&id)
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
    assert_not_locked(&fx, &fx.table, &k1, Some(&new)).await;
    assert!(fx.manager.delete_transaction(&id).await.unwrap());
    assert_tx_deleted(&fx, &id).await;
}
mod drive_commit {
    use super::drive_commit as run;
    #[tokio::test]
    async fn one_shot() {
        run(false, true).await
    }
    #[tokio::test]
    async fn phased() {
        run(true, true).await
    }
    #[tokio::test]
    async fn phased_existing_items() {
        run(true, false).await
    }
}

/// Java's failing rollbackItemAndReleaseLock = a rollback that crashes after the record's flip, at
/// the request that settles the items. item1's write is an applied AllNew update. `placeholder`:
/// also read-lock the missing item3, as Java does.
async fn drive_rollback(placeholder: bool) {
    let fx = fixture("jp-driverb").await;
    let (k1, k2, k3) = (key("item1"), key("item2"), key("item3"));
    let item1 = item(&[
        ("Id", s("item1")),
        ("attr1", s("original1")),
        ("attr2", s("original2")),
    ]);
    let item2 = item(&[("Id", s("item2"))]);
    let t1 = fx.manager.begin();
    put(&t1, &fx.table, &item1).send().await.unwrap();
    put(&t1, &fx.table, &item2).send().await.unwrap();
    t1.commit().await.unwrap();
    assert_not_locked(&fx, &fx.table, &k1, Some(&item1)).await;
    assert_not_locked(&fx, &fx.table, &k2, Some(&item2)).await;

    let item1a = with(&item1, &[("attr1", s("new1")), ("attr2", s("new1"))]);
    let t2 = fx.manager.begin();
    let id = t2.id().clone();
    update(&t2, &fx.table, "item1")
        .update_expression("SET attr1 = :n, attr2 = :n")
        .expression_attribute_values(":n", s("new1"))
        .return_values(AllNew)
        .send()
        .await
        .unwrap();
    get(&t2, &fx.table, "item2").send().await.unwrap();
    if placeholder {
        get(&t2, &fx.table, "item3").send().await.unwrap();
    }
    let check_locked = async || {
        assert_locked(&fx, &fx.table, &k1, Some(&item1a), &id, false, true).await;
        assert_image(&fx, &fx.table, &k1, &item1).await;
        assert_locked(&fx, &fx.table, &k2, Some(&item2), &id, false, false).await;
        if placeholder {
            assert_locked(&fx, &fx.table, &k3, Some(&k3), &id, true, false).await;
        }
    };
    check_locked().await;
    // Rollback: flip (1), read the items (2), settle them (3), finalize (4).
    expect_err(crashing(&fx, 3, BeforeSend, "TransactWriteItems", t2.rollback()).await);
    assert_state(&fx, &id, TxState::RolledBack, false).await;
    check_locked().await;

    second(&fx).rollback_transaction(&id).await.unwrap();
    assert_not_locked(&fx, &fx.table, &k1, Some(&item1)).await;
    assert_not_locked(&fx, &fx.table, &k2, Some(&item2)).await;
    assert_not_locked(&fx, &fx.table, &k3, None).await;
    assert_state(&fx, &id, TxState::RolledBack, true).await;
    // The first coordinator, back: rolling back again succeeds.
    fx.manager.rollback_transaction(&id).await.unwrap();
    assert!(fx.manager.delete_transaction(&id).await.unwrap());
    assert_tx_deleted(&fx, &id).await;
}

mod drive_rollback {
    #[tokio::test]
    async fn with_placeholder() {
        super::drive_rollback(true).await
    }
    #[tokio::test]
    async fn existing_items() {
        super::drive_rollback(false).await
    }
}

#[tokio::test]
async fn rollback_completed_transaction() {
    // Java checks doRollback is not called once finalized: a resumed handle's rollback makes no write.
    // Uses item0 (an existing item) so that it does not depend on transient placeholders.
    let fx = fixture("jp-rbcompleted").await;
    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    set_asdf(&t1, &fx.table, "item0", "wef")
        .return_values(AllNew)
        .send()
        .await
        .unwrap();
    let stale = fx.manager.resume(&id).await.unwrap();
    t1.rollback().await.unwrap();
    assert_not_locked(&fx, &fx.table, &key("item0"), Some(&fx.item0)).await;
    stale.rollback().await.unwrap();
    let t2 = fx.manager.resume(&id).await.unwrap();
    fx.counter.reset();
    t2.rollback().await.unwrap();
    assert_eq!(writes_made(&fx), 0, "{:?}", fx.counter.snapshot());
    assert_not_locked(&fx, &fx.table, &key("item0"), Some(&fx.item0)).await;
    assert_state(&fx, &id, TxState::RolledBack, true).await;
}

#[tokio::test]
async fn commit_completed_transaction() {
    // Java checks doCommit is not called once finalized: a resumed handle's commit makes no write.
    let fx = fixture("jp-cmcompleted").await;
    let item1 = with(&fx.item0, &[("asdf", s("wef"))]);
    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    set_asdf(&t1, &fx.table, "item0", "wef")
        .return_values(AllNew)
        .send()
        .await
        .unwrap();
    t1.commit().await.unwrap();
    let t2 = fx.manager.resume(&id).await.unwrap();
    fx.counter.reset();
    t2.commit().await.unwrap();
    assert_eq!(writes_made(&fx), 0, "{:?}", fx.counter.snapshot());
    assert_not_locked(&fx, &fx.table, &key("item0"), Some(&item1)).await;
    assert_state(&fx, &id, TxState::Committed, true).await;
}

#[tokio::test]
async fn commit_completed_transaction_stale_handle() {
    // Java's commitFailingTransaction was created before t1 committed: its commit must be a no-op.
    let fx = fixture("jp-cmstale").await;
    let item1 = with(&fx.item0, &[("asdf", s("wef"))]);
    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    set_asdf(&t1, &fx.table, "item0", "wef")
        .return_values(AllNew)
        .send()
        .await
        .unwrap();
    let stale = fx.manager.resume(&id).await.unwrap();
    t1.commit().await.unwrap();
    stale.commit().await.unwrap();
    assert_not_locked(&fx, &fx.table, &key("item0"), Some(&item1)).await;
    let t3 = fx.manager.begin();
    set_asdf(&t3, &fx.table, "item0", "t3")
        .send()
        .await
        .unwrap();
    t3.commit().await.unwrap();
    assert_not_locked(
        &fx,
        &fx.table,
        &key("item0"),
        Some(&with(&fx.item0, &[("asdf", s("t3"))])),
    )
    .await;
}

#[tokio::test]
async fn resume_pending_transaction() {
    // t1's put uses AllOld so that it is recorded and locked (applied at commit).
    let fx = fixture("jp-resumepending").await;
    let (k1, k2) = (key("item1"), key("item2"));
    let item1 = item(&[("Id", s("item1")), ("attr1", s("original1"))]);
    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    put(&t1, &fx.table, &item1)
        .return_values(AllOld)
        .send()
        .await
        .unwrap();
    assert_locked(&fx, &fx.table, &k1, Some(&k1), &id, true, false).await;
    assert_no_image(&fx, &fx.table, &k1).await;

    let m2 = second(&fx);
    let t2 = m2.resume(&id).await.unwrap();
    assert_eq!(
        get(&t2, &fx.table, "item2").send().await.unwrap().item,
        None
    );
    assert_locked(&fx, &fx.table, &k1, Some(&k1), &id, true, false).await;
    assert_locked(&fx, &fx.table, &k2, Some(&k2), &id, true, false).await;
    assert_no_image(&fx, &fx.table, &k2).await;
    t1.abandon();
    t2.commit().await.unwrap();
    assert_not_locked(&fx, &fx.table, &k1, Some(&item1)).await;
    assert_not_locked(&fx, &fx.table, &k2, None).await;
    assert_images_empty(&fx).await;
    assert!(m2.delete_transaction(&id).await.unwrap());
    assert_tx_deleted(&fx, &id).await;

    // Buffered writes alone leave no record: nothing to resume.
    let t3 = fx.manager.begin();
    let id3 = t3.id().clone();
    put(&t3, &fx.table, &item1).send().await.unwrap();
    t3.abandon();
    assert_tx_deleted(&fx, &id3).await;
}

/// Java: t1's apply fails, leaving item1 locked, transient and unapplied; t2 resumes and read-locks
/// item2 (Java's re-drive applies item1 then; here reads do not re-drive, so item1 stays unapplied);
/// t3 resumes and commits. Here t1's commit crashes just before its final `TransactWriteItems`.
async fn resume_and_commit_after_transient_apply_failure(phased: bool) {
    let fx = fixture_with("jp-resumecommit", phased).await;
    let (k1, k2) = (key("item1"), key("item2"));
    let item1 = item(&[("Id", s("item1")), ("attr1", s("original1"))]);
    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    put(&t1, &fx.table, &item1).send().await.unwrap();
    // Record, lock of the absent item1 (one: a put assumes a create), then the TransactWriteItems.
    let at = RECORD + put_lock_requests(true) + 1;
    expect_err(crashing(&fx, at, BeforeSend, "TransactWriteItems", t1.commit()).await);
    assert_locked(&fx, &fx.table, &k1, Some(&k1), &id, true, false).await;
    assert_no_image(&fx, &fx.table, &k1).await;

    let m2 = second(&fx);
    let t2 = m2.resume(&id).await.unwrap();
    assert_eq!(
        get(&t2, &fx.table, "item2").send().await.unwrap().item,
        None
    );
    assert_locked(&fx, &fx.table, &k1, Some(&k1), &id, true, false).await;
    assert_locked(&fx, &fx.table, &k2, Some(&k2), &id, true, false).await;
    t2.abandon();

    let t3 = m2.resume(&id).await.unwrap();
    t3.commit().await.unwrap();
    assert_not_locked(&fx, &fx.table, &k1, Some(&item1)).await;
    assert_not_locked(&fx, &fx.table, &k2, None).await;
    assert_images_empty(&fx).await;
    assert_state(&fx, &id, TxState::Committed, true).await;
    m2.resume(&id).await.unwrap().commit().await.unwrap();
    assert_not_locked(&fx, &fx.table, &k1, Some(&item1)).await;
    assert!(m2.delete_transaction(&id).await.unwrap());
    assert_tx_deleted(&fx, &id).await;
}
mod resume_and_commit_after_transient_apply_failure {
    #[tokio::test]
    async fn one_shot() {
        super::resume_and_commit_after_transient_apply_failure(false).await
    }
    #[tokio::test]
    async fn phased() {
        super::resume_and_commit_after_transient_apply_failure(true).await
    }
}

/// Java: the apply of `ADD attr1 1` reaches the item but t1 fails afterwards; a resumed coordinator
/// must not apply it again. Here the request that applies it loses its response (`AfterSend`).
async fn apply_only_once(phased: bool) {
    let fx = fixture_with("jp-applyonce", phased).await;
    let (k1, k2) = (key("item1"), key("item2"));
    let item1 = item(&[("Id", s("item1")), ("attr1", n(1))]);
    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    update(&t1, &fx.table, "item1")
        .update_expression("ADD attr1 :one")
        .expression_attribute_values(":one", n(1))
        .send()
        .await
        .unwrap();
    // Record, lock of the absent item1 (two requests), then the TransactWriteItems that applies
    // (phased) or commits (one-shot).
    let at = RECORD + lock_requests(true) + 1;
    expect_err(crashing(&fx, at, AfterSend, "TransactWriteItems", t1.commit()).await);
    let m2 = second(&fx);
    if phased {
        assert_locked(&fx, &fx.table, &k1, Some(&item1), &id, true, true).await;
        let t2 = m2.resume(&id).await.unwrap();
        assert_eq!(
            get(&t2, &fx.table, "item2").send().await.unwrap().item,
            None
        );
        assert_locked(&fx, &fx.table, &k1, Some(&item1), &id, true, true).await;
        assert_locked(&fx, &fx.table, &k2, Some(&k2), &id, true, false).await;
        t2.commit().await.unwrap();
    } else {
        assert_state(&fx, &id, TxState::Committed, true).await;
        m2.resume(&id).await.unwrap().commit().await.unwrap();
    }
    assert_not_locked(&fx, &fx.table, &k1, Some(&item1)).await;
    assert_not_locked(&fx, &fx.table, &k2, None).await;
    assert_images_empty(&fx).await;
    assert!(m2.delete_transaction(&id).await.unwrap());
    assert_tx_deleted(&fx, &id).await;
}
both_paths!(apply_only_once);

#[tokio::test]
async fn apply_only_once_all_new() {
    // The AllNew update applies at once; its UpdateItem reaches the item but the response is lost.
    let fx = fixture("jp-applyoncenew").await;
    let k1 = key("item1");
    let item1 = item(&[("Id", s("item1")), ("attr1", n(1))]);
    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    let send = update(&t1, &fx.table, "item1")
        .update_expression("ADD attr1 :one")
        .expression_attribute_values(":one", n(1))
        .return_values(AllNew)
        .send();
    // Record, lock of the absent item1 (two requests), read the record header, apply UpdateItem.
    let at = RECORD + lock_requests(true) + 1 + 1;
    expect_err(crashing(&fx, at, AfterSend, "UpdateItem", send).await);
    assert_locked(&fx, &fx.table, &k1, Some(&item1), &id, true, true).await;
    t1.abandon();
    second(&fx)
        .resume(&id)
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
    assert_not_locked(&fx, &fx.table, &k1, Some(&item1)).await;
}

/// As `resume_and_commit_after_transient_apply_failure`, but t3 rolls back.
async fn resume_rollback_after_transient_apply_failure(phased: bool) {
    let fx = fixture_with("jp-resumerb", phased).await;
    let (k1, k2) = (key("item1"), key("item2"));
    let item1 = item(&[("Id", s("item1")), ("attr1", s("original1"))]);
    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    put(&t1, &fx.table, &item1).send().await.unwrap();
    // Record, lock of the absent item1 (one: a put assumes a create), then the TransactWriteItems.
    let at = RECORD + put_lock_requests(true) + 1;
    expect_err(crashing(&fx, at, BeforeSend, "TransactWriteItems", t1.commit()).await);
    assert_locked(&fx, &fx.table, &k1, Some(&k1), &id, true, false).await;

    let m2 = second(&fx);
    let t2 = m2.resume(&id).await.unwrap();
    assert_eq!(
        get(&t2, &fx.table, "item2").send().await.unwrap().item,
        None
    );
    assert_locked(&fx, &fx.table, &k2, Some(&k2), &id, true, false).await;
    t2.abandon();

    let t3 = m2.resume(&id).await.unwrap();
    t3.rollback().await.unwrap();
    assert_not_locked(&fx, &fx.table, &k1, None).await;
    assert_not_locked(&fx, &fx.table, &k2, None).await;
    assert_images_empty(&fx).await;
    assert!(m2.delete_transaction(&id).await.unwrap());
    assert_tx_deleted(&fx, &id).await;
}
mod resume_rollback_after_transient_apply_failure {
    #[tokio::test]
    async fn one_shot() {
        super::resume_rollback_after_transient_apply_failure(false).await
    }
    #[tokio::test]
    async fn phased() {
        super::resume_rollback_after_transient_apply_failure(true).await
    }
}
