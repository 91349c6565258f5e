//! Request validation (Java's RequestTest, in spirit). Java rejects conditions and expressions;
//! here they are supported, so the Java "rejected" cases become "works" cases, and the rejections
//! are the ones this API has: missing parts, reserved `_Tx` names anywhere, key changes,
//! unsupported ReturnValues, placeholders that do not match.

use super::*;

/// Expects `InvalidRequest` whose reason contains `needle`.
fn assert_invalid<T: Debug>(r: Result<T, Error>, needle: &str) {
    match r {
        Err(Error::InvalidRequest { reason }) => {
            assert!(
                reason.contains(needle),
                "{reason:?} should mention {needle:?}"
            )
        }
        other => panic!("expected InvalidRequest mentioning {needle:?}, got {other:?}"),
    }
}

#[tokio::test]
async fn valid_requests() {
    // Java's validPut/validUpdate/validDelete/validLock, with expressions and conditions.
    let fx = fixture("jp-valid").await;
    fx.raw_put(&fx.table, item(&[("Id", s("item2")), ("n", n(5))]))
        .await;
    let t1 = fx.manager.begin();
    put(&t1, &fx.table, &item1())
        .condition_expression("attribute_not_exists(#k)")
        .expression_attribute_names("#k", "Id")
        .send()
        .await
        .unwrap();
    update(&t1, &fx.table, "item0")
        .update_expression("SET #a = :v REMOVE ss_otherattr")
        .condition_expression("s_someattr = :old")
        .expression_attribute_names("#a", "s_someattr")
        .expression_attribute_values(":v", s("new"))
        .expression_attribute_values(":old", s("val"))
        .send()
        .await
        .unwrap();
    delete(&t1, &fx.table, "item2")
        .condition_expression("n > :min")
        .expression_attribute_values(":min", n(1))
        .send()
        .await
        .unwrap();
    let got = get(&t1, &fx.table, "item3")
        .projection_expression("#x")
        .expression_attribute_names("#x", "whatever")
        .send()
        .await
        .unwrap();
    assert_eq!(got.item, None);
    t1.commit().await.unwrap();
    assert_not_locked(&fx, &fx.table, &key("item1"), Some(&item1())).await;
    assert_not_locked(
        &fx,
        &fx.table,
        &key("item0"),
        Some(&item(&[("Id", s("item0")), ("s_someattr", s("new"))])),
    )
    .await;
    assert_not_locked(&fx, &fx.table, &key("item2"), None).await;
    assert_not_locked(&fx, &fx.table, &key("item3"), None).await;
}

#[tokio::test]
async fn put_invalid_requests() {
    // putNullTableName, putNullItem, putMissingKey, plus key types and ReturnValues.
    let fx = fixture("jp-putinvalid").await;
    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    assert_invalid(
        t1.put_item().set_item(Some(item1())).send().await,
        "TableName",
    );
    assert_invalid(t1.put_item().table_name(&fx.table).send().await, "item");
    assert_invalid(
        put(&t1, &fx.table, &item(&[("asdf", s("wef"))]))
            .send()
            .await,
        "key attribute Id",
    );
    assert_invalid(
        put(&t1, &fx.table, &item(&[("Id", n(1))])).send().await,
        "Id",
    );
    for rv in [
        AllNew,
        aws_sdk_dynamodb::types::ReturnValue::UpdatedNew,
        aws_sdk_dynamodb::types::ReturnValue::UpdatedOld,
    ] {
        assert_invalid(
            put(&t1, &fx.table, &item1()).return_values(rv).send().await,
            "ReturnValues",
        );
    }
    assert_invalid(
        put(&t1, &fx.table, &item1())
            .condition_expression("attribute_exists(_TxId)")
            .send()
            .await,
        "_TxId",
    );
    assert_invalid(
        put(&t1, &fx.table, &item1())
            .condition_expression("attribute_exists(#a)")
            .expression_attribute_names("#a", "_TxA")
            .send()
            .await,
        "_TxA",
    );
    // Nothing was written, and the transaction is still usable.
    assert_eq!(fx.tx_state(&id).await, None);
    put(&t1, &fx.table, &item1()).send().await.unwrap();
    t1.commit().await.unwrap();
    assert_not_locked(&fx, &fx.table, &key("item1"), Some(&item1())).await;
}

#[tokio::test]
async fn update_and_delete_invalid_requests() {
    // updateUpdateExpression / ...ExpressionAttributeNames / ...Values and the delete ones: the
    // expressions themselves are fine here; what is rejected is what would break the protocol.
    let fx = fixture("jp-updinvalid").await;
    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    assert_invalid(
        update(&t1, &fx.table, "item0")
            .update_expression("SET Id = :v")
            .expression_attribute_values(":v", s("x"))
            .send()
            .await,
        "key",
    );
    assert_invalid(
        update(&t1, &fx.table, "item0")
            .update_expression("SET _TxA = :v")
            .expression_attribute_values(":v", s("x"))
            .send()
            .await,
        "_TxA",
    );
    assert_invalid(
        update(&t1, &fx.table, "item0")
            .update_expression("SET #a = :v")
            .expression_attribute_names("#a", "_TxId")
            .expression_attribute_values(":v", s("x"))
            .send()
            .await,
        "_TxId",
    );
    assert_invalid(
        update(&t1, &fx.table, "item0")
            .update_expression("SET #_TxA = :v")
            .expression_attribute_names("#_TxA", "a")
            .expression_attribute_values(":v", s("x"))
            .send()
            .await,
        "reserved",
    );
    assert_invalid(
        update(&t1, &fx.table, "item0")
            .update_expression("SET a = :_TxV")
            .expression_attribute_values(":_TxV", s("x"))
            .send()
            .await,
        "reserved",
    );
    assert_invalid(
        update(&t1, &fx.table, "item0")
            .update_expression("SET a = :v")
            .send()
            .await,
        ":v",
    );
    assert_invalid(
        update(&t1, &fx.table, "item0")
            .update_expression("SET a = :v")
            .expression_attribute_values(":v", s("x"))
            .expression_attribute_values(":unused", s("x"))
            .send()
            .await,
        ":unused",
    );
    assert_invalid(
        update(&t1, &fx.table, "item0")
            .update_expression("SET a = :v")
            .condition_expression("attribute_not_exists(_TxT)")
            .expression_attribute_values(":v", s("x"))
            .send()
            .await,
        "_TxT",
    );
    assert_invalid(
        update(&t1, &fx.table, "item0")
            .update_expression("SET a = :v")
            .condition_expression("  ")
            .expression_attribute_values(":v", s("x"))
            .send()
            .await,
        "ConditionExpression",
    );
    assert_invalid(
        t1.update_item()
            .table_name(&fx.table)
            .set_key(Some(item(&[("Id", s("item0")), ("extra", s("x"))])))
            .send()
            .await,
        "extra",
    );
    assert_invalid(
        t1.update_item()
            .table_name(&fx.table)
            .key("_TxId", s("x"))
            .send()
            .await,
        "_TxId",
    );
    assert_invalid(
        t1.update_item()
            .table_name(&fx.range_table)
            .set_key(Some(key("item0")))
            .send()
            .await,
        "RangeAttr",
    );
    assert_invalid(
        delete(&t1, &fx.table, "item0")
            .return_values(AllNew)
            .send()
            .await,
        "ReturnValues",
    );
    assert_invalid(
        delete(&t1, &fx.table, "item0")
            .condition_expression("attribute_exists(#a)")
            .expression_attribute_names("#a", "_TxI")
            .send()
            .await,
        "_TxI",
    );
    assert_eq!(fx.tx_state(&id).await, None);
    assert_not_locked(&fx, &fx.table, &key("item0"), Some(&fx.item0)).await;
    t1.rollback().await.unwrap();
}

#[tokio::test]
async fn get_invalid_requests() {
    // Java ignores projections on locked reads and rejects READ_LOCK outside a transaction.
    let fx = fixture("jp-getinvalid").await;
    let t1 = fx.manager.begin();
    assert_invalid(
        get(&t1, &fx.table, "item0")
            .projection_expression("_TxId")
            .send()
            .await,
        "_TxId",
    );
    assert_invalid(
        get(&t1, &fx.table, "item0")
            .projection_expression("#a")
            .expression_attribute_names("#a", "_TxG")
            .send()
            .await,
        "_TxG",
    );
    assert_invalid(
        t1.get_item().key("Id", s("item0")).send().await,
        "TableName",
    );
    assert_not_locked(&fx, &fx.table, &key("item0"), Some(&fx.item0)).await;
    t1.rollback().await.unwrap();
    assert_invalid(
        fx.manager
            .get_item()
            .table_name(&fx.table)
            .key("Id", s("item0"))
            .isolation(IsolationLevel::ReadLock)
            .send()
            .await,
        "ReadLock",
    );
    assert_invalid(
        fx.manager
            .get_item()
            .table_name(&fx.table)
            .key("Id", s("item0"))
            .projection_expression("_TxId")
            .send()
            .await,
        "_TxId",
    );
}

#[tokio::test]
async fn put_condition_expression() {
    // Java rejects conditions (putConditionExpression); here a false one rolls the transaction back.
    let fx = fixture("jp-putcond").await;
    let t1 = fx.manager.begin();
    let id = t1.id().clone();
    put(&t1, &fx.table, &item1()).send().await.unwrap();
    put(&t1, &fx.table, &with(&fx.item0, &[("asdf", s("wef"))]))
        .condition_expression("attribute_not_exists(Id)")
        .send()
        .await
        .unwrap();
    let e = t1.commit().await.unwrap_err();
    match &e {
        Error::ConditionFailed {
            tx_id,
            request_index,
            table,
            key: k,
            item: found,
        } => {
            assert_eq!(tx_id, &id);
            assert_eq!(*request_index, 1);
            assert_eq!(table, &fx.table);
            assert_eq!(k, &key("item0"));
            assert_eq!(found.as_ref(), Some(&fx.item0));
        }
        other => panic!("expected ConditionFailed, got {other:?}"),
    }
    assert_state(&fx, &id, TxState::RolledBack, true).await;
    assert_not_locked(&fx, &fx.table, &key("item0"), Some(&fx.item0)).await;
    // item1 was only buffered or locked as a placeholder: it must not exist.
    let raw = fx.raw_get(&fx.table, &key("item1")).await;
    assert!(
        raw.as_ref().is_none_or(|r| !r.contains_key("asdf")),
        "{raw:?}"
    );
}

/// Java rejects conditions (updateConditionExpression); here they are checked under the lock.
async fn update_condition_expression(phased: bool) {
    let fx = fixture_with("jp-updcond", phased).await;
    let k0 = key("item0");
    let t1 = fx.manager.begin();
    set_asdf(&t1, &fx.table, "item0", "wef")
        .condition_expression("s_someattr = :old")
        .expression_attribute_values(":old", s("val"))
        .send()
        .await
        .unwrap();
    t1.commit().await.unwrap();
    let item0a = with(&fx.item0, &[("asdf", s("wef"))]);
    assert_not_locked(&fx, &fx.table, &k0, Some(&item0a)).await;

    let t2 = fx.manager.begin();
    let id = t2.id().clone();
    set_asdf(&t2, &fx.table, "item0", "again")
        .condition_expression("s_someattr = :old")
        .expression_attribute_values(":old", s("not val"))
        .send()
        .await
        .unwrap();
    let e = t2.commit().await.unwrap_err();
    assert!(
        matches!(&e, Error::ConditionFailed { request_index: 0, item: Some(i), .. } if i == &item0a),
        "{e:?}"
    );
    assert_state(&fx, &id, TxState::RolledBack, true).await;
    assert_not_locked(&fx, &fx.table, &k0, Some(&item0a)).await;

    // With AllNew the condition is checked at once.
    let t3 = fx.manager.begin();
    let e = set_asdf(&t3, &fx.table, "item0", "again")
        .condition_expression("attribute_not_exists(asdf)")
        .return_values(AllNew)
        .send()
        .await
        .unwrap_err();
    assert!(e.is_condition_failed(), "{e:?}");
    assert_not_locked(&fx, &fx.table, &k0, Some(&item0a)).await;
    let e = t3.commit().await.unwrap_err();
    assert!(is_rolled_back(&e), "{e:?}");
}
both_paths!(update_condition_expression);

#[tokio::test]
async fn delete_condition_expression() {
    // Java rejects conditions (deleteConditionExpression); a false one rolls back, a true one deletes.
    let fx = fixture("jp-delcond").await;
    let k0 = key("item0");
    let t1 = fx.manager.begin();
    delete(&t1, &fx.table, "item0")
        .condition_expression("contains(ss_otherattr, :x)")
        .expression_attribute_values(":x", s("three"))
        .send()
        .await
        .unwrap();
    let e = t1.commit().await.unwrap_err();
    assert!(e.is_condition_failed(), "{e:?}");
    assert_not_locked(&fx, &fx.table, &k0, Some(&fx.item0)).await;
    let t2 = fx.manager.begin();
    delete(&t2, &fx.table, "item0")
        .condition_expression("contains(ss_otherattr, :x)")
        .expression_attribute_values(":x", s("two"))
        .send()
        .await
        .unwrap();
    t2.commit().await.unwrap();
    assert_not_locked(&fx, &fx.table, &k0, None).await;
}

#[tokio::test]
async fn range_table_transaction() {
    // Java's fixture names a hash+range table it never creates; here it exists and works.
    let fx = fixture("jp-range").await;
    let rk = |r: i64| item(&[("Id", s("r")), ("RangeAttr", n(r))]);
    let r1 = with(&rk(1), &[("v", s("one"))]);
    let t1 = fx.manager.begin();
    put(&t1, &fx.range_table, &r1).send().await.unwrap();
    put(&t1, &fx.range_table, &with(&rk(2), &[("v", s("two"))]))
        .send()
        .await
        .unwrap();
    t1.commit().await.unwrap();
    let t2 = fx.manager.begin();
    let got = t2
        .get_item()
        .table_name(&fx.range_table)
        .set_key(Some(rk(1)))
        .send()
        .await
        .unwrap();
    assert_eq!(got.item.as_ref(), Some(&r1));
    t2.delete_item()
        .table_name(&fx.range_table)
        .set_key(Some(rk(2)))
        .return_values(AllOld)
        .send()
        .await
        .unwrap();
    assert_locked(&fx, &fx.range_table, &rk(2), None, t2.id(), false, false).await;
    t2.commit().await.unwrap();
    assert_not_locked(&fx, &fx.range_table, &rk(1), Some(&r1)).await;
    assert_not_locked(&fx, &fx.range_table, &rk(2), None).await;
}
