//! No result carries `_Tx*` attributes: isolated reads, `ReturnValues` and condition failures.

use super::*;

/// Every way of reading item `id` outside a transaction, at both levels: (path, items returned).
async fn isolated_reads(env: &TestEnv, id: &str) -> Vec<(String, Vec<Item>)> {
    let m = &env.manager;
    let t = &env.table;
    let mut out = Vec::new();
    for level in LEVELS {
        let get = m
            .get_item()
            .table_name(t)
            .key("Id", s(id))
            .consistent_read(true)
            .isolation(level)
            .send()
            .await
            .unwrap();
        out.push((format!("get {level:?}"), get.item.into_iter().collect()));
        let batch = m
            .batch_get_item()
            .request_items(
                t,
                KeysAndAttributes::builder()
                    .keys(key(id))
                    .consistent_read(true)
                    .build()
                    .unwrap(),
            )
            .isolation(level)
            .send()
            .await
            .unwrap();
        out.push((format!("batch get {level:?}"), batch.responses[t].clone()));
        let query = || {
            m.query()
                .table_name(t)
                .key_condition_expression("Id = :id")
                .expression_attribute_values(":id", s(id))
                .consistent_read(true)
                .isolation(level)
        };
        out.push((
            format!("query {level:?}"),
            query().send().await.unwrap().items,
        ));
        out.push((
            format!("query stream {level:?}"),
            query().into_stream().try_collect().await.unwrap(),
        ));
        let scan = || {
            m.scan()
                .table_name(t)
                .consistent_read(true)
                .isolation(level)
        };
        out.push((format!("scan {level:?}"), scan().send_all().await.unwrap()));
        let pages: Vec<_> = scan().into_pages().try_collect().await.unwrap();
        out.push((
            format!("scan pages {level:?}"),
            pages.iter().flat_map(|p| p.items().to_vec()).collect(),
        ));
        // Typed reads into a map that would keep any attribute.
        let typed: Option<HashMap<String, serde_json::Value>> =
            m.get(t, key(id), level).await.unwrap();
        out.push((
            format!("typed get {level:?}"),
            typed
                .map(|v| dynamodb_transactions::to_item(&v).unwrap())
                .into_iter()
                .collect(),
        ));
        let page_typed: Vec<HashMap<String, serde_json::Value>> =
            scan().send().await.unwrap().items_as().unwrap();
        out.push((
            format!("typed scan page {level:?}"),
            page_typed
                .iter()
                .map(|v| dynamodb_transactions::to_item(v).unwrap())
                .collect(),
        ));
    }
    out
}

/// Reads `id` every way, in and out of `tx`; nothing returned may carry lock attributes.
async fn assert_no_leaks(env: &TestEnv, tx: Option<&Transaction>, id: &str, state: &str) {
    let mut reads = isolated_reads(env, id).await;
    if let Some(tx) = tx {
        let got = tx
            .get_item()
            .table_name(&env.table)
            .key("Id", s(id))
            .send()
            .await
            .unwrap();
        reads.push(("tx get".into(), got.item.into_iter().collect()));
        let typed: Option<HashMap<String, serde_json::Value>> =
            tx.get(&env.table, key(id)).await.unwrap();
        reads.push((
            "tx typed get".into(),
            typed
                .map(|v| dynamodb_transactions::to_item(&v).unwrap())
                .into_iter()
                .collect(),
        ));
    }
    for (how, items) in reads {
        assert!(!items.is_empty(), "{state}: {how} found nothing");
        for i in items {
            assert!(
                !has_tx_attrs(&i),
                "{state}: {how} leaked lock attributes: {i:?}"
            );
        }
    }
}

#[tokio::test]
async fn no_read_path_leaks_lock_attributes() {
    let env = TestEnv::new("sec-leak").await;
    let t = env.table.clone();
    env.raw_put(&t, original("a")).await;
    assert_no_leaks(&env, None, "a", "unlocked").await;

    // Read-locked (not changed).
    let tx = env.manager.begin();
    tx.get_item()
        .table_name(&t)
        .key("Id", s("a"))
        .send()
        .await
        .unwrap();
    assert!(has_tx_attrs(&env.raw_get(&t, &key("a")).await.unwrap()));
    assert_no_leaks(&env, Some(&tx), "a", "read-locked").await;
    tx.commit().await.unwrap();

    // Applied but not committed, then committed.
    let tx = env.manager.begin();
    apply_update(&env, &tx, "a").await;
    assert_no_leaks(&env, Some(&tx), "a", "applied").await;
    tx.commit().await.unwrap();
    assert_eq!(env.raw_get(&t, &key("a")).await, Some(updated("a")));
    assert_no_leaks(&env, None, "a", "committed").await;
}

/// Each `ReturnValues` of an update, on an item this transaction has read-locked first (so the
/// stored item carries its lock when the update is applied) and on one it has not.
#[tokio::test]
async fn return_values_carry_no_lock_attributes() {
    let env = TestEnv::new("sec-rv").await;
    let t = env.table.clone();
    let cases = [
        (ReturnValue::AllOld, original("x")),
        (ReturnValue::AllNew, updated("x")),
        (
            ReturnValue::UpdatedOld,
            item(&[("v", n(1)), ("secret", s("before"))]),
        ),
        (
            ReturnValue::UpdatedNew,
            item(&[("v", n(2)), ("secret", s("after"))]),
        ),
    ];
    let tx = env.manager.begin();
    let mut ids = Vec::new();
    for (i, (rv, want)) in cases.iter().enumerate() {
        for read_first in [false, true] {
            let id = format!("rv{i}-{read_first}");
            env.raw_put(&t, original(&id)).await;
            if read_first {
                tx.get_item()
                    .table_name(&t)
                    .key("Id", s(&id))
                    .send()
                    .await
                    .unwrap();
            }
            let got = tx
                .update_item()
                .table_name(&t)
                .key("Id", s(&id))
                .update_expression("SET v = :v, secret = :s")
                .expression_attribute_values(":v", n(2))
                .expression_attribute_values(":s", s("after"))
                .return_values(rv.clone())
                .send()
                .await
                .unwrap();
            let mut want = want.clone();
            if want.contains_key("Id") {
                want.insert("Id".into(), s(&id));
            }
            assert_eq!(
                got.attributes,
                Some(want),
                "{rv:?}, read first {read_first}"
            );
            assert!(has_tx_attrs(&env.raw_get(&t, &key(&id)).await.unwrap()));
            ids.push(id);
        }
    }
    // ALL_OLD of a put and of a delete, after a read lock.
    for (id, del) in [("put", false), ("del", true)] {
        env.raw_put(&t, original(id)).await;
        tx.get_item()
            .table_name(&t)
            .key("Id", s(id))
            .send()
            .await
            .unwrap();
        let got = if del {
            tx.delete_item()
                .table_name(&t)
                .key("Id", s(id))
                .return_values(ReturnValue::AllOld)
                .send()
                .await
        } else {
            tx.put_item()
                .table_name(&t)
                .set_item(Some(updated(id)))
                .return_values(ReturnValue::AllOld)
                .send()
                .await
        };
        assert_eq!(got.unwrap().attributes, Some(original(id)), "{id}");
    }
    tx.commit().await.unwrap();
    for id in ids {
        assert_eq!(env.raw_get(&t, &key(&id)).await, Some(updated(&id)));
    }
    assert_eq!(env.raw_get(&t, &key("put")).await, Some(updated("put")));
    assert_eq!(env.raw_get(&t, &key("del")).await, None);
}

/// `ConditionFailed::item` is the item without this transaction's lock, whether the condition fails
/// when the write is applied early or at commit, on both commit paths.
#[tokio::test]
async fn condition_failures_carry_no_lock_attributes() {
    for phased in [false, true] {
        let env = TestEnv::with_settings("sec-cond", |s| {
            if phased {
                s.one_shot_max_items = 0;
            }
        })
        .await;
        let t = env.table.clone();
        for (id, early) in [("early", true), ("at-commit", false)] {
            env.raw_put(&t, original(id)).await;
            env.raw_put(&t, original("other")).await;
            let tx = env.manager.begin();
            let tx_id = tx.id().clone();
            tx.get_item()
                .table_name(&t)
                .key("Id", s(id))
                .send()
                .await
                .unwrap();
            tx.update_item()
                .table_name(&t)
                .key("Id", s("other"))
                .update_expression("SET v = :v")
                .expression_attribute_values(":v", n(5))
                .send()
                .await
                .unwrap();
            let mut u = tx
                .update_item()
                .table_name(&t)
                .key("Id", s(id))
                .update_expression("SET v = :v")
                .condition_expression("v = :nope")
                .expression_attribute_values(":v", n(2))
                .expression_attribute_values(":nope", n(99));
            if early {
                u = u.return_values(ReturnValue::AllNew);
            }
            let r = match u.send().await {
                Ok(_) if !early => tx.commit().await,
                Ok(out) => panic!("{id}: condition passed: {out:?}"),
                Err(e) => Err(e),
            };
            match r {
                Err(Error::ConditionFailed {
                    item: Some(found),
                    request_index,
                    ..
                }) => {
                    assert_eq!(found, original(id), "{id}, phased {phased}");
                    assert_eq!(request_index, 2);
                }
                other => panic!("{id}, phased {phased}: expected ConditionFailed, got {other:?}"),
            }
            assert_eq!(
                env.manager
                    .transaction_state(&tx_id)
                    .await
                    .unwrap()
                    .map(|s| s.state),
                Some(TxState::RolledBack)
            );
            assert_eq!(env.raw_get(&t, &key(id)).await, Some(original(id)));
            assert_eq!(
                env.raw_get(&t, &key("other")).await,
                Some(original("other"))
            );
        }
    }
}
