//! Basics and validation (Java 47-60)

use super::*;

#[tokio::test]
async fn basic_new_item_rollback() {
    // An update with no expression; AllNew applies it at once.
    let fx = fixture("jp-newrb").await;
    let k1 = key("item1");
    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    let out = update(&t1, &fx.table, "item1")
        .return_values(AllNew)
        .send()
        .await
        .unwrap();
    assert_eq!(out.attributes.as_ref(), Some(&k1));
    assert_locked(&fx, &fx.table, &k1, Some(&k1), &id, true, true).await;
    t1.rollback().await.unwrap();
    assert_not_locked(&fx, &fx.table, &k1, None).await;
    assert!(fx.manager.delete_transaction(&id).await.unwrap());
}

#[tokio::test]
async fn basic_new_item_commit() {
    let fx = fixture("jp-newcommit").await;
    let k1 = key("item1");
    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    update(&t1, &fx.table, "item1")
        .return_values(AllNew)
        .send()
        .await
        .unwrap();
    assert_locked(&fx, &fx.table, &k1, Some(&k1), &id, true, true).await;
    t1.commit().await.unwrap();
    assert_not_locked(&fx, &fx.table, &k1, Some(&k1)).await;
    assert!(fx.manager.delete_transaction(&id).await.unwrap());
    assert_tx_deleted(&fx, &id).await;

    // The buffered form: nothing is written before commit.
    let t2 = fx.manager.begin();
    update(&t2, &fx.table, "item2").send().await.unwrap();
    assert_not_locked(&fx, &fx.table, &key("item2"), None).await;
    t2.commit().await.unwrap();
    assert_not_locked(&fx, &fx.table, &key("item2"), Some(&key("item2"))).await;
}

#[tokio::test]
async fn missing_table_name() {
    let fx = fixture("jp-notable").await;
    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    for rv in [None, Some(AllNew)] {
        let u = t1.update_item().set_key(Some(key("item1")));
        let u = match rv {
            Some(r) => u.return_values(r),
            None => u,
        };
        let e = u.send().await.unwrap_err();
        match &e {
            Error::InvalidRequest { reason } => assert!(reason.contains("TableName"), "{reason}"),
            other => panic!("expected InvalidRequest, got {other:?}"),
        }
    }
    assert_not_locked(&fx, &fx.table, &key("item1"), None).await;
    t1.rollback().await.unwrap();
    assert_not_locked(&fx, &fx.table, &key("item1"), None).await;
    assert_eq!(fx.tx_state(&id).await, None);
}

#[tokio::test]
async fn empty_transaction() {
    // An empty transaction never writes a record.
    let fx = fixture("jp-empty").await;
    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    fx.counter.reset();
    t1.commit().await.unwrap();
    assert_eq!(fx.counter.total(), 0, "{:?}", fx.counter.snapshot());
    assert_tx_deleted(&fx, &id).await;
    let t2 = fx.manager.begin();
    let id2 = t2.id().clone();
    t2.rollback().await.unwrap();
    assert_tx_deleted(&fx, &id2).await;
    assert!(fx.manager.begin().delete().await.unwrap());
}

#[tokio::test]
async fn missing_key() {
    let fx = fixture("jp-nokey").await;
    let t1 = fx.manager.begin();
    let e = t1
        .update_item()
        .table_name(&fx.table)
        .send()
        .await
        .unwrap_err();
    match &e {
        Error::InvalidRequest { reason } => assert!(reason.contains("key"), "{reason}"),
        other => panic!("expected InvalidRequest, got {other:?}"),
    }
    for e in [
        t1.delete_item()
            .table_name(&fx.table)
            .send()
            .await
            .unwrap_err(),
        t1.get_item()
            .table_name(&fx.table)
            .send()
            .await
            .unwrap_err(),
    ] {
        assert!(is_invalid(&e), "{e:?}");
    }
    t1.rollback().await.unwrap();
}

/// Java: a second ~273 KB put overflows the 400 KB TX record. Here the record spills into chunk
/// rows, so both fit and commit.
async fn too_much_data_in_transaction(phased: bool) {
    let fx = fixture_with("jp-toomuch", phased).await;
    let (k1, k2) = (key("item1"), key("item2"));
    let big = "a".repeat(400 * 1024 * 2 / 3);
    let item1 = item(&[("Id", s("item1")), ("bigattr", s("little"))]);
    let t1 = fx.manager.begin();
    put(&t1, &fx.table, &item1).send().await.unwrap();
    t1.commit().await.unwrap();
    assert_not_locked(&fx, &fx.table, &k1, Some(&item1)).await;

    let t2 = fx.manager.begin();
    let id = t2.id().clone();
    let item1a = item(&[("Id", s("item1")), ("bigattr", s(&big))]);
    let item2 = item(&[("Id", s("item2")), ("bigattr", s(&big))]);
    let item3 = item(&[("Id", s("item3")), ("bigattr", s("fitsThisTime"))]);
    put(&t2, &fx.table, &item1a)
        .return_values(AllOld)
        .send()
        .await
        .unwrap();
    assert_locked(&fx, &fx.table, &k1, Some(&item1), &id, false, false).await;
    put(&t2, &fx.table, &item2)
        .return_values(AllOld)
        .send()
        .await
        .unwrap();
    assert_locked(&fx, &fx.table, &k2, Some(&k2), &id, true, false).await;
    assert!(
        fx.record_rows(&id).await.len() >= 2,
        "the record spans rows"
    );
    put(&t2, &fx.table, &item3).send().await.unwrap();
    t2.commit().await.unwrap();
    assert_not_locked(&fx, &fx.table, &k1, Some(&item1a)).await;
    assert_not_locked(&fx, &fx.table, &k2, Some(&item2)).await;
    assert_not_locked(&fx, &fx.table, &key("item3"), Some(&item3)).await;
    assert!(fx.manager.delete_transaction(&id).await.unwrap());
    assert_tx_deleted(&fx, &id).await;
}
both_paths!(too_much_data_in_transaction);

/// Puts `it` in a transaction whose commit crashes before its final write, then commits it from a
/// second coordinator, which must decode the request from the TX record.
async fn put_through_record(fx: &Fx, it: &Item) {
    let k = item(&[("Id", it["Id"].clone())]);
    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    put(&t1, &fx.table, it)
        .return_values(AllOld)
        .send()
        .await
        .unwrap();
    assert_locked(fx, &fx.table, &k, Some(&k), &id, true, false).await;
    // Lock and record exist; commit: TransactWriteItems (1).
    expect_err(crashing(fx, 1, BeforeSend, "TransactWriteItems", t1.commit()).await);
    second(fx)
        .resume(&id)
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
    assert_not_locked(fx, &fx.table, &k, Some(it)).await;
}

#[tokio::test]
async fn contains_binary_attributes() {
    let fx = fixture("jp-binary").await;
    let it = item(&[
        ("Id", s("item1")),
        (
            "attr_b",
            AttributeValue::B(Blob::new("asdf\n\t\u{0123}".as_bytes())),
        ),
        (
            "attr_bs",
            AttributeValue::Bs(vec![
                Blob::new("asdf\n\t\u{0123}".as_bytes()),
                Blob::new("wef".as_bytes()),
            ]),
        ),
    ]);
    put_through_record(&fx, &it).await;
}

#[tokio::test]
async fn contains_json_attributes() {
    let fx = fixture("jp-json").await;
    let m = item(&[
        ("attr_s", s("s")),
        ("attr_n", n(1)),
        ("attr_b", AttributeValue::B(Blob::new("asdf".as_bytes()))),
        ("attr_ss", ss(&["a", "b"])),
        ("attr_ns", AttributeValue::Ns(vec!["1".into(), "2".into()])),
        (
            "attr_bs",
            AttributeValue::Bs(vec![
                Blob::new("asdf".as_bytes()),
                Blob::new("ghjk".as_bytes()),
            ]),
        ),
        ("attr_bool", AttributeValue::Bool(true)),
        (
            "attr_l",
            AttributeValue::L(vec![
                s("s"),
                n(1),
                AttributeValue::B(Blob::new("asdf".as_bytes())),
                AttributeValue::Bool(true),
                AttributeValue::Null(true),
            ]),
        ),
        ("attr_null", AttributeValue::Null(true)),
    ]);
    let it = item(&[("Id", s("item1")), ("attr_json", AttributeValue::M(m))]);
    put_through_record(&fx, &it).await;
}

#[tokio::test]
async fn contains_special_attributes() {
    let fx = fixture("jp-special").await;
    let t1 = fx.manager.begin();
    for name in ["_TxId", "_TxT", "_TxA", "_TxG", "_TxI", "_TxSomething"] {
        let it = item(&[("Id", s("item1")), (name, s("asdf"))]);
        for rv in [false, true] {
            let p = put(&t1, &fx.table, &it);
            let p = if rv { p.return_values(AllOld) } else { p };
            let e = p.send().await.unwrap_err();
            match &e {
                Error::InvalidRequest { reason } => {
                    assert!(reason.contains("must not contain the reserved"), "{reason}")
                }
                other => panic!("expected InvalidRequest for {name}, got {other:?}"),
            }
        }
    }
    assert_not_locked(&fx, &fx.table, &key("item1"), None).await;
    t1.rollback().await.unwrap();
}

#[tokio::test]
async fn item_too_large_to_lock() {
    // Java: empty placeholder. An item so close to 400 KB that the lock attributes do not fit: item0
    // is 41 bytes plus `big`, so this leaves 29 bytes, less than `_TxId` alone (5 + 36) needs.
    let fx = fixture("jp-toolargelock").await;
    let k0 = key("item0");
    let huge = with(&fx.item0, &[("big", s(&"x".repeat(400 * 1024 - 70)))]);
    fx.raw_put(&fx.table, huge.clone()).await;
    let t1 = fx.manager.begin();
    let e = get(&t1, &fx.table, "item0").send().await.unwrap_err();
    assert!(is_invalid(&e), "{e:?}");
    assert_not_locked(&fx, &fx.table, &k0, Some(&huge)).await;
    t1.rollback().await.unwrap();
    assert_not_locked(&fx, &fx.table, &k0, Some(&huge)).await;

    let t2 = fx.manager.begin();
    set_asdf(&t2, &fx.table, "item0", "wef")
        .send()
        .await
        .unwrap();
    let e = t2.commit().await.unwrap_err();
    assert!(is_invalid(&e), "{e:?}");
    assert_not_locked(&fx, &fx.table, &k0, Some(&huge)).await;
}

#[tokio::test]
async fn item_too_large_to_apply() {
    // Java: empty placeholder. A put that cannot fit with the lock attributes is rejected upfront
    // (here 90 bytes of room are left; an applied write needs 135).
    let fx = fixture("jp-toolargeapply").await;
    let t1 = fx.manager.begin();
    let too_big = item(&[
        ("Id", s("item1")),
        ("big", s(&"x".repeat(400 * 1024 - 100))),
    ]);
    let e = put(&t1, &fx.table, &too_big).send().await.unwrap_err();
    assert!(is_invalid(&e), "{e:?}");
    assert_not_locked(&fx, &fx.table, &key("item1"), None).await;
    t1.rollback().await.unwrap();
}

#[tokio::test]
async fn item_too_large_to_apply_update() {
    // An update that grows item0 past 400 KB is rejected by DynamoDB at commit: rolled back.
    let fx = fixture("jp-toolargeupd").await;
    let big0 = with(&fx.item0, &[("big", s(&"x".repeat(150 * 1024)))]);
    fx.raw_put(&fx.table, big0.clone()).await;
    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    update(&t1, &fx.table, "item0")
        .update_expression("SET more = :b")
        .expression_attribute_values(":b", s(&"x".repeat(300 * 1024)))
        .send()
        .await
        .unwrap();
    let e = t1.commit().await.unwrap_err();
    assert!(matches!(e, Error::RequestRejected { .. }), "{e:?}");
    assert_not_locked(&fx, &fx.table, &key("item0"), Some(&big0)).await;
    assert_state(&fx, &id, TxState::RolledBack, true).await;
}

/// Java: empty placeholder. item0 (60 KB) updated to about 360 KB: its image no longer fits in the
/// item, so it goes to the images table; readers and rollback use it, and it is deleted at the end.
async fn item_too_large_to_save_previous_version(commit: bool, phased: bool) {
    let fx = fixture_with("jp-toolargeimg", phased).await;
    let k0 = key("item0");
    let big0 = with(&fx.item0, &[("big", s(&"x".repeat(60 * 1024)))]);
    fx.raw_put(&fx.table, big0.clone()).await;
    let more = "y".repeat(300 * 1024);
    let big1 = with(&big0, &[("more", s(&more))]);
    let t1 = fx.manager.begin();
    let out = update(&t1, &fx.table, "item0")
        .update_expression("SET more = :m")
        .expression_attribute_values(":m", s(&more))
        .return_values(AllNew)
        .send()
        .await
        .unwrap();
    assert_eq!(out.attributes.as_ref(), Some(&big1));
    let raw = assert_locked(&fx, &fx.table, &k0, Some(&big1), t1.id(), false, true).await;
    assert!(
        raw.contains_key("_TxI") && !raw.contains_key("_TxG"),
        "{:?}",
        raw.keys()
    );
    assert_eq!(fx.scan_all(fx.manager.images_table()).await.len(), 1);
    let got = read(&fx.manager, &fx.table, "item0", IsolationLevel::Committed).await;
    assert_eq!(got.as_ref(), Some(&big0));
    if commit {
        t1.commit().await.unwrap();
        assert_not_locked(&fx, &fx.table, &k0, Some(&big1)).await;
    } else {
        t1.rollback().await.unwrap();
        assert_not_locked(&fx, &fx.table, &k0, Some(&big0)).await;
    }
    assert_images_empty(&fx).await;
}

mod item_too_large_to_save_previous_version {
    use super::item_too_large_to_save_previous_version as run;
    #[tokio::test]
    async fn commit_one_shot() {
        run(true, false).await
    }
    #[tokio::test]
    async fn commit_phased() {
        run(true, true).await
    }
    #[tokio::test]
    async fn rollback() {
        run(false, false).await
    }
}

/// Java: the first coordinator's lock fails after the request was recorded; a resumed coordinator
/// commits; the first one's commit afterwards is a no-op. Here the crash hits the lock request.
async fn failover(phased: bool) {
    let fx = fixture_with("jp-failover", phased).await;
    let k1 = key("item1");
    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    update(&t1, &fx.table, "item1").send().await.unwrap();
    // Record (1), the first lock request (2).
    expect_err(crashing(&fx, 2, BeforeSend, "UpdateItem", t1.commit()).await);
    assert_not_locked(&fx, &fx.table, &k1, None).await;
    assert_state(&fx, &id, TxState::Pending, false).await;
    second(&fx)
        .resume(&id)
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
    assert_not_locked(&fx, &fx.table, &k1, Some(&k1)).await;
    fx.counter.reset();
    fx.manager
        .resume(&id)
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
    assert_eq!(writes_made(&fx), 0, "{:?}", fx.counter.snapshot());
    assert_not_locked(&fx, &fx.table, &k1, Some(&k1)).await;
    assert!(fx.manager.delete_transaction(&id).await.unwrap());
    assert_tx_deleted(&fx, &id).await;
}
both_paths!(failover);

#[tokio::test]
async fn one_transaction_per_item() {
    let fx = fixture("jp-oneperitem").await;
    let k1 = key("item1");
    let t1 = fx.manager.begin();
    put(&t1, &fx.table, &k1).send().await.unwrap();
    let dups = [
        put(&t1, &fx.table, &k1).send().await.unwrap_err(),
        put(&t1, &fx.table, &k1)
            .return_values(AllOld)
            .send()
            .await
            .unwrap_err(),
        update(&t1, &fx.table, "item1").send().await.unwrap_err(),
        delete(&t1, &fx.table, "item1").send().await.unwrap_err(),
    ];
    for e in dups {
        match e {
            Error::DuplicateRequest { tx_id, table, key } => {
                assert_eq!(&tx_id, t1.id());
                assert_eq!(table, fx.table);
                assert_eq!(key, k1);
            }
            other => panic!("expected DuplicateRequest, got {other:?}"),
        }
    }
    // A read of the item is fine (it sees the put).
    assert_eq!(
        get(&t1, &fx.table, "item1").send().await.unwrap().item,
        Some(k1.clone())
    );
    t1.rollback().await.unwrap();
    assert_not_locked(&fx, &fx.table, &k1, None).await;

    // A read lock upgraded to a write is not a duplicate.
    let t2 = fx.manager.begin();
    get(&t2, &fx.table, "item0").send().await.unwrap();
    set_asdf(&t2, &fx.table, "item0", "wef")
        .send()
        .await
        .unwrap();
    t2.commit().await.unwrap();
    assert_not_locked(
        &fx,
        &fx.table,
        &key("item0"),
        Some(&with(&fx.item0, &[("asdf", s("wef"))])),
    )
    .await;
}
