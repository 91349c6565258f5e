//! Isolation, errors and the state machine (Java 29-33)

use super::*;

#[tokio::test]
async fn conflicting_writes() {
    // t2's write is an AllNew update so it is applied (and must be undone) when t3 takes the item.
    // t2 never met contention, so it has no ticket and the ordered policy rolls it back (Java).
    let fx = fixture("jp-conflict").await;
    let k1 = key("item1");
    let t1_item = item(&[("Id", s("item1")), ("whoami", s("t1"))]);
    let t2_item = item(&[
        ("Id", s("item1")),
        ("whoami", s("t2")),
        ("t2stuff", s("extra")),
    ]);
    let t3_item = item(&[
        ("Id", s("item1")),
        ("whoami", s("t3")),
        ("t3stuff", s("things")),
    ]);
    let t1 = fx.manager.begin();
    let t2 = fx.manager.begin();
    let t3 = fx.manager.begin();
    put(&t1, &fx.table, &t1_item).send().await.unwrap();
    t1.commit().await.unwrap();
    assert_not_locked(&fx, &fx.table, &k1, Some(&t1_item)).await;

    update(&t2, &fx.table, "item1")
        .update_expression("SET whoami = :w, t2stuff = :x")
        .expression_attribute_values(":w", s("t2"))
        .expression_attribute_values(":x", s("extra"))
        .return_values(AllNew)
        .send()
        .await
        .unwrap();
    assert_locked(&fx, &fx.table, &k1, Some(&t2_item), t2.id(), false, true).await;
    assert_image(&fx, &fx.table, &k1, &t1_item).await;

    let out = put(&t3, &fx.table, &t3_item)
        .return_values(AllOld)
        .send()
        .await
        .unwrap();
    assert_eq!(
        out.attributes.as_ref(),
        Some(&t1_item),
        "t2's write was undone"
    );
    assert_locked(&fx, &fx.table, &k1, Some(&t1_item), t3.id(), false, false).await;
    assert_state(&fx, t2.id(), TxState::RolledBack, true).await;
    t3.commit().await.unwrap();
    assert_not_locked(&fx, &fx.table, &k1, Some(&t3_item)).await;

    let e = t2.commit().await.unwrap_err();
    assert!(is_rolled_back(&e), "{e:?}");
    assert_not_locked(&fx, &fx.table, &k1, Some(&t3_item)).await;
}

/// Java leaves the transaction pending with the item locked after a ValidationException; here a
/// request DynamoDB rejects rolls the transaction back with RequestRejected (the update is buffered,
/// so it fails at commit).
async fn fail_validation_in_apply(phased: bool) {
    let fx = fixture_with("jp-failval", phased).await;
    let k1 = key("item1");
    let original = item(&[("Id", s("item1")), ("FooAttribute", s("Bar"))]);
    let t1 = fx.manager.begin();
    put(&t1, &fx.table, &original).send().await.unwrap();
    t1.commit().await.unwrap();
    assert_not_locked(&fx, &fx.table, &k1, Some(&original)).await;

    let t2 = fx.manager.begin();
    let id = t2.id().clone();
    update(&t2, &fx.table, "item1")
        .update_expression("ADD FooAttribute :one")
        .expression_attribute_values(":one", n(1))
        .send()
        .await
        .unwrap();
    // Another write in the same transaction must not take effect either.
    set_asdf(&t2, &fx.table, "item0", "wef")
        .send()
        .await
        .unwrap();
    let e = t2.commit().await.unwrap_err();
    match &e {
        Error::RequestRejected {
            tx_id,
            request_index,
            table,
            message,
        } => {
            assert_eq!(tx_id, &id);
            assert_eq!(*request_index, 0);
            assert_eq!(table, &fx.table);
            assert!(!message.is_empty());
        }
        other => panic!("expected RequestRejected, got {other:?}"),
    }
    assert_not_locked(&fx, &fx.table, &k1, Some(&original)).await;
    assert_not_locked(&fx, &fx.table, &key("item0"), Some(&fx.item0)).await;
    assert_state(&fx, &id, TxState::RolledBack, true).await;
}
mod fail_validation_in_apply {
    #[tokio::test]
    async fn one_shot() {
        super::fail_validation_in_apply(false).await
    }
    #[tokio::test]
    async fn phased() {
        super::fail_validation_in_apply(true).await
    }
}

#[tokio::test]
async fn fail_validation_in_apply_all_new() {
    // With AllNew the update applies at once: the rejection rolls the transaction back immediately.
    let fx = fixture("jp-failvalnew").await;
    let k1 = key("item1");
    let original = item(&[("Id", s("item1")), ("FooAttribute", s("Bar"))]);
    fx.raw_put(&fx.table, original.clone()).await;
    let t2 = fx.manager.begin();
    let id = t2.id().clone();
    let out = set_asdf(&t2, &fx.table, "item0", "wef")
        .return_values(AllNew)
        .send()
        .await
        .unwrap();
    assert_eq!(out.attributes, Some(with(&fx.item0, &[("asdf", s("wef"))])));
    let e = update(&t2, &fx.table, "item1")
        .update_expression("ADD FooAttribute :one")
        .expression_attribute_values(":one", n(1))
        .return_values(AllNew)
        .send()
        .await
        .unwrap_err();
    assert!(
        matches!(
            &e,
            Error::RequestRejected {
                request_index: 1,
                ..
            }
        ),
        "{e:?}"
    );
    assert_not_locked(&fx, &fx.table, &k1, Some(&original)).await;
    assert_not_locked(&fx, &fx.table, &key("item0"), Some(&fx.item0)).await;
    assert_state(&fx, &id, TxState::RolledBack, true).await;
    let e = get(&t2, &fx.table, "item0").send().await.unwrap_err();
    assert!(is_rolled_back(&e), "{e:?}");
    let e = t2.commit().await.unwrap_err();
    assert!(is_rolled_back(&e), "{e:?}");
}

#[tokio::test]
async fn use_committed_transaction() {
    // An empty transaction writes no record; a read gives t1 one. Handles are consumed by commit, so
    // the committed transaction is used through resumed handles.
    let fx = fixture("jp-usecommitted").await;
    let k1 = key("item1");
    let empty = fx.manager.begin();
    let empty_id = empty.id().clone();
    empty.commit().await.unwrap();
    assert_eq!(fx.tx_state(&empty_id).await, None);

    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    get(&t1, &fx.table, "item0").send().await.unwrap();
    t1.commit().await.unwrap();
    assert_state(&fx, &id, TxState::Committed, true).await;

    let t2 = fx.manager.resume(&id).await.unwrap();
    for rv in [false, true] {
        let d = delete(&t2, &fx.table, "item1");
        let d = if rv { d.return_values(AllOld) } else { d };
        let e = d.send().await.unwrap_err();
        assert!(matches!(e, Error::AlreadyCommitted { .. }), "{e:?}");
        assert_not_locked(&fx, &fx.table, &k1, None).await;
    }
    let e = t2.rollback().await.unwrap_err();
    assert!(matches!(e, Error::AlreadyCommitted { .. }), "{e:?}");
    let t3 = fx.manager.resume(&id).await.unwrap();
    let e = t3.rollback().await.unwrap_err();
    assert!(matches!(e, Error::AlreadyCommitted { .. }), "{e:?}");
    assert_not_locked(&fx, &fx.table, &key("item0"), Some(&fx.item0)).await;
    assert_state(&fx, &id, TxState::Committed, true).await;
    assert!(fx.manager.delete_transaction(&id).await.unwrap());
    assert_tx_deleted(&fx, &id).await;
}

#[tokio::test]
async fn use_rolled_back_transaction() {
    // Handles resumed before the record was deleted still know it rolled back (Java re-reads and
    // reports TransactionNotFound); a resume after the delete finds no record.
    let fx = fixture("jp-userolled").await;
    let k1 = key("item1");
    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    get(&t1, &fx.table, "item0").send().await.unwrap();
    t1.rollback().await.unwrap();
    assert_state(&fx, &id, TxState::RolledBack, true).await;

    let t2 = fx.manager.resume(&id).await.unwrap();
    let e = delete(&t2, &fx.table, "item1").send().await.unwrap_err();
    assert!(is_rolled_back(&e), "{e:?}");
    assert_not_locked(&fx, &fx.table, &k1, None).await;
    let e = t2.commit().await.unwrap_err();
    assert!(is_rolled_back(&e), "{e:?}");
    assert_not_locked(&fx, &fx.table, &k1, None).await;
    let t3 = fx.manager.resume(&id).await.unwrap();
    t3.rollback().await.unwrap();
    let t4 = fx.manager.resume(&id).await.unwrap();
    assert!(fx.manager.delete_transaction(&id).await.unwrap());
    let e = delete(&t4, &fx.table, "item1")
        .return_values(AllOld)
        .send()
        .await
        .unwrap_err();
    assert!(is_rolled_back(&e), "{e:?}");
    assert_not_locked(&fx, &fx.table, &k1, None).await;
    assert_not_locked(&fx, &fx.table, &key("item0"), Some(&fx.item0)).await;
    assert_tx_deleted(&fx, &id).await;
}

#[tokio::test]
async fn use_deleted_transaction() {
    // Java: UnknownCompletedTransactionException. t1 needs a read to have a record.
    let fx = fixture("jp-usedeleted").await;
    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    get(&t1, &fx.table, "item0").send().await.unwrap();
    let t2 = fx.manager.resume(&id).await.unwrap();
    t1.commit().await.unwrap();
    assert!(fx.manager.delete_transaction(&id).await.unwrap());
    let e = t2.commit().await.unwrap_err();
    assert!(
        matches!(
            e,
            Error::UnknownOutcome { .. } | Error::TransactionNotFound { .. }
        ),
        "{e:?}"
    );
    assert_tx_deleted(&fx, &id).await;
}

#[tokio::test]
async fn use_deleted_transaction_leaves_no_lock() {
    let fx = fixture("jp-usedeletedlk").await;
    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    get(&t1, &fx.table, "item0").send().await.unwrap();
    get(&t1, &fx.table, "item1").send().await.unwrap();
    let t2 = fx.manager.resume(&id).await.unwrap();
    t1.commit().await.unwrap();
    assert!(fx.manager.delete_transaction(&id).await.unwrap());
    t2.commit().await.unwrap_err();
    assert_not_locked(&fx, &fx.table, &key("item0"), Some(&fx.item0)).await;
    assert_not_locked(&fx, &fx.table, &key("item1"), None).await;
}
